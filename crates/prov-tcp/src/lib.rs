//! The tcp provider: reliable messaging over TCP sockets.
//!
//! **Status: in progress** (issue "prov-tcp"). Implemented: `getinfo` (one
//! entry per usable IP interface: fabric = the subnet, domain = the
//! interface, loopback last and local-only; `FI_TCP_IFACE`), RDM endpoints
//! with messages and tagged messages (send, inject, remote CQ data,
//! FI_PEEK / FI_CLAIM / FI_DISCARD, directed receive, cancel, selective
//! completion), CQs, counters, AVs, memory registration, manual progress
//! driven by one epoll set per domain. Not yet: MSG endpoints, RMA,
//! atomics, multi-receive, auto progress; `getinfo` offers only what is
//! implemented.
//!
//! Layout: [`getinfo`] (what it offers), `domain` (fabric, domain, MR),
//! `ep` (endpoints), `conn` (one connection: send queue, frame reader),
//! `progress` (the domain's engine and epoll set), `frame` (the frames the
//! endpoints exchange today), [`wire`] (the versioned protocol codec the
//! endpoints move to as MSG, RMA and atomics land; documented below).
//!
//! # Wire protocol
//!
//! Version 1. A connection carries a stream of frames in both directions.
//! Every frame is:
//!
//! 1. a **base header** of 40 bytes ([`wire::Header`]),
//! 2. an **extended header** of `ext_len` bytes whose layout is fixed by the
//!    op (0 to 104 bytes, [`wire::Ext`]),
//! 3. a **payload** of `payload_len` bytes (message data, RMA data, atomic
//!    operands, private data), sent from and received into the user's
//!    buffers.
//!
//! All integers are little-endian, on every host (no endianness
//! negotiation: `to_le_bytes` is free on the common hosts). Every reserved
//! byte or bit must be zero and every field an op does not use must be
//! zero, so each frame has exactly one encoding, and a receiver refuses
//! anything else.
//!
//! ## Base header (40 bytes)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | `magic` | `0xFA` |
//! | 1 | 1 | `version` | 1 |
//! | 2 | 1 | `op` | [`wire::Op`], table below |
//! | 3 | 1 | `ext_len` | bytes of extended header that follow |
//! | 4 | 2 | `flags` | bit 0 `REMOTE_CQ_DATA`, bit 1 `ACK_TRANSMIT`, bit 2 `ACK_DELIVERY`; bits 3-15 reserved |
//! | 6 | 2 | `status` | 0, or the positive `FI_E*` code of a failed request (responses only) |
//! | 8 | 8 | `payload_len` | bytes of payload after the extended header |
//! | 16 | 8 | `id` | operation id chosen by the requester; responses echo it |
//! | 24 | 8 | `tag` | tag of tagged ops, else 0 |
//! | 32 | 8 | `data` | remote CQ data with `REMOTE_CQ_DATA`, else 0 |
//!
//! `ACK_TRANSMIT` asks for an `Ack` once the target received the request
//! (FI_TRANSMIT_COMPLETE), `ACK_DELIVERY` once the data is placed
//! (FI_DELIVERY_COMPLETE); at most one of them is set. The status of a
//! refused RMA or atomic request (bad key `FI_EKEYREJECTED`, out of bounds
//! `FI_EINVAL`, no access `FI_EACCES`, ...) travels back this way.
//!
//! ## Ops
//!
//! | op | value | flags | status | extended header | payload |
//! |---|---:|---|---|---|---|
//! | `Msg` | 0x01 | data, acks | - | none | message, ≤ `max_msg_size` |
//! | `Tagged` | 0x02 | data, acks | - | none | message, ≤ `max_msg_size` |
//! | `MsgRts` | 0x03 | data, acks | - | rendezvous (8) | none |
//! | `TaggedRts` | 0x04 | data, acks | - | rendezvous (8) | none |
//! | `Cts` | 0x05 | - | yes | rendezvous (8) | none |
//! | `RndvData` | 0x06 | - | - | rendezvous (8) | a chunk of the message |
//! | `Ack` | 0x07 | - | yes | none | none |
//! | `Write` | 0x10 | data, acks | - | RMA (8 + 24 n) | the data, = sum of range lengths |
//! | `ReadReq` | 0x11 | - | - | RMA (8 + 24 n) | none |
//! | `ReadRsp` | 0x12 | - | yes | none | the data (none on error) |
//! | `Atomic` | 0x20 | data, acks | - | atomic (8 + 24 n) | operands |
//! | `FetchAtomic` | 0x21 | data | - | atomic (8 + 24 n) | operands (none for `FI_ATOMIC_READ`) |
//! | `CompareAtomic` | 0x22 | data | - | atomic (8 + 24 n) | operands, then compare values |
//! | `AtomicRsp` | 0x23 | - | yes | none | old values (none on error) |
//! | `ConnReq` | 0x30 | - | - | CM (32) | private data, ≤ `max_private_data` |
//! | `ConnAccept` | 0x31 | - | - | CM (32) | private data |
//! | `ConnReject` | 0x32 | - | yes | CM (32) | private data |
//! | `Hello` | 0x33 | - | - | CM (32), address required | none |
//! | `HelloAck` | 0x34 | - | yes | CM (32), address required | none |
//!
//! Any other op value, another magic or version, a reserved flag bit, a
//! flag or status the op does not take, or an extended header length other
//! than the op's is a protocol error (`FI_EIO`) that closes the connection.
//!
//! ## Extended headers
//!
//! Rendezvous (8 bytes): one u64: the message length (`MsgRts`,
//! `TaggedRts`), the length the receiver accepts (`Cts`; 0 to discard, and
//! 0 with a status) or the offset of the chunk (`RndvData`). A message too
//! large to be kept unexpected is announced with an RTS; the receiver
//! answers `Cts` once a receive matches it, and the sender streams
//! `RndvData` chunks (other frames may come in between).
//!
//! RMA (`Write`, `ReadReq`; 8 + 24 × n bytes, 1 ≤ n ≤ 4):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | n, the number of ranges |
//! | 1 | 7 | reserved, zero |
//! | 8 + 24 i | 8 | range i: address (or offset) |
//! | 16 + 24 i | 8 | range i: length in bytes |
//! | 24 + 24 i | 8 | range i: key |
//!
//! Atomic (`Atomic`, `FetchAtomic`, `CompareAtomic`; 8 + 24 × n bytes): as
//! RMA, with byte 1 the datatype (`fi_datatype` value) and byte 2 the
//! operation (`fi_op` value), bytes 3-7 reserved, and range lengths
//! counting elements. The payload is exactly elements × element size (× 2
//! for `CompareAtomic`, × 0 for `FI_ATOMIC_READ`). The compare ops
//! (`FI_CSWAP*`, `FI_MSWAP`) only come as `CompareAtomic`, `FI_ATOMIC_READ`
//! only as `FetchAtomic`.
//!
//! Connection management (`ConnReq`, `ConnAccept`, `ConnReject`, `Hello`,
//! `HelloAck`; 32 bytes):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | oldest version the sender speaks (≥ 1) |
//! | 1 | 1 | newest version the sender speaks (≥ oldest) |
//! | 2 | 1 | address family: 0 none, 4 IPv4, 6 IPv6 |
//! | 3 | 1 | reserved, zero |
//! | 4 | 2 | port of the sender's listening address |
//! | 6 | 2 | reserved, zero |
//! | 8 | 8 | nonce: random, chosen when the endpoint is opened |
//! | 16 | 16 | IP address (IPv4 in the first 4 bytes, the rest zero) |
//!
//! ## Connections
//!
//! - **Version.** The handshake ops keep this base header and CM layout in
//!   every version, so peers of different versions understand each other's
//!   handshake. The initiator sends its version range; the answer names
//!   the highest common version in both version fields, or refuses with
//!   `ConnReject` / `HelloAck` status `FI_ENOPROTOOPT` and its own range.
//! - **MSG.** `ConnReq` (private data) → `ConnAccept` or `ConnReject`
//!   (private data). A closed socket is the shutdown.
//! - **RDM.** The initiator sends `Hello` with its listening address and
//!   nonce, so the peer can find the sender in its address vector, and
//!   waits for `HelloAck` before sending data frames. When both ends
//!   connect at once, the connection initiated by the end with the smaller
//!   key (nonce, then address family, IP bytes, port) survives: the other
//!   end's hello is answered with `HelloAck` status `FI_EALREADY` and its
//!   socket closed ([`wire::resolve_simultaneous`]). Both ends compute the
//!   same answer, so one connection is left per pair.
//!
//! ## Limits
//!
//! A receiver checks every length before using it ([`wire::Limits`]):
//! payloads of data ops at most `max_msg_size` (default 1 GiB), private data
//! at most `max_private_data` (default 256 B), 1 to `max_rma_iov` ranges
//! (at most 4), at most `max_atomic_count` atomic elements (default 1024),
//! sums and products computed with overflow checks. The decoder buffers at
//! most 144 bytes of headers per connection and never allocates for a
//! frame; payload goes straight to where it belongs.
#![warn(missing_docs)]

mod conn;
mod domain;
mod ep;
mod frame;
pub mod getinfo;
mod progress;
pub mod wire;

use fabric_core::matching::Request;
use fabric_core::objects::{EnvVar, Fabric, Provider};
use fabric_core::{FabricAttr, Info, Result, Version};

pub use domain::{TcpDomain, TcpFabric, TcpMr};
pub use ep::rdm::RdmEndpoint;

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
