//! rdma_cm: event channels and ids (connection management).

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use fabric_core::{AddrFormat, Address, Error, Result};
use fabric_sys::ffi::{
    ibv_qp, ibv_qp_init_attr, rdma_cm_event_type, rdma_cm_id, rdma_conn_param, rdma_event_channel,
    rdma_port_space,
};
use fabric_sys::inline;

use super::device::{Context, Pd};
use super::verbs::{HwCq, Srq};
use super::wr::{RecvWr, SendWr};
use super::{Ptr, last_err, lib};

/// The kind of an rdma_cm event (`RDMA_CM_EVENT_*`), as far as the
/// provider tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmEventKind {
    /// `ADDR_RESOLVED`.
    AddrResolved,
    /// `ADDR_ERROR`.
    AddrError,
    /// `ROUTE_RESOLVED`.
    RouteResolved,
    /// `ROUTE_ERROR`.
    RouteError,
    /// `CONNECT_REQUEST`: a new id, to take ([`CmEvent::take_request`]).
    ConnectRequest,
    /// `CONNECT_ERROR`.
    ConnectError,
    /// `UNREACHABLE`.
    Unreachable,
    /// `REJECTED`.
    Rejected,
    /// `ESTABLISHED`.
    Established,
    /// `DISCONNECTED`.
    Disconnected,
    /// `DEVICE_REMOVAL`.
    DeviceRemoval,
    /// Another event.
    Other(u32),
}

impl CmEventKind {
    fn of(raw: u32) -> CmEventKind {
        use rdma_cm_event_type as ev;
        match raw {
            ev::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            ev::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            ev::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            ev::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            ev::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            ev::RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
            ev::RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
            ev::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            ev::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            ev::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            ev::RDMA_CM_EVENT_DEVICE_REMOVAL => CmEventKind::DeviceRemoval,
            other => CmEventKind::Other(other),
        }
    }
}

/// The sizes of a queue pair: asked for at creation, and what the device
/// gave (written back).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (unused with a shared receive queue).
    pub max_recv_wr: u32,
    /// Scatter entries per send.
    pub max_send_sge: u32,
    /// Scatter entries per receive.
    pub max_recv_sge: u32,
    /// Bytes a send may carry inline.
    pub max_inline_data: u32,
}

/// Private data a connect, accept or reject carries on RC in the TCP port
/// space (the IB CM's 92 bytes less rdma_cm's own 36-byte header). The CM
/// pads it to this size, so the provider frames it.
const WIRE_PRIVATE_DATA: usize = 56;

/// First byte of the provider's private-data frame.
const FRAME_MAGIC: u8 = 0xfa;

/// Largest private data of the application: the wire's, less the frame
/// header (magic, length).
pub(crate) const MAX_PRIVATE_DATA: usize = WIRE_PRIVATE_DATA - 2;

/// The wire form of private data: magic, length, data (the CM pads it, so
/// the length must travel with it).
fn frame(data: &[u8]) -> Result<([u8; WIRE_PRIVATE_DATA], u8)> {
    if data.len() > MAX_PRIVATE_DATA {
        return Err(Error::inval(format!(
            "verbs: {} bytes of private data; the limit is {MAX_PRIVATE_DATA}",
            data.len()
        )));
    }
    let mut out = [0u8; WIRE_PRIVATE_DATA];
    out[0] = FRAME_MAGIC;
    out[1] = data.len() as u8;
    out[2..2 + data.len()].copy_from_slice(data);
    Ok((out, (2 + data.len()) as u8))
}

/// The application's private data out of a received frame; data that is
/// not framed (a peer that is not this provider) is returned as it came.
pub(crate) fn unframe(raw: &[u8]) -> Vec<u8> {
    match raw {
        [FRAME_MAGIC, n, rest @ ..] if usize::from(*n) <= rest.len() => {
            rest[..usize::from(*n)].to_vec()
        }
        _ => raw.to_vec(),
    }
}

/// How long address and route resolution may take.
pub(crate) const RESOLVE_TIMEOUT_MS: i32 = 2000;

/// An rdma_cm event channel with a non-blocking fd.
#[derive(Debug)]
pub(crate) struct EventChannel {
    ptr: Ptr<rdma_event_channel>,
}

/// One connection-management event, copied out and acknowledged.
#[derive(Debug)]
pub(crate) struct CmEvent {
    /// What happened.
    pub kind: CmEventKind,
    /// `RDMA_CM_EVENT_*`.
    raw_kind: u32,
    /// The event's status (an errno or a reject reason).
    pub status: i32,
    /// The id the event is about (for a connect request: the new id, owned
    /// by whoever takes it).
    id: Ptr<rdma_cm_id>,
    /// Whether the new id of a connect request was taken.
    taken: bool,
    /// The private data the peer sent (connect request, accept, reject).
    pub data: Vec<u8>,
}

impl CmEvent {
    /// The identity of the id the event is about (compare with
    /// [`CmId::key`]).
    pub(crate) fn id_key(&self) -> usize {
        self.id.0 as usize
    }

    /// Takes the new id of a connect request (once; `None` for other
    /// events). Its events arrive on `channel` (the one this event came
    /// from) until it migrates.
    pub(crate) fn take_request(&mut self, channel: &Arc<EventChannel>) -> Option<CmId> {
        if self.kind != CmEventKind::ConnectRequest || self.taken {
            return None;
        }
        self.taken = true;
        Some(CmId {
            ptr: self.id,
            has_qp: false,
            channel: channel.clone(),
            _pd: None,
        })
    }

    /// The event's name (`rdma_event_str`).
    pub(crate) fn name(&self) -> String {
        let Ok(lib) = lib() else {
            return format!("event {}", self.raw_kind);
        };
        // SAFETY: returns a static string for any value.
        let p = unsafe { lib.rdma_event_str(self.raw_kind) };
        if p.is_null() {
            return format!("event {}", self.raw_kind);
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}

impl EventChannel {
    /// A new channel.
    pub(crate) fn new() -> Result<Arc<EventChannel>> {
        let lib = lib()?;
        // SAFETY: no arguments.
        let ch = unsafe { lib.rdma_create_event_channel() };
        if ch.is_null() {
            return Err(last_err("rdma_create_event_channel"));
        }
        let out = EventChannel { ptr: Ptr(ch) };
        // SAFETY: the channel's fd is ours.
        let fd = unsafe { (*ch).fd };
        // SAFETY: fcntl on an fd we own.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
            return Err(last_err("fcntl(O_NONBLOCK) on an rdma_cm channel"));
        }
        Ok(Arc::new(out))
    }

    /// The raw pointer.
    pub(crate) fn as_ptr(&self) -> *mut rdma_event_channel {
        self.ptr.0
    }

    /// The channel's fd (readable when an event waits).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd lives as long as the channel.
        unsafe { BorrowedFd::borrow_raw((*self.ptr.0).fd) }
    }

    /// The next event, if one is waiting; it is acknowledged before this
    /// returns (its private data is copied).
    pub(crate) fn next(&self) -> Result<Option<CmEvent>> {
        let lib = lib()?;
        let mut ev = std::ptr::null_mut();
        // SAFETY: live, non-blocking channel; valid out-pointer.
        let rc = unsafe { lib.rdma_get_cm_event(self.ptr.0, &mut ev) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                _ => Err(last_err("rdma_get_cm_event")),
            };
        }
        // SAFETY: `ev` is a live event until acknowledged below; the
        // private data pointer / length of the connection parameters are
        // valid for the events that carry them.
        let out = unsafe {
            let e = &*ev;
            let data = match e.event {
                rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST
                | rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED
                | rdma_cm_event_type::RDMA_CM_EVENT_REJECTED
                | rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_RESPONSE => {
                    let c = &e.param.conn;
                    if c.private_data.is_null() || c.private_data_len == 0 {
                        Vec::new()
                    } else {
                        unframe(std::slice::from_raw_parts(
                            c.private_data.cast::<u8>(),
                            usize::from(c.private_data_len),
                        ))
                    }
                }
                _ => Vec::new(),
            };
            CmEvent {
                kind: CmEventKind::of(e.event),
                raw_kind: e.event,
                status: e.status,
                id: Ptr(e.id),
                taken: false,
                data,
            }
        };
        // SAFETY: acknowledges the event taken above, once.
        unsafe { lib.rdma_ack_cm_event(ev) };
        Ok(Some(out))
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        if let Ok(lib) = lib() {
            // SAFETY: every id on the channel is destroyed first (ids hold
            // an `Arc` of their channel).
            unsafe { lib.rdma_destroy_event_channel(self.ptr.0) };
        }
    }
}

/// A socket address in C form.
pub(crate) struct CAddr {
    storage: libc::sockaddr_storage,
}

impl CAddr {
    /// The C form of `a`.
    pub(crate) fn new(a: &SocketAddr) -> CAddr {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let bytes = Address::from(*a).to_bytes();
        let n = bytes.len().min(size_of::<libc::sockaddr_storage>());
        // SAFETY: copies at most the storage's size into it.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&raw mut storage).cast::<u8>(), n)
        };
        CAddr { storage }
    }

    /// As `struct sockaddr *`.
    pub(crate) fn as_ptr(&mut self) -> *mut libc::sockaddr {
        (&raw mut self.storage).cast()
    }
}

/// Reads a C socket address (IPv4, IPv6 or IB).
///
/// # Safety
///
/// `sa` is null or points to a socket address as large as its family says.
pub(crate) unsafe fn read_sockaddr(sa: *const libc::sockaddr) -> Option<Address> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a readable sockaddr.
    let family = i32::from(unsafe { (*sa).sa_family });
    let len = match family {
        libc::AF_INET => size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        libc::AF_IB => size_of::<fabric_sys::ffi::sockaddr_ib>(),
        _ => return None,
    };
    // SAFETY: a socket address of that family is `len` bytes long.
    let bytes = unsafe { std::slice::from_raw_parts(sa.cast::<u8>(), len) };
    Address::from_bytes(AddrFormat::Sockaddr, bytes).ok()
}

/// Transport retries of a connection's queue pairs (see
/// [`ConnParam`]'s C form): a peer that answers nothing fails the work
/// after `RETRY_COUNT + 1` ACK timeouts.
pub(crate) const RETRY_COUNT: u8 = 6;

/// Connection parameters with private data.
pub(crate) struct ConnParam<'a> {
    /// Private data (at most [`MAX_PRIVATE_DATA`]).
    pub data: &'a [u8],
    /// Outstanding RDMA reads / atomics this side accepts as a target.
    pub responder_resources: u8,
    /// Outstanding RDMA reads / atomics this side issues.
    pub initiator_depth: u8,
}

impl ConnParam<'_> {
    /// The C parameters; they point into `wire`, which must outlive them.
    fn to_c(&self, wire: &[u8; WIRE_PRIVATE_DATA], len: u8) -> rdma_conn_param {
        rdma_conn_param {
            private_data: wire.as_ptr().cast(),
            private_data_len: len,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            // Transport retries after an ACK timeout: 6, so that a peer
            // that stops answering (its host is gone) fails the queue
            // pair's work with IBV_WC_RETRY_EXC_ERR after 7 timeouts.
            // Not 7: the largest value of the 3-bit field, 7 retries in
            // the InfiniBand specification (only the RNR count gives 7 the
            // meaning "for ever"), but soft-RoCE (rxe) treats 7 as
            // infinite as well, and never fails the work at all.
            retry_count: RETRY_COUNT,
            // Infinite retries on receiver-not-ready: a sender waits for
            // the peer to post a receive instead of failing.
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        }
    }
}

/// An rdma_cm id (RC, TCP port space) and the QP created on it; dropping
/// it destroys both.
#[derive(Debug)]
pub(crate) struct CmId {
    ptr: Ptr<rdma_cm_id>,
    has_qp: bool,
    channel: Arc<EventChannel>,
    /// Kept alive while the QP exists.
    _pd: Option<Arc<Pd>>,
}

fn check(rc: i32, what: &str) -> Result<()> {
    if rc == 0 { Ok(()) } else { Err(last_err(what)) }
}

impl CmId {
    /// A new id on `channel`.
    pub(crate) fn new(channel: &Arc<EventChannel>) -> Result<CmId> {
        let lib = lib()?;
        let mut id = std::ptr::null_mut();
        // SAFETY: live channel; valid out-pointer.
        let rc = unsafe {
            lib.rdma_create_id(
                channel.as_ptr(),
                &mut id,
                std::ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        check(rc, "rdma_create_id")?;
        Ok(CmId {
            ptr: Ptr(id),
            has_qp: false,
            channel: channel.clone(),
            _pd: None,
        })
    }

    /// The identity of the id (what [`CmEvent::id_key`] returns for its
    /// events).
    pub(crate) fn key(&self) -> usize {
        self.ptr.0 as usize
    }

    /// Moves the id's events to another channel.
    pub(crate) fn migrate(&mut self, channel: &Arc<EventChannel>) -> Result<()> {
        let lib = lib()?;
        // SAFETY: live id and channel; every event of the id was
        // acknowledged (events are acknowledged as they are read).
        let rc = unsafe { lib.rdma_migrate_id(self.ptr.0, channel.as_ptr()) };
        check(rc, "rdma_migrate_id")?;
        self.channel = channel.clone();
        Ok(())
    }

    /// The device the id is bound to, once bound or resolved.
    pub(crate) fn context(&self) -> Option<Context> {
        // SAFETY: live id.
        let v = unsafe { (*self.ptr.0).verbs };
        (!v.is_null()).then_some(Context(Ptr(v)))
    }

    /// The port the id is bound to.
    pub(crate) fn port_num(&self) -> u8 {
        // SAFETY: live id.
        unsafe { (*self.ptr.0).port_num }
    }

    /// Binds to a local address (port 0: any).
    pub(crate) fn bind(&self, addr: &SocketAddr) -> Result<()> {
        let lib = lib()?;
        let mut a = CAddr::new(addr);
        // SAFETY: live id; the address lives across the call.
        check(
            unsafe { lib.rdma_bind_addr(self.ptr.0, a.as_ptr()) },
            "rdma_bind_addr",
        )
    }

    /// Starts resolving `dst` (an `ADDR_RESOLVED` or `ADDR_ERROR` event
    /// follows).
    pub(crate) fn resolve_addr(&self, dst: &SocketAddr) -> Result<()> {
        let lib = lib()?;
        let mut d = CAddr::new(dst);
        // SAFETY: live id; the address lives across the call (librdmacm
        // copies it).
        check(
            unsafe {
                lib.rdma_resolve_addr(
                    self.ptr.0,
                    std::ptr::null_mut(),
                    d.as_ptr(),
                    RESOLVE_TIMEOUT_MS,
                )
            },
            "rdma_resolve_addr",
        )
    }

    /// Starts resolving the route (`ROUTE_RESOLVED` or `ROUTE_ERROR`).
    pub(crate) fn resolve_route(&self) -> Result<()> {
        let lib = lib()?;
        // SAFETY: live id with a resolved address.
        check(
            unsafe { lib.rdma_resolve_route(self.ptr.0, RESOLVE_TIMEOUT_MS) },
            "rdma_resolve_route",
        )
    }

    /// Creates the RC QP of this id on `pd` (the id must be bound to the
    /// PD's device) with completions on `send_cq` / `recv_cq` and receives
    /// from `srq` if given; `caps` is what to ask, and becomes what the
    /// device gave. The CQs and the SRQ must outlive the QP (their owner
    /// destroys the QP first).
    pub(crate) fn create_rc_qp(
        &mut self,
        pd: &Arc<Pd>,
        send_cq: &HwCq,
        recv_cq: &HwCq,
        srq: Option<&Srq>,
        caps: &mut QpCaps,
    ) -> Result<()> {
        let lib = lib()?;
        let mut attr = ibv_qp_init_attr {
            send_cq: send_cq.as_ptr(),
            recv_cq: recv_cq.as_ptr(),
            srq: srq.map_or(std::ptr::null_mut(), Srq::as_ptr),
            qp_type: fabric_sys::ffi::ibv_qp_type::IBV_QPT_RC,
            ..ibv_qp_init_attr::default()
        };
        attr.cap.max_send_wr = caps.max_send_wr;
        attr.cap.max_recv_wr = caps.max_recv_wr;
        attr.cap.max_send_sge = caps.max_send_sge;
        attr.cap.max_recv_sge = caps.max_recv_sge;
        attr.cap.max_inline_data = caps.max_inline_data;
        // SAFETY: live id and PD; the attributes name live CQs (and SRQ),
        // which the caller keeps for the QP's lifetime.
        let rc = unsafe { lib.rdma_create_qp(self.ptr.0, pd.as_ptr(), &mut attr) };
        check(rc, "rdma_create_qp")?;
        self.has_qp = true;
        self._pd = Some(pd.clone());
        caps.max_send_wr = attr.cap.max_send_wr;
        caps.max_recv_wr = attr.cap.max_recv_wr;
        caps.max_send_sge = attr.cap.max_send_sge;
        caps.max_recv_sge = attr.cap.max_recv_sge;
        caps.max_inline_data = attr.cap.max_inline_data;
        Ok(())
    }

    /// Destroys the QP (the id stays, for its remaining events).
    pub(crate) fn destroy_qp(&mut self) {
        if !self.has_qp {
            return;
        }
        let Ok(lib) = lib() else { return };
        // SAFETY: the QP is ours and destroyed once (`has_qp`).
        unsafe { lib.rdma_destroy_qp(self.ptr.0) };
        self.has_qp = false;
        self._pd = None;
    }

    /// The QP, once created (null before).
    fn qp(&self) -> *mut ibv_qp {
        // SAFETY: live id.
        unsafe { (*self.ptr.0).qp }
    }

    /// The QP's number, once it has one.
    pub(crate) fn qp_num(&self) -> Option<u32> {
        let qp = self.qp();
        // SAFETY: a QP of this id is live until `destroy_qp` / drop.
        (self.has_qp && !qp.is_null()).then(|| unsafe { (*qp).qp_num })
    }

    /// Posts a send on the id's QP. `Err(errno)` as the driver returns
    /// it (`ENOTCONN` without a QP).
    #[inline]
    pub(crate) fn post_send<const N: usize>(
        &self,
        wr: &mut SendWr<'_, N>,
    ) -> std::result::Result<(), i32> {
        let qp = self.qp();
        if !self.has_qp || qp.is_null() {
            return Err(libc::ENOTCONN);
        }
        // SAFETY: the QP lives while the id has it (`has_qp`).
        unsafe { super::verbs::post_send(qp, wr) }
    }

    /// Posts a receive on the id's QP, as [`post_send`](CmId::post_send).
    #[inline]
    pub(crate) fn post_recv<const N: usize>(
        &self,
        wr: &mut RecvWr<N>,
    ) -> std::result::Result<(), i32> {
        let qp = self.qp();
        if !self.has_qp || qp.is_null() {
            return Err(libc::ENOTCONN);
        }
        // SAFETY: the QP lives while the id has it (`has_qp`).
        unsafe { super::verbs::post_recv(qp, wr) }
    }

    /// Starts connecting (`ESTABLISHED`, `REJECTED`, `UNREACHABLE`, ...).
    pub(crate) fn connect(&self, p: &ConnParam<'_>) -> Result<()> {
        let lib = lib()?;
        let (wire, len) = frame(p.data)?;
        let mut c = p.to_c(&wire, len);
        // SAFETY: live id with a resolved route and a QP; the parameters
        // and their private data live across the call.
        check(
            unsafe { lib.rdma_connect(self.ptr.0, &mut c) },
            "rdma_connect",
        )
    }

    /// Listens for connect requests.
    pub(crate) fn listen(&self, backlog: i32) -> Result<()> {
        let lib = lib()?;
        // SAFETY: live, bound id.
        check(
            unsafe { lib.rdma_listen(self.ptr.0, backlog) },
            "rdma_listen",
        )
    }

    /// Accepts the connect request this id came from.
    pub(crate) fn accept(&self, p: &ConnParam<'_>) -> Result<()> {
        let lib = lib()?;
        let (wire, len) = frame(p.data)?;
        let mut c = p.to_c(&wire, len);
        // SAFETY: live id of a connect request, with a QP; the parameters
        // live across the call.
        check(
            unsafe { lib.rdma_accept(self.ptr.0, &mut c) },
            "rdma_accept",
        )
    }

    /// Rejects the connect request this id came from.
    pub(crate) fn reject(&self, data: &[u8]) -> Result<()> {
        let lib = lib()?;
        let (wire, len) = frame(data)?;
        // SAFETY: live id of a connect request; the data lives across the
        // call.
        check(
            unsafe { lib.rdma_reject(self.ptr.0, wire.as_ptr().cast(), len) },
            "rdma_reject",
        )
    }

    /// Disconnects (both sides get `DISCONNECTED`; the QP goes to error).
    pub(crate) fn disconnect(&self) -> Result<()> {
        let lib = lib()?;
        // SAFETY: live id.
        check(
            unsafe { lib.rdma_disconnect(self.ptr.0) },
            "rdma_disconnect",
        )
    }

    /// The local address.
    pub(crate) fn local_addr(&self) -> Option<Address> {
        // SAFETY: live id; the address storage is inside it.
        unsafe { read_sockaddr(inline::rdma_get_local_addr(self.ptr.0)) }
    }

    /// The peer address.
    pub(crate) fn peer_addr(&self) -> Option<Address> {
        // SAFETY: as above.
        unsafe { read_sockaddr(inline::rdma_get_peer_addr(self.ptr.0)) }
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        let Ok(lib) = lib() else { return };
        // SAFETY: the id (and its QP) are ours and destroyed once; every
        // event of the id was acknowledged as it was read, so
        // rdma_destroy_id does not wait.
        unsafe {
            if self.has_qp {
                lib.rdma_destroy_qp(self.ptr.0);
            }
            if lib.rdma_destroy_id(self.ptr.0) != 0 {
                tracing::warn!("verbs: rdma_destroy_id failed");
            }
        }
    }
}

/// The device and port a local IP address belongs to (a throw-away id is
/// bound to it), or `None` when it is no RDMA device's.
pub(crate) fn device_of(ip: std::net::IpAddr) -> Option<(Context, u8)> {
    let ch = EventChannel::new().ok()?;
    let id = CmId::new(&ch).ok()?;
    id.bind(&SocketAddr::new(ip, 0)).ok()?;
    let ctx = id.context()?;
    Some((ctx, id.port_num()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_frames_round_trip() {
        let (w, n) = frame(b"hello").unwrap();
        assert_eq!(n, 7);
        // The CM pads to the full size: the frame still knows the length.
        assert_eq!(unframe(&w), b"hello");
        assert_eq!(unframe(&w[..n as usize]), b"hello");
        assert_eq!(unframe(&frame(b"").unwrap().0), b"");
        assert!(frame(&[0; MAX_PRIVATE_DATA + 1]).is_err());
        // Foreign data comes back unchanged, a bad length too.
        assert_eq!(unframe(b"abc"), b"abc");
        assert_eq!(unframe(&[FRAME_MAGIC, 9, 1]), vec![FRAME_MAGIC, 9, 1]);
    }
}
