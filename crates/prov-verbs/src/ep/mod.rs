//! Endpoints: MSG (one RC queue pair, connected with rdma_cm), RDM
//! (reliable unconnected messaging over RC queue pairs made on demand) and
//! passive (listening) endpoints, and what they share: binding, and the
//! queue-pair engine ([`QpData`]) that posts work requests and turns their
//! work completions into application completions.

pub(crate) mod dgram;
pub(crate) mod msg;
pub(crate) mod passive;
pub(crate) mod rdm;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fabric_core::kit::binds::Accepts;
use fabric_core::kit::objects::Progress;
use fabric_core::objects::{Bind, CompletionFlags, CqEntry, CqErrEntry, FiAddr, IoVec, MrDesc};
use fabric_core::{Error, ErrorKind, Result};

use crate::cq::{CqShared, VerbsCq};
use crate::domain::{DomainCore, lkey_of};
use crate::raw::cm::CmId;
use crate::raw::mem::{UserDst, UserIov, sge_len};
use crate::raw::verbs::Pool;
use crate::raw::wr::{Opcode, RecvWr, SendFlags, SendWr, Sge, SgeList, Wc, WcKind};

/// Most pieces of one operation's IO vector.
pub(crate) const IOV_MAX: usize = crate::getinfo::IOV_LIMIT;
/// Bytes of each transmit slot's registered staging buffer: injects that
/// do not fit inline, small sends without a descriptor, atomic results.
pub(crate) const STAGE: usize = crate::getinfo::MSG_INJECT_SIZE;
/// Marks receive work requests in `wr_id` (the rest is the sequence).
const RX_BIT: u64 = 1 << 63;

pub(crate) use fabric_core::kit::lock;

/// A fresh object id for EQ events (`fid` fields).
pub(crate) fn next_fid() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What an endpoint is bound to: the kit's record, keeping verbs' own CQs.
pub(crate) type Binds = fabric_core::kit::binds::Binds<CqShared>;

/// What endpoints of each type take besides CQs and counters. Counters of
/// peers' RMA (FI_REMOTE_READ / FI_REMOTE_WRITE) are not offered: the NIC
/// serves that RMA without this process.
pub(crate) const MSG_ACCEPTS: Accepts = Accepts {
    av: false,
    eq: true,
    remote_cntr: false,
    name: "MSG endpoints",
};
/// See [`MSG_ACCEPTS`].
pub(crate) const RDM_ACCEPTS: Accepts = Accepts {
    av: true,
    eq: false,
    remote_cntr: false,
    name: "RDM endpoints",
};
/// See [`MSG_ACCEPTS`].
pub(crate) const DGRAM_ACCEPTS: Accepts = Accepts {
    av: true,
    eq: false,
    remote_cntr: false,
    name: "DGRAM endpoints",
};

/// Applies one `fi_ep_bind` to `b`, with this provider's CQs.
pub(crate) fn bind(b: &mut Binds, what: Bind<'_>, accepts: Accepts) -> Result<()> {
    b.bind_with(what, accepts, |cq| {
        cq.as_any()
            .downcast_ref::<VerbsCq>()
            .map(|c| c.shared().clone())
    })
}

/// `fi_ep_bind` on an endpoint whose bindings are `pending` until
/// `fi_enable` fixes them in `fixed` (RDM and DGRAM endpoints).
pub(crate) fn bind_pending(
    fixed: &OnceLock<Binds>,
    pending: &Mutex<Binds>,
    what: Bind<'_>,
    accepts: Accepts,
) -> Result<()> {
    if fixed.get().is_some() {
        return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
    }
    bind(&mut lock(pending), what, accepts)
}

/// `fi_enable` of such an endpoint, with the rules of tcp and shm: an
/// address vector when `needs_av` (RDM), both CQs (`kind` names the
/// endpoint in the errors), and only once (`OpBadState` after). `engine`
/// is progressed by the CQs' reads.
pub(crate) fn enable_pending(
    fixed: &OnceLock<Binds>,
    pending: &Mutex<Binds>,
    engine: Arc<dyn Progress>,
    needs_av: bool,
    kind: &str,
) -> Result<()> {
    if fixed.get().is_some() {
        return Err(already_enabled());
    }
    let b = lock(pending).clone();
    if needs_av && b.av.is_none() {
        return Err(Error::new(
            ErrorKind::NoAv,
            format!("verbs: {kind} needs an address vector before enable"),
        ));
    }
    if b.tx_cq.is_none() || b.rx_cq.is_none() {
        return Err(Error::new(
            ErrorKind::NoCq,
            format!("verbs: {kind} needs transmit and receive CQs"),
        ));
    }
    for cq in [&b.tx_cq, &b.rx_cq].into_iter().flatten() {
        cq.add_engine(Arc::downgrade(&engine));
    }
    fixed.set(b).map_err(|_| already_enabled())
}

/// A second `fi_enable`.
pub(crate) fn already_enabled() -> Error {
    Error::new(
        ErrorKind::OpBadState,
        "verbs: the endpoint is already enabled",
    )
}

/// An operation that needs an enabled endpoint (`fi_cancel`) before
/// `fi_enable`.
pub(crate) fn not_enabled() -> Error {
    Error::new(
        ErrorKind::OpBadState,
        "verbs: endpoint not enabled (call enable after binding its CQ and AV)",
    )
}

/// The error completion of a failed work completion, with the verbs
/// status text as the provider text.
pub(crate) fn wc_error(wc: &Wc, entry: CqEntry) -> CqErrEntry {
    CqErrEntry {
        entry,
        olen: 0,
        err: wc.error_kind(),
        prov_errno: i32::try_from(wc.status()).unwrap_or(-1),
        err_text: wc.error_text(),
        src_addr: None,
    }
}

/// Total length of an IO vector, or `Inval` when it overflows.
pub(crate) fn iov_len(iov: &[IoVec]) -> Result<usize> {
    iov.iter()
        .try_fold(0usize, |a, p| a.checked_add(p.len))
        .ok_or_else(|| Error::inval("the IO vector's total length overflows"))
}

/// One transmit work request in flight.
#[derive(Debug, Clone, Copy, Default)]
struct TxSlot {
    context: u64,
    flags: CompletionFlags,
    len: usize,
    /// Report a successful completion.
    report: bool,
    /// Where to copy the staging slot's bytes at completion (atomic old
    /// values, small reads into unregistered memory).
    result: Option<UserDst>,
}

#[derive(Debug)]
struct TxRing {
    slots: Vec<TxSlot>,
    head: u64,
    tail: u64,
    unsignaled: usize,
}

impl TxRing {
    fn cap(&self) -> usize {
        self.slots.len()
    }
}

/// One receive work request in the queue pair's receive queue.
#[derive(Debug, Clone, Copy, Default)]
struct RxSlot {
    context: u64,
    report: bool,
    /// The window of the current multi-receive buffer.
    multi: bool,
}

/// A multi-receive buffer (FI_MULTI_RECV): one registered piece, carved
/// by successive messages. Its unused rest (from `off`) is posted as one
/// receive work request, its window; a message takes the window, and the
/// rest after it is posted again while at least `FI_OPT_MIN_MULTI_RECV`
/// bytes remain (meanwhile the queue pair's RNR retries hold the sender).
#[derive(Debug, Clone, Copy)]
struct MultiBuf {
    context: u64,
    report: bool,
    addr: u64,
    len: usize,
    lkey: u32,
    off: usize,
}

/// A receive the provider holds, not yet in the receive queue: those
/// posted while a multi-receive buffer is in use wait for its release, so
/// that messages take the receives in the order they were posted.
#[derive(Debug, Clone, Copy)]
enum Held {
    One {
        sges: SgeList<IOV_MAX>,
        context: u64,
        report: bool,
    },
    Multi(MultiBuf),
}

impl Held {
    fn context(&self) -> u64 {
        match self {
            Held::One { context, .. } => *context,
            Held::Multi(m) => m.context,
        }
    }
}

#[derive(Debug)]
struct RxRing {
    slots: Vec<RxSlot>,
    head: u64,
    tail: u64,
    /// The multi-receive buffer whose window is in the receive queue.
    multi: Option<MultiBuf>,
    /// Receives posted behind it, in order.
    held: VecDeque<Held>,
}

/// How a transmit request is reported.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxReport {
    /// The application's context.
    pub context: u64,
    /// Completion flags.
    pub flags: CompletionFlags,
    /// Length reported.
    pub len: usize,
    /// Whether a successful completion is wanted (signaled).
    pub report: bool,
    /// Whether the work request must be signaled even without a report
    /// (a bound counter counts it).
    pub count: bool,
}

/// The queue-pair engine of a connected endpoint: posting with bounded
/// rings (a full ring is `Again`), and completion handling.
pub(crate) struct QpData {
    /// The id owning the QP; declared first, so that the QP is destroyed
    /// before the staging memory and the CQs it uses.
    id: Arc<CmId>,
    qp_num: u32,
    tx: spin::Mutex<TxRing>,
    rx: spin::Mutex<RxRing>,
    /// Registered staging memory: one slot of [`STAGE`] bytes per
    /// transmit slot.
    staging: Pool,
    pub(crate) binds: Binds,
    pub(crate) max_inline: usize,
    pub(crate) iov_limit: usize,
    pub(crate) max_msg: usize,
    pub(crate) connected: AtomicBool,
    pub(crate) shut: AtomicBool,
    tx_cq: Arc<CqShared>,
    rx_cq: Arc<CqShared>,
    /// `FI_OPT_MIN_MULTI_RECV`.
    pub(crate) min_multi: AtomicUsize,
}

impl std::fmt::Debug for QpData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpData")
            .field("qp_num", &self.qp_num)
            .finish_non_exhaustive()
    }
}

/// Sizes of a queue pair.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpSizes {
    pub tx: usize,
    pub rx: usize,
    pub max_inline: usize,
    pub iov_limit: usize,
    pub max_msg: usize,
    /// `FI_OPT_MIN_MULTI_RECV` at enable.
    pub min_multi: usize,
}

impl QpData {
    /// The engine of a created QP; attaches it to its CQs.
    pub(crate) fn new(
        domain: &DomainCore,
        id: Arc<CmId>,
        sizes: QpSizes,
        binds: Binds,
        tx_cq: Arc<CqShared>,
        rx_cq: Arc<CqShared>,
    ) -> Result<Arc<QpData>> {
        let qp_num = id
            .qp_num()
            .ok_or_else(|| Error::new(ErrorKind::OpBadState, "verbs: the endpoint has no QP"))?;
        let staging = Pool::new(&domain.pd, STAGE, sizes.tx.max(1))?;
        let d = Arc::new(QpData {
            id,
            qp_num,
            tx: spin::Mutex::new(TxRing {
                slots: vec![TxSlot::default(); sizes.tx.max(1)],
                head: 0,
                tail: 0,
                unsignaled: 0,
            }),
            rx: spin::Mutex::new(RxRing {
                slots: vec![RxSlot::default(); sizes.rx.max(1)],
                head: 0,
                tail: 0,
                multi: None,
                held: VecDeque::new(),
            }),
            staging,
            binds,
            max_inline: sizes.max_inline,
            iov_limit: sizes.iov_limit,
            max_msg: sizes.max_msg,
            connected: AtomicBool::new(false),
            shut: AtomicBool::new(false),
            tx_cq,
            rx_cq,
            min_multi: AtomicUsize::new(sizes.min_multi),
        });
        d.tx_cq.attach(qp_num, d.clone());
        d.rx_cq.attach(qp_num, d.clone());
        Ok(d)
    }

    /// Stops its CQs routing completions here, which lets it go (the CQs
    /// hold it until then); its endpoint calls this when it closes.
    pub(crate) fn detach(&self) {
        self.tx_cq.detach(self.qp_num);
        self.rx_cq.detach(self.qp_num);
    }

    /// `Inval` when `iov` has more pieces than a work request takes.
    #[inline]
    fn check_pieces(&self, iov: &[IoVec]) -> Result<()> {
        if iov.len() > self.iov_limit.min(IOV_MAX) {
            return Err(self.too_many_pieces(iov.len()));
        }
        Ok(())
    }

    #[cold]
    fn too_many_pieces(&self, n: usize) -> Error {
        Error::inval(format!(
            "verbs: {n} IO vector pieces; the limit is {}",
            self.iov_limit.min(IOV_MAX)
        ))
    }

    /// Fills `sges` from an IO vector and its descriptors; `false` when a
    /// piece has no descriptor (then the data must be staged or inlined).
    /// `Inval` when `iov` has more pieces than a work request takes.
    #[inline(always)]
    fn sges(
        &self,
        user: &UserIov<'_>,
        desc: &[MrDesc],
        sges: &mut SgeList<IOV_MAX>,
    ) -> Result<bool> {
        // One registered piece (most operations), inline here.
        if let ([p], [d, ..]) = (user.pieces(), desc) {
            if let (Some(lkey), Ok(length)) = (lkey_of(*d), u32::try_from(p.len)) {
                if length > 0 {
                    *sges = SgeList::one(Sge::new(p.addr as u64, length, lkey));
                    return Ok(true);
                }
            }
        }
        self.sges_any(user, desc, sges)
    }

    /// [`sges`](QpData::sges) for any IO vector: pieces of zero bytes are
    /// left out.
    fn sges_any(
        &self,
        user: &UserIov<'_>,
        desc: &[MrDesc],
        sges: &mut SgeList<IOV_MAX>,
    ) -> Result<bool> {
        self.check_pieces(user.pieces())?;
        let mut out = SgeList::default();
        for (i, p) in user.pieces().iter().enumerate() {
            if p.len == 0 {
                continue;
            }
            let Some(lkey) = desc.get(i).copied().and_then(lkey_of) else {
                return Ok(false);
            };
            out.push(Sge::new(p.addr as u64, sge_len(p.len)?, lkey));
        }
        *sges = out;
        Ok(true)
    }

    /// Posts a transmit work request `op` that sends or writes local data
    /// (to `remote`, address and key, for RDMA writes): inline when small
    /// enough, from registered memory when every piece has a descriptor,
    /// else copied into the slot's staging buffer (up to [`STAGE`] bytes).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_data(
        &self,
        user: &UserIov<'_>,
        desc: &[MrDesc],
        inject: bool,
        fence: bool,
        rep: TxReport,
        op: Opcode,
        remote: Option<(u64, u32)>,
    ) -> Result<()> {
        let len = user.len()?;
        if len > self.max_msg {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("verbs: {len} bytes exceed max_msg_size {}", self.max_msg),
            ));
        }
        let mut sges = SgeList::<IOV_MAX>::default();
        // Inline regardless of descriptors: no scatter list to build.
        let inline_anyway = len <= self.max_inline && (inject || len <= 32);
        let registered = if inline_anyway {
            self.check_pieces(user.pieces())?;
            false
        } else {
            self.sges(user, desc, &mut sges)?
        };
        let inline = inline_anyway || (len <= self.max_inline && !registered);
        if !inline && !registered && len > STAGE {
            return Err(Error::inval(format!(
                "verbs: {len} bytes without a memory descriptor; this endpoint needs registered buffers (FI_MR_LOCAL) beyond {STAGE} bytes"
            )));
        }
        if inject && !inline && len > STAGE {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("verbs: {len} bytes exceed the inject size {STAGE}"),
            ));
        }
        let flags = if fence {
            SendFlags::FENCE
        } else {
            SendFlags::empty()
        };
        self.post_tx(rep, None, |seq, stage, idx| {
            let mut wr = if inline {
                let mut wr = SendWr::new(seq, op, SgeList::default());
                // The pieces were checked against the list's size.
                let _ = wr.inline_user(user);
                wr
            } else if registered && !inject {
                SendWr::new(seq, op, sges)
            } else {
                let n = stage.gather(idx, 0, user);
                SendWr::new(seq, op, SgeList::one(stage.sge(idx, n)))
            };
            if let Some((addr, rkey)) = remote {
                wr = wr.remote(addr, rkey);
            }
            wr.flags(flags)
        })
    }

    /// Posts one transmit work request built by `build` (given its id, the
    /// staging pool and the slot's index in it), under the ring lock so
    /// that ring order is queue order; copies the staging slot to `result`
    /// at completion.
    pub(crate) fn post_tx(
        &self,
        rep: TxReport,
        result: Option<UserDst>,
        build: impl FnOnce(u64, &Pool, usize) -> SendWr<'static, IOV_MAX>,
    ) -> Result<()> {
        if self.shut.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::Shutdown,
                "verbs: the connection is shut down",
            ));
        }
        if !self.connected.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::Again,
                "verbs: the endpoint is not connected yet",
            ));
        }
        let mut t = self.tx.lock();
        let cap = t.cap();
        if (t.head - t.tail) as usize >= cap {
            return Err(Error::again());
        }
        let seq = t.head;
        let idx = (seq % cap as u64) as usize;
        let mut wr = build(seq, &self.staging, idx);
        let signal = rep.report || rep.count || result.is_some() || t.unsignaled >= cap / 2;
        if signal {
            wr.add_flags(SendFlags::SIGNALED);
        }
        match self.id.post_send(&mut wr) {
            Ok(()) => {}
            Err(libc::ENOMEM) => return Err(Error::again()),
            Err(e) => return Err(crate::raw::from_errno(e, "ibv_post_send")),
        }
        t.unsignaled = if signal { 0 } else { t.unsignaled + 1 };
        t.slots[idx] = TxSlot {
            context: rep.context,
            flags: rep.flags,
            len: rep.len,
            report: rep.report,
            result,
        };
        t.head += 1;
        Ok(())
    }

    /// Posts a receive into registered memory; with `multi`, a
    /// multi-receive buffer (one registered piece). A receive posted while
    /// a multi-receive buffer is in use is held until its release.
    pub(crate) fn post_recv(
        &self,
        user: &UserIov<'_>,
        desc: &[MrDesc],
        context: u64,
        report: bool,
        multi: bool,
    ) -> Result<()> {
        if self.shut.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::Shutdown,
                "verbs: the connection is shut down",
            ));
        }
        let mut sges = SgeList::<IOV_MAX>::default();
        if !self.sges(user, desc, &mut sges)? {
            return Err(Error::inval(
                "verbs: a receive buffer needs a memory descriptor (FI_MR_LOCAL)",
            ));
        }
        let held = if multi {
            let ([p], [d, ..]) = (user.pieces(), desc) else {
                return Err(Error::inval(
                    "verbs: a multi-receive buffer is one registered piece",
                ));
            };
            let Some(lkey) = lkey_of(*d) else {
                return Err(Error::inval(
                    "verbs: a receive buffer needs a memory descriptor (FI_MR_LOCAL)",
                ));
            };
            Held::Multi(MultiBuf {
                context,
                report,
                addr: p.addr as u64,
                len: p.len,
                lkey,
                off: 0,
            })
        } else {
            Held::One {
                sges,
                context,
                report,
            }
        };
        let mut r = self.rx.lock();
        let cap = r.slots.len();
        if (r.head - r.tail) as usize + r.held.len() >= cap {
            return Err(Error::again());
        }
        if r.multi.is_some() || !r.held.is_empty() {
            r.held.push_back(held);
            return Ok(());
        }
        self.post_held(&mut r, held)
    }

    /// Posts a receive (or the window of a multi-receive buffer, which
    /// becomes the current one) to the receive queue.
    fn post_held(&self, r: &mut RxRing, h: Held) -> Result<()> {
        let cap = r.slots.len();
        if (r.head - r.tail) as usize >= cap {
            return Err(Error::again());
        }
        let seq = r.head;
        let (sges, slot) = match h {
            Held::One {
                sges,
                context,
                report,
            } => (
                sges,
                RxSlot {
                    context,
                    report,
                    multi: false,
                },
            ),
            Held::Multi(m) => {
                let rest = u32::try_from(m.len - m.off).unwrap_or(u32::MAX);
                (
                    SgeList::one(Sge::new(m.addr + m.off as u64, rest, m.lkey)),
                    RxSlot {
                        context: m.context,
                        report: m.report,
                        multi: true,
                    },
                )
            }
        };
        let mut wr = RecvWr::new(seq | RX_BIT, sges);
        match self.id.post_recv(&mut wr) {
            Ok(()) => {}
            Err(libc::ENOMEM) => return Err(Error::again()),
            Err(e) => return Err(crate::raw::from_errno(e, "ibv_post_recv")),
        }
        if let Held::Multi(m) = h {
            r.multi = Some(m);
        }
        r.slots[(seq % cap as u64) as usize] = slot;
        r.head += 1;
        Ok(())
    }

    /// The current multi-receive buffer was released: the receives held
    /// behind it go to the receive queue, up to the next multi-receive
    /// buffer. `Some(error)` when the queue pair is in the error state:
    /// they fail instead (once each, `Canceled`).
    fn release_multi(&self, r: &mut RxRing, cq: &CqShared, failed: Option<&Error>) {
        r.multi = None;
        while let Some(h) = r.held.pop_front() {
            let is_multi = matches!(h, Held::Multi(_));
            let res = match failed {
                Some(e) => Err(e.clone()),
                None => self.post_held(r, h),
            };
            if let Err(e) = res {
                self.fail_held(cq, &h, &e);
                continue;
            }
            if is_multi {
                break;
            }
        }
    }

    /// A held receive fails (cancelled, or never posted).
    fn fail_held(&self, cq: &CqShared, h: &Held, e: &Error) {
        let mut flags = CompletionFlags::MSG | CompletionFlags::RECV;
        if matches!(h, Held::Multi(_)) {
            flags |= CompletionFlags::MULTI_RECV;
        }
        if let Some(c) = &self.binds.cntr_recv {
            c.add_err(1);
        }
        cq.push_err(CqErrEntry {
            entry: CqEntry {
                context: h.context(),
                flags,
                ..CqEntry::default()
            },
            olen: 0,
            err: e.kind(),
            prov_errno: 0,
            err_text: e.detail().to_string(),
            src_addr: None,
        });
    }

    /// `fi_cancel` of a receive: one the provider holds (behind a
    /// multi-receive buffer) completes with `Canceled`, once; one in the
    /// receive queue cannot be taken back (`OpNotSupp`); others are
    /// `NoEnt`.
    pub(crate) fn cancel_recv(&self, context: u64) -> Result<()> {
        let mut r = self.rx.lock();
        if let Some(i) = r.held.iter().position(|h| h.context() == context) {
            let h = r.held.remove(i);
            drop(r);
            if let Some(h) = h {
                let e = Error::new(ErrorKind::Canceled, "verbs: the receive was cancelled");
                self.fail_held(&self.rx_cq, &h, &e);
            }
            return Ok(());
        }
        let cap = r.slots.len() as u64;
        let in_queue = (r.tail..r.head).any(|s| r.slots[(s % cap) as usize].context == context);
        if in_queue {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "verbs: the receive is in the NIC's receive queue, from which verbs cannot take a work request back (it completes, or is flushed with FI_ECANCELED at shutdown)",
            ));
        }
        Err(Error::new(
            ErrorKind::NoEnt,
            "verbs: no posted receive has this context",
        ))
    }

    fn complete_tx(&self, wc: &Wc, cq: &CqShared) -> Option<(CqEntry, FiAddr)> {
        let mut t = self.tx.lock();
        let seq = wc.wr_id();
        if seq < t.tail || seq >= t.head {
            return None;
        }
        let cap = t.cap();
        let idx = (seq % cap as u64) as usize;
        let slot = t.slots[idx];
        t.tail = seq + 1;
        drop(t);
        let entry = CqEntry {
            context: slot.context,
            flags: slot.flags,
            len: slot.len,
            ..CqEntry::default()
        };
        let cntr = self.binds.tx_counter(slot.flags);
        if !wc.ok() {
            if let Some(c) = cntr {
                c.add_err(1);
            }
            cq.push_err(wc_error(wc, entry));
            return None;
        }
        if let Some(dst) = slot.result {
            // The staging slot holds what the device wrote.
            dst.write(self.staging.read(idx, 0, dst.len()));
        }
        if let Some(c) = cntr {
            c.add(1);
        }
        slot.report.then_some((entry, FiAddr::NOTAVAIL))
    }

    fn complete_rx(&self, wc: &Wc, cq: &CqShared) -> Option<(CqEntry, FiAddr)> {
        let mut r = self.rx.lock();
        let seq = wc.wr_id() & !RX_BIT;
        if seq < r.tail || seq >= r.head {
            return None;
        }
        let cap = r.slots.len();
        let slot = r.slots[(seq % cap as u64) as usize];
        r.tail = seq + 1;
        let mut entry = CqEntry {
            context: slot.context,
            flags: CompletionFlags::MSG | CompletionFlags::RECV,
            ..CqEntry::default()
        };
        if !wc.ok() {
            if slot.multi {
                // Released: what was held behind it can never be posted.
                entry.flags |= CompletionFlags::MULTI_RECV;
                let e = Error::new(wc.error_kind(), wc.error_text());
                self.release_multi(&mut r, cq, Some(&e));
            }
            drop(r);
            if let Some(c) = &self.binds.cntr_recv {
                c.add_err(1);
            }
            cq.push_err(wc_error(wc, entry));
            return None;
        }
        // Remote CQ data of an RDMA write took the receive: no bytes of it.
        let write = wc.kind() == WcKind::RecvWriteImm;
        entry.len = if write { 0 } else { wc.byte_len() as usize };
        if slot.multi {
            self.carve(&mut r, cq, &mut entry);
        }
        drop(r);
        if write {
            entry.flags = (entry.flags & CompletionFlags::MULTI_RECV)
                | CompletionFlags::RMA
                | CompletionFlags::REMOTE_WRITE;
            entry.buf = 0;
        }
        if let Some(imm) = wc.imm() {
            entry.flags |= CompletionFlags::REMOTE_CQ_DATA;
            entry.data = u64::from(imm);
        }
        if let Some(c) = &self.binds.cntr_recv {
            c.add(1);
        }
        slot.report.then_some((entry, FiAddr::NOTAVAIL))
    }

    /// A message took the window of the current multi-receive buffer
    /// (`entry.len` bytes): its place goes into `entry`, and the rest is
    /// posted again, or the buffer is released (FI_MULTI_RECV).
    fn carve(&self, r: &mut RxRing, cq: &CqShared, entry: &mut CqEntry) {
        let Some(mut m) = r.multi else { return };
        entry.buf = m.addr + m.off as u64;
        m.off = (m.off + entry.len).min(m.len);
        if m.len - m.off >= self.min_multi.load(Ordering::Relaxed).max(1)
            && self.post_held(r, Held::Multi(m)).is_ok()
        {
            return;
        }
        entry.flags |= CompletionFlags::MULTI_RECV;
        self.release_multi(r, cq, None);
    }
}

impl QpData {
    /// Handles one work completion of this queue pair; returns the
    /// application's completion and its source, if the work request
    /// reports one. Failures go into `cq` as error completions.
    #[inline]
    pub(crate) fn complete(&self, wc: &Wc, cq: &CqShared) -> Option<(CqEntry, FiAddr)> {
        if wc.wr_id() & RX_BIT != 0 {
            self.complete_rx(wc, cq)
        } else {
            self.complete_tx(wc, cq)
        }
    }
}

/// The immediate value of remote CQ data (at most [`CQ_DATA_SIZE`] bytes).
///
/// [`CQ_DATA_SIZE`]: crate::getinfo::CQ_DATA_SIZE
pub(crate) fn imm(data: u64) -> Result<u32> {
    u32::try_from(data).map(u32::to_be).map_err(|_| {
        Error::inval(format!(
            "verbs: remote CQ data {data:#x} does not fit in cq_data_size (4 bytes)"
        ))
    })
}
