//! Completion queues (`struct fid_cq`, `struct fi_ops_cq`): entries are
//! written in the C layout of the queue's format; contexts come back as
//! the pointers the operations were given.

use std::ffi::{CString, c_char, c_int, c_void};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::Mutex;
use std::time::Duration;

use fabric::objects::{CompletionQueue, CqAttr, CqEntry, CqFormat, FiAddr, WaitObj};

use super::domain::{self, DomainObj, FidDomain};
use super::{
    EINVAL, FiOps, Fid, Refs, class, close_child, command, fi_ops, guard_int, guard_sz, object,
    put, sz,
};

/// `struct fi_cq_attr`.
#[repr(C)]
pub struct FiCqAttr {
    /// `size_t size`.
    pub size: usize,
    /// `uint64_t flags`.
    pub flags: u64,
    /// `enum fi_cq_format format`.
    pub format: u32,
    /// `enum fi_wait_obj wait_obj`.
    pub wait_obj: u32,
    /// `int signaling_vector`.
    pub signaling_vector: c_int,
    /// `enum fi_cq_wait_cond wait_cond`.
    pub wait_cond: u32,
    /// `struct fid_wait *wait_set`.
    pub wait_set: *mut c_void,
}

/// `struct fi_cq_tagged_entry` (the other formats are its prefixes:
/// `fi_cq_entry`, `fi_cq_msg_entry`, `fi_cq_data_entry`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiCqTaggedEntry {
    /// `void *op_context`.
    pub op_context: *mut c_void,
    /// `uint64_t flags`.
    pub flags: u64,
    /// `size_t len`.
    pub len: usize,
    /// `void *buf`.
    pub buf: *mut c_void,
    /// `uint64_t data`.
    pub data: u64,
    /// `uint64_t tag`.
    pub tag: u64,
}

/// `struct fi_cq_err_entry` (1.5 and later; before 1.5 it ends at
/// `err_data`).
#[repr(C)]
pub struct FiCqErrEntry {
    /// `void *op_context`.
    pub op_context: *mut c_void,
    /// `uint64_t flags`.
    pub flags: u64,
    /// `size_t len`.
    pub len: usize,
    /// `void *buf`.
    pub buf: *mut c_void,
    /// `uint64_t data`.
    pub data: u64,
    /// `uint64_t tag`.
    pub tag: u64,
    /// `size_t olen`.
    pub olen: usize,
    /// `int err`: a positive `FI_E*` code.
    pub err: c_int,
    /// `int prov_errno`.
    pub prov_errno: c_int,
    /// `void *err_data`.
    pub err_data: *mut c_void,
    /// `size_t err_data_size`.
    pub err_data_size: usize,
}

/// `struct fi_ops_cq`.
#[repr(C)]
pub struct FiOpsCq {
    /// `size_t size`.
    pub size: usize,
    /// `read`.
    pub read: unsafe extern "C" fn(*mut FidCq, *mut c_void, usize) -> isize,
    /// `readfrom`.
    pub readfrom: unsafe extern "C" fn(*mut FidCq, *mut c_void, usize, *mut u64) -> isize,
    /// `readerr`.
    pub readerr: unsafe extern "C" fn(*mut FidCq, *mut FiCqErrEntry, u64) -> isize,
    /// `sread`.
    pub sread: unsafe extern "C" fn(*mut FidCq, *mut c_void, usize, *const c_void, c_int) -> isize,
    /// `sreadfrom`.
    pub sreadfrom: unsafe extern "C" fn(
        *mut FidCq,
        *mut c_void,
        usize,
        *mut u64,
        *const c_void,
        c_int,
    ) -> isize,
    /// `signal`.
    pub signal: unsafe extern "C" fn(*mut FidCq) -> c_int,
    /// `strerror`.
    pub strerror:
        unsafe extern "C" fn(*mut FidCq, c_int, *const c_void, *mut c_char, usize) -> *const c_char,
}

/// `struct fid_cq`.
#[repr(C)]
pub struct FidCq {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `struct fi_ops_cq *ops`.
    pub ops: *mut FiOpsCq,
}

/// A completion queue opened from C.
#[repr(C)]
pub struct CqObj {
    /// The C descriptor.
    pub c: FidCq,
    /// The provider's queue.
    pub inner: Box<dyn CompletionQueue>,
    /// The C layout of the queue's entries.
    pub layout: EntryLayout,
    /// The domain (which counts it).
    pub domain: *const DomainObj,
    /// Endpoints bound to it.
    pub refs: Refs,
    /// The fabric's API version.
    pub api_version: u32,
    /// The text of the last error entry read: `err_data` points into it
    /// until the next `fi_cq_readerr`.
    pub err_text: Mutex<CString>,
}

static OPS: FiOps = fi_ops!(close, super::no_bind, control);

static CQ_OPS: FiOpsCq = FiOpsCq {
    size: size_of::<FiOpsCq>(),
    read,
    readfrom,
    readerr,
    sread,
    sreadfrom,
    signal,
    strerror,
};

/// Entries converted per call to the provider.
const CHUNK: usize = 16;

/// The C layout of a queue's entries: each format is a prefix of
/// `struct fi_cq_tagged_entry`, whose fields are 8 bytes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryLayout {
    /// `struct fi_cq_entry`: `op_context`.
    Context,
    /// `struct fi_cq_msg_entry`: and `flags`, `len`.
    Msg,
    /// `struct fi_cq_data_entry`: and `buf`, `data`.
    Data,
    /// `struct fi_cq_tagged_entry`: and `tag`.
    Tagged,
}

impl EntryLayout {
    /// Bytes of one entry.
    #[inline(always)]
    pub fn size(self) -> usize {
        match self {
            EntryLayout::Context => 8,
            EntryLayout::Msg => 24,
            EntryLayout::Data => 40,
            EntryLayout::Tagged => size_of::<FiCqTaggedEntry>(),
        }
    }

    /// Writes `e` at `dst` in this layout: one store per field of the
    /// format (no copy of the whole entry, no `memcpy` call).
    ///
    /// # Safety
    ///
    /// `dst` has [`size`](EntryLayout::size) writable bytes (any alignment).
    #[inline(always)]
    unsafe fn write(self, dst: *mut c_void, e: &CqEntry) {
        let d = dst.cast::<u64>();
        // SAFETY: the format's fields are within its size, per the
        // contract; unaligned stores, as C may hand any buffer.
        unsafe {
            d.write_unaligned(e.context);
            if self >= EntryLayout::Msg {
                d.add(1).write_unaligned(e.flags.bits());
                d.add(2).write_unaligned(e.len as u64);
            }
            if self >= EntryLayout::Data {
                d.add(3).write_unaligned(e.buf);
                d.add(4).write_unaligned(e.data);
            }
            if self == EntryLayout::Tagged {
                d.add(5).write_unaligned(e.tag);
            }
        }
    }
}

/// The CQ behind a `fid` pointer, if it is one of ours.
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
#[inline(always)]
pub(crate) unsafe fn get<'a, T>(p: *const T) -> Option<&'a CqObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::CQ, &OPS) }
}

/// `fi_ops_domain.cq_open` (`fi_cq_open`).
pub(crate) unsafe extern "C" fn open(
    dom: *mut FidDomain,
    attr: *mut FiCqAttr,
    out: *mut *mut FidCq,
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
        // SAFETY: null or a valid fi_cq_attr.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return EINVAL;
        };
        if out.is_null() {
            return EINVAL;
        }
        let (Ok(format), Ok(wait_obj)) =
            (CqFormat::try_from(a.format), WaitObj::try_from(a.wait_obj))
        else {
            return EINVAL;
        };
        let format = if format == CqFormat::Unspec {
            CqFormat::Context
        } else {
            format
        };
        let layout = match format {
            CqFormat::Context => EntryLayout::Context,
            CqFormat::Msg => EntryLayout::Msg,
            CqFormat::Data => EntryLayout::Data,
            _ => EntryLayout::Tagged,
        };
        let cattr = CqAttr {
            size: a.size,
            format,
            wait_obj,
            wait_threshold: 0,
        };
        let inner = match d.inner.cq(&cattr) {
            Ok(c) => c,
            Err(e) => return e.code(),
        };
        hold.keep();
        let obj = Box::new(CqObj {
            c: FidCq {
                fid: Fid::new(class::CQ, context, &OPS),
                ops: ptr::from_ref(&CQ_OPS).cast_mut(),
            },
            inner,
            layout,
            domain: d,
            refs: Refs::default(),
            api_version: d.api_version,
            err_text: Mutex::new(CString::default()),
        });
        // SAFETY: non-null and writable.
        unsafe { *out = Box::into_raw(obj).cast() };
        0
    })
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(c) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        // SAFETY: `c` is what `fid` names, from `open`; its domain is live.
        unsafe { close_child::<CqObj>(fid, &c.refs, &(*c.domain).refs) }
    })
}

unsafe extern "C" fn control(fid: *mut Fid, cmd: c_int, arg: *mut c_void) -> c_int {
    guard_int(|| {
        // SAFETY: fi_control's argument is a fid.
        let Some(c) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        match cmd {
            command::GETWAIT if !arg.is_null() => match c.inner.wait_fd() {
                Some(fd) => {
                    // SAFETY: FI_GETWAIT with FI_WAIT_FD takes an int *.
                    unsafe { *arg.cast::<c_int>() = fd.as_raw_fd() };
                    0
                }
                None => fabric::ErrorKind::NoData.code(),
            },
            _ => super::ENOSYS,
        }
    })
}

/// Writes `entries` to the C buffer in the queue's layout.
///
/// # Safety
///
/// `buf` has room for `entries.len()` entries of the layout.
#[inline]
unsafe fn write_entries(buf: *mut c_void, layout: EntryLayout, entries: &[CqEntry]) {
    for (i, e) in entries.iter().enumerate() {
        // SAFETY: room for entry i, per the contract.
        unsafe { layout.write(buf.cast::<u8>().add(i * layout.size()).cast(), e) };
    }
}

/// The timeout of an `sread` (negative: forever).
fn timeout(ms: c_int) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Reads up to `count` entries (with sources when `src` is set), through
/// `op` on a stack buffer. The common poll, one entry, is inlined into
/// the trampoline: the provider's one call fills one stack entry, whose
/// fields of the queue's format are stored into the caller's buffer.
///
/// # Safety
///
/// `cq` a fid, `buf` room for `count` entries, `src` null or room for
/// `count` addresses.
#[inline(always)]
unsafe fn read_with(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
    op: impl FnOnce(&CqObj, &mut [CqEntry], Option<&mut [FiAddr]>) -> fabric::Result<usize>,
) -> isize {
    // SAFETY: the application passes a CQ from fi_cq_open.
    let Some(c) = (unsafe { get(cq) }) else {
        return EINVAL as isize;
    };
    if count != 1 || buf.is_null() {
        // SAFETY: per the contract.
        return unsafe { read_other(c, buf, count, src, op) };
    }
    let mut e = [CqEntry::default()];
    let mut a = [FiAddr::UNSPEC];
    let srcs = (!src.is_null()).then_some(&mut a[..]);
    match op(c, &mut e, srcs) {
        Ok(0) => 0,
        Ok(_) => {
            // SAFETY: room for one entry (and one address), per the
            // contract.
            unsafe {
                c.layout.write(buf, &e[0]);
                if !src.is_null() {
                    *src = a[0].0;
                }
            }
            1
        }
        Err(err) => sz(err),
    }
}

/// [`read_with`] of any count but one, or into a NULL buffer.
///
/// # Safety
///
/// As [`read_with`].
#[inline(never)]
unsafe fn read_other(
    c: &CqObj,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
    op: impl FnOnce(&CqObj, &mut [CqEntry], Option<&mut [FiAddr]>) -> fabric::Result<usize>,
) -> isize {
    if count == 0 {
        // Nothing to read: progress only (what applications poll with
        // while an operation waits for resources).
        return op(c, &mut [], None).map_or_else(sz, |_| 0);
    }
    if buf.is_null() {
        return EINVAL as isize;
    }
    let n = count.min(CHUNK);
    let mut tmp = [CqEntry::default(); CHUNK];
    let mut addrs = [FiAddr::UNSPEC; CHUNK];
    let srcs = (!src.is_null()).then_some(&mut addrs[..n]);
    match op(c, &mut tmp[..n], srcs) {
        Ok(k) => {
            let k = k.min(n);
            // SAFETY: room for `count` >= k entries, per the contract.
            unsafe { write_entries(buf, c.layout, &tmp[..k]) };
            if !src.is_null() {
                for (i, a) in addrs.iter().take(k).enumerate() {
                    // SAFETY: room for `count` >= k addresses.
                    unsafe { *src.add(i) = a.0 };
                }
            }
            k as isize
        }
        Err(e) => sz(e),
    }
}

unsafe extern "C" fn read(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: fi_cq_read's arguments.
    guard_sz(|| unsafe {
        read_with(cq, buf, count, ptr::null_mut(), |c, out, _| {
            c.inner.read(out)
        })
    })
}

unsafe extern "C" fn readfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
) -> isize {
    // SAFETY: fi_cq_readfrom's arguments.
    guard_sz(|| unsafe {
        read_with(cq, buf, count, src, |c, out, s| match s {
            Some(s) => c.inner.readfrom(out, s),
            None => c.inner.read(out),
        })
    })
}

unsafe extern "C" fn sread(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    ms: c_int,
) -> isize {
    // SAFETY: fi_cq_sread's arguments.
    guard_sz(|| unsafe {
        read_with(cq, buf, count, ptr::null_mut(), |c, out, _| {
            c.inner.sread(out, timeout(ms))
        })
    })
}

unsafe extern "C" fn sreadfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
    _cond: *const c_void,
    ms: c_int,
) -> isize {
    // SAFETY: fi_cq_sreadfrom's arguments.
    guard_sz(|| unsafe {
        read_with(cq, buf, count, src, |c, out, s| match s {
            Some(s) => c.inner.sreadfrom(out, s, timeout(ms)),
            None => c.inner.sread(out, timeout(ms)),
        })
    })
}

unsafe extern "C" fn readerr(cq: *mut FidCq, buf: *mut FiCqErrEntry, _flags: u64) -> isize {
    guard_sz(|| {
        // SAFETY: the application passes a CQ from fi_cq_open.
        let Some(c) = (unsafe { get(cq) }) else {
            return EINVAL as isize;
        };
        if buf.is_null() {
            return EINVAL as isize;
        }
        let e = match c.inner.readerr() {
            Ok(e) => e,
            Err(e) => return sz(e),
        };
        let text = CString::new(e.err_text.replace('\0', " ")).unwrap_or_default();
        let mut kept = c.err_text.lock().unwrap_or_else(|p| p.into_inner());
        *kept = text;
        let bytes = kept.as_bytes_with_nul();
        // 1.5 and later: err_data_size is in the structure, and a buffer
        // the application provides (size > 0) receives a copy.
        let v15 = c.api_version >= fabric::Version::new(1, 5).to_u32();
        // SAFETY: `buf` is a writable fi_cq_err_entry of the fabric's API
        // version: err_data_size exists only from 1.5.
        unsafe {
            let b = &mut *buf;
            let (user_buf, user_size) = if v15 {
                (b.err_data, b.err_data_size)
            } else {
                (ptr::null_mut(), 0)
            };
            b.op_context = e.entry.context as usize as *mut c_void;
            b.flags = e.entry.flags.bits();
            b.len = e.entry.len;
            b.buf = e.entry.buf as usize as *mut c_void;
            b.data = e.entry.data;
            b.tag = e.entry.tag;
            b.olen = e.olen;
            b.err = e.err.errno();
            b.prov_errno = e.prov_errno;
            if v15 && user_size > 0 && !user_buf.is_null() {
                let n = user_size.min(bytes.len());
                ptr::copy_nonoverlapping(bytes.as_ptr(), user_buf.cast::<u8>(), n);
                b.err_data_size = n;
            } else {
                b.err_data = kept.as_ptr().cast_mut().cast();
                if v15 {
                    b.err_data_size = bytes.len();
                }
            }
        }
        1
    })
}

unsafe extern "C" fn signal(cq: *mut FidCq) -> c_int {
    guard_int(|| {
        // SAFETY: the application passes a CQ from fi_cq_open.
        match unsafe { get(cq) } {
            Some(c) => c.inner.signal().map_or_else(|e| e.code(), |()| 0),
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn strerror(
    cq: *mut FidCq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    crate::guard(c"Unknown error".as_ptr(), || {
        // SAFETY: the application passes a CQ from fi_cq_open.
        let Some(c) = (unsafe { get(cq) }) else {
            return c"Unknown error".as_ptr();
        };
        let kept = c.err_text.lock().unwrap_or_else(|p| p.into_inner());
        if buf.is_null() || len == 0 {
            // Valid until the next fi_cq_readerr.
            return kept.as_ptr();
        }
        let bytes = kept.as_bytes();
        let n = bytes.len().min(len - 1);
        // SAFETY: `buf` has `len` writable bytes, per fi_cq(3).
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        buf
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::objects::CompletionFlags;

    /// Each layout stores its format's fields, in order, at any
    /// alignment, and nothing past the format's size.
    #[test]
    fn layouts_write_their_fields_only() {
        let e = CqEntry {
            context: 0x1111,
            flags: CompletionFlags::from_bits_retain(0x2222),
            len: 0x3333,
            buf: 0x4444,
            data: 0x5555,
            tag: 0x6666,
        };
        let all = [0x1111u64, 0x2222, 0x3333, 0x4444, 0x5555, 0x6666];
        for (layout, fields) in [
            (EntryLayout::Context, 1),
            (EntryLayout::Msg, 3),
            (EntryLayout::Data, 5),
            (EntryLayout::Tagged, 6),
        ] {
            assert_eq!(layout.size(), fields * 8);
            let mut bytes = [0xAAu8; 1 + 48 + 8];
            // SAFETY: offset 1 leaves 56 bytes, more than any entry.
            unsafe { layout.write(bytes.as_mut_ptr().add(1).cast(), &e) };
            for (i, want) in all.iter().take(fields).enumerate() {
                let at = 1 + 8 * i;
                let got = u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
                assert_eq!(got, *want, "{layout:?} field {i}");
            }
            assert_eq!(bytes[0], 0xAA, "{layout:?} wrote before the entry");
            assert!(
                bytes[1 + fields * 8..].iter().all(|&b| b == 0xAA),
                "{layout:?} wrote past its size"
            );
        }
    }
}
