//! The RDM receive side on the kit's receive engine
//! ([`fabric_core::kit::rx::RxEngine`]): messages from the shared receive
//! queue's buffers are matched there (or kept as unexpected), rendezvous
//! messages are read with RDMA reads, and what the engine asks back of the
//! transport is done here. Posting, matching, FI_PEEK / FI_CLAIM /
//! FI_DISCARD, FI_MULTI_RECV, cancel and the unexpected budget are the
//! engine's.
//!
//! # The unexpected budget
//!
//! An RC queue pair has no flow control of its own beyond RNR (receiver
//! not ready): a sender whose message finds no buffer in the shared
//! receive queue retries until one is posted (`rnr_retry_count` 7, for
//! ever). So the bound is enforced with the receive buffers themselves:
//!
//! - an unexpected eager message is copied to the heap while the engine's
//!   budget admits it (`rx_attr.total_buffered_recv`, default
//!   [`UNEXPECTED_BUDGET`]), and its receive buffer is reposted;
//! - once the budget refuses, the message (or rendezvous request) stays in
//!   its receive buffer, kept in the engine as [`Remote`] (matchable, so a
//!   receive posted later still takes it in order), and the buffer is not
//!   reposted until a receive takes the message or FI_DISCARD drops it;
//! - remote CQ data of a paused sender (the engine pauses senders that
//!   fill the receive CQ too) holds its receive buffer until the engine
//!   resumes the sender.
//!
//! Heap memory for unexpected messages is thus at most the budget, and
//! what a flooding peer holds beyond it is at most the [`RX_BUFS`]
//! preregistered receive buffers; once they are all held, senders stall
//! through RNR until the application posts receives. The shared receive
//! queue is shared by every connection, so a flooding peer stalls the
//! endpoint's other senders too: the price of verbs having no per-sender
//! credit on a shared queue.

#[allow(clippy::wildcard_imports)]
use super::*;

use fabric_core::kit::rx::{Action, Entry, Held, Meta, RecvId, Transport};

use crate::raw::mem::write_recv;

/// What verbs RDM brings to the kit's receive engine.
#[derive(Debug)]
pub(crate) struct VerbsWire;

impl Transport for VerbsWire {
    type Remote = Remote;
    /// Nothing: RC acknowledges in hardware.
    type Ack = ();
    /// The endpoint and its connection (see [`srx::peer`]), so that the
    /// engine of a shared receive context names the endpoint too.
    type Peer = srx::Peer;
}

/// A kept message whose data is not in the engine's buffers: a rendezvous
/// request (the data is read from the sender), or an eager message left
/// in its receive buffer because the budget refused it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote {
    hdr: Hdr,
    /// The sender (endpoint and connection).
    pub(super) peer: srx::Peer,
    /// The receive buffer the message holds (not reposted until the
    /// message is taken or dropped).
    slot: Option<usize>,
}

impl Remote {
    fn is_rts(&self) -> bool {
        matches!(self.hdr.op, OP_MSG_RTS | OP_TAGGED_RTS)
    }
}

/// The receive engine of an RDM endpoint.
pub(super) type Rx = RxEngine<VerbsWire, IOV_MAX>;

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl Engine {
    /// Gives receive buffer `slot` back to the shared receive queue.
    pub(super) fn repost(&self, slot: usize) {
        if slot >= self.rx_pool.count() {
            return;
        }
        // The buffer is ours again.
        if let Err(e) = self.srq.post(K_RX | slot as u64, &self.rx_pool, slot) {
            tracing::warn!(error = %e, "verbs: cannot repost a receive buffer");
        }
    }

    /// A message arrived in receive buffer `slot` on connection `conn`:
    /// whether the buffer may be reposted now (not when the message stays
    /// in it).
    pub(super) fn arrived(
        &self,
        st: &mut State,
        b: &Binds,
        conn: usize,
        slot: usize,
        bytes: usize,
    ) -> bool {
        // The receive buffer holds `bytes` (<= BUF) bytes the device
        // wrote; it is not reposted until this returns (or, when the
        // message stays in it, until the message is taken).
        let raw = self.rx_pool.read(slot, 0, bytes);
        let Some(h) = Hdr::decode(raw) else {
            tracing::debug!(bytes, "verbs: dropping a malformed RDM message");
            return true;
        };
        if h.op == OP_FIN {
            self.fin(st, &h);
            return true;
        }
        let payload = &raw[HDR..];
        let tagged = matches!(h.op, OP_TAGGED | OP_TAGGED_RTS);
        let rts = matches!(h.op, OP_MSG_RTS | OP_TAGGED_RTS);
        if !rts && payload.len() as u64 != h.len {
            tracing::debug!("verbs: dropping an RDM message whose length does not match");
            return true;
        }
        let src = self.src_of(st, conn);
        let tag = if tagged { h.tag } else { 0 };
        let data = (h.flags & F_DATA != 0).then_some(h.data);
        if let Some(id) = st.rx.arrive(tagged, tag, src, h.len) {
            let meta = Meta {
                tagged,
                tag,
                len: h.len,
                data,
                src,
            };
            if rts {
                self.start_read(st, b, id, meta, h, conn);
            } else {
                if let Some(r) = st.rx.recv(id) {
                    write_recv(&r.buf, 0, payload);
                }
                st.rx.complete(b, id, meta);
            }
            return true;
        }
        let buffered = if rts { 0 } else { payload.len() };
        let from = srx::peer(self.ep_no, conn);
        let (held, repost) = if st.rx.admit(from, buffered) {
            let held = if rts {
                Held::Remote(Remote {
                    hdr: h,
                    peer: from,
                    slot: None,
                })
            } else {
                let mut v = st.rx.take_buf(buffered);
                v.extend_from_slice(payload);
                Held::Bytes {
                    bytes: v,
                    ack: None,
                }
            };
            (held, true)
        } else {
            // Over the budget (the engine paused the sender): the message
            // stays in its receive buffer, which is not reposted.
            let r = Remote {
                hdr: h,
                peer: from,
                slot: Some(slot),
            };
            (Held::Remote(r), false)
        };
        let entry = Entry {
            len: h.len,
            data,
            peer: from,
            held,
        };
        st.rx.keep(tagged, tag, src, entry);
        repost
    }

    /// Remote CQ data of an RDMA write with immediate in receive buffer
    /// `slot`: whether the buffer may be reposted now (not while the
    /// sender is paused).
    pub(super) fn remote_data(
        &self,
        st: &mut State,
        b: &Binds,
        conn: Option<usize>,
        imm: u32,
        slot: usize,
    ) -> bool {
        let src = conn.map_or(FiAddr::NOTAVAIL, |c| self.src_of(st, c));
        // RDM endpoints are not offered FI_RX_CQ_DATA: nothing consumed.
        let from = srx::peer(self.ep_no, conn.unwrap_or(u32::MAX as usize));
        st.rx.remote_cq_data(b, u64::from(imm), src, from, false);
        if st.rx.has_actions() {
            self.rx_actions(st, b);
        }
        match conn.and_then(|c| st.conns.get_mut(c)) {
            Some(c) if c.paused => {
                c.parked.push(slot);
                false
            }
            _ => true,
        }
    }

    /// Does what the receive engine asks of the transport: read a
    /// rendezvous message, deliver a message left in its receive buffer,
    /// release a sender, pause or resume a connection.
    pub(super) fn rx_actions(&self, st: &mut State, b: &Binds) {
        while let Some(a) = st.rx.next_action() {
            if srx::owner(&a) != self.ep_no {
                // A shared receive context's work about another
                // endpoint's sender: that endpoint does it.
                st.foreign.push(a);
                continue;
            }
            match a {
                Action::Fetch { recv, meta, remote } => {
                    if remote.is_rts() {
                        if let Some(s) = remote.slot {
                            self.repost(s);
                        }
                        let conn = srx::conn_of(remote.peer);
                        self.start_read(st, b, recv, meta, remote.hdr, conn);
                    } else if let Some(s) = remote.slot {
                        let len = usize_of(remote.hdr.len).min(EAGER_MAX);
                        // The buffer holds the message (HDR + len bytes,
                        // checked on arrival) and was not reposted.
                        let data = self.rx_pool.read(s, HDR, len);
                        if let Some(r) = st.rx.recv(recv) {
                            write_recv(&r.buf, 0, data);
                        }
                        st.rx.complete(b, recv, meta);
                        self.repost(s);
                    }
                }
                Action::Release(remote) => {
                    if let Some(s) = remote.slot {
                        self.repost(s);
                    }
                    if remote.is_rts() {
                        // Nobody wants the data: the send completes.
                        let fin = Hdr {
                            op: OP_FIN,
                            id: remote.hdr.id,
                            ..Hdr::default()
                        };
                        self.send_control(st, srx::conn_of(remote.peer), fin);
                    }
                }
                Action::Ack(()) => {}
                Action::Pause(p) => {
                    if let Some(c) = st.conns.get_mut(srx::conn_of(p)) {
                        c.paused = true;
                    }
                }
                Action::Resume(p) => {
                    if let Some(c) = st.conns.get_mut(srx::conn_of(p)) {
                        c.paused = false;
                        for s in std::mem::take(&mut c.parked) {
                            self.repost(s);
                        }
                    }
                }
            }
        }
    }

    /// Connection `i` went away: its rendezvous requests cannot be read
    /// (dropped), its messages left in receive buffers stay deliverable,
    /// and the buffers its paused remote CQ data held go back.
    pub(super) fn rx_peer_gone(&self, st: &mut State, i: usize) {
        let mut dropped = Vec::new();
        st.rx
            .peer_gone_with(srx::peer(self.ep_no, i), |r| !r.is_rts(), &mut dropped);
        for r in dropped {
            if let Some(s) = r.slot {
                self.repost(s);
            }
        }
        if let Some(c) = st.conns.get_mut(i) {
            c.paused = false;
            for s in std::mem::take(&mut c.parked) {
                self.repost(s);
            }
        }
    }

    /// Starts the RDMA read of a rendezvous message into receive `recv`.
    pub(super) fn start_read(
        &self,
        st: &mut State,
        b: &Binds,
        recv: RecvId,
        meta: Meta,
        hdr: Hdr,
        conn: usize,
    ) {
        let Some(buf) = st.rx.recv(recv).map(|r| r.buf) else {
            return;
        };
        let n = usize_of(hdr.len).min(buf.len());
        let fin = |ok: bool| Hdr {
            op: OP_FIN,
            flags: if ok { 0 } else { F_ERROR },
            id: hdr.id,
            ..Hdr::default()
        };
        if n == 0 {
            // Nothing to read: truncated to an empty receive.
            st.rx.complete(b, recv, meta);
            return self.send_control(st, conn, fin(true));
        }
        let fail = |this: &Engine, st: &mut State, err: Error| {
            st.rx.fail(b, recv, meta.tagged, &err);
            this.send_control(st, conn, fin(false));
        };
        // The data lands in the receive's buffer (one piece, registered
        // now) or in a registered bounce buffer copied out at the end.
        let reg = match buf.pieces() {
            [_] => Mr::register_recv(&self.domain.pd, &buf, n).map(|(addr, mr)| {
                let sge = Sge::new(addr, n as u32, mr.lkey());
                (sge, Some(mr), None)
            }),
            _ => RegVec::new(&self.domain.pd, vec![0u8; n], Access::LOCAL_WRITE)
                .map(|r| (r.sge(), None, Some(r))),
        };
        let (sge, mr, bounce) = match reg {
            Ok(r) => r,
            Err(e) => return fail(self, st, e),
        };
        if st.conns.get(conn).is_none_or(|c| c.state != ConnState::Up) {
            return fail(
                self,
                st,
                Error::new(
                    ErrorKind::ConnReset,
                    "verbs: the sender's connection is down",
                ),
            );
        }
        let q = QueuedRead {
            op: ReadOp {
                recv,
                meta,
                id: hdr.id,
                conn,
                _mr: mr,
                bounce,
            },
            sge,
            addr: hdr.addr,
            rkey: hdr.rkey,
        };
        let q = if st.conns[conn].reads.is_empty() && self.read_room(st, conn) {
            match self.post_read(st, b, q) {
                Some(q) => q,
                None => return,
            }
        } else {
            q
        };
        // Behind earlier reads, or no room on the send queue: posted by
        // progress as completions make room ([`Self::flush_reads`]).
        st.conns[conn].reads.push_back(q);
        st.queued_reads += 1;
    }

    /// Whether connection `conn` may post one more read.
    fn read_room(&self, st: &State, conn: usize) -> bool {
        st.conns[conn].reads_posted < READ_WINDOW && self.room(st, conn)
    }

    /// Posts read `q`; gives it back when the send queue has no room.
    fn post_read(&self, st: &mut State, b: &Binds, q: QueuedRead) -> Option<QueuedRead> {
        let QueuedRead {
            op,
            sge,
            addr,
            rkey,
        } = q;
        let conn = op.conn;
        let idx = st.reads.insert(op);
        let mut wr = SendWr::new(K_READ | idx as u64, Opcode::Read, SgeList::<1>::one(sge))
            .remote(addr, rkey)
            .flags(SendFlags::SIGNALED);
        // The local memory is registered and kept by the read op.
        let e = match st.conns[conn].id.post_send(&mut wr) {
            Ok(()) => {
                st.conns[conn].posted += 1;
                st.conns[conn].reads_posted += 1;
                st.posted_all += 1;
                return None;
            }
            Err(e) => e,
        };
        let op = st.reads.remove(idx)?;
        if e == libc::ENOMEM {
            return Some(QueuedRead {
                op,
                sge,
                addr,
                rkey,
            });
        }
        st.rx.fail(
            b,
            op.recv,
            op.meta.tagged,
            &from_errno(e, "ibv_post_send (RDMA read)"),
        );
        let fin = Hdr {
            op: OP_FIN,
            flags: F_ERROR,
            id: op.id,
            ..Hdr::default()
        };
        self.send_control(st, conn, fin);
        None
    }

    /// Posts the reads that waited for room on their connection's send
    /// queue, in order, while there is room.
    pub(super) fn flush_reads(&self, st: &mut State) {
        let Some(b) = self.binds() else { return };
        for i in 0..st.conns.len() {
            while self.read_room(st, i) {
                let Some(q) = st.conns[i].reads.pop_front() else {
                    break;
                };
                st.queued_reads -= 1;
                if let Some(q) = self.post_read(st, b, q) {
                    st.conns[i].reads.push_front(q);
                    st.queued_reads += 1;
                    break;
                }
            }
        }
    }

    /// The reads waiting on connection `i` fail with `err`: it is down,
    /// so there is nobody to send their FIN to.
    pub(super) fn fail_queued_reads(&self, st: &mut State, i: usize, err: &Error) {
        let Some(c) = st.conns.get_mut(i) else { return };
        let reads = std::mem::take(&mut c.reads);
        st.queued_reads -= reads.len();
        let Some(b) = self.binds() else { return };
        for q in reads {
            st.rx.fail(b, q.op.recv, q.op.meta.tagged, err);
        }
    }

    /// An RDMA read finished (or was flushed): the sender gets its FIN,
    /// the receive its completion or error (exactly one).
    pub(super) fn read_done(&self, st: &mut State, idx: usize, wc: &Wc) {
        let Some(op) = st.reads.remove(idx) else {
            return;
        };
        if let Some(c) = st.conns.get_mut(op.conn) {
            c.reads_posted = c.reads_posted.saturating_sub(1);
        }
        let ok = wc.ok();
        self.send_control(
            st,
            op.conn,
            Hdr {
                op: OP_FIN,
                flags: if ok { 0 } else { F_ERROR },
                id: op.id,
                ..Hdr::default()
            },
        );
        let Some(b) = self.binds() else { return };
        if !ok {
            let e = wc_error(wc, CqEntry::default());
            st.rx
                .fail(b, op.recv, op.meta.tagged, &Error::new(e.err, e.err_text));
            return;
        }
        if let (Some(v), Some(r)) = (&op.bounce, st.rx.recv(op.recv)) {
            write_recv(&r.buf, 0, v.bytes());
        }
        st.rx.complete(b, op.recv, op.meta);
    }

    pub(super) fn fin(&self, st: &mut State, h: &Hdr) {
        let Some(r) = usize::try_from(h.id).ok().and_then(|i| st.rndv.remove(i)) else {
            return;
        };
        self.op_done(st, r.conn);
        let entry = CqEntry {
            context: r.context,
            flags: r.flags,
            len: r.len,
            ..CqEntry::default()
        };
        if h.flags & F_ERROR != 0 {
            self.tx_failed(
                st,
                CqErrEntry {
                    entry,
                    olen: 0,
                    err: ErrorKind::RemoteIo,
                    prov_errno: 0,
                    err_text: "verbs: the receiver could not read the message".into(),
                    src_addr: None,
                },
            );
        } else {
            self.tx_ok(st, entry, r.report);
        }
    }

    /// Posts a receive (`fi_recvmsg` / `fi_trecvmsg`, with FI_PEEK /
    /// FI_CLAIM / FI_DISCARD and FI_MULTI_RECV) to the engine.
    pub(super) fn recv(
        &self,
        b: &Binds,
        msg: &UserMsg<'_>,
        flags: OpFlags,
        tagged: bool,
    ) -> Result<()> {
        if self.srx.get().is_some() {
            return Err(api::shared_rx());
        }
        let mut st = self.lock();
        let r = st.rx.post(b, msg.msg(), flags, tagged);
        if st.rx.has_actions() {
            self.rx_actions(&mut st, b);
        }
        r
    }

    /// Cancels a posted receive by context.
    pub(super) fn cancel_recv(&self, b: &Binds, context: u64) -> Result<()> {
        let mut st = self.lock();
        let r = st.rx.cancel(b, context);
        if st.rx.has_actions() {
            self.rx_actions(&mut st, b);
        }
        r
    }

    /// Sets `FI_OPT_MIN_MULTI_RECV`.
    pub(super) fn set_min_multi_recv(&self, n: usize) {
        let mut st = self.lock();
        self.min_multi.store(n, Ordering::Relaxed);
        st.rx.set_min_multi_recv(n);
    }

    /// The receive side's part of progress: senders paused for a full
    /// receive CQ resume once it has room; the engine's work is done.
    pub(super) fn rx_progress(&self, st: &mut State) {
        let Some(b) = self.binds() else { return };
        if st.rx.waits_for_cq() {
            st.rx.cq_read(b);
        }
        if st.rx.has_actions() {
            self.rx_actions(st, b);
        }
    }
}
