//! `fi_strerror`, `fi_version`, and the object entry points that are not
//! implemented yet (`fi_fabric`, `fi_open`).

use std::ffi::{CString, c_char, c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use fabric::{ErrorKind, Version};

use crate::guard;
use crate::symver::symver;
use crate::types::{FiFabricAttr, Fid, FidFabric};

/// The `fi_strerror` texts, built once: NUL-terminated copies of
/// [`ErrorKind::description`] with their positive code. (A vector, whose
/// elements a leak checker sees as reachable, unlike a hash table's.)
fn texts() -> &'static [(i32, CString)] {
    static TEXTS: OnceLock<Vec<(i32, CString)>> = OnceLock::new();
    TEXTS.get_or_init(|| {
        ErrorKind::ALL
            .iter()
            .filter_map(|k| Some((k.errno(), CString::new(k.description()).ok()?)))
            .collect()
    })
}

/// `const char *fi_strerror(int errnum)` (`fi_strerror@@FABRIC_1.0`).
///
/// The description of an `FI_E*` code, given positive (`FI_ENODATA`) or
/// negative (a return value); `Success` for 0 and `Unknown error`
/// otherwise. The strings are static.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_strerror"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub extern "C" fn fi_strerror(errnum: c_int) -> *const c_char {
    symver!("fi_strerror", "FABRIC_1.0");
    guard(c"Unknown error".as_ptr(), || {
        if errnum == 0 {
            return c"Success".as_ptr();
        }
        errnum
            .checked_abs()
            .and_then(|code| texts().iter().find(|(c, _)| *c == code))
            .map_or(c"Unknown error".as_ptr(), |(_, s)| s.as_ptr())
    })
}

/// `uint32_t fi_version(void)` (`fi_version@@FABRIC_1.0`): the API version
/// this library implements, `FI_VERSION(1, 17)`.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_version"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub extern "C" fn fi_version() -> u32 {
    symver!("fi_version", "FABRIC_1.0");
    Version::CURRENT.to_u32()
}

/// `int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
/// void *context)` (`fi_fabric@@FABRIC_1.1`).
///
/// Opens the fabric of a provider compiled in (`attr->prov_name`, or the
/// first provider that accepts `attr`), the root of the objects of
/// [`crate::obj`]; `*fabric` is NULL on failure (`-FI_EINVAL` for NULL
/// arguments, `-FI_ENOSYS` for a provider not compiled in, or the
/// provider's error).
///
/// # Safety
///
/// `attr` is null or a valid `fi_fabric_attr`; `fabric` is null or
/// writable.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_fabric"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_fabric(
    attr: *mut FiFabricAttr,
    fabric: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int {
    symver!("fi_fabric", "FABRIC_1.1");
    guard(ErrorKind::Other.code(), || {
        // SAFETY: per the contract.
        unsafe { crate::obj::fabric::fi_fabric(attr, fabric.cast(), context) }
    })
}

/// `int fi_open(uint32_t version, const char *name, void *attr, size_t
/// attr_len, uint64_t flags, struct fid **fid, void *context)`
/// (`fi_open@@FABRIC_1.5`).
///
/// No named objects exist yet: sets `*fid` to NULL and returns
/// `-FI_ENOSYS`.
///
/// # Safety
///
/// `fid` is null or writable.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_open"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_open(
    version: u32,
    name: *const c_char,
    attr: *mut c_void,
    attr_len: usize,
    flags: u64,
    fid: *mut *mut Fid,
    context: *mut c_void,
) -> c_int {
    symver!("fi_open", "FABRIC_1.5");
    let _ = (version, name, attr, attr_len, flags, context);
    guard(ErrorKind::Other.code(), || {
        if !fid.is_null() {
            // SAFETY: non-null and writable, per the contract.
            unsafe { *fid = ptr::null_mut() };
        }
        ErrorKind::NoSys.code()
    })
}
