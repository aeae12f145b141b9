//! Node / service resolution with fi_getinfo(3)'s flags.
//!
//! This is the one place fabric-core does IO: a host name lookup through the
//! system resolver (`getaddrinfo`), so that every provider resolves names
//! with the same rules. Numeric nodes and ports never reach the resolver.
//!
//! - `FI_NUMERICHOST`: the node must be a numeric address; names are refused
//!   (`Inval`) without any lookup.
//! - `FI_SOURCE` (passive): node / service name the local side; a missing
//!   node means the wildcard address (`0.0.0.0` / `::`). Without FI_SOURCE a
//!   missing node means the loopback address, as `getaddrinfo` does.
//! - A node in FI_ADDR_STR form (`fi_sockaddr_in://10.0.0.1:7471`) is parsed
//!   as an address, never looked up; a service must then be absent.
//! - A service is a decimal port (0..=65535) or a service name from the
//!   system's services database.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::addr::Address;
use crate::error::{Error, Result};

/// Which IP families a caller can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// IPv4 and IPv6.
    #[default]
    Any,
    /// IPv4 only (`FI_SOCKADDR_IN`).
    V4,
    /// IPv6 only (`FI_SOCKADDR_IN6`).
    V6,
}

impl Family {
    fn admits(self, ip: &IpAddr) -> bool {
        match self {
            Family::Any => true,
            Family::V4 => ip.is_ipv4(),
            Family::V6 => ip.is_ipv6(),
        }
    }
}

/// What to resolve.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<'a> {
    /// Host name, numeric address, or FI_ADDR_STR address.
    pub node: Option<&'a str>,
    /// Port number or service name.
    pub service: Option<&'a str>,
    /// FI_NUMERICHOST: no name lookup.
    pub numeric_host: bool,
    /// FI_SOURCE: the local (listening) side.
    pub passive: bool,
    /// Families to return.
    pub family: Family,
}

/// Parses a service: a decimal port, or a name from the services database.
pub fn service_port(service: &str) -> Result<u16> {
    if !service.is_empty() && service.bytes().all(|b| b.is_ascii_digit()) {
        return service.parse::<u16>().map_err(|_| {
            Error::inval(format!(
                "service `{service}` is not a port number in 0..=65535"
            ))
        });
    }
    let hints = dns_lookup::AddrInfoHints {
        socktype: dns_lookup::SockType::Stream.into(),
        ..Default::default()
    };
    let mut it = dns_lookup::getaddrinfo(None, Some(service), Some(hints))
        .map_err(|e| Error::no_data(format!("unknown service `{service}`: {}", lookup(e))))?;
    match it.next() {
        Some(Ok(ai)) => Ok(ai.sockaddr.port()),
        _ => Err(Error::no_data(format!("unknown service `{service}`"))),
    }
}

/// The resolver's reason, as text (`gai_strerror`'s, or the system
/// error's).
fn lookup(e: dns_lookup::LookupError) -> std::io::Error {
    std::io::Error::from(e)
}

/// Resolves a query into socket addresses, in resolver order, without
/// duplicates. `NoData` when a name does not resolve (or resolves to no
/// address of the wanted family), `Inval` for malformed input.
pub fn resolve(q: &Query<'_>) -> Result<Vec<SocketAddr>> {
    let port = match q.service {
        Some(s) => service_port(s)?,
        None => 0,
    };
    let Some(node) = q.node else {
        let ips: [IpAddr; 2] = if q.passive {
            [Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()]
        } else {
            [Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()]
        };
        let out: Vec<_> = ips
            .into_iter()
            .filter(|ip| q.family.admits(ip))
            .map(|ip| SocketAddr::new(ip, port))
            .collect();
        return Ok(out);
    };
    if node.contains("://") {
        if q.service.is_some() {
            return Err(Error::inval(format!(
                "node `{node}` is an FI_ADDR_STR address, so the service must be absent"
            )));
        }
        let a: Address = node.parse()?;
        let sa = a.socket_addr().ok_or_else(|| {
            Error::inval(format!(
                "node `{node}` is {}, not an IP socket address",
                a.format()
            ))
        })?;
        return admit(vec![sa], q.family, node);
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return admit(vec![SocketAddr::new(ip, port)], q.family, node);
    }
    if q.numeric_host {
        return Err(Error::inval(format!(
            "node `{node}` is not a numeric address, and FI_NUMERICHOST forbids a name lookup"
        )));
    }
    let hints = dns_lookup::AddrInfoHints {
        socktype: dns_lookup::SockType::Stream.into(),
        flags: if q.passive { AI_PASSIVE } else { 0 },
        ..Default::default()
    };
    let iter = dns_lookup::getaddrinfo(Some(node), None, Some(hints))
        .map_err(|e| Error::no_data(format!("cannot resolve node `{node}`: {}", lookup(e))))?;
    let mut out: Vec<SocketAddr> = Vec::new();
    for ai in iter.flatten() {
        let sa = SocketAddr::new(ai.sockaddr.ip(), port);
        if !out.contains(&sa) {
            out.push(sa);
        }
    }
    admit(out, q.family, node)
}

/// `AI_PASSIVE` of Linux's `<netdb.h>`.
const AI_PASSIVE: i32 = 1;

fn admit(addrs: Vec<SocketAddr>, family: Family, node: &str) -> Result<Vec<SocketAddr>> {
    let out: Vec<_> = addrs
        .into_iter()
        .filter(|a| family.admits(&a.ip()))
        .collect();
    if out.is_empty() {
        return Err(Error::no_data(format!(
            "node `{node}` has no address of family {family:?}"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn q(node: Option<&'static str>, service: Option<&'static str>) -> Query<'static> {
        Query {
            node,
            service,
            ..Default::default()
        }
    }

    #[test]
    fn numeric_nodes_need_no_lookup() {
        let r = resolve(&Query {
            numeric_host: true,
            ..q(Some("10.1.2.3"), Some("7471"))
        });
        assert_eq!(r, Ok(vec!["10.1.2.3:7471".parse().unwrap()]));
        let r = resolve(&Query {
            numeric_host: true,
            ..q(Some("::1"), Some("1"))
        });
        assert_eq!(r, Ok(vec!["[::1]:1".parse().unwrap()]));
    }

    #[test]
    fn numerichost_refuses_names() {
        let e = resolve(&Query {
            numeric_host: true,
            ..q(Some("localhost"), None)
        })
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert!(e.detail().contains("FI_NUMERICHOST"), "{e}");
    }

    #[test]
    fn missing_node_is_wildcard_when_passive_else_loopback() {
        let r = resolve(&Query {
            passive: true,
            ..q(None, Some("9"))
        })
        .unwrap();
        assert_eq!(
            r,
            vec!["0.0.0.0:9".parse().unwrap(), "[::]:9".parse().unwrap()]
        );
        let r = resolve(&Query {
            family: Family::V4,
            ..q(None, Some("9"))
        })
        .unwrap();
        assert_eq!(r, vec!["127.0.0.1:9".parse().unwrap()]);
    }

    #[test]
    fn resolver_errors_read_as_text() {
        let e = service_port("no-such-service-for-fabric").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("unknown service"), "{text}");
        assert!(!text.contains("LookupError"), "{text}");
    }

    #[test]
    fn ports_are_checked() {
        assert_eq!(service_port("65535"), Ok(65535));
        assert_eq!(service_port("65536").unwrap_err().kind(), ErrorKind::Inval);
        assert_eq!(
            resolve(&q(Some("127.0.0.1"), Some("99999")))
                .unwrap_err()
                .kind(),
            ErrorKind::Inval
        );
    }

    #[test]
    fn addr_str_nodes_are_parsed() {
        let r = resolve(&q(Some("fi_sockaddr_in://10.0.0.1:7471"), None)).unwrap();
        assert_eq!(r, vec!["10.0.0.1:7471".parse().unwrap()]);
        let e = resolve(&q(Some("fi_sockaddr_in://10.0.0.1:7471"), Some("1"))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
    }

    #[test]
    fn family_filter() {
        let e = resolve(&Query {
            family: Family::V6,
            ..q(Some("10.0.0.1"), None)
        })
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData);
    }

    #[test]
    fn localhost_resolves() {
        // /etc/hosts lookup, no network needed.
        let r = resolve(&q(Some("localhost"), Some("80"))).unwrap();
        assert!(
            r.iter().all(|a| a.ip().is_loopback() && a.port() == 80),
            "{r:?}"
        );
    }
}
