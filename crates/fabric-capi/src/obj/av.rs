//! Address vectors (`struct fid_av`, `struct fi_ops_av`).
//!
//! `fi_av_insert` reads addresses in the domain's address format, one after
//! the other: `struct sockaddr_in` / `sockaddr_in6` (for `FI_SOCKADDR`, by
//! their family field), `sockaddr_ib`. For `FI_ADDR_STR`, fi_av(3) says
//! `addr` is an array of strings (`char **`), while libfabric 1.17's
//! providers read NUL-terminated strings laid end to end (what
//! `fi_getname` returns and what `fi_pingpong` passes back). Both are
//! accepted: every valid string address is longer than 8 bytes, and a
//! user-space pointer has zero high bytes, so the first 8 bytes tell one
//! from the other.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;

use fabric::objects::{AddressVector, AvAttr, FiAddr};
use fabric::{AddrFormat, Address, AvType, Error, ErrorKind};

use super::domain::{self, DomainObj, FidDomain};
use super::{EINVAL, ENOSYS, FiOps, Fid, Refs, class, close_child, fi_ops, guard_int, object, put};
use crate::convert::MAX_ADDR_LEN;

/// `struct fi_av_attr`.
#[repr(C)]
pub struct FiAvAttr {
    /// `enum fi_av_type type`.
    pub r#type: u32,
    /// `int rx_ctx_bits`.
    pub rx_ctx_bits: c_int,
    /// `size_t count`.
    pub count: usize,
    /// `size_t ep_per_node`.
    pub ep_per_node: usize,
    /// `const char *name`.
    pub name: *const c_char,
    /// `void *map_addr`.
    pub map_addr: *mut c_void,
    /// `uint64_t flags`.
    pub flags: u64,
}

/// `struct fi_ops_av`.
#[repr(C)]
pub struct FiOpsAv {
    /// `size_t size`.
    pub size: usize,
    /// `insert`.
    pub insert:
        unsafe extern "C" fn(*mut FidAv, *const c_void, usize, *mut u64, u64, *mut c_void) -> c_int,
    /// `insertsvc`.
    pub insertsvc: unsafe extern "C" fn(
        *mut FidAv,
        *const c_char,
        *const c_char,
        *mut u64,
        u64,
        *mut c_void,
    ) -> c_int,
    /// `insertsym`.
    pub insertsym: unsafe extern "C" fn(
        *mut FidAv,
        *const c_char,
        usize,
        *const c_char,
        usize,
        *mut u64,
        u64,
        *mut c_void,
    ) -> c_int,
    /// `remove`.
    pub remove: unsafe extern "C" fn(*mut FidAv, *mut u64, usize, u64) -> c_int,
    /// `lookup`.
    pub lookup: unsafe extern "C" fn(*mut FidAv, u64, *mut c_void, *mut usize) -> c_int,
    /// `straddr`.
    pub straddr:
        unsafe extern "C" fn(*mut FidAv, *const c_void, *mut c_char, *mut usize) -> *const c_char,
    /// `av_set`.
    pub av_set:
        unsafe extern "C" fn(*mut FidAv, *mut c_void, *mut *mut c_void, *mut c_void) -> c_int,
}

/// `struct fid_av`.
#[repr(C)]
pub struct FidAv {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `struct fi_ops_av *ops`.
    pub ops: *mut FiOpsAv,
}

/// An address vector opened from C.
#[repr(C)]
pub struct AvObj {
    /// The C descriptor.
    pub c: FidAv,
    /// The provider's AV.
    pub inner: Box<dyn AddressVector>,
    /// The domain (which counts it).
    pub domain: *const DomainObj,
    /// Endpoints bound to it.
    pub refs: Refs,
    /// How inserted addresses are read.
    pub addr_format: AddrFormat,
}

static OPS: FiOps = fi_ops!(close);

static AV_OPS: FiOpsAv = FiOpsAv {
    size: size_of::<FiOpsAv>(),
    insert,
    insertsvc,
    insertsym,
    remove,
    lookup,
    straddr,
    av_set,
};

/// The AV behind a `fid` pointer, if it is one of ours.
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
pub(crate) unsafe fn get<'a, T>(p: *const T) -> Option<&'a AvObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::AV, &OPS) }
}

/// `fi_ops_domain.av_open` (`fi_av_open`).
pub(crate) unsafe extern "C" fn open(
    dom: *mut FidDomain,
    attr: *mut FiAvAttr,
    out: *mut *mut FidAv,
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
        // SAFETY: null or a valid fi_av_attr.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return EINVAL;
        };
        if out.is_null() {
            return EINVAL;
        }
        let Ok(av_type) = AvType::try_from(a.r#type) else {
            return EINVAL;
        };
        // SAFETY: null or a C string, per fi_av(3).
        let name = match unsafe { crate::convert::borrow_str(a.name, "av name") } {
            Ok(n) => n.map(str::to_string),
            Err(e) => return e.code(),
        };
        let aattr = AvAttr {
            av_type,
            count: a.count,
            rx_ctx_bits: u32::try_from(a.rx_ctx_bits).unwrap_or(0),
            name,
        };
        let inner = match d.inner.av(&aattr) {
            Ok(v) => v,
            Err(e) => return e.code(),
        };
        hold.keep();
        let obj = Box::new(AvObj {
            c: FidAv {
                fid: Fid::new(class::AV, context, &OPS),
                ops: ptr::from_ref(&AV_OPS).cast_mut(),
            },
            inner,
            domain: d,
            refs: Refs::default(),
            addr_format: d.addr_format,
        });
        // SAFETY: non-null and writable.
        unsafe { *out = Box::into_raw(obj).cast() };
        0
    })
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(a) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        // SAFETY: `a` is what `fid` names, from `open`; its domain is live.
        unsafe { close_child::<AvObj>(fid, &a.refs, &(*a.domain).refs) }
    })
}

/// Length of the address of `format` at `p`.
///
/// # Safety
///
/// `p` points to an address of `format` (for strings, NUL-terminated).
unsafe fn addr_len(format: AddrFormat, p: *const u8) -> Result<usize, Error> {
    const IN: usize = size_of::<libc::sockaddr_in>();
    const IN6: usize = size_of::<libc::sockaddr_in6>();
    Ok(match format {
        AddrFormat::SockaddrIn => IN,
        AddrFormat::SockaddrIn6 => IN6,
        AddrFormat::SockaddrIb => 48,
        AddrFormat::Sockaddr | AddrFormat::Unspec => {
            // SAFETY: every sockaddr starts with its family.
            let family = unsafe { p.cast::<libc::sa_family_t>().read_unaligned() };
            match c_int::from(family) {
                libc::AF_INET => IN,
                libc::AF_INET6 => IN6,
                f => return Err(Error::inval(format!("address family {f} is not supported"))),
            }
        }
        AddrFormat::Str => {
            let mut n = 0;
            // SAFETY: a NUL-terminated string, per the contract; the
            // scan stops at MAX_ADDR_LEN.
            while n < MAX_ADDR_LEN && unsafe { *p.add(n) } != 0 {
                n += 1;
            }
            if n == MAX_ADDR_LEN {
                return Err(Error::inval("string address is not NUL-terminated"));
            }
            n + 1
        }
        f => {
            return Err(Error::inval(format!(
                "fi_av_insert of {f} addresses is not supported"
            )));
        }
    })
}

/// Whether string addresses at `p` are an array of pointers (fi_av(3)'s
/// `char **`) rather than strings laid end to end: a string address has
/// no NUL in its first 8 bytes, a user-space pointer has one.
///
/// # Safety
///
/// `p` starts a string address or an array of at least one pointer.
unsafe fn string_array(p: *const u8) -> bool {
    // SAFETY: a string address is NUL-terminated and the scan stops at its
    // NUL; an array has 8 readable bytes.
    (0..size_of::<*const u8>()).any(|i| unsafe { *p.add(i) } == 0)
}

/// `FI_SYNC_ERR` (`fi_av_insert` flag): per-address statuses.
const FI_SYNC_ERR: u64 = 1 << 58;

unsafe extern "C" fn insert(
    av: *mut FidAv,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut u64,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        // SAFETY: the application passes an AV from fi_av_open.
        let Some(a) = (unsafe { get(av) }) else {
            return EINVAL;
        };
        if (addr.is_null() && count > 0) || flags & !FI_SYNC_ERR != 0 {
            return if flags & !FI_SYNC_ERR != 0 {
                ErrorKind::BadFlags.code()
            } else {
                EINVAL
            };
        }
        // FI_SYNC_ERR: `context` is an array of `count` ints that gets
        // each address's status (0, or the negative fabric errno of why
        // it was refused).
        let errs = if flags & FI_SYNC_ERR != 0 {
            if context.is_null() && count > 0 {
                return EINVAL;
            }
            context.cast::<c_int>()
        } else {
            std::ptr::null_mut()
        };
        let status = |i: usize, code: c_int| {
            if !errs.is_null() {
                // SAFETY: room for `count` ints, per fi_av(3).
                unsafe { *errs.add(i) = code };
            }
        };
        let mut p = addr.cast::<u8>();
        // SAFETY: `count` > 0 addresses of the domain's format at `addr`.
        let array = count > 0 && a.addr_format == AddrFormat::Str && unsafe { string_array(p) };
        let mut inserted = 0;
        for i in 0..count {
            let one = if array {
                // SAFETY: an array of `count` string pointers (see above).
                let s = unsafe { addr.cast::<*const u8>().add(i).read_unaligned() };
                if s.is_null() {
                    Err(Error::inval("a null string address"))
                } else {
                    // SAFETY: a NUL-terminated string, per fi_av(3).
                    unsafe { addr_len(a.addr_format, s) }.and_then(|len| {
                        // SAFETY: `len` bytes of this string.
                        let bytes = unsafe { std::slice::from_raw_parts(s, len) };
                        Address::from_bytes(a.addr_format, bytes)
                    })
                }
            } else {
                // SAFETY: `count` addresses of the domain's format at `addr`.
                unsafe { addr_len(a.addr_format, p) }.and_then(|len| {
                    // SAFETY: `len` bytes of this address.
                    let bytes = unsafe { std::slice::from_raw_parts(p, len) };
                    p = p.wrapping_add(len);
                    Address::from_bytes(a.addr_format, bytes)
                })
            };
            let mut out = [FiAddr::NOTAVAIL];
            let failed = one.is_err();
            // `insert_one` keeps the provider's reason for a refusal.
            match one.and_then(|addr| a.inner.insert_one(&addr)) {
                Ok(h) => {
                    out[0] = h;
                    inserted += 1;
                    status(i, 0);
                }
                Err(e) => status(i, e.code()),
            }
            if !fi_addr.is_null() {
                // SAFETY: room for `count` handles, per fi_av(3).
                unsafe { *fi_addr.add(i) = out[0].0 };
            }
            if failed && !array {
                // The length of what follows is unknown: the rest is not
                // inserted.
                for j in i + 1..count {
                    status(j, ErrorKind::Canceled.code());
                    if !fi_addr.is_null() {
                        // SAFETY: as above.
                        unsafe { *fi_addr.add(j) = FiAddr::NOTAVAIL.0 };
                    }
                }
                break;
            }
        }
        c_int::try_from(inserted).unwrap_or(c_int::MAX)
    })
}

unsafe extern "C" fn insertsvc(
    av: *mut FidAv,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut u64,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard_int(|| {
        // SAFETY: the application passes an AV from fi_av_open.
        let Some(a) = (unsafe { get(av) }) else {
            return EINVAL;
        };
        // SAFETY: null or C strings.
        let (node, service) = unsafe { (cstr(node), cstr(service)) };
        let (Some(node), Some(service)) = (node, service) else {
            return EINVAL;
        };
        match a.inner.insertsvc(node, service) {
            Ok(h) => {
                // SAFETY: null or writable.
                unsafe { put(fi_addr, h.0) };
                1
            }
            Err(e) => e.code(),
        }
    })
}

/// A C string argument as UTF-8, or `None`.
///
/// # Safety
///
/// `p` is null or NUL-terminated.
unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a str> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_str().ok())?
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn insertsym(
    _: *mut FidAv,
    _: *const c_char,
    _: usize,
    _: *const c_char,
    _: usize,
    _: *mut u64,
    _: u64,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}

unsafe extern "C" fn remove(av: *mut FidAv, fi_addr: *mut u64, count: usize, _: u64) -> c_int {
    guard_int(|| {
        // SAFETY: the application passes an AV from fi_av_open.
        let Some(a) = (unsafe { get(av) }) else {
            return EINVAL;
        };
        if fi_addr.is_null() && count > 0 {
            return EINVAL;
        }
        // A count no memory can hold is an error, not an abort.
        let mut handles: Vec<FiAddr> = Vec::new();
        if handles.try_reserve_exact(count).is_err() {
            return ErrorKind::NoMem.code();
        }
        // SAFETY: `count` handles at `fi_addr`.
        handles.extend((0..count).map(|i| FiAddr(unsafe { *fi_addr.add(i) })));
        a.inner.remove(&handles).map_or_else(|e| e.code(), |()| 0)
    })
}

unsafe extern "C" fn lookup(
    av: *mut FidAv,
    fi_addr: u64,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: the application passes an AV from fi_av_open.
        let Some(a) = (unsafe { get(av) }) else {
            return EINVAL;
        };
        if addrlen.is_null() {
            return EINVAL;
        }
        let bytes = match a.inner.lookup(FiAddr(fi_addr)) {
            Ok(x) => x.to_bytes(),
            Err(e) => return e.code(),
        };
        // fi_av(3): a buffer too small holds the address truncated, and
        // `addrlen` says the size needed; the call succeeds (as libfabric
        // 1.17's providers answer, unlike fi_getname's `-FI_ETOOSMALL`).
        // SAFETY: readable and writable, per fi_av(3).
        match unsafe { copy_out(&bytes, addr, addrlen) } {
            r if r == ErrorKind::TooSmall.code() => 0,
            r => r,
        }
    })
}

/// Copies `bytes` to `(buf, *len)` as much as fits, sets `*len` to the
/// full length; `-FI_ETOOSMALL` when it did not fit.
///
/// # Safety
///
/// `len` is valid; `buf` is null or has `*len` writable bytes.
pub(crate) unsafe fn copy_out(bytes: &[u8], buf: *mut c_void, len: *mut usize) -> c_int {
    // SAFETY: per the contract.
    let room = unsafe { *len };
    let n = if buf.is_null() {
        0
    } else {
        room.min(bytes.len())
    };
    // SAFETY: `n` <= `room` writable bytes at `buf`.
    unsafe {
        ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
        *len = bytes.len();
    }
    if room < bytes.len() {
        ErrorKind::TooSmall.code()
    } else {
        0
    }
}

unsafe extern "C" fn straddr(
    av: *mut FidAv,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    crate::guard(ptr::null(), || {
        // SAFETY: the application passes an AV from fi_av_open.
        let Some(a) = (unsafe { get(av) }) else {
            return ptr::null();
        };
        if addr.is_null() || buf.is_null() || len.is_null() {
            return ptr::null();
        }
        // SAFETY: an address of the AV's format at `addr`.
        let Ok(n) = (unsafe { addr_len(a.addr_format, addr.cast()) }) else {
            return ptr::null();
        };
        // SAFETY: `n` bytes of it.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), n) };
        let Ok(x) = Address::from_bytes(a.addr_format, bytes) else {
            return ptr::null();
        };
        let mut text = a.inner.straddr(&x).into_bytes();
        text.push(0);
        // SAFETY: `len` valid and `buf` with `*len` bytes, per fi_av(3).
        unsafe {
            let room = *len;
            let k = room.min(text.len());
            ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), k);
            if k > 0 {
                *buf.add(k - 1) = 0;
            }
            *len = text.len();
        }
        buf
    })
}

unsafe extern "C" fn av_set(
    _: *mut FidAv,
    _: *mut c_void,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}

/// Reads one address of `format` at `p` (`fi_connect`'s).
///
/// # Safety
///
/// `p` points to an address of `format`.
pub(crate) unsafe fn read_one(format: AddrFormat, p: *const u8) -> Result<Address, Error> {
    // SAFETY: per the contract.
    let len = unsafe { addr_len(format, p) }?;
    // SAFETY: `len` bytes of the address.
    let bytes = unsafe { std::slice::from_raw_parts(p, len) };
    Address::from_bytes(format, bytes)
}
