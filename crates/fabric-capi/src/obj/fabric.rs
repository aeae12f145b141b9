//! `fi_fabric` and the fabric object (`struct fid_fabric`,
//! `struct fi_ops_fabric`).

use std::ffi::{c_int, c_void};
use std::ptr;

use fabric::objects::Fabric;
use fabric::{Error, Registry};

use super::domain::{self, FidDomain};
use super::eq::{self, FiEqAttr, FidEq};
use super::{EBUSY, EINVAL, FiOps, Fid, Refs, class, fi_ops, guard_int, object, put};
use crate::convert::{self, AddrUse};
use crate::types::{FiFabricAttr, FiInfo};

/// `struct fi_ops_fabric`.
#[repr(C)]
pub struct FiOpsFabric {
    /// `size_t size`.
    pub size: usize,
    /// `domain`.
    pub domain: unsafe extern "C" fn(
        *mut FidFabric,
        *mut FiInfo,
        *mut *mut FidDomain,
        *mut c_void,
    ) -> c_int,
    /// `passive_ep`.
    pub passive_ep:
        unsafe extern "C" fn(*mut FidFabric, *mut FiInfo, *mut *mut c_void, *mut c_void) -> c_int,
    /// `eq_open`.
    pub eq_open:
        unsafe extern "C" fn(*mut FidFabric, *mut FiEqAttr, *mut *mut FidEq, *mut c_void) -> c_int,
    /// `wait_open`.
    pub wait_open: unsafe extern "C" fn(*mut FidFabric, *mut c_void, *mut *mut c_void) -> c_int,
    /// `trywait`.
    pub trywait: unsafe extern "C" fn(*mut FidFabric, *mut *mut Fid, c_int) -> c_int,
    /// `domain2`.
    pub domain2: unsafe extern "C" fn(
        *mut FidFabric,
        *mut FiInfo,
        *mut *mut FidDomain,
        u64,
        *mut c_void,
    ) -> c_int,
}

/// `struct fid_fabric`.
#[repr(C)]
pub struct FidFabric {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `struct fi_ops_fabric *ops`.
    pub ops: *mut FiOpsFabric,
    /// `uint32_t api_version`.
    pub api_version: u32,
}

/// A fabric opened from C.
#[repr(C)]
pub struct FabricObj {
    /// The C descriptor (first, so the object's address is the fid's).
    pub c: FidFabric,
    /// The provider's fabric.
    pub inner: Box<dyn Fabric>,
    /// Domains and EQs opened on it.
    pub refs: Refs,
}

static OPS: FiOps = fi_ops!(close);

static FABRIC_OPS: FiOpsFabric = FiOpsFabric {
    size: size_of::<FiOpsFabric>(),
    domain: domain::open,
    passive_ep: super::ep::passive_open,
    eq_open: eq::open,
    wait_open: no_wait_open,
    trywait,
    domain2,
};

/// The fabric behind a `fid_fabric` pointer, if it is one of ours.
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
pub(crate) unsafe fn get<'a>(p: *const FidFabric) -> Option<&'a FabricObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::FABRIC, &OPS) }
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(f) = (unsafe { object::<FabricObj>(fid, class::FABRIC, &OPS) }) else {
            return EINVAL;
        };
        if !f.refs.close() {
            return EBUSY;
        }
        // SAFETY: ours (checked), from Box::into_raw in fi_fabric; closed once.
        unsafe { super::retire::<FabricObj>(fid) };
        0
    })
}

unsafe extern "C" fn no_wait_open(_: *mut FidFabric, _: *mut c_void, _: *mut *mut c_void) -> c_int {
    super::ENOSYS
}

/// `fi_trywait`: asks every CQ, EQ and counter in `fids` whether it is
/// safe to sleep on its wait fd (each drives progress and arms its fd);
/// the first that says no (`-FI_EAGAIN`: read it first) or fails ends the
/// call with its code. A fid of another class is `-FI_EINVAL`.
unsafe extern "C" fn trywait(_: *mut FidFabric, fids: *mut *mut Fid, count: c_int) -> c_int {
    guard_int(|| {
        let Ok(n) = usize::try_from(count) else {
            return super::EINVAL;
        };
        if n == 0 {
            return 0;
        }
        if fids.is_null() {
            return super::EINVAL;
        }
        // SAFETY: the application passes an array of `count` fid pointers.
        let list = unsafe { std::slice::from_raw_parts(fids, n) };
        for &fid in list {
            // SAFETY: each entry is null or a fid this library handed out
            // (each `get` checks the class and the ops table).
            let r = unsafe {
                if let Some(c) = super::cq::get(fid) {
                    c.inner.trywait()
                } else if let Some(e) = super::eq::get(fid) {
                    e.inner.trywait()
                } else if let Some(c) = super::cntr::get(fid) {
                    c.inner.trywait()
                } else {
                    return super::EINVAL;
                }
            };
            if let Err(e) = r {
                return e.code();
            }
        }
        0
    })
}

unsafe extern "C" fn domain2(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    dom: *mut *mut FidDomain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return fabric::ErrorKind::BadFlags.code();
    }
    // SAFETY: the arguments are fi_domain's.
    unsafe { domain::open(fabric, info, dom, context) }
}

/// Opens the provider's fabric named by `attr`.
///
/// # Safety
///
/// `attr` is a valid `fi_fabric_attr`.
unsafe fn open(attr: &FiFabricAttr) -> Result<Box<dyn Fabric>, Error> {
    // SAFETY: per the contract.
    let a = unsafe { convert::fabric_from_c(attr) }?;
    let name = a
        .prov_name
        .as_deref()
        .ok_or_else(|| Error::inval("fi_fabric: attr->prov_name is NULL"))?;
    if a.name.is_none() {
        return Err(Error::inval("fi_fabric: attr->name is NULL"));
    }
    Registry::global()
        .provider(name)
        .ok_or_else(|| Error::no_sys(format!("provider `{name}` is not compiled in")))?
        .fabric(&a)
}

/// `int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
/// void *context)`: the body of [`crate::fi_fabric`].
///
/// # Safety
///
/// `attr` is null or a valid `fi_fabric_attr`; `out` null or writable.
pub(crate) unsafe fn fi_fabric(
    attr: *const FiFabricAttr,
    out: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int {
    if out.is_null() {
        return EINVAL;
    }
    // SAFETY: writable, per the contract.
    unsafe { *out = ptr::null_mut() };
    // SAFETY: null or valid, per the contract.
    let Some(attr) = (unsafe { attr.as_ref() }) else {
        return EINVAL;
    };
    // SAFETY: valid, per the contract.
    let inner = match unsafe { open(attr) } {
        Ok(f) => f,
        Err(e) => return e.code(),
    };
    let api_version = if attr.api_version == 0 {
        fabric::Version::CURRENT.to_u32()
    } else {
        attr.api_version
    };
    let obj = Box::new(FabricObj {
        c: FidFabric {
            fid: Fid::new(class::FABRIC, context, &OPS),
            ops: ptr::from_ref(&FABRIC_OPS).cast_mut(),
            api_version,
        },
        inner,
        refs: Refs::default(),
    });
    // SAFETY: writable, per the contract.
    unsafe { put(out, Box::into_raw(obj).cast::<FidFabric>()) };
    0
}

/// Reads a C `fi_info` handed to an open call (`fi_domain`, `fi_endpoint`).
///
/// # Safety
///
/// `info` is null or a valid `fi_info`.
pub(crate) unsafe fn read_info(info: *const FiInfo) -> Result<fabric::Info, c_int> {
    // SAFETY: null or valid, per the contract.
    let Some(i) = (unsafe { info.as_ref() }) else {
        return Err(EINVAL);
    };
    let all = AddrUse {
        src: true,
        dest: true,
    };
    // SAFETY: valid, per the contract.
    unsafe { convert::info_from_c(i, all) }.map_err(|e| e.code())
}
