//! The tcp provider: reliable messaging over TCP sockets.
//!
//! Implemented: `getinfo` (one entry per usable IP interface and endpoint
//! type: fabric = the subnet, domain = the interface, loopback last and
//! local-only; `FI_TCP_IFACE`); MSG endpoints (passive endpoint, connect /
//! accept / reject with private data, shutdown) and RDM endpoints
//! (connections made on demand, one per pair of endpoints); messages and
//! tagged messages (send, inject, remote CQ data, FI_PEEK / FI_CLAIM /
//! FI_DISCARD, directed receive, cancel, FI_MULTI_RECV); RMA read / write /
//! writedata / inject_write; atomics; FI_TRANSMIT_COMPLETE,
//! FI_DELIVERY_COMPLETE, FI_FENCE, selective completion; CQs, EQs,
//! counters (send, recv, read, write, remote read, remote write), AVs,
//! memory registration; manual progress (CQ, counter and EQ reads) or an
//! auto-progress thread per domain. `getinfo` offers exactly this
//! ([`getinfo::RDM_CAPS`], [`getinfo::MSG_CAPS`]).
//!
//! Layout (the same rooms as the other providers):
//! - [`getinfo`]: what the provider offers and how it resolves addresses;
//!   `limits`: the sizes and thresholds getinfo and the endpoints share;
//! - `domain`: fabric, domain, memory registration;
//! - `ep`: endpoints, split by side: `core` (state, frame dispatch,
//!   progress), `tx` (sending, initiator side of RMA and atomics), `rx`
//!   (reading, messages into the kit's receive engine), `rma` (target side
//!   of RMA and atomics), `conn_state` and `conns` (connections and their
//!   failure), `rdm` / `msg` / `passive` (how connections are made);
//! - `conn`: one connection (send queue, receive state, where a payload
//!   goes), `atomic` (the kit's atomics with tcp's limits), `backoff`;
//! - `progress`: a domain's engine and epoll set;
//! - [`wire`]: the versioned protocol codec (documented below);
//! - `sys` and `conn`: the only modules allowed `unsafe` (socket calls;
//!   copies into and out of callers' buffers and registered memory).
//!
//! How it works (connections, the data path, RMA and atomics, completion
//! semantics, the wire protocol and its limits) is in [`docs`].
#![warn(missing_docs)]
// Safe Rust everywhere but at the gateways: `sys` (the socket calls) and
// `conn` (copies into and out of the callers' buffers and registered
// memory, sends straight from them); besides, the zero-copy operations
// and `mr_reg` are `unsafe fn`s of the object traits, implemented in `ep`
// and `domain` with an `allow` on those items only.
#![deny(unsafe_code)]

mod atomic;
mod backoff;
#[allow(unsafe_code)]
mod conn;
pub mod docs;
mod domain;
mod ep;
pub mod getinfo;
mod limits;
mod progress;
#[allow(unsafe_code)]
mod sys;
pub mod wire;

use fabric_core::matching::Request;
use fabric_core::objects::{EnvVar, Fabric, Provider};
use fabric_core::{FabricAttr, Info, Result, Version};

pub use domain::{TcpDomain, TcpFabric, TcpMr};
pub use ep::passive::TcpPassiveEndpoint;
pub use ep::srx::TcpSrx;
pub use ep::{RdmEndpoint, TcpEndpoint};

/// The tcp provider.
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpProvider;

impl Provider for TcpProvider {
    fn name(&self) -> &'static str {
        getinfo::NAME
    }

    fn version(&self) -> Version {
        getinfo::VERSION
    }

    fn rank(&self) -> u8 {
        30
    }

    fn getinfo(&self, req: &Request<'_>) -> Result<Vec<Info>> {
        let only = std::env::var("FI_TCP_IFACE").ok().filter(|s| !s.is_empty());
        getinfo::getinfo(req, &getinfo::interfaces(only.as_deref()))
    }

    fn fabric(&self, attr: &FabricAttr) -> Result<Box<dyn Fabric>> {
        Ok(Box::new(TcpFabric::new(attr)))
    }

    fn env_vars(&self) -> &'static [EnvVar] {
        getinfo::ENV_VARS
    }
}
