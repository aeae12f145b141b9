//! The receiving side of an endpoint: reading a connection and decoding
//! its frames, messages (eager, buffered unexpected, left in a paused
//! socket) and rendezvous messages into receives, and the work the kit's
//! receive engine ([`fabric_core::kit::rx`]) asks back of the transport.
//! Posting, matching, FI_PEEK / FI_CLAIM / FI_DISCARD, multi-receive,
//! cancel and the unexpected budget are the engine's.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use fabric_core::kit::binds::Binds;
use fabric_core::kit::rx::{Action, Entry, Held, Meta, RecvId};
use fabric_core::objects::Msg;
use fabric_core::{Error, ErrorKind, OpFlags, Result};

use super::conns::Conns;
use super::core::{EpInner, Kind, State, proto, u64_of, usize_of};
use super::srx::owner;
use crate::conn::{
    Conn, Cur, DIRECT_READ_MIN, Done, Landed, Phase, Remote, RndvRecv, Sink, Src, copy_in,
};
use crate::progress::{conn_of, ep_of};
use crate::sys;
use crate::wire::{Event, Ext, Flags, Frame, Op, Want};

/// Bytes read when the next frame is expected to carry a large payload:
/// enough for its headers and a little more.
const SMALL_READ: usize = 256;

/// Socket reads per connection per progress call (other connections get
/// their turn; level-triggered epoll reports the rest).
const READS_PER_CALL: usize = 16;

impl EpInner {
    /// Posts a receive (untagged or tagged), with FI_PEEK / FI_CLAIM /
    /// FI_DISCARD and FI_MULTI_RECV.
    pub(crate) fn post_recv(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        self.own_receives()?;
        let b = self.bound()?;
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.msg.closed && self.kind == Kind::Msg {
            return Err(Error::new(
                ErrorKind::Shutdown,
                "tcp: the connection is shut down",
            ));
        }
        let r = st.rx.post(b, msg, flags, tagged);
        self.finish_pass(st, b);
        r
    }

    /// Cancels a posted receive by context.
    pub(crate) fn cancel(&self, context: u64) -> Result<()> {
        self.own_receives()?;
        let b = self.bound()?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let r = st.rx.cancel(b, context);
        self.finish_pass(st, b);
        r
    }

    /// Refuses the endpoint's own receive calls once it receives through
    /// a shared receive context.
    #[inline]
    fn own_receives(&self) -> Result<()> {
        if self.srx.get().is_some() {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "tcp: the endpoint receives through its shared receive context; post there",
            ));
        }
        Ok(())
    }

    /// Sets `FI_OPT_MIN_MULTI_RECV`.
    pub(crate) fn set_min_multi_recv(&self, bytes: usize) {
        self.min_multi_recv.store(bytes, Ordering::Relaxed);
        self.lock().rx.set_min_multi_recv(bytes);
    }

    /// Does what the receive engine asks of the transport: fetch a
    /// rendezvous message or a stalled payload into a receive, release
    /// one nobody wants, acknowledge a delivered message, pause or resume
    /// a connection.
    pub(super) fn rx_actions(&self, st: &mut State, b: &Binds) {
        while let Some(a) = st.rx.next_action() {
            // The engine of a shared receive context also holds work about
            // the senders of the other endpoints bound to it: theirs to do.
            if ep_of(owner(&a)) != self.ep_no {
                st.foreign.push(a);
                continue;
            }
            match a {
                Action::Fetch { recv, meta, remote } => match remote {
                    Remote::Rndv { conn, id, ack } => {
                        self.accept_rndv(st, b, conn_of(conn), id, recv, meta, ack);
                    }
                    Remote::Stalled { conn } => {
                        if !self.unstall(st, conn_of(conn), Sink::Recv(recv)) {
                            let err = Error::new(ErrorKind::ConnReset, "tcp: the sender went away");
                            st.rx.fail(b, recv, meta.tagged, &err);
                        }
                    }
                },
                Action::Release(Remote::Rndv { conn, id, .. }) => {
                    let cts = Frame::cts(id, 0, None);
                    self.push_frame(st, b, conn_of(conn), &cts, Src::None, Done::None);
                }
                Action::Release(Remote::Stalled { conn }) => {
                    self.unstall(st, conn_of(conn), Sink::Discard);
                }
                Action::Ack((conn, id)) => {
                    let ack = Frame::ack(id, None);
                    self.push_frame(st, b, conn_of(conn), &ack, Src::None, Done::None);
                }
                Action::Pause(conn) => {
                    let conn = conn_of(conn);
                    if let Some(c) = st.conns.get_mut(&conn) {
                        c.rx.paused = true;
                        self.rewatch(c, conn);
                    }
                }
                Action::Resume(conn) => {
                    let conn = conn_of(conn);
                    if let Some(c) = st.conns.get_mut(&conn) {
                        c.rx.paused = false;
                        st.resume.push(conn);
                    }
                }
            }
        }
        self.cq_wait.store(st.rx.waits_for_cq(), Ordering::Relaxed);
    }

    /// Gives the payload a stalled connection left in its socket a
    /// destination (a receive, or none), so that reading goes on; `false`
    /// when the connection is gone or not stalled.
    pub(super) fn unstall(&self, st: &mut State, cid: u32, sink: Sink) -> bool {
        let Some(c) = st.conns.get_mut(&cid) else {
            return false;
        };
        match c.rx.cur.as_mut() {
            Some(cur) if matches!(cur.sink, Sink::Stalled) => {
                cur.sink = sink;
                st.resume.push(cid);
                true
            }
            _ => {
                debug_assert!(false, "connection {cid} holds no stalled payload");
                false
            }
        }
    }

    /// Accepts a rendezvous message into receive `recv`: clear to send,
    /// or complete at once when nothing is taken.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn accept_rndv(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        id: u64,
        recv: RecvId,
        meta: Meta,
        ack: Flags,
    ) {
        if !st.conns.contains_key(&cid) {
            let err = Error::new(ErrorKind::ConnReset, "tcp: the sender went away");
            st.rx.fail(b, recv, meta.tagged, &err);
            return;
        }
        let room = st.rx.recv(recv).map_or(0, |r| u64_of(r.buf.len()));
        let accept = meta.len.min(room);
        self.push_frame(
            st,
            b,
            cid,
            &Frame::cts(id, accept, None),
            Src::None,
            Done::None,
        );
        if accept == 0 {
            st.rx.complete(b, recv, meta);
            if !ack.is_empty() {
                self.push_frame(st, b, cid, &Frame::ack(id, None), Src::None, Done::None);
            }
            return;
        }
        if let Some(c) = st.conns.get_mut(&cid) {
            c.rndv.insert(
                id,
                RndvRecv {
                    recv,
                    meta,
                    accept,
                    got: 0,
                    ack,
                    frame_off: 0,
                },
            );
        }
    }

    /// Reads what a connection has, handling every frame; a failure is
    /// recorded in `st.dead`.
    pub(crate) fn read_conn(&self, st: &mut State, b: &Binds, cid: u32) {
        if let Err(e) = self.read_conn_inner(st, b, cid) {
            st.dead.push((cid, e));
            return;
        }
        // Answers may have completed what a fence waits for.
        if st.conns.get(&cid).is_some_and(|c| !c.held.is_empty()) {
            self.release_held(st, b, cid);
        }
    }

    pub(super) fn read_conn_inner(&self, st: &mut State, b: &Binds, cid: u32) -> Result<()> {
        let mut reads = 0;
        // The last read returned less than asked: the socket is (very
        // likely) empty, and level-triggered epoll reports what comes
        // later, so a read that would only say EAGAIN is skipped.
        let mut drained = false;
        loop {
            // Frames already in the read buffer.
            loop {
                let Some(conn) = st.conns.get_mut(&cid) else {
                    return Ok(());
                };
                if conn.rx.cur.is_none() && !conn.rx.tx_full && conn.tx.over_cap() {
                    // A peer that does not read its answers: read no more
                    // of its requests until they drain (`flush_one`).
                    conn.rx.tx_full = true;
                    self.rewatch(conn, cid);
                }
                if conn.rx.blocked() || conn.phase == Phase::Closing {
                    // Not read now; a reset peer (EPOLLERR and EPOLLHUP,
                    // which epoll always reports) fails the connection
                    // instead of waking its waiter for ever.
                    if let Ok(Some(e)) = conn.sock.take_error() {
                        return Err(e.into());
                    }
                    return Ok(());
                }
                let rx = &mut conn.rx;
                if rx.pos >= rx.len {
                    break;
                }
                let engine = &st.rx;
                let input = rx.buf.get(rx.pos..rx.len).unwrap_or_default();
                let (used, ev) = rx.dec.feed(input)?;
                rx.pos += used;
                match ev {
                    None => {}
                    Some(Event::Frame(f)) => {
                        rx.last_large = f.header.payload_len >= DIRECT_READ_MIN;
                        self.on_frame(st, b, cid, &f)?;
                    }
                    Some(Event::Payload { data, remaining }) => {
                        let Some(cur) = rx.cur.as_mut() else {
                            return Err(proto("tcp: payload without a frame"));
                        };
                        cur.sink.write(cur.got, data, &self.mr, engine);
                        cur.got += u64_of(data.len());
                        if remaining == 0 {
                            self.on_payload_done(st, b, cid)?;
                        }
                    }
                }
                if st.rx.has_actions() {
                    // A pause must hold before the next frame is read.
                    self.rx_actions(st, b);
                }
            }
            if reads >= READS_PER_CALL || drained {
                return Ok(());
            }
            reads += 1;
            let Some(conn) = st.conns.get_mut(&cid) else {
                return Ok(());
            };
            let engine = &st.rx;
            let Conn { sock, rx, rndv, .. } = conn;
            let fd = sock.as_fd();
            // A large payload with a known destination: straight into it.
            if let (Want::Payload(n), Some(cur)) = (rx.dec.want(), rx.cur.as_mut()) {
                if n >= DIRECT_READ_MIN {
                    let direct = cur.sink.recv_direct(fd, cur.got, n, &self.mr, engine);
                    if let Some((r, asked)) = direct {
                        match r {
                            Ok(0) => return Err(self.eof(rx)),
                            Ok(k) => {
                                drained = k < asked;
                                rx.dec.consume_payload(u64_of(k))?;
                                cur.got += u64_of(k);
                                if rx.dec.payload_remaining() == 0 {
                                    self.on_payload_done(st, b, cid)?;
                                }
                                continue;
                            }
                            Err(e) if sys::would_block(&e) => {
                                return Ok(());
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
            // After a large payload, or while rendezvous data is due, the
            // next frame is likely large too: read little, so that its
            // payload can go straight to its destination instead of through
            // the read buffer.
            if rx.buf.is_empty() {
                // A connection's read buffer exists once it has something
                // to read: silent sockets cost no buffer.
                rx.buf = vec![0u8; crate::conn::RBUF].into_boxed_slice();
            }
            let between = rx.cur.is_none();
            let want = if between && (rx.last_large || !rndv.is_empty()) {
                SMALL_READ
            } else {
                rx.buf.len()
            };
            match sys::recv_buf_errno(fd, rx.buf.get_mut(..want).unwrap_or_default()) {
                Ok(0) => return Err(self.eof(rx)),
                Ok(k) => {
                    rx.pos = 0;
                    rx.len = k;
                    drained = k < want;
                }
                Err(e) if sys::errno_would_block(e) => return Ok(()),
                Err(e) => return Err(std::io::Error::from_raw_os_error(e).into()),
            }
        }
    }

    /// The error for the end of a connection's stream.
    pub(super) fn eof(&self, rx: &crate::conn::Rx) -> Error {
        match rx.dec.eof() {
            Ok(()) if rx.cur.is_none() => Error::new(
                if self.kind == Kind::Msg {
                    ErrorKind::Shutdown
                } else {
                    ErrorKind::ConnReset
                },
                "tcp: the peer closed the connection",
            ),
            Ok(()) => Error::new(
                ErrorKind::ConnReset,
                "tcp: the peer closed the connection mid-frame",
            ),
            Err(e) => Error::new(ErrorKind::ConnReset, e.detail().to_string()),
        }
    }

    pub(super) fn set_cur(&self, st: &mut State, cid: u32, frame: &Frame, sink: Sink) {
        if let Some(c) = st.conns.get_mut(&cid) {
            c.rx.cur = Some(Cur {
                frame: *frame,
                sink,
                got: 0,
            });
        }
    }

    // ---------------------------------------------------------------
    // Message frames.

    /// An eager message: into the receive it matches (straight from the
    /// read buffer when the payload is there), else buffered within the
    /// budget, else left in the socket with the connection paused.
    pub(super) fn on_msg(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let plen = f.header.payload_len;
        let op = f.header.op;
        let tagged = op == Op::Tagged;
        let tag = f.header.tag;
        let src = self.source(st, b, cid);
        match st.rx.arrive(tagged, tag, src, plen) {
            Some(id) => {
                let whole = plen == 0 || {
                    let State { conns, rx, .. } = &mut *st;
                    let buf = rx.recv(id).map(|r| &r.buf);
                    take_inline(conns, cid, plen, |d| {
                        if let Some(buf) = buf {
                            copy_in(buf, 0, d);
                        }
                    })?
                };
                if whole {
                    self.msg_done(st, b, cid, f, Landed::Recv(id))?;
                } else {
                    self.set_cur(st, cid, f, Sink::Recv(id));
                }
            }
            None => {
                let len = usize_of(plen);
                let reading = len.saturating_add(st.unexp_reading);
                if plen == 0 || st.rx.admit(self.token(cid), reading) {
                    let mut v = st.rx.take_buf(len);
                    let whole = plen == 0
                        || take_inline(&mut st.conns, cid, plen, |d| v.extend_from_slice(d))?;
                    if whole {
                        self.msg_done(st, b, cid, f, Landed::Unexp(v))?;
                    } else {
                        st.unexp_reading += len;
                        self.set_cur(st, cid, f, Sink::Unexp(v));
                    }
                } else {
                    // Over budget (the engine pauses the
                    // connection): the payload stays in the socket
                    // until a receive takes it.
                    let data = f
                        .header
                        .flags
                        .contains(Flags::REMOTE_CQ_DATA)
                        .then_some(f.header.data);
                    let entry = Entry {
                        len: plen,
                        data,
                        peer: self.token(cid),
                        held: Held::Remote(Remote::Stalled {
                            conn: self.token(cid),
                        }),
                    };
                    st.rx.keep(tagged, tag, src, entry);
                    self.set_cur(st, cid, f, Sink::Stalled);
                }
            }
        }
        Ok(())
    }

    /// A rendezvous request: accepted into the receive it matches, else
    /// kept until one is posted.
    pub(super) fn on_rts(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let op = f.header.op;
        let Ext::Rts { msg_len } = f.ext else {
            return Err(proto("tcp: rendezvous request without its length"));
        };
        let tagged = op == Op::TaggedRts;
        let tag = f.header.tag;
        let src = self.source(st, b, cid);
        let data = f
            .header
            .flags
            .contains(Flags::REMOTE_CQ_DATA)
            .then_some(f.header.data);
        let ack = f.header.flags.difference(Flags::REMOTE_CQ_DATA);
        let meta = Meta {
            tagged,
            tag,
            len: msg_len,
            data,
            src,
        };
        let id = f.header.id;
        match st.rx.arrive(tagged, tag, src, msg_len) {
            Some(recv) => self.accept_rndv(st, b, cid, id, recv, meta, ack),
            None => {
                let entry = Entry {
                    len: msg_len,
                    data,
                    peer: self.token(cid),
                    held: Held::Remote(Remote::Rndv {
                        conn: self.token(cid),
                        id,
                        ack,
                    }),
                };
                st.rx.keep(tagged, tag, src, entry);
            }
        }
        Ok(())
    }

    /// Data of a rendezvous message this side accepted.
    pub(super) fn on_rndv_data(
        &self,
        st: &mut State,
        _b: &Binds,
        cid: u32,
        f: &Frame,
    ) -> Result<()> {
        let plen = f.header.payload_len;
        let Some(conn) = st.conns.get_mut(&cid) else {
            return Ok(());
        };
        let Ext::RndvData { offset } = f.ext else {
            return Err(proto("tcp: RndvData without its offset"));
        };
        let id = f.header.id;
        let Some(mut r) = conn.rndv.remove(&id) else {
            return Err(proto(format!("tcp: RndvData for unknown rendezvous {id}")));
        };
        let end = offset.saturating_add(plen);
        if end > r.accept || offset != r.got {
            return Err(proto(format!(
                "tcp: RndvData {offset}+{plen} of rendezvous {id} outside its {} accepted bytes",
                r.accept
            )));
        }
        r.frame_off = offset;
        if plen == 0 {
            conn.rndv.insert(id, r);
        } else {
            self.set_cur(st, cid, f, Sink::Rndv(r));
        }
        Ok(())
    }

    /// A message frame is complete.
    pub(super) fn msg_done(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        landed: Landed,
    ) -> Result<()> {
        let tagged = f.header.op == Op::Tagged;
        let data = f
            .header
            .flags
            .contains(Flags::REMOTE_CQ_DATA)
            .then_some(f.header.data);
        let ack = f.header.flags.difference(Flags::REMOTE_CQ_DATA);
        let src = self.source(st, b, cid);
        let meta = Meta {
            tagged,
            tag: f.header.tag,
            len: f.header.payload_len,
            data,
            src,
        };
        let id = f.header.id;
        let mut acked = false;
        match landed {
            Landed::Recv(recv) => st.rx.complete(b, recv, meta),
            Landed::Unexp(bytes) => {
                // Into a receive posted while the data arrived, or kept;
                // a delivery acknowledgement waits for the delivery.
                let delivery = ack.contains(Flags::ACK_DELIVERY);
                acked = delivery;
                let entry = Entry {
                    len: meta.len,
                    data,
                    peer: self.token(cid),
                    held: Held::Bytes {
                        bytes,
                        ack: delivery.then_some((self.token(cid), id)),
                    },
                };
                st.rx.land(b, tagged, meta.tag, src, entry);
            }
            Landed::Elsewhere => {}
        }
        if !ack.is_empty() && !acked {
            self.push_frame(st, b, cid, &Frame::ack(id, None), Src::None, Done::None);
        }
        Ok(())
    }
}

/// When the whole payload of the frame just decoded is in the connection's
/// read buffer (small messages, usually): hands it to `put` and consumes
/// it, so that the frame completes without a payload pass. `false`: the
/// payload is still (partly) in the socket.
fn take_inline(
    conns: &mut Conns<Conn>,
    cid: u32,
    plen: u64,
    put: impl FnOnce(&[u8]),
) -> Result<bool> {
    let Some(rx) = conns.get_mut(&cid).map(|c| &mut c.rx) else {
        return Ok(false);
    };
    let end = usize::try_from(plen)
        .ok()
        .and_then(|n| rx.pos.checked_add(n))
        .filter(|&end| end <= rx.len);
    let Some(data) = end.and_then(|end| rx.buf.get(rx.pos..end)) else {
        return Ok(false);
    };
    put(data);
    rx.pos += data.len();
    rx.dec.consume_payload(plen)?;
    Ok(true)
}
