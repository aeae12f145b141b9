//! The verbs provider: RDMA through rdma-core (libibverbs, librdmacm).
//!
//! Implemented:
//! - **getinfo** ([`getinfo`]): one entry per active RDMA port address and
//!   endpoint type (MSG, RDM): fabric = the IP subnet, domain = the device
//!   (`rxe0`, `mlx5_0`); attributes from the device's limits
//!   (`ibv_query_device`, `ibv_query_port`); node / service through
//!   `rdma_getaddrinfo`; every hint rule of `fabric_core::matching`. No
//!   rdma-core or no device: no entries, and a `tracing` debug line.
//! - **MSG endpoints** ([`MsgEndpoint`]) on RC queue pairs with rdma_cm:
//!   passive endpoints, connect / accept / reject with private data (up to
//!   54 bytes), shutdown; send / receive (inline up to the QP's inline
//!   size), inject, remote CQ data (the 32-bit immediate), RMA read /
//!   write / writedata, atomics (64-bit fetch-add, compare-swap, read),
//!   FI_FENCE, selective completion, counters. Posting is the work request
//!   itself: one `ibv_post_send` through the driver's ops table, under the
//!   ring's spin lock (one compare-and-swap to take, a store to release,
//!   as rdma-core's providers lock their queues), with no allocation. A CQ
//!   holds the queue pairs whose completions it routes until their
//!   endpoint closes.
//! - **RDM endpoints** ([`RdmEndpoint`]): reliable unconnected messaging
//!   over RC connections made on demand (see the `ep::rdm` module docs for
//!   the protocol): messages and tagged messages (unexpected queue,
//!   directed receive, FI_PEEK / FI_CLAIM / FI_DISCARD, cancel), eager
//!   copies up to 8 KiB and rendezvous with one RDMA read beyond, FI_SOURCE,
//!   RMA and atomics, FI_FENCE (kept by the provider: a fenced operation
//!   waits for the earlier ones to the same peer, rendezvous included), no
//!   FI_MR_LOCAL: applications written for tcp / shm run unchanged.
//! - **Shared receive contexts** ([`VerbsSrx`], `fi_srx_context`) for RDM
//!   endpoints, in software: the bound endpoints feed one receive engine
//!   (posted receives, unexpected messages and their budget), each keeping
//!   its own receive buffers, connections and CQ; a receive completes on
//!   the CQ of the endpoint its message arrived at. No verbs SRQ is shared.
//! - **CQs** ([`VerbsCq`]) read the hardware CQ straight into the caller's
//!   array; blocking reads and `wait_fd` use the completion channel, armed
//!   only when a reader is about to sleep. **EQs**, counters and AVs are
//!   the kit's (`fabric_core::kit`).
//!
//! - **DGRAM endpoints** ([`DgramEndpoint`]) on UD queue pairs: datagrams
//!   up to the port's MTU (less a 28-byte sender name), `FI_ADDR_IB_UD`
//!   addresses and an AV of address handles, FI_SOURCE, remote CQ data.
//!
//! - **FI_MULTI_RECV on MSG**, zero copy: the registered buffer's unused
//!   rest is posted as one receive; after each message the rest is posted
//!   again while at least `FI_OPT_MIN_MULTI_RECV` bytes remain (the RC
//!   queue pair's RNR retries hold the sender meanwhile), else the buffer
//!   is released (FI_MULTI_RECV on that completion). Receives posted
//!   behind it are held by the provider until then, so messages take
//!   receives in posting order; `fi_cancel` cancels those (`FI_ECANCELED`,
//!   once). A receive already in the NIC's receive queue cannot be taken
//!   back (verbs has no such call): its cancel is `FI_EOPNOTSUPP`, and it
//!   completes, or is flushed (`FI_ECANCELED`) when the connection ends.
//!
//! Not implemented: FI_MULTI_RECV on DGRAM endpoints, shared contexts,
//! scalable endpoints, auto progress for RDM and DGRAM.
//!
//! # Rooms
//!
//! `getinfo` (offers, node / service), `domain` (fabric, domain, MR), `cq`,
//! `ep/` (`msg`, `dgram`, `passive`, and `rdm/` split into `wire`, `conn`,
//! `rx`, `api`), and `raw/`, the one unsafe gateway: the only module that
//! imports `fabric_sys` or holds `unsafe` (the crate denies it elsewhere,
//! but for the `unsafe` methods of the object traits, which only hand the
//! caller's buffers to `raw::mem`). Endpoints build work requests with
//! `raw::wr`'s typed builders (scatter lists and requests on the stack)
//! and post them through the queue pair's owner.
//!
//! # Memory registration
//!
//! MSG entries need `FI_MR_LOCAL` (descriptors carry the local key; sends
//! of up to 64 bytes without one are copied) with `FI_MR_VIRT_ADDR`,
//! `FI_MR_PROV_KEY` and `FI_MR_ALLOCATED`: remote addresses are virtual
//! addresses and keys are the device's 32-bit remote keys. RMA writes with
//! remote CQ data consume a posted receive at the target, so MSG entries
//! ask for `FI_RX_CQ_DATA` when the hints accept it (else such writes are
//! refused with `FI_EOPNOTSUPP`). RDM entries need no `FI_MR_LOCAL`.
//!
//! # Errors
//!
//! Full queues return `FI_EAGAIN`. A work request that fails (a bad remote
//! key, a broken connection, a receive too small) becomes an error
//! completion whose provider text is the verbs status
//! (`ibv_wc_status_str`), e.g. `verbs: remote access error (status 10,
//! vendor error 0x0)` with `FI_EACCES`; a queue pair in the error state
//! flushes everything pending with `FI_ECANCELED`.
//!
//! # Running the tests on a real RDMA NIC
//!
//! The integration tests (`tests/msg.rs`, `tests/rdm.rs`) use one active
//! port and only its own address (loopback through the NIC). Without a
//! device they print a notice and pass; to make a missing device a failure
//! (as the soft-RoCE rig does):
//!
//! ```text
//! FABRIC_VERBS_REQUIRE_DEVICE=1 cargo test -p prov-verbs
//! FI_VERBS_DEVICE_NAME=mlx5_0 FABRIC_VERBS_REQUIRE_DEVICE=1 cargo test -p prov-verbs
//! ```
//!
//! Soft-RoCE works the same way on a kernel with `rdma_rxe`
//! (`rdma link add rxe0 type rxe netdev eth0`); machines without it use
//! `cargo xtask rxe`, which runs them in a QEMU guest.
//!
//! # Example
//!
//! ```
//! use fabric_core::matching::Request;
//! use fabric_core::objects::Provider;
//! use fabric_core::{Caps, EpType, Info, Version};
//! use prov_verbs::VerbsProvider;
//!
//! let mut hints = Info::default();
//! hints.caps = Caps::TAGGED;
//! hints.ep_attr.ep_type = EpType::Rdm;
//! let req = Request {
//!     hints: Some(&hints),
//!     ..Request::new(Version::CURRENT)
//! };
//! // Empty on a machine without RDMA devices.
//! for info in VerbsProvider.getinfo(&req).unwrap_or_default() {
//!     println!("{} on {:?}", info.ep_attr.ep_type, info.domain_attr.name);
//! }
//! ```
#![warn(missing_docs)]
// `unsafe` lives in `raw`, the gateway to rdma-core and to callers'
// buffers; elsewhere only the `unsafe` methods of the object traits
// (whose contract is the caller's promise) are allowed, one by one.
#![deny(unsafe_code)]

mod cq;
mod domain;
mod ep;
pub mod getinfo;
#[allow(unsafe_code)]
mod raw;

use fabric_core::matching::Request;
use fabric_core::objects::{EnvVar, Fabric, Provider};
use fabric_core::{FabricAttr, Info, Result, Version};

pub use cq::VerbsCq;
pub use domain::{VerbsDomain, VerbsFabric, VerbsMr};
pub use ep::dgram::DgramEndpoint;
pub use ep::msg::MsgEndpoint;
pub use ep::passive::VerbsPassiveEndpoint;
pub use ep::rdm::{RdmEndpoint, VerbsSrx};

/// The verbs provider.
#[derive(Debug, Default, Clone, Copy)]
pub struct VerbsProvider;

impl Provider for VerbsProvider {
    fn name(&self) -> &'static str {
        getinfo::NAME
    }

    fn version(&self) -> Version {
        getinfo::VERSION
    }

    /// Hardware RDMA ranks first.
    fn rank(&self) -> u8 {
        10
    }

    fn getinfo(&self, req: &Request<'_>) -> Result<Vec<Info>> {
        let dev = std::env::var("FI_VERBS_DEVICE_NAME")
            .ok()
            .filter(|s| !s.is_empty());
        let iface = std::env::var("FI_VERBS_IFACE")
            .ok()
            .filter(|s| !s.is_empty());
        let ports = getinfo::discover(dev.as_deref(), iface.as_deref());
        getinfo::getinfo(req, &ports)
    }

    fn fabric(&self, attr: &FabricAttr) -> Result<Box<dyn Fabric>> {
        Ok(Box::new(VerbsFabric::new(attr)))
    }

    fn env_vars(&self) -> &'static [EnvVar] {
        getinfo::ENV_VARS
    }
}
