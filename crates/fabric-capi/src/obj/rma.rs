//! `struct fi_ops_rma`: read, write, writedata and inject_write through
//! the provider, as [`super::msg`] does for messages.

use std::ffi::c_void;

use fabric::OpFlags;
use fabric::objects::{FiAddr, RmaIov, RmaMsg};

use super::ep::{self, FidEp};
use super::msg::{Bufs, MAX_IOV, One, Pieces};
use super::{EINVAL, guard_sz, sz};

/// `struct fi_rma_iov`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiRmaIov {
    /// `uint64_t addr`.
    pub addr: u64,
    /// `size_t len`.
    pub len: usize,
    /// `uint64_t key`.
    pub key: u64,
}

/// `struct fi_msg_rma`.
#[repr(C)]
pub struct FiMsgRma {
    /// `const struct iovec *msg_iov`.
    pub msg_iov: *const libc::iovec,
    /// `void **desc`.
    pub desc: *mut *mut c_void,
    /// `size_t iov_count`.
    pub iov_count: usize,
    /// `fi_addr_t addr`.
    pub addr: u64,
    /// `const struct fi_rma_iov *rma_iov`.
    pub rma_iov: *const FiRmaIov,
    /// `size_t rma_iov_count`.
    pub rma_iov_count: usize,
    /// `void *context`.
    pub context: *mut c_void,
    /// `uint64_t data`.
    pub data: u64,
}

type Ep = *mut FidEp;
type P = *mut c_void;
type Iov = *const libc::iovec;
type Desc = *mut *mut c_void;

/// Declares an operation table: `size`, then `unsafe extern "C"` slots.
macro_rules! table {
    ($(#[$m:meta])* $name:ident { $($slot:ident : ($($arg:ty),*) -> $ret:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            /// `size_t size`.
            pub size: usize,
            $(
                #[doc = concat!("`", stringify!($slot), "`.")]
                pub $slot: unsafe extern "C" fn($($arg),*) -> $ret,
            )*
        }
    };
}

table! {
    /// `struct fi_ops_rma`.
    FiOpsRma {
        read: (Ep, P, usize, P, u64, u64, u64, P) -> isize,
        readv: (Ep, Iov, Desc, usize, u64, u64, u64, P) -> isize,
        readmsg: (Ep, *const FiMsgRma, u64) -> isize,
        write: (Ep, *const c_void, usize, P, u64, u64, u64, P) -> isize,
        writev: (Ep, Iov, Desc, usize, u64, u64, u64, P) -> isize,
        writemsg: (Ep, *const FiMsgRma, u64) -> isize,
        inject: (Ep, *const c_void, usize, u64, u64, u64) -> isize,
        writedata: (Ep, *const c_void, usize, P, u64, u64, u64, u64, P) -> isize,
        injectdata: (Ep, *const c_void, usize, u64, u64, u64, u64) -> isize,
    }
}

/// The `fi_ops_rma` of endpoints.
pub(crate) static RMA_OPS: FiOpsRma = FiOpsRma {
    size: size_of::<FiOpsRma>(),
    read,
    readv,
    readmsg,
    write,
    writev,
    writemsg,
    inject,
    writedata,
    injectdata,
};

/// Posts one RMA read or write on the endpoint behind `ep`; `flags` None:
/// the endpoint's transmit defaults.
///
/// # Safety
///
/// `ep` null or a readable fid; the buffers follow fi_rma(3).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn post<B: Bufs>(
    ep: Ep,
    write: bool,
    b: Option<B>,
    dest: u64,
    remote: &[RmaIov],
    context: P,
    data: u64,
    flags: Option<OpFlags>,
) -> isize {
    // SAFETY: the application passes an endpoint from fi_endpoint.
    let Some(e) = (unsafe { ep::get(ep) }) else {
        return EINVAL as isize;
    };
    let Some(b) = b else {
        return EINVAL as isize;
    };
    let msg = RmaMsg {
        iov: b.iov(),
        desc: b.desc(),
        addr: FiAddr(dest),
        rma_iov: remote,
        context: context as u64,
        data,
    };
    let flags = flags.unwrap_or(e.tx_flags);
    // SAFETY: the buffer rules are the application's, per the contract.
    let r = unsafe {
        if write {
            e.inner.writemsg(&msg, flags)
        } else {
            e.inner.readmsg(&msg, flags)
        }
    };
    r.map_or_else(sz, |()| 0)
}

/// The transmit defaults of the endpoint plus FI_REMOTE_CQ_DATA.
///
/// # Safety
///
/// `ep` null or a readable fid.
unsafe fn data_flags(ep: Ep) -> Option<OpFlags> {
    // SAFETY: per the contract.
    unsafe { ep::get(ep) }.map(|e| e.tx_flags | OpFlags::REMOTE_CQ_DATA)
}

fn one_range(addr: u64, len: usize, key: u64) -> [RmaIov; 1] {
    [RmaIov { addr, len, key }]
}

unsafe extern "C" fn read(
    ep: Ep,
    buf: P,
    len: usize,
    desc: P,
    src: u64,
    addr: u64,
    key: u64,
    ctx: P,
) -> isize {
    let r = one_range(addr, len, key);
    // SAFETY: fi_read's arguments.
    guard_sz(|| unsafe { post(ep, false, One::new(buf, len, desc), src, &r, ctx, 0, None) })
}

/// The sum of the lengths of a C iovec array.
///
/// # Safety
///
/// `iov` has `count` elements (or is null with `count` 0).
unsafe fn total(iov: Iov, count: usize) -> usize {
    if iov.is_null() {
        return 0;
    }
    // SAFETY: per the contract.
    (0..count.min(MAX_IOV))
        .map(|i| unsafe { (*iov.add(i)).iov_len })
        .sum()
}

unsafe extern "C" fn readv(
    ep: Ep,
    iov: Iov,
    desc: Desc,
    count: usize,
    src: u64,
    addr: u64,
    key: u64,
    ctx: P,
) -> isize {
    // SAFETY: fi_readv's arguments.
    guard_sz(|| unsafe {
        let r = one_range(addr, total(iov, count), key);
        post(
            ep,
            false,
            Pieces::from_c(iov, desc, count),
            src,
            &r,
            ctx,
            0,
            None,
        )
    })
}

/// Posts a `fi_msg_rma`.
///
/// # Safety
///
/// `m` null or a valid `fi_msg_rma`; as [`post`].
unsafe fn post_msg(ep: Ep, write: bool, m: *const FiMsgRma, flags: u64) -> isize {
    // SAFETY: per the contract.
    let Some(m) = (unsafe { m.as_ref() }) else {
        return EINVAL as isize;
    };
    if m.rma_iov_count > MAX_IOV || (m.rma_iov.is_null() && m.rma_iov_count > 0) {
        return EINVAL as isize;
    }
    let mut ranges = [RmaIov {
        addr: 0,
        len: 0,
        key: 0,
    }; MAX_IOV];
    for (i, r) in ranges.iter_mut().take(m.rma_iov_count).enumerate() {
        // SAFETY: `rma_iov_count` elements.
        let c = unsafe { *m.rma_iov.add(i) };
        *r = RmaIov {
            addr: c.addr,
            len: c.len,
            key: c.key,
        };
    }
    // SAFETY: the message's own arrays.
    let b = unsafe { Pieces::from_c(m.msg_iov, m.desc, m.iov_count) };
    let f = Some(OpFlags::from_bits_retain(flags));
    // SAFETY: per the contract.
    unsafe {
        post(
            ep,
            write,
            b,
            m.addr,
            &ranges[..m.rma_iov_count],
            m.context,
            m.data,
            f,
        )
    }
}

unsafe extern "C" fn readmsg(ep: Ep, m: *const FiMsgRma, flags: u64) -> isize {
    // SAFETY: fi_readmsg's arguments.
    guard_sz(|| unsafe { post_msg(ep, false, m, flags) })
}

unsafe extern "C" fn write(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    desc: P,
    dest: u64,
    addr: u64,
    key: u64,
    ctx: P,
) -> isize {
    let r = one_range(addr, len, key);
    // SAFETY: fi_write's arguments.
    guard_sz(|| unsafe { post(ep, true, One::new(buf, len, desc), dest, &r, ctx, 0, None) })
}

unsafe extern "C" fn writev(
    ep: Ep,
    iov: Iov,
    desc: Desc,
    count: usize,
    dest: u64,
    addr: u64,
    key: u64,
    ctx: P,
) -> isize {
    // SAFETY: fi_writev's arguments.
    guard_sz(|| unsafe {
        let r = one_range(addr, total(iov, count), key);
        post(
            ep,
            true,
            Pieces::from_c(iov, desc, count),
            dest,
            &r,
            ctx,
            0,
            None,
        )
    })
}

unsafe extern "C" fn writemsg(ep: Ep, m: *const FiMsgRma, flags: u64) -> isize {
    // SAFETY: fi_writemsg's arguments.
    guard_sz(|| unsafe { post_msg(ep, true, m, flags) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writedata(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    desc: P,
    data: u64,
    dest: u64,
    addr: u64,
    key: u64,
    ctx: P,
) -> isize {
    let r = one_range(addr, len, key);
    // SAFETY: fi_writedata's arguments.
    guard_sz(|| unsafe {
        let f = data_flags(ep);
        post(ep, true, One::new(buf, len, desc), dest, &r, ctx, data, f)
    })
}

/// An RMA inject (`data`: with remote CQ data).
///
/// # Safety
///
/// `buf` has `len` readable bytes; `ep` null or a readable fid.
unsafe fn inject_op(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    dest: u64,
    addr: u64,
    key: u64,
    data: Option<u64>,
) -> isize {
    // SAFETY: the application passes an endpoint from fi_endpoint.
    let Some(e) = (unsafe { ep::get(ep) }) else {
        return EINVAL as isize;
    };
    let bytes: &[u8] = if len == 0 {
        &[]
    } else if buf.is_null() {
        return EINVAL as isize;
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(buf.cast(), len) }
    };
    let remote = RmaIov { addr, len, key };
    e.inner
        .inject_write(bytes, FiAddr(dest), remote, data)
        .map_or_else(sz, |()| 0)
}

unsafe extern "C" fn inject(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    dest: u64,
    addr: u64,
    key: u64,
) -> isize {
    // SAFETY: fi_inject_write's arguments.
    guard_sz(|| unsafe { inject_op(ep, buf, len, dest, addr, key, None) })
}

unsafe extern "C" fn injectdata(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: u64,
    addr: u64,
    key: u64,
) -> isize {
    // SAFETY: fi_inject_writedata's arguments.
    guard_sz(|| unsafe { inject_op(ep, buf, len, dest, addr, key, Some(data)) })
}
