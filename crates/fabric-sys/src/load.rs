//! Loading rdma-core at run time.

use std::fmt;
use std::sync::OnceLock;

use crate::ffi::RdmaCore;

/// The library opened: librdmacm, whose dependency libibverbs provides the
/// `ibv_*` symbols (`dlsym` on a handle searches the library's dependencies
/// too).
pub const LIBRARY: &str = "librdmacm.so.1";

/// Why rdma-core could not be used: the library is missing, or lacks a
/// function (an rdma-core older than 44).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    message: String,
}

impl LoadError {
    /// The loader's message (from `dlerror`).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot load rdma-core ({LIBRARY}): {}", self.message)
    }
}

impl std::error::Error for LoadError {}

/// Opens `name` and resolves every function of the table; not cached (see
/// [`rdma_core`] for the process-wide table).
pub fn load_from(name: &str) -> Result<RdmaCore, LoadError> {
    // SAFETY: opening librdmacm / libibverbs runs their ELF initialisers,
    // which only set up library-internal state (no threads, no signal
    // handlers). The table's signatures are the ones bindgen read from the
    // rdma-core headers the bindings were generated from, and rdma-core
    // keeps those exported symbols ABI-stable (symbol versioning).
    unsafe { RdmaCore::new(name) }.map_err(|e| LoadError {
        message: e.to_string(),
    })
}

/// rdma-core's function table, loaded once per process on first use and
/// never unloaded (so the returned reference is `'static`). The error is
/// remembered too: a missing library is looked for once.
pub fn rdma_core() -> Result<&'static RdmaCore, LoadError> {
    static LIB: OnceLock<Result<RdmaCore, LoadError>> = OnceLock::new();
    LIB.get_or_init(|| load_from(LIBRARY))
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_not_a_crash() {
        let e = match load_from("libfabric-sys-no-such-library.so.9") {
            Ok(_) => panic!("loaded a library that does not exist"),
            Err(e) => e,
        };
        assert!(e.to_string().contains("cannot load rdma-core"), "{e}");
    }

    #[test]
    fn the_table_loads_where_rdma_core_is_installed() {
        match rdma_core() {
            Ok(lib) => {
                let mut n = -1;
                // SAFETY: a valid out-pointer; the list is freed at once.
                let list = unsafe { lib.ibv_get_device_list(&mut n) };
                assert!(n >= 0);
                if !list.is_null() {
                    // SAFETY: the list came from ibv_get_device_list.
                    unsafe { lib.ibv_free_device_list(list) };
                }
            }
            Err(e) => eprintln!("skipped: {e}"),
        }
    }
}
