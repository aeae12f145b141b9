//! The shm provider's transport: named shared-memory regions between
//! processes of one node, and a lock-free command queue inside them.
//!
//! **Status.** This is the foundation of the provider (issue "prov-shm"):
//! [`region`] (creation, validated attach, cleanup, reclaiming regions of
//! dead processes) and [`ring`] (the MPSC command queue, the bounce-buffer
//! pool, the futex wait). The endpoint layer (getinfo, AV, CQ, tagged
//! matching, CMA for large messages) is built on top later; until then the
//! crate registers no provider with the `fabric` facade.
//!
//! ```no_run
//! use prov_shm::region::{PeerRegion, Region, RegionConfig};
//! use prov_shm::ring::Command;
//! # fn main() -> fabric_core::error::Result<()> {
//! // Receiver process:
//! let region = Region::create(&RegionConfig::default())?;
//! let mut rx = region.receiver()?;
//! // ... tell the peer `region.name()` ...
//! // Sender process:
//! let peer = PeerRegion::attach(region.name())?;
//! peer.sender().try_send(&Command { tag: 7, ..Command::default() }, b"hello")?;
//! // Receiver again:
//! let (msg, payload) = rx.recv_vec(std::time::Duration::from_secs(1))?;
//! assert_eq!((msg.cmd.tag, &payload[..]), (7, &b"hello"[..]));
//! # Ok(()) }
//! ```
//!
//! # Region layout
//!
//! One file per endpoint, `/dev/shm/fabric-shm-<uid>-<pid>-<n>-<hex>`,
//! mode `0600`. Offsets are relative to the start of the file (processes
//! map it at different addresses, so nothing in it is a pointer). All
//! words are native-endian and accessed atomically.
//!
//! | offset | size | field | written by |
//! |---|---|---|---|
//! | 0 | 8 | magic `b"fabrshm1"` | owner, at creation |
//! | 8 | 4 | version (1) | owner, at creation |
//! | 12 | 4 | header size (512) | owner, at creation |
//! | 16 | 8 | total size = file length | owner, at creation |
//! | 24 | 4 | ring slots (power of two) | owner, at creation |
//! | 28 | 4 | slot size (multiple of 64) | owner, at creation |
//! | 32 | 4 | bounce buffer count | owner, at creation |
//! | 36 | 4 | bounce buffer size | owner, at creation |
//! | 40 | 8 | ring offset | owner, at creation |
//! | 48 | 8 | bounce metadata offset | owner, at creation |
//! | 56 | 8 | bounce data offset | owner, at creation |
//! | 64 | 4 | owner pid | owner, at creation |
//! | 68 | 4 | owner uid | owner, at creation |
//! | 72 | 8 | owner start time (`/proc/<pid>/stat` field 22) | owner, at creation |
//! | 80 | 8 | alive: random generation, 0 once closed | owner |
//! | 88 | 4 | ready: 1 once initialised (Release) | owner, last |
//! | 92 | 4 | layout check: FNV-1a of the 11 fields at 0..64, each as a little-endian `u64` | owner, at creation |
//! | 128 | 8 | ring tail (own cache line) | senders (CAS) |
//! | 192 | 4 | wait futex word | senders (bump), receiver (waits) |
//! | 196 | 4 | receiver sleeping flag | receiver |
//! | 256 | 8 | bounce free-list head, `tag << 32 \| index` (own line) | both |
//! | 512 | 8 x count, to a line | bounce metadata: `next: u32`, `holder pid: u32` | both |
//! | ring offset | slots x slot size | ring slots | both |
//! | bounce data offset (page aligned) | count x size | bounce buffers | senders fill, receiver reads |
//!
//! With the [default](region::RegionConfig::default) sizes (256 slots of
//! 1088 bytes, 64 bounce buffers of 32 KiB) the ring starts at 1024, the
//! buffers at 282624, and the file is 2379776 bytes. The consumer's head
//! is *not* in the region: it lives in the receiver's private memory, so no
//! peer can move it.
//!
//! A slot:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | sequence number |
//! | 8 | 4 | claimer pid |
//! | 12 | 2 | op |
//! | 14 | 2 | flags |
//! | 16 | 4 | payload length |
//! | 20 | 4 | bounce buffer index, `u32::MAX` = inline |
//! | 24 | 4 | src (sender id) |
//! | 28 | 4 | ring flags: bit 0 = aux words present; other bits 0 |
//! | 32 | 8 | tag |
//! | 40 | 8 | data |
//! | 48 | slot size - 64 | inline payload |
//! | slot size - 16 | 16 | aux\[2\], only when ring flag bit 0 is set |
//!
//! ## Slot size
//!
//! What a command costs is the number of cache lines that must travel from
//! the sender's core to the receiver's, one after the other: the line with
//! the sequence number (the receiver learns of the command through it),
//! then the payload lines. So the header is packed into 48 bytes and the
//! first 16 payload bytes share its line: a command with up to 16 bytes of
//! payload and no `aux` words is **one** line. The `aux` words (needed by
//! RMA and rendezvous commands, not by small messages) sit at the end of
//! the slot and are only written when non-zero. Measured with
//! `examples/ring_pingpong.rs` (two processes pinned to cores 0 and 1,
//! medians of 8 alternating runs on the 2-vCPU KVM guest), 1-byte one-way
//! latency went from 0.42 us with a 64-byte header line in front of the
//! payload to 0.245 us with this layout; 64 bytes (two lines) cost
//! 0.41 us, 1 KiB (17 lines) 0.66 us.
//!
//! Payload lines that a command does not fill are never touched, so a large
//! slot costs memory, not latency, and inline is never slower than a
//! bounce buffer: the latter moves the same payload lines plus the
//! free-list head (popped by the sender, pushed by the receiver) and the
//! buffer's metadata line. The slot should therefore hold the largest
//! payload for which the ring (slots x slot size) still sits comfortably in
//! L2. The default, 1088 bytes = 17 lines, carries 1 KiB inline, covering
//! the latency-critical 1 B to 1 KiB range; 256 slots are 272 KiB. Up to
//! 32 KiB goes through one bounce buffer; beyond that the provider will
//! segment or use cross-memory attach.
//!
//! # The ring
//!
//! A bounded multi-producer, single-consumer queue after Dmitry Vyukov's
//! bounded MPMC design: every slot carries a sequence number that says
//! which lap it belongs to, so producers and the consumer never compare
//! head and tail and a full or empty ring is recognised from one slot.
//! Positions are 64-bit counters (they never wrap in practice; the code
//! uses wrapping arithmetic anyway); slot `pos & (slots - 1)` serves
//! position `pos`.
//!
//! - Initially slot `i` holds sequence `i`: free for position `i`.
//! - **Claim** (sender): read `pos = tail`, read the slot's sequence
//!   (Acquire). If it equals `pos`, CAS `tail` from `pos` to `pos + 1`;
//!   winning the CAS makes the slot ours. If it is behind `pos`, the slot
//!   still holds the previous lap: the ring is full, return `Again`. If it
//!   is ahead, another sender took `pos`: reload `tail` and retry (at most
//!   65536 turns, then `Again`).
//! - **Fill**: record our pid as claimer, write the header fields and the
//!   inline payload (or fill a bounce buffer *before* claiming, so the
//!   claimed-but-uncommitted window stays a few stores long).
//! - **Commit**: CAS the sequence from `pos` to `pos + 1` (SeqCst). It is a
//!   CAS, not a store, so that a slot the receiver reclaimed from a sender
//!   it believed dead cannot be resurrected (the late sender gets
//!   `Canceled`).
//! - **Consume** (receiver, head in private memory): the head slot's
//!   sequence (Acquire) equals `head + 1`: committed; copy the header
//!   fields out, validate them, let the caller copy the payload, then store
//!   `head + slots` (Release: free for the next lap) and advance. Equal to
//!   `head`: empty (or being filled): `Again`. Anything else is a peer
//!   writing outside the protocol: the slot is skipped if some sender
//!   claimed it (tail past head) or reset to free otherwise, and the call
//!   returns an `Io` error.
//! - **Validation** of a committed slot: no unknown ring-flag bits; an
//!   inline length must fit the slot; a bounce index must be below the
//!   pool size, its length must fit a buffer, and the buffer must be held
//!   by a sender (not free). A slot that fails is consumed with an `Io`
//!   error; its buffer is left alone (freeing a buffer named by a bogus
//!   command could hand it out twice).
//! - **Recovery**: a sender that dies between claim and commit leaves the
//!   head slot claimed forever. [`Receiver::recover`](ring::Receiver::recover)
//!   skips such slots when their claimer pid is dead, and frees bounce
//!   buffers held by dead pids that no pending command names.
//!
//! Each sender's commands arrive in the order it sent them (positions are
//! claimed in program order); commands of different senders interleave in
//! claim order. `try_send` never blocks and never loses a command: it
//! either commits it or returns an error. Producers share the tail line;
//! the receiver touches it only on error paths. The bounce pool is a
//! Treiber stack with a 32-bit ABA tag in the head word.
//!
//! # Waiting
//!
//! [`Receiver::wait`](ring::Receiver::wait) spins for 2 us, then yields
//! the CPU between looks for 50 us (so a peer on the same core gets to
//! run), then sleeps on a futex word in the region. [`ring::WaitPolicy`]
//! has the measurements behind these numbers: 0.22 us one-way with the two
//! processes on two cores, 3 us with both on one core, where busy polling
//! needs a 4 ms scheduler tick per message.
//!
//! The sleep, after spinning and yielding found nothing:
//!
//! 1. receiver: `v = futex.load()`; `sleeping.store(1, SeqCst)`; look at
//!    the head slot's sequence again (`SeqCst` load); if a command is
//!    there, clear `sleeping` and return;
//! 2. receiver: `FUTEX_WAIT(futex, v, timeout)` (returns at once if
//!    `futex != v`), then clear `sleeping` and look again;
//! 3. sender, after its commit CAS (`SeqCst`): if
//!    `sleeping.load(SeqCst) != 0`, `futex += 1` and `FUTEX_WAKE(futex, 1)`.
//!
//! So a sender makes a system call only when the receiver announced that
//! it sleeps; the uncontended path has none. No wake-up is lost: the commit
//! / `sleeping` load of the sender and the `sleeping` store / sequence load
//! of the receiver form a Dekker pair over sequentially consistent
//! operations, so either the sender sees `sleeping == 1` and wakes, or the
//! receiver sees the command and does not sleep; a wake between the
//! receiver's steps 1 and 2 changed `futex`, so the wait returns at once.
//! The futex is a shared (not `_PRIVATE`) one: the kernel keys it by the
//! file page, so it works across processes that map the region at
//! different addresses. Each sleep is capped at 50 ms and re-checks the
//! ring, so a peer that scribbles on these words causes delays at worst.
//!
//! # Safety
//!
//! Another process may write any byte of a region at any moment. The
//! argument why that cannot cause undefined behaviour, a panic or an out of
//! bounds access here is in the [`region`] module docs ("Soundness"): no
//! references to plain shared data, only atomics and volatile copies into
//! local memory; every value read once and validated locally; all bounds
//! from the locally validated layout and masked or checked indices; every
//! loop and sleep bounded.

pub mod region;
pub mod ring;
