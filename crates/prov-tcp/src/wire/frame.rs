//! A frame's headers (base plus extended) as one value, with constructors
//! that produce valid frames and the encoder.

use fabric_core::kit::atomic::AtomicKind;
use fabric_core::objects::{AtomicOp, Datatype, RmaIov};
use fabric_core::{ErrorKind, Result};

use super::ext::check_ext;
use super::header::{Flags, HEADER_LEN, Header, Op, PayloadKind, check_header, decode_header};
use super::{AtomicHeader, CmHeader, Ext, Limits, MAX_FRAME_HEADER_LEN, RmaHeader, local, proto};

/// The op that carries an atomic request of `kind` (the codes on the
/// wire; the kinds are the kit's [`AtomicKind`]).
pub const fn atomic_op(kind: AtomicKind) -> Op {
    match kind {
        AtomicKind::Plain => Op::Atomic,
        AtomicKind::Fetch => Op::FetchAtomic,
        AtomicKind::Compare => Op::CompareAtomic,
    }
}

/// The kind of atomic request `op` carries; `None` for other ops.
pub const fn atomic_kind(op: Op) -> Option<AtomicKind> {
    match op {
        Op::Atomic => Some(AtomicKind::Plain),
        Op::FetchAtomic => Some(AtomicKind::Fetch),
        Op::CompareAtomic => Some(AtomicKind::Compare),
        _ => None,
    }
}

/// A frame's headers: the base header and the op's extended header. The
/// payload (`header.payload_len` bytes) is not part of it: it is sent from,
/// and received into, the user's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The base header.
    pub header: Header,
    /// The extended header.
    pub ext: Ext,
}

fn ext_len_of(ext: &Ext) -> u8 {
    // At most MAX_EXT_LEN (104): RmaHeader and AtomicHeader hold at most
    // MAX_RMA_IOV ranges by construction.
    u8::try_from(ext.encoded_len()).unwrap_or(u8::MAX)
}

impl Frame {
    /// A frame of `header` and `ext`, with `header.ext_len` set from `ext`.
    pub fn new(mut header: Header, ext: Ext) -> Frame {
        header.ext_len = ext_len_of(&ext);
        Frame { header, ext }
    }

    fn plain(op: Op, id: u64, payload_len: u64) -> Frame {
        let mut header = Header::new(op);
        header.id = id;
        header.payload_len = payload_len;
        Frame {
            header,
            ext: Ext::None,
        }
    }

    fn with_ext(op: Op, id: u64, payload_len: u64, ext: Ext) -> Frame {
        let mut f = Frame::plain(op, id, payload_len);
        f.header.ext_len = ext_len_of(&ext);
        f.ext = ext;
        f
    }

    /// A message of `len` bytes.
    pub fn msg(id: u64, len: u64) -> Frame {
        Frame::plain(Op::Msg, id, len)
    }

    /// A tagged message of `len` bytes.
    pub fn tagged(id: u64, tag: u64, len: u64) -> Frame {
        let mut f = Frame::plain(Op::Tagged, id, len);
        f.header.tag = tag;
        f
    }

    /// A rendezvous request for a message of `msg_len` bytes, tagged when
    /// `tag` is given.
    pub fn rts(id: u64, tag: Option<u64>, msg_len: u64) -> Frame {
        let op = if tag.is_some() {
            Op::TaggedRts
        } else {
            Op::MsgRts
        };
        let mut f = Frame::with_ext(op, id, 0, Ext::Rts { msg_len });
        f.header.tag = tag.unwrap_or(0);
        f
    }

    /// Clear to send `accept_len` bytes of rendezvous `id`; with a status,
    /// the receiver takes nothing (`accept_len` must then be 0).
    pub fn cts(id: u64, accept_len: u64, status: Option<ErrorKind>) -> Frame {
        let mut f = Frame::with_ext(Op::Cts, id, 0, Ext::Cts { accept_len });
        f.header.status = status;
        f
    }

    /// `len` bytes of rendezvous `id` at `offset`.
    pub fn rndv_data(id: u64, offset: u64, len: u64) -> Frame {
        Frame::with_ext(Op::RndvData, id, len, Ext::RndvData { offset })
    }

    /// Acknowledges request `id` with `status`.
    pub fn ack(id: u64, status: Option<ErrorKind>) -> Frame {
        let mut f = Frame::plain(Op::Ack, id, 0);
        f.header.status = status;
        f
    }

    /// An RMA write to `iov` (1 to [`super::MAX_RMA_IOV`] ranges); the
    /// payload is the sum of the range lengths. `Inval` for a bad range
    /// count, `Overflow` when the lengths overflow.
    pub fn write(id: u64, iov: &[RmaIov]) -> Result<Frame> {
        let rma = RmaHeader::new(iov)?;
        let total = rma
            .total_len()
            .ok_or_else(|| local(ErrorKind::Overflow, "tcp wire: rma iov lengths overflow"))?;
        Ok(Frame::with_ext(Op::Write, id, total, Ext::Rma(rma)))
    }

    /// An RMA read request of `iov`.
    pub fn read_req(id: u64, iov: &[RmaIov]) -> Result<Frame> {
        let rma = RmaHeader::new(iov)?;
        rma.total_len()
            .ok_or_else(|| local(ErrorKind::Overflow, "tcp wire: rma iov lengths overflow"))?;
        Ok(Frame::with_ext(Op::ReadReq, id, 0, Ext::Rma(rma)))
    }

    /// The response to read `id`: `len` bytes of data, or a status and no
    /// data.
    pub fn read_rsp(id: u64, status: Option<ErrorKind>, len: u64) -> Frame {
        let mut f = Frame::plain(Op::ReadRsp, id, len);
        f.header.status = status;
        f
    }

    /// An atomic request of `kind`: `op` on `datatype` over `iov` (lengths
    /// in elements); the payload length follows from them. `Inval` when the
    /// op does not belong to the kind or for a bad range count, `Overflow`
    /// when the sizes overflow.
    pub fn atomic(
        id: u64,
        kind: AtomicKind,
        datatype: Datatype,
        op: AtomicOp,
        iov: &[RmaIov],
    ) -> Result<Frame> {
        if !kind.allows(op) {
            return Err(local(
                ErrorKind::Inval,
                format!(
                    "tcp wire: atomic op {} is not a {kind:?} atomic",
                    op.fi_name()
                ),
            ));
        }
        let a = AtomicHeader::new(datatype, op, iov)?;
        let len = a
            .count()
            .and_then(|n| kind.payload_len(datatype, op, n))
            .ok_or_else(|| local(ErrorKind::Overflow, "tcp wire: atomic sizes overflow"))?;
        Ok(Frame::with_ext(atomic_op(kind), id, len, Ext::Atomic(a)))
    }

    /// The response to fetching or compare atomic `id`: `len` bytes of old
    /// values, or a status and none.
    pub fn atomic_rsp(id: u64, status: Option<ErrorKind>, len: u64) -> Frame {
        let mut f = Frame::plain(Op::AtomicRsp, id, len);
        f.header.status = status;
        f
    }

    /// A MSG connection request with `private_len` bytes of private data.
    pub fn conn_req(cm: CmHeader, private_len: u64) -> Frame {
        Frame::with_ext(Op::ConnReq, 0, private_len, Ext::Cm(cm))
    }

    /// Accepts a connection request; `cm` names the chosen version in both
    /// version fields.
    pub fn conn_accept(cm: CmHeader, private_len: u64) -> Frame {
        Frame::with_ext(Op::ConnAccept, 0, private_len, Ext::Cm(cm))
    }

    /// Rejects a connection request (`status` says why, if not the
    /// application's choice; a version mismatch is `FI_ENOPROTOOPT`, with
    /// this side's versions in `cm`).
    pub fn conn_reject(cm: CmHeader, status: Option<ErrorKind>, private_len: u64) -> Frame {
        let mut f = Frame::with_ext(Op::ConnReject, 0, private_len, Ext::Cm(cm));
        f.header.status = status;
        f
    }

    /// The first frame of an RDM connection; `cm.addr` is required.
    pub fn hello(cm: CmHeader) -> Frame {
        Frame::with_ext(Op::Hello, 0, 0, Ext::Cm(cm))
    }

    /// The answer to a hello: accepted without status, `FI_EALREADY` when a
    /// simultaneous connect kept the other connection.
    pub fn hello_ack(cm: CmHeader, status: Option<ErrorKind>) -> Frame {
        let mut f = Frame::with_ext(Op::HelloAck, 0, 0, Ext::Cm(cm));
        f.header.status = status;
        f
    }

    /// The same frame carrying remote CQ data (FI_REMOTE_CQ_DATA).
    pub fn with_cq_data(mut self, data: u64) -> Frame {
        self.header.flags |= Flags::REMOTE_CQ_DATA;
        self.header.data = data;
        self
    }

    /// The same failed answer carrying a refusal reason of `len` bytes as
    /// its payload (a version 2 frame: send it only on a connection that
    /// agreed on version 2). `len` must be 1 to
    /// [`MAX_REASON_LEN`](super::MAX_REASON_LEN) and the frame a failed
    /// `Cts`, `Ack`, `ReadRsp` or `AtomicRsp` without payload;
    /// [`Frame::validate`] says when it is not.
    pub fn with_reason(mut self, len: usize) -> Frame {
        self.header.version = 2;
        self.header.payload_len = super::u64_of(len);
        self
    }

    /// The same frame with `flags` added (`ACK_TRANSMIT`, `ACK_DELIVERY`).
    pub fn with_flags(mut self, flags: Flags) -> Frame {
        self.header.flags |= flags;
        self
    }

    /// Bytes of the headers on the wire (base plus extended).
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.ext.encoded_len()
    }

    /// Bytes of payload after the headers.
    pub fn payload_len(&self) -> u64 {
        self.header.payload_len
    }

    /// Where the payload goes.
    pub fn payload_kind(&self) -> PayloadKind {
        self.header.payload_kind()
    }

    /// Runs the receiver's checks on this frame: what a peer with `limits`
    /// would refuse. The constructors give valid frames for valid
    /// arguments; the limits are the peer's.
    pub fn validate(&self, limits: &Limits) -> Result<()> {
        let op = self.header.op;
        if !self.ext.fits(op) {
            return Err(proto(format!(
                "tcp wire: {op} frame with extended header {:?}",
                self.ext
            )));
        }
        let len = self.ext.encoded_len();
        if usize::from(self.header.ext_len) != len {
            return Err(proto(format!(
                "tcp wire: extended header length {} of {op}, its extended header has {len}",
                self.header.ext_len
            )));
        }
        check_header(&self.header, limits)?;
        check_ext(&self.header, &self.ext, limits)
    }

    /// Writes the headers (base with `ext_len` taken from the extended
    /// header, then extended) into `out`; returns their length, at most
    /// [`MAX_FRAME_HEADER_LEN`]. Send `out[..len]` and the payload in one
    /// `writev`.
    pub fn encode(&self, out: &mut [u8; MAX_FRAME_HEADER_LEN]) -> usize {
        if let (Ext::None, Some(base)) = (&self.ext, out.first_chunk_mut::<HEADER_LEN>()) {
            // The frames of a message stream: the base header alone, with
            // no extended header to measure or write.
            let mut header = self.header;
            header.ext_len = 0;
            header.encode(base);
            return HEADER_LEN;
        }
        let len = self.encode_into(out);
        debug_assert!(len.is_ok());
        len.unwrap_or(0)
    }

    /// [`Frame::encode`] into any slice (a send staging buffer, to coalesce
    /// small frames); `TooSmall` when `out` is shorter than
    /// [`Frame::header_len`], and then nothing is written.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize> {
        let total = self.header_len();
        if out.len() < total {
            return Err(local(
                ErrorKind::TooSmall,
                format!(
                    "tcp wire: {} bytes of buffer for {total} bytes of headers",
                    out.len()
                ),
            ));
        }
        let Some((base, rest)) = out.split_first_chunk_mut::<HEADER_LEN>() else {
            return Err(local(ErrorKind::TooSmall, "tcp wire: buffer too small"));
        };
        let mut header = self.header;
        header.ext_len = ext_len_of(&self.ext);
        header.encode(base);
        let n = self.ext.encode(rest)?;
        Ok(HEADER_LEN + n)
    }

    /// The headers as bytes.
    pub fn to_bytes(&self) -> ([u8; MAX_FRAME_HEADER_LEN], usize) {
        let mut out = [0; MAX_FRAME_HEADER_LEN];
        let len = self.encode(&mut out);
        (out, len)
    }

    /// Reads and checks the headers of a frame at the start of `bytes`,
    /// which must hold them whole (the payload may follow; it is not
    /// looked at). [`Frame::header_len`] of the result is the bytes used.
    /// For bytes arriving in pieces use [`super::Decoder`].
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Frame> {
        let Some((base, rest)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            return Err(proto(format!(
                "tcp wire: truncated header: {} of {HEADER_LEN} bytes",
                bytes.len()
            )));
        };
        let header = decode_header(base, limits)?;
        let ext_len = usize::from(header.ext_len);
        let ext = rest.get(..ext_len).ok_or_else(|| {
            proto(format!(
                "tcp wire: truncated {} extended header: {} of {ext_len} bytes",
                header.op,
                rest.len()
            ))
        })?;
        let ext = Ext::decode(&header, ext, limits)?;
        Ok(Frame { header, ext })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_kinds_and_their_ops() {
        for kind in [AtomicKind::Plain, AtomicKind::Fetch, AtomicKind::Compare] {
            assert_eq!(atomic_kind(atomic_op(kind)), Some(kind));
        }
        assert_eq!(atomic_kind(Op::Msg), None);
    }

    #[test]
    fn msg_header_has_no_ext() {
        let f = Frame::msg(1, 5).with_cq_data(9);
        let (bytes, len) = f.to_bytes();
        assert_eq!(len, HEADER_LEN);
        assert_eq!(f.header_len(), HEADER_LEN);
        assert_eq!(Frame::decode(&bytes[..len], &Limits::default()), Ok(f));
    }

    #[test]
    fn encode_into_checks_room() {
        let f = Frame::write(
            1,
            &[RmaIov {
                addr: 0,
                len: 4,
                key: 1,
            }],
        )
        .unwrap();
        let mut small = [0u8; 60];
        assert_eq!(
            f.encode_into(&mut small).unwrap_err().kind(),
            ErrorKind::TooSmall
        );
        assert_eq!(small, [0; 60]);
        let mut big = [0u8; 100];
        assert_eq!(f.encode_into(&mut big), Ok(72));
    }
}
