//! The `handle` of a connection request (`FI_CONNREQ`): a `struct fid` of
//! class `FI_CLASS_CONNREQ` carrying the provider's handle, as libfabric's
//! providers give, so that C code may read `info->handle->fclass` and
//! `fi_tostr` may print the `fi_info` (a provider's handle is a number,
//! not an address).
//!
//! A request lives until it is used, by `fi_endpoint` (to accept it) or
//! `fi_reject`, or until the event queue that reported it closes; then it
//! becomes a tombstone (see `obj::retire`), so that an
//! `fi_info` still naming it reads a closed object, not freed memory.
//! `fi_freeinfo` and `fi_dupinfo` leave `handle` alone, as they do every
//! `fid` an `fi_info` names.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::mem::offset_of;
use std::ptr;
use std::sync::{Mutex, MutexGuard};

use ::fabric::Handle;

use super::{FiOps, Fid};

/// A connection request's `fid` and the provider's handle behind it.
#[repr(C)]
pub struct ConnReq {
    fid: Fid,
    handle: Handle,
}

// SAFETY: its pointers are a null context and a static table; the
// provider's handle is a number.
unsafe impl Send for ConnReq {}

/// `enum fi_class`'s `FI_CLASS_CONNREQ`.
const CLASS_CONNREQ: usize = 18;

/// Its operations: `fi_close` does nothing (see the module docs), and the
/// table is too short to hold `tostr`, so that `fi_tostr` prints its
/// address.
static OPS: FiOps = FiOps {
    size: offset_of!(FiOps, tostr),
    close,
    bind: super::no_bind,
    control: super::no_control,
    ops_open: super::no_ops_open,
    tostr: super::no_tostr,
    ops_set: super::no_ops_set,
};

unsafe extern "C" fn close(_: *mut Fid) -> c_int {
    0
}

/// The live requests, by the address of their `fid`: a `handle` from C is
/// looked up here before it is read, so that any other pointer is passed
/// on as it is, never read.
static LIVE: Mutex<BTreeMap<usize, Box<ConnReq>>> = Mutex::new(BTreeMap::new());

fn live() -> MutexGuard<'static, BTreeMap<usize, Box<ConnReq>>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request for the provider's `handle`; returns its `fid` (the key the
/// reporting event queue keeps, to end it when it closes).
pub(crate) fn new(handle: Handle) -> *mut Fid {
    let mut c = Box::new(ConnReq {
        fid: Fid::new(CLASS_CONNREQ, ptr::null_mut(), &OPS),
        handle,
    });
    let fid = ptr::from_mut(&mut c.fid);
    live().insert(fid.addr(), c);
    fid
}

/// The provider's handle behind `fid`, when `fid` is a live connection
/// request of this library; `None` for any other pointer (not read).
pub(crate) fn handle_of(fid: *const Fid) -> Option<Handle> {
    live().get(&fid.addr()).map(|c| c.handle)
}

/// Ends request `fid` if it is live (it was accepted, rejected, or its
/// event queue closed): it becomes a tombstone.
pub(crate) fn end(fid: *const Fid) {
    let Some(c) = live().remove(&fid.addr()) else {
        return;
    };
    // SAFETY: a ConnReq from Box, whose first field is its fid, now out of
    // the set and used nowhere else.
    unsafe { super::retire::<ConnReq>(Box::into_raw(c).cast()) };
}
