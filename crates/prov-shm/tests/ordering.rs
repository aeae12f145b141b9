//! Message ordering (`msg_order`, `max_order_*_size`, fi_endpoint(3)) of
//! shm RDM endpoints, checked by what an application can observe, across
//! two processes: this test binary runs itself again as the peer (the
//! `peer_process` test, idle unless `PROV_SHM_ORDER_ROLE` names a role).
//! Operations are posted back to back, without waiting for a completion
//! in between, over sizes that cross every protocol threshold: inline
//! (4 KiB), one bounce buffer (eager limit, 64 KiB), pushed chunks after a
//! clear-to-send (below the 256 KiB CMA limit), cross-memory attach and
//! split rendezvous (from it on, chosen per size by measurement).
//!
//! fi_endpoint(3) defines the `msg_order` bits as the order in which the
//! transport headers of one peer's operations are processed, and data
//! ordering (does a read see an earlier write's data?) separately, by the
//! `max_order_raw/war/waw_size` limits. shm offers every `msg_order` bit:
//! a sender's commands enter the peer's ring in the order posted (`ring`:
//! positions are claimed in program order; `ep/mod.rs`: eager sends and
//! injects skip the engine only while nothing is queued in it, so they
//! never pass an operation handed to it; `ep/tx.rs` `start_ops` starts
//! queued operations in order); the target takes them in ring order and
//! handles each before the next (`ep/state.rs` `progress`,
//! `on_command`).
//!
//! What these tests observe is that order and the data ordering that
//! follows from it: messages are matched (eager data copied), atomics
//! executed (old values copied into the answer), inline RMA writes (up to
//! the eager limit) stored, and reads up to 4 KiB answered with their data
//! when their command is handled. Hence SAS, RAS, WAS, RMA_RAR and the
//! four ATOMIC_* orderings for every size, and data ordering up to a
//! size: max_order_raw_size and max_order_waw_size = the largest inline
//! write (the eager limit, 64 KiB less the descriptor), max_order_war_size = the largest read
//! answered inline (4 KiB, a default ring slot's payload).
//!
//! Beyond those sizes data ordering does not hold (the headers are still
//! processed in order): an RMA write above the eager limit and below the
//! CMA limit (every size above the eager limit without CMA) only asks for
//! a clear-to-send, and its data comes in later `DATA` commands, behind
//! the initiator's later commands; a read above 4 KiB that is pushed takes
//! its data from memory after the rest of the ring batch was handled
//! (`run_pushes`).
//!
//! `advertised_orderings_are_the_tested_ones` checks that getinfo offers
//! exactly what is verified here.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use fabric_core::matching::Request;
use fabric_core::objects::{
    AtomicMsg, AtomicOp, CompletionFlags, CompletionQueue, Counter, CqEntry, CqErrEntry, Datatype,
    FiAddr, MemoryRegion, MrAccess, Provider, RmaIov, RmaMsg,
};
use fabric_core::testing::{one, pattern, same, seed, words};
use fabric_core::*;
use prov_shm::ShmProvider;
use prov_shm::region::RegionConfig;

/// Every ordering bit this file decides on.
const ANALYSED: MsgOrder = MsgOrder::STRICT
    .union(MsgOrder::RMA_RAR)
    .union(MsgOrder::RMA_RAW)
    .union(MsgOrder::RMA_WAR)
    .union(MsgOrder::RMA_WAW)
    .union(MsgOrder::ATOMIC_RAR)
    .union(MsgOrder::ATOMIC_RAW)
    .union(MsgOrder::ATOMIC_WAR)
    .union(MsgOrder::ATOMIC_WAW);

/// The message orderings shm offers: all of them (see the module docs).
const GUARANTEED: MsgOrder = ANALYSED;

/// Bytes of the descriptor an inline RMA write carries before its data
/// (`wire::DESC_MAX`: a head word, 4 remote ranges of 24 bytes, 4 local
/// pieces of 16; the crate docs' descriptor format).
const WRITE_DESCRIPTOR_MAX: usize = 8 + 4 * 24 + 4 * 16;

/// The largest RMA write stored when its command is handled (sent inline
/// with its data): data ordering holds up to it (max_order_raw_size,
/// max_order_waw_size).
fn inline_write_max() -> usize {
    let bounce = RegionConfig::default().bounce_size as usize;
    prov_shm::getinfo::eager_max().min(bounce - WRITE_DESCRIPTOR_MAX)
}

/// The largest RMA read answered with its data in the `ACK` (the ring
/// slot's inline payload): data ordering of a write after a read holds up
/// to it (max_order_war_size).
fn inline_read_max() -> usize {
    RegionConfig::default().slot_size as usize - 64
}

const ROLE: &str = "PROV_SHM_ORDER_ROLE";
/// Key and size of the registered memory of either side.
const KEY: u64 = 0x0de7;
const REGION: usize = 8 << 20;
/// Where the parent posts a receive inside its registered memory.
const RBUF: usize = 4 << 20;

/// Tags of the control messages between parent and child.
const CTRL_TAG: u64 = 0xc0de_0001;
const REPLY_TAG: u64 = 0xc0de_0002;
const END_TAG: u64 = 0xc0de_0003;
/// Tag of the tagged messages of a stream.
const STREAM_TAG: u64 = 0x77;
const WAS_TAG: u64 = 0x3000;
const RAS_TAG: u64 = 0x4000;

/// Commands to a `drive` child: words [command, a, b, c].
const CMD_STREAM: u64 = 1;
const CMD_WAS: u64 = 2;
const CMD_RAS: u64 = 3;

/// Message sizes: empty, injected, inline and past it, a bounce buffer,
/// the eager limit and past it, pushed, the CMA limit, large rendezvous.
const MSG_SIZES: [usize; 15] = [
    0,
    8,
    1000,
    1024,
    1025,
    4096,
    4097,
    32 * 1024,
    32 * 1024 + 1,
    64 * 1024,
    64 * 1024 + 1,
    100_000,
    256 * 1024,
    1 << 20,
    3 << 20,
];

fn range(off: usize, len: usize) -> [RmaIov; 1] {
    [RmaIov {
        addr: off as u64,
        len,
        key: KEY,
    }]
}

/// The messages of stream `round`: size and whether tagged. Round 100 and
/// up: a flood of eager messages.
fn stream(round: u64) -> Vec<(usize, bool)> {
    if round >= 100 {
        return (0..200).map(|i| (32 * 1024, i % 2 == 1)).collect();
    }
    let r = round as usize;
    (0..36)
        .map(|i| {
            (
                MSG_SIZES[(i * 7 + r * 5) % MSG_SIZES.len()],
                (i + r) % 3 == 0,
            )
        })
        .collect()
}

/// Remote CQ data of message `i` of stream `round` (its sequence number).
fn stream_seq(round: u64, i: usize) -> u64 {
    (round << 20) | i as u64
}

/// Retries `op` while it says `Again`, reading `cq` (progress) meanwhile.
fn retry(cq: &dyn CompletionQueue, mut op: impl FnMut() -> Result<()>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match op() {
            Ok(()) => return,
            Err(e) if e.kind() == ErrorKind::Again => {
                assert!(Instant::now() < deadline, "FI_EAGAIN for 30 s");
                let _ = cq.read(&mut []);
                std::thread::yield_now();
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// A completion or an error completion.
type Entry = std::result::Result<CqEntry, CqErrEntry>;

fn context(e: &Entry) -> u64 {
    match e {
        Ok(e) => e.context,
        Err(e) => e.entry.context,
    }
}

/// A CQ read in any order: entries nobody waits for yet are kept.
struct Inbox<'a> {
    cq: &'a dyn CompletionQueue,
    kept: Vec<Entry>,
}

impl<'a> Inbox<'a> {
    fn new(cq: &'a dyn CompletionQueue) -> Self {
        Inbox {
            cq,
            kept: Vec::new(),
        }
    }

    /// One read (progress); keeps what it returns.
    fn pump(&mut self) {
        let mut e = [CqEntry::default()];
        match self.cq.read(&mut e) {
            Ok(_) => self.kept.push(Ok(e[0])),
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) if err.kind() == ErrorKind::Avail => {
                self.kept.push(Err(self.cq.readerr().unwrap()));
            }
            Err(err) => panic!("cq read: {err}"),
        }
    }

    /// Whether an entry for which `pred` holds came.
    fn has(&self, pred: impl Fn(&Entry) -> bool) -> bool {
        self.kept.iter().any(pred)
    }

    /// The first entry for which `pred` holds (waiting up to 30 s).
    fn take(&mut self, what: &str, pred: impl Fn(&Entry) -> bool) -> Entry {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(i) = self.kept.iter().position(&pred) {
                return self.kept.remove(i);
            }
            assert!(Instant::now() < deadline, "{what}: nothing within 30 s");
            self.pump();
        }
    }

    /// The successful completion of `ctx`.
    fn done(&mut self, ctx: u64) -> CqEntry {
        self.take(&format!("completion {ctx}"), |e| context(e) == ctx)
            .unwrap_or_else(|e| panic!("operation {ctx} failed: {e:?}"))
    }
}

/// An endpoint's registered memory (the region is dropped first).
struct Mem {
    _mr: Box<dyn MemoryRegion>,
    mem: Vec<u8>,
}

fn registered(side: &Side) -> Mem {
    let mut mem = vec![0u8; REGION];
    // SAFETY: the vector's heap block is owned by the same struct,
    // declared after the region, so it outlives the registration.
    let mr = unsafe {
        reg(
            side.domain.as_ref(),
            &mut mem,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            KEY,
        )
    };
    Mem { _mr: mr, mem }
}

// ---------------------------------------------------------------------
// Operations of an initiator towards `to`.

/// RMA write of `src` to `to`'s memory at `off`.
///
/// # Safety
///
/// `src` stays alive and unchanged until the completion of `ctx`.
unsafe fn write(s: &Side, to: FiAddr, src: &[u8], off: usize, ctx: u64, data: Option<u64>) {
    let v = one(src);
    let r = range(off, src.len());
    let m = RmaMsg {
        iov: &v,
        desc: &[],
        addr: to,
        rma_iov: &r,
        context: ctx,
        data: data.unwrap_or(0),
    };
    let flags = if data.is_some() {
        OpFlags::REMOTE_CQ_DATA
    } else {
        OpFlags::empty()
    };
    // SAFETY: the caller's contract.
    retry(s.cq.as_ref(), || unsafe { s.ep.writemsg(&m, flags) });
}

/// RMA read of `to`'s `off..off + dst.len()` into `dst`.
///
/// # Safety
///
/// `dst` stays alive and untouched until the completion of `ctx`.
unsafe fn read(s: &Side, to: FiAddr, dst: &mut [u8], off: usize, ctx: u64) {
    let v = one(dst);
    let r = range(off, dst.len());
    let m = RmaMsg {
        iov: &v,
        desc: &[],
        addr: to,
        rma_iov: &r,
        context: ctx,
        data: 0,
    };
    // SAFETY: the caller's contract.
    retry(s.cq.as_ref(), || unsafe {
        s.ep.readmsg(&m, OpFlags::empty())
    });
}

/// An atomic on `operands.len() / 8` u64 elements at `off` (the operands
/// of FI_ATOMIC_READ only give the count), fetching into `result`.
///
/// # Safety
///
/// The buffers stay alive (`result` untouched) until the completion of
/// `ctx`.
#[allow(clippy::too_many_arguments)]
unsafe fn atomic(
    s: &Side,
    to: FiAddr,
    op: AtomicOp,
    operands: &[u8],
    off: usize,
    result: Option<&mut [u8]>,
    ctx: u64,
    data: Option<u64>,
) {
    let v = one(operands);
    let res = result.map(|r| one(r));
    let r = [RmaIov {
        addr: off as u64,
        len: operands.len() / 8,
        key: KEY,
    }];
    let m = AtomicMsg {
        iov: if op == AtomicOp::AtomicRead { &[] } else { &v },
        desc: &[],
        addr: to,
        rma_iov: &r,
        datatype: Datatype::Uint64,
        op,
        result: res.as_ref().map_or(&[][..], |r| &r[..]),
        compare: &[],
        context: ctx,
        data: data.unwrap_or(0),
    };
    let flags = if data.is_some() {
        OpFlags::REMOTE_CQ_DATA
    } else {
        OpFlags::empty()
    };
    // SAFETY: the caller's contract.
    retry(s.cq.as_ref(), || unsafe { s.ep.atomicmsg(&m, flags) });
}

/// Sends `src` (tagged with `tag` when given) with remote CQ data `data`;
/// injected when `ctx` is 0.
///
/// # Safety
///
/// Unless injected, `src` stays alive and unchanged until the completion
/// of `ctx`.
unsafe fn send(s: &Side, to: FiAddr, src: &[u8], tag: Option<u64>, data: u64, ctx: u64) {
    let ep = &s.ep;
    if ctx == 0 {
        retry(s.cq.as_ref(), || match tag {
            Some(t) => ep.tinject(src, to, t, Some(data)),
            None => ep.inject(src, to, Some(data)),
        });
        return;
    }
    let v = one(src);
    let mut m = msg(&v, to, tag.unwrap_or(0), 0, ctx);
    m.data = data;
    // SAFETY: the caller's contract.
    retry(s.cq.as_ref(), || unsafe {
        match tag {
            Some(_) => ep.tsendmsg(&m, OpFlags::REMOTE_CQ_DATA),
            None => ep.sendmsg(&m, OpFlags::REMOTE_CQ_DATA),
        }
    });
}

/// Posts a receive.
///
/// # Safety
///
/// `dst` stays alive and untouched until the completion of `ctx`.
unsafe fn recv(s: &Side, dst: &mut [u8], tag: Option<u64>, ctx: u64) {
    let v = one(dst);
    let m = msg(&v, FiAddr::UNSPEC, tag.unwrap_or(0), 0, ctx);
    // SAFETY: the caller's contract.
    unsafe {
        match tag {
            Some(_) => s.ep.trecvmsg(&m, OpFlags::empty()),
            None => s.ep.recvmsg(&m, OpFlags::empty()),
        }
    }
    .unwrap();
}

/// Waits for the completions of `ctxs` (any order) on `s`'s CQ, reading
/// `drive` meanwhile; `Err` with the first error completion.
fn wait_ctxs(
    s: &Side,
    drive: &[&dyn CompletionQueue],
    ctxs: &[u64],
) -> std::result::Result<(), CqErrEntry> {
    let mut left = ctxs.to_vec();
    while !left.is_empty() {
        let e = next(s.cq.as_ref(), drive)?;
        let i = left
            .iter()
            .position(|&c| c == e.context)
            .unwrap_or_else(|| panic!("unexpected completion {e:?}"));
        left.swap_remove(i);
    }
    Ok(())
}

// ---------------------------------------------------------------------
// The child process.

/// The peer side, in the child process.
#[test]
fn peer_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let me = side(&info());
    let mut region = vec![0u8; REGION];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let (_mr, parent) = unsafe { peer_start(me.domain.as_ref(), me.ep.as_ref(), &mut region, KEY) };
    let parent = insert(&me, &parent);
    match role.as_str() {
        // The target of the parent's RMA and atomics: progress only.
        "serve" => loop {
            let mut e = [CqEntry::default()];
            let _ = me.cq.sread(&mut e, Some(Duration::from_millis(100)));
        },
        // The initiator: runs the parent's commands, answers with a status.
        "drive" => loop {
            let mut cmd = [0u8; 32];
            // SAFETY: `cmd` outlives the completion awaited next.
            unsafe { recv(&me, &mut cmd, Some(CTRL_TAG), 1) };
            loop {
                let mut e = [CqEntry::default()];
                match me.cq.sread(&mut e, Some(Duration::from_millis(100))) {
                    Ok(_) if e[0].context == 1 => break,
                    Ok(_) => panic!("child: unexpected completion {:?}", e[0]),
                    Err(err) if err.kind() == ErrorKind::Again => {}
                    Err(err) => panic!("child: {err}"),
                }
            }
            let w: Vec<u64> = cmd
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let status = match w[0] {
                CMD_STREAM => child_stream(&me, parent, w[1]),
                CMD_WAS => child_was(&me, parent, w[1], w[2] as usize, w[3]),
                CMD_RAS => child_ras(&me, parent, w[1], w[2] as usize, w[3]),
                c => panic!("child: unknown command {c}"),
            };
            // SAFETY: injected.
            unsafe { send(&me, parent, &status.to_le_bytes(), Some(REPLY_TAG), 0, 0) };
        },
        other => panic!("unknown role {other}"),
    }
}

/// Status of a child's command: 0 done and right, else what went wrong.
const BAD_DATA: u64 = 1;
const FAILED: u64 = 2;

/// Sends stream `round` to the parent back to back, then the end marker;
/// waits for the sends.
fn child_stream(me: &Side, parent: FiAddr, round: u64) -> u64 {
    let plan = stream(round);
    let bodies: Vec<Vec<u8>> = plan
        .iter()
        .enumerate()
        .map(|(i, &(size, _))| pattern(size, stream_seq(round, i)))
        .collect();
    let mut ctxs = Vec::new();
    for (i, &(size, tagged)) in plan.iter().enumerate() {
        // Injected (inline, straight into the ring) every other time it
        // may be.
        let ctx = if size <= 1024 && i % 2 == 0 {
            0
        } else {
            100 + i as u64
        };
        if ctx != 0 {
            ctxs.push(ctx);
        }
        let tag = tagged.then_some(STREAM_TAG);
        // SAFETY: `bodies` outlives the completions awaited below.
        unsafe { send(me, parent, &bodies[i], tag, stream_seq(round, i), ctx) };
    }
    // SAFETY: injected.
    unsafe { send(me, parent, b"end", Some(END_TAG), 0, 0) };
    match wait_ctxs(me, &[], &ctxs) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("child: stream send failed: {e:?}");
            FAILED
        }
    }
}

/// A message tagged `WAS_TAG + n`, then an 8-byte write to the parent
/// carrying CQ data `n` (`how`: 0 RMA write, 1 inject_write, 2 atomic).
fn child_was(me: &Side, parent: FiAddr, n: u64, size: usize, how: u64) -> u64 {
    let body = pattern(size, n);
    let word = pattern(8, n + 1);
    let ctx = if size <= 8 { 0 } else { 2 };
    let mut ctxs = vec![];
    // SAFETY: the buffers outlive the completions awaited below.
    unsafe {
        send(me, parent, &body, Some(WAS_TAG + n), n, ctx);
        match how {
            0 => write(me, parent, &word, 0, 1, Some(n)),
            1 => retry(me.cq.as_ref(), || {
                me.ep.inject_write(&word, parent, range(0, 8)[0], Some(n))
            }),
            _ => atomic(
                me,
                parent,
                AtomicOp::AtomicWrite,
                &word,
                0,
                None,
                1,
                Some(n),
            ),
        }
    }
    if how != 1 {
        ctxs.push(1);
    }
    if ctx != 0 {
        ctxs.push(ctx);
    }
    match wait_ctxs(me, &[], &ctxs) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("child: WAS failed: {e:?}");
            FAILED
        }
    }
}

/// A message tagged `RAS_TAG + n`, then a read from the parent: `mode` 0
/// reads 8 bytes at 0; 1 reads the parent's receive buffer, which must
/// hold the message when it went eagerly.
fn child_ras(me: &Side, parent: FiAddr, n: u64, size: usize, mode: u64) -> u64 {
    let body = pattern(size, n);
    let ctx = if size <= 8 { 0 } else { 2 };
    let mut back = vec![0u8; if mode == 0 { 8 } else { size }];
    let off = if mode == 0 { 0 } else { RBUF };
    // SAFETY: the buffers outlive the completions awaited below.
    unsafe {
        send(me, parent, &body, Some(RAS_TAG + n), n, ctx);
        read(me, parent, &mut back, off, 1);
    }
    let ctxs: &[u64] = if ctx == 0 { &[1] } else { &[1, 2] };
    if let Err(e) = wait_ctxs(me, &[], ctxs) {
        eprintln!("child: RAS failed: {e:?}");
        return FAILED;
    }
    if mode == 1 && size <= prov_shm::getinfo::eager_max() && back != body {
        eprintln!("child: RAS: the read of {size} bytes did not return the message");
        return BAD_DATA;
    }
    0
}

// ---------------------------------------------------------------------
// The parent's side.

/// This process's endpoint (with a remote-read counter and registered
/// memory) and the child, of role `role`.
struct Pair {
    _peer: PeerProcess,
    p: FiAddr,
    mem: Mem,
    remote_reads: Box<dyn Counter>,
    me: Side,
}

fn pair_with(role: &str) -> Pair {
    let (me, mut counters) = side_counting(&info(), &[Caps::REMOTE_READ]);
    let mem = registered(&me);
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(ROLE, role);
    let peer = PeerProcess::spawn(cmd, &me.ep.getname().unwrap());
    let p = insert(&me, &peer.name);
    Pair {
        _peer: peer,
        p,
        mem,
        remote_reads: counters.remove(0),
        me,
    }
}

impl Pair {
    /// Waits for the completions of `ctxs`.
    fn wait(&self, ctxs: &[u64]) {
        if let Err(e) = wait_ctxs(&self.me, &[], ctxs) {
            panic!("error completion {e:?}");
        }
    }

    /// Sends a command to the `drive` child.
    fn command(&self, w: [u64; 4]) {
        let b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        // SAFETY: injected.
        unsafe { send(&self.me, self.p, &b, Some(CTRL_TAG), 0, 0) };
    }

    /// Posts the receive of the child's status (context `REPLY_CTX`) into
    /// `into`.
    ///
    /// # Safety
    ///
    /// `into` stays alive until the completion.
    unsafe fn expect_reply(&self, into: &mut [u8; 8]) {
        // SAFETY: the caller's contract.
        unsafe { recv(&self.me, into, Some(REPLY_TAG), REPLY_CTX) };
    }

    /// Whether a tagged message with `tag` waits here (FI_PEEK); its
    /// length.
    fn peek(&self, inbox: &mut Inbox<'_>, tag: u64) -> Option<usize> {
        let ctx = 0xbeef_0000 + tag;
        let m = msg(&[], FiAddr::UNSPEC, tag, 0, ctx);
        // SAFETY: a peek names no buffer.
        unsafe { self.me.ep.trecvmsg(&m, OpFlags::PEEK) }.unwrap();
        match inbox.take("peek", |e| context(e) == ctx) {
            Ok(e) => Some(e.len),
            Err(e) => {
                assert_eq!(e.err, ErrorKind::NoMsg, "{e:?}");
                None
            }
        }
    }
}

const REPLY_CTX: u64 = 0xc0de;

// ---------------------------------------------------------------------
// RAW, WAW, WAR up to their sizes; RMA_RAR.

#[test]
fn raw_a_read_returns_a_write_posted_just_before_it_up_to_max_order_raw_size() {
    let x = pair_with("serve");
    let (me, p) = (&x.me, x.p);
    let limit = inline_write_max();
    let sizes = [1usize, 8, 1000, 1024, 1025, 4096, 16 * 1024, limit];
    for size in sizes.into_iter().filter(|&s| s <= limit) {
        for round in 0..6 {
            let off = (round * 4099) % (REGION - size);
            let src = pattern(size, seed());
            let mut back = vec![0u8; size];
            // SAFETY: the buffers outlive the completions awaited next.
            unsafe {
                write(me, p, &src, off, 1, None);
                read(me, p, &mut back, off, 2);
            }
            x.wait(&[1, 2]);
            same(&format!("RAW, {size} bytes"), &back, &src);
        }
        // Reads of every size after it.
        for rsize in [size, 1 << 20, 4 << 20] {
            let src = pattern(size, seed());
            let mut back = vec![0u8; rsize];
            // SAFETY: as above.
            unsafe {
                write(me, p, &src, 0, 1, None);
                read(me, p, &mut back, 0, 2);
            }
            x.wait(&[1, 2]);
            same(&format!("RAW, {size} then {rsize}"), &back[..size], &src);
        }
    }
    // Several pairs in flight at once, on separate ranges.
    let srcs: Vec<Vec<u8>> = (0..8).map(|_| pattern(limit, seed())).collect();
    let mut backs = vec![vec![0u8; limit]; 8];
    for (i, (s, b)) in srcs.iter().zip(backs.iter_mut()).enumerate() {
        let off = i * 65536;
        // SAFETY: the buffers outlive the completions awaited below.
        unsafe {
            write(me, p, s, off, 10 + i as u64, None);
            read(me, p, b, off, 20 + i as u64);
        }
    }
    x.wait(&(10..18).chain(20..28).collect::<Vec<_>>());
    for (s, b) in srcs.iter().zip(&backs) {
        same("RAW in a pipeline", b, s);
    }
    // Injected writes.
    for size in [1usize, 8, 1024] {
        for _ in 0..6 {
            let src = pattern(size, seed());
            let mut back = vec![0u8; size];
            retry(me.cq.as_ref(), || {
                me.ep.inject_write(&src, p, range(64, size)[0], None)
            });
            // SAFETY: `back` outlives the completion awaited next.
            unsafe { read(me, p, &mut back, 64, 1) };
            x.wait(&[1]);
            same("RAW after inject_write", &back, &src);
        }
    }
    // RMA and atomics mixed.
    for count in [1usize, 1024] {
        for _ in 0..4 {
            let off = 8 * 1024;
            let w = pattern(8 * count, seed());
            let mut fetched = vec![0u8; 8 * count];
            // SAFETY: the buffers outlive the completions awaited next.
            unsafe {
                write(me, p, &w, off, 1, None);
                atomic(
                    me,
                    p,
                    AtomicOp::AtomicRead,
                    &w,
                    off,
                    Some(&mut fetched),
                    2,
                    None,
                );
            }
            x.wait(&[1, 2]);
            same("atomic read after RMA write", &fetched, &w);
            let w = pattern(8 * count, seed());
            let mut back = vec![0u8; 8 * count];
            // SAFETY: as above.
            unsafe {
                atomic(me, p, AtomicOp::AtomicWrite, &w, off, None, 3, None);
                read(me, p, &mut back, off, 4);
            }
            x.wait(&[3, 4]);
            same("RMA read after atomic write", &back, &w);
        }
    }
}

#[test]
fn rma_rar_reads_posted_back_to_back_agree() {
    let x = pair_with("serve");
    let (me, p) = (&x.me, x.p);
    for size in [8usize, 1024, 1025, 32 * 1024, 100_000, 256 * 1024, 4 << 20] {
        let src = pattern(size, seed());
        // SAFETY: `src` outlives the completion awaited next.
        unsafe { write(me, p, &src, 0, 1, None) };
        x.wait(&[1]);
        let mut b1 = vec![0u8; size];
        let mut b2 = vec![0u8; 8];
        let mut b3 = vec![0u8; size];
        // SAFETY: the buffers outlive the completions awaited next.
        unsafe {
            read(me, p, &mut b1, 0, 1);
            read(me, p, &mut b2, 0, 2);
            read(me, p, &mut b3, 0, 3);
        }
        x.wait(&[1, 2, 3]);
        same("RMA_RAR", &b1, &src);
        same("RMA_RAR", &b2, &src[..8.min(size)]);
        same("RMA_RAR", &b3, &src);
    }
}

#[test]
fn waw_the_later_of_two_writes_wins_up_to_max_order_waw_size() {
    let x = pair_with("serve");
    let (me, p) = (&x.me, x.p);
    let limit = inline_write_max();
    let sizes = [8usize, 1024, 1025, 4096, limit];
    for first in sizes {
        for second in sizes {
            for round in 0..3 {
                let off = round * 65536 + 8;
                let p1 = pattern(first, seed());
                let p2 = pattern(second, seed());
                let mut back = vec![0u8; first.max(second)];
                // SAFETY: the buffers outlive the completions awaited next.
                unsafe {
                    write(me, p, &p1, off, 1, None);
                    write(me, p, &p2, off, 2, None);
                }
                x.wait(&[1, 2]);
                // SAFETY: as above.
                unsafe { read(me, p, &mut back, off, 3) };
                x.wait(&[3]);
                let what = format!("WAW, {first} then {second} bytes");
                same(&what, &back[..second], &p2);
                if first > second {
                    same(&what, &back[second..], &p1[second..]);
                }
            }
        }
    }
    // Injected and atomic writes among them.
    for _ in 0..4 {
        let big = pattern(limit, seed());
        let small = pattern(1024, seed());
        let word = pattern(8, seed());
        let mut back = vec![0u8; limit];
        // SAFETY: the buffers outlive the completions awaited next.
        unsafe { write(me, p, &big, 0, 1, None) };
        retry(me.cq.as_ref(), || {
            me.ep.inject_write(&small, p, range(0, 1024)[0], None)
        });
        // SAFETY: as above.
        unsafe {
            atomic(me, p, AtomicOp::AtomicWrite, &word, 2048, None, 2, None);
            read(me, p, &mut back, 0, 3);
        }
        x.wait(&[1, 2, 3]);
        let mut want = big.clone();
        want[..1024].copy_from_slice(&small);
        want[2048..2056].copy_from_slice(&word);
        same("WAW: write, inject_write, atomic write", &back, &want);
        let word = pattern(8, seed());
        let big = pattern(limit, seed());
        // SAFETY: as above.
        unsafe {
            atomic(me, p, AtomicOp::AtomicWrite, &word, 2048, None, 1, None);
            write(me, p, &big, 0, 2, None);
            read(me, p, &mut back, 0, 3);
        }
        x.wait(&[1, 2, 3]);
        same("WAW: atomic write, then RMA write", &back, &big);
    }
}

#[test]
fn war_a_read_does_not_see_a_later_write_up_to_max_order_war_size() {
    let x = pair_with("serve");
    let (me, p) = (&x.me, x.p);
    let limit = inline_read_max();
    for size in [1usize, 8, 1000, 1024, 1025, limit - 1, limit] {
        for round in 0..6 {
            let off = round * 8192;
            let old = pattern(size, seed());
            // SAFETY: `old` outlives the completion awaited next.
            unsafe { write(me, p, &old, off, 1, None) };
            x.wait(&[1]);
            let new = pattern(size, seed());
            let mut back = vec![0u8; size];
            // SAFETY: the buffers outlive the completions awaited next.
            unsafe {
                read(me, p, &mut back, off, 2);
                write(me, p, &new, off, 3, None);
            }
            x.wait(&[2, 3]);
            same(&format!("WAR, {size} bytes"), &back, &old);
            // Atomic writes after RMA reads, and the reverse.
            if size >= 8 {
                let word = pattern(8, seed());
                let now = {
                    let mut v = new.clone();
                    v[..8].copy_from_slice(&word);
                    v
                };
                let mut fetched = [0u8; 8];
                // SAFETY: as above.
                unsafe {
                    read(me, p, &mut back, off, 4);
                    atomic(me, p, AtomicOp::AtomicWrite, &word, off, None, 5, None);
                    atomic(
                        me,
                        p,
                        AtomicOp::AtomicRead,
                        &word,
                        off,
                        Some(&mut fetched),
                        6,
                        None,
                    );
                    write(me, p, &old, off, 7, None);
                }
                x.wait(&[4, 5, 6, 7]);
                same("WAR: RMA read, then atomic write", &back, &new);
                same("WAR: atomic read, then RMA write", &fetched, &now[..8]);
            }
        }
    }
}

// ---------------------------------------------------------------------
// ATOMIC_RAR, ATOMIC_RAW, ATOMIC_WAR, ATOMIC_WAW.

#[test]
fn atomics_are_ordered_among_themselves() {
    let x = pair_with("serve");
    let (me, p) = (&x.me, x.p);
    let off = 64;
    for count in [1usize, 128, 1024] {
        for round in 0..3u64 {
            // Fetch-and-add chain: the k-th fetch returns start + k.
            let start = 1000 * round;
            let init = words(start, count);
            // SAFETY: the buffers outlive the completions awaited below.
            unsafe { atomic(me, p, AtomicOp::AtomicWrite, &init, off, None, 1, None) };
            x.wait(&[1]);
            let inc = words(1, count);
            let k = 16;
            let mut results = vec![vec![0u8; 8 * count]; k];
            for (i, r) in results.iter_mut().enumerate() {
                // SAFETY: as above.
                unsafe {
                    atomic(
                        me,
                        p,
                        AtomicOp::Sum,
                        &inc,
                        off,
                        Some(r.as_mut_slice()),
                        10 + i as u64,
                        None,
                    )
                };
            }
            x.wait(&(10..10 + k as u64).collect::<Vec<_>>());
            for (i, r) in results.iter().enumerate() {
                same(
                    &format!("ATOMIC_RAR: fetch {i} of {count} elements"),
                    r,
                    &words(start + i as u64, count),
                );
            }
            let v = words(seed(), count);
            let w = words(seed(), count);
            let mut got = vec![0u8; 8 * count];
            let mut got2 = vec![0u8; 8 * count];
            let mut last = vec![0u8; 8 * count];
            // ATOMIC_RAW, then ATOMIC_WAR, then ATOMIC_WAW (write, add).
            let ten = words(10, count);
            let five = words(5, count);
            // SAFETY: as above.
            unsafe {
                atomic(me, p, AtomicOp::AtomicWrite, &v, off, None, 1, None);
                atomic(
                    me,
                    p,
                    AtomicOp::AtomicRead,
                    &v,
                    off,
                    Some(&mut got),
                    2,
                    None,
                );
                atomic(
                    me,
                    p,
                    AtomicOp::AtomicRead,
                    &v,
                    off,
                    Some(&mut got2),
                    3,
                    None,
                );
                atomic(me, p, AtomicOp::AtomicWrite, &w, off, None, 4, None);
                atomic(me, p, AtomicOp::AtomicWrite, &ten, off, None, 5, None);
                atomic(me, p, AtomicOp::Sum, &five, off, None, 6, None);
                atomic(
                    me,
                    p,
                    AtomicOp::AtomicRead,
                    &v,
                    off,
                    Some(&mut last),
                    7,
                    None,
                );
            }
            x.wait(&[1, 2, 3, 4, 5, 6, 7]);
            same("ATOMIC_RAW", &got, &v);
            same("ATOMIC_WAR", &got2, &v);
            same("ATOMIC_WAW (write, add)", &last, &words(15, count));
            // ATOMIC_WAW (add, write).
            // SAFETY: as above.
            unsafe {
                atomic(me, p, AtomicOp::Sum, &five, off, None, 1, None);
                atomic(me, p, AtomicOp::AtomicWrite, &ten, off, None, 2, None);
                atomic(
                    me,
                    p,
                    AtomicOp::AtomicRead,
                    &v,
                    off,
                    Some(&mut last),
                    3,
                    None,
                );
            }
            x.wait(&[1, 2, 3]);
            same("ATOMIC_WAW (add, write)", &last, &ten);
        }
    }
    // Injected atomics keep their place too.
    for _ in 0..8 {
        let v = words(seed(), 1);
        let mut got = [0u8; 8];
        let op = AtomicMsg {
            iov: &one(&v),
            desc: &[],
            addr: p,
            rma_iov: &[RmaIov {
                addr: off as u64,
                len: 1,
                key: KEY,
            }],
            datatype: Datatype::Uint64,
            op: AtomicOp::AtomicWrite,
            result: &[],
            compare: &[],
            context: 0,
            data: 0,
        };
        // SAFETY: an injected atomic copies its operands during the call.
        retry(me.cq.as_ref(), || unsafe {
            me.ep.atomicmsg(&op, OpFlags::INJECT)
        });
        // SAFETY: `got` outlives the completion awaited next.
        unsafe {
            atomic(
                me,
                p,
                AtomicOp::AtomicRead,
                &v,
                off,
                Some(&mut got),
                1,
                None,
            )
        };
        x.wait(&[1]);
        same("ATOMIC_RAW after an injected atomic", &got, &v);
    }
}

// ---------------------------------------------------------------------
// SAS, WAS, RAS: the child sends, this process is the target.

/// Marks the contexts of a stream's receives (class in bit 32, index
/// below).
const STREAM_CTX: u64 = 1 << 48;

/// How the receives meet a stream.
#[derive(Debug, Clone, Copy)]
enum Posting {
    /// All posted before the child sends.
    Expected,
    /// All posted once the stream has arrived.
    Unexpected,
    /// Half of each class before, half after.
    Mixed,
}

#[test]
fn sas_messages_match_receives_in_the_order_they_were_sent() {
    let x = pair_with("drive");
    let me = &x.me;
    let rounds = [
        (0u64, Posting::Expected),
        (1, Posting::Unexpected),
        (2, Posting::Mixed),
        (3, Posting::Expected),
        (4, Posting::Unexpected),
        (5, Posting::Mixed),
        (100, Posting::Unexpected),
    ];
    for (round, posting) in rounds {
        let plan = stream(round);
        let class: [Vec<usize>; 2] = [0, 1].map(|c| {
            (0..plan.len())
                .filter(|&i| usize::from(plan[i].1) == c)
                .collect()
        });
        let mut bufs: [Vec<Vec<u8>>; 2] =
            [0, 1].map(|c| class[c].iter().map(|&i| vec![0u8; plan[i].0]).collect());
        let before = |c: usize| match posting {
            Posting::Expected => class[c].len(),
            Posting::Unexpected => 0,
            Posting::Mixed => class[c].len() / 2,
        };
        let post = |c: usize, j: usize, buf: &mut Vec<u8>| {
            let tag = (c == 1).then_some(STREAM_TAG);
            // SAFETY: the buffers live until the end of the round, after
            // every completion was read.
            unsafe { recv(me, buf, tag, STREAM_CTX | ((c as u64) << 32) | j as u64) };
        };
        for (c, of_class) in bufs.iter_mut().enumerate() {
            for (j, buf) in of_class.iter_mut().enumerate().take(before(c)) {
                post(c, j, buf);
            }
        }
        let mut end = [0u8; 8];
        let mut status = [0u8; 8];
        // SAFETY: the buffers outlive the completions awaited below.
        unsafe {
            recv(me, &mut end, Some(END_TAG), 0xe0d);
            x.expect_reply(&mut status);
        }
        x.command([CMD_STREAM, round, 0, 0]);
        let mut inbox = Inbox::new(me.cq.as_ref());
        // The end marker came after the stream: every message has arrived
        // (or been announced) once it is here.
        inbox.done(0xe0d);
        for (c, of_class) in bufs.iter_mut().enumerate() {
            for (j, buf) in of_class.iter_mut().enumerate().skip(before(c)) {
                post(c, j, buf);
            }
        }
        for _ in 0..plan.len() {
            let e = inbox
                .take("a stream message", |e| context(e) & STREAM_CTX != 0)
                .unwrap_or_else(|e| panic!("SAS ({posting:?}): receive failed {e:?}"));
            let (c, j) = (
                (e.context >> 32 & 1) as usize,
                (e.context & 0xffff_ffff) as usize,
            );
            let want = class[c][j];
            assert_eq!(
                e.data,
                stream_seq(round, want),
                "SAS round {round} ({posting:?}): receive {j} of class {c} got message {} instead of {want}",
                e.data & 0xfffff
            );
            assert_eq!(e.len, plan[want].0);
            same(
                &format!("SAS round {round} ({posting:?}) data"),
                &bufs[c][j],
                &pattern(plan[want].0, stream_seq(round, want)),
            );
        }
        inbox.done(REPLY_CTX);
        assert_eq!(u64::from_le_bytes(status), 0, "the child's sends failed");
    }
}

#[test]
fn was_a_write_finds_the_earlier_message_arrived() {
    let x = pair_with("drive");
    let me = &x.me;
    let mut n = 0u64;
    for size in [0usize, 8, 1024, 4096, 40_000, 300_000, 1 << 20] {
        for how in 0..3u64 {
            for expected in [false, true] {
                n += 1;
                let tag = WAS_TAG + n;
                let mut into = vec![0u8; size];
                let mut status = [0u8; 8];
                let mut inbox = Inbox::new(me.cq.as_ref());
                // SAFETY: the buffers outlive the completions awaited below.
                unsafe {
                    x.expect_reply(&mut status);
                    if expected {
                        recv(me, &mut into, Some(tag), 9);
                    }
                }
                x.command([CMD_WAS, n, size as u64, how]);
                inbox.take("the write's CQ data", |e| {
                    matches!(e, Ok(e) if e.flags.contains(CompletionFlags::RMA | CompletionFlags::REMOTE_CQ_DATA) && e.data == n)
                })
                .unwrap_or_else(|e| panic!("the write failed: {e:?}"));
                let what = format!(
                    "WAS: the write (way {how}) overtook a message of {size} bytes (expected {expected})"
                );
                if expected {
                    // Matched (not cancellable) unless already complete.
                    if !inbox.has(|e| context(e) == 9) {
                        let e = x.me.ep.cancel(9).unwrap_err();
                        assert_eq!(e.kind(), ErrorKind::NoEnt, "{what}: {e}");
                    }
                } else {
                    assert_eq!(x.peek(&mut inbox, tag), Some(size), "{what}");
                    // SAFETY: `into` outlives the completion awaited next.
                    unsafe { recv(me, &mut into, Some(tag), 9) };
                }
                inbox.done(9);
                same("WAS message", &into, &pattern(size, n));
                inbox.done(REPLY_CTX);
                assert_eq!(u64::from_le_bytes(status), 0, "the child failed");
            }
        }
    }
}

#[test]
fn ras_a_read_finds_the_earlier_message_arrived() {
    let mut x = pair_with("drive");
    let mut n = 0u64;
    for size in [0usize, 8, 1024, 4096, 32 * 1024, 40_000, 300_000, 1 << 20] {
        for round in 0..3 {
            for mode in [0u64, 1] {
                n += 1;
                let tag = RAS_TAG + n;
                let mut into = vec![0u8; size];
                let mut status = [0u8; 8];
                let base = x.remote_reads.read();
                let me = &x.me;
                // SAFETY: the buffers outlive the completions awaited
                // below; the receive of mode 1 lands in registered memory
                // that lives as long as `x`.
                unsafe {
                    x.expect_reply(&mut status);
                    if mode == 1 {
                        let rb = &mut x.mem.mem[RBUF..RBUF + size];
                        rb.fill(0);
                        recv(me, rb, Some(tag), 9);
                    }
                }
                x.command([CMD_RAS, n, size as u64, mode]);
                let mut inbox = Inbox::new(me.cq.as_ref());
                // Once this side has answered the read, the message must
                // be known here.
                let deadline = Instant::now() + Duration::from_secs(30);
                while x.remote_reads.read() == base {
                    assert!(Instant::now() < deadline, "the read never came");
                    inbox.pump();
                }
                let what = format!(
                    "RAS: the read overtook a message of {size} bytes (mode {mode}, round {round})"
                );
                if mode == 1 {
                    if !inbox.has(|e| context(e) == 9) {
                        let e = x.me.ep.cancel(9).unwrap_err();
                        assert_eq!(e.kind(), ErrorKind::NoEnt, "{what}: {e}");
                    }
                    inbox.done(9);
                    same(
                        "RAS message",
                        &x.mem.mem[RBUF..RBUF + size],
                        &pattern(size, n),
                    );
                } else {
                    assert_eq!(x.peek(&mut inbox, tag), Some(size), "{what}");
                    // SAFETY: `into` outlives the completion awaited next.
                    unsafe { recv(me, &mut into, Some(tag), 9) };
                    inbox.done(9);
                    same("RAS message", &into, &pattern(size, n));
                }
                inbox.done(REPLY_CTX);
                assert_eq!(
                    u64::from_le_bytes(status),
                    0,
                    "{what}: the child's read did not return the eager message"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------
// What getinfo says.

fn getinfo(hints: impl FnOnce(&mut Info)) -> Result<Vec<Info>> {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC;
    h.mode = Mode::all();
    h.ep_attr.ep_type = EpType::Rdm;
    hints(&mut h);
    ShmProvider.getinfo(&Request {
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    })
}

#[test]
fn advertised_orderings_are_the_tested_ones() {
    let raw = inline_write_max();
    let war = inline_read_max();
    // Asking for the verified orderings and sizes must match ...
    getinfo(|h| {
        h.tx_attr.msg_order = GUARANTEED;
        h.rx_attr.msg_order = GUARANTEED;
        h.ep_attr.max_order_raw_size = raw;
        h.ep_attr.max_order_waw_size = raw;
        h.ep_attr.max_order_war_size = war;
    })
    .unwrap_or_else(|e| panic!("the verified orderings are not offered: {e}"));
    // ... and the default answer must offer exactly them, with the sizes
    // that hold.
    for i in getinfo(|_| {}).unwrap() {
        assert_eq!(
            i.tx_attr.msg_order & ANALYSED,
            GUARANTEED,
            "tx_attr.msg_order"
        );
        assert_eq!(
            i.rx_attr.msg_order & ANALYSED,
            GUARANTEED,
            "rx_attr.msg_order"
        );
        assert_eq!(i.ep_attr.max_order_raw_size, raw, "max_order_raw_size");
        assert_eq!(i.ep_attr.max_order_waw_size, raw, "max_order_waw_size");
        assert_eq!(i.ep_attr.max_order_war_size, war, "max_order_war_size");
    }
}
