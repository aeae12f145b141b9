//! Endpoints (`struct fid_ep`): `fi_endpoint`, `fi_ep_bind`, `fi_enable`,
//! `fi_close`, `fi_ops_ep` (cancel, options) and `fi_ops_cm` (getname,
//! connect, accept, ...). The data operations are in [`super::msg`] and
//! [`super::rma`].

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Mutex;

use fabric::objects::{Bind, Endpoint};
use fabric::{ErrorKind, OpFlags};

use super::atomic::{ATOMIC_OPS, FiOpsAtomic};
use super::av::{self, copy_out};
use super::cq;
use super::domain::{self, DomainObj, FidDomain};
use super::eq;
use super::fabric::{self as fab, FidFabric};
use super::msg::{FiOpsMsg, FiOpsTagged, MSG_OPS, TAGGED_OPS};
use super::passive;
use super::rma::{FiOpsRma, RMA_OPS};
use super::{EINVAL, ENOSYS, FiOps, Fid, Refs, class, command, fi_ops, guard_int, object, put};
use crate::types::{FiInfo, FiRxAttr, FiTxAttr};

/// `struct fi_ops_ep`.
#[repr(C)]
pub struct FiOpsEp {
    /// `size_t size`.
    pub size: usize,
    /// `cancel`.
    pub cancel: unsafe extern "C" fn(*mut Fid, *mut c_void) -> isize,
    /// `getopt`.
    pub getopt: unsafe extern "C" fn(*mut Fid, c_int, c_int, *mut c_void, *mut usize) -> c_int,
    /// `setopt`.
    pub setopt: unsafe extern "C" fn(*mut Fid, c_int, c_int, *const c_void, usize) -> c_int,
    /// `tx_ctx`.
    pub tx_ctx: unsafe extern "C" fn(
        *mut FidEp,
        c_int,
        *mut FiTxAttr,
        *mut *mut FidEp,
        *mut c_void,
    ) -> c_int,
    /// `rx_ctx`.
    pub rx_ctx: unsafe extern "C" fn(
        *mut FidEp,
        c_int,
        *mut FiRxAttr,
        *mut *mut FidEp,
        *mut c_void,
    ) -> c_int,
    /// `rx_size_left`.
    pub rx_size_left: unsafe extern "C" fn(*mut FidEp) -> isize,
    /// `tx_size_left`.
    pub tx_size_left: unsafe extern "C" fn(*mut FidEp) -> isize,
}

/// `struct fi_ops_cm`.
#[repr(C)]
pub struct FiOpsCm {
    /// `size_t size`.
    pub size: usize,
    /// `setname`.
    pub setname: unsafe extern "C" fn(*mut Fid, *mut c_void, usize) -> c_int,
    /// `getname`.
    pub getname: unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int,
    /// `getpeer`.
    pub getpeer: unsafe extern "C" fn(*mut FidEp, *mut c_void, *mut usize) -> c_int,
    /// `connect`.
    pub connect: unsafe extern "C" fn(*mut FidEp, *const c_void, *const c_void, usize) -> c_int,
    /// `listen`.
    pub listen: unsafe extern "C" fn(*mut passive::FidPep) -> c_int,
    /// `accept`.
    pub accept: unsafe extern "C" fn(*mut FidEp, *const c_void, usize) -> c_int,
    /// `reject`.
    pub reject: unsafe extern "C" fn(*mut passive::FidPep, *mut Fid, *const c_void, usize) -> c_int,
    /// `shutdown`.
    pub shutdown: unsafe extern "C" fn(*mut FidEp, u64) -> c_int,
    /// `join`.
    pub join: unsafe extern "C" fn(
        *mut FidEp,
        *const c_void,
        u64,
        *mut *mut c_void,
        *mut c_void,
    ) -> c_int,
}

/// `struct fid_ep`.
#[repr(C)]
pub struct FidEp {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `struct fi_ops_ep *ops`.
    pub ops: *mut FiOpsEp,
    /// `struct fi_ops_cm *cm`.
    pub cm: *mut FiOpsCm,
    /// `struct fi_ops_msg *msg`.
    pub msg: *mut FiOpsMsg,
    /// `struct fi_ops_rma *rma`.
    pub rma: *mut FiOpsRma,
    /// `struct fi_ops_tagged *tagged`.
    pub tagged: *mut FiOpsTagged,
    /// `struct fi_ops_atomic *atomic`.
    pub atomic: *mut FiOpsAtomic,
    /// `struct fi_ops_collective *collective`: NULL, no collectives.
    pub collective: *mut c_void,
}

/// An endpoint opened from C.
#[repr(C)]
pub struct EpObj {
    /// The C descriptor.
    pub c: FidEp,
    /// The provider's endpoint.
    pub inner: Box<dyn Endpoint>,
    /// Default flags of the short transmit forms (`tx_attr.op_flags`).
    pub tx_flags: OpFlags,
    /// Default flags of the short receive forms (`rx_attr.op_flags`).
    pub rx_flags: OpFlags,
    /// The domain (which counts it).
    pub domain: *const DomainObj,
    /// The objects it is bound to, each counting it.
    pub bound: Mutex<Vec<*const Refs>>,
}

static OPS: FiOps = fi_ops!(close, bind, control);

/// The `fi_ops_ep` of endpoints (passive ones too).
pub(crate) static EP_OPS: FiOpsEp = FiOpsEp {
    size: size_of::<FiOpsEp>(),
    cancel,
    getopt,
    setopt,
    tx_ctx,
    rx_ctx,
    rx_size_left,
    tx_size_left,
};

/// The `fi_ops_cm` of endpoints and passive endpoints.
pub(crate) static CM_OPS: FiOpsCm = FiOpsCm {
    size: size_of::<FiOpsCm>(),
    setname,
    getname,
    getpeer,
    connect,
    listen: passive::listen,
    accept,
    reject: passive::reject,
    shutdown,
    join,
};

/// The endpoint behind a `fid_ep` pointer, if it is one of ours: the
/// check of every data operation (two compares).
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
#[inline(always)]
pub(crate) unsafe fn get<'a, T>(p: *const T) -> Option<&'a EpObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::EP, &OPS) }
}

/// `fi_ops_domain.endpoint` (`fi_endpoint`).
pub(crate) unsafe extern "C" fn open(
    dom: *mut FidDomain,
    info: *mut FiInfo,
    out: *mut *mut FidEp,
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
        let c_info = info;
        // SAFETY: fi_endpoint's info is null or valid.
        let info = match unsafe { fab::read_info(info) } {
            Ok(i) => i,
            Err(code) => return code,
        };
        let inner = match d.inner.endpoint(&info) {
            Ok(e) => e,
            Err(e) => return e.code(),
        };
        hold.keep();
        // An endpoint for a connection request uses the request up.
        // SAFETY: read_info accepted it: a valid fi_info.
        if let Some(i) = unsafe { c_info.as_ref() } {
            super::connreq::end(i.handle.cast());
        }
        let (tx_flags, rx_flags) = (inner.info().tx_attr.op_flags, inner.info().rx_attr.op_flags);
        let obj = Box::new(EpObj {
            c: FidEp {
                fid: Fid::new(class::EP, context, &OPS),
                ops: ptr::from_ref(&EP_OPS).cast_mut(),
                cm: ptr::from_ref(&CM_OPS).cast_mut(),
                msg: ptr::from_ref(&MSG_OPS).cast_mut(),
                rma: ptr::from_ref(&RMA_OPS).cast_mut(),
                tagged: ptr::from_ref(&TAGGED_OPS).cast_mut(),
                atomic: ptr::from_ref(&ATOMIC_OPS).cast_mut(),
                collective: ptr::null_mut(),
            },
            inner,
            tx_flags,
            rx_flags,
            domain: d,
            bound: Mutex::new(Vec::new()),
        });
        let raw = Box::into_raw(obj);
        // SAFETY: just created; the id leaves the table when it closes.
        super::ids::register(
            super::ids::of_ep(unsafe { (*raw).inner.as_ref() }),
            raw.cast(),
        );
        // SAFETY: non-null and writable.
        unsafe { *out = raw.cast() };
        0
    })
}

/// `fi_ops_domain.endpoint2` (`fi_endpoint2`): no flags are known.
pub(crate) unsafe extern "C" fn open2(
    dom: *mut FidDomain,
    info: *mut FiInfo,
    out: *mut *mut FidEp,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        // SAFETY: null or writable.
        unsafe { put(out, ptr::null_mut()) };
        return ErrorKind::BadFlags.code();
    }
    // SAFETY: fi_endpoint's arguments.
    unsafe { open(dom, info, out, context) }
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(e) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        let bound = std::mem::take(&mut *e.bound.lock().unwrap_or_else(|p| p.into_inner()));
        let domain = e.domain;
        super::ids::unregister(super::ids::of_ep(e.inner.as_ref()));
        // SAFETY: ours, from Box::into_raw in `open`; closed once. The
        // provider's endpoint goes first, then what it was bound to is
        // released.
        unsafe { super::retire::<EpObj>(fid) };
        for r in bound {
            // SAFETY: a bound object stays open while it counts us.
            unsafe { (*r).release() };
        }
        // SAFETY: the domain outlives its endpoints.
        unsafe { (*domain).refs.release() };
        0
    })
}

/// `FI_TRANSMIT`, `FI_RECV`, `FI_SELECTIVE_COMPLETION` of `fi_ep_bind`.
const TRANSMIT: u64 = 1 << 11;
const RECV: u64 = 1 << 10;
const SELECTIVE: u64 = 1 << 59;

unsafe extern "C" fn bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    guard_int(|| {
        // SAFETY: fi_ep_bind's argument is an endpoint's fid.
        let Some(e) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        // SAFETY: null or a readable fid.
        let Some(b) = (unsafe { bfid.as_ref() }) else {
            return EINVAL;
        };
        if b.fclass == class::SRX_CTX {
            // SAFETY: `bfid` is a readable fid (checked above).
            let Some(s) = (unsafe { super::srx::get(bfid) }) else {
                return EINVAL;
            };
            if flags != 0 {
                return ErrorKind::BadFlags.code();
            }
            let Some(hold) = s.refs.hold() else {
                return EINVAL;
            };
            if let Err(err) = e.inner.bind_srx(s.inner.as_ref()) {
                return err.code();
            }
            hold.keep();
            e.bound
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(ptr::from_ref(&s.refs));
            return 0;
        }
        // Each arm: what to bind and the refs of the bound object.
        let (what, refs) = match b.fclass {
            class::CQ => {
                // SAFETY: `bfid` is a readable fid (checked above).
                let Some(c) = (unsafe { cq::get(bfid) }) else {
                    return EINVAL;
                };
                if flags & !(TRANSMIT | RECV | SELECTIVE) != 0 {
                    return ErrorKind::BadFlags.code();
                }
                let w = Bind::Cq {
                    cq: c.inner.as_ref(),
                    transmit: flags & TRANSMIT != 0,
                    recv: flags & RECV != 0,
                    selective: flags & SELECTIVE != 0,
                };
                (w, &c.refs)
            }
            class::AV => {
                // SAFETY: `bfid` is a readable fid (checked above).
                let Some(a) = (unsafe { av::get(bfid) }) else {
                    return EINVAL;
                };
                (Bind::Av(a.inner.as_ref()), &a.refs)
            }
            class::EQ => {
                // SAFETY: `bfid` is a readable fid (checked above).
                let Some(q) = (unsafe { eq::get(bfid) }) else {
                    return EINVAL;
                };
                (Bind::Eq(q.inner.as_ref()), &q.refs)
            }
            class::CNTR => {
                // SAFETY: `bfid` is a readable fid (checked above).
                let Some(c) = (unsafe { super::cntr::get(bfid) }) else {
                    return EINVAL;
                };
                let events = fabric::Caps::from_bits_retain(flags);
                (Bind::Cntr(c.inner.as_ref(), events), &c.refs)
            }
            _ => return EINVAL,
        };
        // Counted before the provider uses it: a close on another
        // thread waits.
        let Some(hold) = refs.hold() else {
            return EINVAL;
        };
        if let Err(err) = e.inner.bind(what) {
            return err.code();
        }
        hold.keep();
        e.bound
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ptr::from_ref(refs));
        0
    })
}

unsafe extern "C" fn control(fid: *mut Fid, cmd: c_int, _arg: *mut c_void) -> c_int {
    guard_int(|| {
        // SAFETY: fi_control's argument is a fid.
        let Some(e) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        match cmd {
            command::ENABLE => e.inner.enable().map_or_else(|err| err.code(), |()| 0),
            _ => ENOSYS,
        }
    })
}

unsafe extern "C" fn cancel(fid: *mut Fid, context: *mut c_void) -> isize {
    super::guard_sz(|| {
        // SAFETY: fi_cancel's argument is an endpoint's fid.
        let Some(e) = (unsafe { get(fid) }) else {
            return EINVAL as isize;
        };
        e.inner
            .cancel(context as u64)
            .map_or_else(super::sz, |()| 0)
    })
}

/// `FI_OPT_ENDPOINT`, the one option level.
const OPT_ENDPOINT: c_int = 0;
/// `FI_OPT_MIN_MULTI_RECV` (`size_t`).
const OPT_MIN_MULTI_RECV: c_int = 0;
/// `FI_OPT_CM_DATA_SIZE` (`size_t`).
const OPT_CM_DATA_SIZE: c_int = 1;

/// The provider's answer to an option it may not have: `-FI_ENOPROTOOPT`
/// when it does not support it, as libfabric answers unknown options.
fn opt_code(e: &fabric::Error) -> c_int {
    match e.kind() {
        ErrorKind::OpNotSupp | ErrorKind::NoSys => ErrorKind::NoProtoOpt.code(),
        _ => e.code(),
    }
}

/// The most private data of the endpoint or passive endpoint behind `fid`.
///
/// # Safety
///
/// `fid` is null or points to a readable `struct fid`.
unsafe fn cm_data_size(fid: *const Fid) -> Result<usize, c_int> {
    // SAFETY: per the contract.
    let r = if let Some(e) = unsafe { get(fid) } {
        e.inner.cm_data_size()
    } else if let Some(p) = unsafe { passive::get(fid) } {
        p.inner.cm_data_size()
    } else {
        return Err(EINVAL);
    };
    r.map_err(|e| opt_code(&e))
}

/// `fi_getopt`: `FI_OPT_MIN_MULTI_RECV` (endpoints) and
/// `FI_OPT_CM_DATA_SIZE` (endpoints and passive endpoints), both `size_t`;
/// `*optlen` is set to the size of the value, `-FI_ETOOSMALL` if it is
/// smaller. Other options: `-FI_ENOPROTOOPT`.
unsafe extern "C" fn getopt(
    fid: *mut Fid,
    level: c_int,
    name: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: fi_getopt's argument is an endpoint's or a passive
        // endpoint's fid.
        let (ep, pep) = unsafe { (get(fid), passive::get(fid)) };
        if ep.is_none() && pep.is_none() {
            return EINVAL;
        }
        if level != OPT_ENDPOINT {
            return ErrorKind::NoProtoOpt.code();
        }
        let value = match name {
            OPT_MIN_MULTI_RECV => match ep {
                Some(e) => match e.inner.min_multi_recv() {
                    Ok(v) => v,
                    Err(err) => return opt_code(&err),
                },
                None => return ErrorKind::NoProtoOpt.code(),
            },
            // SAFETY: checked to be one of ours above.
            OPT_CM_DATA_SIZE => match unsafe { cm_data_size(fid) } {
                Ok(v) => v,
                Err(code) => return code,
            },
            _ => return ErrorKind::NoProtoOpt.code(),
        };
        if optval.is_null() || optlen.is_null() {
            return EINVAL;
        }
        // SAFETY: `optlen` is non-null and points to a size_t, per fi_getopt.
        let room = unsafe { *optlen };
        // SAFETY: as above.
        unsafe { *optlen = size_of::<usize>() };
        if room < size_of::<usize>() {
            return ErrorKind::TooSmall.code();
        }
        // SAFETY: `optval` has `room` >= size_of::<usize>() writable bytes.
        unsafe { optval.cast::<usize>().write_unaligned(value) };
        0
    })
}

/// `fi_setopt`: `FI_OPT_MIN_MULTI_RECV` (endpoints: applies to the
/// messages placed from then on) and `FI_OPT_CM_DATA_SIZE` (accepted up to
/// the provider's size, `-FI_EINVAL` above it); both `size_t`. Other
/// options: `-FI_ENOPROTOOPT`.
unsafe extern "C" fn setopt(
    fid: *mut Fid,
    level: c_int,
    name: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: fi_setopt's argument is an endpoint's or a passive
        // endpoint's fid.
        let (ep, pep) = unsafe { (get(fid), passive::get(fid)) };
        if ep.is_none() && pep.is_none() {
            return EINVAL;
        }
        if level != OPT_ENDPOINT {
            return ErrorKind::NoProtoOpt.code();
        }
        if !matches!(name, OPT_MIN_MULTI_RECV | OPT_CM_DATA_SIZE) {
            return ErrorKind::NoProtoOpt.code();
        }
        if optval.is_null() || optlen != size_of::<usize>() {
            return EINVAL;
        }
        // SAFETY: `optval` has `optlen` == size_of::<usize>() readable bytes.
        let value = unsafe { optval.cast::<usize>().read_unaligned() };
        match name {
            OPT_MIN_MULTI_RECV => match ep {
                Some(e) => e
                    .inner
                    .set_min_multi_recv(value)
                    .map_or_else(|err| opt_code(&err), |()| 0),
                None => ErrorKind::NoProtoOpt.code(),
            },
            // SAFETY: checked to be one of ours above.
            _ => match unsafe { cm_data_size(fid) } {
                Ok(max) if value <= max => 0,
                Ok(_) => EINVAL,
                Err(code) => code,
            },
        }
    })
}

unsafe extern "C" fn tx_ctx(
    _: *mut FidEp,
    _: c_int,
    _: *mut FiTxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}

unsafe extern "C" fn rx_ctx(
    _: *mut FidEp,
    _: c_int,
    _: *mut FiRxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}

unsafe extern "C" fn rx_size_left(_: *mut FidEp) -> isize {
    ENOSYS as isize
}

unsafe extern "C" fn tx_size_left(_: *mut FidEp) -> isize {
    ENOSYS as isize
}

unsafe extern "C" fn setname(_: *mut Fid, _: *mut c_void, _: usize) -> c_int {
    ENOSYS
}

unsafe extern "C" fn getname(fid: *mut Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard_int(|| {
        if addrlen.is_null() {
            return EINVAL;
        }
        // SAFETY: fi_getname's argument is an endpoint's or a passive
        // endpoint's fid.
        let name = if let Some(e) = unsafe { get(fid) } {
            e.inner.getname()
        } else if let Some(p) = unsafe { passive::get(fid) } {
            p.inner.getname()
        } else {
            return EINVAL;
        };
        match name {
            // SAFETY: `addrlen` valid, `addr` null or `*addrlen` bytes.
            Ok(a) => unsafe { copy_out(&a.to_bytes(), addr, addrlen) },
            Err(e) => e.code(),
        }
    })
}

unsafe extern "C" fn getpeer(ep: *mut FidEp, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard_int(|| {
        // SAFETY: an endpoint's fid.
        let Some(e) = (unsafe { get(ep) }) else {
            return EINVAL;
        };
        if addrlen.is_null() {
            return EINVAL;
        }
        match e.inner.getpeer() {
            // SAFETY: `addrlen` valid, `addr` null or `*addrlen` bytes.
            Ok(a) => unsafe { copy_out(&a.to_bytes(), addr, addrlen) },
            Err(err) => err.code(),
        }
    })
}

/// The private data of a CM call.
///
/// # Safety
///
/// `p` is null or has `len` readable bytes.
unsafe fn param<'a>(p: *const c_void, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(p.cast(), len) }
    }
}

unsafe extern "C" fn connect(
    ep: *mut FidEp,
    addr: *const c_void,
    p: *const c_void,
    plen: usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: an endpoint's fid.
        let Some(e) = (unsafe { get(ep) }) else {
            return EINVAL;
        };
        if addr.is_null() {
            return EINVAL;
        }
        // SAFETY: the domain outlives its endpoints.
        let format = unsafe { (*e.domain).addr_format };
        // SAFETY: an address of the domain's format, per fi_cm(3).
        let dest = match unsafe { super::av::read_one(format, addr.cast()) } {
            Ok(a) => a,
            Err(err) => return err.code(),
        };
        // SAFETY: `plen` bytes at `p`.
        let data = unsafe { param(p, plen) };
        e.inner
            .connect(&dest, data)
            .map_or_else(|err| err.code(), |()| 0)
    })
}

unsafe extern "C" fn accept(ep: *mut FidEp, p: *const c_void, plen: usize) -> c_int {
    guard_int(|| {
        // SAFETY: an endpoint's fid.
        let Some(e) = (unsafe { get(ep) }) else {
            return EINVAL;
        };
        // SAFETY: `plen` bytes at `p`.
        let data = unsafe { param(p, plen) };
        e.inner.accept(data).map_or_else(|err| err.code(), |()| 0)
    })
}

unsafe extern "C" fn shutdown(ep: *mut FidEp, _flags: u64) -> c_int {
    guard_int(|| {
        // SAFETY: an endpoint's fid.
        let Some(e) = (unsafe { get(ep) }) else {
            return EINVAL;
        };
        e.inner.shutdown().map_or_else(|err| err.code(), |()| 0)
    })
}

unsafe extern "C" fn join(
    _: *mut FidEp,
    _: *const c_void,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}

/// `fi_ops_fabric.passive_ep` (`fi_passive_ep`).
pub(crate) unsafe extern "C" fn passive_open(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    out: *mut *mut c_void,
    context: *mut c_void,
) -> c_int {
    // SAFETY: fi_passive_ep's arguments.
    unsafe { passive::open(fabric, info, out.cast(), context) }
}
