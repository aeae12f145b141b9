//! The host's speed modes and the per-round ratios tagged with them.
//!
//! This host changes speed for seconds at a time, for every program alike.
//! The bench runs a short probe (the shared-memory floor at 1 byte) before
//! and after every run; [`Modes::cluster`] sorts the probes and starts a
//! new mode wherever a probe is more than [`MODE_STEP`] times the one
//! before it (so a mode's probes may spread wider than that by small
//! steps, as jitter does, while two modes are apart by a gap). A run is
//! in the modes of the probes that
//! bracket it; a ratio of two runs is in the modes of every probe from the
//! one before the first run to the one after the second.

use super::{Sample, fmt, median};

/// A gap of more than this factor between two probes, in sorted order,
/// separates two modes.
pub(super) const MODE_STEP: f64 = 1.5;

/// More modes than this hint at other load rather than host modes.
const BUSY_MODES: usize = 3;

/// The modes of a run.
pub(super) struct Modes {
    /// Per probe, its mode (`None` for a probe that failed).
    of_probe: Vec<Option<usize>>,
    /// Per mode, fastest first: its probes' one-way µs.
    values: Vec<Vec<f64>>,
}

/// The modes a measurement was taken in.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tag {
    /// No probe bracketed it (or all of them failed).
    Unknown,
    /// Every probe around it was in this mode.
    One(usize),
    /// The host changed mode during it: these modes, ascending.
    Mixed(Vec<usize>),
}

impl Modes {
    /// Clusters the probes (one-way µs; NaN for a failed probe).
    pub(super) fn cluster(probes: &[f64]) -> Modes {
        let mut order: Vec<usize> = (0..probes.len())
            .filter(|&i| probes[i].is_finite())
            .collect();
        order.sort_by(|&a, &b| probes[a].total_cmp(&probes[b]));
        let mut of_probe = vec![None; probes.len()];
        let mut values: Vec<Vec<f64>> = Vec::new();
        let mut last = f64::NAN;
        for i in order {
            let v = probes[i];
            if values.is_empty() || v > last * MODE_STEP {
                values.push(Vec::new());
            }
            last = v;
            let m = values.len() - 1;
            values[m].push(v);
            of_probe[i] = Some(m);
        }
        Modes { of_probe, values }
    }

    /// How many modes were seen.
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// A mode's short name: `A` for the fastest, then `B`, ...
    pub(super) fn name(m: usize) -> String {
        match u8::try_from(m) {
            Ok(n) if n < 26 => char::from(b'A' + n).to_string(),
            _ => format!("M{m}"),
        }
    }

    /// `A: 110 ns [100 ns–120 ns], 40 probes`.
    pub(super) fn describe(&self, m: usize) -> String {
        let v = &self.values[m];
        let lo = v.first().copied().unwrap_or(f64::NAN);
        let hi = v.last().copied().unwrap_or(f64::NAN);
        format!(
            "{}: {} [{}–{}], {} probe{}",
            Modes::name(m),
            probe_text(median(v)),
            probe_text(lo),
            probe_text(hi),
            v.len(),
            if v.len() == 1 { "" } else { "s" }
        )
    }

    /// One line naming every mode seen, for the output's header.
    pub(super) fn summary(&self) -> String {
        if self.values.is_empty() {
            return "no probe succeeded: host modes unknown".into();
        }
        let all: Vec<String> = (0..self.len()).map(|m| self.describe(m)).collect();
        let busy = if self.len() > BUSY_MODES {
            " (more modes than this host's usual two: probably other load on the machine, so treat the figures with care)"
        } else {
            ""
        };
        format!(
            "{} mode{} seen (1 B shared-memory floor, one-way): {}{busy}",
            self.len(),
            if self.len() == 1 { "" } else { "s" },
            all.join("; ")
        )
    }

    /// The modes of the probes `from..=to`.
    pub(super) fn tag(&self, from: usize, to: usize) -> Tag {
        let mut seen: Vec<usize> = (from..=to)
            .filter_map(|i| self.of_probe.get(i).copied().flatten())
            .collect();
        seen.sort_unstable();
        seen.dedup();
        match seen.len() {
            0 => Tag::Unknown,
            1 => Tag::One(seen[0]),
            _ => Tag::Mixed(seen),
        }
    }

    /// The modes of the runs that took `samples`, from the probe before
    /// the first to the probe after the last.
    pub(super) fn tag_of(&self, samples: &[&Sample]) -> Tag {
        let spans: Vec<(usize, usize)> = samples.iter().filter_map(|s| s.span).collect();
        match (
            spans.iter().map(|s| s.0).min(),
            spans.iter().map(|s| s.1).max(),
        ) {
            (Some(from), Some(to)) => self.tag(from, to),
            _ => Tag::Unknown,
        }
    }
}

/// Whether `probes` (one-way µs; failed ones NaN) fall in more than one
/// mode by themselves: the host changed mode while they were taken.
pub(super) fn changed(probes: &[f64]) -> bool {
    Modes::cluster(probes).len() > 1
}

/// Probes as text, in the order taken: `240 ns, 18 ns, 251 ns`.
pub(super) fn probes_text(probes: &[f64]) -> String {
    let all: Vec<String> = probes.iter().map(|&p| probe_text(p)).collect();
    all.join(", ")
}

/// A probe's one-way time: nanoseconds below a microsecond.
fn probe_text(usec: f64) -> String {
    if !usec.is_finite() {
        "–".into()
    } else if usec < 1.0 {
        format!("{:.0} ns", usec * 1000.0)
    } else {
        format!("{} µs", fmt(usec))
    }
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tag::Unknown => write!(f, "?"),
            Tag::One(m) => write!(f, "{}", Modes::name(*m)),
            Tag::Mixed(ms) => {
                let names: Vec<String> = ms.iter().map(|m| Modes::name(*m)).collect();
                write!(f, "{}", names.join("/"))
            }
        }
    }
}

/// One round's ratio of two configurations and the modes it was taken in.
#[derive(Debug, Clone)]
pub(super) struct RoundRatio {
    pub(super) round: usize,
    pub(super) ratio: f64,
    pub(super) tag: Tag,
}

/// The per-round ratios `pick(a) / pick(b)` of the rounds where both ran.
pub(super) fn per_round(
    a: &[Sample],
    b: &[Sample],
    pick: fn(&Sample) -> f64,
    modes: &Modes,
) -> Vec<RoundRatio> {
    let mut out = Vec::new();
    for x in a {
        if let Some(y) = b.iter().find(|y| y.round == x.round) {
            out.push(RoundRatio {
                round: x.round,
                ratio: pick(x) / pick(y),
                tag: modes.tag_of(&[x, y]),
            });
        }
    }
    out.sort_by_key(|r| r.round);
    out
}

/// `0.41 A, 0.47 A, 0.62 A/B`.
pub(super) fn rounds_text(r: &[RoundRatio]) -> String {
    let parts: Vec<String> = r
        .iter()
        .map(|x| format!("{} {}", fmt(x.ratio), x.tag))
        .collect();
    parts.join(", ")
}

/// The median ratio per single mode (mixed rounds left out):
/// `A 0.44, B 0.61`.
pub(super) fn by_mode_text(r: &[RoundRatio], modes: &Modes) -> String {
    let mut parts = Vec::new();
    for m in 0..modes.len() {
        let v: Vec<f64> = r
            .iter()
            .filter(|x| x.tag == Tag::One(m))
            .map(|x| x.ratio)
            .collect();
        if !v.is_empty() {
            parts.push(format!("{} {}", Modes::name(m), fmt(median(&v))));
        }
    }
    if parts.is_empty() {
        "–".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_changed_mode_only_across_a_gap() {
        // Jitter by small steps (192-364 ns, as one mode spread in a run)
        // is one mode; a probe 13 times faster is another.
        assert!(!changed(&[0.242, 0.192, 0.260, 0.300, 0.364]));
        assert!(changed(&[0.242, 0.018, 0.250]));
        // Failed probes say nothing.
        assert!(!changed(&[0.240, f64::NAN, 0.250]));
        assert!(!changed(&[]));
    }

    fn sample(round: usize, usec: f64, span: (usize, usize)) -> Sample {
        Sample {
            usec,
            mbps: 1.0 / usec,
            round,
            span: Some(span),
        }
    }

    #[test]
    fn probes_cluster_by_factor() {
        // 0.10-0.12, a gap, 0.30-0.35, a gap, 0.9.
        let m = Modes::cluster(&[0.30, 0.11, f64::NAN, 0.12, 0.35, 0.10, 0.9]);
        assert_eq!(m.len(), 3);
        assert_eq!(m.tag(1, 1), Tag::One(0));
        assert_eq!(m.tag(0, 0), Tag::One(1));
        assert_eq!(m.tag(2, 2), Tag::Unknown);
        assert_eq!(m.tag(3, 6), Tag::Mixed(vec![0, 1, 2]));
        assert_eq!(m.tag(0, 1).to_string(), "A/B");
        assert_eq!(m.describe(0), "A: 110 ns [100 ns–120 ns], 3 probes");
        assert_eq!(m.describe(2), "C: 900 ns [900 ns–900 ns], 1 probe");
        assert!(!m.summary().contains("other load"));
        // Small steps make one mode, however wide.
        let jitter = Modes::cluster(&[0.027, 0.035, 0.043, 0.051, 0.055, 0.067]);
        assert_eq!(jitter.len(), 1);
        let busy = Modes::cluster(&[0.1, 0.2, 0.4, 0.8]);
        assert!(busy.summary().starts_with("4 modes seen"));
        assert!(busy.summary().contains("other load"));
        assert!(Modes::cluster(&[]).summary().contains("unknown"));
    }

    #[test]
    fn ratios_pair_by_round_and_carry_modes() {
        let modes = Modes::cluster(&[0.1, 0.1, 0.1, 0.3, 0.3, 0.3]);
        // Round 1 of `a` failed: only rounds 0 and 2 pair.
        let a = vec![sample(0, 2.0, (0, 1)), sample(2, 3.0, (3, 4))];
        let b = vec![
            sample(0, 4.0, (1, 2)),
            sample(1, 1.0, (2, 3)),
            sample(2, 2.0, (4, 5)),
        ];
        let r = per_round(&a, &b, |s| s.usec, &modes);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].round, r[0].ratio, &r[0].tag), (0, 0.5, &Tag::One(0)));
        assert_eq!((r[1].round, r[1].ratio, &r[1].tag), (2, 1.5, &Tag::One(1)));
        assert_eq!(rounds_text(&r), "0.50 A, 1.50 B");
        assert_eq!(by_mode_text(&r, &modes), "A 0.50, B 1.50");
    }
}
