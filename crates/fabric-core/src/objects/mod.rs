//! The object model every provider implements: the contract.
//!
//! `Info -> Fabric -> Domain -> {Endpoint, PassiveEndpoint, Cq, Eq, Av, Mr,
//! Cntr}`. A provider crate implements these traits for its concrete types;
//! it is usable through them (`Box<dyn Domain>`), or directly through its
//! own types. Objects are `Send + Sync`: the threading level of the domain
//! says what the application may do concurrently, not what compiles.
//!
//! # Rules every implementation keeps
//!
//! - **Hot path.** A data operation (send, inject, tagged send, recv, RMA,
//!   atomic, CQ read) is one call through the trait object (the endpoint
//!   traits are supertraits of [`Endpoint`], so one vtable), allocates
//!   nothing, takes no lock that is uncontended in the common case, and
//!   makes the fewest system calls the transport allows.
//! - **Full queues** return `Err` with [`ErrorKind::Again`]: never block,
//!   never drop. An operation that returned `Ok` is never lost: it
//!   completes, successfully or with an error completion.
//! - **Contexts** are a `u64` chosen by the application (like io_uring's
//!   `user_data`) and come back unchanged in the completion.
//! - **Progress** is driven by reading the CQ (manual progress) unless the
//!   domain was opened with FI_PROGRESS_AUTO.
//! - **Binding** takes objects of the same provider: a provider downcasts
//!   through [`AsAny`] and returns `Inval` for a foreign object.
//! - Unsupported operations return [`ErrorKind::OpNotSupp`] (the default
//!   bodies of the operation traits).
//!
//! [`ErrorKind::Again`]: crate::ErrorKind::Again
//! [`ErrorKind::OpNotSupp`]: crate::ErrorKind::OpNotSupp

mod endpoint;
mod queues;
mod resources;

pub use endpoint::*;
pub use queues::*;
pub use resources::*;

use std::any::Any;

use crate::attr::{DomainAttr, FabricAttr, RxAttr};
use crate::error::Result;
use crate::info::Info;
use crate::matching::Request;
use crate::version::Version;

/// Access to the concrete type behind a trait object, for binding.
pub trait AsAny: Any {
    /// `self` as `&dyn Any`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A provider: a way to move data (tcp, shm, verbs).
pub trait Provider: Send + Sync + 'static {
    /// The name users select it by (`FI_PROVIDER`, `prov_name`).
    fn name(&self) -> &'static str;

    /// The provider's version (`fabric_attr.prov_version`).
    fn version(&self) -> Version;

    /// Where it ranks when results are ordered fastest first: lower is
    /// faster (hardware RDMA before shared memory before sockets).
    fn rank(&self) -> u8;

    /// Answers a validated request ([`Request::validate`] has passed and the
    /// provider filters selected this provider): every way this provider
    /// can serve it, best first, built with
    /// [`matching::select`](crate::matching::select). `NoData` with the
    /// reason when it cannot. The registry stamps `prov_name`,
    /// `prov_version` and `api_version`.
    fn getinfo(&self, req: &Request<'_>) -> Result<Vec<Info>>;

    /// Opens the fabric an entry of [`getinfo`](Provider::getinfo) names.
    fn fabric(&self, attr: &FabricAttr) -> Result<Box<dyn Fabric>>;

    /// The environment variables the provider reads (for `fabric info -e`).
    fn env_vars(&self) -> &'static [EnvVar] {
        &[]
    }
}

/// An environment variable the library reads, as `fi_info -e` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// Its name (`FI_PROVIDER`).
    pub name: &'static str,
    /// Its type, as fi_info prints it (`String`, `Integer`, `Boolean`).
    pub kind: &'static str,
    /// What it does.
    pub help: &'static str,
}

/// A fabric: the top of a provider's object tree (`fi_fabric`).
pub trait Fabric: AsAny + Send + Sync {
    /// The fabric's attributes.
    fn attr(&self) -> &FabricAttr;

    /// Opens a domain for an entry of `getinfo` (`fi_domain`).
    fn domain(&self, info: &Info) -> Result<Box<dyn Domain>>;

    /// Opens a passive (listening) endpoint for a MSG entry
    /// (`fi_passive_ep`).
    fn passive_endpoint(&self, info: &Info) -> Result<Box<dyn PassiveEndpoint>>;

    /// Opens an event queue (`fi_eq_open`).
    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EventQueue>>;
}

/// A domain: one NIC / interface / shared-memory node (`fi_domain`).
pub trait Domain: AsAny + Send + Sync {
    /// The domain's attributes as opened.
    fn attr(&self) -> &DomainAttr;

    /// Opens an active endpoint (`fi_endpoint`); `info.handle` set to a
    /// connection request accepts that request's connection.
    fn endpoint(&self, info: &Info) -> Result<Box<dyn Endpoint>>;

    /// Opens a completion queue (`fi_cq_open`).
    fn cq(&self, attr: &CqAttr) -> Result<Box<dyn CompletionQueue>>;

    /// Opens an address vector (`fi_av_open`).
    fn av(&self, attr: &AvAttr) -> Result<Box<dyn AddressVector>>;

    /// Opens a counter (`fi_cntr_open`).
    fn cntr(&self, attr: &CntrAttr) -> Result<Box<dyn Counter>>;

    /// Registers memory (`fi_mr_regattr`).
    ///
    /// # Safety
    ///
    /// The memory of `attr.iov` must stay valid (allocated, and not moved)
    /// until the returned region is dropped, and while remote access is
    /// granted the application must expect remote peers to read or write
    /// it at any time.
    unsafe fn mr_reg(&self, attr: &MrAttr) -> Result<Box<dyn MemoryRegion>>;

    /// Opens a shared receive context (`fi_srx_context`) for endpoints
    /// opened with `ep_attr.rx_ctx_cnt` =
    /// [`SHARED_CONTEXT`](crate::attr::SHARED_CONTEXT); getinfo says a
    /// provider has them with `domain_attr.max_ep_srx_ctx > 0`. `NoSys`
    /// from providers without them.
    fn srx_context(&self, attr: &RxAttr) -> Result<Box<dyn SharedRx>> {
        let _ = attr;
        Err(crate::Error::new(
            crate::ErrorKind::NoSys,
            "this provider has no shared receive contexts",
        ))
    }

    /// Whether the domain's endpoints (those opened with `FI_ATOMIC`)
    /// support `op` on `datatype` as a plain atomic, a fetching one
    /// (`fetch`) or a comparing one (`compare`), and how many elements
    /// one operation may carry: `fi_query_atomic`, the domain's form of
    /// [`AtomicOps::atomic_valid`]. `OpNotSupp` when they do not.
    fn query_atomic(
        &self,
        datatype: Datatype,
        op: AtomicOp,
        fetch: bool,
        compare: bool,
    ) -> Result<usize> {
        let _ = (datatype, op, fetch, compare);
        Err(crate::Error::new(
            crate::ErrorKind::OpNotSupp,
            "this provider has no atomic operations",
        ))
    }
}
