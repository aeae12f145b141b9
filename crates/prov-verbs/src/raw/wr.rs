//! Typed work requests and work completions: what the endpoints build and
//! read instead of `ibv_send_wr`, `ibv_recv_wr`, `ibv_sge` and `ibv_wc`.
//!
//! Everything here lives on the stack: a [`SendWr`] is the C structure
//! itself, filled by the builder's methods, and a scatter list is a fixed
//! array ([`SgeList`]); posting points the request at the list and calls
//! the driver (see the owners' `post_send` / `post_recv`). Nothing is
//! allocated or copied on the way.
//!
//! # Why building a scatter entry is safe
//!
//! An [`Sge`] names memory by address **and local key**; the device
//! checks every access against the key's registration, so a wrong address
//! ends in an error completion (local protection error), not in a stray
//! access. What a key reaches was registered under a contract: the
//! application's (`fi_mr_reg`, an `unsafe` call: the memory may be
//! accessed by the device while registered), or this module's owners
//! (pools, [`Mr`](super::verbs::Mr) over vouched or owned memory, whose
//! registration is dropped before the memory). The one access the device
//! does not check is an **inline** send: the CPU copies the bytes into the
//! work request at posting. So inline data is set only from memory this
//! module can vouch for: a caller's buffers ([`UserIov`]).

use fabric_core::ErrorKind;
use fabric_sys::ffi::{
    ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wc, ibv_wc_flags, ibv_wc_opcode, ibv_wc_status,
    ibv_wr_opcode,
};

use super::mem::UserIov;
use super::verbs::Ah;

/// One scatter / gather entry: bytes at an address under a local key.
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub(crate) struct Sge(ibv_sge);

impl std::fmt::Debug for Sge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}+{}@{:#x}", self.0.addr, self.0.length, self.0.lkey)
    }
}

impl Sge {
    /// `length` bytes at `addr`, reached through local key `lkey` (checked
    /// by the device; see the module docs).
    #[inline]
    pub(crate) fn new(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge(ibv_sge { addr, length, lkey })
    }
}

/// A scatter / gather list of at most `N` entries, on the stack.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SgeList<const N: usize> {
    sges: [Sge; N],
    n: usize,
}

impl<const N: usize> Default for SgeList<N> {
    #[inline]
    fn default() -> Self {
        SgeList {
            sges: [Sge::default(); N],
            n: 0,
        }
    }
}

impl<const N: usize> SgeList<N> {
    /// A list of one entry.
    #[inline]
    pub(crate) fn one(sge: Sge) -> Self {
        let mut l = Self::default();
        l.sges[0] = sge;
        l.n = 1;
        l
    }

    /// Appends an entry; `false` (and nothing appended) when full.
    #[inline]
    pub(crate) fn push(&mut self, sge: Sge) -> bool {
        match self.sges.get_mut(self.n) {
            Some(s) => {
                *s = sge;
                self.n += 1;
                true
            }
            None => false,
        }
    }

    /// The entries.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[Sge] {
        &self.sges[..self.n]
    }

    /// The C pointer and count for a work request (the list must stay in
    /// place until the request is posted).
    #[inline]
    fn raw(&mut self) -> (*mut ibv_sge, i32) {
        // `Sge` is a transparent `ibv_sge`.
        (self.sges.as_mut_ptr().cast::<ibv_sge>(), self.n as i32)
    }
}

/// The operation of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opcode {
    /// A message.
    Send,
    /// A message with a 32-bit immediate (network order).
    SendImm(u32),
    /// An RDMA write.
    Write,
    /// An RDMA write with a 32-bit immediate (network order), which
    /// consumes a receive at the target.
    WriteImm(u32),
    /// An RDMA read.
    Read,
    /// A 64-bit compare-and-swap: `compare`, `swap`.
    CmpSwap(u64, u64),
    /// A 64-bit fetch-and-add of the operand.
    FetchAdd(u64),
}

impl Opcode {
    /// A send, with immediate data when `imm` is given.
    #[inline]
    pub(crate) fn send(imm: Option<u32>) -> Opcode {
        match imm {
            Some(v) => Opcode::SendImm(v),
            None => Opcode::Send,
        }
    }

    /// An RDMA write, with immediate data when `imm` is given.
    #[inline]
    pub(crate) fn write(imm: Option<u32>) -> Opcode {
        match imm {
            Some(v) => Opcode::WriteImm(v),
            None => Opcode::Write,
        }
    }
}

bitflags::bitflags! {
    /// The flags of a send work request the endpoints choose (inline is
    /// set by [`SendWr::inline_user`] only).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub(crate) struct SendFlags: u32 {
        /// Make a work completion when it finishes.
        const SIGNALED = ibv_send_flags::IBV_SEND_SIGNALED;
        /// Start only after the RDMA reads and atomics posted before it
        /// on the queue pair have completed.
        const FENCE = ibv_send_flags::IBV_SEND_FENCE;
    }
}

/// A send work request on the stack; `N` is its scatter list's capacity.
pub(crate) struct SendWr<'a, const N: usize> {
    wr: ibv_send_wr,
    sges: SgeList<N>,
    /// The address handle a UD request names, borrowed until it is posted.
    _ah: std::marker::PhantomData<&'a Ah>,
}

impl<const N: usize> std::fmt::Debug for SendWr<'_, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendWr")
            .field("wr_id", &self.wr.wr_id)
            .field("opcode", &self.wr.opcode)
            .field("send_flags", &self.wr.send_flags)
            .field("sges", &self.sges.as_slice())
            .finish()
    }
}

impl<'a, const N: usize> SendWr<'a, N> {
    /// A request `wr_id` doing `op` on local memory `sges`; remote
    /// operations name their target with [`remote`](SendWr::remote).
    #[inline]
    pub(crate) fn new(wr_id: u64, op: Opcode, sges: SgeList<N>) -> Self {
        let mut wr = ibv_send_wr {
            wr_id,
            ..ibv_send_wr::default()
        };
        match op {
            Opcode::Send => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
            Opcode::SendImm(v) => {
                wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
                wr.__bindgen_anon_1.imm_data = v;
            }
            Opcode::Write => wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            Opcode::WriteImm(v) => {
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.__bindgen_anon_1.imm_data = v;
            }
            Opcode::Read => wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ,
            Opcode::CmpSwap(compare, swap) => {
                wr.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP;
                wr.wr.atomic.compare_add = compare;
                wr.wr.atomic.swap = swap;
            }
            Opcode::FetchAdd(add) => {
                wr.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD;
                wr.wr.atomic.compare_add = add;
            }
        }
        SendWr {
            wr,
            sges,
            _ah: std::marker::PhantomData,
        }
    }

    /// The remote memory of an RDMA or atomic request.
    #[inline]
    pub(crate) fn remote(mut self, addr: u64, rkey: u32) -> Self {
        match self.wr.opcode {
            ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP
            | ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD => {
                self.wr.wr.atomic.remote_addr = addr;
                self.wr.wr.atomic.rkey = rkey;
            }
            _ => {
                self.wr.wr.rdma.remote_addr = addr;
                self.wr.wr.rdma.rkey = rkey;
            }
        }
        self
    }

    /// The destination of a UD send: an address handle (borrowed until
    /// the request is posted), the remote QP number and Q_Key.
    #[inline]
    pub(crate) fn ud(mut self, ah: &'a Ah, qpn: u32, qkey: u32) -> Self {
        self.wr.wr.ud.ah = ah.as_ptr();
        self.wr.wr.ud.remote_qpn = qpn;
        self.wr.wr.ud.remote_qkey = qkey;
        self
    }

    /// Adds flags.
    #[inline]
    pub(crate) fn flags(mut self, f: SendFlags) -> Self {
        self.wr.send_flags |= f.bits();
        self
    }

    /// Adds flags in place.
    #[inline]
    pub(crate) fn add_flags(&mut self, f: SendFlags) {
        self.wr.send_flags |= f.bits();
    }

    /// Sends the bytes of a caller's buffers inline (copied into the work
    /// request when posted; pieces of zero bytes are left out). `false`
    /// when there are more pieces than the list holds.
    #[inline]
    pub(crate) fn inline_user(&mut self, user: &UserIov<'_>) -> bool {
        let mut l = SgeList::default();
        for p in user.pieces().iter().filter(|p| p.len > 0) {
            if !l.push(Sge::new(p.addr as u64, p.len as u32, 0)) {
                return false;
            }
        }
        self.sges = l;
        self.wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE;
        true
    }

    /// The C request, pointed at its scatter list (which must not move
    /// until the request is posted: the caller posts it at once).
    #[inline]
    pub(super) fn raw(&mut self) -> &mut ibv_send_wr {
        let (p, n) = self.sges.raw();
        self.wr.sg_list = p;
        self.wr.num_sge = n;
        &mut self.wr
    }
}

/// A receive work request on the stack.
#[derive(Debug)]
pub(crate) struct RecvWr<const N: usize> {
    wr_id: u64,
    sges: SgeList<N>,
}

impl<const N: usize> RecvWr<N> {
    /// A receive `wr_id` into `sges`.
    #[inline]
    pub(crate) fn new(wr_id: u64, sges: SgeList<N>) -> Self {
        RecvWr { wr_id, sges }
    }

    /// The C request (its scatter list pointer is valid while `self` is
    /// not moved: the caller posts it at once).
    #[inline]
    pub(super) fn raw(&mut self) -> fabric_sys::ffi::ibv_recv_wr {
        let (p, n) = self.sges.raw();
        fabric_sys::ffi::ibv_recv_wr {
            wr_id: self.wr_id,
            next: std::ptr::null_mut(),
            sg_list: p,
            num_sge: n,
        }
    }
}

/// What a work completion was (its `opcode`, as far as the provider cares).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WcKind {
    /// A receive consumed by a send.
    Recv,
    /// A receive consumed by an RDMA write with immediate data.
    RecvWriteImm,
    /// A completion of the send queue.
    Send,
}

/// One work completion, as the driver wrote it.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Wc(ibv_wc);

impl std::fmt::Debug for Wc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wc")
            .field("wr_id", &self.0.wr_id)
            .field("status", &self.0.status)
            .field("qp_num", &self.0.qp_num)
            .finish_non_exhaustive()
    }
}

impl Wc {
    /// The request's id.
    #[inline]
    pub(crate) fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// The QP number it belongs to.
    #[inline]
    pub(crate) fn qp_num(&self) -> u32 {
        self.0.qp_num
    }

    /// Whether it succeeded.
    #[inline]
    pub(crate) fn ok(&self) -> bool {
        self.0.status == ibv_wc_status::IBV_WC_SUCCESS
    }

    /// Whether it was flushed (its queue pair is in the error state).
    #[inline]
    pub(crate) fn flushed(&self) -> bool {
        self.0.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR
    }

    /// The raw status (`ibv_wc_status`).
    #[inline]
    pub(crate) fn status(&self) -> u32 {
        self.0.status
    }

    /// Bytes received.
    #[inline]
    pub(crate) fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The kind of work it completes.
    #[inline]
    pub(crate) fn kind(&self) -> WcKind {
        match self.0.opcode {
            ibv_wc_opcode::IBV_WC_RECV => WcKind::Recv,
            ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => WcKind::RecvWriteImm,
            _ => WcKind::Send,
        }
    }

    /// The immediate data (host order), when it carries some.
    #[inline]
    pub(crate) fn imm(&self) -> Option<u32> {
        if self.0.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM == 0 {
            return None;
        }
        // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate (and
        // any of its members is a plain 32-bit value).
        Some(u32::from_be(unsafe { self.0.__bindgen_anon_1.imm_data }))
    }

    /// The fabric error kind of its status.
    pub(crate) fn error_kind(&self) -> ErrorKind {
        status_kind(self.0.status)
    }

    /// `verbs: <status text> (status N, vendor error 0x..)`.
    pub(crate) fn error_text(&self) -> String {
        format!(
            "verbs: {} (status {}, vendor error {:#x})",
            super::verbs::wc_status_str(self.0.status),
            self.0.status,
            self.0.vendor_err
        )
    }
}

/// The status of work that ran out of transport retries: the peer
/// answered nothing.
pub(crate) const RETRY_EXC: u32 = ibv_wc_status::IBV_WC_RETRY_EXC_ERR;

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

/// The status text of a status (for connection teardown logs).
pub(crate) fn status_text(status: u32) -> String {
    super::verbs::wc_status_str(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_kinds() {
        assert_eq!(
            status_kind(ibv_wc_status::IBV_WC_WR_FLUSH_ERR),
            ErrorKind::Canceled
        );
        assert_eq!(
            status_kind(ibv_wc_status::IBV_WC_REM_ACCESS_ERR),
            ErrorKind::Access
        );
        assert_eq!(
            status_kind(ibv_wc_status::IBV_WC_LOC_LEN_ERR),
            ErrorKind::Trunc
        );
    }

    #[test]
    fn builders_fill_the_c_request() {
        let mut w = SendWr::<4>::new(
            7,
            Opcode::CmpSwap(1, 2),
            SgeList::one(Sge::new(0x1000, 8, 3)),
        )
        .remote(0x2000, 9)
        .flags(SendFlags::SIGNALED | SendFlags::FENCE);
        let raw = w.raw();
        assert_eq!(raw.wr_id, 7);
        assert_eq!(raw.opcode, ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP);
        assert_eq!(raw.num_sge, 1);
        // SAFETY: test: the atomic member was written by the builder.
        let (ra, rk, c, s) = unsafe {
            (
                raw.wr.atomic.remote_addr,
                raw.wr.atomic.rkey,
                raw.wr.atomic.compare_add,
                raw.wr.atomic.swap,
            )
        };
        assert_eq!((ra, rk, c, s), (0x2000, 9, 1, 2));
        assert_eq!(
            raw.send_flags,
            ibv_send_flags::IBV_SEND_SIGNALED | ibv_send_flags::IBV_SEND_FENCE
        );
        let mut w = SendWr::<1>::new(1, Opcode::write(Some(5)), SgeList::default()).remote(3, 4);
        let raw = w.raw();
        assert_eq!(raw.opcode, ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM);
        // SAFETY: test: the rdma member and immediate were written above.
        let (ra, rk, imm) = unsafe {
            (
                raw.wr.rdma.remote_addr,
                raw.wr.rdma.rkey,
                raw.__bindgen_anon_1.imm_data,
            )
        };
        assert_eq!((ra, rk, imm), (3, 4, 5));
        let mut l = SgeList::<1>::default();
        assert!(l.push(Sge::new(1, 1, 1)));
        assert!(!l.push(Sge::new(2, 2, 2)));
        assert_eq!(l.as_slice().len(), 1);
    }
}
