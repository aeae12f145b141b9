//! RDM connection management: each endpoint listens on its own address
//! (its name); the first operation towards a peer connects to the peer's
//! name and sends `Hello` (listening address and nonce) before any data;
//! the peer answers `HelloAck`. One connection per pair of endpoints
//! carries frames both ways. When both ends connect at once, the
//! connection initiated by the end with the smaller key (nonce, then
//! address) survives; the frames waiting on the other end go on the
//! survivor ([`wire::resolve_simultaneous`]).

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fabric_core::objects::FiAddr;
use fabric_core::{Error, ErrorKind, Result};

use super::core::{EpInner, Kind, State};
use crate::conn::{Conn, Done, HELLO_PENDING_MAX, HELLO_TIMEOUT, Phase, Src};
use crate::wire::{self, CmHeader, ConnKey, Ext, Frame, Simultaneous};
use fabric_core::kit::binds::Binds;

/// How long a backlog waits for the peer's connection after this side's
/// was refused in a simultaneous connect, before connecting again.
const ORPHAN_RETRY: Duration = Duration::from_secs(5);

fn proto(detail: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::new(ErrorKind::Io, detail)
}

impl EpInner {
    /// The peer key (listening address) of an AV handle.
    #[inline(never)]
    pub(crate) fn rdm_dest(&self, st: &mut State, b: &Binds, dest: FiAddr) -> Result<SocketAddr> {
        let av =
            b.av.as_ref()
                .ok_or_else(|| Error::new(ErrorKind::NoAv, "the endpoint has no address vector"))?;
        // A removed handle is invalid (fi_av(3)): forget what was resolved
        // once the AV removed any.
        let removals = av.removals();
        if st.by_fi_removals != removals {
            st.by_fi.clear();
            st.by_fi_removals = removals;
        }
        if let Some(a) = st.by_fi.get(&dest.0) {
            return Ok(*a);
        }
        let peer = av.lookup(dest)?;
        let sa = peer.socket_addr().ok_or_else(|| {
            Error::inval(format!(
                "tcp cannot reach `{peer}`: not an IP socket address"
            ))
        })?;
        st.by_fi.insert(dest.0, sa);
        Ok(sa)
    }

    /// The hello this endpoint sends and answers with.
    fn cm(&self) -> CmHeader {
        let mut cm = CmHeader::new(self.name, self.nonce);
        cm.max_version = self.wire_max;
        cm
    }

    /// Starts connecting to `key`; a connect that fails at once fails the
    /// peer's backlog.
    pub(crate) fn rdm_connect(&self, st: &mut State, b: &Binds, key: SocketAddr) {
        let r = (|| -> Result<u32> {
            let sock = socket2::Socket::new(
                socket2::Domain::for_address(key),
                socket2::Type::STREAM,
                None,
            )?;
            sock.set_nonblocking(true)?;
            crate::sys::tune((&sock).into())?;
            // Leave from this endpoint's own address, which the hello
            // claims and the peer checks against the socket's.
            if let Some(name) = self.name {
                if !name.ip().is_unspecified() && name.is_ipv4() == key.is_ipv4() {
                    sock.bind(&SocketAddr::new(name.ip(), 0).into())?;
                }
            }
            let connecting = match sock.connect(&key.into()) {
                Ok(()) => false,
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => true,
                Err(e) => return Err(e.into()),
            };
            let stream: TcpStream = sock.into();
            let mut conn = Conn::new(stream, connecting, Phase::HelloSent, self.limits);
            conn.peer = Some(key);
            self.add_conn(st, conn)
        })();
        match r {
            Ok(cid) => {
                if let Some(p) = st.peers.get_mut(&key) {
                    p.connecting = Some(cid);
                }
                let hello = Frame::hello(self.cm());
                self.push_frame(st, b, cid, &hello, Src::None, Done::None);
            }
            Err(e) => {
                tracing::debug!(peer = %key, error = %e, "tcp: connect failed");
                self.fail_backlog(st, b, key, &e);
            }
        }
    }

    /// Accepts every waiting connection on the listening socket.
    pub(crate) fn rdm_accept(&self, st: &mut State) -> Result<()> {
        loop {
            let Some(listener) = &st.listener else {
                return Ok(());
            };
            match listener.accept() {
                Ok((sock, _)) => {
                    self.accept_rest.reset();
                    let waiting = st
                        .conns
                        .iter()
                        .filter(|(_, c)| c.phase == Phase::AwaitHello)
                        .count();
                    if waiting >= HELLO_PENDING_MAX {
                        tracing::debug!(
                            "tcp: {waiting} connections await their hello; closing a new one"
                        );
                        continue;
                    }
                    sock.set_nonblocking(true)?;
                    crate::sys::tune((&sock).into())?;
                    self.add_conn(st, Conn::new(sock, false, Phase::AwaitHello, self.limits))?;
                    if st.hello_due.is_none() {
                        st.hello_due = Some(Instant::now() + HELLO_TIMEOUT);
                        self.hello_waiting.store(true, Ordering::Relaxed);
                        self.poller.wake_after(HELLO_TIMEOUT);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    // Out of fds and the like: keep the endpoint usable,
                    // and the listener out of epoll for a while (it stays
                    // readable, and accepting again now fails again).
                    tracing::debug!(error = %e, "tcp: accept failed");
                    if crate::backoff::is_exhaustion(&e) {
                        self.accept_rest
                            .pause(&self.poller, listener.as_fd(), self.token(0));
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Closes the accepted connections that did not say hello within
    /// [`HELLO_TIMEOUT`], and arms the next check.
    pub(crate) fn rdm_hello_timeouts(&self, st: &mut State) {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        for (cid, c) in st.conns.iter() {
            if c.phase != Phase::AwaitHello {
                continue;
            }
            let due = c.since + HELLO_TIMEOUT;
            if due <= now {
                st.dead.push((
                    cid,
                    Error::new(ErrorKind::TimedOut, "tcp: no hello within 10 s"),
                ));
            } else if next.is_none_or(|n| due < n) {
                next = Some(due);
            }
        }
        st.hello_due = next;
        self.hello_waiting.store(next.is_some(), Ordering::Relaxed);
        if let Some(n) = next {
            self.poller.wake_after(n - now);
        }
    }

    /// A peer's hello on an accepted connection.
    pub(crate) fn rdm_on_hello(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
    ) -> Result<()> {
        if self.kind != Kind::Rdm {
            return Err(proto("tcp: Hello on a MSG endpoint"));
        }
        let Ext::Cm(cm) = f.ext else {
            return Err(proto("tcp: Hello without its CM header"));
        };
        let Some(version) = cm.negotiate_up_to(self.wire_max) else {
            let ack = Frame::hello_ack(self.cm(), Some(ErrorKind::NoProtoOpt));
            if let Some(c) = st.conns.get_mut(&cid) {
                c.phase = Phase::Closing;
            }
            self.push_frame(st, b, cid, &ack, Src::None, Done::Close);
            return Ok(());
        };
        let Some(sent) = cm.addr else {
            return Err(proto("tcp: Hello without an address"));
        };
        // A peer listening on a wildcard address is known by the address
        // it connected from, with its listening port; any other must
        // connect from the address it claims (connections leave from the
        // endpoint's own address), or it could pose as another host.
        let mut key = sent;
        let from = st
            .conns
            .get(&cid)
            .and_then(|c| c.sock.peer_addr().ok())
            .map(|a| a.ip().to_canonical());
        if key.ip().is_unspecified() {
            if let Some(ip) = from {
                key.set_ip(ip);
            }
        } else if from != Some(key.ip().to_canonical()) {
            tracing::debug!(claimed = %sent, from = ?from, "tcp: refused a hello claiming another address");
            let ack = Frame::hello_ack(self.cm(), Some(ErrorKind::Access));
            if let Some(c) = st.conns.get_mut(&cid) {
                c.phase = Phase::Closing;
            }
            self.push_frame(st, b, cid, &ack, Src::None, Done::Close);
            return Ok(());
        }
        let remote = ConnKey::new(cm.nonce, sent);
        let local = self.name.map(|n| ConnKey::new(self.nonce, n));
        let mut cm_out = self.cm();
        cm_out.min_version = version;
        cm_out.max_version = version;
        if let Some(c) = st.conns.get_mut(&cid) {
            c.set_version(version);
        }
        let peer = st.peers.get(&key);
        let connecting = peer.and_then(|p| p.connecting);
        // A peer with an established connection keeps it: frames already
        // went on it, and a second connection would let later ones overtake
        // them (every msg_order guarantee rests on one connection per
        // peer). This is the late hello of a simultaneous connect whose
        // other half finished first, or a stranger claiming the address.
        let live = peer
            .and_then(|p| p.conn)
            .and_then(|c| st.conns.get(&c))
            .is_some_and(|c| c.phase == Phase::Ready);
        let decision = match (connecting, local) {
            _ if live => Simultaneous::KeepOutgoing,
            (Some(_), Some(local)) => wire::resolve_simultaneous(local, remote),
            _ => Simultaneous::KeepIncoming,
        };
        match decision {
            Simultaneous::KeepOutgoing => {
                let ack = Frame::hello_ack(cm_out, Some(ErrorKind::Already));
                if let Some(c) = st.conns.get_mut(&cid) {
                    c.phase = Phase::Closing;
                }
                self.push_frame(st, b, cid, &ack, Src::None, Done::Close);
            }
            Simultaneous::SelfConnect => {
                // This endpoint connected to itself: the accepted end only
                // receives; frames go out on the connection it initiated.
                if let Some(c) = st.conns.get_mut(&cid) {
                    c.phase = Phase::Ready;
                    c.peer = Some(key);
                }
                let ack = Frame::hello_ack(cm_out, None);
                self.push_frame(st, b, cid, &ack, Src::None, Done::None);
            }
            Simultaneous::KeepIncoming => {
                if let Some(c) = st.conns.get_mut(&cid) {
                    c.phase = Phase::Ready;
                    c.peer = Some(key);
                }
                let ack = Frame::hello_ack(cm_out, None);
                self.push_frame(st, b, cid, &ack, Src::None, Done::None);
                if let Some(p) = st.peers.get_mut(&key) {
                    // This side's own connection loses; the peer refuses its
                    // hello and it is closed then.
                    p.connecting = None;
                }
                self.peer_ready(st, b, key, cid);
            }
        }
        Ok(())
    }

    /// The answer to this side's hello.
    pub(crate) fn rdm_on_hello_ack(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
    ) -> Result<()> {
        let Ext::Cm(cm) = f.ext else {
            return Err(proto("tcp: HelloAck without its CM header"));
        };
        let key = st
            .conns
            .get(&cid)
            .and_then(|c| c.peer)
            .ok_or_else(|| proto("tcp: HelloAck on a connection without a peer"))?;
        match f.header.status {
            None => {
                let Some(version) = cm.chosen(self.wire_max) else {
                    return Err(proto(format!(
                        "tcp: HelloAck names versions {}..={}",
                        cm.min_version, cm.max_version
                    )));
                };
                if let Some(c) = st.conns.get_mut(&cid) {
                    c.phase = Phase::Ready;
                    c.set_version(version);
                }
                let p = st.peers.entry(key).or_default();
                if p.connecting == Some(cid) {
                    p.connecting = None;
                }
                if p.conn.is_none() {
                    self.peer_ready(st, b, key, cid);
                }
            }
            Some(ErrorKind::Already) => {
                // The peer keeps the connection it initiated; the frames
                // waiting here go on it once its hello arrives.
                st.conns.remove(&cid);
                if let Some(p) = st.peers.get_mut(&key) {
                    if p.connecting == Some(cid) {
                        p.connecting = None;
                    }
                    if p.conn.is_none() && !p.backlog.is_empty() && p.orphaned.is_none() {
                        p.orphaned = Some(Instant::now());
                        st.orphans += 1;
                    }
                }
            }
            Some(kind) => {
                return Err(Error::new(
                    kind,
                    format!(
                        "tcp: the peer refused the connection: {}",
                        kind.description()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Backlogs whose peer's connection never came: connect again.
    pub(crate) fn rdm_orphans(&self, st: &mut State, b: &Binds) {
        let due: Vec<SocketAddr> = st
            .peers
            .iter()
            .filter(|(_, p)| p.orphaned.is_some_and(|t| t.elapsed() >= ORPHAN_RETRY))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            let mut connect = false;
            if let Some(p) = st.peers.get_mut(&key) {
                p.orphaned = None;
                st.orphans = st.orphans.saturating_sub(1);
                connect = p.conn.is_none() && p.connecting.is_none() && !p.backlog.is_empty();
            }
            if connect {
                self.rdm_connect(st, b, key);
            }
        }
    }
}
