//! RDM connections: made on demand through rdma_cm (address, route, request; the accepting side is up at the first message), their backlog, failure, and control messages.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Engine {
    /// The depth of each connection's send queue.
    pub(super) fn sq_depth(&self) -> usize {
        QP_DEPTH.min(self.domain.limits.max_qp_wr.max(1) as u32) as usize
    }

    /// Whether connection `conn` may take one more work request: its send
    /// queue has room, and so has the endpoint's CQ for the completion
    /// (the CQ is shared by every connection's send queue and the
    /// receive queue: an overflow would lose completions).
    pub(super) fn room(&self, st: &State, conn: usize) -> bool {
        st.posted_all < self.wr_budget
            && st
                .conns
                .get(conn)
                .is_some_and(|c| c.posted < self.sq_depth())
    }

    pub(super) fn new_qp(&self, id: &mut CmId) -> Result<()> {
        let mut caps = QpCaps {
            max_send_wr: self.sq_depth() as u32,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        id.create_rc_qp(
            &self.domain.pd,
            &self.cq,
            &self.cq,
            Some(&self.srq),
            &mut caps,
        )
    }

    pub(super) fn conn_param<'a>(&self, data: &'a [u8]) -> ConnParam<'a> {
        let l = &self.domain.limits;
        ConnParam {
            data,
            responder_resources: l.max_rd_atom.clamp(1, RD_ATOMIC),
            initiator_depth: l.max_init_rd_atom.clamp(1, RD_ATOMIC),
        }
    }

    /// The outgoing connection to `dest`, established or being made
    /// (work for it then waits in its backlog); starts one when there is
    /// none. A connection that failed returns its error once.
    pub(super) fn conn_to(&self, st: &mut State, dest: FiAddr) -> Result<usize> {
        let addr = self.av()?.lookup(dest)?;
        let peer = addr
            .socket_addr()
            .ok_or_else(|| Error::inval(format!("verbs: `{addr}` is not an IP socket address")))?;
        if st
            .out
            .get(&peer)
            .is_some_and(|&i| st.conns[i].state != ConnState::Up)
        {
            // Move the connection along even if the application does not
            // read its CQs between operations.
            self.progress_locked(st, true)?;
        }
        if let Some(&i) = st.out.get(&peer) {
            if st.conns[i].state != ConnState::Down {
                return Ok(i);
            }
            st.out.remove(&peer);
        }
        if let Some(e) = st.failed.remove(&peer) {
            return Err(e);
        }
        let id = CmId::new(&self.channel)?;
        id.bind(&SocketAddr::new(self.name.ip(), 0))?;
        id.resolve_addr(&peer)?;
        let i = st.conns.len();
        st.by_id.insert(id.key(), i);
        st.conns.push(Conn {
            id,
            peer: Some(peer),
            outgoing: true,
            state: ConnState::Resolving,
            backlog: VecDeque::new(),
            inflight: 0,
            paused: false,
            parked: Vec::new(),
            posted: 0,
            heard: false,
            reads: VecDeque::new(),
            reads_posted: 0,
            control_posted: 0,
        });
        st.out.insert(peer, i);
        Ok(i)
    }

    pub(super) fn conn_failed(&self, st: &mut State, i: usize, err: Error) {
        self.conn_down(st, i, &err);
        self.fail_rndv(st, i, &err);
        // Unexpected rendezvous announcements from it cannot be read.
        self.rx_peer_gone(st, i);
    }

    /// Connection `i` is down: what waited for it fails, and an outgoing
    /// one is forgotten (with its error kept for the next operation).
    fn conn_down(&self, st: &mut State, i: usize, err: &Error) {
        let Some(c) = st.conns.get_mut(i) else { return };
        c.state = ConnState::Down;
        let backlog = std::mem::take(&mut c.backlog);
        for d in backlog {
            self.fail_deferred(st, d, err);
        }
        self.fail_queued_reads(st, i, err);
        let Some(c) = st.conns.get_mut(i) else { return };
        if let Some(p) = c.peer {
            if c.outgoing && st.out.get(&p) == Some(&i) {
                st.out.remove(&p);
                st.failed.insert(p, err.clone());
            }
        }
    }

    /// Rendezvous sends waiting for a FIN on connection `i` fail.
    fn fail_rndv(&self, st: &mut State, i: usize, err: &Error) {
        let waiting: Vec<usize> = (0..st.rndv.items.len())
            .filter(|&k| st.rndv.get(k).is_some_and(|r| r.conn == i))
            .collect();
        for k in waiting {
            if let Some(r) = st.rndv.remove(k) {
                self.op_done(st, r.conn);
                self.tx_failed(
                    st,
                    CqErrEntry {
                        entry: CqEntry {
                            context: r.context,
                            flags: r.flags,
                            len: r.len,
                            ..CqEntry::default()
                        },
                        olen: 0,
                        err: err.kind(),
                        prov_errno: 0,
                        err_text: format!(
                            "verbs: the connection to the peer broke: {}",
                            err.detail()
                        ),
                        src_addr: None,
                    },
                );
            }
        }
    }

    /// A work request on connection `i` failed (`status`, not a flush):
    /// its RC queue pair is in the error state for good. The connection
    /// is torn down as if the peer had disconnected: the peer sees
    /// DISCONNECTED, rendezvous sends waiting for a FIN on it fail, its
    /// kept messages stay deliverable, the work requests still on its
    /// queue pair come back flushed (each failing once, `Canceled`), and
    /// the next operation to the peer, from either side, connects again.
    pub(super) fn conn_broken(&self, st: &mut State, i: usize, status: u32) {
        let Some(c) = st.conns.get(i) else { return };
        if c.state == ConnState::Down {
            return;
        }
        tracing::debug!(
            status = status_text(status),
            "verbs: RDM connection broken; the next operation reconnects"
        );
        let disconnected = c.id.disconnect().is_ok();
        if let Some(p) = c.peer {
            if st.out.get(&p) == Some(&i) {
                st.out.remove(&p);
            }
        }
        st.closing.push(i);
        let err = Error::new(
            ErrorKind::ConnReset,
            format!("verbs: the connection broke ({})", status_text(status)),
        );
        // Not a standing failure: `out` no longer names it, so none is kept.
        self.conn_down(st, i, &err);
        // Its rendezvous sends fail when the disconnect is through (the
        // peer then dropped their announcements): DISCONNECTED, on the
        // peer's answer or the CM's timeout. Unless the peer answered
        // nothing at all (the transport's retries ran out: its host or
        // the link is gone): the disconnect would then wait for the CM's
        // timeout, a minute or more, for nothing. The queue pair is in
        // the error state, so nothing reads their buffers through it any
        // more.
        if !disconnected || status == RETRY_EXC {
            self.fail_rndv(st, i, &err);
        }
        self.rx_peer_gone(st, i);
    }

    /// The liveness sweep, at most every [`PROBE_IDLE`], from progress
    /// while rendezvous sends wait for their FIN. Such a send has nothing
    /// on the wire once its announcement is acknowledged, and a queue
    /// pair notices a dead peer only through a work request that goes
    /// unanswered: a peer whose host died would leave it waiting for
    /// ever. So a connection on which the application's operations wait,
    /// with no work request posted, from which nothing came for a whole
    /// interval, gets a probe: a zero-byte RDMA write (it names no
    /// memory and consumes nothing at the peer: IBA C9-88). A live peer
    /// acknowledges it; for a dead one it fails after the transport's
    /// retries ([`RETRY_COUNT`](crate::raw::cm::RETRY_COUNT) + 1 ACK
    /// timeouts) with `IBV_WC_RETRY_EXC_ERR`, which breaks the connection
    /// and fails what waited on it ([`Engine::conn_broken`]).
    pub(super) fn liveness(&self, st: &mut State) {
        let now = Instant::now();
        let since = now.saturating_duration_since(st.swept);
        if since < PROBE_IDLE {
            return;
        }
        // The flags cover the interval since the last sweep only if that
        // ran one interval ago (there are no sweeps while no send waits).
        let fresh = since < 2 * PROBE_IDLE;
        st.swept = now;
        for (i, c) in st.conns.iter_mut().enumerate() {
            let heard = std::mem::take(&mut c.heard);
            if !fresh || heard || c.state != ConnState::Up || c.inflight == 0 || c.posted > 0 {
                continue;
            }
            if st.posted_all >= self.wr_budget {
                // Work requests are in flight: their completions (or
                // failures) tell as much as a probe.
                continue;
            }
            let mut wr = SendWr::new(K_PROBE | i as u64, Opcode::Write, SgeList::<1>::default())
                .remote(0, 0)
                .flags(SendFlags::SIGNALED);
            match c.id.post_send(&mut wr) {
                Ok(()) => {
                    c.posted += 1;
                    st.posted_all += 1;
                }
                Err(e) => tracing::debug!(errno = e, "verbs: cannot post a liveness probe"),
            }
        }
    }

    /// Destroys the queue pairs of torn-down connections whose send work
    /// has all come back (flushed), and forgets their queue pair numbers.
    /// Called with the CQ just drained: the queue pair is in the error
    /// state, so no completion of it is left behind (its receives use the
    /// shared queue and are not flushed).
    pub(super) fn reap_closed(&self, st: &mut State) {
        let closing = std::mem::take(&mut st.closing);
        for i in closing {
            let Some(c) = st.conns.get_mut(i) else {
                continue;
            };
            if c.posted > 0 {
                st.closing.push(i);
                continue;
            }
            if let Some(qpn) = c.id.qp_num() {
                c.id.destroy_qp();
                if st.by_qp.get(&qpn) == Some(&i) {
                    st.by_qp.remove(&qpn);
                }
            }
        }
    }

    /// The connection is established (its event arrived, or, on the
    /// accepting side, a message did: the peer is then ready to receive,
    /// and the accepted QP was ready to send since the accept): posts
    /// what waited for it.
    pub(super) fn mark_up(&self, st: &mut State, i: usize) {
        let Some(c) = st.conns.get_mut(i) else { return };
        c.heard = true;
        if matches!(c.state, ConnState::Up | ConnState::Down) {
            // A message polled after a teardown does not revive it.
            return;
        }
        c.state = ConnState::Up;
        self.drain(st, i);
    }

    pub(super) fn handle_cm(&self, st: &mut State, mut e: CmEvent) {
        if e.kind == CmEventKind::ConnectRequest {
            let Some(mut id) = e.take_request(&self.channel) else {
                return;
            };
            let peer = decode_name(&e.data);
            if let Err(err) = self
                .new_qp(&mut id)
                .and_then(|()| id.accept(&self.conn_param(&[])))
            {
                tracing::debug!(error = %err, "verbs: RDM endpoint cannot accept a connection");
                let _ = id.reject(&[]);
                return;
            }
            let i = st.conns.len();
            st.by_id.insert(id.key(), i);
            if let Some(qpn) = id.qp_num() {
                st.by_qp.insert(qpn, i);
            }
            st.conns.push(Conn {
                id,
                peer,
                outgoing: false,
                state: ConnState::Connecting,
                backlog: VecDeque::new(),
                inflight: 0,
                paused: false,
                parked: Vec::new(),
                posted: 0,
                heard: false,
                reads: VecDeque::new(),
                reads_posted: 0,
                control_posted: 0,
            });
            return;
        }
        let Some(&i) = st.by_id.get(&e.id_key()) else {
            return;
        };
        match e.kind {
            CmEventKind::AddrResolved => {
                if let Err(err) = st.conns[i].id.resolve_route() {
                    self.conn_failed(st, i, err);
                }
            }
            CmEventKind::RouteResolved => {
                let name = encode_name(&self.name);
                let r = {
                    let c = &mut st.conns[i];
                    self.new_qp(&mut c.id)
                        .and_then(|()| c.id.connect(&self.conn_param(&name)))
                };
                match r {
                    Ok(()) => {
                        st.conns[i].state = ConnState::Connecting;
                        if let Some(qpn) = st.conns[i].id.qp_num() {
                            st.by_qp.insert(qpn, i);
                        }
                    }
                    Err(err) => self.conn_failed(st, i, err),
                }
            }
            CmEventKind::Established => self.mark_up(st, i),
            CmEventKind::Rejected => self.conn_failed(
                st,
                i,
                Error::new(
                    ErrorKind::ConnRefused,
                    format!(
                        "verbs: the peer refused the connection (reason {})",
                        e.status
                    ),
                ),
            ),
            CmEventKind::AddrError
            | CmEventKind::RouteError
            | CmEventKind::Unreachable
            | CmEventKind::ConnectError => self.conn_failed(
                st,
                i,
                Error::new(
                    ErrorKind::HostUnreach,
                    format!("verbs: {} (status {})", e.name(), e.status),
                ),
            ),
            CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                let _ = st.conns[i].id.disconnect();
                if st.conns[i].state == ConnState::Down {
                    // Torn down here (a broken queue pair), and now the
                    // peer has dropped what it kept from it: rendezvous
                    // sends that waited for a FIN fail. The rest failed at
                    // the teardown, and the peer may have a new connection
                    // (or a standing failure) by now.
                    self.fail_rndv(
                        st,
                        i,
                        &Error::new(ErrorKind::ConnReset, "verbs: the connection broke"),
                    );
                    return;
                }
                st.closing.push(i);
                st.conns[i].state = ConnState::Down;
                let peer = st.conns[i].peer;
                if let Some(p) = peer {
                    if st.out.get(&p) == Some(&i) {
                        st.out.remove(&p);
                    }
                }
                self.conn_failed(
                    st,
                    i,
                    Error::new(ErrorKind::ConnReset, "verbs: the peer disconnected"),
                );
                // A later operation may reconnect: not a standing failure.
                if let Some(p) = peer {
                    st.failed.remove(&p);
                }
            }
            _ => {}
        }
    }

    /// Posts a send of buffer `slot` (header and eager data already in
    /// it), or keeps it until the connection is made.
    /// An application's send (`fence`: FI_FENCE) waits behind earlier
    /// work and, fenced, for the operations before it to complete; a
    /// control message only for the connection.
    pub(super) fn post_buf(
        &self,
        st: &mut State,
        conn: usize,
        slot: usize,
        bytes: usize,
        fence: bool,
    ) -> Result<()> {
        let app = st.tx.get(slot).is_some_and(|t| t.kind != TxKind::Control);
        let room = self.room(st, conn);
        let c = st
            .conns
            .get_mut(conn)
            .ok_or_else(|| Error::new(ErrorKind::NotConn, "verbs: no such connection"))?;
        match c.state {
            ConnState::Up if !app || !c.must_wait(fence) => {}
            ConnState::Up | ConnState::Resolving | ConnState::Connecting => {
                c.backlog.push_back(Deferred::Buf { slot, bytes, fence });
                return Ok(());
            }
            ConnState::Down => {
                return Err(Error::new(
                    ErrorKind::NotConn,
                    "verbs: the connection is down",
                ));
            }
        }
        if !room {
            return Err(again("verbs: the send queue is full"));
        }
        self.post_buf_now(&c.id, slot, bytes)?;
        c.posted += 1;
        st.posted_all += 1;
        if app {
            c.inflight += 1;
        }
        Ok(())
    }

    pub(super) fn post_buf_now(&self, id: &CmId, slot: usize, bytes: usize) -> Result<()> {
        // The buffer is registered and owned by this slot until its
        // completion.
        let mut wr = SendWr::new(
            K_TX | slot as u64,
            Opcode::Send,
            SgeList::<1>::one(self.tx_pool.sge(slot, bytes)),
        )
        .flags(SendFlags::SIGNALED);
        match id.post_send(&mut wr) {
            Ok(()) => Ok(()),
            Err(libc::ENOMEM) => Err(Error::again()),
            Err(e) => Err(from_errno(e, "ibv_post_send")),
        }
    }

    /// Sends a control header (FIN) now, or queues it until a send buffer
    /// is free and its connection's send queue has room.
    pub(super) fn send_control(&self, st: &mut State, conn: usize, h: Hdr) {
        let full = match st.conns.get(conn) {
            Some(c) => c.control_posted >= CONTROL_WINDOW || !self.room(st, conn),
            // `post_buf` says why.
            None => false,
        };
        let Some(slot) = (if full { None } else { st.tx_free.pop() }) else {
            st.control.push_back((conn, h));
            return;
        };
        // The slot's buffer is ours until its completion; BUF >= HDR.
        self.tx_pool.write(slot, 0, &h.encode());
        st.tx[slot] = TxBuf {
            kind: TxKind::Control,
            context: 0,
            flags: CompletionFlags::empty(),
            len: 0,
            report: false,
            rndv: 0,
            conn,
        };
        match self.post_buf(st, conn, slot, HDR, false) {
            Ok(()) => {
                if let Some(c) = st.conns.get_mut(conn) {
                    c.control_posted += 1;
                }
            }
            Err(e) => {
                st.tx_free.push(slot);
                if e.kind() == ErrorKind::Again {
                    st.control.push_back((conn, h));
                } else {
                    // The connection is gone: its sender has no use for it.
                    tracing::debug!(error = %e, "verbs: cannot send a control message");
                }
            }
        }
    }

    /// Sends the queued control messages that can go now; the others stay
    /// queued, in order.
    pub(super) fn flush_control(&self, st: &mut State) {
        for _ in 0..st.control.len() {
            if st.tx_free.is_empty() {
                break;
            }
            let Some((conn, h)) = st.control.pop_front() else {
                break;
            };
            self.send_control(st, conn, h);
        }
    }
}
