//! `struct fi_ops_atomic`: atomic, fetch-atomic and compare-atomic
//! operations through the provider's `atomicmsg` (one call), and
//! `fi_atomicvalid` / `fi_fetch_atomicvalid` / `fi_compare_atomicvalid`.
//!
//! C counts atomic buffers in elements (`struct fi_ioc`,
//! `struct fi_rma_ioc`); the Rust model takes local pieces in bytes and
//! remote ranges in elements, so local counts are multiplied by the
//! datatype's size. The short forms use the endpoint's transmit defaults;
//! `fi_inject_atomic` is `atomicmsg` with `FI_INJECT`.

use std::ffi::{c_int, c_void};
use std::ptr;

use fabric::OpFlags;
use fabric::objects::{AtomicMsg, AtomicOp, Datatype, FiAddr, IoVec, MrDesc, RmaIov};

use super::domain::{self, FidDomain};
use super::ep::{self, FidEp};
use super::msg::MAX_IOV;
use super::{EINVAL, guard_int, guard_sz, sz};

type Ep = *mut FidEp;
type P = *mut c_void;
type Ioc = *const FiIoc;
type Desc = *mut *mut c_void;

/// `struct fi_ioc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiIoc {
    /// `void *addr`.
    pub addr: *mut c_void,
    /// `size_t count`: elements.
    pub count: usize,
}

/// `struct fi_rma_ioc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiRmaIoc {
    /// `uint64_t addr`.
    pub addr: u64,
    /// `size_t count`: elements.
    pub count: usize,
    /// `uint64_t key`.
    pub key: u64,
}

/// `struct fi_msg_atomic`.
#[repr(C)]
pub struct FiMsgAtomic {
    /// `const struct fi_ioc *msg_iov`.
    pub msg_iov: *const FiIoc,
    /// `void **desc`.
    pub desc: *mut *mut c_void,
    /// `size_t iov_count`.
    pub iov_count: usize,
    /// `fi_addr_t addr`.
    pub addr: u64,
    /// `const struct fi_rma_ioc *rma_iov`.
    pub rma_iov: *const FiRmaIoc,
    /// `size_t rma_iov_count`.
    pub rma_iov_count: usize,
    /// `enum fi_datatype datatype`.
    pub datatype: u32,
    /// `enum fi_op op`.
    pub op: u32,
    /// `void *context`.
    pub context: *mut c_void,
    /// `uint64_t data`.
    pub data: u64,
}

/// `struct fi_ops_atomic`.
#[repr(C)]
pub struct FiOpsAtomic {
    /// `size_t size`.
    pub size: usize,
    /// `write`.
    pub write:
        unsafe extern "C" fn(Ep, *const c_void, usize, P, u64, u64, u64, u32, u32, P) -> isize,
    /// `writev`.
    pub writev: unsafe extern "C" fn(Ep, Ioc, Desc, usize, u64, u64, u64, u32, u32, P) -> isize,
    /// `writemsg`.
    pub writemsg: unsafe extern "C" fn(Ep, *const FiMsgAtomic, u64) -> isize,
    /// `inject`.
    pub inject: unsafe extern "C" fn(Ep, *const c_void, usize, u64, u64, u64, u32, u32) -> isize,
    /// `readwrite`.
    pub readwrite: unsafe extern "C" fn(
        Ep,
        *const c_void,
        usize,
        P,
        P,
        P,
        u64,
        u64,
        u64,
        u32,
        u32,
        P,
    ) -> isize,
    /// `readwritev`.
    pub readwritev: unsafe extern "C" fn(
        Ep,
        Ioc,
        Desc,
        usize,
        Ioc,
        Desc,
        usize,
        u64,
        u64,
        u64,
        u32,
        u32,
        P,
    ) -> isize,
    /// `readwritemsg`.
    pub readwritemsg: unsafe extern "C" fn(Ep, *const FiMsgAtomic, Ioc, Desc, usize, u64) -> isize,
    /// `compwrite`.
    pub compwrite: unsafe extern "C" fn(
        Ep,
        *const c_void,
        usize,
        P,
        *const c_void,
        P,
        P,
        P,
        u64,
        u64,
        u64,
        u32,
        u32,
        P,
    ) -> isize,
    /// `compwritev`.
    pub compwritev: unsafe extern "C" fn(
        Ep,
        Ioc,
        Desc,
        usize,
        Ioc,
        Desc,
        usize,
        Ioc,
        Desc,
        usize,
        u64,
        u64,
        u64,
        u32,
        u32,
        P,
    ) -> isize,
    /// `compwritemsg`.
    pub compwritemsg: unsafe extern "C" fn(
        Ep,
        *const FiMsgAtomic,
        Ioc,
        Desc,
        usize,
        Ioc,
        Desc,
        usize,
        u64,
    ) -> isize,
    /// `writevalid`.
    pub writevalid: unsafe extern "C" fn(Ep, u32, u32, *mut usize) -> c_int,
    /// `readwritevalid`.
    pub readwritevalid: unsafe extern "C" fn(Ep, u32, u32, *mut usize) -> c_int,
    /// `compwritevalid`.
    pub compwritevalid: unsafe extern "C" fn(Ep, u32, u32, *mut usize) -> c_int,
}

/// The `fi_ops_atomic` of endpoints.
pub(crate) static ATOMIC_OPS: FiOpsAtomic = FiOpsAtomic {
    size: size_of::<FiOpsAtomic>(),
    write,
    writev,
    writemsg,
    inject,
    readwrite,
    readwritev,
    readwritemsg,
    compwrite,
    compwritev,
    compwritemsg,
    writevalid,
    readwritevalid,
    compwritevalid,
};

/// Up to [`MAX_IOV`] local pieces of an atomic operation, in bytes.
struct Local {
    iov: [IoVec; MAX_IOV],
    desc: [MrDesc; MAX_IOV],
    n: usize,
    has_desc: bool,
}

impl Local {
    const EMPTY: Local = Local {
        iov: [IoVec {
            addr: ptr::null_mut(),
            len: 0,
        }; MAX_IOV],
        desc: [MrDesc(0); MAX_IOV],
        n: 0,
        has_desc: false,
    };

    /// `count` `fi_ioc`s of elements of `size` bytes.
    ///
    /// # Safety
    ///
    /// `ioc` has `count` elements; `desc` null or `count` elements.
    unsafe fn from_c(ioc: Ioc, desc: Desc, count: usize, size: usize) -> Option<Local> {
        if count > MAX_IOV || (ioc.is_null() && count > 0) {
            return None;
        }
        let mut l = Local::EMPTY;
        for i in 0..count {
            // SAFETY: `count` elements, per the contract.
            let c = unsafe { *ioc.add(i) };
            l.iov[i] = IoVec {
                addr: c.addr.cast(),
                len: c.count.checked_mul(size)?,
            };
            if !desc.is_null() {
                // SAFETY: as above.
                l.desc[i] = MrDesc(unsafe { *desc.add(i) } as u64);
            }
        }
        l.n = count;
        l.has_desc = !desc.is_null();
        Some(l)
    }

    /// One buffer of `count` elements (none when `buf` is null).
    fn one(buf: *const c_void, count: usize, desc: P, size: usize) -> Option<Local> {
        let mut l = Local::EMPTY;
        if !buf.is_null() {
            l.iov[0] = IoVec {
                addr: buf.cast_mut().cast(),
                len: count.checked_mul(size)?,
            };
            l.desc[0] = MrDesc(desc as u64);
            l.n = 1;
            l.has_desc = !desc.is_null();
        }
        Some(l)
    }

    fn iov(&self) -> &[IoVec] {
        &self.iov[..self.n]
    }

    fn desc(&self) -> &[MrDesc] {
        if self.has_desc {
            &self.desc[..self.n]
        } else {
            &[]
        }
    }
}

/// The size of `dt`'s elements, if it is one.
fn elem(dt: u32) -> Option<usize> {
    Datatype::try_from(dt).ok().map(Datatype::size)
}

/// Everything of one atomic operation.
struct Op {
    dt: u32,
    op: u32,
    operands: Option<Local>,
    compare: Option<Local>,
    result: Option<Local>,
    dest: u64,
    ranges: [RmaIov; MAX_IOV],
    nranges: usize,
    context: P,
    data: u64,
    flags: Option<OpFlags>,
}

impl Op {
    fn new(dt: u32, op: u32, dest: u64, context: P, data: u64, flags: Option<OpFlags>) -> Op {
        Op {
            dt,
            op,
            operands: Some(Local::EMPTY),
            compare: Some(Local::EMPTY),
            result: Some(Local::EMPTY),
            dest,
            ranges: [RmaIov {
                addr: 0,
                len: 0,
                key: 0,
            }; MAX_IOV],
            nranges: 0,
            context,
            data,
            flags,
        }
    }

    fn range(mut self, addr: u64, count: usize, key: u64) -> Op {
        self.ranges[0] = RmaIov {
            addr,
            len: count,
            key,
        };
        self.nranges = 1;
        self
    }
}

/// Posts `o` on the endpoint behind `ep`.
///
/// # Safety
///
/// `ep` null or a readable fid; the buffers follow fi_atomic(3).
unsafe fn post(ep: Ep, o: Op) -> isize {
    // SAFETY: the application passes an endpoint from fi_endpoint.
    let Some(e) = (unsafe { ep::get(ep) }) else {
        return EINVAL as isize;
    };
    let (Ok(datatype), Ok(op)) = (Datatype::try_from(o.dt), AtomicOp::try_from(o.op)) else {
        return EINVAL as isize;
    };
    let (Some(operands), Some(compare), Some(result)) = (&o.operands, &o.compare, &o.result) else {
        return EINVAL as isize;
    };
    let msg = AtomicMsg {
        iov: operands.iov(),
        desc: operands.desc(),
        addr: FiAddr(o.dest),
        rma_iov: &o.ranges[..o.nranges],
        datatype,
        op,
        result: result.iov(),
        compare: compare.iov(),
        context: o.context as u64,
        data: o.data,
    };
    let flags = o.flags.unwrap_or(e.tx_flags);
    // SAFETY: the buffer rules are the application's, per the contract.
    unsafe { e.inner.atomicmsg(&msg, flags) }.map_or_else(sz, |()| 0)
}

/// A result or compare buffer, which fetching and comparing atomics must
/// have: `None` (the call fails with `-FI_EINVAL`) when it has no piece or
/// a piece at a null address. (Operands may be absent: `FI_ATOMIC_READ`
/// ignores them.)
fn needed(l: Option<Local>) -> Option<Local> {
    l.filter(|l| !l.iov().is_empty() && !l.iov().iter().any(|v| v.addr.is_null() && v.len > 0))
}

/// The operation of a `fi_msg_atomic` (operands, ranges).
///
/// # Safety
///
/// `m` null or a valid `fi_msg_atomic`.
unsafe fn from_msg(m: *const FiMsgAtomic, flags: u64) -> Option<Op> {
    // SAFETY: per the contract.
    let m = unsafe { m.as_ref() }?;
    let size = elem(m.datatype)?;
    if m.rma_iov_count > MAX_IOV || (m.rma_iov.is_null() && m.rma_iov_count > 0) {
        return None;
    }
    let f = Some(OpFlags::from_bits_retain(flags));
    let mut o = Op::new(m.datatype, m.op, m.addr, m.context, m.data, f);
    // SAFETY: the message's own arrays.
    o.operands = unsafe { Local::from_c(m.msg_iov, m.desc, m.iov_count, size) };
    for i in 0..m.rma_iov_count {
        // SAFETY: `rma_iov_count` elements.
        let r = unsafe { *m.rma_iov.add(i) };
        o.ranges[i] = RmaIov {
            addr: r.addr,
            len: r.count,
            key: r.key,
        };
    }
    o.nranges = m.rma_iov_count;
    Some(o)
}

unsafe extern "C" fn write(
    ep: Ep,
    buf: *const c_void,
    count: usize,
    desc: P,
    dest: u64,
    addr: u64,
    key: u64,
    dt: u32,
    op: u32,
    ctx: P,
) -> isize {
    guard_sz(|| {
        let Some(size) = elem(dt) else {
            return EINVAL as isize;
        };
        let mut o = Op::new(dt, op, dest, ctx, 0, None).range(addr, count, key);
        o.operands = Local::one(buf, count, desc, size);
        // SAFETY: fi_atomic's arguments.
        unsafe { post(ep, o) }
    })
}

unsafe extern "C" fn writev(
    ep: Ep,
    ioc: Ioc,
    desc: Desc,
    count: usize,
    dest: u64,
    addr: u64,
    key: u64,
    dt: u32,
    op: u32,
    ctx: P,
) -> isize {
    guard_sz(|| {
        let Some(size) = elem(dt) else {
            return EINVAL as isize;
        };
        // SAFETY: fi_atomicv's arguments.
        let operands = unsafe { Local::from_c(ioc, desc, count, size) };
        let total = operands
            .as_ref()
            .map_or(0, |l| l.iov().iter().map(|v| v.len / size).sum());
        let mut o = Op::new(dt, op, dest, ctx, 0, None).range(addr, total, key);
        o.operands = operands;
        // SAFETY: fi_atomicv's arguments.
        unsafe { post(ep, o) }
    })
}

unsafe extern "C" fn writemsg(ep: Ep, m: *const FiMsgAtomic, flags: u64) -> isize {
    guard_sz(|| {
        // SAFETY: fi_atomicmsg's arguments.
        match unsafe { from_msg(m, flags) } {
            // SAFETY: as above.
            Some(o) => unsafe { post(ep, o) },
            None => EINVAL as isize,
        }
    })
}

unsafe extern "C" fn inject(
    ep: Ep,
    buf: *const c_void,
    count: usize,
    dest: u64,
    addr: u64,
    key: u64,
    dt: u32,
    op: u32,
) -> isize {
    guard_sz(|| {
        let Some(size) = elem(dt) else {
            return EINVAL as isize;
        };
        // SAFETY: null or a readable fid.
        let Some(e) = (unsafe { ep::get(ep) }) else {
            return EINVAL as isize;
        };
        let flags = Some(e.tx_flags | OpFlags::INJECT);
        let mut o = Op::new(dt, op, dest, ptr::null_mut(), 0, flags).range(addr, count, key);
        o.operands = Local::one(buf, count, ptr::null_mut(), size);
        // SAFETY: fi_inject_atomic's arguments.
        unsafe { post(ep, o) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readwrite(
    ep: Ep,
    buf: *const c_void,
    count: usize,
    desc: P,
    result: P,
    result_desc: P,
    dest: u64,
    addr: u64,
    key: u64,
    dt: u32,
    op: u32,
    ctx: P,
) -> isize {
    guard_sz(|| {
        let Some(size) = elem(dt) else {
            return EINVAL as isize;
        };
        let mut o = Op::new(dt, op, dest, ctx, 0, None).range(addr, count, key);
        o.operands = Local::one(buf, count, desc, size);
        o.result = needed(Local::one(result, count, result_desc, size));
        // SAFETY: fi_fetch_atomic's arguments.
        unsafe { post(ep, o) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readwritev(
    ep: Ep,
    ioc: Ioc,
    desc: Desc,
    count: usize,
    resultv: Ioc,
    result_desc: Desc,
    result_count: usize,
    dest: u64,
    addr: u64,
    key: u64,
    dt: u32,
    op: u32,
    ctx: P,
) -> isize {
    guard_sz(|| {
        let Some(size) = elem(dt) else {
            return EINVAL as isize;
        };
        // SAFETY: fi_fetch_atomicv's arguments.
        let (operands, result) = unsafe {
            (
                Local::from_c(ioc, desc, count, size),
                Local::from_c(resultv, result_desc, result_count, size),
            )
        };
        let total = result
            .as_ref()
            .map_or(0, |l| l.iov().iter().map(|v| v.len / size).sum());
        let mut o = Op::new(dt, op, dest, ctx, 0, None).range(addr, total, key);
        o.operands = operands;
        o.result = needed(result);
        // SAFETY: as above.
        unsafe { post(ep, o) }
    })
}

unsafe extern "C" fn readwritemsg(
    ep: Ep,
    m: *const FiMsgAtomic,
    resultv: Ioc,
    result_desc: Desc,
    result_count: usize,
    flags: u64,
) -> isize {
    guard_sz(|| {
        // SAFETY: fi_fetch_atomicmsg's arguments.
        let Some(mut o) = (unsafe { from_msg(m, flags) }) else {
            return EINVAL as isize;
        };
        let size = elem(o.dt).unwrap_or(1);
        // SAFETY: as above.
        o.result = needed(unsafe { Local::from_c(resultv, result_desc, result_count, size) });
        // SAFETY: as above.
        unsafe { post(ep, o) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwrite(
    ep: Ep,
    buf: *const c_void,
    count: usize,
    desc: P,
    compare: *const c_void,
    compare_desc: P,
    result: P,
    result_desc: P,
    dest: u64,
    addr: u64,
    key: u64,
    dt: u32,
    op: u32,
    ctx: P,
) -> isize {
    guard_sz(|| {
        let Some(size) = elem(dt) else {
            return EINVAL as isize;
        };
        let mut o = Op::new(dt, op, dest, ctx, 0, None).range(addr, count, key);
        o.operands = Local::one(buf, count, desc, size);
        o.compare = needed(Local::one(compare, count, compare_desc, size));
        o.result = needed(Local::one(result, count, result_desc, size));
        // SAFETY: fi_compare_atomic's arguments.
        unsafe { post(ep, o) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwritev(
    ep: Ep,
    ioc: Ioc,
    desc: Desc,
    count: usize,
    comparev: Ioc,
    compare_desc: Desc,
    compare_count: usize,
    resultv: Ioc,
    result_desc: Desc,
    result_count: usize,
    dest: u64,
    addr: u64,
    key: u64,
    dt: u32,
    op: u32,
    ctx: P,
) -> isize {
    guard_sz(|| {
        let Some(size) = elem(dt) else {
            return EINVAL as isize;
        };
        // SAFETY: fi_compare_atomicv's arguments.
        let (operands, compare, result) = unsafe {
            (
                Local::from_c(ioc, desc, count, size),
                Local::from_c(comparev, compare_desc, compare_count, size),
                Local::from_c(resultv, result_desc, result_count, size),
            )
        };
        let total = result
            .as_ref()
            .map_or(0, |l| l.iov().iter().map(|v| v.len / size).sum());
        let mut o = Op::new(dt, op, dest, ctx, 0, None).range(addr, total, key);
        o.operands = operands;
        o.compare = needed(compare);
        o.result = needed(result);
        // SAFETY: as above.
        unsafe { post(ep, o) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwritemsg(
    ep: Ep,
    m: *const FiMsgAtomic,
    comparev: Ioc,
    compare_desc: Desc,
    compare_count: usize,
    resultv: Ioc,
    result_desc: Desc,
    result_count: usize,
    flags: u64,
) -> isize {
    guard_sz(|| {
        // SAFETY: fi_compare_atomicmsg's arguments.
        let Some(mut o) = (unsafe { from_msg(m, flags) }) else {
            return EINVAL as isize;
        };
        let size = elem(o.dt).unwrap_or(1);
        // SAFETY: as above.
        unsafe {
            o.compare = needed(Local::from_c(comparev, compare_desc, compare_count, size));
            o.result = needed(Local::from_c(resultv, result_desc, result_count, size));
            post(ep, o)
        }
    })
}

unsafe extern "C" fn writevalid(ep: Ep, dt: u32, op: u32, count: *mut usize) -> c_int {
    valid(ep, dt, op, count, false, false)
}

unsafe extern "C" fn readwritevalid(ep: Ep, dt: u32, op: u32, count: *mut usize) -> c_int {
    valid(ep, dt, op, count, true, false)
}

unsafe extern "C" fn compwritevalid(ep: Ep, dt: u32, op: u32, count: *mut usize) -> c_int {
    valid(ep, dt, op, count, true, true)
}

/// `fi_atomicvalid` and its forms: whether the provider supports `op` on
/// `dt`, and how many elements one operation takes.
fn valid(ep: Ep, dt: u32, op: u32, count: *mut usize, fetch: bool, compare: bool) -> c_int {
    guard_int(|| {
        // SAFETY: the application passes an endpoint from fi_endpoint.
        let Some(e) = (unsafe { ep::get(ep) }) else {
            return EINVAL;
        };
        // An unknown datatype or operation is one the provider does not
        // serve: `-FI_EOPNOTSUPP`, as libfabric 1.17's providers answer.
        let (Ok(dt), Ok(op)) = (Datatype::try_from(dt), AtomicOp::try_from(op)) else {
            return EOPNOTSUPP;
        };
        match e.inner.atomic_valid(dt, op, fetch, compare) {
            Ok(n) => {
                // SAFETY: null or writable, per fi_atomic(3).
                unsafe { super::put(count, n) };
                0
            }
            Err(err) => err.code(),
        }
    })
}

/// `struct fi_atomic_attr`: what `fi_query_atomic` reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FiAtomicAttr {
    /// `size_t count`: elements one operation may carry.
    pub count: usize,
    /// `size_t size`: bytes of one element of the datatype.
    pub size: usize,
}

/// `fi_query_atomic`'s flag: as `fi_fetch_atomicvalid`.
const FI_FETCH_ATOMIC: u64 = 1 << 58;
/// `fi_query_atomic`'s flag: as `fi_compare_atomicvalid`.
const FI_COMPARE_ATOMIC: u64 = 1 << 59;

/// `-FI_EOPNOTSUPP`.
const EOPNOTSUPP: c_int = fabric::ErrorKind::OpNotSupp.code();

/// `fi_ops_domain.query_atomic` (`fi_query_atomic`): the domain's form of
/// the atomic valid calls, `flags` choosing which (0: `fi_atomicvalid`,
/// `FI_FETCH_ATOMIC`, `FI_COMPARE_ATOMIC`; both at once: `-FI_EBADFLAGS`).
/// Atomics into tagged receive buffers (`FI_TAGGED`) and collectives
/// (`FI_COLLECTIVE`, which `fi_query_collective` adds) are not offered:
/// `-FI_EOPNOTSUPP`, as for an unknown datatype or operation.
///
/// # Safety
///
/// `dom` comes from `fi_domain`; `attr` is null or writable.
pub(crate) unsafe extern "C" fn query_atomic(
    dom: *mut FidDomain,
    dt: u32,
    op: u32,
    attr: *mut c_void,
    flags: u64,
) -> c_int {
    guard_int(|| {
        // SAFETY: the application passes a domain from fi_domain.
        let Some(d) = (unsafe { domain::get(dom) }) else {
            return EINVAL;
        };
        let attr = attr.cast::<FiAtomicAttr>();
        if attr.is_null() {
            return EINVAL;
        }
        let (fetch, compare) = (flags & FI_FETCH_ATOMIC != 0, flags & FI_COMPARE_ATOMIC != 0);
        if fetch && compare {
            return fabric::ErrorKind::BadFlags.code();
        }
        if flags & (fabric::Caps::TAGGED.bits() | fabric::Caps::COLLECTIVE.bits()) != 0 {
            return EOPNOTSUPP;
        }
        let (Ok(dt), Ok(op)) = (Datatype::try_from(dt), AtomicOp::try_from(op)) else {
            return EOPNOTSUPP;
        };
        match d.inner.query_atomic(dt, op, fetch, compare) {
            Ok(count) => {
                // SAFETY: checked non-null; writable per fi_atomic(3).
                unsafe {
                    attr.write(FiAtomicAttr {
                        count,
                        size: dt.size(),
                    })
                };
                0
            }
            Err(err) => err.code(),
        }
    })
}
