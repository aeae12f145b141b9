//! An endpoint's connections: adding one to the epoll set, whom a
//! connection's frames come from, connection management frames (MSG), and
//! what a connection's failure ends (everything started on it, with an
//! error completion each).

use fabric_core::kit::binds::Binds;
use fabric_core::objects::FiAddr;
use fabric_core::{Address, Error, ErrorKind, Result};

use super::core::{EpInner, Kind, State, proto, usize_of};
use crate::conn::{Conn, Done, Pending, RndvRecv, Sink};
use crate::wire::{Frame, Op};

impl EpInner {
    /// Keeps a new connection and adds its socket to the epoll set; its
    /// number.
    pub(crate) fn add_conn(&self, st: &mut State, conn: Conn) -> Result<u32> {
        let cid = st.conns.insert(conn).ok_or_else(|| {
            Error::new(
                ErrorKind::Again,
                "tcp: the endpoint has as many connections as it can number",
            )
        })?;
        let added = match st.conns.get(&cid) {
            Some(c) => self.poller.add(c.fd(), self.token(cid)),
            None => Ok(()),
        };
        if let Err(e) = added {
            st.conns.remove(&cid);
            return Err(e);
        }
        Ok(cid)
    }

    /// The AV handle of a connection's peer.
    pub(super) fn source(&self, st: &mut State, b: &Binds, cid: u32) -> FiAddr {
        let Some(c) = st.conns.get_mut(&cid) else {
            return FiAddr::NOTAVAIL;
        };
        if self.kind == Kind::Rdm {
            if let (Some(peer), Some(av)) = (c.peer, &b.av) {
                // Asked again once the AV changed: a removed peer is
                // FI_ADDR_NOTAVAIL (fi_av(3)), an inserted one has a handle.
                let now = av.changes();
                if c.src_gen != now {
                    c.src = av.reverse(&Address::from(peer));
                    c.src_gen = now;
                }
            }
        }
        c.src
    }

    /// A connection management frame (MSG): its private data is gathered.
    pub(super) fn on_cm(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let plen = f.header.payload_len;
        let v = Vec::with_capacity(usize_of(plen));
        if plen == 0 {
            self.cm_frame(st, b, cid, f, v)?;
        } else {
            self.set_cur(st, cid, f, Sink::Private(v));
        }
        Ok(())
    }

    /// A connection management frame (MSG) is complete.
    pub(super) fn cm_frame(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        data: Vec<u8>,
    ) -> Result<()> {
        match f.header.op {
            Op::ConnAccept => self.msg_on_accept(st, b, cid, f, data),
            Op::ConnReject => self.msg_on_reject(st, b, cid, f, data),
            op => Err(proto(format!("tcp: {op} on an active endpoint"))),
        }
    }

    /// A connection failed: everything started on it completes with an
    /// error, it is dropped, and its peer reconnects on the next send.
    pub(crate) fn fail_conn(&self, st: &mut State, b: &Binds, cid: u32, err: &Error) {
        let Some(mut conn) = st.conns.remove(&cid) else {
            return;
        };
        tracing::debug!(conn = cid, error = %err, "tcp: connection failed");
        if let Some(key) = conn.peer {
            let mut fail_backlog = false;
            if let Some(p) = st.peers.get_mut(&key) {
                if p.conn == Some(cid) {
                    p.conn = None;
                }
                if p.connecting == Some(cid) {
                    p.connecting = None;
                    fail_backlog = p.conn.is_none();
                }
            }
            if fail_backlog {
                self.fail_backlog(st, b, key, err);
            }
            if st
                .peers
                .get(&key)
                .is_some_and(|p| p.conn.is_none() && p.connecting.is_none() && p.backlog.is_empty())
            {
                st.peers.remove(&key);
            }
        }
        for item in conn.tx.drain() {
            if let (_, Done::Tx(t)) = item.into_parts() {
                self.tx_complete(b, t, Some(err));
            }
        }
        for q in std::mem::take(&mut conn.held) {
            self.fail_queued(b, q, err);
        }
        let mut pending: Vec<(u64, Pending)> = conn.pending.drain().collect();
        pending.sort_by_key(|(id, _)| *id);
        for (_, p) in pending {
            self.tx_complete(b, p.done(), Some(err));
        }
        if let Some(cur) = conn.rx.cur.take() {
            match cur.sink {
                Sink::Recv(recv) => {
                    let tagged = cur.frame.header.op == Op::Tagged;
                    st.rx.fail(b, recv, tagged, err);
                }
                Sink::Rndv(r) => st.rx.fail(b, r.recv, r.meta.tagged, err),
                Sink::Read { done, .. } | Sink::Fetch { done, .. } | Sink::Refusal { done, .. } => {
                    self.tx_complete(b, done, Some(err));
                }
                Sink::Unexp(v) => {
                    let len = usize_of(cur.frame.header.payload_len);
                    st.unexp_reading = st.unexp_reading.saturating_sub(len);
                    st.rx.give_buf(v);
                }
                _ => {}
            }
        }
        let mut rndv: Vec<(u64, RndvRecv)> = conn.rndv.drain().collect();
        rndv.sort_by_key(|(id, _)| *id);
        for (_, r) in rndv {
            st.rx.fail(b, r.recv, r.meta.tagged, err);
        }
        // Rendezvous requests and stalled payloads of this connection are
        // gone with it; its buffered messages stay deliverable.
        st.rx.peer_gone(self.token(cid));
        if self.kind == Kind::Msg {
            self.msg_conn_lost(st, b, cid, err);
        }
    }
}
