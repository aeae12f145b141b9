//! Endpoints: MSG (one RC queue pair, connected with rdma_cm), RDM
//! (reliable unconnected messaging over RC queue pairs made on demand) and
//! passive (listening) endpoints, and what they share: binding, and the
//! queue-pair engine ([`QpData`]) that posts work requests and turns their
//! work completions into application completions.

pub(crate) mod dgram;
pub(crate) mod msg;
pub(crate) mod passive;
pub(crate) mod rdm;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fabric_core::kit::binds::Accepts;
use fabric_core::kit::objects::Progress;
use fabric_core::objects::{Bind, CompletionFlags, CqEntry, CqErrEntry, FiAddr, IoVec, MrDesc};
use fabric_core::{Error, ErrorKind, Result};
use fabric_sys::ffi::{
    ibv_qp, ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wc, ibv_wc_flags, ibv_wc_opcode,
    ibv_wc_status, ibv_wr_opcode,
};

use crate::cq::{CqShared, VerbsCq};
use crate::domain::{DomainCore, lkey_of};
use crate::raw::Ptr;
use crate::raw::verbs::{self, Mr};

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
    Error::new(ErrorKind::OpBadState, "verbs: the endpoint is not enabled")
}

/// The fabric error kind of a work completion status.
pub(crate) fn status_kind(status: u32) -> ErrorKind {
    use ibv_wc_status as s;
    match status {
        s::IBV_WC_WR_FLUSH_ERR => ErrorKind::Canceled,
        s::IBV_WC_LOC_LEN_ERR => ErrorKind::Trunc,
        s::IBV_WC_REM_ACCESS_ERR | s::IBV_WC_LOC_PROT_ERR | s::IBV_WC_LOC_ACCESS_ERR => {
            ErrorKind::Access
        }
        s::IBV_WC_RETRY_EXC_ERR | s::IBV_WC_RNR_RETRY_EXC_ERR | s::IBV_WC_RESP_TIMEOUT_ERR => {
            ErrorKind::TimedOut
        }
        s::IBV_WC_REM_INV_REQ_ERR => ErrorKind::Inval,
        s::IBV_WC_REM_OP_ERR | s::IBV_WC_REM_ABORT_ERR => ErrorKind::RemoteIo,
        _ => ErrorKind::Io,
    }
}

/// The error completion of a failed work completion, with the verbs
/// status text as the provider text.
pub(crate) fn wc_error(wc: &ibv_wc, entry: CqEntry) -> CqErrEntry {
    CqErrEntry {
        entry,
        olen: 0,
        err: status_kind(wc.status),
        prov_errno: i32::try_from(wc.status).unwrap_or(-1),
        err_text: format!(
            "verbs: {} (status {}, vendor error {:#x})",
            verbs::wc_status_str(wc.status),
            wc.status,
            wc.vendor_err
        ),
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
    /// Where to copy `result_len` bytes of the staging slot at completion
    /// (atomic old values, small reads into unregistered memory).
    result: usize,
    result_len: usize,
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

/// One posted receive.
#[derive(Debug, Clone, Copy, Default)]
struct RxSlot {
    context: u64,
    report: bool,
}

#[derive(Debug)]
struct RxRing {
    slots: Vec<RxSlot>,
    head: u64,
    tail: u64,
}

/// Registered staging memory: one slot of [`STAGE`] bytes per transmit
/// slot. The registration is declared first so that it is dropped
/// (deregistered) before the memory is freed.
struct Staging {
    mr: Mr,
    base: Ptr<u8>,
    _mem: Vec<u8>,
}

impl Staging {
    fn new(domain: &DomainCore, slots: usize) -> Result<Staging> {
        let mut mem = vec![0u8; slots.max(1) * STAGE];
        let base = mem.as_mut_ptr();
        // SAFETY: the Vec's buffer is neither moved nor freed before the
        // registration is dropped (field order), and is only accessed
        // through `base` from now on.
        let mr = unsafe {
            Mr::register(
                &domain.pd,
                base,
                mem.len(),
                fabric_sys::ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE,
            )?
        };
        Ok(Staging {
            mr,
            base: Ptr(base),
            _mem: mem,
        })
    }

    fn slot(&self, i: usize) -> (*mut u8, u32) {
        // SAFETY: `i` is a ring index below the slot count, so the slot is
        // inside the buffer.
        let p = unsafe { self.base.0.add(i * STAGE) };
        (p, self.mr.lkey())
    }
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
    qp: Ptr<ibv_qp>,
    qp_num: u32,
    tx: spin::Mutex<TxRing>,
    rx: spin::Mutex<RxRing>,
    staging: Staging,
    pub(crate) binds: Binds,
    pub(crate) max_inline: usize,
    pub(crate) iov_limit: usize,
    pub(crate) max_msg: usize,
    pub(crate) connected: AtomicBool,
    pub(crate) shut: AtomicBool,
    tx_cq: Arc<CqShared>,
    rx_cq: Arc<CqShared>,
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
}

impl QpData {
    /// The engine of a created QP; attaches it to its CQs.
    pub(crate) fn new(
        domain: &DomainCore,
        qp: *mut ibv_qp,
        sizes: QpSizes,
        binds: Binds,
        tx_cq: Arc<CqShared>,
        rx_cq: Arc<CqShared>,
    ) -> Result<Arc<QpData>> {
        // SAFETY: `qp` was just created and is live.
        let qp_num = unsafe { (*qp).qp_num };
        let staging = Staging::new(domain, sizes.tx)?;
        let d = Arc::new(QpData {
            qp: Ptr(qp),
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

    /// Fills `sges` from an IO vector and its descriptors; `None` when a
    /// piece has no descriptor (then the data must be staged or inlined).
    /// `Inval` when `iov` has more pieces than a work request takes.
    #[inline(always)]
    fn sges(
        &self,
        iov: &[IoVec],
        desc: &[MrDesc],
        sges: &mut [ibv_sge; IOV_MAX],
    ) -> Result<Option<usize>> {
        // One registered piece (most operations), inline here.
        if let ([p], [d, ..]) = (iov, desc) {
            if let (Some(lkey), Ok(length)) = (lkey_of(*d), u32::try_from(p.len)) {
                if length > 0 {
                    sges[0] = ibv_sge {
                        addr: p.addr as u64,
                        length,
                        lkey,
                    };
                    return Ok(Some(1));
                }
            }
        }
        self.sges_any(iov, desc, sges)
    }

    /// [`sges`](QpData::sges) for any IO vector: pieces of zero bytes are
    /// left out.
    fn sges_any(
        &self,
        iov: &[IoVec],
        desc: &[MrDesc],
        sges: &mut [ibv_sge; IOV_MAX],
    ) -> Result<Option<usize>> {
        self.check_pieces(iov)?;
        let mut n = 0;
        for (i, p) in iov.iter().enumerate() {
            if p.len == 0 {
                continue;
            }
            let Some(lkey) = desc.get(i).copied().and_then(lkey_of) else {
                return Ok(None);
            };
            let length = u32::try_from(p.len).map_err(|_| {
                Error::new(
                    ErrorKind::MsgSize,
                    "verbs: an IO vector piece is 4 GiB or more",
                )
            })?;
            sges[n] = ibv_sge {
                addr: p.addr as u64,
                length,
                lkey,
            };
            n += 1;
        }
        Ok(Some(n))
    }

    /// Posts a transmit work request that sends or writes local data:
    /// inline when small enough, from registered memory when every piece
    /// has a descriptor, else copied into the slot's staging buffer (up to
    /// [`STAGE`] bytes). `fill` sets the opcode and remote fields.
    ///
    /// # Safety
    ///
    /// The memory of `iov` is valid for the call, and (unless inlined or
    /// staged) until the completion.
    pub(crate) unsafe fn post_data(
        &self,
        iov: &[IoVec],
        desc: &[MrDesc],
        inject: bool,
        fence: bool,
        rep: TxReport,
        fill: impl FnOnce(&mut ibv_send_wr),
    ) -> Result<()> {
        let len = iov_len(iov)?;
        if len > self.max_msg {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("verbs: {len} bytes exceed max_msg_size {}", self.max_msg),
            ));
        }
        let mut sges = [ibv_sge::default(); IOV_MAX];
        // Inline regardless of descriptors: no scatter list to build.
        let inline_anyway = len <= self.max_inline && (inject || len <= 32);
        let registered = if inline_anyway {
            self.check_pieces(iov)?;
            None
        } else {
            self.sges(iov, desc, &mut sges)?
        };
        let inline = inline_anyway || (len <= self.max_inline && registered.is_none());
        if !inline && registered.is_none() && len > STAGE {
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
        self.post_tx(rep, |wr, sges_out, (stage, stage_lkey)| {
            let n = if inline {
                let mut n = 0;
                for p in iov.iter().filter(|p| p.len > 0) {
                    sges_out[n] = ibv_sge {
                        addr: p.addr as u64,
                        length: p.len as u32,
                        lkey: 0,
                    };
                    n += 1;
                }
                wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE;
                n
            } else if let (Some(n), false) = (registered, inject) {
                sges_out[..n].copy_from_slice(&sges[..n]);
                n
            } else {
                let mut off = 0;
                for p in iov {
                    // SAFETY: the caller guarantees the piece is readable;
                    // the staging slot holds STAGE >= len bytes.
                    unsafe { std::ptr::copy_nonoverlapping(p.addr, stage.add(off), p.len) };
                    off += p.len;
                }
                sges_out[0] = ibv_sge {
                    addr: stage as u64,
                    length: len as u32,
                    lkey: stage_lkey,
                };
                1
            };
            wr.num_sge = n as i32;
            if fence {
                wr.send_flags |= ibv_send_flags::IBV_SEND_FENCE;
            }
            fill(wr);
        })
    }

    /// Posts one transmit work request built by `build` (given the slot's
    /// staging buffer), under the ring lock so that ring order is queue
    /// order.
    pub(crate) fn post_tx(
        &self,
        rep: TxReport,
        build: impl FnOnce(&mut ibv_send_wr, &mut [ibv_sge; IOV_MAX], (*mut u8, u32)),
    ) -> Result<()> {
        self.post_tx_result(rep, (0, 0), build)
    }

    /// As [`post_tx`](QpData::post_tx), copying `result.1` bytes of the
    /// staging slot to address `result.0` at completion.
    pub(crate) fn post_tx_result(
        &self,
        rep: TxReport,
        result: (usize, usize),
        build: impl FnOnce(&mut ibv_send_wr, &mut [ibv_sge; IOV_MAX], (*mut u8, u32)),
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
        let mut sges = [ibv_sge::default(); IOV_MAX];
        let mut wr = ibv_send_wr::default();
        build(&mut wr, &mut sges, self.staging.slot(idx));
        wr.sg_list = sges.as_mut_ptr();
        wr.wr_id = seq;
        let signal = rep.report || rep.count || result.1 != 0 || t.unsignaled >= cap / 2;
        if signal {
            wr.send_flags |= ibv_send_flags::IBV_SEND_SIGNALED;
        }
        // SAFETY: the QP is live while `self` is (its owner destroys it
        // after the endpoint's operations can no longer run); the scatter
        // list points into `sges` and memory the caller vouched for.
        match unsafe { verbs::post_send(self.qp.0, &mut wr) } {
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
            result: result.0,
            result_len: result.1.min(STAGE),
        };
        t.head += 1;
        Ok(())
    }

    /// Posts a receive into registered memory.
    ///
    /// # Safety
    ///
    /// The memory stays valid and untouched until the completion.
    pub(crate) unsafe fn post_recv(
        &self,
        iov: &[IoVec],
        desc: &[MrDesc],
        context: u64,
        report: bool,
    ) -> Result<()> {
        if self.shut.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::Shutdown,
                "verbs: the connection is shut down",
            ));
        }
        let mut sges = [ibv_sge::default(); IOV_MAX];
        let Some(n) = self.sges(iov, desc, &mut sges)? else {
            return Err(Error::inval(
                "verbs: a receive buffer needs a memory descriptor (FI_MR_LOCAL)",
            ));
        };
        let mut r = self.rx.lock();
        let cap = r.slots.len();
        if (r.head - r.tail) as usize >= cap {
            return Err(Error::again());
        }
        let seq = r.head;
        let mut wr = ibv_recv_wr {
            wr_id: seq | RX_BIT,
            next: std::ptr::null_mut(),
            sg_list: sges.as_mut_ptr(),
            num_sge: n as i32,
        };
        // SAFETY: live QP; the scatter list names registered memory the
        // caller keeps valid.
        match unsafe { verbs::post_recv(self.qp.0, &mut wr) } {
            Ok(()) => {}
            Err(libc::ENOMEM) => return Err(Error::again()),
            Err(e) => return Err(crate::raw::from_errno(e, "ibv_post_recv")),
        }
        r.slots[(seq % cap as u64) as usize] = RxSlot { context, report };
        r.head += 1;
        Ok(())
    }

    fn complete_tx(&self, wc: &ibv_wc, cq: &CqShared) -> Option<(CqEntry, FiAddr)> {
        let mut t = self.tx.lock();
        let seq = wc.wr_id;
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
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            if let Some(c) = cntr {
                c.add_err(1);
            }
            cq.push_err(wc_error(wc, entry));
            return None;
        }
        if slot.result_len != 0 {
            let (stage, _) = self.staging.slot(idx);
            // SAFETY: the staging slot holds what the device wrote
            // (`result_len` <= STAGE bytes); `result` is the application's
            // buffer of that size, valid until this completion (the
            // operation's contract).
            unsafe {
                std::ptr::copy_nonoverlapping(stage, slot.result as *mut u8, slot.result_len)
            };
        }
        if let Some(c) = cntr {
            c.add(1);
        }
        slot.report.then_some((entry, FiAddr::NOTAVAIL))
    }

    fn complete_rx(&self, wc: &ibv_wc, cq: &CqShared) -> Option<(CqEntry, FiAddr)> {
        let mut r = self.rx.lock();
        let seq = wc.wr_id & !RX_BIT;
        if seq < r.tail || seq >= r.head {
            return None;
        }
        let cap = r.slots.len();
        let slot = r.slots[(seq % cap as u64) as usize];
        r.tail = seq + 1;
        drop(r);
        let mut entry = CqEntry {
            context: slot.context,
            flags: CompletionFlags::MSG | CompletionFlags::RECV,
            ..CqEntry::default()
        };
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            if let Some(c) = &self.binds.cntr_recv {
                c.add_err(1);
            }
            cq.push_err(wc_error(wc, entry));
            return None;
        }
        entry.len = wc.byte_len as usize;
        if wc.opcode == ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
            entry.flags = CompletionFlags::RMA | CompletionFlags::REMOTE_WRITE;
            entry.len = 0;
        }
        if wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM != 0 {
            entry.flags |= CompletionFlags::REMOTE_CQ_DATA;
            // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate.
            entry.data = u64::from(u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data }));
        }
        if let Some(c) = &self.binds.cntr_recv {
            c.add(1);
        }
        slot.report.then_some((entry, FiAddr::NOTAVAIL))
    }
}

impl QpData {
    /// Handles one work completion of this queue pair; returns the
    /// application's completion and its source, if the work request
    /// reports one. Failures go into `cq` as error completions.
    #[inline]
    pub(crate) fn complete(&self, wc: &ibv_wc, cq: &CqShared) -> Option<(CqEntry, FiAddr)> {
        if wc.wr_id & RX_BIT != 0 {
            self.complete_rx(wc, cq)
        } else {
            self.complete_tx(wc, cq)
        }
    }
}

/// The opcode of a send with or without immediate data.
pub(crate) fn send_opcode(data: bool) -> u32 {
    if data {
        ibv_wr_opcode::IBV_WR_SEND_WITH_IMM
    } else {
        ibv_wr_opcode::IBV_WR_SEND
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
