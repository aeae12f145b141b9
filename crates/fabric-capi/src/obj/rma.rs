//! `struct fi_ops_rma` and `struct fi_ops_atomic`: every transfer slot
//! returns `-FI_ENOSYS` for now (the C data path covers messages and
//! tagged messages first); `fi_atomicvalid` and its fetch / compare forms
//! ask the provider.

use std::ffi::{c_int, c_void};

use fabric::objects::{AtomicOp, Datatype};

use super::ep::{self, FidEp};
use super::{EINVAL, ENOSYS, guard_int};

type Ep = *mut FidEp;
type P = *mut c_void;

/// Declares a table struct of `unsafe extern "C"` slots and a stub per
/// slot returning `-FI_ENOSYS` with the slot's own signature.
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
        readv: (Ep, P, P, usize, u64, u64, u64, P) -> isize,
        readmsg: (Ep, P, u64) -> isize,
        write: (Ep, P, usize, P, u64, u64, u64, P) -> isize,
        writev: (Ep, P, P, usize, u64, u64, u64, P) -> isize,
        writemsg: (Ep, P, u64) -> isize,
        inject: (Ep, P, usize, u64, u64, u64) -> isize,
        writedata: (Ep, P, usize, P, u64, u64, u64, u64, P) -> isize,
        injectdata: (Ep, P, usize, u64, u64, u64, u64) -> isize,
    }
}

table! {
    /// `struct fi_ops_atomic`.
    FiOpsAtomic {
        write: (Ep, P, usize, P, u64, u64, u64, u32, u32, P) -> isize,
        writev: (Ep, P, P, usize, u64, u64, u64, u32, u32, P) -> isize,
        writemsg: (Ep, P, u64) -> isize,
        inject: (Ep, P, usize, u64, u64, u64, u32, u32) -> isize,
        readwrite: (Ep, P, usize, P, P, P, u64, u64, u64, u32, u32, P) -> isize,
        readwritev: (Ep, P, P, usize, P, P, usize, u64, u64, u64, u32, u32, P) -> isize,
        readwritemsg: (Ep, P, P, P, usize, u64) -> isize,
        compwrite: (Ep, P, usize, P, P, P, P, P, u64, u64, u64, u32, u32, P) -> isize,
        compwritev: (Ep, P, P, usize, P, P, usize, P, P, usize, u64, u64, u64, u32, u32, P) -> isize,
        compwritemsg: (Ep, P, P, P, usize, P, P, usize, u64) -> isize,
        writevalid: (Ep, u32, u32, *mut usize) -> c_int,
        readwritevalid: (Ep, u32, u32, *mut usize) -> c_int,
        compwritevalid: (Ep, u32, u32, *mut usize) -> c_int,
    }
}

/// Defines `-FI_ENOSYS` stubs with the given signatures.
macro_rules! stubs {
    ($($f:ident ($($arg:ty),*);)*) => {$(
        unsafe extern "C" fn $f($(_: $arg),*) -> isize {
            ENOSYS as isize
        }
    )*};
}

stubs! {
    r_read(Ep, P, usize, P, u64, u64, u64, P);
    r_readv(Ep, P, P, usize, u64, u64, u64, P);
    r_msg(Ep, P, u64);
    r_inject(Ep, P, usize, u64, u64, u64);
    r_writedata(Ep, P, usize, P, u64, u64, u64, u64, P);
    r_injectdata(Ep, P, usize, u64, u64, u64, u64);
    a_write(Ep, P, usize, P, u64, u64, u64, u32, u32, P);
    a_writev(Ep, P, P, usize, u64, u64, u64, u32, u32, P);
    a_inject(Ep, P, usize, u64, u64, u64, u32, u32);
    a_readwrite(Ep, P, usize, P, P, P, u64, u64, u64, u32, u32, P);
    a_readwritev(Ep, P, P, usize, P, P, usize, u64, u64, u64, u32, u32, P);
    a_readwritemsg(Ep, P, P, P, usize, u64);
    a_compwrite(Ep, P, usize, P, P, P, P, P, u64, u64, u64, u32, u32, P);
    a_compwritev(Ep, P, P, usize, P, P, usize, P, P, usize, u64, u64, u64, u32, u32, P);
    a_compwritemsg(Ep, P, P, P, usize, P, P, usize, u64);
}

/// The `fi_ops_rma` of endpoints.
pub(crate) static RMA_OPS: FiOpsRma = FiOpsRma {
    size: size_of::<FiOpsRma>(),
    read: r_read,
    readv: r_readv,
    readmsg: r_msg,
    write: r_read,
    writev: r_readv,
    writemsg: r_msg,
    inject: r_inject,
    writedata: r_writedata,
    injectdata: r_injectdata,
};

/// The `fi_ops_atomic` of endpoints.
pub(crate) static ATOMIC_OPS: FiOpsAtomic = FiOpsAtomic {
    size: size_of::<FiOpsAtomic>(),
    write: a_write,
    writev: a_writev,
    writemsg: r_msg,
    inject: a_inject,
    readwrite: a_readwrite,
    readwritev: a_readwritev,
    readwritemsg: a_readwritemsg,
    compwrite: a_compwrite,
    compwritev: a_compwritev,
    compwritemsg: a_compwritemsg,
    writevalid,
    readwritevalid,
    compwritevalid,
};

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
        let (Ok(dt), Ok(op)) = (Datatype::try_from(dt), AtomicOp::try_from(op)) else {
            return EINVAL;
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
