//! Device contexts and protection domains.

use fabric_core::{Error, ErrorKind, Result};
use fabric_sys::ffi::{ibv_context, ibv_device_attr, ibv_pd, ibv_port_attr};
use fabric_sys::inline;
use std::ffi::CStr;

use super::{Ptr, lib};

/// An open device context, as librdmacm keeps them: librdmacm opens every
/// device once per process and keeps it open, and the ids it resolves use
/// these contexts, so the provider's PDs, CQs and MRs live on them too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context(pub(crate) Ptr<ibv_context>);

/// What getinfo needs to know about one port.
#[derive(Clone)]
pub(crate) struct PortInfo {
    /// Port attributes.
    pub attr: ibv_port_attr,
}

impl PortInfo {
    /// Whether the port is active (`IBV_PORT_ACTIVE`).
    pub(crate) fn active(&self) -> bool {
        self.attr.state == fabric_sys::ffi::ibv_port_state::IBV_PORT_ACTIVE
    }
}

/// Whether a device does atomics (`atomic_cap` other than none).
pub(crate) fn has_atomics(dev: &ibv_device_attr) -> bool {
    dev.atomic_cap != fabric_sys::ffi::ibv_atomic_cap::IBV_ATOMIC_NONE
}

impl Context {
    /// The raw pointer.
    pub(crate) fn as_ptr(&self) -> *mut ibv_context {
        self.0.0
    }

    /// The device name (`rxe0`, `mlx5_0`).
    pub(crate) fn name(&self) -> String {
        let Ok(lib) = lib() else {
            return String::new();
        };
        // SAFETY: the context is live (librdmacm keeps it open); its device
        // pointer is valid for as long, and the name is a NUL-terminated
        // string owned by libibverbs.
        unsafe {
            let p = lib.ibv_get_device_name((*self.as_ptr()).device);
            if p.is_null() {
                return String::new();
            }
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }

    /// `ibv_query_device`.
    pub(crate) fn query_device(&self) -> Result<ibv_device_attr> {
        let lib = lib()?;
        let mut attr = ibv_device_attr::default();
        // SAFETY: live context, writable attribute structure.
        let rc = unsafe { lib.ibv_query_device(self.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(super::from_errno(rc, "ibv_query_device"));
        }
        Ok(attr)
    }

    /// `ibv_query_port` (through the extended context when possible).
    pub(crate) fn query_port(&self, num: u8) -> Result<PortInfo> {
        let lib = lib()?;
        let mut attr = ibv_port_attr::default();
        // SAFETY: live context, writable attribute structure.
        let rc = unsafe { inline::ibv_query_port(lib, self.as_ptr(), num, &mut attr) };
        if rc != 0 {
            return Err(super::from_errno(rc, "ibv_query_port"));
        }
        Ok(PortInfo { attr })
    }
}

/// `IBV_LINK_LAYER_INFINIBAND` (an anonymous enum of the header, which
/// bindgen names unstably).
const LINK_LAYER_INFINIBAND: u8 = 1;

impl Context {
    /// The index and GID of the port's GID table entry for `ip` (its
    /// IPv4-mapped or IPv6 form), preferring RoCE v2; for InfiniBand ports
    /// (whose GIDs are not IP addresses) entry 0.
    pub(crate) fn gid_for(&self, port: u8, ip: std::net::IpAddr) -> Option<(u32, [u8; 16])> {
        let lib = lib().ok()?;
        let pa = self.query_port(port).ok()?;
        let want = match ip {
            std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            std::net::IpAddr::V6(v6) => v6.octets(),
        };
        let mut best: Option<(u32, [u8; 16], u32)> = None;
        let mut first: Option<(u32, [u8; 16])> = None;
        for index in 0..u32::try_from(pa.attr.gid_tbl_len).unwrap_or(0) {
            let mut e = fabric_sys::ffi::ibv_gid_entry::default();
            // SAFETY: live context; writable entry.
            let rc = unsafe {
                inline::ibv_query_gid_ex(lib, self.as_ptr(), u32::from(port), index, &mut e)
            };
            if rc != 0 {
                continue;
            }
            // SAFETY: the GID union is 16 bytes whichever member is read.
            let raw = unsafe { e.gid.raw };
            if raw == [0; 16] {
                continue;
            }
            first.get_or_insert((index, raw));
            if raw == want && best.is_none_or(|b| e.gid_type > b.2) {
                best = Some((index, raw, e.gid_type));
            }
        }
        match best {
            Some((i, g, _)) => Some((i, g)),
            None if pa.attr.link_layer == LINK_LAYER_INFINIBAND => first,
            None => None,
        }
    }
}

/// The device contexts librdmacm has open: empty when rdma-core is not
/// installed or there is no device.
pub(crate) fn contexts() -> Vec<Context> {
    let lib = match lib() {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(error = %e, "verbs: rdma-core is not available");
            return Vec::new();
        }
    };
    let mut n = 0;
    // SAFETY: valid out-pointer; the array is freed below, the contexts it
    // lists stay open (librdmacm owns them).
    let list = unsafe { lib.rdma_get_devices(&mut n) };
    if list.is_null() {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "verbs: no RDMA device (rdma_get_devices)"
        );
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the array has `n` entries.
        let ctx = unsafe { *list.add(i) };
        if !ctx.is_null() {
            out.push(Context(Ptr(ctx)));
        }
    }
    // SAFETY: `list` came from rdma_get_devices and is freed once.
    unsafe { lib.rdma_free_devices(list) };
    out
}

/// A protection domain; dropping it deallocates it.
#[derive(Debug)]
pub(crate) struct Pd {
    ptr: Ptr<ibv_pd>,
}

impl Pd {
    /// Allocates a PD on `ctx`.
    pub(crate) fn new(ctx: Context) -> Result<Pd> {
        let lib = lib()?;
        // SAFETY: live context.
        let p = unsafe { lib.ibv_alloc_pd(ctx.as_ptr()) };
        if p.is_null() {
            return Err(super::last_err("ibv_alloc_pd"));
        }
        Ok(Pd { ptr: Ptr(p) })
    }

    /// The raw pointer.
    pub(crate) fn as_ptr(&self) -> *mut ibv_pd {
        self.ptr.0
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        if let Ok(lib) = lib() {
            // SAFETY: allocated by us, freed once; everything created on
            // it holds an `Arc` to it and is gone by now.
            let rc = unsafe { lib.ibv_dealloc_pd(self.ptr.0) };
            if rc != 0 {
                tracing::warn!(errno = rc, "verbs: ibv_dealloc_pd failed");
            }
        }
    }
}

/// `NoDev` for a device name that is not there.
pub(crate) fn no_such_device(name: &str) -> Error {
    Error::new(
        ErrorKind::NoDev,
        format!("verbs: no RDMA device named `{name}`"),
    )
}
