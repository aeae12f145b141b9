//! The safe layer over real providers (tcp on loopback, shm): buffers come
//! back with their completions, RMA and atomics through typed remote
//! regions, refusals hand buffers back, cancel and drop.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use fabric::prelude::*;
use fabric::safe::RemoteKey;

/// The first RDM entry of `prov` with `caps`, or `None` when the provider
/// is not compiled in or offers nothing here.
fn entry(prov: &str, caps: Caps) -> Option<Info> {
    let mut h = Hints::new().caps(caps).ep_type(EpType::Rdm).provider(prov);
    if prov == "tcp" {
        h = h.node("127.0.0.1").source();
    }
    h.getinfo().ok()?.into_iter().next()
}

fn providers(caps: Caps) -> Vec<Info> {
    let v: Vec<Info> = ["tcp", "shm"]
        .iter()
        .filter_map(|p| entry(p, caps))
        .collect();
    assert!(!v.is_empty(), "neither tcp nor shm offers {caps}");
    v
}

/// Two endpoints of one domain; `a`'s handle for `b` and `b`'s for `a`.
fn pair(info: &Info) -> (safe::Endpoint, safe::Endpoint, FiAddr, FiAddr) {
    let d = safe::Domain::open(info).unwrap();
    let a: safe::Endpoint = d.endpoint().unwrap();
    let b: safe::Endpoint = d.endpoint().unwrap();
    let b_at_a = a.insert(&b.name().unwrap()).unwrap();
    let a_at_b = b.insert(&a.name().unwrap()).unwrap();
    (a, b, b_at_a, a_at_b)
}

/// Waits for `id` on `ep` while driving `other`.
fn drive(ep: &mut safe::Endpoint, other: &mut safe::Endpoint, id: OpId) -> Completion<Vec<u8>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        other.progress().unwrap();
        if let Some(c) = ep.try_take(id).unwrap() {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no completion of {id}"
        );
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn messages_hand_their_buffers_back() {
    for info in providers(Caps::MSG | Caps::TAGGED) {
        let (mut a, mut b, b_at_a, _) = pair(&info);
        for size in [1usize, 100, 5000, 200_000] {
            let r = b.recv(vec![0; size + 10]).unwrap();
            let s = a.send(b_at_a, pattern(size, 3)).unwrap();
            let got = drive(&mut b, &mut a, r).check().unwrap();
            assert_eq!(got.kind(), OpKind::Recv);
            assert_eq!(got.transferred(), size);
            assert_eq!(got.received().unwrap(), &pattern(size, 3)[..]);
            assert_eq!(got.into_buf().unwrap().len(), size + 10);
            let sent = drive(&mut a, &mut b, s).check().unwrap();
            assert_eq!(sent.into_buf().unwrap(), pattern(size, 3));
        }
        assert_eq!((a.in_flight(), b.in_flight()), (0, 0));
    }
}

#[test]
fn tagged_receives_match_by_tag_in_any_order() {
    for info in providers(Caps::TAGGED) {
        let (mut a, mut b, b_at_a, _) = pair(&info);
        let r1 = b.trecv(1, 0, vec![0; 8]).unwrap();
        let r2 = b.trecv(2, 0, vec![0; 8]).unwrap();
        let any = b.trecv(0x100, 0xff, vec![0; 8]).unwrap();
        let s2 = a.tsend(b_at_a, 2, b"two".to_vec()).unwrap();
        let s1 = a.tsend(b_at_a, 1, b"one".to_vec()).unwrap();
        let s3 = a.tsend(b_at_a, 0x1ab, b"any".to_vec()).unwrap();
        let c1 = drive(&mut b, &mut a, r1).check().unwrap();
        let c2 = drive(&mut b, &mut a, r2).check().unwrap();
        let c3 = drive(&mut b, &mut a, any).check().unwrap();
        assert_eq!((c1.tag(), c1.received().unwrap()), (1, &b"one"[..]));
        assert_eq!((c2.tag(), c2.received().unwrap()), (2, &b"two"[..]));
        assert_eq!((c3.tag(), c3.received().unwrap()), (0x1ab, &b"any"[..]));
        for s in [s1, s2, s3] {
            drive(&mut a, &mut b, s).check().unwrap();
        }
    }
}

#[test]
fn rma_through_an_exposed_region() {
    for info in providers(Caps::MSG | Caps::RMA) {
        let d = safe::Domain::open(&info).unwrap();
        let mut a: safe::Endpoint = d.endpoint().unwrap();
        let mut b: safe::Endpoint = d.endpoint().unwrap();
        let b_at_a = a.insert(&b.name().unwrap()).unwrap();
        let target = d
            .expose(
                vec![0u8; 4096],
                MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            )
            .unwrap();
        assert!(
            target.contents().is_none(),
            "writable memory is not lent out"
        );
        // The region travels as bytes or through serde.
        let json = serde_json::to_string(&target.region()).unwrap();
        let region: RemoteRegion = serde_json::from_str(&json).unwrap();
        assert_eq!(
            RemoteRegion::from_bytes(&region.to_bytes()).unwrap(),
            region
        );

        let w = a
            .write(b_at_a, pattern(1000, 9), &region.slice(100..).unwrap())
            .unwrap();
        drive(&mut a, &mut b, w).check().unwrap();
        let r = a
            .read(b_at_a, vec![0xee; 1200], &region.slice(..1200).unwrap())
            .unwrap();
        let back = drive(&mut a, &mut b, r).check().unwrap();
        let back = back.into_buf().unwrap();
        assert!(back[..100].iter().all(|&x| x == 0));
        assert_eq!(&back[100..1100], &pattern(1000, 9)[..]);

        // Too long for the region: refused here, buffer back.
        let refused = a
            .write(b_at_a, vec![1; 50], &region.slice(..10).unwrap())
            .unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Inval);
        assert_eq!(refused.into_buf().map(|b| b.len()), Some(50));

        // A wrong key: the target refuses and changes nothing.
        let forged = RemoteRegion {
            key: RemoteKey(region.key.0 ^ 0x5a5a),
            ..region
        };
        let w = a.write(b_at_a, vec![0xff; 16], &forged).unwrap();
        let failed = drive(&mut a, &mut b, w);
        assert!(!failed.is_ok());
        assert_eq!(failed.into_buf().map(|b| b.len()), Some(16));

        let bytes = target.revoke();
        assert_eq!(&bytes[100..1100], &pattern(1000, 9)[..]);
        assert!(bytes[1100..].iter().all(|&x| x == 0));
    }
}

#[test]
fn atomics_fetch_and_compare() {
    for info in providers(Caps::MSG | Caps::ATOMIC) {
        let d = safe::Domain::open(&info).unwrap();
        let mut a: safe::Endpoint = d.endpoint().unwrap();
        let mut b: safe::Endpoint = d.endpoint().unwrap();
        let b_at_a = a.insert(&b.name().unwrap()).unwrap();
        let mut start = vec![0u8; 16];
        start[..8].copy_from_slice(&40u64.to_ne_bytes());
        let target = d
            .expose(start, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)
            .unwrap();
        let counter = target.region().slice(0..8).unwrap();
        let f = a.fetch_add(b_at_a, &counter, 2u64).unwrap();
        assert_eq!(
            drive(&mut a, &mut b, f).check().unwrap().fetched::<u64>(),
            Some(40)
        );
        let miss = a.compare_swap(b_at_a, &counter, 40u64, 7).unwrap();
        assert_eq!(
            drive(&mut a, &mut b, miss)
                .check()
                .unwrap()
                .fetched::<u64>(),
            Some(42)
        );
        let hit = a.compare_swap(b_at_a, &counter, 42u64, 7).unwrap();
        assert_eq!(
            drive(&mut a, &mut b, hit).check().unwrap().fetched::<u64>(),
            Some(42)
        );
        let read = a
            .fetch_atomic(b_at_a, &counter, AtomicOp::AtomicRead, 0u64)
            .unwrap();
        assert_eq!(
            drive(&mut a, &mut b, read)
                .check()
                .unwrap()
                .fetched::<u64>(),
            Some(7)
        );
        let small = target.region().slice(8..12).unwrap();
        assert_eq!(
            a.fetch_add(b_at_a, &small, 1u64).unwrap_err().kind(),
            ErrorKind::Inval
        );
        let bytes = target.revoke();
        assert_eq!(u64::from_ne_bytes(bytes[..8].try_into().unwrap()), 7);
    }
}

#[test]
fn cancelled_receives_and_drops_give_buffers_back() {
    for info in providers(Caps::MSG) {
        let (mut a, _b, _, _) = pair(&info);
        let r = a.recv(vec![0; 32]).unwrap();
        a.cancel(r).unwrap();
        let c = a.wait_for_timeout(r, Duration::from_secs(10)).unwrap();
        assert_eq!(c.error().map(Error::kind), Some(ErrorKind::Canceled));
        assert_eq!(c.into_buf().map(|b| b.len()), Some(32));
        assert_eq!(a.wait().unwrap_err().kind(), ErrorKind::NoMsg);
        assert_eq!(a.wait_for(r).unwrap_err().kind(), ErrorKind::Inval);
        // A drop with a receive posted cancels it and drains.
        let _ = a.recv(vec![0; 32]).unwrap();
        assert_eq!(a.in_flight(), 1);
        drop(a);
    }
}

#[test]
fn the_slab_reuses_its_slots() {
    let info = providers(Caps::MSG).remove(0);
    let (mut a, mut b, b_at_a, _) = pair(&info);
    let mut ids = std::collections::HashSet::new();
    for round in 0..50u8 {
        let r = b.recv(vec![0; 4]).unwrap();
        let s = a.send(b_at_a, vec![round; 4]).unwrap();
        assert_eq!(drive(&mut b, &mut a, r).received().unwrap(), &[round; 4]);
        drive(&mut a, &mut b, s).check().unwrap();
        assert!(
            ids.insert((0u8, r.context())) && ids.insert((1u8, s.context())),
            "tickets are unique"
        );
    }
    // One slot per side was ever needed: tickets differ by generation.
    let slots: std::collections::HashSet<(u8, u64)> = ids
        .iter()
        .map(|&(side, c)| (side, c & 0xffff_ffff))
        .collect();
    assert!(slots.len() == 2, "slots: {slots:?}");
}

#[test]
fn registered_buffers_travel_with_their_region() {
    for info in providers(Caps::MSG) {
        let d = safe::Domain::open(&info).unwrap();
        let mut a: safe::Endpoint<Registered<Vec<u8>>> = d.endpoint().unwrap();
        let mut b: safe::Endpoint<Registered<Vec<u8>>> = d.endpoint().unwrap();
        let b_at_a = a.insert(&b.name().unwrap()).unwrap();
        let mut out = d.register(vec![0u8; 64]).unwrap();
        out.copy_from_slice(&pattern(64, 1));
        let inbox = d.register(vec![0u8; 64]).unwrap();
        let r = b.recv(inbox).unwrap();
        let s = a.send(b_at_a, out).unwrap();
        let got = loop {
            a.progress().unwrap();
            if let Some(c) = b.try_take(r).unwrap() {
                break c.check().unwrap();
            }
        };
        assert_eq!(got.received().unwrap(), &pattern(64, 1)[..]);
        let inbox = got.into_buf().unwrap();
        assert_eq!(&inbox[..], &pattern(64, 1)[..]);
        assert_eq!(inbox.into_inner(), pattern(64, 1));
        let sent = a.wait_for(s).unwrap().check().unwrap();
        assert!(sent.buf().is_some());
        assert!(d.register(Vec::new()).is_err(), "empty buffers are refused");
    }
}

#[test]
fn operations_outside_the_capabilities_are_refused_here() {
    for info in providers(Caps::TAGGED) {
        if info.caps.contains(Caps::RMA) {
            continue; // the provider granted more than asked
        }
        let (mut a, _b, b_at_a, _) = pair(&info);
        let region = RemoteRegion {
            addr: 0,
            len: 64,
            key: RemoteKey(1),
        };
        let refused = a.write(b_at_a, vec![0; 8], &region).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::OpNotSupp);
        assert!(refused.to_string().contains("FI_RMA"), "{refused}");
        assert_eq!(refused.into_buf().map(|b| b.len()), Some(8));
        let refused = a.fetch_add(b_at_a, &region, 1u64).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::OpNotSupp);
        assert_eq!(a.in_flight(), 0);
    }
}

#[test]
fn default_multi_recv_is_not_used_for_owned_buffers() {
    for prov in ["tcp", "shm"] {
        let mut h = Hints::new()
            .caps(Caps::MSG | Caps::MULTI_RECV)
            .ep_type(EpType::Rdm)
            .provider(prov);
        if prov == "tcp" {
            h = h.node("127.0.0.1").source();
        }
        h.info_mut().rx_attr.op_flags = OpFlags::MULTI_RECV;
        let Some(info) = h.getinfo().ok().and_then(|l| l.into_iter().next()) else {
            continue;
        };
        let (mut a, mut b, b_at_a, _) = pair(&info);
        // Two messages, two receives: each buffer takes one message and
        // comes back once.
        let r1 = b.recv(vec![0; 4096]).unwrap();
        let r2 = b.recv(vec![0; 4096]).unwrap();
        let s1 = a.send(b_at_a, vec![1; 10]).unwrap();
        let s2 = a.send(b_at_a, vec![2; 10]).unwrap();
        assert_eq!(drive(&mut b, &mut a, r1).received().unwrap(), &[1; 10]);
        assert_eq!(drive(&mut b, &mut a, r2).received().unwrap(), &[2; 10]);
        drive(&mut a, &mut b, s1).check().unwrap();
        drive(&mut a, &mut b, s2).check().unwrap();
    }
}

#[test]
fn remote_cq_data_arrives_with_the_message() {
    for info in providers(Caps::MSG | Caps::TAGGED | Caps::REMOTE_CQ_DATA) {
        let (mut a, mut b, b_at_a, _) = pair(&info);
        let r = b.recv(vec![0; 8]).unwrap();
        let t = b.trecv(5, 0, vec![0; 8]).unwrap();
        let s = a.send_with_data(b_at_a, b"m".to_vec(), 0xfeed).unwrap();
        let ts = a.tsend_with_data(b_at_a, 5, b"t".to_vec(), 0xbeef).unwrap();
        let plain = a.send(b_at_a, b"p".to_vec()).unwrap();
        let r2 = b.recv(vec![0; 8]).unwrap();
        assert_eq!(
            drive(&mut b, &mut a, r).check().unwrap().data(),
            Some(0xfeed)
        );
        assert_eq!(
            drive(&mut b, &mut a, t).check().unwrap().data(),
            Some(0xbeef)
        );
        assert_eq!(drive(&mut b, &mut a, r2).check().unwrap().data(), None);
        for id in [s, ts, plain] {
            drive(&mut a, &mut b, id).check().unwrap();
        }
    }
}

#[test]
fn a_drop_that_cannot_drain_leaks_instead_of_freeing() {
    for info in providers(Caps::MSG) {
        let (mut a, _b, _, _) = pair(&info);
        a.set_drain_timeout(Duration::ZERO);
        a.recv(vec![0; 16]).unwrap();
        assert_eq!(a.in_flight(), 1);
        // No time to read the cancellation: the buffer is leaked, with a
        // warning, rather than freed under the provider.
        drop(a);
    }
}

#[test]
fn read_only_exposed_memory_can_be_looked_at() {
    for info in providers(Caps::MSG | Caps::RMA) {
        let d = safe::Domain::open(&info).unwrap();
        let ro = d.expose(pattern(64, 4), MrAccess::REMOTE_READ).unwrap();
        assert_eq!(ro.contents(), Some(&pattern(64, 4)[..]));
        assert_eq!(ro.region().len, 64);
        let refused = d.expose(vec![0; 8], MrAccess::SEND).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Inval);
        assert_eq!(refused.into_buf(), Some(vec![0; 8]));
    }
}
