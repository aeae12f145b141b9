//! Endpoints: RDM (reliable, unconnected, through an AV), MSG (connected)
//! and passive (listening) endpoints, and the binding rules they share.
//! RDM and MSG endpoints are one type, [`TcpEndpoint`], over one engine
//! (`core`); they differ in how connections are made (`rdm`, `msg`).

pub(crate) mod core;
pub(crate) mod msg;
pub(crate) mod passive;
pub(crate) mod rdm;

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fabric_core::kit::cntr::CntrCore;
use fabric_core::kit::cq::CqCore;
use fabric_core::kit::mr::MrTable;
use fabric_core::kit::objects::{Av, Cntr, Cq, Eq, EqCore, Progress};
use fabric_core::objects::{
    AtomicMsg, AtomicOp, AtomicOps, Bind, CmOps, CompletionFlags, CqEntry, CqErrEntry, Datatype,
    Endpoint, FiAddr, Msg, MsgOps, RmaIov, RmaMsg, RmaOps, TaggedOps,
};
use fabric_core::{Address, Caps, Error, ErrorKind, Info, OpFlags, Result};

use self::core::{EpInner, Kind, State, lock};
use crate::conn::{Pieces, Src};
use crate::progress::{Poller, token};
use crate::wire::AtomicKind;

/// What an endpoint is bound to.
#[derive(Debug, Default, Clone)]
pub(crate) struct Binds {
    pub tx_cq: Option<Arc<CqCore>>,
    pub tx_selective: bool,
    pub rx_cq: Option<Arc<CqCore>>,
    pub rx_selective: bool,
    pub av: Option<Arc<fabric_core::kit::av::AvTable>>,
    pub eq: Option<Arc<EqCore>>,
    pub cntr_send: Option<Arc<CntrCore>>,
    pub cntr_recv: Option<Arc<CntrCore>>,
    pub cntr_read: Option<Arc<CntrCore>>,
    pub cntr_write: Option<Arc<CntrCore>>,
    pub cntr_remote_read: Option<Arc<CntrCore>>,
    pub cntr_remote_write: Option<Arc<CntrCore>>,
}

impl Binds {
    /// Applies one `fi_ep_bind`.
    fn bind(&mut self, what: Bind<'_>, kind: Kind) -> Result<()> {
        match what {
            Bind::Cq {
                cq,
                transmit,
                recv,
                selective,
            } => {
                let cq = cq
                    .as_any()
                    .downcast_ref::<Cq>()
                    .ok_or_else(|| Error::inval("bind: the CQ belongs to another provider"))?;
                if !transmit && !recv {
                    return Err(Error::bad_flags(
                        "bind: a CQ needs FI_TRANSMIT and/or FI_RECV",
                    ));
                }
                if transmit {
                    self.tx_cq = Some(cq.core().clone());
                    self.tx_selective = selective;
                }
                if recv {
                    self.rx_cq = Some(cq.core().clone());
                    self.rx_selective = selective;
                }
            }
            Bind::Av(av) => {
                if kind == Kind::Msg {
                    return Err(Error::new(
                        ErrorKind::OpNotSupp,
                        "bind: MSG endpoints take no address vector",
                    ));
                }
                let av = av
                    .as_any()
                    .downcast_ref::<Av>()
                    .ok_or_else(|| Error::inval("bind: the AV belongs to another provider"))?;
                self.av = Some(av.table().clone());
            }
            Bind::Cntr(c, events) => {
                let c = c
                    .as_any()
                    .downcast_ref::<Cntr>()
                    .ok_or_else(|| Error::inval("bind: the counter belongs to another provider"))?;
                let all = Caps::SEND
                    | Caps::RECV
                    | Caps::READ
                    | Caps::WRITE
                    | Caps::REMOTE_READ
                    | Caps::REMOTE_WRITE;
                if events.is_empty() || !all.contains(events) {
                    return Err(Error::bad_flags(format!(
                        "bind: counter events {events} are not supported"
                    )));
                }
                let slots = [
                    (Caps::SEND, &mut self.cntr_send),
                    (Caps::RECV, &mut self.cntr_recv),
                    (Caps::READ, &mut self.cntr_read),
                    (Caps::WRITE, &mut self.cntr_write),
                    (Caps::REMOTE_READ, &mut self.cntr_remote_read),
                    (Caps::REMOTE_WRITE, &mut self.cntr_remote_write),
                ];
                for (ev, slot) in slots {
                    if events.contains(ev) {
                        *slot = Some(c.core().clone());
                    }
                }
            }
            Bind::Eq(eq) => {
                if kind == Kind::Rdm {
                    return Err(Error::new(
                        ErrorKind::OpNotSupp,
                        "bind: RDM endpoints take no event queue",
                    ));
                }
                let eq = eq
                    .as_any()
                    .downcast_ref::<Eq>()
                    .ok_or_else(|| Error::inval("bind: the EQ belongs to another provider"))?;
                self.eq = Some(eq.core().clone());
            }
        }
        Ok(())
    }

    /// The counter a transmit operation counts in.
    fn tx_counter(&self, flags: CompletionFlags) -> Option<&Arc<CntrCore>> {
        if flags.contains(CompletionFlags::READ) {
            self.cntr_read.as_ref()
        } else if flags.contains(CompletionFlags::WRITE) {
            self.cntr_write.as_ref()
        } else {
            self.cntr_send.as_ref()
        }
    }

    /// Reports a finished transmit.
    pub(crate) fn tx_done(&self, entry: CqEntry, report: bool) {
        if let Some(c) = self.tx_counter(entry.flags) {
            c.add(1);
        }
        if let (Some(cq), true) = (&self.tx_cq, report) {
            cq.push(entry, FiAddr::NOTAVAIL);
        }
    }

    /// Reports a finished receive (or remote CQ data).
    pub(crate) fn rx_done(&self, entry: CqEntry, src: FiAddr, report: bool) {
        if entry.flags.contains(CompletionFlags::RECV) {
            if let Some(c) = &self.cntr_recv {
                c.add(1);
            }
        }
        if let (Some(cq), true) = (&self.rx_cq, report) {
            cq.push(entry, src);
        }
    }

    /// Reports a failed transmit or receive.
    pub(crate) fn failed(&self, rx: bool, entry: CqEntry, err: &Error, olen: usize) {
        let c = if rx {
            self.cntr_recv.as_ref()
        } else {
            self.tx_counter(entry.flags)
        };
        if let Some(c) = c {
            c.add_err(1);
        }
        let cq = if rx { &self.rx_cq } else { &self.tx_cq };
        if let Some(cq) = cq {
            cq.push_err(CqErrEntry {
                entry,
                olen,
                err: err.kind(),
                prov_errno: err.kind().errno(),
                err_text: err.detail().to_string(),
                src_addr: None,
            });
        }
    }
}

/// Completion flags of a message operation.
pub(crate) fn msg_flags(tagged: bool, rx: bool) -> CompletionFlags {
    let kind = if tagged {
        CompletionFlags::TAGGED
    } else {
        CompletionFlags::MSG
    };
    kind | if rx {
        CompletionFlags::RECV
    } else {
        CompletionFlags::SEND
    }
}

/// An RDM or MSG endpoint of the tcp provider.
#[derive(Debug, Clone)]
pub struct TcpEndpoint {
    inner: Arc<EpInner>,
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
        poller.add(listener.as_fd(), token(inner.ep_no, 0))?;
        inner.lock().listener = Some(listener);
        Ok(TcpEndpoint { inner })
    }

    /// Opens a MSG endpoint: unconnected (then `connect`), or for the
    /// connection request `info.handle` names (then `accept`).
    pub(crate) fn open_msg(info: &Info, poller: Arc<Poller>, mr: Arc<MrTable>) -> Result<Self> {
        let pending = match info.handle {
            Some(h) => Some(passive::take(h)?),
            None => None,
        };
        let inner = EpInner::new(info, Kind::Msg, None, State::new(false), poller, mr);
        if let Some(pc) = pending {
            inner.msg_adopt(pc)?;
        }
        Ok(TcpEndpoint { inner })
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
    pub fn wait_fd(&self) -> BorrowedFd<'_> {
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
            let mut copy = [0u8; crate::getinfo::INJECT_SIZE];
            let buf = copy.get_mut(..len).unwrap_or_default();
            // SAFETY: the send contract: the pieces are readable now.
            unsafe { pieces.read_at(0, buf) };
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

impl RmaOps for TcpEndpoint {
    fn inject_write(
        &self,
        buf: &[u8],
        dest: FiAddr,
        remote: RmaIov,
        data: Option<u64>,
    ) -> Result<()> {
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
        self.inner.read(msg, flags)
    }

    unsafe fn writemsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        let pieces = Pieces::new(msg.iov)?;
        let len = pieces.len();
        if flags.contains(OpFlags::INJECT) {
            inject_check(&self.inner.info, len)?;
            let mut copy = [0u8; crate::getinfo::INJECT_SIZE];
            let buf = copy.get_mut(..len).unwrap_or_default();
            // SAFETY: the write contract: the pieces are readable now.
            unsafe { pieces.read_at(0, buf) };
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

impl AtomicOps for TcpEndpoint {
    fn atomic_valid(
        &self,
        datatype: Datatype,
        op: AtomicOp,
        fetch: bool,
        compare: bool,
    ) -> Result<usize> {
        let kind = match (fetch, compare) {
            (_, true) => AtomicKind::Compare,
            (true, false) => AtomicKind::Fetch,
            (false, false) => AtomicKind::Plain,
        };
        crate::atomic::valid(datatype, op, kind)
    }

    unsafe fn atomicmsg(&self, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
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
    fn info(&self) -> &Info {
        &self.inner.info
    }

    fn bind(&self, what: Bind<'_>) -> Result<()> {
        if self.inner.enabled.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
        }
        lock(&self.inner.binds).bind(what, self.inner.kind)
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
        self.inner
            .bound
            .set(b)
            .map_err(|_| Error::new(ErrorKind::OpBadState, "the endpoint is already enabled"))?;
        self.inner.enabled.store(true, Ordering::Release);
        Ok(())
    }

    fn cancel(&self, context: u64) -> Result<()> {
        self.inner.cancel(context)
    }
}

/// An RDM endpoint (the same type as a MSG endpoint).
pub type RdmEndpoint = TcpEndpoint;
