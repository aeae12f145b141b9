//! Node / service resolution through `rdma_getaddrinfo(3)` (fabric-sys's
//! wrapper), and what its errors mean to the provider: the mapping of the
//! `EAI_*` codes and system errors to `fabric_core` error kinds lives here,
//! so that fabric-sys stays a leaf crate.

use std::net::SocketAddr;

use fabric_core::{AddrFormat, Address, Error, ErrorKind, Result};
use fabric_sys::addrinfo::{
    self, AddrInfoError, AiFamily, Eai, Hints, PortSpace, QpType, RaiFlags,
};

/// What to resolve: a node and service of the RC / TCP port space.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Query<'a> {
    /// The node (name or numeric address).
    pub node: Option<&'a str>,
    /// The service (port).
    pub service: Option<&'a str>,
    /// Resolve for the listening side (`RAI_PASSIVE`): the node is local.
    pub passive: bool,
    /// The node must be numeric (`RAI_NUMERICHOST`).
    pub numeric: bool,
    /// The address family the hints ask for (`Unspec` for any).
    pub family: AddrFormat,
}

/// One answer: the local device address librdmacm picked (if any) and the
/// destination (none when passive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Source address.
    pub src: Option<SocketAddr>,
    /// Destination address.
    pub dest: Option<SocketAddr>,
}

/// Resolves `q` (rdma_getaddrinfo(3)).
pub(crate) fn resolve(q: &Query<'_>) -> Result<Vec<Resolved>> {
    let lib = super::lib()?;
    let mut flags = RaiFlags::empty();
    if q.passive {
        flags |= RaiFlags::PASSIVE;
    }
    if q.numeric {
        flags |= RaiFlags::NUMERICHOST;
    }
    let family = match q.family {
        AddrFormat::SockaddrIn => AiFamily::Inet,
        AddrFormat::SockaddrIn6 => AiFamily::Inet6,
        _ => AiFamily::Unspec,
    };
    if family != AiFamily::Unspec {
        flags |= RaiFlags::FAMILY;
    }
    let hints = Hints {
        flags,
        family,
        qp_type: Some(QpType::Rc),
        port_space: Some(PortSpace::Tcp),
        ..Hints::default()
    };
    let list =
        addrinfo::rdma_getaddrinfo(lib, q.node, q.service, Some(&hints)).map_err(addrinfo_error)?;
    Ok(list
        .into_iter()
        .map(|ai| Resolved {
            src: ai.src_addr.as_deref().and_then(socket_addr),
            dest: ai.dst_addr.as_deref().and_then(socket_addr),
        })
        .collect())
}

/// The IP socket address in the bytes of a `struct sockaddr`.
fn socket_addr(raw: &[u8]) -> Option<SocketAddr> {
    Address::from_bytes(AddrFormat::Sockaddr, raw)
        .ok()
        .and_then(|a| a.socket_addr())
}

/// The kind of an `EAI_*` code: nothing found (`EAI_NONAME`,
/// `EAI_NODATA`, `EAI_ADDRFAMILY`, `EAI_SERVICE`) is `NoData`, as getinfo
/// reports "no match"; bad hints are `BadFlags` / `Inval`; `Again`,
/// `NoMem`, `Overflow` and `Io` (a permanent resolver failure) as named.
pub(crate) fn eai_kind(eai: Eai) -> ErrorKind {
    match eai {
        Eai::AddrFamily | Eai::NoData | Eai::NoName | Eai::Service => ErrorKind::NoData,
        Eai::Again => ErrorKind::Again,
        Eai::BadFlags => ErrorKind::BadFlags,
        Eai::Family | Eai::QpType => ErrorKind::Inval,
        Eai::Fail => ErrorKind::Io,
        Eai::Memory => ErrorKind::NoMem,
        Eai::Overflow => ErrorKind::Overflow,
        Eai::System | Eai::Unknown(_) => ErrorKind::Other,
    }
}

/// A failed resolution as a fabric error: the kind of [`eai_kind`]; a
/// system error keeps its errno's kind (`ENODEV`, no device, is `NoDev`).
pub(crate) fn addrinfo_error(e: AddrInfoError) -> Error {
    let kind = match (e.eai, e.errno) {
        (Eai::System, Some(errno)) => ErrorKind::from_errno(errno).unwrap_or(ErrorKind::Other),
        (eai, _) => eai_kind(eai),
    };
    Error::new(kind, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        assert_eq!(eai_kind(Eai::NoName), ErrorKind::NoData);
        assert_eq!(eai_kind(Eai::Service), ErrorKind::NoData);
        assert_eq!(eai_kind(Eai::BadFlags), ErrorKind::BadFlags);
        assert_eq!(eai_kind(Eai::QpType), ErrorKind::Inval);
        assert_eq!(eai_kind(Eai::Fail), ErrorKind::Io);
        let e = addrinfo_error(AddrInfoError {
            eai: Eai::System,
            errno: Some(libc::ENODEV),
            what: "x".into(),
        });
        assert_eq!(e.kind(), ErrorKind::NoDev);
        assert!(e.detail().contains("no RDMA device"), "{e}");
        let e = addrinfo_error(AddrInfoError {
            eai: Eai::Service,
            errno: None,
            what: "x".into(),
        });
        assert_eq!(e.kind(), ErrorKind::NoData);
        assert!(e.detail().contains("EAI_SERVICE"), "{e}");
    }

    #[test]
    fn sockaddr_bytes_read_back() {
        let a: SocketAddr = "10.99.0.1:7471".parse().unwrap();
        assert_eq!(socket_addr(&Address::from(a).to_bytes()), Some(a));
        assert_eq!(socket_addr(&[]), None);
    }

    /// Numeric resolution: with a device it answers; without one (or
    /// without rdma-core) it is `NoDev`.
    #[test]
    fn numeric_passive_resolution() {
        let q = Query {
            node: Some("127.0.0.1"),
            service: Some("7471"),
            passive: true,
            numeric: true,
            family: AddrFormat::Unspec,
        };
        match resolve(&q) {
            Ok(list) => {
                let first = list.first().expect("at least one answer");
                assert_eq!(first.src, Some("127.0.0.1:7471".parse().unwrap()));
                assert_eq!(first.dest, None);
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::NoDev, "{e}"),
        }
    }
}
