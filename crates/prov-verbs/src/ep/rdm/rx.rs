//! The RDM receive side: posted receives, the unexpected queue, eager delivery, rendezvous reads, FI_PEEK / FI_CLAIM / FI_DISCARD.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Engine {
    /// Delivers an eager message to a matched receive.
    pub(super) fn deliver_eager(&self, r: &Recv, h: &Hdr, data: &[u8], src: FiAddr) {
        // SAFETY: the receive's pieces are writable until its completion.
        let n = unsafe { scatter(r.pieces(), data) };
        let mut entry = CqEntry {
            context: r.context,
            flags: recv_flags(r.tagged),
            len: n,
            tag: if r.tagged { h.tag } else { 0 },
            ..CqEntry::default()
        };
        if h.flags & F_DATA != 0 {
            entry.flags |= CompletionFlags::REMOTE_CQ_DATA;
            entry.data = h.data;
        }
        if data.len() > r.len {
            self.failed(
                true,
                CqErrEntry {
                    entry,
                    olen: data.len() - r.len,
                    err: ErrorKind::Trunc,
                    prov_errno: 0,
                    err_text: format!(
                        "verbs: a {}-byte message was truncated to the {}-byte receive",
                        data.len(),
                        r.len
                    ),
                    src_addr: None,
                },
            );
        } else if r.report {
            self.rx_done(entry, src);
        } else if let Some(c) = self.binds().and_then(|b| b.cntr_recv.as_ref()) {
            c.add(1);
        }
    }

    /// Starts the RDMA read of a rendezvous message into a receive.
    pub(super) fn start_read(&self, st: &mut State, r: Recv, hdr: Hdr, conn: usize, src: FiAddr) {
        let total = usize::try_from(hdr.len).unwrap_or(usize::MAX);
        let n = total.min(r.len);
        let fail = |this: &Engine, st: &mut State, err: Error| {
            this.failed(
                true,
                CqErrEntry {
                    entry: CqEntry {
                        context: r.context,
                        flags: recv_flags(r.tagged),
                        tag: if r.tagged { hdr.tag } else { 0 },
                        ..CqEntry::default()
                    },
                    olen: 0,
                    err: err.kind(),
                    prov_errno: 0,
                    err_text: err.detail().to_string(),
                    src_addr: None,
                },
            );
            this.send_control(
                st,
                conn,
                Hdr {
                    op: OP_FIN,
                    flags: F_ERROR,
                    id: hdr.id,
                    ..Hdr::default()
                },
            );
        };
        let (addr, bounce) = match r.pieces() {
            [one] => (one.addr, None),
            _ => {
                let mut v = vec![0u8; n];
                (v.as_mut_ptr(), Some(v))
            }
        };
        // SAFETY: the receive buffer (or the bounce vector, kept in the
        // read op) stays valid until the read completes.
        let mr = match unsafe {
            Mr::register(
                &self.domain.pd,
                addr,
                n.max(1),
                fabric_sys::ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE,
            )
        } {
            Ok(m) => m,
            Err(e) => return fail(self, st, e),
        };
        let Some(c) = st.conns.get(conn).filter(|c| c.state == ConnState::Up) else {
            return fail(
                self,
                st,
                Error::new(
                    ErrorKind::ConnReset,
                    "verbs: the sender's connection is down",
                ),
            );
        };
        let qp = c.qp();
        let mut sge = ibv_sge {
            addr: addr as u64,
            length: n as u32,
            lkey: mr.lkey(),
        };
        let idx = st.reads.insert(ReadOp {
            recv: r,
            hdr,
            n,
            src,
            conn,
            _mr: mr,
            bounce,
        });
        let mut wr = ibv_send_wr {
            wr_id: K_READ | idx as u64,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ibv_wr_opcode::IBV_WR_RDMA_READ,
            send_flags: ibv_send_flags::IBV_SEND_SIGNALED,
            ..ibv_send_wr::default()
        };
        wr.wr.rdma.remote_addr = hdr.addr;
        wr.wr.rdma.rkey = hdr.rkey;
        // SAFETY: live QP of an established connection; the local memory is
        // registered and kept by the read op.
        if let Err(e) = unsafe { verbs::post_send(qp, &mut wr) } {
            let _ = st.reads.remove(idx);
            fail(self, st, from_errno(e, "ibv_post_send (RDMA read)"));
        }
    }

    pub(super) fn read_done(&self, st: &mut State, idx: usize, wc: &ibv_wc) {
        let Some(op) = st.reads.remove(idx) else {
            return;
        };
        let r = op.recv;
        let mut entry = CqEntry {
            context: r.context,
            flags: recv_flags(r.tagged),
            len: op.n,
            tag: if r.tagged { op.hdr.tag } else { 0 },
            ..CqEntry::default()
        };
        if op.hdr.flags & F_DATA != 0 {
            entry.flags |= CompletionFlags::REMOTE_CQ_DATA;
            entry.data = op.hdr.data;
        }
        let ok = wc.status == ibv_wc_status::IBV_WC_SUCCESS;
        self.send_control(
            st,
            op.conn,
            Hdr {
                op: OP_FIN,
                flags: if ok { 0 } else { F_ERROR },
                id: op.hdr.id,
                ..Hdr::default()
            },
        );
        if !ok {
            self.failed(true, wc_error(wc, entry));
            return;
        }
        if let Some(b) = &op.bounce {
            // SAFETY: the receive's pieces are writable.
            unsafe { scatter(r.pieces(), b) };
        }
        let total = usize::try_from(op.hdr.len).unwrap_or(usize::MAX);
        if total > r.len {
            self.failed(
                true,
                CqErrEntry {
                    entry,
                    olen: total - r.len,
                    err: ErrorKind::Trunc,
                    prov_errno: 0,
                    err_text: format!(
                        "verbs: a {total}-byte message was truncated to the {}-byte receive",
                        r.len
                    ),
                    src_addr: None,
                },
            );
        } else if r.report {
            self.rx_done(entry, op.src);
        } else if let Some(c) = self.binds().and_then(|b| b.cntr_recv.as_ref()) {
            c.add(1);
        }
    }

    pub(super) fn fin(&self, st: &mut State, h: &Hdr) {
        let Some(r) = usize::try_from(h.id).ok().and_then(|i| st.rndv.remove(i)) else {
            return;
        };
        let entry = CqEntry {
            context: r.context,
            flags: r.flags,
            len: r.len,
            ..CqEntry::default()
        };
        if h.flags & F_ERROR != 0 {
            self.failed(
                false,
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
            self.tx_ok(entry, r.report);
        }
    }

    /// Posts a receive (or delivers the unexpected message it matches).
    ///
    /// # Safety
    ///
    /// As [`MsgOps::recvmsg`].
    pub(super) unsafe fn recv(
        &self,
        msg: &Msg<'_>,
        flags: OpFlags,
        tagged: bool,
        report: bool,
    ) -> Result<()> {
        if msg.iov.len() > IOV_MAX {
            return Err(Error::inval(format!(
                "verbs: {} IO vector pieces; the limit is {IOV_MAX}",
                msg.iov.len()
            )));
        }
        if flags.contains(OpFlags::MULTI_RECV) {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "verbs: FI_MULTI_RECV is not supported",
            ));
        }
        let mut iov = [IoVec {
            addr: std::ptr::null_mut(),
            len: 0,
        }; IOV_MAX];
        iov[..msg.iov.len()].copy_from_slice(msg.iov);
        let r = Recv {
            context: msg.context,
            iov,
            n: msg.iov.len(),
            len: iov_len(msg.iov)?,
            tagged,
            report,
        };
        let mut st = lock(&self.state);
        let (tag, ignore) = if tagged {
            (msg.tag, msg.ignore)
        } else {
            (0, 0)
        };
        if tagged && flags.intersects(OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD) {
            return self.peek_claim(&mut st, r, msg, flags);
        }
        let m = if tagged { &mut st.tagged } else { &mut st.msg };
        if let Some((p, u)) = m.post(Posted {
            tag,
            ignore,
            src: msg.addr,
            recv: r,
        }) {
            self.take_unexpected(&mut st, p.recv, u);
        }
        Ok(())
    }

    pub(super) fn take_unexpected(&self, st: &mut State, r: Recv, u: Unexpected<Unex>) {
        let src = u.src;
        match u.msg {
            Unex::Eager { data, hdr } => {
                st.unexpected_bytes = st.unexpected_bytes.saturating_sub(data.len() + 64);
                self.deliver_eager(&r, &hdr, &data, src);
            }
            Unex::Rts { hdr, conn } => {
                st.unexpected_bytes = st.unexpected_bytes.saturating_sub(64);
                self.start_read(st, r, hdr, conn, src);
            }
        }
    }

    pub(super) fn peek_claim(
        &self,
        st: &mut State,
        r: Recv,
        msg: &Msg<'_>,
        flags: OpFlags,
    ) -> Result<()> {
        let entry_of = |h: &Hdr| {
            let mut e = CqEntry {
                context: r.context,
                flags: recv_flags(true),
                len: usize::try_from(h.len).unwrap_or(usize::MAX),
                tag: h.tag,
                ..CqEntry::default()
            };
            if h.flags & F_DATA != 0 {
                e.flags |= CompletionFlags::REMOTE_CQ_DATA;
                e.data = h.data;
            }
            e
        };
        if flags.contains(OpFlags::PEEK) {
            // PEEK|DISCARD (with or without CLAIM) takes and drops the
            // message, as tcp and shm (the kit's receive engine) do.
            let found = if flags.contains(OpFlags::DISCARD) {
                st.tagged
                    .take_unexpected(msg.tag, msg.ignore, msg.addr)
                    .map(|u| {
                        let found = (entry_of(u.msg.hdr()), u.src);
                        self.discard(st, u);
                        found
                    })
            } else {
                let claim = flags.contains(OpFlags::CLAIM).then_some(r.context);
                st.tagged
                    .peek(msg.tag, msg.ignore, msg.addr, claim)
                    .map(|u| (entry_of(u.msg.hdr()), u.src))
            };
            match found {
                Some((e, src)) => self.rx_done(e, src),
                None => self.failed(
                    true,
                    CqErrEntry {
                        entry: CqEntry {
                            context: r.context,
                            flags: recv_flags(true),
                            ..CqEntry::default()
                        },
                        olen: 0,
                        err: ErrorKind::NoMsg,
                        prov_errno: 0,
                        err_text: "verbs: no message matches the peek".into(),
                        src_addr: None,
                    },
                ),
            }
            return Ok(());
        }
        // FI_CLAIM (with or without FI_DISCARD).
        let Some(u) = st.tagged.claim(r.context) else {
            return Err(Error::new(
                ErrorKind::NoMsg,
                "verbs: no message was claimed with this context",
            ));
        };
        if flags.contains(OpFlags::DISCARD) {
            let (e, src) = (entry_of(u.msg.hdr()), u.src);
            self.discard(st, u);
            // The message's source, as on tcp and shm.
            self.rx_done(CqEntry { len: 0, ..e }, src);
        } else {
            self.take_unexpected(st, r, u);
        }
        Ok(())
    }

    pub(super) fn discard(&self, st: &mut State, u: Unexpected<Unex>) {
        match u.msg {
            Unex::Eager { data, .. } => {
                st.unexpected_bytes = st.unexpected_bytes.saturating_sub(data.len() + 64);
            }
            Unex::Rts { hdr, conn } => {
                st.unexpected_bytes = st.unexpected_bytes.saturating_sub(64);
                // Release the sender.
                self.send_control(
                    st,
                    conn,
                    Hdr {
                        op: OP_FIN,
                        id: hdr.id,
                        ..Hdr::default()
                    },
                );
            }
        }
    }
}
