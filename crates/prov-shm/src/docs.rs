//! How the shm provider works: the design notes behind the code.
//!
//! # Protocols
//!
//! What travels in a peer's ring for each operation (the commands are in
//! the [`commands`](#commands) table; "copies" counts memory-to-memory
//! copies of the payload):
//!
//! | operation | size | protocol | copies |
//! |---|---|---|---|
//! | message, inject | ≤ 4 KiB | `MSG`, payload inline in the slot | 2 |
//! | message | ≤ [eager limit](crate::getinfo::EAGER_MAX) (32 KiB) | `MSG`, payload in one bounce buffer | 2 |
//! | message from 8 KiB, answering or alone (see [Thresholds](#thresholds), mid sizes) | < CMA limit | as the row above or below, or by CMA as at the CMA limit: the sender times both and takes the faster | 2 or 1 |
//! | message, alone (nothing else in flight) | ≤ one bounce buffer (128 KiB) | `MSG` (flag `ACK_REQ`), payload in one bounce buffer, from 32 KiB committed after its first 16 KiB and received as it lands (see [Stepped messages](#stepped-messages)); `ACK` once received | 2, from 32 KiB pipelined on two cores |
//! | message | < [CMA limit](crate::getinfo::CMA_MIN) (256 KiB), or no CMA | `RTS` (flag PUSH); receiver answers `CTS` once matched; sender pushes `DATA` chunks of one bounce buffer each, which the receiver copies out as they come; `ACK` | 2, pipelined on two cores |
//! | message | ≥ CMA limit | pushed as above, or by CMA as below: the sender times both and takes the faster (see the CMA limit below) | 2 or 1 |
//! | message | ≥ CMA limit, by CMA | `RTS` with the sender's iovecs; the receiver pulls with `process_vm_readv` into the matched buffer, then `ACK` (the first such message from a peer) | 1 |
//! | message | ≥ CMA limit, by CMA, once CMA worked with the peer | `RTS`; the receiver sends `SPLIT` with the tail of its buffer, pulls the head (2 KiB more than half) and sends `ACK` (flag HEAD) while the sender writes the tail with `process_vm_writev` and sends `PUT_DONE` | 1, on two cores at once |
//! | RMA write | ≤ eager limit (with its descriptor in one bounce buffer) | `WRITE` with the data after the descriptor; `ACK` | 2 |
//! | RMA write | < CMA limit, or no CMA | `WRITE` (flag PUSH); target answers `CTS`, then pushed `DATA`; `ACK` | 2 |
//! | RMA write | ≥ CMA limit | `WRITE` with the initiator's iovecs; target pulls into the checked ranges; `ACK` | 1 |
//! | RMA read | < CMA limit, or no CMA | `READ` (flag PUSH); target answers with the data in its `ACK` (≤ 4 KiB) or `DATA` chunks then `ACK` | 2 |
//! | RMA read | ≥ CMA limit | `READ` with the initiator's iovecs; target writes with `process_vm_writev`; `ACK` | 1 |
//! | atomic | ≤ 1024 elements | `ATOMIC` with operands (and compare values); old values come back in the `ACK` (or a `DATA` chunk) | - |
//!
//! Sends complete when their data left the user buffer: eager messages at
//! once (the data is in the target's memory, FI_TRANSMIT_COMPLETE),
//! rendezvous messages on the receiver's `ACK` (split ones on the early
//! `ACK` once the sender's own write worked; when it failed, the receiver
//! pulls the tail itself and acknowledges again at the end). With
//! FI_DELIVERY_COMPLETE an eager message asks for an `ACK` once it is in
//! the receive buffer. RMA and atomics complete on the target's `ACK`
//! (writes once applied). `inject_write` and injected atomics report no
//! completion but count in the write counter when acknowledged. A refused
//! remote access (unknown key `FI_EKEYREJECTED`; range out of bounds or a
//! missing right `FI_EACCES`) changes nothing and comes back as the
//! initiator's error completion.
//!
//! ## Thresholds
//!
//! - **Inline: 4 KiB** (the slot payload): inline is never slower than a
//!   bounce buffer (see [Slot size](#slot-size)).
//! - **Eager limit: 32 KiB** ([`getinfo::EAGER_MAX`](crate::getinfo::EAGER_MAX), `FI_SHM_EAGER_MAX`,
//!   at most one bounce buffer): up to it a message goes through one
//!   bounce buffer (two copies, no system call, no round trip). The copies
//!   in and out of shared memory use the CPU's string copy from 1-2 KiB on
//!   (see `region::shared`), which made them several times faster than a
//!   rendezvous. `fabric pingpong -p shm`, 2-vCPU AMD EPYC guest,
//!   alternating runs, one-way us, eager limit 4 KiB (rendezvous with
//!   CMA) / 32 KiB (bounce buffer), in the host's fast mode and its slow
//!   mode (which triples a cache line's trip between the cores):
//!
//!   | size | 4 KiB + 1 | 8 KiB | 16 KiB | 32 KiB |
//!   |---|---|---|---|---|
//!   | fast mode | 2.27 / 0.44 | 2.50 / 0.49 | 2.90 / 0.70 | 3.21 / 1.04 |
//!   | slow mode | 2.57 / 1.19 | 2.92 / 1.41 | 3.39 / 2.01 | 4.07 / 2.88 |
//!
//!   (An earlier measurement on an Intel guest, with 16-byte volatile
//!   copy loops, had put the crossing at 4 KiB.) Re-measured with written
//!   buffers (the table above used a never-written send buffer, see the
//!   CMA limit), 5 alternating rounds, slow-mode medians / fast-mode
//!   minima, rendezvous / bounce buffer: 4 KiB + 1 2.02 / 1.18 and 0.68 /
//!   0.34, 8 KiB 2.34 / 1.47 and 0.77 / 0.41, 16 KiB 2.83 / 1.97 and
//!   0.95 / 0.59, 32 KiB 3.54 / 2.75 (slow mode): the limit stands.
//!
//!   A limit of 64 KiB (a whole bounce buffer) was tried: ping-pong got
//!   faster (7 alternating rounds, fast mode, medians of the per-round
//!   ratios 64 KiB / 32 KiB limit: 0.82 at 64 KiB, 0.79 at 48 KiB; no
//!   `RTS` / `CTS` round trip), but `fabric bw` (64 sends in flight) got
//!   6.7 GB/s at 64 KiB against 40 GB/s pushed (per-round ratio 0.16).
//!   Eager messages in a window do poorly in general (32 KiB: 5-9 GB/s,
//!   with windows of 8 to 64). The likely cause (not traced): an eager
//!   send completes once its data is in the peer's bounce buffer, so the
//!   client runs ahead of the server, which posts each receive again
//!   only after it read a completion; a message that arrives before its
//!   receive is copied out of the ring as an unexpected one (an
//!   allocation and a second copy), where a pushed message waits for
//!   its receive as an announcement and moves its data once. So the
//!   limit stays 32 KiB.
//!
//!   **Lone messages** above it that fit one bounce buffer go eagerly
//!   anyway when nothing else of the endpoint is in flight (a ping-pong),
//!   and ask for an `ACK`: the send completes when the data is in the
//!   receive buffer, so a window's next messages find it in flight and
//!   take the rendezvous, as before. `FI_SHM_EAGER_MAX` turns this off.
//!   With `FI_SHM_EAGER_MAX=65536` (every message to 64 KiB eager), 5
//!   alternating runs in the host's slow mode, `fabric pingpong` at
//!   64 KiB took 4.17-4.37 us against 5.36-5.41 us by rendezvous. With
//!   lone messages eager, 3 alternating rounds in the fast mode (one-way
//!   us, `pp_pinned.py`, before / after): 40000 B 1.46-1.47 / 1.26-1.28,
//!   64 KiB 1.91-2.04 / 1.80-1.86; `fabric bw` (64 in flight) unchanged
//!   (64 KiB: 41.0 / 42.0, 37.7 / 41.3 GB/s in two rounds; 40000 B:
//!   19.0 / 20.3 and 18.8 / 20.7 GB/s).
//! - **Mid sizes, 8 KiB to 256 KiB, sent alone: measured.** A message of
//!   these sizes that answers something (the endpoint took a command from
//!   its ring since the previous such send to the peer, as in a
//!   ping-pong; up to the eager limit) or goes alone (above it, nothing
//!   else in flight) takes whichever of the bounce buffer and cross-memory
//!   attach measured faster lately, per peer and power-of-two size class
//!   (`ep::choice`, the same learning as from the CMA limit on, with a
//!   look at the slower copy once in 1024 messages). Both are timed from
//!   the announcement to the receiver's `ACK`: CMA always, a bounce-buffer
//!   message above the eager limit too (it asks for an `ACK` anyway), and
//!   one in 16 of those up to it (and the first 16 of a size class to a
//!   peer, the trials of both copies), which then asks for one
//!   (`ACK_REQ`). Like a message
//!   by CMA, such a sample completes only once the receiver has it: when
//!   it arrives before its receive is posted, only once a receive takes
//!   it. Their copy in alone had been the measure,
//!   and it misled: on a 2-vCPU Intel Xeon guest the receiver's copy out,
//!   which reads every line from the other core, cost as much again, so a
//!   32 KiB copy in took 120 ns per KiB while the message took 200, against
//!   78 by CMA, and the choice kept 8-32 KiB messages eager at twice the
//!   time. Measured 2026-11-29 on that guest, `fabric pingpong`, 3
//!   alternating rounds (cache-line probe 55-90 ns), one-way us, timed by copy in
//!   / timed to `ACK` / always CMA / `fi_pingpong`: 8 KiB 2.25 / 1.38 /
//!   1.44 / 1.95, 16 KiB 3.58 / 1.70 / 1.70 / 2.28, 32 KiB 5.15 / 2.39 /
//!   2.53 / 3.02. The `ACK` of a sample costs an eager message little:
//!   with one in 4 timed, 8-32 KiB always eager took 1-4% longer than with
//!   none. Earlier, measured 2026-11-28, always bounce / chosen: 16 KiB
//!   2.48 / 2.51 (fast state, 8 rounds; bounce kept); 64 KiB 6.4-6.6 /
//!   4.9-5.1 and 128 KiB 11.7-12.7 / 7.6-8.8 (fast state, 4 rounds each;
//!   CMA taken).
//!   Messages of a stream stay eager: a rendezvous would hold the stream
//!   behind it until the peer posts a receive.
//! - **CMA limit: 256 KiB** ([`getinfo::CMA_MIN`](crate::getinfo::CMA_MIN), `FI_SHM_CMA_MIN`):
//!   a larger message below it is pushed through bounce buffers in 128 KiB
//!   chunks after a `CTS` (two copies, one on each core, overlapping),
//!   from it on copied by cross-memory attach (one copy, split between the
//!   two cores, but system calls and page pinning). Same setup, one-way
//!   us, CMA / pushed:
//!
//!   | size | 64 KiB | 128 KiB | 256 KiB | 1 MiB | 2 MiB |
//!   |---|---|---|---|---|---|
//!   | fast mode | 4.31 / 1.99 | 6.1 / 3.5 | 9.8 / 5.9 | 33.4 / 22.9 | 66.3 / 49.1 |
//!   | slow mode | 5.34 / 4.88 | - | 11.3 / 12.7 | 36-38 / 46-47 | - |
//!
//!   With written buffers (5 alternating rounds): fast mode 64 KiB 4.23
//!   / 1.87, 128 KiB 6.86 / 3.39, 256 KiB 10.07 / 6.38; slow mode 64 KiB
//!   4.86-5.10 / 4.78-4.90, 256 KiB 10.6-11.0 (CMA) against 11.7-12.1
//!   for the measured choice below.
//!
//!   Pushing wins in the fast mode at every size, by 1.3-2.2x, and loses
//!   from 256 KiB on in the slow mode, where every pushed line crosses
//!   between the cores. Below 256 KiB both modes agree, so messages there
//!   are always pushed. From 256 KiB on a message's sender measures: per
//!   peer and power-of-two size class it times both copies from `RTS` to
//!   `ACK` and takes the faster, trying each for a run of 8 messages
//!   first and the other for a run of 8 in every 128 after (a protocol
//!   reaches its steady cost only a few messages after a switch; see
//!   `ep::choice`), to notice when the machine changes mode.
//!
//!   A message is timed from its `RTS`, or from the `ACK` of the class's
//!   previous message when that came later, to its own `ACK` (its
//!   service time): in a window of messages each one waits behind the
//!   others, and timing that wait judged the two copies by whichever
//!   happened to start a window. `fabric bw -p shm` (64 sends in flight),
//!   6 alternating rounds, per-round ratios of the old timing to this one,
//!   medians: 256 KiB 0.53, 1 MiB 0.75, 4 MiB 0.75 (5 of 6 rounds below
//!   1 at each size; this host changed speed within seconds then, the
//!   absolute figures of a size spread over 2-4x). Ping-pong is unchanged
//!   (a message starts after the previous one completed).
//!
//!   Non-temporal stores for the copy out of the bounce buffers into the
//!   receive buffer (for pushed messages from 256 KiB on: the window's 64
//!   buffers of 1 MiB are not in the cache, and such stores save reading
//!   the destination lines) were tried against this: per-round ratios
//!   1.02, 1.10 and 1.01 at 256 KiB, 1 MiB and 4 MiB, spread 0.42-2.04,
//!   so no clear gain; they are not used. (A plain C loop copying 64
//!   buffers of 1 MiB round-robin measured 22-26 GB/s with them against
//!   19 GB/s for `memcpy`, and 40 against 67 GB/s when the buffers fit
//!   the cache.)
//!
//!   The tables above were measured with a `fabric pingpong` whose send
//!   buffer was never written: an untouched zeroed allocation maps the
//!   kernel's shared zero page, so CMA read one cached page over and over
//!   and looked 8-15% faster at 1-4 MiB than with real memory (the tool
//!   now writes its buffers). A first try of the run-time choice, against
//!   that flattered CMA, was dropped: in the slow mode a CMA transfer
//!   right after pushed ones measured 78-122 against about 32 ns per KiB
//!   at 1 MiB, so the timing kept pushing. With real buffers CMA costs
//!   about the same in both modes (1 MiB: 37-41 us; 4 MiB: 143-157 us,
//!   alternating rounds, 100-3,000 messages), while pushing takes
//!   24.6-25.9 / 92-102 us in the fast mode and 44-49 / 168-183 us in
//!   the slow one. The choice against CMA always, 16 alternating rounds of
//!   100 messages, all in the fast mode (one-way us, medians, CMA /
//!   measured): 256 KiB 10.7 / 6.1, 1 MiB 39.0 / 24.9 (42 GB/s, 77% of
//!   memcpy), 4 MiB 154 / 95. Those runs probed with single messages
//!   (then pairs); in the slow mode such probes saw only cold samples and
//!   the choice kept pushing, 15-20% slower than CMA at 1 MiB (44.4-48.4
//!   against 37.2-37.5 us). With runs of 8, 6 alternating rounds of 100
//!   messages, CMA always / pairs / runs, one-way us: slow mode (2
//!   rounds) 1 MiB 39.5, 37.0 / 40.2, 43.3 / 38.8, 38.4 and 4 MiB 164,
//!   141 / 145, 157 / 163, 145, so the runs follow CMA there; fast mode
//!   (4 rounds) 1 MiB 39.3 / 24.2-28.5 / 26.7-29.7 and 4 MiB 147-153 /
//!   94-163 / 96-97. The runs cost 1-3 us at 1 MiB in the fast mode of
//!   100-message runs (their 8 CMA messages of the warm-up and of each
//!   128), and at 256 KiB in the slow mode they measured 12.5-12.9 against
//!   CMA's 10.9-11.5 us. Setting `FI_SHM_CMA_MIN` fixes the limit for
//!   messages instead (CMA from it on). RMA transfers use the fixed limit,
//!   256 KiB by default.
//! - **Split limit: 32 KiB** ([`getinfo::SPLIT_MIN`](crate::getinfo::SPLIT_MIN), `FI_SHM_SPLIT_MIN`;
//!   in effect from the CMA limit on): from it on (once a cross-memory
//!   attach with the peer has worked), the copy of a rendezvous message is
//!   split between the receiver and the sender, which is idle waiting for
//!   its `ACK` anyway; it costs one more command each way (`SPLIT`,
//!   `PUT_DONE`). The sender starts about one command later and its
//!   `PUT_DONE` takes one more to arrive, so the
//!   receiver takes 4 KiB (`SPLIT_BIAS`) more than the sender, at most
//!   three quarters, on a cache line (64 KiB: 34 KiB / 30 KiB); its
//!   `ACK` leaves as soon as its own part is in place, so that the
//!   completion of the receive is not behind it. Same setup (2-vCPU KVM
//!   guest, 2026-11-25), medians of 5 alternating runs, one-way latency
//!   in us, receiver-only (`FI_SHM_SPLIT_MIN=1073741824`) / split:
//!
//!   | size | 32 KiB | 48 KiB | 64 KiB | 128 KiB | 256 KiB | 1 MiB | 4 MiB |
//!   |---|---|---|---|---|---|---|---|
//!   | receiver pulls all | 2.51 | 2.92 | 3.44 | 5.59 | 10.1 | 53.0 | 360 |
//!   | split | 2.45 | 2.71 | 2.96 | 4.07 | 6.28 | 28.5 | 202 |
//!
//!   In `fabric pingpong` (pinned to cores 1 and 0, medians of 5 runs
//!   alternating with `fi_pingpong -p shm`), the even split on a page with
//!   the `ACK` at the end took 3.42 us at 64 KiB, this one 2.98
//!   (`fi_pingpong`: 3.92). On that host (Intel) the bias hardly mattered
//!   among 0, 8, 10, 12, 14 and 16 KiB at 64 KiB (3.12, 3.08, 3.06, 3.05,
//!   3.02, 3.02 us). On a 2-vCPU AMD EPYC guest (8 alternating runs of
//!   `fabric pingpong`, medians) it does: 0, 4, 8 and 12 KiB took 5.32,
//!   5.10, 5.27 and 5.48 us at 64 KiB, and 4 against 12 KiB took 4.03
//!   against 4.68 us at 32 KiB and the same at 1 MiB (44.7 against 44.9),
//!   so the bias is 4 KiB. A split does not pay below 32 KiB: 16 KiB took
//!   1.97 us split against 1.80 whole.
//! - **Inject size: 4 KiB** (`tx_attr.inject_size`, as libfabric's shm):
//!   injects travel inline to a peer with the default slot size (through
//!   a bounce buffer to one with smaller slots).
//! - **Chunks** of pushed data: one bounce buffer, 128 KiB. Fewer, larger
//!   chunks cost fewer commands and buffer pops per byte. Pushed only
//!   (`FI_SHM_CMA_MIN=1073741824`), fast mode, 4-5 alternating rounds,
//!   medians, one-way us, chunks of 16 / 32 / 64 / 128 KiB: 1 MiB 27.3 /
//!   24.2 / 22.6 / 22.6, 4 MiB 106 / 92 / 86 / 82.5; with the measured
//!   choice, 32 against 64 KiB: 1 MiB 25.3 / 24.8, 4 MiB 99.4 / 93.3,
//!   16 and 32 KiB messages unchanged. 128 KiB makes the pool of 64
//!   buffers 8 MiB per endpoint; that was first judged too much, and
//!   taken later for lone messages (see below).
//! - **Bounce buffers: 64 of 128 KiB** ([`RegionConfig::default`](crate::region::RegionConfig::default)).
//!   A lone message up to one buffer goes eagerly and stepped (see
//!   [Stepped messages](#stepped-messages)); above it takes the
//!   rendezvous (`RTS`, `CTS`, pushed chunks). With 64 KiB buffers a
//!   128 KiB ping-pong was pushed: `fabric pingpong -p shm` at 128 KiB,
//!   8 alternating rounds, one-way us, 64 KiB / 128 KiB buffers /
//!   Debian's `fi_pingpong`: 14.4 / 10.6 / 19.9, 21.2 / 18.2 / 19.5,
//!   19.0 / 16.1 / 19.1, 14.1 / 8.9 / 20.2, 18.4 / 16.7 / 19.0, 14.4 /
//!   10.3 / 19.9, 14.5 / 10.2 / 21.5, 21.8 / 18.1 / 21.2 (against
//!   `fi_pingpong`, 0.72-1.12 before and 0.45-0.93 after). `fabric bw`
//!   (64 in flight, 3 alternating rounds) did not move beyond the noise
//!   at 16 KiB to 1 MiB, nor did ping-pong at 256 KiB and 1 MiB. The
//!   cost is memory: the region grows from 5.0 to 9.0 MiB, all of it
//!   populated when a peer maps it (about 1.3 ms against 0.9 for 5 MiB,
//!   timed with a Python `MAP_POPULATE` mapping of a file of each size).
//!
//!   A push that runs alone (the engine has no other push going: a
//!   ping-pong) is cut into 4 chunks of at least 16 KiB instead (so only
//!   messages below 256 KiB change), so that the receiver copies one
//!   chunk out while the sender fills the next: 7 alternating rounds,
//!   fast mode, medians of the per-round ratios to whole 64 KiB chunks:
//!   40000 B 0.95, 64 KiB 0.93, 128 KiB 0.98, 200000 B 0.92. Cut so
//!   always, `fabric bw` (64 sends in flight) lost 39% at 64 KiB and 25%
//!   at 128 KiB; with several pushes going the chunks stay whole (bw
//!   per-round ratios 1.02, 1.02, 1.05 at 64, 128, 256 KiB). 8 chunks of
//!   8 KiB were slower at 64 KiB (1.19 against 4 of 16 KiB).
//!
//!   **Where a window's time goes** (`fabric bw -p shm -W 64` at 64 KiB,
//!   2-vCPU AMD EPYC guest, both processes timestamping their events in
//!   memory, 3,000 windows per run): the sender's copy into the bounce
//!   buffers bounds it. A chunk left every 7.5 us and the receiver copied
//!   it out in 3.8 (about 5 and 3 us in the host's fast mode, 17 and 4 in
//!   its slowest), so the receiver waited half the time; a window of 64
//!   took 390-1,340 us, of which 30-50 us before the first chunk (the
//!   application posting its 64 sends, the `RTS` / `CTS` round) and, since
//!   the pass budget above, under 10 us after the last. `perf` agrees: 90%
//!   of the sender's samples on the `rep movsb` into the pool, 38% of the
//!   receiver's on the one out of it. A C model of the two copies (one
//!   thread per core, a pool of 64 KiB buffers) ran the writer at half
//!   the reader's speed too, whatever the order in which freed buffers
//!   were reused (oldest first was ahead in two single runs, last freed
//!   first, as the pool does, in all 6 rounds of an alternating run:
//!   9.5-11.1 against 7.4-9.6 GB/s; round-robin no better), and with
//!   AVX2 or non-temporal stores instead of `rep movsb` (no faster;
//!   non-temporal slower). Two ways to give the receiver a share were tried and
//!   dropped: it pulling the window's later messages itself by
//!   cross-memory attach when it had nothing to copy out (a pull of
//!   64 KiB took 20-25 us in the slow mode, against 9 us pushed), and
//!   choosing between pushing and CMA by measurement from 32 KiB on (the
//!   choice then still timed pushes by bunched `ACK`s; see [Progress and
//!   locking](#progress-and-locking)).
//!
//! - **Stores into bounce buffers**, from 32 KiB (`region::stores`,
//!   `FI_SHM_STREAM`): ordinary stores, or non-temporal ones while the
//!   host is in the state where moving a cache line between the two cores
//!   costs 4-5 times more. The sender times its copies (one in 8, and
//!   every 256 copies a run of 4 with the other kind) and streams once
//!   ordinary stores cost over 3 times as much per byte, back below 2
//!   (with 2.5 the choice flapped in some runs at 40000 B).
//!   In that state the copy into a bounce buffer took 230-300 ps per byte
//!   with ordinary stores and 45-60 with non-temporal ones; otherwise
//!   45-100 against 35-75 (medians of runs traced with `RUST_LOG`,
//!   `fabric pingpong` at 32 and 64 KiB).
//!   `fabric pingpong -p shm` at 64 KiB, each round running the measured
//!   choice, ordinary stores only, non-temporal only and Debian's
//!   `fi_pingpong`, one-way us: in the rounds where ordinary stores fell
//!   in that state, 13.2 / 27.8 / 13.3 / 12.6, 14.8 / 28.1 / 12.4 / 10.8,
//!   13.3 / 22.8 / 11.4 / 13.4, 15.4 / 27.9 / 12.2 / 11.5, 12.6 / 28.1 /
//!   12.4 / 10.3; in the others the measured choice ran with ordinary
//!   stores (4.8-9.7 against 7.1-9.9; non-temporal stores alone
//!   10.1-12.5, because the receiver then reads the payload from memory).
//!   `fabric bw -p shm` at 64 KiB, 6 such rounds, GB/s: measured 7.5-9.9,
//!   ordinary 3.3-9.8, non-temporal 7.1-7.8; at 1 MiB all three 5.1-5.8.
//!   At 16 KiB the two costs lie close (the copy takes about a
//!   microsecond), the timing flapped between them and the pingpong
//!   took 2.6-3.9 us against 1.5-2.7 with ordinary stores, hence the
//!   32 KiB floor.
//!
//! ## Commands
//!
//! The [`ring::Command`](crate::ring::Command) fields per op (unlisted fields are 0; `src` is
//! always the sending endpoint's number in its process, and a peer is
//! known by (claimer pid, `src`) after its `HELLO`):
//!
//! | op | value | flags | tag | data | aux | payload |
//! |---|---|---|---|---|---|---|
//! | `HELLO` | 1 | - | - | - | - | the sender's region name |
//! | `MSG` | 2 | TAGGED, CQ_DATA, ACK_REQ, ID_IN_DATA | tag | CQ data, or the op id with ID_IN_DATA | \[op id\] with ACK_REQ and CQ_DATA | the message |
//! | `RTS` | 3 | TAGGED, CQ_DATA, PUSH, ID_IN_DATA | tag | CQ data, or the op id with ID_IN_DATA | \[length, op id\] with CQ_DATA | (address, length) × 1..4 |
//! | `CTS` | 4 | - | op id | transfer id | \[bytes accepted\] | - |
//! | `DATA` | 5 | TO_TX | destination id | offset | - | a chunk |
//! | `ACK` | 6 | HEAD | op id | 0 or errno | - | results (reads, fetches) |
//! | `WRITE` | 7 | CQ_DATA, PUSH, INLINE | op id | CQ data | - | descriptor \[+ data\] |
//! | `READ` | 8 | PUSH | op id | - | - | descriptor |
//! | `ATOMIC` | 9 | CQ_DATA | op id | CQ data | - | descriptor, operands, compare values |
//! | `SPLIT` | 10 | WHOLE | op id | transfer id | \[split offset, bytes accepted\] without WHOLE | the receiver's buffer from the split on, (address, length) × 1..4 |
//! | `PUT_DONE` | 11 | - | transfer id | 0 or errno | - | - |
//! | `PAUSE` | 12 | - | - | - | - | the receiver's region name |
//! | `RESUME` | 13 | - | - | - | - | the receiver's region name |
//!
//! Flags: TAGGED 1, CQ_DATA 2, ACK_REQ 4, TO_TX 8, PUSH 16, INLINE 32,
//! HEAD 64 (an `ACK` of a split rendezvous sent once the receiver's part
//! is in place: it finishes the send unless the sender's write failed),
//! ID_IN_DATA 128 (set by senders whenever there is no CQ data: the op
//! id rides in `data` and the `aux` words, which lie in the slot's last
//! cache line, are not written; an `RTS`'s length is then its ranges'
//! total). That line cost a 16 KiB ping-pong by CMA 9% of its time on a
//! 2-vCPU Intel Xeon guest (1.89 -> 1.71 us one-way; 32 KiB 6%): traced
//! with the time-stamp counter, writing an `RTS` into a slot its
//! receiver polls took 211 ns (median), a one-line `ACK` 122, and the
//! receiver fetches the extra line too. WHOLE 256: a `SPLIT` that takes
//! the whole message, split where the sender computes it from the length
//! (`split_point`), so it needs no `aux` words either (64 KiB ping-pong
//! 3.11 -> 2.96 us one-way, 32 KiB 2.40 -> 2.31).
//! The descriptor is little-endian `u64`s: a head word (bits 0-7 remote
//! ranges 1..4, 8-15 local pieces 0..4, 16-23 atomic 0/1, 24-31 datatype,
//! 32-39 operation, 40-47 atomic form; the rest zero), then (address,
//! length, key) per remote range, then (address, length) per local piece
//! (the initiator's buffer, for cross-memory attach). Op ids and transfer
//! ids are a slot index and a generation, so a stale or forged id names
//! nothing. Every field read from a peer is checked: a malformed command
//! is dropped (or refused with `FI_EINVAL` when it names an operation to
//! answer), never trusted.
//!
//! ## Cross-memory attach
//!
//! Single copies use `process_vm_readv` / `process_vm_writev`, which the
//! kernel permits when this process may ptrace the peer. [`cma::detect`](crate::cma::detect)
//! decides at startup (`FI_SHM_DISABLE_CMA`, Yama's `ptrace_scope`, a probe
//! call), logs the decision and getinfo reports it in
//! `ep_attr.protocol_version` ([`getinfo::PROTOCOL_CMA`](crate::getinfo::PROTOCOL_CMA) or
//! [`getinfo::PROTOCOL_BOUNCE`](crate::getinfo::PROTOCOL_BOUNCE)). Without it, the same operations push
//! their data through bounce buffers (the "no CMA" rows above); a peer
//! for which the kernel refuses at run time is switched over for good,
//! with a warning. In a split rendezvous, a sender that cannot write its
//! half says so in `PUT_DONE`, and the receiver pulls that half itself. The pid used is the one in the peer's region header; a
//! region claiming this process as owner is accepted only if this
//! process created it.
//!
//! ## Failure
//!
//! - A peer whose endpoint closes (its region's `alive` word) or whose
//!   process exits (its region's lock, and pid and start time within our
//!   PID namespace, checked about every 100 ms while operations wait for
//!   it) is dropped: operations towards it fail with
//!   `FI_ECONNRESET`, receives it was pushing fail, its announced messages
//!   are dropped, and the region files of dead processes are removed (so
//!   are they when any process opens a shm fabric).
//! - Liveness holds across PID namespaces (containers sharing
//!   `/dev/shm`): the owner of a region holds an exclusive `flock(2)` on
//!   its file for the region's life and records its PID namespace in the
//!   header. An owner is gone when its lock is free (the kernel drops it
//!   with the process's last descriptor: exit, crash, `SIGKILL`), or, for
//!   an owner of our own namespace, when its pid and start time no longer
//!   name a process; an owner of another namespace is never judged by its
//!   pid (see `region::proc` and [`region::reclaim_stale`](crate::region::reclaim_stale)). Nor is
//!   cross-memory attach used with a peer of another namespace (its pid
//!   names another process here, or none): large messages and RMA go
//!   through the bounce buffers. A ring slot claimed (or a bounce buffer
//!   held) by a known peer of another namespace is recovered only once
//!   that peer's lock is free, never because its pid is unknown here.
//! - A full ring or bounce pool gives `FI_EAGAIN` for injects; other
//!   operations wait in the engine's queue (at most `tx_attr.size`
//!   outstanding, then `FI_EAGAIN`).
//! - A sender that dies between claiming and committing a slot blocks the
//!   ring; the engine recovers it after 50 ms
//!   ([`ring::Receiver::recover`](crate::ring::Receiver::recover)).
//!   One that dies after taking a bounce buffer and before claiming a
//!   slot blocks nothing, but keeps the buffer: whenever the pool is dry,
//!   the liveness check returns the buffers of dead holders that no
//!   committed command names
//!   ([`ring::Receiver::free_dead_holders`](crate::ring::Receiver::free_dead_holders)).
//! - A stepped message whose sender dies before filling it, or that is
//!   still unfilled 2 s after the liveness checks first saw it at the
//!   ring's head (a stopped process: a signal, a debugger, a page fault on
//!   a swapped-out source; or a misbehaving one), is given up: the receive
//!   it was matched to fails with `FI_EIO`, the sender's operation gets an
//!   `ACK` with `FI_EIO` (only sends that ask for an `ACK` are stepped),
//!   and the ring moves on. A bounce buffer consumed before its sender
//!   filled it (given up, or dropped with its command) stays out of the
//!   pool while that sender may write into it, and goes back once its
//!   fill mark reaches the length or the sender is gone
//!   ([`ring::Receiver::reclaim_forsaken`](crate::ring::Receiver::reclaim_forsaken), at every liveness check).
//!   A receive matched to a stepped message whose slot a peer rewrote
//!   fails with `FI_EIO` when the slot is dropped as malformed.
//! - A peer that closed or exited is forgotten only after its last
//!   commands were read: the ring is drained first, and while its head
//!   waits for a sender (a stepped message still landing, a slot claimed
//!   and not committed) the peer is kept until a later liveness check,
//!   so that messages it sent before it went are still delivered. The
//!   wait is bounded: the check that first sees the peer gone notes the
//!   ring position past the last slot claimed then (a gone peer claims no
//!   more), and the peer is forgotten once the head passed it, even if
//!   the head then waits for another sender.
//! - Unexpected messages are kept within a budget, with flow control
//!   instead of loss (see [Unexpected messages](#unexpected-messages)).
//! - AV handles are resolved once per endpoint and kept while the AV
//!   removes none; after an `fi_av_remove`, each handle is looked up once
//!   more, so a removed one fails with `FI_ENOENT`.
//!
//! ## Stepped messages
//!
//! An eager message of 32 KiB or more ([`ring::STEPPED_MIN`](crate::ring::STEPPED_MIN))
//! whose send asks for an `ACK` (a lone message, or `FI_DELIVERY_COMPLETE`,
//! not a timed sample of the mid sizes, which must cost what the messages
//! it stands for cost; the `ACK` is there so that a message given up half
//! filled fails its send too; see
//! [Failure](#failure)) is committed once the first 16 KiB ([`ring::STEP`](crate::ring::STEP)) are
//! in its bounce buffer (copied before the slot is claimed, so that a
//! sender stopped in that step holds its buffer, not the ring), with ring
//! flag `STEPPED`; the sender then copies
//! the rest, advancing the buffer's fill mark (a Release store, after the
//! fence that ends non-temporal stores) after each 16 KiB. A receiver that
//! matches the message copies what is in, leaves the command at the
//! ring's head and copies more at each pass until the last byte is in:
//! the copy out runs while the sender is still copying in, and the
//! receive completes one step after the sender's copy ends instead of a
//! whole copy after it. A message that matches no receive waits at the
//! head until it is complete (kept messages are copied whole); so does
//! any other command marked stepped (only messages are sent so). Until
//! then the endpoint counts as having work that waits for a peer, so a
//! blocking read polls rather than sleeps.
//!
//! The kind of stores (see [Thresholds](#thresholds)) is chosen once per
//! message, and a timed message counts its first step only: the later
//! steps overlap the receiver's copy out, which slowed ordinary stores
//! more than non-temporal ones and made a 40000 B ping-pong in the host's
//! fast state switch to streaming and back.
//!
//! `fabric pingpong -p shm`, one-way µs, medians of 10 rounds in which the
//! same build ran with steps of 64 KiB (no overlap), 16, 8 and 4 KiB one
//! after the other: 40000 B 5.68 / 4.99 / 5.86 / -, 64 KiB 8.35 / 7.09 /
//! 8.14 / - (the median of the per-round ratios to 64 KiB steps: 0.87 for
//! 16 KiB at both sizes); an earlier 12-round run at 64 KiB: 9.86 / 9.81 /
//! 9.75 / 10.11 (ratios 0.91 / 0.98 / 1.02). Smaller steps move the fill
//! mark's line between the cores more often and gained nothing.
//!
//! ## Unexpected messages
//!
//! The receive side is the kit's engine ([`fabric_core::kit::rx`]):
//! posted receives, matching, multi-receive, FI_PEEK / FI_CLAIM /
//! FI_DISCARD, cancel, remote CQ data and this budget live there; shm
//! brings the ring's messages to it and does what it asks back (pull or
//! clear to send an announced message, acknowledge, `PAUSE` / `RESUME`).
//!
//! A message that matches no posted receive is kept: an eager one with
//! its bytes (copied out of the ring), a rendezvous one as its
//! announcement (its data stays with the sender). What they hold counts
//! against a budget per endpoint: the payload's buffer plus 64 bytes per
//! entry (an announcement, and remote CQ data kept in `FI_RX_CQ_DATA`
//! mode, count 64). The numbers are those of tcp's budget, whose reasons
//! hold here too (a few MiB is plenty for an application that receives
//! what it is sent, and small next to the 9.0 MiB region):
//!
//! - **Budget: 8 MiB.** Once the endpoint keeps more than that, a sender
//!   that brings another unexpected message while it holds more than its
//!   **reserve of 256 KiB** is sent `PAUSE`. A paused sender sends no more
//!   messages to that endpoint: sends wait in its engine's queue (at most
//!   `tx_attr.size` outstanding, then `FI_EAGAIN`) and injects return
//!   `FI_EAGAIN`, until the endpoint sends `RESUME`, once receives took
//!   enough that it keeps at most half the budget, or that sender at most
//!   half its reserve (so not one `PAUSE` / `RESUME` per message). A
//!   sender below its reserve is never paused, so one peer that floods
//!   cannot starve the others. RMA and atomics are not paused, except
//!   those that carry remote CQ data: in `FI_RX_CQ_DATA` mode each is
//!   kept as an entry while no receive is posted (and counts like one),
//!   and otherwise each adds a completion to the receive CQ, so a writer
//!   that fills that CQ is sent `PAUSE` until the application has read
//!   half of it (the CQ's overflow list does not grow without bound
//!   because of a peer).
//! - **Hard limit: 16 MiB**, for senders that do not honour `PAUSE` (a
//!   process writing into the ring itself) or have not read it yet (the
//!   sender's engine sees it on its next progress call): from it on, a
//!   message that matches no receive is *left in the ring* (a command is
//!   taken only when it can be kept), and the ring is not read again
//!   until a receive is posted or receives free budget. Senders then find
//!   the ring full (back-pressure), every sender's commands wait behind it
//!   (a peer writing our ring can always do that much), and nothing is
//!   spun on: progress reports no work, so blocking reads sleep. RMA
//!   writes and atomics with remote CQ data in `FI_RX_CQ_DATA` mode (each
//!   kept as an entry while no receive is posted) wait in the ring the
//!   same way, before they are applied; without that mode they wait in
//!   the ring while the receive CQ is full, until the application reads.
//!
//! Nothing accepted is dropped: every message taken from the ring is
//! delivered once a matching receive is posted, in order per sender. The
//! check is on the unexpected path only (a comparison before keeping a
//! message); an eager send reads one more flag (relaxed) of the peer
//! structure whose liveness flag it reads anyway, and the ring loop
//! tests one local boolean. An application that never receives the messages ahead of the
//! one it waits for can stall a paused sender, as with tcp's budget.
//! Measured (`tests/unexp_budget.rs`): a process pushing 16 KiB tagged
//! messages into an endpoint that posts no receives got 1085 (17 MiB)
//! accepted and the ring full after that; the receiver's RSS grew by
//! 20 MiB (without the budget: 256 MiB accepted, +263 MiB), and every
//! message arrived in order once receives were posted.
//!
//! ## Shared receive contexts
//!
//! `fi_srx_context` ([`crate::ShmSrx`]; getinfo answers
//! `ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT`, `max_ep_srx_ctx` = the
//! domain's `ep_cnt`): the context is one receive engine kept in the
//! domain engine's state next to the endpoints. While the engine works on
//! an endpoint bound to it (its ring, its transfers, the periodic checks)
//! the context's engine takes the place of the endpoint's own; so the
//! messages arriving at every bound endpoint match the context's
//! receives, and the one budget above bounds what all of them keep.
//! Senders are numbered with their endpoint's id in the high 32 bits, so
//! the engine's work about a sender of another endpoint (resume it, pull
//! its announced message into a receive) is done on that endpoint, with
//! the context's engine in place there. Receives posted on the context
//! take the domain engine's lock (not the lock-free queue) and complete on
//! the CQ of the endpoint each message arrived at. An endpoint without a
//! context pays one check per progress pass (`EpShared::srx`).
//!
//! ## Progress and locking
//!
//! The application's threads take no lock for eager sends, injects,
//! receives posted, or CQ reads of successful completions; operations for
//! the engine and receives travel through lock-free queues (FI_PEEK,
//! FI_CLAIM, FI_DISCARD and cancel take the engine's lock instead, so
//! that the call itself answers, e.g. `NoMsg` for a claim of nothing). The engine of
//! a domain ([`progress`](crate::progress)) runs under one spin lock taken with `try_lock`
//! by CQ / counter reads (a thread that finds it held leaves the work to
//! the holder; its release is a plain store); opening and closing
//! endpoints wait for it, yielding, then sleeping. An operation handed to the engine (a rendezvous send, RMA,
//! atomics) is started by the call that queued it when that `try_lock`
//! succeeds, so its first command does not wait for the next CQ read
//! (0.27 us from the send call to the `RTS` in the ring became 0.23 us
//! at 64 KiB, traced). See [`progress`](crate::progress) for how blocking reads sleep and
//! are woken.
//!
//! A pass copies at most two bounce buffers of pushed data (256 KiB),
//! oldest push first, then returns: the commands that came meanwhile
//! (`ACK`s, `CTS`s) are taken at the next pass, so the completions of a
//! window reach the application as the receiver finishes each message.
//! One pass used to copy every chunk the receiver had room for: in
//! `fabric bw -p shm` (64 sends of 64 KiB in flight) a pass took 300 to
//! 1,100 us, and every `ACK` of the window waited for its end. Traced on
//! the 2-vCPU AMD EPYC guest (3 runs each, time from the receiver's last
//! chunk of a message to the sender's completion of it, medians): 161,
//! 374 and 446 us before, under 1 us after (90th percentile 3-8 us).
//! The measured choice of the rendezvous copy (see
//! [Thresholds](#thresholds)) also timed pushes in a window by those
//! bunched `ACK`s: 3 ns per KiB at 1 MiB, so it never left pushing; now
//! 138-158 against CMA's 172-203 in the same run. Throughput did not
//! move beyond this host's noise (64 KiB and 1 MiB, alternating runs).
//!
//! ## Polling
//!
//! A CQ read that finds nothing looks at the head slot of each of the
//! engine's rings: one load of the slot's first line, which the reader's
//! core then shares. A sender writing that slot (claim, payload, header,
//! commit) takes the line back for its stores and loses it again to each
//! look that falls while it writes, one more trip of the line between the
//! cores per look. A reader that found its ring empty therefore looks again
//! only [`LOOK_GAP`](crate::ring::pace::LOOK_GAP) (50 ns) later; the reads
//! in between find nothing without touching the ring ([`crate::ring::pace`]:
//! one reading of the time-stamp counter per pass, its rate measured once
//! per process when a domain opens). Only while none of the endpoint's
//! operations or transfers is in flight: a step of a rendezvous waits for
//! the peer's next command (`CTS`, `ACK`, `SPLIT`, `PUT_DONE`), which a gap
//! would only delay. Spaced everywhere, a 16 KiB ping-pong (by cross-memory
//! attach, several commands per message) was 4-8% slower (10 alternating
//! rounds: 2.127 against 2.033 us); spaced only when nothing is in flight,
//! it took 1.002 times its time without spacing (8 rounds).
//!
//! How it was found: a C ping-pong over `libfabric.so.1` that waited
//! 80-220 ns between empty `fi_cq_read`s was 10% faster than one that did
//! not (one-way 0.29-0.30 against 0.32-0.34 us, shm 1 B), and a delay of
//! 370 ns made it slower (0.37-0.39 us). Measured with the gap in the
//! provider, 2-vCPU Intel Xeon guest, 10 alternating rounds, one-way us at
//! 1 B, before / after: `fabric pingpong` 0.300 / 0.281 (the median of the
//! per-round ratios 0.934), Debian's `fi_pingpong` on this library 0.327 /
//! 0.301; with gaps of 25, 100 and 150 ns `fabric pingpong` took 1.03,
//! 1.07 and 1.15 times its time with 50 ns. 64 B was 6-9% faster, 1 KiB to
//! 1 MiB unchanged within the host's noise.
//!
//! # Region layout
//!
//! One file per endpoint, `/dev/shm/fabric-shm-<uid>-<pid>-<n>-<hex>`,
//! mode `0600`. Offsets are relative to the start of the file (processes
//! map it at different addresses, so nothing in it is a pointer). All
//! words are native-endian and accessed atomically.
//!
//! A peer maps the whole file with its page tables populated
//! (`MAP_POPULATE`), so that no command faults on a page of the ring or a
//! bounce buffer later. That cost 0.35-0.6 ms for the 5 MiB of the
//! former default (measured on the 2-vCPU guest, with other work on it);
//! the 9 MiB of today's take about 1.4 times as long. It is paid once per region
//! and process (one mapping is shared by all endpoints of a process). It
//! is done when the address is inserted into an AV, when the region
//! exists then (the AV keeps the mapping while it lives), else by the
//! first operation towards the address; a receiver maps the region a
//! `HELLO` names, which finds the mapping already there when it has the
//! sender in an AV. Before, both mappings fell on a peer's first message
//! (about 1.1 ms).
//!
//! | offset | size | field | written by |
//! |---|---|---|---|
//! | 0 | 8 | magic `b"fabrshm1"` | owner, at creation |
//! | 8 | 4 | version (4) | owner, at creation |
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
//! | 96 | 4 | wake word: its value means nothing; a `pwrite(2)` here raises inotify `IN_MODIFY` | senders |
//! | 104 | 8 | owner's PID namespace (inode of `/proc/self/ns/pid`, 0 unknown) | owner, at creation |
//! | 128 | 8 | ring tail (own cache line) | senders (CAS) |
//! | 192 | 4 | wait futex word | senders (bump), receiver (waits) |
//! | 196 | 4 | receiver sleeping: bit 0 on the futex, bit 1 in `poll` on an inotify watch | receiver |
//! | 256 | 8 | bounce free-list head, `tag << 32 \| index` (own line) | both |
//! | 512 | 8 x count, to a line | bounce metadata: `next: u32` (while held by a sender: the fill mark of a stepped payload), `holder pid: u32` | both |
//! | ring offset | slots x slot size | ring slots | both |
//! | bounce data offset (page aligned) | count x size | bounce buffers | senders fill, receiver reads |
//!
//! With the [default](crate::region::RegionConfig::default) sizes (256 slots of
//! 4160 bytes, 64 bounce buffers of 128 KiB) the ring starts at 1024, the
//! buffers at 1069056, and the file is 9457664 bytes. The consumer's head
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
//! | 28 | 4 | ring flags: bit 0 = aux words present; bit 1 = stepped payload (a bounce buffer still being filled); other bits 0 |
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
//! L2. The default, 4160 bytes = 65 lines, carries 4 KiB inline, covering
//! 1 B to 4 KiB (libfabric's shm sends up to 4 KiB inline too); 256
//! slots are 1040 KiB. Up to 32 KiB goes through one bounce buffer; beyond that the provider uses
//! cross-memory attach, or pushes chunks of one bounce buffer each (see
//! [Protocols](#protocols)).
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
//! - **Claim** (sender): read `pos = tail`, ask for the slot's first line
//!   with the intent to write it (`prefetchw`: the line sits in the
//!   receiver's cache, and a plain load followed by the header's stores
//!   would fetch it, then claim it, two trips between the cores), read the
//!   slot's sequence (Acquire). If it equals `pos`, CAS `tail` from `pos` to `pos + 1`;
//!   winning the CAS makes the slot ours. If it is behind `pos`, the slot
//!   still holds the previous lap: the ring is full, return `Again`. If it
//!   is ahead, another sender took `pos`: reload `tail` and retry (at most
//!   65536 turns, then `Again`).
//! - **Fill**: write the inline payload's bytes past the slot's first line,
//!   then that line: the payload's first 16 bytes, the header fields and
//!   our pid as claimer (or fill a bounce buffer *before* claiming, so the
//!   claimed-but-uncommitted window stays a few stores long). The
//!   receiver polls the first line, and each look of it while the rest is
//!   written would cost the sender another trip for it: with the first
//!   line last, 64 B one-way measured 0.39-0.43 us where it had been
//!   0.41-0.74 (256 B 0.69-0.70 -> 0.47-0.49, 1 KiB 0.71-0.85 -> 0.52-0.60;
//!   4 rounds each, host's cache-line probe at 165 ns, together with the
//!   claim's `prefetchw` and the late free below).
//! - **Commit**: CAS the sequence from `pos` to `pos + 1` (SeqCst). It is a
//!   CAS, not a store, so that a slot the receiver reclaimed from a sender
//!   it believed dead cannot be resurrected (the late sender gets
//!   `Canceled`).
//! - **Consume** (receiver, head in private memory): the head slot's
//!   sequence (Acquire) equals `head + 1`: committed; copy the header
//!   fields out, validate them, prefetch the payload's lines (they travel
//!   from the sender's core while the caller matches the command: 1 KiB
//!   one-way 0.220 -> 0.186-0.19 us in `fabric pingpong`, host's fast
//!   mode, alternating runs), let the caller copy the payload and
//!   advance. The slot is freed (its sequence set to `head + slots`,
//!   Release: free for the next lap) at the start of the receiver's next
//!   call, not at once: that store pulls the line back from the sender's
//!   core, and the next atomic instruction (the completion queue's lock,
//!   the claim of the answer's slot) would wait for the trip on the
//!   message's path, where at the next call the receiver is polling. So
//!   one slot stays held until the receiver looks again. Both changes
//!   together, 1 B one-way in `fabric pingpong` (8 alternating rounds,
//!   2026-11-28): 0.20 -> 0.17 us with the host's cache-line probe at
//!   30 ns, 0.42-0.45 -> 0.38-0.41 us at 165 ns; 1 KiB 0.30 -> 0.26 us.
//!   Equal to
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
//!   head slot claimed forever. [`Receiver::recover`](crate::ring::Receiver::recover)
//!   skips such slots when their claimer pid is dead or, 50 ms on, still
//!   not recorded (a live sender whose commit then fails sends anew), and frees bounce
//!   buffers held by dead pids that no pending command names (that part
//!   alone, [`Receiver::free_dead_holders`](crate::ring::Receiver::free_dead_holders),
//!   also runs whenever the pool is dry: a sender that dies before
//!   claiming a slot leaves a held buffer and nothing that stalls).
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
//! [`Receiver::wait`](crate::ring::Receiver::wait) spins for 2 us, then yields
//! the CPU between looks for 50 us (so a peer on the same core gets to
//! run), then sleeps on a futex word in the region. [`ring::WaitPolicy`](crate::ring::WaitPolicy)
//! has the measurements behind these numbers: 0.22 us one-way with the two
//! processes on two cores, 3 us with both on one core, where busy polling
//! needs a 4 ms scheduler tick per message.
//!
//! The sleep, after spinning and yielding found nothing:
//!
//! 1. receiver: `v = futex.load()`; set bit 0 of `sleeping` (`SeqCst`);
//!    look at the head slot's sequence again (`SeqCst` load); if a command
//!    is there, clear the bit and return;
//! 2. receiver: `FUTEX_WAIT(futex, v, timeout)` (returns at once if
//!    `futex != v`), then clear the bit and look again;
//! 3. sender, after its commit CAS (`SeqCst`): if bit 0 of
//!    `sleeping.load(SeqCst)` is set, `futex += 1` and `FUTEX_WAKE(futex, 1)`.
//!
//! The provider's blocking CQ reads wait in `poll(2)` on several fds, which
//! a futex cannot join; they announce bit 1 instead and watch the region
//! file with inotify, and a sender that sees bit 1 `pwrite(2)`s the wake
//! word (same Dekker argument; see [`progress`](crate::progress) for when the provider
//! announces and withdraws).
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
//! bounds access here is in the [`region`](crate::region) module docs ("Soundness"): no
//! references to plain shared data, only atomics and volatile copies into
//! local memory; every value read once and validated locally; all bounds
//! from the locally validated layout and masked or checked indices; every
//! loop and sleep bounded.
