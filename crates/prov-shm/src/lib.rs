//! The shm provider: RDM endpoints between processes of one node, over
//! named shared-memory regions, near memory speed.
//!
//! [`ShmProvider`] implements [`fabric_core::Provider`] (name `shm`,
//! ranked above tcp for local communication); the `fabric` facade
//! registers it with the `shm` feature. Each endpoint owns a region
//! (`/dev/shm/fabric-shm-...`, mode 0600) holding its inbound command
//! ring and bounce buffers; its address is `fi_shm://<region name>`
//! (FI_ADDR_STR), and peers find each other through the AV by that name.
//!
//! Offered ([`getinfo`]): messages and tagged messages (send, sendv,
//! sendmsg, inject, senddata, injectdata; FI_PEEK, FI_CLAIM, FI_DISCARD,
//! directed receive, cancel, FI_MULTI_RECV), RMA read / write / writedata
//! / inject_write checked at the target against its memory regions,
//! atomics executed by the target ([`fabric_core::kit::atomic`]), remote
//! CQ data, every CQ format with readfrom / readerr / sread (the CQ's wait
//! fd and the regions' inotify fd), counters, AV map or table, FI_FENCE,
//! FI_DELIVERY_COMPLETE, selective completion; manual progress by default,
//! a progress thread with FI_PROGRESS_AUTO.
//!
//! ```
//! use fabric_core::objects::{
//!     AvAttr, Bind, CqAttr, CqEntry, FiAddr, IoVec, Msg, Provider, WaitObj,
//! };
//! use fabric_core::{EpType, Info, OpFlags, Request, Version};
//! use prov_shm::ShmProvider;
//! # fn main() -> fabric_core::Result<()> {
//! let mut hints = Info::default();
//! hints.ep_attr.ep_type = EpType::Rdm;
//! let req = Request { hints: Some(&hints), ..Request::new(Version::CURRENT) };
//! let info = ShmProvider.getinfo(&req)?.remove(0);
//! let fabric = ShmProvider.fabric(&info.fabric_attr)?;
//! let domain = fabric.domain(&info)?;
//! let cq = domain.cq(&CqAttr { wait_obj: WaitObj::Unspec, ..CqAttr::default() })?;
//! let av = domain.av(&AvAttr::default())?;
//! let ep = domain.endpoint(&info)?;
//! ep.bind(Bind::Cq { cq: cq.as_ref(), transmit: true, recv: true, selective: false })?;
//! ep.bind(Bind::Av(av.as_ref()))?;
//! ep.enable()?;
//! // Tell the peer `ep.getname()?` (a string); insert the peer's name:
//! let peer_name = ep.getname()?; // here: talk to ourselves
//! let mut peer = [FiAddr(0)];
//! av.insert(&[peer_name], &mut peer)?;
//! let mut buf = [0u8; 5];
//! let iov = [IoVec { addr: buf.as_mut_ptr(), len: buf.len() }];
//! let msg = Msg { iov: &iov, desc: &[], addr: FiAddr::UNSPEC, tag: 0, ignore: 0, context: 1, data: 0 };
//! // SAFETY: `buf` outlives the receive: its completion is read below.
//! unsafe { ep.recvmsg(&msg, OpFlags::empty())? };
//! ep.inject(b"hello", peer[0], None)?;
//! let mut done = [CqEntry::default()];
//! cq.sread(&mut done, None)?;
//! assert_eq!(&buf, b"hello");
//! # Ok(()) }
//! ```
//!
//!
//! How it works (protocols, thresholds, the command table, the region
//! layout, the ring, waiting, flow control and safety) is in [`docs`].

// `unsafe` only in the gateways: the modules that touch raw memory or
// make system calls, each block with its reason (see [`docs`], "Safety").
#![deny(unsafe_code)]

// Cross-memory attach (process_vm_readv / writev).
#[allow(unsafe_code)]
pub mod cma;
mod cntr;
mod config;
pub mod docs;
// `mr_reg` is an `unsafe` method of the Domain trait (the region's
// memory contract).
#[allow(unsafe_code)]
mod domain;
// The endpoints' zero-copy operations: `unsafe` methods of the endpoint
// traits and the copies into and out of the caller's buffers they allow
// (narrowed to the modules that make them in `ep`).
mod ep;
pub mod getinfo;
// Callers' buffers by address (iovec pieces).
#[allow(unsafe_code)]
mod pieces;
pub mod progress;
// The shared-memory regions (mappings, atomics and volatile copies).
#[allow(unsafe_code)]
pub mod region;
// The command ring and its bounce buffers in a region.
#[allow(unsafe_code)]
pub mod ring;
// The engine's system calls (inotify, eventfd, timerfd, poll).
#[allow(unsafe_code)]
mod sys;
mod wire;

use fabric_core::matching::Request;
use fabric_core::objects::{EnvVar, Fabric, Provider};
use fabric_core::{FabricAttr, Info, Result, Version};

pub use domain::{ShmCntr, ShmDomain, ShmFabric, ShmMr};

/// Entry points for the fuzz targets (`fuzz/fuzz_targets/shm_desc.rs`):
/// the decoders of command payloads that a peer process writes. Not part
/// of the provider's interface.
#[doc(hidden)]
pub mod fuzzing {
    use crate::wire::{DESC_MAX, Desc, decode_iovs};

    /// Decodes `bytes` as an RMA / atomic descriptor and as an RTS iovec
    /// list. Panics only if a descriptor that decodes does not encode back
    /// to the bytes it came from (the property the target checks).
    pub fn descriptor_round_trip(bytes: &[u8]) {
        let bytes = &bytes[..bytes.len().min(DESC_MAX)];
        if let Some(d) = Desc::decode(bytes) {
            let mut out = [0u8; DESC_MAX];
            let n = d.encode(&mut out);
            assert!(n <= bytes.len(), "encoded longer than decoded");
            assert_eq!(&out[..n], &bytes[..n], "descriptor does not round-trip");
            assert_eq!(
                Desc::decode(&out[..n]).map(|e| e.encode(&mut [0u8; DESC_MAX])),
                Some(n)
            );
        }
        if let Some((iovs, n)) = decode_iovs(bytes) {
            assert!(n >= 1 && n <= iovs.len());
        }
    }
}
pub use ep::ShmEndpoint;
pub use ep::srx::ShmSrx;

/// The shm provider.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShmProvider;

impl Provider for ShmProvider {
    fn name(&self) -> &'static str {
        getinfo::NAME
    }

    fn version(&self) -> Version {
        getinfo::VERSION
    }

    /// 20: below hardware RDMA, above sockets (tcp is 30).
    fn rank(&self) -> u8 {
        20
    }

    fn getinfo(&self, req: &Request<'_>) -> Result<Vec<Info>> {
        getinfo::getinfo(req)
    }

    fn fabric(&self, attr: &FabricAttr) -> Result<Box<dyn Fabric>> {
        Ok(Box::new(ShmFabric::new(attr)))
    }

    fn env_vars(&self) -> &'static [EnvVar] {
        getinfo::ENV_VARS
    }
}
