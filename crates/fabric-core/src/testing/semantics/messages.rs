//! Messages, tagged messages and receives: what arrives where.

#[allow(clippy::wildcard_imports)]
use super::*;

use std::sync::atomic::{AtomicUsize, Ordering};

/// Messages: sizes from one byte to a rendezvous MiB arrive whole, in
/// order, with their length, flags and source; the receive buffer past
/// the message is untouched; unexpected messages (eager and rendezvous)
/// wait for their receives in order; inject.
pub fn messages(rig: &Rig) {
    let w = rig.world(&rig.base(), 2, Opts::default());
    for (k, &n) in [1usize, 100, 4096, 65_539, 1 << 20].iter().enumerate() {
        let k = k as u64;
        let want = pattern(n, seed());
        let r = w
            .recv(1, n + 16, FiAddr::UNSPEC, None, 100 + k, OpFlags::empty())
            .expect("recv");
        w.send(0, 1, &want, 200 + k);
        let (e, src) = w.ok(1);
        assert_eq!(
            (e.context, e.len, src),
            (100 + k, n, w.addr[0]),
            "receive of {n}"
        );
        assert!(
            has(&e, CompletionFlags::RECV | CompletionFlags::MSG),
            "{:?}",
            e.flags
        );
        same(&format!("message of {n}"), &r[..n], &want);
        assert!(
            r[n..].iter().all(|&b| b == 0xEE),
            "bytes past the message of {n} written"
        );
        let (s, _) = w.ok(0);
        assert_eq!(s.context, 200 + k);
        assert!(
            has(&s, CompletionFlags::SEND | CompletionFlags::MSG),
            "{:?}",
            s.flags
        );
    }
    // Unexpected: sent before any receive is posted; they match in order.
    let sizes = [10usize, 3000, 1 << 20];
    let wants: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, seed())).collect();
    for (k, d) in wants.iter().enumerate() {
        w.send(0, 1, d, 300 + k as u64);
    }
    for _ in 0..50 {
        w.spin();
    }
    let mut bufs = Vec::new();
    for k in 0..sizes.len() {
        bufs.push(
            w.recv(
                1,
                1 << 20,
                FiAddr::UNSPEC,
                None,
                400 + k as u64,
                OpFlags::empty(),
            )
            .expect("recv"),
        );
    }
    for (k, d) in wants.iter().enumerate() {
        let (e, src) = w.ok(1);
        assert_eq!(
            (e.context, e.len, src),
            (400 + k as u64, d.len(), w.addr[0])
        );
        same(&format!("unexpected message {k}"), &bufs[k][..d.len()], d);
    }
    let mut sent: Vec<u64> = (0..sizes.len()).map(|_| w.ok(0).0.context).collect();
    sent.sort_unstable();
    assert_eq!(sent, [300, 301, 302]);
    // inject: no completion at the sender.
    let d = pattern(32, seed());
    let r = w
        .recv(1, 32, FiAddr::UNSPEC, None, 500, OpFlags::empty())
        .expect("recv");
    w.retry(|| w.ep(0).inject(&d, w.addr[1], None))
        .expect("inject");
    assert_eq!(w.ok(1).0.context, 500);
    same("injected", r, &d);
    w.nothing(0);
}

/// A burst of unexpected messages beyond the transport's queues: one
/// sender posts 1,000 tagged messages of 20 KiB (rendezvous on some
/// providers, more than the unexpected budget on the others) before any
/// receive. Once the last has arrived (FI_PEEK finds it), or the sender
/// has been held back for 200 ms (a budget paused it), 1,000 receives go
/// in back to back. Each message lands whole in the receive that names
/// its tag, and every receive and send completes exactly once. Every
/// endpoint is progressed throughout, as a manual-progress application
/// does.
pub fn unexpected_burst(rig: &Rig) {
    // At most `tx_attr.size` (1024 on tcp and verbs) outstanding sends.
    const N: usize = 1000;
    const LEN: usize = 20 * 1024;
    let Some(info) = rig.offers(Caps::TAGGED, "unexpected burst") else {
        return;
    };
    let w = rig.world(&info, 2, Opts::default());
    let sd = seed();
    let want = |k: usize| pattern(LEN, sd.wrapping_add(k as u64));
    let sent = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let (w, sent) = (&w, &sent);
        scope.spawn(move || {
            for k in 0..N {
                w.tsend(0, 1, k as u64, &want(k), k as u64);
                sent.store(k + 1, Ordering::Release);
            }
        });
        let start = Instant::now();
        let (mut count, mut since) = (0, start);
        for peek in 0u64.. {
            let last = Some(((N - 1) as u64, 0));
            w.recv(1, 0, FiAddr::UNSPEC, last, u64::MAX - peek, OpFlags::PEEK)
                .expect("peek");
            match w.next(1) {
                Ok((e, _)) => {
                    assert_eq!((e.tag, e.len), ((N - 1) as u64, LEN), "peek");
                    break;
                }
                Err(e) => assert_eq!(e.err, ErrorKind::NoMsg, "peek: {e:?}"),
            }
            let now = sent.load(Ordering::Acquire);
            if now != count {
                (count, since) = (now, Instant::now());
            } else if since.elapsed() > Duration::from_millis(200) {
                break;
            }
            assert!(start.elapsed() < T, "only {count} of {N} sends in {T:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
        let bufs: Vec<&[u8]> = (0..N)
            .map(|k| {
                let tag = Some((k as u64, 0));
                w.recv(1, LEN, FiAddr::UNSPEC, tag, k as u64, OpFlags::empty())
                    .expect("trecv")
            })
            .collect();
        for (e, src) in w.each_once(1, N, "receive") {
            let k = e.context as usize;
            assert_eq!(
                (e.tag, e.len, src),
                (k as u64, LEN, w.addr[0]),
                "receive {k}"
            );
            same(&format!("message {k}"), bufs[k], &want(k));
        }
    });
    w.each_once(0, N, "send");
    w.nothing(0);
    w.nothing(1);
}

/// Tagged messages: tag and ignore-mask matching, the tag in the
/// completion, matching in send order for one tag, untagged receives
/// never taking tagged messages, tinject.
pub fn tagged(rig: &Rig) {
    let Some(info) = rig.offers(Caps::TAGGED, "tagged") else {
        return;
    };
    let w = rig.world(&info, 2, Opts::default());
    // Posted: tag 0x10 ignoring the low nibble takes 0x1f, not 0x20.
    let r = w
        .recv(
            1,
            64,
            FiAddr::UNSPEC,
            Some((0x10, 0x0f)),
            1,
            OpFlags::empty(),
        )
        .expect("trecv");
    let miss = pattern(40, seed());
    let hit = pattern(50, seed());
    w.tsend(0, 1, 0x20, &miss, 11);
    w.tsend(0, 1, 0x1f, &hit, 12);
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.tag, e.len, src), (1, 0x1f, 50, w.addr[0]));
    assert!(
        has(&e, CompletionFlags::RECV | CompletionFlags::TAGGED),
        "{:?}",
        e.flags
    );
    same("tag 0x1f", &r[..50], &hit);
    // The unmatched one waits for its tag.
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, Some((0x20, 0)), 2, OpFlags::empty())
        .expect("trecv");
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.tag, e.len), (2, 0x20, 40));
    same("tag 0x20", &r[..40], &miss);
    for _ in 0..2 {
        let (s, _) = w.ok(0);
        assert!(
            has(&s, CompletionFlags::SEND | CompletionFlags::TAGGED),
            "{:?}",
            s.flags
        );
    }
    // One tag: send order.
    let one_ = pattern(20, seed());
    let two = pattern(30, seed());
    w.tsend(0, 1, 5, &one_, 13);
    w.tsend(0, 1, 5, &two, 14);
    let r1 = w
        .recv(1, 64, FiAddr::UNSPEC, Some((5, 0)), 3, OpFlags::empty())
        .expect("trecv");
    let r2 = w
        .recv(1, 64, FiAddr::UNSPEC, Some((5, 0)), 4, OpFlags::empty())
        .expect("trecv");
    assert_eq!(w.ok(1).0.context, 3);
    assert_eq!(w.ok(1).0.context, 4);
    same("first of tag 5", &r1[..20], &one_);
    same("second of tag 5", &r2[..30], &two);
    w.ok(0);
    w.ok(0);
    // An untagged receive does not take a tagged message.
    let u = w
        .recv(1, 64, FiAddr::UNSPEC, None, 5, OpFlags::empty())
        .expect("recv");
    let d = pattern(24, seed());
    w.retry(|| w.ep(0).tinject(&d, w.addr[1], 7, None))
        .expect("tinject");
    w.nothing(1);
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, Some((7, 0)), 6, OpFlags::empty())
        .expect("trecv");
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.tag, e.len), (6, 7, 24));
    same("tinject", &r[..24], &d);
    assert!(
        u.iter().all(|&b| b == 0xEE),
        "the untagged receive was written"
    );
    w.ep(1).cancel(5).expect("cancel the untagged receive");
    assert_eq!(w.err(1).err, ErrorKind::Canceled);
}

/// FI_PEEK / FI_CLAIM / FI_DISCARD (fi_tagged(3)): a peek reports a
/// message (tag, length, source) without taking it; PEEK|CLAIM reserves
/// it for a later CLAIM, which receives it; CLAIM|DISCARD, PEEK|DISCARD
/// and PEEK|CLAIM|DISCARD drop it; a CLAIM with nothing claimed is
/// refused with `NoMsg`; a peek that finds nothing completes with `NoMsg`.
/// A receive counter counts those completions, errors apart.
pub fn peek_claim_discard(rig: &Rig) {
    let Some(info) = rig.offers(Caps::TAGGED, "peek / claim / discard") else {
        return;
    };
    let w = rig.world(
        &info,
        2,
        Opts {
            counters: &[&[Caps::SEND], &[Caps::RECV]],
            ..Opts::default()
        },
    );
    let msgs: Vec<Vec<u8>> = (0..4).map(|_| pattern(24, seed())).collect();
    for (i, d) in msgs.iter().enumerate() {
        w.tsend(0, 1, i as u64 + 1, d, 10 + i as u64);
        w.ok(0);
    }
    assert_eq!(w.cntrs[0][0].read(), 4, "send counter");
    for _ in 0..50 {
        w.spin();
    }
    let recvd = &w.cntrs[1][0];
    let post = |tag: u64, ctx: u64, flags: OpFlags| {
        w.recv(1, 64, FiAddr::UNSPEC, Some((tag, 0)), ctx, flags)
    };
    // Nothing claimed yet.
    assert_eq!(post(1, 20, OpFlags::CLAIM).refused(), ErrorKind::NoMsg);
    // PEEK: found, with tag, length and source; not taken.
    let b = post(1, 21, OpFlags::PEEK).expect("peek");
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, e.tag, e.len, src),
        (21, 1, 24, w.addr[0]),
        "PEEK"
    );
    // A peek may return data: then `buf` names the buffer (fi_tagged(3)).
    if e.buf == 0 {
        assert!(
            b.iter().all(|&x| x == 0xEE),
            "a peek without data wrote its buffer"
        );
    } else {
        assert_eq!(e.buf, b.as_ptr() as u64, "a peek's data is in its buffer");
        same("peeked data", &b[..24], &msgs[0]);
    }
    // A peek with an ignore mask reports the tag found.
    let v = iov_of(leak(vec![0; 8]));
    w.retry(|| {
        // SAFETY: leaked buffer.
        unsafe {
            w.ep(1)
                .trecvmsg(&m(&v, FiAddr::UNSPEC, 0, 0x3, 22), OpFlags::PEEK)
        }
    })
    .expect("peek with mask");
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.tag), (22, 1), "the oldest match");
    // PEEK|CLAIM, then CLAIM receives it.
    post(1, 23, OpFlags::PEEK | OpFlags::CLAIM).expect("peek claim");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.tag, src), (23, 1, w.addr[0]), "PEEK|CLAIM");
    // A claimed message is only for its CLAIM: a peek misses it.
    post(1, 24, OpFlags::PEEK).expect("peek");
    let err = w.err(1);
    assert_eq!(
        (err.entry.context, err.err),
        (24, ErrorKind::NoMsg),
        "the claimed message is hidden"
    );
    let b = post(1, 23, OpFlags::CLAIM).expect("claim");
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, e.len, e.tag, src),
        (23, 24, 1, w.addr[0]),
        "CLAIM"
    );
    same("claimed", &b[..24], &msgs[0]);
    // PEEK|CLAIM then CLAIM|DISCARD: completes, no data.
    post(2, 25, OpFlags::PEEK | OpFlags::CLAIM).expect("peek claim");
    w.ok(1);
    let b = post(2, 25, OpFlags::CLAIM | OpFlags::DISCARD).expect("claim discard");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (25, 0, w.addr[0]), "CLAIM|DISCARD");
    assert!(b.iter().all(|&x| x == 0xEE), "a discard wrote its buffer");
    // PEEK|DISCARD and PEEK|CLAIM|DISCARD take and drop.
    post(3, 26, OpFlags::PEEK | OpFlags::DISCARD).expect("peek discard");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.tag, src), (26, 3, w.addr[0]), "PEEK|DISCARD");
    post(4, 27, OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD).expect("peek claim discard");
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.tag), (27, 4), "PEEK|CLAIM|DISCARD");
    let before = (recvd.read(), recvd.readerr());
    for (tag, ctx) in [(1, 30), (2, 31), (3, 32), (4, 33)] {
        post(tag, ctx, OpFlags::PEEK).expect("peek");
        let err = w.err(1);
        assert_eq!(
            (err.entry.context, err.err),
            (ctx, ErrorKind::NoMsg),
            "tag {tag} is gone"
        );
    }
    assert_eq!(
        recvd.readerr(),
        before.1 + 4,
        "failed peeks count as errors"
    );
    assert_eq!(recvd.read(), before.0, "failed peeks are no successes");
    assert!(before.0 >= 1, "the claim's receive counted");
}

/// Directed receive (FI_DIRECTED_RECV): a receive naming a source takes
/// only that source's messages, tagged or not.
pub fn directed_recv(rig: &Rig) {
    let Some(info) = rig.offers(Caps::DIRECTED_RECV | Caps::TAGGED, "directed receive") else {
        return;
    };
    let w = rig.world(&info, 3, Opts::default());
    let from2 = pattern(30, seed());
    let from0 = pattern(40, seed());
    let r = w
        .recv(1, 64, w.addr[0], None, 1, OpFlags::empty())
        .expect("recv");
    w.send(2, 1, &from2, 2);
    w.ok(2);
    w.nothing(1);
    w.send(0, 1, &from0, 3);
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (1, 40, w.addr[0]));
    same("from 0", &r[..40], &from0);
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 4, OpFlags::empty())
        .expect("recv");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (4, 30, w.addr[2]));
    same("from 2", &r[..30], &from2);
    w.ok(0);
    // Tagged: the same tag from both; the receive names endpoint 2.
    let t0 = pattern(16, seed());
    let t2 = pattern(17, seed());
    let r = w
        .recv(1, 64, w.addr[2], Some((9, 0)), 5, OpFlags::empty())
        .expect("trecv");
    w.tsend(0, 1, 9, &t0, 6);
    w.tsend(2, 1, 9, &t2, 7);
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (5, 17, w.addr[2]));
    same("tagged from 2", &r[..17], &t2);
    let r = w
        .recv(1, 64, w.addr[0], Some((9, 0)), 8, OpFlags::empty())
        .expect("trecv");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (8, 16, w.addr[0]));
    same("tagged from 0", &r[..16], &t0);
}

/// FI_MULTI_RECV: messages (unexpected ones first, then eager and
/// rendezvous ones) are placed one after another with patterns that show
/// misplaced bytes; each completion points at its message; the one that
/// leaves less than the minimum releases the buffer (its completion alone
/// carries FI_MULTI_RECV); later messages go to other receives; a tagged
/// multi-receive is refused (`BadFlags`); a cancelled multi-receive
/// buffer is released with FI_MULTI_RECV.
pub fn multi_recv(rig: &Rig) {
    let Some(info) = rig.offers(Caps::MULTI_RECV, "multi-recv") else {
        return;
    };
    let w = rig.world(&info, 2, Opts::default());
    w.ep(1)
        .set_min_multi_recv(2000)
        .expect("set_min_multi_recv");
    assert_eq!(w.ep(1).min_multi_recv().expect("min_multi_recv"), 2000);
    let sizes = [200usize, 301, 20_000, 150, 250, 10_000];
    let wants: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, seed())).collect();
    for (k, d) in wants.iter().enumerate().take(2) {
        w.send(0, 1, d, k as u64);
    }
    for _ in 0..50 {
        w.spin();
    }
    let buf = w
        .recv(1, 32_768, FiAddr::UNSPEC, None, 77, OpFlags::MULTI_RECV)
        .expect("multi recv");
    let base = buf.as_ptr() as u64;
    // Wait for each message before sending the next: placement in order.
    let mut off = 0usize;
    for (k, d) in wants.iter().enumerate() {
        if k >= 2 {
            w.send(0, 1, d, k as u64);
        }
        let (e, src) = w.ok(1);
        assert_eq!(
            (e.context, e.len, src),
            (77, d.len(), w.addr[0]),
            "message {k}"
        );
        assert_eq!(
            e.buf,
            base + off as u64,
            "message {k} placed after the previous"
        );
        assert!(
            has(&e, CompletionFlags::RECV | CompletionFlags::MSG),
            "{:?}",
            e.flags
        );
        // 20901 bytes leave 11867; 30901 leave 1867 < 2000: released.
        assert_eq!(
            has(&e, CompletionFlags::MULTI_RECV),
            k == sizes.len() - 1,
            "message {k}: FI_MULTI_RECV"
        );
        same(
            &format!("multi-recv message {k}"),
            &buf[off..off + d.len()],
            d,
        );
        off += d.len();
    }
    assert!(
        buf[off..].iter().all(|&b| b == 0xEE),
        "bytes past the last message written"
    );
    for _ in 0..sizes.len() {
        w.ok(0);
    }
    // A message now goes to a new receive.
    let d = pattern(50, seed());
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 78, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, &d, 9);
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.len), (78, 50));
    same("after release", &r[..50], &d);
    assert!(
        buf[off..].iter().all(|&b| b == 0xEE),
        "the released buffer was written"
    );
    w.ok(0);
    // Tagged multi-receive: refused.
    if let Some(ti) = rig.offers(Caps::TAGGED | Caps::MULTI_RECV, "tagged multi-recv refusal") {
        let t = rig.world(&ti, 1, Opts::default());
        let r = t.recv(0, 64, FiAddr::UNSPEC, Some((1, 0)), 1, OpFlags::MULTI_RECV);
        assert_eq!(r.refused(), ErrorKind::BadFlags, "tagged FI_MULTI_RECV");
    }
    // Cancelled: released with FI_MULTI_RECV.
    w.recv(1, 4096, FiAddr::UNSPEC, None, 79, OpFlags::MULTI_RECV)
        .expect("multi recv");
    w.ep(1).cancel(79).expect("cancel");
    let e = w.err(1);
    assert_eq!((e.entry.context, e.err), (79, ErrorKind::Canceled));
    assert!(
        has(&e.entry, CompletionFlags::MULTI_RECV),
        "{:?}",
        e.entry.flags
    );
}

/// fi_cancel: a cancelled receive completes with `Canceled` (its context,
/// RECV flags) and is never written; cancelling it again, or a context
/// never posted, is `NoEnt`; a disabled endpoint refuses with
/// `OpBadState`.
pub fn cancel(rig: &Rig) {
    let info = rig.base();
    let w = rig.world(&info, 2, Opts::default());
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 5, OpFlags::empty())
        .expect("recv");
    w.ep(1).cancel(5).expect("cancel");
    let e = w.err(1);
    assert_eq!((e.entry.context, e.err), (5, ErrorKind::Canceled));
    assert!(has(&e.entry, CompletionFlags::RECV), "{:?}", e.entry.flags);
    assert_eq!(
        w.ep(1).cancel(5).refused(),
        ErrorKind::NoEnt,
        "cancelled twice"
    );
    assert_eq!(
        w.ep(1).cancel(12345).refused(),
        ErrorKind::NoEnt,
        "never posted"
    );
    // The next message goes to the next receive, not the cancelled one.
    let d = pattern(40, seed());
    w.send(0, 1, &d, 1);
    let r2 = w
        .recv(1, 64, FiAddr::UNSPEC, None, 6, OpFlags::empty())
        .expect("recv");
    let (c, _) = w.ok(1);
    assert_eq!((c.context, c.len), (6, 40));
    same("after cancel", &r2[..40], &d);
    assert!(
        r.iter().all(|&b| b == 0xEE),
        "the cancelled receive was written"
    );
    w.ok(0);
    w.nothing(1);
    let fresh = w.domain.endpoint(&info).expect("endpoint");
    assert_eq!(
        fresh.cancel(1).refused(),
        ErrorKind::OpBadState,
        "not enabled"
    );
}
