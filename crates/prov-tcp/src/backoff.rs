//! Listeners that cannot accept for lack of resources (`EMFILE`,
//! `ENFILE`, `ENOBUFS`, `ENOMEM`) stay readable: watched by a
//! level-triggered epoll set, they would wake every waiter for ever while
//! each accept fails again. [`AcceptBackoff`] takes such a listener out of
//! the set for a while (10 ms, doubling up to 1 s while failures go on)
//! and asks the engine's timer ([`Poller::wake_after`]) to wake the waiters
//! when it is due, so that blocked readers and the auto-progress thread
//! put it back.

use std::os::fd::BorrowedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::progress::Poller;

/// The first pause.
const FIRST: Duration = Duration::from_millis(10);
/// The longest pause.
const LONGEST: Duration = Duration::from_secs(1);

/// Nanoseconds since the first call: a monotonic clock in a `u64`.
fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Whether an accept failed for lack of resources (not for the peer).
pub(crate) fn is_exhaustion(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// The pause of one listener; shared, lock-free.
#[derive(Debug, Default)]
pub(crate) struct AcceptBackoff {
    /// When the listener is due back ([`now_ns`]); 0: not paused.
    resume_at: AtomicU64,
    /// The next pause, in nanoseconds (0: [`FIRST`]).
    next: AtomicU64,
}

impl AcceptBackoff {
    /// Whether the listener is out of the epoll set now.
    pub(crate) fn is_paused(&self) -> bool {
        self.resume_at.load(Ordering::Acquire) != 0
    }

    /// Takes the listener `fd` (epoll `token`) out of `poller`'s set for
    /// the next pause, and arms the wake-up.
    pub(crate) fn pause(&self, poller: &Poller, fd: BorrowedFd<'_>, token: u64) {
        let pause = match self.next.load(Ordering::Relaxed) {
            0 => FIRST,
            n => Duration::from_nanos(n),
        };
        self.next.store(
            u64::try_from((pause * 2).min(LONGEST).as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let due = now_ns().saturating_add(u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX));
        if let Err(e) = poller.interest(fd, token, false, false) {
            tracing::debug!(error = %e, "tcp: cannot pause a listener");
            return;
        }
        self.resume_at.store(due.max(1), Ordering::Release);
        poller.wake_after(pause);
        tracing::debug!(
            ?pause,
            "tcp: out of resources to accept; the listener rests"
        );
    }

    /// Puts the listener back once its pause is over; true when it did
    /// (then the caller accepts what waits).
    pub(crate) fn resume_if_due(&self, poller: &Poller, fd: BorrowedFd<'_>, token: u64) -> bool {
        let due = self.resume_at.load(Ordering::Acquire);
        if due == 0 || now_ns() < due {
            return false;
        }
        self.resume_at.store(0, Ordering::Release);
        if let Err(e) = poller.interest(fd, token, true, false) {
            tracing::debug!(error = %e, "tcp: cannot resume a listener");
        }
        true
    }

    /// An accept succeeded: the next pause starts short again.
    pub(crate) fn reset(&self) {
        self.next.store(0, Ordering::Relaxed);
    }
}
