//! How often a polling reader looks at its ring.
//!
//! A look reads the first line of the head slot, which the reader's core
//! then shares. A sender that writes that slot takes the line back for
//! its stores (claim, payload, header, commit), and loses it again to each
//! look that falls while it writes: every such look costs the message one
//! more trip of the line between the cores. A reader that found its ring
//! empty therefore looks again only [`LOOK_GAP`] later; the polls in
//! between report an empty ring without reading the slot. The engine
//! spaces the looks of an endpoint only while none of its operations waits
//! for a peer's answer (see the [crate docs](crate::docs#polling)).
//!
//! The clock is the time-stamp counter where there is one (about 8 ns a
//! reading here, against 17 ns for `Instant::now`), its rate measured once
//! per process.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The least time between two looks at a ring, the first of which found
/// it empty.
pub const LOOK_GAP: Duration = Duration::from_nanos(50);

/// Polls that may skip their look in a row: should the clock stand still
/// (a broken counter), the reader still looks at every this many polls.
pub const MAX_SKIPS: u32 = 64;

/// How long the counter's rate is measured against the monotonic clock.
const CALIBRATION: Duration = Duration::from_micros(200);

/// The reader's side of the spacing: when it last found its ring empty.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// The clock reading of the last look that found the ring empty.
    last_empty: u64,
    /// Polls skipped since that look.
    skips: u32,
}

impl Pace {
    /// Whether a poll at clock reading `now` may look at the ring, with
    /// `gap` clock ticks between an empty look and the next one. A clock
    /// behind the last reading (another core's counter) allows the look.
    #[inline(always)]
    pub(crate) fn may_look(&mut self, now: u64, gap: u64) -> bool {
        if now.wrapping_sub(self.last_empty) >= gap || self.skips >= MAX_SKIPS {
            return true;
        }
        self.skips += 1;
        false
    }

    /// Records a look at `now` that found the ring empty.
    #[inline(always)]
    pub(crate) fn found_empty(&mut self, now: u64) {
        self.last_empty = now;
        self.skips = 0;
    }
}

/// The clock: the time-stamp counter on x86-64, else nanoseconds of the
/// monotonic clock.
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 processor and only reads
        // the counter.
        #[allow(unsafe_code)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// [`LOOK_GAP`] in clock ticks, measured at the first call (which the
/// opening of a domain makes, off any operation's path). 0, no spacing,
/// when the clock did not advance.
pub fn gap() -> u64 {
    static GAP: OnceLock<u64> = OnceLock::new();
    *GAP.get_or_init(|| {
        let (t0, c0) = (Instant::now(), now());
        while t0.elapsed() < CALIBRATION {
            std::hint::spin_loop();
        }
        let (ns, c1) = (t0.elapsed().as_nanos(), now());
        ticks_for(LOOK_GAP, u128::from(c1.wrapping_sub(c0)), ns)
    })
}

/// `span` in ticks of a clock that advanced `ticks` in `ns` nanoseconds;
/// 0 for a clock that did not advance or an empty measurement.
fn ticks_for(span: Duration, ticks: u128, ns: u128) -> u64 {
    if ns == 0 {
        return 0;
    }
    u64::try_from(ticks * span.as_nanos() / ns).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_ring_is_looked_at_again_after_the_gap() {
        let mut p = Pace::default();
        assert!(p.may_look(1_000, 100));
        p.found_empty(1_000);
        assert!(!p.may_look(1_001, 100));
        assert!(!p.may_look(1_099, 100));
        assert!(p.may_look(1_100, 100));
        // A clock behind the last reading (another core) looks.
        p.found_empty(1_100);
        assert!(p.may_look(900, 100));
    }

    #[test]
    fn a_standing_clock_still_lets_every_few_polls_look() {
        let mut p = Pace::default();
        p.found_empty(5);
        let skipped = (0..1_000).take_while(|_| !p.may_look(5, 100)).count();
        assert_eq!(skipped, MAX_SKIPS as usize);
        p.found_empty(5);
        assert!(!p.may_look(5, 100));
    }

    #[test]
    fn no_gap_never_skips() {
        let mut p = Pace::default();
        p.found_empty(7);
        assert!(p.may_look(7, 0));
    }

    #[test]
    fn the_gap_is_converted_at_the_measured_rate() {
        // 2.6 GHz: 50 ns are 130 ticks.
        assert_eq!(ticks_for(LOOK_GAP, 520_000, 200_000), 130);
        assert_eq!(ticks_for(LOOK_GAP, 0, 200_000), 0);
        assert_eq!(ticks_for(LOOK_GAP, 5, 0), 0);
    }

    #[test]
    fn the_measured_gap_is_about_fifty_nanoseconds_of_this_clock() {
        let g = gap();
        let (t0, c0) = (Instant::now(), now());
        std::thread::sleep(Duration::from_millis(5));
        let rate = now().wrapping_sub(c0) as f64 / t0.elapsed().as_nanos() as f64;
        let ns = g as f64 / rate;
        assert!((25.0..100.0).contains(&ns), "gap {g} ticks = {ns:.1} ns");
    }
}
