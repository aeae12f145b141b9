//! Which copy a rendezvous message takes, learned per peer: pushed through
//! bounce buffers (two copies, one on each core, no system call) or
//! cross-memory attach (one copy, split between the cores, with system
//! calls and page pinning). Which is faster depends on the size and on how
//! far apart the two cores are, which on a shared host can change from one
//! second to the next (see the [crate docs](crate::docs#thresholds)), so the
//! sender times both and keeps to the faster.
//!
//! From 8 KiB ([`MID_MIN`]) to the CMA limit the same learning picks
//! between an eager message through one bounce buffer and CMA, for a
//! message that answers something or goes alone (see the crate docs,
//! Thresholds): both are timed to the receiver's `ACK` (an eager message
//! up to the eager limit asks for one only when it is a timed sample, see
//! [`Choice::pick_sampled`]), and the slower copy gets a run once in
//! [`EXPLORE_MID`] messages.
//!
//! Sizes fall into power-of-two classes. In each class the sender keeps an
//! estimate of the time per KiB of each protocol, measured from the
//! announcement to the target's `ACK` (a faster sample replaces it, a
//! slower one moves it a quarter of the way). It tries each protocol for
//! a run of [`RUN`] messages, pushing first, then takes the faster one,
//! and for one run in every [`EXPLORE`] messages of the class the other
//! one, so that a change of the machine's speed is noticed. Runs, because
//! a protocol reaches its steady cost only after a few messages in a row:
//! traced at 1 MiB (`RUST_LOG=prov_shm::ep::choice=trace`), pushing took
//! 394, 88, 60 and 53 ns per KiB before settling at 28-30, and CMA after
//! pushes 178, 86, 90, 59, 59, 65, 52 and 41 before settling at 37-40.
//! Single probes and pairs judged by those cold samples, and the choice
//! stuck with whichever its first few messages favoured.
//!
//!
//! A message's time is its *service time*: from its announcement, or from
//! the completion of the class's previous message if that came later, to
//! its `ACK`. A lone message (ping-pong) is timed from its announcement
//! as before; messages sent in a window (`fabric bw`) wait behind the
//! ones before them, and timing that wait (each message of a window of 64
//! took about 64 times the interval between completions) judged the
//! protocols by whichever happened to start a window unqueued, not by
//! their throughput.
//!
//! Samples are recorded only by the domain's engine (under its lock);
//! application threads pick too, for messages up to the eager limit
//! ([`Choice::pick_sampled`]). The words are relaxed atomics: two threads
//! picking at once may take the same turn, which only shifts a run.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One run in this many messages of a class takes the protocol that is not
/// the faster one, to keep its estimate current.
pub(crate) const EXPLORE: u32 = 128;

/// [`EXPLORE`] for the classes below 256 KiB, whose messages take
/// microseconds: one run in 1024 still looks again every few
/// milliseconds, and the slower copy costs under 1% of the time where
/// one run in 128 cost 4-8%.
pub(crate) const EXPLORE_MID: u32 = 1024;

/// Classes below this one are the mid sizes (8 KiB up to the CMA limit).
const FIRST_BIG_CLASS: usize = (crate::config::CMA_MIN.trailing_zeros() - FIRST_CLASS) as usize;

/// One eager message in this many of a mid-size class is timed (see
/// [`Choice::pick_sampled`]).
pub(crate) const SAMPLE_EVERY: u32 = 16;

/// Messages in a row that a protocol gets when it is tried.
pub(crate) const RUN: u32 = 8;

/// Messages of a class before the estimates are trusted: a run of
/// pushes, then a run by CMA.
const WARMUP: u32 = 2 * RUN;

/// The smallest class is 2^`FIRST_CLASS` bytes: [`MID_MIN`].
const FIRST_CLASS: u32 = 13;

/// The smallest message whose copy is chosen by measurement: from here
/// to the CMA limit, a message that answers something or goes alone goes
/// eagerly through one bounce buffer or by cross-memory attach (see the
/// module docs).
pub(crate) const MID_MIN: usize = 1 << FIRST_CLASS;

/// Classes kept: 8 KiB up to 1 GiB (`MAX_MSG_SIZE`) and beyond; larger
/// sizes share the last.
const CLASSES: usize = 21;

/// Weight of a new sample in the moving average: 1 / 2^`SHIFT`.
const SHIFT: u32 = 2;

/// The protocol timings of one peer.
#[derive(Debug, Default)]
pub(crate) struct Choice {
    classes: [Class; CLASSES],
}

#[derive(Debug, Default)]
struct Class {
    /// Average nanoseconds per KiB, pushed and by CMA (0: not measured).
    ns_per_kib: [AtomicU32; 2],
    /// Messages of this class so far (wraps).
    turn: AtomicU32,
    /// When the class's last timed message completed, in nanoseconds
    /// since [`epoch`] (0: none yet).
    last_done: AtomicU64,
}

/// The origin of [`Class::last_done`]: the first time any class is timed.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// What [`Choice::pick`] decided, to be handed back to
/// [`Choice::record`] when the message completed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Probe {
    at: Instant,
    class: u8,
    cma: bool,
    len: usize,
    /// Whether `at` was read (see [`Choice::pick_sampled`]).
    timed: bool,
}

impl Probe {
    /// Whether the message uses cross-memory attach.
    pub(crate) fn cma(&self) -> bool {
        self.cma
    }

    /// Whether the message is timed: it asks for an `ACK`, at which
    /// [`Choice::record`] takes the sample.
    pub(crate) fn timed(&self) -> bool {
        self.timed
    }
}

impl Choice {
    /// Chooses the protocol of a `len`-byte message and starts its clock.
    pub(crate) fn pick(&self, len: usize) -> Probe {
        self.pick_with(len, |_| true)
    }

    /// [`pick`](Self::pick) for a message up to the eager limit, which
    /// needs no `ACK` when it goes eagerly: only one in [`SAMPLE_EVERY`]
    /// of those is timed (it asks for an `ACK`, an extra command back,
    /// and its completion waits for it), while a choice of CMA always is.
    /// The copy in alone is no measure of an eager message: on a 2-vCPU
    /// Intel Xeon guest a 32 KiB copy in took 120 ns per KiB while the message
    /// took 200 one-way, against 78 by CMA (timed to its `ACK`), and
    /// judged by its copy in the eager copy kept 8-32 KiB messages at
    /// twice the time CMA takes.
    pub(crate) fn pick_sampled(&self, len: usize) -> Probe {
        self.pick_with(len, |turn| turn < WARMUP || turn % SAMPLE_EVERY == 0)
    }

    fn pick_with(&self, len: usize, time_eager: impl FnOnce(u32) -> bool) -> Probe {
        let class = class_of(len);
        let c = &self.classes[class];
        let [push, cma] = c.ns_per_kib.each_ref().map(|a| a.load(Ordering::Relaxed));
        let turn = c.turn.load(Ordering::Relaxed);
        c.turn.store(turn.wrapping_add(1), Ordering::Relaxed);
        let use_cma = if turn < WARMUP {
            turn >= RUN
        } else if push == 0 || cma == 0 {
            // A sample went missing (failed messages are not timed).
            push != 0
        } else {
            let every = if class < FIRST_BIG_CLASS {
                EXPLORE_MID
            } else {
                EXPLORE
            };
            (cma < push) != (turn % every >= every - RUN)
        };
        let timed = use_cma || time_eager(turn);
        Probe {
            at: if timed { Instant::now() } else { epoch() },
            class: class as u8,
            cma: use_cma,
            len,
            timed,
        }
    }

    /// Adds the time since `probe` was taken for its message, which
    /// completed without error.
    /// The time is the message's service time (see the module docs).
    pub(crate) fn record(&self, probe: Probe) {
        self.record_at(probe, Instant::now());
    }

    /// [`record`](Self::record) for a message that completed at `now`.
    fn record_at(&self, probe: Probe, now: Instant) {
        let len = probe.len;
        let class = usize::from(probe.class);
        let last = &self.classes[class].last_done;
        let base = epoch();
        let prev = last.load(Ordering::Relaxed);
        let start = match base.checked_add(Duration::from_nanos(prev)) {
            Some(t) if prev != 0 && t > probe.at => t,
            _ => probe.at,
        };
        let done = u64::try_from(now.saturating_duration_since(base).as_nanos()).unwrap_or(0);
        last.store(done.max(1), Ordering::Relaxed);
        let ns = now.saturating_duration_since(start).as_nanos();
        self.add(class, probe.cma, ns, len);
    }

    /// Adds a sample: `ns` for a `len`-byte message of `class`.
    fn add(&self, class: usize, cma: bool, ns: u128, len: usize) {
        let kib = (len as u128).div_ceil(1024).max(1);
        let sample = u32::try_from(ns / kib).unwrap_or(u32::MAX).max(1);
        let slot = &self.classes[class].ns_per_kib[usize::from(cma)];
        let old = slot.load(Ordering::Relaxed);
        // Interference only ever adds time, so a faster sample is taken as
        // it is, and a slower one moves the average a quarter of the way,
        // counted as at most twice the average: a protocol's first, cold
        // transfer (or a stall: an interrupt in a 16 KiB copy is ten
        // times its time) then cannot keep it out of use for long, and
        // the protocol in use, timed on every message, still follows the
        // machine when it slows down (by a quarter per message at most).
        let new = if old == 0 || sample <= old {
            sample
        } else {
            old + ((sample.min(old.saturating_mul(2)) - old) >> SHIFT)
        };
        slot.store(new, Ordering::Relaxed);
        // `RUST_LOG=prov_shm::ep::choice=trace` shows the choice learning.
        tracing::trace!(
            class,
            cma,
            ns_per_kib = sample,
            estimate = new,
            "shm: rendezvous copy timed"
        );
    }
}

/// The class of a `len`-byte message: floor(log2(len)) from
/// [`FIRST_CLASS`] on, clamped to the table.
fn class_of(len: usize) -> usize {
    let log = usize::BITS - 1 - len.max(1).leading_zeros();
    (log.saturating_sub(FIRST_CLASS) as usize).min(CLASSES - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records `ns_per_kib` for a 64 KiB message as if it took that long.
    fn feed(c: &Choice, cma: bool, ns_per_kib: u32) {
        let class = class_of(256 * 1024);
        let slot = &c.classes[class].ns_per_kib[usize::from(cma)];
        slot.store(ns_per_kib, Ordering::Relaxed);
    }

    #[test]
    fn classes_are_powers_of_two_and_clamped() {
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(MID_MIN), 0);
        assert_eq!(class_of(16 * 1024 - 1), 0);
        assert_eq!(class_of(16 * 1024), 1);
        assert_eq!(class_of(32 * 1024 + 1), 2);
        assert_eq!(class_of(512 * 1024 - 1), 5);
        assert_eq!(class_of(512 * 1024), 6);
        assert_eq!(class_of(1 << 20), 7);
        assert_eq!(class_of(1 << 30), 17);
        assert_eq!(class_of(usize::MAX), CLASSES - 1);
    }

    #[test]
    fn tries_both_then_keeps_the_faster_and_sometimes_the_other() {
        let c = Choice::default();
        let len = 256 * 1024;
        // Nothing measured: a run of pushes, then a run by CMA.
        for k in 0..2 * RUN {
            let p = c.pick(len);
            assert_eq!(p.cma(), k >= RUN);
            c.record(p);
        }
        feed(&c, false, 100);
        feed(&c, true, 300);
        let picks: Vec<bool> = (0..EXPLORE * 4).map(|_| c.pick(len).cma()).collect();
        let cma = picks.iter().filter(|&&x| x).count() as u32;
        assert_eq!(cma, 4 * RUN, "one run of CMA in every {EXPLORE} messages");
        assert!(
            picks.windows(RUN as usize).any(|w| w.iter().all(|&x| x)),
            "the probes come in runs"
        );
        // CMA becomes the faster: the choice follows.
        feed(&c, true, 50);
        let cma = (0..EXPLORE * 4).filter(|_| c.pick(len).cma()).count() as u32;
        assert_eq!(cma, EXPLORE * 4 - 4 * RUN);
        // Other classes are untouched.
        assert!(!c.pick(1 << 20).cma());
    }

    #[test]
    fn mid_sizes_look_at_the_slower_copy_once_in_1024_messages() {
        let c = Choice::default();
        let len = 16 * 1024;
        for _ in 0..WARMUP {
            let _ = c.pick(len);
        }
        let class = class_of(len);
        c.classes[class].ns_per_kib[0].store(150, Ordering::Relaxed);
        c.classes[class].ns_per_kib[1].store(250, Ordering::Relaxed);
        let cma = (0..EXPLORE_MID * 2).filter(|_| c.pick(len).cma()).count() as u32;
        assert_eq!(cma, 2 * RUN);
        // One eager message in SAMPLE_EVERY is timed (asks for an ACK); a
        // choice of CMA always is.
        let picks: Vec<Probe> = (0..EXPLORE_MID).map(|_| c.pick_sampled(len)).collect();
        let timed = picks.iter().filter(|p| p.timed && !p.cma).count() as u32;
        let eager = picks.iter().filter(|p| !p.cma).count() as u32;
        assert_eq!(timed, eager.div_ceil(SAMPLE_EVERY), "{timed} of {eager}");
        assert!(picks.iter().filter(|p| p.cma).all(|p| p.timed));
    }

    #[test]
    fn a_queued_message_is_timed_from_the_previous_completion() {
        let c = Choice::default();
        let len = 1 << 20;
        let class = class_of(len);
        let est = |c: &Choice| c.classes[class].ns_per_kib[0].load(Ordering::Relaxed);
        let ms = |n: u64| Duration::from_millis(n);
        let _ = epoch();
        // Two messages announced together; the first completes after
        // 30 ms, the second 20 ms later: its service time is those 20 ms,
        // not the 50 since its announcement.
        let (a, b) = (c.pick(len), c.pick(len));
        let t0 = a.at.max(b.at);
        c.record_at(a, t0 + ms(30));
        let first = est(&c);
        assert!(first >= 30_000_000 / 1024, "{first} ns per KiB");
        c.record_at(b, t0 + ms(50));
        assert!(est(&c) <= 20_000_000 / 1024 + 1, "{} ns per KiB", est(&c));
        // A message announced after the last completion is timed from its
        // announcement: 5 ms.
        let mut p = c.pick(len);
        p.at = t0 + ms(100);
        c.record_at(p, t0 + ms(105));
        assert!(est(&c) <= 5_000_000 / 1024 + 1, "{} ns per KiB", est(&c));
        assert!(est(&c) >= 5_000_000 / 1024 - 1, "{} ns per KiB", est(&c));
    }

    #[test]
    fn a_faster_sample_replaces_a_slower_one_moves_a_quarter() {
        let c = Choice::default();
        let est = |c: &Choice| c.classes[1].ns_per_kib[0].load(Ordering::Relaxed);
        let len = 64 * 1024;
        c.add(1, false, 64_000, len);
        assert_eq!(est(&c), 1000);
        c.add(1, false, 32_000, len);
        assert_eq!(est(&c), 500, "a faster sample is taken as it is");
        c.add(1, false, 48_000, len);
        assert_eq!(
            est(&c),
            500 + (750 - 500) / 4,
            "a slower one moves a quarter"
        );
        c.add(1, false, 4 * 64_000 + 32_000, len);
        assert_eq!(
            est(&c),
            562 + 562 / 4,
            "a much slower one counts as twice the average"
        );
        // Slow samples in a row still follow: within 5% of 3x slower
        // after 12.
        for _ in 0..12 {
            c.add(1, false, 3 * 562 * 64, len);
        }
        assert!(est(&c) >= 3 * 562 * 95 / 100, "{}", est(&c));
        assert_eq!(c.classes[1].ns_per_kib[1].load(Ordering::Relaxed), 0);
        // A zero-time sample still counts as measured.
        c.add(2, true, 0, len);
        assert_eq!(c.classes[2].ns_per_kib[1].load(Ordering::Relaxed), 1);
    }
}
