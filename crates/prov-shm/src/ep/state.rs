//! The part of an endpoint only its domain's engine touches (under the
//! engine's lock): its region and ring receiver, the receive engine, the
//! peers that sent to it, the operations in flight, and the transfers in
//! both directions; one progress pass over it, and the dispatch of the
//! commands taken from its ring.
//!
//! The handlers live by side: messages and the receive engine's work in
//! `rx.rs`, rendezvous transfers in `rndv.rs`, RMA and atomics at the
//! target in `target.rs`, flow control in `flow.rs`, peers and answers in
//! `peers.rs`, and the operations this endpoint sends in `tx.rs`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use fabric_core::kit::rx::RxEngine;
use fabric_core::objects::{FiAddr, Msg};
use fabric_core::{Address, ErrorKind, OpFlags};

use super::binds::Binds;
use super::flow::*;
use super::rndv::*;
use super::rx::*;
use super::shared::{EpShared, TxReq};
use super::slab::Slab;
use super::tx::{Push, Queued, TxOp};
use crate::pieces::IOV_LIMIT;
use crate::region::{PeerRegion, Region};
use crate::ring::{Message, Payload, Receiver, Sender};
use crate::wire::{self, flag, op};

/// Commands taken from the ring per endpoint and progress call.
pub(super) const RING_BUDGET: usize = 64;

/// A sender this endpoint knows (it introduced itself with HELLO).
#[derive(Debug)]
pub(crate) struct RxPeer {
    pub region: Arc<PeerRegion>,
    pub sender: Sender,
    pub pid: u32,
    pub addr: Address,
    pub(super) fi: FiAddr,
    pub(super) fi_misses: u32,
    /// The AV's change count when `fi` was looked up (`u64::MAX`: never).
    pub(super) fi_gen: u64,
    pub no_cma: bool,
    /// A cross-memory attach with this peer has worked: split rendezvous
    /// may be used (the sender then writes part of the message).
    pub cma_ok: bool,
    /// Answers that found the peer's ring full, in order.
    pub backlog: VecDeque<Queued>,
    /// This peer's number (never reused, unlike its index).
    pub(super) uid: u64,
}

/// The engine's state of one endpoint.
#[derive(Debug)]
pub(crate) struct EpRx {
    pub shared: Arc<EpShared>,
    pub region: Region,
    pub rx: Receiver,
    pub st: RxState,
}

/// Everything of [`EpRx`] but the ring receiver, so that a command
/// handler can borrow it while the receiver lends the payload.
#[derive(Debug)]
pub(crate) struct RxState {
    /// Posted receives, unexpected messages and their budget.
    pub rx: RxEngine<ShmWire, IOV_LIMIT>,
    pub peers: Vec<Option<RxPeer>>,
    pub(super) peer_map: HashMap<(u32, u32), u32>,
    pub(super) last: Option<((u32, u32), u32)>,
    pub ops: Slab<TxOp>,
    /// Operations taken from the queue that could not start yet.
    pub pending: VecDeque<TxReq>,
    pub pushes: VecDeque<Push>,
    pub xfers: Slab<RxXfer>,
    /// Peers with a non-empty backlog.
    pub backlogged: usize,
    pub scratch: Vec<u8>,
    pub results: Vec<u8>,
    pub stuck_since: Option<Instant>,
    /// The liveness pass's list of peers with operations in flight
    /// ([`op_peers_into`](Self::op_peers_into)), kept for its capacity.
    pub op_peers: Vec<Arc<super::shared::TxPeer>>,
    /// `PUT_DONE` notices that found the receiver's ring full.
    pub put_done_backlog: VecDeque<(Arc<super::shared::TxPeer>, crate::ring::Command)>,
    /// The ring's head is a message left there (over the hard limit, or
    /// remote CQ data for a full CQ): the ring is not read until a
    /// receive is posted, the budget has room or the CQ was read.
    pub(super) ring_held: bool,
    /// The ring's head is a stepped message still being filled by its
    /// sender: progress looks again at every pass (the sender does not
    /// wake us for its steps).
    pub(super) ring_filling: bool,
    /// The message being copied out of the head as it lands, if it
    /// matched a receive.
    pub(super) filling: Option<super::rx::Filling>,
    /// The ring position of a head still being filled as the liveness
    /// checks first saw it, and when.
    pub(crate) fill_seen: Option<(u64, Instant)>,
    /// Peers seen gone while the ring's head waited for a sender (index,
    /// number, and the ring position just past the last slot claimed when
    /// they were first seen so): each is forgotten once the head passes
    /// its position, however long the head keeps waiting.
    pub(crate) gone_marks: Vec<(u32, u64, u64)>,
    /// The ring is held for room in the receive CQ.
    pub(super) cq_held: bool,
    /// Progress looks at the receive CQ's room: senders wait for it
    /// (`cq_held`, or paused by the receive engine).
    pub(super) cq_watch: bool,
    /// Numbers peers.
    pub(super) next_uid: u64,
    /// `start_ops` stopped at a message for a peer that paused us.
    pub send_paused: bool,
    /// Work of a shared receive context's engine about the senders of
    /// other endpoints bound to it, handed on by the domain's engine.
    pub foreign: Vec<fabric_core::kit::rx::Action<ShmWire>>,
}

pub(super) fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

impl EpRx {
    pub(crate) fn new(shared: Arc<EpShared>, region: Region, rx: Receiver) -> EpRx {
        let tx = shared.info.tx_attr.size.max(1);
        let directed = shared.directed;
        let first_uid = u64::from(shared.id) << 32;
        EpRx {
            shared,
            region,
            rx,
            st: RxState {
                rx: RxEngine::new(directed, BUDGET),
                peers: Vec::new(),
                peer_map: HashMap::new(),
                last: None,
                ops: Slab::with_capacity(tx),
                pending: VecDeque::with_capacity(4),
                pushes: VecDeque::with_capacity(16),
                xfers: Slab::with_capacity(64),
                backlogged: 0,
                scratch: Vec::with_capacity(wire::DESC_MAX),
                results: Vec::new(),
                stuck_since: None,
                op_peers: Vec::with_capacity(4),
                put_done_backlog: VecDeque::new(),
                ring_held: false,
                ring_filling: false,
                filling: None,
                fill_seen: None,
                gone_marks: Vec::new(),
                cq_held: false,
                cq_watch: false,
                // Numbers carry the endpoint's id (see `rx::Peer`).
                next_uid: first_uid,
                send_paused: false,
                foreign: Vec::new(),
            },
        }
    }

    /// Whether outgoing work waits for room at a peer: operations not
    /// started, pushes, answers or `PUT_DONE`s that found a ring or bounce
    /// pool full. The peer frees that room in its own region without
    /// telling us, so progress must keep looking instead of letting a
    /// blocking read sleep (see [`crate::progress`]).
    pub(crate) fn stalled(&self) -> bool {
        let st = &self.st;
        // Operations behind a message for a peer that paused us wait for
        // its `RESUME`, which comes through our ring and wakes a sleeper.
        (!st.send_paused && (!st.pending.is_empty() || !self.shared.txq.is_empty()))
            || !st.pushes.is_empty()
            || st.backlogged > 0
            || !st.put_done_backlog.is_empty()
            || st.ring_filling
    }

    /// Whether anything is in flight whose peer may die while we sleep
    /// (operations, transfers from senders, a ring head claimed and not
    /// committed, stalled work), or that only the liveness checks end
    /// (bounce buffers consumed before their senders filled them, a dry
    /// pool that may hold dead senders' buffers, gone peers not yet
    /// forgotten): a sleeper must wake for the checks.
    pub(crate) fn in_flight(&self) -> bool {
        self.st.ops.len() > 0
            || self.st.xfers.len() > 0
            || self.rx.head_claimed()
            || self.stalled()
            || self.rx.forsaken() > 0
            || self.rx.pool_dry()
            || !self.st.gone_marks.is_empty()
    }

    /// Whether the ring's head waits for its sender: a stepped message
    /// still landing, or a slot claimed and not committed. Either ends by
    /// the sender's hand or by a liveness check ([`FILL_PATIENCE`],
    /// [`Receiver::recover`](crate::ring::Receiver::recover)); a head held
    /// by flow control is not counted, as only receives end that.
    ///
    /// [`FILL_PATIENCE`]: super::engine::FILL_PATIENCE
    pub(crate) fn head_waits(&self) -> bool {
        self.st.ring_filling || self.rx.head_claimed()
    }

    /// Whether the ring holds a command the engine would take now (not one
    /// left at the head by flow control).
    pub(crate) fn ring_ready(&self) -> bool {
        !self.st.ring_held && self.rx.is_ready()
    }

    /// Starts the operations handed over (from the call that queued them).
    pub(crate) fn start_queued(&mut self) {
        let sh = &*self.shared;
        if let Some(b) = sh.bound.get() {
            self.st.start_ops(sh, b);
        }
    }

    /// One pass: posted receives, the ring, operations to start, pushes,
    /// backlogs. Returns whether anything happened.
    pub(crate) fn progress(&mut self) -> bool {
        let sh = &*self.shared;
        let Some(b) = sh.bound.get() else {
            return false;
        };
        let st = &mut self.st;
        let mut work = false;
        // `is_empty` first: an empty `pop` costs a full fence, and this
        // runs on every look of a polling reader.
        while !sh.posted.is_empty() {
            let Some(r) = sh.posted.pop() else { break };
            work = true;
            st.take_post(sh, b, r);
        }
        if st.cq_watch {
            // Senders of remote CQ data wait for the application to read
            // the receive CQ (it does not tell us when it does).
            st.cq_room(sh, b);
        }
        let taken = self.rx.position();
        // Looks are spaced only while nothing of ours is in flight: an
        // operation or transfer waits for its peer's next command (a `CTS`,
        // `ACK`, `PUT_DONE`), which a gap would only delay.
        let gap = if st.ops.len() == 0 && st.xfers.len() == 0 {
            crate::ring::pace::gap()
        } else {
            0
        };
        let now = crate::ring::pace::now();
        for _ in 0..RING_BUDGET {
            // `poll_ready` first: an empty ring (most looks of a polling
            // reader) then costs one load, or none shortly after an empty
            // look, not a receive that fails.
            if st.ring_held || !self.rx.poll_ready(now, gap) {
                // Polling now: the slot taken last goes back to its
                // senders (see `ring::Receiver`).
                self.rx.release_taken();
                break;
            }
            st.ring_filling = false;
            match self
                .rx
                .try_recv_or_keep(|m, p| st.on_command(sh, b, m, &p).then_some(()))
            {
                Ok(Some(())) => work = true,
                // Still landing: looked at again at the next pass.
                Ok(None) if st.ring_filling => break,
                Ok(None) => {
                    // Over the hard limit: the message stays in the ring
                    // until receives take what is kept.
                    st.ring_held = true;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Again => break,
                Err(e) => {
                    work = true;
                    tracing::debug!(error = %e, "shm: dropped a malformed command");
                    // A message being filled is always the head: a peer
                    // wrote over its slot, and it will not come.
                    st.fill_failed(
                        b,
                        "shm: a peer rewrote a message's ring slot while it was received",
                    );
                }
            }
        }
        if self.rx.position() != taken {
            sh.rx_taken
                .store(self.rx.position(), std::sync::atomic::Ordering::Relaxed);
        }
        if !st.pending.is_empty() || !sh.txq.is_empty() {
            work |= st.start_ops(sh, b);
        }
        if !st.pushes.is_empty() {
            work |= st.run_pushes(sh, b);
        }
        if st.backlogged > 0 {
            work |= st.flush_backlogs();
        }
        while let Some((p, c)) = st.put_done_backlog.front() {
            match p.sender.try_send(c, &[]) {
                Ok(()) => {
                    work = true;
                    st.put_done_backlog.pop_front();
                }
                Err(e) if e.kind() == ErrorKind::Again => break,
                Err(_) => {
                    st.put_done_backlog.pop_front();
                }
            }
        }
        // The receive engine's work is taken where it arises (a polling
        // pass reads no more of the engine than before it came).
        debug_assert!(!st.rx.has_actions());
        work
    }

    /// FI_PEEK / FI_CLAIM / FI_DISCARD, at once (a claim with nothing
    /// claimed is refused by the call): receives posted before it are
    /// taken first.
    pub(crate) fn peek(&mut self, msg: &Msg<'_>, flags: OpFlags) -> fabric_core::Result<()> {
        let sh = &*self.shared;
        let b = sh.bound()?;
        let st = &mut self.st;
        st.drain_posted(sh, b);
        // A discard or claim may free budget a held message waits for.
        st.ring_held = false;
        let r = st.rx.post(b, msg, flags, true);
        st.run_actions(sh, b);
        r
    }

    /// A receive of several pieces, posted at once (the queue carries one
    /// piece): receives queued before it are taken first.
    pub(crate) fn post_now(
        &mut self,
        msg: &Msg<'_>,
        flags: OpFlags,
        tagged: bool,
    ) -> fabric_core::Result<()> {
        let sh = &*self.shared;
        let b = sh.bound()?;
        let st = &mut self.st;
        st.drain_posted(sh, b);
        let r = st.post(sh, b, msg, flags, tagged);
        st.run_actions(sh, b);
        r
    }

    /// Cancels the posted receive with this context (`fi_cancel`).
    pub(crate) fn cancel(&mut self, context: u64) -> fabric_core::Result<()> {
        let sh = &*self.shared;
        let b = sh.bound()?;
        let st = &mut self.st;
        st.drain_posted(sh, b);
        st.rx.cancel(b, context)
    }
}

impl RxState {
    // -----------------------------------------------------------------
    // Dispatch.

    /// Handles a command; `false` leaves it in the ring (a message over
    /// the hard limit of the unexpected budget).
    #[inline]
    pub(super) fn on_command(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        m: &Message,
        p: &Payload<'_>,
    ) -> bool {
        if self.filling.is_some() {
            return self.fill_more(sh, b, m, p);
        }
        let c = &m.cmd;
        if c.flags & !flag::ALL != 0 {
            tracing::debug!(flags = c.flags, "shm: command with unknown flags dropped");
            return true;
        }
        if !p.is_complete() && c.op != op::MSG {
            // Only messages are taken as they land; anything else waits
            // for its last byte.
            self.ring_filling = true;
            return false;
        }
        match c.op {
            op::MSG => return self.on_msg(sh, b, m, p),
            op::RTS => return self.on_rts(sh, b, m, p),
            op::WRITE | op::ATOMIC if !self.cq_data_room(sh, b, c.flags) => return false,
            op::PAUSE => Self::on_flow(sh, m, p, true),
            op::RESUME => Self::on_flow(sh, m, p, false),
            op::ACK => self.on_ack(sh, b, m, p),
            op::DATA => self.on_data(sh, b, m, p),
            op::CTS => self.on_cts(sh, m),
            op::SPLIT => self.on_split(sh, b, m, p),
            op::PUT_DONE => self.on_put_done(sh, b, m),
            op::HELLO => self.on_hello(sh, b, m, p),
            op::WRITE => self.on_write(sh, b, m, p),
            op::READ => self.on_read(sh, b, m, p),
            op::ATOMIC => self.on_atomic(sh, b, m, p),
            other => tracing::debug!(op = other, "shm: command with an unknown op dropped"),
        }
        true
    }

    pub(super) fn unknown_sender(m: &Message) {
        tracing::debug!(
            pid = m.sender_pid,
            ep = m.cmd.src,
            op = m.cmd.op,
            "shm: command from a sender that did not introduce itself dropped"
        );
    }
}
