//! The engine RDM and MSG endpoints share: connections and their queues,
//! the receive path driven by the wire decoder, matching and the
//! unexpected queue, rendezvous, RMA and atomics at both ends, completion
//! reporting and connection failure.
//!
//! Everything of one endpoint sits behind one mutex ([`State`]), taken by
//! the data operations (uncontended in the common case) and tried by
//! progress (a thread that finds it held leaves the work to its holder).

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use fabric_core::kit::mr::MrTable;
use fabric_core::kit::rx::{Action, Budget, Entry, Held, Meta, RecvId};
use fabric_core::objects::{
    AtomicMsg, AtomicOp, CompletionFlags, CqEntry, FiAddr, MrAccess, Msg, RmaIov, RmaMsg,
};
use fabric_core::{Address, Caps, Error, ErrorKind, Info, Mode, OpFlags, Result};

use super::conns::Conns;
use super::{Binds, msg_flags};
use crate::atomic;
use crate::backoff::AcceptBackoff;
use crate::conn::{
    Conn, Cur, DIRECT_READ_MIN, Done, Engine, Landed, Pending, Phase, Pieces, Remote, RndvRecv,
    Sink, Src, TxDone, TxItem, locate,
};
use crate::progress::{EpProgress, Poller, conn_of, ep_of, token};
use crate::sys;
use crate::wire::{Event, Ext, Flags, Frame, Limits, Op, Want, atomic_kind};
use fabric_core::kit::atomic::AtomicKind;
use fabric_core::kit::hash::IdMap;
use fabric_core::kit::lock;

/// Largest message sent eagerly (in one frame, buffered by the receiver
/// when no receive matches yet); larger messages go by rendezvous.
pub(crate) const EAGER_MAX: usize = 32 * 1024;

/// Largest message sent eagerly when it is lone: nothing else of the
/// endpoint in flight and no other send posted since the last progress
/// call (ping-pong, request-response), which saves the rendezvous round
/// trip. Messages posted in a burst keep rendezvous above [`EAGER_MAX`]:
/// it measured faster for streams on loopback (the data of many
/// clear-to-sends leaves in a few large `sendmsg` calls).
pub(crate) const EAGER_LONE_MAX: usize = 64 * 1024;

/// Bytes of unexpected messages an endpoint keeps at most (payloads, plus
/// [`UNEXP_COST`] per entry). Beyond it, the connection that brings the
/// next unexpected message stops being read until receives consume what
/// is kept.
pub(crate) const UNEXP_BUDGET: usize = 8 << 20;

/// What one unexpected entry counts against the budget besides its
/// payload.
pub(crate) const UNEXP_COST: usize = 64;

/// The receive engine's limits: [`UNEXP_BUDGET`] of unexpected messages
/// at [`UNEXP_COST`] an entry, a sender paused as soon as it is spent;
/// spare buffers kept up to the largest eager message.
const RX_BUDGET: Budget = Budget {
    total: UNEXP_BUDGET,
    hard: UNEXP_BUDGET,
    reserve: 0,
    entry_cost: UNEXP_COST,
    spare_max: if EAGER_LONE_MAX > 2 * EAGER_MAX {
        EAGER_LONE_MAX
    } else {
        2 * EAGER_MAX
    },
};

/// Bytes read when the next frame is expected to carry a large payload:
/// enough for its headers and a little more.
const SMALL_READ: usize = 256;

/// Socket reads per connection per progress call (other connections get
/// their turn; level-triggered epoll reports the rest).
const READS_PER_CALL: usize = 16;

/// A frame waiting for its connection (not established yet, or held
/// behind a fence), with the request it starts.
#[derive(Debug)]
pub(crate) struct Queued {
    pub item: TxItem,
    pub pending: Option<(u64, Pending)>,
    pub fence: bool,
}

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
    unexp_reading: usize,
    pub peers: HashMap<SocketAddr, Peer>,
    /// AV handle to peer key (RDM), filled on first use.
    pub by_fi: IdMap<u64, SocketAddr>,
    pub listener: Option<TcpListener>,
    pub msg: MsgState,
    /// Connections to read again now (a paused one whose message matched,
    /// or that the engine resumed).
    resume: Vec<u32>,
    /// Peers whose backlog waits for the peer's connection.
    pub orphans: usize,
    /// When the oldest accepted connection that has not said hello times
    /// out ([`crate::conn::HELLO_TIMEOUT`]).
    pub hello_due: Option<Instant>,
    /// Connections that failed during the current pass.
    pub dead: Vec<(u32, Error)>,
    /// Scratch list of connections to flush.
    flush_ids: Vec<u32>,
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
            listener: None,
            msg: MsgState::default(),
            resume: Vec::new(),
            orphans: 0,
            hello_due: None,
            dead: Vec::new(),
            flush_ids: Vec::new(),
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
    pub state: Mutex<State>,
    pub binds: Mutex<Binds>,
    pub bound: OnceLock<Binds>,
    pub enabled: AtomicBool,
    /// Transmit operations accepted and not completed.
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
    /// A multi-receive buffer is released once less than this is left
    /// (`FI_OPT_MIN_MULTI_RECV`; the engine holds it too).
    pub min_multi_recv: AtomicUsize,
    /// The receive engine paused senders until the receive CQ has room:
    /// progress checks it ([`Engine::cq_read`]) even with nothing to read.
    pub cq_wait: AtomicBool,
}

fn proto(detail: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::new(ErrorKind::Io, detail)
}

/// Takes request `id` out of `pending` when `is` accepts its kind. A reply
/// of another kind leaves the request where it is: the connection then
/// fails, and every request still pending ends in an error completion,
/// this one included (a hostile or broken peer must not make an operation
/// vanish).
fn take_pending(
    pending: &mut HashMap<u64, Pending>,
    id: u64,
    reply: &str,
    is: impl FnOnce(&Pending) -> bool,
) -> Result<Pending> {
    match pending.get(&id) {
        Some(p) if is(p) => pending
            .remove(&id)
            .ok_or_else(|| proto(format!("tcp: {reply} for unknown request {id}"))),
        Some(_) => Err(proto(format!(
            "tcp: {reply} for request {id}, which awaits another answer"
        ))),
        None => Err(proto(format!("tcp: {reply} for unknown request {id}"))),
    }
}

fn remote(kind: ErrorKind, what: &str) -> Error {
    Error::new(
        kind,
        format!("tcp: the peer refused the {what}: {}", kind.description()),
    )
}

/// The header flags asking for an acknowledgement, from an operation's
/// flags.
fn ack_flags(flags: OpFlags) -> Flags {
    if flags.contains(OpFlags::DELIVERY_COMPLETE) {
        Flags::ACK_DELIVERY
    } else if flags.contains(OpFlags::TRANSMIT_COMPLETE) {
        Flags::ACK_TRANSMIT
    } else {
        Flags::NONE
    }
}

fn u64_of(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn usize_of(n: u64) -> usize {
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
            state: Mutex::new(state),
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
            min_multi_recv: AtomicUsize::new(fabric_core::kit::rx::MIN_MULTI_RECV),
            cq_wait: AtomicBool::new(false),
        });
        let weak: std::sync::Weak<dyn EpProgress> =
            Arc::downgrade(&(inner.clone() as Arc<dyn EpProgress>));
        poller.register(weak);
        inner
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub(crate) fn bound(&self) -> Result<&Binds> {
        self.bound
            .get()
            .ok_or_else(|| Error::new(ErrorKind::OpBadState, "the endpoint is not enabled"))
    }

    pub(crate) fn token(&self, cid: u32) -> u64 {
        token(self.ep_no, cid)
    }

    /// Keeps a new connection and adds its socket to the epoll set; its
    /// number.
    pub(crate) fn add_conn(&self, st: &mut State, conn: Conn) -> Result<u32> {
        let cid = st.conns.insert(conn).ok_or_else(|| {
            Error::new(
                ErrorKind::Again,
                "tcp: the endpoint has as many connections as it can number",
            )
        })?;
        let added = match st.conns.get(&cid) {
            Some(c) => self.poller.add(c.fd(), self.token(cid)),
            None => Ok(()),
        };
        if let Err(e) = added {
            st.conns.remove(&cid);
            return Err(e);
        }
        Ok(cid)
    }

    /// Whether this endpoint's caps let peers do `access` with `class`
    /// (FI_RMA or FI_ATOMIC) here: the class, and the REMOTE_READ /
    /// REMOTE_WRITE direction or no direction at all (fi_getinfo(3)). A
    /// peer may not use what the application did not ask for.
    fn serves(&self, class: Caps, access: MrAccess) -> bool {
        let caps = self.info.caps;
        let dir = if access.contains(MrAccess::REMOTE_READ) {
            Caps::REMOTE_READ
        } else {
            Caps::REMOTE_WRITE
        };
        caps.contains(class) && (caps.contains(dir) || !caps.intersects(Caps::RMA_DIRECTIONS))
    }

    /// The status refusing remote access `access` to one of `rma`'s
    /// ranges (an endpoint not open to RMA, bad key, range outside its
    /// region, missing right), if any.
    fn refused(&self, rma: &crate::wire::RmaHeader, access: MrAccess) -> Option<ErrorKind> {
        if !self.serves(Caps::RMA, access) {
            return Some(ErrorKind::Access);
        }
        rma.iov()
            .iter()
            .find_map(|r| self.mr.check(r.key, r.addr, r.len, access).err())
            .map(|e| refusal(&e))
    }

    // ---------------------------------------------------------------
    // Completions.

    /// Tells epoll what a watched connection waits for: reading unless
    /// paused, writing while frames wait.
    fn rewatch(&self, c: &Conn, cid: u32) {
        if c.watched {
            let read = !c.rx.blocked();
            let _ = self
                .poller
                .interest(c.fd(), self.token(cid), read, c.want_write);
        }
    }

    /// A transmit operation finished.
    pub(crate) fn tx_complete(&self, b: &Binds, done: TxDone, err: Option<&Error>) {
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        let e = CqEntry {
            context: done.context,
            flags: done.flags,
            len: done.len,
            ..CqEntry::default()
        };
        match err {
            None => b.tx_done(e, done.report),
            Some(err) => b.failed(false, e, err, 0),
        }
    }

    fn on_written(&self, b: &Binds, d: Done, note: &mut WriteNote) {
        match d {
            Done::None => {}
            Done::Tx(t) => self.tx_complete(b, t, None),
            Done::Connected => note.connected = true,
            Done::Close => note.close = true,
        }
    }

    /// Fails a queued frame's operation.
    fn fail_queued(&self, b: &Binds, q: Queued, err: &Error) {
        let (_, done) = q.item.into_parts();
        if let Done::Tx(t) = done {
            self.tx_complete(b, t, Some(err));
        }
        if let Some((_, p)) = q.pending {
            self.tx_complete(b, p.done(), Some(err));
        }
    }

    // ---------------------------------------------------------------
    // Sending.

    /// Queues a frame to the peer `key`: on its established connection, or
    /// in its backlog until there is one (RDM: connecting first).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn submit(
        &self,
        st: &mut State,
        b: &Binds,
        key: SocketAddr,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
        pending: Option<(u64, Pending)>,
        fence: bool,
    ) {
        // A MSG endpoint's one connection is `msg.conn` (it becomes Ready
        // together with its peer entry); RDM looks the peer up.
        let conn = match self.kind {
            Kind::Msg => st.msg.conn,
            Kind::Rdm => st.peers.get(&key).and_then(|p| p.conn),
        };
        let ready = conn.filter(|cid| st.conns.get(cid).is_some_and(|c| c.phase == Phase::Ready));
        if let Some(cid) = ready {
            self.conn_submit(st, b, cid, frame, src, done, pending, fence);
            return;
        }
        let peer = st.peers.entry(key).or_default();
        peer.backlog.push_back(Queued {
            item: TxItem::new(frame, src.into_owned_body(), done),
            pending,
            fence,
        });
        let connect =
            self.kind == Kind::Rdm && peer.connecting.is_none() && peer.orphaned.is_none();
        if connect {
            self.rdm_connect(st, b, key);
        }
    }

    /// Queues a frame of an operation on an established connection,
    /// behind a fence if one is pending, and writes at once when the queue
    /// was empty.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn conn_submit(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
        pending: Option<(u64, Pending)>,
        fence: bool,
    ) {
        let Some(conn) = st.conns.get_mut(&cid) else {
            return;
        };
        if !conn.held.is_empty() || (fence && conn.outstanding() > 0) {
            conn.held.push_back(Queued {
                item: TxItem::new(frame, src.into_owned_body(), done),
                pending,
                fence,
            });
            return;
        }
        if let Some((id, p)) = pending {
            conn.pending.insert(id, p);
        }
        self.write_frame(st, b, cid, frame, src, done);
    }

    /// Queues a protocol frame (a response, a rendezvous chunk) on a
    /// connection, ahead of any fence, and writes at once when the queue
    /// was empty.
    pub(crate) fn push_frame(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
    ) {
        if !st.conns.contains_key(&cid) {
            if let Done::Tx(t) = done {
                let err = Error::new(ErrorKind::ConnReset, "tcp: the connection is gone");
                self.tx_complete(b, t, Some(&err));
            }
            return;
        }
        self.write_frame(st, b, cid, frame, src, done);
    }

    /// Writes a frame on a connection: at once, straight from its source,
    /// when nothing is queued on an established connection; else behind
    /// the queued frames.
    fn write_frame(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
    ) {
        let Some(conn) = st.conns.get_mut(&cid) else {
            return;
        };
        let direct = conn.phase == Phase::Ready
            && !conn.connecting
            && conn.held.is_empty()
            && matches!(done, Done::None | Done::Tx(_));
        if !direct {
            let body = conn.tx.body(src);
            conn.tx.push(TxItem::new(frame, body, done));
            if conn.tx.len() == 1 {
                self.flush_one(st, b, cid);
            } else {
                self.tx_waiting.store(true, Ordering::Release);
            }
            return;
        }
        let Conn { sock, tx, .. } = conn;
        match tx.send_now(sock.as_fd(), frame, src, done) {
            Ok(Some(d)) => self.on_written(b, d, &mut WriteNote::default()),
            Ok(None) => {
                // Queued: written by progress once the socket has room.
                self.tx_waiting.store(true, Ordering::Release);
                if !conn.want_write {
                    conn.want_write = true;
                    self.rewatch(conn, cid);
                }
            }
            Err(e) => st.dead.push((cid, e)),
        }
    }

    /// Moves a frame (with its request) onto an established connection.
    fn enqueue(&self, st: &mut State, b: &Binds, cid: u32, q: Queued) {
        let Some(conn) = st.conns.get_mut(&cid) else {
            let err = Error::new(ErrorKind::ConnReset, "tcp: the connection is gone");
            self.fail_queued(b, q, &err);
            return;
        };
        if !conn.held.is_empty() || (q.fence && conn.outstanding() > 0) {
            conn.held.push_back(q);
            return;
        }
        if let Some((id, p)) = q.pending {
            conn.pending.insert(id, p);
        }
        conn.tx.push(q.item);
    }

    /// A connection to `key` is established: the backlog goes on it.
    pub(crate) fn peer_ready(&self, st: &mut State, b: &Binds, key: SocketAddr, cid: u32) {
        let backlog = match st.peers.get_mut(&key) {
            Some(p) => {
                p.conn = Some(cid);
                if p.orphaned.take().is_some() {
                    st.orphans = st.orphans.saturating_sub(1);
                }
                std::mem::take(&mut p.backlog)
            }
            None => {
                st.peers.insert(
                    key,
                    Peer {
                        conn: Some(cid),
                        ..Peer::default()
                    },
                );
                VecDeque::new()
            }
        };
        for q in backlog {
            self.enqueue(st, b, cid, q);
        }
        self.flush_one(st, b, cid);
    }

    /// Fails everything waiting for a connection to `key`.
    pub(crate) fn fail_backlog(&self, st: &mut State, b: &Binds, key: SocketAddr, err: &Error) {
        let backlog = match st.peers.get_mut(&key) {
            Some(p) => {
                if p.orphaned.take().is_some() {
                    st.orphans = st.orphans.saturating_sub(1);
                }
                std::mem::take(&mut p.backlog)
            }
            None => return,
        };
        for q in backlog {
            self.fail_queued(b, q, err);
        }
    }

    /// Writes what a connection has queued; records a failure in
    /// `st.dead`.
    pub(crate) fn flush_one(&self, st: &mut State, b: &Binds, cid: u32) {
        let Some(conn) = st.conns.get_mut(&cid) else {
            return;
        };
        let mut note = WriteNote::default();
        let r = conn.flush(&self.mr, &mut |d| self.on_written(b, d, &mut note));
        if conn.rx.tx_full && conn.tx.may_resume() {
            conn.rx.tx_full = false;
            st.resume.push(cid);
        }
        let want = conn.connecting || !conn.tx.is_empty();
        if want {
            self.tx_waiting.store(true, Ordering::Release);
        }
        if want != conn.want_write {
            conn.want_write = want;
            self.rewatch(conn, cid);
        }
        let idle = conn.tx.is_empty() && !conn.connecting;
        if let Err(e) = r {
            st.dead.push((cid, e));
            return;
        }
        if note.connected {
            self.msg_connected_sent(st);
        }
        if note.close
            || (idle
                && st
                    .conns
                    .get(&cid)
                    .is_some_and(|c| c.phase == Phase::Closing))
        {
            st.conns.remove(&cid);
            return;
        }
        if idle {
            self.release_held(st, b, cid);
        }
    }

    /// Issues frames held behind a fence once nothing is outstanding.
    fn release_held(&self, st: &mut State, b: &Binds, cid: u32) {
        let mut moved = false;
        loop {
            let Some(conn) = st.conns.get_mut(&cid) else {
                return;
            };
            let Some(front) = conn.held.front() else {
                break;
            };
            if front.fence && conn.outstanding() > 0 {
                break;
            }
            let Some(q) = conn.held.pop_front() else {
                break;
            };
            if let Some((id, p)) = q.pending {
                conn.pending.insert(id, p);
            }
            conn.tx.push(q.item);
            moved = true;
        }
        if moved {
            self.flush_one(st, b, cid);
        }
    }

    /// Checks that a transmit operation may start; `Again` when
    /// `tx_attr.size` operations are outstanding (after one progress
    /// attempt).
    pub(crate) fn tx_start(&self) -> Result<&Binds> {
        if !self.enabled.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::OpBadState,
                "the endpoint is not enabled",
            ));
        }
        let b = self.bound()?;
        let size = self.info.tx_attr.size.max(1);
        if self.outstanding.load(Ordering::Acquire) >= size {
            let _ = fabric_core::kit::objects::Progress::progress(&*self.poller);
            if self.outstanding.load(Ordering::Acquire) >= size {
                return Err(Error::again());
            }
        }
        Ok(b)
    }

    /// The peer key of an operation's destination.
    pub(crate) fn dest_key(&self, st: &mut State, b: &Binds, dest: FiAddr) -> Result<SocketAddr> {
        match self.kind {
            Kind::Rdm => self.rdm_dest(st, b, dest),
            Kind::Msg => {
                if st.msg.closed {
                    return Err(Error::new(
                        ErrorKind::Shutdown,
                        "tcp: the connection is shut down",
                    ));
                }
                st.msg.peer.ok_or_else(|| {
                    Error::new(ErrorKind::NotConn, "tcp: the endpoint is not connected")
                })
            }
        }
    }

    /// Sends a message (every send form ends here).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &self,
        dest: FiAddr,
        tagged: bool,
        tag: u64,
        flags: OpFlags,
        data: u64,
        context: u64,
        src: Src<'_>,
        len: usize,
    ) -> Result<()> {
        let b = self.tx_start()?;
        if len > self.info.ep_attr.max_msg_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("message of {len} bytes is over max_msg_size"),
            ));
        }
        let inject = flags.contains(OpFlags::INJECT);
        let report = !inject && (!b.tx_selective || flags.contains(OpFlags::COMPLETION));
        let done = TxDone {
            context,
            flags: msg_flags(tagged, false),
            len,
            report,
        };
        let ack = ack_flags(flags);
        let cq = flags.contains(OpFlags::REMOTE_CQ_DATA);
        let mut st = self.lock();
        let key = self.dest_key(&mut st, b, dest)?;
        let id = st.new_op_id();
        let n = u64_of(len);
        // Lone: nothing in flight and no other send since the last
        // progress call (a stream posts its sends back to back).
        // A load and a store, not a swap: a race between two senders only
        // blurs the heuristic, and an uncontended swap still costs a locked
        // instruction.
        let burst = self.sent_since_progress.load(Ordering::Relaxed);
        if !burst {
            self.sent_since_progress.store(true, Ordering::Relaxed);
        }
        let lone = !burst && self.outstanding.load(Ordering::Acquire) == 0;
        let eager = len <= EAGER_MAX || (lone && len <= EAGER_LONE_MAX);
        let (frame, src, now, pending) = if eager {
            let mut f = if tagged {
                Frame::tagged(id, tag, n)
            } else {
                Frame::msg(id, n)
            };
            if cq {
                f = f.with_cq_data(data);
            }
            if ack.is_empty() {
                (f, src, Done::Tx(done), None)
            } else {
                let f = f.with_flags(ack);
                (f, src, Done::None, Some((id, Pending::Ack { done })))
            }
        } else {
            let Src::User(buf) = src else {
                return Err(Error::inval("tcp: a large message needs a user buffer"));
            };
            let mut f = Frame::rts(id, tagged.then_some(tag), n).with_flags(ack);
            if cq {
                f = f.with_cq_data(data);
            }
            (
                f,
                Src::None,
                Done::None,
                Some((id, Pending::Rndv { buf, done, ack })),
            )
        };
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        self.submit(
            &mut st,
            b,
            key,
            &frame,
            src,
            now,
            pending,
            flags.contains(OpFlags::FENCE),
        );
        self.finish_pass(&mut st, b);
        Ok(())
    }

    /// An RMA write.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &self,
        dest: FiAddr,
        rma_iov: &[RmaIov],
        src: Src<'_>,
        len: usize,
        flags: OpFlags,
        data: u64,
        context: u64,
    ) -> Result<()> {
        let b = self.tx_start()?;
        let total = rma_iov
            .iter()
            .try_fold(0usize, |acc, r| acc.checked_add(r.len))
            .ok_or_else(|| Error::inval("tcp: rma iov lengths overflow"))?;
        if total != len {
            return Err(Error::inval(format!(
                "tcp: {len} local bytes for {total} remote bytes"
            )));
        }
        if len > self.info.ep_attr.max_msg_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("RMA write of {len} bytes is over max_msg_size"),
            ));
        }
        let inject = flags.contains(OpFlags::INJECT);
        let report = !inject && (!b.tx_selective || flags.contains(OpFlags::COMPLETION));
        let done = TxDone {
            context,
            flags: CompletionFlags::RMA | CompletionFlags::WRITE,
            len,
            report,
        };
        let mut st = self.lock();
        let key = self.dest_key(&mut st, b, dest)?;
        let id = st.new_op_id();
        // Writes are always acknowledged, so that a refusal at the target
        // reaches the initiator.
        let mut f = Frame::write(id, rma_iov)?.with_flags(Flags::ACK_DELIVERY);
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            f = f.with_cq_data(data);
        }
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        self.submit(
            &mut st,
            b,
            key,
            &f,
            src,
            Done::None,
            Some((id, Pending::Ack { done })),
            flags.contains(OpFlags::FENCE),
        );
        self.finish_pass(&mut st, b);
        Ok(())
    }

    /// An RMA read.
    pub(crate) fn read(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        let b = self.tx_start()?;
        let buf = Pieces::new(msg.iov)?;
        let len = buf.len();
        let total = msg
            .rma_iov
            .iter()
            .try_fold(0usize, |acc, r| acc.checked_add(r.len))
            .ok_or_else(|| Error::inval("tcp: rma iov lengths overflow"))?;
        if total != len {
            return Err(Error::inval(format!(
                "tcp: {len} local bytes for {total} remote bytes"
            )));
        }
        if len > self.info.ep_attr.max_msg_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("RMA read of {len} bytes is over max_msg_size"),
            ));
        }
        let done = TxDone {
            context: msg.context,
            flags: CompletionFlags::RMA | CompletionFlags::READ,
            len,
            report: !b.tx_selective || flags.contains(OpFlags::COMPLETION),
        };
        let mut st = self.lock();
        let key = self.dest_key(&mut st, b, msg.addr)?;
        let id = st.new_op_id();
        let f = Frame::read_req(id, msg.rma_iov)?;
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        self.submit(
            &mut st,
            b,
            key,
            &f,
            Src::None,
            Done::None,
            Some((
                id,
                Pending::Read {
                    buf,
                    len: u64_of(len),
                    done,
                },
            )),
            flags.contains(OpFlags::FENCE),
        );
        self.finish_pass(&mut st, b);
        Ok(())
    }

    /// An atomic operation (plain, fetching or compare).
    pub(crate) fn atomic(&self, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        let b = self.tx_start()?;
        let kind = AtomicKind::of(!msg.compare.is_empty(), !msg.result.is_empty());
        atomic::valid(msg.datatype, msg.op, kind)?;
        let count = msg
            .rma_iov
            .iter()
            .try_fold(0u64, |acc, r| acc.checked_add(u64_of(r.len)))
            .ok_or_else(|| Error::inval("tcp: atomic counts overflow"))?;
        if count == 0 || count > self.limits.max_atomic_count {
            return Err(Error::inval(format!(
                "tcp: {count} atomic elements (1 to {} allowed)",
                self.limits.max_atomic_count
            )));
        }
        let size = u64_of(msg.datatype.size());
        let bytes = count * size;
        let mut operands = Pieces::EMPTY;
        if msg.op != AtomicOp::AtomicRead {
            operands.extend(msg.iov)?;
            if u64_of(operands.len()) != bytes {
                return Err(Error::inval(format!(
                    "tcp: {} operand bytes for {count} elements of {size} bytes",
                    operands.len()
                )));
            }
        }
        if kind == AtomicKind::Compare {
            let cmp = Pieces::new(msg.compare)?;
            if u64_of(cmp.len()) != bytes {
                return Err(Error::inval(format!(
                    "tcp: {} compare bytes for {count} elements of {size} bytes",
                    cmp.len()
                )));
            }
            operands.extend(msg.compare)?;
        }
        let result = Pieces::new(msg.result)?;
        if kind != AtomicKind::Plain && u64_of(result.len()) < bytes {
            return Err(Error::new(
                ErrorKind::TooSmall,
                format!(
                    "tcp: {} result bytes for {count} elements of {size} bytes",
                    result.len()
                ),
            ));
        }
        let inject = flags.contains(OpFlags::INJECT);
        let report = !inject && (!b.tx_selective || flags.contains(OpFlags::COMPLETION));
        let done = TxDone {
            context: msg.context,
            flags: CompletionFlags::ATOMIC
                | if kind == AtomicKind::Plain {
                    CompletionFlags::WRITE
                } else {
                    CompletionFlags::READ
                },
            len: usize_of(bytes),
            report,
        };
        let mut st = self.lock();
        let key = self.dest_key(&mut st, b, msg.addr)?;
        let id = st.new_op_id();
        let mut f = Frame::atomic(id, kind, msg.datatype, msg.op, msg.rma_iov)?;
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            f = f.with_cq_data(msg.data);
        }
        let pending = if kind == AtomicKind::Plain {
            f = f.with_flags(Flags::ACK_DELIVERY);
            Pending::Ack { done }
        } else {
            Pending::Fetch {
                buf: result,
                len: bytes,
                done,
            }
        };
        let copy;
        let src = if inject && !operands.is_empty() {
            let mut v = vec![0u8; operands.len()];
            // SAFETY: the operands are readable now (the inject contract).
            unsafe { operands.read_at(0, &mut v) };
            copy = v;
            Src::Bytes(&copy)
        } else if !operands.is_empty() {
            Src::User(operands)
        } else {
            Src::None
        };
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        self.submit(
            &mut st,
            b,
            key,
            &f,
            src,
            Done::None,
            Some((id, pending)),
            flags.contains(OpFlags::FENCE),
        );
        self.finish_pass(&mut st, b);
        Ok(())
    }

    // ---------------------------------------------------------------
    // Receiving: posting, matching, unexpected messages (the engine), and
    // what the transport does for it.

    /// Posts a receive (untagged or tagged), with FI_PEEK / FI_CLAIM /
    /// FI_DISCARD and FI_MULTI_RECV.
    pub(crate) fn post_recv(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        let b = self.bound()?;
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.msg.closed && self.kind == Kind::Msg {
            return Err(Error::new(
                ErrorKind::Shutdown,
                "tcp: the connection is shut down",
            ));
        }
        let r = st.rx.post(b, msg, flags, tagged);
        self.finish_pass(st, b);
        r
    }

    /// Cancels a posted receive by context.
    pub(crate) fn cancel(&self, context: u64) -> Result<()> {
        let b = self.bound()?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let r = st.rx.cancel(b, context);
        self.finish_pass(st, b);
        r
    }

    /// Sets `FI_OPT_MIN_MULTI_RECV`.
    pub(crate) fn set_min_multi_recv(&self, bytes: usize) {
        self.min_multi_recv.store(bytes, Ordering::Relaxed);
        self.lock().rx.set_min_multi_recv(bytes);
    }

    /// Does what the receive engine asks of the transport: fetch a
    /// rendezvous message or a stalled payload into a receive, release
    /// one nobody wants, acknowledge a delivered message, pause or resume
    /// a connection.
    fn rx_actions(&self, st: &mut State, b: &Binds) {
        while let Some(a) = st.rx.next_action() {
            match a {
                Action::Fetch { recv, meta, remote } => match remote {
                    Remote::Rndv { conn, id, ack } => {
                        self.accept_rndv(st, b, conn, id, recv, meta, ack);
                    }
                    Remote::Stalled { conn } => {
                        if !self.unstall(st, conn, Sink::Recv(recv)) {
                            let err = Error::new(ErrorKind::ConnReset, "tcp: the sender went away");
                            st.rx.fail(b, recv, meta.tagged, &err);
                        }
                    }
                },
                Action::Release(Remote::Rndv { conn, id, .. }) => {
                    self.push_frame(st, b, conn, &Frame::cts(id, 0, None), Src::None, Done::None);
                }
                Action::Release(Remote::Stalled { conn }) => {
                    self.unstall(st, conn, Sink::Discard);
                }
                Action::Ack((conn, id)) => {
                    self.push_frame(st, b, conn, &Frame::ack(id, None), Src::None, Done::None);
                }
                Action::Pause(conn) => {
                    if let Some(c) = st.conns.get_mut(&conn) {
                        c.rx.paused = true;
                        self.rewatch(c, conn);
                    }
                }
                Action::Resume(conn) => {
                    if let Some(c) = st.conns.get_mut(&conn) {
                        c.rx.paused = false;
                        st.resume.push(conn);
                    }
                }
            }
        }
        self.cq_wait.store(st.rx.waits_for_cq(), Ordering::Relaxed);
    }

    /// Gives the payload a stalled connection left in its socket a
    /// destination (a receive, or none), so that reading goes on; `false`
    /// when the connection is gone or not stalled.
    fn unstall(&self, st: &mut State, cid: u32, sink: Sink) -> bool {
        let Some(c) = st.conns.get_mut(&cid) else {
            return false;
        };
        match c.rx.cur.as_mut() {
            Some(cur) if matches!(cur.sink, Sink::Stalled) => {
                cur.sink = sink;
                st.resume.push(cid);
                true
            }
            _ => {
                debug_assert!(false, "connection {cid} holds no stalled payload");
                false
            }
        }
    }

    /// Accepts a rendezvous message into receive `recv`: clear to send,
    /// or complete at once when nothing is taken.
    #[allow(clippy::too_many_arguments)]
    fn accept_rndv(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        id: u64,
        recv: RecvId,
        meta: Meta,
        ack: Flags,
    ) {
        if !st.conns.contains_key(&cid) {
            let err = Error::new(ErrorKind::ConnReset, "tcp: the sender went away");
            st.rx.fail(b, recv, meta.tagged, &err);
            return;
        }
        let room = st.rx.recv(recv).map_or(0, |r| u64_of(r.buf.len()));
        let accept = meta.len.min(room);
        self.push_frame(
            st,
            b,
            cid,
            &Frame::cts(id, accept, None),
            Src::None,
            Done::None,
        );
        if accept == 0 {
            st.rx.complete(b, recv, meta);
            if !ack.is_empty() {
                self.push_frame(st, b, cid, &Frame::ack(id, None), Src::None, Done::None);
            }
            return;
        }
        if let Some(c) = st.conns.get_mut(&cid) {
            c.rndv.insert(
                id,
                RndvRecv {
                    recv,
                    meta,
                    accept,
                    got: 0,
                    ack,
                    frame_off: 0,
                },
            );
        }
    }

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

    /// Reads what a connection has, handling every frame; a failure is
    /// recorded in `st.dead`.
    pub(crate) fn read_conn(&self, st: &mut State, b: &Binds, cid: u32) {
        if let Err(e) = self.read_conn_inner(st, b, cid) {
            st.dead.push((cid, e));
            return;
        }
        // Answers may have completed what a fence waits for.
        if st.conns.get(&cid).is_some_and(|c| !c.held.is_empty()) {
            self.release_held(st, b, cid);
        }
    }

    fn read_conn_inner(&self, st: &mut State, b: &Binds, cid: u32) -> Result<()> {
        let mut reads = 0;
        // The last read returned less than asked: the socket is (very
        // likely) empty, and level-triggered epoll reports what comes
        // later, so a read that would only say EAGAIN is skipped.
        let mut drained = false;
        loop {
            // Frames already in the read buffer.
            loop {
                let Some(conn) = st.conns.get_mut(&cid) else {
                    return Ok(());
                };
                if conn.rx.cur.is_none() && !conn.rx.tx_full && conn.tx.over_cap() {
                    // A peer that does not read its answers: read no more
                    // of its requests until they drain (`flush_one`).
                    conn.rx.tx_full = true;
                    self.rewatch(conn, cid);
                }
                if conn.rx.blocked() || conn.phase == Phase::Closing {
                    // Not read now; a reset peer (EPOLLERR and EPOLLHUP,
                    // which epoll always reports) fails the connection
                    // instead of waking its waiter for ever.
                    if let Ok(Some(e)) = conn.sock.take_error() {
                        return Err(e.into());
                    }
                    return Ok(());
                }
                let rx = &mut conn.rx;
                if rx.pos >= rx.len {
                    break;
                }
                let engine = &st.rx;
                let input = rx.buf.get(rx.pos..rx.len).unwrap_or_default();
                let (used, ev) = rx.dec.feed(input)?;
                rx.pos += used;
                match ev {
                    None => {}
                    Some(Event::Frame(f)) => {
                        rx.last_large = f.header.payload_len >= DIRECT_READ_MIN;
                        self.on_frame(st, b, cid, &f)?;
                    }
                    Some(Event::Payload { data, remaining }) => {
                        let Some(cur) = rx.cur.as_mut() else {
                            return Err(proto("tcp: payload without a frame"));
                        };
                        cur.sink.write(cur.got, data, &self.mr, engine);
                        cur.got += u64_of(data.len());
                        if remaining == 0 {
                            self.on_payload_done(st, b, cid)?;
                        }
                    }
                }
                if st.rx.has_actions() {
                    // A pause must hold before the next frame is read.
                    self.rx_actions(st, b);
                }
            }
            if reads >= READS_PER_CALL || drained {
                return Ok(());
            }
            reads += 1;
            let Some(conn) = st.conns.get_mut(&cid) else {
                return Ok(());
            };
            let engine = &st.rx;
            let Conn { sock, rx, rndv, .. } = conn;
            let fd = sock.as_fd();
            // A large payload with a known destination: straight into it.
            if let (Want::Payload(n), Some(cur)) = (rx.dec.want(), rx.cur.as_mut()) {
                if n >= DIRECT_READ_MIN {
                    let direct = match &mut cur.sink {
                        Sink::Region { rma, status } if status.is_none() => {
                            match locate(rma, usize_of(cur.got)) {
                                None => None,
                                Some((key, addr, room)) => {
                                    let k = room.min(usize_of(n));
                                    let r = self.mr.with_access(
                                        key,
                                        addr,
                                        k,
                                        MrAccess::REMOTE_WRITE,
                                        |dst| {
                                            // SAFETY: the range is inside a
                                            // region whose registration is
                                            // held during the call; peers
                                            // may write registered memory.
                                            unsafe { sys::recv_raw(fd, dst as *mut u8, k) }
                                        },
                                    );
                                    match r {
                                        Ok(io) => Some((io, k)),
                                        Err(e) => {
                                            // Deregistered meanwhile: the
                                            // rest is read and dropped.
                                            *status = Some(refusal(&e));
                                            None
                                        }
                                    }
                                }
                            }
                        }
                        sink => sink.span_at(cur.got, engine).map(|(ptr, room)| {
                            let k = room.min(usize_of(n));
                            // SAFETY: the span is inside a receive or result
                            // buffer that the operation's contract keeps
                            // valid and unaliased until its completion.
                            (unsafe { sys::recv_raw(fd, ptr, k) }, k)
                        }),
                    };
                    if let Some((r, asked)) = direct {
                        match r {
                            Ok(0) => return Err(self.eof(rx)),
                            Ok(k) => {
                                drained = k < asked;
                                rx.dec.consume_payload(u64_of(k))?;
                                cur.got += u64_of(k);
                                if rx.dec.payload_remaining() == 0 {
                                    self.on_payload_done(st, b, cid)?;
                                }
                                continue;
                            }
                            Err(e) if sys::would_block(&e) => {
                                return Ok(());
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
            // After a large payload, or while rendezvous data is due, the
            // next frame is likely large too: read little, so that its
            // payload can go straight to its destination instead of through
            // the read buffer.
            if rx.buf.is_empty() {
                // A connection's read buffer exists once it has something
                // to read: silent sockets cost no buffer.
                rx.buf = vec![0u8; crate::conn::RBUF].into_boxed_slice();
            }
            let between = rx.cur.is_none();
            let want = if between && (rx.last_large || !rndv.is_empty()) {
                SMALL_READ
            } else {
                rx.buf.len()
            };
            match sys::recv_buf(fd, rx.buf.get_mut(..want).unwrap_or_default()) {
                Ok(0) => return Err(self.eof(rx)),
                Ok(k) => {
                    rx.pos = 0;
                    rx.len = k;
                    drained = k < want;
                }
                Err(e) if sys::would_block(&e) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The error for the end of a connection's stream.
    fn eof(&self, rx: &crate::conn::Rx) -> Error {
        match rx.dec.eof() {
            Ok(()) if rx.cur.is_none() => Error::new(
                if self.kind == Kind::Msg {
                    ErrorKind::Shutdown
                } else {
                    ErrorKind::ConnReset
                },
                "tcp: the peer closed the connection",
            ),
            Ok(()) => Error::new(
                ErrorKind::ConnReset,
                "tcp: the peer closed the connection mid-frame",
            ),
            Err(e) => Error::new(ErrorKind::ConnReset, e.detail().to_string()),
        }
    }

    fn set_cur(&self, st: &mut State, cid: u32, frame: &Frame, sink: Sink) {
        if let Some(c) = st.conns.get_mut(&cid) {
            c.rx.cur = Some(Cur {
                frame: *frame,
                sink,
                got: 0,
            });
        }
    }

    /// The headers of a frame arrived: act on it, or say where its payload
    /// goes.
    fn on_frame(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let Some(conn) = st.conns.get_mut(&cid) else {
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
        let plen = f.header.payload_len;
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
            Op::Msg | Op::Tagged => {
                let tagged = op == Op::Tagged;
                let tag = f.header.tag;
                let src = self.source(st, b, cid);
                match st.rx.arrive(tagged, tag, src, plen) {
                    Some(id) => {
                        let whole = plen == 0 || {
                            let State { conns, rx, .. } = &mut *st;
                            let buf = rx.recv(id).map(|r| &r.buf);
                            // SAFETY: the receive contract keeps the buffer
                            // valid and unaliased until its completion.
                            take_inline(conns, cid, plen, |d| unsafe {
                                if let Some(buf) = buf {
                                    buf.write_at(0, d);
                                }
                            })?
                        };
                        if whole {
                            self.msg_done(st, b, cid, f, Landed::Recv(id))?;
                        } else {
                            self.set_cur(st, cid, f, Sink::Recv(id));
                        }
                    }
                    None => {
                        let len = usize_of(plen);
                        let reading = len.saturating_add(st.unexp_reading);
                        if plen == 0 || st.rx.admit(cid, reading) {
                            let mut v = st.rx.take_buf(len);
                            let whole = plen == 0
                                || take_inline(&mut st.conns, cid, plen, |d| {
                                    v.extend_from_slice(d)
                                })?;
                            if whole {
                                self.msg_done(st, b, cid, f, Landed::Unexp(v))?;
                            } else {
                                st.unexp_reading += len;
                                self.set_cur(st, cid, f, Sink::Unexp(v));
                            }
                        } else {
                            // Over budget (the engine pauses the
                            // connection): the payload stays in the socket
                            // until a receive takes it.
                            let data = f
                                .header
                                .flags
                                .contains(Flags::REMOTE_CQ_DATA)
                                .then_some(f.header.data);
                            let entry = Entry {
                                len: plen,
                                data,
                                peer: cid,
                                held: Held::Remote(Remote::Stalled { conn: cid }),
                            };
                            st.rx.keep(tagged, tag, src, entry);
                            self.set_cur(st, cid, f, Sink::Stalled);
                        }
                    }
                }
            }
            Op::MsgRts | Op::TaggedRts => {
                let Ext::Rts { msg_len } = f.ext else {
                    return Err(proto("tcp: rendezvous request without its length"));
                };
                let tagged = op == Op::TaggedRts;
                let tag = f.header.tag;
                let src = self.source(st, b, cid);
                let data = f
                    .header
                    .flags
                    .contains(Flags::REMOTE_CQ_DATA)
                    .then_some(f.header.data);
                let ack = f.header.flags.difference(Flags::REMOTE_CQ_DATA);
                let meta = Meta {
                    tagged,
                    tag,
                    len: msg_len,
                    data,
                    src,
                };
                let id = f.header.id;
                match st.rx.arrive(tagged, tag, src, msg_len) {
                    Some(recv) => self.accept_rndv(st, b, cid, id, recv, meta, ack),
                    None => {
                        let entry = Entry {
                            len: msg_len,
                            data,
                            peer: cid,
                            held: Held::Remote(Remote::Rndv { conn: cid, id, ack }),
                        };
                        st.rx.keep(tagged, tag, src, entry);
                    }
                }
            }
            Op::Cts => {
                let Ext::Cts { accept_len } = f.ext else {
                    return Err(proto("tcp: Cts without its length"));
                };
                let id = f.header.id;
                let Pending::Rndv { buf, done, ack } =
                    take_pending(&mut conn.pending, id, "Cts", |p| {
                        matches!(p, Pending::Rndv { .. })
                    })?
                else {
                    return Err(proto(format!("tcp: Cts for request {id} of another kind")));
                };
                if let Some(kind) = f.header.status {
                    self.tx_complete(b, done, Some(&remote(kind, "message")));
                } else if accept_len > u64_of(buf.len()) {
                    let e = proto(format!(
                        "tcp: Cts accepts {accept_len} bytes of a {}-byte message",
                        buf.len()
                    ));
                    self.tx_complete(b, done, Some(&e));
                    return Err(e);
                } else if accept_len == 0 {
                    self.tx_complete(b, done, None);
                } else {
                    let data = Frame::rndv_data(id, 0, accept_len);
                    let part = Src::User(buf.sub(0, usize_of(accept_len)));
                    if ack.is_empty() {
                        self.push_frame(st, b, cid, &data, part, Done::Tx(done));
                    } else {
                        if let Some(c) = st.conns.get_mut(&cid) {
                            c.pending.insert(id, Pending::Ack { done });
                        }
                        self.push_frame(st, b, cid, &data, part, Done::None);
                    }
                }
            }
            Op::RndvData => {
                let Ext::RndvData { offset } = f.ext else {
                    return Err(proto("tcp: RndvData without its offset"));
                };
                let id = f.header.id;
                let Some(mut r) = conn.rndv.remove(&id) else {
                    return Err(proto(format!("tcp: RndvData for unknown rendezvous {id}")));
                };
                let end = offset.saturating_add(plen);
                if end > r.accept || offset != r.got {
                    return Err(proto(format!(
                        "tcp: RndvData {offset}+{plen} of rendezvous {id} outside its {} accepted bytes",
                        r.accept
                    )));
                }
                r.frame_off = offset;
                if plen == 0 {
                    conn.rndv.insert(id, r);
                } else {
                    self.set_cur(st, cid, f, Sink::Rndv(r));
                }
            }
            Op::Ack => {
                let id = f.header.id;
                match conn.pending.remove(&id) {
                    Some(Pending::Ack { done }) => {
                        let err = f.header.status.map(|k| remote(k, "operation"));
                        self.tx_complete(b, done, err.as_ref());
                    }
                    Some(other) => {
                        conn.pending.insert(id, other);
                        return Err(proto(format!(
                            "tcp: Ack for request {id}, which awaits data"
                        )));
                    }
                    None => return Err(proto(format!("tcp: Ack for unknown request {id}"))),
                }
            }
            Op::Write => {
                let Ext::Rma(rma) = f.ext else {
                    return Err(proto("tcp: Write without its ranges"));
                };
                let status = self.refused(&rma, MrAccess::REMOTE_WRITE);
                if let Some(kind) = status {
                    tracing::debug!(error = %kind.c_name(), "tcp: refused an RMA write");
                }
                let sink = Sink::Region { rma, status };
                if plen == 0 {
                    self.write_done(st, b, cid, f, status);
                } else {
                    self.set_cur(st, cid, f, sink);
                }
            }
            Op::ReadReq => {
                let Ext::Rma(rma) = f.ext else {
                    return Err(proto("tcp: ReadReq without its ranges"));
                };
                let status = self.refused(&rma, MrAccess::REMOTE_READ);
                let id = f.header.id;
                match status {
                    Some(kind) => {
                        let rsp = Frame::read_rsp(id, Some(kind), 0);
                        self.push_frame(st, b, cid, &rsp, Src::None, Done::None);
                    }
                    None => {
                        let total = rma.total_len().unwrap_or(0);
                        let rsp = Frame::read_rsp(id, None, total);
                        self.push_frame(st, b, cid, &rsp, Src::Region(rma), Done::None);
                        if let Some(c) = &b.cntr_remote_read {
                            c.add(1);
                        }
                    }
                }
            }
            Op::ReadRsp => {
                let id = f.header.id;
                let Pending::Read { buf, len, done } =
                    take_pending(&mut conn.pending, id, "ReadRsp", |p| {
                        matches!(p, Pending::Read { .. })
                    })?
                else {
                    return Err(proto(format!(
                        "tcp: ReadRsp for request {id} of another kind"
                    )));
                };
                if let Some(kind) = f.header.status {
                    self.tx_complete(b, done, Some(&remote(kind, "RMA read")));
                } else if plen != len {
                    let e = proto(format!("tcp: ReadRsp of {plen} bytes for a read of {len}"));
                    self.tx_complete(b, done, Some(&e));
                    return Err(e);
                } else if plen == 0 {
                    self.tx_complete(b, done, None);
                } else {
                    self.set_cur(st, cid, f, Sink::Read { buf, done });
                }
            }
            Op::Atomic | Op::FetchAtomic | Op::CompareAtomic => {
                let mut v = std::mem::take(&mut conn.scratch);
                v.clear();
                v.reserve(usize_of(plen));
                if plen == 0 {
                    self.atomic_done(st, b, cid, f, v);
                } else {
                    self.set_cur(st, cid, f, Sink::Scratch(v));
                }
            }
            Op::AtomicRsp => {
                let id = f.header.id;
                let Pending::Fetch { buf, len, done } =
                    take_pending(&mut conn.pending, id, "AtomicRsp", |p| {
                        matches!(p, Pending::Fetch { .. })
                    })?
                else {
                    return Err(proto(format!(
                        "tcp: AtomicRsp for request {id} of another kind"
                    )));
                };
                if let Some(kind) = f.header.status {
                    self.tx_complete(b, done, Some(&remote(kind, "atomic operation")));
                } else if plen != len {
                    let e = proto(format!(
                        "tcp: AtomicRsp of {plen} bytes for {len} bytes of results"
                    ));
                    self.tx_complete(b, done, Some(&e));
                    return Err(e);
                } else {
                    self.set_cur(st, cid, f, Sink::Fetch { buf, done });
                }
            }
            Op::ConnReq | Op::ConnAccept | Op::ConnReject => {
                let v = Vec::with_capacity(usize_of(plen));
                if plen == 0 {
                    self.cm_frame(st, b, cid, f, v)?;
                } else {
                    self.set_cur(st, cid, f, Sink::Private(v));
                }
            }
            Op::Hello => self.rdm_on_hello(st, b, cid, f)?,
            Op::HelloAck => self.rdm_on_hello_ack(st, b, cid, f)?,
        }
        Ok(())
    }

    /// The payload of the current frame is complete.
    fn on_payload_done(&self, st: &mut State, b: &Binds, cid: u32) -> Result<()> {
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
            (op, _) => return Err(proto(format!("tcp: {op} payload without a destination"))),
        }
        Ok(())
    }

    /// A message frame is complete.
    fn msg_done(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        landed: Landed,
    ) -> Result<()> {
        let tagged = f.header.op == Op::Tagged;
        let data = f
            .header
            .flags
            .contains(Flags::REMOTE_CQ_DATA)
            .then_some(f.header.data);
        let ack = f.header.flags.difference(Flags::REMOTE_CQ_DATA);
        let src = self.source(st, b, cid);
        let meta = Meta {
            tagged,
            tag: f.header.tag,
            len: f.header.payload_len,
            data,
            src,
        };
        let id = f.header.id;
        let mut acked = false;
        match landed {
            Landed::Recv(recv) => st.rx.complete(b, recv, meta),
            Landed::Unexp(bytes) => {
                // Into a receive posted while the data arrived, or kept;
                // a delivery acknowledgement waits for the delivery.
                let delivery = ack.contains(Flags::ACK_DELIVERY);
                acked = delivery;
                let entry = Entry {
                    len: meta.len,
                    data,
                    peer: cid,
                    held: Held::Bytes {
                        bytes,
                        ack: delivery.then_some((cid, id)),
                    },
                };
                st.rx.land(b, tagged, meta.tag, src, entry);
            }
            Landed::Elsewhere => {}
        }
        if !ack.is_empty() && !acked {
            self.push_frame(st, b, cid, &Frame::ack(id, None), Src::None, Done::None);
        }
        Ok(())
    }

    /// An RMA write frame is complete: counters, remote CQ data, ack.
    fn write_done(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        status: Option<ErrorKind>,
    ) {
        if status.is_none() {
            if let Some(c) = &b.cntr_remote_write {
                c.add(1);
            }
            if f.header.flags.contains(Flags::REMOTE_CQ_DATA) {
                self.remote_cq_data(st, b, cid, f.header.data);
            }
        }
        let ack = f.header.flags.difference(Flags::REMOTE_CQ_DATA);
        if !ack.is_empty() {
            let a = Frame::ack(f.header.id, status);
            self.push_frame(st, b, cid, &a, Src::None, Done::None);
        }
    }

    /// Remote CQ data of an RMA or atomic operation: a completion in the
    /// receive CQ; it consumes a posted receive only in FI_RX_CQ_DATA mode.
    /// A sender that fills the receive CQ with these is paused until the
    /// application reads; kept ones (FI_RX_CQ_DATA) count against the
    /// unexpected budget.
    fn remote_cq_data(&self, st: &mut State, b: &Binds, cid: u32, data: u64) {
        let src = self.source(st, b, cid);
        let consume = self.info.mode.contains(Mode::RX_CQ_DATA);
        st.rx.remote_cq_data(b, data, src, cid, consume);
    }

    /// An atomic request is complete: check, execute, answer.
    fn atomic_done(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame, operands: Vec<u8>) {
        let Ext::Atomic(a) = f.ext else {
            return;
        };
        let kind = atomic_kind(f.header.op).unwrap_or(AtomicKind::Plain);
        let mut results = st
            .conns
            .get_mut(&cid)
            .map(|c| std::mem::take(&mut c.results))
            .unwrap_or_default();
        results.clear();
        let access = if a.op() == AtomicOp::AtomicRead {
            MrAccess::REMOTE_READ
        } else {
            MrAccess::REMOTE_WRITE
        };
        let status = if self.serves(Caps::ATOMIC, access) {
            atomic::execute(&self.mr, kind, &a, &operands, &mut results).err()
        } else {
            Some(ErrorKind::Access)
        };
        if let Some(kind) = status {
            tracing::debug!(error = %kind.c_name(), "tcp: refused an atomic operation");
        } else {
            let c = if a.op() == AtomicOp::AtomicRead {
                &b.cntr_remote_read
            } else {
                &b.cntr_remote_write
            };
            if let Some(c) = c {
                c.add(1);
            }
            if f.header.flags.contains(Flags::REMOTE_CQ_DATA) {
                self.remote_cq_data(st, b, cid, f.header.data);
            }
        }
        let id = f.header.id;
        match kind {
            AtomicKind::Plain => {
                if !f.header.flags.difference(Flags::REMOTE_CQ_DATA).is_empty() {
                    self.push_frame(st, b, cid, &Frame::ack(id, status), Src::None, Done::None);
                }
            }
            AtomicKind::Fetch | AtomicKind::Compare => {
                let len = if status.is_some() {
                    0
                } else {
                    u64_of(results.len())
                };
                let rsp = Frame::atomic_rsp(id, status, len);
                let src = if len == 0 {
                    Src::None
                } else {
                    Src::Bytes(&results)
                };
                self.push_frame(st, b, cid, &rsp, src, Done::None);
            }
        }
        if let Some(c) = st.conns.get_mut(&cid) {
            c.scratch = operands;
            c.results = results;
        }
    }

    /// The AV handle of a connection's peer.
    fn source(&self, st: &mut State, b: &Binds, cid: u32) -> FiAddr {
        let Some(c) = st.conns.get_mut(&cid) else {
            return FiAddr::NOTAVAIL;
        };
        if c.src == FiAddr::NOTAVAIL && self.kind == Kind::Rdm {
            if let (Some(peer), Some(av)) = (c.peer, &b.av) {
                c.src = av.reverse(&Address::from(peer));
            }
        }
        c.src
    }

    /// A connection management frame (MSG) is complete.
    fn cm_frame(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        data: Vec<u8>,
    ) -> Result<()> {
        match f.header.op {
            Op::ConnAccept => self.msg_on_accept(st, b, cid, f, data),
            Op::ConnReject => self.msg_on_reject(st, b, cid, f, data),
            op => Err(proto(format!("tcp: {op} on an active endpoint"))),
        }
    }

    // ---------------------------------------------------------------
    // Failure.

    /// A connection failed: everything started on it completes with an
    /// error, it is dropped, and its peer reconnects on the next send.
    pub(crate) fn fail_conn(&self, st: &mut State, b: &Binds, cid: u32, err: &Error) {
        let Some(mut conn) = st.conns.remove(&cid) else {
            return;
        };
        tracing::debug!(conn = cid, error = %err, "tcp: connection failed");
        if let Some(key) = conn.peer {
            let mut fail_backlog = false;
            if let Some(p) = st.peers.get_mut(&key) {
                if p.conn == Some(cid) {
                    p.conn = None;
                }
                if p.connecting == Some(cid) {
                    p.connecting = None;
                    fail_backlog = p.conn.is_none();
                }
            }
            if fail_backlog {
                self.fail_backlog(st, b, key, err);
            }
            if st
                .peers
                .get(&key)
                .is_some_and(|p| p.conn.is_none() && p.connecting.is_none() && p.backlog.is_empty())
            {
                st.peers.remove(&key);
            }
        }
        for item in conn.tx.drain() {
            if let (_, Done::Tx(t)) = item.into_parts() {
                self.tx_complete(b, t, Some(err));
            }
        }
        for q in std::mem::take(&mut conn.held) {
            self.fail_queued(b, q, err);
        }
        let mut pending: Vec<(u64, Pending)> = conn.pending.drain().collect();
        pending.sort_by_key(|(id, _)| *id);
        for (_, p) in pending {
            self.tx_complete(b, p.done(), Some(err));
        }
        if let Some(cur) = conn.rx.cur.take() {
            match cur.sink {
                Sink::Recv(recv) => {
                    let tagged = cur.frame.header.op == Op::Tagged;
                    st.rx.fail(b, recv, tagged, err);
                }
                Sink::Rndv(r) => st.rx.fail(b, r.recv, r.meta.tagged, err),
                Sink::Read { done, .. } | Sink::Fetch { done, .. } => {
                    self.tx_complete(b, done, Some(err));
                }
                Sink::Unexp(v) => {
                    let len = usize_of(cur.frame.header.payload_len);
                    st.unexp_reading = st.unexp_reading.saturating_sub(len);
                    st.rx.give_buf(v);
                }
                _ => {}
            }
        }
        let mut rndv: Vec<(u64, RndvRecv)> = conn.rndv.drain().collect();
        rndv.sort_by_key(|(id, _)| *id);
        for (_, r) in rndv {
            st.rx.fail(b, r.recv, r.meta.tagged, err);
        }
        // Rendezvous requests and stalled payloads of this connection are
        // gone with it; its buffered messages stay deliverable.
        st.rx.peer_gone(cid);
        if self.kind == Kind::Msg {
            self.msg_conn_lost(st, b, cid, err);
        }
    }
}

/// What the frames just written asked for.
#[derive(Debug, Default)]
struct WriteNote {
    connected: bool,
    close: bool,
}

/// When the whole payload of the frame just decoded is in the connection's
/// read buffer (small messages, usually): hands it to `put` and consumes
/// it, so that the frame completes without a payload pass. `false`: the
/// payload is still (partly) in the socket.
fn take_inline(
    conns: &mut Conns<Conn>,
    cid: u32,
    plen: u64,
    put: impl FnOnce(&[u8]),
) -> Result<bool> {
    let Some(rx) = conns.get_mut(&cid).map(|c| &mut c.rx) else {
        return Ok(false);
    };
    let end = usize::try_from(plen)
        .ok()
        .and_then(|n| rx.pos.checked_add(n))
        .filter(|&end| end <= rx.len);
    let Some(data) = end.and_then(|end| rx.buf.get(rx.pos..end)) else {
        return Ok(false);
    };
    put(data);
    rx.pos += data.len();
    rx.dec.consume_payload(plen)?;
    Ok(true)
}

/// The status a refused remote access travels back with: a bad key is
/// `FI_EKEYREJECTED`, a range outside the region or a missing right
/// `FI_EACCES`.
fn refusal(e: &Error) -> ErrorKind {
    match e.kind() {
        ErrorKind::NoKey => ErrorKind::KeyRejected,
        ErrorKind::Access => ErrorKind::Access,
        other => other,
    }
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

    fn progress_direct(&self) -> Option<()> {
        let b = self.bound.get()?;
        self.progressed();
        let mut guard = match self.state.try_lock() {
            Ok(g) => g,
            Err(_) => return None,
        };
        let st = &mut *guard;
        if !direct_ok(st) {
            return None;
        }
        if self.poller.may_unwatch() {
            for c in st.conns.values_mut() {
                if c.watched && !c.want_write {
                    c.watched = false;
                    self.unwatched.store(true, Ordering::Relaxed);
                    let _ = self.poller.remove(c.fd());
                }
            }
        }
        if self.tx_waiting.load(Ordering::Acquire) && self.tx_waiting.swap(false, Ordering::AcqRel)
        {
            let mut ids = std::mem::take(&mut st.flush_ids);
            ids.clear();
            ids.extend(st.conns.keys());
            for cid in ids.iter() {
                self.flush_one(st, b, *cid);
            }
            st.flush_ids = ids;
        }
        let mut ids = std::mem::take(&mut st.flush_ids);
        ids.clear();
        ids.extend(st.conns.keys());
        for cid in ids.iter() {
            self.read_conn(st, b, *cid);
        }
        st.flush_ids = ids;
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
        {
            return Ok(());
        }
        let Some(b) = self.bound.get() else {
            return Ok(());
        };
        let mut guard = match self.state.try_lock() {
            Ok(g) => g,
            // Another thread is working on this endpoint right now.
            Err(std::sync::TryLockError::WouldBlock) => return Ok(()),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
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
