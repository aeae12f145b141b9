//! The 40-byte base header, the op codes and flags, and the checks that
//! need only the base header.

use std::fmt;

use fabric_core::{ErrorKind, Result};

use super::bytes::Reader;
use super::{Limits, MAX_EXT_LEN, RMA_IOV_LEN, proto, u64_of};

/// First byte of every frame.
pub const MAGIC: u8 = 0xFA;

/// The newest protocol version this code speaks.
///
/// Version 2 adds one thing to version 1: a failed `Cts`, `Ack`, `ReadRsp`
/// or `AtomicRsp` may carry the target's reason for the refusal as its
/// payload (1 to [`MAX_REASON_LEN`] bytes of text). The two sides agree on
/// a version in the connection handshake ([`super::CmHeader`]); a side
/// sends version 2 frames only on connections that agreed on 2.
pub const VERSION: u8 = 2;

/// The oldest protocol version this code speaks; every frame of the
/// handshake is written in it, so that any peer can read it.
pub const MIN_VERSION: u8 = 1;

/// Longest refusal reason a failed answer carries (version 2), in bytes.
pub const MAX_REASON_LEN: usize = 256;

/// Length of the base header in bytes.
pub const HEADER_LEN: usize = 40;

macro_rules! ops {
    ($( $(#[$m:meta])* $name:ident = $value:literal, )*) => {
        /// What a frame asks for; the third byte of the header.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Op {
            $( $(#[$m])* $name = $value, )*
        }

        impl Op {
            /// Every op, in wire value order.
            pub const ALL: &'static [Op] = &[$(Op::$name),*];

            /// The op with wire value `v`.
            pub const fn from_u8(v: u8) -> Option<Op> {
                match v {
                    $($value => Some(Op::$name),)*
                    _ => None,
                }
            }

            /// The name used in error messages (`"Msg"`).
            pub const fn name(self) -> &'static str {
                match self { $(Op::$name => stringify!($name),)* }
            }
        }
    };
}

ops! {
    /// A message (`fi_send` and friends). Payload: the message.
    Msg = 0x01,
    /// A tagged message; `tag` set. Payload: the message.
    Tagged = 0x02,
    /// Rendezvous request of a message too large to be sent eagerly;
    /// extended header: its length. No payload.
    MsgRts = 0x03,
    /// Rendezvous request of a tagged message; `tag` set.
    TaggedRts = 0x04,
    /// Clear to send: the receiver matched rendezvous request `id` and takes
    /// the length in the extended header. Status: why it takes nothing.
    Cts = 0x05,
    /// Data of rendezvous `id` at the offset in the extended header.
    RndvData = 0x06,
    /// Completion acknowledgement of request `id` (FI_TRANSMIT_COMPLETE,
    /// FI_DELIVERY_COMPLETE), with its status.
    Ack = 0x07,
    /// RMA write into the ranges of the extended header. Payload: the data.
    Write = 0x10,
    /// RMA read request of the ranges of the extended header.
    ReadReq = 0x11,
    /// Response to read `id`: status, and the data when it succeeded.
    ReadRsp = 0x12,
    /// Atomic operation without result. Payload: the operands.
    Atomic = 0x20,
    /// Fetching atomic operation. Payload: the operands (none for
    /// FI_ATOMIC_READ).
    FetchAtomic = 0x21,
    /// Compare atomic operation. Payload: the operands, then the compare
    /// values.
    CompareAtomic = 0x22,
    /// Response to a fetching or compare atomic `id`: status, and the old
    /// values when it succeeded.
    AtomicRsp = 0x23,
    /// MSG connection request (`fi_connect`). Payload: private data.
    ConnReq = 0x30,
    /// Accepts a connection request (`fi_accept`). Payload: private data.
    ConnAccept = 0x31,
    /// Rejects a connection request (`fi_reject`). Payload: private data.
    ConnReject = 0x32,
    /// First frame of an RDM connection: who the initiator is.
    Hello = 0x33,
    /// Answer to a hello: accepted (no status) or not (status).
    HelloAck = 0x34,
}

impl TryFrom<u8> for Op {
    type Error = u8;

    fn try_from(v: u8) -> Result<Op, u8> {
        Op::from_u8(v).ok_or(v)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the payload of a frame goes; tells the receive path where to put
/// the bytes that follow a frame's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadKind {
    /// The op carries no payload (the frame's payload length is 0).
    None,
    /// A (tagged) message: into the matching posted receive buffer.
    Message,
    /// Rendezvous data: into the receive buffer that accepted rendezvous
    /// `id`, at the extended header's offset.
    RndvData,
    /// RMA write data: into local registered memory named by the ranges,
    /// once key, bounds and access rights are checked.
    RmaWrite,
    /// Read response data: into the local buffer of read request `id`.
    ReadResponse,
    /// Atomic operands: into a bounded scratch buffer
    /// ([`Limits::max_atomic_payload`]), applied when complete.
    AtomicOperands,
    /// Old values of atomic request `id`: into its result buffer.
    AtomicResult,
    /// Connection private data (at most [`Limits::max_private_data`]).
    PrivateData,
    /// The target's reason for refusing a request (version 2: the payload
    /// of a failed `Cts`, `Ack`, `ReadRsp` or `AtomicRsp`, at most
    /// [`MAX_REASON_LEN`] bytes of text, to be read as untrusted UTF-8).
    Reason,
}

/// The shape of an op's extended header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtShape {
    /// None: `ext_len` is 0.
    None,
    /// Exactly this many bytes.
    Fixed(usize),
    /// 8 bytes plus 1 to `max_rma_iov` ranges of 24 bytes.
    Iov,
}

/// What bounds an op's payload length, given the base header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PayloadBound {
    Zero,
    MsgSize,
    AtomicPayload,
    AtomicResult,
    PrivateData,
    Reason,
}

impl Op {
    /// Flags a frame of this op may carry.
    pub const fn allowed_flags(self) -> Flags {
        match self {
            Op::Msg | Op::Tagged | Op::MsgRts | Op::TaggedRts | Op::Write | Op::Atomic => {
                Flags(Flags::REMOTE_CQ_DATA.0 | Flags::ACK_TRANSMIT.0 | Flags::ACK_DELIVERY.0)
            }
            Op::FetchAtomic | Op::CompareAtomic => Flags::REMOTE_CQ_DATA,
            _ => Flags::NONE,
        }
    }

    /// Whether the op carries a tag.
    pub const fn is_tagged(self) -> bool {
        matches!(self, Op::Tagged | Op::TaggedRts)
    }

    /// Whether a failed frame of this op may carry a refusal reason
    /// (protocol version 2).
    pub const fn takes_reason(self) -> bool {
        matches!(self, Op::Cts | Op::Ack | Op::ReadRsp | Op::AtomicRsp)
    }

    /// Whether the op may carry a status (responses and refusals).
    pub const fn has_status(self) -> bool {
        matches!(
            self,
            Op::Cts | Op::Ack | Op::ReadRsp | Op::AtomicRsp | Op::ConnReject | Op::HelloAck
        )
    }

    /// Where this op's payload goes.
    pub const fn payload_kind(self) -> PayloadKind {
        match self {
            Op::Msg | Op::Tagged => PayloadKind::Message,
            Op::RndvData => PayloadKind::RndvData,
            Op::Write => PayloadKind::RmaWrite,
            Op::ReadRsp => PayloadKind::ReadResponse,
            Op::Atomic | Op::FetchAtomic | Op::CompareAtomic => PayloadKind::AtomicOperands,
            Op::AtomicRsp => PayloadKind::AtomicResult,
            Op::ConnReq | Op::ConnAccept | Op::ConnReject => PayloadKind::PrivateData,
            Op::MsgRts | Op::TaggedRts | Op::Cts | Op::Ack | Op::ReadReq | Op::Hello => {
                PayloadKind::None
            }
            Op::HelloAck => PayloadKind::None,
        }
    }

    pub(crate) const fn ext_shape(self) -> ExtShape {
        match self {
            Op::Msg | Op::Tagged | Op::Ack | Op::ReadRsp | Op::AtomicRsp => ExtShape::None,
            Op::MsgRts | Op::TaggedRts | Op::Cts | Op::RndvData => ExtShape::Fixed(8),
            Op::Write | Op::ReadReq | Op::Atomic | Op::FetchAtomic | Op::CompareAtomic => {
                ExtShape::Iov
            }
            Op::ConnReq | Op::ConnAccept | Op::ConnReject | Op::Hello | Op::HelloAck => {
                ExtShape::Fixed(super::CM_LEN)
            }
        }
    }

    const fn payload_bound(self) -> PayloadBound {
        match self.payload_kind() {
            PayloadKind::None => PayloadBound::Zero,
            PayloadKind::Message
            | PayloadKind::RndvData
            | PayloadKind::RmaWrite
            | PayloadKind::ReadResponse => PayloadBound::MsgSize,
            PayloadKind::AtomicOperands => PayloadBound::AtomicPayload,
            PayloadKind::AtomicResult => PayloadBound::AtomicResult,
            PayloadKind::PrivateData => PayloadBound::PrivateData,
            PayloadKind::Reason => PayloadBound::Reason,
        }
    }
}

/// Header flags (bytes 4-5). Bits without a name are reserved: a frame
/// with one set is refused.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u16);

impl Flags {
    /// No flag.
    pub const NONE: Flags = Flags(0);
    /// `data` holds remote CQ data (FI_REMOTE_CQ_DATA) for the target's
    /// completion.
    pub const REMOTE_CQ_DATA: Flags = Flags(1 << 0);
    /// The sender wants an [`Op::Ack`] once the target has received the
    /// request (FI_TRANSMIT_COMPLETE).
    pub const ACK_TRANSMIT: Flags = Flags(1 << 1);
    /// The sender wants an [`Op::Ack`] once the data is placed in the
    /// target buffer (FI_DELIVERY_COMPLETE).
    pub const ACK_DELIVERY: Flags = Flags(1 << 2);
    /// Every defined flag.
    pub const ALL: Flags = Flags(0b111);

    const NAMES: [(Flags, &'static str); 3] = [
        (Flags::REMOTE_CQ_DATA, "REMOTE_CQ_DATA"),
        (Flags::ACK_TRANSMIT, "ACK_TRANSMIT"),
        (Flags::ACK_DELIVERY, "ACK_DELIVERY"),
    ];

    /// The wire value.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// The flags of a wire value, or `None` if it has reserved bits set.
    pub const fn from_bits(bits: u16) -> Option<Flags> {
        if bits & !Flags::ALL.0 == 0 {
            Some(Flags(bits))
        } else {
            None
        }
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Both sets.
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// `self` without `other`.
    pub const fn difference(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;

    fn bitor(self, rhs: Flags) -> Flags {
        self.union(rhs)
    }
}

impl std::ops::BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        *self = self.union(rhs);
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("NONE");
        }
        let mut first = true;
        for (flag, name) in Flags::NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

/// The base header of a frame. [`Header::encode`] writes it in the layout
/// of the crate docs; [`decode_header`] reads and checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// The frame's format version (byte 1): the oldest protocol version
    /// that defines everything the frame uses, from [`MIN_VERSION`] to
    /// [`VERSION`]. [`Header::new`] gives [`MIN_VERSION`]; only a failed
    /// answer with a refusal reason needs 2.
    pub version: u8,
    /// The operation.
    pub op: Op,
    /// Flags; only [`Op::allowed_flags`].
    pub flags: Flags,
    /// Length of the extended header that follows, in bytes (0 to
    /// [`MAX_EXT_LEN`]; fixed per op, or 8 + 24 × ranges).
    pub ext_len: u8,
    /// Result of the request a response answers: `None` for success, else
    /// the error (sent as its positive `FI_E*` value). Only on ops with
    /// [`Op::has_status`].
    pub status: Option<ErrorKind>,
    /// Bytes of payload after the extended header.
    pub payload_len: u64,
    /// Operation id chosen by the requester; responses echo it.
    pub id: u64,
    /// Tag of tagged ops; 0 otherwise.
    pub tag: u64,
    /// Remote CQ data with [`Flags::REMOTE_CQ_DATA`]; 0 otherwise.
    pub data: u64,
}

impl Header {
    /// A header of `op` with every other field zero.
    pub const fn new(op: Op) -> Header {
        Header {
            version: MIN_VERSION,
            op,
            flags: Flags::NONE,
            ext_len: 0,
            status: None,
            payload_len: 0,
            id: 0,
            tag: 0,
            data: 0,
        }
    }

    /// Writes the header; infallible and allocation-free. It does not check
    /// the header: see [`super::Frame::validate`].
    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        // Constant offsets into a fixed-size array: checked at compile time.
        out[0] = MAGIC;
        out[1] = self.version;
        out[2] = self.op as u8;
        out[3] = self.ext_len;
        out[4..6].copy_from_slice(&self.flags.bits().to_le_bytes());
        out[6..8].copy_from_slice(&status_code(self.status).to_le_bytes());
        out[8..16].copy_from_slice(&self.payload_len.to_le_bytes());
        out[16..24].copy_from_slice(&self.id.to_le_bytes());
        out[24..32].copy_from_slice(&self.tag.to_le_bytes());
        out[32..40].copy_from_slice(&self.data.to_le_bytes());
    }

    /// Where this frame's payload goes: the op's
    /// [`payload_kind`](Op::payload_kind), except for a failed answer with a
    /// payload, which is its refusal reason ([`PayloadKind::Reason`]).
    pub const fn payload_kind(&self) -> PayloadKind {
        if self.status.is_some() && self.payload_len != 0 && self.op.takes_reason() {
            PayloadKind::Reason
        } else {
            self.op.payload_kind()
        }
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0; HEADER_LEN];
        self.encode(&mut out);
        out
    }

    /// The number of remote ranges an `Iov`-shaped extended header of
    /// `ext_len` bytes holds, if the length has that shape.
    pub(crate) fn iov_count(&self) -> Option<usize> {
        let body = usize::from(self.ext_len).checked_sub(8)?;
        (body % RMA_IOV_LEN == 0).then_some(body / RMA_IOV_LEN)
    }
}

/// The wire value of a status.
pub(crate) fn status_code(status: Option<ErrorKind>) -> u16 {
    match status {
        None => 0,
        Some(kind) => u16::try_from(kind.errno()).unwrap_or(u16::MAX),
    }
}

/// Reads a base header and checks everything that can be checked without
/// the extended header: magic, version, op, reserved flag bits, flags and
/// fields the op does not use, status, extended header length and payload
/// length against `limits`.
pub fn decode_header(bytes: &[u8; HEADER_LEN], limits: &Limits) -> Result<Header> {
    let header = parse(bytes)?;
    check_header(&header, limits)?;
    Ok(header)
}

/// The little-endian u64 at byte `at` of a base header (`at` + 8 within
/// it: a constant in every call, so no check remains).
#[inline(always)]
fn le64(bytes: &[u8; HEADER_LEN], at: usize) -> u64 {
    bytes
        .get(at..)
        .and_then(|s| s.first_chunk::<8>())
        .map_or(0, |a| u64::from_le_bytes(*a))
}

/// [`decode_header`] with a shortcut for the frame streams are made of: a
/// version 1 message or tagged message without extended header or status
/// is recognised and checked with a few comparisons (the same checks
/// `check_header` makes of it); every other header takes the full path.
/// It accepts and refuses exactly what [`decode_header`] does, with the
/// same errors (the tests and the fuzz targets compare the two).
#[inline]
pub fn decode_header_fast(bytes: &[u8; HEADER_LEN], limits: &Limits) -> Result<Header> {
    let [magic, version, op, ext_len, f0, f1, s0, s1, ..] = *bytes;
    let flags = u16::from_le_bytes([f0, f1]);
    let op = match op {
        0x01 => Op::Msg,
        0x02 => Op::Tagged,
        _ => return decode_header(bytes, limits),
    };
    let h = Header {
        version,
        op,
        flags: Flags(flags),
        ext_len,
        status: None,
        payload_len: le64(bytes, 8),
        id: le64(bytes, 16),
        tag: le64(bytes, 24),
        data: le64(bytes, 32),
    };
    let acks = Flags::ACK_TRANSMIT.0 | Flags::ACK_DELIVERY.0;
    let common = magic == MAGIC
        && version == MIN_VERSION
        && ext_len == 0
        && s0 == 0
        && s1 == 0
        // Msg and Tagged take every defined flag, at most one ack.
        && flags & !Flags::ALL.0 == 0
        && flags & acks != acks
        && (h.data == 0 || flags & Flags::REMOTE_CQ_DATA.0 != 0)
        && (h.tag == 0 || op == Op::Tagged)
        && h.payload_len <= limits.max_msg_size;
    if common {
        Ok(h)
    } else {
        decode_header(bytes, limits)
    }
}

fn parse(bytes: &[u8; HEADER_LEN]) -> Result<Header> {
    let mut r = Reader::new(bytes);
    let truncated = || proto("tcp wire: truncated header");
    let magic = r.u8().ok_or_else(truncated)?;
    if magic != MAGIC {
        return Err(proto(format!(
            "tcp wire: bad magic 0x{magic:02x} in header (expected 0x{MAGIC:02x})"
        )));
    }
    let version = r.u8().ok_or_else(truncated)?;
    if !(MIN_VERSION..=VERSION).contains(&version) {
        return Err(proto(format!(
            "tcp wire: unsupported version {version} in header (this side speaks {MIN_VERSION} to {VERSION})"
        )));
    }
    let op = r.u8().ok_or_else(truncated)?;
    let op = Op::from_u8(op)
        .ok_or_else(|| proto(format!("tcp wire: unknown op 0x{op:02x} in header")))?;
    let ext_len = r.u8().ok_or_else(truncated)?;
    let flags = r.u16().ok_or_else(truncated)?;
    let flags = Flags::from_bits(flags).ok_or_else(|| {
        proto(format!(
            "tcp wire: reserved flag bits 0x{:04x} set in {op} header",
            flags & !Flags::ALL.bits()
        ))
    })?;
    let status = r.u16().ok_or_else(truncated)?;
    let status = match status {
        0 => None,
        code => Some(ErrorKind::from_errno(i32::from(code)).ok_or_else(|| {
            proto(format!(
                "tcp wire: unknown status code {code} in {op} header"
            ))
        })?),
    };
    Ok(Header {
        version,
        op,
        flags,
        ext_len,
        status,
        payload_len: r.u64().ok_or_else(truncated)?,
        id: r.u64().ok_or_else(truncated)?,
        tag: r.u64().ok_or_else(truncated)?,
        data: r.u64().ok_or_else(truncated)?,
    })
}

/// The checks of [`decode_header`] after parsing.
pub(crate) fn check_header(h: &Header, limits: &Limits) -> Result<()> {
    let op = h.op;
    let extra = h.flags.difference(op.allowed_flags());
    if !extra.is_empty() {
        return Err(proto(format!(
            "tcp wire: flags {extra:?} (0x{:04x}) not allowed on {op}",
            extra.bits()
        )));
    }
    if h.flags
        .contains(Flags::ACK_TRANSMIT.union(Flags::ACK_DELIVERY))
    {
        return Err(proto(format!(
            "tcp wire: flags ACK_TRANSMIT and ACK_DELIVERY both set on {op}"
        )));
    }
    if h.data != 0 && !h.flags.contains(Flags::REMOTE_CQ_DATA) {
        return Err(proto(format!(
            "tcp wire: cq data 0x{:x} without REMOTE_CQ_DATA on {op}",
            h.data
        )));
    }
    if h.tag != 0 && !op.is_tagged() {
        return Err(proto(format!(
            "tcp wire: tag 0x{:x} on untagged {op}",
            h.tag
        )));
    }
    if let Some(status) = h.status {
        if !op.has_status() {
            return Err(proto(format!(
                "tcp wire: status {} on {op}, which carries none",
                status.c_name()
            )));
        }
    }
    check_ext_len(h, limits)?;
    check_payload_bound(h, limits)
}

fn check_ext_len(h: &Header, limits: &Limits) -> Result<()> {
    let op = h.op;
    let len = usize::from(h.ext_len);
    match op.ext_shape() {
        ExtShape::None if len != 0 => Err(proto(format!(
            "tcp wire: extended header length {len} on {op}, which has none"
        ))),
        ExtShape::Fixed(want) if len != want => Err(proto(format!(
            "tcp wire: extended header length {len} of {op} (expected {want})"
        ))),
        ExtShape::Iov => match h.iov_count() {
            None | Some(0) => Err(proto(format!(
                "tcp wire: extended header length {len} of {op} is not 8 + 24 x ranges"
            ))),
            Some(n) if n > limits.rma_iov() || len > MAX_EXT_LEN => Err(proto(format!(
                "tcp wire: extended header length {len} of {op} holds {n} rma iov entries (limit {})",
                limits.rma_iov()
            ))),
            Some(_) => Ok(()),
        },
        _ => Ok(()),
    }
}

fn check_payload_bound(h: &Header, limits: &Limits) -> Result<()> {
    let op = h.op;
    let len = h.payload_len;
    if len != 0 && h.status.is_some() && op.takes_reason() && h.version >= 2 {
        // A failed answer carries no data; from version 2 on it may carry
        // the target's reason.
        if len > u64_of(MAX_REASON_LEN) {
            return Err(proto(format!(
                "tcp wire: refusal reason of {len} bytes on a failed {op} (limit {MAX_REASON_LEN})"
            )));
        }
        return Ok(());
    }
    if h.version != MIN_VERSION {
        // One encoding per frame: a frame says the oldest version that
        // defines it, and version 2 defines only reasons.
        return Err(proto(format!(
            "tcp wire: version {} {op} frame without a refusal reason (it is a version {MIN_VERSION} frame)",
            h.version
        )));
    }
    let (limit, what) = match op.payload_bound() {
        PayloadBound::Zero => (0, "none"),
        PayloadBound::MsgSize => (limits.max_msg_size, "max_msg_size"),
        PayloadBound::AtomicPayload => (limits.max_atomic_payload(), "atomic operand limit"),
        PayloadBound::AtomicResult => (limits.max_atomic_result(), "atomic result limit"),
        PayloadBound::PrivateData => (limits.max_private_data, "max_private_data"),
        PayloadBound::Reason => (u64_of(MAX_REASON_LEN), "refusal reason limit"),
    };
    if len > limit {
        return Err(if limit == 0 {
            proto(format!(
                "tcp wire: payload length {len} on {op}, which carries none"
            ))
        } else {
            proto(format!(
                "tcp wire: payload length {len} of {op} exceeds the limit {limit} ({what})"
            ))
        });
    }
    let data_response = matches!(
        op.payload_kind(),
        PayloadKind::ReadResponse | PayloadKind::AtomicResult
    );
    if len != 0 && data_response && h.status.is_some() {
        return Err(proto(format!(
            "tcp wire: payload length {len} on a failed {op}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_values_are_unique_and_round_trip() {
        for &op in Op::ALL {
            assert_eq!(Op::from_u8(op as u8), Some(op));
            assert_eq!(Op::try_from(op as u8), Ok(op));
        }
        let known = (0..=u8::MAX).filter(|&v| Op::from_u8(v).is_some()).count();
        assert_eq!(known, Op::ALL.len());
        assert_eq!(Op::try_from(0x7f), Err(0x7f));
    }

    #[test]
    fn header_round_trip() {
        let mut h = Header::new(Op::Tagged);
        h.flags = Flags::REMOTE_CQ_DATA | Flags::ACK_DELIVERY;
        h.payload_len = 12;
        h.id = 0x0102_0304_0506_0708;
        h.tag = u64::MAX;
        h.data = 7;
        let b = h.to_bytes();
        assert_eq!(b[0], MAGIC);
        assert_eq!(b[1], MIN_VERSION);
        assert_eq!(b[2], 0x02);
        assert_eq!(&b[4..6], &[0b101, 0]);
        assert_eq!(&b[8..16], &12u64.to_le_bytes());
        assert_eq!(decode_header(&b, &Limits::default()), Ok(h));
    }

    #[test]
    fn status_travels_as_errno() {
        let mut h = Header::new(Op::Ack);
        h.status = Some(ErrorKind::KeyRejected);
        let b = h.to_bytes();
        assert_eq!(&b[6..8], &129u16.to_le_bytes());
        assert_eq!(decode_header(&b, &Limits::default()), Ok(h));
    }

    #[test]
    fn flags_debug() {
        assert_eq!(format!("{:?}", Flags::NONE), "NONE");
        assert_eq!(
            format!("{:?}", Flags::REMOTE_CQ_DATA | Flags::ACK_TRANSMIT),
            "REMOTE_CQ_DATA|ACK_TRANSMIT"
        );
        assert_eq!(Flags::from_bits(8), None);
    }

    #[test]
    fn every_op_has_a_consistent_shape() {
        for &op in Op::ALL {
            if op.payload_kind() == PayloadKind::None {
                assert_eq!(op.payload_bound(), PayloadBound::Zero, "{op}");
            }
            if op.has_status() {
                assert!(op.allowed_flags().is_empty(), "{op}");
            }
        }
    }
}
