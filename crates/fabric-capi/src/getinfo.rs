//! `fi_getinfo`, `fi_freeinfo`, `fi_dupinfo` (and through it the header's
//! `fi_allocinfo`).

use std::ffi::{c_char, c_int};
use std::ptr;

use fabric::{Caps, ErrorKind, GetinfoFlags, Registry, Request, Version};

use crate::convert::{self, AddrUse};
use crate::guard;
use crate::symver::symver;
use crate::types::FiInfo;

/// What `fi_getinfo` does once its arguments are known to be readable:
/// the list of answers, or the negative `FI_E*` code.
///
/// # Safety
///
/// As [`fi_getinfo`] for `node`, `service` and `hints`.
unsafe fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
) -> Result<*mut FiInfo, c_int> {
    let version = Version::from_u32(version);
    // The version decides the meaning of everything else, so it is checked
    // first, as libfabric does.
    if version > Version::CURRENT {
        return Err(ErrorKind::NoSys.code());
    }
    // SAFETY: per the contract, null or C strings living for this call.
    let node = unsafe { convert::borrow_str(node, "node") }.map_err(|e| e.code())?;
    // SAFETY: as above.
    let service = unsafe { convert::borrow_str(service, "service") }.map_err(|e| e.code())?;
    let flags = GetinfoFlags::from_bits_retain(flags);
    let source = flags.contains(GetinfoFlags::SOURCE);
    // fi_getinfo(3): src_addr is ignored with FI_SOURCE; dest_addr is
    // ignored unless node and service are NULL or FI_SOURCE is set.
    let addrs = AddrUse {
        src: !source,
        dest: source || (node.is_none() && service.is_none()),
    };
    // SAFETY: per the contract, `hints` is null or a valid fi_info.
    let hints = match unsafe { hints.as_ref() } {
        // SAFETY: per the contract, its pointers are valid.
        Some(h) => Some(unsafe { convert::info_from_c(h, addrs) }.map_err(|e| e.code())?),
        None => None,
    };
    // The libfabric view (fabric_core's `Caps`, "Two views"): FI_INJECT,
    // FI_REMOTE_CQ_DATA and the kfi cancel bit are operation flags in
    // libfabric, which no provider offers as capabilities.
    if let Some(h) = &hints {
        if h.caps.intersects(Caps::KFI) {
            return Err(ErrorKind::NoData.code());
        }
    }
    let request = Request {
        version,
        node,
        service,
        flags,
        hints: hints.as_ref(),
    };
    let infos = Registry::global().getinfo(&request).map_err(|e| e.code())?;
    convert::list_to_c(&infos).map_err(|_| ErrorKind::NoMem.code())
}

/// `int fi_getinfo(uint32_t version, const char *node, const char *service,
/// uint64_t flags, const struct fi_info *hints, struct fi_info **info)`
/// (`fi_getinfo@@FABRIC_1.3`).
///
/// Asks the compiled-in providers (`fabric::Registry::global()`) and
/// stores the answers, fastest first, as a list the caller frees with
/// [`fi_freeinfo`]. Returns 0, or a negative `FI_E*` code with `*info` set
/// to NULL: `-FI_ENOSYS` when `version` is newer than 1.17 or no provider
/// is compiled in, `-FI_ENODATA` when nothing matches, `-FI_EINVAL` for a
/// NULL `info`, an unreadable hint (unknown enumeration value, address
/// whose length does not fit its format, string that is not UTF-8) or an
/// invalid request, `-FI_EBADFLAGS` for unknown flag or capability bits,
/// `-FI_ENOMEM`.
///
/// # Safety
///
/// `node` and `service` are null or NUL-terminated strings; `hints` is null
/// or an `fi_info` whose non-null pointers are valid (sub-structures, C
/// strings, addresses of `src_addrlen` / `dest_addrlen` bytes, keys of
/// `auth_key_size` bytes); `info` is null or writable.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_getinfo"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
    info: *mut *mut FiInfo,
) -> c_int {
    symver!("fi_getinfo", "FABRIC_1.3");
    guard(ErrorKind::Other.code(), || {
        if info.is_null() {
            return ErrorKind::Inval.code();
        }
        // SAFETY: `info` is non-null and writable, per the contract.
        unsafe { *info = ptr::null_mut() };
        // SAFETY: the arguments are as `getinfo` requires, per the contract.
        match unsafe { getinfo(version, node, service, flags, hints) } {
            Ok(list) => {
                // SAFETY: as above.
                unsafe { *info = list };
                0
            }
            Err(code) => code,
        }
    })
}

/// `void fi_freeinfo(struct fi_info *info)` (`fi_freeinfo@@FABRIC_1.3`).
///
/// Frees the whole list starting at `info` (following `next`), with every
/// sub-structure, string, address and key it owns; NULL is a no-op. The
/// `handle`, `domain_attr->domain`, `fabric_attr->fabric` and `nic`
/// pointers are not owned by the list and are left alone.
///
/// # Safety
///
/// `info` is null or a list from [`fi_getinfo`] / [`fi_dupinfo`], whose
/// owned pointers are null or from the C allocator (an application may
/// replace them with its own `malloc`ed ones), and is not used afterwards.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_freeinfo"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_freeinfo(info: *mut FiInfo) {
    symver!("fi_freeinfo", "FABRIC_1.3");
    // SAFETY: per the contract.
    guard((), || unsafe { convert::free_list(info) });
}

/// `struct fi_info *fi_dupinfo(const struct fi_info *info)`
/// (`fi_dupinfo@@FABRIC_1.3`).
///
/// With NULL, `fi_allocinfo`: a zeroed `fi_info` with every sub-structure
/// allocated and zeroed. Otherwise a copy of the one structure `info`
/// (not the rest of its list: `next` is NULL), with its own copies of the
/// sub-structures, strings, addresses and keys; NULL sub-structures stay
/// NULL. Free the result with [`fi_freeinfo`]. Returns NULL when out of
/// memory.
///
/// # Safety
///
/// `info` is null or an `fi_info` whose non-null pointers are valid (as
/// for the hints of [`fi_getinfo`]).
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_dupinfo"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_dupinfo(info: *const FiInfo) -> *mut FiInfo {
    symver!("fi_dupinfo", "FABRIC_1.3");
    guard(ptr::null_mut(), || {
        // SAFETY: per the contract, null or a valid fi_info.
        let copy = match unsafe { info.as_ref() } {
            None => convert::alloc_info(),
            // SAFETY: per the contract, its pointers are valid.
            Some(src) => unsafe { convert::dup_info(src) },
        };
        copy.unwrap_or(ptr::null_mut())
    })
}
