//! RDM endpoints: the operations the application calls.
//!
//! The calling thread does the common case itself, without a lock:
//! an eager message (inline in the ring, or in one bounce buffer) goes
//! straight into the peer's ring and completes at once (its data is in the
//! peer's memory: FI_TRANSMIT_COMPLETE), as do injects, injected RMA
//! writes and injected atomics. Everything that needs an answer from the
//! target (rendezvous messages, RMA, atomics, FI_DELIVERY_COMPLETE,
//! FI_FENCE) and eager messages that found the ring full are handed to
//! the domain's engine through a lock-free queue; while such operations
//! are queued, later sends queue behind them, which keeps send-after-send
//! order. Receives reach the engine the same way.

pub(crate) mod binds;
mod choice;
pub(crate) mod engine;
mod flow;
mod handoff;
mod peers;
// Rendezvous data into receive buffers (cross-memory attach, pushes).
#[allow(unsafe_code)]
mod rndv;
// An eager message's bytes into the matched receive's buffer.
#[allow(unsafe_code)]
mod rx;
pub(crate) mod shared;
mod slab;
pub(crate) mod srx;
mod state;
// RMA and atomics into and out of registered memory.
#[allow(unsafe_code)]
mod target;
// The bytes of the operations this endpoint sends, from callers' buffers.
#[allow(unsafe_code)]
mod tx;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use fabric_core::kit::atomic::{self, AtomicKind};
use fabric_core::kit::lock;
use fabric_core::kit::mr::MrTable;
use fabric_core::objects::{
    AtomicMsg, AtomicOp, AtomicOps, Bind, CmOps, CompletionFlags, Datatype, Endpoint, FiAddr,
    IoVec, MrDesc, Msg, MsgOps, RmaIov, RmaMsg, RmaOps, SharedRx, TaggedOps,
};
use fabric_core::{Address, Caps, Error, ErrorKind, Info, OpFlags, Result};

use self::binds::{TxDone, TxReport, msg_flags};
use self::engine::Engine;
use self::shared::{EpShared, RmaList, RxReq, TxKind, TxReq, register_own};
use self::state::EpRx;
use self::target::MAX_ATOMIC_COUNT;
use crate::config::{INJECT_SIZE, region_of};
use crate::pieces::{Pieces, PiecesExt};
use crate::region::{self, Region, RegionConfig};
use crate::ring::Command;
use crate::wire::{DESC_MAX, Desc, INJECT_ID, RMA_IOV_LIMIT, flag, op};

/// An RDM endpoint of the shm provider. Its address (`getname`) is
/// `fi_shm://<region name>`; dropping it closes the region (peers see it
/// closed, the file is removed).
#[derive(Debug)]
pub struct ShmEndpoint {
    shared: Arc<EpShared>,
    engine: Arc<Engine>,
}

impl ShmEndpoint {
    pub(crate) fn open(
        info: &Info,
        engine: Arc<Engine>,
        mr: Arc<MrTable>,
        cma: bool,
        eager_max: usize,
    ) -> Result<ShmEndpoint> {
        let config = RegionConfig::default();
        // The answer's src_addr names the region: a service's well-known
        // name must be had (`AddrInUse` otherwise, as for a port); a name
        // getinfo chose goes to the first endpoint opened from that
        // answer, and a later one gets a fresh name (getname tells).
        let region = match &info.src_addr {
            Some(a) => {
                let name = region_of(a)?;
                match Region::create_named(&config, name) {
                    Err(e) if e.kind() == ErrorKind::AddrInUse && !region::is_service(name) => {
                        Region::create(&config)?
                    }
                    r => r?,
                }
            }
            None => Region::create(&config)?,
        };
        register_own(region.name());
        let rx = region.receiver()?;
        let shared = Arc::new(EpShared::new(
            info,
            region.name().to_owned(),
            cma,
            eager_max,
            mr,
        ));
        engine.add(EpRx::new(shared.clone(), region, rx))?;
        Ok(ShmEndpoint { shared, engine })
    }

    /// The endpoint's region name (its address without the scheme).
    pub fn region_name(&self) -> &str {
        &self.shared.region_name
    }

    /// Whether this endpoint moves large messages and RMA with
    /// cross-memory attach (else through bounce buffers).
    pub fn uses_cma(&self) -> bool {
        self.shared.cma
    }

    /// Hands an operation to the engine; `Again` once `tx_attr.size`
    /// operations are outstanding.
    fn enqueue(&self, req: TxReq) -> Result<()> {
        let sh = &*self.shared;
        let size = sh.info.tx_attr.size.max(1);
        if sh.outstanding.fetch_add(1, Ordering::AcqRel) >= size {
            sh.outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::again());
        }
        sh.queued.fetch_add(1, Ordering::AcqRel);
        if sh.txq.push(req).is_err() {
            sh.queued.fetch_sub(1, Ordering::AcqRel);
            sh.outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::again());
        }
        self.engine.try_start(sh.id);
        self.engine.nudge();
        Ok(())
    }

    /// Every message send ends here.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[allow(unsafe_code)] // Reads the caller's buffer (the send contract).
    fn send(
        &self,
        buf: Pieces,
        dest: FiAddr,
        tagged: bool,
        tag: u64,
        flags: OpFlags,
        data: u64,
        context: u64,
    ) -> Result<()> {
        let sh = &*self.shared;
        let b = sh.bound()?;
        let len = buf.len();
        if len > sh.info.ep_attr.max_msg_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                "shm: message larger than max_msg_size",
            ));
        }
        let inject = flags.contains(OpFlags::INJECT);
        if inject && len > INJECT_SIZE {
            return Err(Error::new(
                ErrorKind::MsgSize,
                "shm: inject larger than inject_size",
            ));
        }
        let peer = sh.peer(b, dest)?;
        let done = TxDone {
            context,
            flags: msg_flags(tagged, false),
            len,
            report: !inject && (!b.tx_selective || flags.contains(OpFlags::COMPLETION)),
        };
        let cap = peer
            .sender
            .bounce_capacity()
            .max(peer.sender.inline_capacity());
        let eager = len <= sh.eager_max && len <= cap;
        // From `MID_MIN` on, the copy is chosen by measurement: eagerly
        // through a bounce buffer or by cross-memory attach. A choice of
        // CMA, and an eager message picked to be timed, go to the engine,
        // which times them to their `ACK` (see `choice`).
        let probe = (eager && !inject && len >= choice::MID_MIN && len < sh.cma_min)
            .then(|| peer.mid_choice(sh))
            .flatten()
            .map(|c| c.pick_sampled(len));
        // A timed eager sample goes through the engine, which asks for an
        // `ACK` and times the message whole (see `choice`).
        if eager
            && !probe.is_some_and(|p| p.cma() || p.timed())
            && !flags.intersects(OpFlags::FENCE | OpFlags::DELIVERY_COMPLETE)
            && sh.queued.load(Ordering::Acquire) == 0
            && !peer.paused.load(Ordering::Relaxed)
        {
            let cmd = msg_command(
                sh.id,
                tagged.then_some(tag),
                flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(data),
            );
            // SAFETY: the send contract: the buffer is readable during the
            // call (and, without FI_INJECT, until completion).
            let (parts, n) = unsafe { buf.slices() };
            match peer.sender.try_send_parts(&cmd, &parts[..n]) {
                Ok(()) => {
                    b.tx_op_done(&done);
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Again && !inject => {}
                Err(e) if e.kind() == ErrorKind::Again => {
                    // A ring that stays full may belong to a peer that is
                    // gone (killed without closing): say so instead.
                    return Err(if peer.check_alive() {
                        e
                    } else {
                        shared::peer_gone()
                    });
                }
                Err(e) => return Err(e),
            }
        } else if inject {
            // The data must be copied now; queued operations go first.
            return Err(Error::again());
        }
        self.enqueue(TxReq {
            peer: peer.arc(),
            kind: TxKind::Send { tagged, tag },
            buf,
            flags,
            data,
            done,
            probe: probe.filter(|p| p.timed()),
        })
    }

    fn inject_msg(
        &self,
        buf: &[u8],
        dest: FiAddr,
        tagged: bool,
        tag: u64,
        data: Option<u64>,
    ) -> Result<()> {
        // The common case in few steps: the payload fits the peer's slot
        // and nothing is queued before it. It is what `send` does for it,
        // without the piece list.
        let sh = &*self.shared;
        let b = sh.bound()?;
        if buf.len() <= INJECT_SIZE && buf.len() <= sh.info.ep_attr.max_msg_size {
            let peer = sh.peer(b, dest)?;
            if buf.len() <= peer.sender.inline_capacity()
                && sh.queued.load(Ordering::Acquire) == 0
                && !peer.paused.load(Ordering::Relaxed)
            {
                let cmd = msg_command(sh.id, tagged.then_some(tag), data);
                return match peer.sender.try_send_inline(&cmd, buf) {
                    Ok(()) => {
                        b.tx_op_done(&TxDone {
                            context: 0,
                            flags: msg_flags(tagged, false),
                            len: buf.len(),
                            report: false,
                        });
                        Ok(())
                    }
                    // A ring that stays full may belong to a peer that is
                    // gone (killed without closing): say so instead.
                    Err(e) if e.kind() == ErrorKind::Again && !peer.check_alive() => {
                        Err(shared::peer_gone())
                    }
                    Err(e) => Err(e),
                };
            }
        }
        let iov = [fabric_core::objects::IoVec {
            addr: buf.as_ptr().cast_mut(),
            len: buf.len(),
        }];
        let mut flags = OpFlags::INJECT;
        if data.is_some() {
            flags |= OpFlags::REMOTE_CQ_DATA;
        }
        self.send(
            Pieces::checked(&iov)?,
            dest,
            tagged,
            tag,
            flags,
            data.unwrap_or(0),
            0,
        )
    }

    /// Refuses the endpoint's own receive calls once it receives through
    /// a shared receive context.
    #[inline]
    fn own_receives(&self) -> Result<()> {
        if self.shared.srx.get().is_some() {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "shm: the endpoint receives through its shared receive context; post there",
            ));
        }
        Ok(())
    }

    /// Posts a receive: queued for the engine ([`RxReq`]), which takes it
    /// on its next pass. A program may post each receive between a
    /// completion and its answer (`fi_pingpong` does), which puts this on
    /// the round trip's path: the common case (one piece or none, no
    /// peek, claim or discard, bound, no shared context) is kept short,
    /// everything else goes through [`post_recv_checked`](Self::post_recv_checked).
    #[inline]
    fn post_recv(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        let special = OpFlags::MULTI_RECV | OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD;
        match shared::one_piece_of(msg.iov) {
            Some(buf) if !(tagged && flags.intersects(special)) && self.queues_receives() => {
                self.queue_recv(RxReq::of(msg, flags, tagged, buf))
            }
            _ => self.post_recv_checked(msg, flags, tagged),
        }
    }

    /// Whether receives go through the queue: the endpoint is bound and
    /// has no shared receive context.
    #[inline]
    fn queues_receives(&self) -> bool {
        let sh = &*self.shared;
        sh.srx.get().is_none() && sh.bound.get().is_some()
    }

    /// Queues receive `req` for the engine.
    #[inline]
    fn queue_recv(&self, req: RxReq) -> Result<()> {
        self.shared.posted.push(req).map_err(|_| Error::again())?;
        self.engine.nudge();
        Ok(())
    }

    /// [`post_recv_checked`](Self::post_recv_checked) of one buffer
    /// (`recv_one`, `trecv_one`); `tagged` is (tagged, tag, ignore).
    #[cold]
    #[inline(never)]
    fn post_one_checked(
        &self,
        buf: IoVec,
        desc: MrDesc,
        src: FiAddr,
        (tagged, tag, ignore): (bool, u64, u64),
        context: u64,
        flags: OpFlags,
    ) -> Result<()> {
        let (iov, d) = ([buf], [desc]);
        let msg = Msg::one(&iov, &d, src, tag, ignore, context);
        self.post_recv_checked(&msg, flags, tagged)
    }

    /// [`post_recv`](Self::post_recv) with every check, and peeks,
    /// claims, discards and buffers of several pieces, posted at once
    /// under the engine's lock (a claim with nothing claimed is refused by
    /// the call, and the queue carries one piece).
    #[cold]
    #[inline(never)]
    fn post_recv_checked(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        self.own_receives()?;
        let sh = &*self.shared;
        sh.bound()?;
        if flags.contains(OpFlags::MULTI_RECV) && tagged {
            return Err(Error::bad_flags(
                "FI_MULTI_RECV applies to untagged receives only",
            ));
        }
        let buf = Pieces::checked(msg.iov)?;
        let peek = tagged && flags.intersects(OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD);
        if let (false, Some(one)) = (peek, shared::one_piece_of(buf.pieces())) {
            return self.queue_recv(RxReq::of(msg, flags, tagged, one));
        }
        let msg = Msg {
            iov: buf.pieces(),
            ..*msg
        };
        self.engine
            .with_ep(sh.id, |ep| {
                if peek {
                    ep.peek(&msg, flags)
                } else {
                    ep.post_now(&msg, flags, tagged)
                }
            })
            .unwrap_or_else(|| {
                Err(Error::new(
                    ErrorKind::OpBadState,
                    "shm: endpoint not enabled (call enable after binding its CQ and AV)",
                ))
            })
    }

    /// An injected write or atomic: one command with the data, no
    /// completion; the target's ACK counts in the write counter.
    fn inject_request(
        &self,
        dest: FiAddr,
        cmd: &mut Command,
        d: &Desc,
        data: &[&[u8]],
    ) -> Result<()> {
        let sh = &*self.shared;
        let b = sh.bound()?;
        let peer = sh.peer(b, dest)?;
        if sh.queued.load(Ordering::Acquire) != 0 {
            return Err(Error::again());
        }
        if cmd.flags & flag::CQ_DATA != 0 && peer.paused.load(Ordering::Relaxed) {
            // The peer's receive CQ is full (flow control).
            return Err(Error::again());
        }
        let mut raw = [0u8; DESC_MAX];
        let n = d.encode(&mut raw);
        cmd.src = sh.id;
        cmd.tag = INJECT_ID;
        let mut parts: [&[u8]; 3] = [&raw[..n], &[], &[]];
        for (dst, src) in parts[1..].iter_mut().zip(data) {
            *dst = src;
        }
        match peer
            .sender
            .try_send_parts(cmd, &parts[..=data.len().min(2)])
        {
            Err(e) if e.kind() == ErrorKind::Again && !peer.check_alive() => {
                Err(shared::peer_gone())
            }
            r => r,
        }
    }
}

/// The `MSG` command of an eager message from endpoint `src`: tagged with
/// `tag`, carrying remote CQ data `data`, when given.
#[inline]
fn msg_command(src: u32, tag: Option<u64>, data: Option<u64>) -> Command {
    let mut cmd = Command {
        op: op::MSG,
        src,
        ..Command::default()
    };
    if let Some(t) = tag {
        cmd.flags |= flag::TAGGED;
        cmd.tag = t;
    }
    if let Some(d) = data {
        cmd.flags |= flag::CQ_DATA;
        cmd.data = d;
    }
    cmd
}

fn rma_list(v: &[RmaIov]) -> Result<RmaList> {
    if v.is_empty() || v.len() > RMA_IOV_LIMIT {
        return Err(Error::inval(format!(
            "shm: 1 to {RMA_IOV_LIMIT} remote ranges per operation, not {}",
            v.len()
        )));
    }
    let mut out = [RmaIov {
        addr: 0,
        len: 0,
        key: 0,
    }; RMA_IOV_LIMIT];
    for (d, s) in out.iter_mut().zip(v) {
        *d = *s;
    }
    Ok((out, v.len()))
}

fn total(v: &[RmaIov]) -> Result<usize> {
    v.iter()
        .try_fold(0usize, |a, r| a.checked_add(r.len))
        .ok_or_else(|| Error::inval("shm: remote range lengths overflow"))
}

// The zero-copy operations are `unsafe` methods of the trait.
#[allow(unsafe_code)]
impl MsgOps for ShmEndpoint {
    fn inject(&self, buf: &[u8], dest: FiAddr, data: Option<u64>) -> Result<()> {
        self.inject_msg(buf, dest, false, 0, data)
    }

    unsafe fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let buf = Pieces::checked(msg.iov)?;
        self.send(buf, msg.addr, false, 0, flags, msg.data, msg.context)
    }

    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.post_recv(msg, flags, false)
    }

    unsafe fn recv_one(
        &self,
        buf: IoVec,
        desc: MrDesc,
        src: FiAddr,
        context: u64,
        flags: OpFlags,
    ) -> Result<()> {
        match shared::one_piece(&buf) {
            Some(buf) if self.queues_receives() => self.queue_recv(RxReq {
                tagged: false,
                tag: 0,
                ignore: 0,
                src,
                buf,
                context,
                flags,
            }),
            _ => self.post_one_checked(buf, desc, src, (false, 0, 0), context, flags),
        }
    }
}

// The zero-copy operations are `unsafe` methods of the trait.
#[allow(unsafe_code)]
impl TaggedOps for ShmEndpoint {
    fn tinject(&self, buf: &[u8], dest: FiAddr, tag: u64, data: Option<u64>) -> Result<()> {
        self.inject_msg(buf, dest, true, tag, data)
    }

    unsafe fn tsendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let buf = Pieces::checked(msg.iov)?;
        self.send(buf, msg.addr, true, msg.tag, flags, msg.data, msg.context)
    }

    unsafe fn trecvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.post_recv(msg, flags, true)
    }

    unsafe fn trecv_one(
        &self,
        buf: IoVec,
        desc: MrDesc,
        src: FiAddr,
        tag: u64,
        ignore: u64,
        context: u64,
        flags: OpFlags,
    ) -> Result<()> {
        let special = OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD | OpFlags::MULTI_RECV;
        match shared::one_piece(&buf) {
            Some(buf) if !flags.intersects(special) && self.queues_receives() => {
                self.queue_recv(RxReq {
                    tagged: true,
                    tag,
                    ignore,
                    src,
                    buf,
                    context,
                    flags,
                })
            }
            _ => self.post_one_checked(buf, desc, src, (true, tag, ignore), context, flags),
        }
    }
}

impl ShmEndpoint {
    /// Whether the endpoint's capabilities allow an operation (see
    /// [`fabric_core::kit::caps::initiate`]).
    #[inline]
    fn may(&self, class: Caps, dir: Caps, what: &str) -> Result<()> {
        fabric_core::kit::caps::initiate(self.shared.info.caps, class, dir, "shm", what)
    }
}

// The zero-copy operations are `unsafe` methods of the trait.
#[allow(unsafe_code)]
impl RmaOps for ShmEndpoint {
    fn inject_write(
        &self,
        buf: &[u8],
        dest: FiAddr,
        remote: RmaIov,
        data: Option<u64>,
    ) -> Result<()> {
        self.may(Caps::RMA, Caps::WRITE, "an RMA write")?;
        if buf.len() > INJECT_SIZE {
            return Err(Error::new(
                ErrorKind::MsgSize,
                "shm: inject larger than inject_size",
            ));
        }
        if remote.len != buf.len() {
            return Err(Error::inval(format!(
                "shm: {} local bytes for {} remote bytes",
                buf.len(),
                remote.len
            )));
        }
        let d = Desc::new(&[remote], &[]).ok_or_else(|| Error::inval("shm: bad RMA range"))?;
        let mut cmd = Command {
            op: op::WRITE,
            flags: flag::INLINE,
            ..Command::default()
        };
        if let Some(v) = data {
            cmd.flags |= flag::CQ_DATA;
            cmd.data = v;
        }
        self.inject_request(dest, &mut cmd, &d, &[buf])
    }

    unsafe fn readmsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        self.may(Caps::RMA, Caps::READ, "an RMA read")?;
        let sh = &*self.shared;
        let b = sh.bound()?;
        let buf = Pieces::checked(msg.iov)?;
        let rma = rma_list(msg.rma_iov)?;
        let len = total(msg.rma_iov)?;
        if len != buf.len() {
            return Err(Error::inval(format!(
                "shm: {} local bytes for {len} remote bytes",
                buf.len()
            )));
        }
        let peer = sh.peer_arc(b, msg.addr)?;
        self.enqueue(TxReq {
            peer,
            kind: TxKind::Read { rma },
            buf,
            flags,
            data: 0,
            done: TxDone {
                context: msg.context,
                flags: CompletionFlags::RMA | CompletionFlags::READ,
                len,
                report: !b.tx_selective || flags.contains(OpFlags::COMPLETION),
            },
            probe: None,
        })
    }

    unsafe fn writemsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        self.may(Caps::RMA, Caps::WRITE, "an RMA write")?;
        let sh = &*self.shared;
        let b = sh.bound()?;
        let buf = Pieces::checked(msg.iov)?;
        let len = total(msg.rma_iov)?;
        if len != buf.len() {
            return Err(Error::inval(format!(
                "shm: {} local bytes for {len} remote bytes",
                buf.len()
            )));
        }
        if flags.contains(OpFlags::INJECT) {
            let [remote] = msg.rma_iov else {
                return Err(Error::inval("shm: an injected write has one remote range"));
            };
            let mut copy = [0u8; INJECT_SIZE];
            let n = len.min(INJECT_SIZE);
            // SAFETY: the write contract: the source is readable now.
            unsafe { buf.read_at(0, &mut copy[..n]) };
            let data = flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(msg.data);
            return self.inject_write(&copy[..n], msg.addr, *remote, data);
        }
        let rma = rma_list(msg.rma_iov)?;
        let peer = sh.peer_arc(b, msg.addr)?;
        self.enqueue(TxReq {
            peer,
            kind: TxKind::Write { rma },
            buf,
            flags,
            data: msg.data,
            done: TxDone {
                context: msg.context,
                flags: CompletionFlags::RMA | CompletionFlags::WRITE,
                len,
                report: !b.tx_selective || flags.contains(OpFlags::COMPLETION),
            },
            probe: None,
        })
    }
}

/// `fi_atomicvalid` and `fi_query_atomic`: whether shm serves `op` on
/// `datatype` as a plain, fetching or comparing atomic, and how many
/// elements one operation may carry.
pub(crate) fn atomic_count(
    datatype: Datatype,
    op: AtomicOp,
    fetch: bool,
    compare: bool,
) -> Result<usize> {
    atomic::valid(datatype, op, AtomicKind::of(compare, fetch))
        .map_err(|e| Error::new(e.kind(), format!("shm: {}", e.detail())))?;
    Ok(MAX_ATOMIC_COUNT)
}

// The zero-copy operations are `unsafe` methods of the trait.
#[allow(unsafe_code)]
impl AtomicOps for ShmEndpoint {
    fn atomic_valid(
        &self,
        datatype: Datatype,
        op: AtomicOp,
        fetch: bool,
        compare: bool,
    ) -> Result<usize> {
        atomic_count(datatype, op, fetch, compare)
    }

    unsafe fn atomicmsg(&self, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        let dir = if msg.result.is_empty() {
            Caps::WRITE
        } else {
            Caps::READ
        };
        self.may(Caps::ATOMIC, dir, "an atomic")?;
        let sh = &*self.shared;
        let b = sh.bound()?;
        let kind = AtomicKind::of(!msg.compare.is_empty(), !msg.result.is_empty());
        self.atomic_valid(
            msg.datatype,
            msg.op,
            kind != AtomicKind::Plain,
            kind == AtomicKind::Compare,
        )?;
        let count = total(msg.rma_iov)?;
        if count == 0 || count > MAX_ATOMIC_COUNT {
            return Err(Error::inval(format!(
                "shm: {count} atomic elements (1 to {MAX_ATOMIC_COUNT} allowed)"
            )));
        }
        let size = msg.datatype.size();
        let bytes = count * size;
        let mut operands = Pieces::EMPTY;
        if msg.op != AtomicOp::AtomicRead {
            operands.extend_checked(msg.iov)?;
            if operands.len() != bytes {
                return Err(Error::inval(format!(
                    "shm: {} operand bytes for {count} elements of {size} bytes",
                    operands.len()
                )));
            }
        }
        let mut compare = Pieces::EMPTY;
        if kind == AtomicKind::Compare {
            compare = Pieces::checked(msg.compare)?;
            if compare.len() != bytes {
                return Err(Error::inval(format!(
                    "shm: {} compare bytes for {count} elements of {size} bytes",
                    compare.len()
                )));
            }
        }
        let result = Pieces::checked(msg.result)?;
        if kind != AtomicKind::Plain && result.len() < bytes {
            return Err(Error::new(
                ErrorKind::TooSmall,
                format!(
                    "shm: {} result bytes for {count} elements of {size} bytes",
                    result.len()
                ),
            ));
        }
        let rma = rma_list(msg.rma_iov)?;
        if flags.contains(OpFlags::INJECT) {
            if kind != AtomicKind::Plain {
                return Err(Error::inval("shm: only plain atomics can be injected"));
            }
            if bytes > INJECT_SIZE {
                return Err(Error::new(
                    ErrorKind::MsgSize,
                    "shm: inject larger than inject_size",
                ));
            }
            let mut d =
                Desc::new(msg.rma_iov, &[]).ok_or_else(|| Error::inval("shm: bad RMA ranges"))?;
            d.atomic = Some((msg.datatype, msg.op, kind));
            let mut copy = [0u8; INJECT_SIZE];
            // SAFETY: the atomic contract: the operands are readable now.
            let n = unsafe { operands.read_at(0, &mut copy[..bytes]) };
            let mut cmd = Command {
                op: op::ATOMIC,
                ..Command::default()
            };
            if flags.contains(OpFlags::REMOTE_CQ_DATA) {
                cmd.flags |= flag::CQ_DATA;
                cmd.data = msg.data;
            }
            return self.inject_request(msg.addr, &mut cmd, &d, &[&copy[..n]]);
        }
        let peer = sh.peer_arc(b, msg.addr)?;
        self.enqueue(TxReq {
            peer,
            kind: TxKind::Atomic {
                rma,
                dt: msg.datatype,
                op: msg.op,
                kind,
                compare,
                result,
            },
            buf: operands,
            flags,
            data: msg.data,
            done: TxDone {
                context: msg.context,
                flags: CompletionFlags::ATOMIC
                    | if kind == AtomicKind::Plain {
                        CompletionFlags::WRITE
                    } else {
                        CompletionFlags::READ
                    },
                len: bytes,
                report: !b.tx_selective || flags.contains(OpFlags::COMPLETION),
            },
            probe: None,
        })
    }
}

impl CmOps for ShmEndpoint {
    fn getname(&self) -> Result<Address> {
        Ok(self.shared.name.clone())
    }
}

impl Endpoint for ShmEndpoint {
    fn info(&self) -> &Info {
        &self.shared.info
    }

    fn bind(&self, what: Bind<'_>) -> Result<()> {
        if self.shared.enabled.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
        }
        binds::bind(&mut lock(&self.shared.binds), what)
    }

    fn enable(&self) -> Result<()> {
        let b = lock(&self.shared.binds).clone();
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
        let set = |b| {
            self.shared
                .bound
                .set(b)
                .map_err(|_| Error::new(ErrorKind::OpBadState, "the endpoint is already enabled"))
        };
        match self.shared.srx.get() {
            Some(&sid) => self.engine.srx_enable(sid, b, set)?,
            None if self.shared.info.ep_attr.rx_ctx_cnt == fabric_core::SHARED_CONTEXT => {
                return Err(Error::inval(
                    "shm: an endpoint opened with rx_ctx_cnt = FI_SHARED_CONTEXT needs a \
                     shared receive context bound before enable",
                ));
            }
            None => set(b)?,
        }
        self.shared.enabled.store(true, Ordering::Release);
        Ok(())
    }

    fn cancel(&self, context: u64) -> Result<()> {
        self.own_receives()?;
        let sh = &*self.shared;
        sh.bound()?;
        self.engine
            .with_ep(sh.id, |ep| ep.cancel(context))
            .unwrap_or_else(|| {
                Err(Error::new(
                    ErrorKind::NoEnt,
                    "no posted receive has this context",
                ))
            })
    }

    fn min_multi_recv(&self) -> Result<usize> {
        Ok(self.shared.min_multi_recv.load(Ordering::Relaxed))
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.own_receives()?;
        self.shared.min_multi_recv.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    fn bind_srx(&self, srx: &dyn SharedRx) -> Result<()> {
        if self.shared.enabled.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
        }
        let srx = srx.as_any().downcast_ref::<srx::ShmSrx>().ok_or_else(|| {
            Error::inval("bind: the shared receive context belongs to another provider")
        })?;
        srx.attach(&self.shared, &self.engine)
    }
}

impl Drop for ShmEndpoint {
    fn drop(&mut self) {
        self.engine.remove(self.shared.id);
        shared::unregister_own(&self.shared.region_name);
    }
}
