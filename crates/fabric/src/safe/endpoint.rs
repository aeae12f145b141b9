//! The safe endpoint: operations on owned buffers, and the slab that maps
//! completions back to them.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric_core::objects::{
    self, AddressVector, AtomicMsg, AtomicOp, AvAttr, Bind, CompletionFlags, CompletionQueue,
    CqAttr, CqEntry, CqErrEntry, CqFormat, EventQueue, FiAddr, IoVec, MrDesc, Msg, RmaIov, RmaMsg,
    WaitObj,
};
use fabric_core::{Address, Caps, EpType, Error, ErrorKind, Info, MrMode, OpFlags, Result};

use super::Shared;
use super::atomic::AtomicValue;
use super::buf::{IoBufMut, Rejected, RemoteRegion};
use super::completion::{Completion, OpId, OpKind};

/// Completion-queue entries read per call.
const BATCH: usize = 16;
/// The longest one blocking read of the completion queue lasts before the
/// wait loop looks again (a safety net for wait objects that miss a wake).
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// How long a drop waits for operations in flight, by default.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Words of per-slot storage for atomics: operand, compare, result.
const SCRATCH_WORDS: usize = 3;
/// How long a wait polls the completion queue back to back before it
/// yields the CPU between reads.
const SPIN_FOR: Duration = Duration::from_micros(20);
/// How long a wait polls, yielding between reads, before it blocks in the
/// provider's blocking read.
const POLL_FOR: Duration = Duration::from_millis(2);
/// Empty reads between two clock readings while polling (a clock reading
/// can cost several reads in a virtual machine).
const CLOCK_EVERY: u32 = 16;

/// The spin-then-yield-then-block schedule of one wait: low latency while
/// completions come quickly, no CPU once they stop.
#[derive(Default)]
struct Idle {
    since: Option<Instant>,
    reads: u32,
    yielding: bool,
    parked: bool,
}

impl Idle {
    /// After an empty read: whether to read again (spinning, or after a
    /// yield) rather than block.
    fn keep_polling(&mut self) -> bool {
        if self.parked {
            return false;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        self.reads = self.reads.wrapping_add(1);
        if self.reads % CLOCK_EVERY == 0 {
            let idle = since.elapsed();
            if idle >= POLL_FOR {
                self.parked = true;
                return false;
            }
            self.yielding = idle >= SPIN_FOR;
        }
        if self.yielding {
            std::thread::yield_now();
        }
        true
    }
}

/// An operation in flight.
struct InFlight<B> {
    kind: OpKind,
    buf: Option<B>,
}

/// A slot of the slab; `scratch` (atomic operands and results) is
/// allocated the first time the slot serves an atomic and reused.
struct Slot<B> {
    generation: u32,
    op: Option<InFlight<B>>,
    scratch: Vec<u64>,
}

/// An enabled endpoint whose operations own their buffers.
///
/// Opened by [`Domain::endpoint`](super::Domain::endpoint), with its own
/// completion queue and address vector. Each operation returns an
/// [`OpId`]; its [`Completion`] (with the buffer) comes from
/// [`wait_for`](Endpoint::wait_for), [`wait`](Endpoint::wait),
/// [`poll`](Endpoint::poll) or [`try_take`](Endpoint::try_take), in any
/// order. A post that is refused hands its buffer back in [`Rejected`];
/// `Again` there means the queue is full: read completions and retry.
///
/// Operations use the endpoint's default flags (`tx_attr.op_flags`,
/// `rx_attr.op_flags` of its entry). See the [module docs](super) for what
/// a drop does with operations in flight.
pub struct Endpoint<B: IoBufMut = Vec<u8>> {
    // Drop order: the endpoint before the objects it is bound to, the
    // buffers after the endpoint, the domain last.
    ep: Box<dyn objects::Endpoint>,
    /// The address vector (RDM, DGRAM); a connected endpoint has none.
    av: Option<Box<dyn AddressVector>>,
    cq: Box<dyn CompletionQueue>,
    /// The event queue of a connected (MSG) endpoint.
    eq: Option<Box<dyn EventQueue>>,
    slots: Vec<Slot<B>>,
    free: Vec<usize>,
    in_flight: usize,
    ready: VecDeque<Completion<B>>,
    blocking: bool,
    with_source: bool,
    local_mr: bool,
    tx_flags: OpFlags,
    rx_flags: OpFlags,
    caps: Caps,
    drain_timeout: Duration,
    /// Slots stay taken after their completion is read, until
    /// [`release`](Endpoint::release) (the async layer keys its own table
    /// by slot index, so an index must not be reused before it is done).
    hold_slots: bool,
    /// Where completion-queue reads land, kept between reads so that a
    /// poll does not clear a fresh batch each time.
    entries: Box<[CqEntry; BATCH]>,
    sources: Box<[FiAddr; BATCH]>,
    _domain: Arc<Shared>,
}

/// Prefixes an error with what was being done.
fn doing(what: &'static str) -> impl Fn(Error) -> Error {
    move |e| Error::new(e.kind(), format!("{what}: {}", e.detail()))
}

/// The one descriptor of a buffer, or none.
fn descs(desc: &Option<MrDesc>) -> &[MrDesc] {
    desc.as_slice()
}

impl<B: IoBufMut> Endpoint<B> {
    pub(super) fn open(shared: Arc<Shared>) -> Result<Self> {
        let ep_type = shared.info.ep_attr.ep_type;
        if !matches!(ep_type, EpType::Rdm | EpType::Dgram) {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                format!(
                    "Domain::endpoint opens RDM and DGRAM endpoints, and this entry is {ep_type}: \
                     connected endpoints come from Domain::listen and Domain::connect"
                ),
            ));
        }
        let info = shared.info.clone();
        Endpoint::open_as(shared, &info, None)
    }

    /// Opens an endpoint of `info` (the domain's entry, or a connection
    /// request's) with its completion queue, and its address vector
    /// (RDM, DGRAM) or event queue `eq` (MSG), bound and enabled.
    pub(super) fn open_as(
        shared: Arc<Shared>,
        info: &Info,
        eq: Option<Box<dyn EventQueue>>,
    ) -> Result<Self> {
        let connected = info.ep_attr.ep_type == EpType::Msg;
        if connected != eq.is_some() {
            return Err(Error::inval(
                "a connected (MSG) endpoint needs an event queue, and only it takes one",
            ));
        }
        let domain = shared.domain.as_ref();
        let attr = |wait_obj| CqAttr {
            format: CqFormat::Tagged,
            wait_obj,
            ..CqAttr::default()
        };
        // A CQ that can block; one that can only be polled if the provider
        // offers no wait object.
        let (cq, blocking) = match domain.cq(&attr(WaitObj::Unspec)) {
            Ok(cq) => (cq, true),
            Err(_) => (
                domain
                    .cq(&attr(WaitObj::None))
                    .map_err(doing("opening a completion queue"))?,
                false,
            ),
        };
        let av = if connected {
            None
        } else {
            Some(
                domain
                    .av(&AvAttr::default())
                    .map_err(doing("opening an address vector"))?,
            )
        };
        let ep = domain
            .endpoint(info)
            .map_err(doing("opening the endpoint"))?;
        ep.bind(Bind::Cq {
            cq: cq.as_ref(),
            transmit: true,
            recv: true,
            selective: false,
        })
        .map_err(doing("binding the completion queue"))?;
        if let Some(av) = &av {
            ep.bind(Bind::Av(av.as_ref()))
                .map_err(doing("binding the address vector"))?;
        }
        if let Some(eq) = &eq {
            ep.bind(Bind::Eq(eq.as_ref()))
                .map_err(doing("binding the event queue"))?;
        }
        ep.enable().map_err(doing("enabling the endpoint"))?;
        let info = ep.info();
        let with_source = info.caps.contains(Caps::SOURCE);
        let local_mr = info.domain_attr.mr_mode.contains(MrMode::LOCAL);
        let tx_flags = info.tx_attr.op_flags;
        // A multi-receive buffer completes once per message: the slab hands
        // a buffer back at its first completion, so receives here never
        // take several messages, whatever the endpoint's defaults say.
        let rx_flags = info.rx_attr.op_flags - OpFlags::MULTI_RECV;
        let caps = info.caps;
        Ok(Endpoint {
            ep,
            av,
            cq,
            eq,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            ready: VecDeque::new(),
            blocking,
            with_source,
            local_mr,
            tx_flags,
            rx_flags,
            caps,
            drain_timeout: DRAIN_TIMEOUT,
            hold_slots: false,
            entries: Box::new([CqEntry::default(); BATCH]),
            sources: Box::new([FiAddr::NOTAVAIL; BATCH]),
            _domain: shared,
        })
    }

    /// The entry the endpoint was opened with, as the provider altered it.
    pub fn info(&self) -> &Info {
        self.ep.info()
    }

    /// The endpoint object, for the zero-copy API. Completions of
    /// operations posted through it arrive in this endpoint's queue, where
    /// the safe layer does not know their contexts: it logs and skips them.
    pub fn raw(&self) -> &dyn objects::Endpoint {
        self.ep.as_ref()
    }

    /// The endpoint's address, for peers to insert.
    pub fn name(&self) -> Result<Address> {
        self.ep
            .getname()
            .map_err(doing("reading the endpoint's address"))
    }

    /// Inserts a peer's address into the endpoint's address vector; the
    /// handle names the peer in operations.
    pub fn insert(&self, addr: &Address) -> Result<FiAddr> {
        let mut out = [FiAddr::NOTAVAIL];
        let n = self
            .av()?
            .insert(std::slice::from_ref(addr), &mut out)
            .map_err(|e| {
                Error::new(
                    e.kind(),
                    format!("inserting {addr} into the address vector: {}", e.detail()),
                )
            })?;
        if n != 1 || out[0] == FiAddr::NOTAVAIL {
            return Err(Error::new(
                ErrorKind::AddrNotAvail,
                format!("the address vector did not take {addr} (the provider gave no reason)"),
            ));
        }
        Ok(out[0])
    }

    /// Removes a peer from the address vector.
    pub fn remove(&self, peer: FiAddr) -> Result<()> {
        self.av()?
            .remove(&[peer])
            .map_err(doing("removing a peer from the address vector"))
    }

    fn av(&self) -> Result<&dyn AddressVector> {
        self.av.as_deref().ok_or_else(|| {
            Error::new(
                ErrorKind::OpNotSupp,
                "a connected endpoint has no address vector: it talks to its peer only",
            )
        })
    }

    /// The event queue of a connected endpoint.
    pub(super) fn eq(&self) -> Option<&dyn EventQueue> {
        self.eq.as_deref()
    }

    /// How many operations are in flight (posted, completion not yet read
    /// from the queue).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// How long a drop waits for operations in flight before leaking their
    /// buffers (two seconds by default).
    pub fn set_drain_timeout(&mut self, timeout: Duration) {
        self.drain_timeout = timeout;
    }

    /// Sends `buf` to `to`.
    pub fn send(&mut self, to: FiAddr, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.send_msg(OpKind::Send, to, 0, None, buf)
    }

    /// Sends `buf` to `to` with remote CQ data: `data` arrives in the
    /// receiver's [`Completion::data`] (`fi_senddata`; the provider's
    /// `domain_attr.cq_data_size` says how many of its bytes it carries).
    pub fn send_with_data(
        &mut self,
        to: FiAddr,
        buf: B,
        data: u64,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.send_msg(OpKind::Send, to, 0, Some(data), buf)
    }

    fn send_msg(
        &mut self,
        kind: OpKind,
        to: FiAddr,
        tag: u64,
        data: Option<u64>,
        buf: B,
    ) -> std::result::Result<OpId, Rejected<B>> {
        let mut flags = self.tx_flags;
        if data.is_some() {
            flags |= OpFlags::REMOTE_CQ_DATA;
        }
        let tagged = kind == OpKind::TaggedSend;
        self.post(kind, buf, false, |ep, iov, desc, context| {
            let msg = Msg {
                iov: &[iov],
                desc: descs(&desc),
                addr: to,
                tag,
                ignore: 0,
                context,
                data: data.unwrap_or(0),
            };
            // SAFETY: the buffer is owned by the slab until its completion
            // is read (or leaked by the drop), and `IoBuf` keeps its bytes
            // in place meanwhile.
            unsafe {
                if tagged {
                    ep.tsendmsg(&msg, flags)
                } else {
                    ep.sendmsg(&msg, flags)
                }
            }
        })
    }

    /// Posts `buf` to receive a message from any peer; the message may
    /// fill it (a longer one is an error completion, truncated).
    pub fn recv(&mut self, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        let flags = self.rx_flags;
        self.post(OpKind::Recv, buf, true, |ep, iov, desc, context| {
            let desc = desc.unwrap_or(MrDesc(0));
            // SAFETY: the buffer is owned by the slab until its completion
            // is read (or leaked by the drop), `IoBufMut` keeps its bytes in
            // place meanwhile, and nobody else can reach them.
            unsafe { ep.recv_one(iov, desc, FiAddr::UNSPEC, context, flags) }
        })
    }

    /// Sends `buf` to `to` with `tag`.
    pub fn tsend(
        &mut self,
        to: FiAddr,
        tag: u64,
        buf: B,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.send_msg(OpKind::TaggedSend, to, tag, None, buf)
    }

    /// Tagged [`send_with_data`](Endpoint::send_with_data) (`fi_tsenddata`).
    pub fn tsend_with_data(
        &mut self,
        to: FiAddr,
        tag: u64,
        buf: B,
        data: u64,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.send_msg(OpKind::TaggedSend, to, tag, Some(data), buf)
    }

    /// Posts `buf` for a tagged message from any peer whose tag equals
    /// `tag` in the bits `ignore` leaves (`ignore = 0`: exactly `tag`).
    /// [`Completion::tag`] gives the tag that arrived.
    pub fn trecv(
        &mut self,
        tag: u64,
        ignore: u64,
        buf: B,
    ) -> std::result::Result<OpId, Rejected<B>> {
        let flags = self.rx_flags;
        self.post(OpKind::TaggedRecv, buf, true, |ep, iov, desc, context| {
            let desc = desc.unwrap_or(MrDesc(0));
            // SAFETY: as in `recv`.
            unsafe { ep.trecv_one(iov, desc, FiAddr::UNSPEC, tag, ignore, context, flags) }
        })
    }

    /// Sends a small message at once, copying it: no completion, `bytes`
    /// is free when the call returns. At most `tx_attr.inject_size` bytes.
    pub fn inject(&mut self, to: FiAddr, bytes: &[u8]) -> Result<()> {
        self.ep.inject(bytes, to, None)
    }

    /// Tagged [`inject`](Endpoint::inject).
    pub fn tinject(&mut self, to: FiAddr, tag: u64, bytes: &[u8]) -> Result<()> {
        self.ep.tinject(bytes, to, tag, None)
    }

    /// Writes all of `buf` to the start of `remote` on peer `to`.
    pub fn write(
        &mut self,
        to: FiAddr,
        buf: B,
        remote: &RemoteRegion,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.rma(OpKind::Write, to, buf, remote)
    }

    /// Reads from the start of `remote` on peer `from` until `buf` is full.
    pub fn read(
        &mut self,
        from: FiAddr,
        buf: B,
        remote: &RemoteRegion,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.rma(OpKind::Read, from, buf, remote)
    }

    fn rma(
        &mut self,
        kind: OpKind,
        peer: FiAddr,
        buf: B,
        remote: &RemoteRegion,
    ) -> std::result::Result<OpId, Rejected<B>> {
        let len = buf.bytes_len();
        if len as u64 > remote.len {
            return Err(Rejected::new(
                Error::inval(format!(
                    "{kind} of {len} bytes does not fit the remote region of {} bytes",
                    remote.len
                )),
                Some(buf),
            ));
        }
        let flags = self.tx_flags;
        let range = RmaIov {
            addr: remote.addr,
            len,
            key: remote.key.0,
        };
        let is_read = kind == OpKind::Read;
        self.post(kind, buf, is_read, |ep, iov, desc, context| {
            let msg = RmaMsg {
                iov: &[iov],
                desc: descs(&desc),
                addr: peer,
                rma_iov: &[range],
                context,
                data: 0,
            };
            // SAFETY: as in `send_msg` (a write reads the buffer) and `recv`
            // (a read writes it).
            unsafe {
                if is_read {
                    ep.readmsg(&msg, flags)
                } else {
                    ep.writemsg(&msg, flags)
                }
            }
        })
    }

    /// Applies `op` with `operand` to the first element of `target` on
    /// peer `to` (`fi_atomic`); no value comes back.
    pub fn atomic<T: AtomicValue>(
        &mut self,
        to: FiAddr,
        target: &RemoteRegion,
        op: AtomicOp,
        operand: T,
    ) -> Result<OpId> {
        self.post_atomic(OpKind::Atomic, to, target, op, Some(operand), None)
    }

    /// As [`atomic`](Endpoint::atomic), and the element's old value comes
    /// back in [`Completion::fetched`] (`fi_fetch_atomic`). With
    /// `AtomicOp::AtomicRead`, `operand` is not used.
    pub fn fetch_atomic<T: AtomicValue>(
        &mut self,
        to: FiAddr,
        target: &RemoteRegion,
        op: AtomicOp,
        operand: T,
    ) -> Result<OpId> {
        let operand = (op != AtomicOp::AtomicRead).then_some(operand);
        self.post_atomic(OpKind::FetchAtomic, to, target, op, operand, None)
    }

    /// A compare atomic (`fi_compare_atomic`): `op` (one of the `Cswap*`
    /// and `Mswap` operations) compares the element with `compare` and
    /// stores `operand` on success; the old value comes back in
    /// [`Completion::fetched`].
    pub fn compare_atomic<T: AtomicValue>(
        &mut self,
        to: FiAddr,
        target: &RemoteRegion,
        op: AtomicOp,
        compare: T,
        operand: T,
    ) -> Result<OpId> {
        self.post_atomic(
            OpKind::CompareAtomic,
            to,
            target,
            op,
            Some(operand),
            Some(compare),
        )
    }

    /// Adds `value` to the element, fetching the old one.
    pub fn fetch_add<T: AtomicValue>(
        &mut self,
        to: FiAddr,
        target: &RemoteRegion,
        value: T,
    ) -> Result<OpId> {
        self.fetch_atomic(to, target, AtomicOp::Sum, value)
    }

    /// Stores `new` if the element equals `expected`; the old value comes
    /// back either way (equal to `expected` when the swap happened).
    pub fn compare_swap<T: AtomicValue>(
        &mut self,
        to: FiAddr,
        target: &RemoteRegion,
        expected: T,
        new: T,
    ) -> Result<OpId> {
        self.compare_atomic(to, target, AtomicOp::Cswap, expected, new)
    }

    /// Cancels a posted receive; it completes with a `Canceled` error
    /// completion that hands its buffer back. Other operations cannot be
    /// cancelled.
    pub fn cancel(&mut self, id: OpId) -> Result<()> {
        if !self.is_pending(id) {
            return Err(Error::inval(format!(
                "{id} is not in flight on this endpoint"
            )));
        }
        self.ep
            .cancel(id.context())
            .map_err(|e| Error::new(e.kind(), format!("cancelling {id}: {}", e.detail())))
    }

    /// Reads the completion queue once, which drives progress with manual
    /// progress, and keeps what completed for the `wait` and `poll` calls.
    pub fn progress(&mut self) -> Result<()> {
        self.reap().map(drop)
    }

    /// The next completion if there is one, without blocking.
    pub fn poll(&mut self) -> Result<Option<Completion<B>>> {
        if let Some(c) = self.ready.pop_front() {
            return Ok(Some(c));
        }
        Ok(self.take_fresh(None)?.1)
    }

    /// The completion of `id` if it is there, without blocking; other
    /// completions read meanwhile are kept.
    pub fn try_take(&mut self, id: OpId) -> Result<Option<Completion<B>>> {
        if let Some(c) = self.take_ready(Some(id)) {
            return Ok(Some(c));
        }
        Ok(self.take_fresh(Some(id))?.1)
    }

    /// Blocks for the next completion. `NoMsg` when nothing is in flight.
    pub fn wait(&mut self) -> Result<Completion<B>> {
        self.wait_until(None, None)
    }

    /// Blocks for the next completion, up to `timeout`; `TimedOut` then.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Completion<B>> {
        self.wait_until(None, Some((Instant::now() + timeout, timeout)))
    }

    /// Blocks for the completion of `id`; other completions read meanwhile
    /// are kept for later calls.
    pub fn wait_for(&mut self, id: OpId) -> Result<Completion<B>> {
        self.wait_until(Some(id), None)
    }

    /// As [`wait_for`](Endpoint::wait_for), up to `timeout`; `TimedOut`
    /// then (the operation stays in flight).
    pub fn wait_for_timeout(&mut self, id: OpId, timeout: Duration) -> Result<Completion<B>> {
        self.wait_until(Some(id), Some((Instant::now() + timeout, timeout)))
    }

    fn wait_until(
        &mut self,
        id: Option<OpId>,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<Completion<B>> {
        let mut idle = Idle::default();
        loop {
            if let Some(c) = self.take_ready(id) {
                return Ok(c);
            }
            match id {
                Some(id) if !self.is_pending(id) => {
                    return Err(Error::inval(format!(
                        "{id} is not in flight on this endpoint (already taken, or never posted here)"
                    )));
                }
                None if self.in_flight == 0 => {
                    return Err(Error::new(
                        ErrorKind::NoMsg,
                        "no operation is in flight on this endpoint, so no completion can come",
                    ));
                }
                _ => {}
            }
            let (n, found) = self.take_fresh(id)?;
            if let Some(c) = found {
                return Ok(c);
            }
            if n > 0 {
                idle = Idle::default();
                continue;
            }
            if idle.keep_polling() {
                continue;
            }
            let slice = match deadline {
                Some((at, timeout)) => {
                    let now = Instant::now();
                    if now >= at {
                        let what = id.map_or("any operation".to_string(), |id| id.to_string());
                        return Err(Error::new(
                            ErrorKind::TimedOut,
                            format!("no completion of {what} within {timeout:?}"),
                        ));
                    }
                    (at - now).min(MAX_SLEEP)
                }
                None => MAX_SLEEP,
            };
            self.sleep(slice)?;
        }
    }

    /// Waits up to `slice` for the completion queue (blocking read), or
    /// yields when it cannot block.
    fn sleep(&mut self, slice: Duration) -> Result<()> {
        if !self.blocking {
            std::thread::yield_now();
            return Ok(());
        }
        let r = if self.with_source {
            self.cq
                .sreadfrom(&mut self.entries[..], &mut self.sources[..], Some(slice))
        } else {
            self.cq.sread(&mut self.entries[..], Some(slice))
        };
        self.absorb(r, Some).map(drop)
    }

    /// Keeps slots taken after their completion is read, until
    /// [`release`](Endpoint::release).
    #[cfg(feature = "tokio")]
    pub(super) fn hold_slots(&mut self) {
        self.hold_slots = true;
    }

    /// Gives back the slot of a completed operation (with
    /// [`hold_slots`](Endpoint::hold_slots)).
    #[cfg(feature = "tokio")]
    pub(super) fn release(&mut self, id: OpId) {
        let index = id.index();
        if self
            .slots
            .get(index)
            .is_some_and(|s| s.generation == id.generation() && s.op.is_none())
        {
            self.free.push(index);
        }
    }

    /// Cancels every posted receive (each completes with `Canceled`, or
    /// with its message if one matched already).
    #[cfg(feature = "tokio")]
    pub(super) fn cancel_receives(&mut self) {
        for (index, slot) in self.slots.iter().enumerate() {
            if slot.op.as_ref().is_some_and(|op| op.kind.is_receive()) {
                let id = OpId::new(index, slot.generation);
                if let Err(e) = self.ep.cancel(id.context()) {
                    tracing::debug!(%id, error = %e, "cancelling a receive");
                }
            }
        }
    }

    /// The next completion read and not yet taken.
    #[cfg(feature = "tokio")]
    pub(super) fn pop_ready(&mut self) -> Option<Completion<B>> {
        self.ready.pop_front()
    }

    /// Whether `id` is in flight (posted, completion not read).
    #[cfg(feature = "tokio")]
    pub(super) fn in_flight_op(&self, id: OpId) -> bool {
        self.is_pending(id)
    }

    /// The completion queue, for its wait fd and `trywait`; `None` when
    /// it cannot block (no wait object).
    #[cfg(feature = "tokio")]
    pub(super) fn waitable_cq(&self) -> Option<&dyn CompletionQueue> {
        self.blocking.then_some(self.cq.as_ref())
    }

    /// Reads what the completion queue holds, without blocking; returns how
    /// many completions came.
    pub(super) fn reap(&mut self) -> Result<usize> {
        self.reap_with(Some)
    }

    /// Reads what the completion queue holds, without blocking, and hands
    /// each completion to `sink`; what `sink` gives back is kept for the
    /// `wait` and `poll` calls. Returns how many completions came.
    #[inline(always)]
    pub(super) fn reap_with<S>(&mut self, sink: S) -> Result<usize>
    where
        S: FnMut(Completion<B>) -> Option<Completion<B>>,
    {
        let r = if self.with_source {
            self.cq
                .readfrom(&mut self.entries[..], &mut self.sources[..])
        } else {
            self.cq.read(&mut self.entries[..])
        };
        self.absorb(r, sink)
    }

    /// Reads the completion queue once; the first completion `want`
    /// names (any, with `None`) comes back at once, the others are kept.
    #[inline(always)]
    fn take_fresh(&mut self, want: Option<OpId>) -> Result<(usize, Option<Completion<B>>)> {
        let mut found = None;
        let n = self.reap_with(|c| {
            if found.is_none() && want.is_none_or(|id| c.id == id) {
                found = Some(c);
                None
            } else {
                Some(c)
            }
        })?;
        Ok((n, found))
    }

    /// Turns the `n` entries a read left in `entries` (and `sources`, with
    /// `FI_SOURCE`) back into their operations, for `sink`.
    #[inline(always)]
    fn absorb<S>(&mut self, r: Result<usize>, mut sink: S) -> Result<usize>
    where
        S: FnMut(Completion<B>) -> Option<Completion<B>>,
    {
        match r {
            Ok(n) => {
                for i in 0..n.min(BATCH) {
                    let e = self.entries[i];
                    let s = if self.with_source {
                        self.sources[i]
                    } else {
                        FiAddr::NOTAVAIL
                    };
                    if let Some(c) = self.complete(&e, s, None) {
                        if let Some(c) = sink(c) {
                            self.ready.push_back(c);
                        }
                    }
                }
                Ok(n)
            }
            Err(e) if e.kind() == ErrorKind::Again => Ok(0),
            Err(e) if e.kind() == ErrorKind::Avail => {
                let err = self
                    .cq
                    .readerr()
                    .map_err(doing("reading an error completion"))?;
                let entry = err.entry;
                if let Some(c) = self.complete(&entry, FiAddr::NOTAVAIL, Some(err)) {
                    if let Some(c) = sink(c) {
                        self.ready.push_back(c);
                    }
                }
                Ok(1)
            }
            Err(e) => Err(doing("reading the completion queue")(e)),
        }
    }

    /// Turns one completion-queue entry back into its operation (inlined:
    /// the completion is then built where its reader keeps it, not moved
    /// through a temporary).
    #[inline(always)]
    fn complete(
        &mut self,
        e: &CqEntry,
        src: FiAddr,
        err: Option<CqErrEntry>,
    ) -> Option<Completion<B>> {
        let id = OpId(e.context);
        let index = id.index();
        let Some(slot) = self
            .slots
            .get_mut(index)
            .filter(|s| s.generation == id.generation() && s.op.is_some())
        else {
            tracing::warn!(
                context = e.context,
                flags = %e.flags,
                "a completion names no operation in flight on this endpoint (posted through the raw endpoint?); skipped"
            );
            return None;
        };
        let op = slot.op.take()?;
        let fetched = if op.kind.fetches() {
            slot.scratch.get(2).copied()
        } else {
            None
        };
        if !self.hold_slots {
            self.free.push(index);
        }
        self.in_flight -= 1;
        let error = err.map(|err| {
            // Boxed: a completion stays small for the common, successful
            // case.
            let text = if err.err_text.is_empty() {
                err.err.description()
            } else {
                err.err_text.as_str()
            };
            let lost = if err.olen > 0 {
                format!(" ({} bytes did not fit)", err.olen)
            } else {
                String::new()
            };
            Box::new(Error::new(
                err.err,
                format!("{} {id} failed: {text}{lost}", op.kind),
            ))
        });
        let source = if op.kind.is_receive() {
            src
        } else {
            FiAddr::NOTAVAIL
        };
        let has_data = e.flags.contains(CompletionFlags::REMOTE_CQ_DATA);
        Some(Completion {
            id,
            len: e.len,
            tag: e.tag,
            data: if has_data { e.data } else { 0 },
            source,
            fetched: fetched.unwrap_or(0),
            error,
            buf: op.buf,
            kind: op.kind,
            has_data,
            has_fetched: fetched.is_some(),
        })
    }

    fn take_ready(&mut self, id: Option<OpId>) -> Option<Completion<B>> {
        if self.ready.is_empty() {
            return None;
        }
        match id {
            None => self.ready.pop_front(),
            Some(id) => {
                let at = self.ready.iter().position(|c| c.id == id)?;
                self.ready.remove(at)
            }
        }
    }

    fn is_pending(&self, id: OpId) -> bool {
        self.slots
            .get(id.index())
            .is_some_and(|s| s.generation == id.generation() && s.op.is_some())
    }

    /// Refuses an operation outside the endpoint's capabilities (its
    /// entry's `caps`), as fi_getinfo(3) asks, before the provider sees it.
    fn capable(&self, kind: OpKind) -> Result<()> {
        let (needs, name) = match kind {
            OpKind::Send | OpKind::Recv => (Caps::MSG, "FI_MSG"),
            OpKind::TaggedSend | OpKind::TaggedRecv => (Caps::TAGGED, "FI_TAGGED"),
            OpKind::Read | OpKind::Write => (Caps::RMA, "FI_RMA"),
            OpKind::Atomic | OpKind::FetchAtomic | OpKind::CompareAtomic => {
                (Caps::ATOMIC, "FI_ATOMIC")
            }
        };
        if self.caps.contains(needs) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::OpNotSupp,
                format!(
                    "{kind}: the endpoint was opened without {name} (its caps are {}): ask for it in the hints",
                    self.caps
                ),
            ))
        }
    }

    /// Takes a slot for an operation; returns its index and ticket.
    #[inline(always)]
    fn start(&mut self, kind: OpKind, buf: Option<B>) -> (usize, OpId) {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    op: None,
                    scratch: Vec::new(),
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.generation = slot.generation.wrapping_add(1);
        slot.op = Some(InFlight { kind, buf });
        (index, OpId::new(index, slot.generation))
    }

    /// Gives a slot back after a refused post, with its buffer.
    fn abort(&mut self, index: usize) -> Option<B> {
        let op = self.slots.get_mut(index).and_then(|s| s.op.take());
        self.free.push(index);
        op.and_then(|op| op.buf)
    }

    /// Posts an operation on `buf`: checks the buffer, gives it to the
    /// slab, and calls `f` with its bytes, its descriptor and the context.
    fn post<F>(
        &mut self,
        kind: OpKind,
        mut buf: B,
        writes: bool,
        f: F,
    ) -> std::result::Result<OpId, Rejected<B>>
    where
        F: FnOnce(&dyn objects::Endpoint, IoVec, Option<MrDesc>, u64) -> Result<()>,
    {
        if let Err(e) = self.capable(kind) {
            return Err(Rejected::new(e, Some(buf)));
        }
        let desc = buf.mr_desc();
        let len = buf.bytes_len();
        if self.local_mr && desc.is_none() && len > 0 {
            return Err(Rejected::new(
                Error::inval(format!(
                    "{kind}: this domain needs registered local buffers (FI_MR_LOCAL): \
                     register the buffer with Domain::register"
                )),
                Some(buf),
            ));
        }
        let addr = if writes {
            buf.stable_mut_ptr()
        } else {
            buf.stable_ptr().cast_mut()
        };
        // The bytes stay where they are when the buffer moves into the slab.
        let (index, id) = self.start(kind, Some(buf));
        match f(self.ep.as_ref(), IoVec { addr, len }, desc, id.context()) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(id)
            }
            Err(e) => {
                let buf = self.abort(index);
                Err(Rejected::new(annotate(kind, e), buf))
            }
        }
    }

    fn post_atomic<T: AtomicValue>(
        &mut self,
        kind: OpKind,
        to: FiAddr,
        target: &RemoteRegion,
        op: AtomicOp,
        operand: Option<T>,
        compare: Option<T>,
    ) -> Result<OpId> {
        self.capable(kind)?;
        if self.local_mr {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "the safe atomics need a domain without FI_MR_LOCAL (their operands are not registered memory)",
            ));
        }
        let size = std::mem::size_of::<T>();
        if target.len < size as u64 {
            return Err(Error::inval(format!(
                "{kind} on {}: the target region has {} bytes, fewer than the {size} of one element",
                T::DATATYPE,
                target.len
            )));
        }
        let flags = self.tx_flags;
        let (index, id) = self.start(kind, None);
        let slot = &mut self.slots[index];
        if slot.scratch.len() < SCRATCH_WORDS {
            slot.scratch.resize(SCRATCH_WORDS, 0);
        }
        slot.scratch[0] = operand.map_or(0, T::to_word);
        slot.scratch[1] = compare.map_or(0, T::to_word);
        slot.scratch[2] = 0;
        let base = slot.scratch.as_mut_ptr();
        let word = |i: usize| IoVec {
            addr: base.wrapping_add(i).cast::<u8>(),
            len: size,
        };
        let (x, c, r) = ([word(0)], [word(1)], [word(2)]);
        let rma = [RmaIov {
            addr: target.addr,
            len: 1,
            key: target.key.0,
        }];
        let msg = AtomicMsg {
            iov: if operand.is_some() { &x } else { &[] },
            desc: &[],
            addr: to,
            rma_iov: &rma,
            datatype: T::DATATYPE,
            op,
            result: if kind.fetches() { &r } else { &[] },
            compare: if compare.is_some() { &c } else { &[] },
            context: id.context(),
            data: 0,
        };
        // SAFETY: the operand, compare and result words live in the slot's
        // own heap storage, which is neither touched nor freed until the
        // completion is read (a drop leaks it otherwise).
        match unsafe { self.ep.atomicmsg(&msg, flags) } {
            Ok(()) => {
                self.in_flight += 1;
                Ok(id)
            }
            Err(e) => {
                self.abort(index);
                Err(annotate(kind, e))
            }
        }
    }
}

/// Names the operation in a refusal (but keeps `Again`, the busy-loop
/// case, free of allocation).
fn annotate(kind: OpKind, e: Error) -> Error {
    if e.kind() == ErrorKind::Again {
        e
    } else {
        Error::new(e.kind(), format!("{kind}: {}", e.detail()))
    }
}

impl<B: IoBufMut> fmt::Debug for Endpoint<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.ep.info().prov_name())
            .field("in_flight", &self.in_flight)
            .field("ready", &self.ready.len())
            .finish_non_exhaustive()
    }
}

impl<B: IoBufMut> Drop for Endpoint<B> {
    fn drop(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        // Receives can be cancelled; sends, RMA and atomics finish by
        // themselves.
        for (index, slot) in self.slots.iter().enumerate() {
            if slot.op.as_ref().is_some_and(|op| op.kind.is_receive()) {
                let id = OpId::new(index, slot.generation);
                let _ = self.ep.cancel(id.context());
            }
        }
        let deadline = Instant::now() + self.drain_timeout;
        while self.in_flight > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let step = match self.reap() {
                Ok(0) => self.sleep((deadline - now).min(Duration::from_millis(10))),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = step {
                tracing::warn!(error = %e, "draining a dropped endpoint failed");
                break;
            }
        }
        if self.in_flight == 0 {
            return;
        }
        let mut leaked = 0usize;
        for slot in &mut self.slots {
            if let Some(op) = slot.op.take() {
                // The provider may still read or write these bytes: never
                // free them.
                std::mem::forget(op.buf);
                if op.kind.fetches() || op.kind == OpKind::Atomic {
                    std::mem::forget(std::mem::take(&mut slot.scratch));
                }
                leaked += 1;
            }
        }
        tracing::warn!(
            leaked,
            drain_timeout = ?self.drain_timeout,
            "an endpoint was dropped with operations that did not complete in time: their buffers are leaked, not freed, since the provider may still use them"
        );
    }
}
