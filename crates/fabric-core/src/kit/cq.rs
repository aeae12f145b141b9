//! The completion queue core: a queue of completions that never drops
//! one, an error queue, and a [`Signal`] for blocking reads.
//!
//! Successful completions go through a `VecDeque` under a spin lock, with
//! its length in an atomic so that a polling reader looks without taking
//! the lock. The queue is allocated for the CQ's size when it is opened; a
//! completion past that size makes it grow (an allocation on that rare
//! path only), so a full queue never loses one and completions come out
//! in the order they were pushed.
//!
//! It replaced a lock-free `ArrayQueue` plus a locked overflow list: its
//! per-slot stamps made a push and a pop about 55 instructions each
//! (callgrind, tcp and shm ping-pong), against about 20 for an
//! uncontended spin lock (one compare-and-swap, one plain store to
//! release) around a `VecDeque` push or pop. The lock is held for those
//! few instructions only; a waiter spins, then yields (its holder may have
//! been preempted).
//!
//! Error completions are rare and take a lock; while one is waiting,
//! reads return `Avail` as fi_cq(3) says.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use spin::mutex::{SpinMutex, SpinMutexGuard};

use super::lock;
use super::wait::Signal;
use crate::error::{Error, ErrorKind, Result};
use crate::objects::{CqEntry, CqErrEntry, FiAddr};

/// Default number of entries when the application asks for 0.
pub const DEFAULT_SIZE: usize = 1024;

/// A completion and the address of its source (`FiAddr::NOTAVAIL` when
/// unknown).
pub type Completion = (CqEntry, FiAddr);

/// The shared part of a completion queue.
#[derive(Debug)]
pub struct CqCore {
    queue: SpinMutex<VecDeque<Completion>>,
    /// `queue`'s length, readable without the lock.
    len: AtomicUsize,
    /// The size the CQ was opened with: past it the queue counts as full.
    size: usize,
    errors: Mutex<VecDeque<CqErrEntry>>,
    errors_len: AtomicUsize,
    signal: Signal,
}

impl CqCore {
    /// A queue of at least `size` entries (0: [`DEFAULT_SIZE`]).
    pub fn new(size: usize) -> Result<Self> {
        let size = if size == 0 { DEFAULT_SIZE } else { size };
        Ok(CqCore {
            queue: SpinMutex::new(VecDeque::with_capacity(size)),
            len: AtomicUsize::new(0),
            size,
            errors: Mutex::new(VecDeque::new()),
            errors_len: AtomicUsize::new(0),
            signal: Signal::new()?,
        })
    }

    /// The wake-up signal (its fd is the CQ's wait fd).
    pub fn signal(&self) -> &Signal {
        &self.signal
    }

    /// The queue's lock.
    #[inline]
    fn lock(&self) -> SpinMutexGuard<'_, VecDeque<Completion>> {
        super::spin_lock(&self.queue)
    }

    /// Adds a successful completion. Never fails and never drops.
    pub fn push(&self, entry: CqEntry, src: FiAddr) {
        let mut q = self.lock();
        q.push_back((entry, src));
        self.len.store(q.len(), Ordering::Release);
        drop(q);
        self.signal.notify();
    }

    /// Adds an error completion.
    pub fn push_err(&self, err: CqErrEntry) {
        let mut e = lock(&self.errors);
        e.push_back(err);
        self.errors_len.store(e.len(), Ordering::Release);
        drop(e);
        self.signal.notify();
    }

    /// Whether an error completion is waiting.
    #[inline]
    pub fn has_err(&self) -> bool {
        self.errors_len.load(Ordering::Acquire) > 0
    }

    /// Whether the CQ holds its size or more (later completions still
    /// fit, in memory allocated then): completions a peer causes on its
    /// own (remote CQ data) should stop coming until
    /// [`has_room`](Self::has_room).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len.load(Ordering::Acquire) >= self.size
    }

    /// Whether at most half the CQ's size waits.
    #[inline]
    pub fn has_room(&self) -> bool {
        self.len.load(Ordering::Acquire) <= self.size / 2
    }

    /// Whether nothing at all is waiting.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0 && !self.has_err()
    }

    /// Moves up to `out.len()` completions into `out` (and their sources
    /// into `src`, if given, which must be at least as long as `out`).
    /// `Again` when empty; `Avail` when an error completion is waiting.
    pub fn read(&self, out: &mut [CqEntry], mut src: Option<&mut [FiAddr]>) -> Result<usize> {
        if self.has_err() {
            return Err(Error::from_kind(ErrorKind::Avail));
        }
        if let Some(s) = src.as_deref() {
            if s.len() < out.len() {
                return Err(Error::inval(
                    "readfrom: the source array is shorter than the entry array",
                ));
            }
        }
        // A polling reader mostly finds the queue empty: one load then.
        if self.len.load(Ordering::Acquire) == 0 || out.is_empty() {
            return Err(Error::again());
        }
        let mut q = self.lock();
        let mut n = 0;
        for slot in out.iter_mut() {
            let Some((entry, from)) = q.pop_front() else {
                break;
            };
            *slot = entry;
            if let Some(s) = src.as_deref_mut().and_then(|s| s.get_mut(n)) {
                *s = from;
            }
            n += 1;
        }
        self.len.store(q.len(), Ordering::Release);
        drop(q);
        if n == 0 { Err(Error::again()) } else { Ok(n) }
    }

    /// Takes the next error completion; `Again` if none.
    pub fn read_err(&self) -> Result<CqErrEntry> {
        let mut e = lock(&self.errors);
        let r = e.pop_front();
        self.errors_len.store(e.len(), Ordering::Release);
        r.ok_or_else(Error::again)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(ctx: u64) -> CqEntry {
        CqEntry {
            context: ctx,
            ..Default::default()
        }
    }

    #[test]
    fn empty_is_again_and_order_is_kept_through_overflow() {
        let q = CqCore::new(4).unwrap();
        let mut out = [CqEntry::default(); 16];
        assert_eq!(q.read(&mut out, None).unwrap_err().kind(), ErrorKind::Again);
        for i in 0..10 {
            q.push(e(i), FiAddr(i));
        }
        let mut src = [FiAddr(0); 16];
        let n = q.read(&mut out[..3], Some(&mut src[..3])).unwrap();
        assert_eq!(n, 3);
        for i in 10..12 {
            q.push(e(i), FiAddr(i));
        }
        let n2 = q.read(&mut out[3..], Some(&mut src[3..])).unwrap();
        assert_eq!(n + n2, 12);
        let ctx: Vec<u64> = out[..12].iter().map(|c| c.context).collect();
        assert_eq!(ctx, (0..12).collect::<Vec<_>>());
        assert_eq!(src[11], FiAddr(11));
    }

    #[test]
    fn errors_come_first_as_avail() {
        let q = CqCore::new(4).unwrap();
        q.push(e(1), FiAddr::NOTAVAIL);
        q.push_err(CqErrEntry {
            entry: e(2),
            olen: 0,
            err: ErrorKind::Canceled,
            prov_errno: 0,
            err_text: "cancelled".into(),
            src_addr: None,
        });
        let mut out = [CqEntry::default(); 4];
        assert_eq!(q.read(&mut out, None).unwrap_err().kind(), ErrorKind::Avail);
        assert_eq!(q.read_err().unwrap().entry.context, 2);
        assert_eq!(q.read(&mut out, None).unwrap(), 1);
        assert_eq!(q.read_err().unwrap_err().kind(), ErrorKind::Again);
    }

    #[test]
    fn many_producers_lose_nothing() {
        let q = std::sync::Arc::new(CqCore::new(64).unwrap());
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let q = q.clone();
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        q.push(e(t * 1_000_000 + i), FiAddr::NOTAVAIL);
                    }
                });
            }
        });
        let mut seen = Vec::new();
        let mut out = [CqEntry::default(); 100];
        while let Ok(n) = q.read(&mut out, None) {
            seen.extend(out[..n].iter().map(|c| c.context));
        }
        assert_eq!(seen.len(), 40_000);
        // Per producer, order is kept.
        for t in 0..4u64 {
            let mine: Vec<u64> = seen
                .iter()
                .copied()
                .filter(|c| c / 1_000_000 == t)
                .collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
