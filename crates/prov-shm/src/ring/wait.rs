//! Waking a receiver that sleeps: a shared futex word plus a "sleeping"
//! flag, so that senders make a system call only when the receiver really
//! blocks.
//!
//! Receiver (in [`Receiver::wait`](super::Receiver::wait)), after spinning
//! and yielding found nothing:
//!
//! 1. `v = futex.load()`
//! 2. `sleeping.store(1, SeqCst)`
//! 3. look at the ring again (`SeqCst` load of the head slot's sequence);
//!    if a command is there, clear `sleeping` and return
//! 4. `FUTEX_WAIT(futex, v, timeout)` (returns at once if `futex != v`)
//! 5. clear `sleeping`, look again
//!
//! Sender, after committing a slot with a `SeqCst` compare-and-swap:
//! `if sleeping.load(SeqCst) & 1 != 0 { futex += 1; FUTEX_WAKE(futex, 1) }`.
//!
//! A receiver that blocks in `poll(2)` instead (the provider's blocking CQ
//! reads wait on several fds at once) announces bit 1 of `sleeping` and
//! watches the region file with inotify (`IN_MODIFY`); a sender that sees
//! bit 1 `pwrite(2)`s the header's wake word, which makes the inotify fd
//! readable. The same Dekker argument applies to bit 1.
//!
//! The two sides form a Dekker pair over sequentially consistent
//! operations: either the sender's load sees `sleeping == 1` (and wakes),
//! or the receiver's load in step 3 sees the committed slot (and does not
//! sleep). A wake that comes between steps 1 and 4 changed `futex`, so the
//! wait returns immediately. The futex is a shared (not `_PRIVATE`) one:
//! the kernel keys it by the file page, so it works across processes that
//! map the region at different addresses.
//!
//! A peer that scribbles on these words can only cause spurious wake-ups or
//! delays: every sleep is capped at [`MAX_SLEEP`] and re-checks the ring.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::region::offsets;
use crate::region::shared::Mapping;

/// Longest single futex sleep; a wait longer than this re-checks the ring
/// in between, so a lost wake-up (a peer overwrote the flag) costs at most
/// this much.
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(50);

/// How long [`Receiver::wait`](super::Receiver::wait) polls before it
/// blocks.
///
/// Phase 1 spins on the ring for `spin` (catches a peer on another core
/// within a cache-line transfer); phase 2 alternates a look with
/// `sched_yield` for `yield_for` (hands the core to a peer that shares it,
/// which otherwise could only run at the next scheduler tick); phase 3
/// sleeps on the futex until a sender wakes it or the timeout passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Pure spinning time.
    pub spin: Duration,
    /// Time spent yielding between looks after the spin.
    pub yield_for: Duration,
}

impl Default for WaitPolicy {
    /// 2 us of spinning, then 50 us of yielding, then the futex.
    ///
    /// Measured with `examples/ring_pingpong.rs --mode wait --spin-us N`
    /// (1-byte one-way latency, 2-vCPU KVM guest): processes on two cores
    /// get 0.22 us with any spin of 1 us or more (0.30 us without
    /// spinning: a `sched_yield` per look is slower than a cache miss);
    /// processes sharing one core get 0.9 / 2.0 / 3.0 / 6.1 / 11.2 us for
    /// spins of 0 / 1 / 2 / 5 / 10 us, since there the spin is pure loss.
    /// 2 us keeps the two-core latency and costs 3 us on one core.
    fn default() -> Self {
        WaitPolicy {
            spin: Duration::from_micros(2),
            yield_for: Duration::from_micros(50),
        }
    }
}

impl WaitPolicy {
    /// Block at once (no spinning, no yielding): lowest CPU use.
    pub const BLOCK: WaitPolicy = WaitPolicy {
        spin: Duration::ZERO,
        yield_for: Duration::ZERO,
    };
}

/// `sleeping` bit: the receiver sleeps on the futex.
pub(crate) const ON_FUTEX: u32 = 1;
/// `sleeping` bit: the receiver blocks in `poll` on an inotify watch of the
/// region file.
pub(crate) const IN_POLL: u32 = 2;

/// Wakes a receiver that announced `how` (the `sleeping` word's bits).
pub(crate) fn wake(map: &Mapping, how: u32) {
    if how & IN_POLL != 0 {
        map.poke(offsets::WAKE_WORD);
    }
    if how & ON_FUTEX != 0 {
        wake_futex(map);
    }
}

/// Wakes the receiver sleeping on `map`'s futex.
fn wake_futex(map: &Mapping) {
    map.u32(offsets::WAIT_FUTEX).fetch_add(1, Ordering::Release);
    let addr = map.addr_of_u32(offsets::WAIT_FUTEX);
    // SAFETY: `addr` is an aligned u32 inside a live mapping (checked by
    // `addr_of_u32`); FUTEX_WAKE reads nothing at it and only uses it as a
    // key. The remaining arguments are unused by FUTEX_WAKE.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr,
            libc::FUTEX_WAKE,
            1i32,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Sleeps on `map`'s futex while it holds `expected`, for at most
/// `timeout` (capped at [`MAX_SLEEP`]). Returns on a wake, a timeout, a
/// signal, or at once if the word no longer holds `expected`.
pub(crate) fn sleep(map: &Mapping, expected: u32, timeout: Duration) {
    let t = timeout.min(MAX_SLEEP);
    let ts = libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    };
    let addr = map.addr_of_u32(offsets::WAIT_FUTEX);
    // SAFETY: `addr` is an aligned u32 inside a live mapping; FUTEX_WAIT
    // reads it atomically and `ts` is a valid timespec that outlives the
    // call. The last two arguments are unused by FUTEX_WAIT.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr,
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Offers the CPU to another runnable thread.
pub(crate) fn yield_now() {
    // SAFETY: sched_yield takes no arguments and cannot fail on Linux.
    unsafe { libc::sched_yield() };
}
