//! The receive engine every provider drives: posted receives and
//! unexpected messages, tag matching and directed receive, FI_PEEK /
//! FI_CLAIM / FI_DISCARD, multi-receive buffers carved message by message,
//! cancel, remote CQ data, the unexpected-message budget with per-sender
//! flow control, and the receive completions, written once.
//!
//! The engine holds no lock and moves no bytes over a transport: the
//! provider keeps it inside its own locked state and tells it what arrives;
//! what the transport must do in return (fetch a rendezvous message into a
//! receive, release one nobody wants, acknowledge a buffered message once
//! delivered, pause or resume a sender) comes back as [`Action`]s the
//! provider takes with [`RxEngine::next_action`] after each call.
//!
//! The arrival of a message:
//! 1. [`RxEngine::arrive`] finds the oldest matching posted receive (for a
//!    multi-receive buffer, the part the message takes) and returns its
//!    [`RecvId`]; the provider places the data in [`RxEngine::recv`]'s
//!    buffer (or fetches it) and calls [`RxEngine::complete`] (or
//!    [`RxEngine::fail`]).
//! 2. With no match, [`RxEngine::admit`] says whether the budget lets the
//!    provider buffer the payload ([`RxEngine::take_buf`]); the message is
//!    then kept with [`RxEngine::keep`] as [`Held::Bytes`], or as
//!    [`Held::Remote`] when its data stays with the sender or in the
//!    transport.
//! 3. A receive posted later ([`RxEngine::post`]) takes the oldest
//!    matching kept message: buffered bytes are copied and completed here,
//!    a remote one comes back as [`Action::Fetch`].
//!
//! Every receive ends in exactly one completion or error completion,
//! whatever the peer does: a truncated message completes with `Trunc`,
//! cancel and [`RxEngine::drain`] with their error.
//!
//! A shared receive context (`fi_srx_context`,
//! [`SharedRx`](crate::objects::SharedRx)) is one engine that several
//! endpoints feed. The calls take where completions go as a [`Route`]:
//! an endpoint's own binds (every [`Report`] is one), or for the
//! context's own calls a router that finds, by the sender, the endpoint a
//! message arrived at. The provider's [`Transport::Peer`] then names the
//! endpoint too, so that the work the engine hands back about a sender
//! ([`Action`]) reaches the endpoint it belongs to
//! ([`RxEngine::requeue`] puts work back for it).

// Copies into and out of callers' buffers through raw pointers, which
// needs `unsafe`; each block states why it is sound.
#[allow(unsafe_code)]
mod pieces;
mod slab;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;

pub use pieces::Pieces;
use slab::RecvSlab;

use super::binds::{Binds, CqSink, msg_flags};
use super::tag::{Matcher, Posted, Unexpected};
use crate::objects::{CompletionFlags, CqEntry, FiAddr, Msg};
use crate::{Error, ErrorKind, OpFlags, Result};

/// What a provider's transport brings to the engine.
pub trait Transport: Debug {
    /// A kept message whose data is not here: a rendezvous request (the
    /// data stays with the sender), or a payload still in the transport.
    type Remote: Debug;
    /// What acknowledges a buffered message once it is delivered.
    type Ack: Debug;
    /// A sender the engine can ask the provider to pause and resume.
    type Peer: Copy + Eq + Hash + Debug;
}

/// A posted receive, or the part of a multi-receive buffer one message
/// takes.
#[derive(Debug, Clone, Copy)]
pub struct Recv<const N: usize> {
    /// The buffer.
    pub buf: Pieces<N>,
    /// The operation context.
    pub context: u64,
    /// The receive's flags.
    pub flags: OpFlags,
    /// The multi-receive buffer this is a part of.
    multi: Option<u32>,
}

impl<const N: usize> Recv<N> {
    /// Whether this is a part of a multi-receive buffer.
    pub fn is_multi(&self) -> bool {
        self.multi.is_some()
    }
}

/// A receive the engine holds for the provider, from a match until its
/// completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvId(u32);

/// What a completion says about the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// A tagged message.
    pub tagged: bool,
    /// Its tag (tagged messages).
    pub tag: u64,
    /// Its length (more than the receive takes: truncated).
    pub len: u64,
    /// Remote CQ data.
    pub data: Option<u64>,
    /// Its source.
    pub src: FiAddr,
}

/// How a kept message's data is held.
#[derive(Debug)]
pub enum Held<T: Transport> {
    /// Buffered here (from [`RxEngine::take_buf`]); `ack` is sent once
    /// the message is delivered.
    Bytes {
        /// The payload.
        bytes: Vec<u8>,
        /// What to acknowledge on delivery.
        ack: Option<T::Ack>,
    },
    /// With the sender or still in the transport.
    Remote(T::Remote),
    /// Remote CQ data of an RMA write (FI_RX_CQ_DATA mode): consumes a
    /// receive, carries no bytes.
    RmaData,
}

/// A message kept until a receive takes it.
#[derive(Debug)]
pub struct Entry<T: Transport> {
    /// Its length.
    pub len: u64,
    /// Remote CQ data.
    pub data: Option<u64>,
    /// Who sent it (charged for it against the budget).
    pub peer: T::Peer,
    /// Its data.
    pub held: Held<T>,
}

/// Work for the provider's transport, from [`RxEngine::next_action`].
#[derive(Debug)]
pub enum Action<T: Transport> {
    /// Bring `remote`'s data into receive `recv` (clear to send, CMA,
    /// RDMA read), then complete or fail it.
    Fetch {
        /// The receive.
        recv: RecvId,
        /// The message.
        meta: Meta,
        /// Where its data is.
        remote: T::Remote,
    },
    /// Nobody wants `remote`'s data (FI_DISCARD): let the sender finish.
    Release(T::Remote),
    /// Acknowledge a buffered message now delivered.
    Ack(T::Ack),
    /// Stop taking messages from this sender.
    Pause(T::Peer),
    /// Take messages from this sender again.
    Resume(T::Peer),
}

/// Limits on what unexpected messages may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes kept (payloads, plus `entry_cost` per message) beyond which
    /// senders holding more than `reserve` are paused.
    pub total: usize,
    /// Bytes beyond which no payload is buffered ([`RxEngine::admit`]
    /// refuses and pauses the sender).
    pub hard: usize,
    /// What a sender may hold past `total` before it is paused.
    pub reserve: usize,
    /// What one kept message costs besides its payload.
    pub entry_cost: usize,
    /// Largest buffer kept for reuse.
    pub spare_max: usize,
}

impl Budget {
    /// 8 MiB of unexpected messages, 64 bytes per entry; a sender is
    /// paused as soon as the budget is exceeded.
    pub const DEFAULT: Budget = Budget {
        total: 8 << 20,
        hard: 8 << 20,
        reserve: 0,
        entry_cost: 64,
        spare_max: 64 << 10,
    };
}

/// Where receive completions go: an endpoint's receive CQ and counter.
pub trait Report {
    /// A receive finished well; `report`: it goes to the CQ (not
    /// suppressed by selective completion).
    fn done(&self, entry: CqEntry, src: FiAddr, report: bool);
    /// A receive failed; `olen`: the bytes that did not fit.
    fn failed(&self, entry: CqEntry, err: &Error, olen: usize);
    /// Receives report only when asked (FI_SELECTIVE_COMPLETION).
    fn selective(&self) -> bool;
    /// The receive CQ is full: completions peers cause on their own
    /// should stop coming.
    fn crowded(&self) -> bool;
    /// The receive CQ has room again (half empty).
    fn roomy(&self) -> bool;
}

impl<C: CqSink> Report for Binds<C> {
    #[inline]
    fn done(&self, entry: CqEntry, src: FiAddr, report: bool) {
        self.rx_done(entry, src, report);
    }

    fn failed(&self, entry: CqEntry, err: &Error, olen: usize) {
        Binds::failed(self, true, entry, err, olen);
    }

    #[inline]
    fn selective(&self) -> bool {
        self.rx_selective
    }

    #[inline]
    fn crowded(&self) -> bool {
        self.rx_cq.as_ref().is_some_and(|c| c.is_full())
    }

    fn roomy(&self) -> bool {
        self.rx_cq.as_ref().is_none_or(|c| c.has_room())
    }
}

/// Where the completions of an engine call go, by the sender of the
/// message a receive took (`None`: no message, as for a cancelled
/// receive or a peek that found nothing).
///
/// Every [`Report`] routes everything to itself: an endpoint's own engine
/// is called with its binds. A shared receive context (`fi_srx_context`)
/// calls its engine with a router that finds the endpoint each sender
/// belongs to, so that a receive completes on the CQ of the endpoint the
/// message arrived at.
pub trait Route<P> {
    /// Where the completions go.
    type To: Report;
    /// Where the completion of a receive that took a message from `peer`
    /// goes.
    fn to(&self, peer: Option<&P>) -> &Self::To;
}

impl<R: Report, P> Route<P> for R {
    type To = R;

    #[inline]
    fn to(&self, _peer: Option<&P>) -> &R {
        self
    }
}

/// A multi-receive buffer being filled.
#[derive(Debug)]
struct Multi {
    /// Parts matched and not completed yet.
    inflight: usize,
    /// No more messages go in.
    released: bool,
}

/// A kept message and what it was charged.
#[derive(Debug)]
struct Kept<T: Transport> {
    entry: Entry<T>,
    cost: usize,
}

/// Spare buffers kept for reuse.
const SPARES: usize = 64;

/// The receive side of one endpoint (or shared receive context); `N` is
/// the most iovec pieces a receive takes.
#[derive(Debug)]
pub struct RxEngine<T: Transport, const N: usize> {
    msg: Matcher<RecvId, Kept<T>>,
    tagged: Matcher<RecvId, Kept<T>>,
    recvs: RecvSlab<N>,
    multi: Vec<Option<Multi>>,
    min_multi: usize,
    budget: Budget,
    used: usize,
    shares: HashMap<T::Peer, usize>,
    paused: Vec<T::Peer>,
    /// Senders paused because the receive CQ is full.
    cq_paused: Vec<T::Peer>,
    spare: Vec<Vec<u8>>,
    actions: VecDeque<Action<T>>,
    /// Scratch list of receives to fail ([`RxEngine::drain`]).
    scratch: Vec<(RecvId, bool)>,
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The completion flags of remote CQ data that consumed a receive.
const RMA_DATA: CompletionFlags = CompletionFlags::RMA
    .union(CompletionFlags::REMOTE_WRITE)
    .union(CompletionFlags::REMOTE_CQ_DATA);

impl<T: Transport, const N: usize> RxEngine<T, N> {
    /// Empty queues. `directed`: FI_DIRECTED_RECV, so a receive's source
    /// takes part in matching.
    pub fn new(directed: bool, budget: Budget) -> Self {
        RxEngine {
            msg: Matcher::new(directed),
            tagged: Matcher::new(directed),
            recvs: RecvSlab::default(),
            multi: Vec::new(),
            min_multi: MIN_MULTI_RECV,
            budget,
            used: 0,
            shares: HashMap::new(),
            paused: Vec::new(),
            cq_paused: Vec::new(),
            spare: Vec::new(),
            actions: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    /// Sets `FI_OPT_MIN_MULTI_RECV`: a multi-receive buffer is released
    /// once less than `n` bytes are left.
    pub fn set_min_multi_recv(&mut self, n: usize) {
        self.min_multi = n;
    }

    /// The next piece of work for the transport.
    #[inline]
    pub fn next_action(&mut self) -> Option<Action<T>> {
        self.actions.pop_front()
    }

    /// Puts back work for the transport that the provider took out with
    /// [`next_action`](Self::next_action) and could not do there (a shared
    /// receive context's engine gives work about one endpoint's senders to
    /// whichever endpoint drives it; that one hands it on).
    pub fn requeue(&mut self, a: Action<T>) {
        self.actions.push_back(a);
    }

    /// Whether work for the transport is waiting.
    #[inline]
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Bytes kept for unexpected messages (as charged).
    pub fn unexpected_bytes(&self) -> usize {
        self.used
    }

    /// Posted receives (untagged or tagged).
    pub fn posted(&self, tagged: bool) -> usize {
        self.matcher_ref(tagged).posted_len()
    }

    /// Kept unexpected messages (untagged or tagged).
    pub fn unexpected(&self, tagged: bool) -> usize {
        self.matcher_ref(tagged).unexpected_len()
    }

    /// Receives held: posted, or matched and not completed yet.
    pub fn live(&self) -> usize {
        self.recvs.live()
    }

    /// Receive `id` (its buffer, to place a message in).
    #[inline]
    pub fn recv(&self, id: RecvId) -> Option<&Recv<N>> {
        self.recvs.get(id)
    }

    fn matcher(&mut self, tagged: bool) -> &mut Matcher<RecvId, Kept<T>> {
        if tagged {
            &mut self.tagged
        } else {
            &mut self.msg
        }
    }

    fn matcher_ref(&self, tagged: bool) -> &Matcher<RecvId, Kept<T>> {
        if tagged { &self.tagged } else { &self.msg }
    }

    // ---------------------------------------------------------------
    // The application's side.

    /// Posts a receive (`fi_recvmsg` / `fi_trecvmsg`): with FI_MULTI_RECV
    /// (untagged only), and for tagged receives FI_PEEK / FI_CLAIM /
    /// FI_DISCARD. A kept message that matches is delivered at once (or
    /// fetched: [`Action::Fetch`]).
    pub fn post(
        &mut self,
        b: &impl Route<T::Peer>,
        msg: &Msg<'_>,
        flags: OpFlags,
        tagged: bool,
    ) -> Result<()> {
        let multi = flags.contains(OpFlags::MULTI_RECV);
        if multi && tagged {
            return Err(Error::bad_flags(
                "FI_MULTI_RECV applies to untagged receives only",
            ));
        }
        Pieces::<N>::check(msg.iov)?;
        if tagged && flags.intersects(OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD) {
            return self.peek_claim(b, msg, flags);
        }
        let multi = multi.then(|| self.new_multi());
        let (tag, ignore) = if tagged {
            (msg.tag, msg.ignore)
        } else {
            (0, 0)
        };
        let mut posted = Posted {
            tag,
            ignore,
            src: msg.addr,
            recv: self.recvs.post(msg.iov, msg.context, flags, multi),
        };
        while let Some((p, u)) = self.matcher(tagged).post(posted) {
            let id = self.carve(p, u.msg.entry.len, tagged);
            self.deliver(b, id, u, tagged);
            // A multi-receive buffer with room left takes more: carve put
            // the rest back at the head of the posted queue; take it out
            // to match it against the kept messages again.
            let Some(slot) = multi else { break };
            if !matches!(self.multi.get(slot as usize), Some(Some(m)) if !m.released) {
                break;
            }
            let recvs = &self.recvs;
            let found = if tagged {
                &mut self.tagged
            } else {
                &mut self.msg
            }
            .cancel(|id| recvs.get(*id).is_some_and(|r| r.multi == Some(slot)));
            let Some(rest) = found else { break };
            posted = rest;
        }
        Ok(())
    }

    /// A fresh multi-receive buffer's slot.
    fn new_multi(&mut self) -> u32 {
        let m = Multi {
            inflight: 0,
            released: false,
        };
        let i = match self.multi.iter().position(Option::is_none) {
            Some(i) => {
                self.multi[i] = Some(m);
                i
            }
            None => {
                self.multi.push(Some(m));
                self.multi.len() - 1
            }
        };
        u32::try_from(i).unwrap_or(u32::MAX)
    }

    /// FI_PEEK (with FI_CLAIM or FI_DISCARD) and FI_CLAIM (with
    /// FI_DISCARD). A peek that finds nothing completes with `NoMsg`; a
    /// claim with nothing claimed by this context is refused with `NoMsg`.
    fn peek_claim(&mut self, b: &impl Route<T::Peer>, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let context = msg.context;
        let report = |len: u64, tag: u64, data: Option<u64>, src: FiAddr, peer: &T::Peer| {
            let mut f = msg_flags(true, true);
            if data.is_some() {
                f |= CompletionFlags::REMOTE_CQ_DATA;
            }
            let e = CqEntry {
                context,
                flags: f,
                len: usize_of(len),
                buf: 0,
                data: data.unwrap_or(0),
                tag,
            };
            b.to(Some(peer)).done(e, src, true);
        };
        if flags.contains(OpFlags::PEEK) {
            let found = if flags.contains(OpFlags::DISCARD) {
                self.tagged
                    .take_unexpected(msg.tag, msg.ignore, msg.addr)
                    .map(|u| {
                        report(
                            u.msg.entry.len,
                            u.tag,
                            u.msg.entry.data,
                            u.src,
                            &u.msg.entry.peer,
                        );
                        self.discard(u);
                    })
            } else {
                let claim = flags.contains(OpFlags::CLAIM).then_some(context);
                self.tagged
                    .peek(msg.tag, msg.ignore, msg.addr, claim)
                    .map(|u| {
                        report(
                            u.msg.entry.len,
                            u.tag,
                            u.msg.entry.data,
                            u.src,
                            &u.msg.entry.peer,
                        );
                    })
            };
            if found.is_none() {
                let e = CqEntry {
                    context,
                    flags: msg_flags(true, true),
                    ..CqEntry::default()
                };
                b.to(None).failed(
                    e,
                    &Error::new(ErrorKind::NoMsg, "FI_PEEK: no matching message"),
                    0,
                );
            }
            return Ok(());
        }
        // FI_CLAIM (with or without FI_DISCARD): the message reserved by an
        // earlier FI_PEEK|FI_CLAIM with this context.
        let u = self.tagged.claim(context).ok_or_else(|| {
            Error::new(
                ErrorKind::NoMsg,
                "FI_CLAIM: no message was claimed with this context",
            )
        })?;
        if flags.contains(OpFlags::DISCARD) {
            report(0, u.tag, u.msg.entry.data, u.src, &u.msg.entry.peer);
            self.discard(u);
        } else {
            let id = self.recvs.post(msg.iov, context, flags, None);
            self.deliver(b, id, u, true);
        }
        Ok(())
    }

    /// Cancels the posted receive with this context (`fi_cancel`): it
    /// completes with `Canceled`. `NoEnt` when none is posted.
    pub fn cancel(&mut self, b: &impl Route<T::Peer>, context: u64) -> Result<()> {
        let recvs = &self.recvs;
        let (found, tagged) = match self
            .msg
            .cancel(|id| recvs.get(*id).is_some_and(|r| r.context == context))
        {
            Some(p) => (Some(p), false),
            None => (
                self.tagged
                    .cancel(|id| recvs.get(*id).is_some_and(|r| r.context == context)),
                true,
            ),
        };
        let Some(p) = found else {
            return Err(Error::new(
                ErrorKind::NoEnt,
                "no posted receive has this context",
            ));
        };
        self.abort(
            b,
            p.recv,
            tagged,
            &Error::new(ErrorKind::Canceled, "receive cancelled"),
        );
        Ok(())
    }

    /// Fails every posted receive with `err` (the endpoint closes, a
    /// connected endpoint's peer went away). Kept messages stay.
    pub fn drain(&mut self, b: &impl Route<T::Peer>, err: &Error) {
        let mut list = std::mem::take(&mut self.scratch);
        list.extend(self.msg.drain_posted().map(|p| (p.recv, false)));
        list.extend(self.tagged.drain_posted().map(|p| (p.recv, true)));
        for &(id, tagged) in &list {
            self.abort(b, id, tagged, err);
        }
        list.clear();
        self.scratch = list;
    }

    /// Ends a posted receive taken out of its queue with `err`: a
    /// multi-receive buffer is released, and flagged FI_MULTI_RECV when
    /// none of its parts is still in flight.
    fn abort(&mut self, b: &impl Route<T::Peer>, id: RecvId, tagged: bool, err: &Error) {
        let r = self.recvs.take(id);
        let mut flags = msg_flags(tagged, true);
        if let Some(slot) = r.multi {
            if let Some(entry) = self.multi.get_mut(slot as usize) {
                if let Some(m) = entry.as_mut() {
                    m.released = true;
                    if m.inflight == 0 {
                        flags |= CompletionFlags::MULTI_RECV;
                        *entry = None;
                    }
                }
            }
        }
        let e = CqEntry {
            context: r.context,
            flags,
            ..CqEntry::default()
        };
        b.to(None).failed(e, err, 0);
    }

    // ---------------------------------------------------------------
    // The transport's side.

    /// A message of `len` bytes arrived: the oldest matching posted
    /// receive (for a multi-receive buffer, the part the message takes),
    /// or `None` (then [`admit`](Self::admit) and [`keep`](Self::keep)).
    #[inline]
    pub fn arrive(&mut self, tagged: bool, tag: u64, src: FiAddr, len: u64) -> Option<RecvId> {
        let p = self.matcher(tagged).arrive(tag, src)?;
        Some(self.carve(p, len, tagged))
    }

    /// The part of a posted receive a message of `len` bytes takes: the
    /// whole receive, or for a multi-receive buffer the next `len` bytes
    /// (the rest goes back to the head of the queue while at least the
    /// minimum is left).
    #[inline]
    fn carve(&mut self, p: Posted<RecvId>, len: u64, tagged: bool) -> RecvId {
        let Some(slot) = self.recvs.get(p.recv).and_then(|r| r.multi) else {
            return p.recv;
        };
        let whole = self.recvs.take(p.recv);
        let cap = whole.buf.len();
        let take = usize_of(len).min(cap);
        let part = self.recvs.put(Recv {
            buf: whole.buf.sub(0, take),
            ..whole
        });
        let rest = cap - take;
        let released = rest < self.min_multi;
        if let Some(Some(m)) = self.multi.get_mut(slot as usize) {
            m.inflight += 1;
            m.released = released;
        }
        if !released {
            let again = Posted {
                recv: self.recvs.put(Recv {
                    buf: whole.buf.sub(take, rest),
                    ..whole
                }),
                ..p
            };
            self.matcher(tagged).repost_front(again);
        }
        part
    }

    /// A part of multi-receive buffer `slot` completes: once the buffer is
    /// released and none of its parts is left in flight, it is freed and
    /// the completion carries FI_MULTI_RECV.
    fn part_done(&mut self, slot: Option<u32>) -> CompletionFlags {
        let Some(entry) = slot.and_then(|s| self.multi.get_mut(s as usize)) else {
            return CompletionFlags::empty();
        };
        let Some(m) = entry.as_mut() else {
            return CompletionFlags::empty();
        };
        m.inflight = m.inflight.saturating_sub(1);
        if m.released && m.inflight == 0 {
            *entry = None;
            return CompletionFlags::MULTI_RECV;
        }
        CompletionFlags::empty()
    }

    /// Completes receive `id`, whose data is in its buffer (or fails it
    /// with `Trunc` when the message was longer).
    #[inline]
    pub fn complete(&mut self, b: &impl Route<T::Peer>, id: RecvId, m: Meta) {
        self.complete_to(b.to(None), id, m);
    }

    #[inline]
    fn complete_to(&mut self, b: &impl Report, id: RecvId, m: Meta) {
        let d = self.recvs.finish(id);
        let mut flags = msg_flags(m.tagged, true);
        if m.data.is_some() {
            flags |= CompletionFlags::REMOTE_CQ_DATA;
        }
        let mut buf = 0;
        if d.multi.is_some() {
            buf = d.base;
            flags |= self.part_done(d.multi);
        }
        let e = CqEntry {
            context: d.context,
            flags,
            len: usize_of(m.len.min(d.cap)),
            buf,
            data: m.data.unwrap_or(0),
            tag: if m.tagged { m.tag } else { 0 },
        };
        if m.len > d.cap {
            let err = Error::new(
                ErrorKind::Trunc,
                format!("message of {} bytes truncated to {}", m.len, d.cap),
            );
            b.failed(e, &err, usize_of(m.len - d.cap));
        } else {
            let report = !b.selective()
                || d.flags.contains(OpFlags::COMPLETION)
                || flags.contains(CompletionFlags::MULTI_RECV);
            b.done(e, m.src, report);
        }
    }

    /// Fails receive `id` (its message could not be brought in).
    pub fn fail(&mut self, b: &impl Route<T::Peer>, id: RecvId, tagged: bool, err: &Error) {
        let d = self.recvs.finish(id);
        let flags = msg_flags(tagged, true) | self.part_done(d.multi);
        let e = CqEntry {
            context: d.context,
            flags,
            ..CqEntry::default()
        };
        b.to(None).failed(e, err, 0);
    }

    /// Whether a payload of `len` bytes from `peer` may be buffered. When
    /// not, the sender is paused ([`Action::Pause`]) and the provider
    /// leaves the payload in its transport (or keeps the message as
    /// [`Held::Remote`]).
    pub fn admit(&mut self, peer: T::Peer, len: usize) -> bool {
        let cost = len.saturating_add(self.budget.entry_cost);
        if self.used.saturating_add(cost) <= self.budget.hard {
            return true;
        }
        self.pause(peer);
        false
    }

    /// Keeps a message no receive matched (after [`arrive`](Self::arrive)
    /// found none), charging its sender; a sender over its share is
    /// paused.
    pub fn keep(&mut self, tagged: bool, tag: u64, src: FiAddr, entry: Entry<T>) {
        let cost = match &entry.held {
            Held::Bytes { bytes, .. } => bytes.capacity(),
            _ => 0,
        } + self.budget.entry_cost;
        let peer = entry.peer;
        self.used += cost;
        let share = self.shares.entry(peer).or_insert(0);
        *share += cost;
        if self.used > self.budget.total && *share > self.budget.reserve {
            self.pause(peer);
        }
        self.matcher(tagged)
            .push_unexpected(tag, src, Kept { entry, cost });
    }

    /// Delivers a message now complete in a buffer: into the oldest
    /// matching receive posted meanwhile, else kept.
    pub fn land(
        &mut self,
        b: &impl Route<T::Peer>,
        tagged: bool,
        tag: u64,
        src: FiAddr,
        entry: Entry<T>,
    ) {
        match self.arrive(tagged, tag, src, entry.len) {
            Some(id) => {
                let u = Unexpected {
                    tag,
                    src,
                    claimed_by: None,
                    msg: Kept { entry, cost: 0 },
                };
                self.deliver(b, id, u, tagged);
            }
            None => self.keep(tagged, tag, src, entry),
        }
    }

    fn pause(&mut self, peer: T::Peer) {
        if !self.paused.contains(&peer) {
            self.paused.push(peer);
            self.actions.push_back(Action::Pause(peer));
        }
    }

    /// Gives back what a kept message was charged; senders resume once
    /// the total is down to half the budget or they hold at most half
    /// their reserve.
    fn uncharge(&mut self, peer: T::Peer, cost: usize) {
        if cost == 0 {
            return;
        }
        self.used = self.used.saturating_sub(cost);
        if let Some(s) = self.shares.get_mut(&peer) {
            *s = s.saturating_sub(cost);
            if *s == 0 {
                self.shares.remove(&peer);
            }
        }
        let mut i = 0;
        while i < self.paused.len() {
            let p = self.paused[i];
            let share = self.shares.get(&p).copied().unwrap_or(0);
            if self.used <= self.budget.total / 2 || share <= self.budget.reserve / 2 {
                self.paused.swap_remove(i);
                if !self.cq_paused.contains(&p) {
                    self.actions.push_back(Action::Resume(p));
                }
            } else {
                i += 1;
            }
        }
    }

    /// Hands a kept message to receive `id`.
    #[allow(unsafe_code)]
    fn deliver(
        &mut self,
        b: &impl Route<T::Peer>,
        id: RecvId,
        u: Unexpected<Kept<T>>,
        tagged: bool,
    ) {
        let Kept { entry, cost } = u.msg;
        self.uncharge(entry.peer, cost);
        let b = b.to(Some(&entry.peer));
        let meta = Meta {
            tagged,
            tag: u.tag,
            len: entry.len,
            data: entry.data,
            src: u.src,
        };
        match entry.held {
            Held::Bytes { bytes, ack } => {
                if let Some(r) = self.recvs.get(id) {
                    // SAFETY: the receive contract of recvmsg / trecvmsg:
                    // the buffer is valid for writes until it completes.
                    unsafe { r.buf.write_at(0, &bytes) };
                }
                self.give_buf(bytes);
                self.complete_to(b, id, meta);
                if let Some(a) = ack {
                    self.actions.push_back(Action::Ack(a));
                }
            }
            Held::Remote(remote) => self.actions.push_back(Action::Fetch {
                recv: id,
                meta,
                remote,
            }),
            Held::RmaData => self.complete_rma_data(b, id, meta),
        }
    }

    /// Drops a kept message (FI_DISCARD): its sender is acknowledged or
    /// released.
    fn discard(&mut self, u: Unexpected<Kept<T>>) {
        let Kept { entry, cost } = u.msg;
        self.uncharge(entry.peer, cost);
        match entry.held {
            Held::Bytes { bytes, ack } => {
                self.give_buf(bytes);
                if let Some(a) = ack {
                    self.actions.push_back(Action::Ack(a));
                }
            }
            Held::Remote(r) => self.actions.push_back(Action::Release(r)),
            Held::RmaData => {}
        }
    }

    /// Remote CQ data of an RMA write: reported at once, or (FI_RX_CQ_DATA
    /// mode, `consume`) taking a posted untagged receive, kept until one is
    /// posted.
    pub fn remote_cq_data(
        &mut self,
        b: &impl Route<T::Peer>,
        data: u64,
        src: FiAddr,
        peer: T::Peer,
        consume: bool,
    ) {
        let b = b.to(Some(&peer));
        let meta = Meta {
            tagged: false,
            tag: 0,
            len: 0,
            data: Some(data),
            src,
        };
        if !consume {
            let e = CqEntry {
                flags: RMA_DATA,
                data,
                ..CqEntry::default()
            };
            b.done(e, src, true);
            // Nothing bounds these but the CQ: a sender that fills it is
            // paused until the application has read half of it.
            if b.crowded() && !self.cq_paused.contains(&peer) {
                self.cq_paused.push(peer);
                self.actions.push_back(Action::Pause(peer));
            }
            return;
        }
        match self.arrive(false, 0, src, 0) {
            Some(id) => self.complete_rma_data(b, id, meta),
            None => self.keep(
                false,
                0,
                src,
                Entry {
                    len: 0,
                    data: Some(data),
                    peer,
                    held: Held::RmaData,
                },
            ),
        }
    }

    fn complete_rma_data(&mut self, b: &impl Report, id: RecvId, m: Meta) {
        let d = self.recvs.finish(id);
        let e = CqEntry {
            context: d.context,
            flags: RMA_DATA | self.part_done(d.multi),
            data: m.data.unwrap_or(0),
            ..CqEntry::default()
        };
        b.done(e, m.src, true);
    }

    /// Whether senders wait for room in the receive CQ (then the provider
    /// calls [`cq_read`](Self::cq_read) as it progresses).
    #[inline]
    pub fn waits_for_cq(&self) -> bool {
        !self.cq_paused.is_empty()
    }

    /// The application read the receive CQ: once it has room, the senders
    /// paused for it resume.
    pub fn cq_read(&mut self, b: &impl Route<T::Peer>) {
        if self.cq_paused.is_empty() || !b.to(None).roomy() {
            return;
        }
        for p in std::mem::take(&mut self.cq_paused) {
            if !self.paused.contains(&p) {
                self.actions.push_back(Action::Resume(p));
            }
        }
    }

    /// A sender went away: its kept messages whose data was with it are
    /// dropped (buffered ones stay deliverable); it is no longer paused.
    pub fn peer_gone(&mut self, peer: T::Peer) {
        let gone = |u: &Unexpected<Kept<T>>| {
            u.msg.entry.peer == peer && matches!(u.msg.entry.held, Held::Remote(_))
        };
        for tagged in [false, true] {
            while let Some(u) = self.matcher(tagged).remove_unexpected(gone) {
                self.uncharge(peer, u.msg.cost);
            }
        }
        self.paused.retain(|p| *p != peer);
        self.cq_paused.retain(|p| *p != peer);
    }

    /// As [`peer_gone`](Self::peer_gone), for a transport whose kept
    /// remote messages hold resources of its own (a receive buffer the
    /// payload sits in): those `here` says hold their data locally stay
    /// deliverable; the other remote ones are dropped into `dropped`, for
    /// the transport to free.
    pub fn peer_gone_with(
        &mut self,
        peer: T::Peer,
        here: impl Fn(&T::Remote) -> bool,
        dropped: &mut Vec<T::Remote>,
    ) {
        let gone = |u: &Unexpected<Kept<T>>| {
            u.msg.entry.peer == peer && matches!(&u.msg.entry.held, Held::Remote(r) if !here(r))
        };
        for tagged in [false, true] {
            while let Some(u) = self.matcher(tagged).remove_unexpected(gone) {
                self.uncharge(peer, u.msg.cost);
                if let Held::Remote(r) = u.msg.entry.held {
                    dropped.push(r);
                }
            }
        }
        self.paused.retain(|p| *p != peer);
        self.cq_paused.retain(|p| *p != peer);
    }

    /// An empty buffer for a payload of `len` bytes: a spare one of a
    /// fitting size, or a new one.
    pub fn take_buf(&mut self, len: usize) -> Vec<u8> {
        let fits = |v: &Vec<u8>| v.capacity() >= len && v.capacity() <= len.max(1024) * 4;
        match self.spare.iter().rposition(fits) {
            Some(i) => self.spare.swap_remove(i),
            None => Vec::with_capacity(len),
        }
    }

    /// Keeps a buffer for reuse.
    pub fn give_buf(&mut self, mut v: Vec<u8>) {
        if self.spare.len() < SPARES && v.capacity() <= self.budget.spare_max && v.capacity() > 0 {
            v.clear();
            self.spare.push(v);
        }
    }
}

/// The default of `FI_OPT_MIN_MULTI_RECV`: a multi-receive buffer is
/// released once less than this is left.
pub const MIN_MULTI_RECV: usize = 64;
