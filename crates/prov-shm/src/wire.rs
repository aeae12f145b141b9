//! The provider's commands: what the fields of a ring
//! [`Command`](crate::ring::Command) mean for each op, and the descriptor
//! that RMA and atomic requests carry in their payload. The tables are in
//! the [crate docs](crate::docs#commands).
//!
//! Everything here that reads bytes from a peer checks them and returns
//! `None` (or an error) for anything malformed; nothing panics.

use fabric_core::kit::atomic::AtomicKind;
use fabric_core::objects::{AtomicOp, Datatype, RmaIov};

use crate::pieces::IOV_LIMIT;
use crate::ring::Command;

/// Command ops.
pub(crate) mod op {
    /// A sender introduces itself: payload = its region name.
    pub(crate) const HELLO: u16 = 1;
    /// An eager message: payload = the message.
    pub(crate) const MSG: u16 = 2;
    /// A rendezvous message: `aux = [length, op id]`, payload = the
    /// sender's buffer as (address, length) pairs.
    pub(crate) const RTS: u16 = 3;
    /// Clear to send (push mode): `tag` = the initiator's op id, `data` =
    /// the receiver's transfer id, `aux[0]` = bytes accepted.
    pub(crate) const CTS: u16 = 4;
    /// A chunk of pushed data: `tag` = destination id, `data` = offset,
    /// payload = the bytes.
    pub(crate) const DATA: u16 = 5;
    /// An operation is finished at the target: `tag` = op id, `data` =
    /// status (0 or an errno), payload = result bytes at offset 0 (small
    /// reads and fetching atomics).
    pub(crate) const ACK: u16 = 6;
    /// An RMA write: `tag` = op id, `data` = remote CQ data, payload =
    /// descriptor (+ the data itself with [`super::flag::INLINE`]).
    pub(crate) const WRITE: u16 = 7;
    /// An RMA read: `tag` = op id, payload = descriptor.
    pub(crate) const READ: u16 = 8;
    /// An atomic: `tag` = op id, `data` = remote CQ data, payload =
    /// descriptor, operands, compare values.
    pub(crate) const ATOMIC: u16 = 9;
    /// Split rendezvous: the receiver pulls the head of the message and
    /// asks the sender to write the tail: `tag` = the sender's op id,
    /// `data` = the receiver's transfer id, `aux = [split offset, bytes
    /// accepted]`, payload = the receiver's buffer from the split offset
    /// on, as (address, length) pairs.
    pub(crate) const SPLIT: u16 = 10;
    /// The sender wrote the tail of a split rendezvous: `tag` = the
    /// receiver's transfer id, `data` = 0 or an errno.
    pub(crate) const PUT_DONE: u16 = 11;
    /// The receiver holds more unexpected messages from this sender than
    /// its budget allows: send no more messages until `RESUME`. Payload =
    /// the receiver's region name (which of the sender's peers it is).
    pub(crate) const PAUSE: u16 = 12;
    /// The receiver's unexpected messages were taken: messages may flow
    /// again. Payload as `PAUSE`.
    pub(crate) const RESUME: u16 = 13;
}

/// Command flags.
pub(crate) mod flag {
    /// A tagged message (`tag` holds the tag).
    pub(crate) const TAGGED: u16 = 1;
    /// `data` holds remote CQ data.
    pub(crate) const CQ_DATA: u16 = 2;
    /// An eager message asks for an ACK once delivered
    /// (FI_DELIVERY_COMPLETE): `aux[0]` = op id.
    pub(crate) const ACK_REQ: u16 = 4;
    /// `DATA` for the receiver's own operation (read data, atomic
    /// results), not for one of its receive transfers.
    pub(crate) const TO_TX: u16 = 8;
    /// RMA / rendezvous in push mode: the data travels in `DATA`
    /// commands, not by cross-memory attach.
    pub(crate) const PUSH: u16 = 16;
    /// `WRITE` carries its data after the descriptor.
    pub(crate) const INLINE: u16 = 32;
    /// `ACK` of a split rendezvous sent as soon as the receiver's own part
    /// is in place: it finishes the send only if the sender wrote its part
    /// (otherwise the receiver pulls that part and acknowledges again).
    pub(crate) const HEAD: u16 = 64;
    /// The op id of an `RTS`, or of a `MSG` with `ACK_REQ`, is in `data`
    /// (which then holds no CQ data) and the command has no `aux` words,
    /// so it fills one cache line of the slot fewer (the `aux` words are
    /// in the slot's last line); an `RTS`'s length is then its ranges'
    /// total.
    pub(crate) const ID_IN_DATA: u16 = 128;
    /// A `SPLIT` that takes the whole message and splits it where
    /// `split_point` of its length says: no `aux` words (one cache line
    /// fewer, as [`ID_IN_DATA`]); the sender knows both from its message.
    pub(crate) const WHOLE: u16 = 256;
    /// Every flag this version knows.
    pub(crate) const ALL: u16 =
        TAGGED | CQ_DATA | ACK_REQ | TO_TX | PUSH | INLINE | HEAD | ID_IN_DATA | WHOLE;
}

/// Puts op `id` into an `RTS` or an eager `MSG` with `ACK_REQ` (`aux`
/// slot `at` of those without [`flag::ID_IN_DATA`]): into `data` when it
/// carries no CQ data.
pub(crate) fn set_op_id(cmd: &mut Command, id: u64, at: usize) {
    if cmd.flags & flag::CQ_DATA == 0 {
        cmd.flags |= flag::ID_IN_DATA;
        cmd.data = id;
    } else if let Some(a) = cmd.aux.get_mut(at) {
        *a = id;
    }
}

/// The op id of an `RTS` or a `MSG` with `ACK_REQ` (see [`set_op_id`]).
pub(crate) fn op_id(cmd: &Command, at: usize) -> u64 {
    if cmd.flags & flag::ID_IN_DATA != 0 {
        cmd.data
    } else {
        cmd.aux.get(at).copied().unwrap_or(0)
    }
}

/// The remote CQ data a message command carries: none with
/// [`flag::ID_IN_DATA`], whose `data` is an op id.
pub(crate) fn cq_data(cmd: &Command) -> Option<u64> {
    (cmd.flags & (flag::CQ_DATA | flag::ID_IN_DATA) == flag::CQ_DATA).then_some(cmd.data)
}

/// The op id of an injected RMA write or atomic: no completion, the ACK
/// only counts.
pub(crate) const INJECT_ID: u64 = u64::MAX;

/// Most remote ranges of one RMA or atomic operation (`rma_iov_limit`).
pub(crate) const RMA_IOV_LIMIT: usize = 4;

/// Bytes of a descriptor before its inline data, at most.
pub(crate) const DESC_MAX: usize = 8 + RMA_IOV_LIMIT * 24 + IOV_LIMIT * 16;

/// An RMA or atomic request's descriptor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Desc {
    /// Remote ranges (atomics: lengths in elements).
    pub rma: [RmaIov; RMA_IOV_LIMIT],
    /// How many of `rma` are used.
    pub n_rma: usize,
    /// The initiator's buffer (cross-memory attach), as (address, length).
    pub local: [(u64, u64); IOV_LIMIT],
    /// How many of `local` are used.
    pub n_local: usize,
    /// Atomic datatype, operation and form (atomics only).
    pub atomic: Option<(Datatype, AtomicOp, AtomicKind)>,
    /// Bytes of descriptor; inline data follows.
    pub len: usize,
}

const NO_RMA: RmaIov = RmaIov {
    addr: 0,
    len: 0,
    key: 0,
};

fn kind_code(k: AtomicKind) -> u8 {
    match k {
        AtomicKind::Plain => 0,
        AtomicKind::Fetch => 1,
        AtomicKind::Compare => 2,
    }
}

fn kind_of(c: u8) -> Option<AtomicKind> {
    match c {
        0 => Some(AtomicKind::Plain),
        1 => Some(AtomicKind::Fetch),
        2 => Some(AtomicKind::Compare),
        _ => None,
    }
}

impl Desc {
    /// A descriptor of `rma` ranges and the initiator's `local` buffer.
    pub(crate) fn new(rma: &[RmaIov], local: &[(usize, usize)]) -> Option<Desc> {
        if rma.is_empty() || rma.len() > RMA_IOV_LIMIT || local.len() > IOV_LIMIT {
            return None;
        }
        let mut d = Desc {
            rma: [NO_RMA; RMA_IOV_LIMIT],
            n_rma: rma.len(),
            local: [(0, 0); IOV_LIMIT],
            n_local: local.len(),
            atomic: None,
            len: 8 + rma.len() * 24 + local.len() * 16,
        };
        for (dst, src) in d.rma.iter_mut().zip(rma) {
            *dst = *src;
        }
        for (dst, &(a, l)) in d.local.iter_mut().zip(local) {
            *dst = (a as u64, l as u64);
        }
        Some(d)
    }

    /// The remote ranges.
    pub(crate) fn rma(&self) -> &[RmaIov] {
        self.rma.get(..self.n_rma).unwrap_or_default()
    }

    /// The initiator's buffer pieces.
    pub(crate) fn local(&self) -> &[(u64, u64)] {
        self.local.get(..self.n_local).unwrap_or_default()
    }

    /// Sum of the remote range lengths; `None` on overflow.
    pub(crate) fn rma_total(&self) -> Option<usize> {
        self.rma()
            .iter()
            .try_fold(0usize, |acc, r| acc.checked_add(r.len))
    }

    /// Sum of the local piece lengths; `None` on overflow.
    pub(crate) fn local_total(&self) -> Option<usize> {
        self.local().iter().try_fold(0usize, |acc, &(_, l)| {
            acc.checked_add(usize::try_from(l).ok()?)
        })
    }

    /// Writes the descriptor into `out` (at least [`DESC_MAX`] bytes);
    /// returns its length.
    pub(crate) fn encode(&self, out: &mut [u8; DESC_MAX]) -> usize {
        let (dt, aop, kind) = match self.atomic {
            Some((dt, op, k)) => (dt.as_u32() as u8, op.as_u32() as u8, kind_code(k)),
            None => (0, 0, 0),
        };
        let head = u64::from(self.n_rma as u8)
            | u64::from(self.n_local as u8) << 8
            | u64::from(self.atomic.is_some()) << 16
            | u64::from(dt) << 24
            | u64::from(aop) << 32
            | u64::from(kind) << 40;
        let mut w = Writer { out, at: 0 };
        w.put(head);
        for r in self.rma() {
            w.put(r.addr);
            w.put(r.len as u64);
            w.put(r.key);
        }
        for &(a, l) in self.local() {
            w.put(a);
            w.put(l);
        }
        w.at
    }

    /// Reads a descriptor from the first bytes of a payload (`bytes` holds
    /// at most [`DESC_MAX`] of them). `None` when malformed: counts out of
    /// range, unknown atomic codes, a truncated descriptor, nonzero
    /// reserved bits.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Desc> {
        let mut r = Reader { bytes, at: 0 };
        let head = r.get()?;
        if head >> 48 != 0 {
            return None;
        }
        let n_rma = (head & 0xff) as usize;
        let n_local = ((head >> 8) & 0xff) as usize;
        if n_rma == 0 || n_rma > RMA_IOV_LIMIT || n_local > IOV_LIMIT {
            return None;
        }
        let atomic = match (head >> 16) & 0xff {
            0 => {
                if head >> 24 != 0 {
                    return None;
                }
                None
            }
            1 => {
                let dt = Datatype::try_from(((head >> 24) & 0xff) as u32).ok()?;
                let op = AtomicOp::try_from(((head >> 32) & 0xff) as u32).ok()?;
                let kind = kind_of(((head >> 40) & 0xff) as u8)?;
                Some((dt, op, kind))
            }
            _ => return None,
        };
        let mut d = Desc {
            rma: [NO_RMA; RMA_IOV_LIMIT],
            n_rma,
            local: [(0, 0); IOV_LIMIT],
            n_local,
            atomic,
            len: 0,
        };
        for slot in d.rma.iter_mut().take(n_rma) {
            let addr = r.get()?;
            let len = usize::try_from(r.get()?).ok()?;
            let key = r.get()?;
            *slot = RmaIov { addr, len, key };
        }
        for slot in d.local.iter_mut().take(n_local) {
            *slot = (r.get()?, r.get()?);
        }
        d.len = r.at;
        Some(d)
    }
}

struct Writer<'a> {
    out: &'a mut [u8; DESC_MAX],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, v: u64) {
        if let Some(dst) = self.out.get_mut(self.at..self.at + 8) {
            dst.copy_from_slice(&v.to_le_bytes());
            self.at += 8;
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn get(&mut self) -> Option<u64> {
        let b = self.bytes.get(self.at..self.at + 8)?;
        self.at += 8;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
}

/// Encodes a buffer as the (address, length) list of an RTS payload.
pub(crate) fn encode_iovs(pieces: &[(usize, usize)], out: &mut [u8; IOV_LIMIT * 16]) -> usize {
    let mut at = 0;
    for &(a, l) in pieces.iter().take(IOV_LIMIT) {
        out[at..at + 8].copy_from_slice(&(a as u64).to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&(l as u64).to_le_bytes());
        at += 16;
    }
    at
}

/// Decodes an RTS payload's (address, length) list: 1 to [`IOV_LIMIT`]
/// entries; `None` when malformed.
pub(crate) fn decode_iovs(bytes: &[u8]) -> Option<([(u64, u64); IOV_LIMIT], usize)> {
    if bytes.is_empty() || bytes.len() % 16 != 0 || bytes.len() > IOV_LIMIT * 16 {
        return None;
    }
    let mut out = [(0u64, 0u64); IOV_LIMIT];
    let mut r = Reader { bytes, at: 0 };
    let n = bytes.len() / 16;
    for slot in out.iter_mut().take(n) {
        *slot = (r.get()?, r.get()?);
    }
    Some((out, n))
}

/// An op id: a slot index and that slot's generation, so that a stale or
/// forged id names no live operation.
pub(crate) fn id_of(index: u32, generation: u32) -> u64 {
    u64::from(generation) << 32 | u64::from(index)
}

/// The (index, generation) of an op id.
pub(crate) fn split_id(id: u64) -> (u32, u32) {
    (id as u32, (id >> 32) as u32)
}

/// A status as it travels in an ACK: 0 or the positive errno of the
/// error kind.
pub(crate) fn status_of(kind: Option<fabric_core::ErrorKind>) -> u64 {
    kind.map_or(0, |k| u64::from(k.errno().unsigned_abs()))
}

/// The error kind of a status; anything not a known errno is `Io`.
pub(crate) fn kind_of_status(status: u64) -> Option<fabric_core::ErrorKind> {
    if status == 0 {
        return None;
    }
    Some(
        i32::try_from(status)
            .ok()
            .and_then(fabric_core::ErrorKind::from_errno)
            .unwrap_or(fabric_core::ErrorKind::Io),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_and_garbage_is_refused() {
        let rma = [
            RmaIov {
                addr: 0x1000,
                len: 64,
                key: 7,
            },
            RmaIov {
                addr: 0x2000,
                len: 8,
                key: 9,
            },
        ];
        let mut d = Desc::new(&rma, &[(0x5000, 72)]).expect("desc");
        d.atomic = Some((Datatype::Uint32, AtomicOp::Cswap, AtomicKind::Compare));
        let mut buf = [0u8; DESC_MAX];
        let n = d.encode(&mut buf);
        assert_eq!(n, d.len);
        let back = Desc::decode(&buf[..n]).expect("decodes");
        assert_eq!(back, d);
        assert_eq!(back.rma_total(), Some(72));
        assert_eq!(back.local_total(), Some(72));
        assert!(Desc::decode(&buf[..n - 1]).is_none(), "truncated");
        let mut bad = buf;
        bad[0] = 0;
        assert!(Desc::decode(&bad[..n]).is_none(), "no ranges");
        let mut bad = buf;
        bad[3] = 0xff;
        assert!(Desc::decode(&bad[..n]).is_none(), "unknown datatype");
        let mut bad = buf;
        bad[7] = 1;
        assert!(Desc::decode(&bad[..n]).is_none(), "reserved bits");
        assert!(Desc::decode(&[]).is_none());
        assert!(Desc::new(&[], &[]).is_none());
    }

    #[test]
    fn iov_lists_and_ids() {
        let mut out = [0u8; IOV_LIMIT * 16];
        let n = encode_iovs(&[(1, 2), (3, 4)], &mut out);
        let (v, k) = decode_iovs(&out[..n]).expect("decodes");
        assert_eq!(&v[..k], &[(1, 2), (3, 4)]);
        assert!(decode_iovs(&out[..n - 1]).is_none());
        assert!(decode_iovs(&[]).is_none());
        assert_eq!(split_id(id_of(5, 9)), (5, 9));
        assert_eq!(kind_of_status(status_of(None)), None);
        let k = fabric_core::ErrorKind::KeyRejected;
        assert_eq!(kind_of_status(status_of(Some(k))), Some(k));
        assert_eq!(kind_of_status(1 << 40), Some(fabric_core::ErrorKind::Io));
    }

    #[test]
    fn an_op_id_rides_in_data_unless_cq_data_does() {
        let mut rts = Command {
            op: op::RTS,
            ..Command::default()
        };
        set_op_id(&mut rts, 42, 1);
        assert_eq!(rts.flags, flag::ID_IN_DATA);
        assert_eq!((rts.data, rts.aux), (42, [0, 0]), "no aux line");
        assert_eq!((op_id(&rts, 1), cq_data(&rts)), (42, None));
        let mut msg = Command {
            op: op::MSG,
            flags: flag::CQ_DATA | flag::ACK_REQ,
            data: 7,
            ..Command::default()
        };
        set_op_id(&mut msg, 43, 0);
        assert_eq!(msg.flags & flag::ID_IN_DATA, 0);
        assert_eq!(
            (msg.aux, op_id(&msg, 0), cq_data(&msg)),
            ([43, 0], 43, Some(7))
        );
        // A peer that sets both gets no CQ data: `data` is the op id.
        msg.flags |= flag::ID_IN_DATA;
        assert_eq!((op_id(&msg, 0), cq_data(&msg)), (7, None));
        assert_eq!(op_id(&msg, 5), 7);
        msg.flags &= !flag::ID_IN_DATA;
        assert_eq!(op_id(&msg, 5), 0, "no such aux word");
    }
}
