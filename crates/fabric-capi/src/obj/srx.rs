//! Shared receive contexts (`fi_srx_context`): a `struct fid_ep` of class
//! `FI_CLASS_SRX_CTX` over the provider's [`SharedRx`].
//!
//! Its message and tagged tables are the endpoints' own: their data
//! operations look for an endpoint first (the hot path is unchanged) and
//! then for a context (`srx::get`), whose receives go to the provider's
//! context and whose sends it refuses. `fi_cancel` and the
//! `FI_OPT_MIN_MULTI_RECV` option have their own `fi_ops_ep` here.
//! `fi_ep_bind(ep, &srx->fid, 0)` binds it to an endpoint opened with
//! `rx_ctx_cnt = FI_SHARED_CONTEXT`, which then counts it: `fi_close` of a
//! context still bound answers `-FI_EBUSY`.

use std::ffi::{c_int, c_void};
use std::ptr;

use fabric::objects::SharedRx;
use fabric::{ErrorKind, OpFlags};

use super::atomic::ATOMIC_OPS;
use super::domain::{self, DomainObj, FidDomain};
use super::ep::{CM_OPS, FiOpsEp, FidEp};
use super::msg::{MSG_OPS, TAGGED_OPS};
use super::rma::RMA_OPS;
use super::{EINVAL, ENOSYS, FiOps, Fid, Refs, class, close_child, fi_ops, guard_int, object, put};
use crate::types::{FiRxAttr, FiTxAttr};

/// A shared receive context opened from C.
#[repr(C)]
pub struct SrxObj {
    /// The C descriptor.
    pub c: FidEp,
    /// The provider's context.
    pub inner: Box<dyn SharedRx>,
    /// Default flags of the short receive forms (`attr->op_flags`).
    pub rx_flags: OpFlags,
    /// The domain (which counts it).
    pub domain: *const DomainObj,
    /// Endpoints bound to it.
    pub refs: Refs,
}

static OPS: FiOps = fi_ops!(close);

/// The `fi_ops_ep` of shared receive contexts.
static SRX_EP_OPS: FiOpsEp = FiOpsEp {
    size: size_of::<FiOpsEp>(),
    cancel,
    getopt,
    setopt,
    tx_ctx,
    rx_ctx,
    rx_size_left,
    tx_size_left,
};

/// The context behind a `fid` pointer, if it is one of ours.
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
#[inline]
pub(crate) unsafe fn get<'a, T>(p: *const T) -> Option<&'a SrxObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::SRX_CTX, &OPS) }
}

/// `fi_ops_domain.srx_ctx` (`fi_srx_context`).
pub(crate) unsafe extern "C" fn open(
    dom: *mut FidDomain,
    attr: *mut FiRxAttr,
    out: *mut *mut FidEp,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        // SAFETY: null or writable.
        unsafe { put(out, ptr::null_mut()) };
        // SAFETY: the application passes a domain from fi_domain.
        let Some(d) = (unsafe { domain::get(dom) }) else {
            return EINVAL;
        };
        // Counted before it is used: a close on another thread waits.
        let Some(hold) = d.refs.hold() else {
            return EINVAL;
        };
        if out.is_null() {
            return EINVAL;
        }
        // SAFETY: null or a readable `struct fi_rx_attr`, per fi_endpoint(3).
        let attr = match unsafe { attr.as_ref() } {
            Some(a) => crate::convert::rx_from_c(a),
            None => fabric::RxAttr::default(),
        };
        let inner = match d.inner.srx_context(&attr) {
            Ok(s) => s,
            Err(e) => return e.code(),
        };
        hold.keep();
        let obj = Box::new(SrxObj {
            c: FidEp {
                fid: Fid::new(class::SRX_CTX, context, &OPS),
                ops: ptr::from_ref(&SRX_EP_OPS).cast_mut(),
                cm: ptr::from_ref(&CM_OPS).cast_mut(),
                msg: ptr::from_ref(&MSG_OPS).cast_mut(),
                rma: ptr::from_ref(&RMA_OPS).cast_mut(),
                tagged: ptr::from_ref(&TAGGED_OPS).cast_mut(),
                atomic: ptr::from_ref(&ATOMIC_OPS).cast_mut(),
                collective: ptr::null_mut(),
            },
            inner,
            rx_flags: attr.op_flags,
            domain: d,
            refs: Refs::default(),
        });
        // SAFETY: non-null and writable.
        unsafe { *out = Box::into_raw(obj).cast() };
        0
    })
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(s) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        // SAFETY: `s` is what `fid` names, from `open`; its domain is live.
        unsafe { close_child::<SrxObj>(fid, &s.refs, &(*s.domain).refs) }
    })
}

unsafe extern "C" fn cancel(fid: *mut Fid, context: *mut c_void) -> isize {
    super::guard_sz(|| {
        // SAFETY: fi_cancel's argument is a context's fid.
        let Some(s) = (unsafe { get(fid) }) else {
            return EINVAL as isize;
        };
        s.inner
            .cancel(context as u64)
            .map_or_else(super::sz, |()| 0)
    })
}

/// `FI_OPT_ENDPOINT`.
const OPT_ENDPOINT: c_int = 0;
/// `FI_OPT_MIN_MULTI_RECV` (`size_t`).
const OPT_MIN_MULTI_RECV: c_int = 0;

/// `fi_getopt` of a context: `FI_OPT_MIN_MULTI_RECV` (`size_t`); other
/// options `-FI_ENOPROTOOPT`; a too small `*optlen` `-FI_ETOOSMALL`.
unsafe extern "C" fn getopt(
    fid: *mut Fid,
    level: c_int,
    name: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: fi_getopt's argument is a context's fid.
        let Some(s) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        if level != OPT_ENDPOINT || name != OPT_MIN_MULTI_RECV {
            return ErrorKind::NoProtoOpt.code();
        }
        let value = match s.inner.min_multi_recv() {
            Ok(v) => v,
            Err(e) => return e.code(),
        };
        if optval.is_null() || optlen.is_null() {
            return EINVAL;
        }
        // SAFETY: `optlen` is non-null and points to a size_t, per fi_getopt.
        let room = unsafe { *optlen };
        // SAFETY: as above.
        unsafe { *optlen = size_of::<usize>() };
        if room < size_of::<usize>() {
            return ErrorKind::TooSmall.code();
        }
        // SAFETY: `optval` has `room` >= size_of::<usize>() writable bytes.
        unsafe { optval.cast::<usize>().write_unaligned(value) };
        0
    })
}

/// `fi_setopt` of a context: `FI_OPT_MIN_MULTI_RECV` (`size_t`); other
/// options `-FI_ENOPROTOOPT`.
unsafe extern "C" fn setopt(
    fid: *mut Fid,
    level: c_int,
    name: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: fi_setopt's argument is a context's fid.
        let Some(s) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        if level != OPT_ENDPOINT || name != OPT_MIN_MULTI_RECV {
            return ErrorKind::NoProtoOpt.code();
        }
        if optval.is_null() || optlen != size_of::<usize>() {
            return EINVAL;
        }
        // SAFETY: `optval` has `optlen` == size_of::<usize>() readable bytes.
        let value = unsafe { optval.cast::<usize>().read_unaligned() };
        s.inner
            .set_min_multi_recv(value)
            .map_or_else(|e| e.code(), |()| 0)
    })
}

unsafe extern "C" fn tx_ctx(
    _: *mut FidEp,
    _: c_int,
    _: *mut FiTxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}

unsafe extern "C" fn rx_ctx(
    _: *mut FidEp,
    _: c_int,
    _: *mut FiRxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}

unsafe extern "C" fn rx_size_left(_: *mut FidEp) -> isize {
    ENOSYS as isize
}

unsafe extern "C" fn tx_size_left(_: *mut FidEp) -> isize {
    ENOSYS as isize
}
