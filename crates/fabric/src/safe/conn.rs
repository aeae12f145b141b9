//! Connected (MSG) endpoints in the safe layer: [`Listener`] (a passive
//! endpoint and its event queue), [`ConnRequest`], [`Connecting`] and
//! [`Connection`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric_core::objects::{self, EqAttr, EqEvent, EventQueue, FiAddr, WaitObj};
use fabric_core::{Address, EpType, Error, ErrorKind, Info, Result};

use super::buf::{IoBufMut, Rejected, RemoteRegion};
use super::completion::{Completion, OpId};
use super::endpoint::Endpoint;
use super::{Domain, Shared};

/// The longest one blocking read of an event queue lasts before the wait
/// loop looks again (a safety net for wait objects that miss a wake).
const EQ_SLICE: Duration = Duration::from_millis(50);

/// Prefixes an error with what was being done.
fn doing(what: &'static str) -> impl Fn(Error) -> Error {
    move |e| Error::new(e.kind(), format!("{what}: {}", e.detail()))
}

/// Opens an event queue that can block (or only be polled, when the
/// provider has no wait object).
pub(super) fn open_eq(shared: &Shared) -> Result<Box<dyn EventQueue>> {
    let attr = |wait_obj| EqAttr {
        wait_obj,
        ..EqAttr::default()
    };
    match shared.fabric.eq(&attr(WaitObj::Unspec)) {
        Ok(eq) => Ok(eq),
        Err(_) => shared
            .fabric
            .eq(&attr(WaitObj::None))
            .map_err(doing("opening an event queue")),
    }
}

/// Checks that the domain's entry is for connected endpoints.
fn msg_entry(shared: &Shared, what: &str) -> Result<()> {
    let ep_type = shared.info.ep_attr.ep_type;
    if ep_type == EpType::Msg {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::OpNotSupp,
            format!(
                "{what} needs a domain opened with a MSG entry (ask for EpType::Msg in the hints), \
                 and this one is {ep_type}: use Domain::endpoint for it"
            ),
        ))
    }
}

/// What one event-queue read says about a connection being set up.
pub(super) enum Handshake {
    /// Nothing yet.
    Waiting,
    /// Connected; the peer's private data.
    Connected(Vec<u8>),
}

/// Looks at the result of one event-queue read while a connection is set
/// up: `Connected`, nothing yet, or why it failed.
/// How long the next wait of a loop that ends at `deadline` (`None`:
/// never) may sleep, or `TimedOut` with `what()` once the deadline passed.
fn next_slice(deadline: Option<Instant>, what: impl FnOnce() -> String) -> Result<Duration> {
    match deadline {
        Some(at) => {
            let now = Instant::now();
            if now >= at {
                return Err(Error::new(ErrorKind::TimedOut, what()));
            }
            Ok((at - now).min(EQ_SLICE))
        }
        None => Ok(EQ_SLICE),
    }
}

/// One event of `eq`, waiting up to `slice` for it (an EQ without a wait
/// object is read after a yield).
fn wait_event(eq: &dyn EventQueue, slice: Duration) -> Result<EqEvent> {
    if eq.wait_fd().is_some() {
        eq.sread(Some(slice))
    } else {
        std::thread::yield_now();
        eq.read()
    }
}

pub(super) fn handshake_event(eq: &dyn EventQueue, r: Result<EqEvent>) -> Result<Handshake> {
    match r {
        Ok(EqEvent::Connected { data, .. }) => Ok(Handshake::Connected(data)),
        Ok(EqEvent::Shutdown { .. }) => Err(Error::new(
            ErrorKind::ConnReset,
            "the connection closed before it was established",
        )),
        Ok(other) => {
            tracing::debug!(event = ?other, "an unexpected event while connecting; skipped");
            Ok(Handshake::Waiting)
        }
        Err(e) if matches!(e.kind(), ErrorKind::Again | ErrorKind::TimedOut) => {
            Ok(Handshake::Waiting)
        }
        Err(e) if e.kind() == ErrorKind::Avail => Err(eq_error(eq, "connecting")),
        Err(e) => Err(doing("reading the event queue")(e)),
    }
}

/// Reads the error event that is next in `eq` and turns it into an error
/// (a refusal names the peer's private data).
pub(super) fn eq_error(eq: &dyn EventQueue, what: &str) -> Error {
    match eq.readerr() {
        Ok(err) => {
            let text = if err.err_text.is_empty() {
                err.err.description().to_string()
            } else {
                err.err_text
            };
            let data = if err.data.is_empty() {
                String::new()
            } else {
                format!(" (the peer said: {:?})", String::from_utf8_lossy(&err.data))
            };
            let text = if err.err == ErrorKind::ConnRefused {
                format!("{what}: the connection was refused: {text}{data}")
            } else {
                format!("{what}: {text}{data}")
            };
            Error::new(err.err, text)
        }
        Err(e) => doing("reading an error event")(e),
    }
}

/// Whether one event-queue read says the connection is closed.
pub(super) fn closed_event(eq: &dyn EventQueue, r: Result<EqEvent>) -> Result<bool> {
    match r {
        Ok(EqEvent::Shutdown { .. }) => Ok(true),
        Ok(other) => {
            tracing::debug!(event = ?other, "an unexpected event on a connection; skipped");
            Ok(false)
        }
        Err(e) if matches!(e.kind(), ErrorKind::Again | ErrorKind::TimedOut) => Ok(false),
        Err(e) if e.kind() == ErrorKind::Avail => {
            // An error event ends the connection too; say why in the log.
            let e = eq_error(eq, "the connection failed");
            tracing::debug!(error = %e, "an error event on a connection");
            Ok(true)
        }
        Err(e) => Err(doing("reading the event queue")(e)),
    }
}

/// The part of a [`Listener`] that its requests share.
pub(super) struct ListenerInner {
    // The passive endpoint before the event queue it is bound to.
    pep: Box<dyn objects::PassiveEndpoint>,
    eq: Box<dyn EventQueue>,
}

impl ListenerInner {
    /// The listener's event queue (for its wait fd).
    #[cfg(feature = "tokio")]
    pub(super) fn eq(&self) -> &dyn EventQueue {
        self.eq.as_ref()
    }
}

/// A passive endpoint listening for connections, with its event queue
/// (`fi_passive_ep`, `fi_listen`). Opened by [`Domain::listen`].
///
/// [`accept`](Listener::accept) takes the next request and accepts it;
/// [`next_request`](Listener::next_request) hands the request over first,
/// with the peer's private data, to accept or reject.
pub struct Listener {
    inner: Arc<ListenerInner>,
    domain: Domain,
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.inner.pep.getname().ok())
            .finish_non_exhaustive()
    }
}

impl Listener {
    pub(super) fn open(domain: &Domain) -> Result<Listener> {
        let shared = &domain.shared;
        msg_entry(shared, "Domain::listen")?;
        let eq = open_eq(shared)?;
        let pep = shared
            .fabric
            .passive_endpoint(&shared.info)
            .map_err(doing("opening a passive endpoint"))?;
        pep.bind_eq(eq.as_ref())
            .map_err(doing("binding the passive endpoint's event queue"))?;
        pep.listen().map_err(doing("listening"))?;
        Ok(Listener {
            inner: Arc::new(ListenerInner { pep, eq }),
            domain: domain.clone(),
        })
    }

    /// The address peers connect to.
    pub fn name(&self) -> Result<Address> {
        self.inner
            .pep
            .getname()
            .map_err(doing("reading the listener's address"))
    }

    /// The passive endpoint, for the object API.
    pub fn raw(&self) -> &dyn objects::PassiveEndpoint {
        self.inner.pep.as_ref()
    }

    #[cfg(feature = "tokio")]
    pub(super) fn inner(&self) -> &Arc<ListenerInner> {
        &self.inner
    }

    /// Waits for the next connection request and accepts it; the
    /// connection is established when this returns.
    pub fn accept<B: IoBufMut>(&self) -> Result<Connection<B>> {
        self.next_request()?.accept()
    }

    /// Waits for the next connection request.
    pub fn next_request(&self) -> Result<ConnRequest> {
        self.request_until(None)
    }

    /// Waits up to `timeout` for the next connection request; `TimedOut`
    /// then.
    pub fn next_request_timeout(&self, timeout: Duration) -> Result<ConnRequest> {
        self.request_until(Some((Instant::now() + timeout, timeout)))
    }

    /// The next connection request if one is there, without blocking.
    pub fn try_next_request(&self) -> Result<Option<ConnRequest>> {
        let r = self.inner.eq.read();
        self.request_from(r)
    }

    /// Turns one event-queue read into a request, or nothing yet.
    pub(super) fn request_from(&self, r: Result<EqEvent>) -> Result<Option<ConnRequest>> {
        let eq = self.inner.eq.as_ref();
        match r {
            Ok(EqEvent::ConnReq { info, data, .. }) => Ok(Some(ConnRequest {
                info: Some(*info),
                data,
                listener: self.inner.clone(),
                domain: self.domain.clone(),
            })),
            Ok(other) => {
                tracing::debug!(event = ?other, "a listener's event other than a request; skipped");
                Ok(None)
            }
            Err(e) if matches!(e.kind(), ErrorKind::Again | ErrorKind::TimedOut) => Ok(None),
            Err(e) if e.kind() == ErrorKind::Avail => {
                // A request that failed before it was taken (the peer went
                // away): log it and go on listening.
                let e = eq_error(eq, "a connection request");
                tracing::debug!(error = %e, "a listener's error event; skipped");
                Ok(None)
            }
            Err(e) => Err(doing("reading the listener's event queue")(e)),
        }
    }

    fn request_until(&self, deadline: Option<(Instant, Duration)>) -> Result<ConnRequest> {
        loop {
            let slice = next_slice(deadline.map(|(at, _)| at), || {
                let timeout = deadline.map(|(_, t)| t).unwrap_or_default();
                format!("no connection request within {timeout:?}")
            })?;
            let r = wait_event(self.inner.eq.as_ref(), slice);
            if let Some(req) = self.request_from(r)? {
                return Ok(req);
            }
        }
    }
}

/// A peer's request to connect, from [`Listener::next_request`]: accept or
/// reject it. Dropped unanswered, it is rejected without private data.
pub struct ConnRequest {
    /// `None` once answered.
    info: Option<Info>,
    data: Vec<u8>,
    listener: Arc<ListenerInner>,
    domain: Domain,
}

impl fmt::Debug for ConnRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnRequest")
            .field("data", &self.data)
            .finish_non_exhaustive()
    }
}

impl ConnRequest {
    /// The private data the peer sent with the request.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The peer's address, when the provider names it in the request.
    pub fn peer(&self) -> Option<&Address> {
        self.info.as_ref().and_then(|i| i.dest_addr.as_ref())
    }

    /// Accepts the request; the connection is established when this
    /// returns.
    pub fn accept<B: IoBufMut>(self) -> Result<Connection<B>> {
        self.accept_with(&[])
    }

    /// Accepts the request with private data for the peer (its
    /// [`Connection::peer_data`]).
    pub fn accept_with<B: IoBufMut>(self, data: &[u8]) -> Result<Connection<B>> {
        Connecting {
            ep: self.start_accept(data)?,
        }
        .wait()
    }

    /// Opens the endpoint of the request and accepts; the connection is
    /// established once its event queue says `Connected`.
    pub(super) fn start_accept<B: IoBufMut>(mut self, data: &[u8]) -> Result<Endpoint<B>> {
        let Some(info) = self.info.take() else {
            return Err(Error::inval("the connection request was answered already"));
        };
        let shared = self.domain.shared.clone();
        let eq = open_eq(&shared)?;
        let ep = Endpoint::open_as(shared, &info, Some(eq))?;
        ep.raw()
            .accept(data)
            .map_err(doing("accepting the connection"))?;
        Ok(ep)
    }

    /// Rejects the request with private data for the peer (its connect
    /// fails with `ConnRefused`).
    pub fn reject(mut self, data: &[u8]) -> Result<()> {
        let Some(info) = self.info.take() else {
            return Err(Error::inval("the connection request was answered already"));
        };
        let Some(handle) = info.handle else {
            return Err(Error::inval(
                "the connection request carries no handle to reject",
            ));
        };
        self.listener
            .pep
            .reject(handle, data)
            .map_err(doing("rejecting the connection"))
    }
}

impl Drop for ConnRequest {
    fn drop(&mut self) {
        if let Some(handle) = self.info.take().and_then(|i| i.handle) {
            if let Err(e) = self.listener.pep.reject(handle, &[]) {
                tracing::debug!(error = %e, "rejecting a dropped connection request");
            }
        }
    }
}

/// A connection being set up by [`Domain::connect`]: [`wait`](Connecting::wait)
/// for it.
pub struct Connecting<B: IoBufMut = Vec<u8>> {
    ep: Endpoint<B>,
}

impl<B: IoBufMut> fmt::Debug for Connecting<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connecting").finish_non_exhaustive()
    }
}

impl<B: IoBufMut> Connecting<B> {
    pub(super) fn start(domain: &Domain, to: &Address, data: &[u8]) -> Result<Self> {
        let shared = domain.shared.clone();
        msg_entry(&shared, "Domain::connect")?;
        let eq = open_eq(&shared)?;
        let info = shared.info.clone();
        let ep = Endpoint::open_as(shared, &info, Some(eq))?;
        ep.raw()
            .connect(to, data)
            .map_err(|e| Error::new(e.kind(), format!("connecting to {to}: {}", e.detail())))?;
        Ok(Connecting { ep })
    }

    #[cfg(feature = "tokio")]
    pub(super) fn into_endpoint(self) -> Endpoint<B> {
        self.ep
    }

    /// Waits until the connection is established (or refused:
    /// `ConnRefused`, with the peer's private data in the message).
    pub fn wait(self) -> Result<Connection<B>> {
        self.wait_until(None)
    }

    /// As [`wait`](Connecting::wait), up to `timeout`; `TimedOut` then
    /// (the attempt is dropped).
    pub fn wait_timeout(self, timeout: Duration) -> Result<Connection<B>> {
        self.wait_until(Some((Instant::now() + timeout, timeout)))
    }

    fn wait_until(mut self, deadline: Option<(Instant, Duration)>) -> Result<Connection<B>> {
        loop {
            let slice = next_slice(deadline.map(|(at, _)| at), || {
                let timeout = deadline.map(|(_, t)| t).unwrap_or_default();
                format!("the connection was not established within {timeout:?}")
            })?;
            // Completion-queue reads drive the endpoint's data progress
            // (sends posted early); what completes is kept.
            self.ep.progress()?;
            let Some(eq) = self.ep.eq() else {
                return Err(Error::inval("a connecting endpoint without an event queue"));
            };
            let r = wait_event(eq, slice);
            if let Handshake::Connected(data) = handshake_event(eq, r)? {
                return Ok(Connection {
                    ep: self.ep,
                    peer_data: data,
                    closed: false,
                });
            }
        }
    }
}

/// An established connection (a MSG endpoint) whose operations own their
/// buffers, as [`Endpoint`]'s do: each returns an [`OpId`], and its
/// [`Completion`] (with the buffer) comes from [`wait_for`](Connection::wait_for),
/// [`wait`](Connection::wait), [`poll`](Connection::poll) or
/// [`try_take`](Connection::try_take).
///
/// When the peer closes the connection, operations in flight complete
/// with errors and new ones are refused (`Shutdown`);
/// [`peer_closed`](Connection::peer_closed) and
/// [`wait_closed`](Connection::wait_closed) tell. Dropping a connection
/// closes it (the peer sees it closed), after the drain described in the
/// [module docs](super).
pub struct Connection<B: IoBufMut = Vec<u8>> {
    ep: Endpoint<B>,
    peer_data: Vec<u8>,
    closed: bool,
}

impl<B: IoBufMut> fmt::Debug for Connection<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("endpoint", &self.ep)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<B: IoBufMut> Connection<B> {
    #[cfg(feature = "tokio")]
    pub(super) fn into_parts(self) -> (Endpoint<B>, Vec<u8>, bool) {
        (self.ep, self.peer_data, self.closed)
    }

    /// The entry the endpoint was opened with, as the provider altered it.
    pub fn info(&self) -> &Info {
        self.ep.info()
    }

    /// The endpoint object, for the zero-copy API (see [`Endpoint::raw`]).
    pub fn raw(&self) -> &dyn objects::Endpoint {
        self.ep.raw()
    }

    /// The local address.
    pub fn name(&self) -> Result<Address> {
        self.ep.name()
    }

    /// The peer's address.
    pub fn peer(&self) -> Result<Address> {
        self.ep
            .raw()
            .getpeer()
            .map_err(doing("reading the peer's address"))
    }

    /// The private data the peer sent when it accepted (on the connecting
    /// side); empty on the accepting side and when it sent none.
    pub fn peer_data(&self) -> &[u8] {
        &self.peer_data
    }

    /// Sends `buf` to the peer.
    pub fn send(&mut self, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.send(FiAddr::UNSPEC, buf)
    }

    /// Sends `buf` with remote CQ data (see [`Endpoint::send_with_data`]).
    pub fn send_with_data(&mut self, buf: B, data: u64) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.send_with_data(FiAddr::UNSPEC, buf, data)
    }

    /// Posts `buf` to receive a message; the message may fill it.
    pub fn recv(&mut self, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.recv(buf)
    }

    /// Sends `buf` with `tag` (the entry needs `Caps::TAGGED`).
    pub fn tsend(&mut self, tag: u64, buf: B) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.tsend(FiAddr::UNSPEC, tag, buf)
    }

    /// Tagged [`send_with_data`](Connection::send_with_data).
    pub fn tsend_with_data(
        &mut self,
        tag: u64,
        buf: B,
        data: u64,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.tsend_with_data(FiAddr::UNSPEC, tag, buf, data)
    }

    /// Posts `buf` for a tagged message whose tag equals `tag` in the bits
    /// `ignore` leaves.
    pub fn trecv(
        &mut self,
        tag: u64,
        ignore: u64,
        buf: B,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.trecv(tag, ignore, buf)
    }

    /// Sends a small message at once, copying it (no completion).
    pub fn inject(&mut self, bytes: &[u8]) -> Result<()> {
        self.ep.inject(FiAddr::UNSPEC, bytes)
    }

    /// Tagged [`inject`](Connection::inject).
    pub fn tinject(&mut self, tag: u64, bytes: &[u8]) -> Result<()> {
        self.ep.tinject(FiAddr::UNSPEC, tag, bytes)
    }

    /// Writes all of `buf` to the start of the peer's `remote` (the entry
    /// needs `Caps::RMA`).
    pub fn write(
        &mut self,
        buf: B,
        remote: &RemoteRegion,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.write(FiAddr::UNSPEC, buf, remote)
    }

    /// Reads from the start of the peer's `remote` until `buf` is full.
    pub fn read(
        &mut self,
        buf: B,
        remote: &RemoteRegion,
    ) -> std::result::Result<OpId, Rejected<B>> {
        self.ep.read(FiAddr::UNSPEC, buf, remote)
    }

    /// Cancels a posted receive (see [`Endpoint::cancel`]).
    pub fn cancel(&mut self, id: OpId) -> Result<()> {
        self.ep.cancel(id)
    }

    /// Reads the completion queue once (see [`Endpoint::progress`]).
    pub fn progress(&mut self) -> Result<()> {
        self.ep.progress()
    }

    /// The next completion if there is one, without blocking.
    pub fn poll(&mut self) -> Result<Option<Completion<B>>> {
        self.ep.poll()
    }

    /// The completion of `id` if it is there, without blocking.
    pub fn try_take(&mut self, id: OpId) -> Result<Option<Completion<B>>> {
        self.ep.try_take(id)
    }

    /// Blocks for the next completion. `NoMsg` when nothing is in flight.
    pub fn wait(&mut self) -> Result<Completion<B>> {
        self.ep.wait()
    }

    /// Blocks for the next completion, up to `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Completion<B>> {
        self.ep.wait_timeout(timeout)
    }

    /// Blocks for the completion of `id`.
    pub fn wait_for(&mut self, id: OpId) -> Result<Completion<B>> {
        self.ep.wait_for(id)
    }

    /// Blocks for the completion of `id`, up to `timeout`.
    pub fn wait_for_timeout(&mut self, id: OpId, timeout: Duration) -> Result<Completion<B>> {
        self.ep.wait_for_timeout(id, timeout)
    }

    /// How many operations are in flight.
    pub fn in_flight(&self) -> usize {
        self.ep.in_flight()
    }

    /// How long a drop waits for operations in flight (see
    /// [`Endpoint::set_drain_timeout`]).
    pub fn set_drain_timeout(&mut self, timeout: Duration) {
        self.ep.set_drain_timeout(timeout);
    }

    /// Closes the connection (`fi_shutdown`): the peer sees it closed, and
    /// operations in flight on both sides complete with errors.
    pub fn shutdown(&mut self) -> Result<()> {
        self.ep
            .raw()
            .shutdown()
            .map_err(doing("shutting the connection down"))
    }

    /// Whether the connection is closed (by the peer, by
    /// [`shutdown`](Connection::shutdown) or by a failure), without
    /// blocking.
    pub fn peer_closed(&mut self) -> Result<bool> {
        if !self.closed {
            let Some(eq) = self.ep.eq() else {
                return Ok(false);
            };
            self.closed = closed_event(eq, eq.read())?;
        }
        Ok(self.closed)
    }

    /// Waits until the connection is closed, up to `timeout` (`None`: no
    /// limit); `TimedOut` then.
    pub fn wait_closed(&mut self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        while !self.closed {
            let slice = next_slice(deadline, || {
                format!("the connection was still open after {timeout:?}")
            })?;
            // The completion queue moves the data (and sees the peer go).
            self.ep.progress()?;
            let Some(eq) = self.ep.eq() else {
                return Err(Error::inval("a connection without an event queue"));
            };
            let r = wait_event(eq, slice);
            self.closed = closed_event(eq, r)?;
        }
        Ok(())
    }
}

impl Domain {
    /// Listens for connections (the domain's entry must be MSG): peers
    /// connect to [`Listener::name`] with [`Domain::connect`].
    ///
    /// ```
    /// use fabric::prelude::*;
    ///
    /// # fn main() -> fabric::Result<()> {
    /// let Ok(mut infos) = Hints::new().caps(Caps::MSG).ep_type(EpType::Msg)
    ///     .provider("tcp").node("127.0.0.1").source().getinfo()
    /// else {
    ///     return Ok(()); // tcp is not compiled in
    /// };
    /// let domain = safe::Domain::open(&infos.remove(0))?;
    /// let listener = domain.listen()?;
    /// let to = listener.name()?;
    /// let server = std::thread::spawn(move || -> fabric::Result<Vec<u8>> {
    ///     let mut conn: safe::Connection = listener.accept()?;
    ///     let recv = conn.recv(vec![0; 64])?;
    ///     let got = conn.wait_for(recv)?.check()?;
    ///     Ok(got.received().unwrap_or_default().to_vec())
    /// });
    /// let mut conn: safe::Connection = domain.connect(&to)?.wait()?;
    /// let sent = conn.send(b"hello".to_vec())?;
    /// conn.wait_for(sent)?.check()?;
    /// let got = server.join().map_err(|_| Error::new(ErrorKind::Other, "server panicked"))??;
    /// assert_eq!(got, b"hello");
    /// # Ok(())
    /// # }
    /// ```
    pub fn listen(&self) -> Result<Listener> {
        Listener::open(self)
    }

    /// Starts connecting to a [`Listener`] at `to` (the domain's entry must
    /// be MSG); [`Connecting::wait`] for the connection.
    pub fn connect<B: IoBufMut>(&self, to: &Address) -> Result<Connecting<B>> {
        Connecting::start(self, to, &[])
    }

    /// As [`connect`](Domain::connect), with private data for the peer
    /// ([`ConnRequest::data`]).
    pub fn connect_with<B: IoBufMut>(&self, to: &Address, data: &[u8]) -> Result<Connecting<B>> {
        Connecting::start(self, to, data)
    }
}
