//! `async` operations on tokio (feature `tokio`): [`AsyncEndpoint`] and
//! its [`Completions`] stream; for connected (MSG) endpoints,
//! [`AsyncListener`] and [`AsyncConnection`] (whose operations are those
//! of an `AsyncEndpoint`, driven the same way).
//!
//! # How completions reach the futures
//!
//! An [`AsyncEndpoint`] is a cheap, cloneable handle to one
//! [`Endpoint`] shared by every task that uses it. An
//! operation is one future: its first poll posts it under a short lock
//! and gives it a cell in a table keyed by its slab slot (the [`OpId`]'s
//! index), then, under the same lock, waits for it as below; once the
//! table and the slab have grown to the peak number of operations in
//! flight, an operation allocates nothing.
//!
//! One of the waiting futures at a time is the **driver**: it reads the
//! completion queue and hands every completion, straight from the queue's
//! entries, to the cell of its operation, waking the future that waits
//! for it; its own completion comes straight back to it. The driver polls the
//! queue without sleeping (it wakes itself and yields to the runtime
//! between reads; after 20 µs it also yields the thread) for up to 2 ms
//! after the last completion, as the synchronous
//! [`Endpoint::wait`](super::Endpoint::wait) does; then it parks with
//! `fi_trywait` semantics:
//!
//! 1. read the completion queue; route what came;
//! 2. nothing came: `trywait()`; `Again` means there is something to read:
//!    back to 1;
//! 3. `Ok`: await readability of the queue's wait fd (tokio's `AsyncFd`),
//!    clear the readiness, back to 1.
//!
//! A parked endpoint costs no CPU; posting an operation wakes a parked
//! driver, which polls again for it. When the driver's own operation
//! completes, or its future is dropped, it hands the role to the longest
//! waiting future. Futures that are not the driver never read the queue
//! (a read would end the provider's arming for the parked driver); they
//! wait for the driver to fill their cell.
//!
//! Progress is made by polling: futures of an endpoint that nobody polls
//! (or that are stuck in a task that is not scheduled) move nothing, as
//! with any future. With manual progress (tcp, shm) this also means the
//! peer's side moves only while its own futures are polled.
//!
//! # Dropping a future with its operation in flight
//!
//! The buffer of an operation belongs to the endpoint from the post until
//! its completion is read, whatever happens to the future: dropping the
//! future never frees memory the provider may still read or write.
//!
//! - A dropped **receive** is cancelled (`fi_cancel`). If a message had
//!   already matched it, that message is lost (receives are not
//!   cancel-safe, like most network reads).
//! - A dropped **send, RMA or atomic** keeps running: it cannot be taken
//!   back.
//!
//! In both cases the driver keeps the buffer until the completion arrives
//! and then drops it. Dropping the last handle of the endpoint drops the
//! [`Endpoint`], which waits (blocking the thread, up to
//! its drain timeout) for what is still in flight and leaks the buffers of
//! what does not complete; see the [module docs](super). Await
//! [`AsyncEndpoint::drain`] first to end without blocking.
//!
//! # Example
//!
//! ```
//! use fabric::prelude::*;
//! use fabric::safe::AsyncEndpoint;
//!
//! # fn main() -> fabric::Result<()> {
//! let Ok(mut infos) = Hints::new().caps(Caps::MSG | Caps::TAGGED).ep_type(EpType::Rdm)
//!     .provider("tcp").node("127.0.0.1").source().getinfo()
//! else {
//!     return Ok(()); // tcp is not compiled in
//! };
//! let domain = safe::Domain::open(&infos.remove(0))?;
//! let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
//! rt.block_on(async {
//!     let server = AsyncEndpoint::new(domain.endpoint()?)?;
//!     let client = AsyncEndpoint::new(domain.endpoint()?)?;
//!     let to_server = client.insert(&server.name()?)?;
//!     // Both endpoints are driven by their futures, polled together.
//!     let (got, sent) = tokio::join!(
//!         server.trecv(7, 0, vec![0; 64]),
//!         client.tsend(to_server, 7, b"hello".to_vec()),
//!     );
//!     sent?.check()?;
//!     assert_eq!(got?.check()?.received(), Some(&b"hello"[..]));
//!     Ok(())
//! })
//! # }
//! ```

use std::collections::VecDeque;
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use ::tokio::io::Interest;
use ::tokio::io::unix::AsyncFd;
use fabric_core::objects::{AtomicOp, FiAddr};
use fabric_core::{Address, Error, ErrorKind, Info, Result};

use super::atomic::AtomicValue;
use super::buf::{IoBufMut, Rejected, RemoteRegion};
use super::completion::{Completion, OpId, OpKind};
use super::endpoint::Endpoint;

mod conn;
pub use conn::{AsyncConnection, AsyncListener};

/// How long the driver polls without parking after the last completion
/// (as the synchronous wait's spin and yield windows together).
const POLL_FOR: Duration = Duration::from_millis(2);
/// How long the driver polls back to back (between polls it only lets
/// the runtime run other tasks) before it also yields the thread to the
/// OS between polls, as the synchronous wait does.
const SPIN_FOR: Duration = Duration::from_micros(20);
/// Empty polls between two clock readings.
const CLOCK_EVERY: u32 = 16;

/// The completion queue's wait fd, as `AsyncFd` takes it. The fd belongs
/// to the queue, which outlives the `AsyncFd` (see [`Inner`]).
pub(super) struct WaitFd(RawFd);

impl AsRawFd for WaitFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Registers a wait fd with the runtime's reactor for readability.
///
/// # Safety
///
/// `fd` must stay open, and the same open file, until the returned
/// `AsyncFd` is dropped (tokio's `register_with_interest` contract).
pub(super) unsafe fn register(fd: RawFd, what: &str) -> Result<AsyncFd<WaitFd>> {
    // SAFETY: the caller's promise.
    unsafe { AsyncFd::register_with_interest(WaitFd(fd), Interest::READABLE) }.map_err(|e| {
        Error::new(
            ErrorKind::Other,
            format!("registering {what} with tokio: {e}"),
        )
    })
}

/// Who waits: an operation's future, or a completion stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Op(OpId),
    Stream,
    /// [`AsyncEndpoint::drain`].
    Drain,
}

/// What the async layer knows of a slab slot.
enum Cell<B> {
    /// No async operation uses the slot.
    Free,
    /// An operation's future waits; `queued`: it is in the hand-off queue.
    Waiting { waker: Option<Waker>, queued: bool },
    /// Completed; the future has not taken it yet.
    Done(Completion<B>),
    /// The future was dropped: the completion is dropped when it comes.
    Orphan,
    /// The completion goes to the completion stream.
    Streamed,
}

/// Everything behind the lock.
struct State<B: IoBufMut> {
    ep: Endpoint<B>,
    cells: Vec<Cell<B>>,
    /// Completions of operations posted for the stream.
    stream: VecDeque<Completion<B>>,
    stream_wakers: Vec<Waker>,
    stream_queued: bool,
    /// Futures of [`AsyncEndpoint::drain`] waiting for nothing in flight.
    drain_wakers: Vec<Waker>,
    drain_queued: bool,
    /// Futures that wait and may take the driver's role, oldest first
    /// (entries whose future has moved on are skipped).
    queue: VecDeque<Who>,
    /// Posts refused with `Again` wait for any completion.
    posters: Vec<Waker>,
    /// Slots to give back after a read (kept to reuse its room).
    release: Vec<OpId>,
    driver: Option<Who>,
    /// The driver's waker.
    driver_waker: Option<Waker>,
    /// When the driver started finding the queue empty.
    idle_since: Option<Instant>,
    empty_polls: u32,
    /// Past the spinning window: yield the thread between polls.
    yielding: bool,
    parked: bool,
}

/// The shared part of an [`AsyncEndpoint`].
struct Inner<B: IoBufMut> {
    // Declared first: deregistered from the reactor before the endpoint
    // (and its completion queue, which owns the fd) is dropped.
    fd: Option<AsyncFd<WaitFd>>,
    /// The event queue's wait fd, for a connected endpoint (owned by the
    /// queue, inside the endpoint: dropped before it, as `fd`).
    eq_fd: Option<AsyncFd<WaitFd>>,
    /// A connected endpoint's `Shutdown` event was read.
    closed: AtomicBool,
    state: Mutex<State<B>>,
}

/// An endpoint for `async` code: operations are futures that own their
/// buffers and resolve to their [`Completion`] (feature `tokio`).
///
/// Cloning gives another handle to the same endpoint, for other tasks;
/// many operations may be in flight at once from any number of tasks.
/// See the [module docs](self) for how completions are read, what a
/// dropped future does, and an example.
///
/// The futures need a tokio runtime with IO enabled
/// (`enable_io()` / `enable_all()`), current-thread or multi-threaded.
pub struct AsyncEndpoint<B: IoBufMut = Vec<u8>> {
    inner: Arc<Inner<B>>,
}

impl<B: IoBufMut> Clone for AsyncEndpoint<B> {
    fn clone(&self) -> Self {
        AsyncEndpoint {
            inner: self.inner.clone(),
        }
    }
}

impl<B: IoBufMut> std::fmt::Debug for AsyncEndpoint<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.lock();
        f.debug_struct("AsyncEndpoint")
            .field("endpoint", &st.ep)
            .field("parks_on_fd", &self.inner.fd.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: IoBufMut> Inner<B> {
    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<B: IoBufMut> AsyncEndpoint<B> {
    /// Wraps `ep` (from [`Domain::endpoint`](super::Domain::endpoint)) for
    /// `async` use. Call it inside a tokio runtime with IO enabled: the
    /// completion queue's wait fd is registered with its reactor.
    ///
    /// Operations already in flight on `ep` complete into its own queue
    /// and are dropped with their buffers when they complete; post on the
    /// new handle instead. Without a wait fd (a provider whose queues
    /// cannot block) the futures poll the queue, yielding between reads,
    /// and never park.
    ///
    /// Outside a tokio runtime it fails (`Other`).
    ///
    /// # Panics
    ///
    /// In a runtime without IO enabled (tokio's `AsyncFd` panics there).
    pub fn new(mut ep: Endpoint<B>) -> Result<Self> {
        if let Err(e) = ::tokio::runtime::Handle::try_current() {
            return Err(Error::new(
                ErrorKind::Other,
                format!("AsyncEndpoint::new needs to run inside a tokio runtime: {e}"),
            ));
        }
        ep.hold_slots();
        // Completions read before: their operations were posted without a
        // future; they are dropped with their buffers, as the ones still
        // to come.
        while ep.pop_ready().is_some() {}
        let fd = match ep.waitable_cq().and_then(|cq| cq.wait_fd()) {
            Some(fd) => {
                // SAFETY: the fd is the completion queue's, which stays
                // open (and the same fd) while the endpoint lives; `Inner`
                // declares the `AsyncFd` before the endpoint, so it is
                // dropped (deregistered) first.
                Some(unsafe { register(fd.as_raw_fd(), "the completion queue's wait fd") }?)
            }
            None => {
                tracing::debug!(
                    "the completion queue has no wait fd: async operations poll it without parking"
                );
                None
            }
        };
        let eq_fd = match ep.eq().and_then(|eq| eq.wait_fd()) {
            // SAFETY: the fd is the event queue's, which the endpoint owns
            // and keeps open while it lives; `Inner` declares the `AsyncFd`
            // before the endpoint, so it is dropped (deregistered) first.
            Some(fd) => Some(unsafe { register(fd.as_raw_fd(), "the event queue's wait fd") }?),
            None => None,
        };
        Ok(AsyncEndpoint {
            inner: Arc::new(Inner {
                fd,
                eq_fd,
                closed: AtomicBool::new(false),
                state: Mutex::new(State {
                    ep,
                    cells: Vec::new(),
                    stream: VecDeque::new(),
                    stream_wakers: Vec::new(),
                    stream_queued: false,
                    drain_wakers: Vec::new(),
                    drain_queued: false,
                    queue: VecDeque::new(),
                    posters: Vec::new(),
                    release: Vec::new(),
                    driver: None,
                    driver_waker: None,
                    idle_since: None,
                    empty_polls: 0,
                    yielding: false,
                    parked: false,
                }),
            }),
        })
    }

    /// The entry the endpoint was opened with, as the provider altered it.
    pub fn info(&self) -> Info {
        self.inner.lock().ep.info().clone()
    }

    /// The endpoint's address, for peers to insert.
    pub fn name(&self) -> Result<Address> {
        self.inner.lock().ep.name()
    }

    /// Inserts a peer's address into the endpoint's address vector.
    pub fn insert(&self, addr: &Address) -> Result<FiAddr> {
        self.inner.lock().ep.insert(addr)
    }

    /// Removes a peer from the address vector.
    pub fn remove(&self, peer: FiAddr) -> Result<()> {
        self.inner.lock().ep.remove(peer)
    }

    /// How many operations are in flight (including those whose futures
    /// were dropped).
    pub fn in_flight(&self) -> usize {
        self.inner.lock().ep.in_flight()
    }

    /// Whether the futures park on the completion queue's wait fd when
    /// idle (`false`: the queue has no wait fd and they keep polling).
    pub fn parks(&self) -> bool {
        self.inner.fd.is_some()
    }

    /// Cancels the posted receives (their futures resolve with `Canceled`
    /// completions, those of the stream come through it) and waits until
    /// no operation is in flight, so that dropping the last handle then
    /// does not block the thread (see the [module docs](self)). Operations
    /// posted meanwhile through other handles are waited for too.
    pub async fn drain(&self) -> Result<()> {
        self.inner.lock().ep.cancel_receives();
        Drain { inner: &self.inner }.await
    }

    /// Sends `buf` to `to`; the completion hands the buffer back.
    ///
    /// The operations are futures (`async`), returned without an `async fn`
    /// around them: nothing happens until the first poll, which posts.
    pub fn send(
        &self,
        to: FiAddr,
        buf: B,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.run(OpKind::Send, buf, move |ep, b| ep.send(to, b))
    }

    /// Sends `buf` to `to` with remote CQ data (`fi_senddata`).
    pub fn send_with_data(
        &self,
        to: FiAddr,
        buf: B,
        data: u64,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.run(OpKind::Send, buf, move |ep, b| {
            ep.send_with_data(to, b, data)
        })
    }

    /// Receives a message from any peer into `buf`.
    pub fn recv(
        &self,
        buf: B,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.run(OpKind::Recv, buf, |ep, b| ep.recv(b))
    }

    /// Sends `buf` to `to` with `tag`.
    pub fn tsend(
        &self,
        to: FiAddr,
        tag: u64,
        buf: B,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.run(OpKind::TaggedSend, buf, move |ep, b| ep.tsend(to, tag, b))
    }

    /// Receives a tagged message whose tag equals `tag` in the bits
    /// `ignore` leaves, into `buf`.
    pub fn trecv(
        &self,
        tag: u64,
        ignore: u64,
        buf: B,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.run(OpKind::TaggedRecv, buf, move |ep, b| {
            ep.trecv(tag, ignore, b)
        })
    }

    /// Writes all of `buf` to the start of `remote` on peer `to`.
    pub fn write(
        &self,
        to: FiAddr,
        buf: B,
        remote: &RemoteRegion,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        let remote = *remote;
        self.run(OpKind::Write, buf, move |ep, b| ep.write(to, b, &remote))
    }

    /// Reads from the start of `remote` on peer `from` until `buf` is full.
    pub fn read(
        &self,
        from: FiAddr,
        buf: B,
        remote: &RemoteRegion,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        let remote = *remote;
        self.run(OpKind::Read, buf, move |ep, b| ep.read(from, b, &remote))
    }

    /// Applies `op` with `operand` to the first element of `target` on
    /// peer `to` ([`Endpoint::atomic`](super::Endpoint::atomic)).
    pub async fn atomic<T: AtomicValue>(
        &self,
        to: FiAddr,
        target: &RemoteRegion,
        op: AtomicOp,
        operand: T,
    ) -> Result<Completion<B>> {
        let target = *target;
        self.run_atomic(move |ep| ep.atomic(to, &target, op, operand))
            .await
    }

    /// As [`atomic`](AsyncEndpoint::atomic); the old value comes back in
    /// [`Completion::fetched`].
    pub async fn fetch_atomic<T: AtomicValue>(
        &self,
        to: FiAddr,
        target: &RemoteRegion,
        op: AtomicOp,
        operand: T,
    ) -> Result<Completion<B>> {
        let target = *target;
        self.run_atomic(move |ep| ep.fetch_atomic(to, &target, op, operand))
            .await
    }

    /// A compare atomic ([`Endpoint::compare_atomic`](super::Endpoint::compare_atomic)).
    pub async fn compare_atomic<T: AtomicValue>(
        &self,
        to: FiAddr,
        target: &RemoteRegion,
        op: AtomicOp,
        compare: T,
        operand: T,
    ) -> Result<Completion<B>> {
        let target = *target;
        self.run_atomic(move |ep| ep.compare_atomic(to, &target, op, compare, operand))
            .await
    }

    /// Adds `value` to the element, fetching the old one.
    pub async fn fetch_add<T: AtomicValue>(
        &self,
        to: FiAddr,
        target: &RemoteRegion,
        value: T,
    ) -> Result<Completion<B>> {
        self.fetch_atomic(to, target, AtomicOp::Sum, value).await
    }

    /// Stores `new` if the element equals `expected`; the old value comes
    /// back either way.
    pub async fn compare_swap<T: AtomicValue>(
        &self,
        to: FiAddr,
        target: &RemoteRegion,
        expected: T,
        new: T,
    ) -> Result<Completion<B>> {
        self.compare_atomic(to, target, AtomicOp::Cswap, expected, new)
            .await
    }

    /// Sends a small message at once, copying it (no completion).
    pub fn inject(&self, to: FiAddr, bytes: &[u8]) -> Result<()> {
        self.inner.lock().ep.inject(to, bytes)
    }

    /// Tagged [`inject`](AsyncEndpoint::inject).
    pub fn tinject(&self, to: FiAddr, tag: u64, bytes: &[u8]) -> Result<()> {
        self.inner.lock().ep.tinject(to, tag, bytes)
    }

    /// Posts a send whose completion comes through [`completions`](AsyncEndpoint::completions)
    /// instead of a future of its own. `Again` (queue full) is returned as
    /// is: read completions, then post again.
    pub fn post_send(&self, to: FiAddr, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.post_streamed(|ep| ep.send(to, buf))
    }

    /// Posts a receive for the completion stream (see
    /// [`post_send`](AsyncEndpoint::post_send)).
    pub fn post_recv(&self, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.post_streamed(|ep| ep.recv(buf))
    }

    /// Posts a tagged send for the completion stream.
    pub fn post_tsend(
        &self,
        to: FiAddr,
        tag: u64,
        buf: B,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.post_streamed(|ep| ep.tsend(to, tag, buf))
    }

    /// Posts a tagged receive for the completion stream.
    pub fn post_trecv(
        &self,
        tag: u64,
        ignore: u64,
        buf: B,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.post_streamed(|ep| ep.trecv(tag, ignore, buf))
    }

    /// Cancels a receive posted with [`post_recv`](AsyncEndpoint::post_recv)
    /// or [`post_trecv`](AsyncEndpoint::post_trecv): it completes, with a
    /// `Canceled` error and its buffer, through the stream.
    pub fn cancel(&self, id: OpId) -> Result<()> {
        self.inner.lock().ep.cancel(id)
    }

    /// The stream of completions of the operations posted with the
    /// `post_*` methods, in the order they are read. Every handle returned
    /// reads the same stream.
    pub fn completions(&self) -> Completions<B> {
        Completions {
            inner: self.inner.clone(),
        }
    }

    fn post_streamed(
        &self,
        f: impl FnOnce(&mut Endpoint<B>) -> std::result::Result<OpId, Rejected<B>>,
    ) -> std::result::Result<OpId, Rejected<B>> {
        let mut st = self.inner.lock();
        let id = f(&mut st.ep)?;
        st.set_cell(id, Cell::Streamed);
        Ok(id)
    }

    /// The future that posts with `f` (again, after `Again`) and awaits
    /// the completion.
    fn run<F>(&self, kind: OpKind, buf: B, f: F) -> Op<'_, B, B, F>
    where
        F: FnMut(&mut Endpoint<B>, B) -> std::result::Result<OpId, Rejected<B>>,
    {
        Op {
            inner: &self.inner,
            f,
            buf: Some(buf),
            receive: kind.is_receive(),
            id: None,
            done: false,
        }
    }

    async fn run_atomic<F>(&self, mut f: F) -> Result<Completion<B>>
    where
        F: FnMut(&mut Endpoint<B>) -> Result<OpId>,
    {
        Op {
            inner: &self.inner,
            f: move |ep: &mut Endpoint<B>, ()| f(ep).map_err(|e| Rejected::new(e, Some(()))),
            buf: Some(()),
            receive: false,
            id: None,
            done: false,
        }
        .await
        .map_err(|r| r.error)
    }
}

impl<B: IoBufMut> State<B> {
    /// Records a new operation's cell. A parked driver is woken: it polls
    /// again for the new operation (and arms the wait fd anew after the
    /// post).
    fn set_cell(&mut self, id: OpId, cell: Cell<B>) {
        if self.parked {
            self.parked = false;
            self.busy();
            if let Some(w) = &self.driver_waker {
                w.wake_by_ref();
            }
        }
        let i = id.index();
        if self.cells.len() <= i {
            self.cells.resize_with(i + 1, || Cell::Free);
        }
        self.cells[i] = cell;
    }

    /// Reads the completion queue once and hands what came to its cells,
    /// straight from the queue's entries; the completion of `own` (the
    /// driver's operation) comes back instead. Returns how many came.
    fn reap(&mut self, own: Option<OpId>) -> Result<(usize, Option<Completion<B>>)> {
        let mut mine = None;
        let State {
            ep,
            cells,
            stream,
            stream_wakers,
            release,
            ..
        } = self;
        let n = ep.reap_with(|c| {
            let id = c.id();
            let cell = cells.get_mut(id.index());
            if own == Some(id) {
                if let Some(cell) = cell {
                    *cell = Cell::Free;
                }
                mine = Some(c);
                return None;
            }
            match cell {
                Some(cell @ Cell::Waiting { .. }) => {
                    let Cell::Waiting { waker, .. } = std::mem::replace(cell, Cell::Done(c)) else {
                        return None;
                    };
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
                Some(cell @ Cell::Streamed) => {
                    *cell = Cell::Free;
                    release.push(id);
                    stream.push_back(c);
                    for w in stream_wakers.drain(..) {
                        w.wake();
                    }
                }
                Some(Cell::Done(_)) => {
                    // Cannot happen: a slot is reused only once its
                    // completion was taken. Keep the earlier one.
                    tracing::warn!(%id, "a second completion for one slot; dropped");
                }
                Some(cell @ (Cell::Orphan | Cell::Free)) => {
                    // Its future is gone: the provider is done with the
                    // buffer, which is dropped here.
                    *cell = Cell::Free;
                    release.push(id);
                }
                None => release.push(id),
            }
            None
        })?;
        if let Some(c) = &mine {
            self.ep.release(c.id());
        }
        if !self.release.is_empty() {
            for id in self.release.drain(..) {
                self.ep.release(id);
            }
        }
        if n > 0 {
            self.busy();
            self.parked = false;
            if !self.posters.is_empty() {
                for w in self.posters.drain(..) {
                    w.wake();
                }
            }
            if !self.drain_wakers.is_empty() && self.ep.in_flight() == 0 {
                for w in self.drain_wakers.drain(..) {
                    w.wake();
                }
            }
        }
        Ok((n, mine))
    }

    /// The completion `who` waits for, if it is there.
    fn take(&mut self, who: Who) -> Option<Completion<B>> {
        match who {
            Who::Stream => self.stream.pop_front(),
            Who::Drain => None,
            Who::Op(id) => {
                let cell = self.cells.get_mut(id.index())?;
                if !matches!(cell, Cell::Done(c) if c.id() == id) {
                    return None;
                }
                match std::mem::replace(cell, Cell::Free) {
                    Cell::Done(c) => {
                        self.ep.release(id);
                        Some(c)
                    }
                    other => {
                        *cell = other;
                        None
                    }
                }
            }
        }
    }

    /// Records `waker` for `who`, and queues it for the driver's role.
    fn register(&mut self, who: Who, waker: &Waker) {
        let queue = match who {
            Who::Stream => {
                if !self.stream_wakers.iter().any(|w| w.will_wake(waker)) {
                    self.stream_wakers.push(waker.clone());
                }
                !std::mem::replace(&mut self.stream_queued, true)
            }
            Who::Drain => {
                if !self.drain_wakers.iter().any(|w| w.will_wake(waker)) {
                    self.drain_wakers.push(waker.clone());
                }
                !std::mem::replace(&mut self.drain_queued, true)
            }
            Who::Op(id) => match self.cells.get_mut(id.index()) {
                Some(Cell::Waiting { waker: w, queued }) => {
                    if !w.as_ref().is_some_and(|w| w.will_wake(waker)) {
                        *w = Some(waker.clone());
                    }
                    !std::mem::replace(queued, true)
                }
                _ => false,
            },
        };
        if queue {
            if self.queue.len() >= 2 * self.cells.len() + 16 {
                self.compact_queue();
            }
            self.queue.push_back(who);
        }
    }

    /// Drops the queue's entries of futures that no longer wait (a driver
    /// that never leaves pops none), so the queue stays as long as the
    /// number of waiters, not of operations ever awaited.
    fn compact_queue(&mut self) {
        let (cells, ep) = (&self.cells, &self.ep);
        let (stream_queued, drain_queued) = (self.stream_queued, self.drain_queued);
        self.queue.retain(|who| match *who {
            Who::Stream => stream_queued,
            Who::Drain => drain_queued,
            Who::Op(id) => {
                ep.in_flight_op(id)
                    && matches!(
                        cells.get(id.index()),
                        Some(Cell::Waiting { queued: true, .. })
                    )
            }
        });
    }

    /// `who` stops waiting; a driver hands its role to the longest waiting
    /// future.
    fn leave(&mut self, who: Who) {
        if self.driver != Some(who) {
            return;
        }
        self.driver = None;
        // The driver's waker is kept: the next driver is often the same
        // task, which then clones no waker (`set_cell` wakes it only while
        // a driver is parked).
        while let Some(next) = self.queue.pop_front() {
            match next {
                Who::Stream => {
                    self.stream_queued = false;
                    if !self.stream_wakers.is_empty() {
                        for w in self.stream_wakers.drain(..) {
                            w.wake();
                        }
                        return;
                    }
                }
                Who::Drain => {
                    self.drain_queued = false;
                    if !self.drain_wakers.is_empty() {
                        for w in self.drain_wakers.drain(..) {
                            w.wake();
                        }
                        return;
                    }
                }
                Who::Op(id) => {
                    // A stale entry (the operation completed; its slot may
                    // serve another one, with an entry of its own).
                    if !self.ep.in_flight_op(id) {
                        continue;
                    }
                    if let Some(Cell::Waiting { waker, queued }) = self.cells.get_mut(id.index()) {
                        *queued = false;
                        if let Some(w) = waker.take() {
                            w.wake();
                            return;
                        }
                    }
                }
            }
        }
        if !self.posters.is_empty() {
            for w in self.posters.drain(..) {
                w.wake();
            }
        }
    }

    /// Something came (or was posted): the idle time starts again.
    fn busy(&mut self) {
        self.idle_since = None;
        self.empty_polls = 0;
        self.yielding = false;
    }

    /// After an empty read by the driver: whether to keep polling rather
    /// than park.
    fn keep_polling(&mut self) -> bool {
        if self.parked {
            return false;
        }
        // The clock is read once every `CLOCK_EVERY` empty polls only (a
        // completion usually comes within a few): the idle time counts
        // from the first reading.
        self.empty_polls = self.empty_polls.wrapping_add(1);
        if self.empty_polls % CLOCK_EVERY == 0 {
            let Some(since) = self.idle_since else {
                self.idle_since = Some(Instant::now());
                return true;
            };
            let idle = since.elapsed();
            if idle >= POLL_FOR {
                self.parked = true;
                return false;
            }
            self.yielding = idle >= SPIN_FOR;
        }
        true
    }
}

impl<B: IoBufMut> Inner<B> {
    /// Polls for the completion `who` waits for, driving the endpoint when
    /// no other future does.
    fn poll_for(&self, cx: &mut Context<'_>, who: Who) -> Poll<Result<Completion<B>>> {
        self.poll_locked(self.lock(), cx, who, |st, _| st.take(who))
    }

    /// Polls until `ready` gives a value, driving the endpoint when no
    /// other future does.
    fn poll_until<T>(
        &self,
        cx: &mut Context<'_>,
        who: Who,
        mut ready: impl FnMut(&mut State<B>) -> Option<T>,
    ) -> Poll<Result<T>> {
        self.poll_locked(self.lock(), cx, who, |st, _| ready(st))
    }

    /// [`poll_until`](Inner::poll_until) under the lock already taken;
    /// `ready` also gets the driver's own completion when its read brought
    /// it (handed over without going through its cell).
    fn poll_locked<T>(
        &self,
        mut st: MutexGuard<'_, State<B>>,
        cx: &mut Context<'_>,
        who: Who,
        mut ready: impl FnMut(&mut State<B>, &mut Option<Completion<B>>) -> Option<T>,
    ) -> Poll<Result<T>> {
        let mut mine = None;
        loop {
            if let Some(c) = ready(&mut st, &mut mine) {
                st.leave(who);
                return Poll::Ready(Ok(c));
            }
            // Only the driver reads the queue: a read by another future
            // would end the provider's arming for the parked driver
            // (`trywait`), which could then sleep through progress that
            // nobody makes.
            match st.driver {
                Some(d) if d != who => {
                    st.register(who, cx.waker());
                    return Poll::Pending;
                }
                _ => st.driver = Some(who),
            }
            // The driver reads first and records its waker only when it
            // has to wait: an operation that completes at once costs no
            // waker clone (everything here is under the lock, so nothing
            // can be missed meanwhile).
            let own = match who {
                Who::Op(id) => Some(id),
                Who::Stream | Who::Drain => None,
            };
            match st.reap(own) {
                Ok((_, Some(c))) => {
                    mine = Some(c);
                    continue;
                }
                Ok((0, None)) => {}
                Ok(_) => continue,
                Err(e) => {
                    st.leave(who);
                    return Poll::Ready(Err(e));
                }
            }
            // An operation's future needs no waker in its cell while it
            // drives (only the driver fills cells); streams and drains
            // may have several futures behind one name, all recorded.
            if !matches!(who, Who::Op(_)) {
                st.register(who, cx.waker());
            }
            if !st
                .driver_waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                st.driver_waker = Some(cx.waker().clone());
            }
            if st.keep_polling() {
                let yielding = st.yielding;
                drop(st);
                if yielding {
                    // Other threads (the peer's, with shm) get the CPU.
                    std::thread::yield_now();
                }
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let (Some(fd), Some(cq)) = (&self.fd, st.ep.waitable_cq()) else {
                // No wait fd: keep polling, yielding to other tasks.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            };
            match cq.trywait() {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Again => continue,
                Err(e) => {
                    st.leave(who);
                    return Poll::Ready(Err(Error::new(
                        e.kind(),
                        format!("arming the completion queue's wait fd: {}", e.detail()),
                    )));
                }
            }
            match fd.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(mut guard)) => {
                    guard.clear_ready();
                    continue;
                }
                Poll::Ready(Err(e)) => {
                    st.leave(who);
                    return Poll::Ready(Err(Error::new(
                        ErrorKind::Other,
                        format!("waiting for the completion queue's wait fd: {e}"),
                    )));
                }
            }
        }
    }
}

/// One operation: posts it (again, after `Again`, once completions were
/// read), then awaits its completion, in one future and under one lock
/// per poll. `T` is the buffer (`()` for atomics). Dropping it before it
/// resolves leaves the operation to the endpoint (see the
/// [module docs](self)).
struct Op<'a, B: IoBufMut, T, F> {
    inner: &'a Inner<B>,
    f: F,
    buf: Option<T>,
    receive: bool,
    /// Set once posted.
    id: Option<OpId>,
    done: bool,
}

impl<B: IoBufMut, T, F> Unpin for Op<'_, B, T, F> {}

impl<B, T, F> Future for Op<'_, B, T, F>
where
    B: IoBufMut,
    F: FnMut(&mut Endpoint<B>, T) -> std::result::Result<OpId, Rejected<T>>,
{
    type Output = std::result::Result<Completion<B>, Rejected<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(Rejected::new(
                Error::inval("an operation's future was polled after it completed"),
                None,
            )));
        }
        let mut st = this.inner.lock();
        let id = match this.id {
            Some(id) => id,
            None => match this.post(&mut st, cx) {
                Poll::Ready(Ok(id)) => id,
                Poll::Ready(Err(refused)) => {
                    this.done = true;
                    return Poll::Ready(Err(refused));
                }
                Poll::Pending => return Poll::Pending,
            },
        };
        let who = Who::Op(id);
        match this
            .inner
            .poll_locked(st, cx, who, |st, mine| mine.take().or_else(|| st.take(who)))
        {
            Poll::Ready(Ok(c)) => {
                this.done = true;
                Poll::Ready(Ok(c))
            }
            // The operation is still in flight as far as the drop knows.
            Poll::Ready(Err(error)) => Poll::Ready(Err(Rejected::new(error, None))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<B, T, F> Op<'_, B, T, F>
where
    B: IoBufMut,
    F: FnMut(&mut Endpoint<B>, T) -> std::result::Result<OpId, Rejected<T>>,
{
    /// Posts the operation; `Pending` while the queue is full and another
    /// future reads it.
    fn post(
        &mut self,
        st: &mut MutexGuard<'_, State<B>>,
        cx: &mut Context<'_>,
    ) -> Poll<std::result::Result<OpId, Rejected<T>>> {
        loop {
            let Some(buf) = self.buf.take() else {
                return Poll::Ready(Err(Rejected::new(
                    Error::inval("an operation's future was polled after it completed"),
                    None,
                )));
            };
            let refused = match (self.f)(&mut st.ep, buf) {
                Ok(id) => {
                    st.set_cell(
                        id,
                        Cell::Waiting {
                            waker: None,
                            queued: false,
                        },
                    );
                    self.id = Some(id);
                    return Poll::Ready(Ok(id));
                }
                Err(r) => r,
            };
            match refused {
                Rejected {
                    error,
                    buf: Some(back),
                } if error.kind() == ErrorKind::Again => {
                    // The queue is full: read completions (which frees
                    // room), or wait until another future has read some.
                    self.buf = Some(back);
                    if st.driver.is_some() {
                        // The driver reads the queue and wakes us.
                        if !st.posters.iter().any(|w| w.will_wake(cx.waker())) {
                            st.posters.push(cx.waker().clone());
                        }
                        return Poll::Pending;
                    }
                    // Nobody reads the queue: read it ourselves, and keep
                    // trying (yielding) until the post goes through.
                    match st.reap(None) {
                        Ok((0, _)) => {}
                        Ok(_) => continue,
                        Err(error) => {
                            return Poll::Ready(Err(Rejected::new(error, self.buf.take())));
                        }
                    }
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                other => return Poll::Ready(Err(other)),
            }
        }
    }
}

impl<B: IoBufMut, T, F> Drop for Op<'_, B, T, F> {
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return;
        };
        if self.done {
            return;
        }
        let mut st = self.inner.lock();
        let done = st.take(Who::Op(id));
        if done.is_none() {
            if self.receive {
                // It would wait for a message forever otherwise; a message
                // already matched completes it anyway.
                if let Err(e) = st.ep.cancel(id) {
                    tracing::debug!(%id, error = %e, "cancelling a dropped receive");
                }
            }
            if let Some(cell) = st.cells.get_mut(id.index()) {
                if matches!(cell, Cell::Waiting { .. }) {
                    *cell = Cell::Orphan;
                }
            }
        }
        st.leave(Who::Op(id));
        drop(st);
        drop(done);
    }
}

/// The completions of operations posted with the `post_*` methods of an
/// [`AsyncEndpoint`], in the order they are read.
///
/// [`next`](Completions::next) awaits the next one, and it is a
/// `futures_core::Stream` (for `StreamExt` combinators). It never ends:
/// with nothing in flight it waits (parked, no CPU) for operations posted
/// later.
pub struct Completions<B: IoBufMut = Vec<u8>> {
    inner: Arc<Inner<B>>,
}

impl<B: IoBufMut> std::fmt::Debug for Completions<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completions").finish_non_exhaustive()
    }
}

impl<B: IoBufMut> Completions<B> {
    /// The next completion; an error when the completion queue cannot be
    /// read.
    pub async fn next(&mut self) -> Result<Completion<B>> {
        Next { inner: &self.inner }.await
    }
}

/// Never ends (never yields `None`): with nothing in flight it waits for operations
/// posted later. A stream polled through this trait keeps driving the
/// endpoint for the other futures until it is polled to a completion or
/// dropped: keep polling it, or drop it.
impl<B: IoBufMut> futures_core::Stream for Completions<B> {
    type Item = Result<Completion<B>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_for(cx, Who::Stream).map(Some)
    }
}

impl<B: IoBufMut> Drop for Completions<B> {
    fn drop(&mut self) {
        self.inner.lock().leave(Who::Stream);
    }
}

/// The future of [`Completions::next`]: gives up the driver's role when
/// dropped.
struct Next<'a, B: IoBufMut> {
    inner: &'a Arc<Inner<B>>,
}

impl<B: IoBufMut> Future for Next<'_, B> {
    type Output = Result<Completion<B>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.poll_for(cx, Who::Stream)
    }
}

impl<B: IoBufMut> Drop for Next<'_, B> {
    fn drop(&mut self) {
        self.inner.lock().leave(Who::Stream);
    }
}

/// The future of [`AsyncEndpoint::drain`]: gives up the driver's role when
/// dropped.
struct Drain<'a, B: IoBufMut> {
    inner: &'a Arc<Inner<B>>,
}

impl<B: IoBufMut> Future for Drain<'_, B> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner
            .poll_until(cx, Who::Drain, |st| (st.ep.in_flight() == 0).then_some(()))
    }
}

impl<B: IoBufMut> Drop for Drain<'_, B> {
    fn drop(&mut self) {
        self.inner.lock().leave(Who::Drain);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::{Caps, EpType, Hints};

    /// A driver that never leaves (a receive nobody sends to) while many
    /// other operations are awaited one after the other: the hand-off
    /// queue stays short.
    #[test]
    fn outside_a_runtime_new_fails_instead_of_panicking() {
        let Some(info) = Hints::new()
            .caps(Caps::MSG)
            .ep_type(EpType::Rdm)
            .provider("tcp")
            .node("127.0.0.1")
            .source()
            .getinfo()
            .ok()
            .and_then(|v| v.into_iter().next())
        else {
            return;
        };
        let domain = super::super::Domain::open(&info).unwrap();
        let e = AsyncEndpoint::<Vec<u8>>::new(domain.endpoint().unwrap()).unwrap_err();
        assert!(e.to_string().contains("tokio runtime"), "{e}");
    }

    #[test]
    fn the_hand_off_queue_stays_short_under_a_long_lived_driver() {
        let Some(info) = Hints::new()
            .caps(Caps::MSG | Caps::TAGGED)
            .ep_type(EpType::Rdm)
            .provider("tcp")
            .node("127.0.0.1")
            .source()
            .getinfo()
            .ok()
            .and_then(|v| v.into_iter().next())
        else {
            return;
        };
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async {
            let domain = super::super::Domain::open(&info).unwrap();
            let a = AsyncEndpoint::new(domain.endpoint().unwrap()).unwrap();
            let b = AsyncEndpoint::new(domain.endpoint().unwrap()).unwrap();
            let to_b = a.insert(&b.name().unwrap()).unwrap();
            let mut forever = std::pin::pin!(b.trecv(u64::MAX, 0, vec![0; 8]));
            let mut forever_a = std::pin::pin!(a.trecv(u64::MAX, 0, vec![0; 8]));
            for i in 0..500u64 {
                let round = async {
                    let (got, sent) =
                        ::tokio::join!(b.trecv(i, 0, vec![0; 8]), a.tsend(to_b, i, vec![1; 8]));
                    sent.unwrap().check().unwrap();
                    got.unwrap().check().unwrap();
                };
                let mut round = std::pin::pin!(round);
                // The never-ending receives are polled first, so they
                // become their endpoints' drivers and stay so.
                std::future::poll_fn(|cx| {
                    assert!(forever.as_mut().poll(cx).is_pending());
                    assert!(forever_a.as_mut().poll(cx).is_pending());
                    round.as_mut().poll(cx)
                })
                .await;
            }
            let st = b.inner.lock();
            assert_eq!(st.driver.map(|d| d != Who::Stream), Some(true));
            assert!(
                st.queue.len() <= 2 * st.cells.len() + 16,
                "{}",
                st.queue.len()
            );
        });
    }
}
