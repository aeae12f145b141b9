//! A bounded queue that hands requests from application threads to the
//! domain's engine: a `VecDeque` under a spin lock, with its length in an
//! atomic for the engine's look.
//!
//! It replaced a lock-free `ArrayQueue` for posted receives: a program
//! such as `fi_pingpong` posts each receive between a completion and its
//! answer, so the push is on the round trip's path. The slot protocol of
//! the lock-free queue (a stamp per slot, a compare-and-swap on the tail,
//! a release store of the stamp) took 124 instructions per push there
//! (callgrind, shm 1 KiB); taking an uncontended spin lock is one
//! compare-and-swap, and releasing it a plain store.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use spin::mutex::{SpinMutex, SpinMutexGuard};

/// Requests on their way to the engine, at most `cap` at once.
#[derive(Debug)]
pub(crate) struct Handoff<T> {
    q: SpinMutex<VecDeque<T>>,
    /// `q`'s length, readable without the lock.
    len: AtomicUsize,
    cap: usize,
}

impl<T> Handoff<T> {
    /// An empty queue with room for `cap` requests (allocated now).
    pub(crate) fn new(cap: usize) -> Handoff<T> {
        Handoff {
            q: SpinMutex::new(VecDeque::with_capacity(cap)),
            len: AtomicUsize::new(0),
            cap,
        }
    }

    /// The lock: held only for a push or a pop. The first try is inline,
    /// the spin behind it out of line, so that the uncontended push keeps
    /// no registers for it.
    #[inline]
    fn lock(&self) -> SpinMutexGuard<'_, VecDeque<T>> {
        match self.q.try_lock() {
            Some(q) => q,
            None => self.lock_contended(),
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) -> SpinMutexGuard<'_, VecDeque<T>> {
        fabric_core::kit::spin_lock(&self.q)
    }

    /// Appends `v`; hands it back when `cap` requests wait already.
    #[inline]
    pub(crate) fn push(&self, v: T) -> Result<(), T> {
        let mut q = self.lock();
        if q.len() >= self.cap {
            return Err(v);
        }
        q.push_back(v);
        self.len.store(q.len(), Ordering::Release);
        Ok(())
    }

    /// Whether no request waits (one atomic load: the engine looks on
    /// every pass).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// The oldest request, if any.
    #[inline]
    pub(crate) fn pop(&self) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.lock();
        let v = q.pop_front();
        self.len.store(q.len(), Ordering::Release);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Handoff;
    use std::sync::Arc;

    #[test]
    fn keeps_order_and_refuses_past_its_room() {
        let h = Handoff::new(2);
        assert!(h.is_empty());
        assert_eq!(h.push(1), Ok(()));
        assert_eq!(h.push(2), Ok(()));
        assert_eq!(h.push(3), Err(3));
        assert!(!h.is_empty());
        assert_eq!(h.pop(), Some(1));
        assert_eq!(h.push(4), Ok(()));
        assert_eq!(h.pop(), Some(2));
        assert_eq!(h.pop(), Some(4));
        assert_eq!(h.pop(), None);
        assert!(h.is_empty());
    }

    #[test]
    fn loses_nothing_between_threads() {
        let h = Arc::new(Handoff::new(64));
        let producers: Vec<_> = (0..3u64)
            .map(|t| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        let mut v = t << 32 | i;
                        while let Err(back) = h.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u64; 3];
        let mut got = 0;
        while got < 30_000 {
            match h.pop() {
                Some(v) => {
                    let (t, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                    // Each producer's requests come out in its order.
                    assert_eq!(i, next[t]);
                    next[t] += 1;
                    got += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert!(h.is_empty());
        assert_eq!(next, [10_000; 3]);
    }
}
