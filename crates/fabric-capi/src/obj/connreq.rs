//! The `handle` of a connection request (`FI_CONNREQ`): a `struct fid` of
//! class `FI_CLASS_CONNREQ` carrying the provider's handle, as libfabric's
//! providers give, so that C code may read `info->handle->fclass` and
//! `fi_tostr` may print the `fi_info` (a provider's handle is a number,
//! not an address).
//!
//! The event queue that reported the request owns it until the queue is
//! closed; `fi_freeinfo` and `fi_dupinfo` leave `handle` alone, as they do
//! every `fid` an `fi_info` names.

use std::collections::BTreeSet;
use std::ffi::c_int;
use std::mem::offset_of;
use std::ptr;
use std::sync::Mutex;

use ::fabric::Handle;

use super::{FiOps, Fid};

/// A connection request's `fid` and the provider's handle behind it.
#[repr(C)]
pub struct ConnReq {
    fid: Fid,
    handle: Handle,
}

/// `enum fi_class`'s `FI_CLASS_CONNREQ`.
const CLASS_CONNREQ: usize = 18;

/// Its operations: nothing to close (the event queue frees it), and a
/// table too short to hold `tostr`, so that `fi_tostr` prints its address.
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

/// The addresses of the live requests: a `handle` from C is looked up
/// here before it is read, so that any other pointer is passed on as it
/// is, never read.
static LIVE: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn live() -> std::sync::MutexGuard<'static, BTreeSet<usize>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

impl ConnReq {
    /// A request for the provider's `handle`.
    pub(crate) fn new(handle: Handle) -> Box<ConnReq> {
        let c = Box::new(ConnReq {
            fid: Fid::new(CLASS_CONNREQ, ptr::null_mut(), &OPS),
            handle,
        });
        live().insert(ptr::from_ref(&c.fid).addr());
        c
    }

    /// Its C `fid`.
    pub(crate) fn fid(&mut self) -> *mut Fid {
        ptr::from_mut(&mut self.fid)
    }
}

impl Drop for ConnReq {
    fn drop(&mut self) {
        live().remove(&ptr::from_ref(&self.fid).addr());
    }
}

/// The provider's handle behind `fid`, when `fid` is a live connection
/// request of this library; `None` for any other pointer (not read).
pub(crate) fn handle_of(fid: *const Fid) -> Option<Handle> {
    let live = live();
    if !live.contains(&fid.addr()) {
        return None;
    }
    // SAFETY: a live ConnReq (it leaves the set before it is freed, and
    // the set's lock is held), whose first field is `fid`.
    Some(unsafe { (*fid.cast::<ConnReq>()).handle })
}
