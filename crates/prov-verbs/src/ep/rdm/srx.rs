//! Shared receive contexts (`fi_srx_context`) of RDM endpoints: one
//! receive engine that several endpoints of a domain feed.
//!
//! No verbs shared receive queue is involved: each endpoint keeps its own
//! SRQ of registered buffers, its connections and its CQ, copies eager
//! messages out of its buffers and RDMA-reads rendezvous data itself. What
//! is shared is the software side, the kit's engine ([`Rx`]): posted
//! receives, unexpected messages and their budget, which thus bounds the
//! heap held for unexpected messages across all the bound endpoints.
//!
//! The context owns the engine. A bound endpoint works on `State::rx` as
//! any other: for the length of each pass ([`Pass`], what
//! `Engine::lock` returns) the context's engine is swapped into the
//! endpoint's state and the endpoint's own (idle) engine waits in the
//! context. The context's lock is taken after the endpoint's, never the
//! other way round; the context's own calls (receive, cancel) take only the
//! context's lock and visit endpoints after releasing it.
//!
//! Senders are named by endpoint number and connection ([`peer`]), so that
//! the engine's work about another endpoint's sender (read its rendezvous
//! message into a receive, copy a message out of its receive buffer,
//! resume it) is handed to that endpoint: kept in the context's mail,
//! flagged in the endpoint's `srx_mail`, and done at its next pass (its
//! progress, or at once when a receive posted on the context asked for
//! it). Completions go to the CQ of the endpoint a message arrived at: an
//! endpoint's passes report to its own binds, and the context's calls
//! route through [`Router`], which finds the sender's endpoint.
//!
//! An endpoint that closes takes its part with it: the context's receives
//! its RDMA reads were filling fail on its CQ (`Canceled`), and the
//! messages kept for it whose data is with its peers or in its receive
//! buffers are dropped (those copied out stay deliverable).

use std::mem;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use fabric_core::attr::{RxAttr, SHARED_CONTEXT};
use fabric_core::kit::rx::{Action, Budget, MIN_MULTI_RECV, Route};
use fabric_core::objects::{Msg, MsgOps, SharedRx, TaggedOps};
use fabric_core::{Caps, Error, ErrorKind, OpFlags, Result};

use super::rx::{Rx, VerbsWire};
use super::{Binds, Engine, State, UNEXPECTED_BUDGET, lock};
use crate::domain::DomainCore;

/// A sender as the receive engine knows it: the endpoint's number in the
/// high half, the connection (an index in its table, never reused) in the
/// low half.
pub(crate) type Peer = u64;

/// The sender of connection `conn` of endpoint `ep`.
#[inline]
pub(super) fn peer(ep: u32, conn: usize) -> Peer {
    (u64::from(ep) << 32) | (conn as u64 & u64::from(u32::MAX))
}

/// The connection of a sender.
#[inline]
pub(super) fn conn_of(p: Peer) -> usize {
    (p & u64::from(u32::MAX)) as usize
}

/// The endpoint of a sender.
#[inline]
pub(super) fn ep_of(p: Peer) -> u32 {
    (p >> 32) as u32
}

/// A fresh endpoint number.
pub(super) fn next_ep_no() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The endpoint a piece of the engine's work concerns.
pub(super) fn owner(a: &Action<VerbsWire>) -> u32 {
    match a {
        Action::Fetch { remote, .. } | Action::Release(remote) => ep_of(remote.peer),
        Action::Ack(()) => 0,
        Action::Pause(p) | Action::Resume(p) => ep_of(*p),
    }
}

/// An endpoint bound to a context.
#[derive(Debug)]
struct Member {
    ep_no: u32,
    /// Not upgraded under the context's lock: a last strong reference
    /// dropped there would close the endpoint under it.
    ep: Weak<Engine>,
    /// The endpoint's `srx_mail` flag.
    mail: Arc<AtomicBool>,
    /// Its binds once it is enabled (where its completions go).
    binds: Option<Binds>,
}

/// What the context's lock guards.
#[derive(Debug)]
pub(super) struct SrxState {
    /// The shared engine (while an endpoint works: that endpoint's own,
    /// swapped in its place).
    engine: Rx,
    /// Endpoints bound, in the order they were bound.
    members: Vec<Member>,
    /// Work for endpoints (by endpoint number) not done yet.
    mail: Vec<(u32, Action<VerbsWire>)>,
}

/// The shared part of a shared receive context.
#[derive(Debug)]
pub(super) struct SrxInner {
    attr: RxAttr,
    /// The domain: bound endpoints are of this domain.
    domain: Arc<DomainCore>,
    state: Mutex<SrxState>,
    min_multi_recv: AtomicUsize,
    /// Where completions go when no bound endpoint is enabled.
    nowhere: Binds,
    /// Most endpoints bound at once (`domain_attr.max_ep_srx_ctx`).
    limit: usize,
}

/// A shared receive context of the verbs provider (RDM endpoints).
#[derive(Debug)]
pub struct VerbsSrx {
    inner: Arc<SrxInner>,
}

impl VerbsSrx {
    /// A context for the RDM endpoints of `domain`, serving at most
    /// `limit` of them at once (0: no limit).
    pub(crate) fn new(attr: &RxAttr, domain: Arc<DomainCore>, limit: usize) -> Self {
        let directed = attr.caps.contains(Caps::DIRECTED_RECV);
        let total = match attr.total_buffered_recv {
            0 => UNEXPECTED_BUDGET,
            n => n,
        };
        let budget = Budget {
            total,
            hard: total,
            ..Budget::DEFAULT
        };
        VerbsSrx {
            inner: Arc::new(SrxInner {
                attr: attr.clone(),
                domain,
                state: Mutex::new(SrxState {
                    engine: Rx::new(directed, budget),
                    members: Vec::new(),
                    mail: Vec::new(),
                }),
                min_multi_recv: AtomicUsize::new(MIN_MULTI_RECV),
                nowhere: Binds::default(),
                limit: if limit == 0 { usize::MAX } else { limit },
            }),
        }
    }

    /// Binds endpoint `ep` (`fi_ep_bind` of the context), before enable.
    pub(super) fn attach(&self, ep: &Arc<Engine>) -> Result<()> {
        if ep.info.ep_attr.rx_ctx_cnt != SHARED_CONTEXT {
            return Err(Error::inval(
                "verbs: bind of a shared receive context to an endpoint opened without \
                 ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT",
            ));
        }
        if !Arc::ptr_eq(&ep.domain, &self.inner.domain) {
            return Err(Error::inval(
                "verbs: the shared receive context belongs to another domain",
            ));
        }
        let bound_already = || {
            Error::new(
                ErrorKind::OpBadState,
                "verbs: the endpoint is already bound to a shared receive context",
            )
        };
        if ep.srx.get().is_some() {
            return Err(bound_already());
        }
        let mut st = lock(&self.inner.state);
        if st.members.len() >= self.inner.limit {
            return Err(Error::new(
                ErrorKind::NoSpc,
                format!(
                    "verbs: the shared receive context serves {} endpoints already \
                     (domain_attr.max_ep_srx_ctx)",
                    st.members.len()
                ),
            ));
        }
        ep.srx
            .set(self.inner.clone())
            .map_err(|_| bound_already())?;
        st.members.push(Member {
            ep_no: ep.ep_no,
            ep: Arc::downgrade(ep),
            mail: ep.srx_mail.clone(),
            binds: None,
        });
        Ok(())
    }

    /// Posts a receive on the context.
    fn post(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        self.inner.with_engine(|e, r| e.post(r, msg, flags, tagged))
    }
}

/// Routes the completions of the context's own calls to the endpoint of
/// each sender, else (no sender: a cancel, a peek that found nothing) to
/// the first bound endpoint that is enabled.
struct Router<'a> {
    members: &'a [Member],
    nowhere: &'a Binds,
}

impl Route<Peer> for Router<'_> {
    type To = Binds;

    fn to(&self, peer: Option<&Peer>) -> &Binds {
        let first = || self.members.iter().find_map(|m| m.binds.as_ref());
        let of = |p: Peer| {
            self.members
                .iter()
                .find(|m| m.ep_no == ep_of(p))
                .and_then(|m| m.binds.as_ref())
        };
        peer.and_then(|p| of(*p))
            .or_else(first)
            .unwrap_or(self.nowhere)
    }
}

/// The error of a receive whose message's endpoint closed.
fn closed() -> Error {
    Error::new(
        ErrorKind::Canceled,
        "verbs: the endpoint the message arrived at was closed",
    )
}

impl SrxState {
    /// Hands `a` to the endpoint it concerns (kept in the mail, its flag
    /// set): whether that endpoint is bound; work for one that is gone is
    /// dropped, a receive it was to fill failing.
    fn hand_on(&mut self, a: Action<VerbsWire>, nowhere: &Binds) -> Option<Weak<Engine>> {
        let no = owner(&a);
        if let Some(m) = self.members.iter().find(|m| m.ep_no == no) {
            m.mail.store(true, Ordering::Release);
            let ep = m.ep.clone();
            self.mail.push((no, a));
            return Some(ep);
        }
        if let Action::Fetch { recv, meta, .. } = a {
            let router = Router {
                members: &self.members,
                nowhere,
            };
            self.engine.fail(&router, recv, meta.tagged, &closed());
        }
        None
    }
}

impl SrxInner {
    /// Enables bound endpoint `ep_no`: `enable` fixes its binds and
    /// returns them, unless another enabled endpoint of the context uses
    /// another address vector (the endpoints of a shared receive context
    /// share one, fi_endpoint(3), which directed receives name sources
    /// in).
    pub(super) fn enable_member(
        &self,
        ep_no: u32,
        pending: &Binds,
        enable: impl FnOnce() -> Result<Binds>,
    ) -> Result<()> {
        let same = |o: &Binds| match (&o.av, &pending.av) {
            (None, None) => true,
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            _ => false,
        };
        {
            let st = lock(&self.state);
            let other = st
                .members
                .iter()
                .any(|m| m.binds.as_ref().is_some_and(|o| !same(o)));
            if other {
                return Err(Error::inval(
                    "verbs: the endpoints of a shared receive context share one address vector",
                ));
            }
        }
        // Not under the context's lock: enabling registers the endpoint
        // with its CQs.
        let b = enable()?;
        let mut st = lock(&self.state);
        if let Some(m) = st.members.iter_mut().find(|m| m.ep_no == ep_no) {
            m.binds = Some(b);
        }
        Ok(())
    }

    /// Runs `f` on the engine with the router of the bound endpoints,
    /// then hands the work it left to the endpoints concerned and runs
    /// their passes (with no lock held).
    fn with_engine<R>(&self, f: impl FnOnce(&mut Rx, &Router<'_>) -> R) -> R {
        let mut kick: Vec<Weak<Engine>> = Vec::new();
        let r = {
            let mut guard = lock(&self.state);
            let st = &mut *guard;
            let router = Router {
                members: &st.members,
                nowhere: &self.nowhere,
            };
            let r = f(&mut st.engine, &router);
            while let Some(a) = st.engine.next_action() {
                if let Some(ep) = st.hand_on(a, &self.nowhere) {
                    if !kick.iter().any(|k| k.ptr_eq(&ep)) {
                        kick.push(ep);
                    }
                }
            }
            r
        };
        for ep in kick {
            if let Some(ep) = ep.upgrade() {
                ep.srx_pass();
            }
        }
        r
    }

    /// Endpoint `ep_no` (state `st`, binds `b`) closes: the receives its
    /// RDMA reads were filling fail on its CQ, its mail goes (a receive it
    /// was to fill failing), the messages kept from its connections whose
    /// data is not copied out are dropped, and it leaves the context.
    pub(super) fn leave(&self, ep_no: u32, st: &mut State, b: Option<&Binds>) {
        let mut g = lock(&self.state);
        let g = &mut *g;
        let own = b.unwrap_or(&self.nowhere);
        for idx in 0..st.reads.items.len() {
            if let Some(op) = st.reads.remove(idx) {
                g.engine.fail(own, op.recv, op.meta.tagged, &closed());
            }
        }
        for c in &mut st.conns {
            for q in c.reads.drain(..) {
                g.engine.fail(own, q.op.recv, q.op.meta.tagged, &closed());
            }
        }
        st.queued_reads = 0;
        let mut i = 0;
        while i < g.mail.len() {
            if g.mail[i].0 != ep_no {
                i += 1;
                continue;
            }
            let (_, a) = g.mail.remove(i);
            if let Action::Fetch { recv, meta, .. } = a {
                g.engine.fail(own, recv, meta.tagged, &closed());
            }
        }
        let mut dropped = Vec::new();
        for c in 0..st.conns.len() {
            g.engine
                .peer_gone_with(peer(ep_no, c), |_| false, &mut dropped);
        }
        // Its remote CQ data may have been reported with no connection.
        g.engine
            .peer_gone_with(peer(ep_no, u32::MAX as usize), |_| false, &mut dropped);
        g.members.retain(|m| m.ep_no != ep_no);
        while let Some(a) = g.engine.next_action() {
            if owner(&a) == ep_no {
                if let Action::Fetch { recv, meta, .. } = a {
                    g.engine.fail(own, recv, meta.tagged, &closed());
                }
                continue;
            }
            // Resuming other endpoints' senders is theirs.
            let _ = g.hand_on(a, &self.nowhere);
        }
    }
}

impl Engine {
    /// A pass that does the work the shared receive context holds for
    /// this endpoint.
    pub(super) fn srx_pass(&self) {
        let mut st = self.lock();
        if let Err(e) = self.progress_locked(&mut st, false) {
            tracing::debug!(error = %e, "verbs: progress of a shared receive context's endpoint");
        }
    }

    /// The endpoint's state for one operation or progress pass.
    #[inline]
    pub(super) fn lock(&self) -> Pass<'_> {
        Pass::new(self, lock(&self.state))
    }
}

/// The endpoint's state for one operation or progress pass. For an
/// endpoint bound to a shared receive context it holds the context's lock
/// too, with the context's engine in `State::rx`; without one it is the
/// state's guard and a check.
pub(super) struct Pass<'a> {
    st: MutexGuard<'a, State>,
    srx: Option<(&'a SrxInner, MutexGuard<'a, SrxState>)>,
}

impl<'a> Pass<'a> {
    /// The pass of `ep`, whose state `st` is locked.
    #[inline]
    pub(super) fn new(ep: &'a Engine, st: MutexGuard<'a, State>) -> Self {
        match ep.srx.get() {
            None => Pass { st, srx: None },
            Some(srx) => Self::shared(ep, st, srx),
        }
    }

    #[cold]
    fn shared(ep: &'a Engine, mut st: MutexGuard<'a, State>, srx: &'a SrxInner) -> Self {
        let mut g = lock(&srx.state);
        mem::swap(&mut st.rx, &mut g.engine);
        if ep.srx_mail.swap(false, Ordering::AcqRel) {
            let mut i = 0;
            while i < g.mail.len() {
                if g.mail[i].0 == ep.ep_no {
                    let (_, a) = g.mail.remove(i);
                    st.rx.requeue(a);
                } else {
                    i += 1;
                }
            }
        }
        Pass {
            st,
            srx: Some((srx, g)),
        }
    }
}

impl Deref for Pass<'_> {
    type Target = State;

    #[inline]
    fn deref(&self) -> &State {
        &self.st
    }
}

impl DerefMut for Pass<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut State {
        &mut self.st
    }
}

impl Drop for Pass<'_> {
    #[inline]
    fn drop(&mut self) {
        let Some((srx, g)) = self.srx.as_mut() else {
            return;
        };
        let st = &mut *self.st;
        // Work the pass left undone goes to the mail with the rest,
        // flagged, so that it is not left in the engine unseen.
        while let Some(a) = st.rx.next_action() {
            st.foreign.push(a);
        }
        mem::swap(&mut st.rx, &mut g.engine);
        for a in st.foreign.drain(..) {
            let _ = g.hand_on(a, &srx.nowhere);
        }
    }
}

impl std::fmt::Debug for Pass<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pass")
            .field("shared", &self.srx.is_some())
            .finish_non_exhaustive()
    }
}

// The zero-copy operations are `unsafe fn`s of the trait (their buffer
// contract); the implementations themselves use no `unsafe`: the engine
// keeps the buffers as pieces and writes them no later than the
// completion.
#[allow(unsafe_code)]
impl MsgOps for VerbsSrx {
    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.post(msg, flags, false)
    }
}

#[allow(unsafe_code)]
impl TaggedOps for VerbsSrx {
    unsafe fn trecvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.post(msg, flags, true)
    }
}

impl SharedRx for VerbsSrx {
    fn attr(&self) -> &RxAttr {
        &self.inner.attr
    }

    fn cancel(&self, context: u64) -> Result<()> {
        self.inner.with_engine(|e, r| e.cancel(r, context))
    }

    fn min_multi_recv(&self) -> Result<usize> {
        Ok(self.inner.min_multi_recv.load(Ordering::Relaxed))
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.inner.min_multi_recv.store(bytes, Ordering::Relaxed);
        self.inner.with_engine(|e, _| e.set_min_multi_recv(bytes));
        Ok(())
    }

    fn bound_endpoints(&self) -> usize {
        lock(&self.inner.state)
            .members
            .iter()
            .filter(|m| m.ep.strong_count() > 0)
            .count()
    }
}
