//! The safe layer: operations that own their buffers.
//!
//! The object traits ([`MsgOps`](crate::MsgOps), [`TaggedOps`](crate::TaggedOps),
//! [`RmaOps`](crate::RmaOps), [`AtomicOps`](crate::AtomicOps)) take raw
//! [`IoVec`]s, and the caller promises, in `unsafe`,
//! that the memory outlives the operation. This layer keeps that promise
//! for you, the way io_uring's Rust wrappers do:
//!
//! - **An operation takes its buffer by value** (`Vec<u8>`, `Box<[u8]>`,
//!   or a [`Registered`] buffer) and the buffer comes back in the
//!   operation's [`Completion`]. While the operation runs nobody else can
//!   reach the buffer, so the provider may read or write it freely. A post
//!   that fails hands the buffer back in [`Rejected`].
//! - **Completions are matched for you**: each operation gets an [`OpId`]
//!   (its context in the completion queue); [`Endpoint::wait_for`],
//!   [`Endpoint::wait`] and [`Endpoint::poll`] turn completion-queue entries
//!   back into the operations they finish, with their buffers. In-flight
//!   operations live in a slab whose slots are reused, so once it has grown
//!   to the peak number of operations in flight, posting allocates nothing.
//! - **Registered memory is an owned value**: [`Domain::register`] gives a
//!   [`Registered`] buffer (the memory region and the buffer in one value,
//!   for domains with `FI_MR_LOCAL`), and [`Domain::expose`] an [`Exposed`]
//!   one that peers may read or write. Dropping either deregisters the
//!   region before the memory is freed; an `Exposed` buffer's bytes can be
//!   looked at only once peers can no longer write it
//!   ([`Exposed::revoke`]).
//! - **Remote memory has a type**: [`RemoteRegion`] (address, length and
//!   [`RemoteKey`]) comes from an [`Exposed`] buffer, is sent to the peer
//!   (`serde`, or [`RemoteRegion::to_bytes`]), and is what
//!   [`Endpoint::read`], [`Endpoint::write`] and the atomics take. It
//!   already says whether the provider addresses by virtual address or by
//!   offset, so the peer never needs to know.
//!
//! - **Connections** (MSG endpoints): [`Domain::listen`] gives a
//!   [`Listener`], whose [`accept`](Listener::accept) (or
//!   [`next_request`](Listener::next_request), to look at the peer's
//!   private data and accept or reject) yields a [`Connection`];
//!   [`Domain::connect`] gives a [`Connecting`] that
//!   [`wait`](Connecting::wait)s for one. A connection has the operations
//!   of an [`Endpoint`] without peer addresses, and tells when the peer
//!   closed it ([`Connection::peer_closed`]).
//!
//! Nothing here needs `unsafe` in user code; the zero-copy object traits
//! stay available ([`Endpoint::raw`], [`Domain::raw`]).
//!
//! # Ending with operations in flight
//!
//! Dropping an [`Endpoint`] with operations in flight cancels its posted
//! receives and then reads its completion queue until every operation has
//! completed or the [drain timeout](Endpoint::set_drain_timeout) (two
//! seconds by default) has passed. Buffers of operations still in flight
//! then are **leaked**, never freed, since the provider may still write
//! them; a `tracing` warning says how many. [`Endpoint::in_flight`] tells
//! before dropping whether anything is left.
//!
//! # Waiting and progress
//!
//! A wait reads the completion queue back to back for about 20 µs, then
//! yields the CPU between reads for up to 2 ms, then blocks in the
//! provider's blocking read: latency stays low while completions come
//! quickly, and an idle endpoint costs no CPU.
//!
//! With manual progress (the tcp and shm default) a provider moves data
//! when its completion queues are read. Two endpoints in one thread must
//! both be driven: wait on one while calling [`Endpoint::progress`] on the
//! other, or give each endpoint its own thread (endpoints are `Send`).
//!
//! # Async (feature `tokio`)
//!
//! With the `tokio` feature, `AsyncEndpoint` (module `tokio`) wraps an
//! [`Endpoint`] for `async` code: the same operations as futures that
//! resolve to their [`Completion`], shared by any number of tasks, and a
//! stream of completions for operations posted without a future. Idle, it
//! parks on the completion queue's wait fd (tokio's `AsyncFd`, with
//! `fi_trywait`); busy, it polls as [`Endpoint::wait`] does.
//! `AsyncListener` and `AsyncConnection` do the same for connections.
//!
//! # Example
//!
//! ```
//! use fabric::prelude::*;
//!
//! # fn main() -> fabric::Result<()> {
//! let Ok(mut infos) = Hints::new()
//!     .caps(Caps::MSG)
//!     .ep_type(EpType::Rdm)
//!     .provider("tcp")
//!     .node("127.0.0.1")
//!     .source()
//!     .getinfo()
//! else {
//!     return Ok(()); // tcp is not compiled in
//! };
//! let domain = safe::Domain::open(&infos.remove(0))?;
//! let mut server: safe::Endpoint = domain.endpoint()?;
//! let mut client: safe::Endpoint = domain.endpoint()?;
//! let to_server = client.insert(&server.name()?)?;
//!
//! let posted = server.recv(vec![0; 64])?;
//! let sent = client.send(to_server, b"ping".to_vec())?;
//! // One thread drives both endpoints.
//! let done = loop {
//!     client.progress()?;
//!     if let Some(c) = server.try_take(posted)? {
//!         break c.check()?;
//!     }
//! };
//! assert_eq!(done.received(), Some(&b"ping"[..]));
//! assert_eq!(done.into_buf().map(|b| b.len()), Some(64)); // the buffer came back
//! client.wait_for(sent)?.check()?;
//! # Ok(())
//! # }
//! ```

mod atomic;
mod buf;
mod completion;
mod conn;
mod endpoint;
#[cfg(feature = "tokio")]
pub mod tokio;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fabric_core::objects::{self, IoVec, MrAccess, MrAttr};
use fabric_core::{Error, Info, MrMode, Result};

use crate::registry::Registry;

#[cfg(feature = "tokio")]
pub use self::tokio::{AsyncConnection, AsyncEndpoint, AsyncListener, Completions};
pub use atomic::AtomicValue;
pub use buf::{Exposed, IoBuf, IoBufMut, Registered, Rejected, RemoteKey, RemoteRegion};
pub use completion::{Completion, OpId, OpKind};
pub use conn::{ConnRequest, Connecting, Connection, Listener};
pub use endpoint::Endpoint;

/// What the objects of one domain share: the domain, its fabric (dropped
/// after it), the entry they were opened with and the key counter.
pub(crate) struct Shared {
    domain: Box<dyn objects::Domain>,
    fabric: Box<dyn objects::Fabric>,
    info: Info,
    next_key: AtomicU64,
}

/// An open domain (with its fabric) of one `getinfo` entry: opens
/// endpoints and registers memory.
///
/// Cheap to clone; the domain closes when the last clone, endpoint and
/// registered buffer of it are gone.
#[derive(Clone)]
pub struct Domain {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("provider", &self.shared.info.prov_name())
            .field("domain", &self.shared.domain.attr().name)
            .finish_non_exhaustive()
    }
}

impl Domain {
    /// Opens the fabric and the domain of `info` (an entry of `getinfo`)
    /// through the [global](Registry::global) registry.
    pub fn open(info: &Info) -> Result<Domain> {
        Domain::open_in(Registry::global(), info)
    }

    /// As [`open`](Domain::open), with the providers of `registry`.
    pub fn open_in(registry: &Registry, info: &Info) -> Result<Domain> {
        let fabric = registry.fabric(info)?;
        let domain = fabric
            .domain(info)
            .map_err(|e| Error::new(e.kind(), format!("opening the domain: {}", e.detail())))?;
        Ok(Domain {
            shared: Arc::new(Shared {
                domain,
                fabric,
                info: info.clone(),
                next_key: AtomicU64::new(1),
            }),
        })
    }

    /// The entry the domain was opened with.
    pub fn info(&self) -> &Info {
        &self.shared.info
    }

    /// The domain object, for the zero-copy API.
    pub fn raw(&self) -> &dyn objects::Domain {
        self.shared.domain.as_ref()
    }

    /// The fabric object.
    pub fn raw_fabric(&self) -> &dyn objects::Fabric {
        self.shared.fabric.as_ref()
    }

    /// Opens an endpoint of the domain's entry with its own completion
    /// queue and (RDM, DGRAM) address vector, bound and enabled. `B` is the
    /// type of the buffers its operations own (`Vec<u8>` by default).
    ///
    /// For RDM and DGRAM entries; connected (MSG) endpoints come from
    /// [`listen`](Domain::listen) and [`connect`](Domain::connect).
    pub fn endpoint<B: IoBufMut>(&self) -> Result<Endpoint<B>> {
        Endpoint::open(self.shared.clone())
    }

    /// Registers `buf` for local use by operations (needed when the domain
    /// has `FI_MR_LOCAL`, as verbs does). The buffer is handed back on
    /// failure.
    pub fn register<B: IoBufMut>(&self, buf: B) -> std::result::Result<Registered<B>, Rejected<B>> {
        let access = MrAccess::SEND | MrAccess::RECV | MrAccess::READ | MrAccess::WRITE;
        let mut buf = buf;
        match self.mr_reg(&mut buf, access) {
            Ok((mr, _)) => Ok(Registered::new(mr, buf, self.shared.clone())),
            Err(error) => Err(Rejected::new(error, Some(buf))),
        }
    }

    /// Registers `buf` for remote access by peers: `access` holds
    /// `MrAccess::REMOTE_READ` and / or `MrAccess::REMOTE_WRITE` (the
    /// local rights are added). Send [`Exposed::region`] to the peers that
    /// should reach it. The buffer is handed back on failure.
    ///
    /// ```
    /// use fabric::prelude::*;
    ///
    /// # fn main() -> fabric::Result<()> {
    /// # let Ok(mut infos) = Hints::new().caps(Caps::RMA).ep_type(EpType::Rdm)
    /// #     .provider("tcp").node("127.0.0.1").source().getinfo() else { return Ok(()) };
    /// let domain = safe::Domain::open(&infos.remove(0))?;
    /// let mut target: safe::Endpoint = domain.endpoint()?;
    /// let mut initiator: safe::Endpoint = domain.endpoint()?;
    /// let peer = initiator.insert(&target.name()?)?;
    ///
    /// let window = domain.expose(vec![0u8; 1024], MrAccess::REMOTE_WRITE)?;
    /// let region = window.region(); // what the target would send over
    /// let put = initiator.write(peer, vec![7; 16], &region.slice(512..)?)?;
    /// loop {
    ///     target.progress()?; // manual progress: the target's side moves too
    ///     if let Some(c) = initiator.try_take(put)? {
    ///         c.check()?;
    ///         break;
    ///     }
    /// }
    /// let bytes = window.revoke(); // peers can no longer write: look at it
    /// assert_eq!(&bytes[512..528], &[7; 16]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn expose<B: IoBufMut>(
        &self,
        buf: B,
        access: MrAccess,
    ) -> std::result::Result<Exposed<B>, Rejected<B>> {
        let remote = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
        if !access.intersects(remote) || !remote.contains(access) {
            return Err(Rejected::new(
                Error::inval(format!(
                    "expose takes REMOTE_READ and / or REMOTE_WRITE access, not {access:?}"
                )),
                Some(buf),
            ));
        }
        let local = MrAccess::SEND | MrAccess::RECV | MrAccess::READ | MrAccess::WRITE;
        let mut buf = buf;
        match self.mr_reg(&mut buf, access | local) {
            Ok((mr, start)) => {
                let mode = self.shared.info.domain_attr.mr_mode;
                let addr = if mode.intersects(MrMode::VIRT_ADDR | MrMode::BASIC) {
                    start
                } else {
                    0
                };
                let region = RemoteRegion {
                    addr,
                    len: buf.bytes_len() as u64,
                    key: RemoteKey(mr.key()),
                };
                Ok(Exposed::new(mr, buf, region, access, self.shared.clone()))
            }
            Err(error) => Err(Rejected::new(error, Some(buf))),
        }
    }

    /// Registers the bytes of `buf`; returns the region and the buffer's
    /// start address.
    fn mr_reg<B: IoBufMut>(
        &self,
        buf: &mut B,
        access: MrAccess,
    ) -> Result<(Box<dyn objects::MemoryRegion>, u64)> {
        let len = buf.bytes_len();
        if len == 0 {
            return Err(Error::inval("cannot register an empty buffer"));
        }
        let addr = buf.stable_mut_ptr();
        let iov = [IoVec { addr, len }];
        let requested_key = self.shared.next_key.fetch_add(1, Ordering::Relaxed);
        let attr = MrAttr {
            iov: &iov,
            access,
            offset: 0,
            requested_key,
            context: 0,
        };
        // SAFETY: the buffer's bytes stay allocated at this address while the
        // value lives, even when it moves (the `IoBufMut` contract), and the
        // region is stored next to the buffer in `Registered` / `Exposed`,
        // which drop the region first. While remote access is granted the
        // bytes are not reachable through a Rust reference: `Exposed` hands
        // out none while peers may write.
        let mr = unsafe { self.shared.domain.mr_reg(&attr) }.map_err(|e| {
            Error::new(
                e.kind(),
                format!("registering {len} bytes of memory: {}", e.detail()),
            )
        })?;
        Ok((mr, addr as u64))
    }
}
