//! RDM endpoints: reliable, unconnected messaging over RC queue pairs that
//! are connected on demand, so that applications written for the tcp and
//! shm RDM endpoints run unchanged on RDMA.
//!
//! # Connections
//!
//! An RDM endpoint listens with rdma_cm on its own address (its name,
//! `fi_getname`). The first operation towards a peer starts a connection to
//! the peer's name; operations posted meanwhile wait in the connection's
//! backlog (holding their send buffers) and go out once it is established.
//! The endpoint's progress, driven by reading its CQs, moves the connection
//! along: address and route resolution, then the request, whose private
//! data carries this endpoint's name so the peer knows who it is for
//! FI_SOURCE. The accepting side treats the connection as established at
//! the first message that arrives on it (its QP was ready to send since the
//! accept). An endpoint
//! sends only on connections it initiated, so the messages from one
//! endpoint to another keep their order; it receives on any. When two
//! endpoints talk both ways they hold two connections, which needs no
//! tie-breaking. A peer that cannot be reached fails what waited for the
//! connection with error completions (`FI_EHOSTUNREACH`,
//! `FI_ECONNREFUSED`), and the next operation returns that error once; a
//! connection that breaks fails what was in flight on it (error
//! completions with the verbs status), and the next operation connects
//! again. A work request that fails (a refused RMA: remote access error)
//! leaves its RC queue pair in the error state: that operation completes
//! with its own error, the connection is torn down as if the peer had
//! disconnected (the rest of its send queue comes back flushed, each
//! operation failing once with `FI_ECANCELED`; its queue pair is destroyed
//! once they are reaped), and the next operation either way reconnects.
//!
//! A peer process that dies is seen through its kernel: closing its
//! rdma_cm file destroys its ids, and the CM sends a disconnect request
//! (DREQ) for each connected one. Both connections to it then report
//! `DISCONNECTED`, are moved to the error state, and everything aimed at
//! the peer fails: work requests flush, rendezvous sends waiting for a FIN
//! fail with `FI_ECONNRESET`. `tests/fault.rs` measures it in the rxe rig
//! (SIGKILL mid-transfer): 20-50 ms.
//!
//! A peer whose host or link dies sends no DREQ, and the queue pair only
//! notices through a work request that goes unanswered: it retransmits
//! after each ACK timeout, and after the last of its 6 retries
//! ([`RETRY_COUNT`](crate::raw::cm::RETRY_COUNT)) fails the request with
//! `IBV_WC_RETRY_EXC_ERR` (`FI_ETIMEDOUT`). The connection is then torn
//! down as above, and its rendezvous sends fail at once (`FI_ECONNRESET`:
//! waiting for the disconnect to go through would wait for the CM's own
//! timeout, a minute or more, from a peer that answers nothing). A
//! rendezvous send whose announcement was acknowledged has nothing on the
//! wire while it waits for the FIN, so the endpoint's progress keeps its
//! connection probed: while the application's operations wait on a
//! connection with no work request posted, and nothing came from the peer
//! for a whole [`PROBE_IDLE`] (1 s), a zero-byte RDMA write goes out
//! (`Engine::liveness`; it costs nothing while no rendezvous send waits,
//! and one clock reading per 64 CQ reads while one does). So everything
//! outstanding towards a dead host ends, each operation with exactly one
//! error completion, within
//!
//! > 2 x [`PROBE_IDLE`] + 7 x the ACK timeout
//!
//! of its death, whether the application polls its CQ or sleeps in
//! `sread` / on the CQ's wait fd: while a thread sleeps with rendezvous
//! sends waiting, a timer among the endpoint's wait fds wakes it every
//! half interval for the sweep ([`probe`]). The ACK timeout is the one
//! rdma_cm picks from the path: for RoCE 4.096 us x 2^(packet life time + 1), with a packet
//! life time of 18 in Linux 6.1 (Debian 12; 2.1 s: a bound of about
//! 17 s) and 16 in later kernels (0.54 s: about 6 s). `tests/cross_host.rs`
//! measures it between two rxe guests on Debian 12's kernel: 15 to 16 s,
//! for sends in flight and for rendezvous sends that only waited. The
//! ACK timeout is left to rdma_cm: a value short enough to detect a dead
//! host within 1 s (`RDMA_OPTION_ID_ACK_TIMEOUT` 14, 67 ms) would
//! retransmit, and after 7 tries fail healthy connections, under
//! congestion or on large fabrics where the round trip is longer. The
//! endpoint stays usable: the next operation towards the peer connects
//! again (to a restarted peer too).
//!
//! # Protocol (version 1)
//!
//! Every message starts with a 56-byte header, little-endian:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | op: 1 message, 2 tagged message, 3 message RTS, 4 tagged RTS, 5 FIN |
//! | 1 | 1 | flags: bit 0 remote CQ data present, bit 1 error (FIN) |
//! | 2 | 6 | zero |
//! | 8 | 8 | tag (tagged ops) |
//! | 16 | 8 | remote CQ data |
//! | 24 | 8 | message length |
//! | 32 | 8 | rendezvous id (RTS, FIN) |
//! | 40 | 8 | source address of the data (RTS) |
//! | 48 | 4 | remote key of the data (RTS) |
//! | 52 | 4 | zero |
//!
//! - **Eager** (up to [`EAGER_MAX`] bytes): the data follows the header in
//!   the same send; it is copied into a registered send buffer, so user
//!   buffers need no registration and the buffer is free when the call
//!   returns. Receives land in a shared receive queue of registered
//!   buffers; a matching posted receive gets a copy, else the message
//!   waits in the unexpected queue (copied out while the unexpected budget
//!   allows, else left in its receive buffer: see [`rx`]).
//! - **Rendezvous** (larger): the sender registers its buffer for remote
//!   reads and sends an RTS; once a receive matches, the receiver reads the
//!   data with one RDMA read straight into the receive buffer (registered
//!   on the fly) and answers FIN; the send completes on the FIN.
//! - At most `tx_attr.size` of the application's transmits (sends, RMA,
//!   atomics) are outstanding at once; the next returns `FI_EAGAIN`. A
//!   rendezvous send keeps its buffer registered until its FIN, so this
//!   bounds what a burst of them pins.
//! - Each connection's send queue holds [`QP_DEPTH`] work requests, and
//!   all of them together stay below what the receive queue leaves of the
//!   endpoint's CQ ([`CQ_DEPTH`]): an overflowing CQ loses completions.
//!   A connection posts at most [`READ_WINDOW`] reads and
//!   [`CONTROL_WINDOW`] FINs at once. Reads and FINs beyond those bounds
//!   wait in the endpoint (reads in order per connection) and go out as
//!   completions make room, so a receiver may post receives for any
//!   number of announced messages at once; the application's own
//!   operations get `FI_EAGAIN`, and a backlog waits.
//! - A FIN takes one of the sender's receive buffers: a sender that stops
//!   driving progress (`FI_PROGRESS_MANUAL`) stops reposting them, and
//!   once they are used up its FINs wait on the connection (RNR, retried
//!   for ever: a peer busy computing is not dead), with the reads of its
//!   later messages behind them. So a sender's rendezvous messages need
//!   its progress to be read (its eager messages need nothing of it), and
//!   what such a peer holds of the receiver is bounded by the windows:
//!   [`CONTROL_WINDOW`] send buffers and [`READ_WINDOW`] work requests.
//! - Tag matching, the unexpected queue and its budget, directed receive,
//!   FI_PEEK / FI_CLAIM / FI_DISCARD, FI_MULTI_RECV and cancel are the
//!   kit's receive engine ([`fabric_core::kit::rx::RxEngine`], driven by
//!   [`rx`]).
//! - Shared receive contexts (`fi_srx_context`): the bound endpoints
//!   share the engine, each driving it for the messages that arrive at it
//!   ([`srx`]).
//! - RMA and atomics go straight to the NIC on the connection (RDMA write /
//!   read, fetch-add, compare-swap); remote CQ data of a write arrives as
//!   the immediate of an RDMA write and is reported in the target's
//!   receive CQ without consuming a posted receive.
//!
//! # FI_FENCE
//!
//! A fenced operation, and everything posted after it to the same peer,
//! waits until the operations posted before it to that peer have
//! completed (fi_msg(3), fi_rma(3)). `IBV_SEND_FENCE` would not do: it
//! only orders a request after the RDMA reads and atomics before it on
//! the queue pair, while an RDM send may be a rendezvous that completes
//! only at the receiver's FIN. So the fence is kept here: each connection
//! counts the application's operations posted on it and not completed
//! (an RTS until its FIN); a fenced operation finding any waits, with
//! what comes after it, in the connection's backlog (the queue operations
//! also wait in while the connection is made), and the backlog is posted
//! in order as the count drops to zero, as far as the send queue has
//! room (progress posts the rest as completions make room). Control
//! messages (FIN) never wait behind a fence.
//!
//! Headers of another version, unknown ops or lengths that do not add up
//! are dropped with a debug line; the peer is then stuck, not this
//! endpoint.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fabric_core::kit::av::AvTable;
use fabric_core::kit::hash::IdMap;
use fabric_core::kit::net::IpBook;
use fabric_core::kit::objects::{Av, Progress};
use fabric_core::kit::rx::{Budget, MIN_MULTI_RECV, Meta, RecvId, RxEngine};
use fabric_core::objects::{
    AtomicMsg, AtomicOp, AtomicOps, Bind, CmOps, CompletionFlags, CqEntry, CqErrEntry, Datatype,
    Endpoint, FiAddr, Msg, MsgOps, RmaMsg, RmaOps, TaggedOps,
};
use fabric_core::{Address, Caps, Error, ErrorKind, Info, OpFlags, Result};

use super::{Binds, IOV_MAX, lock, wc_error};
use crate::domain::{DomainCore, lkey_of};
use crate::raw::cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, QpCaps};
use crate::raw::from_errno;
use crate::raw::mem::{AtomicBufs, NO_IOV, UserDst, UserIov, UserMsg};
use crate::raw::verbs::{Access, HwCq, Mr, Pool, RegVec, Srq};
use crate::raw::wr::{Opcode, RETRY_EXC, SendFlags, SendWr, Sge, SgeList, Wc, WcKind, status_text};

/// Bytes of unexpected messages an RDM endpoint buffers by default
/// (`rx_attr.total_buffered_recv`); beyond them, messages stay in the
/// receive buffers they arrived in (see [`rx`]).
pub(crate) const UNEXPECTED_BUDGET: usize = 8 << 20;
/// Largest RDM message.
pub(crate) const MAX_MSG_SIZE: usize = 1 << 30;
/// Largest message sent eagerly (copied through registered buffers).
pub(crate) const EAGER_MAX: usize = 8192;
/// Header size.
const HDR: usize = 56;
/// Size of one send / receive buffer.
const BUF: usize = HDR + EAGER_MAX;
/// Send buffers per endpoint.
const TX_BUFS: usize = 256;
/// Receive buffers per endpoint (in its shared receive queue).
const RX_BUFS: usize = 256;
/// Send queue depth of each connection.
const QP_DEPTH: u32 = 640;
/// Entries of an endpoint's CQ: the receive queue's completions and
/// those of every connection's send queue, whose work requests together
/// are held below what the receive queue leaves ([`Engine::room`]).
const CQ_DEPTH: i32 = 4096;
/// Outstanding reads / atomics per connection.
const RD_ATOMIC: u8 = 16;
/// RDMA reads of rendezvous messages a connection has posted at once
/// (the rest wait in the endpoint): the NIC runs at most [`RD_ATOMIC`]
/// at a time, so more would gain nothing, and a sender that stops
/// progressing holds at most this many behind its FINs.
const READ_WINDOW: usize = 64;
/// FINs a connection has posted at once (the rest wait in the
/// endpoint): a sender that stops progressing leaves its FINs stalled
/// (RNR), each holding a send buffer, and may hold no more than this
/// many of the endpoint's [`TX_BUFS`].
const CONTROL_WINDOW: usize = 32;
/// How long a connection on which operations wait for the peer (see
/// [`Engine::liveness`]) may stay quiet before a probe goes out.
const PROBE_IDLE: Duration = Duration::from_secs(1);

const K_RX: u64 = 1 << 62;
const K_TX: u64 = 2 << 62;
const K_READ: u64 = 3 << 62;
const K_RMA: u64 = (3 << 62) | (1 << 61);
/// A liveness probe (a zero-byte RDMA write) on connection `index`.
const K_PROBE: u64 = (2 << 62) | (1 << 61);
const KIND_MASK: u64 = 3 << 62;
const INDEX_MASK: u64 = (1 << 61) - 1;

const OP_MSG: u8 = 1;
const OP_TAGGED: u8 = 2;
const OP_MSG_RTS: u8 = 3;
const OP_TAGGED_RTS: u8 = 4;
const OP_FIN: u8 = 5;
const F_DATA: u8 = 1;
const F_ERROR: u8 = 2;

mod api;
mod conn;
mod probe;
mod rx;
mod slab;
mod srx;
mod wire;

use slab::Slab;
pub use srx::VerbsSrx;
pub(crate) use wire::new_av;
use wire::{Hdr, decode_name, encode_name};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Resolving,
    Connecting,
    Up,
    Down,
}

struct Conn {
    id: CmId,
    peer: Option<SocketAddr>,
    outgoing: bool,
    state: ConnState,
    /// Work waiting to be posted, in order: while the connection is
    /// being made, and behind a fenced operation (FI_FENCE) until the
    /// operations before it have completed.
    backlog: VecDeque<Deferred>,
    /// The application's operations posted on it and not completed yet
    /// (an RTS until its FIN): what a fenced operation waits for.
    inflight: usize,
    /// The receive engine paused this sender.
    paused: bool,
    /// Receive buffers its remote CQ data used while it was paused (given
    /// back when it resumes).
    parked: Vec<usize>,
    /// Work requests on its send queue not yet completed (all signaled).
    posted: usize,
    /// RDMA reads of rendezvous messages from the peer waiting for room
    /// on the send queue (posted in order by progress).
    reads: VecDeque<QueuedRead>,
    /// Reads posted and not completed (at most [`READ_WINDOW`]).
    reads_posted: usize,
    /// Control messages posted or in the backlog and not completed (at
    /// most [`CONTROL_WINDOW`]).
    control_posted: usize,
    /// Something came from the peer since the last liveness sweep (a
    /// message, or the acknowledgement of a work request).
    heard: bool,
}

/// An RMA or atomic work request (also kept while connecting).
#[derive(Debug, Clone, Copy)]
struct RmaWr {
    op: Opcode,
    remote_addr: u64,
    rkey: u32,
    sge: Sge,
}

/// Work waiting for its connection, or behind a fence.
enum Deferred {
    /// A send of a send buffer holding `bytes`; `fence`: FI_FENCE.
    Buf {
        slot: usize,
        bytes: usize,
        fence: bool,
    },
    /// An RMA / atomic op `idx` of the op table; `fence`: FI_FENCE.
    Rma { idx: usize, wr: RmaWr, fence: bool },
}

impl Deferred {
    fn fenced(&self) -> bool {
        match self {
            Deferred::Buf { fence, .. } | Deferred::Rma { fence, .. } => *fence,
        }
    }
}

impl Conn {
    /// Whether an operation (fenced when `fence`) must wait in the
    /// backlog: the connection is not up, work waits before it, or it is
    /// fenced and operations before it have not completed.
    fn must_wait(&self, fence: bool) -> bool {
        self.state != ConnState::Up || !self.backlog.is_empty() || (fence && self.inflight > 0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxKind {
    /// An eager message: complete on its send completion.
    Eager,
    /// An RTS: the send completes on the FIN.
    Rts,
    /// A FIN or other control message.
    Control,
    /// Staging of an RMA or atomic (the buffer is returned with the op).
    Stage,
}

#[derive(Debug, Clone, Copy)]
struct TxBuf {
    kind: TxKind,
    context: u64,
    flags: CompletionFlags,
    len: usize,
    report: bool,
    rndv: usize,
    /// The connection it was sent on.
    conn: usize,
}

/// A rendezvous send waiting for its FIN.
struct RndvTx {
    context: u64,
    flags: CompletionFlags,
    len: usize,
    report: bool,
    conn: usize,
    /// The registration of the caller's buffer, or of its copy.
    _reg: Reg,
}

/// Memory registered for the peer's RDMA read of a rendezvous send.
enum Reg {
    /// The caller's one-piece buffer.
    User(Mr),
    /// A copy of several pieces.
    Owned(RegVec),
}

/// An RDMA read of a rendezvous receive.
struct ReadOp {
    recv: RecvId,
    meta: Meta,
    /// The sender's rendezvous id (for the FIN).
    id: u64,
    conn: usize,
    /// The registration of the receive's buffer (one piece).
    _mr: Option<Mr>,
    /// Where the data lands when the receive is several pieces.
    bounce: Option<RegVec>,
}

/// An RDMA read not posted yet: its connection's send queue was full, or
/// reads waited before it.
struct QueuedRead {
    op: ReadOp,
    /// Where the data lands (registered, kept by `op`).
    sge: Sge,
    /// The sender's buffer.
    addr: u64,
    rkey: u32,
}

/// An RMA or atomic operation.
struct RmaOp {
    /// The connection it is posted on (set when posted).
    conn: usize,
    context: u64,
    flags: CompletionFlags,
    len: usize,
    report: bool,
    _mr: Option<Mr>,
    /// Copy-back from a staging send buffer: (buffer, destination).
    copy_back: Option<(usize, UserDst)>,
    stage: Option<usize>,
}

struct State {
    conns: Vec<Conn>,
    by_qp: IdMap<u32, usize>,
    by_id: HashMap<usize, usize>,
    out: HashMap<SocketAddr, usize>,
    failed: HashMap<SocketAddr, Error>,
    /// The receive side: the kit's engine.
    rx: rx::Rx,
    tx_free: Vec<usize>,
    tx: Vec<TxBuf>,
    rndv: Slab<RndvTx>,
    reads: Slab<ReadOp>,
    rma: Slab<RmaOp>,
    /// Control messages waiting for a send buffer or for room on their
    /// connection's send queue.
    control: VecDeque<(usize, Hdr)>,
    /// Reads waiting in the connections' queues (`Conn::reads`), all
    /// together.
    queued_reads: usize,
    /// Work requests posted on all the connections and not completed
    /// (at most [`Engine::wr_budget`]).
    posted_all: usize,
    /// The application's transmits (sends, RMA, atomics) started and not
    /// completed (at most [`Engine::tx_size`]).
    tx_out: usize,
    /// A connection's backlog stopped for want of room on its send queue
    /// (progress drains it further).
    backlog_waits: bool,
    /// Connections torn down whose queue pairs are destroyed once their
    /// flushed work has been reaped.
    closing: Vec<usize>,
    /// Work of a shared receive context's engine about other endpoints'
    /// senders, handed to them when the pass ends (empty otherwise).
    foreign: Vec<fabric_core::kit::rx::Action<rx::VerbsWire>>,
    /// When the last liveness sweep ran ([`Engine::liveness`]).
    swept: Instant,
}

pub(crate) struct Engine {
    // Declared first: connections (QPs) are destroyed before the SRQ, the
    // CQ and the buffers they use.
    state: Mutex<State>,
    /// Listens on the endpoint's name (kept for its lifetime).
    _listener: CmId,
    srq: Srq,
    cq: HwCq,
    tx_pool: Pool,
    rx_pool: Pool,
    channel: Arc<EventChannel>,
    info: Info,
    domain: Arc<DomainCore>,
    name: SocketAddr,
    binds: OnceLock<Binds>,
    /// Binds given before enable.
    pending: Mutex<Binds>,
    armed: AtomicBool,
    cm_hint: AtomicBool,
    ticks: std::sync::atomic::AtomicU32,
    max_msg: usize,
    /// Work requests the connections may have posted at once: what the
    /// receive queue leaves of the CQ.
    wr_budget: usize,
    /// `tx_attr.size`: transmits outstanding at once (a rendezvous send
    /// keeps its buffer registered until its FIN).
    tx_size: usize,
    /// `FI_OPT_MIN_MULTI_RECV` (the receive engine holds it too).
    min_multi: AtomicUsize,
    /// The endpoint's number (its senders are named by it and their
    /// connection: [`srx::peer`]).
    ep_no: u32,
    /// The shared receive context it is bound to (`fi_ep_bind`).
    srx: OnceLock<Arc<srx::SrxInner>>,
    /// The context holds work for this endpoint.
    srx_mail: Arc<AtomicBool>,
    /// Wakes a sleeping application for the liveness sweep ([`probe`]).
    probe: probe::ProbeTimer,
    /// An application sleeps on the wait fds outside any call (its
    /// `fi_trywait` answered `Ok`): it counts as one of the probe timer's
    /// sleepers until the engine's next progress, which it makes once
    /// awake. Another thread's progress counts as that too: while it
    /// polls, its own reads make the sweep, and the sleeper's next
    /// `fi_trywait` starts the timer again.
    external: AtomicBool,
}

impl Drop for Engine {
    /// An endpoint bound to a shared receive context closes: it leaves
    /// the context, taking its part of the shared engine with it (see
    /// [`srx`]). Nothing to do for the others.
    fn drop(&mut self) {
        let Some(srx) = self.srx.get() else {
            return;
        };
        let st = match self.state.get_mut() {
            Ok(st) => st,
            Err(poisoned) => poisoned.into_inner(),
        };
        srx.leave(self.ep_no, st, self.binds.get());
    }
}

/// An RDM endpoint of the verbs provider.
pub struct RdmEndpoint {
    inner: Arc<Engine>,
}

impl std::fmt::Debug for RdmEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmEndpoint")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

fn again(why: &'static str) -> Error {
    Error::new(ErrorKind::Again, why)
}

impl RdmEndpoint {
    pub(crate) fn open(
        info: &Info,
        domain: Arc<DomainCore>,
    ) -> Result<Box<dyn fabric_core::objects::Endpoint>> {
        let src = info
            .src_addr
            .as_ref()
            .and_then(Address::socket_addr)
            .ok_or_else(|| {
                Error::inval("verbs: an RDM endpoint needs an IP source address (src_addr)")
            })?;
        let channel = EventChannel::new()?;
        let listener = CmId::new(&channel)?;
        listener
            .bind(&src)
            .map_err(|e| Error::new(e.kind(), format!("{} (binding {src})", e.detail())))?;
        match listener.context() {
            Some(c) if c.as_ptr() == domain.ctx.as_ptr() => {}
            _ => {
                return Err(Error::new(
                    ErrorKind::Domain,
                    "verbs: the endpoint's address is not on this domain's device",
                ));
            }
        }
        listener.listen(128)?;
        let name = listener
            .local_addr()
            .and_then(|a| a.socket_addr())
            .ok_or_else(|| Error::new(ErrorKind::Io, "verbs: the listener has no address"))?;
        let cqe = CQ_DEPTH.min(i32::try_from(domain.max_cqe).unwrap_or(CQ_DEPTH));
        let cq = HwCq::new(domain.ctx, cqe)?;
        // What the receive queue leaves of the CQ.
        let wr_budget = usize::try_from(cqe).map_or(1, |n| n.saturating_sub(RX_BUFS).max(1));
        let srq = Srq::new(&domain.pd, RX_BUFS as u32)?;
        let tx_pool = Pool::new(&domain.pd, BUF, TX_BUFS)?;
        let rx_pool = Pool::new(&domain.pd, BUF, RX_BUFS)?;
        for i in 0..rx_pool.count() {
            srq.post(K_RX | i as u64, &rx_pool, i)?;
        }
        let directed = info.caps.contains(Caps::DIRECTED_RECV);
        // The application's `total_buffered_recv`, or the default.
        let limit = match info.rx_attr.total_buffered_recv {
            0 => UNEXPECTED_BUDGET,
            n => n,
        };
        let budget = Budget {
            total: limit,
            hard: limit,
            ..Budget::DEFAULT
        };
        let max_msg = if info.ep_attr.max_msg_size == 0 {
            MAX_MSG_SIZE
        } else {
            info.ep_attr.max_msg_size.min(MAX_MSG_SIZE)
        }
        .min(domain.limits.max_msg_size.max(EAGER_MAX));
        let engine = Engine {
            state: Mutex::new(State {
                conns: Vec::new(),
                by_qp: IdMap::default(),
                by_id: HashMap::new(),
                out: HashMap::new(),
                failed: HashMap::new(),
                rx: rx::Rx::new(directed, budget),
                tx_free: (0..TX_BUFS).rev().collect(),
                tx: vec![
                    TxBuf {
                        kind: TxKind::Control,
                        context: 0,
                        flags: CompletionFlags::empty(),
                        len: 0,
                        report: false,
                        rndv: 0,
                        conn: 0,
                    };
                    TX_BUFS
                ],
                rndv: Slab::new(),
                reads: Slab::new(),
                rma: Slab::new(),
                control: VecDeque::new(),
                queued_reads: 0,
                posted_all: 0,
                tx_out: 0,
                backlog_waits: false,
                closing: Vec::new(),
                foreign: Vec::new(),
                swept: Instant::now(),
            }),
            _listener: listener,
            srq,
            cq,
            tx_pool,
            rx_pool,
            channel,
            info: info.clone(),
            domain,
            name,
            binds: OnceLock::new(),
            pending: Mutex::new(Binds::default()),
            armed: AtomicBool::new(false),
            cm_hint: AtomicBool::new(true),
            ticks: std::sync::atomic::AtomicU32::new(0),
            max_msg,
            wr_budget,
            tx_size: match info.tx_attr.size {
                0 => crate::getinfo::QUEUE_SIZE,
                n => n,
            },
            min_multi: AtomicUsize::new(MIN_MULTI_RECV),
            ep_no: srx::next_ep_no(),
            srx: OnceLock::new(),
            srx_mail: Arc::new(AtomicBool::new(false)),
            probe: probe::ProbeTimer::new(PROBE_IDLE / 2)?,
            external: AtomicBool::new(false),
        };
        Ok(Box::new(RdmEndpoint {
            inner: Arc::new(engine),
        }))
    }

    /// The endpoint's name (the address peers reach it at).
    pub fn name(&self) -> SocketAddr {
        self.inner.name
    }

    fn engine(&self) -> Result<(&Engine, &Binds)> {
        match self.inner.binds.get() {
            Some(b) => Ok((&self.inner, b)),
            None => Err(Error::new(
                ErrorKind::OpBadState,
                "verbs: endpoint not enabled (call enable after binding its CQ and AV)",
            )),
        }
    }
}

impl Engine {
    fn binds(&self) -> Option<&Binds> {
        self.binds.get()
    }

    /// A transmit finished well (reported when `report`).
    fn tx_ok(&self, st: &mut State, e: CqEntry, report: bool) {
        st.tx_out = st.tx_out.saturating_sub(1);
        if let Some(b) = self.binds() {
            b.tx_done(e, report);
        }
    }

    /// A transmit failed: an error count and `e`.
    fn tx_failed(&self, st: &mut State, e: CqErrEntry) {
        st.tx_out = st.tx_out.saturating_sub(1);
        if let Some(b) = self.binds() {
            b.failed_entry(false, e);
        }
    }

    /// Whether another transmit may start: fewer than `tx_attr.size` are
    /// outstanding (after a progress pass, if not at first).
    fn tx_admit(&self, st: &mut State) -> Result<()> {
        if st.tx_out < self.tx_size {
            return Ok(());
        }
        self.progress_locked(st, false)?;
        if st.tx_out < self.tx_size {
            return Ok(());
        }
        Err(again("verbs: tx_attr.size transmits are outstanding"))
    }

    fn av(&self) -> Result<&Arc<AvTable>> {
        self.binds()
            .and_then(|b| b.av.as_ref())
            .ok_or_else(|| Error::new(ErrorKind::NoAv, "verbs: bind an address vector first"))
    }

    fn src_of(&self, st: &State, conn: usize) -> FiAddr {
        let Some(peer) = st.conns.get(conn).and_then(|c| c.peer) else {
            return FiAddr::NOTAVAIL;
        };
        match self.binds().and_then(|b| b.av.as_ref()) {
            Some(av) => av.reverse(&Address::from(peer)),
            None => FiAddr::NOTAVAIL,
        }
    }

    fn tx_done(&self, st: &mut State, slot: usize, wc: &Wc) {
        let Some(t) = st.tx.get(slot).copied() else {
            return;
        };
        st.tx_free.push(slot);
        let ok = wc.ok();
        let entry = CqEntry {
            context: t.context,
            flags: t.flags,
            len: t.len,
            ..CqEntry::default()
        };
        match t.kind {
            TxKind::Eager => {
                if ok {
                    self.tx_ok(st, entry, t.report);
                } else {
                    self.tx_failed(st, wc_error(wc, entry));
                }
                self.op_done(st, t.conn);
            }
            TxKind::Rts => {
                if !ok && st.rndv.remove(t.rndv).is_some() {
                    self.tx_failed(st, wc_error(wc, entry));
                    self.op_done(st, t.conn);
                }
            }
            TxKind::Control => {
                if let Some(c) = st.conns.get_mut(t.conn) {
                    c.control_posted = c.control_posted.saturating_sub(1);
                }
            }
            TxKind::Stage => {}
        }
    }

    fn rma_done(&self, st: &mut State, idx: usize, wc: &Wc) {
        let Some(op) = st.rma.remove(idx) else { return };
        if let Some(s) = op.stage {
            if wc.ok() {
                if let Some((from, to)) = op.copy_back {
                    // The staging buffer holds what the device wrote.
                    to.write(self.tx_pool.read(from, 0, to.len()));
                }
            }
            st.tx_free.push(s);
        }
        let entry = CqEntry {
            context: op.context,
            flags: op.flags,
            len: op.len,
            ..CqEntry::default()
        };
        if wc.ok() {
            self.tx_ok(st, entry, op.report);
        } else {
            self.tx_failed(st, wc_error(wc, entry));
        }
        self.op_done(st, op.conn);
    }

    /// An operation of the application on connection `conn` completed:
    /// work waiting behind a fence may go.
    fn op_done(&self, st: &mut State, conn: usize) {
        let Some(c) = st.conns.get_mut(conn) else {
            return;
        };
        c.inflight = c.inflight.saturating_sub(1);
        if c.inflight == 0 && !c.backlog.is_empty() && c.state == ConnState::Up {
            self.drain(st, conn);
        }
    }

    /// Posts the connection's waiting work in order, up to a fenced
    /// operation that must wait for the ones before it to complete.
    fn drain(&self, st: &mut State, conn: usize) {
        loop {
            let room = self.room(st, conn);
            let Some(c) = st.conns.get_mut(conn) else {
                return;
            };
            if c.state != ConnState::Up {
                return;
            }
            match c.backlog.front() {
                Some(d) if d.fenced() && c.inflight > 0 => return,
                Some(_) => {}
                None => return,
            }
            if !room {
                // Progress drains it further as completions make room.
                st.backlog_waits = true;
                return;
            }
            let Some(d) = c.backlog.pop_front() else {
                return;
            };
            match self.post_deferred(st, conn, &d) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Again => {
                    st.conns[conn].backlog.push_front(d);
                    st.backlog_waits = true;
                    return;
                }
                Err(e) => self.fail_deferred(st, d, &e),
            }
        }
    }

    fn handle_wc(&self, st: &mut State, wc: &Wc) {
        if wc.wr_id() & KIND_MASK != K_RX {
            if let Some(c) = st
                .by_qp
                .get(&wc.qp_num())
                .and_then(|&c| st.conns.get_mut(c))
            {
                c.posted = c.posted.saturating_sub(1);
                st.posted_all = st.posted_all.saturating_sub(1);
                // Acknowledged by the peer: it is alive.
                c.heard |= wc.ok();
            }
        }
        self.handle_wc_op(st, wc);
        // Any other failure leaves an RC queue pair in the error state:
        // the operation above has its own error; the connection goes
        // (what else was posted on it comes back flushed, each failing
        // once), and the next operation to the peer connects again.
        if !wc.ok() && !wc.flushed() {
            if let Some(&c) = st.by_qp.get(&wc.qp_num()) {
                self.conn_broken(st, c, wc.status());
            }
        }
    }

    fn handle_wc_op(&self, st: &mut State, wc: &Wc) {
        let wr_id = wc.wr_id();
        let idx = (wr_id & INDEX_MASK) as usize;
        match wr_id & !INDEX_MASK {
            K_RX => {
                let mut repost = true;
                if let (true, Some(b)) = (wc.ok(), self.binds()) {
                    let conn = st.by_qp.get(&wc.qp_num()).copied();
                    if wc.kind() == WcKind::RecvWriteImm {
                        if let Some(imm) = wc.imm() {
                            repost = self.remote_data(st, b, conn, imm, idx);
                        }
                    } else if let Some(c) = conn {
                        self.mark_up(st, c);
                        repost = self.arrived(st, b, c, idx, wc.byte_len() as usize);
                    }
                }
                if repost {
                    self.repost(idx);
                }
            }
            K_TX => self.tx_done(st, idx, wc),
            // Its failure breaks the connection (`handle_wc`).
            K_PROBE => {}
            K_READ if wr_id & (1 << 61) == 0 => self.read_done(st, idx, wc),
            _ if wr_id & KIND_MASK == KIND_MASK => self.rma_done(st, idx, wc),
            _ => {}
        }
    }

    /// Polls the CQ (and, with `cm`, the connection events: a system
    /// call, so not on every call).
    fn progress_locked(&self, st: &mut State, cm: bool) -> Result<()> {
        if cm
            || st
                .conns
                .iter()
                .any(|c| matches!(c.state, ConnState::Resolving | ConnState::Connecting))
        {
            while let Some(e) = self.channel.next()? {
                self.handle_cm(st, e);
            }
        }
        let mut wcs = [std::mem::MaybeUninit::<Wc>::uninit(); 16];
        loop {
            let polled = self.cq.poll(&mut wcs)?;
            let n = polled.len();
            for wc in polled {
                self.handle_wc(st, wc);
            }
            if n < wcs.len() {
                break;
            }
        }
        if !st.closing.is_empty() {
            self.reap_closed(st);
        }
        self.rx_progress(st);
        if !st.control.is_empty() {
            self.flush_control(st);
        }
        if st.queued_reads > 0 {
            self.flush_reads(st);
        }
        if st.backlog_waits {
            st.backlog_waits = false;
            for i in 0..st.conns.len() {
                if !st.conns[i].backlog.is_empty() {
                    self.drain(st, i);
                }
            }
        }
        Ok(())
    }

    /// Sends a message (eager or rendezvous) of the caller's buffers.
    fn send(
        &self,
        msg: &Msg<'_>,
        user: &UserIov<'_>,
        flags: OpFlags,
        tagged: bool,
        report: bool,
    ) -> Result<()> {
        let len = user.len()?;
        if len > self.max_msg {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("verbs: {len} bytes exceed max_msg_size {}", self.max_msg),
            ));
        }
        let data = flags.contains(OpFlags::REMOTE_CQ_DATA);
        let fence = flags.contains(OpFlags::FENCE);
        let mut st = self.lock();
        self.tx_admit(&mut st)?;
        let conn = self.conn_to(&mut st, msg.addr)?;
        if st.tx_free.is_empty() {
            self.progress_locked(&mut st, false)?;
        }
        let cflags = if tagged {
            CompletionFlags::TAGGED | CompletionFlags::SEND
        } else {
            CompletionFlags::MSG | CompletionFlags::SEND
        };
        let Some(slot) = st.tx_free.pop() else {
            return Err(again("verbs: every send buffer is in use"));
        };
        let mut h = Hdr {
            op: if tagged { OP_TAGGED } else { OP_MSG },
            flags: if data { F_DATA } else { 0 },
            tag: if tagged { msg.tag } else { 0 },
            data: if data { msg.data } else { 0 },
            len: len as u64,
            ..Hdr::default()
        };
        if len <= EAGER_MAX {
            // The slot's buffer holds HDR + EAGER_MAX bytes.
            self.tx_pool.write(slot, 0, &h.encode());
            self.tx_pool.gather(slot, HDR, user);
            st.tx[slot] = TxBuf {
                kind: TxKind::Eager,
                context: msg.context,
                flags: cflags,
                len,
                report,
                rndv: 0,
                conn,
            };
            if let Err(e) = self.post_buf(&mut st, conn, slot, HDR + len, fence) {
                st.tx_free.push(slot);
                return Err(e);
            }
            st.tx_out += 1;
            return Ok(());
        }
        // Rendezvous: the data is read by the receiver from here (the
        // caller's buffer, or a copy of its pieces), registered until the
        // completion, which comes after the FIN (or the connection's
        // failure).
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ;
        let reg = match user.pieces() {
            [one] => Mr::register_user(&self.domain.pd, user, len, access)
                .map(|m| (one.addr as u64, Reg::User(m))),
            _ => user
                .to_vec()
                .and_then(|v| RegVec::new(&self.domain.pd, v, access))
                .map(|r| (r.addr(), Reg::Owned(r))),
        };
        let (addr, reg) = match reg {
            Ok(r) => r,
            Err(e) => {
                st.tx_free.push(slot);
                return Err(e);
            }
        };
        h.op = if tagged { OP_TAGGED_RTS } else { OP_MSG_RTS };
        h.addr = addr;
        h.rkey = match &reg {
            Reg::User(m) => m.rkey(),
            Reg::Owned(r) => r.rkey(),
        };
        let rid = st.rndv.insert(RndvTx {
            context: msg.context,
            flags: cflags,
            len,
            report,
            conn,
            _reg: reg,
        });
        self.probe.needed();
        h.id = rid as u64;
        self.tx_pool.write(slot, 0, &h.encode());
        st.tx[slot] = TxBuf {
            kind: TxKind::Rts,
            context: msg.context,
            flags: cflags,
            len,
            report,
            rndv: rid,
            conn,
        };
        if let Err(e) = self.post_buf(&mut st, conn, slot, HDR, fence) {
            st.tx_free.push(slot);
            let _ = st.rndv.remove(rid);
            return Err(e);
        }
        st.tx_out += 1;
        Ok(())
    }

    /// Posts an RMA or atomic work request on the connection to `dest`
    /// (or keeps it until the connection is made).
    fn post_rma(
        &self,
        st: &mut State,
        dest: FiAddr,
        mut op: RmaOp,
        wr: RmaWr,
        fence: bool,
    ) -> Result<()> {
        let conn = match self.conn_to(st, dest) {
            Ok(c) => c,
            Err(e) => {
                if let Some(s) = op.stage {
                    st.tx_free.push(s);
                }
                return Err(e);
            }
        };
        let stage = op.stage;
        op.conn = conn;
        let idx = st.rma.insert(op);
        let room = self.room(st, conn);
        let c = &mut st.conns[conn];
        if c.must_wait(fence) {
            c.backlog.push_back(Deferred::Rma { idx, wr, fence });
            st.tx_out += 1;
            return Ok(());
        }
        let posted = if room {
            Self::post_rma_now(&c.id, idx, &wr)
        } else {
            Err(again("verbs: the send queue is full"))
        };
        if let Err(e) = posted {
            let _ = st.rma.remove(idx);
            if let Some(s) = stage {
                st.tx_free.push(s);
            }
            return Err(e);
        }
        c.posted += 1;
        c.inflight += 1;
        st.posted_all += 1;
        st.tx_out += 1;
        Ok(())
    }

    fn post_rma_now(id: &CmId, idx: usize, w: &RmaWr) -> Result<()> {
        let mut wr = SendWr::new(K_RMA | idx as u64, w.op, SgeList::<1>::one(w.sge))
            .remote(w.remote_addr, w.rkey)
            .flags(SendFlags::SIGNALED);
        // The local memory is registered (kept by the op or a staging
        // buffer owned by it).
        match id.post_send(&mut wr) {
            Ok(()) => Ok(()),
            Err(libc::ENOMEM) => Err(Error::again()),
            Err(e) => Err(from_errno(e, "ibv_post_send")),
        }
    }

    /// Posts deferred work once its connection is up.
    fn post_deferred(&self, st: &mut State, conn: usize, d: &Deferred) -> Result<()> {
        let id = &st.conns[conn].id;
        let app = match *d {
            Deferred::Buf { slot, bytes, .. } => {
                self.post_buf_now(id, slot, bytes)?;
                st.tx.get(slot).is_some_and(|t| t.kind != TxKind::Control)
            }
            Deferred::Rma { idx, wr, .. } => {
                Self::post_rma_now(id, idx, &wr)?;
                true
            }
        };
        let c = &mut st.conns[conn];
        c.posted += 1;
        if app {
            c.inflight += 1;
        }
        st.posted_all += 1;
        Ok(())
    }

    /// Fails deferred work whose connection could not be made.
    fn fail_deferred(&self, st: &mut State, d: Deferred, err: &Error) {
        let entry = match d {
            Deferred::Buf { slot, .. } => {
                st.tx_free.push(slot);
                let t = st.tx[slot];
                let live = match t.kind {
                    TxKind::Eager => true,
                    TxKind::Rts => st.rndv.remove(t.rndv).is_some(),
                    TxKind::Control | TxKind::Stage => false,
                };
                if !live {
                    return;
                }
                CqEntry {
                    context: t.context,
                    flags: t.flags,
                    len: t.len,
                    ..CqEntry::default()
                }
            }
            Deferred::Rma { idx, .. } => {
                let Some(op) = st.rma.remove(idx) else { return };
                if let Some(s) = op.stage {
                    st.tx_free.push(s);
                }
                CqEntry {
                    context: op.context,
                    flags: op.flags,
                    len: op.len,
                    ..CqEntry::default()
                }
            }
        };
        self.tx_failed(
            st,
            CqErrEntry {
                entry,
                olen: 0,
                err: err.kind(),
                prov_errno: 0,
                err_text: format!("verbs: the connection to the peer failed: {}", err.detail()),
                src_addr: None,
            },
        );
    }

    /// The local side of an RMA: registered (descriptor), staged (small,
    /// copied in for writes / back for reads), or registered now.
    fn rma_local(
        &self,
        st: &mut State,
        user: &UserIov<'_>,
        desc: &[fabric_core::objects::MrDesc],
        write: bool,
    ) -> Result<RmaLocal> {
        let len = user.len()?;
        if let ([one], [d]) = (user.pieces(), desc) {
            if let Some(lkey) = lkey_of(*d) {
                return Ok((
                    Sge::new(one.addr as u64, len as u32, lkey),
                    None,
                    None,
                    None,
                ));
            }
        }
        let pieces = user.pieces().len();
        if len <= EAGER_MAX || pieces > 1 {
            if len > BUF {
                return Err(Error::inval(format!(
                    "verbs: RMA of several pieces is limited to {BUF} bytes"
                )));
            }
            let copy_back = if write {
                None
            } else {
                match user.dst(len) {
                    Some(d) if pieces == 1 => Some(d),
                    _ => {
                        return Err(Error::inval(
                            "verbs: an RMA read into several pieces needs one registered piece",
                        ));
                    }
                }
            };
            let Some(slot) = st.tx_free.pop() else {
                return Err(again("verbs: every send buffer is in use"));
            };
            if write {
                // The buffer holds BUF >= len bytes.
                self.tx_pool.gather(slot, 0, user);
            }
            st.tx[slot].kind = TxKind::Stage;
            return Ok((
                self.tx_pool.sge(slot, len),
                None,
                Some(slot),
                copy_back.map(|d| (slot, d)),
            ));
        }
        // The registration lives in the op until the completion.
        let mr = Mr::register_user(&self.domain.pd, user, len, Access::LOCAL_WRITE)?;
        let [one] = user.pieces() else {
            return Err(Error::inval("verbs: unreachable RMA layout"));
        };
        Ok((
            Sge::new(one.addr as u64, len as u32, mr.lkey()),
            Some(mr),
            None,
            None,
        ))
    }
}

/// The local side of an RMA: its scatter entry, a registration made for
/// it, the staging send buffer it uses, and what to copy back from it.
type RmaLocal = (Sge, Option<Mr>, Option<usize>, Option<(usize, UserDst)>);

impl Progress for Engine {
    fn progress(&self) -> Result<()> {
        // A waiter armed the CQ and an event fired: take it and arm again
        // before polling, so that completions made by this progress (an
        // RDMA read it posts, say) wake the waiter too.
        if self.armed.load(Ordering::Acquire)
            && self.cq.consume_events() > 0
            && self.cq.arm().is_err()
        {
            self.armed.store(false, Ordering::Release);
        }
        if self.probe.fired() {
            // A sleeper woke for the liveness sweep.
            self.cm_hint.store(true, Ordering::Release);
        }
        if self.external.load(Ordering::Relaxed) {
            // The application that slept on the fds is awake again (its
            // next trywait counts it again).
            self.disarm_external();
        }
        let Ok(st) = self.state.try_lock() else {
            // Another thread is in the engine and progresses it.
            return Ok(());
        };
        let mut st = srx::Pass::new(self, st);
        let tick = self.ticks.fetch_add(1, Ordering::Relaxed);
        let cm = self.cm_hint.swap(false, Ordering::AcqRel) || tick % 64 == 0;
        self.progress_locked(&mut st, cm)?;
        if cm && !st.rndv.is_empty() {
            self.liveness(&mut st);
        }
        Ok(())
    }

    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        if !self.armed.swap(true, Ordering::AcqRel) && self.cq.arm().is_err() {
            self.armed.store(false, Ordering::Release);
        }
        // After a wait, the next progress looks at connection events.
        self.cm_hint.store(true, Ordering::Release);
        f(self.cq.fd());
        f(self.channel.fd());
        f(self.probe.fd());
    }

    /// A thread sleeps on the wait fds: while rendezvous sends wait, the
    /// probe timer ticks so that its progress keeps probing their peers.
    fn arm(&self) {
        let waiting = match self.state.try_lock() {
            Ok(st) => !st.rndv.is_empty(),
            // Busy: assume they do (the timer only costs a wake-up).
            Err(_) => true,
        };
        self.probe.sleep(waiting);
    }

    fn disarm(&self) {
        self.probe.wake();
    }

    /// An application is about to sleep on the wait fds outside any call
    /// (after its `fi_trywait`): one sleeper for the probe timer, however
    /// many times it says so, until the next progress.
    fn arm_external(&self) {
        if !self.external.swap(true, Ordering::AcqRel) {
            self.arm();
        }
    }

    /// The sleeper of [`Progress::arm_external`] is awake.
    fn disarm_external(&self) {
        if self.external.swap(false, Ordering::AcqRel) {
            self.disarm();
        }
    }

    /// Arms the engine's CQ (when a wait fd did not already), takes the
    /// connection events, and progresses: what was there before arming
    /// is handled now, later completions and events make the fds
    /// readable. Then counts the application, which sleeps on the fds
    /// next, as a sleeper of the probe timer: while rendezvous sends
    /// wait, its ticks wake the application, whose next read makes the
    /// liveness sweep (as `sread` does).
    fn trywait(&self) -> Result<()> {
        if !self.armed.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.cq.arm() {
                self.armed.store(false, Ordering::Release);
                return Err(e);
            }
        }
        self.cm_hint.store(true, Ordering::Release);
        self.progress()?;
        self.arm_external();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_are_refused() {
        let h = Hdr {
            op: OP_TAGGED,
            flags: F_DATA,
            tag: 7,
            data: 9,
            len: 100,
            ..Hdr::default()
        };
        assert_eq!(Hdr::decode(&h.encode()), Some(h));
        let rts = Hdr {
            op: OP_MSG_RTS,
            len: 1 << 20,
            id: 3,
            addr: 0x1000,
            rkey: 42,
            ..Hdr::default()
        };
        assert_eq!(Hdr::decode(&rts.encode()), Some(rts));
        let mut b = h.encode();
        b[0] = 99;
        assert_eq!(Hdr::decode(&b), None);
        let mut b = h.encode();
        b[3] = 1;
        assert_eq!(Hdr::decode(&b), None);
        assert_eq!(Hdr::decode(&b[..10]), None);
        let big = Hdr {
            len: EAGER_MAX as u64 + 1,
            ..h
        };
        assert_eq!(Hdr::decode(&big.encode()), None);
        let small_rts = Hdr { len: 10, ..rts };
        assert_eq!(Hdr::decode(&small_rts.encode()), None);
    }

    #[test]
    fn names_round_trip() {
        for a in ["10.99.0.1:7000", "[2001:db8::1]:1"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(decode_name(&encode_name(&a)), Some(a));
        }
        assert_eq!(decode_name(&[4, 1]), None);
        assert_eq!(decode_name(&[]), None);
    }

    #[test]
    fn slab_reuses_indices() {
        let mut s = Slab::new();
        let a = s.insert(1);
        let b = s.insert(2);
        assert_eq!(s.remove(a), Some(1));
        assert_eq!(s.insert(3), a);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.remove(99), None);
    }
}
