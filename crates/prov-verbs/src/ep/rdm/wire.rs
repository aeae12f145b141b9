//! The RDM wire format: the protocol header, endpoint names in connection private data, and the address book of the AV.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The protocol header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hdr {
    pub op: u8,
    pub flags: u8,
    pub tag: u64,
    pub data: u64,
    pub len: u64,
    pub id: u64,
    pub addr: u64,
    pub rkey: u32,
}

impl Hdr {
    pub(crate) fn encode(&self) -> [u8; HDR] {
        let mut b = [0u8; HDR];
        b[0] = self.op;
        b[1] = self.flags;
        b[8..16].copy_from_slice(&self.tag.to_le_bytes());
        b[16..24].copy_from_slice(&self.data.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..40].copy_from_slice(&self.id.to_le_bytes());
        b[40..48].copy_from_slice(&self.addr.to_le_bytes());
        b[48..52].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Decodes and checks a received message of `total` bytes.
    pub(crate) fn decode(b: &[u8]) -> Option<Hdr> {
        let b: &[u8; HDR] = b.get(..HDR)?.try_into().ok()?;
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        if b[2..8] != [0; 6] || b[52..56] != [0; 4] || b[1] & !(F_DATA | F_ERROR) != 0 {
            return None;
        }
        let h = Hdr {
            op: b[0],
            flags: b[1],
            tag: u64_at(8),
            data: u64_at(16),
            len: u64_at(24),
            id: u64_at(32),
            addr: u64_at(40),
            rkey: u32::from_le_bytes([b[48], b[49], b[50], b[51]]),
        };
        let ok = match h.op {
            OP_MSG | OP_TAGGED => h.len <= EAGER_MAX as u64 && h.id == 0 && h.addr == 0,
            OP_MSG_RTS | OP_TAGGED_RTS => h.len > EAGER_MAX as u64 && h.len <= MAX_MSG_SIZE as u64,
            OP_FIN => true,
            _ => false,
        };
        ok.then_some(h)
    }
}

/// The private data of a connection request: the requester's name.
pub(super) fn encode_name(a: &SocketAddr) -> Vec<u8> {
    let mut v = Vec::with_capacity(19);
    match a.ip() {
        IpAddr::V4(ip) => {
            v.push(4);
            v.extend_from_slice(&a.port().to_le_bytes());
            v.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            v.push(6);
            v.extend_from_slice(&a.port().to_le_bytes());
            v.extend_from_slice(&ip.octets());
        }
    }
    v
}

pub(super) fn decode_name(b: &[u8]) -> Option<SocketAddr> {
    let port = u16::from_le_bytes([*b.get(1)?, *b.get(2)?]);
    match b.first()? {
        4 => {
            let o: [u8; 4] = b.get(3..7)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::from(o), port))
        }
        6 => {
            let o: [u8; 16] = b.get(3..19)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::from(o), port))
        }
        _ => None,
    }
}

/// An address vector of IP socket addresses (RDM) and UD names (DGRAM).
pub(crate) fn new_av() -> Av {
    let book = IpBook::new("verbs").or(
        |a| crate::ep::dgram::UdName::of(a).is_some(),
        "an FI_ADDR_IB_UD name",
    );
    Av::new(Arc::new(book))
}
