//! Extended headers: remote ranges of RMA requests, atomic requests,
//! rendezvous lengths and offsets, connection management.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use fabric_core::objects::{AtomicOp, Datatype, RmaIov};
use fabric_core::{ErrorKind, Result};

use super::bytes::{Reader, Writer};
use super::header::{ExtShape, Header, Op};
use super::{Limits, MAX_RMA_IOV, MIN_VERSION, VERSION, local, proto, u64_of};

/// Bytes of one remote range on the wire: address, length, key (u64 each).
pub const RMA_IOV_LEN: usize = 24;

/// Bytes of the connection management extended header.
pub const CM_LEN: usize = 32;

const NO_IOV: RmaIov = RmaIov {
    addr: 0,
    len: 0,
    key: 0,
};

/// The extended header of a frame; which variant an op has is fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ext {
    /// No extended header (`Msg`, `Tagged`, `Ack`, `ReadRsp`, `AtomicRsp`).
    None,
    /// `MsgRts` / `TaggedRts`: length of the whole message.
    Rts {
        /// Message length in bytes.
        msg_len: u64,
    },
    /// `Cts`: how many bytes of the message the receiver takes (less than
    /// the message when its buffer is smaller; 0 to discard it).
    Cts {
        /// Accepted length in bytes.
        accept_len: u64,
    },
    /// `RndvData`: where this chunk goes in the message.
    RndvData {
        /// Offset of the payload in the message.
        offset: u64,
    },
    /// `Write` / `ReadReq`: the target ranges.
    Rma(RmaHeader),
    /// `Atomic` / `FetchAtomic` / `CompareAtomic`.
    Atomic(AtomicHeader),
    /// Connection management ops.
    Cm(CmHeader),
}

impl Ext {
    /// Bytes this extended header takes on the wire.
    pub fn encoded_len(&self) -> usize {
        match self {
            Ext::None => 0,
            Ext::Rts { .. } | Ext::Cts { .. } | Ext::RndvData { .. } => 8,
            Ext::Rma(r) => r.encoded_len(),
            Ext::Atomic(a) => a.encoded_len(),
            Ext::Cm(_) => CM_LEN,
        }
    }

    /// Writes the extended header to the front of `out`; returns the bytes
    /// written, or `TooSmall` if `out` is shorter than [`Ext::encoded_len`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize> {
        let mut w = Writer::new(out);
        match self {
            Ext::None => {}
            Ext::Rts { msg_len: v } | Ext::Cts { accept_len: v } | Ext::RndvData { offset: v } => {
                w.u64(*v);
            }
            Ext::Rma(r) => r.write(&mut w),
            Ext::Atomic(a) => a.write(&mut w),
            Ext::Cm(c) => c.write(&mut w),
        }
        w.finish().ok_or_else(|| {
            local(
                ErrorKind::TooSmall,
                "tcp wire: buffer too small for the extended header",
            )
        })
    }

    /// Reads the extended header of `header` (exactly `header.ext_len`
    /// bytes) and checks it against the header and `limits`: range counts,
    /// atomic datatype and op, lengths against the payload length, reserved
    /// bytes. `header` must have passed [`super::decode_header`].
    pub fn decode(header: &Header, bytes: &[u8], limits: &Limits) -> Result<Ext> {
        let op = header.op;
        if bytes.len() != usize::from(header.ext_len) {
            return Err(proto(format!(
                "tcp wire: {op} extended header is {} bytes, header says {}",
                bytes.len(),
                header.ext_len
            )));
        }
        let ext = match op {
            Op::Msg | Op::Tagged | Op::Ack | Op::ReadRsp | Op::AtomicRsp => Ext::None,
            Op::MsgRts | Op::TaggedRts | Op::Cts | Op::RndvData => {
                let v = Reader::new(bytes)
                    .u64()
                    .ok_or_else(|| proto(format!("tcp wire: truncated {op} extended header")))?;
                match op {
                    Op::Cts => Ext::Cts { accept_len: v },
                    Op::RndvData => Ext::RndvData { offset: v },
                    _ => Ext::Rts { msg_len: v },
                }
            }
            Op::Write | Op::ReadReq => Ext::Rma(RmaHeader::decode(bytes, limits)?),
            Op::Atomic | Op::FetchAtomic | Op::CompareAtomic => {
                Ext::Atomic(AtomicHeader::decode(bytes, limits)?)
            }
            Op::ConnReq | Op::ConnAccept | Op::ConnReject | Op::Hello | Op::HelloAck => {
                Ext::Cm(CmHeader::decode(bytes)?)
            }
        };
        check_ext(header, &ext, limits)?;
        Ok(ext)
    }

    /// Whether this is the variant `op` carries.
    pub fn fits(&self, op: Op) -> bool {
        match (op.ext_shape(), self) {
            (ExtShape::None, Ext::None) => true,
            (ExtShape::Fixed(_), Ext::Rts { .. }) => matches!(op, Op::MsgRts | Op::TaggedRts),
            (ExtShape::Fixed(_), Ext::Cts { .. }) => op == Op::Cts,
            (ExtShape::Fixed(_), Ext::RndvData { .. }) => op == Op::RndvData,
            (ExtShape::Iov, Ext::Rma(_)) => matches!(op, Op::Write | Op::ReadReq),
            (ExtShape::Iov, Ext::Atomic(_)) => {
                matches!(op, Op::Atomic | Op::FetchAtomic | Op::CompareAtomic)
            }
            (ExtShape::Fixed(_), Ext::Cm(_)) => matches!(
                op,
                Op::ConnReq | Op::ConnAccept | Op::ConnReject | Op::Hello | Op::HelloAck
            ),
            _ => false,
        }
    }
}

/// Checks an extended header against its base header and the limits.
pub(crate) fn check_ext(h: &Header, ext: &Ext, limits: &Limits) -> Result<()> {
    let op = h.op;
    let payload = h.payload_len;
    match ext {
        Ext::None => Ok(()),
        Ext::Rts { msg_len } => at_most(op, "message length", *msg_len, limits.max_msg_size),
        Ext::Cts { accept_len } => {
            if h.status.is_some() && *accept_len != 0 {
                return Err(proto(format!(
                    "tcp wire: failed Cts accepts length {accept_len}"
                )));
            }
            at_most(op, "accepted length", *accept_len, limits.max_msg_size)
        }
        Ext::RndvData { offset } => {
            let end = offset.checked_add(payload).ok_or_else(|| {
                proto(format!(
                    "tcp wire: RndvData offset {offset} + length {payload} overflows"
                ))
            })?;
            at_most(op, "end offset", end, limits.max_msg_size)
        }
        Ext::Rma(rma) => {
            let total = rma
                .total_len()
                .ok_or_else(|| proto(format!("tcp wire: rma iov lengths of {op} overflow")))?;
            if op == Op::Write && total != payload {
                return Err(proto(format!(
                    "tcp wire: Write payload length {payload} differs from its rma iov total {total}"
                )));
            }
            at_most(op, "rma iov total", total, limits.max_msg_size)
        }
        Ext::Atomic(a) => {
            let count = a
                .count()
                .ok_or_else(|| proto(format!("tcp wire: rma iov counts of {op} overflow")))?;
            at_most(op, "atomic count", count, limits.max_atomic_count)?;
            let kind = super::atomic_kind(op).unwrap_or(super::AtomicKind::Plain);
            if !kind.allows(a.op()) {
                return Err(proto(format!(
                    "tcp wire: atomic op {} not allowed on {op}",
                    a.op().fi_name()
                )));
            }
            let want = kind
                .payload_len(a.datatype(), a.op(), count)
                .ok_or_else(|| proto(format!("tcp wire: atomic payload of {op} overflows")))?;
            if want != payload {
                return Err(proto(format!(
                    "tcp wire: {op} payload length {payload} differs from {count} x {} operands ({want} bytes)",
                    a.datatype().fi_name()
                )));
            }
            Ok(())
        }
        Ext::Cm(cm) => {
            if cm.min_version == 0 || cm.min_version > cm.max_version {
                return Err(proto(format!(
                    "tcp wire: bad version range {}..={} in {op}",
                    cm.min_version, cm.max_version
                )));
            }
            if matches!(op, Op::Hello | Op::HelloAck) && cm.addr.is_none() {
                return Err(proto(format!("tcp wire: {op} without an address")));
            }
            Ok(())
        }
    }
}

fn at_most(op: Op, what: &str, value: u64, limit: u64) -> Result<()> {
    if value > limit {
        Err(proto(format!(
            "tcp wire: {what} {value} of {op} exceeds the limit {limit}"
        )))
    } else {
        Ok(())
    }
}

/// Reads `n` ranges after the 8-byte fixed part.
fn read_iovs(r: &mut Reader<'_>, n: usize, what: &str) -> Result<([RmaIov; MAX_RMA_IOV], u8)> {
    let mut iov = [NO_IOV; MAX_RMA_IOV];
    for slot in iov.iter_mut().take(n) {
        let (Some(addr), Some(len), Some(key)) = (r.u64(), r.u64(), r.u64()) else {
            return Err(proto(format!("tcp wire: truncated {what} extended header")));
        };
        let len = usize::try_from(len).map_err(|_| {
            proto(format!(
                "tcp wire: rma iov length {len} in {what} extended header does not fit in memory"
            ))
        })?;
        *slot = RmaIov { addr, len, key };
    }
    let count = u8::try_from(n).map_err(|_| proto("tcp wire: rma iov count out of range"))?;
    Ok((iov, count))
}

/// Checks the range count byte of an RMA or atomic extended header against
/// the limits and the extended header's length.
fn check_count(count: u8, len: usize, limits: &Limits, what: &str) -> Result<usize> {
    let n = usize::from(count);
    if n == 0 {
        return Err(proto(format!(
            "tcp wire: {what} extended header with no rma iov entries"
        )));
    }
    if n > limits.rma_iov() {
        return Err(proto(format!(
            "tcp wire: too many rma iov entries in {what} extended header: {n} (limit {})",
            limits.rma_iov()
        )));
    }
    let need = 8 + n * RMA_IOV_LEN;
    if len < need {
        return Err(proto(format!(
            "tcp wire: truncated {what} extended header: {n} rma iov entries need {need} bytes, got {len}"
        )));
    }
    if len > need {
        return Err(proto(format!(
            "tcp wire: {what} extended header has {} bytes after its {n} rma iov entries",
            len - need
        )));
    }
    Ok(n)
}

fn write_iovs(w: &mut Writer<'_>, iov: &[RmaIov]) {
    for i in iov {
        w.u64(i.addr);
        w.u64(u64_of(i.len));
        w.u64(i.key);
    }
}

fn check_local_iov(iov: &[RmaIov]) -> Result<u8> {
    if iov.is_empty() || iov.len() > MAX_RMA_IOV {
        return Err(local(
            ErrorKind::Inval,
            format!(
                "tcp wire: {} rma iov entries (1 to {MAX_RMA_IOV} allowed)",
                iov.len()
            ),
        ));
    }
    u8::try_from(iov.len()).map_err(|_| local(ErrorKind::Inval, "tcp wire: rma iov count"))
}

fn sum_lens(iov: &[RmaIov]) -> Option<u64> {
    iov.iter()
        .try_fold(0u64, |acc, i| acc.checked_add(u64::try_from(i.len).ok()?))
}

/// The ranges of an RMA write or read request: 1 to [`MAX_RMA_IOV`]
/// entries.
///
/// Wire layout (8 + 24 × n bytes): count (u8), 7 reserved zero bytes, then
/// per range address, length and key (u64 each).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmaHeader {
    iov: [RmaIov; MAX_RMA_IOV],
    count: u8,
}

impl RmaHeader {
    /// The header for `iov`; `Inval` unless 1 to [`MAX_RMA_IOV`] ranges.
    pub fn new(iov: &[RmaIov]) -> Result<RmaHeader> {
        let count = check_local_iov(iov)?;
        let mut all = [NO_IOV; MAX_RMA_IOV];
        for (dst, src) in all.iter_mut().zip(iov) {
            *dst = *src;
        }
        Ok(RmaHeader { iov: all, count })
    }

    /// The ranges.
    pub fn iov(&self) -> &[RmaIov] {
        self.iov.get(..usize::from(self.count)).unwrap_or(&[])
    }

    /// Sum of the range lengths, `None` on overflow.
    pub fn total_len(&self) -> Option<u64> {
        sum_lens(self.iov())
    }

    /// Bytes on the wire.
    pub fn encoded_len(&self) -> usize {
        8 + self.iov().len() * RMA_IOV_LEN
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(self.count);
        w.zeros(7);
        write_iovs(w, self.iov());
    }

    /// Reads an RMA extended header (exactly its bytes).
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<RmaHeader> {
        let mut r = Reader::new(bytes);
        let fixed = r
            .array::<8>()
            .ok_or_else(|| proto("tcp wire: truncated rma extended header"))?;
        let [count, reserved @ ..] = *fixed;
        let n = check_count(count, bytes.len(), limits, "rma")?;
        if reserved != [0; 7] {
            return Err(proto(format!(
                "tcp wire: reserved bytes {reserved:02x?} set in rma extended header"
            )));
        }
        let (iov, count) = read_iovs(&mut r, n, "rma")?;
        Ok(RmaHeader { iov, count })
    }
}

impl fmt::Debug for RmaHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RmaHeader")
            .field("iov", &self.iov())
            .finish()
    }
}

/// An atomic request: datatype, operation and the target ranges, whose
/// lengths count elements (as in `fi_rma_ioc`).
///
/// Wire layout (8 + 24 × n bytes): count (u8), datatype (u8, `fi_datatype`),
/// op (u8, `fi_op`), 5 reserved zero bytes, then per range address, element
/// count and key (u64 each).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicHeader {
    datatype: Datatype,
    op: AtomicOp,
    iov: [RmaIov; MAX_RMA_IOV],
    count: u8,
}

impl AtomicHeader {
    /// The header for `op` on `datatype` over `iov` (lengths in elements);
    /// `Inval` unless 1 to [`MAX_RMA_IOV`] ranges.
    pub fn new(datatype: Datatype, op: AtomicOp, iov: &[RmaIov]) -> Result<AtomicHeader> {
        let count = check_local_iov(iov)?;
        let mut all = [NO_IOV; MAX_RMA_IOV];
        for (dst, src) in all.iter_mut().zip(iov) {
            *dst = *src;
        }
        Ok(AtomicHeader {
            datatype,
            op,
            iov: all,
            count,
        })
    }

    /// The element type.
    pub fn datatype(&self) -> Datatype {
        self.datatype
    }

    /// The operation.
    pub fn op(&self) -> AtomicOp {
        self.op
    }

    /// The ranges (lengths in elements).
    pub fn iov(&self) -> &[RmaIov] {
        self.iov.get(..usize::from(self.count)).unwrap_or(&[])
    }

    /// Elements over all ranges, `None` on overflow.
    pub fn count(&self) -> Option<u64> {
        sum_lens(self.iov())
    }

    /// Bytes on the wire.
    pub fn encoded_len(&self) -> usize {
        8 + self.iov().len() * RMA_IOV_LEN
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(self.count);
        w.u8(u8::try_from(self.datatype.as_u32()).unwrap_or(u8::MAX));
        w.u8(u8::try_from(self.op.as_u32()).unwrap_or(u8::MAX));
        w.zeros(5);
        write_iovs(w, self.iov());
    }

    /// Reads an atomic extended header (exactly its bytes).
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<AtomicHeader> {
        let mut r = Reader::new(bytes);
        let fixed = r
            .array::<8>()
            .ok_or_else(|| proto("tcp wire: truncated atomic extended header"))?;
        let [count, datatype, op, reserved @ ..] = *fixed;
        let n = check_count(count, bytes.len(), limits, "atomic")?;
        let datatype = Datatype::try_from(u32::from(datatype)).map_err(|_| {
            proto(format!(
                "tcp wire: unknown atomic datatype {datatype} in atomic extended header"
            ))
        })?;
        let op = AtomicOp::try_from(u32::from(op)).map_err(|_| {
            proto(format!(
                "tcp wire: unknown atomic op {op} in atomic extended header"
            ))
        })?;
        if reserved != [0; 5] {
            return Err(proto(format!(
                "tcp wire: reserved bytes {reserved:02x?} set in atomic extended header"
            )));
        }
        let (iov, count) = read_iovs(&mut r, n, "atomic")?;
        Ok(AtomicHeader {
            datatype,
            op,
            iov,
            count,
        })
    }
}

impl fmt::Debug for AtomicHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicHeader")
            .field("datatype", &self.datatype)
            .field("op", &self.op)
            .field("iov", &self.iov())
            .finish()
    }
}

/// The extended header of connection management ops.
///
/// Wire layout (32 bytes): min version (u8), max version (u8), address
/// family (u8: 0 none, 4 IPv4, 6 IPv6), reserved zero (u8), port (u16),
/// reserved zero (u16), nonce (u64), IP address (16 bytes; IPv4 in the
/// first 4, the rest zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmHeader {
    /// Oldest protocol version the sender speaks (at least 1).
    pub min_version: u8,
    /// Newest protocol version the sender speaks; an accept or hello answer
    /// names the chosen version in both fields.
    pub max_version: u8,
    /// The sender's listening address (RDM hello: how the peer finds the
    /// sender in its address vector); required on `Hello` and `HelloAck`.
    /// IPv6 flow info and scope id are not sent.
    pub addr: Option<SocketAddr>,
    /// A random number the endpoint chose when it was opened; orders
    /// simultaneous connects and tells a restarted peer apart.
    pub nonce: u64,
}

impl CmHeader {
    /// A header speaking every version this side knows ([`MIN_VERSION`]
    /// to [`VERSION`]), with `addr` (flow info and scope id cleared) and
    /// `nonce`.
    pub fn new(addr: Option<SocketAddr>, nonce: u64) -> CmHeader {
        CmHeader {
            min_version: MIN_VERSION,
            max_version: VERSION,
            addr: addr.map(strip_v6_extras),
            nonce,
        }
    }

    /// The key that orders this sender in a simultaneous connect, when the
    /// header has an address.
    pub fn conn_key(&self) -> Option<ConnKey> {
        self.addr.map(|a| ConnKey::new(self.nonce, a))
    }

    /// The highest version both this side ([`MIN_VERSION`] to
    /// [`VERSION`]) and the header's range speak, if any.
    pub fn negotiate(&self) -> Option<u8> {
        self.negotiate_up_to(VERSION)
    }

    /// The highest version both the header's range and this side speak,
    /// when this side speaks [`MIN_VERSION`] to `max` (an endpoint held to
    /// an older version by its `ep_attr.protocol_version`).
    pub fn negotiate_up_to(&self, max: u8) -> Option<u8> {
        let hi = self.max_version.min(max).min(VERSION);
        let lo = self.min_version.max(MIN_VERSION);
        (lo <= hi).then_some(hi)
    }

    /// The version an answer (`ConnAccept`, `HelloAck`) names, when it is
    /// well formed for a side speaking [`MIN_VERSION`] to `max`: one
    /// version, in that range.
    pub fn chosen(&self, max: u8) -> Option<u8> {
        let v = self.min_version;
        (v == self.max_version && (MIN_VERSION..=max.min(VERSION)).contains(&v)).then_some(v)
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(self.min_version);
        w.u8(self.max_version);
        let (family, ip, port) = addr_parts(self.addr);
        w.u8(family);
        w.u8(0);
        w.u16(port);
        w.u16(0);
        w.u64(self.nonce);
        w.bytes(&ip);
    }

    /// Reads a connection management extended header (exactly its bytes).
    pub fn decode(bytes: &[u8]) -> Result<CmHeader> {
        if bytes.len() != CM_LEN {
            return Err(proto(format!(
                "tcp wire: cm extended header is {} bytes (expected {CM_LEN})",
                bytes.len()
            )));
        }
        let mut r = Reader::new(bytes);
        let truncated = || proto("tcp wire: truncated cm extended header");
        let fixed = r.array::<4>().ok_or_else(truncated)?;
        let [min_version, max_version, family, reserved0] = *fixed;
        let port = r.u16().ok_or_else(truncated)?;
        let reserved1 = r.u16().ok_or_else(truncated)?;
        let nonce = r.u64().ok_or_else(truncated)?;
        let ip = *r.array::<16>().ok_or_else(truncated)?;
        if reserved0 != 0 || reserved1 != 0 {
            return Err(proto("tcp wire: reserved bytes set in cm extended header"));
        }
        let addr = match family {
            0 => {
                if port != 0 || ip != [0; 16] {
                    return Err(proto(
                        "tcp wire: address bytes set with address family 0 in cm extended header",
                    ));
                }
                None
            }
            4 => {
                let [a, b, c, d, rest @ ..] = ip;
                if rest != [0; 12] {
                    return Err(proto(
                        "tcp wire: bytes after the IPv4 address set in cm extended header",
                    ));
                }
                Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), port))
            }
            6 => Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)),
            other => {
                return Err(proto(format!(
                    "tcp wire: unknown address family {other} in cm extended header"
                )));
            }
        };
        Ok(CmHeader {
            min_version,
            max_version,
            addr,
            nonce,
        })
    }
}

fn strip_v6_extras(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(*v6.ip(), v6.port(), 0, 0)),
        v4 => v4,
    }
}

fn addr_parts(addr: Option<SocketAddr>) -> (u8, [u8; 16], u16) {
    match addr {
        None => (0, [0; 16], 0),
        Some(SocketAddr::V4(a)) => {
            let mut ip = [0; 16];
            for (dst, src) in ip.iter_mut().zip(a.ip().octets()) {
                *dst = src;
            }
            (4, ip, a.port())
        }
        Some(SocketAddr::V6(a)) => (6, a.ip().octets(), a.port()),
    }
}

/// Orders the two ends of an RDM connection: (nonce, address family, IP
/// bytes, port), compared in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnKey {
    nonce: u64,
    family: u8,
    ip: [u8; 16],
    port: u16,
}

impl ConnKey {
    /// The key of an endpoint listening at `addr` with `nonce`.
    pub fn new(nonce: u64, addr: SocketAddr) -> ConnKey {
        let (family, ip, port) = addr_parts(Some(addr));
        ConnKey {
            nonce,
            family,
            ip,
            port,
        }
    }
}

/// What to do when a `Hello` arrives from a peer this endpoint is itself
/// connecting to (both sides connected at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Simultaneous {
    /// Keep the connection this endpoint initiated: answer the incoming
    /// hello with `HelloAck` status `FI_EALREADY` and close that socket once
    /// the answer is sent.
    KeepOutgoing,
    /// Keep the incoming connection: answer `HelloAck` without status; the
    /// peer refuses this endpoint's own hello with `FI_EALREADY`, and the
    /// frames queued for the peer go out on the incoming connection.
    KeepIncoming,
    /// Both keys are equal: the endpoint connected to itself; keep both
    /// ends.
    SelfConnect,
}

/// The simultaneous connect rule: the connection initiated by the endpoint
/// with the smaller [`ConnKey`] survives. Both ends compute the same answer
/// from the same two keys, so exactly one connection is left per pair.
pub fn resolve_simultaneous(local: ConnKey, remote: ConnKey) -> Simultaneous {
    match local.cmp(&remote) {
        std::cmp::Ordering::Less => Simultaneous::KeepOutgoing,
        std::cmp::Ordering::Greater => Simultaneous::KeepIncoming,
        std::cmp::Ordering::Equal => Simultaneous::SelfConnect,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(n: usize) -> Vec<RmaIov> {
        (0..n)
            .map(|i| RmaIov {
                addr: 0x1000 * i as u64,
                len: 8 + i,
                key: 42,
            })
            .collect()
    }

    #[test]
    fn rma_round_trip() {
        for n in 1..=MAX_RMA_IOV {
            let h = RmaHeader::new(&iov(n)).unwrap();
            let mut buf = [0u8; super::super::MAX_EXT_LEN];
            let len = Ext::Rma(h).encode(&mut buf).unwrap();
            assert_eq!(len, 8 + 24 * n);
            assert_eq!(buf[0] as usize, n);
            assert_eq!(RmaHeader::decode(&buf[..len], &Limits::default()), Ok(h));
        }
        assert!(RmaHeader::new(&[]).is_err());
        assert_eq!(
            RmaHeader::new(&iov(5)).unwrap_err().kind(),
            ErrorKind::Inval
        );
    }

    #[test]
    fn rma_count_checked_against_length() {
        let h = RmaHeader::new(&iov(2)).unwrap();
        let mut buf = [0u8; 64];
        let len = Ext::Rma(h).encode(&mut buf).unwrap();
        let e = RmaHeader::decode(&buf[..len - 1], &Limits::default()).unwrap_err();
        assert!(
            e.detail().contains("truncated rma extended header"),
            "{e:?}"
        );
        buf[0] = 1;
        let e = RmaHeader::decode(&buf[..len], &Limits::default()).unwrap_err();
        assert!(e.detail().contains("24 bytes after"), "{e:?}");
        buf[0] = 2;
        buf[3] = 1;
        let e = RmaHeader::decode(&buf[..len], &Limits::default()).unwrap_err();
        assert!(e.detail().contains("reserved bytes"), "{e:?}");
    }

    #[test]
    fn cm_round_trip() {
        let addrs = [
            None,
            Some("10.1.2.3:7471".parse().unwrap()),
            Some("[fe80::1]:1".parse().unwrap()),
        ];
        for addr in addrs {
            let h = CmHeader::new(addr, 0xdead_beef);
            let mut buf = [0u8; CM_LEN];
            assert_eq!(Ext::Cm(h).encode(&mut buf), Ok(CM_LEN));
            assert_eq!(CmHeader::decode(&buf), Ok(h));
        }
    }

    #[test]
    fn cm_scope_id_is_not_sent() {
        let a = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 9, 3, 7));
        let h = CmHeader::new(Some(a), 1);
        assert_eq!(h.addr, Some("[::1]:9".parse().unwrap()));
    }

    #[test]
    fn negotiation_picks_ours_when_in_range() {
        let mut h = CmHeader::new(None, 0);
        assert_eq!(h.negotiate(), Some(VERSION));
        assert_eq!(h.negotiate_up_to(1), Some(1));
        h.max_version = 1;
        assert_eq!(h.negotiate(), Some(1));
        h.min_version = 2;
        h.max_version = 5;
        assert_eq!(h.negotiate(), Some(2));
        assert_eq!(h.negotiate_up_to(1), None);
        h.min_version = 3;
        assert_eq!(h.negotiate(), None);
        h.min_version = 2;
        h.max_version = 2;
        assert_eq!(h.chosen(2), Some(2));
        assert_eq!(h.chosen(1), None);
        h.max_version = 3;
        assert_eq!(h.chosen(3), None);
    }

    #[test]
    fn simultaneous_connect_is_symmetric() {
        let a = ConnKey::new(5, "10.0.0.1:10".parse().unwrap());
        let b = ConnKey::new(5, "10.0.0.2:10".parse().unwrap());
        let c = ConnKey::new(4, "10.0.0.9:10".parse().unwrap());
        assert_eq!(resolve_simultaneous(a, b), Simultaneous::KeepOutgoing);
        assert_eq!(resolve_simultaneous(b, a), Simultaneous::KeepIncoming);
        assert_eq!(resolve_simultaneous(c, a), Simultaneous::KeepOutgoing);
        assert_eq!(resolve_simultaneous(a, a), Simultaneous::SelfConnect);
    }
}
