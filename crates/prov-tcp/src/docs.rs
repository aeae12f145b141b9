//! How the tcp provider works: the design notes behind the code.
//!
//! # Connections
//!
//! - **RDM.** Each endpoint listens on its own address (its name). The
//!   first operation towards a peer connects to the peer's name and sends
//!   `Hello` (listening address and a random nonce); data frames follow
//!   only after the peer's `HelloAck`. The accepting side knows the sender
//!   by its listening address, so receive completions carry the sender's
//!   AV handle (FI_SOURCE). One connection carries frames both ways. When
//!   both ends connect at once, the connection initiated by the end with
//!   the smaller key (nonce, then address) survives and the other is
//!   refused with `HelloAck` status `FI_EALREADY`; frames waiting for a
//!   connection live in a per-peer backlog and go on the survivor, so
//!   exactly one connection per pair remains and no frame is lost. An
//!   endpoint that sends to itself keeps both ends of its connection.
//! - **MSG.** `fi_connect` sends `ConnReq` with the private data; the
//!   passive endpoint reads the request and reports `FI_CONNREQ` with an
//!   `info` whose `handle` names the parked request (a process-wide table).
//!   An endpoint opened with that info takes the socket over; `fi_accept`
//!   sends `ConnAccept` and reports `FI_CONNECTED` once it is written; the
//!   connector reports `FI_CONNECTED` with the acceptor's private data.
//!   `fi_reject` sends `ConnReject`: the connector reports an EQ error
//!   `FI_ECONNREFUSED` carrying the rejection's private data (so does a
//!   refusal by the OS, without data). Sends posted before the connection
//!   is accepted wait for it. `fi_shutdown` or a closed socket ends the
//!   connection: both sides report `FI_SHUTDOWN`, and pending operations
//!   complete with errors.
//! - **Failure.** A connection fails on a socket error, an unexpected end
//!   of stream, or any frame that breaks the protocol (the decoder's
//!   checks, an id this side never issued, a frame in the wrong phase).
//!   Then everything started on it completes with an error (queued frames,
//!   requests waiting for answers, the receive being filled, accepted
//!   rendezvous); nothing panics and other connections are unaffected. An
//!   RDM peer is connected again by the next operation.
//!
//! # Data path
//!
//! - **Sockets.** Every connection has `TCP_NODELAY` and, where
//!   `net.core.rmem_max` allows it, a fixed 2 MiB receive buffer
//!   (`sys::tune`): under the kernel's autotuning a
//!   lone eager message of 128-256 KiB took one of two times from run to
//!   run (RDM 256 KiB: 28-30 or 44-58 us one-way); with it fixed, always
//!   the faster. A connection then holds up to 4 MiB of kernel memory
//!   (the kernel doubles what is asked), also one that is not read (see
//!   unexpected messages below). Without the fixed buffer, lone messages
//!   go eagerly only up to 64 KiB. A connection whose two ends are on this
//!   host that the system gave BBR (which paces every connection to its
//!   bandwidth estimate) switches to reno, or cubic where reno is not
//!   allowed (`sys::unpaced`): on loopback BBR held large messages back
//!   (4 MiB one-way 1118 -> 563 µs, 1 MiB 206 -> 158, 512 KiB 101 -> 75);
//!   connections to other hosts keep the system's choice.
//! - **Sending.** A frame with up to 4 KiB of payload is laid out whole
//!   (headers, then the payload copied behind them) in a per-connection
//!   buffer and written with one `send`: the kernel takes one contiguous
//!   buffer faster than two iovecs. Larger frames have their headers
//!   encoded on the stack and the payload sent from the user's buffer, one
//!   `sendmsg` when the socket takes it. What the socket does not take
//!   waits in the connection's queue (the rest of injected data copied
//!   into a reused staging buffer); queued frames are written together (up
//!   to 64 iovecs per `sendmsg`). Messages of up to 16 KiB go eagerly in
//!   one frame, and so do lone ones of up to 256 KiB, or 8 MiB on an
//!   unpaced connection inside this host (64 KiB without the fixed
//!   receive buffer; lone: nothing else of the endpoint in flight and no
//!   other send posted since the last progress call: a ping-pong saves a
//!   round trip, while a burst of sends keeps rendezvous, whose data
//!   leaves in fewer, larger `sendmsg` calls);
//!   larger ones by rendezvous: `MsgRts` / `TaggedRts` announce them, the
//!   receiver answers `Cts` once a receive matches (with the length it
//!   takes: truncation is the receiver's error), and the sender streams
//!   `RndvData` straight from the user's buffer.
//! - **Receiving.** A [`wire::Decoder`](crate::wire::Decoder) per connection reads the frames
//!   from a 64 KiB read buffer. A payload of at least 40 KiB whose
//!   destination is known (a matched receive, an accepted rendezvous, an
//!   RMA target, a read's buffer) is read straight into it; after such a
//!   payload the next read is small, so that the next large payload skips
//!   the read buffer too.
//! - **Matching.** Posted receives, unexpected messages, tag matching,
//!   FI_PEEK / FI_CLAIM / FI_DISCARD, multi-receive carving, cancel and
//!   remote CQ data are the kit's receive engine
//!   ([`fabric_core::kit::rx::RxEngine`]); this provider feeds it what the
//!   decoder reads and does what it asks back (a clear-to-send for a
//!   rendezvous message a receive takes, an acknowledgement once a
//!   buffered message is delivered, pausing and resuming a connection).
//! - **Unexpected messages.** An eager message that matches no receive is
//!   kept in a buffer; an endpoint keeps at most 8 MiB of them (payloads
//!   plus 64 bytes per entry, rendezvous announcements and remote CQ data
//!   waiting for a receive in `FI_RX_CQ_DATA` mode included). Beyond
//!   that, the connection that brings the next unexpected message stops
//!   being read: its payload stays in the socket until a receive takes it
//!   (or the budget has room again), TCP flow control pushes back on the
//!   sender, whose operations then wait in its queue and new ones return
//!   `FI_EAGAIN` once `tx_attr.size` are outstanding. A peer can therefore
//!   never make an endpoint buffer more than the budget; the price is that
//!   a paused connection delivers nothing else until its message is taken.
//!   In the kernel, a paused connection holds at most its receive buffer
//!   (4 MiB with the fixed buffer, see sockets above).
//!   Remote CQ data reported at once fills only the receive CQ: a sender
//!   that fills it stops being read until the application has read half.
//! - **Answers a peer does not read.** A connection whose transmit queue
//!   holds 4096 frames or 8 MiB of copied bytes is not read until the
//!   queue drains to half: a peer that sends requests (RMA reads, writes
//!   asking for an acknowledgement) and never reads the answers is paused
//!   by TCP flow control instead of growing this side's memory. This
//!   side's own operations are at most `tx_attr.size`, and a well-behaved
//!   peer's too, so neither ever gets there.
//! - **Hostile or broken peers.** A hello claiming an address other than
//!   the socket's peer IP, or the address of a peer with an established
//!   connection, is refused (connections leave from the endpoint's own
//!   address); an answer of the wrong kind or length fails the connection
//!   and every operation still waiting on it ends in an error completion.
//!   A listener that runs out of descriptors rests out of the epoll set
//!   (10 ms, doubling to 1 s) instead of being retried in a loop, and a
//!   paused connection does not watch the peer's half-close.
//! - **Silent connections.** An accepted socket gets its buffers (64 KiB
//!   to read, 4 KiB to write) when it first has something to read or
//!   send; it must say hello (a passive endpoint's: complete its
//!   connection request) within 10 s, and at most 256 wait for that at
//!   once per endpoint: more are closed as they come.
//! - **Queues.** At most `tx_attr.size` transmit operations are
//!   outstanding (started and not completed); the next one returns
//!   `FI_EAGAIN`. Receives are not limited.
//! - **Locking.** All state of an endpoint sits behind one mutex, taken by
//!   its operations (uncontended unless threads share the endpoint) and
//!   tried by progress (a thread that finds it held leaves the work to the
//!   holder). Completion queues are lock-free for successful completions.
//!   Once warmed up, sends, injects, receives, RMA and their completions
//!   allocate nothing (tested).
//!
//! # RMA and atomics
//!
//! The target checks every range of a request against its domain's memory
//! regions ([`fabric_core::kit::mr::MrTable`]) before touching memory:
//! an unknown key is refused with `FI_EKEYREJECTED`, a range outside the
//! region or a missing right (FI_REMOTE_WRITE for writes and atomics,
//! FI_REMOTE_READ for reads and fetching atomics) with `FI_EACCES`. A
//! refused request changes nothing (all ranges are checked first) and its
//! status travels back, becoming the initiator's error completion. Data is
//! moved into and out of registered memory while its registration is held,
//! so deregistration waits for a transfer in progress; a region
//! deregistered in the middle of a read response fails that connection.
//!
//! Memory registration needs no mode bit (`FI_MR_LOCAL` is not needed:
//! local buffers need no registration and descriptors are ignored). The
//! domain's `mr_mode` decides addressing: with `FI_MR_VIRT_ADDR` remote
//! addresses are virtual addresses, else offsets from the region's
//! `offset`; with `FI_MR_PROV_KEY` the provider picks keys, else the
//! requested key is used. The legacy `FI_MR_BASIC` (both) and
//! `FI_MR_SCALABLE` (neither) are offered too.
//!
//! Remote CQ data of a write or atomic appears in the target's receive CQ
//! (flags `FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA`); it consumes a
//! posted receive only in `FI_RX_CQ_DATA` mode.
//!
//! Atomics (see `atomic`): every operation on `FI_INT8` to `FI_UINT64`;
//! arithmetic, read, write and the compare-swap family on `FI_FLOAT` and
//! `FI_DOUBLE`; up to 1024 elements per operation; executed with the
//! processor's atomic instructions (misaligned elements under a lock).
//!
//! # Completion semantics
//!
//! - A send or inject completes when its last byte is handed to the socket
//!   (`FI_INJECT_COMPLETE` semantics): its buffer may be reused; the peer
//!   may not have received it yet.
//! - With `FI_TRANSMIT_COMPLETE` the frame asks for an `Ack`, sent by the
//!   target once it has received the whole message (even if no receive
//!   matched yet); with `FI_DELIVERY_COMPLETE` once the data is in the
//!   receive buffer. The send completes when the `Ack` arrives.
//! - RMA writes and plain atomics are always acknowledged (so a refusal
//!   reaches the initiator): they complete once applied at the target
//!   (`FI_DELIVERY_COMPLETE`). Reads and fetching atomics complete when
//!   their data arrives. `inject_write` reports no completion but counts,
//!   in the write counter or its error count, when acknowledged.
//! - `FI_FENCE`: the operation (and everything after it on the same
//!   connection) is held until every earlier operation on that connection
//!   has completed.
//! - Selective completion (`FI_SELECTIVE_COMPLETION` binds): only
//!   operations with `FI_COMPLETION` report successes; errors are always
//!   reported.
//! - `FI_MULTI_RECV` (untagged receives): each message takes the next part
//!   of the buffer (`buf` in its completion); the buffer is released once
//!   less than 64 bytes are left, and the completion of the last message
//!   placed in it carries `FI_MULTI_RECV` (a cancelled one reports it in
//!   its `FI_ECANCELED` completion).
//! - Shared receive contexts (`fi_srx_context`, [`TcpSrx`](crate::TcpSrx); getinfo
//!   answers `ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT`, `max_ep_srx_ctx` =
//!   the domain's `ep_cnt`): one receive engine that the messages of every
//!   endpoint bound to it match, each completion on the CQ of the
//!   endpoint its message arrived at. The context owns the engine; an
//!   endpoint bound to it swaps it into its own state for the length of
//!   each locked pass (taking the context's lock after its own), and the
//!   engine's work about another endpoint's connection waits for that
//!   endpoint's next pass. One unexpected budget bounds them all. An
//!   endpoint without a context pays one check of a `OnceLock` per pass.
//! - Progress is manual by default: CQ, counter and EQ reads drive it, and
//!   blocking reads sleep on the domain's epoll set (after a short spin).
//!   A progress call asks epoll what is ready; while every endpoint of the
//!   domain has at most two established connections, it reads them
//!   directly instead and asks epoll only every 16th call (new connections
//!   and listeners are noticed then), which saves a system call per
//!   message on the latency path. While nobody can block on the epoll set,
//!   those connections also leave it: a watched socket makes every
//!   arriving packet walk its wait queue into epoll in the sender's
//!   softirq (0.2-0.3 µs one-way on loopback). A blocking read puts them
//!   back first, and so do the auto-progress thread and
//!   [`TcpEndpoint::wait_fd`](crate::TcpEndpoint::wait_fd) for good.
//!   When the domain asks for `FI_PROGRESS_AUTO` (offered when the hints
//!   ask), a thread per domain sleeps until a socket is ready and
//!   progresses every endpoint, so operations complete without reads.
//!
//! # Wire protocol
//!
//! Version 2 (`ep_attr.protocol_version`), which speaks with version 1
//! peers (see "Versions" below). A connection carries a stream of frames in
//! both directions.
//! Every frame is:
//!
//! 1. a **base header** of 40 bytes ([`wire::Header`](crate::wire::Header)),
//! 2. an **extended header** of `ext_len` bytes whose layout is fixed by the
//!    op (0 to 104 bytes, [`wire::Ext`](crate::wire::Ext)),
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
//! | 1 | 1 | `version` | the frame's format: 1, or 2 for a failed answer carrying a reason |
//! | 2 | 1 | `op` | [`wire::Op`](crate::wire::Op), table below |
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
//! refused RMA or atomic request (bad key `FI_EKEYREJECTED`, a range out of
//! bounds or a missing access right `FI_EACCES`, an unsupported atomic
//! `FI_EOPNOTSUPP`) travels back this way.
//!
//! ## Versions
//!
//! Version 2 adds one thing to version 1: a failed `Cts`, `Ack`, `ReadRsp`
//! or `AtomicRsp` may carry the target's reason for the refusal ("memory
//! key 0x7 does not grant FI_REMOTE_WRITE", "range 0xc8+64 is outside the
//! region of key 0xb (0x0+256)") as its payload: 1 to 256 bytes of UTF-8
//! text ([`wire::MAX_REASON_LEN`](crate::wire::MAX_REASON_LEN)), which
//! makes the frame a version 2 frame (byte 1 is 2). Every other frame is
//! written in version 1 (byte 1 is 1), so that a frame has one encoding:
//! the oldest version that defines it. A side writes version 2 frames only
//! on a connection whose handshake agreed on version 2, and its decoder
//! refuses them on a version 1 connection. The initiator reads the reason
//! as untrusted text (bounded by the decoder, lossy UTF-8, control
//! characters replaced) and puts it in the error completion's text:
//! "tcp: the peer refused the RMA write: memory key 0x7 does not grant
//! FI_REMOTE_WRITE". From a version 1 peer only the status comes, and the
//! text says what it means.
//!
//! An endpoint opened with `ep_attr.protocol_version = 1` speaks version 1
//! only, exactly as a peer built before version 2 does (0 or 2: version
//! 2).
//!
//! ## Ops
//!
//! | op | value | flags | status | extended header | payload |
//! |---|---:|---|---|---|---|
//! | `Msg` | 0x01 | data, acks | - | none | message, ≤ `max_msg_size` |
//! | `Tagged` | 0x02 | data, acks | - | none | message, ≤ `max_msg_size` |
//! | `MsgRts` | 0x03 | data, acks | - | rendezvous (8) | none |
//! | `TaggedRts` | 0x04 | data, acks | - | rendezvous (8) | none |
//! | `Cts` | 0x05 | - | yes | rendezvous (8) | none (v2: the reason when failed) |
//! | `RndvData` | 0x06 | - | - | rendezvous (8) | a chunk of the message |
//! | `Ack` | 0x07 | - | yes | none | none (v2: the reason when failed) |
//! | `Write` | 0x10 | data, acks | - | RMA (8 + 24 n) | the data, = sum of range lengths |
//! | `ReadReq` | 0x11 | - | - | RMA (8 + 24 n) | none |
//! | `ReadRsp` | 0x12 | - | yes | none | the data (on error none; v2: the reason) |
//! | `Atomic` | 0x20 | data, acks | - | atomic (8 + 24 n) | operands |
//! | `FetchAtomic` | 0x21 | data | - | atomic (8 + 24 n) | operands (none for `FI_ATOMIC_READ`) |
//! | `CompareAtomic` | 0x22 | data | - | atomic (8 + 24 n) | operands, then compare values |
//! | `AtomicRsp` | 0x23 | - | yes | none | old values (on error none; v2: the reason) |
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
//! 0 with a status) or the offset of the chunk (`RndvData`). A message
//! larger than the sender's eager limit (16 KiB, or for a lone message
//! 256 KiB, 8 MiB inside this host unpaced, 64 KiB with autotuned receive
//! buffers; a sender's choice,
//! receivers take eager messages up to `max_msg_size`) is announced with
//! an RTS; the
//! receiver answers `Cts` once a receive matches it, and the sender sends
//! `RndvData` (today one chunk of the accepted length; a receiver accepts
//! consecutive chunks, other frames may come in between). The `id` of
//! `Cts` and `RndvData` is the RTS's.
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
//!   every version (and are version 1 frames), so peers of different
//!   versions understand each other's handshake. The initiator sends its
//!   version range (1 to 2 here); the answer names the highest common
//!   version in both version fields, or refuses with `ConnReject` /
//!   `HelloAck` status `FI_ENOPROTOOPT` and its own range. A version 1
//!   peer offers and answers 1, so it gets version 1 connections.
//! - **MSG.** `ConnReq` (private data) → `ConnAccept` or `ConnReject`
//!   (private data). A closed socket is the shutdown.
//! - **RDM.** The initiator sends `Hello` with its listening address and
//!   nonce, so the peer can find the sender in its address vector, and
//!   waits for `HelloAck` before sending data frames. When both ends
//!   connect at once, the connection initiated by the end with the smaller
//!   key (nonce, then address family, IP bytes, port) survives: the other
//!   end's hello is answered with `HelloAck` status `FI_EALREADY` and its
//!   socket closed ([`wire::resolve_simultaneous`](crate::wire::resolve_simultaneous)). Both ends compute the
//!   same answer, so one connection is left per pair. A `HelloAck` accepts
//!   with the chosen version in both version fields and this side's
//!   address and nonce.
//! - Request ids are chosen by the requester, unique per endpoint; an
//!   answer (`Cts`, `Ack`, `ReadRsp`, `AtomicRsp`) must name a request this
//!   side sent on that connection and is waiting for, and `RndvData` a
//!   rendezvous this side accepted, at the next offset; anything else is a
//!   protocol error.
//!
//! ## Limits
//!
//! A receiver checks every length before using it ([`wire::Limits`](crate::wire::Limits)):
//! payloads of data ops at most `max_msg_size` (default 1 GiB), private data
//! at most `max_private_data` (default 256 B), 1 to `max_rma_iov` ranges
//! (at most 4), at most `max_atomic_count` atomic elements (default 1024),
//! sums and products computed with overflow checks. The decoder buffers at
//! most 144 bytes of headers per connection and never allocates for a
//! frame; payload goes straight to where it belongs, or into a bounded
//! buffer (unexpected messages within the budget, atomic operands, private
//! data).
