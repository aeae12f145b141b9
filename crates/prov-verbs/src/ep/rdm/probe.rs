//! The liveness probe's clock for applications that sleep.
//!
//! The probe ([`Engine::liveness`](super::Engine::liveness)) goes out from
//! progress. An application that busy-polls its CQ makes progress all the
//! time; one that sleeps in `sread` (or on the CQ's wait fd) with no
//! timeout makes none while nothing arrives, and a rendezvous send waiting
//! for the FIN of a peer whose host died would keep it asleep for ever:
//! nothing is on the wire for that send, so nothing fails. This timer
//! joins the endpoint's wait fds and ticks every half probe interval while
//! a thread sleeps with rendezvous sends waiting; each tick wakes the
//! sleeper into a progress pass that runs the sweep. Nobody sleeping, or
//! no rendezvous send waiting when the sleep began: the timer is still,
//! and progress only loads one flag.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fabric_core::Result;
use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, timerfd_create, timerfd_settime,
};

/// A timerfd that ticks while sleepers need the probe.
#[derive(Debug)]
pub(super) struct ProbeTimer {
    fd: OwnedFd,
    /// Threads between [`ProbeTimer::sleep`] and [`ProbeTimer::wake`],
    /// and whether the timer ticks. A lock: taken once per wait, never on
    /// the data path.
    sleepers: Mutex<(usize, bool)>,
    /// The timer ticks (read by every progress pass).
    ticking: AtomicBool,
    /// A thread sleeps (a copy of the count under the lock, so that
    /// [`ProbeTimer::needed`] takes the lock only then).
    asleep: AtomicBool,
    period: Duration,
}

impl ProbeTimer {
    /// A still timer that will tick every `period` while armed.
    pub(super) fn new(period: Duration) -> Result<Self> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .map_err(|e| crate::raw::from_errno(e.raw_os_error(), "timerfd_create"))?;
        Ok(ProbeTimer {
            fd,
            sleepers: Mutex::new((0, false)),
            ticking: AtomicBool::new(false),
            asleep: AtomicBool::new(false),
            period,
        })
    }

    /// The fd that turns readable at each tick.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A thread is about to sleep on the endpoint's fds; `needed`: a
    /// rendezvous send waits (or it could not be told), so the timer must
    /// tick while it sleeps.
    pub(super) fn sleep(&self, needed: bool) {
        let mut s = self.lock();
        s.0 += 1;
        self.asleep.store(true, Ordering::Release);
        if needed {
            self.start(&mut s);
        }
    }

    /// A rendezvous send starts to wait: if a thread already sleeps, the
    /// timer must tick for it. One flag load when nobody sleeps.
    #[inline]
    pub(super) fn needed(&self) {
        if self.asleep.load(Ordering::Acquire) && !self.ticking.load(Ordering::Acquire) {
            let mut s = self.lock();
            if s.0 > 0 {
                self.start(&mut s);
            }
        }
    }

    fn start(&self, s: &mut (usize, bool)) {
        if !s.1 && self.set(self.period) {
            s.1 = true;
            self.ticking.store(true, Ordering::Release);
        }
    }

    /// The sleep that [`ProbeTimer::sleep`] announced is over; the last
    /// sleeper stops the timer.
    pub(super) fn wake(&self) {
        let mut s = self.lock();
        s.0 = s.0.saturating_sub(1);
        if s.0 == 0 {
            self.asleep.store(false, Ordering::Release);
        }
        if s.0 == 0 && s.1 {
            s.1 = false;
            self.ticking.store(false, Ordering::Release);
            self.set(Duration::ZERO);
            self.fired_now();
        }
    }

    /// Whether the timer ticked since the last call (and makes its fd
    /// unreadable again). One flag load while the timer is still.
    #[inline]
    pub(super) fn fired(&self) -> bool {
        self.ticking.load(Ordering::Acquire) && self.fired_now()
    }

    fn fired_now(&self) -> bool {
        let mut n = [0u8; 8];
        matches!(rustix::io::read(&self.fd, &mut n), Ok(8))
    }

    /// Ticks every `every` from now (`ZERO`: stops); false when the
    /// kernel refused (the probe then runs only from busy polling).
    fn set(&self, every: Duration) -> bool {
        let t = rustix::time::Timespec {
            tv_sec: every.as_secs() as _,
            tv_nsec: every.subsec_nanos() as _,
        };
        let spec = Itimerspec {
            it_interval: t,
            it_value: t,
        };
        match timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec) {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(
                    errno = e.raw_os_error(),
                    "verbs: cannot set the probe timer"
                );
                false
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, bool)> {
        match self.sleepers.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the tick twice in a row. `None` when the timer may have
    /// ticked again in between (the time to its next tick, read first,
    /// had passed by the second read); else what the two reads found.
    fn read_twice(t: &ProbeTimer) -> Option<(bool, bool)> {
        let asked = std::time::Instant::now();
        let next = rustix::time::timerfd_gettime(&t.fd).ok()?.it_value;
        let next = Duration::new(
            u64::try_from(next.tv_sec).ok()?,
            u32::try_from(next.tv_nsec).ok()?,
        );
        let first = t.fired();
        let second = t.fired();
        (asked.elapsed() < next).then_some((first, second))
    }

    #[test]
    fn ticks_only_while_a_sleeper_needs_it() {
        let t = ProbeTimer::new(Duration::from_millis(5)).unwrap();
        std::thread::sleep(Duration::from_millis(15));
        assert!(!t.fired(), "still while nobody sleeps");
        t.sleep(false);
        std::thread::sleep(Duration::from_millis(15));
        assert!(!t.fired(), "still while no rendezvous send waits");
        t.sleep(true);
        // Two reads in a row with a tick pending: the first finds it, the
        // second nothing. A pair during which the next tick may have come
        // proves nothing and is tried again (the CI's QEMU guest once
        // took longer than the 5 ms period between two reads).
        let mut pair = None;
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(15));
            pair = read_twice(&t);
            if pair.is_some() {
                break;
            }
        }
        let (first, second) = pair.expect("a pair of reads between two ticks in 100 tries");
        assert!(first, "ticks for a sleeper with a waiting send");
        assert!(!second, "reading the tick makes the fd unreadable");
        t.wake();
        std::thread::sleep(Duration::from_millis(15));
        assert!(t.fired(), "another sleeper is still there");
        t.wake();
        std::thread::sleep(Duration::from_millis(15));
        assert!(!t.fired(), "still once the last sleeper woke");
        t.needed();
        std::thread::sleep(Duration::from_millis(15));
        assert!(!t.fired(), "a new waiting send with nobody asleep");
        t.sleep(false);
        t.needed();
        std::thread::sleep(Duration::from_millis(15));
        assert!(t.fired(), "a send that starts to wait under a sleeper");
        t.wake();
    }
}
