//! MSG connection management: `connect` sends `ConnReq` with private data
//! and reports `Connected` (with the acceptor's private data) or an EQ
//! error `ConnRefused` (with the rejection's private data); an endpoint
//! opened for a connection request answers with `ConnAccept` and reports
//! `Connected` once it is written. A closed connection is the shutdown:
//! both sides report `Shutdown` and fail what was pending.

use std::net::{SocketAddr, TcpStream};

use fabric_core::Address;
use fabric_core::objects::{EqErrEntry, EqEvent};
use fabric_core::{Error, ErrorKind, Result};

use super::core::{EpInner, Kind, Peer, State};
use crate::conn::{Conn, Done, Phase, Src};
use crate::ep::passive::PendingConn;
use crate::wire::{CmHeader, Ext, Frame};
use fabric_core::kit::binds::Binds;

fn proto(detail: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::new(ErrorKind::Io, detail)
}

impl EpInner {
    fn not_msg(&self) -> Result<()> {
        if self.kind == Kind::Msg {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::OpNotSupp,
                "tcp: connection management is for MSG endpoints",
            ))
        }
    }

    fn check_private(&self, param: &[u8]) -> Result<()> {
        if param.len() as u64 > self.limits.max_private_data {
            return Err(Error::inval(format!(
                "tcp: {} bytes of private data (at most {})",
                param.len(),
                self.limits.max_private_data
            )));
        }
        Ok(())
    }

    /// Takes over the socket of a connection request (an endpoint opened
    /// with a ConnReq event's info).
    pub(crate) fn msg_adopt(&self, pc: PendingConn) -> Result<()> {
        let mut st = self.lock();
        let mut conn = Conn::new(pc.sock, false, Phase::AwaitAccept, self.limits);
        conn.peer = Some(pc.peer);
        if let Some(dst) = conn.rx.buf.get_mut(..pc.leftover.len()) {
            dst.copy_from_slice(&pc.leftover);
            conn.rx.len = pc.leftover.len();
        }
        let version = pc.cm.negotiate_up_to(self.wire_max);
        if let Some(v) = version {
            conn.set_version(v);
        }
        let cid = self.add_conn(&mut st, conn)?;
        st.msg.conn = Some(cid);
        st.msg.peer = Some(pc.peer);
        st.msg.version = version;
        st.peers.insert(
            pc.peer,
            Peer {
                connecting: Some(cid),
                ..Peer::default()
            },
        );
        Ok(())
    }

    /// `fi_connect`.
    pub(crate) fn msg_connect(&self, dest: &Address, param: &[u8]) -> Result<()> {
        self.not_msg()?;
        self.check_private(param)?;
        let b = self.bound()?;
        let key = dest.socket_addr().ok_or_else(|| {
            Error::inval(format!(
                "tcp cannot reach `{dest}`: not an IP socket address"
            ))
        })?;
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.msg.conn.is_some() || st.msg.closed {
            return Err(Error::new(
                ErrorKind::IsConn,
                "tcp: the endpoint is connected or was connected already",
            ));
        }
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(key),
            socket2::Type::STREAM,
            None,
        )?;
        sock.set_nonblocking(true)?;
        crate::sys::tune((&sock).into())?;
        let connecting = match sock.connect(&key.into()) {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => true,
            Err(e) => {
                // Refused at once: reported like a refusal that comes later.
                let err: Error = e.into();
                self.msg_refused(st, b, &err, Vec::new());
                return Ok(());
            }
        };
        let stream: TcpStream = sock.into();
        let mut conn = Conn::new(stream, connecting, Phase::ConnReqSent, self.limits);
        conn.peer = Some(key);
        let cid = self.add_conn(st, conn)?;
        st.msg.conn = Some(cid);
        st.msg.peer = Some(key);
        st.peers.insert(
            key,
            Peer {
                connecting: Some(cid),
                ..Peer::default()
            },
        );
        let mut cm = CmHeader::new(None, self.nonce);
        cm.max_version = self.wire_max;
        let req = Frame::conn_req(cm, param.len() as u64);
        self.push_frame(st, b, cid, &req, Src::Bytes(param), Done::None);
        self.finish_pass(st, b);
        Ok(())
    }

    /// `fi_accept`.
    pub(crate) fn msg_accept(&self, param: &[u8]) -> Result<()> {
        self.not_msg()?;
        self.check_private(param)?;
        let b = self.bound()?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let cid = st
            .msg
            .conn
            .filter(|c| {
                st.conns
                    .get(c)
                    .is_some_and(|c| c.phase == Phase::AwaitAccept)
            })
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::OpBadState,
                    "tcp: the endpoint was not opened for a pending connection request",
                )
            })?;
        let version = st.msg.version.unwrap_or(crate::wire::MIN_VERSION);
        let mut cm = CmHeader::new(None, self.nonce);
        cm.min_version = version;
        cm.max_version = version;
        let key = st
            .msg
            .peer
            .ok_or_else(|| Error::new(ErrorKind::NotConn, "no peer"))?;
        if let Some(c) = st.conns.get_mut(&cid) {
            c.phase = Phase::Ready;
        }
        let f = Frame::conn_accept(cm, param.len() as u64);
        self.push_frame(st, b, cid, &f, Src::Bytes(param), Done::Connected);
        if let Some(p) = st.peers.get_mut(&key) {
            p.connecting = None;
        }
        self.peer_ready(st, b, key, cid);
        self.finish_pass(st, b);
        Ok(())
    }

    /// `fi_shutdown`: the connection closes; both sides report `Shutdown`.
    pub(crate) fn msg_shutdown(&self) -> Result<()> {
        self.not_msg()?;
        let b = self.bound()?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(cid) = st.msg.conn else {
            return Err(Error::new(
                ErrorKind::NotConn,
                "tcp: the endpoint is not connected",
            ));
        };
        if let Some(c) = st.conns.get(&cid) {
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
        }
        let err = Error::new(ErrorKind::Shutdown, "tcp: the connection was shut down");
        self.fail_conn(st, b, cid, &err);
        self.finish_pass(st, b);
        Ok(())
    }

    /// The local address of a MSG endpoint.
    pub(crate) fn msg_name(&self) -> Result<Address> {
        let st = self.lock();
        if let Some(a) = &st.msg.local {
            return Ok(a.clone());
        }
        let local = st
            .msg
            .conn
            .and_then(|c| st.conns.get(&c))
            .and_then(|c| c.sock.local_addr().ok());
        match (local, self.info.src_addr.as_ref()) {
            (Some(a), _) => Ok(Address::from(a)),
            (None, Some(a)) => Ok(a.clone()),
            (None, None) => Err(Error::new(
                ErrorKind::NotConn,
                "tcp: the endpoint has no address until it connects",
            )),
        }
    }

    /// The peer of a MSG endpoint.
    pub(crate) fn msg_peer(&self) -> Result<Address> {
        let st = self.lock();
        st.msg
            .peer
            .map(Address::from)
            .ok_or_else(|| Error::new(ErrorKind::NotConn, "tcp: the endpoint is not connected"))
    }

    fn eq_push(&self, b: &Binds, e: EqEvent) {
        if let Some(eq) = &b.eq {
            eq.push(e);
        }
    }

    /// The accept frame went out: connected.
    pub(crate) fn msg_connected_sent(&self, st: &mut State) {
        if st.msg.connected || st.msg.reported {
            return;
        }
        st.msg.connected = true;
        if let Some(b) = self.bound.get() {
            self.eq_push(
                b,
                EqEvent::Connected {
                    fid: self.fid,
                    data: Vec::new(),
                },
            );
        }
    }

    /// The peer accepted.
    pub(crate) fn msg_on_accept(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        data: Vec<u8>,
    ) -> Result<()> {
        let Ext::Cm(cm) = f.ext else {
            return Err(proto("tcp: ConnAccept without its CM header"));
        };
        let Some(version) = cm.chosen(self.wire_max) else {
            return Err(proto(format!(
                "tcp: ConnAccept names versions {}..={}",
                cm.min_version, cm.max_version
            )));
        };
        let key: Option<SocketAddr> = st.conns.get(&cid).and_then(|c| c.peer);
        let local = st.conns.get(&cid).and_then(|c| c.sock.local_addr().ok());
        if let Some(c) = st.conns.get_mut(&cid) {
            c.phase = Phase::Ready;
            c.set_version(version);
        }
        st.msg.local = local.map(Address::from);
        st.msg.connected = true;
        self.eq_push(
            b,
            EqEvent::Connected {
                fid: self.fid,
                data,
            },
        );
        if let Some(key) = key {
            if let Some(p) = st.peers.get_mut(&key) {
                p.connecting = None;
            }
            self.peer_ready(st, b, key, cid);
        }
        Ok(())
    }

    /// The peer rejected.
    pub(crate) fn msg_on_reject(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        data: Vec<u8>,
    ) -> Result<()> {
        let kind = match f.header.status {
            Some(ErrorKind::NoProtoOpt) => ErrorKind::NoProtoOpt,
            _ => ErrorKind::ConnRefused,
        };
        let err = Error::new(kind, "tcp: the peer rejected the connection");
        self.msg_refused(st, b, &err, data);
        self.fail_conn(st, b, cid, &err);
        Ok(())
    }

    /// Reports a connection that never came up as an EQ error.
    fn msg_refused(&self, st: &mut State, b: &Binds, err: &Error, data: Vec<u8>) {
        if st.msg.reported {
            return;
        }
        st.msg.reported = true;
        st.msg.closed = true;
        if let Some(eq) = &b.eq {
            eq.push_err(EqErrEntry {
                fid: self.fid,
                context: 0,
                err: err.kind(),
                prov_errno: err.kind().errno(),
                data,
                err_text: err.detail().to_string(),
            });
        }
    }

    /// The connection is gone: posted receives and queued frames fail, and
    /// the EQ hears of it once (`Shutdown` after `Connected`, else an
    /// error).
    pub(crate) fn msg_conn_lost(&self, st: &mut State, b: &Binds, cid: u32, err: &Error) {
        if st.msg.conn != Some(cid) {
            return;
        }
        st.msg.conn = None;
        if let Some(key) = st.msg.peer {
            self.fail_backlog(st, b, key, err);
        }
        if self.srx.get().is_none() {
            // A shared receive context's receives are not this
            // connection's: they stay for the other endpoints.
            st.rx.drain(b, err);
        }
        if st.msg.connected && !st.msg.reported {
            st.msg.reported = true;
            st.msg.closed = true;
            self.eq_push(b, EqEvent::Shutdown { fid: self.fid });
        } else {
            self.msg_refused(st, b, err, Vec::new());
        }
    }
}
