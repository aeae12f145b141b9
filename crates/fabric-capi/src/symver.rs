//! Binds each exported function to its libfabric 1.17 version node.
//!
//! With `cfg(fabric_symver)` (set by build.rs on Linux when lld links the
//! cdylib), each function is defined under an internal name
//! (`fabric_capi_fi_getinfo`) and a `.symver` directive adds the C name
//! with its default version (`fi_getinfo@@FABRIC_1.3`). The directive must
//! be assembled in the object that defines the function, so it sits in the
//! function's own body ([`symver!`], an `asm!` that emits no instruction;
//! the functions are `#[inline(never)]` so that it appears exactly once).
//! In the cdylib the nodes come from `libfabric.map`; in a static link the
//! versioned name is simply the C name. Keep the `export_name`s, the
//! `symver!` calls, [`EXPORTS`] and `libfabric.map` in step
//! (`tests/symbols.rs` checks the built library against [`EXPORTS`]).

/// Gives the function whose body starts with it the C name `$name` with
/// default version `$node`; its Rust definition must carry
/// `export_name = "fabric_capi_<name>"` under `cfg(fabric_symver)`.
macro_rules! symver {
    ($name:literal, $node:literal) => {
        #[cfg(fabric_symver)]
        // SAFETY: an assembler directive that emits no instruction and
        // touches no register or memory.
        unsafe {
            ::std::arch::asm!(
                concat!(".symver fabric_capi_", $name, ", ", $name, "@@", $node),
                options(nomem, nostack, preserves_flags)
            )
        };
    };
}
pub(crate) use symver;

/// `(symbol, default version)` of every function the library exports, as
/// `objdump -T` shows them; tests compare the built library with it.
pub const EXPORTS: &[(&str, &str)] = &[
    ("fi_getparams", "FABRIC_1.0"),
    ("fi_freeparams", "FABRIC_1.0"),
    ("fi_strerror", "FABRIC_1.0"),
    ("fi_tostr", "FABRIC_1.0"),
    ("fi_version", "FABRIC_1.0"),
    ("fi_fabric", "FABRIC_1.1"),
    ("fi_getinfo", "FABRIC_1.3"),
    ("fi_freeinfo", "FABRIC_1.3"),
    ("fi_dupinfo", "FABRIC_1.3"),
    ("fi_tostr_r", "FABRIC_1.4"),
    ("fi_open", "FABRIC_1.5"),
];
