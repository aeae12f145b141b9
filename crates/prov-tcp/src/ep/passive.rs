//! Passive endpoints: a listening socket for MSG connections. Each
//! accepted socket is read until its `ConnReq` (and private data) is
//! complete; the request then waits in a process-wide table under a
//! handle, and a `ConnReq` event carrying that handle in its `info` goes
//! to the passive endpoint's EQ. Opening an endpoint with that info takes
//! the socket over (`fi_accept`); `reject` answers `ConnReject` with
//! private data and closes it.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fabric_core::kit::objects::{Eq, EqCore, Progress};
use fabric_core::objects::{EqEvent, EventQueue, PassiveEndpoint};
use fabric_core::{Address, Error, ErrorKind, Handle, Info, Result};

use crate::backoff::AcceptBackoff;
use crate::conn::{HELLO_PENDING_MAX, HELLO_TIMEOUT};
use crate::progress::{EpProgress, Poller, conn_of, ep_of, token};
use crate::sys;
use crate::wire::{self, CmHeader, Decoder, Event, Ext, Frame, Limits, Op};
use fabric_core::kit::lock;

/// A connection request waiting for the application's answer.
#[derive(Debug)]
pub(crate) struct PendingConn {
    pub sock: TcpStream,
    /// Bytes read after the request (none from a well-behaved peer).
    pub leftover: Vec<u8>,
    pub cm: CmHeader,
    pub peer: SocketAddr,
    /// The passive endpoint that received it.
    pub pep: u64,
}

fn table() -> &'static Mutex<HashMap<u64, PendingConn>> {
    static TABLE: OnceLock<Mutex<HashMap<u64, PendingConn>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn park(pc: PendingConn) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let h = NEXT.fetch_add(1, Ordering::Relaxed);
    lock(table()).insert(h, pc);
    h
}

/// Takes the connection request a handle names.
pub(crate) fn take(handle: Handle) -> Result<PendingConn> {
    lock(table()).remove(&handle.0).ok_or_else(|| {
        Error::new(
            ErrorKind::NoEnt,
            format!("tcp: no pending connection request has handle {}", handle.0),
        )
    })
}

/// Largest connection request: headers plus the most private data.
const REQ_MAX: usize = wire::HEADER_LEN + wire::CM_LEN + wire::DEFAULT_MAX_PRIVATE_DATA as usize;

/// An accepted socket whose request is still arriving.
#[derive(Debug)]
struct Incoming {
    sock: TcpStream,
    /// When it was accepted: its request must be complete within
    /// [`HELLO_TIMEOUT`].
    since: Instant,
    dec: Decoder,
    frame: Option<Frame>,
    private: Vec<u8>,
}

#[derive(Debug, Default)]
struct PepState {
    eq: Option<Arc<EqCore>>,
    listening: bool,
    incoming: HashMap<u32, Incoming>,
    next: u32,
    /// When the oldest incoming connection times out.
    due: Option<Instant>,
}

#[derive(Debug)]
struct PepInner {
    info: Info,
    fid: u64,
    listener: TcpListener,
    name: SocketAddr,
    poller: Arc<Poller>,
    ep_no: u32,
    /// The listener's rest after accept ran out of resources.
    accept_rest: AcceptBackoff,
    /// Some incoming connection's request is not complete yet.
    waiting: AtomicBool,
    state: Mutex<PepState>,
}

/// A passive endpoint of the tcp provider.
#[derive(Debug)]
pub struct TcpPassiveEndpoint {
    inner: Arc<PepInner>,
}

impl Drop for TcpPassiveEndpoint {
    /// The passive endpoint leaves its engine's progress (which holds it
    /// strongly while it is open).
    fn drop(&mut self) {
        self.inner.poller.unregister(self.inner.ep_no);
    }
}

impl TcpPassiveEndpoint {
    /// Opens a passive endpoint bound to `info.src_addr` (port 0: any free
    /// port; no address: every IPv4 interface).
    pub(crate) fn open(info: &Info) -> Result<Self> {
        let bind: SocketAddr = info
            .src_addr
            .as_ref()
            .and_then(Address::socket_addr)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let listener = TcpListener::bind(bind)?;
        listener.set_nonblocking(true)?;
        let name = listener.local_addr()?;
        let poller = Arc::new(Poller::new()?);
        let ep_no = poller.next_ep();
        poller.add(listener.as_fd(), token(ep_no, 0))?;
        let inner = Arc::new(PepInner {
            info: info.clone(),
            fid: sys::next_fid(),
            listener,
            name,
            poller: poller.clone(),
            ep_no,
            accept_rest: AcceptBackoff::default(),
            waiting: AtomicBool::new(false),
            state: Mutex::new(PepState::default()),
        });
        poller.register(ep_no, inner.clone());
        if crate::progress::wants_auto(&info.domain_attr) {
            crate::progress::spawn_auto(Arc::downgrade(&poller));
        }
        Ok(TcpPassiveEndpoint { inner })
    }

    /// The object id that `ConnReq` events carry in `fid`.
    pub fn fid(&self) -> u64 {
        self.inner.fid
    }
}

impl PepInner {
    fn accept(&self, st: &mut PepState) {
        loop {
            match self.listener.accept() {
                Ok((sock, _)) => {
                    self.accept_rest.reset();
                    if st.incoming.len() >= HELLO_PENDING_MAX {
                        tracing::debug!(
                            "tcp: too many incomplete connection requests; closing a new one"
                        );
                        continue;
                    }
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = crate::sys::tune((&sock).into());
                    st.next = st.next.wrapping_add(1).max(1);
                    let id = st.next;
                    if self
                        .poller
                        .add(sock.as_fd(), token(self.ep_no, id))
                        .is_err()
                    {
                        continue;
                    }
                    let limits = Limits {
                        max_private_data: wire::DEFAULT_MAX_PRIVATE_DATA,
                        ..Limits::default()
                    };
                    st.incoming.insert(
                        id,
                        Incoming {
                            sock,
                            since: Instant::now(),
                            dec: Decoder::new(limits),
                            frame: None,
                            private: Vec::new(),
                        },
                    );
                    if st.due.is_none() {
                        st.due = Some(Instant::now() + HELLO_TIMEOUT);
                        self.waiting.store(true, Ordering::Relaxed);
                        self.poller.wake_after(HELLO_TIMEOUT);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of fds and the like: the listener rests (see
                    // `backoff`), or it would wake every waiter for ever.
                    if crate::backoff::is_exhaustion(&e) {
                        self.accept_rest.pause(
                            &self.poller,
                            self.listener.as_fd(),
                            token(self.ep_no, 0),
                        );
                    }
                    return;
                }
            }
        }
    }

    /// Closes the incoming connections whose request did not complete
    /// within [`HELLO_TIMEOUT`], and arms the next check.
    fn time_out(&self, st: &mut PepState) {
        let now = Instant::now();
        let late: Vec<u32> = st
            .incoming
            .iter()
            .filter(|(_, inc)| inc.since + HELLO_TIMEOUT <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            if let Some(inc) = st.incoming.remove(&id) {
                tracing::debug!("tcp: a connection request did not complete within 10 s");
                let _ = self.poller.remove(inc.sock.as_fd());
            }
        }
        st.due = st
            .incoming
            .values()
            .map(|inc| inc.since + HELLO_TIMEOUT)
            .min();
        self.waiting.store(st.due.is_some(), Ordering::Relaxed);
        if let Some(d) = st.due {
            self.poller.wake_after(d - now);
        }
    }

    /// Reads an incoming socket; returns the request once complete.
    fn read(&self, inc: &mut Incoming) -> Result<Option<Vec<u8>>> {
        let mut buf = [0u8; REQ_MAX];
        loop {
            let n = match sys::recv_buf(inc.sock.as_fd(), &mut buf) {
                Ok(0) => {
                    return Err(Error::new(
                        ErrorKind::ConnReset,
                        "tcp: closed before its request",
                    ));
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let mut input = buf.get(..n).unwrap_or_default();
            while !input.is_empty() {
                if inc.frame.is_some() && inc.dec.is_at_boundary() {
                    // Bytes after the request: kept for the endpoint.
                    return Ok(Some(input.to_vec()));
                }
                let (used, ev) = inc.dec.feed(input)?;
                input = input.get(used..).unwrap_or_default();
                match ev {
                    Some(Event::Frame(f)) => {
                        if f.header.op != Op::ConnReq || inc.frame.is_some() {
                            return Err(Error::new(
                                ErrorKind::Io,
                                format!(
                                    "tcp: {} frame instead of a connection request",
                                    f.header.op
                                ),
                            ));
                        }
                        inc.frame = Some(f);
                    }
                    Some(Event::Payload { data, .. }) => inc.private.extend_from_slice(data),
                    None => {}
                }
            }
            if inc.frame.is_some() && inc.dec.is_at_boundary() {
                return Ok(Some(Vec::new()));
            }
        }
    }

    /// A request is complete: park it and tell the application.
    fn request(&self, st: &mut PepState, inc: Incoming, leftover: Vec<u8>) {
        let _ = self.poller.remove(inc.sock.as_fd());
        let Some(Frame {
            ext: Ext::Cm(cm), ..
        }) = inc.frame
        else {
            return;
        };
        let Ok(peer) = inc.sock.peer_addr() else {
            return;
        };
        if cm
            .negotiate_up_to(super::core::wire_max(self.info.ep_attr.protocol_version))
            .is_none()
        {
            let f = Frame::conn_reject(CmHeader::new(None, 0), Some(ErrorKind::NoProtoOpt), 0);
            let (h, n) = f.to_bytes();
            let _ = sys::send_all(
                inc.sock.as_fd(),
                h.get(..n).unwrap_or_default(),
                Duration::from_secs(1),
            );
            return;
        }
        let Some(eq) = st.eq.clone() else { return };
        let data = inc.private;
        let handle = park(PendingConn {
            sock: inc.sock,
            leftover,
            cm,
            peer,
            pep: self.fid,
        });
        let mut info = self.info.clone();
        info.handle = Some(Handle(handle));
        info.dest_addr = Some(Address::from(peer));
        info.src_addr = Some(Address::from(self.name));
        eq.push(EqEvent::ConnReq {
            fid: self.fid,
            info: Box::new(info),
            data,
        });
    }
}

impl EpProgress for PepInner {
    fn progress(&self, ready: &[u64]) -> Result<()> {
        let mut mine: Vec<u32> = ready
            .iter()
            .filter(|t| ep_of(**t) == self.ep_no)
            .map(|t| conn_of(*t))
            .collect();
        if self.accept_rest.is_paused()
            && self.accept_rest.resume_if_due(
                &self.poller,
                self.listener.as_fd(),
                token(self.ep_no, 0),
            )
        {
            mine.push(0);
        }
        if mine.is_empty() && !self.waiting.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut st = lock(&self.state);
        if st.due.is_some_and(|d| Instant::now() >= d) {
            self.time_out(&mut st);
        }
        if !st.listening || st.eq.is_none() {
            return Ok(());
        }
        for id in mine {
            if id == 0 {
                self.accept(&mut st);
                continue;
            }
            let Some(mut inc) = st.incoming.remove(&id) else {
                continue;
            };
            match self.read(&mut inc) {
                Ok(None) => {
                    st.incoming.insert(id, inc);
                }
                Ok(Some(leftover)) => self.request(&mut st, inc, leftover),
                Err(e) => {
                    tracing::debug!(error = %e, "tcp: dropped a connection request");
                    let _ = self.poller.remove(inc.sock.as_fd());
                }
            }
        }
        Ok(())
    }
}

impl Drop for PepInner {
    /// Requests nobody accepted or rejected are closed with the passive
    /// endpoint (their connectors see the connection refused).
    fn drop(&mut self) {
        lock(table()).retain(|_, pc| pc.pep != self.fid);
    }
}

impl PassiveEndpoint for TcpPassiveEndpoint {
    fn event_id(&self) -> Option<u64> {
        Some(self.fid())
    }

    fn bind_eq(&self, eq: &dyn EventQueue) -> Result<()> {
        let eq = eq
            .as_any()
            .downcast_ref::<Eq>()
            .ok_or_else(|| Error::inval("bind: the EQ belongs to another provider"))?;
        let p: Arc<dyn Progress> = self.inner.poller.clone();
        eq.core().add_progress(Arc::downgrade(&p));
        lock(&self.inner.state).eq = Some(eq.core().clone());
        Ok(())
    }

    fn listen(&self) -> Result<()> {
        let mut st = lock(&self.inner.state);
        if st.eq.is_none() {
            return Err(Error::new(
                ErrorKind::NoEq,
                "tcp: bind an event queue before listening",
            ));
        }
        st.listening = true;
        drop(st);
        // Connections that queued before listen are accepted now.
        let _ = self.inner.poller.progress();
        Ok(())
    }

    fn getname(&self) -> Result<Address> {
        Ok(Address::from(self.inner.name))
    }

    fn reject(&self, handle: Handle, param: &[u8]) -> Result<()> {
        if param.len() as u64 > wire::DEFAULT_MAX_PRIVATE_DATA {
            return Err(Error::inval(format!(
                "tcp: {} bytes of private data (at most {})",
                param.len(),
                wire::DEFAULT_MAX_PRIVATE_DATA
            )));
        }
        let pc = take(handle)?;
        let f = Frame::conn_reject(CmHeader::new(None, 0), None, param.len() as u64);
        let (h, n) = f.to_bytes();
        let mut bytes = h.get(..n).unwrap_or_default().to_vec();
        bytes.extend_from_slice(param);
        let r = sys::send_all(pc.sock.as_fd(), &bytes, Duration::from_secs(1));
        let _ = pc.sock.shutdown(std::net::Shutdown::Write);
        r.map_err(Error::from)
    }

    fn cm_data_size(&self) -> Result<usize> {
        Ok(crate::limits::CM_DATA_SIZE)
    }
}
