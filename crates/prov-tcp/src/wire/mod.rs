//! The tcp wire protocol: frame layout, encoder and streaming decoder.
//!
//! The layout is documented in the crate docs ("Wire protocol"). In short,
//! every frame is a 40-byte [`Header`], an op-specific extended header
//! ([`Ext`], at most [`MAX_EXT_LEN`] bytes, its length in the header) and a
//! payload of [`Header::payload_len`] bytes.
//!
//! # Sending
//!
//! Build a [`Frame`] with one of its constructors ([`Frame::msg`],
//! [`Frame::write`], ...), encode its headers into a stack buffer with
//! [`Frame::encode`] (or only the base [`Header`] with [`Header::encode`]
//! for the ops that have no extended header) and hand the kernel two
//! iovecs: the encoded headers and the user's payload. Nothing allocates
//! and the payload is never copied.
//!
//! # Receiving
//!
//! A [`Decoder`] per connection is fed whatever bytes the socket returned
//! ([`Decoder::feed`]). It buffers at most one frame's headers
//! ([`MAX_FRAME_HEADER_LEN`] bytes, inline), checks them against the
//! [`Limits`] and reports an [`Event::Frame`]; the payload that follows is
//! either handed back slice by slice ([`Event::Payload`]) or read by the
//! caller straight into its destination (a posted receive buffer, registered
//! memory) and accounted with [`Decoder::consume_payload`].
//!
//! Every check that a peer could fail yields an [`Error`] of kind
//! [`ErrorKind::Io`] whose message starts with `tcp wire:` and names the
//! field and the value; the connection is then unusable (the decoder stays
//! failed). No input makes the decoder panic, allocate more than an error
//! message, or loop without consuming input.
//!
//! [`Error`]: fabric_core::Error
//! [`ErrorKind::Io`]: fabric_core::ErrorKind::Io
#![deny(unsafe_code)]

mod bytes;
mod decoder;
mod ext;
mod frame;
mod header;

pub use decoder::{Decoder, Event, Want};
pub use ext::{
    AtomicHeader, CM_LEN, CmHeader, ConnKey, Ext, RMA_IOV_LEN, RmaHeader, Simultaneous,
    resolve_simultaneous,
};
pub use fabric_core::kit::atomic::AtomicKind;
pub use frame::{Frame, atomic_kind, atomic_op};
pub use header::{
    Flags, HEADER_LEN, Header, MAGIC, MAX_REASON_LEN, MIN_VERSION, Op, PayloadKind, VERSION,
    decode_header, decode_header_fast,
};

use std::borrow::Cow;

use fabric_core::{Error, ErrorKind};

/// Most remote ranges (`rma_iov` entries) one RMA or atomic request carries
/// (libfabric's tcp provider allows 4 as well).
pub const MAX_RMA_IOV: usize = 4;

/// Longest extended header: an RMA or atomic request with [`MAX_RMA_IOV`]
/// ranges (8 + 4 × 24 bytes).
pub const MAX_EXT_LEN: usize = 8 + MAX_RMA_IOV * RMA_IOV_LEN;

/// Longest header part of a frame (base header plus extended header); the
/// size of the buffer [`Frame::encode`] writes into.
pub const MAX_FRAME_HEADER_LEN: usize = HEADER_LEN + MAX_EXT_LEN;

/// Largest element of an atomic datatype, in bytes (`FI_LONG_DOUBLE_COMPLEX`).
pub const MAX_ATOMIC_ELEM_SIZE: u64 = 32;

/// Default [`Limits::max_msg_size`]: 1 GiB.
pub const DEFAULT_MAX_MSG_SIZE: u64 = 1 << 30;

/// Default [`Limits::max_private_data`]: 256 bytes, libfabric tcp's CM data
/// size.
pub const DEFAULT_MAX_PRIVATE_DATA: u64 = 256;

/// Default [`Limits::max_atomic_count`]: 1024 elements.
pub const DEFAULT_MAX_ATOMIC_COUNT: u64 = 1024;

/// What a peer may claim: the receiving side's bounds, checked before any
/// length from the network is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Largest payload of a message, tagged message, rendezvous message, RMA
    /// write or read (`ep_attr.max_msg_size`).
    pub max_msg_size: u64,
    /// Largest private data of a connection request, accept or reject
    /// (`cm_data_size`).
    pub max_private_data: u64,
    /// Most remote ranges per RMA or atomic request; values above
    /// [`MAX_RMA_IOV`] count as [`MAX_RMA_IOV`].
    pub max_rma_iov: usize,
    /// Most elements one atomic request names (sum over its ranges).
    pub max_atomic_count: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_msg_size: DEFAULT_MAX_MSG_SIZE,
            max_private_data: DEFAULT_MAX_PRIVATE_DATA,
            max_rma_iov: MAX_RMA_IOV,
            max_atomic_count: DEFAULT_MAX_ATOMIC_COUNT,
        }
    }
}

impl Limits {
    /// The effective range count limit: `max_rma_iov`, at most
    /// [`MAX_RMA_IOV`].
    pub fn rma_iov(&self) -> usize {
        self.max_rma_iov.min(MAX_RMA_IOV)
    }

    /// Largest payload an atomic request can carry under these limits
    /// (compare operands included): the size of a scratch buffer that holds
    /// any atomic request's operands.
    pub fn max_atomic_payload(&self) -> u64 {
        self.max_atomic_count
            .saturating_mul(MAX_ATOMIC_ELEM_SIZE)
            .saturating_mul(2)
    }

    /// Largest payload of an atomic response (the fetched old values).
    pub fn max_atomic_result(&self) -> u64 {
        self.max_atomic_count.saturating_mul(MAX_ATOMIC_ELEM_SIZE)
    }
}

/// A protocol violation by the peer: `FI_EIO` with a message naming the
/// field and value.
fn proto(detail: impl Into<Cow<'static, str>>) -> Error {
    Error::new(ErrorKind::Io, detail)
}

/// A local misuse of an encoder (bad arguments from this side).
fn local(kind: ErrorKind, detail: impl Into<Cow<'static, str>>) -> Error {
    Error::new(kind, detail)
}

/// `u64` of a `usize` (lossless on every platform Rust supports).
fn u64_of(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
