//! Which stores fill a bounce buffer with a big payload, chosen by timing
//! them.
//!
//! A sender copying into a bounce buffer writes cache lines that the
//! receiving core read last. With ordinary stores each line must first be
//! taken back from that core. On the 2-vCPU AMD EPYC host that costs
//! little most of the time, but for stretches of seconds to minutes the
//! host runs the two vCPUs where moving a line between them costs 4-5
//! times more; a process sees that state only by timing. Non-temporal
//! stores send the bytes to memory without taking the lines, and cost the
//! same in both states; the receiver then reads them from memory, which
//! costs it more than reading them from the sender's cache in the good
//! state.
//!
//! A model of a 64 KiB ping-pong (two processes on cores 0 and 1, each
//! message copied into a shared buffer and out again, the kinds of stores
//! alternating every 2,000 round trips in one run), one-way µs, medians:
//!
//! | state | ordinary stores | non-temporal stores |
//! |---|---|---|
//! | good | 5.6-6.8 | 9.3-9.5 |
//! | bad | 21.9 | 9.6 |
//!
//! In the bad state the sender's copy of 64 KiB took 34,000-44,000 cycles
//! with ordinary stores against 7,000-12,000 in the good one; non-temporal
//! stores took 7,000-8,000 in both.
//!
//! So every process times one copy in [`SAMPLE_EVERY`] (of at least
//! [`BULK_MIN`] bytes) with the kind in use, and every [`PROBE_EVERY`]
//! copies a short run with the other kind, keeps an estimate of each
//! kind's cost per byte (the lowest recent sample, rising slowly), and
//! from its [`SETTLE`]th copy on streams once ordinary stores cost more
//! than 3 times as much ([`STREAM_ABOVE`]), until they cost less than
//! twice as much ([`PLAIN_BELOW`]). In traces of the provider the ratio
//! was 1.2-1.6 in the good state and 4 or more in the bad one; the bounds
//! also leave room for the receiver's dearer copy out of streamed data,
//! which the sender does not see.
//! [`STREAM_VAR`](crate::config::STREAM_VAR) fixes the choice instead.
//! Figures from the provider are in the [crate docs](crate::docs#thresholds).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::shared::{stream_copy_in, volatile_copy_in};

/// Payloads from this size on take the measured choice; smaller ones
/// always take ordinary stores (at 16 KiB the two kinds' costs lay close
/// and the choice flapped between them).
pub(crate) const BULK_MIN: usize = 32 * 1024;

/// Copies go by ordinary stores until this many were made: the first
/// ones, which fault the buffers' pages in, are then only a few of the
/// samples behind the estimate.
const SETTLE: u32 = 64;

/// One copy in this many is timed.
const SAMPLE_EVERY: u32 = 8;

/// Every this many copies, [`PROBE_RUN`] in a row use the kind of stores
/// not in use, so that its estimate stays current.
const PROBE_EVERY: u32 = 256;

/// Copies per probe of the other kind; only the last [`PROBE_TIMED`] are
/// timed. The first copies after a change of kind pay for the change (a
/// non-temporal store to a line the sender still holds evicts it first),
/// which neither kind pays in a run of its own.
const PROBE_RUN: u32 = 4;

/// Copies timed at the end of a probe.
const PROBE_TIMED: u32 = 2;

/// Copies switch to non-temporal stores when ordinary ones cost more than
/// this many halves as much per byte ...
const STREAM_ABOVE: u64 = 6;

/// ... and back when they cost less than this many halves: between the
/// two, the kind stays, so that noisy estimates near one bound do not make
/// every copy pay for a change.
const PLAIN_BELOW: u64 = 4;

/// A sample above the estimate raises it by at most 1 / this of it
/// (a sample below lowers it to the sample): copies stretched by page
/// faults or preemption raise it little, a lasting rise takes about a
/// dozen samples.
const RISE_MAX: u32 = 8;

/// The process's choice: the copies of all its endpoints share the CPU
/// state it follows.
static CHOICE: Choice = Choice::new();

/// Copies the concatenation of `parts` into shared memory at `dst` in
/// steps of `step` bytes (the last may be shorter; `usize::MAX`: one
/// step), all with one kind of stores: ordinary ones below [`BULK_MIN`]
/// bytes in all, else the chosen kind. It calls
/// `filled(done)` after each step with the bytes in place so far: the
/// caller publishes them while the next step is copied, or answers
/// `false` to stop there. Only the first step is timed for the choice:
/// the later ones run while the receiver copies out the earlier ones,
/// which slowed ordinary stores more than non-temporal ones (a 40000 B
/// ping-pong in the host's fast state then switched to streaming and
/// back, where whole copies kept ordinary stores).
///
/// # Safety
///
/// As for [`volatile_copy_in`], for `[dst, dst + total)`.
pub(crate) unsafe fn copy_in_steps(
    dst: *mut u8,
    parts: &[&[u8]],
    step: usize,
    mut filled: impl FnMut(usize) -> bool,
) {
    let total = parts.iter().map(|p| p.len()).sum::<usize>();
    let step = step.max(1);
    let (stream, timed) = if total < BULK_MIN {
        (false, false)
    } else {
        static FORCED: OnceLock<Option<bool>> = OnceLock::new();
        match *FORCED.get_or_init(crate::config::stream_forced) {
            Some(s) => (s, false),
            None => CHOICE.plan(),
        }
    };
    let mut sample = None;
    let mut streamed = stream;
    let mut done = 0;
    let mut part = 0;
    let mut at = 0;
    while done < total {
        let end = done.saturating_add(step).min(total);
        let start = (timed && done == 0).then(Instant::now);
        while done < end {
            let Some(src) = parts.get(part) else { break };
            let n = (src.len() - at).min(end - done);
            let piece = &src[at..at + n];
            // SAFETY: `done + n <= total`: inside the caller's range.
            let d = unsafe { dst.add(done) };
            // SAFETY: the caller's contract, for either copy.
            if !(streamed && unsafe { stream_copy_in(d, piece) }) {
                streamed = false;
                // SAFETY: the caller's contract.
                unsafe { volatile_copy_in(d, piece) };
            }
            done += n;
            at += n;
            if at == src.len() {
                part += 1;
                at = 0;
            }
        }
        if let Some(t) = start {
            sample = Some((done, t.elapsed()));
        }
        if !filled(done) {
            break;
        }
    }
    if let Some((len, took)) = sample.filter(|s| s.0 > 0) {
        CHOICE.record(streamed, len, took);
    }
}

/// Estimates and the current pick, shared by the threads of a process
/// (relaxed atomics: a lost update only delays the choice by a sample).
#[derive(Debug)]
struct Choice {
    /// Copies planned so far.
    count: AtomicU32,
    /// Estimated cost, picoseconds per byte, of ordinary stores `[0]` and
    /// non-temporal ones `[1]` (see [`RISE_MAX`]); 0 before the first
    /// sample.
    cost: [AtomicU32; 2],
    /// Whether copies stream now.
    stream: AtomicBool,
}

impl Choice {
    const fn new() -> Choice {
        Choice {
            count: AtomicU32::new(0),
            cost: [AtomicU32::new(0), AtomicU32::new(0)],
            stream: AtomicBool::new(false),
        }
    }

    /// The next copy's kind (`true`: stream) and whether to time it.
    fn plan(&self) -> (bool, bool) {
        let k = self.count.fetch_add(1, Relaxed) % PROBE_EVERY;
        let current = self.stream.load(Relaxed);
        if k < PROBE_RUN {
            (!current, k >= PROBE_RUN - PROBE_TIMED)
        } else {
            // Not right after a probe either, for the same reason.
            (current, k > PROBE_RUN && k % SAMPLE_EVERY == 0)
        }
    }

    /// Takes a timed copy of `len` bytes (`streamed`: by non-temporal
    /// stores) into its kind's estimate and picks again.
    fn record(&self, streamed: bool, len: usize, took: Duration) {
        let per_byte = took.as_nanos().saturating_mul(1000) / len.max(1) as u128;
        let sample = u32::try_from(per_byte).unwrap_or(u32::MAX).max(1);
        let slot = &self.cost[usize::from(streamed)];
        let old = slot.load(Relaxed);
        let new = if old == 0 || sample <= old {
            sample
        } else {
            sample.min(old.saturating_add(old / RISE_MAX).max(old + 1))
        };
        slot.store(new, Relaxed);
        tracing::trace!(streamed, sample, estimate = new, "shm: timed bounce copy");
        let (plain, nt) = (self.cost[0].load(Relaxed), self.cost[1].load(Relaxed));
        let now = self.stream.load(Relaxed);
        let bound = if now { PLAIN_BELOW } else { STREAM_ABOVE };
        let settled = self.count.load(Relaxed) > SETTLE;
        let want = settled && nt > 0 && 2 * u64::from(plain) > bound * u64::from(nt);
        if want != now {
            self.stream.store(want, Relaxed);
            tracing::debug!(
                plain_ps_per_byte = plain,
                streaming_ps_per_byte = nt,
                stream = want,
                "shm: bounce copies switch stores"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `n` planned copies, timing each timed one at `plain` or `nt`
    /// picoseconds per byte by its kind.
    fn feed(c: &Choice, n: usize, plain: u64, nt: u64) {
        for _ in 0..n {
            let (stream, timed) = c.plan();
            if timed {
                let ps = if stream { nt } else { plain };
                c.record(stream, 1 << 16, Duration::from_nanos(ps * 65_536 / 1000));
            }
        }
    }

    #[test]
    fn streams_from_three_times_the_cost_down_to_twice() {
        let c = Choice::new();
        feed(&c, 4000, 90, 60);
        assert!(!c.stream.load(Relaxed), "good state: ordinary stores");
        feed(&c, 4000, 170, 60);
        assert!(!c.stream.load(Relaxed), "2.8x: still ordinary stores");
        feed(&c, 4000, 220, 60);
        assert!(c.stream.load(Relaxed), "bad state: streaming");
        feed(&c, 4000, 170, 60);
        assert!(c.stream.load(Relaxed), "2.8x: still streaming");
        feed(&c, 4000, 90, 60);
        assert!(!c.stream.load(Relaxed), "good state again: ordinary stores");
    }

    #[test]
    fn stretched_copies_do_not_flip_the_choice() {
        let c = Choice::new();
        feed(&c, 2000, 90, 60);
        for _ in 0..3 {
            c.record(false, 1 << 16, Duration::from_millis(2));
        }
        assert!(!c.stream.load(Relaxed));
        assert!(c.cost[0].load(Relaxed) < 130);
    }

    #[test]
    fn stepped_copies_land_and_report_each_step() {
        let src: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; 200_100];
        for (len, step, cut) in [
            (70_000, 16_384, 1),
            (70_000, 16_384, 16_384),
            (40_000, 16_384, 39_999),
            (200_000, 65_536, 100_003),
            (1_000, 16_384, 0),
            (BULK_MIN, BULK_MIN, 5),
        ] {
            dst.fill(0);
            let (a, b) = src[..len].split_at(cut);
            let mut marks = Vec::new();
            // SAFETY: `2 + len <= dst.len()`, distinct vectors.
            unsafe {
                copy_in_steps(dst.as_mut_ptr().add(2), &[a, &[], b], step, |d| {
                    marks.push(d);
                    true
                })
            };
            assert_eq!(&dst[2..2 + len], &src[..len], "{len} {step} {cut}");
            assert!(dst[..2].iter().chain(&dst[2 + len..]).all(|&b| b == 0));
            let want: Vec<usize> = (1..=len.div_ceil(step))
                .map(|k| (k * step).min(len))
                .collect();
            assert_eq!(marks, want);
        }
    }

    #[test]
    fn a_stepped_copy_stops_when_told() {
        let src = vec![7u8; 100_000];
        let mut dst = vec![0u8; 100_000];
        let mut calls = 0;
        // SAFETY: equal lengths, distinct vectors.
        unsafe {
            copy_in_steps(dst.as_mut_ptr(), &[&src], 16_384, |done| {
                calls += 1;
                done < 30_000
            })
        };
        assert_eq!(calls, 2);
        assert!(dst[..32_768].iter().all(|&b| b == 7));
        assert!(dst[32_768..].iter().all(|&b| b == 0));
    }

    #[test]
    fn big_copies_land_whatever_the_choice() {
        let src: Vec<u8> = (0..90_000u32).map(|i| (i * 31 + 1) as u8).collect();
        let mut dst = vec![0u8; 90_100];
        for round in 0..130 {
            dst.fill(0);
            let len = BULK_MIN + round * 401;
            // SAFETY: `3 + len <= dst.len()`, distinct vectors.
            unsafe {
                copy_in_steps(dst.as_mut_ptr().add(3), &[&src[..len]], usize::MAX, |_| {
                    true
                })
            };
            assert_eq!(&dst[3..3 + len], &src[..len]);
            assert!(dst[..3].iter().chain(&dst[3 + len..]).all(|&b| b == 0));
        }
    }
}
