//! The types, rules and contracts of a fabric interface in the libfabric
//! (OFI) model, with no IO but name resolution.
//!
//! - [`Info`] and its attributes ([`TxAttr`], [`RxAttr`], [`EpAttr`],
//!   [`DomainAttr`], [`FabricAttr`]): libfabric 1.17's `fi_info`, field for
//!   field; flag sets ([`Caps`], [`Mode`], [`MrMode`], [`MsgOrder`],
//!   [`CompOrder`], [`OpFlags`], [`GetinfoFlags`]) with libfabric's bit
//!   values; enumerations ([`EpType`], [`Protocol`], [`Threading`],
//!   [`Progress`], [`ResourceMgmt`], [`AvType`], [`AddrFormat`]).
//! - [`Address`]: socket and string addresses, with a strict parser.
//! - [`matching`]: the getinfo rules of fi_getinfo(3) as pure functions.
//! - [`objects`]: the [`Provider`] trait and the object traits every
//!   provider implements (fabric, domain, endpoint, CQ, EQ, AV, MR,
//!   counter).
//! - [`Error`]: one error type whose kinds are the `FI_E*` codes.
//! - [`kit`]: transport-independent building blocks of providers (CQ core,
//!   spin-then-block wait, counters, tag matching, MR key and AV tables).
//!
//! Applications use the `fabric` crate, which re-exports this one and adds
//! the registry of providers. This crate is for provider authors and for
//! code that works with `Info` values directly.
//!
//! # Offers and answers: libfabric's view
//!
//! A provider describes what it can do as *offers*; [`matching::alter`]
//! turns an offer into an *answer*, which describes one endpoint and is
//! what `getinfo` returns. Answers are what libfabric 1.17's consumers
//! (its own tests, MPI, `fi_info`) expect, so the Rust API, `fabric info`,
//! its JSON and the C library all show the same thing:
//!
//! - `caps` hold only primary and secondary capabilities; `tx_attr.caps`,
//!   `rx_attr.caps` and `domain_attr.caps` only the bits of their class
//!   ([`Caps::TX`], [`Caps::RX`], [`Caps::DOMAIN`]), within `caps`.
//!   kfabric's capabilities ([`Caps::KFI`]: INJECT, REMOTE_CQ_DATA,
//!   CANCEL, operation flags in libfabric) appear only when the hints ask
//!   for them, the kfabric view for Rust users who want it; the C library
//!   answers such hints with `FI_ENODATA`, as libfabric does.
//! - `op_flags` of an offer list the default flags the provider accepts;
//!   those of an answer are the endpoint's defaults: the hints', copied as
//!   they are (none without hints), used by the short forms of the
//!   operations ([`objects::Endpoint::info`]).
//! - `msg_order` is the order in which one peer's transport headers are
//!   processed; data ordering is `ep_attr.max_order_raw/war/waw_size`
//!   (fi_endpoint(3)).
//! - `mr_mode` never shows the legacy FI_MR_BASIC / FI_MR_SCALABLE bits an
//!   offer lists to say it serves them, unless the hints use them or the
//!   API is older than 1.5; so an answer fed back as hints matches again.
//!
//! # Example: does an offer serve the hints?
//!
//! ```
//! use fabric_core::{matching, Caps, EpType, Info, Version};
//!
//! let mut offer = Info::default();
//! offer.caps = Caps::MSG | Caps::SEND | Caps::RECV | Caps::TAGGED;
//! offer.ep_attr.ep_type = EpType::Rdm;
//! offer.tx_attr.size = 1024;
//!
//! let mut hints = Info::default();
//! hints.caps = Caps::TAGGED;
//! hints.ep_attr.ep_type = EpType::Rdm;
//! assert!(matching::check(&offer, &hints, Version::CURRENT).is_ok());
//!
//! // The answer reports the requested primary caps with their directions.
//! let answer = matching::alter(&offer, Some(&hints), Version::CURRENT);
//! assert_eq!(answer.caps, Caps::TAGGED | Caps::SEND | Caps::RECV);
//!
//! hints.ep_attr.ep_type = EpType::Dgram;
//! let miss = matching::check(&offer, &hints, Version::CURRENT).unwrap_err();
//! assert_eq!(miss.to_string(), "ep_type FI_EP_DGRAM is not offered");
//! ```
#![deny(unsafe_code)]

pub(crate) mod names;

pub mod addr;
pub mod attr;
pub mod enums;
pub mod error;
pub mod flags;
pub mod info;
pub mod kit;
pub mod matching;
// Declares `unsafe fn` contracts (zero-copy buffers) that providers
// implement; it runs no unsafe code itself.
#[allow(unsafe_code)]
pub mod objects;
pub mod resolve;
// A forwarding global allocator for tests needs `unsafe impl GlobalAlloc`.
#[cfg(feature = "testing")]
#[allow(unsafe_code)]
pub mod testing;
pub mod version;

pub use addr::{Address, SockaddrIb};
pub use attr::{DomainAttr, EpAttr, FabricAttr, Handle, RxAttr, SHARED_CONTEXT, TxAttr};
pub use enums::{AddrFormat, AvType, EpType, Progress, Protocol, ResourceMgmt, Threading};
pub use error::{Error, ErrorKind, Result};
pub use flags::{Caps, CompOrder, GetinfoFlags, Mode, MrMode, MsgOrder, OpFlags};
pub use info::Info;
pub use matching::Request;
pub use names::UnknownName;
pub use objects::Provider;
pub use version::Version;
