//! Fabric addresses: the binary socket addresses (`sockaddr_in`,
//! `sockaddr_in6`, `sockaddr_ib`) and the `FI_ADDR_STR` string forms.
//!
//! Every address has one string form (its `Display`, what `fi_av_straddr`
//! prints) and parses back from it: `a.to_string().parse() == Ok(a)`.
//!
//! | format | string form |
//! |---|---|
//! | `FI_SOCKADDR_IN` | `fi_sockaddr_in://192.0.2.1:7471` |
//! | `FI_SOCKADDR_IN6` | `fi_sockaddr_in6://[2001:db8::1]:7471` |
//! | `FI_SOCKADDR_IB` | `fi_sockaddr_ib://[fe80::1]:0xffff:0x106:0x0:7471` |
//! | `FI_ADDR_STR` | the string itself, e.g. `fi_shm://rank0` |
//! | other binary formats | `fi_addr_raw://FI_ADDR_EFA/0011aabb...` |
//!
//! Parsing is strict where libfabric's `ofi_str_toaddr` is lax (see
//! [`parse`] for the grammar and each deliberate difference).

mod bytes;
pub mod parse;

use std::fmt;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::str::FromStr;

use crate::enums::AddrFormat;
use crate::error::Error;

/// An InfiniBand socket address (`struct sockaddr_ib` of rdma-core).
///
/// The service id is `port_space << 16 | port` as librdmacm builds it; its
/// mask is all ones when the service id is non-zero and zero otherwise, so
/// the mask is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SockaddrIb {
    /// Partition key.
    pub pkey: u16,
    /// Flow label (host order).
    pub flowinfo: u32,
    /// Port GID.
    pub gid: Ipv6Addr,
    /// Service id (host order): `port_space << 16 | port`.
    pub sid: u64,
    /// Scope id.
    pub scope_id: u64,
}

impl SockaddrIb {
    /// The rdma_cm port space part of the service id.
    pub const fn port_space(&self) -> u64 {
        self.sid >> 16
    }

    /// The port part of the service id.
    pub const fn port(&self) -> u16 {
        (self.sid & 0xffff) as u16
    }
}

/// A fabric address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// IPv4 socket address (`FI_SOCKADDR_IN`).
    In(SocketAddrV4),
    /// IPv6 socket address (`FI_SOCKADDR_IN6`).
    In6(SocketAddrV6),
    /// InfiniBand socket address (`FI_SOCKADDR_IB`).
    Ib(SockaddrIb),
    /// A formatted string (`FI_ADDR_STR`), such as `fi_shm://rank0`.
    Str(String),
    /// Bytes of a format this library has no structure for (PSMX2, EFA, ...).
    Raw {
        /// The address format.
        format: AddrFormat,
        /// The address bytes as the provider defines them.
        bytes: Vec<u8>,
    },
}

impl Address {
    /// The address format (`FI_SOCKADDR_IN`, ...).
    pub fn format(&self) -> AddrFormat {
        match self {
            Address::In(_) => AddrFormat::SockaddrIn,
            Address::In6(_) => AddrFormat::SockaddrIn6,
            Address::Ib(_) => AddrFormat::SockaddrIb,
            Address::Str(_) => AddrFormat::Str,
            Address::Raw { format, .. } => *format,
        }
    }

    /// The length in bytes of the C representation (`src_addrlen`): the
    /// sockaddr size, or the string length plus its terminating NUL.
    pub fn c_len(&self) -> usize {
        match self {
            Address::In(_) => bytes::SOCKADDR_IN_LEN,
            Address::In6(_) => bytes::SOCKADDR_IN6_LEN,
            Address::Ib(_) => bytes::SOCKADDR_IB_LEN,
            Address::Str(s) => s.len() + 1,
            Address::Raw { bytes, .. } => bytes.len(),
        }
    }

    /// The IP socket address, if this is one.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self {
            Address::In(a) => Some(SocketAddr::V4(*a)),
            Address::In6(a) => Some(SocketAddr::V6(*a)),
            _ => None,
        }
    }

    /// The C representation (`struct sockaddr_in`, ..., or the NUL-terminated
    /// string), in the host's byte order conventions of those structures.
    pub fn to_bytes(&self) -> Vec<u8> {
        bytes::to_bytes(self)
    }

    /// Decodes the C representation of an address of `format`. Checks the
    /// length and the family field; never trusts either.
    pub fn from_bytes(format: AddrFormat, data: &[u8]) -> Result<Address, Error> {
        bytes::from_bytes(format, data)
    }
}

impl From<SocketAddr> for Address {
    fn from(a: SocketAddr) -> Self {
        match a {
            SocketAddr::V4(a) => Address::In(a),
            SocketAddr::V6(a) => Address::In6(a),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::In(a) => write!(f, "fi_sockaddr_in://{}:{}", a.ip(), a.port()),
            Address::In6(a) => {
                write!(f, "fi_sockaddr_in6://[{}", a.ip())?;
                if a.scope_id() != 0 {
                    write!(f, "%{}", a.scope_id())?;
                }
                write!(f, "]:{}", a.port())?;
                if a.flowinfo() != 0 {
                    write!(f, "?flowinfo={}", a.flowinfo())?;
                }
                Ok(())
            }
            Address::Ib(a) => {
                write!(
                    f,
                    "fi_sockaddr_ib://[{}]:{:#x}:{:#x}:{:#x}",
                    a.gid,
                    a.pkey,
                    a.port_space(),
                    a.scope_id
                )?;
                if a.sid != 0 {
                    write!(f, ":{}", a.port())?;
                }
                if a.flowinfo != 0 {
                    write!(f, "?flowinfo={}", a.flowinfo)?;
                }
                Ok(())
            }
            Address::Str(s) => f.write_str(s),
            Address::Raw { format, bytes } => {
                write!(f, "fi_addr_raw://{format}/")?;
                for b in bytes {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Address {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse::parse(s)
    }
}

impl serde::Serialize for Address {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Address {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
