//! A native Rust fabric interface in the libfabric (OFI) model.
//!
//! An application asks [`getinfo`] (or the [`Hints`] builder) how it can
//! reach a peer with the capabilities it needs, gets a list of [`Info`]
//! entries back, fastest first, and opens the objects of the entry it
//! picks.
//!
//! Providers are chosen at build time with Cargo features: `tcp` and `shm`
//! (on by default) and `verbs` (needs rdma-core), and at run time with the
//! `FI_PROVIDER` variable (`tcp,shm`, or `^tcp` to exclude), as in
//! libfabric.
//!
//! The `tokio` feature (off by default) adds `async` operations and a
//! completion stream on tokio (`safe::AsyncEndpoint`, and for connections
//! `safe::AsyncListener` and `safe::AsyncConnection`, in
//! `fabric::safe::tokio`), which park on the wait fds of the completion
//! and event queues when idle.
//!
//! # From an `Info` to objects
//!
//! There are two ways from an entry to data movement:
//!
//! - **The safe layer**, [`safe`]: [`safe::Domain::open`] opens the fabric
//!   and domain of an entry, [`safe::Domain::endpoint`] an endpoint with its
//!   completion queue and address vector, bound and enabled. Operations take
//!   ownership of their buffers and hand them back with the completion, so
//!   no `unsafe` is needed.
//! - **The object traits** (zero-copy, `unsafe` where a buffer must outlive
//!   the call): [`Registry::fabric`] opens the [`Fabric`] of an entry
//!   (`fi_fabric`), [`Fabric::domain`] its [`Domain`], and the domain opens
//!   the [`Endpoint`], [`CompletionQueue`], [`AddressVector`],
//!   [`Counter`] and registers memory. Bind the endpoint
//!   ([`Endpoint::bind`]) and [`enable`](Endpoint::enable) it before use.
//!
//! ```
//! use fabric::prelude::*;
//!
//! fn main() -> fabric::Result<()> {
//!     // RDM tagged messages over tcp on the loopback interface.
//!     let info = match Hints::new()
//!         .caps(Caps::MSG | Caps::TAGGED)
//!         .ep_type(EpType::Rdm)
//!         .provider("tcp")
//!         .node("127.0.0.1")
//!         .source()
//!         .getinfo()
//!     {
//!         Ok(mut list) => list.remove(0),
//!         // The tcp provider is not compiled in (feature `tcp`).
//!         Err(e) if matches!(e.kind(), ErrorKind::NoSys | ErrorKind::NoData) => return Ok(()),
//!         Err(e) => return Err(e),
//!     };
//!     let domain = safe::Domain::open(&info)?;
//!     let mut client: safe::Endpoint = domain.endpoint()?;
//!     let mut server: safe::Endpoint = domain.endpoint()?;
//!     let to_server = client.insert(&server.name()?)?;
//!
//!     // Each endpoint in its own thread, so each drives its own progress.
//!     let serving = std::thread::spawn(move || -> fabric::Result<Vec<u8>> {
//!         let recv = server.trecv(7, 0, vec![0; 64])?;
//!         let done = server.wait_for(recv)?.check()?;
//!         Ok(done.received().unwrap_or_default().to_vec())
//!     });
//!     let send = client.tsend(to_server, 7, b"hello".to_vec())?;
//!     let sent = client.wait_for(send)?.check()?;
//!     assert_eq!(sent.into_buf(), Some(b"hello".to_vec())); // the buffer is back
//!     let got = serving.join().map_err(|_| Error::new(ErrorKind::Other, "server panicked"))??;
//!     assert_eq!(got, b"hello");
//!     Ok(())
//! }
//! ```
//!
//! Listing what the compiled-in providers offer:
//!
//! ```
//! use fabric::{Caps, EpType, ErrorKind, Hints};
//!
//! match Hints::new().caps(Caps::MSG).ep_type(EpType::Msg).getinfo() {
//!     Ok(infos) => {
//!         for info in &infos {
//!             println!("{info}");
//!         }
//!     }
//!     // NoSys: no provider compiled in. NoData: none matches, and the
//!     // message says why, provider by provider.
//!     Err(e) => assert!(matches!(e.kind(), ErrorKind::NoSys | ErrorKind::NoData), "{e}"),
//! }
//! ```
//!
//! # What is exported
//!
//! The `Info` model, its flag sets and enumerations, [`Error`] with its
//! `FI_E*` kinds, addresses, and the object traits (also as the
//! [`objects`] module) come from `fabric_core`; the building blocks of
//! providers (`fabric_core::kit`, `fabric_core::testing`) do not: provider
//! authors depend on `fabric-core` directly. [`prelude`] holds what most
//! programs need.

mod hints;
mod registry;
pub mod safe;

pub use hints::Hints;
pub use registry::{ENV_VARS, Registry, getinfo};

// The `Info` model: the entry, its attributes, flag sets and enumerations.
pub use fabric_core::{
    AddrFormat, AvType, Caps, CompOrder, DomainAttr, EpAttr, EpType, FabricAttr, GetinfoFlags,
    Handle, Info, Mode, MrMode, MsgOrder, OpFlags, Progress, Protocol, ResourceMgmt, RxAttr,
    SHARED_CONTEXT, Threading, TxAttr,
};
// Addresses, versions, errors.
pub use fabric_core::version::BadVersion;
pub use fabric_core::{Address, SockaddrIb, UnknownName, Version};
pub use fabric_core::{Error, ErrorKind, Result};
// Requests and provider selection, as `Registry` takes them.
pub use fabric_core::matching::ProviderFilter;
pub use fabric_core::{Provider, Request};

/// The object model: the traits every provider implements (fabric, domain,
/// endpoint and its operation groups, CQ, EQ, AV, MR, counter), their
/// attributes, and the types of the zero-copy operations.
pub use fabric_core::objects;
pub use fabric_core::objects::{
    AddressVector, AtomicOp, AtomicOps, AvAttr, Bind, CmOps, CntrAttr, CompletionFlags,
    CompletionQueue, Counter, CqAttr, CqEntry, CqErrEntry, CqFormat, Datatype, Domain, Endpoint,
    EqAttr, EqErrEntry, EqEvent, EventQueue, Fabric, FiAddr, MemoryRegion, MrAccess, MsgOps,
    PassiveEndpoint, RmaIov, RmaOps, TaggedOps, WaitObj,
};

/// What most programs need: `use fabric::prelude::*;`.
///
/// The object traits (so their methods can be called on `Box<dyn …>`
/// objects), [`Info`] with [`Hints`], [`getinfo`] and [`Registry`], the
/// common flag sets and enumerations, [`Error`] / [`Result`], and the
/// [`safe`] layer with its types. The safe layer's `Domain` and `Endpoint`
/// are reached as `safe::Domain` and `safe::Endpoint`, since those names
/// are the object traits here.
pub mod prelude {
    pub use crate::objects::{
        AddressVector, AtomicOp, AtomicOps, AvAttr, Bind, CmOps, CntrAttr, CompletionFlags,
        CompletionQueue, Counter, CqAttr, CqEntry, CqFormat, Domain, Endpoint, EqAttr, EqEvent,
        EventQueue, Fabric, FiAddr, MemoryRegion, MrAccess, MsgOps, PassiveEndpoint, RmaOps,
        TaggedOps, WaitObj,
    };
    pub use crate::safe::{
        self, AtomicValue, Completion, Exposed, IoBuf, IoBufMut, OpId, OpKind, Registered,
        Rejected, RemoteRegion,
    };
    pub use crate::{
        AddrFormat, Address, Caps, EpType, Error, ErrorKind, GetinfoFlags, Hints, Info, Mode,
        MrMode, OpFlags, Progress, Registry, Result, Threading, Version, getinfo,
    };
}
