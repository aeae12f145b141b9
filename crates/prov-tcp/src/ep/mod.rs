//! Endpoints: RDM (reliable, unconnected, through an AV), MSG (connected)
//! and passive (listening) endpoints, and the binding rules they share.
//! RDM and MSG endpoints are one type, [`TcpEndpoint`], over one engine;
//! they differ in how connections are made (`rdm`, `msg`).
//!
//! The engine's rooms, split by side (each an `impl` of `core::EpInner`):
//! - `core`: the endpoint's state behind its mutex, the dispatch of
//!   decoded frames, progress;
//! - `tx`: sending (eager, rendezvous), RMA and atomics at the initiator,
//!   the frame queues, the answers to this side's requests;
//! - `rx`: reading connections, messages and rendezvous into the kit's
//!   receive engine ([`fabric_core::kit::rx`]) and its actions back;
//! - `rma`: RMA and atomics at the target;
//! - `conn_state`: connections (their source, MSG management frames) and
//!   their failure; `conns`: the table of connections;
//! - `rdm`, `msg`, `passive`: how connections are made.

pub(crate) mod conn_state;
pub(crate) mod conns;
pub(crate) mod core;
pub(crate) mod msg;
pub(crate) mod passive;
pub(crate) mod rdm;
pub(crate) mod rma;
pub(crate) mod rx;
pub(crate) mod srx;
pub(crate) mod tx;

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fabric_core::kit::mr::MrTable;
use fabric_core::kit::objects::Progress;
use fabric_core::objects::{
    AtomicMsg, AtomicOp, AtomicOps, Bind, CmOps, Datatype, Endpoint, FiAddr, Msg, MsgOps, RmaIov,
    RmaMsg, RmaOps, SharedRx, TaggedOps,
};
use fabric_core::{Address, Caps, Error, ErrorKind, Info, OpFlags, Result};

use self::core::{EpInner, Kind, State};
use crate::conn::{Pieces, Src, copy_out};
use crate::progress::{Poller, token};
use fabric_core::kit::atomic::AtomicKind;
use fabric_core::kit::lock;

use fabric_core::kit::binds::Accepts;

/// What endpoints of `kind` take besides CQs and counters.
fn accepts(kind: Kind) -> Accepts {
    match kind {
        Kind::Msg => Accepts {
            av: false,
            eq: true,
            remote_cntr: true,
            name: "MSG endpoints",
        },
        Kind::Rdm => Accepts {
            av: true,
            eq: false,
            remote_cntr: true,
            name: "RDM endpoints",
        },
    }
}

/// An RDM or MSG endpoint of the tcp provider.
#[derive(Debug, Clone)]
pub struct TcpEndpoint {
    inner: Arc<EpInner>,
}

impl Drop for TcpEndpoint {
    /// The endpoint leaves its engine's progress (which holds it strongly
    /// while it is open); it closes once nothing else holds it.
    fn drop(&mut self) {
        self.inner.poller.unregister(self.inner.ep_no);
    }
}

impl TcpEndpoint {
    /// Opens an RDM endpoint for `info`, listening on its source address
    /// (port 0: any free port; no address: 127.0.0.1).
    pub(crate) fn open_rdm(info: &Info, poller: Arc<Poller>, mr: Arc<MrTable>) -> Result<Self> {
        let bind: SocketAddr = info
            .src_addr
            .as_ref()
            .and_then(Address::socket_addr)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = TcpListener::bind(bind)?;
        listener.set_nonblocking(true)?;
        let name = listener.local_addr()?;
        let directed = info.caps.contains(Caps::DIRECTED_RECV);
        let inner = EpInner::new(
            info,
            Kind::Rdm,
            Some(name),
            State::new(directed),
            poller.clone(),
            mr,
        );
        // The handle first: on an error below, its drop takes the endpoint
        // out of progress again.
        let ep = TcpEndpoint { inner };
        poller.add(listener.as_fd(), token(ep.inner.ep_no, 0))?;
        ep.inner.lock().listener = Some(listener);
        Ok(ep)
    }

    /// Opens a MSG endpoint: unconnected (then `connect`), or for the
    /// connection request `info.handle` names (then `accept`).
    pub(crate) fn open_msg(info: &Info, poller: Arc<Poller>, mr: Arc<MrTable>) -> Result<Self> {
        let pending = match info.handle {
            Some(h) => Some(passive::take(h)?),
            None => None,
        };
        let inner = EpInner::new(info, Kind::Msg, None, State::new(false), poller, mr);
        let ep = TcpEndpoint { inner };
        if let Some(pc) = pending {
            ep.inner.msg_adopt(pc)?;
        }
        Ok(ep)
    }

    /// The object id that this endpoint's EQ events carry in `fid`.
    pub fn fid(&self) -> u64 {
        self.inner.fid
    }

    /// The number of open connections (established or being set up), for
    /// tests and diagnostics.
    #[doc(hidden)]
    pub fn connection_count(&self) -> usize {
        self.inner.lock().conns.len()
    }

    /// The fd whose readiness means this endpoint can make progress.
    /// Asking for it keeps every socket of the domain in its epoll set
    /// from then on, which costs each arriving message a little (busy
    /// polling otherwise takes established connections out).
    pub fn wait_fd(&self) -> BorrowedFd<'_> {
        self.inner.poller.pin();
        self.inner.poller.fd()
    }
}

fn inject_check(info: &Info, len: usize) -> Result<()> {
    if len > info.tx_attr.inject_size {
        return Err(Error::new(
            ErrorKind::MsgSize,
            format!("inject of {len} bytes is over inject_size"),
        ));
    }
    Ok(())
}

impl TcpEndpoint {
    fn send_msg(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        let pieces = Pieces::new(msg.iov)?;
        let len = pieces.len();
        if flags.contains(OpFlags::INJECT) {
            inject_check(&self.inner.info, len)?;
            let mut copy = [0u8; crate::limits::INJECT_SIZE];
            let buf = copy.get_mut(..len).unwrap_or_default();
            // The send contract: the pieces are readable now.
            copy_out(&pieces, 0, buf);
            return self.inner.send(
                msg.addr,
                tagged,
                msg.tag,
                flags,
                msg.data,
                msg.context,
                Src::Bytes(buf),
                len,
            );
        }
        self.inner.send(
            msg.addr,
            tagged,
            msg.tag,
            flags,
            msg.data,
            msg.context,
            Src::User(pieces),
            len,
        )
    }
}

// The zero-copy operations are `unsafe fn`s of the trait (their buffer
// contract); the implementations themselves use no `unsafe`.
#[allow(unsafe_code)]
impl MsgOps for TcpEndpoint {
    fn inject(&self, buf: &[u8], dest: FiAddr, data: Option<u64>) -> Result<()> {
        inject_check(&self.inner.info, buf.len())?;
        let mut flags = OpFlags::INJECT;
        if data.is_some() {
            flags |= OpFlags::REMOTE_CQ_DATA;
        }
        self.inner.send(
            dest,
            false,
            0,
            flags,
            data.unwrap_or(0),
            0,
            Src::Bytes(buf),
            buf.len(),
        )
    }

    unsafe fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.send_msg(msg, flags, false)
    }

    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.inner.post_recv(msg, flags, false)
    }
}

// The zero-copy operations are `unsafe fn`s of the trait (their buffer
// contract); the implementations themselves use no `unsafe`.
#[allow(unsafe_code)]
impl TaggedOps for TcpEndpoint {
    fn tinject(&self, buf: &[u8], dest: FiAddr, tag: u64, data: Option<u64>) -> Result<()> {
        inject_check(&self.inner.info, buf.len())?;
        let mut flags = OpFlags::INJECT;
        if data.is_some() {
            flags |= OpFlags::REMOTE_CQ_DATA;
        }
        self.inner.send(
            dest,
            true,
            tag,
            flags,
            data.unwrap_or(0),
            0,
            Src::Bytes(buf),
            buf.len(),
        )
    }

    unsafe fn tsendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.send_msg(msg, flags, true)
    }

    unsafe fn trecvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.inner.post_recv(msg, flags, true)
    }
}

impl TcpEndpoint {
    /// Whether the endpoint's capabilities allow an operation (see
    /// [`fabric_core::kit::caps::initiate`]).
    #[inline]
    fn may(&self, class: Caps, dir: Caps, what: &str) -> Result<()> {
        fabric_core::kit::caps::initiate(self.inner.info.caps, class, dir, "tcp", what)
    }
}

// The zero-copy operations are `unsafe fn`s of the trait (their buffer
// contract); the implementations themselves use no `unsafe`.
#[allow(unsafe_code)]
impl RmaOps for TcpEndpoint {
    fn inject_write(
        &self,
        buf: &[u8],
        dest: FiAddr,
        remote: RmaIov,
        data: Option<u64>,
    ) -> Result<()> {
        self.may(Caps::RMA, Caps::WRITE, "an RMA write")?;
        inject_check(&self.inner.info, buf.len())?;
        let mut flags = OpFlags::INJECT;
        if data.is_some() {
            flags |= OpFlags::REMOTE_CQ_DATA;
        }
        self.inner.write(
            dest,
            &[remote],
            Src::Bytes(buf),
            buf.len(),
            flags,
            data.unwrap_or(0),
            0,
        )
    }

    unsafe fn readmsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        self.may(Caps::RMA, Caps::READ, "an RMA read")?;
        self.inner.read(msg, flags)
    }

    unsafe fn writemsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        self.may(Caps::RMA, Caps::WRITE, "an RMA write")?;
        let pieces = Pieces::new(msg.iov)?;
        let len = pieces.len();
        if flags.contains(OpFlags::INJECT) {
            inject_check(&self.inner.info, len)?;
            let mut copy = [0u8; crate::limits::INJECT_SIZE];
            let buf = copy.get_mut(..len).unwrap_or_default();
            // The write contract: the pieces are readable now.
            copy_out(&pieces, 0, buf);
            return self.inner.write(
                msg.addr,
                msg.rma_iov,
                Src::Bytes(buf),
                len,
                flags,
                msg.data,
                msg.context,
            );
        }
        self.inner.write(
            msg.addr,
            msg.rma_iov,
            Src::User(pieces),
            len,
            flags,
            msg.data,
            msg.context,
        )
    }
}

// The zero-copy operations are `unsafe fn`s of the trait (their buffer
// contract); the implementations themselves use no `unsafe`.
#[allow(unsafe_code)]
impl AtomicOps for TcpEndpoint {
    fn atomic_valid(
        &self,
        datatype: Datatype,
        op: AtomicOp,
        fetch: bool,
        compare: bool,
    ) -> Result<usize> {
        let kind = AtomicKind::of(compare, fetch);
        crate::atomic::valid(datatype, op, kind)
    }

    unsafe fn atomicmsg(&self, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        let dir = if msg.result.is_empty() {
            Caps::WRITE
        } else {
            Caps::READ
        };
        self.may(Caps::ATOMIC, dir, "an atomic")?;
        self.inner.atomic(msg, flags)
    }
}

impl CmOps for TcpEndpoint {
    fn getname(&self) -> Result<Address> {
        match self.inner.kind {
            Kind::Rdm => self
                .inner
                .name
                .map(Address::from)
                .ok_or_else(|| Error::new(ErrorKind::NotConn, "the endpoint has no address")),
            Kind::Msg => self.inner.msg_name(),
        }
    }

    fn getpeer(&self) -> Result<Address> {
        match self.inner.kind {
            Kind::Rdm => Err(Error::new(
                ErrorKind::OpNotSupp,
                "tcp: RDM endpoints have no single peer",
            )),
            Kind::Msg => self.inner.msg_peer(),
        }
    }

    fn connect(&self, dest: &Address, param: &[u8]) -> Result<()> {
        self.enable_if_needed()?;
        self.inner.msg_connect(dest, param)
    }

    fn accept(&self, param: &[u8]) -> Result<()> {
        self.enable_if_needed()?;
        self.inner.msg_accept(param)
    }

    fn shutdown(&self) -> Result<()> {
        self.inner.msg_shutdown()
    }
}

impl TcpEndpoint {
    fn enable_if_needed(&self) -> Result<()> {
        if self.inner.enabled.load(Ordering::Acquire) {
            return Ok(());
        }
        self.enable()
    }
}

impl Endpoint for TcpEndpoint {
    fn event_id(&self) -> Option<u64> {
        Some(self.fid())
    }

    fn info(&self) -> &Info {
        &self.inner.info
    }

    fn bind(&self, what: Bind<'_>) -> Result<()> {
        if self.inner.enabled.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
        }
        lock(&self.inner.binds).bind(what, accepts(self.inner.kind))
    }

    fn enable(&self) -> Result<()> {
        let b = lock(&self.inner.binds).clone();
        match self.inner.kind {
            Kind::Rdm if b.av.is_none() => {
                return Err(Error::new(
                    ErrorKind::NoAv,
                    "an RDM endpoint needs an address vector before enable",
                ));
            }
            Kind::Msg if b.eq.is_none() => {
                return Err(Error::new(
                    ErrorKind::NoEq,
                    "a MSG endpoint needs an event queue before enable",
                ));
            }
            _ => {}
        }
        if b.tx_cq.is_none() && b.rx_cq.is_none() {
            return Err(Error::new(
                ErrorKind::NoCq,
                "an endpoint needs a completion queue before enable",
            ));
        }
        if let Some(eq) = &b.eq {
            let p: Arc<dyn Progress> = self.inner.poller.clone();
            eq.add_progress(Arc::downgrade(&p));
        }
        let set = |b| {
            self.inner
                .bound
                .set(b)
                .map_err(|_| Error::new(ErrorKind::OpBadState, "the endpoint is already enabled"))
        };
        match self.inner.srx.get() {
            Some(srx) => srx.enable_member(b, set)?,
            None if self.inner.info.ep_attr.rx_ctx_cnt == fabric_core::SHARED_CONTEXT => {
                return Err(Error::inval(
                    "tcp: an endpoint opened with rx_ctx_cnt = FI_SHARED_CONTEXT needs a \
                     shared receive context bound before enable",
                ));
            }
            None => set(b)?,
        }
        self.inner.enabled.store(true, Ordering::Release);
        Ok(())
    }

    fn cancel(&self, context: u64) -> Result<()> {
        self.inner.cancel(context)
    }

    fn min_multi_recv(&self) -> Result<usize> {
        Ok(self.inner.min_multi_recv.load(Ordering::Relaxed))
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        if self.inner.srx.get().is_some() {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "tcp: the endpoint receives through its shared receive context; set it there",
            ));
        }
        self.inner.set_min_multi_recv(bytes);
        Ok(())
    }

    fn bind_srx(&self, srx: &dyn SharedRx) -> Result<()> {
        if self.inner.enabled.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
        }
        let srx = srx.as_any().downcast_ref::<srx::TcpSrx>().ok_or_else(|| {
            Error::inval("bind: the shared receive context belongs to another provider")
        })?;
        srx.attach(&self.inner)
    }

    /// MSG endpoints only: RDM endpoints carry no private data.
    fn cm_data_size(&self) -> Result<usize> {
        match self.inner.kind {
            Kind::Msg => Ok(crate::limits::CM_DATA_SIZE),
            _ => Err(Error::from_kind(ErrorKind::OpNotSupp)),
        }
    }
}

/// An RDM endpoint (the same type as a MSG endpoint).
pub type RdmEndpoint = TcpEndpoint;
