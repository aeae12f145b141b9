//! The endpoint itself: its state behind one mutex ([`State`]), the
//! shared part of RDM and MSG endpoints ([`EpInner`]), the dispatch of
//! decoded frames to the side that handles them, and progress.
//!
//! The rooms of an endpoint (all `impl EpInner`):
//! - `tx`: sends, rendezvous send, RMA and atomics at the initiator, frame
//!   queues, and the answers to this side's requests;
//! - `rx`: reading connections, message and rendezvous frames into the
//!   kit's receive engine, and the engine's actions;
//! - `rma`: RMA and atomics at the target;
//! - `conn_state`: connections (adding, source, MSG management frames)
//!   and their failure;
//! - `rdm` / `msg`: how RDM and MSG connections are made.
//!
//! Everything of one endpoint sits behind one mutex, taken by the data
//! operations (uncontended in the common case) and tried by progress (a
//! thread that finds it held leaves the work to its holder).

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use fabric_core::kit::binds::Binds;
use fabric_core::kit::hash::IdMap;
use fabric_core::kit::mr::MrTable;
use fabric_core::kit::patient_lock;
use fabric_core::kit::rx::Action;
use fabric_core::{Address, Caps, Error, ErrorKind, Info, Result};
use spin::mutex::{SpinMutex, SpinMutexGuard};

use super::conns::Conns;
use super::srx::{Pass, SrxInner};
use crate::backoff::AcceptBackoff;
use crate::conn::{Conn, Done, Engine, Phase, Queued, Sink, Src, TcpWire};
use crate::limits::RX_BUDGET;
use crate::progress::{EpProgress, Poller, conn_of, ep_of, token};
use crate::sys;
use crate::wire::{Frame, Limits, Op};

/// What an endpoint knows about one peer (RDM: by the peer's listening
/// address; MSG: the one peer).
#[derive(Debug, Default)]
pub(crate) struct Peer {
    /// The established connection frames to the peer go on.
    pub conn: Option<u32>,
    /// The connection this side is opening to the peer.
    pub connecting: Option<u32>,
    /// Frames waiting for an established connection.
    pub backlog: VecDeque<Queued>,
    /// Since when the backlog waits for the peer's own connection (this
    /// side's was refused in a simultaneous connect).
    pub orphaned: Option<Instant>,
}

/// MSG endpoint connection state.
#[derive(Debug, Default)]
pub(crate) struct MsgState {
    /// The connection.
    pub conn: Option<u32>,
    /// The peer key of the connection.
    pub peer: Option<SocketAddr>,
    /// `Connected` was reported.
    pub connected: bool,
    /// The connection ended (shutdown, failure or rejection).
    pub closed: bool,
    /// The end of the connection was reported to the EQ.
    pub reported: bool,
    /// The version a connection request negotiated (passive side).
    pub version: Option<u8>,
    /// The local address once connected.
    pub local: Option<Address>,
}

/// The mutable state of an endpoint.
#[derive(Debug)]
pub(crate) struct State {
    pub conns: Conns<Conn>,
    next_op: u64,
    /// Posted receives, unexpected messages, matching and the budget.
    pub rx: Engine,
    /// Bytes of unexpected payloads being read into buffers (admitted,
    /// not kept yet): counted with what the engine keeps, so that many
    /// connections cannot each fill a budget at once.
    pub(super) unexp_reading: usize,
    pub peers: HashMap<SocketAddr, Peer>,
    /// AV handle to peer key (RDM), filled on first use.
    pub by_fi: IdMap<u64, SocketAddr>,
    /// The AV's removal count `by_fi` was filled under.
    pub by_fi_removals: u64,
    pub listener: Option<TcpListener>,
    pub msg: MsgState,
    /// Connections to read again now (a paused one whose message matched,
    /// or that the engine resumed).
    pub(super) resume: Vec<u32>,
    /// Peers whose backlog waits for the peer's connection.
    pub orphans: usize,
    /// When the oldest accepted connection that has not said hello times
    /// out ([`crate::conn::HELLO_TIMEOUT`]).
    pub hello_due: Option<Instant>,
    /// Connections that failed during the current pass.
    pub dead: Vec<(u32, Error)>,
    /// Scratch list of connections to flush.
    flush_ids: Vec<u32>,
    /// Work of a shared receive context's engine about the senders of
    /// other endpoints bound to it, handed on when the pass ends.
    pub(super) foreign: Vec<Action<TcpWire>>,
}

impl State {
    pub(crate) fn new(directed: bool) -> Self {
        State {
            conns: Conns::default(),
            next_op: 0,
            rx: Engine::new(directed, RX_BUDGET),
            unexp_reading: 0,
            peers: HashMap::new(),
            by_fi: IdMap::default(),
            by_fi_removals: 0,
            listener: None,
            msg: MsgState::default(),
            resume: Vec::new(),
            orphans: 0,
            hello_due: None,
            dead: Vec::new(),
            flush_ids: Vec::new(),
            foreign: Vec::new(),
        }
    }

    /// A fresh operation id.
    pub(crate) fn new_op_id(&mut self) -> u64 {
        self.next_op = self.next_op.wrapping_add(1);
        self.next_op
    }
}

/// RDM or MSG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Rdm,
    Msg,
}

/// The shared part of an endpoint.
#[derive(Debug)]
pub(crate) struct EpInner {
    pub info: Info,
    pub kind: Kind,
    pub fid: u64,
    pub nonce: u64,
    /// The RDM listening address (the endpoint's name).
    pub name: Option<SocketAddr>,
    /// Everything an operation or a progress pass changes. A spin lock
    /// ([`patient_lock`](fabric_core::kit::patient_lock) when waiting for
    /// it): a busy-polling reader takes and releases it on every look.
    pub state: SpinMutex<State>,
    pub binds: Mutex<Binds>,
    pub bound: OnceLock<Binds>,
    pub enabled: AtomicBool,
    /// Transmit operations accepted and not completed (changed only with
    /// the state locked: [`EpInner::op_started`]).
    pub outstanding: AtomicUsize,
    /// Some connection has frames queued (progress must flush).
    pub tx_waiting: AtomicBool,
    /// A send was posted since the last progress call (a burst of sends:
    /// not a lone message).
    pub sent_since_progress: AtomicBool,
    /// Busy polling took some connection out of the epoll set: the epoll
    /// path must read it directly (or watch it again).
    pub unwatched: AtomicBool,
    /// The RDM listener's rest after accept ran out of resources.
    pub accept_rest: AcceptBackoff,
    /// Some accepted connection has not said hello yet (`State::hello_due`
    /// is set).
    pub hello_waiting: AtomicBool,
    pub poller: Arc<Poller>,
    pub mr: Arc<MrTable>,
    pub ep_no: u32,
    pub limits: Limits,
    /// Largest lone message sent eagerly ([`crate::limits::eager_lone_max`]).
    pub lone_max: usize,
    /// The same on an unpaced connection inside this host
    /// ([`crate::limits::eager_lone_max_unpaced`]).
    pub lone_max_unpaced: usize,
    /// The newest wire protocol version this endpoint speaks
    /// (`ep_attr.protocol_version`, 0 meaning the newest there is).
    pub wire_max: u8,
    /// A multi-receive buffer is released once less than this is left
    /// (`FI_OPT_MIN_MULTI_RECV`; the engine holds it too).
    pub min_multi_recv: AtomicUsize,
    /// The receive engine paused senders until the receive CQ has room:
    /// progress checks it ([`Engine::cq_read`]) even with nothing to read.
    pub cq_wait: AtomicBool,
    /// The shared receive context the endpoint receives through: its
    /// engine takes the place of `State::rx` while the endpoint works
    /// ([`Pass`]).
    pub srx: OnceLock<Arc<SrxInner>>,
    /// The shared receive context holds work for this endpoint.
    pub srx_mail: Arc<AtomicBool>,
}

/// The newest wire version an endpoint with `ep_attr.protocol_version` =
/// `v` speaks: `v` within the versions this code knows, 0 for the newest.
pub(crate) fn wire_max(v: u32) -> u8 {
    if v == 0 {
        return crate::wire::VERSION;
    }
    u8::try_from(v)
        .unwrap_or(u8::MAX)
        .clamp(crate::wire::MIN_VERSION, crate::wire::VERSION)
}

pub(super) fn proto(detail: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::new(ErrorKind::Io, detail)
}

pub(super) fn u64_of(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

pub(super) fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl EpInner {
    pub(crate) fn new(
        info: &Info,
        kind: Kind,
        name: Option<SocketAddr>,
        state: State,
        poller: Arc<Poller>,
        mr: Arc<MrTable>,
    ) -> Arc<Self> {
        let limits = Limits {
            max_msg_size: u64_of(info.ep_attr.max_msg_size),
            ..Limits::default()
        };
        let ep_no = poller.next_ep();
        let inner = Arc::new(EpInner {
            info: info.clone(),
            kind,
            fid: sys::next_fid(),
            nonce: fabric_core::kit::random_u64(),
            name,
            state: SpinMutex::new(state),
            binds: Mutex::new(Binds::default()),
            bound: OnceLock::new(),
            enabled: AtomicBool::new(false),
            outstanding: AtomicUsize::new(0),
            tx_waiting: AtomicBool::new(false),
            sent_since_progress: AtomicBool::new(false),
            unwatched: AtomicBool::new(false),
            accept_rest: AcceptBackoff::default(),
            hello_waiting: AtomicBool::new(false),
            poller: poller.clone(),
            mr,
            ep_no,
            limits,
            lone_max: crate::limits::eager_lone_max(),
            lone_max_unpaced: crate::limits::eager_lone_max_unpaced(),
            wire_max: wire_max(info.ep_attr.protocol_version),
            min_multi_recv: AtomicUsize::new(fabric_core::kit::rx::MIN_MULTI_RECV),
            cq_wait: AtomicBool::new(false),
            srx: OnceLock::new(),
            srx_mail: Arc::new(AtomicBool::new(false)),
        });
        poller.register(inner.ep_no, inner.clone());
        inner
    }

    /// Takes the endpoint's state for one operation or progress pass.
    #[inline]
    pub(crate) fn lock(&self) -> Pass<'_> {
        Pass::new(self, patient_lock(&self.state))
    }

    /// As [`lock`](Self::lock), unless another thread holds the state.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<Pass<'_>> {
        self.try_state().map(|g| Pass::new(self, g))
    }

    /// The state's guard, unless another thread holds it; then
    /// [`Pass::new`]. Apart, they keep a busy-polling pass from moving an
    /// `Option<Pass>` field by field.
    #[inline]
    fn try_state(&self) -> Option<SpinMutexGuard<'_, State>> {
        self.state.try_lock()
    }

    pub(crate) fn bound(&self) -> Result<&Binds> {
        self.bound.get().ok_or_else(|| {
            Error::new(
                ErrorKind::OpBadState,
                "tcp: endpoint not enabled (call enable after binding its CQ and AV)",
            )
        })
    }

    pub(crate) fn token(&self, cid: u32) -> u64 {
        token(self.ep_no, cid)
    }

    // ---------------------------------------------------------------
    // Completions.

    /// Tells epoll what a watched connection waits for: reading unless
    /// paused, writing while frames wait.
    pub(super) fn rewatch(&self, c: &Conn, cid: u32) {
        if c.watched {
            let read = !c.rx.blocked();
            let _ = self
                .poller
                .interest(c.fd(), self.token(cid), read, c.want_write);
        }
    }

    // ---------------------------------------------------------------
    // Sending.

    // ---------------------------------------------------------------
    // Receiving: posting, matching, unexpected messages (the engine), and
    // what the transport does for it.

    /// Work left from the operation just done: the receive engine's
    /// actions, connections to read again, failed connections.
    #[inline]
    pub(crate) fn finish_pass(&self, st: &mut State, b: &Binds) {
        if !st.resume.is_empty() || !st.dead.is_empty() || st.rx.has_actions() {
            self.finish_pass_work(st, b);
        }
    }

    /// [`finish_pass`](Self::finish_pass) with something to do, kept out of
    /// line: every operation ends with the check, rarely with work.
    #[cold]
    #[inline(never)]
    fn finish_pass_work(&self, st: &mut State, b: &Binds) {
        while !st.resume.is_empty() || !st.dead.is_empty() || st.rx.has_actions() {
            self.rx_actions(st, b);
            while let Some(cid) = st.resume.pop() {
                if let Some(c) = st.conns.get(&cid) {
                    self.rewatch(c, cid);
                }
                self.read_conn(st, b, cid);
            }
            while let Some((cid, e)) = st.dead.pop() {
                self.fail_conn(st, b, cid, &e);
            }
        }
    }

    // ---------------------------------------------------------------
    // The receive path.

    /// The headers of a frame arrived: act on it, or say where its payload
    /// goes.
    pub(super) fn on_frame(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let Some(conn) = st.conns.get(&cid) else {
            return Ok(());
        };
        let phase = conn.phase;
        let op = f.header.op;
        let allowed = match phase {
            Phase::Ready => !matches!(
                op,
                Op::ConnReq | Op::ConnAccept | Op::ConnReject | Op::Hello | Op::HelloAck
            ),
            Phase::AwaitHello => op == Op::Hello,
            Phase::HelloSent => op == Op::HelloAck,
            Phase::ConnReqSent => matches!(op, Op::ConnAccept | Op::ConnReject),
            Phase::AwaitAccept | Phase::Closing => false,
        };
        if !allowed {
            return Err(proto(format!(
                "tcp: unexpected {op} frame on a connection in phase {phase:?}"
            )));
        }
        let class = match op {
            Op::Msg | Op::MsgRts => Some(Caps::MSG),
            Op::Tagged | Op::TaggedRts => Some(Caps::TAGGED),
            _ => None,
        };
        if let Some(class) = class.filter(|c| !self.info.caps.contains(*c)) {
            return Err(proto(format!(
                "tcp: a {op} frame for an endpoint without {class}"
            )));
        }
        match op {
            Op::Msg | Op::Tagged => self.on_msg(st, b, cid, f),
            Op::MsgRts | Op::TaggedRts => self.on_rts(st, b, cid, f),
            Op::RndvData => self.on_rndv_data(st, b, cid, f),
            Op::Cts => self.on_cts(st, b, cid, f),
            Op::Ack => self.on_ack(st, b, cid, f),
            Op::ReadRsp => self.on_data_rsp(st, b, cid, f, true),
            Op::AtomicRsp => self.on_data_rsp(st, b, cid, f, false),
            Op::Write => self.on_write(st, b, cid, f),
            Op::ReadReq => self.on_read_req(st, b, cid, f),
            Op::Atomic | Op::FetchAtomic | Op::CompareAtomic => self.on_atomic(st, b, cid, f),
            Op::ConnReq | Op::ConnAccept | Op::ConnReject => self.on_cm(st, b, cid, f),
            Op::Hello => self.rdm_on_hello(st, b, cid, f),
            Op::HelloAck => self.rdm_on_hello_ack(st, b, cid, f),
        }
    }

    /// The payload of the current frame is complete.
    pub(super) fn on_payload_done(&self, st: &mut State, b: &Binds, cid: u32) -> Result<()> {
        let Some(cur) = st.conns.get_mut(&cid).and_then(|c| c.rx.cur.take()) else {
            return Ok(());
        };
        let f = cur.frame;
        match (f.header.op, cur.sink) {
            (Op::Msg | Op::Tagged, sink) => {
                if matches!(sink, Sink::Unexp(_)) {
                    let len = usize_of(f.header.payload_len);
                    st.unexp_reading = st.unexp_reading.saturating_sub(len);
                }
                self.msg_done(st, b, cid, &f, sink.landed())?;
            }
            (Op::RndvData, Sink::Rndv(mut r)) => {
                r.got = r.got.saturating_add(f.header.payload_len);
                if r.got >= r.accept {
                    let id = f.header.id;
                    let ack = r.ack;
                    st.rx.complete(b, r.recv, r.meta);
                    if !ack.is_empty() {
                        self.push_frame(st, b, cid, &Frame::ack(id, None), Src::None, Done::None);
                    }
                } else if let Some(c) = st.conns.get_mut(&cid) {
                    c.rndv.insert(f.header.id, r);
                }
            }
            (Op::Write, Sink::Region { status, .. }) => self.write_done(st, b, cid, &f, status),
            (Op::ReadRsp, Sink::Read { done, .. }) | (Op::AtomicRsp, Sink::Fetch { done, .. }) => {
                self.tx_complete(b, done, None);
            }
            (Op::Atomic | Op::FetchAtomic | Op::CompareAtomic, Sink::Scratch(v)) => {
                self.atomic_done(st, b, cid, &f, v);
            }
            (Op::ConnReq | Op::ConnAccept | Op::ConnReject, Sink::Private(v)) => {
                self.cm_frame(st, b, cid, &f, v)?;
            }
            (
                _,
                Sink::Refusal {
                    done,
                    kind,
                    what,
                    text,
                },
            ) => self.tx_complete(b, done, Some(&super::tx::remote_said(kind, what, &text))),
            (op, _) => return Err(proto(format!("tcp: {op} payload without a destination"))),
        }
        Ok(())
    }

    // ---------------------------------------------------------------
    // Failure.
}

/// Most established connections an endpoint reads directly instead of
/// asking epoll.
const DIRECT_CONNS: usize = 2;

impl EpInner {
    /// A progress call ends a burst of sends.
    fn progressed(&self) {
        if self.sent_since_progress.load(Ordering::Relaxed) {
            self.sent_since_progress.store(false, Ordering::Relaxed);
        }
    }
}

/// Whether an endpoint's connections can be progressed by reading them
/// directly: a few, all established.
fn direct_ok(st: &State) -> bool {
    st.conns.len() <= DIRECT_CONNS
        && st.orphans == 0
        && st
            .conns
            .values()
            .all(|c| !c.connecting && c.phase == Phase::Ready)
}

impl EpInner {
    /// Puts the connections busy polling took out back into the epoll set.
    fn watch_conns(&self, st: &mut State) {
        for (cid, c) in st.conns.iter_mut() {
            if !c.watched {
                c.watched = true;
                let _ = self
                    .poller
                    .watch(c.fd(), self.token(cid), !c.rx.blocked(), c.want_write);
            }
        }
        self.unwatched.store(false, Ordering::Relaxed);
    }
}

impl EpProgress for EpInner {
    fn watch_all(&self) {
        let mut st = self.lock();
        self.watch_conns(&mut st);
    }

    fn pending(&self) -> bool {
        // Queued frames (`tx_waiting`) wait for the socket's room, which
        // the epoll set watches (or for a hello, which arrives by it).
        self.srx_mail.load(Ordering::Acquire)
    }

    fn epoll_quiet(&self) -> bool {
        // A MSG endpoint has no listener, no hello timer and no orphans;
        // its one connection is read directly once established.
        self.kind == Kind::Msg
    }

    fn progress_direct(&self) -> Option<()> {
        let b = self.bound.get()?;
        self.progressed();
        let g = self.try_state()?;
        let mut guard = Pass::new(self, g);
        let st = &mut *guard;
        // The (at most DIRECT_CONNS) connections, gathered on the stack in
        // the same pass that checks them (what `direct_ok` asks), ...
        if st.conns.len() > DIRECT_CONNS || st.orphans > 0 {
            return None;
        }
        let mut ids = [0u32; DIRECT_CONNS];
        let mut n = 0;
        let mut watched = false;
        for (cid, c) in st.conns.iter() {
            if c.connecting || c.phase != Phase::Ready {
                return None;
            }
            watched |= c.watched && !c.want_write;
            if let Some(slot) = ids.get_mut(n) {
                *slot = cid;
                n += 1;
            }
        }
        let ids = ids.get(..n).unwrap_or_default();
        // ... and out of the epoll set while nobody can block on it (once:
        // then none is watched any more).
        if watched && self.poller.may_unwatch() {
            for cid in ids {
                let Some(c) = st.conns.get_mut(cid) else {
                    continue;
                };
                if c.watched && !c.want_write {
                    c.watched = false;
                    self.unwatched.store(true, Ordering::Relaxed);
                    let _ = self.poller.remove(c.fd());
                }
            }
        }
        if self.tx_waiting.load(Ordering::Acquire) && self.tx_waiting.swap(false, Ordering::AcqRel)
        {
            for cid in ids {
                self.flush_one(st, b, *cid);
            }
        }
        for cid in ids {
            self.read_conn(st, b, *cid);
        }
        if st.rx.waits_for_cq() {
            st.rx.cq_read(b);
        }
        self.finish_pass(st, b);
        Some(())
    }

    fn progress(&self, ready: &[u64]) -> Result<()> {
        self.progressed();
        let mine = ready.iter().any(|t| ep_of(*t) == self.ep_no);
        if !mine
            && !self.tx_waiting.load(Ordering::Acquire)
            && !self.unwatched.load(Ordering::Relaxed)
            && !self.accept_rest.is_paused()
            && !self.hello_waiting.load(Ordering::Relaxed)
            && !self.cq_wait.load(Ordering::Relaxed)
            && !self.srx_mail.load(Ordering::Relaxed)
        {
            return Ok(());
        }
        let Some(b) = self.bound.get() else {
            return Ok(());
        };
        let Some(mut guard) = self.try_lock() else {
            // Another thread is working on this endpoint right now.
            return Ok(());
        };
        let st = &mut *guard;
        if self.tx_waiting.swap(false, Ordering::AcqRel) {
            // A reused list: no allocation once it has grown.
            let mut ids = std::mem::take(&mut st.flush_ids);
            ids.clear();
            ids.extend(
                st.conns
                    .iter()
                    .filter(|(_, c)| c.connecting || !c.tx.is_empty())
                    .map(|(id, _)| id),
            );
            for cid in ids.iter() {
                self.flush_one(st, b, *cid);
            }
            st.flush_ids = ids;
        }
        if self.unwatched.load(Ordering::Relaxed) {
            if direct_ok(st) && self.poller.may_unwatch() {
                // Not in the epoll set: read like busy polling does.
                let mut ids = std::mem::take(&mut st.flush_ids);
                ids.clear();
                ids.extend(
                    st.conns
                        .iter()
                        .filter(|(_, c)| !c.watched)
                        .map(|(id, _)| id),
                );
                for cid in ids.iter() {
                    self.read_conn(st, b, *cid);
                }
                st.flush_ids = ids;
            } else {
                // What is already waiting shows at the next epoll_wait.
                self.watch_conns(st);
            }
        }
        if st.hello_due.is_some_and(|d| Instant::now() >= d) {
            self.rdm_hello_timeouts(st);
        }
        if self.accept_rest.is_paused() {
            let resumed = st.listener.as_ref().is_some_and(|l| {
                self.accept_rest
                    .resume_if_due(&self.poller, l.as_fd(), self.token(0))
            });
            if resumed {
                self.rdm_accept(st)?;
            }
        }
        for t in ready.iter().filter(|t| ep_of(**t) == self.ep_no) {
            let cid = conn_of(*t);
            if cid == 0 {
                self.rdm_accept(st)?;
            } else if st.conns.get(&cid).is_some_and(|c| c.connecting) {
                self.flush_one(st, b, cid);
                self.read_conn(st, b, cid);
            } else {
                self.read_conn(st, b, cid);
            }
        }
        if st.orphans > 0 {
            self.rdm_orphans(st, b);
        }
        if st.rx.waits_for_cq() {
            st.rx.cq_read(b);
        }
        self.finish_pass(st, b);
        if st.orphans > 0 {
            self.tx_waiting.store(true, Ordering::Release);
        }
        Ok(())
    }
}
