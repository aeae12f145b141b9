//! RMA and atomic protection, and errors that spare the endpoint.

#[allow(clippy::wildcard_imports)]
use super::*;

/// RMA protection (fi_rma(3), fi_mr(3)): writes and reads within a region
/// with the right access work; a wrong key ([`Rig::bad_key`]), a range
/// past the region's end (`Access`), a write to a read-only region and a
/// read of a write-only one (`Access`) fail as error completions, and
/// nothing is written; the key of a closed region is a wrong key; a
/// region closed while a write into it is in flight ends that write with
/// success or the wrong-key error, never a hang.
///
/// Each refusal runs on fresh endpoints, so that each is checked on its
/// own; [`errors_spare_the_endpoint`] checks that an endpoint goes on
/// after one.
pub fn rma_protection(rig: &Rig) {
    let Some(info) = rig.offers(Caps::RMA | DIRECTIONS, "RMA protection") else {
        return;
    };
    for only in 0..RMA_CASES + 2 {
        rma_protection_case(rig, &info, only);
    }
}

/// A burst of RMA writes beyond the transport's queues, the first
/// operations towards the peer (verbs makes the connection meanwhile):
/// 2,000 writes of 64 bytes go in back to back, retried while the
/// provider says `Again`. Each completes exactly once, without error, and
/// the target holds every one.
pub fn rma_burst(rig: &Rig) {
    const N: usize = 2000;
    const LEN: usize = 64;
    let Some(info) = rig.offers(Caps::RMA | DIRECTIONS, "RMA burst") else {
        return;
    };
    let w = rig.world(&info, 2, Opts::default());
    let (mr, buf) = w.region(N * LEN, 0, MrAccess::REMOTE_WRITE);
    let d = pattern(N * LEN, seed());
    for (k, piece) in d.chunks(LEN).enumerate() {
        let at = RmaIov {
            addr: w.raddr(buf, k * LEN),
            len: LEN,
            key: mr.key(),
        };
        w.rma(true, leak(piece.to_vec()), at, k as u64)
            .expect("write");
    }
    w.each_once(0, N, "write");
    same("written", buf, &d);
    w.nothing(0);
    w.nothing(1);
}

/// RMA writes fanned out to 7 peers at once, more than one endpoint's
/// queues hold together: 1,000 writes of 64 bytes to each, in turns, go
/// in back to back, retried while the provider says `Again`. Each
/// completes exactly once, without error, and every target holds its
/// writes.
pub fn rma_fan_out(rig: &Rig) {
    const PEERS: usize = 7;
    const N: usize = 1000;
    const LEN: usize = 64;
    let Some(info) = rig.offers(Caps::RMA | DIRECTIONS, "RMA fan-out") else {
        return;
    };
    let w = rig.world(&info, PEERS + 1, Opts::default());
    let targets: Vec<_> = (1..=PEERS)
        .map(|_| {
            let (mr, buf) = w.region(N * LEN, 0, MrAccess::REMOTE_WRITE);
            (mr, buf, pattern(N * LEN, seed()))
        })
        .collect();
    for k in 0..N {
        for (t, (mr, buf, d)) in targets.iter().enumerate() {
            let v = iov_of(leak(d[k * LEN..(k + 1) * LEN].to_vec()));
            let r = [RmaIov {
                addr: w.raddr(buf, k * LEN),
                len: LEN,
                key: mr.key(),
            }];
            let msg = RmaMsg {
                iov: &v,
                desc: &[],
                addr: w.addr[t + 1],
                rma_iov: &r,
                context: (k * PEERS + t) as u64,
                data: 0,
            };
            // SAFETY: the local buffer is leaked.
            w.retry(|| unsafe { w.ep(0).writemsg(&msg, OpFlags::empty()) })
                .unwrap_or_else(|e| panic!("write {k} to endpoint {}: {e}", t + 1));
        }
    }
    w.each_once(0, N * PEERS, "write");
    for (t, (_, buf, d)) in targets.iter().enumerate() {
        same(&format!("written at endpoint {}", t + 1), buf, d);
    }
    for i in 0..=PEERS {
        w.nothing(i);
    }
}

/// The refusals of [`rma_protection`], and a stale key and a region
/// closed in use after them.
const RMA_CASES: usize = 7;

fn rma_protection_case(rig: &Rig, info: &Info, only: usize) {
    let w = rig.world(info, 2, Opts::default());
    let n = 4096;
    let (rw, rwb) = w.region(n, 0, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let (ro, rob) = w.region(n, 1, MrAccess::REMOTE_READ);
    let (wo, wob) = w.region(n, 2, MrAccess::REMOTE_WRITE);
    let at = |b: &[u8], off: usize, len: usize, key: u64| RmaIov {
        addr: w.raddr(b, off),
        len,
        key,
    };
    // Within bounds, with the right access.
    let d = pattern(n, seed());
    w.rma(true, leak(d.clone()), at(rwb, 0, n, rw.key()), 1)
        .expect("write");
    let (e, _) = w.ok(0);
    assert_eq!(e.context, 1);
    assert!(
        has(&e, CompletionFlags::RMA | CompletionFlags::WRITE),
        "{:?}",
        e.flags
    );
    same("written", rwb, &d);
    let back = leak(vec![0; 100]);
    let bp = back.as_ptr();
    w.rma(false, back, at(rwb, 1000, 100, rw.key()), 2)
        .expect("read");
    let (e, _) = w.ok(0);
    assert_eq!(e.context, 2);
    assert!(
        has(&e, CompletionFlags::RMA | CompletionFlags::READ),
        "{:?}",
        e.flags
    );
    // SAFETY: the leaked read buffer, written before the completion above.
    let got = unsafe { std::slice::from_raw_parts(bp, 100) };
    same("read", got, &d[1000..1100]);
    let wrong = wrong_key(&[rw.key(), ro.key(), wo.key()]);
    let cases: [(&str, bool, RmaIov, &[u8], ErrorKind); RMA_CASES] = [
        (
            "write, wrong key",
            true,
            at(rwb, 0, 64, wrong),
            rwb,
            rig.bad_key,
        ),
        (
            "read, wrong key",
            false,
            at(rwb, 0, 64, wrong),
            rwb,
            rig.bad_key,
        ),
        (
            "write past the end",
            true,
            at(rwb, n - 32, 64, rw.key()),
            rwb,
            ErrorKind::Access,
        ),
        (
            "read past the end",
            false,
            at(rwb, n - 32, 64, rw.key()),
            rwb,
            ErrorKind::Access,
        ),
        (
            "write starting past the end",
            true,
            at(rwb, n + 64, 8, rw.key()),
            rwb,
            ErrorKind::Access,
        ),
        (
            "write to a read-only region",
            true,
            at(rob, 0, 64, ro.key()),
            rob,
            ErrorKind::Access,
        ),
        (
            "read of a write-only region",
            false,
            at(wob, 0, 64, wo.key()),
            wob,
            ErrorKind::Access,
        ),
    ];
    for (k, (what, write, remote, target, want)) in cases.into_iter().enumerate() {
        if k != only {
            continue;
        }
        let before = target.to_vec();
        let local = leak(pattern(remote.len, seed()));
        let lp = local.as_ptr();
        let lcopy = local.to_vec();
        let ctx = 10 + k as u64;
        match w.rma(write, local, remote, ctx) {
            Ok(()) => {
                let e = w.err(0);
                assert_eq!((e.entry.context, e.err), (ctx, want), "{what}");
            }
            Err(e) => assert_eq!(e.kind(), want, "{what}, refused at once"),
        }
        same(&format!("target after {what}"), target, &before);
        if !write {
            // SAFETY: the leaked local buffer; the operation has ended.
            let got = unsafe { std::slice::from_raw_parts(lp, remote.len) };
            same(&format!("local after {what}"), got, &lcopy);
        }
    }
    // The key of a closed region is a wrong key.
    if only == RMA_CASES {
        let (stale, sb) = w.region(n, 3, MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ);
        let key = stale.key();
        drop(stale);
        w.rma(true, leak(pattern(64, seed())), at(sb, 0, 64, key), 30)
            .expect("post");
        let e = w.err(0);
        assert_eq!(
            (e.entry.context, e.err),
            (30, rig.bad_key),
            "write with a closed region's key"
        );
        assert!(sb.iter().all(|&b| b == 3), "a closed region was written");
    }
    // Closed while a write into it is in flight.
    if only == RMA_CASES + 1 {
        let big = 4 << 20;
        let (busy, bb) = w.region(big, 4, MrAccess::REMOTE_WRITE);
        w.rma(
            true,
            leak(pattern(big, seed())),
            at(bb, 0, big, busy.key()),
            31,
        )
        .expect("post");
        drop(busy);
        match w.next(0) {
            Ok((e, _)) => assert_eq!(e.context, 31),
            Err(e) => assert_eq!(
                (e.entry.context, e.err),
                (31, rig.bad_key),
                "write into a region closed meanwhile"
            ),
        }
    }
    w.nothing(1);
    drop((rw, ro, wo));
}

/// After a refused RMA (a wrong key), the endpoint goes on: the next
/// write to the same peer and a message both ways complete. An RDM
/// endpoint is connectionless to the application: one failed operation
/// does not fail the ones after it.
pub fn errors_spare_the_endpoint(rig: &Rig) {
    let Some(info) = rig.offers(Caps::RMA | DIRECTIONS, "errors spare the endpoint") else {
        return;
    };
    let w = rig.world(&info, 2, Opts::default());
    let (mr, b) = w.region(256, 0, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let at = RmaIov {
        addr: w.raddr(b, 0),
        len: 64,
        key: mr.key(),
    };
    w.rma(
        true,
        leak(pattern(64, seed())),
        RmaIov {
            key: wrong_key(&[mr.key()]),
            ..at
        },
        1,
    )
    .expect("post");
    assert_eq!(w.err(0).err, rig.bad_key);
    let d = pattern(64, seed());
    w.rma(true, leak(d.clone()), at, 2)
        .expect("write after a refusal");
    let r = w.next(0);
    assert!(
        matches!(r, Ok((e, _)) if e.context == 2),
        "the write after a refused one: {r:?}"
    );
    same("written after a refusal", &b[..64], &d);
    for (from, to) in [(0, 1), (1, 0)] {
        let m = pattern(32, seed());
        let r = w
            .recv(to, 64, FiAddr::UNSPEC, None, 3, OpFlags::empty())
            .expect("recv");
        w.send(from, to, &m, 4);
        assert_eq!(
            w.ok(to).0.context,
            3,
            "message {from} -> {to} after a refusal"
        );
        same("message after a refusal", &r[..32], &m);
        assert_eq!(w.ok(from).0.context, 4);
    }
    drop(mr);
}

/// Atomic protection (fi_atomic(3)): a fetching sum works; a wrong key
/// ([`Rig::bad_key`]), an element past the region's end (`Access`) and a
/// sum into a read-only region (`Access`) fail as error completions and
/// change nothing.
///
/// Each refusal runs on fresh endpoints, as in [`rma_protection`].
pub fn atomic_protection(rig: &Rig) {
    let Some(info) = rig.offers(Caps::ATOMIC | DIRECTIONS, "atomic protection") else {
        return;
    };
    for only in 0..3 {
        atomic_protection_case(rig, &info, only);
    }
}

fn atomic_protection_case(rig: &Rig, info: &Info, only: u64) {
    let w = rig.world(info, 2, Opts::default());
    let (rw, rwb) = w.region(64, 0, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let (ro, rob) = w.region(64, 0, MrAccess::REMOTE_READ);
    let word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let atomic = |target: &[u8],
                  off: usize,
                  key: u64,
                  ctx: u64,
                  fetch: bool|
     -> (crate::Result<()>, *const u8) {
        let opnd = aligned(8, 0);
        opnd.copy_from_slice(&5u64.to_le_bytes());
        let res = aligned(8, 0xEE);
        let rp = res.as_ptr();
        let ov = iov_of(opnd);
        let rv = iov_of(res);
        let r = [RmaIov {
            addr: w.raddr(target, off),
            len: 1,
            key,
        }];
        let msg = AtomicMsg {
            iov: &ov,
            desc: &[],
            addr: w.addr[1],
            rma_iov: &r,
            datatype: Datatype::Uint64,
            op: AtomicOp::Sum,
            result: if fetch { &rv } else { &[] },
            compare: &[],
            context: ctx,
            data: 0,
        };
        // SAFETY: the buffers are leaked.
        (
            w.retry(|| unsafe { w.ep(0).atomicmsg(&msg, OpFlags::empty()) }),
            rp,
        )
    };
    let (r, rp) = atomic(rwb, 8, rw.key(), 1, true);
    r.expect("fetching sum");
    let (e, _) = w.ok(0);
    assert_eq!(e.context, 1);
    assert!(has(&e, CompletionFlags::ATOMIC), "{:?}", e.flags);
    // SAFETY: the leaked result buffer, written before the completion.
    let fetched = unsafe { std::slice::from_raw_parts(rp, 8) };
    assert_eq!(word(fetched), 0, "fetched");
    assert_eq!(word(&rwb[8..]), 5, "summed");
    let (r, _) = atomic(rwb, 8, rw.key(), 2, false);
    r.expect("sum");
    w.ok(0);
    assert_eq!(word(&rwb[8..]), 10);
    let wrong = wrong_key(&[rw.key(), ro.key()]);
    for (what, target, off, key, want, ctx) in [
        ("wrong key", rwb, 0, wrong, rig.bad_key, 10),
        ("past the end", rwb, 64, rw.key(), ErrorKind::Access, 11),
        ("read-only region", rob, 0, ro.key(), ErrorKind::Access, 12),
    ] {
        if ctx != 10 + only {
            continue;
        }
        let before = target.to_vec();
        let (r, _) = atomic(target, off, key, ctx, true);
        match r {
            Ok(()) => {
                let e = w.err(0);
                assert_eq!((e.entry.context, e.err), (ctx, want), "{what}");
            }
            Err(e) => assert_eq!(e.kind(), want, "{what}, refused at once"),
        }
        same(&format!("target after {what}"), target, &before);
    }
    drop((rw, ro));
}
