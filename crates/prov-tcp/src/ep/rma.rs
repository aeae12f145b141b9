//! The target side of RMA and atomics: requests checked against the
//! endpoint's capabilities and the domain's memory regions, writes placed
//! in registered memory, reads answered from it, atomics executed, and
//! remote CQ data, counters and acknowledgements.

use fabric_core::kit::atomic::AtomicKind;
use fabric_core::kit::binds::Binds;
use fabric_core::objects::{AtomicOp, MrAccess};
use fabric_core::{Caps, ErrorKind, Mode, Result};

use super::core::{EpInner, State, proto, u64_of, usize_of};
use crate::atomic;
use crate::conn::{Done, Sink, Src, refusal};
use crate::wire::{Ext, Flags, Frame, RmaHeader, atomic_kind};

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
                self.push_frame(st, b, cid, &rsp, Src::None, Done::None);
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
            self.push_frame(st, b, cid, &a, Src::None, Done::None);
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
