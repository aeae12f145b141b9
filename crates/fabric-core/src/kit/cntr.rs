//! The counter core: success and error counts with a blocking wait.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::wait::Signal;
use crate::error::{Error, ErrorKind, Result};

/// The shared part of a counter (`fi_cntr`).
#[derive(Debug)]
pub struct CntrCore {
    ok: AtomicU64,
    err: AtomicU64,
    signal: Signal,
}

impl CntrCore {
    /// A counter at zero.
    pub fn new() -> Result<Self> {
        Ok(CntrCore {
            ok: AtomicU64::new(0),
            err: AtomicU64::new(0),
            signal: Signal::new()?,
        })
    }

    /// Successful completions.
    pub fn read(&self) -> u64 {
        self.ok.load(Ordering::Acquire)
    }

    /// Failed completions.
    pub fn read_err(&self) -> u64 {
        self.err.load(Ordering::Acquire)
    }

    /// Adds to the success count.
    pub fn add(&self, v: u64) {
        self.ok.fetch_add(v, Ordering::AcqRel);
        self.signal.notify();
    }

    /// Sets the success count.
    pub fn set(&self, v: u64) {
        self.ok.store(v, Ordering::Release);
        self.signal.notify();
    }

    /// Adds to the error count.
    pub fn add_err(&self, v: u64) {
        self.err.fetch_add(v, Ordering::AcqRel);
        self.signal.notify();
    }

    /// Sets the error count.
    pub fn set_err(&self, v: u64) {
        self.err.store(v, Ordering::Release);
        self.signal.notify();
    }

    /// The wake-up signal.
    pub fn signal(&self) -> &Signal {
        &self.signal
    }

    /// Waits until the success count reaches `threshold`; `progress` is
    /// called while waiting (manual progress), and a sleep also ends when
    /// one of `extra` (the provider's wait fds) becomes readable. Without
    /// any (a provider with nothing to sleep on), a sleep would end only
    /// when another thread's progress adds to the counter, so it lasts at
    /// most [`POLL_SLICE`] before progress is driven again. `TimedOut` on
    /// timeout, `Avail` if the error count rose while waiting.
    pub fn wait(
        &self,
        threshold: u64,
        extra: &[BorrowedFd<'_>],
        timeout: Option<Duration>,
        mut progress: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let errs = self.read_err();
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let slice = if extra.is_empty() {
                Some(left.map_or(POLL_SLICE, |l| l.min(POLL_SLICE)))
            } else {
                left
            };
            let r = self.signal.wait(extra, slice, || {
                progress()?;
                if self.read_err() != errs {
                    return Err(Error::from_kind(ErrorKind::Avail));
                }
                Ok((self.read() >= threshold).then_some(()))
            })?;
            if r.is_some() {
                return Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timed_out(threshold, self.read(), timeout));
            }
        }
    }
}

/// The error of a counter wait that timed out: how long it waited, for
/// what count, and where the count stands.
pub fn timed_out(threshold: u64, now: u64, timeout: Option<Duration>) -> Error {
    let ms = timeout.map_or(0, |t| t.as_millis());
    Error::new(
        ErrorKind::TimedOut,
        format!("counter wait timed out after {ms} ms: the count is {now}, waited for {threshold}"),
    )
}

/// The longest sleep of a counter wait that has no provider fds to sleep
/// on (see [`CntrCore::wait`]).
pub const POLL_SLICE: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_waits() {
        let c = CntrCore::new().unwrap();
        c.add(2);
        c.add_err(1);
        assert_eq!((c.read(), c.read_err()), (2, 1));
        assert!(
            c.wait(2, &[], Some(Duration::from_millis(1)), || Ok(()))
                .is_ok()
        );
        let e = c
            .wait(3, &[], Some(Duration::from_millis(5)), || Ok(()))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(e.to_string().contains("timed out after 5 ms"), "{e}");
        let mut n = 0;
        assert!(
            c.wait(5, &[], None, || {
                n += 1;
                if n == 3 {
                    c.add(3);
                }
                Ok(())
            })
            .is_ok()
        );
    }

    #[test]
    fn a_wait_without_fds_keeps_driving_progress() {
        // The provider gives nothing to sleep on, and its progress finds
        // the work 50 ms in: the wait must notice it long before its
        // 30 s timeout.
        let c = CntrCore::new().unwrap();
        let start = Instant::now();
        let r = c.wait(1, &[], Some(Duration::from_secs(30)), || {
            if start.elapsed() > Duration::from_millis(50) && c.read() == 0 {
                c.add(1);
            }
            Ok(())
        });
        assert!(r.is_ok());
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the wait slept through the progress"
        );
    }
}
