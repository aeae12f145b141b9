//! Memory regions, completion queues with their channels, and work
//! request posting.

use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use fabric_core::Result;
use fabric_sys::ffi::{ibv_comp_channel, ibv_cq, ibv_mr, ibv_qp, ibv_wc};
use fabric_sys::inline;

use super::device::{Context, Pd};
use super::{Ptr, from_errno, last_err, lib};

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
        access: u32,
    ) -> Result<Mr> {
        let lib = lib()?;
        // SAFETY: live PD; the caller keeps the memory alive. ibv_reg_mr
        // pins the pages and never dereferences them itself.
        let p = unsafe { lib.ibv_reg_mr(pd.as_ptr(), addr.cast(), len, access as i32) };
        if p.is_null() {
            return Err(last_err("ibv_reg_mr"));
        }
        Ok(Mr {
            ptr: Ptr(p),
            _pd: pd.clone(),
        })
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
    pub(crate) fn poll<'a>(&self, out: &'a mut [MaybeUninit<ibv_wc>]) -> Result<&'a [ibv_wc]> {
        let n = i32::try_from(out.len()).unwrap_or(i32::MAX);
        // SAFETY: live CQ; `out` has `n` writable entries (the driver only
        // writes them).
        let rc = unsafe { inline::ibv_poll_cq(self.cq.0, n, out.as_mut_ptr().cast::<ibv_wc>()) };
        if rc < 0 {
            return Err(from_errno(-rc, "ibv_poll_cq"));
        }
        let n = (rc as usize).min(out.len());
        // SAFETY: the driver initialised the first `n` entries.
        Ok(unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<ibv_wc>(), n) })
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

/// Posts one send work request.
///
/// # Safety
///
/// `qp` is live; the request's scatter list is valid for the call, and the
/// memory it names (unless inline) stays valid until its completion.
#[inline]
pub(crate) unsafe fn post_send(
    qp: *mut ibv_qp,
    wr: &mut fabric_sys::ffi::ibv_send_wr,
) -> std::result::Result<(), i32> {
    let mut bad = std::ptr::null_mut();
    // SAFETY: forwarded under the caller's guarantees.
    let rc = unsafe { inline::ibv_post_send(qp, wr, &mut bad) };
    if rc == 0 { Ok(()) } else { Err(rc) }
}

/// Posts one receive work request.
///
/// # Safety
///
/// As [`post_send`].
#[inline]
pub(crate) unsafe fn post_recv(
    qp: *mut ibv_qp,
    wr: &mut fabric_sys::ffi::ibv_recv_wr,
) -> std::result::Result<(), i32> {
    let mut bad = std::ptr::null_mut();
    // SAFETY: forwarded under the caller's guarantees.
    let rc = unsafe { inline::ibv_post_recv(qp, wr, &mut bad) };
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
    pub(crate) fn as_ptr(&self) -> *mut fabric_sys::ffi::ibv_srq {
        self.ptr.0
    }

    /// Posts one receive of registered memory.
    ///
    /// # Safety
    ///
    /// The memory stays valid until the receive completes (or the SRQ is
    /// destroyed).
    pub(crate) unsafe fn post(&self, wr_id: u64, addr: *mut u8, len: u32, lkey: u32) -> Result<()> {
        let mut sge = fabric_sys::ffi::ibv_sge {
            addr: addr as u64,
            length: len,
            lkey,
        };
        let mut wr = fabric_sys::ffi::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: live SRQ; the scatter entry names registered memory the
        // caller keeps valid.
        let rc = unsafe { inline::ibv_post_srq_recv(self.ptr.0, &mut wr, &mut bad) };
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
        let mr = unsafe {
            Mr::register(
                pd,
                base,
                mem.len(),
                fabric_sys::ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE,
            )?
        };
        Ok(Pool {
            mr,
            base: Ptr(base),
            size,
            count: count.max(1),
            _mem: mem,
        })
    }

    /// Buffer `i` (below the count).
    pub(crate) fn buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.count);
        // SAFETY: `i` is below the count, so the buffer is inside the
        // allocation.
        unsafe { self.base.0.add(i * self.size) }
    }

    /// Bytes of each buffer.
    pub(crate) fn buf_len(&self) -> usize {
        self.size
    }

    /// Number of buffers.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The local key.
    pub(crate) fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
}

/// An address handle (a UD destination); dropping it destroys it.
#[derive(Debug)]
pub(crate) struct Ah {
    ptr: Ptr<fabric_sys::ffi::ibv_ah>,
    _pd: Arc<Pd>,
}

impl Ah {
    /// An address handle for `attr`.
    pub(crate) fn new(pd: &Arc<Pd>, attr: &mut fabric_sys::ffi::ibv_ah_attr) -> Result<Ah> {
        let lib = lib()?;
        // SAFETY: live PD; valid attributes.
        let p = unsafe { lib.ibv_create_ah(pd.as_ptr(), attr) };
        if p.is_null() {
            return Err(last_err("ibv_create_ah"));
        }
        Ok(Ah {
            ptr: Ptr(p),
            _pd: pd.clone(),
        })
    }

    /// The raw pointer.
    pub(crate) fn as_ptr(&self) -> *mut fabric_sys::ffi::ibv_ah {
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

    /// The raw pointer.
    pub(crate) fn as_ptr(&self) -> *mut ibv_qp {
        self.ptr.0
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
