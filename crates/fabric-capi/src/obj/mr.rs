//! Memory regions (`struct fid_mr`): `fi_mr_reg`, `fi_mr_regv`,
//! `fi_mr_regattr`; `fi_mr_desc` and `fi_mr_key` read the descriptor's
//! `mem_desc` and `key` fields, filled at registration.

use std::ffi::{c_int, c_void};
use std::ptr;

use fabric::objects::{IoVec, MemoryRegion, MrAccess, MrAttr};

use super::domain::{self, DomainObj};
use super::{EINVAL, FiOps, Fid, class, fi_ops, guard_int, object, put};

/// `struct fid_mr`.
#[repr(C)]
pub struct FidMr {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `void *mem_desc`: what `fi_mr_desc` returns, the provider's local
    /// descriptor (`MrDesc`) as a pointer-sized value.
    pub mem_desc: *mut c_void,
    /// `uint64_t key`.
    pub key: u64,
}

/// The leading fields of `struct fi_mr_attr` this library reads
/// (`mr_iov`, `iov_count`, `access`, `offset`, `requested_key`,
/// `context`); the rest (auth key, hmem interface) is not read.
#[repr(C)]
pub struct FiMrAttr {
    /// `const struct iovec *mr_iov`.
    pub mr_iov: *const libc::iovec,
    /// `size_t iov_count`.
    pub iov_count: usize,
    /// `uint64_t access`.
    pub access: u64,
    /// `uint64_t offset`.
    pub offset: u64,
    /// `uint64_t requested_key`.
    pub requested_key: u64,
    /// `void *context`.
    pub context: *mut c_void,
}

/// A registered region.
#[repr(C)]
pub struct MrObj {
    /// The C descriptor.
    pub c: FidMr,
    /// The provider's region (dropping it deregisters).
    pub inner: Box<dyn MemoryRegion>,
    /// The domain (which counts it).
    pub domain: *const DomainObj,
}

static OPS: FiOps = fi_ops!(close);

/// The most pieces one registration takes.
const MAX_IOV: usize = 64;

/// Registers `iov` on the domain behind `fid`.
///
/// # Safety
///
/// `fid` is null or a readable fid; `iov` has `count` valid elements;
/// `out` null or writable.
#[allow(clippy::too_many_arguments)]
unsafe fn register(
    fid: *mut Fid,
    iov: *const libc::iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    out: *mut *mut FidMr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: null or writable.
    unsafe { put(out, ptr::null_mut()) };
    // SAFETY: fi_mr_reg's fid is the domain's.
    let Some(d) = (unsafe { domain::get(fid) }) else {
        return EINVAL;
    };
    // Counted before it is used: a close on another thread waits.
    let Some(hold) = d.refs.hold() else {
        return EINVAL;
    };
    if out.is_null() || (iov.is_null() && count != 0) || count > MAX_IOV {
        return EINVAL;
    }
    if flags != 0 {
        return fabric::ErrorKind::BadFlags.code();
    }
    let mut pieces = [IoVec {
        addr: ptr::null_mut(),
        len: 0,
    }; MAX_IOV];
    for (i, p) in pieces.iter_mut().take(count).enumerate() {
        // SAFETY: `count` valid elements, per the contract.
        let v = unsafe { &*iov.add(i) };
        *p = IoVec {
            addr: v.iov_base.cast(),
            len: v.iov_len,
        };
    }
    let attr = MrAttr {
        iov: &pieces[..count],
        access: MrAccess::from_bits_retain(access),
        offset,
        requested_key,
        context: context as u64,
    };
    // SAFETY: fi_mr_reg(3) makes the application keep the memory valid
    // until the region is closed, which drops `inner`.
    let inner = match unsafe { d.inner.mr_reg(&attr) } {
        Ok(m) => m,
        Err(e) => return e.code(),
    };
    hold.keep();
    let obj = Box::new(MrObj {
        c: FidMr {
            fid: Fid::new(class::MR, context, &OPS),
            mem_desc: inner.desc().0 as usize as *mut c_void,
            key: inner.key(),
        },
        inner,
        domain: d,
    });
    // SAFETY: non-null and writable.
    unsafe { *out = Box::into_raw(obj).cast() };
    0
}

/// `fi_ops_mr.reg` (`fi_mr_reg`).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn reg(
    fid: *mut Fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    out: *mut *mut FidMr,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let v = libc::iovec {
            iov_base: buf.cast_mut(),
            iov_len: len,
        };
        // SAFETY: one valid iovec; the rest is fi_mr_reg's.
        unsafe {
            register(
                fid,
                &v,
                1,
                access,
                offset,
                requested_key,
                flags,
                out,
                context,
            )
        }
    })
}

/// `fi_ops_mr.regv` (`fi_mr_regv`).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn regv(
    fid: *mut Fid,
    iov: *const libc::iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    out: *mut *mut FidMr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: fi_mr_regv's arguments.
    guard_int(|| unsafe {
        register(
            fid,
            iov,
            count,
            access,
            offset,
            requested_key,
            flags,
            out,
            context,
        )
    })
}

/// `fi_ops_mr.regattr` (`fi_mr_regattr`).
pub(crate) unsafe extern "C" fn regattr(
    fid: *mut Fid,
    attr: *const FiMrAttr,
    flags: u64,
    out: *mut *mut FidMr,
) -> c_int {
    guard_int(|| {
        // SAFETY: null or a valid fi_mr_attr.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            // SAFETY: null or writable.
            unsafe { put(out, ptr::null_mut()) };
            return EINVAL;
        };
        // SAFETY: the attribute's fields, per fi_mr(3).
        unsafe {
            register(
                fid,
                a.mr_iov,
                a.iov_count,
                a.access,
                a.offset,
                a.requested_key,
                flags,
                out,
                a.context,
            )
        }
    })
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(m) = (unsafe { object::<MrObj>(fid, class::MR, &OPS) }) else {
            return EINVAL;
        };
        let domain = m.domain;
        // SAFETY: ours, from Box::into_raw in `register`; closed once.
        unsafe { super::retire::<MrObj>(fid) };
        // SAFETY: the domain outlives its regions (its refs count this
        // one, released only now that the region is gone).
        unsafe { (*domain).refs.release() };
        0
    })
}
