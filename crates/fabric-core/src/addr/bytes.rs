//! The C representation of addresses: `struct sockaddr_in`, `sockaddr_in6`,
//! `sockaddr_ib` with Linux's layouts, NUL-terminated strings for
//! `FI_ADDR_STR`, and the bytes themselves for formats without structure.
//!
//! Layouts (offsets in bytes; `ne` is the host's byte order, `be` network
//! order, as the C structures define them):
//!
//! ```text
//! sockaddr_in   (16)  0 family ne = 2    2 port be16   4 addr[4]     8 zero[8]
//! sockaddr_in6  (28)  0 family ne = 10   2 port be16   4 flowinfo be32
//!                     8 addr[16]        24 scope_id ne32
//! sockaddr_ib   (48)  0 family ne = 27   2 pkey be16   4 flowinfo be32
//!                     8 gid[16]         24 sid be64   32 sid_mask be64
//!                    40 scope_id ne64
//! ```
//!
//! Decoding never trusts the input: the length and the family field are
//! checked, and every failure is an `Inval` error saying what was expected.
//! Decoding ignores the padding of `sockaddr_in` and the service id mask of
//! `sockaddr_ib`; encoding writes zero padding and a mask of all ones when
//! the service id is non-zero (zero otherwise), as librdmacm does.
//!
//! `FI_ADDR_STR` bytes are a C string: UTF-8 text, optionally followed by
//! NULs, with no NUL inside. The text is read with
//! [`parse`](super::parse::parse), so the result is the same value the
//! string parses to: `fi_shm://rank0` comes back as [`Address::Str`], but
//! `fi_sockaddr_in://10.0.0.1:7471` as [`Address::In`]. This keeps one value
//! per address, whichever way it arrived.
//!
//! Every value decoded here prints as a string that parses back to it, and
//! encodes to bytes that decode back to it.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use super::parse::{MAX_RAW_LEN, check_raw_format, parse};
use super::{Address, SockaddrIb};
use crate::enums::AddrFormat;
use crate::error::Error;

/// `sizeof(struct sockaddr_in)`.
pub(crate) const SOCKADDR_IN_LEN: usize = 16;
/// `sizeof(struct sockaddr_in6)`.
pub(crate) const SOCKADDR_IN6_LEN: usize = 28;
/// `sizeof(struct sockaddr_ib)`.
pub(crate) const SOCKADDR_IB_LEN: usize = 48;

/// Linux `AF_INET`.
const AF_INET: u16 = 2;
/// Linux `AF_INET6`.
const AF_INET6: u16 = 10;
/// Linux `AF_IB`.
const AF_IB: u16 = 27;

/// The C representation of `a` (see the module documentation).
pub(crate) fn to_bytes(a: &Address) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.c_len());
    match a {
        Address::In(sa) => {
            out.extend_from_slice(&AF_INET.to_ne_bytes());
            out.extend_from_slice(&sa.port().to_be_bytes());
            out.extend_from_slice(&sa.ip().octets());
            out.extend_from_slice(&[0; 8]);
        }
        Address::In6(sa) => {
            out.extend_from_slice(&AF_INET6.to_ne_bytes());
            out.extend_from_slice(&sa.port().to_be_bytes());
            out.extend_from_slice(&sa.flowinfo().to_be_bytes());
            out.extend_from_slice(&sa.ip().octets());
            out.extend_from_slice(&sa.scope_id().to_ne_bytes());
        }
        Address::Ib(ib) => {
            let mask = if ib.sid != 0 { u64::MAX } else { 0 };
            out.extend_from_slice(&AF_IB.to_ne_bytes());
            out.extend_from_slice(&ib.pkey.to_be_bytes());
            out.extend_from_slice(&ib.flowinfo.to_be_bytes());
            out.extend_from_slice(&ib.gid.octets());
            out.extend_from_slice(&ib.sid.to_be_bytes());
            out.extend_from_slice(&mask.to_be_bytes());
            out.extend_from_slice(&ib.scope_id.to_ne_bytes());
        }
        Address::Str(s) => {
            out.extend_from_slice(s.as_bytes());
            out.push(0);
        }
        Address::Raw { bytes, .. } => out.extend_from_slice(bytes),
    }
    out
}

/// Decodes the C representation of an address of `format`.
///
/// `FI_SOCKADDR_IN`, `_IN6` and `_IB` need exactly the size of their
/// structure. `FI_SOCKADDR` (any family) reads the family field and needs at
/// least the size of that family's structure, so a `sockaddr_storage` is
/// fine; bytes after the structure are ignored. Formats without structure
/// become [`Address::Raw`] (1 to [`MAX_RAW_LEN`] bytes); `FI_FORMAT_UNSPEC`
/// is refused, since its bytes could not be told apart from any other
/// format's.
pub(crate) fn from_bytes(format: AddrFormat, data: &[u8]) -> Result<Address, Error> {
    match format {
        AddrFormat::SockaddrIn => {
            exact_len(format, data, SOCKADDR_IN_LEN, "sockaddr_in")?;
            decode_in(format, data).map(Address::In)
        }
        AddrFormat::SockaddrIn6 => {
            exact_len(format, data, SOCKADDR_IN6_LEN, "sockaddr_in6")?;
            decode_in6(format, data).map(Address::In6)
        }
        AddrFormat::SockaddrIb => {
            exact_len(format, data, SOCKADDR_IB_LEN, "sockaddr_ib")?;
            decode_ib(format, data).map(Address::Ib)
        }
        AddrFormat::Sockaddr => decode_any(data),
        AddrFormat::Str => decode_str(data),
        _ => {
            check_raw_format(format)
                .map_err(|why| Error::inval(format!("{format} address bytes: {why}")))?;
            if data.is_empty() {
                return Err(Error::inval(format!(
                    "{format} address bytes: the address is empty"
                )));
            }
            if data.len() > MAX_RAW_LEN {
                return Err(Error::inval(format!(
                    "{format} address of {} bytes: the limit for raw addresses is {MAX_RAW_LEN}",
                    data.len()
                )));
            }
            Ok(Address::Raw {
                format,
                bytes: data.to_vec(),
            })
        }
    }
}

fn exact_len(format: AddrFormat, data: &[u8], len: usize, name: &str) -> Result<(), Error> {
    if data.len() == len {
        Ok(())
    } else {
        Err(Error::inval(format!(
            "{format} address of {} bytes: struct {name} is {len} bytes",
            data.len()
        )))
    }
}

/// The name of a Linux address family, for messages.
fn family_name(family: u16) -> &'static str {
    match family {
        0 => "AF_UNSPEC",
        1 => "AF_UNIX",
        AF_INET => "AF_INET",
        AF_INET6 => "AF_INET6",
        AF_IB => "AF_IB",
        _ => "unknown",
    }
}

/// Reads the fields of a C structure front to back.
struct Reader<'a> {
    format: AddrFormat,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(format: AddrFormat, data: &'a [u8]) -> Self {
        Reader { format, rest: data }
    }

    /// The next `N` bytes. Callers check the length first, so running out
    /// is an internal inconsistency; it is still an error, not a panic.
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let (head, tail) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or_else(|| Error::inval(format!("{} address bytes end too early", self.format)))?;
        self.rest = tail;
        Ok(*head)
    }

    /// Reads the family field and checks it is `want`.
    fn family(&mut self, want: u16) -> Result<(), Error> {
        let family = u16::from_ne_bytes(self.take()?);
        if family == want {
            Ok(())
        } else {
            Err(Error::inval(format!(
                "{} address bytes: the family field is {family} ({}), not {want} ({})",
                self.format,
                family_name(family),
                family_name(want)
            )))
        }
    }
}

fn decode_in(format: AddrFormat, data: &[u8]) -> Result<SocketAddrV4, Error> {
    let mut r = Reader::new(format, data);
    r.family(AF_INET)?;
    let port = u16::from_be_bytes(r.take()?);
    let ip = Ipv4Addr::from(r.take::<4>()?);
    // sin_zero: padding, ignored.
    Ok(SocketAddrV4::new(ip, port))
}

fn decode_in6(format: AddrFormat, data: &[u8]) -> Result<SocketAddrV6, Error> {
    let mut r = Reader::new(format, data);
    r.family(AF_INET6)?;
    let port = u16::from_be_bytes(r.take()?);
    let flowinfo = u32::from_be_bytes(r.take()?);
    let ip = Ipv6Addr::from(r.take::<16>()?);
    let scope_id = u32::from_ne_bytes(r.take()?);
    Ok(SocketAddrV6::new(ip, port, flowinfo, scope_id))
}

fn decode_ib(format: AddrFormat, data: &[u8]) -> Result<SockaddrIb, Error> {
    let mut r = Reader::new(format, data);
    r.family(AF_IB)?;
    let pkey = u16::from_be_bytes(r.take()?);
    let flowinfo = u32::from_be_bytes(r.take()?);
    let gid = Ipv6Addr::from(r.take::<16>()?);
    let sid = u64::from_be_bytes(r.take()?);
    let _sid_mask = r.take::<8>()?;
    let scope_id = u64::from_ne_bytes(r.take()?);
    Ok(SockaddrIb {
        pkey,
        flowinfo,
        gid,
        sid,
        scope_id,
    })
}

/// `FI_SOCKADDR`: the family field says which structure follows.
fn decode_any(data: &[u8]) -> Result<Address, Error> {
    let format = AddrFormat::Sockaddr;
    let Some(family) = data.first_chunk::<2>().map(|f| u16::from_ne_bytes(*f)) else {
        return Err(Error::inval(format!(
            "{format} address of {} bytes: too short to hold a family field",
            data.len()
        )));
    };
    let (len, name) = match family {
        AF_INET => (SOCKADDR_IN_LEN, "sockaddr_in"),
        AF_INET6 => (SOCKADDR_IN6_LEN, "sockaddr_in6"),
        AF_IB => (SOCKADDR_IB_LEN, "sockaddr_ib"),
        _ => {
            return Err(Error::inval(format!(
                "{format} address bytes: family {family} ({}) is not AF_INET (2), AF_INET6 (10) or AF_IB (27)",
                family_name(family)
            )));
        }
    };
    let Some(data) = data.get(..len) else {
        return Err(Error::inval(format!(
            "{format} address of {} bytes with family {}: struct {name} is {len} bytes",
            data.len(),
            family_name(family)
        )));
    };
    match family {
        AF_INET => decode_in(format, data).map(Address::In),
        AF_INET6 => decode_in6(format, data).map(Address::In6),
        _ => decode_ib(format, data).map(Address::Ib),
    }
}

/// `FI_ADDR_STR`: a C string, read with [`parse`].
fn decode_str(data: &[u8]) -> Result<Address, Error> {
    let end = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let text = data.get(..end).unwrap_or_default();
    if text.is_empty() {
        return Err(Error::inval(
            "FI_ADDR_STR address bytes: the string is empty",
        ));
    }
    if let Some(at) = text.iter().position(|&b| b == 0) {
        return Err(Error::inval(format!(
            "FI_ADDR_STR address bytes: NUL at byte {at} inside the string"
        )));
    }
    let s = std::str::from_utf8(text).map_err(|e| {
        Error::inval(format!(
            "FI_ADDR_STR address bytes: not UTF-8 (invalid byte at {})",
            e.valid_up_to()
        ))
    })?;
    parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn err(format: AddrFormat, data: &[u8]) -> String {
        match from_bytes(format, data) {
            Ok(a) => panic!("{format} {data:?} should not decode, got {a:?}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Inval);
                e.detail().to_string()
            }
        }
    }

    fn in_bytes(port: u16, ip: [u8; 4]) -> Vec<u8> {
        let mut v = AF_INET.to_ne_bytes().to_vec();
        v.extend_from_slice(&port.to_be_bytes());
        v.extend_from_slice(&ip);
        v.extend_from_slice(&[0; 8]);
        v
    }

    #[test]
    fn sockaddr_in_layout() {
        let a = Address::In(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 0x1d2f));
        let b = to_bytes(&a);
        assert_eq!(b, in_bytes(0x1d2f, [192, 0, 2, 1]));
        assert_eq!(&b[2..4], &[0x1d, 0x2f], "port in network order");
        assert_eq!(b.len(), a.c_len());
        assert_eq!(from_bytes(AddrFormat::SockaddrIn, &b), Ok(a.clone()));
        assert_eq!(from_bytes(AddrFormat::Sockaddr, &b), Ok(a.clone()));
        // Padding is ignored; a sockaddr_storage-sized buffer is fine for
        // the generic format only.
        let mut dirty = b.clone();
        dirty[15] = 0xff;
        assert_eq!(from_bytes(AddrFormat::SockaddrIn, &dirty), Ok(a.clone()));
        let mut storage = b.clone();
        storage.resize(128, 0xee);
        assert_eq!(from_bytes(AddrFormat::Sockaddr, &storage), Ok(a));
        assert!(
            err(AddrFormat::SockaddrIn, &storage)
                .contains("128 bytes: struct sockaddr_in is 16 bytes")
        );
    }

    #[test]
    fn sockaddr_in6_layout() {
        let ip: Ipv6Addr = "2001:db8::1".parse().expect("literal");
        let a = Address::In6(SocketAddrV6::new(ip, 7471, 0x0001_2345, 3));
        let b = to_bytes(&a);
        assert_eq!(b.len(), SOCKADDR_IN6_LEN);
        assert_eq!(&b[0..2], &AF_INET6.to_ne_bytes());
        assert_eq!(&b[2..4], &7471u16.to_be_bytes());
        assert_eq!(&b[4..8], &[0x00, 0x01, 0x23, 0x45]);
        assert_eq!(&b[8..24], &ip.octets());
        assert_eq!(&b[24..28], &3u32.to_ne_bytes());
        assert_eq!(from_bytes(AddrFormat::SockaddrIn6, &b), Ok(a.clone()));
        assert_eq!(from_bytes(AddrFormat::Sockaddr, &b), Ok(a));
    }

    #[test]
    fn sockaddr_ib_layout() {
        let gid: Ipv6Addr = "fe80::1".parse().expect("literal");
        let ib = SockaddrIb {
            pkey: 0xffff,
            flowinfo: 7,
            gid,
            sid: (0x106 << 16) | 7471,
            scope_id: 9,
        };
        let b = to_bytes(&Address::Ib(ib));
        assert_eq!(b.len(), SOCKADDR_IB_LEN);
        assert_eq!(&b[0..2], &27u16.to_ne_bytes());
        assert_eq!(&b[2..4], &[0xff, 0xff]);
        assert_eq!(&b[4..8], &7u32.to_be_bytes());
        assert_eq!(&b[8..24], &gid.octets());
        assert_eq!(&b[24..32], &ib.sid.to_be_bytes());
        assert_eq!(
            &b[32..40],
            &[0xff; 8],
            "mask is all ones for a non-zero sid"
        );
        assert_eq!(&b[40..48], &9u64.to_ne_bytes());
        assert_eq!(from_bytes(AddrFormat::SockaddrIb, &b), Ok(Address::Ib(ib)));
        assert_eq!(from_bytes(AddrFormat::Sockaddr, &b), Ok(Address::Ib(ib)));

        let zero = SockaddrIb { sid: 0, ..ib };
        let b = to_bytes(&Address::Ib(zero));
        assert_eq!(&b[32..40], &[0; 8], "mask is zero for a zero sid");
        // The mask is not checked when decoding.
        let mut odd_mask = b.clone();
        odd_mask[33] = 0x5a;
        assert_eq!(
            from_bytes(AddrFormat::SockaddrIb, &odd_mask),
            Ok(Address::Ib(zero))
        );
    }

    #[test]
    fn lengths_and_families_are_checked() {
        let b = in_bytes(1, [1, 2, 3, 4]);
        assert!(
            err(AddrFormat::SockaddrIn, &b[..15])
                .contains("15 bytes: struct sockaddr_in is 16 bytes")
        );
        assert!(err(AddrFormat::SockaddrIn6, &b).contains("struct sockaddr_in6 is 28 bytes"));
        assert!(
            err(AddrFormat::SockaddrIb, &[]).contains("0 bytes: struct sockaddr_ib is 48 bytes")
        );
        assert!(err(AddrFormat::Sockaddr, &b[..15]).contains("struct sockaddr_in is 16 bytes"));
        assert!(err(AddrFormat::Sockaddr, &b[..1]).contains("too short to hold a family field"));
        let mut wrong = b.clone();
        wrong[..2].copy_from_slice(&AF_INET6.to_ne_bytes());
        let e = err(AddrFormat::SockaddrIn, &wrong);
        assert!(
            e.contains("family field is 10 (AF_INET6), not 2 (AF_INET)"),
            "{e}"
        );
        wrong[..2].copy_from_slice(&1u16.to_ne_bytes());
        assert!(err(AddrFormat::Sockaddr, &wrong).contains("family 1 (AF_UNIX) is not AF_INET"));
        let six = to_bytes(&Address::In6(SocketAddrV6::new(
            Ipv6Addr::LOCALHOST,
            1,
            0,
            0,
        )));
        assert!(err(AddrFormat::Sockaddr, &six[..27]).contains("struct sockaddr_in6 is 28 bytes"));
    }

    #[test]
    fn strings() {
        let a = Address::Str("fi_shm://rank0".into());
        let b = to_bytes(&a);
        assert_eq!(b, b"fi_shm://rank0\0");
        assert_eq!(b.len(), a.c_len());
        assert_eq!(from_bytes(AddrFormat::Str, &b), Ok(a.clone()));
        assert_eq!(
            from_bytes(AddrFormat::Str, b"fi_shm://rank0"),
            Ok(a.clone())
        );
        assert_eq!(from_bytes(AddrFormat::Str, b"fi_shm://rank0\0\0\0"), Ok(a));
        // A structured string decodes to the structured value.
        let want = Address::In("10.0.0.1:7471".parse().expect("literal"));
        assert_eq!(
            from_bytes(AddrFormat::Str, b"fi_sockaddr_in://10.0.0.1:7471\0"),
            Ok(want)
        );
        assert!(
            err(AddrFormat::Str, b"fi_shm://a\0b\0").contains("NUL at byte 10 inside the string")
        );
        assert!(err(AddrFormat::Str, b"fi_shm://\xff\0").contains("not UTF-8 (invalid byte at 9)"));
        assert!(err(AddrFormat::Str, b"").contains("empty"));
        assert!(err(AddrFormat::Str, b"\0\0").contains("empty"));
        assert!(err(AddrFormat::Str, b"hello\0").contains("expected SCHEME://"));
    }

    #[test]
    fn raw_formats() {
        for format in AddrFormat::ALL
            .iter()
            .copied()
            .filter(|f| check_raw_format(*f).is_ok())
        {
            let a = from_bytes(format, &[1, 2, 3]).expect("raw bytes decode");
            assert_eq!(
                a,
                Address::Raw {
                    format,
                    bytes: vec![1, 2, 3]
                }
            );
            assert_eq!(to_bytes(&a), [1, 2, 3]);
            assert!(err(format, &[]).contains("the address is empty"));
        }
        assert!(err(AddrFormat::Unspec, &[1]).contains("FI_FORMAT_UNSPEC has no byte layout"));
        assert!(from_bytes(AddrFormat::Efa, &[0; MAX_RAW_LEN]).is_ok());
        assert!(
            err(AddrFormat::Efa, &[0; MAX_RAW_LEN + 1])
                .contains("the limit for raw addresses is 1024")
        );
    }
}
