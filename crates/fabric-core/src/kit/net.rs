//! Naming helpers of the IP-based providers: the fabric name of an
//! interface (its subnet), the local address the system routes from, and
//! the address book of an AV of IP socket addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use crate::kit::objects::AddressBook;
use crate::resolve::{Query, resolve};
use crate::{Address, Error, Result};

/// The address book of providers that reach peers by IP socket address:
/// `fi_av_insertsvc` resolves node / service like getinfo does, and an
/// inserted address must be an IP socket address, or one more kind the
/// provider names with [`IpBook::or`].
#[derive(Debug, Clone, Copy)]
pub struct IpBook {
    provider: &'static str,
    other: Option<(Accepts, &'static str)>,
}

/// Says whether an address is one more kind an [`IpBook`] takes.
type Accepts = fn(&Address) -> bool;

impl IpBook {
    /// The book of `provider` (named in its errors).
    pub const fn new(provider: &'static str) -> Self {
        IpBook {
            provider,
            other: None,
        }
    }

    /// Also accepts the addresses `accepts` says yes to, called `what` in
    /// errors.
    pub const fn or(self, accepts: Accepts, what: &'static str) -> Self {
        IpBook {
            provider: self.provider,
            other: Some((accepts, what)),
        }
    }
}

impl AddressBook for IpBook {
    fn resolve(&self, node: &str, service: &str) -> Result<Address> {
        let q = Query {
            node: Some(node),
            service: Some(service),
            ..Query::default()
        };
        resolve(&q)?
            .into_iter()
            .next()
            .map(Address::from)
            .ok_or_else(|| Error::no_data(format!("`{node}` resolves to nothing")))
    }

    fn accept(&self, addr: &Address) -> Result<()> {
        if addr.socket_addr().is_some() {
            return Ok(());
        }
        let p = self.provider;
        match self.other {
            Some((accepts, _)) if accepts(addr) => Ok(()),
            Some((_, what)) => Err(Error::inval(format!(
                "{p} cannot reach `{addr}`: neither an IP socket address nor {what}"
            ))),
            None => Err(Error::inval(format!(
                "{p} cannot reach `{addr}`: not an IP socket address"
            ))),
        }
    }
}

/// The fabric name of an interface with address `ip` and prefix length
/// `prefix`: its subnet, `192.0.2.0/24`.
pub fn subnet_name(ip: IpAddr, prefix: u8) -> String {
    let net = match ip {
        IpAddr::V4(a) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
        }
    };
    format!("{net}/{prefix}")
}

/// The local address the system would use to reach `dest` (no packet is
/// sent: a UDP socket is connected and asked for its name); a loopback
/// destination is its own source.
pub fn route_source(dest: &SocketAddr) -> Option<IpAddr> {
    if dest.ip().is_loopback() {
        return Some(dest.ip());
    }
    let bind: SocketAddr = if dest.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(dest).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_and_routes() {
        let v4: IpAddr = "192.0.2.77".parse().unwrap();
        assert_eq!(subnet_name(v4, 24), "192.0.2.0/24");
        assert_eq!(subnet_name(v4, 0), "0.0.0.0/0");
        assert_eq!(subnet_name(v4, 32), "192.0.2.77/32");
        let v6: IpAddr = "2001:db8::1:2".parse().unwrap();
        assert_eq!(subnet_name(v6, 64), "2001:db8::/64");
        let lo: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(route_source(&lo), Some(lo.ip()));
    }
}
