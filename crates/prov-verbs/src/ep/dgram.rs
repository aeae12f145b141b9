//! DGRAM endpoints: unreliable datagrams on a UD queue pair.
//!
//! - **Addresses** are `FI_ADDR_IB_UD` ([`AddrFormat::IbUd`]), 28 bytes:
//!   GID (16), QP number (u32 LE), Q_Key (u32 LE), LID (u16 LE), P_Key
//!   (u16 LE). `fi_getname` returns the endpoint's; an AV turns an inserted
//!   name into an address handle on first use (cached per endpoint).
//! - **Wire**: each datagram carries the sender's 28-byte name, then the
//!   payload, so the receiver reports its source (FI_SOURCE) without
//!   decoding the GRH. Remote CQ data travels as the immediate.
//! - **Buffers**: sends are copied into registered send buffers and
//!   receives land in registered receive buffers (with room for the 40-byte
//!   GRH) and are copied out, so no registration and no FI_MSG_PREFIX are
//!   needed. A datagram that arrives when no receive is posted is dropped,
//!   as datagrams may be; one larger than the receive is truncated
//!   (`FI_ETRUNC`).
//! - **Size**: a datagram holds at most the port's active MTU less the
//!   name (`ep_attr.max_msg_size`).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fabric_core::kit::objects::Progress;
use fabric_core::kit::rx::Pieces;
use fabric_core::objects::{
    AtomicOps, Bind, CmOps, CompletionFlags, CqEntry, CqErrEntry, Endpoint, FiAddr, Msg, MsgOps,
    RmaOps, TaggedOps,
};
use fabric_core::{AddrFormat, Address, Error, ErrorKind, Info, OpFlags, Result};

use super::{Binds, IOV_MAX, lock, wc_error};
use crate::domain::DomainCore;
use crate::raw::mem::{NO_IOV, UserIov, write_recv};
use crate::raw::verbs::{Ah, HwCq, Pool, UdQp};
use crate::raw::wr::{Opcode, RecvWr, SendFlags, SendWr, SgeList, Wc};
use crate::raw::{UDP_QKEY, from_errno};

/// Bytes of a UD name.
pub(crate) const NAME_LEN: usize = 28;
/// The GRH the device writes before every received datagram.
const GRH: usize = 40;
/// Send and receive buffers (and the QP's depth).
const BUFS: usize = 256;
const K_RX: u64 = 1 << 62;
const K_TX: u64 = 2 << 62;
const INDEX_MASK: u64 = (1 << 62) - 1;

/// The datagram payload limit of a port with this active MTU.
pub(crate) fn max_msg(mtu: usize) -> usize {
    mtu.saturating_sub(NAME_LEN)
}

/// A UD name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct UdName {
    pub gid: [u8; 16],
    pub qpn: u32,
    pub qkey: u32,
    pub lid: u16,
    pub pkey: u16,
}

impl UdName {
    pub(crate) fn encode(&self) -> [u8; NAME_LEN] {
        let mut b = [0u8; NAME_LEN];
        b[..16].copy_from_slice(&self.gid);
        b[16..20].copy_from_slice(&self.qpn.to_le_bytes());
        b[20..24].copy_from_slice(&self.qkey.to_le_bytes());
        b[24..26].copy_from_slice(&self.lid.to_le_bytes());
        b[26..28].copy_from_slice(&self.pkey.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<UdName> {
        let b: &[u8; NAME_LEN] = b.get(..NAME_LEN)?.try_into().ok()?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[..16]);
        Some(UdName {
            gid,
            qpn: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
            qkey: u32::from_le_bytes([b[20], b[21], b[22], b[23]]),
            lid: u16::from_le_bytes([b[24], b[25]]),
            pkey: u16::from_le_bytes([b[26], b[27]]),
        })
    }

    pub(crate) fn address(&self) -> Address {
        Address::Raw {
            format: AddrFormat::IbUd,
            bytes: self.encode().to_vec(),
        }
    }

    pub(crate) fn of(a: &Address) -> Option<UdName> {
        match a {
            Address::Raw {
                format: AddrFormat::IbUd,
                bytes,
            } if bytes.len() == NAME_LEN => UdName::decode(bytes),
            _ => None,
        }
    }

    /// The IP address the GID stands for (RoCE GIDs are IP addresses).
    fn ip(&self) -> IpAddr {
        let v6 = std::net::Ipv6Addr::from(self.gid);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

/// A posted receive.
#[derive(Debug, Clone, Copy)]
struct Recv {
    context: u64,
    /// The caller's buffer (vouched for by `recvmsg`).
    buf: Pieces<IOV_MAX>,
    len: usize,
    report: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Tx {
    context: u64,
    len: usize,
    flags: CompletionFlags,
    report: bool,
}

struct Peer {
    ah: Ah,
    qpn: u32,
    qkey: u32,
}

struct State {
    posted: VecDeque<Recv>,
    tx_free: Vec<usize>,
    tx: Vec<Tx>,
    peers: HashMap<UdName, Peer>,
}

struct Inner {
    // Declared first: the QP goes before the CQ and the buffers it uses.
    qp: UdQp,
    state: Mutex<State>,
    cq: HwCq,
    tx_pool: Pool,
    rx_pool: Pool,
    name: UdName,
    port: u8,
    sgid_index: u8,
    max_msg: usize,
    info: Info,
    domain: Arc<DomainCore>,
    binds: OnceLock<Binds>,
    pending: Mutex<Binds>,
    armed: AtomicBool,
}

/// A DGRAM endpoint of the verbs provider (a UD queue pair).
pub struct DgramEndpoint {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DgramEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DgramEndpoint")
            .field("qpn", &self.inner.name.qpn)
            .finish_non_exhaustive()
    }
}

impl DgramEndpoint {
    pub(crate) fn open(info: &Info, domain: Arc<DomainCore>) -> Result<DgramEndpoint> {
        let template = info.src_addr.as_ref().and_then(UdName::of).ok_or_else(|| {
            Error::inval("verbs: a DGRAM endpoint needs an FI_ADDR_IB_UD source address (its GID)")
        })?;
        let ip = template.ip();
        let (ctx, port) = crate::raw::cm::device_of(ip).ok_or_else(|| {
            Error::new(
                ErrorKind::AddrNotAvail,
                format!("verbs: {ip} is not the address of an RDMA port"),
            )
        })?;
        if ctx.as_ptr() != domain.ctx.as_ptr() {
            return Err(Error::new(
                ErrorKind::Domain,
                "verbs: the endpoint's address is not on this domain's device",
            ));
        }
        let (sgid_index, gid) = ctx.gid_for(port, ip).ok_or_else(|| {
            Error::new(
                ErrorKind::AddrNotAvail,
                format!("verbs: no GID of port {port} is {ip}"),
            )
        })?;
        let pa = ctx.query_port(port)?;
        let mtu = 128usize << pa.attr.active_mtu.clamp(1, 5);
        let cq = HwCq::new(
            domain.ctx,
            4096.min(i32::try_from(domain.max_cqe).unwrap_or(4096)),
        )?;
        let qkey = UDP_QKEY;
        let (qp, qpn) = UdQp::new(&domain.pd, &cq, BUFS as u32, port, qkey)?;
        let tx_pool = Pool::new(&domain.pd, NAME_LEN + max_msg(mtu), BUFS)?;
        let rx_pool = Pool::new(&domain.pd, GRH + mtu, BUFS)?;
        for i in 0..rx_pool.count() {
            post_rx(&qp, &rx_pool, i)?;
        }
        let name = UdName {
            gid,
            qpn,
            qkey,
            lid: pa.attr.lid,
            pkey: 0xffff,
        };
        Ok(DgramEndpoint {
            inner: Arc::new(Inner {
                qp,
                state: Mutex::new(State {
                    posted: VecDeque::new(),
                    tx_free: (0..BUFS).rev().collect(),
                    tx: vec![Tx::default(); BUFS],
                    peers: HashMap::new(),
                }),
                cq,
                tx_pool,
                rx_pool,
                name,
                port,
                sgid_index: u8::try_from(sgid_index).unwrap_or(0),
                max_msg: max_msg(mtu),
                info: info.clone(),
                domain,
                binds: OnceLock::new(),
                pending: Mutex::new(Binds::default()),
                armed: AtomicBool::new(false),
            }),
        })
    }

    fn inner(&self) -> Result<(&Inner, &Binds)> {
        match self.inner.binds.get() {
            Some(b) => Ok((&self.inner, b)),
            None => Err(Error::new(
                ErrorKind::OpBadState,
                "verbs: endpoint not enabled (call enable after binding its CQ and AV)",
            )),
        }
    }
}

fn post_rx(qp: &UdQp, pool: &Pool, i: usize) -> Result<()> {
    let mut wr = RecvWr::<1>::new(K_RX | i as u64, SgeList::one(pool.sge(i, pool.buf_len())));
    qp.post_recv(&mut wr)
        .map_err(|e| from_errno(e, "ibv_post_recv (UD)"))
}

impl Inner {
    fn push_rx(&self, e: CqEntry, src: FiAddr, report: bool) {
        if let Some(b) = self.binds.get() {
            if let Some(c) = &b.cntr_recv {
                c.add(1);
            }
            if report {
                if let Some(cq) = &b.rx_cq {
                    cq.push(e, src);
                }
            }
        }
    }

    fn push_rx_err(&self, e: CqErrEntry) {
        if let Some(b) = self.binds.get() {
            if let Some(c) = &b.cntr_recv {
                c.add_err(1);
            }
            if let Some(cq) = &b.rx_cq {
                cq.push_err(e);
            }
        }
    }

    fn arrived(&self, st: &mut State, wc: &Wc, i: usize) {
        // The device wrote the bytes into receive buffer `i`, which is
        // reposted only after this returns.
        let raw = self.rx_pool.read(i, 0, wc.byte_len() as usize);
        let Some(body) = raw.get(GRH..) else { return };
        let Some(from) = UdName::decode(body) else {
            tracing::debug!("verbs: dropping a datagram without a sender name");
            return;
        };
        let payload = &body[NAME_LEN..];
        let Some(r) = st.posted.pop_front() else {
            tracing::debug!(
                bytes = payload.len(),
                "verbs: no receive posted; datagram dropped"
            );
            return;
        };
        let src = match self.binds.get().and_then(|b| b.av.as_ref()) {
            Some(av) => av.reverse(&from.address()),
            None => FiAddr::NOTAVAIL,
        };
        let off = write_recv(&r.buf, 0, payload);
        let mut entry = CqEntry {
            context: r.context,
            flags: CompletionFlags::MSG | CompletionFlags::RECV,
            len: off,
            ..CqEntry::default()
        };
        if let Some(imm) = wc.imm() {
            entry.flags |= CompletionFlags::REMOTE_CQ_DATA;
            entry.data = u64::from(imm);
        }
        if payload.len() > r.len {
            self.push_rx_err(CqErrEntry {
                entry,
                olen: payload.len() - r.len,
                err: ErrorKind::Trunc,
                prov_errno: 0,
                err_text: format!(
                    "verbs: a {}-byte datagram was truncated to the {}-byte receive",
                    payload.len(),
                    r.len
                ),
                src_addr: None,
            });
        } else {
            self.push_rx(entry, src, r.report);
        }
    }

    fn handle_wc(&self, st: &mut State, wc: &Wc) {
        let i = (wc.wr_id() & INDEX_MASK) as usize;
        if wc.wr_id() & K_RX != 0 {
            if wc.ok() {
                self.arrived(st, wc, i);
            }
            if i < self.rx_pool.count() {
                if let Err(e) = post_rx(&self.qp, &self.rx_pool, i) {
                    tracing::warn!(error = %e, "verbs: cannot repost a datagram buffer");
                }
            }
            return;
        }
        let Some(t) = st.tx.get(i).copied() else {
            return;
        };
        st.tx_free.push(i);
        let entry = CqEntry {
            context: t.context,
            flags: t.flags,
            len: t.len,
            ..CqEntry::default()
        };
        let Some(b) = self.binds.get() else { return };
        if wc.ok() {
            if let Some(c) = &b.cntr_send {
                c.add(1);
            }
            if t.report {
                if let Some(cq) = &b.tx_cq {
                    cq.push(entry, FiAddr::NOTAVAIL);
                }
            }
        } else {
            if let Some(c) = &b.cntr_send {
                c.add_err(1);
            }
            if let Some(cq) = &b.tx_cq {
                cq.push_err(wc_error(wc, entry));
            }
        }
    }

    fn progress_locked(&self, st: &mut State) -> Result<()> {
        let mut wcs = [std::mem::MaybeUninit::<Wc>::uninit(); 16];
        loop {
            let polled = self.cq.poll(&mut wcs)?;
            let n = polled.len();
            for wc in polled {
                self.handle_wc(st, wc);
            }
            if n < wcs.len() {
                return Ok(());
            }
        }
    }

    /// The peer of a destination: its address handle (made on first use).
    fn peer<'s>(&self, st: &'s mut State, b: &Binds, dest: FiAddr) -> Result<&'s Peer> {
        let av = b
            .av
            .as_ref()
            .ok_or_else(|| Error::new(ErrorKind::NoAv, "verbs: bind an address vector first"))?;
        let a = av.lookup(dest)?;
        let name = UdName::of(&a)
            .ok_or_else(|| Error::inval(format!("verbs: `{a}` is not an FI_ADDR_IB_UD address")))?;
        match st.peers.entry(name) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(v) => {
                let ah = Ah::new(
                    &self.domain.pd,
                    self.port,
                    name.lid,
                    name.gid,
                    self.sgid_index,
                )?;
                Ok(v.insert(Peer {
                    ah,
                    qpn: name.qpn,
                    qkey: name.qkey,
                }))
            }
        }
    }

    /// Sends a datagram of the caller's buffers (copied before this
    /// returns).
    fn send(
        &self,
        b: &Binds,
        user: &UserIov<'_>,
        dest: FiAddr,
        context: u64,
        data: Option<u64>,
        report: bool,
    ) -> Result<()> {
        let len = user.len()?;
        if len > self.max_msg {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!(
                    "verbs: {len} bytes exceed the datagram size {}",
                    self.max_msg
                ),
            ));
        }
        let imm = data.map(super::imm).transpose()?;
        let mut st = lock(&self.state);
        if st.tx_free.is_empty() {
            self.progress_locked(&mut st)?;
        }
        let Some(slot) = st.tx_free.pop() else {
            return Err(Error::new(
                ErrorKind::Again,
                "verbs: every datagram buffer is in use",
            ));
        };
        let pool = &self.tx_pool;
        pool.write(slot, 0, &self.name.encode());
        pool.gather(slot, NAME_LEN, user);
        let posted = match self.peer(&mut st, b, dest) {
            Ok(peer) => {
                let mut wr = SendWr::new(
                    K_TX | slot as u64,
                    Opcode::send(imm),
                    SgeList::<1>::one(pool.sge(slot, NAME_LEN + len)),
                )
                .ud(&peer.ah, peer.qpn, peer.qkey)
                .flags(SendFlags::SIGNALED);
                self.qp.post_send(&mut wr).map_err(|e| {
                    if e == libc::ENOMEM {
                        Error::again()
                    } else {
                        from_errno(e, "ibv_post_send (UD)")
                    }
                })
            }
            Err(e) => Err(e),
        };
        if let Err(e) = posted {
            st.tx_free.push(slot);
            return Err(e);
        }
        st.tx[slot] = Tx {
            context,
            len,
            flags: CompletionFlags::MSG | CompletionFlags::SEND,
            report,
        };
        Ok(())
    }
}

impl Progress for Inner {
    fn progress(&self) -> Result<()> {
        if self.armed.load(Ordering::Acquire)
            && self.cq.consume_events() > 0
            && self.cq.arm().is_err()
        {
            self.armed.store(false, Ordering::Release);
        }
        let Ok(mut st) = self.state.try_lock() else {
            return Ok(());
        };
        self.progress_locked(&mut st)
    }

    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        if !self.armed.swap(true, Ordering::AcqRel) && self.cq.arm().is_err() {
            self.armed.store(false, Ordering::Release);
        }
        f(self.cq.fd());
    }

    /// Arms the engine's CQ (when a wait fd did not already) and
    /// progresses: completions before the arming are handled now, later
    /// ones make the fd readable.
    fn trywait(&self) -> Result<()> {
        if !self.armed.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.cq.arm() {
                self.armed.store(false, Ordering::Release);
                return Err(e);
            }
        }
        self.progress()
    }
}

impl MsgOps for DgramEndpoint {
    fn inject(&self, buf: &[u8], dest: FiAddr, data: Option<u64>) -> Result<()> {
        let (i, b) = self.inner()?;
        let mut one = NO_IOV;
        let user = UserIov::of_slice(buf, &mut one);
        i.send(b, &user, dest, 0, data, false)
    }

    #[allow(unsafe_code)]
    unsafe fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let (i, b) = self.inner()?;
        let data = flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(msg.data);
        let report = !b.tx_selective || flags.contains(OpFlags::COMPLETION);
        // SAFETY: the caller's buffers are valid for the call (the trait's
        // contract); they are copied before it returns.
        let user = unsafe { UserIov::new(msg.iov) };
        i.send(b, &user, msg.addr, msg.context, data, report)
    }

    #[allow(unsafe_code)]
    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        self.recv(&user, msg.context, flags)
    }
}

impl DgramEndpoint {
    fn recv(&self, user: &UserIov<'_>, context: u64, flags: OpFlags) -> Result<()> {
        let (i, b) = self.inner()?;
        if user.pieces().len() > IOV_MAX {
            return Err(Error::inval(format!(
                "verbs: {} IO vector pieces; the limit is {IOV_MAX}",
                user.pieces().len()
            )));
        }
        if flags.contains(OpFlags::MULTI_RECV) {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "verbs: FI_MULTI_RECV is not supported",
            ));
        }
        let r = Recv {
            context,
            buf: user.to_pieces()?,
            len: user.len()?,
            report: !b.rx_selective || flags.contains(OpFlags::COMPLETION),
        };
        let mut st = lock(&i.state);
        if st.posted.len() >= i.info.rx_attr.size.max(BUFS) {
            return Err(Error::again());
        }
        st.posted.push_back(r);
        Ok(())
    }
}

impl TaggedOps for DgramEndpoint {}
impl RmaOps for DgramEndpoint {}
impl AtomicOps for DgramEndpoint {}

impl CmOps for DgramEndpoint {
    fn getname(&self) -> Result<Address> {
        Ok(self.inner.name.address())
    }
}

impl Endpoint for DgramEndpoint {
    fn info(&self) -> &Info {
        &self.inner.info
    }

    fn bind(&self, what: Bind<'_>) -> Result<()> {
        super::bind_pending(
            &self.inner.binds,
            &self.inner.pending,
            what,
            super::DGRAM_ACCEPTS,
        )
    }

    fn enable(&self) -> Result<()> {
        let me: Arc<dyn Progress> = self.inner.clone();
        super::enable_pending(
            &self.inner.binds,
            &self.inner.pending,
            me,
            false,
            "a DGRAM endpoint",
        )
    }

    fn cancel(&self, context: u64) -> Result<()> {
        if self.inner.binds.get().is_none() {
            return Err(super::not_enabled());
        }
        let mut st = lock(&self.inner.state);
        let Some(pos) = st.posted.iter().position(|r| r.context == context) else {
            return Err(Error::new(
                ErrorKind::NoEnt,
                "verbs: no posted receive has this context",
            ));
        };
        st.posted.remove(pos);
        drop(st);
        self.inner.push_rx_err(CqErrEntry {
            entry: CqEntry {
                context,
                flags: CompletionFlags::MSG | CompletionFlags::RECV,
                ..CqEntry::default()
            },
            olen: 0,
            err: ErrorKind::Canceled,
            prov_errno: 0,
            err_text: "verbs: the receive was cancelled".into(),
            src_addr: None,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_as_addresses() {
        let n = UdName {
            gid: std::net::Ipv4Addr::new(10, 99, 0, 1)
                .to_ipv6_mapped()
                .octets(),
            qpn: 0x1234,
            qkey: UDP_QKEY,
            lid: 0,
            pkey: 0xffff,
        };
        let a = n.address();
        assert_eq!(UdName::of(&a), Some(n));
        assert_eq!(n.ip(), "10.99.0.1".parse::<IpAddr>().unwrap());
        let s = a.to_string();
        assert_eq!(s.parse::<Address>().unwrap(), a);
        assert_eq!(UdName::decode(&[0u8; 10]), None);
        assert_eq!(
            UdName::of(&"fi_sockaddr_in://1.2.3.4:5".parse().unwrap()),
            None
        );
        assert_eq!(max_msg(1024), 996);
    }
}
