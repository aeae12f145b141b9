//! Allocation with the C allocator.
//!
//! Everything this library hands to C is allocated with `malloc` /
//! `calloc` and released with `free`, so that an application may replace a
//! string or an address of an `fi_info` with its own `malloc`ed (or
//! `strdup`ed) one before calling `fi_freeinfo`, as libfabric programs do.

use std::ffi::{CStr, c_char};
use std::ptr;

/// An allocation failed (`-FI_ENOMEM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoMem;

/// A zeroed `T` from `calloc`. Every structure allocated this way is valid
/// when zeroed (integers and null pointers).
pub(crate) fn calloc_one<T>() -> Result<*mut T, NoMem> {
    // SAFETY: calloc has no preconditions; a null result is handled.
    let p = unsafe { libc::calloc(1, size_of::<T>()) }.cast::<T>();
    if p.is_null() { Err(NoMem) } else { Ok(p) }
}

/// A zeroed array of `n` `T`s from `calloc`.
pub(crate) fn calloc_array<T>(n: usize) -> Result<*mut T, NoMem> {
    // SAFETY: calloc has no preconditions (it checks `n * size` for
    // overflow); a null result is handled.
    let p = unsafe { libc::calloc(n.max(1), size_of::<T>()) }.cast::<T>();
    if p.is_null() { Err(NoMem) } else { Ok(p) }
}

/// A `malloc`ed copy of `bytes`, `len` bytes long (at least `bytes.len()`;
/// the rest zeroed). Null when `len` is 0.
pub(crate) fn dup_bytes(bytes: &[u8], len: usize) -> Result<*mut u8, NoMem> {
    let len = len.max(bytes.len());
    if len == 0 {
        return Ok(ptr::null_mut());
    }
    let p = calloc_array::<u8>(len)?;
    // SAFETY: `p` holds `len >= bytes.len()` bytes and does not overlap
    // `bytes`, a fresh allocation.
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    Ok(p)
}

/// A `malloc`ed NUL-terminated copy of `s`, cut at its first NUL if it has
/// one (a C string cannot hold it).
pub(crate) fn dup_str(s: &str) -> Result<*mut c_char, NoMem> {
    let text = s.as_bytes();
    let text = text
        .iter()
        .position(|&b| b == 0)
        .map_or(text, |nul| &text[..nul]);
    let p = calloc_array::<u8>(text.len() + 1)?;
    // SAFETY: `p` holds `text.len() + 1` zeroed bytes; the copy leaves the
    // last one as the terminating NUL.
    unsafe { ptr::copy_nonoverlapping(text.as_ptr(), p, text.len()) };
    Ok(p.cast())
}

/// A `malloc`ed copy of the optional string; null for `None`.
pub(crate) fn dup_opt_str(s: Option<&str>) -> Result<*mut c_char, NoMem> {
    s.map_or(Ok(ptr::null_mut()), dup_str)
}

/// A `malloc`ed copy of the C string `p`; null for null.
///
/// # Safety
///
/// `p` is null or points to a NUL-terminated string.
pub(crate) unsafe fn dup_c_str(p: *const c_char) -> Result<*mut c_char, NoMem> {
    if p.is_null() {
        return Ok(ptr::null_mut());
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes_with_nul();
    dup_bytes(bytes, bytes.len()).map(|q| q.cast())
}

/// A `malloc`ed copy of `len` bytes at `p`; null when `p` is null or `len`
/// is 0.
///
/// # Safety
///
/// `p` is null or points to `len` readable bytes.
pub(crate) unsafe fn dup_raw(p: *const u8, len: usize) -> Result<*mut u8, NoMem> {
    if p.is_null() || len == 0 {
        return Ok(ptr::null_mut());
    }
    // SAFETY: the caller guarantees `len` readable bytes at `p`.
    let bytes = unsafe { std::slice::from_raw_parts(p, len) };
    dup_bytes(bytes, len)
}

/// `free(p)`; nothing for null.
///
/// # Safety
///
/// `p` is null or came from the C allocator and is not used afterwards.
pub(crate) unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: per the contract, `p` came from malloc / calloc / strdup.
        unsafe { libc::free(p.cast()) };
    }
}
