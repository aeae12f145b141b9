//! RDM endpoints on a real RDMA device: the tcp / shm RDM semantics over
//! RC connections made on demand. Skips without a device (see `common`).

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
    AddressVector, AtomicMsg, AtomicOp, AvAttr, Bind, CompletionFlags, CompletionQueue, CqEntry,
    Datatype, Domain, Endpoint, Fabric, FiAddr, IoVec, Msg, RmaIov, RmaMsg,
};
use fabric_core::*;
use prov_verbs::VerbsProvider;

/// Hints of an application written for tcp: no FI_MR_LOCAL.
fn rdm_hints() -> Info {
    let mut h = Info::default();
    h.caps =
        Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC | Caps::DIRECTED_RECV | Caps::SOURCE;
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
    /// b as seen by a, a as seen by b.
    to_b: FiAddr,
    to_a: FiAddr,
    av: Box<dyn AddressVector>,
    domain: Box<dyn Domain>,
    _fabric: Box<dyn Fabric>,
}

fn open_ep(domain: &dyn Domain, info: &Info, av: &dyn AddressVector) -> Ep {
    let cq = domain.cq(&cq_attr()).unwrap();
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

fn world() -> Option<World> {
    world_with(Caps::empty())
}

/// A world whose endpoints also have `extra` capabilities.
fn world_with(extra: Caps) -> Option<World> {
    let mut hints = rdm_hints();
    hints.caps |= extra;
    let info = entries(EpType::Rdm, hints)?.into_iter().next().unwrap();
    assert!(!info.domain_attr.mr_mode.contains(MrMode::LOCAL));
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let a = open_ep(domain.as_ref(), &info, av.as_ref());
    let b = open_ep(domain.as_ref(), &info, av.as_ref());
    let mut out = [FiAddr(0); 2];
    let names = [a.ep.getname().unwrap(), b.ep.getname().unwrap()];
    assert_ne!(names[0], names[1]);
    assert_eq!(av.insert(&names, &mut out).unwrap(), 2);
    Some(World {
        a,
        b,
        to_a: out[0],
        to_b: out[1],
        av,
        domain,
        _fabric: fabric,
    })
}

impl World {
    /// Drives both endpoints' progress (reading nothing).
    fn spin(&self) {
        let _ = self.a.cq.read(&mut []);
        let _ = self.b.cq.read(&mut []);
    }

    /// Retries an operation while it says Again, progressing both sides.
    fn retry(&self, mut op: impl FnMut() -> Result<()>) {
        let deadline = Instant::now() + T;
        loop {
            match op() {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again => self.spin(),
                Err(e) => panic!("operation failed: {e:?}"),
            }
            assert!(Instant::now() < deadline, "still Again after {T:?}");
        }
    }

    /// Waits for one completion on `cq` while progressing both.
    fn wait(
        &self,
        cq: &dyn CompletionQueue,
    ) -> std::result::Result<(CqEntry, FiAddr), fabric_core::objects::CqErrEntry> {
        let deadline = Instant::now() + T;
        let mut out = [CqEntry::default(); 1];
        let mut src = [FiAddr(0); 1];
        loop {
            match cq.readfrom(&mut out, &mut src) {
                Ok(1) => return Ok((out[0], src[0])),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Avail => return Err(cq.readerr().unwrap()),
                Err(e) if e.kind() == ErrorKind::Again => self.spin(),
                Err(e) => panic!("CQ read failed: {e:?}"),
            }
            assert!(Instant::now() < deadline, "no completion within {T:?}");
        }
    }
}

fn m<'a>(iov: &'a [IoVec], addr: FiAddr, tag: u64, ignore: u64, context: u64) -> Msg<'a> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore,
        context,
        data: 0,
    }
}

/// Remote CQ data of an inject, on the connection the other way (b to a,
/// made now): the receive reports the data, FI_REMOTE_CQ_DATA and the
/// sender's AV handle. (Messages, tags, directed receive, cancel and
/// truncation are the semantics suite's.)
#[test]
fn inject_with_remote_cq_data_names_its_source() {
    let Some(w) = world() else { return };
    let mut ra = vec![0u8; 16];
    let raiov = iov(&mut ra);
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        w.a.ep
            .recvmsg(&m(&raiov, FiAddr::UNSPEC, 0, 0, 6), OpFlags::empty())
    }
    .unwrap();
    w.retry(|| w.b.ep.inject(b"inj", w.to_a, Some(0xabc)));
    let (r, src) = w.wait(w.a.cq.as_ref()).unwrap();
    assert_eq!((r.context, r.len, r.data), (6, 3, 0xabc));
    assert!(r.flags.contains(CompletionFlags::REMOTE_CQ_DATA));
    assert_eq!(src, w.to_b);
    assert_eq!(&ra[..3], b"inj");
}

#[test]
fn large_messages_use_rendezvous() {
    let Some(w) = world() else { return };
    let n = 1 << 20;
    let mut big: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    let biov = iov(&mut big);
    // Expected.
    let mut r1 = vec![0u8; n];
    let r1iov = iov(&mut r1);
    // SAFETY: buffers outlive their completions.
    unsafe {
        w.b.ep
            .trecvmsg(&m(&r1iov, FiAddr::UNSPEC, 1, 0, 1), OpFlags::empty())
    }
    .unwrap();
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe {
        w.a.ep
            .tsendmsg(&m(&biov, w.to_b, 1, 0, 2), OpFlags::empty())
    });
    let (r, src) = w.wait(w.b.cq.as_ref()).unwrap();
    assert_eq!((r.context, r.len, r.tag), (1, n, 1));
    assert_eq!(src, w.to_a);
    let (s, _) = w.wait(w.a.cq.as_ref()).unwrap();
    assert_eq!((s.context, s.len), (2, n));
    assert!(r1 == big, "rendezvous data differs");

    // Unexpected, into two pieces.
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe {
        w.a.ep
            .tsendmsg(&m(&biov, w.to_b, 2, 0, 3), OpFlags::empty())
    });
    for _ in 0..50 {
        w.spin();
    }
    let mut h1 = vec![0u8; n / 2];
    let mut h2 = vec![0u8; n / 2];
    let two = [
        IoVec {
            addr: h1.as_mut_ptr(),
            len: n / 2,
        },
        IoVec {
            addr: h2.as_mut_ptr(),
            len: n / 2,
        },
    ];
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        w.b.ep
            .trecvmsg(&m(&two, FiAddr::UNSPEC, 2, 0, 4), OpFlags::empty())
    }
    .unwrap();
    let (r, _) = w.wait(w.b.cq.as_ref()).unwrap();
    assert_eq!((r.context, r.len), (4, n));
    let (s, _) = w.wait(w.a.cq.as_ref()).unwrap();
    assert_eq!(s.context, 3);
    assert!(h1[..] == big[..n / 2] && h2[..] == big[n / 2..]);
}

#[test]
fn rma_and_atomics_without_local_registration() {
    let Some(w) = world() else { return };
    let target = Buf::new(w.domain.as_ref(), 1 << 16);
    let mut local: Vec<u8> = (0..1 << 16).map(|i| (i % 253) as u8).collect();
    let liov = iov(&mut local);
    let remote = [RmaIov {
        addr: target.addr(),
        len: 1 << 16,
        key: target.mr.key(),
    }];
    let wmsg = RmaMsg {
        iov: &liov,
        desc: &[],
        addr: w.to_b,
        rma_iov: &remote,
        context: 1,
        data: 0,
    };
    // SAFETY: buffers outlive their completions.
    w.retry(|| unsafe { w.a.ep.writemsg(&wmsg, OpFlags::empty()) });
    let (c, _) = w.wait(w.a.cq.as_ref()).unwrap();
    assert_eq!(c.context, 1);
    assert!(target.mem == local);
    let mut back = vec![0u8; 100];
    let biov = iov(&mut back);
    let remote100 = [RmaIov {
        len: 100,
        ..remote[0]
    }];
    let rmsg = RmaMsg {
        iov: &biov,
        rma_iov: &remote100,
        context: 2,
        ..wmsg
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe { w.a.ep.readmsg(&rmsg, OpFlags::empty()) });
    let (c, _) = w.wait(w.a.cq.as_ref()).unwrap();
    assert_eq!(c.context, 2);
    assert_eq!(back[..], local[..100]);

    // Writedata: reported at the target without a posted receive.
    let mut word = 7u64.to_ne_bytes();
    let wiov = iov(&mut word);
    let remote8 = [RmaIov {
        len: 8,
        ..remote[0]
    }];
    let dmsg = RmaMsg {
        iov: &wiov,
        rma_iov: &remote8,
        context: 3,
        data: 0x77,
        ..wmsg
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe { w.a.ep.writemsg(&dmsg, OpFlags::REMOTE_CQ_DATA) });
    w.wait(w.a.cq.as_ref()).unwrap();
    let (r, _) = w.wait(w.b.cq.as_ref()).unwrap();
    assert_eq!(r.data, 0x77);
    assert!(
        r.flags
            .contains(CompletionFlags::REMOTE_WRITE | CompletionFlags::REMOTE_CQ_DATA)
    );

    // Fetch-add on the first word (now 7).
    let mut op = 3u64;
    let mut res = 0u64;
    let opiov = [IoVec {
        addr: (&raw mut op).cast(),
        len: 8,
    }];
    let resiov = [IoVec {
        addr: (&raw mut res).cast(),
        len: 8,
    }];
    let remote1 = [RmaIov {
        len: 1,
        ..remote[0]
    }];
    let am = AtomicMsg {
        iov: &opiov,
        desc: &[],
        addr: w.to_b,
        rma_iov: &remote1,
        datatype: Datatype::Uint64,
        op: AtomicOp::Sum,
        result: &resiov,
        compare: &[],
        context: 4,
        data: 0,
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe { w.a.ep.atomicmsg(&am, OpFlags::empty()) });
    w.wait(w.a.cq.as_ref()).unwrap();
    assert_eq!(res, 7);
    assert_eq!(u64::from_ne_bytes(target.mem[..8].try_into().unwrap()), 10);

    // A bad key fails with an access error; nothing changes.
    let bad = [RmaIov {
        key: remote[0].key ^ 0x77,
        ..remote[0]
    }];
    let before = target.mem.clone();
    let bmsg = RmaMsg {
        rma_iov: &bad,
        context: 5,
        ..wmsg
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe { w.a.ep.writemsg(&bmsg, OpFlags::empty()) });
    let e = w.wait(w.a.cq.as_ref()).unwrap_err();
    assert_eq!((e.entry.context, e.err), (5, ErrorKind::Access));
    assert!(target.mem == before);
}

#[test]
fn a_peer_that_disappears_fails_cleanly() {
    let Some(w) = world() else { return };
    let mut s = *b"ping";
    let siov = iov(&mut s);
    let mut r = vec![0u8; 8];
    let riov = iov(&mut r);
    // SAFETY: buffers outlive their completions.
    unsafe {
        w.b.ep
            .recvmsg(&m(&riov, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
    }
    .unwrap();
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe { w.a.ep.sendmsg(&m(&siov, w.to_b, 0, 0, 2), OpFlags::empty()) });
    w.wait(w.a.cq.as_ref()).unwrap();
    w.wait(w.b.cq.as_ref()).unwrap();
    let World { a, b, to_b, av, .. } = w;
    drop(b);
    // Sends to the vanished peer end in an error: a failed completion, or
    // a refused reconnection; never a hang or a panic.
    let deadline = Instant::now() + T;
    let mut seen_error = false;
    let mut out = [CqEntry::default(); 4];
    while Instant::now() < deadline && !seen_error {
        // SAFETY: the test keeps the buffers alive until their completions.
        match unsafe { a.ep.sendmsg(&m(&siov, to_b, 0, 0, 3), OpFlags::empty()) } {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => {
                eprintln!("send refused: {e:?}");
                seen_error = true;
            }
        }
        match a.cq.read(&mut out) {
            Err(e) if e.kind() == ErrorKind::Avail => {
                let e = a.cq.readerr().unwrap();
                eprintln!("error completion: {e:?}");
                seen_error = true;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(seen_error, "no error within {T:?} after the peer went away");
    drop(av);
}

/// A rendezvous send that waits for its receive longer than a few of the
/// endpoint's liveness intervals (1 s): the probes of its quiet
/// connection (zero-byte RDMA writes) are answered by the live peer and
/// fail nothing; the send completes once the receive is posted, with the
/// data intact.
#[test]
fn a_waiting_rendezvous_send_survives_the_liveness_probes() {
    let Some(w) = world() else { return };
    let n = 64 << 10;
    let mut data: Vec<u8> = (0..n).map(|i| (i % 239) as u8).collect();
    let diov = iov(&mut data);
    // SAFETY: the buffer outlives the send, completed below.
    w.retry(|| unsafe {
        w.a.ep
            .tsendmsg(&m(&diov, w.to_b, 9, 0, 1), OpFlags::empty())
    });
    let start = Instant::now();
    let mut out = [CqEntry::default(); 1];
    while start.elapsed() < Duration::from_millis(3500) {
        match w.a.cq.read(&mut out) {
            Ok(0) => {}
            Err(e) if e.kind() == ErrorKind::Again => {}
            other => panic!("the send ended before its receive: {other:?}"),
        }
        let _ = w.b.cq.read(&mut []);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut r = vec![0u8; n];
    let riov = iov(&mut r);
    // SAFETY: the buffer outlives the receive, completed below.
    unsafe {
        w.b.ep
            .trecvmsg(&m(&riov, FiAddr::UNSPEC, 9, 0, 2), OpFlags::empty())
    }
    .unwrap();
    let (got, _) = w.wait(w.b.cq.as_ref()).unwrap();
    assert_eq!((got.context, got.len), (2, n));
    let (sent, _) = w.wait(w.a.cq.as_ref()).unwrap();
    assert_eq!(sent.context, 1);
    assert!(r == data, "rendezvous data differs");
}

/// Blocking reads (`sread`) on both sides of a rendezvous: the receiver
/// sleeps until the announcement, its RDMA read and completion; the
/// sender until the FIN. Regression: a wake-up lost between a CQ event and
/// the work it leads to left one side asleep.
#[test]
fn blocking_reads_wake_through_a_rendezvous() {
    let Some(w) = world() else { return };
    let n = 256 << 10;
    let World { a, b, to_b, .. } = &w;
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut r = vec![0u8; n];
            let riov = iov(&mut r);
            // SAFETY: the buffer outlives the receive, completed below.
            unsafe {
                b.ep.trecvmsg(&m(&riov, FiAddr::UNSPEC, 5, 0, 1), OpFlags::empty())
            }
            .unwrap();
            let mut out = [CqEntry::default(); 1];
            let got = b.cq.sread(&mut out, Some(T)).unwrap();
            assert_eq!((got, out[0].context, out[0].len), (1, 1, n));
            r
        });
        std::thread::sleep(Duration::from_millis(200));
        let mut data: Vec<u8> = (0..n).map(|i| (i % 241) as u8).collect();
        let diov = iov(&mut data);
        // SAFETY: the buffer outlives the send, completed below.
        unsafe { a.ep.tsendmsg(&m(&diov, *to_b, 5, 0, 2), OpFlags::empty()) }.unwrap();
        let mut out = [CqEntry::default(); 1];
        assert_eq!(a.cq.sread(&mut out, Some(T)).unwrap(), 1);
        assert_eq!(out[0].context, 2);
        let r = rx.join().unwrap();
        assert!(r == data);
    });
}

/// A receive counter counts a cancelled receive as an error (through the
/// kit's `Binds`). (PEEK / CLAIM / DISCARD and the other counter rules
/// are the semantics suite's.)
#[test]
fn a_cancelled_receive_counts_as_an_error() {
    let Some(w) = world() else { return };
    let recvd = w.domain.cntr(&Default::default()).unwrap();
    // Counters bind before enable: a fresh endpoint.
    let info = entries(EpType::Rdm, rdm_hints()).unwrap().remove(0);
    let cq = w.domain.cq(&cq_attr()).unwrap();
    let ep = w.domain.endpoint(&info).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Av(w.av.as_ref())).unwrap();
    ep.bind(Bind::Cntr(recvd.as_ref(), Caps::RECV)).unwrap();
    ep.enable().unwrap();
    let mut buf = vec![0u8; 16];
    let riov = iov(&mut buf);
    // SAFETY: `buf` outlives the receive, cancelled below.
    unsafe { ep.trecvmsg(&m(&riov, FiAddr::UNSPEC, 9, 0, 28), OpFlags::empty()) }.unwrap();
    ep.cancel(28).unwrap();
    let deadline = Instant::now() + T;
    let mut e = [CqEntry::default(); 1];
    loop {
        match cq.read(&mut e) {
            Err(err) if err.kind() == ErrorKind::Avail => break,
            Err(err) if err.kind() == ErrorKind::Again => {}
            other => panic!("expected the cancellation, got {other:?}"),
        }
        assert!(Instant::now() < deadline, "no cancellation within {T:?}");
    }
    let err = cq.readerr().unwrap();
    assert_eq!((err.entry.context, err.err), (28, ErrorKind::Canceled));
    assert_eq!((recvd.read(), recvd.readerr()), (0, 1));
}

/// FI_FENCE on RDM: the fenced operation and everything posted after it
/// to the same peer wait until the operations before it completed. Here
/// the one before is a rendezvous send, complete only once the receiver
/// posts a receive and reads it: until then the fenced RMA write does not
/// touch the target and the message behind it is not delivered (without
/// the fence both would land at once); then the three complete in order.
#[test]
fn fence_waits_for_earlier_operations_to_the_peer() {
    let Some(w) = world_with(Caps::FENCE) else {
        return;
    };
    assert!(w.a.ep.info().caps.contains(Caps::FENCE));
    // The connection is up (an eager message each way is not needed:
    // one from a to b).
    let mut warm = [0u8; 8];
    let wiov = iov(&mut warm);
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        w.b.ep
            .trecvmsg(&m(&wiov, FiAddr::UNSPEC, 1, 0, 100), OpFlags::empty())
    }
    .unwrap();
    w.retry(|| w.a.ep.tinject(b"warm-up!", w.to_b, 1, None));
    assert_eq!(w.wait(w.b.cq.as_ref()).unwrap().0.context, 100);

    // 1. A rendezvous send nobody receives yet.
    let n = 256 << 10;
    let mut big: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    let biov = iov(&mut big);
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe {
        w.a.ep
            .tsendmsg(&m(&biov, w.to_b, 9, 0, 1), OpFlags::empty())
    });
    // 2. A fenced RMA write.
    let target = Buf::new(w.domain.as_ref(), 64);
    let mut pattern: Vec<u8> = (0..64u8).map(|i| i ^ 0x5a).collect();
    let piov = iov(&mut pattern);
    let remote = [RmaIov {
        addr: target.addr(),
        len: 64,
        key: target.mr.key(),
    }];
    let wmsg = RmaMsg {
        iov: &piov,
        desc: &[],
        addr: w.to_b,
        rma_iov: &remote,
        context: 2,
        data: 0,
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe { w.a.ep.writemsg(&wmsg, OpFlags::FENCE) });
    // 3. A message after it (not fenced itself), to a posted receive.
    let mut small = [0u8; 16];
    let siov = iov(&mut small);
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        w.b.ep
            .trecvmsg(&m(&siov, FiAddr::UNSPEC, 10, 0, 12), OpFlags::empty())
    }
    .unwrap();
    let mut after = *b"after the fence!";
    let aiov = iov(&mut after);
    // SAFETY: the test keeps the buffers alive until their completions.
    w.retry(|| unsafe {
        w.a.ep
            .tsendmsg(&m(&aiov, w.to_b, 10, 0, 3), OpFlags::empty())
    });

    // Nothing moves while the rendezvous waits for its receive.
    let until = Instant::now() + Duration::from_millis(300);
    let mut e = [CqEntry::default(); 1];
    while Instant::now() < until {
        for cq in [&w.a.cq, &w.b.cq] {
            match cq.read(&mut e) {
                Ok(0) => {}
                Err(err) if err.kind() == ErrorKind::Again => {}
                other => panic!("a completion before the fence lifted: {other:?} {:?}", e[0]),
            }
        }
    }
    assert!(
        target.mem.iter().all(|&b| b == 0),
        "the fenced write landed before the operation before it completed"
    );
    assert_eq!(small, [0u8; 16], "a message behind the fence was delivered");

    // The receive lets the rendezvous finish; the rest follows in order.
    let mut got = vec![0u8; n];
    let giov = iov(&mut got);
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        w.b.ep
            .trecvmsg(&m(&giov, FiAddr::UNSPEC, 9, 0, 11), OpFlags::empty())
    }
    .unwrap();
    let order: Vec<u64> = (0..3)
        .map(|_| w.wait(w.a.cq.as_ref()).unwrap().0.context)
        .collect();
    assert_eq!(order, [1, 2, 3], "completions out of fence order");
    let recvd: Vec<u64> = (0..2)
        .map(|_| w.wait(w.b.cq.as_ref()).unwrap().0.context)
        .collect();
    assert_eq!(recvd, [11, 12]);
    assert!(got == big, "rendezvous data differs");
    assert_eq!(target.mem, pattern);
    assert_eq!(&small, b"after the fence!");
}
