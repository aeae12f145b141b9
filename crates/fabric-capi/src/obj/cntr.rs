//! Counters (`struct fid_cntr`, `struct fi_ops_cntr`): `fi_cntr_open`,
//! `fi_cntr_read` / `readerr` / `add` / `set` / `adderr` / `seterr` /
//! `wait`, bound to endpoints with `fi_ep_bind` and the events to count.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::time::Duration;

use fabric::objects::{CntrAttr, Counter, WaitObj};

use super::domain::{self, DomainObj, FidDomain};
use super::{EINVAL, FiOps, Fid, Refs, class, close_child, fi_ops, guard_int, object, put};

/// `struct fi_cntr_attr`.
#[repr(C)]
pub struct FiCntrAttr {
    /// `enum fi_cntr_events events`.
    pub events: u32,
    /// `enum fi_wait_obj wait_obj`.
    pub wait_obj: u32,
    /// `struct fid_wait *wait_set`.
    pub wait_set: *mut c_void,
    /// `uint64_t flags`.
    pub flags: u64,
}

/// `struct fi_ops_cntr`.
#[repr(C)]
pub struct FiOpsCntr {
    /// `size_t size`.
    pub size: usize,
    /// `read`.
    pub read: unsafe extern "C" fn(*mut FidCntr) -> u64,
    /// `readerr`.
    pub readerr: unsafe extern "C" fn(*mut FidCntr) -> u64,
    /// `add`.
    pub add: unsafe extern "C" fn(*mut FidCntr, u64) -> c_int,
    /// `set`.
    pub set: unsafe extern "C" fn(*mut FidCntr, u64) -> c_int,
    /// `wait`.
    pub wait: unsafe extern "C" fn(*mut FidCntr, u64, c_int) -> c_int,
    /// `adderr`.
    pub adderr: unsafe extern "C" fn(*mut FidCntr, u64) -> c_int,
    /// `seterr`.
    pub seterr: unsafe extern "C" fn(*mut FidCntr, u64) -> c_int,
}

/// `struct fid_cntr`.
#[repr(C)]
pub struct FidCntr {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `struct fi_ops_cntr *ops`.
    pub ops: *mut FiOpsCntr,
}

/// A counter opened from C.
#[repr(C)]
pub struct CntrObj {
    /// The C descriptor.
    pub c: FidCntr,
    /// The provider's counter.
    pub inner: Box<dyn Counter>,
    /// The domain (which counts it).
    pub domain: *const DomainObj,
    /// Endpoints bound to it.
    pub refs: Refs,
}

static OPS: FiOps = fi_ops!(close, super::no_bind, control);

static CNTR_OPS: FiOpsCntr = FiOpsCntr {
    size: size_of::<FiOpsCntr>(),
    read,
    readerr,
    add,
    set,
    wait,
    adderr,
    seterr,
};

/// The counter behind a `fid` pointer, if it is one of ours.
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
pub(crate) unsafe fn get<'a, T>(p: *const T) -> Option<&'a CntrObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::CNTR, &OPS) }
}

/// `fi_ops_domain.cntr_open` (`fi_cntr_open`).
pub(crate) unsafe extern "C" fn open(
    dom: *mut FidDomain,
    attr: *mut FiCntrAttr,
    out: *mut *mut FidCntr,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        // SAFETY: null or writable.
        unsafe { put(out, ptr::null_mut()) };
        // SAFETY: the application passes a domain from fi_domain.
        let Some(d) = (unsafe { domain::get(dom) }) else {
            return EINVAL;
        };
        // Counted before it is used: a close on another thread waits.
        let Some(hold) = d.refs.hold() else {
            return EINVAL;
        };
        if out.is_null() {
            return EINVAL;
        }
        // SAFETY: null (defaults) or a valid fi_cntr_attr.
        let wait_obj = match unsafe { attr.as_ref() } {
            None => WaitObj::Unspec,
            Some(a) if a.events != 0 => return EINVAL,
            Some(a) => match WaitObj::try_from(a.wait_obj) {
                Ok(w) => w,
                Err(_) => return EINVAL,
            },
        };
        let inner = match d.inner.cntr(&CntrAttr { wait_obj }) {
            Ok(c) => c,
            Err(e) => return e.code(),
        };
        hold.keep();
        let obj = Box::new(CntrObj {
            c: FidCntr {
                fid: Fid::new(class::CNTR, context, &OPS),
                ops: ptr::from_ref(&CNTR_OPS).cast_mut(),
            },
            inner,
            domain: d,
            refs: Refs::default(),
        });
        // SAFETY: non-null and writable.
        unsafe { *out = Box::into_raw(obj).cast() };
        0
    })
}

/// `fi_control` on a counter: `FI_GETWAIT` writes the wait fd (an
/// `int`), `-FI_ENODATA` when the counter has none (FI_WAIT_NONE).
unsafe extern "C" fn control(fid: *mut Fid, cmd: c_int, arg: *mut c_void) -> c_int {
    guard_int(|| {
        // SAFETY: fi_control's argument is a fid.
        let Some(c) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        match cmd {
            super::command::GETWAIT if !arg.is_null() => match c.inner.wait_fd() {
                Some(fd) => {
                    // SAFETY: FI_GETWAIT with FI_WAIT_FD takes an int *.
                    unsafe { *arg.cast::<c_int>() = std::os::fd::AsRawFd::as_raw_fd(&fd) };
                    0
                }
                None => fabric::ErrorKind::NoData.code(),
            },
            _ => super::ENOSYS,
        }
    })
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(c) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        // SAFETY: `c` is what `fid` names, from `open`; its domain is live.
        unsafe { close_child::<CntrObj>(fid, &c.refs, &(*c.domain).refs) }
    })
}

/// Runs `f` on the counter behind `c`, or returns `bad`.
///
/// # Safety
///
/// `c` null or a readable fid.
unsafe fn with<R>(c: *mut FidCntr, bad: R, f: impl FnOnce(&CntrObj) -> R) -> R {
    // SAFETY: per the contract.
    match unsafe { get(c) } {
        Some(o) => f(o),
        None => bad,
    }
}

fn code(r: fabric::Result<()>) -> c_int {
    r.map_or_else(|e| e.code(), |()| 0)
}

unsafe extern "C" fn read(c: *mut FidCntr) -> u64 {
    // SAFETY: fi_cntr_read's argument.
    crate::guard(0, || unsafe { with(c, 0, |o| o.inner.read()) })
}

unsafe extern "C" fn readerr(c: *mut FidCntr) -> u64 {
    // SAFETY: fi_cntr_readerr's argument.
    crate::guard(0, || unsafe { with(c, 0, |o| o.inner.readerr()) })
}

unsafe extern "C" fn add(c: *mut FidCntr, v: u64) -> c_int {
    // SAFETY: fi_cntr_add's arguments.
    guard_int(|| unsafe { with(c, EINVAL, |o| code(o.inner.add(v))) })
}

unsafe extern "C" fn set(c: *mut FidCntr, v: u64) -> c_int {
    // SAFETY: fi_cntr_set's arguments.
    guard_int(|| unsafe { with(c, EINVAL, |o| code(o.inner.set(v))) })
}

unsafe extern "C" fn adderr(c: *mut FidCntr, v: u64) -> c_int {
    // SAFETY: fi_cntr_adderr's arguments.
    guard_int(|| unsafe { with(c, EINVAL, |o| code(o.inner.adderr(v))) })
}

unsafe extern "C" fn seterr(c: *mut FidCntr, v: u64) -> c_int {
    // SAFETY: fi_cntr_seterr's arguments.
    guard_int(|| unsafe { with(c, EINVAL, |o| code(o.inner.seterr(v))) })
}

unsafe extern "C" fn wait(c: *mut FidCntr, threshold: u64, ms: c_int) -> c_int {
    let timeout = u64::try_from(ms).ok().map(Duration::from_millis);
    // SAFETY: fi_cntr_wait's arguments.
    guard_int(|| unsafe { with(c, EINVAL, |o| code(o.inner.wait(threshold, timeout))) })
}
