//! A safe `rdma_getaddrinfo(3)`: librdmacm's transport-independent address
//! translation, with every flag and field of the manual page.
//!
//! The call resolves a node (name, dotted IPv4, IPv6) and service (port)
//! into the addresses, route and connection data needed to reach it over
//! RDMA. The result list is copied into owned [`AddrInfo`] values and freed
//! at once (`rdma_freeaddrinfo`), so nothing of librdmacm's memory escapes.
//!
//! | C | here |
//! |---|---|
//! | `ai_flags` (`RAI_PASSIVE`, `RAI_NUMERICHOST`, `RAI_NOROUTE`, `RAI_FAMILY`) | [`RaiFlags`] |
//! | `ai_family` (`AF_INET`, `AF_INET6`, `AF_IB`) | [`AiFamily`] |
//! | `ai_qp_type` (`IBV_QPT_RC`, `IBV_QPT_UD`) | [`QpType`] |
//! | `ai_port_space` (`RDMA_PS_TCP`, `RDMA_PS_UDP`, `RDMA_PS_IB`, `RDMA_PS_IPOIB`) | [`PortSpace`] |
//! | `ai_src_len` / `ai_src_addr`, `ai_dst_len` / `ai_dst_addr` | `Option<Vec<u8>>`: the `struct sockaddr` bytes (length 0 = `None`) |
//! | `ai_src_canonname`, `ai_dst_canonname` | `Option<String>` |
//! | `ai_route_len` / `ai_route` (IB path records) | `Vec<u8>` (empty = none) |
//! | `ai_connect_len` / `ai_connect` (data to send first as private data) | `Vec<u8>` |
//! | `ai_next` | the position in the returned `Vec` |
//!
//! Errors are [`AddrInfoError`]: the `EAI_*` code with the page's meaning,
//! or the errno of a system error. This crate depends on no crate of the
//! workspace: what the codes mean to a provider (its error kinds) is the
//! provider's mapping, not this crate's.

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::{c_char, c_int};

use crate::ffi::{self, RdmaCore, rdma_addrinfo};

/// glibc's `EAI_ADDRFAMILY` (a GNU extension the libc crate lacks).
const EAI_ADDRFAMILY: c_int = -9;
/// glibc's `EAI_NODATA` (a GNU extension).
const EAI_NODATA: c_int = -5;

bitflags::bitflags! {
    /// `ai_flags` of the hints.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct RaiFlags: i32 {
        /// `RAI_PASSIVE`: resolve for the passive (listening) side; the
        /// result has no destination address.
        const PASSIVE = ffi::RAI_PASSIVE as i32;
        /// `RAI_NUMERICHOST`: the node must be a numeric address; no
        /// lengthy name resolution.
        const NUMERICHOST = ffi::RAI_NUMERICHOST as i32;
        /// `RAI_NOROUTE`: no lengthy route resolution.
        const NOROUTE = ffi::RAI_NOROUTE as i32;
        /// `RAI_FAMILY`: `ai_family` is an input hint for reading the node.
        const FAMILY = ffi::RAI_FAMILY as i32;
    }
}

/// `ai_family`: the family of the source and destination addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AiFamily {
    /// Any (`AF_UNSPEC`).
    #[default]
    Unspec,
    /// IPv4 (`AF_INET`).
    Inet,
    /// IPv6 (`AF_INET6`).
    Inet6,
    /// InfiniBand native addressing (`AF_IB`).
    Ib,
    /// A value this wrapper does not know (results only).
    Other(i32),
}

impl AiFamily {
    /// The C value.
    pub fn raw(self) -> c_int {
        match self {
            AiFamily::Unspec => libc::AF_UNSPEC,
            AiFamily::Inet => libc::AF_INET,
            AiFamily::Inet6 => libc::AF_INET6,
            AiFamily::Ib => libc::AF_IB,
            AiFamily::Other(v) => v,
        }
    }

    /// From the C value.
    pub fn from_raw(v: c_int) -> Self {
        match v {
            libc::AF_UNSPEC => AiFamily::Unspec,
            libc::AF_INET => AiFamily::Inet,
            libc::AF_INET6 => AiFamily::Inet6,
            libc::AF_IB => AiFamily::Ib,
            v => AiFamily::Other(v),
        }
    }
}

/// `ai_qp_type`: the kind of QP the communication uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`).
    Rc,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud,
    /// Another `ibv_qp_type` value (results only).
    Other(i32),
}

impl QpType {
    /// The C value.
    pub fn raw(self) -> c_int {
        match self {
            QpType::Rc => ffi::ibv_qp_type::IBV_QPT_RC as c_int,
            QpType::Ud => ffi::ibv_qp_type::IBV_QPT_UD as c_int,
            QpType::Other(v) => v,
        }
    }

    /// From the C value (0 is "unspecified").
    pub fn from_raw(v: c_int) -> Option<Self> {
        match u32::try_from(v) {
            Ok(0) => None,
            Ok(ffi::ibv_qp_type::IBV_QPT_RC) => Some(QpType::Rc),
            Ok(ffi::ibv_qp_type::IBV_QPT_UD) => Some(QpType::Ud),
            _ => Some(QpType::Other(v)),
        }
    }
}

/// `ai_port_space`: the rdma_cm port space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSpace {
    /// Connected service, TCP-like (`RDMA_PS_TCP`).
    Tcp,
    /// Datagram service, UDP-like (`RDMA_PS_UDP`).
    Udp,
    /// Any QP type (`RDMA_PS_IB`).
    Ib,
    /// IP over InfiniBand (`RDMA_PS_IPOIB`).
    IpoIb,
    /// Another value (results only).
    Other(i32),
}

impl PortSpace {
    /// The C value.
    pub fn raw(self) -> c_int {
        use ffi::rdma_port_space as ps;
        match self {
            PortSpace::Tcp => ps::RDMA_PS_TCP as c_int,
            PortSpace::Udp => ps::RDMA_PS_UDP as c_int,
            PortSpace::Ib => ps::RDMA_PS_IB as c_int,
            PortSpace::IpoIb => ps::RDMA_PS_IPOIB as c_int,
            PortSpace::Other(v) => v,
        }
    }

    /// From the C value (0 is "unspecified").
    pub fn from_raw(v: c_int) -> Option<Self> {
        use ffi::rdma_port_space as ps;
        match u32::try_from(v) {
            Ok(0) => None,
            Ok(ps::RDMA_PS_TCP) => Some(PortSpace::Tcp),
            Ok(ps::RDMA_PS_UDP) => Some(PortSpace::Udp),
            Ok(ps::RDMA_PS_IB) => Some(PortSpace::Ib),
            Ok(ps::RDMA_PS_IPOIB) => Some(PortSpace::IpoIb),
            _ => Some(PortSpace::Other(v)),
        }
    }
}

/// The hints of a call (`struct rdma_addrinfo` as input).
#[derive(Debug, Clone, Default)]
pub struct Hints<'a> {
    /// `ai_flags`.
    pub flags: RaiFlags,
    /// `ai_family` (an input for reading the node with [`RaiFlags::FAMILY`]).
    pub family: AiFamily,
    /// `ai_qp_type`; `None` for any.
    pub qp_type: Option<QpType>,
    /// `ai_port_space`; `None` for any.
    pub port_space: Option<PortSpace>,
    /// `ai_src_addr`: the local address to use, when no node is given or
    /// to choose among local devices (the bytes of a `struct sockaddr_in`,
    /// `sockaddr_in6` or `sockaddr_ib`).
    pub src_addr: Option<&'a [u8]>,
    /// `ai_dst_addr`: the destination, when no node is given (as
    /// `src_addr`).
    pub dst_addr: Option<&'a [u8]>,
    /// `ai_route`: IB routing data restricting the paths (an array of
    /// `struct ibv_path_record` or `struct ibv_path_data`).
    pub route: Option<&'a [u8]>,
}

/// One result (`struct rdma_addrinfo` as output).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddrInfo {
    /// `ai_flags` as returned.
    pub flags: RaiFlags,
    /// `ai_family`.
    pub family: AiFamily,
    /// `ai_qp_type`.
    pub qp_type: Option<QpType>,
    /// `ai_port_space`.
    pub port_space: Option<PortSpace>,
    /// `ai_src_addr`: the local RDMA device's address (the bytes of its
    /// `struct sockaddr`); `None` when no source could be found for the
    /// destination.
    pub src_addr: Option<Vec<u8>>,
    /// `ai_dst_addr`: the destination (as `src_addr`); `None` with
    /// [`RaiFlags::PASSIVE`].
    pub dst_addr: Option<Vec<u8>>,
    /// `ai_src_canonname`.
    pub src_canonname: Option<String>,
    /// `ai_dst_canonname`.
    pub dst_canonname: Option<String>,
    /// `ai_route`: routing data (IB: an array of `struct ibv_path_data`);
    /// empty when the transport needs none or none was resolved.
    pub route: Vec<u8>,
    /// `ai_connect`: data that must be sent first in the connection's
    /// private data, before the user's; empty when none is needed.
    pub connect: Vec<u8>,
}

/// An `EAI_*` result of `rdma_getaddrinfo`, with the manual page's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eai {
    /// `EAI_ADDRFAMILY`: the host has no address in the requested family.
    AddrFamily,
    /// `EAI_AGAIN`: the name server returned a temporary failure.
    Again,
    /// `EAI_BADFLAGS`: `ai_flags` has invalid flags.
    BadFlags,
    /// `EAI_FAIL`: the name server returned a permanent failure.
    Fail,
    /// `EAI_FAMILY`: the address family is not supported.
    Family,
    /// `EAI_MEMORY`: out of memory.
    Memory,
    /// `EAI_NODATA`: the host exists but has no address.
    NoData,
    /// `EAI_NONAME`: the node or service is not known, or both are absent.
    NoName,
    /// `EAI_SERVICE`: the service is not available for the QP type.
    Service,
    /// `EAI_QPTYPE` of the page (glibc's `EAI_SOCKTYPE`): the QP type is
    /// not supported, or conflicts with the port space (e.g. UD with TCP).
    QpType,
    /// `EAI_OVERFLOW`: a buffer was too small.
    Overflow,
    /// `EAI_SYSTEM`, or the -1 return: a system error; see the errno.
    System,
    /// A code this wrapper does not know.
    Unknown(i32),
}

impl Eai {
    /// From a nonzero return value of `rdma_getaddrinfo` other than -1.
    ///
    /// -1 is ambiguous: librdmacm returns it with errno set for its own
    /// failures, and glibc's `EAI_BADFLAGS` is -1 too; [`rdma_getaddrinfo`]
    /// reads -1 as a system error when errno is set and as `EAI_BADFLAGS`
    /// when it is not.
    pub fn from_code(code: c_int) -> Self {
        match code {
            libc::EAI_SYSTEM => Eai::System,
            EAI_ADDRFAMILY => Eai::AddrFamily,
            libc::EAI_AGAIN => Eai::Again,
            libc::EAI_BADFLAGS => Eai::BadFlags,
            libc::EAI_FAIL => Eai::Fail,
            libc::EAI_FAMILY => Eai::Family,
            libc::EAI_MEMORY => Eai::Memory,
            EAI_NODATA => Eai::NoData,
            libc::EAI_NONAME => Eai::NoName,
            libc::EAI_SERVICE => Eai::Service,
            libc::EAI_SOCKTYPE => Eai::QpType,
            libc::EAI_OVERFLOW => Eai::Overflow,
            other => Eai::Unknown(other),
        }
    }

    /// The C name.
    pub fn name(self) -> &'static str {
        match self {
            Eai::AddrFamily => "EAI_ADDRFAMILY",
            Eai::Again => "EAI_AGAIN",
            Eai::BadFlags => "EAI_BADFLAGS",
            Eai::Fail => "EAI_FAIL",
            Eai::Family => "EAI_FAMILY",
            Eai::Memory => "EAI_MEMORY",
            Eai::NoData => "EAI_NODATA",
            Eai::NoName => "EAI_NONAME",
            Eai::Service => "EAI_SERVICE",
            Eai::QpType => "EAI_QPTYPE",
            Eai::Overflow => "EAI_OVERFLOW",
            Eai::System => "EAI_SYSTEM",
            Eai::Unknown(_) => "EAI_?",
        }
    }

    /// What the code means (rdma_getaddrinfo(3)).
    pub fn meaning(self) -> &'static str {
        match self {
            Eai::AddrFamily => {
                "the network host does not have any network addresses in the requested address family"
            }
            Eai::Again => "the name server returned a temporary failure; try again later",
            Eai::BadFlags => "the hints' ai_flags contain invalid flags",
            Eai::Fail => "the name server returned a permanent failure",
            Eai::Family => "the requested address family is not supported",
            Eai::Memory => "out of memory",
            Eai::NoData => "the network host exists, but has no network addresses defined",
            Eai::NoName => "the node or service is not known, or both node and service are absent",
            Eai::Service => {
                "the requested service is not available for the requested QP type (it may be through another)"
            }
            Eai::QpType => {
                "the requested QP type is not supported, or conflicts with the port space (e.g. UD with RDMA_PS_TCP)"
            }
            Eai::Overflow => "an argument buffer overflowed",
            Eai::System => "system error",
            Eai::Unknown(_) => "unknown rdma_getaddrinfo error",
        }
    }
}

/// A failed `rdma_getaddrinfo`: the code, and the errno for system errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrInfoError {
    /// The code.
    pub eai: Eai,
    /// errno, for [`Eai::System`].
    pub errno: Option<i32>,
    /// What was asked (node, service), for the message.
    pub what: String,
}

impl fmt::Display for AddrInfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rdma_getaddrinfo({}): ", self.what)?;
        match (self.eai, self.errno) {
            (Eai::System, Some(e)) => {
                write!(f, "{}", std::io::Error::from_raw_os_error(e))?;
                if e == libc::ENODEV {
                    write!(f, " (no RDMA device)")?;
                }
                Ok(())
            }
            (Eai::Unknown(c), _) => write!(f, "unknown error {c}"),
            (eai, _) => write!(f, "{}: {}", eai.name(), eai.meaning()),
        }
    }
}

impl std::error::Error for AddrInfoError {}

/// Frees the result list when dropped.
struct List<'l> {
    lib: &'l RdmaCore,
    head: *mut rdma_addrinfo,
}

impl Drop for List<'_> {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: `head` came from a successful rdma_getaddrinfo and is
            // freed once, here.
            unsafe { self.lib.rdma_freeaddrinfo(self.head) };
        }
    }
}

fn cstring(what: &str, s: Option<&str>) -> Result<Option<CString>, AddrInfoError> {
    s.map(|s| {
        CString::new(s).map_err(|_| AddrInfoError {
            eai: Eai::NoName,
            errno: None,
            what: format!("{what} `{}` contains a NUL byte", s.escape_debug()),
        })
    })
    .transpose()
}

/// # Safety
///
/// `p` is null or points to `len` readable bytes.
unsafe fn bytes(p: *const u8, len: usize) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller guarantees `len` readable bytes at `p`.
    unsafe { std::slice::from_raw_parts(p, len) }.to_vec()
}

/// # Safety
///
/// `p` is null or a NUL-terminated string.
unsafe fn string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn address(raw: Vec<u8>) -> Option<Vec<u8>> {
    (!raw.is_empty()).then_some(raw)
}

/// Resolves `node` / `service` with `hints` (rdma_getaddrinfo(3)). At
/// least one of node, service or hints must be given (else `EAI_NONAME`).
///
/// librdmacm needs an RDMA device to answer: without one the call fails
/// with a system error (`errno` `ENODEV`).
pub fn rdma_getaddrinfo(
    lib: &RdmaCore,
    node: Option<&str>,
    service: Option<&str>,
    hints: Option<&Hints<'_>>,
) -> Result<Vec<AddrInfo>, AddrInfoError> {
    let what = format!(
        "node {:?}, service {:?}",
        node.unwrap_or("(none)"),
        service.unwrap_or("(none)")
    );
    let c_node = cstring("node", node)?;
    let c_service = cstring("service", service)?;
    // The C forms of the hint addresses live until the call returns.
    let src = hints.and_then(|h| h.src_addr);
    let dst = hints.and_then(|h| h.dst_addr);
    let mut c_hints = rdma_addrinfo::default();
    if let Some(h) = hints {
        c_hints.ai_flags = h.flags.bits();
        c_hints.ai_family = h.family.raw();
        c_hints.ai_qp_type = h.qp_type.map_or(0, QpType::raw);
        c_hints.ai_port_space = h.port_space.map_or(0, PortSpace::raw);
        if let Some(s) = src {
            c_hints.ai_src_len = s.len() as libc::socklen_t;
            c_hints.ai_src_addr = s.as_ptr().cast_mut().cast();
        }
        if let Some(d) = dst {
            c_hints.ai_dst_len = d.len() as libc::socklen_t;
            c_hints.ai_dst_addr = d.as_ptr().cast_mut().cast();
        }
        if let Some(r) = h.route {
            c_hints.ai_route_len = r.len();
            c_hints.ai_route = r.as_ptr().cast_mut().cast();
        }
    }
    let mut head: *mut rdma_addrinfo = std::ptr::null_mut();
    // errno tells a system error (-1 with errno) from EAI_BADFLAGS (-1).
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: the strings are NUL-terminated and live across the call; the
    // hint structure and the buffers it points to live across the call and
    // are only read by librdmacm; `head` is a valid out-pointer.
    let rc = unsafe {
        lib.rdma_getaddrinfo(
            c_node.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            c_service.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            if hints.is_some() {
                &c_hints
            } else {
                std::ptr::null()
            },
            &mut head,
        )
    };
    if rc != 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .filter(|e| *e != 0);
        let eai = match (rc, errno) {
            (-1, Some(_)) => Eai::System,
            (rc, _) => Eai::from_code(rc),
        };
        let errno = if eai == Eai::System { errno } else { None };
        return Err(AddrInfoError { eai, errno, what });
    }
    let list = List { lib, head };
    let mut out = Vec::new();
    let mut p = list.head;
    while !p.is_null() {
        // SAFETY: `p` is an element of the list librdmacm returned, alive
        // until `list` is dropped; its pointer/length pairs describe
        // buffers librdmacm owns.
        let ai = unsafe { &*p };
        // SAFETY: as above.
        let (src_raw, dst_raw, route, connect, src_name, dst_name) = unsafe {
            (
                bytes(ai.ai_src_addr.cast(), ai.ai_src_len as usize),
                bytes(ai.ai_dst_addr.cast(), ai.ai_dst_len as usize),
                bytes(ai.ai_route.cast(), ai.ai_route_len),
                bytes(ai.ai_connect.cast(), ai.ai_connect_len),
                string(ai.ai_src_canonname),
                string(ai.ai_dst_canonname),
            )
        };
        out.push(AddrInfo {
            flags: RaiFlags::from_bits_retain(ai.ai_flags),
            family: AiFamily::from_raw(ai.ai_family),
            qp_type: QpType::from_raw(ai.ai_qp_type),
            port_space: PortSpace::from_raw(ai.ai_port_space),
            src_addr: address(src_raw),
            dst_addr: address(dst_raw),
            src_canonname: src_name,
            dst_canonname: dst_name,
            route,
            connect,
        });
        p = ai.ai_next;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_their_meanings() {
        assert_eq!(Eai::from_code(libc::EAI_NONAME), Eai::NoName);
        assert_eq!(Eai::from_code(libc::EAI_SOCKTYPE), Eai::QpType);
        assert_eq!(Eai::from_code(-1), Eai::BadFlags);
        assert_eq!(Eai::from_code(libc::EAI_SYSTEM), Eai::System);
        assert_eq!(Eai::from_code(-4242), Eai::Unknown(-4242));
        let e = AddrInfoError {
            eai: Eai::System,
            errno: Some(libc::ENODEV),
            what: "x".into(),
        };
        assert!(e.to_string().contains("no RDMA device"), "{e}");
        let e = AddrInfoError {
            eai: Eai::Service,
            errno: None,
            what: "x".into(),
        };
        assert!(e.to_string().contains("EAI_SERVICE"), "{e}");
    }

    #[test]
    fn enums_round_trip() {
        for f in [
            AiFamily::Unspec,
            AiFamily::Inet,
            AiFamily::Inet6,
            AiFamily::Ib,
        ] {
            assert_eq!(AiFamily::from_raw(f.raw()), f);
        }
        for q in [QpType::Rc, QpType::Ud] {
            assert_eq!(QpType::from_raw(q.raw()), Some(q));
        }
        for p in [
            PortSpace::Tcp,
            PortSpace::Udp,
            PortSpace::Ib,
            PortSpace::IpoIb,
        ] {
            assert_eq!(PortSpace::from_raw(p.raw()), Some(p));
        }
        assert_eq!(QpType::from_raw(0), None);
    }

    #[test]
    fn a_nul_in_the_node_is_refused_before_the_call() {
        let Ok(lib) = crate::rdma_core() else {
            eprintln!("skipped: no rdma-core");
            return;
        };
        let e = rdma_getaddrinfo(lib, Some("a\0b"), None, None).unwrap_err();
        assert_eq!(e.eai, Eai::NoName);
    }

    /// Numeric resolution: with a device it answers; without one librdmacm
    /// refuses with ENODEV (its initialisation needs a device), which is
    /// `NoDev`.
    #[test]
    fn numeric_passive_resolution() {
        let Ok(lib) = crate::rdma_core() else {
            eprintln!("skipped: no rdma-core");
            return;
        };
        let hints = Hints {
            flags: RaiFlags::PASSIVE | RaiFlags::NUMERICHOST,
            port_space: Some(PortSpace::Tcp),
            ..Hints::default()
        };
        match rdma_getaddrinfo(lib, Some("127.0.0.1"), Some("7471"), Some(&hints)) {
            Ok(list) => {
                let first = list.first().expect("at least one answer");
                // struct sockaddr_in: family, port (big-endian), address.
                let mut want = vec![0u8; std::mem::size_of::<libc::sockaddr_in>()];
                want[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
                want[2..4].copy_from_slice(&7471u16.to_be_bytes());
                want[4..8].copy_from_slice(&[127, 0, 0, 1]);
                assert_eq!(first.src_addr, Some(want));
                assert_eq!(first.dst_addr, None);
            }
            Err(e) => {
                eprintln!("no device: {e}");
                assert_eq!(e.eai, Eai::System, "{e}");
                assert_eq!(e.errno, Some(libc::ENODEV), "{e}");
            }
        }
    }
}
