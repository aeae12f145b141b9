//! A native Rust fabric interface in the libfabric (OFI) model.
//!
//! An application asks [`getinfo`] how it can reach a peer with the
//! capabilities it needs, gets a list of [`Info`] entries back, fastest
//! first, and opens the fabric, domain and endpoints of the entry it picks
//! through its provider.
//!
//! Providers are chosen at build time with Cargo features: `tcp` and `shm`
//! (on by default) and `verbs` (needs rdma-core), and at run time with the
//! `FI_PROVIDER` variable (`tcp,shm`, or `^tcp` to exclude), as in
//! libfabric.
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
//! Everything of [`fabric_core`] is re-exported: the `Info` model, the
//! flag sets and enumerations, [`Error`] with its `FI_E*` kinds, addresses,
//! the matching rules and the object traits.

mod hints;
mod registry;

pub use fabric_core::*;
pub use hints::Hints;
pub use registry::{ENV_VARS, Registry, getinfo};
