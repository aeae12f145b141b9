//! The data path: `struct fi_ops_msg` and `struct fi_ops_tagged`.
//!
//! Each trampoline checks the endpoint (two compares), builds the
//! operation on the stack and makes one call through the provider's
//! endpoint: no allocation, no lock. The short forms (`fi_send`,
//! `fi_recv`, `fi_tsend`, ...) use the endpoint's default flags
//! (`tx_attr.op_flags` / `rx_attr.op_flags` of the opened endpoint); the
//! `*msg` forms use the flags given. Contexts travel as the pointer's
//! value and come back unchanged in the completion.

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use fabric::OpFlags;
use fabric::objects::{FiAddr, IoVec, MrDesc, Msg};

use super::ep::{self, EpObj, FidEp};
use super::{EINVAL, guard_sz, sz};

/// `struct fi_msg`.
#[repr(C)]
pub struct FiMsg {
    /// `const struct iovec *msg_iov`.
    pub msg_iov: *const libc::iovec,
    /// `void **desc`.
    pub desc: *mut *mut c_void,
    /// `size_t iov_count`.
    pub iov_count: usize,
    /// `fi_addr_t addr`.
    pub addr: u64,
    /// `void *context`.
    pub context: *mut c_void,
    /// `uint64_t data`.
    pub data: u64,
}

/// `struct fi_msg_tagged`.
#[repr(C)]
pub struct FiMsgTagged {
    /// `const struct iovec *msg_iov`.
    pub msg_iov: *const libc::iovec,
    /// `void **desc`.
    pub desc: *mut *mut c_void,
    /// `size_t iov_count`.
    pub iov_count: usize,
    /// `fi_addr_t addr`.
    pub addr: u64,
    /// `uint64_t tag`.
    pub tag: u64,
    /// `uint64_t ignore`.
    pub ignore: u64,
    /// `void *context`.
    pub context: *mut c_void,
    /// `uint64_t data`.
    pub data: u64,
}

type Ep = *mut FidEp;
type Iov = *const libc::iovec;
type Desc = *mut *mut c_void;
type Ctx = *mut c_void;

/// `struct fi_ops_msg`.
#[repr(C)]
pub struct FiOpsMsg {
    /// `size_t size`.
    pub size: usize,
    /// `recv`.
    pub recv: unsafe extern "C" fn(Ep, *mut c_void, usize, *mut c_void, u64, Ctx) -> isize,
    /// `recvv`.
    pub recvv: unsafe extern "C" fn(Ep, Iov, Desc, usize, u64, Ctx) -> isize,
    /// `recvmsg`.
    pub recvmsg: unsafe extern "C" fn(Ep, *const FiMsg, u64) -> isize,
    /// `send`.
    pub send: unsafe extern "C" fn(Ep, *const c_void, usize, *mut c_void, u64, Ctx) -> isize,
    /// `sendv`.
    pub sendv: unsafe extern "C" fn(Ep, Iov, Desc, usize, u64, Ctx) -> isize,
    /// `sendmsg`.
    pub sendmsg: unsafe extern "C" fn(Ep, *const FiMsg, u64) -> isize,
    /// `inject`.
    pub inject: unsafe extern "C" fn(Ep, *const c_void, usize, u64) -> isize,
    /// `senddata`.
    pub senddata:
        unsafe extern "C" fn(Ep, *const c_void, usize, *mut c_void, u64, u64, Ctx) -> isize,
    /// `injectdata`.
    pub injectdata: unsafe extern "C" fn(Ep, *const c_void, usize, u64, u64) -> isize,
}

/// `struct fi_ops_tagged`.
#[repr(C)]
pub struct FiOpsTagged {
    /// `size_t size`.
    pub size: usize,
    /// `recv`.
    pub recv:
        unsafe extern "C" fn(Ep, *mut c_void, usize, *mut c_void, u64, u64, u64, Ctx) -> isize,
    /// `recvv`.
    pub recvv: unsafe extern "C" fn(Ep, Iov, Desc, usize, u64, u64, u64, Ctx) -> isize,
    /// `recvmsg`.
    pub recvmsg: unsafe extern "C" fn(Ep, *const FiMsgTagged, u64) -> isize,
    /// `send`.
    pub send: unsafe extern "C" fn(Ep, *const c_void, usize, *mut c_void, u64, u64, Ctx) -> isize,
    /// `sendv`.
    pub sendv: unsafe extern "C" fn(Ep, Iov, Desc, usize, u64, u64, Ctx) -> isize,
    /// `sendmsg`.
    pub sendmsg: unsafe extern "C" fn(Ep, *const FiMsgTagged, u64) -> isize,
    /// `inject`.
    pub inject: unsafe extern "C" fn(Ep, *const c_void, usize, u64, u64) -> isize,
    /// `senddata`.
    pub senddata:
        unsafe extern "C" fn(Ep, *const c_void, usize, *mut c_void, u64, u64, u64, Ctx) -> isize,
    /// `injectdata`.
    pub injectdata: unsafe extern "C" fn(Ep, *const c_void, usize, u64, u64, u64) -> isize,
}

/// The `fi_ops_msg` of endpoints.
pub(crate) static MSG_OPS: FiOpsMsg = FiOpsMsg {
    size: size_of::<FiOpsMsg>(),
    recv,
    recvv,
    recvmsg,
    send,
    sendv,
    sendmsg,
    inject,
    senddata,
    injectdata,
};

/// The `fi_ops_tagged` of endpoints.
pub(crate) static TAGGED_OPS: FiOpsTagged = FiOpsTagged {
    size: size_of::<FiOpsTagged>(),
    recv: trecv,
    recvv: trecvv,
    recvmsg: trecvmsg,
    send: tsend,
    sendv: tsendv,
    sendmsg: tsendmsg,
    inject: tinject,
    senddata: tsenddata,
    injectdata: tinjectdata,
};

/// Most pieces of one vector operation (larger: `-FI_EINVAL`).
pub(crate) const MAX_IOV: usize = 16;

/// Which provider call an operation is.
#[derive(Clone, Copy)]
enum Op {
    Send,
    Recv,
    TSend,
    TRecv,
}

/// A vector operation's pieces and descriptors, on the stack.
pub(crate) struct Pieces {
    /// The pieces.
    pub iov: [IoVec; MAX_IOV],
    /// Their descriptors.
    pub desc: [MrDesc; MAX_IOV],
    /// How many pieces.
    pub n: usize,
    /// Whether descriptors were given.
    pub has_desc: bool,
}

impl Pieces {
    #[inline(always)]
    fn empty() -> Pieces {
        Pieces {
            iov: [IoVec {
                addr: ptr::null_mut(),
                len: 0,
            }; MAX_IOV],
            desc: [MrDesc(0); MAX_IOV],
            n: 0,
            has_desc: false,
        }
    }

    /// `count` pieces of a C iovec array with optional descriptors; `None`
    /// when there are too many, or a piece at a null address has bytes.
    ///
    /// # Safety
    ///
    /// `iov` has `count` elements; `desc` is null or has `count`.
    #[inline]
    pub(crate) unsafe fn from_c(iov: Iov, desc: Desc, count: usize) -> Option<Pieces> {
        if count > MAX_IOV || (iov.is_null() && count > 0) {
            return None;
        }
        let mut p = Pieces::empty();
        for i in 0..count {
            // SAFETY: `count` elements, per the contract.
            let v = unsafe { &*iov.add(i) };
            if v.iov_base.is_null() && v.iov_len > 0 {
                return None;
            }
            p.iov[i] = IoVec {
                addr: v.iov_base.cast(),
                len: v.iov_len,
            };
            if !desc.is_null() {
                // SAFETY: as above.
                p.desc[i] = MrDesc(unsafe { *desc.add(i) } as u64);
            }
        }
        p.n = count;
        p.has_desc = !desc.is_null();
        Some(p)
    }
}

/// The buffer of an operation: its pieces and their descriptors.
pub(crate) trait Bufs {
    /// The pieces.
    fn iov(&self) -> &[IoVec];
    /// The descriptors (empty when none were given).
    fn desc(&self) -> &[MrDesc];
}

impl Bufs for Pieces {
    #[inline(always)]
    fn iov(&self) -> &[IoVec] {
        &self.iov[..self.n]
    }

    #[inline(always)]
    fn desc(&self) -> &[MrDesc] {
        if self.has_desc {
            &self.desc[..self.n]
        } else {
            &[]
        }
    }
}

/// The one piece of the short forms (`fi_send`, `fi_recv`, ...), without
/// the arrays of [`Pieces`].
pub(crate) struct One {
    iov: [IoVec; 1],
    desc: [MrDesc; 1],
}

impl One {
    /// `buf` of `len` bytes with descriptor `desc` (NULL: none); `None`
    /// (the call fails with `-FI_EINVAL`) for a null `buf` with bytes.
    #[inline(always)]
    pub(crate) fn new(buf: *const c_void, len: usize, desc: *mut c_void) -> Option<One> {
        if buf.is_null() && len > 0 {
            return None;
        }
        Some(One {
            iov: [IoVec {
                addr: buf.cast_mut().cast(),
                len,
            }],
            desc: [MrDesc(desc as u64)],
        })
    }
}

impl Bufs for One {
    #[inline(always)]
    fn iov(&self) -> &[IoVec] {
        &self.iov
    }

    #[inline(always)]
    fn desc(&self) -> &[MrDesc] {
        if self.desc[0].0 == 0 { &[] } else { &self.desc }
    }
}

/// Posts one operation on the endpoint behind `ep`.
///
/// # Safety
///
/// `ep` is null or a readable fid; the buffers follow the rules of the
/// provider's operation (fi_msg(3), fi_tagged(3)).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn post<B: Bufs>(
    ep: Ep,
    op: Op,
    p: Option<B>,
    addr: u64,
    tag: u64,
    ignore: u64,
    context: Ctx,
    data: u64,
    flags: Option<OpFlags>,
) -> isize {
    // SAFETY: the application passes an endpoint from fi_endpoint.
    let Some(e): Option<&EpObj> = (unsafe { ep::get(ep) }) else {
        // SAFETY: as above, or a context from fi_srx_context.
        return unsafe { post_srx(ep, op, p, addr, tag, ignore, context, data, flags) };
    };
    let Some(p) = p else {
        return EINVAL as isize;
    };
    let msg = Msg {
        iov: p.iov(),
        desc: p.desc(),
        addr: FiAddr(addr),
        tag,
        ignore,
        context: context as u64,
        data,
    };
    let tx = matches!(op, Op::Send | Op::TSend);
    let flags = flags.unwrap_or(if tx { e.tx_flags } else { e.rx_flags });
    // SAFETY: the buffer rules are the application's, per the contract.
    let r = unsafe {
        match op {
            Op::Send => e.inner.sendmsg(&msg, flags),
            Op::Recv => e.inner.recvmsg(&msg, flags),
            Op::TSend => e.inner.tsendmsg(&msg, flags),
            Op::TRecv => e.inner.trecvmsg(&msg, flags),
        }
    };
    r.map_or_else(sz, |()| 0)
}

/// [`post`] on a shared receive context (`fi_srx_context`): receives go
/// to the provider's context, sends are refused by it; not a context:
/// `-FI_EINVAL`.
///
/// # Safety
///
/// As [`post`].
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn post_srx<B: Bufs>(
    ep: Ep,
    op: Op,
    p: Option<B>,
    addr: u64,
    tag: u64,
    ignore: u64,
    context: Ctx,
    data: u64,
    flags: Option<OpFlags>,
) -> isize {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { super::srx::get(ep) }) else {
        return EINVAL as isize;
    };
    let Some(p) = p else {
        return EINVAL as isize;
    };
    let msg = Msg {
        iov: p.iov(),
        desc: p.desc(),
        addr: FiAddr(addr),
        tag,
        ignore,
        context: context as u64,
        data,
    };
    let flags = flags.unwrap_or(s.rx_flags);
    // SAFETY: the buffer rules are the application's, per the contract.
    let r = unsafe {
        match op {
            Op::Send => s.inner.sendmsg(&msg, flags),
            Op::Recv => s.inner.recvmsg(&msg, flags),
            Op::TSend => s.inner.tsendmsg(&msg, flags),
            Op::TRecv => s.inner.trecvmsg(&msg, flags),
        }
    };
    r.map_or_else(sz, |()| 0)
}

/// The bytes of an inject.
///
/// # Safety
///
/// `buf` has `len` readable bytes (or `len` is 0).
#[inline(always)]
unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    let p = NonNull::new(buf.cast_mut().cast::<u8>())?;
    // SAFETY: per the contract.
    Some(unsafe { std::slice::from_raw_parts(p.as_ptr(), len) })
}

/// An inject (`tag`: tagged) on the endpoint behind `ep`.
///
/// # Safety
///
/// As [`bytes`]; `ep` null or a readable fid.
#[inline(always)]
unsafe fn inject_op(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    dest: u64,
    tag: Option<u64>,
    data: Option<u64>,
) -> isize {
    // SAFETY: the application passes an endpoint from fi_endpoint.
    let Some(e) = (unsafe { ep::get(ep) }) else {
        // SAFETY: as above, or a context from fi_srx_context, which
        // refuses sends.
        return match unsafe { super::srx::get(ep) } {
            Some(s) => s
                .inner
                .inject(&[], FiAddr(dest), data)
                .map_or_else(sz, |()| 0),
            None => EINVAL as isize,
        };
    };
    // SAFETY: per the contract.
    let Some(b) = (unsafe { bytes(buf, len) }) else {
        return EINVAL as isize;
    };
    let r = match tag {
        None => e.inner.inject(b, FiAddr(dest), data),
        Some(t) => e.inner.tinject(b, FiAddr(dest), t, data),
    };
    r.map_or_else(sz, |()| 0)
}

/// The `fi_msg` behind a `*msg` call's pointer.
///
/// # Safety
///
/// `m` null or a valid `fi_msg`.
#[inline(always)]
unsafe fn read_msg<'a>(m: *const FiMsg) -> Option<(&'a FiMsg, Option<Pieces>)> {
    // SAFETY: per the contract.
    let m = unsafe { m.as_ref() }?;
    // SAFETY: the message's own arrays.
    Some((m, unsafe { Pieces::from_c(m.msg_iov, m.desc, m.iov_count) }))
}

/// The `fi_msg_tagged` behind a `*msg` call's pointer.
///
/// # Safety
///
/// `m` null or a valid `fi_msg_tagged`.
#[inline(always)]
unsafe fn read_tmsg<'a>(m: *const FiMsgTagged) -> Option<(&'a FiMsgTagged, Option<Pieces>)> {
    // SAFETY: per the contract.
    let m = unsafe { m.as_ref() }?;
    // SAFETY: the message's own arrays.
    Some((m, unsafe { Pieces::from_c(m.msg_iov, m.desc, m.iov_count) }))
}

const NO_FLAGS: Option<OpFlags> = None;

/// `fi_recv` (`tagged` `None`) or `fi_trecv` (`Some((tag, ignore))`) of
/// one buffer: the provider's short path (`recv_one`, `trecv_one`) on an
/// endpoint, [`post`] on a shared receive context. Programs such as
/// `fi_pingpong` post each receive between a completion and their answer.
///
/// # Safety
///
/// As [`post`].
#[inline(always)]
unsafe fn post_one(
    ep: Ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src: u64,
    tagged: Option<(u64, u64)>,
    ctx: Ctx,
) -> isize {
    // SAFETY: the application passes an endpoint from fi_endpoint, or a
    // shared receive context, which `post` takes.
    let Some(e) = (unsafe { ep::get(ep) }) else {
        let (op, (tag, ignore)) = tagged.map_or((Op::Recv, (0, 0)), |t| (Op::TRecv, t));
        let p = One::new(buf, len, desc);
        // SAFETY: per the contract.
        return unsafe { post(ep, op, p, src, tag, ignore, ctx, 0, NO_FLAGS) };
    };
    if buf.is_null() && len > 0 {
        return EINVAL as isize;
    }
    let (buf, desc) = (
        IoVec {
            addr: buf.cast(),
            len,
        },
        MrDesc(desc as u64),
    );
    let (src, ctx, flags) = (FiAddr(src), ctx as u64, e.rx_flags);
    // SAFETY: the buffer rules are the application's, per fi_recv(3).
    let r = unsafe {
        match tagged {
            None => e.inner.recv_one(buf, desc, src, ctx, flags),
            Some((tag, ignore)) => e.inner.trecv_one(buf, desc, src, tag, ignore, ctx, flags),
        }
    };
    r.map_or_else(sz, |()| 0)
}

unsafe extern "C" fn recv(
    ep: Ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: fi_recv's arguments.
    guard_sz(|| unsafe { post_one(ep, buf, len, desc, src, None, ctx) })
}

unsafe extern "C" fn recvv(
    ep: Ep,
    iov: Iov,
    desc: Desc,
    count: usize,
    src: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: fi_recvv's arguments.
    guard_sz(|| unsafe {
        let p = Pieces::from_c(iov, desc, count);
        post(ep, Op::Recv, p, src, 0, 0, ctx, 0, NO_FLAGS)
    })
}

unsafe extern "C" fn recvmsg(ep: Ep, m: *const FiMsg, flags: u64) -> isize {
    // SAFETY: fi_recvmsg's arguments.
    guard_sz(|| unsafe {
        let Some((m, p)) = read_msg(m) else {
            return EINVAL as isize;
        };
        let f = Some(OpFlags::from_bits_retain(flags));
        post(ep, Op::Recv, p, m.addr, 0, 0, m.context, m.data, f)
    })
}

unsafe extern "C" fn send(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest: u64,
    ctx: Ctx,
) -> isize {
    let p = One::new(buf, len, desc);
    // SAFETY: fi_send's arguments.
    guard_sz(|| unsafe { post(ep, Op::Send, p, dest, 0, 0, ctx, 0, NO_FLAGS) })
}

unsafe extern "C" fn sendv(
    ep: Ep,
    iov: Iov,
    desc: Desc,
    count: usize,
    dest: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: fi_sendv's arguments.
    guard_sz(|| unsafe {
        let p = Pieces::from_c(iov, desc, count);
        post(ep, Op::Send, p, dest, 0, 0, ctx, 0, NO_FLAGS)
    })
}

unsafe extern "C" fn sendmsg(ep: Ep, m: *const FiMsg, flags: u64) -> isize {
    // SAFETY: fi_sendmsg's arguments.
    guard_sz(|| unsafe {
        let Some((m, p)) = read_msg(m) else {
            return EINVAL as isize;
        };
        let f = Some(OpFlags::from_bits_retain(flags));
        post(ep, Op::Send, p, m.addr, 0, 0, m.context, m.data, f)
    })
}

unsafe extern "C" fn inject(ep: Ep, buf: *const c_void, len: usize, dest: u64) -> isize {
    // SAFETY: fi_inject's arguments.
    guard_sz(|| unsafe { inject_op(ep, buf, len, dest, None, None) })
}

/// The default flags of the endpoint behind `ep` plus FI_REMOTE_CQ_DATA.
///
/// # Safety
///
/// `ep` null or a readable fid.
#[inline(always)]
unsafe fn data_flags(ep: Ep, tx: bool) -> Option<OpFlags> {
    // SAFETY: per the contract.
    unsafe { ep::get(ep) }
        .map(|e| (if tx { e.tx_flags } else { e.rx_flags }) | OpFlags::REMOTE_CQ_DATA)
}

unsafe extern "C" fn senddata(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest: u64,
    ctx: Ctx,
) -> isize {
    let p = One::new(buf, len, desc);
    // SAFETY: fi_senddata's arguments.
    guard_sz(|| unsafe {
        let f = data_flags(ep, true);
        post(ep, Op::Send, p, dest, 0, 0, ctx, data, f)
    })
}

unsafe extern "C" fn injectdata(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: u64,
) -> isize {
    // SAFETY: fi_injectdata's arguments.
    guard_sz(|| unsafe { inject_op(ep, buf, len, dest, None, Some(data)) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn trecv(
    ep: Ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: fi_trecv's arguments.
    guard_sz(|| unsafe { post_one(ep, buf, len, desc, src, Some((tag, ignore)), ctx) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn trecvv(
    ep: Ep,
    iov: Iov,
    desc: Desc,
    count: usize,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: fi_trecvv's arguments.
    guard_sz(|| unsafe {
        let p = Pieces::from_c(iov, desc, count);
        post(ep, Op::TRecv, p, src, tag, ignore, ctx, 0, NO_FLAGS)
    })
}

unsafe extern "C" fn trecvmsg(ep: Ep, m: *const FiMsgTagged, flags: u64) -> isize {
    // SAFETY: fi_trecvmsg's arguments.
    guard_sz(|| unsafe {
        let Some((m, p)) = read_tmsg(m) else {
            return EINVAL as isize;
        };
        let f = Some(OpFlags::from_bits_retain(flags));
        post(
            ep,
            Op::TRecv,
            p,
            m.addr,
            m.tag,
            m.ignore,
            m.context,
            m.data,
            f,
        )
    })
}

unsafe extern "C" fn tsend(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest: u64,
    tag: u64,
    ctx: Ctx,
) -> isize {
    let p = One::new(buf, len, desc);
    // SAFETY: fi_tsend's arguments.
    guard_sz(|| unsafe { post(ep, Op::TSend, p, dest, tag, 0, ctx, 0, NO_FLAGS) })
}

unsafe extern "C" fn tsendv(
    ep: Ep,
    iov: Iov,
    desc: Desc,
    count: usize,
    dest: u64,
    tag: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: fi_tsendv's arguments.
    guard_sz(|| unsafe {
        let p = Pieces::from_c(iov, desc, count);
        post(ep, Op::TSend, p, dest, tag, 0, ctx, 0, NO_FLAGS)
    })
}

unsafe extern "C" fn tsendmsg(ep: Ep, m: *const FiMsgTagged, flags: u64) -> isize {
    // SAFETY: fi_tsendmsg's arguments.
    guard_sz(|| unsafe {
        let Some((m, p)) = read_tmsg(m) else {
            return EINVAL as isize;
        };
        let f = Some(OpFlags::from_bits_retain(flags));
        post(ep, Op::TSend, p, m.addr, m.tag, 0, m.context, m.data, f)
    })
}

unsafe extern "C" fn tinject(ep: Ep, buf: *const c_void, len: usize, dest: u64, tag: u64) -> isize {
    // SAFETY: fi_tinject's arguments.
    guard_sz(|| unsafe { inject_op(ep, buf, len, dest, Some(tag), None) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tsenddata(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest: u64,
    tag: u64,
    ctx: Ctx,
) -> isize {
    let p = One::new(buf, len, desc);
    // SAFETY: fi_tsenddata's arguments.
    guard_sz(|| unsafe {
        let f = data_flags(ep, true);
        post(ep, Op::TSend, p, dest, tag, 0, ctx, data, f)
    })
}

unsafe extern "C" fn tinjectdata(
    ep: Ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: u64,
    tag: u64,
) -> isize {
    // SAFETY: fi_tinjectdata's arguments.
    guard_sz(|| unsafe { inject_op(ep, buf, len, dest, Some(tag), Some(data)) })
}
