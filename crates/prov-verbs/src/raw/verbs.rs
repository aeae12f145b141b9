//! Memory regions, completion queues with their channels, and work
//! request posting.

use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use fabric_core::Result;
use fabric_core::kit::rx::Pieces;
use fabric_sys::ffi::{ibv_access_flags as acc, ibv_comp_channel, ibv_cq, ibv_mr, ibv_qp, ibv_wc};
use fabric_sys::inline;

use super::device::{Context, Pd};
use super::mem::UserIov;
use super::wr::{RecvWr, SendWr, Sge, Wc};
use super::{Ptr, from_errno, last_err, lib};

bitflags::bitflags! {
    /// Access rights of a memory registration.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub(crate) struct Access: u32 {
        /// The device may write it locally (receives, read results).
        const LOCAL_WRITE = acc::IBV_ACCESS_LOCAL_WRITE;
        /// Peers may read it.
        const REMOTE_READ = acc::IBV_ACCESS_REMOTE_READ;
        /// Peers may write it.
        const REMOTE_WRITE = acc::IBV_ACCESS_REMOTE_WRITE;
        /// Peers may run atomics on it.
        const REMOTE_ATOMIC = acc::IBV_ACCESS_REMOTE_ATOMIC;
    }
}

/// A registered memory region; dropping it deregisters it.
#[derive(Debug)]
pub(crate) struct Mr {
    ptr: Ptr<ibv_mr>,
    _pd: Arc<Pd>,
}

impl Mr {
    /// Registers `len` bytes at `addr` with `access` (`IBV_ACCESS_*`).
    ///
    /// # Safety
    ///
    /// The memory must stay allocated until the region is dropped; peers
    /// granted remote access may read or write it at any time meanwhile.
    pub(crate) unsafe fn register(
        pd: &Arc<Pd>,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr> {
        let lib = lib()?;
        // SAFETY: live PD; the caller keeps the memory alive. ibv_reg_mr
        // pins the pages and never dereferences them itself.
        let p = unsafe { lib.ibv_reg_mr(pd.as_ptr(), addr.cast(), len, access.bits() as i32) };
        if p.is_null() {
            return Err(last_err("ibv_reg_mr"));
        }
        Ok(Mr {
            ptr: Ptr(p),
            _pd: pd.clone(),
        })
    }

    /// Registers the first `len` bytes of a caller's one-piece buffer for
    /// the operation that vouched for it; the registration must be dropped
    /// by the operation's completion (the op keeps it until then).
    pub(crate) fn register_user(
        pd: &Arc<Pd>,
        user: &UserIov<'_>,
        len: usize,
        access: Access,
    ) -> Result<Mr> {
        let [p] = user.pieces() else {
            return Err(fabric_core::Error::inval(
                "verbs: only a one-piece buffer is registered for an operation",
            ));
        };
        // SAFETY: the buffer is vouched valid until the operation
        // completes, and the registration is dropped by then.
        unsafe { Mr::register(pd, p.addr, len.min(p.len), access) }
    }

    /// Registers the first `len` bytes of the first piece of a posted
    /// receive (its start and the registration), for an RDMA read into it
    /// that completes (or is dropped) before the receive does.
    pub(crate) fn register_recv<const N: usize>(
        pd: &Arc<Pd>,
        buf: &Pieces<N>,
        len: usize,
    ) -> Result<(u64, Mr)> {
        let Some(p) = buf.pieces().first() else {
            return Err(fabric_core::Error::inval("verbs: an empty receive"));
        };
        // SAFETY: the receive's buffer is vouched valid until its
        // completion (see `mem`), which comes after the read.
        let mr = unsafe { Mr::register(pd, p.addr, len.min(p.len), Access::LOCAL_WRITE) }?;
        Ok((p.addr as u64, mr))
    }

    /// The local key.
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: the MR is live while `self` is.
        unsafe { (*self.ptr.0).lkey }
    }

    /// The remote key.
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.ptr.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Ok(lib) = lib() {
            // SAFETY: registered by us, deregistered once.
            let rc = unsafe { lib.ibv_dereg_mr(self.ptr.0) };
            if rc != 0 {
                tracing::warn!(errno = rc, "verbs: ibv_dereg_mr failed");
            }
        }
    }
}

/// A hardware completion queue and its completion channel (whose fd
/// becomes readable after [`arm`](HwCq::arm) and the next completion).
#[derive(Debug)]
pub(crate) struct HwCq {
    cq: Ptr<ibv_cq>,
    channel: Ptr<ibv_comp_channel>,
    fd: i32,
}

impl HwCq {
    /// A CQ of at least `cqe` entries on `ctx`, with a non-blocking
    /// completion channel.
    pub(crate) fn new(ctx: Context, cqe: i32) -> Result<HwCq> {
        let lib = lib()?;
        // SAFETY: live context.
        let ch = unsafe { lib.ibv_create_comp_channel(ctx.as_ptr()) };
        if ch.is_null() {
            return Err(last_err("ibv_create_comp_channel"));
        }
        // SAFETY: `ch` was just created; its fd is an fd of this process.
        let fd = unsafe { (*ch).fd };
        // SAFETY: fcntl on an fd we own.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
            let e = last_err("fcntl(O_NONBLOCK) on a completion channel");
            // SAFETY: created above, no CQ uses it yet.
            unsafe { lib.ibv_destroy_comp_channel(ch) };
            return Err(e);
        }
        // SAFETY: live context and channel.
        let cq = unsafe { lib.ibv_create_cq(ctx.as_ptr(), cqe, std::ptr::null_mut(), ch, 0) };
        if cq.is_null() {
            let e = last_err("ibv_create_cq");
            // SAFETY: created above, unused.
            unsafe { lib.ibv_destroy_comp_channel(ch) };
            return Err(e);
        }
        Ok(HwCq {
            cq: Ptr(cq),
            channel: Ptr(ch),
            fd,
        })
    }

    /// The raw CQ.
    pub(crate) fn as_ptr(&self) -> *mut ibv_cq {
        self.cq.0
    }

    /// Polls up to `out.len()` completions into `out` (left uninitialised
    /// by the caller: nothing zeroes it per call); the polled ones.
    #[inline]
    pub(crate) fn poll<'a>(&self, out: &'a mut [MaybeUninit<Wc>]) -> Result<&'a [Wc]> {
        let n = i32::try_from(out.len()).unwrap_or(i32::MAX);
        // SAFETY: live CQ; `out` has `n` writable entries (the driver only
        // writes them).
        let rc = unsafe { inline::ibv_poll_cq(self.cq.0, n, out.as_mut_ptr().cast::<ibv_wc>()) };
        if rc < 0 {
            return Err(from_errno(-rc, "ibv_poll_cq"));
        }
        let n = (rc as usize).min(out.len());
        // SAFETY: the driver initialised the first `n` entries; `Wc` is a
        // transparent `ibv_wc`.
        Ok(unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<Wc>(), n) })
    }

    /// Asks for an event on the channel at the next completion.
    pub(crate) fn arm(&self) -> Result<()> {
        // SAFETY: live CQ with a channel.
        let rc = unsafe { inline::ibv_req_notify_cq(self.cq.0, 0) };
        if rc != 0 {
            return Err(from_errno(rc, "ibv_req_notify_cq"));
        }
        Ok(())
    }

    /// Takes and acknowledges every event waiting on the channel (without
    /// blocking); the number taken.
    pub(crate) fn consume_events(&self) -> usize {
        let Ok(lib) = lib() else { return 0 };
        let mut n = 0u32;
        loop {
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: live, non-blocking channel; valid out-pointers.
            let rc = unsafe { lib.ibv_get_cq_event(self.channel.0, &mut cq, &mut ctx) };
            if rc != 0 {
                break;
            }
            n += 1;
        }
        if n > 0 {
            // SAFETY: acknowledges exactly the events taken above.
            unsafe { lib.ibv_ack_cq_events(self.cq.0, n) };
        }
        n as usize
    }

    /// The channel's fd.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel (and its fd) lives as long as `self`.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl Drop for HwCq {
    fn drop(&mut self) {
        let Ok(lib) = lib() else { return };
        self.consume_events();
        // SAFETY: created by us and destroyed once, after every QP using it
        // (QPs hold an `Arc` of the CQ's owner); then its channel.
        unsafe {
            let rc = lib.ibv_destroy_cq(self.cq.0);
            if rc != 0 {
                tracing::warn!(errno = rc, "verbs: ibv_destroy_cq failed");
            }
            lib.ibv_destroy_comp_channel(self.channel.0);
        }
    }
}

/// Posts one send work request on `qp`.
///
/// # Safety
///
/// `qp` is live. (The memory the request names is the module docs' of
/// `wr`.)
#[inline]
pub(super) unsafe fn post_send<const N: usize>(
    qp: *mut ibv_qp,
    wr: &mut SendWr<'_, N>,
) -> std::result::Result<(), i32> {
    let mut bad = std::ptr::null_mut();
    // SAFETY: live QP (the caller); the request and its scatter list live
    // on the stack across the call; inline data is vouched memory.
    let rc = unsafe { inline::ibv_post_send(qp, wr.raw(), &mut bad) };
    if rc == 0 { Ok(()) } else { Err(rc) }
}

/// Posts one receive work request on `qp`.
///
/// # Safety
///
/// As [`post_send`].
#[inline]
pub(super) unsafe fn post_recv<const N: usize>(
    qp: *mut ibv_qp,
    wr: &mut RecvWr<N>,
) -> std::result::Result<(), i32> {
    let mut bad = std::ptr::null_mut();
    let mut raw = wr.raw();
    // SAFETY: live QP (the caller); the request's scatter list lives in
    // `wr` across the call.
    let rc = unsafe { inline::ibv_post_recv(qp, &mut raw, &mut bad) };
    if rc == 0 { Ok(()) } else { Err(rc) }
}

/// The text of a work completion status (`ibv_wc_status_str`).
pub(crate) fn wc_status_str(status: u32) -> String {
    let Ok(lib) = lib() else {
        return format!("status {status}");
    };
    // SAFETY: returns a static string for any value.
    let p = unsafe { lib.ibv_wc_status_str(status) };
    if p.is_null() {
        return format!("status {status}");
    }
    // SAFETY: a NUL-terminated static string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// A shared receive queue; dropping it destroys it (after the QPs using it:
/// their owner drops them first).
#[derive(Debug)]
pub(crate) struct Srq {
    ptr: Ptr<fabric_sys::ffi::ibv_srq>,
    _pd: Arc<Pd>,
}

impl Srq {
    /// An SRQ of `max_wr` one-piece receives.
    pub(crate) fn new(pd: &Arc<Pd>, max_wr: u32) -> Result<Srq> {
        let lib = lib()?;
        let mut attr = fabric_sys::ffi::ibv_srq_init_attr::default();
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = 1;
        // SAFETY: live PD; valid attributes.
        let p = unsafe { lib.ibv_create_srq(pd.as_ptr(), &mut attr) };
        if p.is_null() {
            return Err(last_err("ibv_create_srq"));
        }
        Ok(Srq {
            ptr: Ptr(p),
            _pd: pd.clone(),
        })
    }

    /// The raw pointer.
    pub(super) fn as_ptr(&self) -> *mut fabric_sys::ffi::ibv_srq {
        self.ptr.0
    }

    /// Posts buffer `i` of `pool` (registered memory, whole) as receive
    /// `wr_id`.
    pub(crate) fn post(&self, wr_id: u64, pool: &Pool, i: usize) -> Result<()> {
        let mut wr = RecvWr::<1>::new(wr_id, super::wr::SgeList::one(pool.sge(i, pool.buf_len())));
        let mut raw = wr.raw();
        let mut bad = std::ptr::null_mut();
        // SAFETY: live SRQ; the scatter entry names a pool buffer (checked
        // by the device against the pool's key).
        let rc = unsafe { inline::ibv_post_srq_recv(self.ptr.0, &mut raw, &mut bad) };
        if rc != 0 {
            return Err(from_errno(rc, "ibv_post_srq_recv"));
        }
        Ok(())
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        if let Ok(lib) = lib() {
            // SAFETY: created by us, destroyed once, after its QPs.
            let rc = unsafe { lib.ibv_destroy_srq(self.ptr.0) };
            if rc != 0 {
                tracing::warn!(errno = rc, "verbs: ibv_destroy_srq failed");
            }
        }
    }
}

/// Registered memory cut into equal buffers (eager send and receive
/// buffers). The registration is declared first so that it is dropped
/// before the memory.
pub(crate) struct Pool {
    mr: Mr,
    base: Ptr<u8>,
    size: usize,
    count: usize,
    _mem: Vec<u8>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.size)
            .field("count", &self.count)
            .finish()
    }
}

impl Pool {
    /// `count` buffers of `size` bytes, registered for local writes.
    pub(crate) fn new(pd: &Arc<Pd>, size: usize, count: usize) -> Result<Pool> {
        let mut mem = vec![0u8; size * count.max(1)];
        let base = mem.as_mut_ptr();
        // SAFETY: the Vec's buffer is never moved or freed before the
        // registration is dropped (field order) and is only accessed
        // through `base`.
        let mr = unsafe { Mr::register(pd, base, mem.len(), Access::LOCAL_WRITE)? };
        Ok(Pool {
            mr,
            base: Ptr(base),
            size,
            count: count.max(1),
            _mem: mem,
        })
    }

    /// Buffer `i` (below the count; else the last).
    fn buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.count);
        let i = i.min(self.count - 1);
        // SAFETY: `i` is below the count, so the buffer is inside the
        // allocation.
        unsafe { self.base.0.add(i * self.size) }
    }

    /// The scatter entry of the first `len` bytes of buffer `i` (clamped
    /// to the buffer).
    #[inline]
    pub(crate) fn sge(&self, i: usize, len: usize) -> Sge {
        Sge::new(
            self.buf(i) as u64,
            len.min(self.size) as u32,
            self.mr.lkey(),
        )
    }

    /// Bytes `off..off + len` of buffer `i` (clamped to the buffer).
    ///
    /// The buffers are plain bytes the device writes by DMA: the provider
    /// reads a buffer between its completion and its reposting (when the
    /// device does not write it), and a read racing a write could only see
    /// stale bytes, never an invalid value.
    #[inline]
    pub(crate) fn read(&self, i: usize, off: usize, len: usize) -> &[u8] {
        let off = off.min(self.size);
        let len = len.min(self.size - off);
        // SAFETY: inside buffer `i` of the allocation, which lives as long
        // as `self`; bytes have no invalid values (see above).
        unsafe { std::slice::from_raw_parts(self.buf(i).add(off), len) }
    }

    /// Copies `data` into buffer `i` from byte `off` (what does not fit is
    /// dropped); the bytes written. The provider writes a buffer only
    /// while it owns it (not posted, not being sent).
    #[inline]
    pub(crate) fn write(&self, i: usize, off: usize, data: &[u8]) -> usize {
        let off = off.min(self.size);
        let n = data.len().min(self.size - off);
        // SAFETY: inside buffer `i`; the destination is raw memory nobody
        // holds a reference to (reads copy out, see `read`).
        unsafe { fabric_core::kit::copy::copy_bytes(data.as_ptr(), self.buf(i).add(off), n) };
        n
    }

    /// Copies a caller's buffers into buffer `i` from byte `off`; the
    /// bytes written.
    #[inline]
    pub(crate) fn gather(&self, i: usize, mut off: usize, user: &UserIov<'_>) -> usize {
        let start = off;
        for s in user.slices() {
            off += self.write(i, off, s);
        }
        off - start
    }

    /// Bytes of each buffer.
    pub(crate) fn buf_len(&self) -> usize {
        self.size
    }

    /// Number of buffers.
    pub(crate) fn count(&self) -> usize {
        self.count
    }
}

/// An address handle (a UD destination); dropping it destroys it.
#[derive(Debug)]
pub(crate) struct Ah {
    ptr: Ptr<fabric_sys::ffi::ibv_ah>,
    _pd: Arc<Pd>,
}

impl Ah {
    /// An address handle to `gid` (global routing, hop limit 64) and
    /// `lid` through `port`, from source GID index `sgid_index`.
    pub(crate) fn new(
        pd: &Arc<Pd>,
        port: u8,
        lid: u16,
        gid: [u8; 16],
        sgid_index: u8,
    ) -> Result<Ah> {
        let lib = lib()?;
        let mut attr = fabric_sys::ffi::ibv_ah_attr {
            dlid: lid,
            is_global: 1,
            port_num: port,
            ..fabric_sys::ffi::ibv_ah_attr::default()
        };
        attr.grh.dgid.raw = gid;
        attr.grh.sgid_index = sgid_index;
        attr.grh.hop_limit = 64;
        // SAFETY: live PD; valid attributes.
        let p = unsafe { lib.ibv_create_ah(pd.as_ptr(), &mut attr) };
        if p.is_null() {
            return Err(last_err("ibv_create_ah"));
        }
        Ok(Ah {
            ptr: Ptr(p),
            _pd: pd.clone(),
        })
    }

    /// The raw pointer.
    pub(super) fn as_ptr(&self) -> *mut fabric_sys::ffi::ibv_ah {
        self.ptr.0
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        if let Ok(lib) = lib() {
            // SAFETY: created by us, destroyed once, after the sends using
            // it (its owner keeps it while its QP lives).
            unsafe { lib.ibv_destroy_ah(self.ptr.0) };
        }
    }
}

/// An unreliable-datagram QP, ready to send and receive (RTS); dropping it
/// destroys it.
#[derive(Debug)]
pub(crate) struct UdQp {
    ptr: Ptr<ibv_qp>,
    _pd: Arc<Pd>,
}

impl UdQp {
    /// A UD QP on `cq` (both directions), moved to RTS on `port` with
    /// `qkey`.
    pub(crate) fn new(
        pd: &Arc<Pd>,
        cq: &HwCq,
        depth: u32,
        port: u8,
        qkey: u32,
    ) -> Result<(UdQp, u32)> {
        use fabric_sys::ffi::{ibv_qp_attr, ibv_qp_attr_mask as m, ibv_qp_init_attr, ibv_qp_state};
        let lib = lib()?;
        let mut init = ibv_qp_init_attr {
            send_cq: cq.as_ptr(),
            recv_cq: cq.as_ptr(),
            qp_type: fabric_sys::ffi::ibv_qp_type::IBV_QPT_UD,
            ..ibv_qp_init_attr::default()
        };
        init.cap.max_send_wr = depth;
        init.cap.max_recv_wr = depth;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: live PD and CQ; valid attributes.
        let p = unsafe { lib.ibv_create_qp(pd.as_ptr(), &mut init) };
        if p.is_null() {
            return Err(last_err("ibv_create_qp (UD)"));
        }
        let qp = UdQp {
            ptr: Ptr(p),
            _pd: pd.clone(),
        };
        let steps = [
            (
                ibv_qp_attr {
                    qp_state: ibv_qp_state::IBV_QPS_INIT,
                    pkey_index: 0,
                    port_num: port,
                    qkey,
                    ..ibv_qp_attr::default()
                },
                m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_QKEY,
            ),
            (
                ibv_qp_attr {
                    qp_state: ibv_qp_state::IBV_QPS_RTR,
                    ..ibv_qp_attr::default()
                },
                m::IBV_QP_STATE,
            ),
            (
                ibv_qp_attr {
                    qp_state: ibv_qp_state::IBV_QPS_RTS,
                    sq_psn: 0,
                    ..ibv_qp_attr::default()
                },
                m::IBV_QP_STATE | m::IBV_QP_SQ_PSN,
            ),
        ];
        for (mut attr, mask) in steps {
            // SAFETY: live QP; valid attributes for the transition.
            let rc = unsafe { lib.ibv_modify_qp(p, &mut attr, mask as i32) };
            if rc != 0 {
                return Err(from_errno(rc, "ibv_modify_qp (UD)"));
            }
        }
        // SAFETY: live QP.
        let qpn = unsafe { (*p).qp_num };
        Ok((qp, qpn))
    }

    /// Posts a send (a UD request names its address handle, borrowed until
    /// posted). `Err(errno)` as the driver returns it.
    #[inline]
    pub(crate) fn post_send<const N: usize>(
        &self,
        wr: &mut SendWr<'_, N>,
    ) -> std::result::Result<(), i32> {
        // SAFETY: the QP lives as long as `self`.
        unsafe { post_send(self.ptr.0, wr) }
    }

    /// Posts a receive.
    #[inline]
    pub(crate) fn post_recv<const N: usize>(
        &self,
        wr: &mut RecvWr<N>,
    ) -> std::result::Result<(), i32> {
        // SAFETY: the QP lives as long as `self`.
        unsafe { post_recv(self.ptr.0, wr) }
    }
}

impl Drop for UdQp {
    fn drop(&mut self) {
        if let Ok(lib) = lib() {
            // SAFETY: created by us, destroyed once, before its CQ (field
            // order of its owner).
            let rc = unsafe { lib.ibv_destroy_qp(self.ptr.0) };
            if rc != 0 {
                tracing::warn!(errno = rc, "verbs: ibv_destroy_qp failed");
            }
        }
    }
}

/// Memory this provider owns, registered: the registration is declared
/// first so that it is dropped before the memory is freed.
pub(crate) struct RegVec {
    mr: Mr,
    mem: Vec<u8>,
}

impl std::fmt::Debug for RegVec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegVec")
            .field("len", &self.mem.len())
            .finish()
    }
}

impl RegVec {
    /// Registers `mem` with `access`.
    pub(crate) fn new(pd: &Arc<Pd>, mut mem: Vec<u8>, access: Access) -> Result<RegVec> {
        let len = mem.len().max(1);
        if mem.is_empty() {
            mem.push(0);
        }
        // SAFETY: the vector's buffer is neither moved nor freed before the
        // registration is dropped (field order; the vector is never
        // resized), and is read only through `bytes`.
        let mr = unsafe { Mr::register(pd, mem.as_mut_ptr(), len, access)? };
        Ok(RegVec { mr, mem })
    }

    /// The address of its first byte.
    pub(crate) fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    /// The scatter entry of the whole buffer.
    pub(crate) fn sge(&self) -> Sge {
        Sge::new(self.addr(), self.mem.len() as u32, self.mr.lkey())
    }

    /// The remote key.
    pub(crate) fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// Its bytes (as the device left them, once its operation completed).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.mem
    }
}
