//! Passive endpoints (`struct fid_pep`): `fi_passive_ep`, `fi_pep_bind`
//! (an EQ), `fi_listen`, `fi_reject`, `fi_getname`, `fi_close`.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Mutex;

use fabric::objects::PassiveEndpoint;
use fabric::{AddrFormat, Handle};

use super::ep::{CM_OPS, EP_OPS, FiOpsCm, FiOpsEp};
use super::eq;
use super::fabric::{self as fab, FabricObj, FidFabric};
use super::{EINVAL, FiOps, Fid, Refs, class, fi_ops, guard_int, object, put};
use crate::types::FiInfo;

/// `struct fid_pep`.
#[repr(C)]
pub struct FidPep {
    /// `struct fid fid`.
    pub fid: Fid,
    /// `struct fi_ops_ep *ops`.
    pub ops: *mut FiOpsEp,
    /// `struct fi_ops_cm *cm`.
    pub cm: *mut FiOpsCm,
}

/// A passive endpoint opened from C.
#[repr(C)]
pub struct PepObj {
    /// The C descriptor.
    pub c: FidPep,
    /// The provider's passive endpoint.
    pub inner: Box<dyn PassiveEndpoint>,
    /// The fabric (which counts it).
    pub fabric: *const FabricObj,
    /// The EQ it is bound to, which counts it.
    pub bound: Mutex<Option<*const Refs>>,
    /// The address format of its entry.
    pub addr_format: AddrFormat,
}

static OPS: FiOps = fi_ops!(close, bind, super::no_control);

/// The passive endpoint behind a `fid` pointer, if it is one of ours.
///
/// # Safety
///
/// `p` is null or points to a readable `struct fid`.
pub(crate) unsafe fn get<'a, T>(p: *const T) -> Option<&'a PepObj> {
    // SAFETY: per the contract.
    unsafe { object(p.cast(), class::PEP, &OPS) }
}

/// `fi_passive_ep`.
///
/// # Safety
///
/// The arguments of `fi_passive_ep`.
pub(crate) unsafe fn open(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    out: *mut *mut FidPep,
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
        if out.is_null() {
            return EINVAL;
        }
        // SAFETY: null or a valid fi_info.
        let info = match unsafe { fab::read_info(info) } {
            Ok(i) => i,
            Err(code) => return code,
        };
        let inner = match f.inner.passive_endpoint(&info) {
            Ok(p) => p,
            Err(e) => return e.code(),
        };
        hold.keep();
        let obj = Box::new(PepObj {
            c: FidPep {
                fid: Fid::new(class::PEP, context, &OPS),
                ops: ptr::from_ref(&EP_OPS).cast_mut(),
                cm: ptr::from_ref(&CM_OPS).cast_mut(),
            },
            inner,
            fabric: f,
            bound: Mutex::new(None),
            addr_format: info.addr_format,
        });
        let raw = Box::into_raw(obj);
        // SAFETY: just created; the id leaves the table when it closes.
        super::ids::register(
            super::ids::of_pep(unsafe { (*raw).inner.as_ref() }),
            raw.cast(),
        );
        // SAFETY: non-null and writable.
        unsafe { *out = raw.cast() };
        0
    })
}

unsafe extern "C" fn close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        // SAFETY: fi_close's argument is a fid.
        let Some(p) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        let bound = p.bound.lock().unwrap_or_else(|e| e.into_inner()).take();
        let fabric = p.fabric;
        super::ids::unregister(super::ids::of_pep(p.inner.as_ref()));
        // SAFETY: ours, from Box::into_raw in `open`; closed once.
        unsafe { super::retire::<PepObj>(fid) };
        if let Some(r) = bound {
            // SAFETY: the EQ stays open while it counts us.
            unsafe { (*r).release() };
        }
        // SAFETY: the fabric outlives what is opened on it.
        unsafe { (*fabric).refs.release() };
        0
    })
}

unsafe extern "C" fn bind(fid: *mut Fid, bfid: *mut Fid, _flags: u64) -> c_int {
    guard_int(|| {
        // SAFETY: fi_pep_bind's argument is a passive endpoint's fid.
        let Some(p) = (unsafe { get(fid) }) else {
            return EINVAL;
        };
        // SAFETY: null or a readable fid.
        let Some(q) = (unsafe { eq::get(bfid) }) else {
            return EINVAL;
        };
        let mut bound = p.bound.lock().unwrap_or_else(|e| e.into_inner());
        if bound.is_some() {
            return EINVAL;
        }
        let Some(hold) = q.refs.hold() else {
            return EINVAL;
        };
        if let Err(e) = p.inner.bind_eq(q.inner.as_ref()) {
            return e.code();
        }
        hold.keep();
        *bound = Some(ptr::from_ref(&q.refs));
        0
    })
}

/// `fi_ops_cm.listen` (`fi_listen`).
pub(crate) unsafe extern "C" fn listen(pep: *mut FidPep) -> c_int {
    guard_int(|| {
        // SAFETY: a passive endpoint's fid.
        let Some(p) = (unsafe { get(pep) }) else {
            return EINVAL;
        };
        p.inner.listen().map_or_else(|e| e.code(), |()| 0)
    })
}

/// `fi_ops_cm.reject` (`fi_reject`).
pub(crate) unsafe extern "C" fn reject(
    pep: *mut FidPep,
    handle: *mut Fid,
    param: *const c_void,
    plen: usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: a passive endpoint's fid.
        let Some(p) = (unsafe { get(pep) }) else {
            return EINVAL;
        };
        if handle.is_null() {
            return EINVAL;
        }
        let data: &[u8] = if param.is_null() || plen == 0 {
            &[]
        } else {
            // SAFETY: `plen` readable bytes, per fi_cm(3).
            unsafe { std::slice::from_raw_parts(param.cast(), plen) }
        };
        let h =
            super::connreq::handle_of(handle).unwrap_or(Handle(handle.expose_provenance() as u64));
        let r = p.inner.reject(h, data);
        // The request is used up (rejected, or refused by the provider,
        // which leaves nothing more to do with it).
        super::connreq::end(handle);
        r.map_or_else(|e| e.code(), |()| 0)
    })
}
