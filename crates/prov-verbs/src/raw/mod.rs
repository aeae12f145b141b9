//! The provider's unsafe gateway: RAII wrappers over the rdma-core objects
//! it uses: device contexts and protection domains (`device`), memory
//! regions, registered buffer pools, completion channels, completion
//! queues and queue pairs (`verbs`), rdma_cm event channels and ids
//! (`cm`), node / service resolution (`addrinfo`); typed work requests
//! and work completions (`wr`); and callers' buffers, vouched for once by
//! the zero-copy operations (`mem`).
//!
//! This is the only module of the provider that imports [`fabric_sys`] or
//! holds `unsafe` code (the crate root denies it elsewhere; the `unsafe`
//! trait methods of the object traits, whose contract is the caller's
//! promise about its buffers, only hand their buffers to [`mem`]).
//! Everything above works with these types. Each type owns one object and
//! releases it when dropped; the objects an object depends on (the PD of a
//! MR, the CQs of a QP) are kept alive by the types that hold them (`Arc`s
//! in the layers above). Posting goes through the owner of the queue pair
//! ([`cm::CmId`], [`verbs::UdQp`], [`verbs::Srq`]), so a request cannot
//! reach a destroyed queue pair.

pub(crate) mod addrinfo;
pub(crate) mod cm;
pub(crate) mod device;
pub(crate) mod mem;
pub(crate) mod verbs;
pub(crate) mod wr;

/// The Q_Key of rdma_cm's UDP port space (`RDMA_UDP_QKEY`).
pub(crate) const UDP_QKEY: u32 = fabric_sys::ffi::RDMA_UDP_QKEY;

use fabric_core::{Error, ErrorKind, Result};
use fabric_sys::ffi::RdmaCore;

/// rdma-core's function table, or `NoDev` saying why it is missing.
pub(crate) fn lib() -> Result<&'static RdmaCore> {
    fabric_sys::rdma_core().map_err(|e| Error::new(ErrorKind::NoDev, e.to_string()))
}

/// An error from the calling thread's errno, after a call that returned
/// -1 or NULL.
pub(crate) fn last_err(what: &str) -> Error {
    from_errno(
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        what,
    )
}

/// An error from an errno value (as the posting calls return it).
pub(crate) fn from_errno(errno: i32, what: &str) -> Error {
    let kind = ErrorKind::from_errno(errno).unwrap_or(ErrorKind::Other);
    Error::new(
        kind,
        format!(
            "verbs: {what}: {}",
            std::io::Error::from_raw_os_error(errno)
        ),
    )
}

/// A raw pointer that may cross threads: rdma-core objects are safe to use
/// from any thread (the library and its drivers lock internally where they
/// need to), so moving the handle is sound; the wrappers decide who may use
/// it when.
pub(crate) struct Ptr<T>(pub(crate) *mut T);

impl<T> std::fmt::Debug for Ptr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:p}", self.0)
    }
}

impl<T> Clone for Ptr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ptr<T> {}

// SAFETY: see the type's documentation: rdma-core objects are thread safe.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}
