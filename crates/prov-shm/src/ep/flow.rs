//! Flow control: the unexpected-message budget's limits, `PAUSE` /
//! `RESUME` to and from peers, and remote CQ data held for room in the
//! receive CQ (see the [docs](crate::docs#unexpected-messages)).

use fabric_core::Mode;
use fabric_core::kit::rx::Budget;

use super::binds::Binds;
use super::rx::*;
use super::shared::EpShared;
use super::state::*;
use super::tx::Reply;
use crate::ring::{Message, Payload};
use crate::wire::flag;

/// Bytes of unexpected messages an endpoint keeps before it pauses the
/// senders that bring more (payloads, plus [`UNEXP_COST`] per entry; the
/// same budget as tcp's). See the [crate docs](crate::docs#unexpected-messages).
pub(crate) const UNEXP_BUDGET: usize = 8 << 20;

/// What one unexpected entry counts besides its payload.
pub(crate) const UNEXP_COST: usize = 64;

/// What a sender may always have kept unexpected, whatever the others
/// hold: a sender below it is never paused, so one that floods cannot
/// starve the rest.
pub(crate) const UNEXP_RESERVE: usize = 256 << 10;

/// The hard limit, for senders that do not honour `PAUSE` (or have not
/// seen it yet): from it on, a message that matches no receive stays in
/// the ring until receives take what is kept.
pub(crate) const UNEXP_HARD: usize = 2 * UNEXP_BUDGET;

/// Largest buffer of an unexpected message kept for reuse.
pub(super) const SPARE_MAX: usize = 64 << 10;

/// The receive engine's limits (see the constants above).
pub(super) const BUDGET: Budget = Budget {
    total: UNEXP_BUDGET,
    hard: UNEXP_HARD,
    reserve: UNEXP_RESERVE,
    entry_cost: UNEXP_COST,
    spare_max: SPARE_MAX,
};

impl RxState {
    /// `PAUSE` / `RESUME` from a receiver of ours, which names its region.
    pub(super) fn on_flow(sh: &EpShared, m: &Message, p: &Payload<'_>, pause: bool) {
        let mut raw = [0u8; 128];
        if p.len() > raw.len() {
            return tracing::debug!("shm: PAUSE / RESUME with an oversized name dropped");
        }
        let n = p.copy_to(&mut raw);
        match std::str::from_utf8(&raw[..n]) {
            Ok(name) => sh.flow(name, m.sender_pid, pause),
            Err(_) => tracing::debug!("shm: PAUSE / RESUME with a name that is not UTF-8"),
        }
    }

    /// Sends `PAUSE` (`pause`) or `RESUME` to peer `p`, if it is still
    /// the peer at that index.
    pub(super) fn flow(&mut self, sh: &EpShared, (pi, uid): Peer, pause: bool) {
        let Some(Some(p)) = self.peers.get(pi as usize) else {
            return;
        };
        if p.uid != uid {
            return;
        }
        tracing::debug!(peer = %p.addr, pause, "shm: unexpected budget or receive CQ: flow control");
        self.reply(
            sh,
            pi,
            Reply::Flow {
                pause,
                region: &sh.region_name,
            },
        );
    }

    /// The application may have read the receive CQ: senders waiting for
    /// room in it resume, and remote CQ data left in the ring is taken.
    pub(super) fn cq_room(&mut self, sh: &EpShared, b: &Binds) {
        self.rx.cq_read(b);
        self.run_actions(sh, b);
        if self.cq_held && b.rx_cq.as_ref().is_none_or(|c| c.has_room()) {
            self.cq_held = false;
            self.ring_held = false;
        }
        self.cq_watch = self.cq_held || self.rx.waits_for_cq();
    }

    /// Whether an RMA write or atomic with `flags` may be taken now. One
    /// that carries remote CQ data in `FI_RX_CQ_DATA` mode may have to be
    /// kept as an unexpected entry, so over the hard limit it waits in the
    /// ring while no receive is posted; otherwise its completion goes to
    /// the receive CQ, so while that is full it waits in the ring until
    /// the application reads (a sender that does not honour `PAUSE`
    /// cannot grow the CQ). It is applied only once taken.
    #[inline]
    pub(super) fn cq_data_room(&mut self, sh: &EpShared, b: &Binds, flags: u16) -> bool {
        if flags & flag::CQ_DATA == 0 {
            return true;
        }
        if sh.info.mode.contains(Mode::RX_CQ_DATA) {
            return self.rx.unexpected_bytes() + UNEXP_COST <= UNEXP_HARD
                || self.rx.posted(false) > 0;
        }
        if b.rx_cq.as_ref().is_some_and(|c| c.is_full()) {
            self.cq_held = true;
            self.cq_watch = true;
            return false;
        }
        true
    }
}
