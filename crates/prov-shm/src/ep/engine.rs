//! The part of an endpoint only its domain's engine touches (under the
//! engine's lock): its region and ring receiver, the matching queues, the
//! peers that sent to it, the operations in flight, and the transfers in
//! both directions.
//!
//! Receiving (this file): commands are taken from the ring in order and
//! dispatched by op; messages are matched against posted receives or kept
//! as unexpected; rendezvous messages are pulled with cross-memory attach
//! or, in push mode, cleared to send; RMA and atomic requests are checked
//! against the domain's memory regions and executed. Sending in the engine
//! (operations handed over by [`TxReq`], answers, pushes) is in `ops.rs`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use fabric_core::kit::atomic::{self, AtomicKind};
use fabric_core::kit::rx::{Action, Budget, Entry, Held, Meta, RecvId, RxEngine, Transport};
use fabric_core::objects::{AtomicOp, CqEntry, FiAddr, MrAccess, Msg, RmaIov};
use fabric_core::{Address, Error, ErrorKind, Mode, OpFlags};

use super::binds::{Binds, msg_flags};
use super::ops::{Push, PushSrc, Queued, Reply, TxOp};
use super::shared::{EpShared, RxReq, TxReq, attach};
use super::slab::Slab;
use crate::cma::{self, CmaError};
use crate::config::SCHEME;
use crate::pieces::{IOV_LIMIT, Pieces, PiecesExt};
use crate::region::{OwnerStatus, PeerRegion, Region};
use crate::ring::{Message, Payload, Receiver, Sender};
use crate::wire::{self, Desc, flag, op};

/// Commands taken from the ring per endpoint and progress call.
const RING_BUDGET: usize = 64;

/// Most elements of one atomic operation.
pub(crate) const MAX_ATOMIC_COUNT: usize = 1024;

/// How many more bytes than the sender the receiver copies in a split
/// rendezvous: about what it copies while the `SPLIT` travels to the
/// sender and the `PUT_DONE` comes back. Measured: see the
/// [crate docs](crate::docs#thresholds).
pub(crate) const SPLIT_BIAS: usize = 4 * 1024;

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
const SPARE_MAX: usize = 64 << 10;

/// The receive engine's limits (see the constants above).
const BUDGET: Budget = Budget {
    total: UNEXP_BUDGET,
    hard: UNEXP_HARD,
    reserve: UNEXP_RESERVE,
    entry_cost: UNEXP_COST,
    spare_max: SPARE_MAX,
};

/// What shm's transport brings to the kit's receive engine.
#[derive(Debug)]
pub(crate) struct ShmWire;

/// A sender: its index among the endpoint's peers and its number (an
/// index reused by a later peer has another number).
pub(crate) type Peer = (u32, u64);

impl Transport for ShmWire {
    /// An announced message whose data stays with its sender.
    type Remote = Rts;
    /// (peer index, operation id) of a message whose sender asked for an
    /// acknowledgement.
    type Ack = (u32, u64);
    type Peer = Peer;
}

/// A rendezvous announcement: where the sender's data is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rts {
    pub peer: u32,
    pub id: u64,
    pub len: usize,
    pub iovs: [(u64, u64); IOV_LIMIT],
    pub n: usize,
    /// The sender asked for push mode.
    pub push: bool,
}

/// A sender this endpoint knows (it introduced itself with HELLO).
#[derive(Debug)]
pub(crate) struct RxPeer {
    pub region: Arc<PeerRegion>,
    pub sender: Sender,
    pub pid: u32,
    pub addr: Address,
    fi: FiAddr,
    fi_misses: u32,
    pub no_cma: bool,
    /// A cross-memory attach with this peer has worked: split rendezvous
    /// may be used (the sender then writes part of the message).
    pub cma_ok: bool,
    /// Answers that found the peer's ring full, in order.
    pub backlog: VecDeque<Queued>,
    /// This peer's number (never reused, unlike its index).
    uid: u64,
}

/// Where pushed data for a transfer goes.
#[derive(Debug)]
pub(crate) enum XferDest {
    /// A matched receive (its buffer as the engine holds it).
    Recv { id: RecvId, meta: Meta, buf: Pieces },
    /// Registered memory (an RMA write in push mode).
    Write {
        rma: [RmaIov; wire::RMA_IOV_LIMIT],
        n: usize,
        data: Option<u64>,
    },
}

/// Data being pushed to this endpoint by a peer.
#[derive(Debug)]
pub(crate) struct RxXfer {
    pub peer: u32,
    /// A split rendezvous: where the sender's buffer is (to pull the tail
    /// ourselves if the sender cannot write it) and where the tail starts.
    pub split: Option<Rts>,
    /// The initiator's op id, acknowledged at the end.
    pub op_id: u64,
    pub dest: XferDest,
    pub want: usize,
    pub got: usize,
    /// A part of a split transfer failed (reported once both are done).
    pub failed: Option<ErrorKind>,
    /// The sender already had its `ACK` (split rendezvous: our part was in
    /// place and the sender wrote its own): none is sent at the end.
    pub acked: bool,
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
    peer_map: HashMap<(u32, u32), u32>,
    last: Option<((u32, u32), u32)>,
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
    /// `PUT_DONE` notices that found the receiver's ring full.
    pub put_done_backlog: VecDeque<(Arc<super::shared::TxPeer>, crate::ring::Command)>,
    /// The ring's head is a message left there (over the hard limit, or
    /// remote CQ data for a full CQ): the ring is not read until a
    /// receive is posted, the budget has room or the CQ was read.
    ring_held: bool,
    /// The ring is held for room in the receive CQ.
    cq_held: bool,
    /// Numbers peers.
    next_uid: u64,
    /// `start_ops` stopped at a message for a peer that paused us.
    pub send_paused: bool,
}

fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

impl EpRx {
    pub(crate) fn new(shared: Arc<EpShared>, region: Region, rx: Receiver) -> EpRx {
        let tx = shared.info.tx_attr.size.max(1);
        let directed = shared.directed;
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
                put_done_backlog: VecDeque::new(),
                ring_held: false,
                cq_held: false,
                next_uid: 0,
                send_paused: false,
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
        if st.rx.waits_for_cq() || st.cq_held {
            // Senders of remote CQ data wait for the application to read
            // the receive CQ (it does not tell us when it does).
            st.cq_room(b);
        }
        for _ in 0..RING_BUDGET {
            if st.ring_held {
                break;
            }
            match self
                .rx
                .try_recv_or_keep(|m, p| st.on_command(sh, b, m, &p).then_some(()))
            {
                Ok(Some(())) => work = true,
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
                }
            }
        }
        if st.rx.has_actions() {
            work = true;
            st.run_actions(sh, b);
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
        if st.rx.has_actions() {
            st.run_actions(sh, b);
        }
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
    // Peers.

    /// The peer that sent `m`, if it introduced itself.
    #[inline]
    fn peer_of(&mut self, m: &Message) -> Option<u32> {
        let key = (m.sender_pid, m.cmd.src);
        if let Some((k, i)) = self.last {
            if k == key {
                return Some(i);
            }
        }
        let i = *self.peer_map.get(&key)?;
        self.last = Some((key, i));
        Some(i)
    }

    /// The AV handle of peer `pi` (for FI_SOURCE and directed receive),
    /// looked up again now and then while the application has not
    /// inserted it yet.
    fn src_of(&mut self, b: &Binds, pi: u32, directed: bool) -> FiAddr {
        let Some(Some(p)) = self.peers.get_mut(pi as usize) else {
            return FiAddr::NOTAVAIL;
        };
        if p.fi != FiAddr::NOTAVAIL {
            return p.fi;
        }
        p.fi_misses = p.fi_misses.wrapping_add(1);
        if directed || p.fi_misses % 64 == 1 {
            if let Some(av) = &b.av {
                p.fi = av.reverse(&p.addr);
            }
        }
        p.fi
    }

    fn on_hello(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let mut raw = [0u8; 128];
        if p.len() > raw.len() {
            tracing::debug!(len = p.len(), "shm: HELLO with an oversized name");
            return;
        }
        let n = p.copy_to(&mut raw);
        let Ok(name) = std::str::from_utf8(&raw[..n]) else {
            tracing::debug!("shm: HELLO with a name that is not UTF-8");
            return;
        };
        let region = match attach(name) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(name, error = %e, "shm: cannot attach the region of a new peer");
                return;
            }
        };
        if region.owner_pid() != m.sender_pid {
            tracing::debug!(
                name,
                claimed = m.sender_pid,
                owner = region.owner_pid(),
                "shm: HELLO from a process that does not own the region it names"
            );
            return;
        }
        let key = (m.sender_pid, m.cmd.src);
        if let Some(&old) = self.peer_map.get(&key) {
            let same = matches!(
                self.peers.get(old as usize),
                Some(Some(p)) if p.region.name() == name && p.region.is_open()
            );
            if same {
                // The same endpoint again (it reached us through another
                // AV handle): nothing changes.
                return;
            }
            // The same (pid, endpoint) with another region: a new process
            // reusing the pid. Whatever the old one left is void.
            self.drop_peer(sh, b, old);
        }
        let local = region.same_pid_ns();
        let peer = RxPeer {
            sender: region.sender(),
            pid: region.owner_pid(),
            addr: Address::Str(format!("{SCHEME}{name}")),
            region,
            fi: FiAddr::NOTAVAIL,
            fi_misses: 0,
            // Cross-memory attach names the peer by pid, which means
            // something only within its PID namespace.
            no_cma: !sh.cma || !local,
            cma_ok: false,
            backlog: VecDeque::new(),
            uid: self.next_uid,
        };
        self.next_uid += 1;
        let idx = match self.peers.iter().position(Option::is_none) {
            Some(i) => {
                self.peers[i] = Some(peer);
                i
            }
            None => {
                self.peers.push(Some(peer));
                self.peers.len() - 1
            }
        } as u32;
        self.peer_map.insert(key, idx);
        self.last = None;
        let _ = self.src_of(b, idx, true);
    }

    /// Forgets peer `pi` (it exited, closed, or was replaced): its
    /// announced messages are dropped, receives being pushed by it fail,
    /// pushes and answers to it are dropped.
    pub(crate) fn drop_peer(&mut self, sh: &EpShared, b: &Binds, pi: u32) {
        let Some(Some(peer)) = self.peers.get_mut(pi as usize).map(Option::take) else {
            return;
        };
        self.peer_map.retain(|_, v| *v != pi);
        self.last = None;
        if !peer.backlog.is_empty() {
            self.backlogged = self.backlogged.saturating_sub(1);
        }
        // Its announced messages go (their data was with the sender);
        // messages whose bytes are here stay deliverable.
        self.rx.peer_gone((pi, peer.uid));
        self.ring_held = false;
        for id in self.xfers.ids_where(|x| x.peer == pi) {
            if let Some(x) = self.xfers.remove(id) {
                if let XferDest::Recv { id, meta, .. } = x.dest {
                    let err = Error::new(
                        ErrorKind::ConnReset,
                        "shm: the sender went away in the middle of the message",
                    );
                    self.rx.fail(b, id, meta.tagged, &err);
                }
            }
        }
        self.pushes.retain(|p| p.rx_peer != Some(pi));
        // What it held may let other senders resume.
        self.run_actions(sh, b);
        tracing::debug!(peer = %peer.addr, "shm: forgot a peer");
    }

    /// Sends an answer to peer `pi`, or queues it behind earlier ones.
    pub(crate) fn reply(&mut self, sh: &EpShared, pi: u32, r: Reply<'_>) {
        let Some(Some(peer)) = self.peers.get_mut(pi as usize) else {
            return;
        };
        let (cmd, bytes) = r.command(sh.id);
        if peer.backlog.is_empty() {
            match peer.sender.try_send(&cmd, bytes) {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again => {}
                Err(e) => {
                    tracing::debug!(error = %e, "shm: an answer to a peer failed");
                    return;
                }
            }
            self.backlogged += 1;
        }
        peer.backlog.push_back(Queued {
            cmd,
            bytes: bytes.to_vec(),
        });
    }

    /// Sends queued answers.
    fn flush_backlogs(&mut self) -> bool {
        let mut work = false;
        let mut left = 0;
        for p in self.peers.iter_mut().flatten() {
            while let Some(q) = p.backlog.front() {
                match p.sender.try_send(&q.cmd, &q.bytes) {
                    Ok(()) => {
                        work = true;
                        p.backlog.pop_front();
                    }
                    Err(e) if e.kind() == ErrorKind::Again => break,
                    Err(_) => {
                        p.backlog.pop_front();
                    }
                }
            }
            if !p.backlog.is_empty() {
                left += 1;
            }
        }
        self.backlogged = left;
        work
    }

    // -----------------------------------------------------------------
    // Dispatch.

    /// Handles a command; `false` leaves it in the ring (a message over
    /// the hard limit of the unexpected budget).
    fn on_command(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) -> bool {
        let c = &m.cmd;
        if c.flags & !flag::ALL != 0 {
            tracing::debug!(flags = c.flags, "shm: command with unknown flags dropped");
            return true;
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

    /// `PAUSE` / `RESUME` from a receiver of ours, which names its region.
    fn on_flow(sh: &EpShared, m: &Message, p: &Payload<'_>, pause: bool) {
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

    // -----------------------------------------------------------------
    // The receive engine's work.

    /// Takes what the receive engine asks of the transport: fetching an
    /// announced message into its receive, releasing or acknowledging a
    /// sender, `PAUSE` / `RESUME`.
    pub(crate) fn run_actions(&mut self, sh: &EpShared, b: &Binds) {
        while let Some(a) = self.rx.next_action() {
            match a {
                Action::Fetch { recv, meta, remote } => {
                    self.accept_rts(sh, b, recv, meta, remote);
                }
                Action::Release(r) => self.reply(sh, r.peer, Reply::ack(r.id, None)),
                Action::Ack((pi, id)) => self.reply(sh, pi, Reply::ack(id, None)),
                Action::Pause(p) => self.flow(sh, p, true),
                Action::Resume(p) => {
                    // Room again: a message left in the ring is tried again.
                    self.ring_held = false;
                    self.flow(sh, p, false);
                }
            }
        }
    }

    /// Sends `PAUSE` (`pause`) or `RESUME` to peer `p`, if it is still
    /// the peer at that index.
    fn flow(&mut self, sh: &EpShared, (pi, uid): Peer, pause: bool) {
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
    fn cq_room(&mut self, b: &Binds) {
        self.rx.cq_read(b);
        if self.cq_held && b.rx_cq.as_ref().is_none_or(|c| c.has_room()) {
            self.cq_held = false;
            self.ring_held = false;
        }
    }

    /// Whether an RMA write or atomic with `flags` may be taken now. One
    /// that carries remote CQ data in `FI_RX_CQ_DATA` mode may have to be
    /// kept as an unexpected entry, so over the hard limit it waits in the
    /// ring while no receive is posted; otherwise its completion goes to
    /// the receive CQ, so while that is full it waits in the ring until
    /// the application reads (a sender that does not honour `PAUSE`
    /// cannot grow the CQ). It is applied only once taken.
    #[inline]
    fn cq_data_room(&mut self, sh: &EpShared, b: &Binds, flags: u16) -> bool {
        if flags & flag::CQ_DATA == 0 {
            return true;
        }
        if sh.info.mode.contains(Mode::RX_CQ_DATA) {
            return self.rx.unexpected_bytes() + UNEXP_COST <= UNEXP_HARD
                || self.rx.posted(false) > 0;
        }
        if b.rx_cq.as_ref().is_some_and(|c| c.is_full()) {
            self.cq_held = true;
            return false;
        }
        true
    }

    /// The number of peer `pi`.
    fn peer_uid(&self, pi: u32) -> u64 {
        match self.peers.get(pi as usize) {
            Some(Some(p)) => p.uid,
            _ => u64::MAX,
        }
    }

    fn unknown_sender(m: &Message) {
        tracing::debug!(
            pid = m.sender_pid,
            ep = m.cmd.src,
            op = m.cmd.op,
            "shm: command from a sender that did not introduce itself dropped"
        );
    }

    // -----------------------------------------------------------------
    // Messages.

    fn on_msg(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) -> bool {
        let Some(pi) = self.peer_of(m) else {
            Self::unknown_sender(m);
            return true;
        };
        let c = &m.cmd;
        let tagged = c.flags & flag::TAGGED != 0;
        let tag = if tagged { c.tag } else { 0 };
        let data = (c.flags & flag::CQ_DATA != 0).then_some(c.data);
        let ack = (c.flags & flag::ACK_REQ != 0).then_some(c.aux[0]);
        let src = self.src_of(b, pi, sh.directed);
        let len = m.len as u64;
        if let Some(id) = self.rx.arrive(tagged, tag, src, len) {
            if let Some(r) = self.rx.recv(id) {
                // SAFETY: the receive contract of recvmsg / trecvmsg: the
                // buffer is valid and ours until its completion.
                unsafe { r.buf.fill_from(0, p, 0, m.len) };
            }
            let meta = Meta {
                tagged,
                tag,
                len,
                data,
                src,
            };
            self.rx.complete(b, id, meta);
            if let Some(id) = ack {
                self.reply(sh, pi, Reply::ack(id, None));
            }
            return true;
        }
        let peer = (pi, self.peer_uid(pi));
        if !self.rx.admit(peer, m.len) {
            // Over the hard limit: the message stays in the ring.
            return false;
        }
        let mut v = self.rx.take_buf(m.len);
        v.resize(m.len, 0);
        p.copy_to(&mut v);
        let entry = Entry {
            len,
            data,
            peer,
            held: Held::Bytes {
                bytes: v,
                ack: ack.map(|id| (pi, id)),
            },
        };
        self.rx.keep(tagged, tag, src, entry);
        true
    }

    fn on_rts(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) -> bool {
        let Some(pi) = self.peer_of(m) else {
            Self::unknown_sender(m);
            return true;
        };
        let c = &m.cmd;
        let id = c.aux[1];
        let len = usize_of(c.aux[0]);
        let mut raw = [0u8; IOV_LIMIT * 16];
        let iovs = if p.len() <= raw.len() {
            let n = p.copy_to(&mut raw);
            wire::decode_iovs(&raw[..n])
        } else {
            None
        };
        let Some((iovs, n)) = iovs.filter(|(v, n)| {
            v.iter()
                .take(*n)
                .try_fold(0u64, |a, (_, l)| a.checked_add(*l))
                .is_some_and(|t| usize_of(t) == len)
        }) else {
            tracing::debug!("shm: malformed rendezvous request refused");
            self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Inval)));
            return true;
        };
        if len > sh.info.ep_attr.max_msg_size {
            tracing::debug!(len, "shm: rendezvous request over max_msg_size refused");
            self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::MsgSize)));
            return true;
        }
        let tagged = c.flags & flag::TAGGED != 0;
        let tag = if tagged { c.tag } else { 0 };
        let data = (c.flags & flag::CQ_DATA != 0).then_some(c.data);
        let src = self.src_of(b, pi, sh.directed);
        let rts = Rts {
            peer: pi,
            id,
            len,
            iovs,
            n,
            push: c.flags & flag::PUSH != 0,
        };
        let meta = Meta {
            tagged,
            tag,
            len: len as u64,
            data,
            src,
        };
        if let Some(id) = self.rx.arrive(tagged, tag, src, len as u64) {
            self.accept_rts(sh, b, id, meta, rts);
            return true;
        }
        let peer = (pi, self.peer_uid(pi));
        if !self.rx.admit(peer, 0) {
            return false;
        }
        let entry = Entry {
            len: len as u64,
            data,
            peer,
            held: Held::Remote(rts),
        };
        self.rx.keep(tagged, tag, src, entry);
        true
    }

    /// Takes an announced message into receive `id`: pulls it with
    /// cross-memory attach, or clears the sender to push it.
    fn accept_rts(&mut self, sh: &EpShared, b: &Binds, id: RecvId, meta: Meta, r: Rts) {
        let buf = self.rx.recv(id).map_or(Pieces::EMPTY, |recv| recv.buf);
        let accept = r.len.min(buf.len());
        let Some(Some(peer)) = self.peers.get_mut(r.peer as usize) else {
            let err = Error::new(ErrorKind::ConnReset, "shm: the sender went away");
            return self.rx.fail(b, id, meta.tagged, &err);
        };
        if accept == 0 {
            self.rx.complete(b, id, meta);
            return self.reply(sh, r.peer, Reply::ack(r.id, None));
        }
        if !r.push && !peer.no_cma {
            if !peer.region.is_open() {
                let err = Error::new(ErrorKind::ConnReset, "shm: the sender closed its endpoint");
                return self.rx.fail(b, id, meta.tagged, &err);
            }
            if peer.cma_ok && accept >= sh.split_min {
                return self.split_rts(sh, b, id, buf, meta, r, accept);
            }
            let local = buf.sub(0, accept);
            let (remote, k) = clip(&r.iovs[..r.n], accept);
            // SAFETY: `local` is the receive buffer (the receive contract);
            // the remote ranges are only interpreted by the kernel, in the
            // sender's address space.
            let res = unsafe { cma::transfer(peer.pid, &local.pairs(), &remote[..k], true) };
            match res {
                Ok(()) => {
                    peer.cma_ok = true;
                    self.rx.complete(b, id, meta);
                    return self.reply(sh, r.peer, Reply::ack(r.id, None));
                }
                Err(CmaError::Refused) => {
                    tracing::warn!(peer = %peer.addr, "shm: cross-memory attach refused by the kernel for this peer; using bounce buffers");
                    peer.no_cma = true;
                }
                Err(CmaError::Gone) => {
                    let err = Error::new(ErrorKind::ConnReset, "shm: the sender exited");
                    return self.rx.fail(b, id, meta.tagged, &err);
                }
                Err(e) => {
                    let err = Error::new(
                        e.kind(),
                        "shm: cross-memory attach of the sender's buffer failed",
                    );
                    self.rx.fail(b, id, meta.tagged, &err);
                    return self.reply(sh, r.peer, Reply::ack(r.id, Some(e.kind())));
                }
            }
        }
        let xid = self.xfers.insert(RxXfer {
            peer: r.peer,
            split: None,
            op_id: r.id,
            dest: XferDest::Recv { id, meta, buf },
            want: accept,
            got: 0,
            failed: None,
            acked: false,
        });
        self.reply(
            sh,
            r.peer,
            Reply::Cts {
                id: r.id,
                xfer: xid,
                accept: accept as u64,
            },
        );
    }

    /// Split rendezvous: asks the sender to write the tail of the message
    /// into `op` (from [`split_point`] on) while this side pulls the head,
    /// so both processes copy at once.
    #[allow(clippy::too_many_arguments)]
    fn split_rts(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        id: RecvId,
        buf: Pieces,
        meta: Meta,
        r: Rts,
        accept: usize,
    ) {
        let split = split_point(accept);
        let tail = buf.sub(split, accept - split);
        let mut raw = [0u8; IOV_LIMIT * 16];
        let n = wire::encode_iovs(&tail.pairs(), &mut raw);
        let local = buf.sub(0, split);
        let pid = match self.peers.get(r.peer as usize) {
            Some(Some(p)) => p.pid,
            _ => return,
        };
        let xid = self.xfers.insert(RxXfer {
            peer: r.peer,
            split: Some(r),
            op_id: r.id,
            dest: XferDest::Recv { id, meta, buf },
            want: accept,
            got: 0,
            failed: None,
            acked: false,
        });
        self.reply(
            sh,
            r.peer,
            Reply::Split {
                id: r.id,
                xfer: xid,
                split: split as u64,
                accept: accept as u64,
                iovs: &raw[..n],
            },
        );
        let (remote, k) = clip(&r.iovs[..r.n], split);
        // SAFETY: `local` is the head of the receive buffer (the receive
        // contract; the sender writes only the tail); the remote ranges are
        // interpreted by the kernel in the sender's address space.
        let res = unsafe { cma::transfer(pid, &local.pairs(), &remote[..k], true) };
        if res.is_ok() {
            // Acknowledge now, while waiting for the sender's part: the
            // sender finishes once its own write worked, and the ACK is off
            // the path to our completion.
            if let Some(x) = self.xfers.get_mut(xid) {
                x.acked = true;
            }
            self.reply(sh, r.peer, Reply::AckHead { id: r.id });
        }
        self.split_progress(sh, b, xid, split, res.err());
    }

    /// Part `len` of a split transfer is in place (or failed).
    fn split_progress(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        xid: u64,
        len: usize,
        err: Option<CmaError>,
    ) {
        let Some(x) = self.xfers.get_mut(xid) else {
            return;
        };
        if let Some(e) = err {
            x.failed.get_or_insert(e.kind());
        }
        x.got += len;
        if x.got >= x.want {
            if let Some(x) = self.xfers.remove(xid) {
                let failed = x.failed;
                self.finish_xfer(sh, b, x, failed);
            }
        }
    }

    /// `SPLIT` (at the sender): write the tail of our message into the
    /// receiver's buffer, then say so.
    fn on_split(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let c = &m.cmd;
        let _ = b;
        let Some(op) = self.ops.get(c.tag) else {
            return tracing::debug!("shm: SPLIT for an unknown operation dropped");
        };
        if op.peer.pid != m.sender_pid {
            return tracing::debug!("shm: SPLIT from a process that is not the receiver dropped");
        }
        let split = usize_of(c.aux[0]);
        let accept = usize_of(c.aux[1]);
        let mut raw = [0u8; IOV_LIMIT * 16];
        let iovs = if p.len() <= raw.len() {
            let n = p.copy_to(&mut raw);
            wire::decode_iovs(&raw[..n])
        } else {
            None
        };
        let status = match iovs {
            Some((v, n))
                if split < accept
                    && accept <= op.buf.len()
                    && v.iter()
                        .take(n)
                        .try_fold(0u64, |a, (_, l)| a.checked_add(*l))
                        .is_some_and(|t| usize_of(t) == accept - split) =>
            {
                let src = op.buf.sub(split, accept - split);
                if sh.cma && !op.peer.no_cma.load(std::sync::atomic::Ordering::Relaxed) {
                    // SAFETY: our message buffer, readable until the
                    // operation completes (the send contract); the remote
                    // ranges are the receiver's, interpreted by the kernel.
                    match unsafe { cma::transfer(op.peer.pid, &src.pairs(), &v[..n], false) } {
                        Ok(()) => None,
                        Err(e) => Some(e.kind()),
                    }
                } else {
                    Some(ErrorKind::Perm)
                }
            }
            _ => Some(ErrorKind::Inval),
        };
        let cmd = crate::ring::Command {
            op: op::PUT_DONE,
            src: sh.id,
            tag: c.data,
            data: wire::status_of(status),
            ..crate::ring::Command::default()
        };
        let peer = op.peer.clone();
        if status.is_some() {
            if let Some(op) = self.ops.get_mut(c.tag) {
                op.put_failed = true;
            }
        }
        if peer.sender.try_send(&cmd, &[]).is_err() {
            // The receiver's ring is full: queue it with the operations
            // to start (it only ever waits behind them).
            self.put_done_backlog.push_back((peer, cmd));
        }
    }

    /// `PUT_DONE` (at the receiver): the sender wrote the tail of a split
    /// transfer; if it could not, pull the tail ourselves.
    fn on_put_done(&mut self, sh: &EpShared, b: &Binds, m: &Message) {
        let c = &m.cmd;
        let pi = self.peer_of(m);
        let Some(x) = self.xfers.get_mut(c.tag) else {
            return tracing::debug!("shm: PUT_DONE for an unknown transfer dropped");
        };
        let Some(r) = x.split.filter(|_| pi == Some(x.peer)) else {
            return tracing::debug!("shm: PUT_DONE out of place dropped");
        };
        let (want, split) = (x.want, split_point(x.want));
        let err = match wire::kind_of_status(c.data) {
            None => None,
            Some(_) => {
                // The sender waits for a final ACK even after an early one.
                x.acked = false;
                // Pull the tail ourselves.
                let tail = match &x.dest {
                    XferDest::Recv { buf, .. } => buf.sub(split, want - split),
                    XferDest::Write { .. } => return,
                };
                let (remote, k) = sub_list(&r.iovs[..r.n], split, want - split);
                let pid = match self.peers.get(x.peer as usize) {
                    Some(Some(p)) => p.pid,
                    _ => return,
                };
                // SAFETY: the tail of the receive buffer (the receive
                // contract); the remote ranges are the sender's.
                unsafe { cma::transfer(pid, &tail.pairs(), &remote[..k], true) }.err()
            }
        };
        self.split_progress(sh, b, c.tag, want - split, err);
    }

    /// A receive from the application (posted through the queue).
    fn take_post(&mut self, sh: &EpShared, b: &Binds, r: RxReq) {
        // A message left in the ring may match this receive.
        self.ring_held = false;
        if r.flags.contains(OpFlags::MULTI_RECV) {
            self.rx
                .set_min_multi_recv(sh.min_multi_recv.load(std::sync::atomic::Ordering::Relaxed));
        }
        let msg = Msg {
            iov: r.buf.pieces(),
            desc: &[],
            addr: r.src,
            tag: r.tag,
            ignore: r.ignore,
            context: r.context,
            data: 0,
        };
        if let Err(e) = self.rx.post(b, &msg, r.flags, r.tagged) {
            // Checked when it was posted; reported rather than lost.
            let entry = CqEntry {
                context: r.context,
                flags: msg_flags(r.tagged, true),
                ..CqEntry::default()
            };
            b.failed(true, entry, &e, 0);
        }
    }

    /// Takes every receive request still queued (before a cancel or a
    /// peek).
    pub(crate) fn drain_posted(&mut self, sh: &EpShared, b: &Binds) {
        while let Some(r) = sh.posted.pop() {
            self.take_post(sh, b, r);
        }
        self.run_actions(sh, b);
    }

    /// Remote CQ data of an RMA write or atomic: a completion at the
    /// target (consuming a posted receive in FI_RX_CQ_DATA mode).
    fn remote_cq_data(&mut self, sh: &EpShared, b: &Binds, pi: u32, data: u64, src: FiAddr) {
        let consume = sh.info.mode.contains(Mode::RX_CQ_DATA);
        let peer = (pi, self.peer_uid(pi));
        self.rx.remote_cq_data(b, data, src, peer, consume);
    }

    // -----------------------------------------------------------------
    // Pushed data and answers.

    fn on_data(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let c = &m.cmd;
        let off = usize_of(c.data);
        if c.flags & flag::TO_TX != 0 {
            // Read data or atomic results for one of our operations.
            let Some(op) = self.ops.get_mut(c.tag) else {
                return tracing::debug!("shm: data for an unknown operation dropped");
            };
            if op.peer.pid != m.sender_pid || off.checked_add(m.len).is_none_or(|e| e > op.expect) {
                return tracing::debug!("shm: data outside its operation dropped");
            }
            // SAFETY: the buffer of a read / fetching atomic: the operation's
            // contract keeps it valid and ours until completion.
            let n = unsafe { op.buf.fill_from(off, p, 0, m.len) };
            op.got += n;
            return;
        }
        let pi = self.peer_of(m);
        let Some(x) = self.xfers.get_mut(c.tag) else {
            return tracing::debug!("shm: data for an unknown transfer dropped");
        };
        if pi != Some(x.peer) || off != x.got || m.len > x.want - x.got {
            return tracing::debug!("shm: data out of place in a transfer dropped");
        }
        let n = m.len;
        let ok = match &x.dest {
            XferDest::Recv { buf, .. } => {
                // SAFETY: the matched receive's buffer (receive contract).
                unsafe { buf.fill_from(off, p, 0, n) };
                Ok(())
            }
            XferDest::Write { rma, n: nr, .. } => write_ranges(sh, &rma[..*nr], off, p, n),
        };
        x.got += n;
        let done = x.got == x.want;
        if let Err(kind) = ok {
            if let Some(x) = self.xfers.remove(c.tag) {
                self.finish_xfer(sh, b, x, Some(kind));
            }
        } else if done {
            if let Some(x) = self.xfers.remove(c.tag) {
                self.finish_xfer(sh, b, x, None);
            }
        }
    }

    /// A pushed transfer is complete (or failed at the target).
    pub(crate) fn finish_xfer(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        x: RxXfer,
        err: Option<ErrorKind>,
    ) {
        match x.dest {
            XferDest::Recv { id, meta, .. } => match err {
                None => self.rx.complete(b, id, meta),
                Some(k) => {
                    let e = Error::new(k, "shm: receiving the pushed message failed");
                    self.rx.fail(b, id, meta.tagged, &e);
                }
            },
            XferDest::Write { data, .. } => {
                if err.is_none() {
                    if let Some(c) = &b.cntr_remote_write {
                        c.add(1);
                    }
                    if let Some(d) = data {
                        let src = self.src_of(b, x.peer, false);
                        self.remote_cq_data(sh, b, x.peer, d, src);
                    }
                }
            }
        }
        if !x.acked {
            self.reply(sh, x.peer, Reply::ack(x.op_id, err));
        }
    }

    // -----------------------------------------------------------------
    // RMA and atomics at the target.

    /// Reads and checks the descriptor at the start of a request; answers
    /// `Inval` to the sender when it is malformed.
    fn desc_of(&mut self, sh: &EpShared, pi: u32, m: &Message, p: &Payload<'_>) -> Option<Desc> {
        let mut raw = [0u8; wire::DESC_MAX];
        let n = p.copy_to(&mut raw);
        let d = Desc::decode(&raw[..n]).filter(|d| d.len <= m.len && d.rma_total().is_some());
        if d.is_none() {
            tracing::debug!("shm: malformed RMA / atomic descriptor refused");
            self.reply(sh, pi, Reply::ack(m.cmd.tag, Some(ErrorKind::Inval)));
        }
        d
    }

    /// Checks every range of `d` for `need`; the refusal's kind.
    fn check_ranges(sh: &EpShared, rma: &[RmaIov], need: MrAccess) -> Result<(), ErrorKind> {
        for r in rma {
            sh.mr
                .check(r.key, r.addr, r.len, need)
                .map_err(|e| refusal(e.kind()))?;
        }
        Ok(())
    }

    fn on_write(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let Some(pi) = self.peer_of(m) else {
            return Self::unknown_sender(m);
        };
        let c = m.cmd;
        let Some(d) = self.desc_of(sh, pi, m, p) else {
            return;
        };
        let id = c.tag;
        let total = d.rma_total().unwrap_or(usize::MAX);
        let data = (c.flags & flag::CQ_DATA != 0).then_some(c.data);
        let bad = if d.atomic.is_some() {
            Err(ErrorKind::Inval)
        } else {
            Self::check_ranges(sh, d.rma(), MrAccess::REMOTE_WRITE)
        };
        if let Err(k) = bad {
            return self.reply(sh, pi, Reply::ack(id, Some(k)));
        }
        let inline = c.flags & flag::INLINE != 0;
        let push = c.flags & flag::PUSH != 0 || d.n_local == 0;
        let status = if inline {
            if m.len - d.len != total {
                Err(ErrorKind::Inval)
            } else {
                write_ranges(sh, d.rma(), 0, p, total).map(|()| true)
            }
        } else if push {
            Ok(false)
        } else if d.local_total() != Some(total) {
            Err(ErrorKind::Inval)
        } else {
            self.pull_write(sh, pi, &d)
        };
        match status {
            Ok(true) => {
                if let Some(cn) = &b.cntr_remote_write {
                    cn.add(1);
                }
                if let Some(v) = data {
                    let src = self.src_of(b, pi, false);
                    self.remote_cq_data(sh, b, pi, v, src);
                }
                self.reply(sh, pi, Reply::ack(id, None));
            }
            Ok(false) => {
                // Push mode: the initiator sends the data once cleared.
                let mut rma = [RmaIov {
                    addr: 0,
                    len: 0,
                    key: 0,
                }; wire::RMA_IOV_LIMIT];
                for (dst, src) in rma.iter_mut().zip(d.rma()) {
                    *dst = *src;
                }
                let x = RxXfer {
                    peer: pi,
                    split: None,
                    op_id: id,
                    dest: XferDest::Write {
                        rma,
                        n: d.n_rma,
                        data,
                    },
                    want: total,
                    got: 0,
                    failed: None,
                    acked: false,
                };
                if total == 0 {
                    return self.finish_xfer(sh, b, x, None);
                }
                let xid = self.xfers.insert(x);
                self.reply(
                    sh,
                    pi,
                    Reply::Cts {
                        id,
                        xfer: xid,
                        accept: total as u64,
                    },
                );
            }
            Err(k) => self.reply(sh, pi, Reply::ack(id, Some(k))),
        }
    }

    /// An RMA write by cross-memory attach: each checked range is filled
    /// from the initiator's buffer while its registration is held.
    /// `Ok(true)` done, `Ok(false)` the kernel refused (push instead).
    fn pull_write(&mut self, sh: &EpShared, pi: u32, d: &Desc) -> Result<bool, ErrorKind> {
        let Some(Some(peer)) = self.peers.get_mut(pi as usize) else {
            return Err(ErrorKind::ConnReset);
        };
        if peer.no_cma {
            return Ok(false);
        }
        cma_ranges(sh, peer, d, MrAccess::REMOTE_WRITE)
    }

    fn on_read(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let Some(pi) = self.peer_of(m) else {
            return Self::unknown_sender(m);
        };
        let c = m.cmd;
        let Some(d) = self.desc_of(sh, pi, m, p) else {
            return;
        };
        let id = c.tag;
        let total = d.rma_total().unwrap_or(usize::MAX);
        let bad = if d.atomic.is_some() || m.len != d.len {
            Err(ErrorKind::Inval)
        } else {
            Self::check_ranges(sh, d.rma(), MrAccess::REMOTE_READ)
        };
        if let Err(k) = bad {
            return self.reply(sh, pi, Reply::ack(id, Some(k)));
        }
        let Some(Some(peer)) = self.peers.get_mut(pi as usize) else {
            return;
        };
        let inline_cap = peer.sender.inline_capacity();
        let push = c.flags & flag::PUSH != 0 || d.n_local == 0 || peer.no_cma;
        if total <= inline_cap {
            // Small: the data rides in the ACK.
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            let r = read_ranges(sh, d.rma(), &mut buf);
            let reply = match r {
                Ok(()) => {
                    if let Some(cn) = &b.cntr_remote_read {
                        cn.add(1);
                    }
                    Reply::AckData { id, bytes: &buf }
                }
                Err(k) => Reply::ack(id, Some(k)),
            };
            self.reply(sh, pi, reply);
            self.scratch = buf;
            return;
        }
        if !push {
            if d.local_total() != Some(total) {
                return self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Inval)));
            }
            match push_read(sh, peer, &d) {
                Ok(true) => {
                    if let Some(cn) = &b.cntr_remote_read {
                        cn.add(1);
                    }
                    return self.reply(sh, pi, Reply::ack(id, None));
                }
                Ok(false) => {}
                Err(k) => return self.reply(sh, pi, Reply::ack(id, Some(k))),
            }
        }
        let Some(Some(peer)) = self.peers.get(pi as usize) else {
            return;
        };
        let mut rma = [RmaIov {
            addr: 0,
            len: 0,
            key: 0,
        }; wire::RMA_IOV_LIMIT];
        for (dst, src) in rma.iter_mut().zip(d.rma()) {
            *dst = *src;
        }
        self.pushes.push_back(Push {
            to: peer.sender.clone(),
            dest: id,
            to_tx: true,
            src: PushSrc::Mem { rma, n: d.n_rma },
            off: 0,
            end: total,
            op: None,
            rx_peer: Some(pi),
            ack: Some(id),
            count_read: true,
        });
    }

    fn on_atomic(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let Some(pi) = self.peer_of(m) else {
            return Self::unknown_sender(m);
        };
        let c = m.cmd;
        let Some(d) = self.desc_of(sh, pi, m, p) else {
            return;
        };
        let id = c.tag;
        let Some((dt, aop, kind)) = d.atomic else {
            return self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Inval)));
        };
        let count = d.rma_total().unwrap_or(usize::MAX);
        let want = kind
            .payload_len(dt, aop, count as u64)
            .and_then(|v| usize::try_from(v).ok());
        if count == 0 || count > MAX_ATOMIC_COUNT || want != Some(m.len - d.len) {
            return self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Inval)));
        }
        let mut operands = std::mem::take(&mut self.scratch);
        operands.clear();
        operands.resize(m.len - d.len, 0);
        p.copy_range_to(d.len, &mut operands);
        let mut results = std::mem::take(&mut self.results);
        results.clear();
        let status = atomic::execute(&sh.mr, kind, dt, aop, d.rma(), &operands, &mut results).err();
        if status.is_none() {
            let cn = if aop == AtomicOp::AtomicRead {
                &b.cntr_remote_read
            } else {
                &b.cntr_remote_write
            };
            if let Some(cn) = cn {
                cn.add(1);
            }
            if c.flags & flag::CQ_DATA != 0 {
                let src = self.src_of(b, pi, false);
                self.remote_cq_data(sh, b, pi, c.data, src);
            }
        } else {
            tracing::debug!(error = ?status, "shm: refused an atomic operation");
        }
        let reply = match (kind, status) {
            (AtomicKind::Plain, s) | (_, s @ Some(_)) => Reply::ack(id, s),
            _ => Reply::AckData {
                id,
                bytes: &results,
            },
        };
        self.reply(sh, pi, reply);
        self.scratch = operands;
        self.results = results;
    }

    // -----------------------------------------------------------------
    // Liveness.

    /// Whether the process that claimed a slot or holds a bounce buffer
    /// of our ring (by its pid, as it recorded it) is gone, for
    /// [`Receiver::recover`]. A pid of a known peer of another PID
    /// namespace means some other process here (or none): such a peer is
    /// judged by its region's lock instead. Other pids are asked about
    /// here ([`process_gone`](crate::region::process_gone)).
    pub(crate) fn claimer_gone(&self, pid: u32) -> bool {
        let mut foreign = None;
        for p in self.peers.iter().flatten() {
            if p.pid == pid && !p.region.same_pid_ns() {
                let gone = p.region.owner_status() == OwnerStatus::Gone;
                if !gone {
                    return false;
                }
                foreign = Some(gone);
            }
        }
        foreign.unwrap_or_else(|| crate::region::process_gone(pid))
    }

    /// Forgets peers whose endpoint closed or whose process exited.
    /// `deep`: ask the kernel about peers with something pending
    /// (otherwise only the cheap `alive` word is read). Returns whether a
    /// peer was dropped.
    pub(crate) fn check_peers(&mut self, sh: &EpShared, b: &Binds, deep: bool) -> bool {
        let mut gone = Vec::new();
        for (i, p) in self.peers.iter().enumerate() {
            let Some(p) = p else { continue };
            let dead =
                !p.region.is_open() || (deep && p.region.owner_status() != OwnerStatus::Alive);
            if dead {
                gone.push(i as u32);
            }
        }
        for &pi in &gone {
            self.drop_peer(sh, b, pi);
        }
        !gone.is_empty()
    }
}

/// The error kind a refused remote access reports.
fn refusal(k: ErrorKind) -> ErrorKind {
    match k {
        ErrorKind::NoKey => ErrorKind::KeyRejected,
        k => k,
    }
}

/// Where a split rendezvous of `len` bytes splits: the receiver pulls
/// the bytes before this point, the sender writes the rest. The sender
/// starts one command later than the receiver and its `PUT_DONE` takes
/// another to arrive, so the receiver takes [`SPLIT_BIAS`] more than the
/// sender (at most three quarters), on a cache line.
fn split_point(len: usize) -> usize {
    ((len + SPLIT_BIAS) / 2).min(len - len / 4) & !63
}

/// The first `len` bytes of a list of (address, length) pieces.
fn clip(v: &[(u64, u64)], len: usize) -> ([(u64, u64); IOV_LIMIT], usize) {
    sub_list(v, 0, len)
}

/// Bytes `off..off + len` of a list of (address, length) pieces.
pub(crate) fn sub_list(
    v: &[(u64, u64)],
    mut off: usize,
    mut len: usize,
) -> ([(u64, u64); IOV_LIMIT], usize) {
    let mut out = [(0u64, 0u64); IOV_LIMIT];
    let mut n = 0;
    for &(a, l) in v {
        if len == 0 {
            break;
        }
        let l = usize_of(l);
        if off >= l {
            off -= l;
            continue;
        }
        let k = (l - off).min(len);
        if let Some(o) = out.get_mut(n) {
            *o = (a.wrapping_add(off as u64), k as u64);
            n += 1;
        }
        len -= k;
        off = 0;
    }
    (out, n)
}

/// Copies the last `len` bytes of a payload into checked registered
/// ranges, at byte `off` of the ranges' concatenation (inline writes: the
/// data after the descriptor, at 0; pushed chunks: the whole payload, at
/// the chunk's offset). Each piece is copied while its registration is
/// held.
fn write_ranges(
    sh: &EpShared,
    rma: &[RmaIov],
    off: usize,
    p: &Payload<'_>,
    len: usize,
) -> Result<(), ErrorKind> {
    // Inline writes carry the descriptor first; pushed chunks carry only
    // data. The payload offset of the data is what precedes it.
    let data_start = p.len() - len;
    let mut pos = 0usize;
    let mut copied = 0usize;
    for r in rma {
        let (start, end) = (pos, pos + r.len);
        pos = end;
        let lo = off.max(start);
        let hi = (off + len).min(end);
        if lo >= hi {
            continue;
        }
        let at = r.addr.wrapping_add((lo - start) as u64);
        let n = hi - lo;
        sh.mr
            .with_access(r.key, at, n, MrAccess::REMOTE_WRITE, |base| {
                // SAFETY: `base..base + n` is checked registered memory
                // held registered during the copy; mr_reg's contract lets
                // peers write it.
                let dst = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, n) };
                p.copy_range_to(data_start + (lo - off), dst);
            })
            .map_err(|e| refusal(e.kind()))?;
        copied += n;
    }
    if copied == len {
        Ok(())
    } else {
        Err(ErrorKind::Inval)
    }
}

/// Appends the bytes of checked registered ranges to `out`.
fn read_ranges(sh: &EpShared, rma: &[RmaIov], out: &mut Vec<u8>) -> Result<(), ErrorKind> {
    for r in rma {
        sh.mr
            .with_access(r.key, r.addr, r.len, MrAccess::REMOTE_READ, |base| {
                // SAFETY: checked registered memory held registered while
                // it is copied (mr_reg's contract lets peers read it).
                let src = unsafe { std::slice::from_raw_parts(base as *const u8, r.len) };
                out.extend_from_slice(src);
            })
            .map_err(|e| refusal(e.kind()))?;
    }
    Ok(())
}

/// An RMA read by cross-memory attach: each checked range is written into
/// the initiator's buffer. `Ok(false)` when the kernel refused (push
/// instead).
fn push_read(sh: &EpShared, peer: &mut RxPeer, d: &Desc) -> Result<bool, ErrorKind> {
    cma_ranges(sh, peer, d, MrAccess::REMOTE_READ)
}

/// Moves the data of RMA descriptor `d` between our registered ranges and
/// the initiator's buffer by cross-memory attach, each range checked for
/// `access` and held registered during its copy: REMOTE_WRITE fills our
/// ranges from the initiator, REMOTE_READ fills the initiator's buffer.
/// `Ok(false)` when the kernel refused before anything moved (the peer is
/// then marked for bounce buffers), `Perm` when it refused midway.
fn cma_ranges(
    sh: &EpShared,
    peer: &mut RxPeer,
    d: &Desc,
    access: MrAccess,
) -> Result<bool, ErrorKind> {
    let into_local = access == MrAccess::REMOTE_WRITE;
    let mut off = 0usize;
    for r in d.rma() {
        let (remote, k) = sub_list(d.local(), off, r.len);
        let res = sh
            .mr
            .with_access(r.key, r.addr, r.len, access, |base| {
                // SAFETY: `base..base + r.len` is checked registered memory
                // whose registration is held during the call (mr_reg's
                // contract lets peers read and write it); the remote ranges
                // are interpreted by the kernel only.
                unsafe { cma::transfer(peer.pid, &[(base, r.len)], &remote[..k], into_local) }
            })
            .map_err(|e| refusal(e.kind()))?;
        match res {
            Ok(()) => {}
            Err(CmaError::Refused) => {
                tracing::warn!(peer = %peer.addr, "shm: cross-memory attach refused by the kernel for this peer; using bounce buffers");
                peer.no_cma = true;
                if off == 0 {
                    return Ok(false);
                }
                return Err(ErrorKind::Perm);
            }
            Err(e) => return Err(e.kind()),
        }
        off += r.len;
    }
    Ok(true)
}
