//! Posted receives kept in place while they wait: the matchers queue slot
//! numbers, so posting and matching move a few words instead of a
//! receive's iovec array. A freed slot keeps its stale receive, so that
//! posting writes the new receive's fields where they are.

use super::{Pieces, Recv, RecvId};
use crate::OpFlags;
use crate::objects::IoVec;

/// What completing a receive needs of it.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Done {
    /// The buffer's size.
    pub cap: u64,
    /// The buffer's first byte (reported for multi-receive parts).
    pub base: u64,
    pub context: u64,
    pub flags: OpFlags,
    pub multi: Option<u32>,
}

/// One slot: a receive, and whether it is posted.
#[derive(Debug)]
struct Slot<const N: usize> {
    live: bool,
    recv: Recv<N>,
}

/// The receives of one engine.
#[derive(Debug, Default)]
pub(super) struct RecvSlab<const N: usize> {
    slots: Vec<Slot<N>>,
    free: Vec<u32>,
}

impl<const N: usize> RecvSlab<N> {
    /// A free slot, marked live (grown when none is free).
    fn vacant(&mut self) -> (&mut Recv<N>, RecvId) {
        let i = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot {
                    live: false,
                    recv: Recv::EMPTY,
                });
                self.slots.len() - 1
            }
        };
        let id = RecvId(u32::try_from(i).unwrap_or(u32::MAX));
        // `i` is a free slot's number or the one just pushed.
        let slot = &mut self.slots[i];
        slot.live = true;
        (&mut slot.recv, id)
    }

    /// Keeps `recv`.
    pub(super) fn put(&mut self, recv: Recv<N>) -> RecvId {
        let (slot, id) = self.vacant();
        *slot = recv;
        id
    }

    /// Keeps a receive into `iov` (at most `N` pieces: checked by the
    /// caller), written in place.
    pub(super) fn post(
        &mut self,
        iov: &[IoVec],
        context: u64,
        flags: OpFlags,
        multi: Option<u32>,
    ) -> RecvId {
        let (r, id) = self.vacant();
        r.buf.set(iov);
        r.context = context;
        r.flags = flags;
        r.multi = multi;
        id
    }

    /// The live receive `id`.
    pub(super) fn get(&self, id: RecvId) -> Option<&Recv<N>> {
        self.slots
            .get(id.0 as usize)
            .filter(|s| s.live)
            .map(|s| &s.recv)
    }

    /// Frees `id`; the receive it held (an empty one if it held none,
    /// which completes as truncated rather than writing anywhere).
    pub(super) fn take(&mut self, id: RecvId) -> Recv<N> {
        match self.slots.get_mut(id.0 as usize) {
            Some(slot) if slot.live => {
                slot.live = false;
                self.free.push(id.0);
                slot.recv
            }
            _ => {
                debug_assert!(false, "receive slot {} is empty", id.0);
                Recv::EMPTY
            }
        }
    }

    /// Frees `id`, whose data is in place: what its completion needs (a
    /// few words, where the receive carries its iovec array).
    pub(super) fn finish(&mut self, id: RecvId) -> Done {
        match self.slots.get_mut(id.0 as usize) {
            Some(slot) if slot.live => {
                slot.live = false;
                self.free.push(id.0);
                let r = &slot.recv;
                Done {
                    cap: r.buf.len() as u64,
                    base: r.buf.base(),
                    context: r.context,
                    flags: r.flags,
                    multi: r.multi,
                }
            }
            _ => {
                debug_assert!(false, "receive slot {} is empty", id.0);
                Done::default()
            }
        }
    }

    /// Live receives.
    pub(super) fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

impl<const N: usize> Recv<N> {
    /// No receive.
    pub(super) const EMPTY: Self = Recv {
        buf: Pieces::EMPTY,
        context: 0,
        flags: OpFlags::empty(),
        multi: None,
    };
}
