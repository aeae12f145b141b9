//! The domain object (`struct fid_domain`, `struct fi_ops_domain`,
//! `struct fi_ops_mr`).

use std::ffi::{c_int, c_void};
use std::ptr;

use fabric::AddrFormat;
use fabric::objects::Domain;

use super::av::{self, FiAvAttr, FidAv};
use super::cntr;
use super::cq::{self, FiCqAttr, FidCq};
use super::ep::{self, FidEp};
use super::fabric::{self as fab, FabricObj, FidFabric};
use super::mr::{self, FidMr};
use super::{EINVAL, ENOSYS, FiOps, Fid, Refs, class, close_child, fi_ops, guard_int, object, put};
use crate::types::{FiInfo, FiRxAttr, FiTxAttr};

/// `struct fi_ops_domain`.
#[repr(C)]
pub struct FiOpsDomain {
    /// `size_t size`.
    pub size: usize,
    /// `av_open`.
    pub av_open:
        unsafe extern "C" fn(*mut FidDomain, *mut FiAvAttr, *mut *mut FidAv, *mut c_void) -> c_int,
    /// `cq_open`.
    pub cq_open:
        unsafe extern "C" fn(*mut FidDomain, *mut FiCqAttr, *mut *mut FidCq, *mut c_void) -> c_int,
    /// `endpoint`.
    pub endpoint:
        unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, *mut c_void) -> c_int,
    /// `scalable_ep`.
    pub scalable_ep:
        unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, *mut c_void) -> c_int,
    /// `cntr_open`.
    pub cntr_open: unsafe extern "C" fn(
        *mut FidDomain,
        *mut cntr::FiCntrAttr,
        *mut *mut cntr::FidCntr,
        *mut c_void,
    ) -> c_int,
    /// `poll_open`.
    pub poll_open: unsafe extern "C" fn(*mut FidDomain, *mut c_void, *mut *mut c_void) -> c_int,
    /// `stx_ctx`.
    pub stx_ctx:
        unsafe extern "C" fn(*mut FidDomain, *mut FiTxAttr, *mut *mut c_void, *mut c_void) -> c_int,
    /// `srx_ctx`.
    pub srx_ctx:
        unsafe extern "C" fn(*mut FidDomain, *mut FiRxAttr, *mut *mut FidEp, *mut c_void) -> c_int,
    /// `query_atomic`.
    pub query_atomic: unsafe extern "C" fn(*mut FidDomain, u32, u32, *mut c_void, u64) -> c_int,
    /// `query_collective`.
    pub query_collective: unsafe extern "C" fn(*mut FidDomain, u32, *mut c_void, u64) -> c_int,
    /// `endpoint2`.
    pub endpoint2: unsafe extern "C" fn(
        *mut FidDomain,
        *mut FiInfo,
        *mut *mut FidEp,
        u64,
        *mut c_void,
    ) -> c_int,
}

/// `struct fi_ops_mr`.
#[repr(C)]
pub struct FiOpsMr {
    /// `size_t size`.
    pub size: usize,
    /// `reg`.
    pub reg: unsafe extern "C" fn(
        *mut Fid,
        *const c_void,
        usize,
        u64,
        u64,
        u64,
        u64,
        *mut *mut FidMr,
        *mut c_void,
    ) -> c_int,
    /// `regv`.
    pub regv: unsafe extern "C" fn(
        *mut Fid,
        *const libc::iovec,
        usize,
        u64,
        u64,
        u64,
        u64,
        *mut *mut FidMr,
        *mut c_void,
    ) -> c_int,
    /// `regattr`.
    pub regattr: unsafe extern "C" fn(*mut Fid, *const mr::FiMrAttr, u64, *mut *mut FidMr) -> c_int,
}

/// `struct fid_domain`.
#[repr(C)]
pub struct FidDomain {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `struct fi_ops_domain *ops`.
    pub ops: *mut FiOpsDomain,
    /// `struct fi_ops_mr *mr`.
    pub mr: *mut FiOpsMr,
}

/// A domain opened from C.
#[repr(C)]
pub struct DomainObj {
    /// The C descriptor.
    pub c: FidDomain,
    /// The provider's domain.
    pub inner: Box<dyn Domain>,
    /// The fabric it was opened on (which counts it in its `refs`).
    pub fabric: *const FabricObj,
    /// Endpoints, CQs, AVs and MRs opened on it.
    pub refs: Refs,
    /// The address format of the entry it was opened with: how `fi_av_insert`
    /// reads addresses.
    pub addr_format: AddrFormat,
    /// The fabric's API version (`fi_cq_readerr`'s rules depend on it).
    pub api_version: u32,
}

static OPS: FiOps = fi_ops!(close);

static DOMAIN_OPS: FiOpsDomain = FiOpsDomain {
    size: size_of::<FiOpsDomain>(),
    av_open: av::open,
    cq_open: cq::open,
    endpoint: ep::open,
    scalable_ep: no_scalable_ep,
    cntr_open: cntr::open,
    poll_open: no_poll_open,
    stx_ctx: no_stx_ctx,
    srx_ctx: super::srx::open,
    query_atomic: super::atomic::query_atomic,
    query_collective: no_query_collective,
    endpoint2: ep::open2,
};

static MR_OPS: FiOpsMr = FiOpsMr {
    size: size_of::<FiOpsMr>(),
    reg: mr::reg,
    regv: mr::regv,
    regattr: mr::regattr,
};

/// The domain behind a `fid` pointer, if it is one of ours.
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
pub(crate) unsafe fn get<'a, T>(p: *const T) -> Option<&'a DomainObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::DOMAIN, &OPS) }
}

/// `fi_ops_fabric.domain` (`fi_domain`).
pub(crate) unsafe extern "C" fn open(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    out: *mut *mut FidDomain,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        // SAFETY: null or writable.
        unsafe { put(out, ptr::null_mut()) };
        // SAFETY: the application passes a fabric from fi_fabric.
        let Some(f) = (unsafe { fab::get(fabric) }) else {
            return EINVAL;
        };
        // Counted before it is used: a close on another thread waits.
        let Some(hold) = f.refs.hold() else {
            return EINVAL;
        };
        if out.is_null() {
            return EINVAL;
        }
        // SAFETY: fi_domain's info is null or valid.
        let info = match unsafe { fab::read_info(info) } {
            Ok(i) => i,
            Err(code) => return code,
        };
        let inner = match f.inner.domain(&info) {
            Ok(d) => d,
            Err(e) => return e.code(),
        };
        hold.keep();
        let obj = Box::new(DomainObj {
            c: FidDomain {
                fid: Fid::new(class::DOMAIN, context, &OPS),
                ops: ptr::from_ref(&DOMAIN_OPS).cast_mut(),
                mr: ptr::from_ref(&MR_OPS).cast_mut(),
            },
            inner,
            fabric: f,
            refs: Refs::default(),
            addr_format: info.addr_format,
            api_version: f.c.api_version,
        });
        // SAFETY: non-null and writable.
        unsafe { *out = Box::into_raw(obj).cast() };
        0
    })
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(d) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        // SAFETY: `d` is what `fid` names, from `open`; its fabric is live.
        unsafe { close_child::<DomainObj>(fid, &d.refs, &(*d.fabric).refs) }
    })
}

unsafe extern "C" fn no_scalable_ep(
    _: *mut FidDomain,
    _: *mut FiInfo,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}
unsafe extern "C" fn no_poll_open(_: *mut FidDomain, _: *mut c_void, _: *mut *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn no_stx_ctx(
    _: *mut FidDomain,
    _: *mut FiTxAttr,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}
unsafe extern "C" fn no_query_collective(
    _: *mut FidDomain,
    _: u32,
    _: *mut c_void,
    _: u64,
) -> c_int {
    ENOSYS
}
