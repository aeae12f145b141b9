//! The frames the endpoints exchange, as the connection layer sees them:
//! a fixed header followed by `len` payload bytes.
//!
//! This adapter is the only place that knows the byte layout; the
//! connection layer deals in [`Frame`] values.

use fabric_core::{Error, ErrorKind, Result};

/// Bytes of a frame header.
pub(crate) const HEADER_LEN: usize = 32;
/// Protocol version carried in every header.
pub(crate) const VERSION: u8 = 1;
/// Largest address a hello may carry.
pub(crate) const MAX_HELLO: u64 = 512;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// First frame of an RDM connection: the sender's listening address
    /// as a string.
    Hello = 1,
    /// An untagged message.
    Msg = 2,
    /// A tagged message.
    Tagged = 3,
}

/// `flags` bit: `data` holds remote CQ data.
pub(crate) const F_CQ_DATA: u16 = 1;

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    pub kind: Kind,
    pub flags: u16,
    pub len: u64,
    pub tag: u64,
    pub data: u64,
}

impl Frame {
    /// The header bytes.
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = VERSION;
        b[1] = self.kind as u8;
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.tag.to_le_bytes());
        b[24..32].copy_from_slice(&self.data.to_le_bytes());
        b
    }

    /// Decodes a header from the peer, checking everything.
    pub(crate) fn decode(b: &[u8; HEADER_LEN], max_len: u64) -> Result<Frame> {
        let bad =
            |what: String| Error::new(ErrorKind::Io, format!("tcp: bad frame from peer: {what}"));
        if b[0] != VERSION {
            return Err(bad(format!(
                "protocol version {} (expected {VERSION})",
                b[0]
            )));
        }
        let kind = match b[1] {
            1 => Kind::Hello,
            2 => Kind::Msg,
            3 => Kind::Tagged,
            k => return Err(bad(format!("unknown frame kind {k}"))),
        };
        let flags = u16::from_le_bytes([b[2], b[3]]);
        if flags & !F_CQ_DATA != 0 || b[4..8] != [0; 4] {
            return Err(bad(format!("reserved bits set ({flags:#x})")));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let len = word(8);
        let limit = if kind == Kind::Hello {
            MAX_HELLO
        } else {
            max_len
        };
        if len > limit {
            return Err(bad(format!("length {len} over the limit {limit}")));
        }
        Ok(Frame {
            kind,
            flags,
            len,
            tag: word(16),
            data: word(24),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let f = Frame {
            kind: Kind::Tagged,
            flags: F_CQ_DATA,
            len: 10,
            tag: 7,
            data: 9,
        };
        assert_eq!(Frame::decode(&f.encode(), 100).unwrap(), f);
        let mut b = f.encode();
        b[0] = 9;
        assert!(Frame::decode(&b, 100).is_err());
        let mut b = f.encode();
        b[1] = 99;
        assert!(Frame::decode(&b, 100).is_err());
        assert!(Frame::decode(&f.encode(), 9).is_err());
        let mut b = f.encode();
        b[5] = 1;
        assert!(Frame::decode(&b, 100).is_err());
    }
}
