//! Event queues (`struct fid_eq`, `struct fi_ops_eq`).
//!
//! Events are written as `struct fi_eq_entry` (MR / AV completions) or
//! `struct fi_eq_cm_entry` (connection events: the `fid` of the endpoint
//! concerned, for `FI_CONNREQ` a fresh `fi_info` the application frees,
//! and the peer's private data after it, as far as `len` allows).
//! Events the application writes with `fi_eq_write` come back with their
//! number and bytes (truncated to the reader's `len`, as libfabric does).
//! `FI_PEEK` shows the next event without taking it (a peeked connection
//! request carries the same `fi_info` when it is read). A buffer too small
//! for an event's entry gets `-FI_ETOOSMALL` and the event stays next:
//! fi_eq(3) does not say, and libfabric 1.17 truncates and drops it.

use std::ffi::{CString, c_char, c_int, c_void};
use std::ptr;
use std::sync::Mutex;
use std::time::Duration;

use fabric::ErrorKind;
use fabric::objects::{EqAttr, EqEvent, EventQueue, WaitObj};

use super::connreq;
use super::fabric::{self as fab, FabricObj, FidFabric};
use super::{
    EINVAL, ENOSYS, FiOps, Fid, Refs, class, close_child, fi_ops, guard_int, guard_sz, object, put,
    sz,
};
use crate::convert;

/// `struct fi_eq_attr`.
#[repr(C)]
pub struct FiEqAttr {
    /// `size_t size`.
    pub size: usize,
    /// `uint64_t flags`.
    pub flags: u64,
    /// `enum fi_wait_obj wait_obj`.
    pub wait_obj: u32,
    /// `int signaling_vector`.
    pub signaling_vector: c_int,
    /// `struct fid_wait *wait_set`.
    pub wait_set: *mut c_void,
}

/// `struct fi_eq_entry`.
#[repr(C)]
pub struct FiEqEntry {
    /// `fid_t fid`.
    pub fid: *mut Fid,
    /// `void *context`.
    pub context: *mut c_void,
    /// `uint64_t data`.
    pub data: u64,
}

/// `struct fi_eq_cm_entry` (without its flexible `data` member).
#[repr(C)]
pub struct FiEqCmEntry {
    /// `fid_t fid`.
    pub fid: *mut Fid,
    /// `struct fi_info *info`.
    pub info: *mut crate::types::FiInfo,
}

/// `struct fi_eq_err_entry`.
#[repr(C)]
pub struct FiEqErrEntry {
    /// `fid_t fid`.
    pub fid: *mut Fid,
    /// `void *context`.
    pub context: *mut c_void,
    /// `uint64_t data`.
    pub data: u64,
    /// `int err`.
    pub err: c_int,
    /// `int prov_errno`.
    pub prov_errno: c_int,
    /// `void *err_data`.
    pub err_data: *mut c_void,
    /// `size_t err_data_size`.
    pub err_data_size: usize,
}

/// `struct fi_ops_eq`.
#[repr(C)]
pub struct FiOpsEq {
    /// `size_t size`.
    pub size: usize,
    /// `read`.
    pub read: unsafe extern "C" fn(*mut FidEq, *mut u32, *mut c_void, usize, u64) -> isize,
    /// `readerr`.
    pub readerr: unsafe extern "C" fn(*mut FidEq, *mut FiEqErrEntry, u64) -> isize,
    /// `write`.
    pub write: unsafe extern "C" fn(*mut FidEq, u32, *const c_void, usize, u64) -> isize,
    /// `sread`.
    pub sread: unsafe extern "C" fn(*mut FidEq, *mut u32, *mut c_void, usize, c_int, u64) -> isize,
    /// `strerror`.
    pub strerror:
        unsafe extern "C" fn(*mut FidEq, c_int, *const c_void, *mut c_char, usize) -> *const c_char,
}

/// `struct fid_eq`.
#[repr(C)]
pub struct FidEq {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `struct fi_ops_eq *ops`.
    pub ops: *mut FiOpsEq,
}

/// An event queue opened from C.
#[repr(C)]
pub struct EqObj {
    /// The C descriptor.
    pub c: FidEq,
    /// The provider's queue.
    pub inner: Box<dyn EventQueue>,
    /// The fabric (which counts it).
    pub fabric: *const FabricObj,
    /// Endpoints bound to it.
    pub refs: Refs,
    /// The text of the last error event read.
    pub err_text: Mutex<CString>,
    /// The data of the last error event read, handed out as `err_data`
    /// when the application gives no buffer (or predates 1.5).
    pub err_data: Mutex<Vec<u8>>,
    /// The fabric's API version (`fi_eq_err_entry` has `err_data_size`
    /// from 1.5 on).
    pub api_version: u32,
    /// Events taken from `inner` but not yet handed over (peeked, or read
    /// into a too small buffer), oldest first.
    pub held: Mutex<std::collections::VecDeque<Held>>,
    /// The `handle`s of the connection requests it reported, ended with
    /// it (see [`connreq`]).
    pub connreqs: Mutex<Vec<*mut Fid>>,
}

static OPS: FiOps = fi_ops!(close, super::no_bind, control);

static EQ_OPS: FiOpsEq = FiOpsEq {
    size: size_of::<FiOpsEq>(),
    read,
    readerr,
    write,
    sread,
    strerror,
};

/// `FI_CONNREQ`, `FI_CONNECTED`, ... (`enum` of `fi_eq.h`).
mod event {
    pub(super) const CONNREQ: u32 = 1;
    pub(super) const CONNECTED: u32 = 2;
    pub(super) const SHUTDOWN: u32 = 3;
    pub(super) const MR_COMPLETE: u32 = 4;
    pub(super) const AV_COMPLETE: u32 = 5;
}

/// The EQ behind a `fid` pointer, if it is one of ours.
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
pub(crate) unsafe fn get<'a, T>(p: *const T) -> Option<&'a EqObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::EQ, &OPS) }
}

/// `fi_ops_fabric.eq_open` (`fi_eq_open`).
pub(crate) unsafe extern "C" fn open(
    fabric: *mut FidFabric,
    attr: *mut FiEqAttr,
    out: *mut *mut FidEq,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        // SAFETY: null or writable.
        unsafe { put(out, ptr::null_mut()) };
        // SAFETY: the application passes a fabric from fi_fabric.
        let Some(f) = (unsafe { fab::get(fabric) }) else {
            return EINVAL;
        };
        // Counted before it is used: a close on another thread waits.
        let Some(hold) = f.refs.hold() else {
            return EINVAL;
        };
        // SAFETY: null or a valid fi_eq_attr.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return EINVAL;
        };
        if out.is_null() {
            return EINVAL;
        }
        let Ok(wait_obj) = WaitObj::try_from(a.wait_obj) else {
            return EINVAL;
        };
        let inner = match f.inner.eq(&EqAttr {
            size: a.size,
            wait_obj,
        }) {
            Ok(e) => e,
            Err(e) => return e.code(),
        };
        hold.keep();
        let obj = Box::new(EqObj {
            c: FidEq {
                fid: Fid::new(class::EQ, context, &OPS),
                ops: ptr::from_ref(&EQ_OPS).cast_mut(),
            },
            inner,
            fabric: f,
            refs: Refs::default(),
            err_text: Mutex::new(CString::default()),
            err_data: Mutex::new(Vec::new()),
            api_version: f.c.api_version,
            held: Mutex::new(std::collections::VecDeque::new()),
            connreqs: Mutex::new(Vec::new()),
        });
        // SAFETY: non-null and writable.
        unsafe { *out = Box::into_raw(obj).cast() };
        0
    })
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(e) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        // SAFETY: `e` is what `fid` names, from `open`; its fabric is live.
        unsafe { close_child::<EqObj>(fid, &e.refs, &(*e.fabric).refs) }
    })
}

unsafe extern "C" fn control(fid: *mut Fid, cmd: c_int, arg: *mut c_void) -> c_int {
    guard_int(|| {
        // SAFETY: fi_control's argument is a fid.
        let Some(q) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        match cmd {
            super::command::GETWAIT if !arg.is_null() => match q.inner.wait_fd() {
                Some(fd) => {
                    // SAFETY: FI_GETWAIT with FI_WAIT_FD takes an int *.
                    unsafe { *arg.cast::<c_int>() = std::os::fd::AsRawFd::as_raw_fd(&fd) };
                    0
                }
                None => ErrorKind::NoData.code(),
            },
            _ => ENOSYS,
        }
    })
}

/// An event taken from the provider and rendered in its C layout, kept
/// until a read without `FI_PEEK` hands it over: a peeked event, or one
/// whose reader's buffer was too small, is the next one read.
pub struct Held {
    /// The event number (`FI_CONNREQ`, ...).
    event: u32,
    /// The bytes a reader gets (as many as fit).
    bytes: Vec<u8>,
    /// The smallest buffer that takes the event (`-FI_ETOOSMALL` below).
    min: usize,
    /// A connection request's `fi_info`, freed here unless handed over.
    info: *mut crate::types::FiInfo,
}

impl Drop for EqObj {
    fn drop(&mut self) {
        // The requests it reported and nobody used end with it.
        for c in self
            .connreqs
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            connreq::end(c);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: ours from info_to_c and never handed over (a consuming
        // read nulls it).
        unsafe { convert::free_info(self.info) };
    }
}

/// Renders `ev`, an event of `q`, in its C layout.
fn render(q: &EqObj, ev: EqEvent) -> Result<Held, isize> {
    let cm = size_of::<FiEqCmEntry>();
    let entry = |fid: u64, context: u64, data: u64| {
        let e = FiEqEntry {
            fid: super::ids::lookup(fid),
            context: context as usize as *mut c_void,
            data,
        };
        // SAFETY: a plain C struct read as its bytes.
        unsafe {
            std::slice::from_raw_parts(ptr::from_ref(&e).cast::<u8>(), size_of::<FiEqEntry>())
        }
        .to_vec()
    };
    let connection = |fid: u64, info: *mut crate::types::FiInfo, data: &[u8]| {
        let e = FiEqCmEntry {
            fid: super::ids::lookup(fid),
            info,
        };
        let mut bytes = Vec::with_capacity(cm + data.len());
        // SAFETY: a plain C struct read as its bytes.
        bytes.extend_from_slice(unsafe {
            std::slice::from_raw_parts(ptr::from_ref(&e).cast::<u8>(), cm)
        });
        bytes.extend_from_slice(data);
        bytes
    };
    let none = ptr::null_mut();
    Ok(match ev {
        EqEvent::ConnReq { fid, info, data } => {
            let Ok(i) = convert::info_to_c(&info) else {
                return Err(ErrorKind::NoMem.code() as isize);
            };
            if let Some(h) = info.handle {
                let c = connreq::new(h);
                // SAFETY: `i` is the fresh fi_info from info_to_c.
                unsafe { (*i).handle = c.cast() };
                let mut all = q.connreqs.lock().unwrap_or_else(|p| p.into_inner());
                // Those used already (accepted or rejected) go from the list.
                all.retain(|&c| connreq::handle_of(c).is_some());
                all.push(c);
            }
            Held {
                event: event::CONNREQ,
                bytes: connection(fid, i, &data),
                min: cm,
                info: i,
            }
        }
        EqEvent::Connected { fid, data } => Held {
            event: event::CONNECTED,
            bytes: connection(fid, none, &data),
            min: cm,
            info: none,
        },
        EqEvent::Shutdown { fid } => Held {
            event: event::SHUTDOWN,
            bytes: connection(fid, none, &[]),
            min: cm,
            info: none,
        },
        EqEvent::MrComplete { fid, context } => Held {
            event: event::MR_COMPLETE,
            bytes: entry(fid, context, 0),
            min: size_of::<FiEqEntry>(),
            info: none,
        },
        EqEvent::AvComplete {
            fid,
            context,
            count,
        } => Held {
            event: event::AV_COMPLETE,
            bytes: entry(fid, context, count as u64),
            min: size_of::<FiEqEntry>(),
            info: none,
        },
        // As libfabric: a smaller buffer gets the first `len` bytes.
        EqEvent::Written { event, data } => Held {
            event,
            bytes: data,
            min: 0,
            info: none,
        },
    })
}

/// Copies the first held event to the application's buffer (connection
/// data and written events truncated to `len`) and, unless `peek`, hands
/// it over. Returns the bytes written, or `-FI_ETOOSMALL` (kept).
///
/// # Safety
///
/// `event` null or writable; `buf` has `len` writable bytes.
unsafe fn give(
    held: &mut std::collections::VecDeque<Held>,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    peek: bool,
) -> isize {
    let Some(h) = held.front_mut() else {
        return ErrorKind::Again.code() as isize;
    };
    if len < h.min {
        return ErrorKind::TooSmall.code() as isize;
    }
    let n = h.bytes.len().min(len);
    // SAFETY: `buf` has `len` >= n writable bytes; `event` null or writable.
    unsafe {
        ptr::copy_nonoverlapping(h.bytes.as_ptr(), buf.cast::<u8>(), n);
        put(event, h.event);
    }
    if !peek {
        // The application owns a connection request's info now.
        h.info = ptr::null_mut();
        held.pop_front();
    }
    n as isize
}

/// Takes the next event (held ones first, else with `op`) and delivers it.
///
/// # Safety
///
/// As [`give`]; `eq` a fid.
unsafe fn read_with(
    eq: *mut FidEq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
    op: impl FnOnce(&EqObj) -> fabric::Result<EqEvent>,
) -> isize {
    // SAFETY: the application passes an EQ from fi_eq_open.
    let Some(e) = (unsafe { get(eq) }) else {
        return EINVAL as isize;
    };
    if buf.is_null() {
        return EINVAL as isize;
    }
    // FI_PEEK reads an event without taking it; no other flag applies.
    let peek = match fabric::OpFlags::from_bits_retain(flags) {
        f if f.is_empty() => false,
        fabric::OpFlags::PEEK => true,
        _ => return EINVAL as isize,
    };
    {
        let mut held = e.held.lock().unwrap_or_else(|p| p.into_inner());
        if !held.is_empty() {
            // SAFETY: per the contract.
            return unsafe { give(&mut held, event, buf, len, peek) };
        }
    }
    // Not under the lock: `op` may block (sread).
    let h = match op(e).map_err(sz).and_then(|ev| render(e, ev)) {
        Ok(h) => h,
        Err(code) => return code,
    };
    let mut held = e.held.lock().unwrap_or_else(|p| p.into_inner());
    // Behind any event another thread held meanwhile (it came first).
    held.push_back(h);
    // SAFETY: per the contract.
    unsafe { give(&mut held, event, buf, len, peek) }
}

unsafe extern "C" fn read(
    eq: *mut FidEq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    // SAFETY: fi_eq_read's arguments.
    guard_sz(|| unsafe { read_with(eq, event, buf, len, flags, |e| e.inner.read()) })
}

unsafe extern "C" fn sread(
    eq: *mut FidEq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    ms: c_int,
    flags: u64,
) -> isize {
    let timeout = u64::try_from(ms).ok().map(Duration::from_millis);
    // SAFETY: fi_eq_sread's arguments.
    guard_sz(|| unsafe { read_with(eq, event, buf, len, flags, |e| e.inner.sread(timeout)) })
}

unsafe extern "C" fn readerr(eq: *mut FidEq, buf: *mut FiEqErrEntry, _flags: u64) -> isize {
    guard_sz(|| {
        // SAFETY: the application passes an EQ from fi_eq_open.
        let Some(q) = (unsafe { get(eq) }) else {
            return EINVAL as isize;
        };
        if buf.is_null() {
            return EINVAL as isize;
        }
        if !q.held.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            // A held event comes before any error event.
            return ErrorKind::Again.code() as isize;
        }
        let e = match q.inner.readerr() {
            Ok(e) => e,
            Err(err) => return sz(err),
        };
        let mut kept = q.err_text.lock().unwrap_or_else(|p| p.into_inner());
        *kept = CString::new(e.err_text.replace('\0', " ")).unwrap_or_default();
        drop(kept);
        let mut data = q.err_data.lock().unwrap_or_else(|p| p.into_inner());
        *data = e.data;
        // fi_eq(3): from 1.5 on, a buffer the application gives
        // (`err_data_size` > 0) receives a copy of the error data (here: a
        // rejection's private data); without one, and before 1.5, where
        // the structure ends before `err_data_size`, `err_data` points to
        // data the EQ keeps until the next error read.
        let v15 = q.api_version >= fabric::Version::new(1, 5).to_u32();
        let b = buf;
        // SAFETY: a writable fi_eq_err_entry of the fabric's API version:
        // `err_data_size` is read and written only from 1.5 on.
        unsafe {
            let (user_buf, user_size) = if v15 {
                ((*b).err_data, (*b).err_data_size)
            } else {
                (ptr::null_mut(), 0)
            };
            (*b).fid = super::ids::lookup(e.fid);
            (*b).context = e.context as usize as *mut c_void;
            (*b).data = 0;
            (*b).err = e.err.errno();
            (*b).prov_errno = e.prov_errno;
            if user_size > 0 && !user_buf.is_null() {
                let n = user_size.min(data.len());
                ptr::copy_nonoverlapping(data.as_ptr(), user_buf.cast::<u8>(), n);
                (*b).err_data_size = n;
            } else {
                (*b).err_data = if data.is_empty() {
                    ptr::null_mut()
                } else {
                    data.as_mut_ptr().cast()
                };
                if v15 {
                    (*b).err_data_size = data.len();
                }
            }
        }
        if v15 {
            size_of::<FiEqErrEntry>() as isize
        } else {
            std::mem::offset_of!(FiEqErrEntry, err_data_size) as isize
        }
    })
}

/// `fi_eq_write`: queues the application's own event (any event number,
/// `len` bytes copied from `buf`, typically a `fi_eq_entry`) behind the
/// provider's; `fi_eq_read` returns it with the same number and bytes.
/// Returns `len`.
unsafe extern "C" fn write(
    eq: *mut FidEq,
    event: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    guard_sz(|| {
        // SAFETY: the application passes an EQ from fi_eq_open.
        let Some(q) = (unsafe { get(eq) }) else {
            return EINVAL as isize;
        };
        if (buf.is_null() && len != 0) || isize::try_from(len).is_err() {
            return EINVAL as isize;
        }
        let data = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: `buf` has `len` readable bytes, per fi_eq(3).
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec()
        };
        match q.inner.write(EqEvent::Written { event, data }) {
            Ok(()) => len as isize,
            Err(err) => sz(err),
        }
    })
}

unsafe extern "C" fn strerror(
    eq: *mut FidEq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    crate::guard(c"Unknown error".as_ptr(), || {
        // SAFETY: the application passes an EQ from fi_eq_open.
        let Some(q) = (unsafe { get(eq) }) else {
            return c"Unknown error".as_ptr();
        };
        let kept = q.err_text.lock().unwrap_or_else(|p| p.into_inner());
        if buf.is_null() || len == 0 {
            return kept.as_ptr();
        }
        let bytes = kept.as_bytes();
        let n = bytes.len().min(len - 1);
        // SAFETY: `buf` has `len` writable bytes, per fi_eq(3).
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        buf
    })
}
