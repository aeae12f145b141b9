//! Connections for `async` code: [`AsyncListener`] and
//! [`AsyncConnection`].
//!
//! Connection management (requests, `Connected`, `Shutdown`) comes
//! through event queues; idle, their futures park on the queue's wait fd
//! (tokio's `AsyncFd`, with `fi_trywait`), so a listener that waits for
//! connections costs no CPU. The data operations of a connection are
//! those of [`AsyncEndpoint`], driven as described in the
//! [module docs](super).

use std::future::Future;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ::tokio::io::unix::AsyncFd;
use fabric_core::objects::{EventQueue, FiAddr};
use fabric_core::{Address, Error, ErrorKind, Info, Result};

use super::{AsyncEndpoint, Completions, WaitFd, register};
use crate::safe::buf::{IoBufMut, Rejected, RemoteRegion};
use crate::safe::completion::{Completion, OpId};
use crate::safe::conn::{
    ConnRequest, Connecting, Connection, Handshake, Listener, closed_event, handshake_event,
};
use crate::safe::{Domain, Endpoint};

/// Waits on an event queue until `step` makes something of a read:
/// read, and when nothing came, `trywait` and await the wait fd (or yield,
/// without one).
async fn eq_wait<T>(
    fd: Option<&AsyncFd<WaitFd>>,
    mut read: impl FnMut() -> Result<Step<T>>,
) -> Result<T> {
    loop {
        match read()? {
            Step::Done(t) => return Ok(t),
            Step::Again => continue,
            Step::Sleep => {}
        }
        match fd {
            Some(fd) => {
                let mut ready = fd.readable().await.map_err(|e| {
                    Error::new(
                        ErrorKind::Other,
                        format!("waiting for the event queue's wait fd: {e}"),
                    )
                })?;
                ready.clear_ready();
            }
            None => ::tokio::task::yield_now().await,
        }
    }
}

/// What one read of an event queue came to.
enum Step<T> {
    Done(T),
    /// Read again at once (`trywait` says something is there).
    Again,
    /// Nothing: sleep on the wait fd.
    Sleep,
}

/// After a read that gave nothing: whether the queue may be slept on.
fn arm(eq: &dyn EventQueue) -> Result<Step<()>> {
    if eq.wait_fd().is_none() {
        return Ok(Step::Sleep);
    }
    match eq.trywait() {
        Ok(()) => Ok(Step::Sleep),
        Err(e) if e.kind() == ErrorKind::Again => Ok(Step::Again),
        Err(e) => Err(Error::new(
            e.kind(),
            format!("arming the event queue's wait fd: {}", e.detail()),
        )),
    }
}

/// A [`Listener`] for `async` code: [`accept`](AsyncListener::accept)
/// awaits the next connection (feature `tokio`).
///
/// ```
/// use fabric::prelude::*;
/// use fabric::safe::{AsyncConnection, AsyncListener};
///
/// # fn main() -> fabric::Result<()> {
/// let Ok(mut infos) = Hints::new().caps(Caps::MSG).ep_type(EpType::Msg)
///     .provider("tcp").node("127.0.0.1").source().getinfo()
/// else {
///     return Ok(()); // tcp is not compiled in
/// };
/// let domain = safe::Domain::open(&infos.remove(0))?;
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
/// rt.block_on(async {
///     let listener = AsyncListener::new(domain.listen()?)?;
///     let to = listener.name()?;
///     let (server, client) = tokio::join!(
///         listener.accept::<Vec<u8>>(),
///         AsyncConnection::<Vec<u8>>::connect(&domain, &to),
///     );
///     let (server, client) = (server?, client?);
///     let (got, sent) = tokio::join!(server.recv(vec![0; 64]), client.send(b"hello".to_vec()));
///     sent?.check()?;
///     assert_eq!(got?.check()?.received(), Some(&b"hello"[..]));
///     Ok(())
/// })
/// # }
/// ```
pub struct AsyncListener {
    // Declared first: deregistered before the listener's event queue,
    // which owns the fd, can close.
    fd: Option<AsyncFd<WaitFd>>,
    listener: Listener,
}

impl std::fmt::Debug for AsyncListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncListener")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl AsyncListener {
    /// Wraps `listener` (from [`Domain::listen`]) for `async` use; call it
    /// inside a tokio runtime with IO enabled (its event queue's wait fd
    /// is registered with the reactor). Outside a runtime it fails.
    pub fn new(listener: Listener) -> Result<Self> {
        in_runtime("AsyncListener::new")?;
        let fd = match listener.inner().eq().wait_fd() {
            // SAFETY: the fd is the listener's event queue's, which stays
            // open while `listener` (declared after the `AsyncFd`, so
            // dropped later) lives; requests hold the queue too.
            Some(fd) => Some(unsafe { register(fd.as_raw_fd(), "the listener's wait fd") }?),
            None => None,
        };
        Ok(AsyncListener { fd, listener })
    }

    /// Listens on `domain` ([`Domain::listen`]) for `async` use.
    pub fn bind(domain: &Domain) -> Result<Self> {
        AsyncListener::new(domain.listen()?)
    }

    /// The address peers connect to.
    pub fn name(&self) -> Result<Address> {
        self.listener.name()
    }

    /// Whether waiting parks on the event queue's wait fd (`false`: the
    /// queue has none, and waiting polls it, yielding between reads).
    pub fn parks(&self) -> bool {
        self.fd.is_some()
    }

    /// Awaits the next connection request.
    pub async fn next_request(&self) -> Result<ConnRequest> {
        let eq = self.listener.inner().eq();
        eq_wait(self.fd.as_ref(), || {
            if let Some(req) = self.listener.request_from(eq.read())? {
                return Ok(Step::Done(req));
            }
            Ok(match arm(eq)? {
                Step::Again => Step::Again,
                _ => Step::Sleep,
            })
        })
        .await
    }

    /// Awaits the next connection request and accepts it; resolves once
    /// the connection is established.
    pub async fn accept<B: IoBufMut>(&self) -> Result<AsyncConnection<B>> {
        let req = self.next_request().await?;
        AsyncConnection::accept(req, &[]).await
    }
}

/// A [`Connection`] for `async` code (feature `tokio`): the operations are
/// futures that own their buffers and resolve to their [`Completion`], as
/// [`AsyncEndpoint`]'s, without peer addresses.
///
/// Cloning gives another handle to the same connection, for other tasks.
/// When the peer closes the connection, operations in flight resolve with
/// errors and [`closed`](AsyncConnection::closed) resolves.
pub struct AsyncConnection<B: IoBufMut = Vec<u8>> {
    ep: AsyncEndpoint<B>,
    peer_data: Arc<[u8]>,
}

impl<B: IoBufMut> Clone for AsyncConnection<B> {
    fn clone(&self) -> Self {
        AsyncConnection {
            ep: self.ep.clone(),
            peer_data: self.peer_data.clone(),
        }
    }
}

impl<B: IoBufMut> std::fmt::Debug for AsyncConnection<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncConnection")
            .field("endpoint", &self.ep)
            .finish_non_exhaustive()
    }
}

/// Fails outside a tokio runtime (where registering a wait fd would
/// panic).
fn in_runtime(what: &str) -> Result<()> {
    ::tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|e| {
            Error::new(
                ErrorKind::Other,
                format!("{what} needs to run inside a tokio runtime: {e}"),
            )
        })
}

impl<B: IoBufMut> AsyncConnection<B> {
    /// Wraps an established [`Connection`] for `async` use (inside a tokio
    /// runtime with IO enabled).
    pub fn new(conn: Connection<B>) -> Result<Self> {
        let (ep, peer_data, closed) = conn.into_parts();
        let conn = Self::wrap(ep, peer_data)?;
        if closed {
            conn.ep.inner.closed.store(true, Ordering::Release);
        }
        Ok(conn)
    }

    fn wrap(ep: Endpoint<B>, peer_data: Vec<u8>) -> Result<Self> {
        Ok(AsyncConnection {
            ep: AsyncEndpoint::new(ep)?,
            peer_data: peer_data.into(),
        })
    }

    /// Connects to a listener at `to` ([`Domain::connect`]); resolves once
    /// the connection is established, or fails (`ConnRefused` when
    /// refused, with the peer's private data in the message).
    pub async fn connect(domain: &Domain, to: &Address) -> Result<Self> {
        Self::connect_with(domain, to, &[]).await
    }

    /// As [`connect`](AsyncConnection::connect), with private data for the
    /// peer.
    pub async fn connect_with(domain: &Domain, to: &Address, data: &[u8]) -> Result<Self> {
        in_runtime("AsyncConnection::connect")?;
        let ep = Connecting::<B>::start(domain, to, data)?.into_endpoint();
        Self::established(AsyncEndpoint::new(ep)?).await
    }

    /// Accepts `req` with private data for the peer; resolves once the
    /// connection is established.
    pub async fn accept(req: ConnRequest, data: &[u8]) -> Result<Self> {
        in_runtime("AsyncConnection::accept")?;
        let ep = req.start_accept::<B>(data)?;
        Self::established(AsyncEndpoint::new(ep)?).await
    }

    /// Awaits the `Connected` event of a connection being set up.
    async fn established(ep: AsyncEndpoint<B>) -> Result<Self> {
        let inner = ep.inner.clone();
        let peer_data = eq_wait(inner.eq_fd.as_ref(), || {
            let st = inner.lock();
            let Some(eq) = st.ep.eq() else {
                return Err(Error::inval("a connection without an event queue"));
            };
            if let Handshake::Connected(data) = handshake_event(eq, eq.read())? {
                return Ok(Step::Done(data));
            }
            Ok(match arm(eq)? {
                Step::Again => Step::Again,
                _ => Step::Sleep,
            })
        })
        .await?;
        Ok(AsyncConnection {
            ep,
            peer_data: peer_data.into(),
        })
    }

    /// The entry the endpoint was opened with, as the provider altered it.
    pub fn info(&self) -> Info {
        self.ep.info()
    }

    /// The local address.
    pub fn name(&self) -> Result<Address> {
        self.ep.name()
    }

    /// The peer's address.
    pub fn peer(&self) -> Result<Address> {
        self.ep.inner.lock().ep.raw().getpeer()
    }

    /// The private data the peer sent when it accepted (connecting side).
    pub fn peer_data(&self) -> &[u8] {
        &self.peer_data
    }

    /// How many operations are in flight.
    pub fn in_flight(&self) -> usize {
        self.ep.in_flight()
    }

    /// Whether idle futures park on wait fds (see [`AsyncEndpoint::parks`]).
    pub fn parks(&self) -> bool {
        self.ep.parks()
    }

    /// Sends `buf` to the peer; the completion hands the buffer back.
    pub fn send(
        &self,
        buf: B,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.ep.send(FiAddr::UNSPEC, buf)
    }

    /// Sends `buf` with remote CQ data.
    pub fn send_with_data(
        &self,
        buf: B,
        data: u64,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.ep.send_with_data(FiAddr::UNSPEC, buf, data)
    }

    /// Receives a message into `buf`.
    pub fn recv(
        &self,
        buf: B,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.ep.recv(buf)
    }

    /// Sends `buf` with `tag`.
    pub fn tsend(
        &self,
        tag: u64,
        buf: B,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.ep.tsend(FiAddr::UNSPEC, tag, buf)
    }

    /// Receives a tagged message whose tag equals `tag` in the bits
    /// `ignore` leaves, into `buf`.
    pub fn trecv(
        &self,
        tag: u64,
        ignore: u64,
        buf: B,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.ep.trecv(tag, ignore, buf)
    }

    /// Writes all of `buf` to the start of the peer's `remote`.
    pub fn write(
        &self,
        buf: B,
        remote: &RemoteRegion,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.ep.write(FiAddr::UNSPEC, buf, remote)
    }

    /// Reads from the start of the peer's `remote` until `buf` is full.
    pub fn read(
        &self,
        buf: B,
        remote: &RemoteRegion,
    ) -> impl Future<Output = std::result::Result<Completion<B>, Rejected<B>>> + '_ {
        self.ep.read(FiAddr::UNSPEC, buf, remote)
    }

    /// Sends a small message at once, copying it (no completion).
    pub fn inject(&self, bytes: &[u8]) -> Result<()> {
        self.ep.inject(FiAddr::UNSPEC, bytes)
    }

    /// Tagged [`inject`](AsyncConnection::inject).
    pub fn tinject(&self, tag: u64, bytes: &[u8]) -> Result<()> {
        self.ep.tinject(FiAddr::UNSPEC, tag, bytes)
    }

    /// Posts a send whose completion comes through
    /// [`completions`](AsyncConnection::completions) (see
    /// [`AsyncEndpoint::post_send`]).
    pub fn post_send(&self, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.post_send(FiAddr::UNSPEC, buf)
    }

    /// Posts a receive for the completion stream.
    pub fn post_recv(&self, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.post_recv(buf)
    }

    /// Posts a tagged send for the completion stream.
    pub fn post_tsend(&self, tag: u64, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.post_tsend(FiAddr::UNSPEC, tag, buf)
    }

    /// Posts a tagged receive for the completion stream.
    pub fn post_trecv(
        &self,
        tag: u64,
        ignore: u64,
        buf: B,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.post_trecv(tag, ignore, buf)
    }

    /// Cancels a receive posted for the completion stream.
    pub fn cancel(&self, id: OpId) -> Result<()> {
        self.ep.cancel(id)
    }

    /// The stream of completions of the operations posted with the
    /// `post_*` methods.
    pub fn completions(&self) -> Completions<B> {
        self.ep.completions()
    }

    /// Cancels the posted receives and awaits until nothing is in flight
    /// (see [`AsyncEndpoint::drain`]).
    pub async fn drain(&self) -> Result<()> {
        self.ep.drain().await
    }

    /// Closes the connection (`fi_shutdown`): the peer's
    /// [`closed`](AsyncConnection::closed) resolves, and operations in
    /// flight on both sides resolve with errors.
    pub fn shutdown(&self) -> Result<()> {
        self.ep.inner.lock().ep.raw().shutdown().map_err(|e| {
            Error::new(
                e.kind(),
                format!("shutting the connection down: {}", e.detail()),
            )
        })
    }

    /// Whether the connection was seen closed, without waiting.
    pub fn is_closed(&self) -> Result<bool> {
        let inner = &self.ep.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Ok(true);
        }
        let st = inner.lock();
        let Some(eq) = st.ep.eq() else {
            return Ok(false);
        };
        let closed = closed_event(eq, eq.read())?;
        if closed {
            inner.closed.store(true, Ordering::Release);
        }
        Ok(closed)
    }

    /// Resolves once the connection is closed (by the peer, by
    /// [`shutdown`](AsyncConnection::shutdown) or by a failure). Waiting
    /// costs no CPU.
    pub async fn closed(&self) -> Result<()> {
        let inner = &self.ep.inner;
        eq_wait(inner.eq_fd.as_ref(), || {
            if inner.closed.load(Ordering::Acquire) {
                return Ok(Step::Done(()));
            }
            let st = inner.lock();
            let Some(eq) = st.ep.eq() else {
                return Err(Error::inval("a connection without an event queue"));
            };
            if closed_event(eq, eq.read())? {
                inner.closed.store(true, Ordering::Release);
                return Ok(Step::Done(()));
            }
            Ok(match arm(eq)? {
                Step::Again => Step::Again,
                _ => Step::Sleep,
            })
        })
        .await
    }
}
