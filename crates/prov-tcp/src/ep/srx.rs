//! Shared receive contexts (`fi_srx_context`): one receive engine that
//! several endpoints of a domain feed.
//!
//! The context owns the engine ([`Engine`]). An endpoint bound to it
//! works as any other, on `State::rx`: for the length of each pass
//! ([`Pass`], what [`EpInner::lock`] returns) the context's engine is
//! swapped into the endpoint's state and its own (empty) engine waits in
//! the context. The context's lock is taken after the endpoint's and
//! never the other way round; a receive posted on the context takes only
//! the context's lock, and endpoints are visited after it is released.
//!
//! Senders are named by their epoll token (endpoint and connection), so
//! the engine's work about a sender of another endpoint (resume it, fetch
//! its rendezvous message into a receive) is handed to that endpoint: kept
//! in the context's mail, flagged in the endpoint's `srx_mail`, and done at
//! the endpoint's next pass (progress looks at the flag; a receive posted
//! on the context runs that pass at once).
//!
//! Completions go to the endpoint a message arrived at: its own passes
//! report to its binds, and the context's calls route through [`Router`],
//! which finds a sender's endpoint by the token.

use std::mem;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use fabric_core::attr::{RxAttr, SHARED_CONTEXT};
use fabric_core::kit::binds::Binds;
use fabric_core::kit::lock;
use fabric_core::kit::rx::{Action, MIN_MULTI_RECV, Route};
use fabric_core::objects::{Msg, MsgOps, SharedRx, TaggedOps};
use fabric_core::{Caps, Error, ErrorKind, OpFlags, Result};
use spin::mutex::SpinMutexGuard;

use super::core::{EpInner, State};
use crate::conn::{Engine, Remote, Sink, TcpWire};
use crate::limits::RX_BUDGET;
use crate::progress::{Poller, ep_of};
use crate::wire::Op;

/// The sender (connection token) a piece of the engine's work concerns.
pub(super) fn owner(a: &Action<TcpWire>) -> u64 {
    match a {
        Action::Fetch { remote, .. } | Action::Release(remote) => match remote {
            Remote::Rndv { conn, .. } | Remote::Stalled { conn } => *conn,
        },
        Action::Ack((conn, _)) => *conn,
        Action::Pause(conn) | Action::Resume(conn) => *conn,
    }
}

/// What the context's lock guards.
#[derive(Debug)]
pub(crate) struct SrxState {
    /// The shared engine (while an endpoint works: that endpoint's own,
    /// swapped in its place).
    engine: Engine,
    /// Endpoints bound, in the order they were bound, each with its
    /// endpoint number and its `srx_mail` flag (set without taking a
    /// strong reference, whose drop could close the endpoint under this
    /// lock).
    members: Vec<Member>,
    /// Work for endpoints (by endpoint number) not done yet.
    mail: Vec<(u32, Action<TcpWire>)>,
}

/// An endpoint bound to a context.
#[derive(Debug)]
struct Member {
    ep_no: u32,
    ep: Weak<EpInner>,
    mail: Arc<AtomicBool>,
}

/// The shared part of a shared receive context.
#[derive(Debug)]
pub(crate) struct SrxInner {
    attr: RxAttr,
    /// The domain's progress engine: bound endpoints are of this domain.
    poller: Arc<Poller>,
    state: Mutex<SrxState>,
    min_multi_recv: AtomicUsize,
    /// Where completions go when no bound endpoint is enabled.
    nowhere: Binds,
    /// Most endpoints bound at once (`domain_attr.max_ep_srx_ctx`).
    limit: usize,
}

/// A shared receive context of the tcp provider.
#[derive(Debug)]
pub struct TcpSrx {
    inner: Arc<SrxInner>,
}

impl TcpSrx {
    /// A context for the endpoints of the domain that `poller` drives,
    /// serving at most `limit` of them at once (0: no limit).
    pub(crate) fn new(attr: &RxAttr, poller: Arc<Poller>, limit: usize) -> Self {
        let directed = attr.caps.contains(Caps::DIRECTED_RECV);
        TcpSrx {
            inner: Arc::new(SrxInner {
                attr: attr.clone(),
                poller,
                state: Mutex::new(SrxState {
                    engine: Engine::new(directed, RX_BUDGET),
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
    pub(crate) fn attach(&self, ep: &Arc<EpInner>) -> Result<()> {
        if ep.info.ep_attr.rx_ctx_cnt != SHARED_CONTEXT {
            return Err(Error::inval(
                "tcp: bind of a shared receive context to an endpoint opened without \
                 ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT",
            ));
        }
        if !Arc::ptr_eq(&ep.poller, &self.inner.poller) {
            return Err(Error::inval(
                "tcp: the shared receive context belongs to another domain",
            ));
        }
        if ep.srx.get().is_some() {
            return Err(Error::new(
                ErrorKind::OpBadState,
                "tcp: the endpoint is already bound to a shared receive context",
            ));
        }
        let mut st = lock(&self.inner.state);
        st.members.retain(|m| m.ep.strong_count() > 0);
        if st.members.len() >= self.inner.limit {
            return Err(Error::new(
                ErrorKind::NoSpc,
                format!(
                    "tcp: the shared receive context serves {} endpoints already \
                     (domain_attr.max_ep_srx_ctx)",
                    st.members.len()
                ),
            ));
        }
        ep.srx.set(self.inner.clone()).map_err(|_| {
            Error::new(
                ErrorKind::OpBadState,
                "tcp: the endpoint is already bound to a shared receive context",
            )
        })?;
        st.members.push(Member {
            ep_no: ep.ep_no,
            ep: Arc::downgrade(ep),
            mail: ep.srx_mail.clone(),
        });
        Ok(())
    }

    /// Posts a receive on the context.
    fn post(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        self.inner.with_engine(|e, r| e.post(r, msg, flags, tagged))
    }
}

/// Routes the completions of the context's own calls to the endpoint of
/// each sender (by its token), else to the first bound endpoint that is
/// enabled.
struct Router<'a> {
    eps: &'a [Arc<EpInner>],
    nowhere: &'a Binds,
}

impl Route<u64> for Router<'_> {
    type To = Binds;

    fn to(&self, peer: Option<&u64>) -> &Binds {
        let first = || self.eps.iter().find_map(|e| e.bound.get());
        let of = |t: u64| {
            self.eps
                .iter()
                .find(|e| e.ep_no == ep_of(t))
                .and_then(|e| e.bound.get())
        };
        peer.and_then(|t| of(*t))
            .or_else(first)
            .unwrap_or(self.nowhere)
    }
}

impl SrxInner {
    /// Enables a bound endpoint whose binds are `b` (`set` keeps them),
    /// unless another enabled endpoint of the context uses another
    /// address vector: the endpoints of a shared receive context share
    /// one (fi_endpoint(3)), which directed receives name sources in.
    pub(crate) fn enable_member(
        &self,
        b: Binds,
        set: impl FnOnce(Binds) -> Result<()>,
    ) -> Result<()> {
        let st = lock(&self.state);
        let same = |o: &Binds| match (&o.av, &b.av) {
            (None, None) => true,
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            _ => false,
        };
        // Strong references dropped only once the lock is released.
        let eps: Vec<Arc<EpInner>> = st.members.iter().filter_map(|m| m.ep.upgrade()).collect();
        let other = eps.iter().any(|m| m.bound.get().is_some_and(|o| !same(o)));
        let r = if other {
            Err(Error::inval(
                "tcp: the endpoints of a shared receive context share one address vector",
            ))
        } else {
            set(b)
        };
        drop(st);
        drop(eps);
        r
    }

    /// Runs `f` on the engine with the router of the bound endpoints,
    /// then hands the work it left to the endpoints concerned (and runs
    /// their passes, with no lock held).
    fn with_engine<R>(&self, f: impl FnOnce(&mut Engine, &Router<'_>) -> R) -> R {
        let mut kick: Vec<Arc<EpInner>> = Vec::new();
        let eps: Vec<Arc<EpInner>>;
        let r = {
            let mut guard = lock(&self.state);
            let st = &mut *guard;
            eps = st.members.iter().filter_map(|m| m.ep.upgrade()).collect();
            let router = Router {
                eps: &eps,
                nowhere: &self.nowhere,
            };
            let r = f(&mut st.engine, &router);
            while let Some(a) = st.engine.next_action() {
                let no = ep_of(owner(&a));
                match eps.iter().find(|e| e.ep_no == no) {
                    Some(ep) => {
                        st.mail.push((no, a));
                        ep.srx_mail.store(true, Ordering::Release);
                        if !kick.iter().any(|k| k.ep_no == no) {
                            kick.push(ep.clone());
                        }
                    }
                    None => {
                        // The endpoint is closed: a receive that was to
                        // fetch its message fails; the rest is moot.
                        if let Action::Fetch { recv, meta, .. } = a {
                            let err = Error::new(
                                ErrorKind::ConnReset,
                                "tcp: the endpoint the message arrived at is closed",
                            );
                            st.engine.fail(&router, recv, meta.tagged, &err);
                        }
                    }
                }
            }
            r
        };
        for ep in kick {
            ep.srx_pass();
        }
        drop(eps);
        r
    }
}

impl Drop for EpInner {
    /// An endpoint bound to a shared receive context closes: the
    /// context's receives its connections were filling fail (on its CQ,
    /// `Canceled`), and the messages kept in the context whose data was
    /// still in its sockets or with its peers are dropped (buffered ones
    /// stay deliverable). Nothing for other endpoints.
    fn drop(&mut self) {
        if self.srx.get().is_none() {
            return;
        }
        let Some(b) = self.bound.get() else {
            return;
        };
        let err = Error::new(
            ErrorKind::Canceled,
            "tcp: the endpoint the message arrived at was closed",
        );
        let mut guard = self.lock();
        let st = &mut *guard;
        let ids: Vec<u32> = st.conns.keys().collect();
        for cid in ids {
            let Some(c) = st.conns.get_mut(&cid) else {
                continue;
            };
            let mut rndv: Vec<_> = c.rndv.drain().collect();
            rndv.sort_by_key(|(id, _)| *id);
            let cur = c.rx.cur.take();
            if let Some(cur) = cur {
                match cur.sink {
                    Sink::Recv(recv) => {
                        let tagged = cur.frame.header.op == Op::Tagged;
                        st.rx.fail(b, recv, tagged, &err);
                    }
                    Sink::Rndv(r) => st.rx.fail(b, r.recv, r.meta.tagged, &err),
                    _ => {}
                }
            }
            for (_, r) in rndv {
                st.rx.fail(b, r.recv, r.meta.tagged, &err);
            }
            st.rx.peer_gone(self.token(cid));
        }
        // What the engine asks of this endpoint's connections is moot;
        // resuming other endpoints' senders is theirs.
        while let Some(a) = st.rx.next_action() {
            if ep_of(owner(&a)) != self.ep_no {
                st.foreign.push(a);
            }
        }
    }
}

impl EpInner {
    /// A pass that does the work the shared receive context holds for
    /// this endpoint.
    pub(crate) fn srx_pass(&self) {
        let Some(b) = self.bound.get() else {
            return;
        };
        let mut guard = self.lock();
        self.finish_pass(&mut guard, b);
    }
}

/// The endpoint's state for one operation or progress pass. For an
/// endpoint bound to a shared receive context it holds the context's lock
/// too, with the context's engine in `State::rx`; without one it is the
/// state's guard and a check.
pub(crate) struct Pass<'a> {
    st: SpinMutexGuard<'a, State>,
    srx: Option<(&'a EpInner, MutexGuard<'a, SrxState>)>,
}

impl<'a> Pass<'a> {
    #[inline]
    pub(super) fn new(ep: &'a EpInner, st: SpinMutexGuard<'a, State>) -> Self {
        match ep.srx.get() {
            None => Pass { st, srx: None },
            Some(srx) => Self::shared(ep, st, srx),
        }
    }

    #[cold]
    fn shared(ep: &'a EpInner, mut st: SpinMutexGuard<'a, State>, srx: &'a SrxInner) -> Self {
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
            srx: Some((ep, g)),
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
        if self.srx.is_some() {
            self.drop_shared();
        }
    }
}

impl Pass<'_> {
    /// The end of a pass over a shared receive context's engine: out of
    /// line, so that an endpoint's own pass ends in the guard's unlock.
    #[cold]
    #[inline(never)]
    fn drop_shared(&mut self) {
        if let Some((_, g)) = self.srx.as_mut() {
            let st = &mut *self.st;
            // Work the pass left undone (it ended before `finish_pass`)
            // goes to the mail with the rest, flagged, so that it is not
            // left in the engine unseen.
            while let Some(a) = st.rx.next_action() {
                st.foreign.push(a);
            }
            mem::swap(&mut st.rx, &mut g.engine);
            // Work about other endpoints' senders, for them to do (that of
            // a closed endpoint is dropped).
            for a in st.foreign.drain(..) {
                let no = ep_of(owner(&a));
                let Some(m) = g
                    .members
                    .iter()
                    .find(|m| m.ep_no == no && m.ep.strong_count() > 0)
                else {
                    continue;
                };
                m.mail.store(true, Ordering::Release);
                g.mail.push((no, a));
            }
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
// contract); the implementations themselves use no `unsafe`.
#[allow(unsafe_code)]
impl MsgOps for TcpSrx {
    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.post(msg, flags, false)
    }
}

#[allow(unsafe_code)]
impl TaggedOps for TcpSrx {
    unsafe fn trecvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.post(msg, flags, true)
    }
}

impl SharedRx for TcpSrx {
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
