//! The RDM receive side on the kit's receive engine, on a real RDMA
//! device: FI_MULTI_RECV (eager and rendezvous messages, expected and
//! unexpected), the unexpected budget against a peer that floods, and
//! the share of the receiver a sender that stops progressing holds.
//! Skips without a device (see `common`).

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::Provider;
use fabric_core::objects::{
    AddressVector, AvAttr, Bind, CompletionFlags, CompletionQueue, CqAttr, CqEntry, Domain,
    Endpoint, Fabric, FiAddr, Msg, RmaIov, RmaMsg,
};
use fabric_core::*;
use prov_verbs::VerbsProvider;

fn rdm_hints() -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::MULTI_RECV | Caps::SOURCE;
    h.rx_attr.op_flags = OpFlags::MULTI_RECV;
    h.addr_format = AddrFormat::SockaddrIn;
    h
}

struct Ep {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
}

struct World {
    a: Ep,
    b: Ep,
    to_b: FiAddr,
    _av: Box<dyn AddressVector>,
    domain: Box<dyn Domain>,
    _fabric: Box<dyn Fabric>,
}

fn open_ep(domain: &dyn Domain, info: &Info, av: &dyn AddressVector, cq_size: usize) -> Ep {
    let cq = domain
        .cq(&CqAttr {
            size: cq_size,
            ..cq_attr()
        })
        .unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Av(av)).unwrap();
    ep.enable().unwrap();
    Ep { ep, cq }
}

/// Sender a, receiver b (opened with `b_info` changed by `tweak`).
fn world(tweak: impl FnOnce(&mut Info)) -> Option<World> {
    world_cq(tweak, 0)
}

/// As [`world`], b's CQ with `cq_size` entries (0: the default).
fn world_cq(tweak: impl FnOnce(&mut Info), cq_size: usize) -> Option<World> {
    let info = entries(EpType::Rdm, rdm_hints())?
        .into_iter()
        .next()
        .unwrap();
    assert!(info.caps.contains(Caps::MULTI_RECV));
    assert!(info.rx_attr.op_flags.contains(OpFlags::MULTI_RECV));
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let a = open_ep(domain.as_ref(), &info, av.as_ref(), 0);
    let mut b_info = info.clone();
    tweak(&mut b_info);
    let b = open_ep(domain.as_ref(), &b_info, av.as_ref(), cq_size);
    let mut out = [FiAddr(0); 2];
    let names = [a.ep.getname().unwrap(), b.ep.getname().unwrap()];
    assert_eq!(av.insert(&names, &mut out).unwrap(), 2);
    Some(World {
        a,
        b,
        to_b: out[1],
        _av: av,
        domain,
        _fabric: fabric,
    })
}

/// Message `k` of `len` bytes: every byte depends on the message and its
/// offset, so misplaced bytes show.
fn pattern(k: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(k * 101) as u8)
        .collect()
}

impl World {
    fn spin(&self) {
        let _ = self.a.cq.read(&mut []);
        let _ = self.b.cq.read(&mut []);
    }

    /// Sends `buf` from a to b (retrying while Again); its completion is
    /// read later.
    fn send(&self, buf: &mut [u8], context: u64) {
        let siov = iov(buf);
        let deadline = Instant::now() + T;
        loop {
            // SAFETY: the caller keeps `buf` alive until the completion.
            match unsafe {
                self.a
                    .ep
                    .sendmsg(&msg_to(&siov, self.to_b, context), OpFlags::empty())
            } {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again && Instant::now() < deadline => self.spin(),
                Err(e) => panic!("send failed: {e:?}"),
            }
        }
    }

    /// Tries to send `buf` from a to b once: whether it was accepted
    /// (`false`: `Again`); its completion is read later.
    fn try_send(&self, buf: &mut [u8], context: u64) -> bool {
        let siov = iov(buf);
        // SAFETY: the caller keeps `buf` alive until the completion.
        match unsafe {
            self.a
                .ep
                .sendmsg(&msg_to(&siov, self.to_b, context), OpFlags::empty())
        } {
            Ok(()) => true,
            Err(e) if e.kind() == ErrorKind::Again => false,
            Err(e) => panic!("send failed: {e:?}"),
        }
    }

    /// `n` completions from `cq`, progressing both sides.
    fn completions(&self, cq: &dyn CompletionQueue, n: usize) -> Vec<CqEntry> {
        let deadline = Instant::now() + T;
        let mut got = Vec::new();
        let mut e = [CqEntry::default(); 16];
        while got.len() < n {
            match cq.read(&mut e) {
                Ok(k) => got.extend_from_slice(&e[..k]),
                Err(err) if err.kind() == ErrorKind::Again => self.spin(),
                Err(err) if err.kind() == ErrorKind::Avail => {
                    panic!("error completion: {:?}", cq.readerr().unwrap())
                }
                Err(err) => panic!("CQ read failed: {err:?}"),
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} completions",
                got.len()
            );
        }
        got
    }
}

/// Posts one untagged receive per buffer of `bufs` at `ep`, its index
/// as context.
fn post_recvs(ep: &dyn Endpoint, bufs: &mut [Vec<u8>]) {
    for (k, r) in bufs.iter_mut().enumerate() {
        let riov = iov(r);
        // SAFETY: the caller keeps `bufs` alive until every completion.
        unsafe { ep.recvmsg(&msg_to(&riov, FiAddr::UNSPEC, k as u64), OpFlags::empty()) }.unwrap();
    }
}

/// Checks that `contexts` are `0..n`, each once (`what`: the operations).
fn each_once(contexts: impl IntoIterator<Item = u64>, n: usize, what: &str) {
    let mut seen = vec![false; n];
    for c in contexts {
        let k = usize::try_from(c).unwrap();
        assert!(
            k < n && !seen[k],
            "{what} {k}: completed twice, or never posted"
        );
        seen[k] = true;
    }
    assert!(seen.iter().all(|&s| s), "{what}: some never completed");
}

/// Checks that receive buffer `k` of `bufs` holds message `k`.
fn holds_messages(bufs: &[Vec<u8>], len: usize) {
    for (k, r) in bufs.iter().enumerate() {
        assert_eq!(r[..], pattern(k as u64, len)[..], "message {k}");
    }
}

/// Checks the parts of a multi-receive buffer: each completion's `buf`
/// points at its message, in arrival order, and only the last carries
/// FI_MULTI_RECV.
fn check_parts(buf: &[u8], got: &[CqEntry], msgs: &[(u64, usize)]) {
    assert_eq!(got.len(), msgs.len());
    let base = buf.as_ptr() as u64;
    let mut by_addr: Vec<CqEntry> = got.to_vec();
    by_addr.sort_by_key(|e| e.buf);
    let mut off = 0usize;
    for (e, &(k, len)) in by_addr.iter().zip(msgs) {
        assert_eq!(
            e.buf,
            base + off as u64,
            "message {k} is where it was carved"
        );
        assert_eq!(e.len, len);
        assert!(
            e.flags
                .contains(CompletionFlags::RECV | CompletionFlags::MSG)
        );
        assert_eq!(&buf[off..off + len], &pattern(k, len)[..], "message {k}");
        off += len;
    }
    let last = got.last().unwrap();
    assert!(last.flags.contains(CompletionFlags::MULTI_RECV));
    let flagged = got
        .iter()
        .filter(|e| e.flags.contains(CompletionFlags::MULTI_RECV))
        .count();
    assert_eq!(flagged, 1, "the buffer is released once");
}

/// Messages sent back to back (not each after the previous completed, as
/// the semantics suite does): a rendezvous read still in flight while the
/// eager message behind it is carved; each lands where it was carved and
/// the buffer is released once. (What follows a release, and the
/// FI_OPT_MIN_MULTI_RECV getter, are the suite's.)
#[test]
fn multi_recv_takes_eager_and_rendezvous_messages() {
    let Some(w) = world(|_| {}) else { return };
    w.b.ep.set_min_multi_recv(2000).unwrap();
    let mut big = vec![0u8; 24_000];
    let biov = iov(&mut big);
    // SAFETY: `big` outlives the buffer's last completion.
    unsafe {
        w.b.ep
            .recvmsg(&msg_to(&biov, FiAddr::UNSPEC, 77), OpFlags::MULTI_RECV)
    }
    .unwrap();
    // 100 + 300 + 20000 (rendezvous) leave 3600; 3000 more leave 600, less
    // than the minimum: the buffer is released.
    let msgs = [(1u64, 100usize), (2, 300), (3, 20_000), (4, 3000)];
    let mut bufs: Vec<Vec<u8>> = msgs.iter().map(|&(k, n)| pattern(k, n)).collect();
    for (b, &(k, _)) in bufs.iter_mut().zip(&msgs) {
        w.send(b, k);
    }
    let got = w.completions(w.b.cq.as_ref(), msgs.len());
    assert!(got.iter().all(|e| e.context == 77));
    check_parts(&big, &got, &msgs);
    w.completions(w.a.cq.as_ref(), msgs.len());
}

/// Unexpected messages, a rendezvous among them, taken by a multi-receive
/// posted later that they fill to less than the default minimum (64).
#[test]
fn multi_recv_takes_unexpected_messages() {
    let Some(w) = world(|_| {}) else { return };
    let msgs = [(1u64, 700usize), (2, 9000), (3, 1200)];
    let mut bufs: Vec<Vec<u8>> = msgs.iter().map(|&(k, n)| pattern(k, n)).collect();
    for (b, &(k, _)) in bufs.iter_mut().zip(&msgs) {
        w.send(b, k);
    }
    // The eager sends complete once b's device has them: unexpected there.
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        w.spin();
    }
    // Exactly big enough for the three with less than the default
    // minimum (64) left.
    let mut big = vec![0u8; 700 + 9000 + 1200 + 10];
    let biov = iov(&mut big);
    // SAFETY: `big` outlives the buffer's last completion.
    unsafe {
        w.b.ep
            .recvmsg(&msg_to(&biov, FiAddr::UNSPEC, 9), OpFlags::MULTI_RECV)
    }
    .unwrap();
    let got = w.completions(w.b.cq.as_ref(), msgs.len());
    check_parts(&big, &got, &msgs);
    w.completions(w.a.cq.as_ref(), msgs.len());
}

/// A peer that floods unexpected messages: the receiver buffers at most
/// its budget (`total_buffered_recv`) and holds the rest in its receive
/// buffers, so the sender stalls (RNR) instead of growing the receiver's
/// memory; once receives are posted, everything arrives, in order.
#[test]
fn a_flooding_peer_is_held_to_the_budget() {
    const BUDGET: usize = 64 << 10;
    const LEN: usize = 4096;
    const N: usize = 700;
    /// The receiver's receive buffers (`RX_BUFS`).
    const RX_BUFS: usize = 256;
    let Some(w) = world(|i| i.rx_attr.total_buffered_recv = BUDGET) else {
        return;
    };
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|k| pattern(k as u64, LEN)).collect();
    let mut sent = 0usize;
    let mut done = 0usize;
    let mut last_change = Instant::now();
    let start = Instant::now();
    let mut e = [CqEntry::default(); 16];
    // Flood with nothing posted until the sender makes no headway.
    while sent < N && last_change.elapsed() < Duration::from_millis(1500) {
        assert!(start.elapsed() < T, "the flood did not settle");
        if w.try_send(&mut bufs[sent], sent as u64) {
            sent += 1;
            last_change = Instant::now();
        }
        match w.a.cq.read(&mut e) {
            Ok(k) => {
                done += k;
                last_change = Instant::now();
            }
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("sender CQ: {err:?}: {:?}", w.a.cq.readerr()),
        }
        let _ = w.b.cq.read(&mut []);
    }
    // What the receiver took: the budget's worth copied out (4 KiB plus a
    // 64-byte entry each) and its receive buffers.
    let bound = BUDGET / (LEN + 64) + RX_BUFS + 8;
    eprintln!("flood: {sent} sends posted, {done} completed (bound {bound})");
    assert!(
        done <= bound,
        "{done} sends completed: the receiver took more than its budget and buffers ({bound})"
    );
    assert!(sent < N, "the sender was never stalled");
    // Now the application receives: everything arrives, in order.
    let mut rbufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; LEN]).collect();
    let mut got = 0usize;
    let mut posted = 0usize;
    let deadline = Instant::now() + T * 2;
    let mut r = [CqEntry::default(); 16];
    while got < N || done < N {
        assert!(
            Instant::now() < deadline,
            "{got} of {N} received, {done} sends done"
        );
        if posted < N {
            let riov = iov(&mut rbufs[posted]);
            // SAFETY: `rbufs` outlives every completion.
            unsafe {
                w.b.ep.recvmsg(
                    &msg_to(&riov, FiAddr::UNSPEC, posted as u64),
                    OpFlags::empty(),
                )
            }
            .unwrap();
            posted += 1;
        }
        if sent < N {
            let siov = iov(&mut bufs[sent]);
            // SAFETY: `bufs` outlives every completion.
            match unsafe {
                w.a.ep
                    .sendmsg(&msg_to(&siov, w.to_b, sent as u64), OpFlags::empty())
            } {
                Ok(()) => sent += 1,
                Err(err) if err.kind() == ErrorKind::Again => {}
                Err(err) => panic!("send failed: {err:?}"),
            }
        }
        match w.a.cq.read(&mut e) {
            Ok(k) => done += k,
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("sender CQ: {err:?}: {:?}", w.a.cq.readerr()),
        }
        match w.b.cq.read(&mut r) {
            Ok(k) => {
                for c in &r[..k] {
                    assert_eq!(c.context, got as u64, "receives complete in order");
                    assert_eq!(c.len, LEN);
                    got += 1;
                }
            }
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("receiver CQ: {err:?}: {:?}", w.b.cq.readerr()),
        }
    }
    for (k, b) in rbufs.iter().enumerate() {
        assert_eq!(b[..], pattern(k as u64, LEN)[..], "message {k}");
    }
}

/// With no budget at all, every unexpected message stays in the receive
/// buffer it arrived in: such messages still match in order, answer
/// FI_PEEK / FI_CLAIM / FI_DISCARD (rendezvous requests too), and give
/// their buffers back once taken (more messages than receive buffers go
/// through).
#[test]
fn messages_held_in_receive_buffers_match_and_give_them_back() {
    let Some(w) = world(|i| i.rx_attr.total_buffered_recv = 1) else {
        return;
    };
    let tsend = |buf: &mut [u8], tag: u64| {
        let siov = iov(buf);
        let deadline = Instant::now() + T;
        loop {
            let msg = Msg {
                tag,
                ..msg_to(&siov, w.to_b, tag)
            };
            // SAFETY: the caller keeps `buf` alive until the completion.
            match unsafe { w.a.ep.tsendmsg(&msg, OpFlags::empty()) } {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again && Instant::now() < deadline => w.spin(),
                Err(e) => panic!("send failed: {e:?}"),
            }
        }
    };
    let trecv = |buf: &mut [u8], tag: u64, context: u64, flags: OpFlags| {
        let riov = iov(buf);
        let msg = Msg {
            tag,
            ..msg_to(&riov, FiAddr::UNSPEC, context)
        };
        // SAFETY: the caller keeps `buf` alive until the completion.
        unsafe { w.b.ep.trecvmsg(&msg, flags) }
    };
    let settle = || {
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            w.spin();
        }
    };
    // Tags 1..=3 eager, 4 rendezvous, all unexpected.
    let lens = [(1u64, 100usize), (2, 200), (3, 300), (4, 10_000)];
    let mut sbufs: Vec<Vec<u8>> = lens.iter().map(|&(k, n)| pattern(k, n)).collect();
    for (b, &(tag, _)) in sbufs.iter_mut().zip(&lens) {
        tsend(b, tag);
    }
    // The eager sends complete when b's device has them.
    w.completions(w.a.cq.as_ref(), 3);
    settle();
    let mut none = [0u8; 0];
    // Peek tag 2 (its length), then peek and discard it.
    trecv(&mut none, 2, 20, OpFlags::PEEK).unwrap();
    let e = w.completions(w.b.cq.as_ref(), 1)[0];
    assert_eq!((e.context, e.len, e.tag), (20, 200, 2));
    trecv(&mut none, 2, 21, OpFlags::PEEK | OpFlags::DISCARD).unwrap();
    let e = w.completions(w.b.cq.as_ref(), 1)[0];
    assert_eq!((e.context, e.tag), (21, 2));
    // Claim tag 3, then receive it with FI_CLAIM.
    trecv(&mut none, 3, 30, OpFlags::PEEK | OpFlags::CLAIM).unwrap();
    assert_eq!(w.completions(w.b.cq.as_ref(), 1)[0].context, 30);
    let mut r3 = vec![0u8; 300];
    trecv(&mut r3, 3, 30, OpFlags::CLAIM).unwrap();
    let e = w.completions(w.b.cq.as_ref(), 1)[0];
    assert_eq!((e.context, e.len), (30, 300));
    assert_eq!(r3, pattern(3, 300));
    // Tag 1, then the rendezvous message.
    let mut r1 = vec![0u8; 100];
    trecv(&mut r1, 1, 10, OpFlags::empty()).unwrap();
    let mut r4 = vec![0u8; 10_000];
    trecv(&mut r4, 4, 40, OpFlags::empty()).unwrap();
    let got = w.completions(w.b.cq.as_ref(), 2);
    let mut ctx: Vec<u64> = got.iter().map(|e| e.context).collect();
    ctx.sort_unstable();
    assert_eq!(ctx, [10, 40]);
    assert_eq!(r1, pattern(1, 100));
    assert_eq!(r4, pattern(4, 10_000));
    // The rendezvous send completes on its FIN.
    w.completions(w.a.cq.as_ref(), 1);
    // 4 rounds of 100 unexpected messages: more than the 256 receive
    // buffers, so those taken must have been reposted.
    for round in 0..4u64 {
        let mut s: Vec<Vec<u8>> = (0..100).map(|k| pattern(round * 100 + k, 64)).collect();
        for (k, b) in s.iter_mut().enumerate() {
            tsend(b, 1000 + k as u64);
        }
        w.completions(w.a.cq.as_ref(), 100);
        let mut r: Vec<Vec<u8>> = (0..100).map(|_| vec![0u8; 64]).collect();
        for (k, b) in r.iter_mut().enumerate() {
            trecv(b, 1000 + k as u64, k as u64, OpFlags::empty()).unwrap();
        }
        let got = w.completions(w.b.cq.as_ref(), 100);
        assert!(got.iter().enumerate().all(|(k, e)| e.context == k as u64));
        for (k, b) in r.iter().enumerate() {
            assert_eq!(
                *b,
                pattern(round * 100 + k as u64, 64),
                "round {round}, {k}"
            );
        }
    }
}

/// Remote CQ data from a writer that fills the target's receive CQ: the
/// writer is paused (its writes hold the target's receive buffers, so it
/// stalls through RNR) until the application reads the CQ; nothing is
/// lost, and the data arrives in order.
#[test]
fn remote_cq_data_that_fills_the_cq_pauses_the_writer() {
    const CQ: usize = 16;
    const N: u64 = 600;
    /// The target's receive buffers (`RX_BUFS`).
    const RX_BUFS: usize = 256;
    let Some(w) = world_cq(|_| {}, CQ) else {
        return;
    };
    let target = Buf::new(w.domain.as_ref(), 8);
    let remote = [RmaIov {
        addr: target.addr(),
        len: 8,
        key: target.mr.key(),
    }];
    let mut word = [0u8; 8];
    let wiov = iov(&mut word);
    let write = |k: u64| {
        let msg = RmaMsg {
            iov: &wiov,
            desc: &[],
            addr: w.to_b,
            rma_iov: &remote,
            context: k,
            data: k,
        };
        // SAFETY: the buffers outlive every completion.
        unsafe { w.a.ep.writemsg(&msg, OpFlags::REMOTE_CQ_DATA) }
    };
    let mut e = [CqEntry::default(); 16];
    let (mut posted, mut done) = (0u64, 0usize);
    let mut last_change = Instant::now();
    let start = Instant::now();
    while posted < N && last_change.elapsed() < Duration::from_millis(1500) {
        assert!(start.elapsed() < T, "the writes did not settle");
        match write(posted) {
            Ok(()) => {
                posted += 1;
                last_change = Instant::now();
            }
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("write failed: {err:?}"),
        }
        match w.a.cq.read(&mut e) {
            Ok(k) => {
                done += k;
                last_change = Instant::now();
            }
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("writer CQ: {err:?}: {:?}", w.a.cq.readerr()),
        }
        // Progress the target without reading its CQ.
        let _ = w.b.cq.read(&mut []);
    }
    let bound = CQ + RX_BUFS + 8;
    eprintln!("remote CQ data: {posted} writes posted, {done} completed (bound {bound})");
    assert!(done <= bound, "{done} writes completed past a full CQ");
    assert!(posted < N, "the writer was never stalled");
    // The application reads: everything arrives, in order.
    let mut seen = 0u64;
    let deadline = Instant::now() + T * 2;
    let mut r = [CqEntry::default(); 16];
    while seen < N || (done as u64) < N {
        assert!(
            Instant::now() < deadline,
            "{seen} of {N} data seen, {done} writes done"
        );
        if posted < N {
            match write(posted) {
                Ok(()) => posted += 1,
                Err(err) if err.kind() == ErrorKind::Again => {}
                Err(err) => panic!("write failed: {err:?}"),
            }
        }
        match w.a.cq.read(&mut e) {
            Ok(k) => done += k,
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("writer CQ: {err:?}: {:?}", w.a.cq.readerr()),
        }
        match w.b.cq.read(&mut r) {
            Ok(k) => {
                for c in &r[..k] {
                    assert!(c.flags.contains(CompletionFlags::REMOTE_CQ_DATA));
                    assert_eq!(c.data, seen, "remote CQ data in order");
                    seen += 1;
                }
            }
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("target CQ: {err:?}: {:?}", w.b.cq.readerr()),
        }
    }
}

/// A sender that stops driving progress once its rendezvous messages are
/// announced: the receiver reads what it can, and the FINs the sender
/// does not take back stall (RNR) with the reads behind them. What that
/// peer holds of the receiver is bounded (`CONTROL_WINDOW` send buffers,
/// `READ_WINDOW` reads): the receiver keeps sending (to itself) all the
/// while. Once the sender progresses again, everything completes.
#[test]
fn a_sender_that_stops_progressing_holds_a_bounded_share_of_the_receiver() {
    const N: usize = 600;
    const LEN: usize = 16 * 1024;
    /// The receiver's own traffic meanwhile: more than its 256 send
    /// buffers, so that every one of them must come back.
    const OWN: usize = 400;
    let Some(w) = world(|_| {}) else {
        return;
    };
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|k| pattern(k as u64, LEN)).collect();
    for (k, b) in bufs.iter_mut().enumerate() {
        w.send(b, k as u64);
    }
    // Let the announcements land at b, unexpected.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        w.spin();
    }
    // From here on, a makes no progress until told.
    let mut rbufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; LEN]).collect();
    post_recvs(w.b.ep.as_ref(), &mut rbufs);
    let mut got = Vec::new();
    let mut e = [CqEntry::default(); 16];
    let mut read_b = |got: &mut Vec<u64>| match w.b.cq.read(&mut e) {
        Ok(k) => got.extend(e[..k].iter().map(|c| c.context)),
        Err(err) if err.kind() == ErrorKind::Again => {}
        Err(err) => panic!("receiver CQ: {err:?}: {:?}", w.b.cq.readerr()),
    };
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        read_b(&mut got);
    }
    eprintln!("{} of {N} received while the sender was still", got.len());
    // b sends tagged messages to itself meanwhile (tag 7: a's messages are
    // untagged), more than it has send buffers.
    let to_self = {
        let mut out = [FiAddr(0)];
        let name = w.b.ep.getname().unwrap();
        assert_eq!(w._av.insert(&[name], &mut out).unwrap(), 1);
        out[0]
    };
    let mut own: Vec<Vec<u8>> = (0..OWN).map(|k| pattern(1000 + k as u64, 1024)).collect();
    let mut own_r: Vec<Vec<u8>> = (0..OWN).map(|_| vec![0u8; 1024]).collect();
    fn tag(m: fabric_core::objects::Msg<'_>) -> fabric_core::objects::Msg<'_> {
        fabric_core::objects::Msg { tag: 7, ..m }
    }
    for (k, r) in own_r.iter_mut().enumerate() {
        let riov = iov(r);
        let ctx = (1 << 32) + k as u64;
        // SAFETY: `own_r` outlives every completion.
        unsafe {
            w.b.ep
                .trecvmsg(&tag(msg_to(&riov, FiAddr::UNSPEC, ctx)), OpFlags::empty())
        }
        .unwrap();
    }
    let (mut sent, mut own_done) = (0usize, 0usize);
    let deadline = Instant::now() + T;
    while own_done < 2 * OWN {
        assert!(
            Instant::now() < deadline,
            "the receiver's own traffic stalled: {sent} of {OWN} sent, {own_done} of {} \
             completions (a stalled sender holds its send buffers?)",
            2 * OWN
        );
        if sent < OWN {
            let siov = iov(&mut own[sent]);
            let ctx = (2 << 32) + sent as u64;
            // SAFETY: `own` outlives every completion.
            match unsafe {
                w.b.ep
                    .tsendmsg(&tag(msg_to(&siov, to_self, ctx)), OpFlags::empty())
            } {
                Ok(()) => sent += 1,
                Err(err) if err.kind() == ErrorKind::Again => {}
                Err(err) => panic!("send to itself: {err:?}"),
            }
        }
        let mut mine = Vec::new();
        read_b(&mut mine);
        for c in mine {
            if c >> 32 == 0 {
                got.push(c);
            } else {
                own_done += 1;
            }
        }
    }
    for (k, r) in own_r.iter().enumerate() {
        assert_eq!(r[..], pattern(1000 + k as u64, 1024)[..], "own message {k}");
    }
    // a progresses again: everything completes, each once.
    let sends = w.completions(w.a.cq.as_ref(), N);
    let rest = w.completions(w.b.cq.as_ref(), N - got.len());
    got.extend(rest.iter().map(|c| c.context));
    each_once(got, N, "receive");
    each_once(sends.iter().map(|c| c.context), N, "send");
    holds_messages(&rbufs, LEN);
}

/// `tx_attr.size` bounds the transmits outstanding: rendezvous sends that
/// no receive takes yet (each keeps its buffer registered until its FIN)
/// are accepted up to that many, then `Again`; once the receiver takes
/// them, the rest go through and everything completes once.
#[test]
fn rendezvous_sends_stop_at_tx_attr_size() {
    const LEN: usize = 16 * 1024;
    let Some(size) =
        entries(EpType::Rdm, rdm_hints()).map(|l| l.into_iter().next().unwrap().tx_attr.size)
    else {
        return;
    };
    let n = size + 100;
    let Some(w) = world(|_| {}) else {
        return;
    };
    let mut bufs: Vec<Vec<u8>> = (0..n).map(|k| pattern(k as u64, LEN)).collect();
    let mut sent = 0usize;
    let mut refused_since: Option<Instant> = None;
    let start = Instant::now();
    while sent < n {
        assert!(start.elapsed() < T, "{sent} sends in {T:?}");
        if w.try_send(&mut bufs[sent], sent as u64) {
            sent += 1;
            refused_since = None;
        } else {
            let since = *refused_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_millis(500) {
                break;
            }
        }
        w.spin();
    }
    assert_eq!(
        sent, size,
        "rendezvous sends accepted with no receive posted"
    );
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; LEN]).collect();
    post_recvs(w.b.ep.as_ref(), &mut rbufs);
    let mut sent_done = w.completions(w.a.cq.as_ref(), size);
    for b in &mut bufs[size..] {
        w.send(b, sent as u64);
        sent += 1;
    }
    sent_done.extend(w.completions(w.a.cq.as_ref(), n - size));
    let got = w.completions(w.b.cq.as_ref(), n);
    each_once(sent_done.iter().map(|c| c.context), n, "send");
    each_once(got.iter().map(|c| c.context), n, "receive");
    holds_messages(&rbufs, LEN);
}
