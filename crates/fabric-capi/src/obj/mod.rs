//! Objects opened from C: each is a `#[repr(C)]` structure whose first
//! field is libfabric 1.17's C descriptor (`struct fid_fabric`,
//! `struct fid_domain`, `struct fid_ep`, ...), so that the pointer the
//! application holds is the object, followed by the Rust object it wraps
//! (`Box<dyn Fabric>`, ...) and what the C layer keeps beside it.
//!
//! The headers' `static inline` functions call through the descriptor's
//! operation tables; this module's submodules hold those tables (statics of
//! `extern "C"` trampolines) and the objects:
//!
//! - [`fabric`]: `fi_fabric`, `fi_ops_fabric` (domain, eq_open).
//! - [`domain`]: `fi_ops_domain` (cq_open, av_open, endpoint), `fi_ops_mr`.
//! - [`mr`]: memory regions.
//! - [`ep`]: endpoints: `fi_ops` (close, bind, control), `fi_ops_ep`
//!   (cancel; `fi_setopt` / `fi_getopt` of `FI_OPT_MIN_MULTI_RECV` and
//!   `FI_OPT_CM_DATA_SIZE`), `fi_ops_cm`; [`passive`]: passive endpoints (`fi_listen`, `fi_reject`).
//! - [`msg`]: `fi_ops_msg` and `fi_ops_tagged`, the data path.
//! - [`rma`]: `fi_ops_rma` (read, write, writedata, inject_write);
//!   [`atomic`]: `fi_ops_atomic` (atomic, fetch, compare, valid).
//! - [`cq`], [`av`], [`eq`], [`cntr`]: completion queues, address vectors,
//!   event queues, counters.
//!
//! # Lifetimes
//!
//! Every object counts what depends on it ([`Refs`]): a domain its
//! endpoints, CQs, AVs and MRs; a CQ, AV or EQ the endpoints bound to it; a
//! fabric its domains and EQs. `fi_close` of an object still in use returns
//! `-FI_EBUSY` and leaves it open; closing an object releases what it
//! holds on its parent and on what it was bound to.
//!
//! # Recognising our objects
//!
//! A `fid` handed to a call (`fi_ep_bind`'s `bfid`, `fi_close`) is trusted
//! to be one only when its `ops` pointer is the `fi_ops` table of the class
//! its `fclass` names: a pointer this library did not hand out is refused
//! with `-FI_EINVAL` rather than read as one of ours.

pub mod atomic;
pub mod av;
pub mod cntr;
pub mod connreq;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod eq;
pub mod fabric;
mod ids;
pub mod mr;
pub mod msg;
pub mod passive;
pub mod rma;
pub mod srx;

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use ::fabric::{Error, ErrorKind};

/// `struct fi_ops`: the operations every object has.
#[repr(C)]
pub struct FiOps {
    /// `size_t size`.
    pub size: usize,
    /// `int (*close)(struct fid *fid)`.
    pub close: unsafe extern "C" fn(*mut Fid) -> c_int,
    /// `int (*bind)(struct fid *fid, struct fid *bfid, uint64_t flags)`.
    pub bind: unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int,
    /// `int (*control)(struct fid *fid, int command, void *arg)`.
    pub control: unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int,
    /// `int (*ops_open)(struct fid *fid, const char *name, uint64_t flags,
    /// void **ops, void *context)`.
    pub ops_open:
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int,
    /// `int (*tostr)(const struct fid *fid, char *buf, size_t len)`.
    pub tostr: unsafe extern "C" fn(*const Fid, *mut c_char, usize) -> c_int,
    /// `int (*ops_set)(struct fid *fid, const char *name, uint64_t flags,
    /// void *ops, void *context)`.
    pub ops_set:
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int,
}

/// `struct fid`: the header of every object.
#[repr(C)]
pub struct Fid {
    /// `size_t fclass`: an `FI_CLASS_*` value.
    pub fclass: usize,
    /// `void *context`: the application's context given at open.
    pub context: *mut c_void,
    /// `struct fi_ops *ops`.
    pub ops: *mut FiOps,
}

/// `enum fi_class` values this library hands out.
#[allow(missing_docs)]
pub mod class {
    pub const FABRIC: usize = 1;
    pub const DOMAIN: usize = 2;
    pub const EP: usize = 3;
    pub const SRX_CTX: usize = 6;
    pub const PEP: usize = 9;
    pub const AV: usize = 11;
    pub const MR: usize = 12;
    pub const EQ: usize = 13;
    pub const CQ: usize = 14;
    pub const CNTR: usize = 15;
}

/// `fi_control` commands (`FI_GETWAIT`, `FI_ENABLE`, ...).
#[allow(missing_docs)]
pub mod command {
    pub const GETWAIT: i32 = 5;
    pub const ENABLE: i32 = 6;
}

impl Fid {
    /// A header for an object of `fclass` with `ops`.
    pub(crate) fn new(fclass: usize, context: *mut c_void, ops: &'static FiOps) -> Fid {
        Fid {
            fclass,
            context,
            ops: std::ptr::from_ref(ops).cast_mut(),
        }
    }
}

/// The negative `FI_E*` code of an error, as `ssize_t`. `-FI_EAGAIN`
/// (an empty CQ, a full queue: what polling loops see most) is answered
/// inline; the others through the out-of-line [`Error::code`].
#[inline(always)]
pub(crate) fn sz(e: Error) -> isize {
    if e.kind() == ErrorKind::Again {
        EAGAIN as isize
    } else {
        code_of(e) as isize
    }
}

/// [`Error::code`], kept out of the hot paths' code.
#[cold]
#[inline(never)]
fn code_of(e: Error) -> c_int {
    e.code()
}

/// `-FI_EAGAIN`.
pub(crate) const EAGAIN: c_int = ErrorKind::Again.code();
/// `-FI_EINVAL`.
pub(crate) const EINVAL: c_int = ErrorKind::Inval.code();
/// `-FI_ENOSYS`.
pub(crate) const ENOSYS: c_int = ErrorKind::NoSys.code();
/// `-FI_EOTHER`: what a trampoline returns if the Rust code panicked.
pub(crate) const EOTHER: c_int = ErrorKind::Other.code();
/// `-FI_EBUSY`.
pub(crate) const EBUSY: c_int = ErrorKind::Busy.code();

/// How many objects depend on an object (children, bound endpoints), or
/// that it is being closed (`CLOSING`). A dependant counts before it
/// uses the object (`Refs::hold`), and a close succeeds only from 0
/// (`Refs::close`): a close racing with an open or a bind on another
/// thread either sees the dependant and answers `-FI_EBUSY`, or the other
/// call sees the close and answers `-FI_EINVAL`, never both going on.
#[derive(Debug, Default)]
pub struct Refs(AtomicUsize);

/// [`Refs`]' value once its object is being closed.
const CLOSING: usize = usize::MAX;

/// One dependant counted by [`Refs::hold`]: released when dropped (the
/// call that took it failed) unless [`kept`](Hold::keep).
#[must_use]
pub(crate) struct Hold<'a>(&'a Refs);

impl Hold<'_> {
    /// The dependant stays counted (until its own `release`).
    pub(crate) fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Refs {
    /// One more dependant, unless the object is being closed.
    pub(crate) fn hold(&self) -> Option<Hold<'_>> {
        let mut n = self.0.load(Ordering::Acquire);
        loop {
            if n == CLOSING {
                return None;
            }
            match self
                .0
                .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(Hold(self)),
                Err(now) => n = now,
            }
        }
    }
    /// One fewer.
    pub(crate) fn release(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
    /// Marks the object closing if nothing depends on it; `false` (it is
    /// busy) otherwise.
    pub(crate) fn close(&self) -> bool {
        self.0
            .compare_exchange(0, CLOSING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// How many closed objects keep their memory as tombstones (see
/// [`retire`]).
const TOMBSTONES: usize = 1024;

/// A closed object's memory, kept for a while (see [`retire`]).
struct Tomb(*mut u8, std::alloc::Layout);

// SAFETY: only an address and a layout, used to free the memory once.
unsafe impl Send for Tomb {}

static TOMBS: std::sync::Mutex<std::collections::VecDeque<Tomb>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// The `fi_ops` of a closed object: `fi_close` again is `-FI_EINVAL`, and
/// so is every other call (its class matches none of ours, so each
/// object's own tables refuse it too).
static CLOSED_OPS: FiOps = fi_ops!(closed_close, closed_bind, closed_control);

unsafe extern "C" fn closed_close(_: *mut Fid) -> c_int {
    EINVAL
}

unsafe extern "C" fn closed_bind(_: *mut Fid, _: *mut Fid, _: u64) -> c_int {
    EINVAL
}

unsafe extern "C" fn closed_control(_: *mut Fid, _: c_int, _: *mut c_void) -> c_int {
    EINVAL
}

/// Ends object `fid` (a `T` made by `Box::into_raw`): its Rust part is
/// dropped now, but its memory stays allocated for the next
/// [`TOMBSTONES`] closes, with a header that names no class and the
/// [`CLOSED_OPS`] table. A C program that uses the pointer again soon
/// after `fi_close` (a second close, a read of a closed CQ) gets
/// `-FI_EINVAL`, not a use of freed memory, and the address is not handed
/// out again meanwhile. (libfabric frees at once; any use long after the
/// close is the program's error there and here.)
///
/// # Safety
///
/// `fid` is the header of a live `T` from `Box::into_raw`, not used by
/// this library after the call.
pub(crate) unsafe fn retire<T>(fid: *mut Fid) {
    let obj = fid.cast::<T>();
    // SAFETY: a live T from Box::into_raw, per the contract; its memory
    // stays allocated, and only its header is written afterwards.
    unsafe {
        std::ptr::drop_in_place(obj);
        fid.write(Fid {
            fclass: 0,
            context: std::ptr::null_mut(),
            ops: std::ptr::from_ref(&CLOSED_OPS).cast_mut(),
        });
    }
    let old = {
        let mut tombs = TOMBS.lock().unwrap_or_else(|p| p.into_inner());
        tombs.push_back(Tomb(obj.cast(), std::alloc::Layout::new::<T>()));
        (tombs.len() > TOMBSTONES)
            .then(|| tombs.pop_front())
            .flatten()
    };
    if let Some(Tomb(p, layout)) = old {
        // SAFETY: allocated by Box for a value of this layout, dropped
        // already, and freed only here, once.
        unsafe { std::alloc::dealloc(p, layout) };
    }
}

/// `fi_close` of an object that others may depend on (`refs`) and that
/// depends on a parent (`parent`): `-FI_EBUSY` while something still
/// depends on it, else the object is ended ([`retire`]) and then its
/// parent released.
///
/// # Safety
///
/// `fid` names an object made by `Box::into_raw` of a `T` and not closed
/// yet, whose dependants `refs` counts; `parent` points to the live
/// parent's count, which outlives it.
pub(crate) unsafe fn close_child<T>(fid: *mut Fid, refs: &Refs, parent: *const Refs) -> c_int {
    if !refs.close() {
        return EBUSY;
    }
    // SAFETY: ours, from Box::into_raw; closed once (per the contract).
    unsafe { retire::<T>(fid) };
    // SAFETY: the parent outlives its children (its refs count this one,
    // released only now that the child is gone).
    unsafe { (*parent).release() };
    0
}

/// Casts a `fid` pointer to the object of `T` after checking that it is
/// one: non-null, of `fclass`, with the `ops` table `ops`.
///
/// # Safety
///
/// `fid` is null or points to a readable `struct fid`; when the checks pass
/// it is the header of a live `T` (this library's objects of that class
/// start with their header).
#[inline(always)]
pub(crate) unsafe fn object<'a, T>(
    fid: *const Fid,
    fclass: usize,
    ops: &'static FiOps,
) -> Option<&'a T> {
    // SAFETY: null or readable, per the contract.
    let f = unsafe { fid.as_ref() }?;
    (f.fclass == fclass && std::ptr::eq(f.ops, ops)).then(|| {
        // SAFETY: the header is ours (same class and table), so it starts
        // a live T.
        unsafe { &*fid.cast::<T>() }
    })
}

/// Writes `value` to `out` if it is not null.
///
/// # Safety
///
/// `out` is null or writable.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-null and writable, per the contract.
        unsafe { out.write(value) };
    }
}

// The `fi_ops` slots objects do not support.

/// `bind` of an object that binds nothing.
pub(crate) unsafe extern "C" fn no_bind(_: *mut Fid, _: *mut Fid, _: u64) -> c_int {
    ENOSYS
}
/// `control` of an object without commands.
pub(crate) unsafe extern "C" fn no_control(_: *mut Fid, _: c_int, _: *mut c_void) -> c_int {
    ENOSYS
}
/// `ops_open`: no extension interfaces.
pub(crate) unsafe extern "C" fn no_ops_open(
    _: *mut Fid,
    _: *const c_char,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}
/// `tostr`.
pub(crate) unsafe extern "C" fn no_tostr(_: *const Fid, _: *mut c_char, _: usize) -> c_int {
    ENOSYS
}
/// `ops_set`.
pub(crate) unsafe extern "C" fn no_ops_set(
    _: *mut Fid,
    _: *const c_char,
    _: u64,
    _: *mut c_void,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}

/// An `fi_ops` table with `close` (and optionally `bind` / `control`).
macro_rules! fi_ops {
    ($close:expr) => {
        $crate::obj::fi_ops!($close, $crate::obj::no_bind, $crate::obj::no_control)
    };
    ($close:expr, $bind:expr, $control:expr) => {
        $crate::obj::FiOps {
            size: ::std::mem::size_of::<$crate::obj::FiOps>(),
            close: $close,
            bind: $bind,
            control: $control,
            ops_open: $crate::obj::no_ops_open,
            tostr: $crate::obj::no_tostr,
            ops_set: $crate::obj::no_ops_set,
        }
    };
}
pub(crate) use fi_ops;

/// The body of an `ssize_t` trampoline: runs it under the panic guard.
#[inline(always)]
pub(crate) fn guard_sz(body: impl FnOnce() -> isize) -> isize {
    crate::guard(EOTHER as isize, body)
}

/// The body of an `int` trampoline: runs it under the panic guard.
#[inline(always)]
pub(crate) fn guard_int(body: impl FnOnce() -> c_int) -> c_int {
    crate::guard(EOTHER, body)
}
