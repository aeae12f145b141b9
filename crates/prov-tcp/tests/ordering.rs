//! Message ordering (`msg_order`, `max_order_*_size`, fi_endpoint(3)) of
//! tcp MSG and RDM endpoints, checked by what an application can observe:
//! every pair of operations is posted back to back, without waiting for a
//! completion in between, over sizes that cross every protocol threshold
//! (inline frames up to 4 KiB, direct reads from 40 KiB, eager messages up
//! to 16 KiB and lone ones up to 256 KiB (8 MiB inside this host, where no
//! congestion control paces), rendezvous above, transfers larger
//! than a socket buffer).
//!
//! fi_endpoint(3) defines the `msg_order` bits as the order in which the
//! transport headers of one peer's operations are processed, and data
//! ordering (does a read see an earlier write's data?) separately, by the
//! `max_order_raw/war/waw_size` limits. tcp offers every `msg_order` bit:
//! an endpoint has one connection per peer and every request frame goes
//! on it in the order posted (`submit`); the target decodes a
//! connection's frames one after the other (`read_conn_inner`,
//! `on_frame`). What these tests observe is that order and the data
//! ordering that follows from it: an RMA write's payload is in memory, an
//! atomic executed (its old values copied into the answer) and a message
//! matched (an eager one's data placed) before the next frame is looked
//! at, so SAS, RAW, WAW, SAW, RAS, WAS, RMA_RAR and the ATOMIC_* orderings
//! hold for every size (max_order_raw_size and max_order_waw_size: any
//! size).
//!
//! Data ordering of a write after a read does not hold: a read response
//! takes its data from the target's memory only when the socket accepts it
//! (`Src::Region`, sent by `Tx::flush`), which may be after later frames
//! were applied, so max_order_war_size is 0 (the read's header is still
//! processed first: WAR, RAR and SAR hold as message orderings).
//!
//! RDM endpoints keep one connection per peer even when both ends connect
//! to each other at once
//! (`rdm_sends_keep_their_order_when_both_ends_connect_at_once`: a late
//! hello for a peer with an established connection is refused).
//!
//! `advertised_orderings_are_the_tested_ones` checks that getinfo offers
//! exactly the orderings verified here.

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use fabric_core::matching::Request;
use fabric_core::objects::{
    AddressVector, AtomicMsg, AtomicOp, Bind, CompletionFlags, CompletionQueue, CqAttr, CqEntry,
    CqErrEntry, CqFormat, Datatype, Domain, Endpoint, EqAttr, EqEvent, EventQueue, Fabric, FiAddr,
    IoVec, MemoryRegion, MrAccess, Msg, PassiveEndpoint, Provider, RmaIov, RmaMsg, WaitObj,
};
use fabric_core::testing::{one, pattern, same, seed, words};
use fabric_core::*;
use prov_tcp::TcpProvider;

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

/// The message orderings tcp offers on MSG and RDM endpoints: all of them
/// (see the module docs).
const GUARANTEED: MsgOrder = ANALYSED;

/// Capabilities every endpoint here is opened with.
const CAPS: Caps = Caps::MSG
    .union(Caps::TAGGED)
    .union(Caps::RMA)
    .union(Caps::ATOMIC);

/// The target's registered memory.
const REGION: usize = 16 << 20;
/// Its key.
const KEY: u64 = 0x0de7;
/// Largest inject (the provider's `tx_attr.inject_size`).
const INJECT: usize = prov_tcp::getinfo::INJECT_SIZE;

/// RMA sizes: a byte, a word, the inline frame limit and past it, the
/// eager limit of messages, the direct-read threshold, and transfers
/// larger than a socket buffer.
const RMA_SIZES: [usize; 9] = [
    1,
    8,
    4096,
    4097,
    16 * 1024,
    40 * 1024,
    100_000,
    1 << 20,
    4 << 20,
];

/// Message sizes: empty, injected, inline frames, the eager limit and past
/// it, the direct-read threshold, the lone-eager limit and past it,
/// rendezvous up to a few MiB.
const MSG_SIZES: [usize; 13] = [
    0,
    8,
    1000,
    4096,
    INJECT,
    16 * 1024,
    16 * 1024 + 1,
    40 * 1024,
    64 * 1024 + 1,
    256 * 1024,
    256 * 1024 + 1,
    1 << 20,
    3 << 20,
];

/// How many rounds a size gets: many for small ones, a few for large.
fn rounds(size: usize) -> usize {
    if size >= 1 << 20 { 2 } else { 6 }
}

/// One endpoint with its queues (fields drop in order: the endpoint
/// first).
struct End {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    av: Option<Box<dyn AddressVector>>,
    _eq: Option<Box<dyn EventQueue>>,
    domain: Box<dyn Domain>,
}

/// Endpoint type of a [`Link`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rdm,
    Msg,
}

/// Two connected endpoints: `a` initiates, `b` is the target, each in its
/// own domain (so each progresses only when its own queues are read).
struct Link {
    a: End,
    b: End,
    /// `b` as `a` addresses it (`UNSPEC` for MSG).
    to_b: FiAddr,
    kind: Kind,
    _pep: Option<Box<dyn PassiveEndpoint>>,
    _fabrics: Vec<Box<dyn Fabric>>,
}

fn getinfo(ep_type: EpType, hints: impl FnOnce(&mut Info)) -> Result<Vec<Info>> {
    let mut h = Info::default();
    h.caps = CAPS;
    h.mode = Mode::all();
    h.ep_attr.ep_type = ep_type;
    h.addr_format = AddrFormat::SockaddrIn;
    h.domain_attr.mr_mode = MrMode::empty();
    hints(&mut h);
    let req = Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    TcpProvider.getinfo(&req)
}

fn info(ep_type: EpType) -> Info {
    getinfo(ep_type, |_| {}).unwrap().remove(0)
}

fn cq_attr() -> CqAttr {
    CqAttr {
        format: CqFormat::Tagged,
        wait_obj: WaitObj::Unspec,
        ..CqAttr::default()
    }
}

fn eq_attr() -> EqAttr {
    EqAttr {
        wait_obj: WaitObj::Unspec,
        ..EqAttr::default()
    }
}

/// The next EQ event, reading `drive` meanwhile (their progress).
fn event(eq: &dyn EventQueue, drive: &[&dyn CompletionQueue]) -> EqEvent {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for cq in drive {
            let _ = cq.read(&mut []);
        }
        match eq.sread(Some(Duration::from_millis(2))) {
            Ok(e) => return e,
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("EQ: {e}"),
        }
        assert!(Instant::now() < deadline, "no EQ event within 30 s");
    }
}

/// A MSG endpoint of `domain`, bound to its CQ (the EQ is bound by the
/// caller).
fn msg_end(domain: Box<dyn Domain>, info: &Info) -> End {
    let cq = domain.cq(&cq_attr()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    End {
        ep,
        cq,
        av: None,
        _eq: None,
        domain,
    }
}

fn msg_link() -> Link {
    let info = info(EpType::Msg);
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let leq = fabric.eq(&eq_attr()).unwrap();
    let pep = fabric.passive_endpoint(&info).unwrap();
    pep.bind_eq(leq.as_ref()).unwrap();
    pep.listen().unwrap();
    // The client initiates.
    let ceq = fabric.eq(&eq_attr()).unwrap();
    let a = msg_end(fabric.domain(&info).unwrap(), &info);
    a.ep.bind(Bind::Eq(ceq.as_ref())).unwrap();
    a.ep.enable().unwrap();
    a.ep.connect(&pep.getname().unwrap(), b"").unwrap();
    let EqEvent::ConnReq { info: req, .. } = event(leq.as_ref(), &[a.cq.as_ref()]) else {
        panic!("expected a connection request");
    };
    let b = msg_end(fabric.domain(&req).unwrap(), &req);
    b.ep.bind(Bind::Eq(leq.as_ref())).unwrap();
    b.ep.enable().unwrap();
    b.ep.accept(b"").unwrap();
    let ev = event(ceq.as_ref(), &[b.cq.as_ref()]);
    assert!(matches!(ev, EqEvent::Connected { .. }), "{ev:?}");
    let ev = event(leq.as_ref(), &[a.cq.as_ref()]);
    assert!(matches!(ev, EqEvent::Connected { .. }), "{ev:?}");
    let a = End {
        _eq: Some(ceq),
        ..a
    };
    let b = End {
        _eq: Some(leq),
        ..b
    };
    Link {
        a,
        b,
        to_b: FiAddr::UNSPEC,
        kind: Kind::Msg,
        _pep: Some(pep),
        _fabrics: vec![fabric],
    }
}

fn rdm_end(info: &Info, fabrics: &mut Vec<Box<dyn Fabric>>) -> End {
    let Side {
        ep,
        cq,
        av,
        domain,
        fabric,
    } = side(info);
    fabrics.push(fabric);
    End {
        ep,
        cq,
        av: Some(av),
        _eq: None,
        domain,
    }
}

fn rdm_link() -> Link {
    let info = info(EpType::Rdm);
    let mut fabrics = Vec::new();
    let a = rdm_end(&info, &mut fabrics);
    let b = rdm_end(&info, &mut fabrics);
    let to_b = insert_end(&a, &b.ep.getname().unwrap());
    insert_end(&b, &a.ep.getname().unwrap());
    Link {
        a,
        b,
        to_b,
        kind: Kind::Rdm,
        _pep: None,
        _fabrics: fabrics,
    }
}

fn insert_end(e: &End, name: &Address) -> FiAddr {
    let mut out = [FiAddr(0)];
    e.av.as_ref()
        .unwrap()
        .insert(std::slice::from_ref(name), &mut out)
        .unwrap();
    out[0]
}

fn link(kind: Kind) -> Link {
    match kind {
        Kind::Rdm => rdm_link(),
        Kind::Msg => msg_link(),
    }
}

const KINDS: [Kind; 2] = [Kind::Rdm, Kind::Msg];

/// The target's registered memory (the region is dropped before the
/// memory).
struct Target {
    _mr: Box<dyn MemoryRegion>,
    mem: Vec<u8>,
}

impl Target {
    fn new(d: &dyn Domain) -> Target {
        let mut mem = vec![0u8; REGION];
        // SAFETY: the vector's heap block is owned by the same struct,
        // declared after the region, so it outlives the registration.
        let mr = unsafe {
            reg(
                d,
                &mut mem,
                MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
                KEY,
            )
        };
        Target { _mr: mr, mem }
    }

    fn u64_at(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.mem[off..off + 8].try_into().unwrap())
    }
}

fn range(off: usize, len: usize) -> [RmaIov; 1] {
    [RmaIov {
        addr: off as u64,
        len,
        key: KEY,
    }]
}

fn tagged_msg(iov: &[IoVec], addr: FiAddr, tag: u64, ctx: u64, data: u64) -> Msg<'_> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore: 0,
        context: ctx,
        data,
    }
}

impl Link {
    /// RMA write of `src` to the target at `off`, with remote CQ data when
    /// given.
    ///
    /// # Safety
    ///
    /// `src` stays alive and unchanged until the completion of `ctx`.
    unsafe fn write(&self, src: &[u8], off: usize, ctx: u64, data: Option<u64>) {
        let v = one(src);
        let r = range(off, src.len());
        let m = RmaMsg {
            iov: &v,
            desc: &[],
            addr: self.to_b,
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
        unsafe { self.a.ep.writemsg(&m, flags) }.unwrap();
    }

    /// RMA read of the target's `off..off + dst.len()` into `dst`.
    ///
    /// # Safety
    ///
    /// `dst` stays alive and untouched until the completion of `ctx`.
    unsafe fn read(&self, dst: &mut [u8], off: usize, ctx: u64) {
        let v = one(dst);
        let r = range(off, dst.len());
        let m = RmaMsg {
            iov: &v,
            desc: &[],
            addr: self.to_b,
            rma_iov: &r,
            context: ctx,
            data: 0,
        };
        // SAFETY: the caller's contract.
        unsafe { self.a.ep.readmsg(&m, OpFlags::empty()) }.unwrap();
    }

    /// An atomic on `operands.len() / 8` u64 elements at the target's
    /// `off` (FI_ATOMIC_READ: `operands` only gives the count), fetching
    /// into `result` when given.
    ///
    /// # Safety
    ///
    /// The buffers stay alive (and `result` untouched) until the completion
    /// of `ctx`.
    unsafe fn atomic(
        &self,
        op: AtomicOp,
        operands: &[u8],
        off: usize,
        result: Option<&mut [u8]>,
        ctx: u64,
        data: Option<u64>,
    ) {
        let count = operands.len() / 8;
        let v = one(operands);
        let res = result.map(|r| one(r));
        let r = [RmaIov {
            addr: off as u64,
            len: count,
            key: KEY,
        }];
        let m = AtomicMsg {
            iov: if op == AtomicOp::AtomicRead { &[] } else { &v },
            desc: &[],
            addr: self.to_b,
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
        unsafe { self.a.ep.atomicmsg(&m, flags) }.unwrap();
    }

    /// Sends `src` (tagged with `tag` when given) with remote CQ data
    /// `data`; injected when `ctx` is 0.
    ///
    /// # Safety
    ///
    /// Unless injected, `src` stays alive and unchanged until the
    /// completion of `ctx`.
    unsafe fn send(&self, src: &[u8], tag: Option<u64>, data: u64, ctx: u64) {
        let ep = &self.a.ep;
        if ctx == 0 {
            match tag {
                Some(t) => ep.tinject(src, self.to_b, t, Some(data)),
                None => ep.inject(src, self.to_b, Some(data)),
            }
            .unwrap();
            return;
        }
        let v = one(src);
        let m = tagged_msg(&v, self.to_b, tag.unwrap_or(0), ctx, data);
        // SAFETY: the caller's contract.
        unsafe {
            match tag {
                Some(_) => ep.tsendmsg(&m, OpFlags::REMOTE_CQ_DATA),
                None => ep.sendmsg(&m, OpFlags::REMOTE_CQ_DATA),
            }
        }
        .unwrap();
    }

    /// Posts a receive at the target.
    ///
    /// # Safety
    ///
    /// `dst` stays alive and untouched until the completion of `ctx`.
    unsafe fn recv(&self, dst: &mut [u8], tag: Option<u64>, ctx: u64) {
        let v = one(dst);
        let m = tagged_msg(&v, FiAddr::UNSPEC, tag.unwrap_or(0), ctx, 0);
        // SAFETY: the caller's contract.
        unsafe {
            match tag {
                Some(_) => self.b.ep.trecvmsg(&m, OpFlags::empty()),
                None => self.b.ep.recvmsg(&m, OpFlags::empty()),
            }
        }
        .unwrap();
    }

    /// Waits for the initiator's completions of `ctxs` (each once, in any
    /// order), driving the target meanwhile.
    fn wait_a(&self, ctxs: &[u64]) {
        self.wait_some(ctxs, &[]);
    }

    /// Waits for the initiator's completions of `must`, accepting those of
    /// `may` meanwhile: which of `may` came.
    fn wait_some(&self, must: &[u64], may: &[u64]) -> Vec<u64> {
        let mut left: Vec<u64> = must.to_vec();
        let mut seen = Vec::new();
        while !left.is_empty() {
            match next(self.a.cq.as_ref(), &[self.b.cq.as_ref()]) {
                Ok(e) if may.contains(&e.context) && !seen.contains(&e.context) => {
                    seen.push(e.context);
                }
                Ok(e) => {
                    let i = left
                        .iter()
                        .position(|&c| c == e.context)
                        .unwrap_or_else(|| panic!("unexpected completion {e:?}"));
                    left.swap_remove(i);
                }
                Err(e) => panic!("{:?}: error completion {e:?}", self.kind),
            }
        }
        seen
    }

    /// The target's next completion, driving the initiator meanwhile.
    fn next_b(&self) -> std::result::Result<CqEntry, CqErrEntry> {
        next(self.b.cq.as_ref(), &[self.a.cq.as_ref()])
    }

    /// Whether a tagged message with `tag` waits at the target
    /// (FI_PEEK); its length.
    fn peek(&self, tag: u64) -> Option<usize> {
        let ctx = 0xbeef_0000 + tag;
        let m = tagged_msg(&[], FiAddr::UNSPEC, tag, ctx, 0);
        // SAFETY: a peek names no buffer.
        unsafe { self.b.ep.trecvmsg(&m, OpFlags::PEEK) }.unwrap();
        match self.next_b() {
            Ok(e) => {
                assert_eq!(e.context, ctx, "peek answered by {e:?}");
                Some(e.len)
            }
            Err(e) => {
                assert_eq!((e.entry.context, e.err), (ctx, ErrorKind::NoMsg), "{e:?}");
                None
            }
        }
    }
}

// ---------------------------------------------------------------------
// RAW, RMA_RAW, RMA_RAR.

#[test]
fn raw_a_read_returns_the_write_posted_just_before_it() {
    for kind in KINDS {
        let l = link(kind);
        let t = Target::new(l.b.domain.as_ref());
        for size in RMA_SIZES {
            for round in 0..rounds(size) {
                let off = (round * 4099) % (REGION - size);
                let src = pattern(size, seed());
                let mut back = vec![0u8; size];
                let mut again = vec![0u8; size];
                // SAFETY: the buffers outlive the completions awaited next.
                unsafe {
                    l.write(&src, off, 1, None);
                    l.read(&mut back, off, 2);
                    l.read(&mut again, off, 3);
                }
                l.wait_a(&[1, 2, 3]);
                same(&format!("{kind:?} RAW, {size} bytes"), &back, &src);
                same(
                    &format!("{kind:?} RAR after RAW, {size} bytes"),
                    &again,
                    &src,
                );
            }
        }
        // Several pairs in flight at once, on separate ranges.
        for size in [8usize, 32 * 1024, 4 << 20] {
            let srcs: Vec<Vec<u8>> = (0..4).map(|_| pattern(size, seed())).collect();
            let mut backs = vec![vec![0u8; size]; 4];
            for (i, (s, b)) in srcs.iter().zip(backs.iter_mut()).enumerate() {
                let off = i * (4 << 20);
                // SAFETY: the buffers outlive the completions awaited below.
                unsafe {
                    l.write(s, off, 10 + i as u64, None);
                    l.read(b, off, 20 + i as u64);
                }
            }
            l.wait_a(&[10, 11, 12, 13, 20, 21, 22, 23]);
            for (s, b) in srcs.iter().zip(&backs) {
                same(&format!("{kind:?} RAW in a pipeline, {size} bytes"), b, s);
            }
        }
        // An injected write, then a read.
        for size in [1usize, 8, INJECT] {
            for _ in 0..rounds(size) {
                let src = pattern(size, seed());
                let mut back = vec![0u8; size];
                l.a.ep
                    .inject_write(&src, l.to_b, range(64, size)[0], None)
                    .unwrap();
                // SAFETY: `back` outlives the completion awaited next.
                unsafe { l.read(&mut back, 64, 1) };
                l.wait_a(&[1]);
                same(&format!("{kind:?} RAW after inject_write"), &back, &src);
            }
        }
        // RMA and atomics mixed (RAW covers both kinds).
        for count in [1usize, 1024] {
            for _ in 0..4 {
                let off = 8 * 1024;
                let words = pattern(8 * count, seed());
                let mut fetched = vec![0u8; 8 * count];
                // SAFETY: the buffers outlive the completions awaited next.
                unsafe {
                    l.write(&words, off, 1, None);
                    l.atomic(
                        AtomicOp::AtomicRead,
                        &words,
                        off,
                        Some(&mut fetched),
                        2,
                        None,
                    );
                }
                l.wait_a(&[1, 2]);
                same(
                    &format!("{kind:?} atomic read after RMA write"),
                    &fetched,
                    &words,
                );
                let words = pattern(8 * count, seed());
                let mut back = vec![0u8; 8 * count];
                // SAFETY: as above.
                unsafe {
                    l.atomic(AtomicOp::AtomicWrite, &words, off, None, 3, None);
                    l.read(&mut back, off, 4);
                }
                l.wait_a(&[3, 4]);
                same(
                    &format!("{kind:?} RMA read after atomic write"),
                    &back,
                    &words,
                );
            }
        }
        drop(t);
    }
}

// ---------------------------------------------------------------------
// WAW, RMA_WAW.

#[test]
fn waw_the_later_of_two_writes_wins() {
    let sizes = [8usize, 4097, 32 * 1024, 100_000, 4 << 20];
    for kind in KINDS {
        let l = link(kind);
        let t = Target::new(l.b.domain.as_ref());
        for first in sizes {
            for second in sizes {
                for round in 0..2 {
                    let off = round * 4096 + 8;
                    let p1 = pattern(first, seed());
                    let p2 = pattern(second, seed());
                    // SAFETY: the sources outlive the completions awaited
                    // next.
                    unsafe {
                        l.write(&p1, off, 1, None);
                        l.write(&p2, off, 2, None);
                    }
                    l.wait_a(&[1, 2]);
                    let what = format!("{kind:?} WAW, {first} then {second} bytes");
                    same(&what, &t.mem[off..off + second], &p2);
                    if first > second {
                        same(&what, &t.mem[off + second..off + first], &p1[second..]);
                    }
                }
            }
        }
        // Injected writes among them.
        for size in [8usize, INJECT] {
            let big = pattern(100_000, seed());
            let small = pattern(size, seed());
            // SAFETY: `big` outlives the completion awaited next.
            unsafe { l.write(&big, 0, 1, None) };
            l.a.ep
                .inject_write(&small, l.to_b, range(0, size)[0], None)
                .unwrap();
            let mut back = vec![0u8; 100_000];
            // SAFETY: `back` outlives the completion awaited next.
            unsafe { l.read(&mut back, 0, 2) };
            l.wait_a(&[1, 2]);
            let mut want = big.clone();
            want[..size].copy_from_slice(&small);
            same(&format!("{kind:?} WAW with inject_write"), &back, &want);
        }
        // RMA and atomic writes mixed.
        for _ in 0..4 {
            let big = pattern(1 << 20, seed());
            let word = pattern(8, seed());
            // SAFETY: the sources outlive the completions awaited next.
            unsafe {
                l.write(&big, 0, 1, None);
                l.atomic(AtomicOp::AtomicWrite, &word, 4096, None, 2, None);
            }
            l.wait_a(&[1, 2]);
            same(
                &format!("{kind:?} atomic write after RMA write"),
                &t.mem[4096..4104],
                &word,
            );
            let word = pattern(8, seed());
            let big = pattern(1 << 20, seed());
            // SAFETY: as above.
            unsafe {
                l.atomic(AtomicOp::AtomicWrite, &word, 4096, None, 3, None);
                l.write(&big, 0, 4, None);
            }
            l.wait_a(&[3, 4]);
            same(
                &format!("{kind:?} RMA write after atomic write"),
                &t.mem[..1 << 20],
                &big,
            );
        }
        drop(t);
    }
}

// ---------------------------------------------------------------------
// SAW.

#[test]
fn saw_a_message_finds_the_earlier_write_in_place() {
    let write_sizes = [8usize, 16 * 1024, 100_000, 4 << 20];
    let msg_sizes = [8usize, 4096, 40_000, 1 << 20];
    for kind in KINDS {
        let l = link(kind);
        let t = Target::new(l.b.domain.as_ref());
        let mut n = 0u64;
        for ws in write_sizes {
            for ms in msg_sizes {
                n += 1;
                let tag = (n % 2 == 0).then_some(0x5a00 + n);
                let off = (n as usize * 8192) % (REGION - ws);
                let src = pattern(ws, seed());
                let body = pattern(ms, seed());
                let mut into = vec![0u8; ms];
                // Expected: the receive is posted first; when it completes,
                // the write must be in place.
                // SAFETY: the buffers outlive the completions awaited below.
                unsafe {
                    l.recv(&mut into, tag, 7);
                    l.write(&src, off, 1, None);
                    l.send(&body, tag, n, if ms <= 8 { 0 } else { 2 });
                }
                let e = l.next_b().unwrap();
                assert_eq!(e.context, 7, "{e:?}");
                let what = format!("{kind:?} SAW, write of {ws}, message of {ms} bytes");
                same(&what, &t.mem[off..off + ws], &src);
                same(&what, &into, &body);
                l.wait_a(if ms <= 8 { &[1] } else { &[1, 2] });
                // Unexpected: once the target knows of the message (FI_PEEK),
                // the write must be in place.
                let tag = 0x6a00 + n;
                let src = pattern(ws, seed());
                // SAFETY: as above.
                unsafe {
                    l.write(&src, off, 1, None);
                    l.send(&body, Some(tag), n, if ms <= 8 { 0 } else { 2 });
                }
                let deadline = Instant::now() + Duration::from_secs(30);
                while l.peek(tag).is_none() {
                    assert!(Instant::now() < deadline, "the message never came");
                    let _ = l.a.cq.read(&mut []);
                }
                let what = format!("{kind:?} SAW (unexpected), write of {ws}, message of {ms}");
                same(&what, &t.mem[off..off + ws], &src);
                // SAFETY: `into` outlives the completion awaited next.
                unsafe { l.recv(&mut into, Some(tag), 8) };
                assert_eq!(l.next_b().unwrap().context, 8);
                same(&what, &into, &body);
                l.wait_a(if ms <= 8 { &[1] } else { &[1, 2] });
            }
        }
        // An atomic write, then a message.
        for _ in 0..4 {
            let word = pattern(8, seed());
            let mut into = [0u8; 8];
            // SAFETY: the buffers outlive the completions awaited below.
            unsafe {
                l.recv(&mut into, None, 7);
                l.atomic(AtomicOp::AtomicWrite, &word, 0, None, 1, None);
                l.send(b"after", None, 0, 0);
            }
            assert_eq!(l.next_b().unwrap().context, 7);
            same(&format!("{kind:?} SAW after an atomic"), &t.mem[..8], &word);
            l.wait_a(&[1]);
        }
        drop(t);
    }
}

// ---------------------------------------------------------------------
// SAS.

/// How the target's receives meet the stream.
#[derive(Debug, Clone, Copy)]
enum Posting {
    /// All posted before the first send.
    Expected,
    /// All posted after the messages arrived.
    Unexpected,
    /// Half of each class before, half after.
    Mixed,
    /// After a flood of eager messages larger than the unexpected budget
    /// (the connection stops being read until receives take them).
    Flood,
}

/// One message of a stream: its size and whether it is tagged.
fn stream(round: usize, posting: Posting) -> Vec<(usize, bool)> {
    if let Posting::Flood = posting {
        // 10 MiB of eager messages: more than the 8 MiB budget.
        return (0..640).map(|i| (16 * 1024, i % 2 == 1)).collect();
    }
    (0..36)
        .map(|i| {
            let size = MSG_SIZES[(i * 7 + round * 5) % MSG_SIZES.len()];
            (size, (i + round) % 3 == 0)
        })
        .collect()
}

const STREAM_TAG: u64 = 0x77;

#[test]
fn sas_messages_match_receives_in_the_order_they_were_sent() {
    for kind in KINDS {
        let l = link(kind);
        for (round, posting) in [
            Posting::Expected,
            Posting::Unexpected,
            Posting::Mixed,
            Posting::Expected,
            Posting::Unexpected,
            Posting::Mixed,
            Posting::Flood,
        ]
        .into_iter()
        .enumerate()
        {
            let plan = stream(round, posting);
            let base = seed() << 20;
            let bodies: Vec<Vec<u8>> = plan
                .iter()
                .enumerate()
                .map(|(i, &(size, _))| pattern(size, base + i as u64))
                .collect();
            // Per class (0 untagged, 1 tagged): the stream positions, in
            // order, and one receive buffer per message of that size.
            let class: [Vec<usize>; 2] = [0, 1].map(|c| {
                (0..plan.len())
                    .filter(|&i| usize::from(plan[i].1) == c)
                    .collect()
            });
            let mut bufs: [Vec<Vec<u8>>; 2] =
                [0, 1].map(|c| class[c].iter().map(|&i| vec![0u8; plan[i].0]).collect());
            let post = |c: usize, j: usize, buf: &mut Vec<u8>| {
                let tag = (c == 1).then_some(STREAM_TAG);
                // SAFETY: the buffers live until the end of the round,
                // after every completion was read.
                unsafe { l.recv(buf, tag, ((c as u64) << 32) | j as u64) };
            };
            let before = |c: usize| match posting {
                Posting::Expected => class[c].len(),
                Posting::Unexpected | Posting::Flood => 0,
                Posting::Mixed => class[c].len() / 2,
            };
            for (c, of_class) in bufs.iter_mut().enumerate() {
                for (j, buf) in of_class.iter_mut().enumerate().take(before(c)) {
                    post(c, j, buf);
                }
            }
            let mut sends = Vec::new();
            for (i, &(size, tagged)) in plan.iter().enumerate() {
                let ctx = if size <= 8 { 0 } else { 100 + i as u64 };
                if ctx != 0 {
                    sends.push(ctx);
                }
                let tag = tagged.then_some(STREAM_TAG);
                // SAFETY: `bodies` outlives the completions awaited below.
                unsafe { l.send(&bodies[i], tag, base + i as u64, ctx) };
            }
            if !matches!(posting, Posting::Expected) {
                // Let the messages arrive before the rest of the receives.
                settle(&[l.a.cq.as_ref(), l.b.cq.as_ref()], 20);
                for (c, of_class) in bufs.iter_mut().enumerate() {
                    for (j, buf) in of_class.iter_mut().enumerate().skip(before(c)) {
                        post(c, j, buf);
                    }
                }
            }
            for _ in 0..plan.len() {
                let e = l
                    .next_b()
                    .unwrap_or_else(|e| panic!("{kind:?} SAS ({posting:?}): receive failed {e:?}"));
                let (c, j) = (
                    (e.context >> 32) as usize,
                    (e.context & 0xffff_ffff) as usize,
                );
                let want = class[c][j];
                assert_eq!(
                    e.data,
                    base + want as u64,
                    "{kind:?} SAS ({posting:?}): receive {j} of class {c} got message {} instead of {want}",
                    e.data.wrapping_sub(base)
                );
                assert_eq!(e.len, plan[want].0);
                same(
                    &format!("{kind:?} SAS ({posting:?}) data"),
                    &bufs[c][j],
                    &bodies[want],
                );
            }
            l.wait_a(&sends);
        }
    }
}

// ---------------------------------------------------------------------
// WAS, RAS.

#[test]
fn was_a_write_finds_the_earlier_message_arrived() {
    let sizes = [0usize, 8, 4096, 40_000, 1 << 20];
    for kind in KINDS {
        let l = link(kind);
        let t = Target::new(l.b.domain.as_ref());
        let mut n = 0u64;
        for size in sizes {
            for how in 0..3 {
                n += 1;
                let tag = 0x3000 + n;
                let body = pattern(size, seed());
                let word = pattern(8, seed());
                let ctx = if size <= 8 { 0 } else { 2 };
                // Unexpected message, then a write carrying CQ data: once the
                // data shows, the message must be known (FI_PEEK).
                // SAFETY: the buffers outlive the completions awaited below.
                unsafe {
                    l.send(&body, Some(tag), n, ctx);
                    match how {
                        0 => l.write(&word, 0, 1, Some(n)),
                        1 => {
                            l.a.ep
                                .inject_write(&word, l.to_b, range(0, 8)[0], Some(n))
                                .unwrap()
                        }
                        _ => l.atomic(AtomicOp::AtomicWrite, &word, 0, None, 1, Some(n)),
                    }
                }
                let e = l.next_b().unwrap();
                assert!(e.flags.contains(CompletionFlags::REMOTE_CQ_DATA), "{e:?}");
                assert_eq!(e.data, n);
                assert_eq!(
                    l.peek(tag),
                    Some(size),
                    "{kind:?} WAS: the write (way {how}) overtook a message of {size} bytes"
                );
                let mut into = vec![0u8; size];
                // SAFETY: `into` outlives the completion awaited next.
                unsafe { l.recv(&mut into, Some(tag), 9) };
                assert_eq!(l.next_b().unwrap().context, 9);
                same("WAS message", &into, &body);
                let mut ctxs = vec![];
                if how != 1 {
                    ctxs.push(1);
                }
                if ctx != 0 {
                    ctxs.push(ctx);
                }
                l.wait_a(&ctxs);
                // Expected: the receive is matched before the write is
                // applied (a matched receive cannot be cancelled).
                let mut into = vec![0u8; size];
                // SAFETY: as above.
                unsafe {
                    l.recv(&mut into, Some(tag), 9);
                    l.send(&body, Some(tag), n, ctx);
                    l.write(&word, 0, 1, Some(n));
                }
                let mut received = false;
                loop {
                    let e = l.next_b().unwrap();
                    if e.context == 9 {
                        received = true;
                        continue;
                    }
                    assert_eq!(e.data, n, "{e:?}");
                    break;
                }
                if !received {
                    assert_eq!(
                        l.b.ep.cancel(9).unwrap_err().kind(),
                        ErrorKind::NoEnt,
                        "{kind:?} WAS: the write overtook a message of {size} bytes"
                    );
                    assert_eq!(l.next_b().unwrap().context, 9);
                }
                same("WAS message", &into, &body);
                l.wait_a(if ctx == 0 { &[1] } else { &[1, 2] });
            }
        }
        drop(t);
    }
}

#[test]
fn ras_a_read_finds_the_earlier_message_arrived() {
    let sizes = [0usize, 8, 4096, 32 * 1024, 40_000, 1 << 20];
    for kind in KINDS {
        let l = link(kind);
        let mut t = Target::new(l.b.domain.as_ref());
        let mut n = 0u64;
        for size in sizes {
            for _ in 0..3 {
                n += 1;
                let tag = 0x4000 + n;
                let body = pattern(size, seed());
                let ctx = if size <= 8 { 0 } else { 2 };
                let mut word = [0u8; 8];
                // Unexpected: once the read is answered, the message is known.
                // SAFETY: the buffers outlive the completions awaited below.
                unsafe {
                    l.send(&body, Some(tag), n, ctx);
                    l.read(&mut word, 0, 1);
                }
                let sent = l.wait_some(&[1], &[ctx]);
                assert_eq!(
                    l.peek(tag),
                    Some(size),
                    "{kind:?} RAS: the read overtook a message of {size} bytes"
                );
                let mut into = vec![0u8; size];
                // SAFETY: `into` outlives the completion awaited next.
                unsafe { l.recv(&mut into, Some(tag), 9) };
                assert_eq!(l.next_b().unwrap().context, 9);
                same("RAS message", &into, &body);
                if ctx != 0 && sent.is_empty() {
                    l.wait_a(&[ctx]);
                }
                // Expected, into the target's registered memory: a read of
                // that memory returns the message when it was sent eagerly,
                // and finds the receive matched in any case.
                let off = 1 << 20;
                let into = &mut t.mem[off..off + size];
                into.fill(0);
                let mut back = vec![0u8; size];
                // SAFETY: the receive buffer is registered memory that lives
                // until the end of the test; the rest outlive the completions
                // awaited below.
                unsafe {
                    l.recv(into, Some(tag), 9);
                    l.send(&body, Some(tag), n, ctx);
                    l.read(&mut back, off, 1);
                }
                let sent = l.wait_some(&[1], &[ctx]);
                if size <= 32 * 1024 {
                    same(&format!("{kind:?} RAS (eager data)"), &back, &body);
                }
                // Not yet completed means matched: it cannot be cancelled.
                let cancelled = l.b.ep.cancel(9).is_ok();
                let e = l.next_b();
                assert!(
                    !cancelled,
                    "{kind:?} RAS: the read overtook a message of {size} bytes ({e:?})"
                );
                assert_eq!(e.unwrap().context, 9);
                same("RAS message", &t.mem[off..off + size], &body);
                if ctx != 0 && sent.is_empty() {
                    l.wait_a(&[ctx]);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------
// ATOMIC_RAR, ATOMIC_RAW, ATOMIC_WAR, ATOMIC_WAW.

#[test]
fn atomics_are_ordered_among_themselves() {
    for kind in KINDS {
        let l = link(kind);
        let t = Target::new(l.b.domain.as_ref());
        let off = 64;
        for count in [1usize, 1024] {
            for round in 0..3u64 {
                // Fetch-and-add chain: the k-th fetch returns start + k
                // (ATOMIC_RAR, and ATOMIC_RAW / WAR between updates and
                // fetches).
                let start = 1000 * round;
                let zero = words(start, count);
                // SAFETY: `zero` outlives the completion awaited next.
                unsafe { l.atomic(AtomicOp::AtomicWrite, &zero, off, None, 1, None) };
                l.wait_a(&[1]);
                let inc = words(1, count);
                let k = 16;
                let mut results = vec![vec![0u8; 8 * count]; k];
                for (i, r) in results.iter_mut().enumerate() {
                    // SAFETY: the buffers outlive the completions awaited next.
                    unsafe {
                        l.atomic(
                            AtomicOp::Sum,
                            &inc,
                            off,
                            Some(r.as_mut_slice()),
                            10 + i as u64,
                            None,
                        )
                    };
                }
                l.wait_a(&(10..10 + k as u64).collect::<Vec<_>>());
                for (i, r) in results.iter().enumerate() {
                    same(
                        &format!("{kind:?} ATOMIC_RAR: fetch {i} of {count} elements"),
                        r,
                        &words(start + i as u64, count),
                    );
                }
                // ATOMIC_RAW: write, then read.
                let v = words(seed(), count);
                let mut got = vec![0u8; 8 * count];
                // SAFETY: as above.
                unsafe {
                    l.atomic(AtomicOp::AtomicWrite, &v, off, None, 1, None);
                    l.atomic(AtomicOp::AtomicRead, &v, off, Some(&mut got), 2, None);
                }
                l.wait_a(&[1, 2]);
                same(&format!("{kind:?} ATOMIC_RAW"), &got, &v);
                // ATOMIC_WAR: read, then write.
                let w = words(seed(), count);
                // SAFETY: as above.
                unsafe {
                    l.atomic(AtomicOp::AtomicRead, &w, off, Some(&mut got), 2, None);
                    l.atomic(AtomicOp::AtomicWrite, &w, off, None, 1, None);
                }
                l.wait_a(&[1, 2]);
                same(&format!("{kind:?} ATOMIC_WAR"), &got, &v);
                same(
                    &format!("{kind:?} ATOMIC_WAR"),
                    &t.mem[off..off + 8 * count],
                    &w,
                );
                // ATOMIC_WAW: write then add, add then write.
                let ten = words(10, count);
                let five = words(5, count);
                // SAFETY: as above.
                unsafe {
                    l.atomic(AtomicOp::AtomicWrite, &ten, off, None, 1, None);
                    l.atomic(AtomicOp::Sum, &five, off, None, 2, None);
                }
                l.wait_a(&[1, 2]);
                same(
                    &format!("{kind:?} ATOMIC_WAW (write, add)"),
                    &t.mem[off..off + 8 * count],
                    &words(15, count),
                );
                // SAFETY: as above.
                unsafe {
                    l.atomic(AtomicOp::Sum, &five, off, None, 1, None);
                    l.atomic(AtomicOp::AtomicWrite, &ten, off, None, 2, None);
                }
                l.wait_a(&[1, 2]);
                same(
                    &format!("{kind:?} ATOMIC_WAW (add, write)"),
                    &t.mem[off..off + 8 * count],
                    &ten,
                );
                assert_eq!(t.u64_at(off), 10);
            }
        }
        drop(t);
    }
}

// ---------------------------------------------------------------------
// Several connections: RDM endpoints that reach each other at once.

#[test]
fn rdm_sends_keep_their_order_when_both_ends_connect_at_once() {
    let info = info(EpType::Rdm);
    let n = 300usize;
    let size = 32 * 1024;
    for trial in 0..8 {
        let a = side(&info);
        let b = side(&info);
        let b_at_a = insert(&a, &b.ep.getname().unwrap());
        let a_at_b = insert(&b, &a.ep.getname().unwrap());
        let mut into: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; size]).collect();
        for (i, r) in into.iter_mut().enumerate() {
            let v = one(r);
            // SAFETY: the buffers outlive the completions awaited below.
            unsafe {
                b.ep.recvmsg(
                    &tagged_msg(&v, FiAddr::UNSPEC, 0, i as u64, 0),
                    OpFlags::empty(),
                )
            }
            .unwrap();
        }
        let ping = [0u8; 8];
        let pv = one(&ping);
        // SAFETY: `ping` outlives the completion awaited below.
        unsafe {
            a.ep.recvmsg(
                &tagged_msg(&pv, FiAddr::UNSPEC, 0, 9999, 0),
                OpFlags::empty(),
            )
        }
        .unwrap();
        let bodies: Vec<Vec<u8>> = (0..n).map(|i| pattern(size, i as u64)).collect();
        let send = |i: usize| {
            let v = one(&bodies[i]);
            // SAFETY: `bodies` outlives the completions awaited below.
            unsafe {
                a.ep.sendmsg(
                    &tagged_msg(&v, b_at_a, 0, 1000 + i as u64, i as u64),
                    OpFlags::REMOTE_CQ_DATA,
                )
            }
            .unwrap();
        };
        // a starts connecting and sends; b connects to a before it has
        // seen a's connection; each side progresses in turn.
        for i in 0..n / 2 {
            send(i);
        }
        let _ = a.cq.read(&mut []);
        b.ep.inject(b"ping", a_at_b, None).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        for _ in 0..2 {
            let _ = b.cq.read(&mut []);
        }
        std::thread::sleep(Duration::from_millis(2));
        for _ in 0..3 {
            let _ = a.cq.read(&mut []);
        }
        for i in n / 2..n {
            send(i);
        }
        let mut order = Vec::with_capacity(n);
        let mut sent = 0;
        let mut pinged = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        while order.len() < n || sent < n || !pinged {
            let mut e = [CqEntry::default()];
            match b.cq.read(&mut e) {
                Ok(_) => order.push(e[0].data),
                Err(err) if err.kind() == ErrorKind::Again => {}
                Err(err) => panic!("receive: {err}"),
            }
            match a.cq.read(&mut e) {
                Ok(_) if e[0].context == 9999 => pinged = true,
                Ok(_) => sent += 1,
                Err(err) if err.kind() == ErrorKind::Again => {}
                Err(err) => panic!("send: {err}"),
            }
            assert!(
                Instant::now() < deadline,
                "stuck after {} messages",
                order.len()
            );
        }
        if let Some(i) = order.windows(2).position(|w| w[0] > w[1]) {
            panic!(
                "trial {trial}: message {} was received after message {} (SAS broken: two connections)",
                order[i + 1],
                order[i]
            );
        }
        for (i, r) in into.iter().enumerate() {
            same("data", r, &bodies[order[i] as usize]);
        }
    }
}

// ---------------------------------------------------------------------
// ---------------------------------------------------------------------
// What getinfo says.

#[test]
fn advertised_orderings_are_the_tested_ones() {
    for ep_type in [EpType::Msg, EpType::Rdm] {
        // Asking for the verified orderings and sizes must match ...
        let list = getinfo(ep_type, |h| {
            h.tx_attr.msg_order = GUARANTEED;
            h.rx_attr.msg_order = GUARANTEED;
            h.ep_attr.max_order_raw_size = usize::MAX;
            h.ep_attr.max_order_waw_size = usize::MAX;
        })
        .unwrap_or_else(|e| panic!("{ep_type:?}: the verified orderings are not offered: {e}"));
        assert!(!list.is_empty());
        // ... and the default answer must offer exactly them, with the
        // sizes that hold.
        for i in getinfo(ep_type, |_| {}).unwrap() {
            assert_eq!(
                i.tx_attr.msg_order & ANALYSED,
                GUARANTEED,
                "{ep_type:?} tx_attr.msg_order"
            );
            assert_eq!(
                i.rx_attr.msg_order & ANALYSED,
                GUARANTEED,
                "{ep_type:?} rx_attr.msg_order"
            );
            assert_eq!(i.ep_attr.max_order_raw_size, usize::MAX, "{ep_type:?}");
            assert_eq!(i.ep_attr.max_order_waw_size, usize::MAX, "{ep_type:?}");
            assert_eq!(i.ep_attr.max_order_war_size, 0, "{ep_type:?}");
        }
    }
}
