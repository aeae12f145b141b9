//! The completion queue core: a lock-free ring of completions, an overflow
//! list so that a full queue never drops a completion, an error queue, and
//! a [`Signal`] for blocking reads.
//!
//! Successful completions travel through a bounded lock-free queue; only
//! when it is full do they go to a locked overflow list (allocation on that
//! rare path only). Once anything is in overflow, later completions follow
//! it there, so completions come out in the order they were pushed.
//! Error completions are rare and take a lock; while one is waiting, reads
//! return `Avail` as fi_cq(3) says.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;

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
    ring: ArrayQueue<Completion>,
    overflow: Mutex<VecDeque<Completion>>,
    overflow_len: AtomicUsize,
    errors: Mutex<VecDeque<CqErrEntry>>,
    errors_len: AtomicUsize,
    signal: Signal,
}

impl CqCore {
    /// A queue of at least `size` entries (0: [`DEFAULT_SIZE`]).
    pub fn new(size: usize) -> Result<Self> {
        let size = if size == 0 { DEFAULT_SIZE } else { size };
        Ok(CqCore {
            ring: ArrayQueue::new(size),
            overflow: Mutex::new(VecDeque::new()),
            overflow_len: AtomicUsize::new(0),
            errors: Mutex::new(VecDeque::new()),
            errors_len: AtomicUsize::new(0),
            signal: Signal::new()?,
        })
    }

    /// The wake-up signal (its fd is the CQ's wait fd).
    pub fn signal(&self) -> &Signal {
        &self.signal
    }

    /// Adds a successful completion. Never fails and never drops.
    pub fn push(&self, entry: CqEntry, src: FiAddr) {
        if self.overflow_len.load(Ordering::Acquire) == 0 {
            match self.ring.push((entry, src)) {
                Ok(()) => {
                    self.signal.notify();
                    return;
                }
                Err(back) => return self.push_overflow(back),
            }
        }
        self.push_overflow((entry, src));
    }

    fn push_overflow(&self, c: Completion) {
        let mut o = lock(&self.overflow);
        o.push_back(c);
        self.overflow_len.store(o.len(), Ordering::Release);
        drop(o);
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

    /// Whether the ring is full (later completions go to the overflow
    /// list): completions a peer causes on its own (remote CQ data) should
    /// stop coming until [`has_room`](Self::has_room).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.overflow_len.load(Ordering::Acquire) > 0 || self.ring.is_full()
    }

    /// Whether at most half a ring's worth of completions waits.
    #[inline]
    pub fn has_room(&self) -> bool {
        self.ring.len() + self.overflow_len.load(Ordering::Acquire) <= self.ring.capacity() / 2
    }

    /// Whether nothing at all is waiting.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty() && self.overflow_len.load(Ordering::Acquire) == 0 && !self.has_err()
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
        let mut n = 0;
        while n < out.len() {
            // `is_empty` first: an empty `pop` costs a full fence, and a
            // polling reader mostly finds the queue empty.
            let popped = if self.ring.is_empty() {
                None
            } else {
                self.ring.pop()
            };
            let next = match popped {
                Some(c) => Some(c),
                None if self.overflow_len.load(Ordering::Acquire) > 0 => {
                    let mut o = lock(&self.overflow);
                    let c = o.pop_front();
                    self.overflow_len.store(o.len(), Ordering::Release);
                    c
                }
                None => None,
            };
            let Some((entry, from)) = next else { break };
            out[n] = entry;
            if let Some(s) = src.as_deref_mut() {
                s[n] = from;
            }
            n += 1;
        }
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
