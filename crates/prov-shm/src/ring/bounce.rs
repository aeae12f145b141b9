//! The bounce-buffer pool: `bounce_count` fixed-size buffers in the
//! receiver's region, for payloads too big to travel inline.
//!
//! Free buffers form a Treiber stack threaded through the metadata array
//! (`next: u32` per buffer). The stack head is one `u64` holding
//! `tag << 32 | index`; every successful push or pop increments the tag, so
//! a head that was popped and pushed back between a reader's load and its
//! compare-and-swap (the ABA problem) fails the CAS. A sender pops a buffer,
//! stores its pid in the buffer's `holder` word, fills it, and sends a ring
//! command naming it; the receiver copies the payload out, clears `holder`
//! and pushes the buffer back.
//!
//! Everything read from shared memory is checked: an index beyond the pool
//! is reported as corruption, not used, and every loop is bounded.

use std::sync::atomic::Ordering;

use fabric_core::error::{Error, ErrorKind, Result};

use crate::region::offsets;
use crate::region::shared::Mapping;

/// "No buffer": the empty free list, and the end of the list.
pub(crate) const NONE: u32 = u32::MAX;
/// The free list's link; while a sender holds the buffer, the same word
/// is its fill mark (see [`fill_word`]).
const NEXT: usize = 0;
const HOLDER: usize = 4;
/// Bound on compare-and-swap retries before giving up with `Again`.
const TURNS: u32 = 1 << 16;

fn corrupt(what: String) -> Error {
    Error::new(ErrorKind::Io, format!("bounce pool corrupted: {what}"))
}

/// Threads every buffer onto the free list (index order) with no holder.
pub(crate) fn init(map: &Mapping) {
    let count = map.layout().bounce_count();
    for i in 0..count {
        let m = map.layout().bounce_meta(i);
        let next = if i + 1 < count { i + 1 } else { NONE };
        map.u32(m + NEXT).store(next, Ordering::Relaxed);
        map.u32(m + HOLDER).store(0, Ordering::Relaxed);
    }
    let first = if count > 0 { 0 } else { NONE };
    map.u64(offsets::BOUNCE_FREE)
        .store(u64::from(first), Ordering::Relaxed);
}

/// Takes a free buffer for process `pid`. `Again` when none is free.
pub(crate) fn pop(map: &Mapping, pid: u32) -> Result<u32> {
    let l = map.layout();
    let head = map.u64(offsets::BOUNCE_FREE);
    let mut h = head.load(Ordering::Acquire);
    for _ in 0..TURNS {
        let idx = h as u32;
        if idx == NONE {
            return Err(Error::again());
        }
        if idx >= l.bounce_count() {
            return Err(corrupt(format!("free-list head names buffer {idx}")));
        }
        // Acquire: a fill mark read here (the word of a buffer another
        // sender popped meanwhile, see `fill_word`) comes with that pop.
        let next = map.u32(l.bounce_meta(idx) + NEXT).load(Ordering::Acquire);
        if next != NONE && next >= l.bounce_count() {
            // Either a stale read (another sender popped `idx` meanwhile and
            // the head moved) or a corrupt link: look at the head again.
            let now = head.load(Ordering::Acquire);
            if now == h {
                return Err(corrupt(format!("buffer {idx} links to {next}")));
            }
            h = now;
            continue;
        }
        let new = ((h >> 32).wrapping_add(1) << 32) | u64::from(next);
        match head.compare_exchange_weak(h, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                map.u32(l.bounce_meta(idx) + HOLDER)
                    .store(pid.max(1), Ordering::Relaxed);
                return Ok(idx);
            }
            Err(cur) => {
                h = cur;
                std::hint::spin_loop();
            }
        }
    }
    Err(Error::again())
}

/// Pushes buffer `idx` (already validated `< bounce_count`) back onto the
/// free list. Fails only when the head keeps changing for [`TURNS`] turns
/// (a peer scribbling on it); the buffer is then leaked, never reused
/// twice.
fn push(map: &Mapping, idx: u32) -> Result<()> {
    let l = map.layout();
    let head = map.u64(offsets::BOUNCE_FREE);
    let mut h = head.load(Ordering::Relaxed);
    for _ in 0..TURNS {
        map.u32(l.bounce_meta(idx) + NEXT)
            .store(h as u32, Ordering::Relaxed);
        let new = ((h >> 32).wrapping_add(1) << 32) | u64::from(idx);
        match head.compare_exchange_weak(h, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return Ok(()),
            Err(cur) => {
                h = cur;
                std::hint::spin_loop();
            }
        }
    }
    Err(corrupt(format!(
        "could not return buffer {idx}: the free-list head never settled"
    )))
}

/// The offset of buffer `idx`'s fill mark: the `u32` that a sender
/// filling the buffer in steps advances (with a Release store) as bytes
/// land. It is the free list's link word, which nobody uses while the
/// buffer is held; a popper that read the link before this buffer left
/// the list fails its compare-and-swap on the tagged head.
pub(crate) fn fill_word(map: &Mapping, idx: u32) -> usize {
    map.layout().bounce_meta(idx) + NEXT
}

/// Whether the free list is empty (no buffer to pop now).
pub(crate) fn is_dry(map: &Mapping) -> bool {
    map.u64(offsets::BOUNCE_FREE).load(Ordering::Acquire) as u32 == NONE
}

/// The pid recorded as holding buffer `idx` (0: free).
pub(crate) fn holder(map: &Mapping, idx: u32) -> u32 {
    map.u32(map.layout().bounce_meta(idx) + HOLDER)
        .load(Ordering::Relaxed)
}

/// Clears the holder of buffer `idx` and returns it to the pool; if the
/// buffer had no holder (it is already free: a duplicate reference), it is
/// left alone and the call fails.
pub(crate) fn release(map: &Mapping, idx: u32) -> Result<()> {
    let prev = map
        .u32(map.layout().bounce_meta(idx) + HOLDER)
        .swap(0, Ordering::AcqRel);
    if prev == 0 {
        return Err(corrupt(format!("buffer {idx} released twice")));
    }
    push(map, idx)
}

/// Frees buffer `idx` if its holder is still `pid` (used by recovery).
pub(crate) fn release_if_held_by(map: &Mapping, idx: u32, pid: u32) -> bool {
    let ok = map
        .u32(map.layout().bounce_meta(idx) + HOLDER)
        .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok();
    ok && push(map, idx).is_ok()
}

/// Rebuilds the free list if its head names no buffer (a peer wrote it):
/// every buffer without a holder is threaded on again. Returns whether it
/// did. A head naming a real buffer is left alone, whatever the links
/// behind it hold; `pop` reports those when it reaches them.
pub(crate) fn repair(map: &Mapping) -> bool {
    let l = map.layout();
    let head = map.u64(offsets::BOUNCE_FREE);
    let h = head.load(Ordering::Acquire);
    let idx = h as u32;
    if idx == NONE || idx < l.bounce_count() {
        return false;
    }
    let mut first = NONE;
    for i in (0..l.bounce_count()).rev() {
        if holder(map, i) == 0 {
            map.u32(l.bounce_meta(i) + NEXT)
                .store(first, Ordering::Relaxed);
            first = i;
        }
    }
    let new = ((h >> 32).wrapping_add(1) << 32) | u64::from(first);
    head.compare_exchange(h, new, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
}
