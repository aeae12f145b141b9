//! The target side of RMA and atomics: requests checked against the
//! endpoint's capabilities and the domain's memory regions, writes placed
//! in registered memory, reads answered from it, atomics executed, and
//! remote CQ data, counters and acknowledgements.

use fabric_core::kit::atomic::AtomicKind;
use fabric_core::kit::binds::Binds;
use fabric_core::objects::{AtomicOp, MrAccess, RmaIov};
use fabric_core::{Caps, ErrorKind, Mode, Result};

use super::core::{EpInner, State, proto, u64_of, usize_of};
use crate::atomic;
use crate::conn::{Done, Sink, Src, refusal};
use crate::wire::{Ext, Flags, Frame, MAX_REASON_LEN, RmaHeader, atomic_kind};

/// What a request needed at the target: the endpoint to serve `class`
/// with `serve`, and its ranges (lengths in elements of `elem` bytes) to
/// grant `need`.
#[derive(Debug, Clone, Copy)]
struct Check {
    class: Caps,
    serve: MrAccess,
    need: MrAccess,
    elem: usize,
}

impl Check {
    /// An RMA request of `access`.
    fn rma(access: MrAccess) -> Check {
        Check {
            class: Caps::RMA,
            serve: access,
            need: access,
            elem: 1,
        }
    }
}

/// `text` cut to at most [`MAX_REASON_LEN`] bytes, at a character
/// boundary.
fn clip(text: &str) -> &str {
    let mut end = text.len().min(MAX_REASON_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

impl EpInner {
    /// Whether this endpoint's caps let peers do `access` with `class`
    /// (FI_RMA or FI_ATOMIC) here: the class, and the REMOTE_READ /
    /// REMOTE_WRITE direction or no direction at all (fi_getinfo(3)). A
    /// peer may not use what the application did not ask for.
    pub(super) fn serves(&self, class: Caps, access: MrAccess) -> bool {
        let caps = self.info.caps;
        let dir = if access.contains(MrAccess::REMOTE_READ) {
            Caps::REMOTE_READ
        } else {
            Caps::REMOTE_WRITE
        };
        caps.contains(class) && (caps.contains(dir) || !caps.intersects(Caps::RMA_DIRECTIONS))
    }

    /// The status refusing remote access `access` to one of `rma`'s
    /// ranges (an endpoint not open to RMA, bad key, range outside its
    /// region, missing right), if any.
    pub(super) fn refused(&self, rma: &RmaHeader, access: MrAccess) -> Option<ErrorKind> {
        if !self.serves(Caps::RMA, access) {
            return Some(ErrorKind::Access);
        }
        rma.iov()
            .iter()
            .find_map(|r| self.mr.check(r.key, r.addr, r.len, access).err())
            .map(|e| refusal(&e))
    }

    /// Why this side refuses `access` with `class` to `iov` (element
    /// size `elem`: 1 for RMA), for the initiator: which right the
    /// endpoint does not serve, or the region check that failed (which
    /// key, which range, which right).
    #[cold]
    fn refusal_reason(&self, check: Check, iov: &[RmaIov], kind: ErrorKind) -> String {
        let Check {
            class,
            serve,
            need,
            elem,
        } = check;
        if !self.serves(class, serve) {
            let (what, cap) = match (class == Caps::ATOMIC, serve.contains(MrAccess::REMOTE_READ)) {
                (true, _) => ("atomic operations", "FI_ATOMIC"),
                (false, true) => ("RMA reads", "FI_RMA with FI_REMOTE_READ"),
                (false, false) => ("RMA writes", "FI_RMA with FI_REMOTE_WRITE"),
            };
            return format!("the endpoint does not serve remote {what} (its caps lack {cap})");
        }
        iov.iter()
            .find_map(|r| {
                let len = r.len.checked_mul(elem)?;
                self.mr.check(r.key, r.addr, len, need).err()
            })
            .map_or_else(|| kind.description().to_owned(), |e| e.detail().to_owned())
    }

    /// Queues `frame`, a failed answer, with the target's reason when the
    /// connection speaks version 2 (a version 1 peer gets the status only).
    #[cold]
    fn push_refusal(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        frame: Frame,
        reason: impl FnOnce() -> String,
    ) {
        let v2 = st.conns.get(&cid).is_some_and(|c| c.version >= 2);
        let text = if v2 { reason() } else { String::new() };
        let text = clip(&text);
        if text.is_empty() {
            self.push_frame(st, b, cid, &frame, Src::None, Done::None);
        } else {
            let f = frame.with_reason(text.len());
            self.push_frame(st, b, cid, &f, Src::Bytes(text.as_bytes()), Done::None);
        }
    }

    /// An RMA write into this side's memory: checked, then its payload
    /// goes straight into the region (or is dropped when refused).
    pub(super) fn on_write(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let plen = f.header.payload_len;
        let Ext::Rma(rma) = f.ext else {
            return Err(proto("tcp: Write without its ranges"));
        };
        let status = self.refused(&rma, MrAccess::REMOTE_WRITE);
        if let Some(kind) = status {
            tracing::debug!(error = %kind.c_name(), "tcp: refused an RMA write");
        }
        let sink = Sink::Region { rma, status };
        if plen == 0 {
            self.write_done(st, b, cid, f, status);
        } else {
            self.set_cur(st, cid, f, sink);
        }
        Ok(())
    }

    /// An RMA read of this side's memory: answered from the region.
    pub(super) fn on_read_req(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let Ext::Rma(rma) = f.ext else {
            return Err(proto("tcp: ReadReq without its ranges"));
        };
        let status = self.refused(&rma, MrAccess::REMOTE_READ);
        let id = f.header.id;
        match status {
            Some(kind) => {
                let rsp = Frame::read_rsp(id, Some(kind), 0);
                self.push_refusal(st, b, cid, rsp, || {
                    self.refusal_reason(Check::rma(MrAccess::REMOTE_READ), rma.iov(), kind)
                });
            }
            None => {
                let total = rma.total_len().unwrap_or(0);
                let rsp = Frame::read_rsp(id, None, total);
                self.push_frame(st, b, cid, &rsp, Src::Region(rma), Done::None);
                if let Some(c) = &b.cntr_remote_read {
                    c.add(1);
                }
            }
        }
        Ok(())
    }

    /// An atomic request: its operands are gathered, then applied.
    pub(super) fn on_atomic(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let plen = f.header.payload_len;
        let Some(conn) = st.conns.get_mut(&cid) else {
            return Ok(());
        };
        let mut v = std::mem::take(&mut conn.scratch);
        v.clear();
        v.reserve(usize_of(plen));
        if plen == 0 {
            self.atomic_done(st, b, cid, f, v);
        } else {
            self.set_cur(st, cid, f, Sink::Scratch(v));
        }
        Ok(())
    }

    /// An RMA write frame is complete: counters, remote CQ data, ack.
    pub(super) fn write_done(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        status: Option<ErrorKind>,
    ) {
        if status.is_none() {
            if let Some(c) = &b.cntr_remote_write {
                c.add(1);
            }
            if f.header.flags.contains(Flags::REMOTE_CQ_DATA) {
                self.remote_cq_data(st, b, cid, f.header.data);
            }
        }
        let ack = f.header.flags.difference(Flags::REMOTE_CQ_DATA);
        if !ack.is_empty() {
            let a = Frame::ack(f.header.id, status);
            match (status, f.ext) {
                (Some(kind), Ext::Rma(rma)) => self.push_refusal(st, b, cid, a, || {
                    self.refusal_reason(Check::rma(MrAccess::REMOTE_WRITE), rma.iov(), kind)
                }),
                _ => self.push_frame(st, b, cid, &a, Src::None, Done::None),
            }
        }
    }

    /// Remote CQ data of an RMA or atomic operation: a completion in the
    /// receive CQ; it consumes a posted receive only in FI_RX_CQ_DATA mode.
    /// A sender that fills the receive CQ with these is paused until the
    /// application reads; kept ones (FI_RX_CQ_DATA) count against the
    /// unexpected budget.
    pub(super) fn remote_cq_data(&self, st: &mut State, b: &Binds, cid: u32, data: u64) {
        let src = self.source(st, b, cid);
        let consume = self.info.mode.contains(Mode::RX_CQ_DATA);
        st.rx.remote_cq_data(b, data, src, self.token(cid), consume);
    }

    /// An atomic request is complete: check, execute, answer.
    pub(super) fn atomic_done(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        operands: Vec<u8>,
    ) {
        let Ext::Atomic(a) = f.ext else {
            return;
        };
        let kind = atomic_kind(f.header.op).unwrap_or(AtomicKind::Plain);
        let mut results = st
            .conns
            .get_mut(&cid)
            .map(|c| std::mem::take(&mut c.results))
            .unwrap_or_default();
        results.clear();
        let access = if a.op() == AtomicOp::AtomicRead {
            MrAccess::REMOTE_READ
        } else {
            MrAccess::REMOTE_WRITE
        };
        let status = if self.serves(Caps::ATOMIC, access) {
            atomic::execute(&self.mr, kind, &a, &operands, &mut results).err()
        } else {
            Some(ErrorKind::Access)
        };
        if let Some(kind) = status {
            tracing::debug!(error = %kind.c_name(), "tcp: refused an atomic operation");
        } else {
            let c = if a.op() == AtomicOp::AtomicRead {
                &b.cntr_remote_read
            } else {
                &b.cntr_remote_write
            };
            if let Some(c) = c {
                c.add(1);
            }
            if f.header.flags.contains(Flags::REMOTE_CQ_DATA) {
                self.remote_cq_data(st, b, cid, f.header.data);
            }
        }
        let id = f.header.id;
        if let Some(st_kind) = status {
            let acked = !f.header.flags.difference(Flags::REMOTE_CQ_DATA).is_empty();
            let reply = match kind {
                AtomicKind::Plain if !acked => None,
                AtomicKind::Plain => Some(Frame::ack(id, status)),
                AtomicKind::Fetch | AtomicKind::Compare => Some(Frame::atomic_rsp(id, status, 0)),
            };
            if let Some(reply) = reply {
                self.push_refusal(st, b, cid, reply, || {
                    let check = Check {
                        class: Caps::ATOMIC,
                        serve: access,
                        need: kind.access(a.op()),
                        elem: a.datatype().size(),
                    };
                    self.refusal_reason(check, a.iov(), st_kind)
                });
            }
            if let Some(c) = st.conns.get_mut(&cid) {
                c.scratch = operands;
                c.results = results;
            }
            return;
        }
        match kind {
            AtomicKind::Plain => {
                if !f.header.flags.difference(Flags::REMOTE_CQ_DATA).is_empty() {
                    self.push_frame(st, b, cid, &Frame::ack(id, status), Src::None, Done::None);
                }
            }
            AtomicKind::Fetch | AtomicKind::Compare => {
                let len = if status.is_some() {
                    0
                } else {
                    u64_of(results.len())
                };
                let rsp = Frame::atomic_rsp(id, status, len);
                let src = if len == 0 {
                    Src::None
                } else {
                    Src::Bytes(&results)
                };
                self.push_frame(st, b, cid, &rsp, src, Done::None);
            }
        }
        if let Some(c) = st.conns.get_mut(&cid) {
            c.scratch = operands;
            c.results = results;
        }
    }
}
