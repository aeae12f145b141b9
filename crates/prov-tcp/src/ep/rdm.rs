//! RDM endpoints: reliable messages to any peer of the address vector.
//!
//! Each endpoint listens on its own address (its name). The first send to
//! a peer connects to the peer's name and opens the connection with a
//! hello frame carrying the sender's name, so the receiver can tell which
//! AV entry the messages come from. Messages to a peer all travel on the
//! sender's connection, in order. The endpoint's progress accepts new
//! connections, writes queued frames and reads arriving ones; it runs
//! under manual progress from CQ reads.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use fabric_core::kit::tag::{Matcher, Posted};
use fabric_core::objects::{
    AtomicOps, Bind, CmOps, CompletionFlags, CqEntry, Endpoint, FiAddr, Msg, MsgOps, RmaOps,
    TaggedOps,
};
use fabric_core::{Address, Caps, Error, ErrorKind, Info, OpFlags, Result};

use super::{Binds, msg_flags};
use crate::conn::{Conn, Input, Payload, Pieces, RecvOp, Sink, TxDone, TxItem};
use crate::frame::{F_CQ_DATA, Frame, Kind};
use crate::progress::{EpProgress, Poller, conn_of, ep_of, token};

/// A message that arrived before a matching receive.
#[derive(Debug)]
pub(crate) struct Unexp {
    data: Vec<u8>,
    cq_data: Option<u64>,
}

#[derive(Debug)]
struct State {
    listener: TcpListener,
    conns: HashMap<u32, Conn>,
    /// Outgoing connection per peer (AV handle).
    out: HashMap<u64, u32>,
    next_id: u32,
    msg: Matcher<RecvOp, Unexp>,
    tagged: Matcher<RecvOp, Unexp>,
    /// The peer names that incoming connections announced, by connection.
    names: HashMap<u32, Address>,
}

/// The shared part of an RDM endpoint.
#[derive(Debug)]
pub(crate) struct RdmInner {
    info: Info,
    name: Address,
    state: Mutex<State>,
    binds: Mutex<Binds>,
    bound: OnceLock<Binds>,
    enabled: AtomicBool,
    queued: AtomicUsize,
    poller: Arc<Poller>,
    ep_no: u32,
}

/// An RDM endpoint of the tcp provider.
#[derive(Debug, Clone)]
pub struct RdmEndpoint {
    inner: Arc<RdmInner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RdmEndpoint {
    /// Opens an endpoint for `info`, listening on its source address (port
    /// 0: any free port).
    pub(crate) fn open(info: &Info, poller: Arc<Poller>) -> Result<Self> {
        let bind: SocketAddr = match info.src_addr.as_ref().and_then(Address::socket_addr) {
            Some(a) => a,
            None => "127.0.0.1:0"
                .parse()
                .map_err(|_| Error::inval("bad default address"))?,
        };
        let listener = TcpListener::bind(bind)?;
        listener.set_nonblocking(true)?;
        let name = Address::from(listener.local_addr()?);
        let ep_no = poller.next_ep();
        poller.add(listener.as_fd(), token(ep_no, 0))?;
        let directed = info.caps.contains(Caps::DIRECTED_RECV);
        let state = State {
            listener,
            conns: HashMap::new(),
            out: HashMap::new(),
            next_id: 1,
            msg: Matcher::new(directed),
            tagged: Matcher::new(directed),
            names: HashMap::new(),
        };
        let inner = Arc::new(RdmInner {
            info: info.clone(),
            name,
            state: Mutex::new(state),
            binds: Mutex::new(Binds::default()),
            bound: OnceLock::new(),
            enabled: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            poller: poller.clone(),
            ep_no,
        });
        let weak: std::sync::Weak<dyn EpProgress> =
            Arc::downgrade(&(inner.clone() as Arc<dyn EpProgress>));
        poller.register(weak);
        Ok(RdmEndpoint { inner })
    }
}

impl RdmInner {
    fn bound(&self) -> Result<&Binds> {
        self.bound
            .get()
            .ok_or_else(|| Error::new(ErrorKind::OpBadState, "the endpoint is not enabled"))
    }

    fn max_len(&self) -> u64 {
        self.info.ep_attr.max_msg_size as u64
    }

    /// A fresh connection number (never 0, the listener's).
    fn new_id(st: &mut State) -> u32 {
        loop {
            st.next_id = st.next_id.wrapping_add(1);
            if st.next_id != 0 && !st.conns.contains_key(&st.next_id) {
                return st.next_id;
            }
        }
    }

    /// The outgoing connection to `dest`, made if needed.
    fn conn_to(&self, st: &mut State, b: &Binds, dest: FiAddr) -> Result<u32> {
        if let Some(id) = st.out.get(&dest.0) {
            return Ok(*id);
        }
        let av =
            b.av.as_ref()
                .ok_or_else(|| Error::new(ErrorKind::NoAv, "the endpoint has no address vector"))?;
        let peer = av.lookup(dest)?;
        let sa = peer.socket_addr().ok_or_else(|| {
            Error::inval(format!(
                "tcp cannot reach `{peer}`: not an IP socket address"
            ))
        })?;
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(sa),
            socket2::Type::STREAM,
            None,
        )?;
        sock.set_nonblocking(true)?;
        sock.set_nodelay(true)?;
        let connecting = match sock.connect(&sa.into()) {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => true,
            Err(e) => return Err(e.into()),
        };
        let stream: TcpStream = sock.into();
        let id = Self::new_id(st);
        self.poller.add(stream.as_fd(), token(self.ep_no, id))?;
        let mut conn = Conn::new(stream, connecting, self.max_len());
        let hello = self.name.to_string().into_bytes();
        let f = Frame {
            kind: Kind::Hello,
            flags: 0,
            len: hello.len() as u64,
            tag: 0,
            data: 0,
        };
        conn.tx
            .push_back(TxItem::new(&f, Payload::Owned(hello), None));
        // Every queued frame is counted, so progress knows to flush.
        self.queued.fetch_add(1, Ordering::Relaxed);
        st.conns.insert(id, conn);
        st.out.insert(dest.0, id);
        Ok(id)
    }

    /// Sends one message (all send forms end here).
    fn send(
        &self,
        dest: FiAddr,
        tagged: bool,
        tag: u64,
        data: Option<u64>,
        payload: Payload,
        done: Option<TxDone>,
    ) -> Result<()> {
        if !self.enabled.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::OpBadState,
                "the endpoint is not enabled",
            ));
        }
        let b = self.bound()?;
        let len = match &payload {
            Payload::Owned(v) => v.len(),
            Payload::Borrowed(p) => p.len(),
        };
        if len > self.info.ep_attr.max_msg_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("message of {len} bytes is over max_msg_size"),
            ));
        }
        if self.queued.load(Ordering::Relaxed) >= self.info.tx_attr.size {
            // Drive progress once, then report a full queue.
            self.progress_now()?;
            if self.queued.load(Ordering::Relaxed) >= self.info.tx_attr.size {
                return Err(Error::again());
            }
        }
        let mut st = lock(&self.state);
        let id = self.conn_to(&mut st, b, dest)?;
        let frame = Frame {
            kind: if tagged { Kind::Tagged } else { Kind::Msg },
            flags: if data.is_some() { F_CQ_DATA } else { 0 },
            len: len as u64,
            tag,
            data: data.unwrap_or(0),
        };
        let conn = st
            .conns
            .get_mut(&id)
            .ok_or_else(|| Error::new(ErrorKind::NotConn, "connection vanished"))?;
        let before = conn.tx.len();
        let r = conn.send(TxItem::new(&frame, payload, done), |d| {
            let e = CqEntry {
                context: d.context,
                flags: d.flags,
                len: d.len,
                ..CqEntry::default()
            };
            b.tx_done(e, d.report);
        });
        let after = conn.tx.len();
        if after > before {
            self.queued.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.queued.fetch_sub(
                (before - after).min(self.queued.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        if after > 0 {
            let _ = self
                .poller
                .want_write(conn.sock.as_fd(), token(self.ep_no, id), true);
        }
        if let Err(e) = r {
            self.fail_conn(&mut st, b, id, &e);
        }
        Ok(())
    }

    fn progress_now(&self) -> Result<()> {
        EpProgress::progress(self, &[])
    }

    /// A connection failed: its queued sends and the receive it was filling
    /// complete with errors; it is dropped.
    fn fail_conn(&self, st: &mut State, b: &Binds, id: u32, err: &Error) {
        let Some(mut conn) = st.conns.remove(&id) else {
            return;
        };
        tracing::debug!(conn = id, error = %err, "tcp: connection failed");
        st.out.retain(|_, v| *v != id);
        st.names.remove(&id);
        let mut n = 0;
        for item in conn.drain_tx() {
            n += 1;
            if let Some(d) = item.done {
                let e = CqEntry {
                    context: d.context,
                    flags: d.flags,
                    len: d.len,
                    ..CqEntry::default()
                };
                b.failed(false, e, err, 0);
            }
        }
        self.queued.fetch_sub(
            n.min(self.queued.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        if let Some(op) = conn.take_partial() {
            let e = CqEntry {
                context: op.context,
                flags: CompletionFlags::RECV,
                ..CqEntry::default()
            };
            b.failed(true, e, err, 0);
        }
    }

    /// Completes a receive with a message's data already in its buffer.
    fn complete_recv(b: &Binds, op: &RecvOp, frame: &Frame, src: FiAddr) {
        let tagged = frame.kind == Kind::Tagged;
        let cap = op.buf.len() as u64;
        let mut flags = msg_flags(tagged, true);
        if frame.flags & F_CQ_DATA != 0 {
            flags |= CompletionFlags::REMOTE_CQ_DATA;
        }
        let e = CqEntry {
            context: op.context,
            flags,
            len: frame.len.min(cap) as usize,
            buf: 0,
            data: frame.data,
            tag: if tagged { frame.tag } else { 0 },
        };
        if frame.len > cap {
            let err = Error::new(
                ErrorKind::Trunc,
                format!("message of {} bytes truncated to {cap}", frame.len),
            );
            b.failed(true, e, &err, (frame.len - cap) as usize);
        } else {
            let report = !b.rx_selective || op.flags.contains(OpFlags::COMPLETION);
            b.rx_done(e, src, report);
        }
    }

    /// The AV handle of a connection's peer, if it announced a name that is
    /// in the AV.
    fn source(b: &Binds, names: &HashMap<u32, Address>, id: u32) -> FiAddr {
        match (names.get(&id), &b.av) {
            (Some(a), Some(av)) => av.reverse(a),
            _ => FiAddr::NOTAVAIL,
        }
    }

    fn post_recv(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        let b = self.bound()?;
        if flags.contains(OpFlags::MULTI_RECV) {
            return Err(Error::bad_flags(
                "FI_MULTI_RECV is not supported on this endpoint yet",
            ));
        }
        let op = RecvOp {
            buf: Pieces::new(msg.iov)?,
            context: msg.context,
            flags,
        };
        let (tag, ignore) = if tagged {
            (msg.tag, msg.ignore)
        } else {
            (0, 0)
        };
        let mut guard = lock(&self.state);
        let st = &mut *guard;
        let matcher = if tagged { &mut st.tagged } else { &mut st.msg };
        if tagged && flags.intersects(OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD) {
            return Self::peek_claim(b, matcher, msg, op, flags);
        }
        let posted = Posted {
            tag,
            ignore,
            src: msg.addr,
            recv: op,
        };
        if let Some((p, u)) = matcher.post(posted) {
            Self::deliver_unexpected(b, &p.recv, u.tag, u.src, u.msg, tagged);
        }
        Ok(())
    }

    fn deliver_unexpected(b: &Binds, op: &RecvOp, tag: u64, src: FiAddr, u: Unexp, tagged: bool) {
        // SAFETY: the receive contract of the caller of recvmsg/trecvmsg.
        unsafe { op.buf.write_at(0, &u.data) };
        let frame = Frame {
            kind: if tagged { Kind::Tagged } else { Kind::Msg },
            flags: if u.cq_data.is_some() { F_CQ_DATA } else { 0 },
            len: u.data.len() as u64,
            tag,
            data: u.cq_data.unwrap_or(0),
        };
        Self::complete_recv(b, op, &frame, src);
    }

    fn peek_claim(
        b: &Binds,
        m: &mut Matcher<RecvOp, Unexp>,
        msg: &Msg<'_>,
        op: RecvOp,
        flags: OpFlags,
    ) -> Result<()> {
        let report = |len: usize, tag: u64, data: Option<u64>, src: FiAddr| {
            let mut f = msg_flags(true, true);
            if data.is_some() {
                f |= CompletionFlags::REMOTE_CQ_DATA;
            }
            let e = CqEntry {
                context: op.context,
                flags: f,
                len,
                buf: 0,
                data: data.unwrap_or(0),
                tag,
            };
            b.rx_done(e, src, true);
        };
        let missing = || {
            let e = CqEntry {
                context: op.context,
                flags: msg_flags(true, true),
                ..CqEntry::default()
            };
            b.failed(
                true,
                e,
                &Error::new(ErrorKind::NoMsg, "FI_PEEK: no matching message"),
                0,
            );
        };
        if flags.contains(OpFlags::PEEK) {
            if flags.contains(OpFlags::DISCARD) {
                match m.take_unexpected(msg.tag, msg.ignore, msg.addr) {
                    Some(u) => report(u.msg.data.len(), u.tag, u.msg.cq_data, u.src),
                    None => missing(),
                }
            } else {
                let claim = flags.contains(OpFlags::CLAIM).then_some(op.context);
                match m.peek(msg.tag, msg.ignore, msg.addr, claim) {
                    Some(u) => report(u.msg.data.len(), u.tag, u.msg.cq_data, u.src),
                    None => missing(),
                }
            }
            return Ok(());
        }
        // FI_CLAIM (with or without FI_DISCARD): the message reserved by an
        // earlier FI_PEEK|FI_CLAIM with this context.
        let u = m.claim(op.context).ok_or_else(|| {
            Error::new(
                ErrorKind::NoMsg,
                "FI_CLAIM: no message was claimed with this context",
            )
        })?;
        if flags.contains(OpFlags::DISCARD) {
            report(0, u.tag, u.msg.cq_data, u.src);
        } else {
            Self::deliver_unexpected(b, &op, u.tag, u.src, u.msg, true);
        }
        Ok(())
    }
}

impl EpProgress for RdmInner {
    fn progress(&self, ready: &[u64]) -> Result<()> {
        let Some(b) = self.bound.get() else {
            return Ok(());
        };
        let mine = ready
            .iter()
            .filter(|t| ep_of(**t) == self.ep_no)
            .map(|t| conn_of(*t));
        let pending = self.queued.load(Ordering::Relaxed) > 0;
        if !pending && mine.clone().next().is_none() {
            return Ok(());
        }
        let mut guard = match self.state.try_lock() {
            Ok(g) => g,
            // Another thread is progressing this endpoint right now.
            Err(std::sync::TryLockError::WouldBlock) => return Ok(()),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let st = &mut *guard;
        let mut dead: Vec<(u32, Error)> = Vec::new();
        if pending {
            let mut flushed = 0usize;
            for (id, conn) in st.conns.iter_mut().filter(|(_, c)| !c.tx.is_empty()) {
                let before = conn.tx.len();
                let r = conn.flush(|d| {
                    let e = CqEntry {
                        context: d.context,
                        flags: d.flags,
                        len: d.len,
                        ..CqEntry::default()
                    };
                    b.tx_done(e, d.report);
                });
                flushed += before - conn.tx.len();
                if conn.tx.is_empty() {
                    let _ =
                        self.poller
                            .want_write(conn.sock.as_fd(), token(self.ep_no, *id), false);
                }
                if let Err(e) = r {
                    dead.push((*id, e));
                }
            }
            self.queued.fetch_sub(
                flushed.min(self.queued.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        for id in mine {
            if id == 0 {
                self.accept(st)?;
            } else {
                self.read_conn(st, b, id, &mut dead);
            }
        }
        for (id, e) in dead {
            self.fail_conn(st, b, id, &e);
        }
        Ok(())
    }
}

impl RdmInner {
    /// Accepts every waiting connection.
    fn accept(&self, st: &mut State) -> Result<()> {
        loop {
            match st.listener.accept() {
                Ok((sock, _)) => {
                    sock.set_nonblocking(true)?;
                    sock.set_nodelay(true)?;
                    let id = Self::new_id(st);
                    self.poller.add(sock.as_fd(), token(self.ep_no, id))?;
                    st.conns.insert(id, Conn::new(sock, false, self.max_len()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads what one connection has.
    fn read_conn(&self, st: &mut State, b: &Binds, id: u32, dead: &mut Vec<(u32, Error)>) {
        let State {
            conns,
            msg,
            tagged,
            names,
            ..
        } = st;
        let Some(conn) = conns.get_mut(&id) else {
            return;
        };
        let r = conn.read(|_, input| match input {
            Input::Header(f) => Ok(match f.kind {
                Kind::Hello => None,
                Kind::Msg | Kind::Tagged => {
                    let src = Self::source(b, names, id);
                    let m = if f.kind == Kind::Tagged {
                        &mut *tagged
                    } else {
                        &mut *msg
                    };
                    let tag = if f.kind == Kind::Tagged { f.tag } else { 0 };
                    m.arrive(tag, src).map(|p| Sink::User(p.recv))
                }
            }),
            Input::Frame(f, sink) => {
                match (f.kind, sink) {
                    (Kind::Hello, Sink::Owned(bytes)) => {
                        let text = String::from_utf8(bytes)
                            .map_err(|_| Error::new(ErrorKind::Io, "tcp: hello carries no text"))?;
                        let a: Address = text.parse()?;
                        names.insert(id, a);
                    }
                    (Kind::Hello, Sink::User(_)) => {}
                    (_, Sink::User(op)) => {
                        let src = Self::source(b, names, id);
                        Self::complete_recv(b, &op, &f, src);
                    }
                    (_, Sink::Owned(data)) => {
                        let src = Self::source(b, names, id);
                        let is_tagged = f.kind == Kind::Tagged;
                        let m = if is_tagged { &mut *tagged } else { &mut *msg };
                        let tag = if is_tagged { f.tag } else { 0 };
                        let cq_data = (f.flags & F_CQ_DATA != 0).then_some(f.data);
                        // A receive may have been posted while the data
                        // arrived.
                        match m.arrive(tag, src) {
                            Some(p) => Self::deliver_unexpected(
                                b,
                                &p.recv,
                                tag,
                                src,
                                Unexp { data, cq_data },
                                is_tagged,
                            ),
                            None => m.push_unexpected(tag, src, Unexp { data, cq_data }),
                        }
                    }
                }
                Ok(None)
            }
        });
        match r {
            Ok(true) => {}
            Ok(false) => dead.push((
                id,
                Error::new(ErrorKind::ConnReset, "tcp: the peer closed the connection"),
            )),
            Err(e) => dead.push((id, e)),
        }
    }
}

impl MsgOps for RdmEndpoint {
    fn inject(&self, buf: &[u8], dest: FiAddr, data: Option<u64>) -> Result<()> {
        if buf.len() > self.inner.info.tx_attr.inject_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("inject of {} bytes is over inject_size", buf.len()),
            ));
        }
        self.inner
            .send(dest, false, 0, data, Payload::Owned(buf.to_vec()), None)
    }

    unsafe fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.inner.send_msg(msg, flags, false)
    }

    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.inner.post_recv(msg, flags, false)
    }
}

impl TaggedOps for RdmEndpoint {
    fn tinject(&self, buf: &[u8], dest: FiAddr, tag: u64, data: Option<u64>) -> Result<()> {
        if buf.len() > self.inner.info.tx_attr.inject_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("inject of {} bytes is over inject_size", buf.len()),
            ));
        }
        self.inner
            .send(dest, true, tag, data, Payload::Owned(buf.to_vec()), None)
    }

    unsafe fn tsendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.inner.send_msg(msg, flags, true)
    }

    unsafe fn trecvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.inner.post_recv(msg, flags, true)
    }
}

impl RdmInner {
    fn send_msg(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        let b = self.bound()?;
        let pieces = Pieces::new(msg.iov)?;
        let data = flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(msg.data);
        let report = !b.tx_selective || flags.contains(OpFlags::COMPLETION);
        let done = TxDone {
            context: msg.context,
            flags: msg_flags(tagged, false),
            len: pieces.len(),
            report,
        };
        let payload = if flags.contains(OpFlags::INJECT) {
            // SAFETY: the send contract: the pieces are valid for reads now.
            Payload::Owned(unsafe { pieces.copy_out() })
        } else {
            Payload::Borrowed(pieces)
        };
        self.send(msg.addr, tagged, msg.tag, data, payload, Some(done))
    }
}

impl RmaOps for RdmEndpoint {}
impl AtomicOps for RdmEndpoint {}

impl CmOps for RdmEndpoint {
    fn getname(&self) -> Result<Address> {
        Ok(self.inner.name.clone())
    }
}

impl Endpoint for RdmEndpoint {
    fn info(&self) -> &Info {
        &self.inner.info
    }

    fn bind(&self, what: Bind<'_>) -> Result<()> {
        if self.inner.enabled.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
        }
        lock(&self.inner.binds).bind(what)
    }

    fn enable(&self) -> Result<()> {
        let b = lock(&self.inner.binds).clone();
        if b.av.is_none() {
            return Err(Error::new(
                ErrorKind::NoAv,
                "an RDM endpoint needs an address vector before enable",
            ));
        }
        if b.tx_cq.is_none() && b.rx_cq.is_none() {
            return Err(Error::new(
                ErrorKind::NoCq,
                "an endpoint needs a completion queue before enable",
            ));
        }
        self.inner
            .bound
            .set(b)
            .map_err(|_| Error::new(ErrorKind::OpBadState, "the endpoint is already enabled"))?;
        self.inner.enabled.store(true, Ordering::Release);
        Ok(())
    }

    fn cancel(&self, context: u64) -> Result<()> {
        let b = self.inner.bound()?;
        let mut st = lock(&self.inner.state);
        let found = st
            .msg
            .cancel(|op| op.context == context)
            .or_else(|| st.tagged.cancel(|op| op.context == context));
        match found {
            Some(p) => {
                let e = CqEntry {
                    context: p.recv.context,
                    flags: CompletionFlags::RECV,
                    ..CqEntry::default()
                };
                b.failed(
                    true,
                    e,
                    &Error::new(ErrorKind::Canceled, "receive cancelled"),
                    0,
                );
                Ok(())
            }
            None => Err(Error::new(
                ErrorKind::NoEnt,
                "no posted receive has this context",
            )),
        }
    }
}

impl RdmEndpoint {
    /// The fds whose readiness means this endpoint can make progress.
    pub fn wait_fd(&self) -> BorrowedFd<'_> {
        self.inner.poller.fd()
    }
}
