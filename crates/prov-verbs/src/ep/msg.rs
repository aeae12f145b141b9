//! MSG endpoints: one RC queue pair, connected through rdma_cm.
//!
//! - Opening binds an rdma_cm id to the entry's source address (so the
//!   device is known and the QP can be created at `enable`, before
//!   connecting: receives may be posted early), or takes over the id of a
//!   connection request (`info.handle`), moving its events to the
//!   endpoint's own event channel.
//! - `connect` resolves the address, then the route, then sends the
//!   request with the private data; `accept` answers a request. The
//!   outcome is an EQ event: `Connected` with the peer's private data, or
//!   an error event (`FI_ECONNREFUSED` with the rejection's private data,
//!   `FI_EHOSTUNREACH`, ...). Connection events are progressed by EQ reads.
//! - Receives go straight to the queue pair's receive queue; a
//!   multi-receive buffer (FI_MULTI_RECV) is posted window by window, with
//!   the receives posted behind it held until its release (see the
//!   queue-pair engine, `ep::QpData`).
//! - `shutdown` (or the peer's) disconnects: both sides report `Shutdown`;
//!   the QP enters the error state, so every pending operation completes
//!   with an error completion (`FI_ECANCELED`, "Work Request Flushed
//!   Error").

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fabric_core::kit::objects::Progress;
use fabric_core::kit::rx::MIN_MULTI_RECV;
use fabric_core::objects::MrDesc;
use fabric_core::objects::{
    AtomicMsg, AtomicOp, AtomicOps, Bind, CmOps, CompletionFlags, Datatype, Endpoint, EqErrEntry,
    EqEvent, FiAddr, Msg, MsgOps, RmaIov, RmaMsg, RmaOps, TaggedOps,
};
use fabric_core::{Address, Caps, Error, ErrorKind, Info, Mode, OpFlags, Result};

use super::{Binds, IOV_MAX, QpData, QpSizes, STAGE, TxReport, imm, iov_len, lock, next_fid};
use crate::cq::CqShared;
use crate::domain::DomainCore;
use crate::raw::cm::{
    CmEvent, CmEventKind, CmId, ConnParam, EventChannel, MAX_PRIVATE_DATA, QpCaps,
};
use crate::raw::mem::{AtomicBufs, NO_IOV, UserIov};
use crate::raw::wr::{Opcode, SendFlags, SendWr, SgeList};

/// Outstanding RDMA reads / atomics per connection, each way.
const RD_ATOMIC: u8 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Opened (active side) or taken from a request (passive side).
    Idle,
    /// `connect` started: resolving the address / route.
    Connecting,
    /// `accept` sent.
    Accepting,
    /// Established.
    Connected,
    /// Disconnected or failed.
    Down,
}

struct Cm {
    /// Shared with the queue-pair engine once enabled (it posts through
    /// it).
    id: Option<Arc<CmId>>,
    state: State,
    /// From a connection request (may accept).
    passive: bool,
}

pub(crate) struct MsgInner {
    fid: u64,
    info: Info,
    domain: Arc<DomainCore>,
    channel: Arc<EventChannel>,
    // Dropped before `data`: the QP goes before the CQs it uses.
    cm: Mutex<Cm>,
    data: OnceLock<Arc<QpData>>,
    binds: Mutex<Binds>,
    eq: OnceLock<Arc<fabric_core::kit::objects::EqCore>>,
    /// `FI_OPT_MIN_MULTI_RECV` (the queue-pair engine holds it once
    /// enabled).
    min_multi: AtomicUsize,
}

impl Drop for MsgInner {
    fn drop(&mut self) {
        // The CQs hold the queue-pair engine until it detaches.
        if let Some(d) = self.data.get() {
            d.detach();
        }
    }
}

/// A MSG endpoint of the verbs provider (an RC queue pair).
pub struct MsgEndpoint {
    inner: Arc<MsgInner>,
}

impl std::fmt::Debug for MsgEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsgEndpoint")
            .field("fid", &self.inner.fid)
            .finish_non_exhaustive()
    }
}

fn rd_atomic(v: u8) -> u8 {
    v.clamp(1, RD_ATOMIC)
}

impl MsgEndpoint {
    pub(crate) fn open(info: &Info, domain: Arc<DomainCore>) -> Result<MsgEndpoint> {
        let channel = EventChannel::new()?;
        let (id, passive) = match info.handle {
            Some(h) => {
                let mut id = super::passive::take(h)?;
                id.migrate(&channel)?;
                (id, true)
            }
            None => {
                let id = CmId::new(&channel)?;
                let src = info
                    .src_addr
                    .as_ref()
                    .and_then(Address::socket_addr)
                    .ok_or_else(|| {
                        Error::inval("verbs: a MSG endpoint needs an IP source address (src_addr)")
                    })?;
                id.bind(&std::net::SocketAddr::new(src.ip(), 0))
                    .map_err(|e| Error::new(e.kind(), format!("{} (binding {src})", e.detail())))?;
                (id, false)
            }
        };
        match id.context() {
            Some(c) if c.as_ptr() == domain.ctx.as_ptr() => {}
            _ => {
                return Err(Error::new(
                    ErrorKind::Domain,
                    "verbs: the endpoint's address is not on this domain's device",
                ));
            }
        }
        Ok(MsgEndpoint {
            inner: Arc::new(MsgInner {
                fid: next_fid(),
                info: info.clone(),
                domain,
                channel,
                cm: Mutex::new(Cm {
                    id: Some(Arc::new(id)),
                    state: State::Idle,
                    passive,
                }),
                data: OnceLock::new(),
                binds: Mutex::new(Binds::default()),
                eq: OnceLock::new(),
                min_multi: AtomicUsize::new(MIN_MULTI_RECV),
            }),
        })
    }

    /// The object id its EQ events carry in `fid`.
    pub fn fid(&self) -> u64 {
        self.inner.fid
    }

    fn data(&self) -> Result<&Arc<QpData>> {
        self.inner.data.get().ok_or_else(|| {
            Error::new(
                ErrorKind::OpBadState,
                "verbs: endpoint not enabled (call enable after binding its CQ and EQ)",
            )
        })
    }
}

impl MsgInner {
    fn push_err(&self, err: ErrorKind, prov_errno: i32, data: Vec<u8>, text: String) {
        if let Some(eq) = self.eq.get() {
            eq.push_err(EqErrEntry {
                fid: self.fid,
                context: 0,
                err,
                prov_errno,
                data,
                err_text: text,
            });
        }
    }

    fn push(&self, e: EqEvent) {
        if let Some(eq) = self.eq.get() {
            eq.push(e);
        }
    }

    fn down(&self, cm: &mut Cm) {
        cm.state = State::Down;
        if let Some(d) = self.data.get() {
            d.connected.store(false, Ordering::Release);
            d.shut.store(true, Ordering::Release);
        }
    }

    fn conn_param<'a>(&self, data: &'a [u8]) -> ConnParam<'a> {
        ConnParam {
            data,
            responder_resources: rd_atomic(self.domain.limits.max_rd_atom),
            initiator_depth: rd_atomic(self.domain.limits.max_init_rd_atom),
        }
    }

    /// Waits (up to twice the resolution timeout) for the event `want` of
    /// an address or route resolution; its failure events are errors.
    fn wait_cm(&self, want: CmEventKind) -> Result<()> {
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(2 * crate::raw::cm::RESOLVE_TIMEOUT_MS as u64);
        loop {
            if let Some(e) = self.channel.next()? {
                if e.kind == want {
                    return Ok(());
                }
                let kind = match e.kind {
                    CmEventKind::AddrError | CmEventKind::RouteError | CmEventKind::Unreachable => {
                        ErrorKind::HostUnreach
                    }
                    _ => ErrorKind::Io,
                };
                let status = if e.status < 0 { -e.status } else { e.status };
                return Err(Error::new(
                    kind,
                    format!(
                        "verbs: {} while connecting: {}",
                        e.name(),
                        std::io::Error::from_raw_os_error(status)
                    ),
                ));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    "verbs: address / route resolution timed out",
                ));
            }
            let left = deadline - now;
            let ts = rustix::event::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [rustix::event::PollFd::from_borrowed_fd(
                self.channel.fd(),
                rustix::event::PollFlags::IN,
            )];
            let _ = rustix::event::poll(&mut fds, Some(&ts));
        }
    }

    fn handle(&self, e: CmEvent) {
        let mut cm = lock(&self.cm);
        let name = e.name();
        match e.kind {
            CmEventKind::Established => {
                cm.state = State::Connected;
                if let Some(d) = self.data.get() {
                    d.connected.store(true, Ordering::Release);
                }
                self.push(EqEvent::Connected {
                    fid: self.fid,
                    data: e.data,
                });
            }
            CmEventKind::Rejected => {
                self.down(&mut cm);
                self.push_err(
                    ErrorKind::ConnRefused,
                    e.status,
                    e.data,
                    format!("verbs: the connection was rejected (reason {})", e.status),
                );
            }
            CmEventKind::AddrError | CmEventKind::RouteError | CmEventKind::Unreachable => {
                self.down(&mut cm);
                self.push_err(
                    ErrorKind::HostUnreach,
                    e.status,
                    Vec::new(),
                    format!("verbs: {name} (status {})", e.status),
                );
            }
            CmEventKind::ConnectError | CmEventKind::DeviceRemoval => {
                self.down(&mut cm);
                self.push_err(
                    ErrorKind::ConnAborted,
                    e.status,
                    Vec::new(),
                    format!("verbs: {name} (status {})", e.status),
                );
            }
            CmEventKind::Disconnected => {
                let was = cm.state;
                // Answer the peer's disconnect request (the CM waits for
                // the consumer's reply before the initiator hears it).
                if let Some(id) = cm.id.as_ref() {
                    let _ = id.disconnect();
                }
                self.down(&mut cm);
                if was != State::Down {
                    self.push(EqEvent::Shutdown { fid: self.fid });
                }
            }
            _ => tracing::debug!(event = %name, "verbs: MSG endpoint ignores an rdma_cm event"),
        }
    }
}

impl Progress for MsgInner {
    fn progress(&self) -> Result<()> {
        while let Some(e) = self.channel.next()? {
            self.handle(e);
        }
        Ok(())
    }

    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        f(self.channel.fd());
    }
}

impl MsgEndpoint {
    fn send(
        &self,
        user: &UserIov<'_>,
        desc: &[MrDesc],
        rep: TxReport,
        imm: Option<u32>,
        inject: bool,
        fence: bool,
    ) -> Result<()> {
        let d = self.data()?;
        d.post_data(user, desc, inject, fence, rep, Opcode::send(imm), None)
    }
}

impl MsgOps for MsgEndpoint {
    fn inject(&self, buf: &[u8], _dest: FiAddr, data: Option<u64>) -> Result<()> {
        let d = self.data()?;
        if buf.len() > STAGE {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("verbs: {} bytes exceed the inject size {STAGE}", buf.len()),
            ));
        }
        let imm = data.map(imm).transpose()?;
        let mut one = NO_IOV;
        let user = UserIov::of_slice(buf, &mut one);
        let rep = TxReport {
            context: 0,
            flags: CompletionFlags::MSG | CompletionFlags::SEND,
            len: buf.len(),
            report: false,
            count: d.binds.cntr_send.is_some(),
        };
        // Injected data is inlined or copied before the call returns.
        self.send(&user, &[], rep, imm, true, false)
    }

    #[allow(unsafe_code)]
    unsafe fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let d = self.data()?;
        let data = flags.contains(OpFlags::REMOTE_CQ_DATA);
        let imm = if data { Some(imm(msg.data)?) } else { None };
        let rep = TxReport {
            context: msg.context,
            flags: CompletionFlags::MSG | CompletionFlags::SEND,
            len: iov_len(msg.iov)?,
            report: !d.binds.tx_selective || flags.contains(OpFlags::COMPLETION),
            count: d.binds.cntr_send.is_some(),
        };
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        self.send(
            &user,
            msg.desc,
            rep,
            imm,
            flags.contains(OpFlags::INJECT),
            flags.contains(OpFlags::FENCE),
        )
    }

    #[allow(unsafe_code)]
    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        self.recv(&user, msg.desc, msg.context, flags)
    }
}

impl MsgEndpoint {
    fn recv(
        &self,
        user: &UserIov<'_>,
        desc: &[MrDesc],
        context: u64,
        flags: OpFlags,
    ) -> Result<()> {
        let d = self.data()?;
        let report = !d.binds.rx_selective || flags.contains(OpFlags::COMPLETION);
        d.post_recv(
            user,
            desc,
            context,
            report,
            flags.contains(OpFlags::MULTI_RECV),
        )
    }
}

impl TaggedOps for MsgEndpoint {}

fn one_range(r: &[RmaIov]) -> Result<&RmaIov> {
    match r {
        [one] => Ok(one),
        _ => Err(Error::inval(format!(
            "verbs: {} remote ranges; rma_iov_limit is 1",
            r.len()
        ))),
    }
}

fn rkey(key: u64) -> Result<u32> {
    u32::try_from(key).map_err(|_| {
        Error::new(
            ErrorKind::NoKey,
            format!("verbs: {key:#x} is not a verbs memory key (32 bits)"),
        )
    })
}

impl MsgEndpoint {
    /// Whether the endpoint's capabilities allow an operation (see
    /// [`fabric_core::kit::caps::initiate`]).
    #[inline]
    fn may(&self, class: Caps, dir: Caps, what: &str) -> Result<()> {
        fabric_core::kit::caps::initiate(self.inner.info.caps, class, dir, "verbs", what)
    }

    fn writedata_allowed(&self) -> Result<()> {
        let m = self.inner.info.mode | self.inner.info.rx_attr.mode;
        if m.contains(Mode::RX_CQ_DATA) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::OpNotSupp,
                "verbs: RMA writes with remote CQ data consume a posted receive at the target, which needs mode FI_RX_CQ_DATA",
            ))
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        user: &UserIov<'_>,
        desc: &[MrDesc],
        remote: &RmaIov,
        rep: TxReport,
        data: Option<u64>,
        inject: bool,
        fence: bool,
    ) -> Result<()> {
        let d = self.data()?;
        let key = rkey(remote.key)?;
        let imm = match data {
            Some(v) => {
                self.writedata_allowed()?;
                Some(imm(v)?)
            }
            None => None,
        };
        d.post_data(
            user,
            desc,
            inject,
            fence,
            rep,
            Opcode::write(imm),
            Some((remote.addr, key)),
        )
    }

    fn read(&self, user: &UserIov<'_>, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        self.may(Caps::RMA, Caps::READ, "an RMA read")?;
        let d = self.data()?;
        let remote = one_range(msg.rma_iov)?;
        let key = rkey(remote.key)?;
        let len = user.len()?;
        let rep = TxReport {
            context: msg.context,
            flags: CompletionFlags::RMA | CompletionFlags::READ,
            len,
            report: !d.binds.tx_selective || flags.contains(OpFlags::COMPLETION),
            count: d.binds.cntr_read.is_some(),
        };
        let mut sges = SgeList::<IOV_MAX>::default();
        let registered = d.sges(user, msg.desc, &mut sges)?;
        let staged = match (registered, user.pieces()) {
            (true, _) => None,
            (false, [piece]) if piece.len <= STAGE => user.dst(piece.len),
            _ => None,
        };
        if !registered && staged.is_none() {
            return Err(Error::inval(format!(
                "verbs: an RMA read into memory without a descriptor is limited to one piece of {STAGE} bytes (FI_MR_LOCAL)"
            )));
        }
        let fence = if flags.contains(OpFlags::FENCE) {
            SendFlags::FENCE
        } else {
            SendFlags::empty()
        };
        d.post_tx(rep, staged, |seq, stage, idx| {
            let sges = if registered {
                sges
            } else {
                SgeList::one(stage.sge(idx, len))
            };
            SendWr::new(seq, Opcode::Read, sges)
                .remote(remote.addr, key)
                .flags(fence)
        })
    }
}

impl RmaOps for MsgEndpoint {
    fn inject_write(
        &self,
        buf: &[u8],
        _dest: FiAddr,
        remote: RmaIov,
        data: Option<u64>,
    ) -> Result<()> {
        self.may(Caps::RMA, Caps::WRITE, "an RMA write")?;
        let d = self.data()?;
        if buf.len() > STAGE {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("verbs: {} bytes exceed the inject size {STAGE}", buf.len()),
            ));
        }
        let mut one = NO_IOV;
        let user = UserIov::of_slice(buf, &mut one);
        let rep = TxReport {
            context: 0,
            flags: CompletionFlags::RMA | CompletionFlags::WRITE,
            len: buf.len(),
            report: false,
            count: d.binds.cntr_write.is_some(),
        };
        // Injected data is inlined or staged before the call returns.
        self.write(&user, &[], &remote, rep, data, true, false)
    }

    #[allow(unsafe_code)]
    unsafe fn readmsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        self.read(&user, msg, flags)
    }

    #[allow(unsafe_code)]
    unsafe fn writemsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        self.writemsg_user(&user, msg, flags)
    }
}

impl MsgEndpoint {
    fn writemsg_user(&self, user: &UserIov<'_>, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        self.may(Caps::RMA, Caps::WRITE, "an RMA write")?;
        let d = self.data()?;
        let remote = one_range(msg.rma_iov)?;
        let rep = TxReport {
            context: msg.context,
            flags: CompletionFlags::RMA | CompletionFlags::WRITE,
            len: user.len()?,
            report: !d.binds.tx_selective || flags.contains(OpFlags::COMPLETION),
            count: d.binds.cntr_write.is_some(),
        };
        let data = flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(msg.data);
        self.write(
            user,
            msg.desc,
            remote,
            rep,
            data,
            flags.contains(OpFlags::INJECT),
            flags.contains(OpFlags::FENCE),
        )
    }
}

/// Whether the verbs atomics serve `op` on `dt` (64-bit fetch-add and
/// compare-swap, and atomic read as a fetch-add of zero).
pub(crate) fn atomic_ok(dt: Datatype, op: AtomicOp, fetch: bool, compare: bool) -> bool {
    matches!(dt, Datatype::Int64 | Datatype::Uint64)
        && match op {
            AtomicOp::Sum => !compare,
            AtomicOp::AtomicRead => fetch && !compare,
            AtomicOp::Cswap => compare,
            _ => false,
        }
}

/// `fi_atomicvalid` and `fi_query_atomic` on a device with `limits`: one
/// element per operation where the device and [`atomic_ok`] allow it.
pub(crate) fn atomic_count(
    limits: &crate::getinfo::Limits,
    dt: Datatype,
    op: AtomicOp,
    fetch: bool,
    compare: bool,
) -> Result<usize> {
    if limits.atomics && atomic_ok(dt, op, fetch, compare) {
        Ok(1)
    } else {
        Err(Error::new(
            ErrorKind::OpNotSupp,
            format!("verbs: atomic {op} on {dt} is not supported"),
        ))
    }
}

impl AtomicOps for MsgEndpoint {
    fn atomic_valid(
        &self,
        datatype: Datatype,
        op: AtomicOp,
        fetch: bool,
        compare: bool,
    ) -> Result<usize> {
        atomic_count(&self.inner.domain.limits, datatype, op, fetch, compare)
    }

    #[allow(unsafe_code)]
    unsafe fn atomicmsg(&self, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let bufs = unsafe { AtomicBufs::of(msg) };
        self.atomic(&bufs, msg, flags)
    }
}

impl MsgEndpoint {
    fn atomic(&self, bufs: &AtomicBufs<'_>, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        let fetch = !msg.result.is_empty();
        let dir = if fetch { Caps::READ } else { Caps::WRITE };
        self.may(Caps::ATOMIC, dir, "an atomic")?;
        let d = self.data()?;
        let compare = !msg.compare.is_empty();
        self.atomic_valid(msg.datatype, msg.op, fetch, compare)?;
        let remote = one_range(msg.rma_iov)?;
        if remote.len != 1 {
            return Err(Error::inval("verbs: a verbs atomic updates one element"));
        }
        if remote.addr % 8 != 0 {
            return Err(Error::inval(format!(
                "verbs: atomic target {:#x} is not 8-byte aligned",
                remote.addr
            )));
        }
        let key = rkey(remote.key)?;
        let operand = if msg.op == AtomicOp::AtomicRead {
            0
        } else {
            bufs.operand.read_u64("operand")?
        };
        let cmp = if compare {
            bufs.compare.read_u64("compare value")?
        } else {
            0
        };
        let result = if fetch {
            Some(bufs.result.dst(8).ok_or_else(|| {
                Error::inval("verbs: the result of a verbs atomic is one 8-byte element")
            })?)
        } else {
            None
        };
        let rep = TxReport {
            context: msg.context,
            flags: CompletionFlags::ATOMIC
                | if fetch {
                    CompletionFlags::READ
                } else {
                    CompletionFlags::WRITE
                },
            len: 8,
            report: !d.binds.tx_selective || flags.contains(OpFlags::COMPLETION),
            count: if fetch {
                d.binds.cntr_read.is_some()
            } else {
                d.binds.cntr_write.is_some()
            },
        };
        let op = if msg.op == AtomicOp::Cswap {
            Opcode::CmpSwap(cmp, operand)
        } else {
            Opcode::FetchAdd(operand)
        };
        let fence = if flags.contains(OpFlags::FENCE) {
            SendFlags::FENCE
        } else {
            SendFlags::empty()
        };
        d.post_tx(rep, result, |seq, stage, idx| {
            SendWr::new(seq, op, SgeList::one(stage.sge(idx, 8)))
                .remote(remote.addr, key)
                .flags(fence)
        })
    }
}

impl CmOps for MsgEndpoint {
    fn getname(&self) -> Result<Address> {
        lock(&self.inner.cm)
            .id
            .as_ref()
            .and_then(|id| id.local_addr())
            .ok_or_else(|| Error::new(ErrorKind::NotConn, "verbs: the endpoint has no address"))
    }

    fn getpeer(&self) -> Result<Address> {
        let cm = lock(&self.inner.cm);
        if cm.state != State::Connected {
            return Err(Error::new(ErrorKind::NotConn, "verbs: not connected"));
        }
        cm.id
            .as_ref()
            .and_then(|id| id.peer_addr())
            .ok_or_else(|| Error::new(ErrorKind::NotConn, "verbs: not connected"))
    }

    fn connect(&self, dest: &Address, param: &[u8]) -> Result<()> {
        self.enable_if_needed()?;
        if param.len() > MAX_PRIVATE_DATA {
            return Err(Error::inval(format!(
                "verbs: {} bytes of private data; the limit is {MAX_PRIVATE_DATA}",
                param.len()
            )));
        }
        let dst = dest.socket_addr().ok_or_else(|| {
            Error::inval(format!(
                "verbs: cannot connect to `{dest}`: not an IP socket address"
            ))
        })?;
        let mut cm = lock(&self.inner.cm);
        if cm.passive || cm.state != State::Idle {
            return Err(Error::new(
                ErrorKind::IsConn,
                "verbs: the endpoint is already connecting or connected",
            ));
        }
        let id = cm
            .id
            .as_ref()
            .ok_or_else(|| Error::new(ErrorKind::OpBadState, "verbs: the endpoint has no id"))?;
        // Address and route resolution are local work for IP-based RDMA
        // (an ARP / neighbour lookup at most): done here, synchronously,
        // as rdma_create_ep does, so that the request leaves without the
        // application reading its EQ. The outcome of the connection itself
        // is an EQ event.
        id.resolve_addr(&dst)?;
        self.inner.wait_cm(CmEventKind::AddrResolved)?;
        id.resolve_route()?;
        self.inner.wait_cm(CmEventKind::RouteResolved)?;
        id.connect(&self.inner.conn_param(param))?;
        cm.state = State::Connecting;
        Ok(())
    }

    fn accept(&self, param: &[u8]) -> Result<()> {
        self.enable_if_needed()?;
        let mut cm = lock(&self.inner.cm);
        if !cm.passive || cm.state != State::Idle {
            return Err(Error::new(
                ErrorKind::OpBadState,
                "verbs: accept needs an endpoint opened for a connection request",
            ));
        }
        let id = cm
            .id
            .as_ref()
            .ok_or_else(|| Error::new(ErrorKind::OpBadState, "verbs: the endpoint has no id"))?;
        id.accept(&self.inner.conn_param(param))?;
        cm.state = State::Accepting;
        Ok(())
    }

    /// Disconnects. This side reports `Shutdown` at once (not when the
    /// peer's answer arrives, which would need the peer to progress); the
    /// peer reports it when the disconnect request reaches it.
    fn shutdown(&self) -> Result<()> {
        let mut cm = lock(&self.inner.cm);
        match cm.state {
            State::Connected | State::Accepting | State::Connecting => {
                let r = cm.id.as_ref().map_or(Ok(()), |id| id.disconnect());
                self.inner.down(&mut cm);
                drop(cm);
                self.inner.push(EqEvent::Shutdown {
                    fid: self.inner.fid,
                });
                r
            }
            _ => Ok(()),
        }
    }
}

impl MsgEndpoint {
    fn enable_if_needed(&self) -> Result<()> {
        if self.inner.data.get().is_some() {
            return Ok(());
        }
        self.enable()
    }
}

impl Endpoint for MsgEndpoint {
    fn event_id(&self) -> Option<u64> {
        Some(self.fid())
    }

    /// Cancels a receive the provider still holds (posted behind a
    /// multi-receive buffer in use): it completes with `FI_ECANCELED`,
    /// once. A receive in the queue pair's receive queue (zero copy)
    /// cannot be taken back from the NIC: `OpNotSupp`; it completes, or is
    /// flushed (`FI_ECANCELED`) when the connection ends.
    fn cancel(&self, context: u64) -> Result<()> {
        self.data()?.cancel_recv(context)
    }

    fn min_multi_recv(&self) -> Result<usize> {
        Ok(self.inner.min_multi.load(Ordering::Relaxed))
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.inner.min_multi.store(bytes, Ordering::Relaxed);
        if let Some(d) = self.inner.data.get() {
            d.min_multi.store(bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    fn info(&self) -> &Info {
        &self.inner.info
    }

    fn bind(&self, what: Bind<'_>) -> Result<()> {
        if self.inner.data.get().is_some() {
            return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
        }
        let mut b = lock(&self.inner.binds);
        super::bind(&mut b, what, super::MSG_ACCEPTS)?;
        if let Some(eq) = &b.eq {
            if self.inner.eq.set(eq.clone()).is_err()
                && self.inner.eq.get().is_some_and(|e| !Arc::ptr_eq(e, eq))
            {
                return Err(Error::new(
                    ErrorKind::OpBadState,
                    "verbs: the endpoint is already bound to another EQ",
                ));
            }
            let me: Arc<dyn Progress> = self.inner.clone();
            eq.add_progress(Arc::downgrade(&me));
        }
        Ok(())
    }

    fn enable(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.data.get().is_some() {
            return Err(super::already_enabled());
        }
        let mut binds = lock(&inner.binds).clone();
        if binds.eq.is_none() {
            return Err(Error::new(
                ErrorKind::NoEq,
                "verbs: a MSG endpoint needs an event queue (fi_ep_bind an EQ before enabling)",
            ));
        }
        let l = &inner.domain.limits;
        let want = |v: usize| {
            let v = if v == 0 {
                crate::getinfo::QUEUE_SIZE
            } else {
                v
            };
            v.min(l.max_qp_wr.max(1))
        };
        let tx = want(inner.info.tx_attr.size);
        let rx = want(inner.info.rx_attr.size);
        let private = |c: &Option<Arc<CqShared>>| -> Result<Arc<CqShared>> {
            match c {
                Some(c) => Ok(c.clone()),
                None => inner.domain.new_cq(tx.max(rx)),
            }
        };
        let tx_cq = private(&binds.tx_cq)?;
        let rx_cq = private(&binds.rx_cq)?;
        binds.tx_cq = Some(tx_cq.clone());
        binds.rx_cq = Some(rx_cq.clone());
        let iov = super::IOV_MAX.min(l.max_sge.max(1));
        let mut cm = lock(&inner.cm);
        let id =
            cm.id.as_mut().and_then(Arc::get_mut).ok_or_else(|| {
                Error::new(ErrorKind::OpBadState, "verbs: the endpoint has no id")
            })?;
        let mut caps = QpCaps {
            max_send_wr: tx as u32,
            max_recv_wr: rx as u32,
            max_send_sge: iov as u32,
            max_recv_sge: iov as u32,
            max_inline_data: STAGE as u32,
        };
        let pd = &inner.domain.pd;
        if id
            .create_rc_qp(pd, tx_cq.hw(), rx_cq.hw(), None, &mut caps)
            .is_err()
        {
            // Some devices take no inline data: retry without.
            caps.max_inline_data = 0;
            id.create_rc_qp(pd, tx_cq.hw(), rx_cq.hw(), None, &mut caps)?;
        }
        let sizes = QpSizes {
            tx: tx.min(caps.max_send_wr as usize).max(1),
            rx: rx.min(caps.max_recv_wr as usize).max(1),
            max_inline: caps.max_inline_data as usize,
            iov_limit: iov
                .min(caps.max_send_sge as usize)
                .min(caps.max_recv_sge as usize),
            max_msg: l.max_msg_size,
            min_multi: inner.min_multi.load(Ordering::Relaxed),
        };
        let id = cm
            .id
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::OpBadState, "verbs: the endpoint has no id"))?;
        let data = QpData::new(&inner.domain, id, sizes, binds, tx_cq, rx_cq)?;
        drop(cm);
        if let Err(data) = inner.data.set(data) {
            data.detach();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomics_offered() {
        assert!(atomic_ok(Datatype::Uint64, AtomicOp::Sum, true, false));
        assert!(atomic_ok(Datatype::Int64, AtomicOp::Sum, false, false));
        assert!(atomic_ok(Datatype::Uint64, AtomicOp::Cswap, true, true));
        assert!(atomic_ok(
            Datatype::Uint64,
            AtomicOp::AtomicRead,
            true,
            false
        ));
        assert!(!atomic_ok(Datatype::Uint32, AtomicOp::Sum, true, false));
        assert!(!atomic_ok(Datatype::Uint64, AtomicOp::Max, true, false));
        assert!(!atomic_ok(Datatype::Uint64, AtomicOp::Cswap, true, false));
    }
}
