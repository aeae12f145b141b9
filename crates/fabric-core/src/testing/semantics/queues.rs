//! CQ, EQ and counter behaviour, error completions.

#[allow(clippy::wildcard_imports)]
use super::*;

/// fi_cq(3): an empty CQ reads `Again` (read, readerr, and sread on
/// timeout); an error entry makes reads say `Avail` until readerr takes
/// it, and the successes behind it follow; each format keeps only its
/// fields; remote CQ data arrives with FI_REMOTE_CQ_DATA; with
/// FI_SELECTIVE_COMPLETION only FI_COMPLETION operations report success.
pub fn cq_behaviour(rig: &Rig) {
    let w = rig.world(&rig.base(), 2, Opts::default());
    let cq = w.eps[1].cq.as_ref();
    let mut e = [CqEntry::default()];
    assert_eq!(cq.read(&mut e).refused(), ErrorKind::Again, "read empty");
    assert_eq!(cq.readerr().refused(), ErrorKind::Again, "readerr empty");
    assert_eq!(
        cq.sread(&mut e, Some(Duration::from_millis(5))).refused(),
        ErrorKind::Again,
        "sread timeout"
    );
    // An error entry (truncation) ahead of a success.
    w.recv(1, 4, FiAddr::UNSPEC, None, 1, OpFlags::empty())
        .expect("recv");
    w.recv(1, 64, FiAddr::UNSPEC, None, 2, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, b"too long", 3);
    w.send(0, 1, b"fits", 4);
    let deadline = Instant::now() + T;
    loop {
        w.spin();
        match cq.read(&mut e) {
            Err(err) if err.kind() == ErrorKind::Avail => break,
            Err(err) if err.kind() == ErrorKind::Again => {}
            other => panic!("expected Avail, got {other:?}"),
        }
        assert!(Instant::now() < deadline, "no error entry");
    }
    for _ in 0..20 {
        w.spin();
    }
    assert_eq!(cq.read(&mut e).refused(), ErrorKind::Avail, "still Avail");
    let err = cq.readerr().expect("readerr");
    assert_eq!((err.entry.context, err.err), (1, ErrorKind::Trunc));
    assert_eq!(w.ok(1).0.context, 2, "the success behind the error");
    w.ok(0);
    w.ok(0);
    // Remote CQ data and formats.
    if let Some(info) = rig.offers(
        Caps::TAGGED | Caps::REMOTE_CQ_DATA,
        "CQ formats and remote CQ data",
    ) {
        let rf = CompletionFlags::TAGGED | CompletionFlags::RECV | CompletionFlags::REMOTE_CQ_DATA;
        for (format, want) in [
            (
                CqFormat::Context,
                CqEntry {
                    context: 5,
                    ..CqEntry::default()
                },
            ),
            (
                CqFormat::Msg,
                CqEntry {
                    context: 5,
                    flags: rf,
                    len: 3,
                    ..CqEntry::default()
                },
            ),
            (
                CqFormat::Data,
                CqEntry {
                    context: 5,
                    flags: rf,
                    len: 3,
                    data: 8,
                    ..CqEntry::default()
                },
            ),
            (
                CqFormat::Tagged,
                CqEntry {
                    context: 5,
                    flags: rf,
                    len: 3,
                    data: 8,
                    tag: 77,
                    ..CqEntry::default()
                },
            ),
        ] {
            let f = rig.world(
                &info,
                2,
                Opts {
                    format,
                    ..Opts::default()
                },
            );
            f.recv(1, 3, FiAddr::UNSPEC, Some((77, 0)), 5, OpFlags::empty())
                .expect("trecv");
            f.retry(|| f.ep(0).tinject(b"abc", f.addr[1], 77, Some(8)))
                .expect("tinject");
            let (got, _) = f.ok(1);
            assert_eq!(got, want, "{format:?}");
        }
    }
    // Selective completion on endpoint 0.
    let s = rig.world(
        &rig.base(),
        2,
        Opts {
            selective: true,
            ..Opts::default()
        },
    );
    for ctx in [10, 11] {
        s.recv(1, 64, FiAddr::UNSPEC, None, ctx, OpFlags::empty())
            .expect("recv");
    }
    s.post(0, s.addr[1], Op::Send, b"quiet", 1, OpFlags::empty())
        .expect("send");
    s.post(0, s.addr[1], Op::Send, b"loud", 2, OpFlags::COMPLETION)
        .expect("send");
    assert_eq!(s.ok(1).0.context, 10);
    assert_eq!(s.ok(1).0.context, 11);
    assert_eq!(s.ok(0).0.context, 2, "only FI_COMPLETION");
    s.nothing(0);
}

/// fi_eq(3): an empty EQ reads `Again` (read, readerr, and sread on
/// timeout); an event written comes back unchanged, once.
pub fn eq_behaviour(rig: &Rig) {
    let w = rig.world(&rig.base(), 1, Opts::default());
    let eq = w
        .fabric
        .eq(&EqAttr {
            wait_obj: WaitObj::Unspec,
            ..EqAttr::default()
        })
        .expect("eq");
    assert_eq!(eq.read().refused(), ErrorKind::Again, "read empty");
    assert_eq!(eq.readerr().refused(), ErrorKind::Again, "readerr empty");
    assert_eq!(
        eq.sread(Some(Duration::from_millis(5))).refused(),
        ErrorKind::Again,
        "sread timeout"
    );
    let ev = EqEvent::Written {
        event: 0x77,
        data: pattern(24, seed()),
    };
    eq.write(ev.clone()).expect("write");
    assert_eq!(eq.sread(Some(T)).expect("sread"), ev);
    assert_eq!(eq.read().refused(), ErrorKind::Again, "read once");
}

/// fi_cntr(3): send and receive counters count completions, errors
/// (truncation) apart; set / add; wait returns at the threshold, says
/// `TimedOut` below it, and drives progress while blocking; READ / WRITE
/// counters count RMA (and its errors); REMOTE_WRITE counters count
/// writes into the target (FI_RMA_EVENT).
pub fn counters(rig: &Rig) {
    let w = rig.world(
        &rig.base(),
        2,
        Opts {
            counters: &[&[Caps::SEND], &[Caps::RECV]],
            ..Opts::default()
        },
    );
    let (sent, recvd) = (&w.cntrs[0][0], &w.cntrs[1][0]);
    for k in 0..3u64 {
        w.recv(1, 2, FiAddr::UNSPEC, None, k, OpFlags::empty())
            .expect("recv");
        w.send(0, 1, if k == 2 { b"too long" } else { b"ok" }, 10 + k);
        let _ = w.next(1);
        w.ok(0);
    }
    assert_eq!((sent.read(), sent.readerr()), (3, 0), "send counter");
    assert_eq!((recvd.read(), recvd.readerr()), (2, 1), "receive counter");
    recvd.set(10).expect("set");
    recvd.add(1).expect("add");
    assert_eq!(recvd.read(), 11);
    recvd.adderr(2).expect("adderr");
    assert_eq!(recvd.readerr(), 3);
    recvd.seterr(1).expect("seterr");
    assert_eq!(recvd.readerr(), 1);
    sent.wait(3, Some(Duration::from_millis(10)))
        .expect("wait at the threshold");
    assert_eq!(
        sent.wait(5, Some(Duration::from_millis(10))).refused(),
        ErrorKind::TimedOut
    );
    // A blocking wait drives the receiver's progress.
    w.recv(1, 2, FiAddr::UNSPEC, None, 20, OpFlags::empty())
        .expect("recv");
    let before = recvd.read();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            w.post(0, w.addr[1], Op::Send, b"hi", 21, OpFlags::empty())
                .expect("send");
        });
        recvd
            .wait(before + 1, Some(T))
            .expect("wait drives progress");
    });
    w.ok(0);
    let Some(info) = rig.offers(Caps::RMA | DIRECTIONS, "RMA counters") else {
        return;
    };
    let rma_event = rig.offers(
        Caps::RMA | DIRECTIONS | Caps::RMA_EVENT,
        "remote RMA counters",
    );
    let remote: &[Caps] = if rma_event.is_some() {
        &[Caps::REMOTE_WRITE, Caps::REMOTE_READ]
    } else {
        &[]
    };
    let counters: [&[Caps]; 2] = [&[Caps::READ, Caps::WRITE], remote];
    let w = rig.world(
        rma_event.as_ref().unwrap_or(&info),
        2,
        Opts {
            counters: &counters,
            ..Opts::default()
        },
    );
    let (mr, b) = w.region(256, 0, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let at = RmaIov {
        addr: w.raddr(b, 0),
        len: 64,
        key: mr.key(),
    };
    w.rma(true, leak(pattern(64, seed())), at, 1)
        .expect("write");
    w.ok(0);
    w.rma(false, leak(vec![0; 64]), at, 2).expect("read");
    w.ok(0);
    w.rma(
        true,
        leak(vec![0; 64]),
        RmaIov {
            key: wrong_key(&[mr.key()]),
            ..at
        },
        3,
    )
    .expect("write");
    w.err(0);
    let (read, write) = (&w.cntrs[0][0], &w.cntrs[0][1]);
    assert_eq!((read.read(), read.readerr()), (1, 0), "READ counter");
    assert_eq!((write.read(), write.readerr()), (1, 1), "WRITE counter");
    if rma_event.is_some() {
        let (rw, rr) = (&w.cntrs[1][0], &w.cntrs[1][1]);
        let deadline = Instant::now() + T;
        while (rw.read(), rr.read()) != (1, 1) {
            w.spin();
            assert!(
                Instant::now() < deadline,
                "remote counters {} {}",
                rw.read(),
                rr.read()
            );
        }
    }
    drop(mr);
}

/// Error completions: a truncated receive (eager and rendezvous) is an
/// error entry with `Trunc`, its context, flags, the bytes placed (`len`,
/// the message's start) and those cut (`olen`); the sender's completion
/// is a success; a tagged truncation also carries the tag.
pub fn error_completions(rig: &Rig) {
    let w = rig.world(&rig.base(), 2, Opts::default());
    for (k, (n, cap)) in [(10usize, 4usize), (1 << 20, 100_000)]
        .into_iter()
        .enumerate()
    {
        let d = pattern(n, seed());
        let r = w
            .recv(1, cap, FiAddr::UNSPEC, None, 1 + k as u64, OpFlags::empty())
            .expect("recv");
        w.send(0, 1, &d, 10 + k as u64);
        let e = w.err(1);
        assert_eq!(
            (e.err, e.entry.context, e.entry.len, e.olen),
            (ErrorKind::Trunc, 1 + k as u64, cap, n - cap),
            "truncation of {n} into {cap}"
        );
        assert!(
            has(&e.entry, CompletionFlags::RECV | CompletionFlags::MSG),
            "{:?}",
            e.entry.flags
        );
        same("the truncated message's start", r, &d[..cap]);
        assert_eq!(w.ok(0).0.context, 10 + k as u64, "the sender's completion");
    }
    if let Some(info) = rig.offers(Caps::TAGGED, "tagged truncation") {
        let t = rig.world(&info, 2, Opts::default());
        let d = pattern(40, seed());
        t.recv(1, 8, FiAddr::UNSPEC, Some((3, 0)), 7, OpFlags::empty())
            .expect("trecv");
        t.tsend(0, 1, 3, &d, 8);
        let e = t.err(1);
        assert_eq!(
            (e.err, e.entry.context, e.entry.len, e.olen, e.entry.tag),
            (ErrorKind::Trunc, 7, 8, 32, 3)
        );
        assert!(
            has(&e.entry, CompletionFlags::RECV | CompletionFlags::TAGGED),
            "{:?}",
            e.entry.flags
        );
        t.ok(0);
    }
}
