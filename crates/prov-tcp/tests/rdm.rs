//! Two RDM endpoints over loopback, in one process: every message
//! operation and its completion, and the error paths.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

use std::time::Duration;

use fabric_core::matching::Request;
use fabric_core::objects::{
    AddressVector, AvAttr, Bind, CompletionQueue, CqAttr, CqEntry, CqFormat, Domain, Endpoint,
    FiAddr, IoVec, Msg, Provider, WaitObj,
};
use fabric_core::*;
use prov_tcp::TcpProvider;

struct Side {
    _domain: Box<dyn Domain>,
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    av: Box<dyn AddressVector>,
}

fn rdm_info() -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::TAGGED | Caps::DIRECTED_RECV;
    h.mode = Mode::all();
    h.ep_attr.ep_type = EpType::Rdm;
    h.addr_format = AddrFormat::SockaddrIn;
    let req = Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    let list = TcpProvider.getinfo(&req).unwrap();
    list.into_iter().next().unwrap()
}

fn side(info: &Info) -> Side {
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    let cq = domain
        .cq(&CqAttr {
            format: CqFormat::Tagged,
            wait_obj: WaitObj::Unspec,
            ..Default::default()
        })
        .unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Av(av.as_ref())).unwrap();
    ep.enable().unwrap();
    Side {
        _domain: domain,
        ep,
        cq,
        av,
    }
}

/// Two endpoints that know each other: a's handle for b, b's for a.
fn pair() -> (Side, Side, FiAddr, FiAddr) {
    let info = rdm_info();
    let a = side(&info);
    let b = side(&info);
    let mut out = [FiAddr(0)];
    a.av.insert(&[b.ep.getname().unwrap()], &mut out).unwrap();
    let b_at_a = out[0];
    b.av.insert(&[a.ep.getname().unwrap()], &mut out).unwrap();
    let a_at_b = out[0];
    (a, b, b_at_a, a_at_b)
}

/// Reads one completion, driving both sides' progress.
fn next(
    cq: &dyn CompletionQueue,
    other: &dyn CompletionQueue,
) -> std::result::Result<(CqEntry, FiAddr), Error> {
    let mut e = [CqEntry::default()];
    let mut s = [FiAddr(0)];
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        // Drive the other side's progress without taking its completions.
        let _ = other.read(&mut []);
        match cq.readfrom(&mut e, &mut s) {
            Ok(_) => return Ok((e[0], s[0])),
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => return Err(err),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no completion within 20 s"
        );
    }
}

fn iov(b: &mut [u8]) -> [IoVec; 1] {
    [IoVec {
        addr: b.as_mut_ptr(),
        len: b.len(),
    }]
}

fn msg<'a>(iov: &'a [IoVec], addr: FiAddr, tag: u64, ignore: u64, ctx: u64, data: u64) -> Msg<'a> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore,
        context: ctx,
        data,
    }
}

#[test]
fn send_recv_both_ways_with_sources() {
    let (a, b, b_at_a, a_at_b) = pair();
    let mut rbuf = vec![0u8; 64];
    let riov = iov(&mut rbuf);
    // SAFETY: rbuf outlives the receive's completion, read below.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 7, 0), OpFlags::empty())
            .unwrap()
    };
    let mut sbuf = b"hello over tcp".to_vec();
    let siov = iov(&mut sbuf);
    // SAFETY: sbuf outlives the send's completion, read below.
    unsafe {
        a.ep.sendmsg(&msg(&siov, b_at_a, 0, 0, 1, 0), OpFlags::empty())
            .unwrap()
    };
    let (tx, _) = next(a.cq.as_ref(), b.cq.as_ref()).unwrap();
    assert_eq!(tx.context, 1);
    assert!(
        tx.flags
            .contains(objects::CompletionFlags::SEND | objects::CompletionFlags::MSG)
    );
    let (rx, src) = next(b.cq.as_ref(), a.cq.as_ref()).unwrap();
    assert_eq!((rx.context, rx.len), (7, 14));
    assert_eq!(&rbuf[..14], b"hello over tcp");
    assert_eq!(src, a_at_b, "the source is a's AV handle at b");
    // And back, with inject and remote CQ data.
    let riov = iov(&mut rbuf);
    // SAFETY: as above.
    unsafe {
        a.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 8, 0), OpFlags::empty())
            .unwrap()
    };
    b.ep.inject(b"back", a_at_b, Some(0xfeed)).unwrap();
    let (rx, src) = next(a.cq.as_ref(), b.cq.as_ref()).unwrap();
    assert_eq!((rx.context, rx.len, rx.data), (8, 4, 0xfeed));
    assert!(rx.flags.contains(objects::CompletionFlags::REMOTE_CQ_DATA));
    assert_eq!(src, b_at_a);
    assert_eq!(&rbuf[..4], b"back");
}

#[test]
fn tagged_matching_unexpected_and_order() {
    let (a, b, b_at_a, _) = pair();
    // Three tagged messages arrive before any receive (unexpected queue).
    for (i, tag) in [0x11u64, 0x22, 0x12].into_iter().enumerate() {
        a.ep.tinject(&[i as u8; 3], b_at_a, tag, None).unwrap();
    }
    let mut bufs = vec![vec![0u8; 8]; 3];
    // Wait until all three are at b (unexpected).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut e = [CqEntry::default()];
    loop {
        let _ = a.cq.read(&mut e);
        let _ = b.cq.read(&mut e);
        let mut p = vec![0u8; 1];
        let piov = iov(&mut p);
        // SAFETY: no data is written by a peek.
        unsafe {
            b.ep.trecvmsg(&msg(&piov, FiAddr::UNSPEC, 0x12, 0, 99, 0), OpFlags::PEEK)
                .unwrap()
        };
        match next(b.cq.as_ref(), a.cq.as_ref()) {
            Ok((c, _)) if c.context == 99 => break,
            Ok(_) => {}
            Err(err) => {
                assert_eq!(err.kind(), ErrorKind::Avail);
                let err = b.cq.readerr().unwrap();
                assert_eq!(err.err, ErrorKind::NoMsg);
            }
        }
        assert!(std::time::Instant::now() < deadline);
    }
    // tag 0x1? with ignore 0x0f: the oldest matching (0x11) first, then 0x12.
    for (i, ctx) in [(0usize, 1u64), (1, 2)] {
        let riov = iov(&mut bufs[i]);
        // SAFETY: bufs outlive the completions read below.
        unsafe {
            b.ep.trecvmsg(
                &msg(&riov, FiAddr::UNSPEC, 0x10, 0x0f, ctx, 0),
                OpFlags::empty(),
            )
            .unwrap()
        };
    }
    let (c1, _) = next(b.cq.as_ref(), a.cq.as_ref()).unwrap();
    let (c2, _) = next(b.cq.as_ref(), a.cq.as_ref()).unwrap();
    assert_eq!((c1.context, c1.tag, c2.context, c2.tag), (1, 0x11, 2, 0x12));
    assert_eq!(&bufs[0][..3], &[0, 0, 0]);
    assert_eq!(&bufs[1][..3], &[2, 2, 2]);
    // 0x22 remains; an exact receive takes it.
    let riov = iov(&mut bufs[2]);
    // SAFETY: as above.
    unsafe {
        b.ep.trecvmsg(&msg(&riov, FiAddr::UNSPEC, 0x22, 0, 3, 0), OpFlags::empty())
            .unwrap()
    };
    let (c3, _) = next(b.cq.as_ref(), a.cq.as_ref()).unwrap();
    assert_eq!((c3.context, c3.tag, c3.len), (3, 0x22, 3));
}

#[test]
fn truncation_is_an_error_completion() {
    let (a, b, b_at_a, _) = pair();
    let mut small = vec![0u8; 4];
    let riov = iov(&mut small);
    // SAFETY: small outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 5, 0), OpFlags::empty())
            .unwrap()
    };
    a.ep.inject(b"0123456789", b_at_a, None).unwrap();
    let err = next(b.cq.as_ref(), a.cq.as_ref()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Avail);
    let e = b.cq.readerr().unwrap();
    assert_eq!(
        (e.err, e.olen, e.entry.context, e.entry.len),
        (ErrorKind::Trunc, 6, 5, 4)
    );
    assert_eq!(&small, b"0123");
}

#[test]
fn large_message_goes_straight_into_the_buffer() {
    let (a, b, b_at_a, _) = pair();
    let n = 4 << 20;
    let mut rbuf = vec![0u8; n];
    let riov = iov(&mut rbuf);
    // SAFETY: rbuf outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 1, 0), OpFlags::empty())
            .unwrap()
    };
    let mut sbuf: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    let siov = iov(&mut sbuf);
    // SAFETY: sbuf outlives the completion.
    unsafe {
        a.ep.sendmsg(&msg(&siov, b_at_a, 0, 0, 2, 0), OpFlags::empty())
            .unwrap()
    };
    let (rx, _) = next(b.cq.as_ref(), a.cq.as_ref()).unwrap();
    assert_eq!(rx.len, n);
    let (tx, _) = next(a.cq.as_ref(), b.cq.as_ref()).unwrap();
    assert_eq!(tx.context, 2);
    assert!(rbuf == sbuf);
}

#[test]
fn cancel_and_bad_state() {
    let info = rdm_info();
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    assert_eq!(
        ep.inject(b"x", FiAddr(0), None).unwrap_err().kind(),
        ErrorKind::OpBadState
    );
    assert_eq!(ep.enable().unwrap_err().kind(), ErrorKind::NoAv);
    let (a, _b, _, _) = pair();
    let mut r = vec![0u8; 4];
    let riov = iov(&mut r);
    // SAFETY: r outlives the cancel's completion.
    unsafe {
        a.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 42, 0), OpFlags::empty())
            .unwrap()
    };
    a.ep.cancel(42).unwrap();
    let mut e = [CqEntry::default()];
    assert_eq!(a.cq.read(&mut e).unwrap_err().kind(), ErrorKind::Avail);
    assert_eq!(a.cq.readerr().unwrap().err, ErrorKind::Canceled);
    assert_eq!(a.ep.cancel(42).unwrap_err().kind(), ErrorKind::NoEnt);
}

#[test]
fn sread_blocks_until_the_peer_sends() {
    let (a, b, b_at_a, _) = pair();
    let mut r = vec![0u8; 8];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 3, 0), OpFlags::empty())
            .unwrap()
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            a.ep.inject(b"wake", b_at_a, None).unwrap();
            // Drive a's progress until b has the message: the frame waits
            // for the connection, which b answers only from inside its
            // sread, whenever its thread gets to run.
            let mut e = [CqEntry::default()];
            let start = std::time::Instant::now();
            while !done.load(std::sync::atomic::Ordering::Acquire)
                && start.elapsed() < Duration::from_secs(30)
            {
                let _ = a.cq.read(&mut e);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let mut e = [CqEntry::default()];
        let got = b.cq.sread(&mut e, Some(Duration::from_secs(20)));
        done.store(true, std::sync::atomic::Ordering::Release);
        assert_eq!((got.unwrap(), e[0].context, e[0].len), (1, 3, 4));
    });
}

/// Exchanges one message into `riov` (context 1) by polling both sides,
/// then polls on, so that the established connections are read directly
/// (out of the epoll set); leaves a receive into `riov` (context 2)
/// posted. The caller's buffer outlives both completions.
fn busy_poll_a_message(a: &Side, b: &Side, b_at_a: FiAddr, riov: &[IoVec]) {
    let mut e = [CqEntry::default()];
    // SAFETY: the caller's buffer outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(riov, FiAddr::UNSPEC, 0, 0, 1, 0), OpFlags::empty())
            .unwrap()
    };
    a.ep.inject(b"ping", b_at_a, None).unwrap();
    let mut got = false;
    for _ in 0..200_000 {
        let _ = a.cq.read(&mut e);
        if b.cq.read(&mut e).is_ok() {
            got = true;
            break;
        }
    }
    assert!(
        got && e[0].context == 1,
        "the first message arrived by polling"
    );
    for _ in 0..100 {
        let _ = a.cq.read(&mut e);
        assert_eq!(b.cq.read(&mut e).unwrap_err().kind(), ErrorKind::Again);
    }
    // SAFETY: as above.
    unsafe {
        b.ep.recvmsg(&msg(riov, FiAddr::UNSPEC, 0, 0, 2, 0), OpFlags::empty())
            .unwrap()
    };
}

/// Sends "wake" to `b_at_a` 50 ms from now, then drives `a` until it is out.
fn send_later(a: &Side, b_at_a: FiAddr) {
    std::thread::sleep(Duration::from_millis(50));
    a.ep.inject(b"wake", b_at_a, None).unwrap();
    let mut e = [CqEntry::default()];
    for _ in 0..100 {
        let _ = a.cq.read(&mut e);
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn sread_wakes_after_busy_polling() {
    // Busy polling takes established connections out of the epoll set; a
    // blocking read must put them back, or it sleeps through the message.
    let (a, b, b_at_a, _) = pair();
    let mut r = vec![0u8; 8];
    let riov = iov(&mut r);
    let mut e = [CqEntry::default()];
    busy_poll_a_message(&a, &b, b_at_a, &riov);
    std::thread::scope(|s| {
        s.spawn(|| send_later(&a, b_at_a));
        // A sleep that misses the message still finds it at the timeout:
        // the wake must come long before.
        let start = std::time::Instant::now();
        let n = b.cq.sread(&mut e, Some(Duration::from_secs(30))).unwrap();
        assert_eq!((n, e[0].context, e[0].len), (1, 2, 4));
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "sread slept through the message"
        );
    });
}

#[test]
fn wait_fd_turns_readable_after_busy_polling() {
    // The endpoint's wait fd (the domain's epoll set) must report a message
    // that arrives after busy polling took the connection out of the set:
    // asking for the fd puts every socket back, for good.
    let (a, b, b_at_a, _) = pair();
    let mut r = vec![0u8; 8];
    let riov = iov(&mut r);
    let mut e = [CqEntry::default()];
    busy_poll_a_message(&a, &b, b_at_a, &riov);
    let fd =
        b.ep.as_any()
            .downcast_ref::<prov_tcp::TcpEndpoint>()
            .unwrap()
            .wait_fd();
    std::thread::scope(|s| {
        s.spawn(|| send_later(&a, b_at_a));
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let limit = rustix::event::Timespec {
            tv_sec: 30,
            tv_nsec: 0,
        };
        let n = rustix::event::poll(&mut fds, Some(&limit)).unwrap();
        assert_eq!(n, 1, "the wait fd did not turn readable");
    });
    let mut got = false;
    for _ in 0..10_000 {
        if b.cq.read(&mut e).is_ok() {
            got = true;
            break;
        }
    }
    assert!(got && e[0].context == 2 && e[0].len == 4);
}

#[test]
fn peer_gone_fails_pending_sends() {
    let (a, b, b_at_a, _) = pair();
    // Establish the connection, then drop b (its listener and sockets close).
    a.ep.inject(b"hi", b_at_a, None).unwrap();
    let mut e = [CqEntry::default()];
    for _ in 0..50 {
        let _ = a.cq.read(&mut e);
        let _ = b.cq.read(&mut e);
    }
    drop(b);
    let big = vec![1u8; 8 << 20];
    let mut errors = 0;
    for i in 0..20u64 {
        let mut buf = big.clone();
        let siov = iov(&mut buf);
        // SAFETY: the buffer is leaked so it outlives any completion.
        let r = unsafe {
            a.ep.sendmsg(&msg(&siov, b_at_a, 0, 0, i, 0), OpFlags::empty())
        };
        std::mem::forget(buf);
        if r.is_err() {
            break;
        }
        for _ in 0..100 {
            match a.cq.read(&mut e) {
                Err(err) if err.kind() == ErrorKind::Avail => {
                    let ee = a.cq.readerr().unwrap();
                    assert!(
                        matches!(
                            ee.err,
                            ErrorKind::ConnReset
                                | ErrorKind::Io
                                | ErrorKind::Other
                                | ErrorKind::ConnRefused
                                | ErrorKind::ConnAborted
                        ),
                        "{ee:?}"
                    );
                    errors += 1;
                }
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if errors > 0 {
            break;
        }
    }
    assert!(
        errors > 0,
        "sends to a vanished peer must fail with error completions"
    );
}

/// Drives both sides' progress for a while.
fn settle(a: &Side, b: &Side, rounds: usize) {
    let mut e: [CqEntry; 0] = [];
    for _ in 0..rounds {
        let _ = a.cq.read(&mut e);
        let _ = b.cq.read(&mut e);
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn conns(s: &Side) -> usize {
    s.ep.as_any()
        .downcast_ref::<prov_tcp::TcpEndpoint>()
        .unwrap()
        .connection_count()
}

#[test]
fn simultaneous_connects_leave_one_connection() {
    for _ in 0..5 {
        let (a, b, b_at_a, a_at_b) = pair();
        let mut ra = vec![vec![0u8; 8]; 20];
        let mut rb = vec![vec![0u8; 8]; 20];
        for (i, (x, y)) in ra.iter_mut().zip(rb.iter_mut()).enumerate() {
            let xi = iov(x);
            let yi = iov(y);
            // SAFETY: the buffers outlive the completions read below.
            unsafe {
                a.ep.recvmsg(
                    &msg(&xi, FiAddr::UNSPEC, 0, 0, 100 + i as u64, 0),
                    OpFlags::empty(),
                )
                .unwrap();
                b.ep.recvmsg(
                    &msg(&yi, FiAddr::UNSPEC, 0, 0, 200 + i as u64, 0),
                    OpFlags::empty(),
                )
                .unwrap();
            }
        }
        // Both connect at once: neither side progresses before both sent.
        for i in 0..20u8 {
            a.ep.inject(&[i; 8], b_at_a, None).unwrap();
            b.ep.inject(&[i + 100; 8], a_at_b, None).unwrap();
        }
        for i in 0..20u64 {
            let (e, src) = next(a.cq.as_ref(), b.cq.as_ref()).unwrap();
            assert_eq!((e.context, src), (100 + i, b_at_a), "in order, from b");
            let (e, src) = next(b.cq.as_ref(), a.cq.as_ref()).unwrap();
            assert_eq!((e.context, src), (200 + i, a_at_b), "in order, from a");
        }
        for (i, (x, y)) in ra.iter().zip(rb.iter()).enumerate() {
            assert_eq!(x, &vec![i as u8 + 100; 8]);
            assert_eq!(y, &vec![i as u8; 8]);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while conns(&a) != 1 || conns(&b) != 1 {
            settle(&a, &b, 10);
            assert!(
                std::time::Instant::now() < deadline,
                "connections left: {} and {}",
                conns(&a),
                conns(&b)
            );
        }
    }
}

#[test]
fn a_large_unexpected_message_waits_at_the_sender() {
    let (a, b, b_at_a, a_at_b) = pair();
    let n = 3 << 20;
    let mut sbuf: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    let siov = iov(&mut sbuf);
    // SAFETY: sbuf outlives the send's completion.
    unsafe {
        a.ep.tsendmsg(
            &msg(&siov, b_at_a, 0x77, 0, 1, 0xabc),
            OpFlags::REMOTE_CQ_DATA,
        )
        .unwrap()
    };
    // Only the announcement travels; b can peek at it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        settle(&a, &b, 2);
        let mut p = vec![0u8; 1];
        let piov = iov(&mut p);
        // SAFETY: a peek writes nothing.
        unsafe {
            b.ep.trecvmsg(&msg(&piov, FiAddr::UNSPEC, 0x77, 0, 9, 0), OpFlags::PEEK)
                .unwrap()
        };
        match next(b.cq.as_ref(), a.cq.as_ref()) {
            Ok((e, src)) => {
                assert_eq!(
                    (e.context, e.len, e.tag, e.data, src),
                    (9, n, 0x77, 0xabc, a_at_b)
                );
                break;
            }
            Err(err) => {
                assert_eq!(err.kind(), ErrorKind::Avail);
                assert_eq!(b.cq.readerr().unwrap().err, ErrorKind::NoMsg);
            }
        }
        assert!(std::time::Instant::now() < deadline);
    }
    assert_eq!(
        a.cq.read(&mut [CqEntry::default()]).unwrap_err().kind(),
        ErrorKind::Again,
        "the send cannot complete before a receive takes it"
    );
    let mut rbuf = vec![0u8; n];
    let riov = iov(&mut rbuf);
    // SAFETY: rbuf outlives the completion.
    unsafe {
        b.ep.trecvmsg(&msg(&riov, FiAddr::UNSPEC, 0x77, 0, 2, 0), OpFlags::empty())
            .unwrap()
    };
    let (rx, _) = next(b.cq.as_ref(), a.cq.as_ref()).unwrap();
    assert_eq!((rx.context, rx.len, rx.data), (2, n, 0xabc));
    assert!(rbuf == sbuf);
    let (tx, _) = next(a.cq.as_ref(), b.cq.as_ref()).unwrap();
    assert_eq!(tx.context, 1);
}

#[test]
fn rendezvous_into_a_smaller_buffer_truncates() {
    let (a, b, b_at_a, _) = pair();
    let n = 1 << 20;
    let mut sbuf = vec![5u8; n];
    let siov = iov(&mut sbuf);
    // SAFETY: sbuf outlives the completion.
    unsafe {
        a.ep.sendmsg(&msg(&siov, b_at_a, 0, 0, 1, 0), OpFlags::empty())
            .unwrap()
    };
    let mut rbuf = vec![0u8; 100_000];
    let riov = iov(&mut rbuf);
    // SAFETY: rbuf outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 2, 0), OpFlags::empty())
            .unwrap()
    };
    let err = next(b.cq.as_ref(), a.cq.as_ref()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Avail);
    let e = b.cq.readerr().unwrap();
    assert_eq!(
        (e.err, e.entry.len, e.olen),
        (ErrorKind::Trunc, 100_000, n - 100_000)
    );
    assert!(rbuf.iter().all(|&x| x == 5));
    let (tx, _) = next(a.cq.as_ref(), b.cq.as_ref()).unwrap();
    assert_eq!(tx.context, 1, "the sender completes normally");
}

#[test]
fn unexpected_messages_beyond_the_budget_wait_in_the_socket() {
    let (a, b, b_at_a, _) = pair();
    // 16 MiB of eager-sized messages, twice the unexpected budget.
    let size = 16 << 10;
    let count = 1024usize;
    let mut data: Vec<Vec<u8>> = (0..count).map(|i| vec![(i % 251) as u8; size]).collect();
    let mut sent = 0;
    let mut completed = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut e = [CqEntry::default(); 16];
    // Send as much as the sender takes, with nothing posted at b.
    while sent < count && std::time::Instant::now() < deadline {
        let siov = iov(&mut data[sent]);
        // SAFETY: data outlives the completions.
        match unsafe {
            a.ep.sendmsg(&msg(&siov, b_at_a, 0, 0, sent as u64, 0), OpFlags::empty())
        } {
            Ok(()) => sent += 1,
            Err(err) => {
                assert_eq!(err.kind(), ErrorKind::Again);
                break;
            }
        }
        if let Ok(n) = a.cq.read(&mut e) {
            completed += n;
        }
        let _ = b.cq.read(&mut []);
    }
    settle(&a, &b, 50);
    while let Ok(n) = a.cq.read(&mut e) {
        completed += n;
    }
    assert!(completed < count, "b cannot have taken everything");
    // Now b posts receives: everything arrives, in order, intact.
    let mut rbufs = vec![vec![0u8; size]; count];
    for (i, r) in rbufs.iter_mut().enumerate() {
        let riov = iov(r);
        // SAFETY: rbufs outlive the completions.
        unsafe {
            b.ep.recvmsg(
                &msg(&riov, FiAddr::UNSPEC, 0, 0, i as u64, 0),
                OpFlags::empty(),
            )
            .unwrap()
        };
    }
    let mut got = 0;
    while got < count {
        // Keep feeding a's remaining sends.
        while sent < count {
            let siov = iov(&mut data[sent]);
            // SAFETY: as above.
            match unsafe {
                a.ep.sendmsg(&msg(&siov, b_at_a, 0, 0, sent as u64, 0), OpFlags::empty())
            } {
                Ok(()) => sent += 1,
                Err(_) => break,
            }
        }
        let _ = a.cq.read(&mut e);
        if let Ok(n) = b.cq.read(&mut e) {
            for x in &e[..n] {
                assert_eq!(x.context, got as u64, "in order");
                got += 1;
            }
        }
        assert!(std::time::Instant::now() < deadline, "stuck at {got}");
    }
    for (i, r) in rbufs.iter().enumerate() {
        assert!(r.iter().all(|&x| x == (i % 251) as u8), "message {i}");
    }
}

#[test]
fn garbage_from_a_peer_fails_only_that_connection() {
    use std::io::Write;
    let (a, b, b_at_a, _) = pair();
    let name = b.ep.getname().unwrap().socket_addr().unwrap();
    // Random bytes, a hello followed by nonsense, and a truncated frame.
    let mut raw = std::net::TcpStream::connect(name).unwrap();
    raw.write_all(&[0x55; 300]).unwrap();
    let mut hello = std::net::TcpStream::connect(name).unwrap();
    let (h, len) = prov_tcp::wire::Frame::hello(prov_tcp::wire::CmHeader::new(
        Some("127.0.0.1:1".parse().unwrap()),
        42,
    ))
    .to_bytes();
    hello.write_all(&h[..len]).unwrap();
    let (c, clen) = prov_tcp::wire::Frame::cts(77, 10, None).to_bytes();
    hello.write_all(&c[..clen]).unwrap();
    let mut cut = std::net::TcpStream::connect(name).unwrap();
    cut.write_all(&h[..20]).unwrap();
    drop(cut);
    settle(&a, &b, 20);
    // b still works with a.
    let mut r = vec![0u8; 4];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 5, 0), OpFlags::empty())
            .unwrap()
    };
    a.ep.inject(b"okay", b_at_a, None).unwrap();
    let (e, _) = next(b.cq.as_ref(), a.cq.as_ref()).unwrap();
    assert_eq!((e.context, &r[..]), (5, &b"okay"[..]));
    // The bad connections are gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while conns(&b) != 1 {
        settle(&a, &b, 5);
        assert!(
            std::time::Instant::now() < deadline,
            "{} connections",
            conns(&b)
        );
    }
    drop((raw, hello));
}

#[test]
fn a_full_transmit_queue_is_again() {
    let (a, _b, b_at_a, _) = pair();
    let size = a.ep.info().tx_attr.size;
    let big = vec![1u8; 1 << 20];
    let mut accepted = 0;
    let mut again = false;
    // b never reads: rendezvous sends wait for a clear-to-send forever.
    for i in 0..size + 10 {
        let mut buf = big.clone();
        let siov = iov(&mut buf);
        // SAFETY: the buffer is leaked, so it outlives any completion.
        let r = unsafe {
            a.ep.sendmsg(&msg(&siov, b_at_a, 0, 0, i as u64, 0), OpFlags::empty())
        };
        std::mem::forget(buf);
        match r {
            Ok(()) => accepted += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Again);
                again = true;
                break;
            }
        }
    }
    assert!(again, "after {accepted} sends");
    assert_eq!(accepted, size);
}

#[test]
fn an_endpoint_sends_to_itself() {
    let info = rdm_info();
    let a = side(&info);
    let mut out = [FiAddr(0)];
    a.av.insert(&[a.ep.getname().unwrap()], &mut out).unwrap();
    let me = out[0];
    let mut r = vec![0u8; 8];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        a.ep.trecvmsg(&msg(&riov, FiAddr::UNSPEC, 3, 0, 1, 0), OpFlags::empty())
            .unwrap()
    };
    a.ep.tinject(b"myself", me, 3, None).unwrap();
    let (e, src) = next(a.cq.as_ref(), a.cq.as_ref()).unwrap();
    assert_eq!((e.context, e.len, src), (1, 6, me));
    assert_eq!(&r[..6], b"myself");
}

/// FI_THREAD_SAFE: three threads send through one endpoint while a
/// fourth reads its CQ; every message arrives once, each thread's in the
/// order it sent them (FI_ORDER_SAS), and every send completes once.
#[test]
fn threads_share_an_endpoint() {
    const THREADS: u64 = 3;
    const PER: u64 = 2000;
    const WINDOW: usize = 64;
    // Before the endpoints, so that it outlives the receives still posted
    // when they close.
    let mut rbufs = vec![[0u8; 16]; WINDOW];
    let (a, b, b_at_a, _) = pair();
    let info = rdm_info();
    assert_eq!(info.domain_attr.threading, Threading::Safe);
    assert!(info.tx_attr.msg_order.contains(MsgOrder::SAS));
    // Each thread's payloads (thread, sequence); odd sequences are sent
    // with a completion, even ones injected.
    let payloads: Vec<Vec<[u8; 16]>> = (0..THREADS)
        .map(|t| {
            (0..PER)
                .map(|s| {
                    let mut p = [0u8; 16];
                    p[..8].copy_from_slice(&t.to_le_bytes());
                    p[8..].copy_from_slice(&s.to_le_bytes());
                    p
                })
                .collect()
        })
        .collect();
    let sends_done = std::sync::atomic::AtomicBool::new(false);
    let rptr = rbufs.as_mut_ptr();
    let post = |i: usize| {
        let riov = [IoVec {
            addr: rptr.wrapping_add(i).cast::<u8>(),
            len: 16,
        }];
        let m = msg(&riov, FiAddr::UNSPEC, 0, u64::MAX, i as u64, 0);
        // SAFETY: buffer `i` of `rbufs`, which outlives the endpoints; it
        // is reposted only after its completion was read.
        unsafe { b.ep.trecvmsg(&m, OpFlags::empty()) }.unwrap();
    };
    for i in 0..WINDOW {
        post(i);
    }
    let mut next_seq = [0u64; THREADS as usize];
    std::thread::scope(|s| {
        for (t, mine) in payloads.iter().enumerate() {
            let ep = &a.ep;
            s.spawn(move || {
                for (seq, p) in mine.iter().enumerate() {
                    loop {
                        let r = if seq % 2 == 0 {
                            ep.tinject(p, b_at_a, t as u64, None)
                        } else {
                            let siov = [IoVec {
                                addr: p.as_ptr().cast_mut(),
                                len: 16,
                            }];
                            let ctx = ((t as u64) << 32) | seq as u64;
                            let m = msg(&siov, b_at_a, t as u64, 0, ctx, 0);
                            // SAFETY: `payloads` outlives the scope, and
                            // so every send; a send does not write.
                            unsafe { ep.tsendmsg(&m, OpFlags::empty()) }
                        };
                        match r {
                            Ok(()) => break,
                            Err(e) if e.kind() == ErrorKind::Again => std::thread::yield_now(),
                            Err(e) => panic!("thread {t} send {seq}: {e}"),
                        }
                    }
                }
            });
        }
        let (cq, done) = (&a.cq, &sends_done);
        s.spawn(move || {
            let want = THREADS * PER / 2;
            let mut seen = std::collections::HashSet::new();
            let mut e = [CqEntry::default()];
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while (seen.len() as u64) < want {
                match cq.read(&mut e) {
                    Ok(_) => {
                        let (t, seq) = (e[0].context >> 32, e[0].context & 0xffff_ffff);
                        assert!(t < THREADS && seq < PER && seq % 2 == 1, "{:?}", e[0]);
                        assert!(seen.insert(e[0].context), "completed twice: {:?}", e[0]);
                    }
                    Err(err) if err.kind() == ErrorKind::Again => {}
                    Err(err) => panic!("send completion: {err}"),
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} sends completed",
                    seen.len()
                );
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut got = 0;
        let mut e = [CqEntry::default()];
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while got < THREADS * PER {
            match b.cq.read(&mut e) {
                Ok(_) => {
                    let i = e[0].context as usize;
                    assert_eq!(e[0].len, 16);
                    let p = rbufs_at(rptr, i);
                    let t = u64::from_le_bytes(p[..8].try_into().unwrap());
                    let seq = u64::from_le_bytes(p[8..].try_into().unwrap());
                    assert_eq!(e[0].tag, t, "the tag is the sending thread");
                    assert_eq!(seq, next_seq[t as usize], "thread {t}'s messages in order");
                    next_seq[t as usize] += 1;
                    got += 1;
                    post(i);
                }
                Err(err) if err.kind() == ErrorKind::Again => {}
                Err(err) => panic!("receive completion: {err}"),
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{got} messages arrived"
            );
        }
    });
    assert!(sends_done.load(std::sync::atomic::Ordering::Acquire));
    assert_eq!(next_seq, [PER; THREADS as usize]);
    // The window's receives are still posted; nothing else came.
    let mut e = [CqEntry::default()];
    assert_eq!(b.cq.read(&mut e).unwrap_err().kind(), ErrorKind::Again);
}

/// Receive buffer `i` of the window at `base` (read after its completion).
fn rbufs_at(base: *mut [u8; 16], i: usize) -> [u8; 16] {
    // SAFETY: `i` is a context the test posted (below the window), and the
    // receive into it has completed.
    unsafe { *base.add(i) }
}
