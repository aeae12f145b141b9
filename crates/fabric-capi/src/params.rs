//! `fi_getparams` and `fi_freeparams`: the environment variables the
//! library reads, as `fi_info -e` lists them.

use std::ffi::c_int;
use std::ptr;

use fabric::{ErrorKind, Registry};

use crate::guard;
use crate::mem::{self, NoMem};
use crate::symver::symver;
use crate::types::{FI_PARAM_BOOL, FI_PARAM_INT, FI_PARAM_SIZE_T, FI_PARAM_STRING, FiParam};

/// The C type of a variable from the type name the registry gives it.
fn param_type(kind: &str) -> u32 {
    match kind {
        "Integer" => FI_PARAM_INT,
        "Boolean" => FI_PARAM_BOOL,
        "size_t" => FI_PARAM_SIZE_T,
        _ => FI_PARAM_STRING,
    }
}

/// Frees the array and its strings; the array ends at the first entry
/// whose name is NULL.
///
/// # Safety
///
/// `params` is null or an array from [`fill`], not used afterwards.
unsafe fn free_params(params: *mut FiParam) {
    if params.is_null() {
        return;
    }
    // SAFETY: per the contract, the array ends with a NULL name, and every
    // string in it came from the C allocator.
    unsafe {
        let mut p = params;
        while !(*p).name.is_null() {
            mem::free((*p).name.cast_mut());
            mem::free((*p).help_string.cast_mut());
            mem::free((*p).value.cast_mut());
            p = p.add(1);
        }
        mem::free(params);
    }
}

/// Fills a zeroed array of `vars.len() + 1` entries.
///
/// # Safety
///
/// `params` holds `vars.len() + 1` zeroed entries.
unsafe fn fill(params: *mut FiParam, vars: &[fabric::objects::EnvVar]) -> Result<(), NoMem> {
    for (i, var) in vars.iter().enumerate() {
        let value = std::env::var_os(var.name).map(|v| v.to_string_lossy().into_owned());
        // SAFETY: `i < vars.len()`, inside the array, per the contract. The
        // name is set last, so an entry whose other strings failed ends the
        // array for free_params and is freed with what it holds.
        unsafe {
            let entry = &mut *params.add(i);
            entry.r#type = param_type(var.kind);
            entry.help_string = mem::dup_str(var.help)?;
            entry.value = mem::dup_opt_str(value.as_deref())?;
            entry.name = match mem::dup_str(var.name) {
                Ok(name) => name,
                Err(e) => {
                    mem::free(entry.help_string.cast_mut());
                    mem::free(entry.value.cast_mut());
                    entry.help_string = ptr::null();
                    entry.value = ptr::null();
                    return Err(e);
                }
            };
        }
    }
    Ok(())
}

/// `int fi_getparams(struct fi_param **params, int *count)`
/// (`fi_getparams@@FABRIC_1.0`).
///
/// Every variable the registry and the compiled-in providers read, with
/// its type, help text and current value (NULL when unset). The array is
/// also terminated by an entry whose name is NULL; free it with
/// [`fi_freeparams`]. Returns 0, `-FI_EINVAL` for a NULL argument,
/// `-FI_ENOMEM`.
///
/// # Safety
///
/// `params` and `count` are null or writable.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_getparams"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_getparams(params: *mut *mut FiParam, count: *mut c_int) -> c_int {
    symver!("fi_getparams", "FABRIC_1.0");
    guard(ErrorKind::Other.code(), || {
        if params.is_null() || count.is_null() {
            return ErrorKind::Inval.code();
        }
        let vars = Registry::global().env_vars();
        let Ok(n) = c_int::try_from(vars.len()) else {
            return ErrorKind::Overflow.code();
        };
        let Ok(array) = mem::calloc_array::<FiParam>(vars.len() + 1) else {
            return ErrorKind::NoMem.code();
        };
        // SAFETY: `array` holds `vars.len() + 1` zeroed entries.
        if unsafe { fill(array, &vars) }.is_err() {
            // SAFETY: a partly filled array from fill, ending at a NULL name.
            unsafe { free_params(array) };
            return ErrorKind::NoMem.code();
        }
        // SAFETY: both are non-null and writable, per the contract.
        unsafe {
            *params = array;
            *count = n;
        }
        0
    })
}

/// `void fi_freeparams(struct fi_param *params)`
/// (`fi_freeparams@@FABRIC_1.0`).
///
/// Frees an array from [`fi_getparams`] with its strings; NULL is a no-op.
///
/// # Safety
///
/// `params` is null or an array from [`fi_getparams`], not used afterwards.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_freeparams"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_freeparams(params: *mut FiParam) {
    symver!("fi_freeparams", "FABRIC_1.0");
    // SAFETY: per the contract.
    guard((), || unsafe { free_params(params) });
}
