//! tcp's completion levels: inject-complete by default,
//! FI_TRANSMIT_COMPLETE and FI_DELIVERY_COMPLETE through acknowledgements,
//! and the auto-progress thread. Selective completion, multi-receive and
//! the rules every provider shares are in the semantics suite
//! (tests/semantics.rs).

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use common::*;
use fabric_core::objects::{CompletionQueue, CqEntry, FiAddr, IoVec, Msg, Provider};
use fabric_core::*;
use prov_tcp::TcpProvider;

fn msg(iov: &[IoVec], addr: FiAddr, ctx: u64) -> Msg<'_> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag: 0,
        ignore: 0,
        context: ctx,
        data: 0,
    }
}

fn empty(cq: &dyn CompletionQueue) -> bool {
    let mut e = [CqEntry::default()];
    matches!(cq.read(&mut e), Err(err) if err.kind() == ErrorKind::Again)
}

#[test]
fn sends_complete_when_handed_to_the_socket() {
    let (a, _b, b_at_a, _) = pair();
    // Establish the connection (the hello needs the peer's answer).
    a.ep.inject(b"x", b_at_a, None).unwrap();
    settle(&[a.cq.as_ref(), _b.cq.as_ref()], 20);
    let mut s = vec![3u8; 1000];
    let siov = iov(&mut s);
    // SAFETY: s outlives the completion.
    unsafe {
        a.ep.sendmsg(&msg(&siov, b_at_a, 1), OpFlags::empty())
            .unwrap()
    };
    // b never progresses again: the completion comes from the socket.
    assert_eq!(next(a.cq.as_ref(), &[]).unwrap().context, 1);
}

#[test]
fn transmit_complete_waits_for_the_target_to_receive() {
    let (a, b, b_at_a, _) = pair();
    a.ep.inject(b"x", b_at_a, None).unwrap();
    settle(&[a.cq.as_ref(), b.cq.as_ref()], 20);
    let mut s = vec![4u8; 100];
    let siov = iov(&mut s);
    // SAFETY: s outlives the completion.
    unsafe {
        a.ep.sendmsg(&msg(&siov, b_at_a, 2), OpFlags::TRANSMIT_COMPLETE)
            .unwrap()
    };
    settle(&[a.cq.as_ref()], 50);
    assert!(empty(a.cq.as_ref()), "b has not read the message yet");
    // b reads it (unexpected: no receive posted) and acknowledges.
    let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
    assert_eq!(e.context, 2);
}

#[test]
fn delivery_complete_waits_for_a_matching_receive() {
    let (a, b, b_at_a, _) = pair();
    let mut s = vec![5u8; 100];
    let siov = iov(&mut s);
    // SAFETY: s outlives the completion.
    unsafe {
        a.ep.sendmsg(&msg(&siov, b_at_a, 3), OpFlags::DELIVERY_COMPLETE)
            .unwrap()
    };
    settle(&[a.cq.as_ref(), b.cq.as_ref()], 50);
    assert!(empty(a.cq.as_ref()), "nothing delivered yet");
    let mut r = vec![0u8; 100];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 4), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 3);
    assert_eq!(next(b.cq.as_ref(), &[]).unwrap().context, 4);
    assert_eq!(r, s);
    // Large ones, with the receive already posted: 1 MiB goes eagerly on
    // this loopback connection (lone and unpaced), 9 MiB by rendezvous.
    for (k, n) in [(0u64, 1 << 20), (2, 9 << 20)] {
        let mut big = vec![6u8; n];
        let mut rbig = vec![0u8; n];
        let riov = iov(&mut rbig);
        let siov = iov(&mut big);
        // SAFETY: the buffers outlive the completions.
        unsafe {
            b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 5 + k), OpFlags::empty())
                .unwrap();
            a.ep.sendmsg(&msg(&siov, b_at_a, 6 + k), OpFlags::DELIVERY_COMPLETE)
                .unwrap();
        }
        assert_eq!(
            next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context,
            6 + k
        );
        assert_eq!(
            next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap().context,
            5 + k
        );
        assert!(rbig == big);
    }
}

#[test]
fn auto_progress_completes_without_reads_at_the_target() {
    let mut info = rdm_info();
    info.domain_attr.data_progress = Progress::Auto;
    let (a, b, b_at_a, _) = pair_of(&info);
    let mut r = vec![0u8; 16];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 1), OpFlags::empty())
            .unwrap()
    };
    let mut s = *b"delivered alone!";
    let siov = iov(&mut s);
    // SAFETY: s outlives the completion.
    unsafe {
        a.ep.sendmsg(&msg(&siov, b_at_a, 2), OpFlags::DELIVERY_COMPLETE)
            .unwrap()
    };
    // Nobody reads b's CQ or calls into b: only its progress thread can
    // place the message and acknowledge it, which a's completion needs.
    assert_eq!(next(a.cq.as_ref(), &[]).unwrap().context, 2);
    assert_eq!(r, s);
    assert_eq!(next(b.cq.as_ref(), &[]).unwrap().context, 1);
}

#[test]
fn getinfo_offers_auto_progress_when_asked() {
    let mut h = Info::default();
    h.ep_attr.ep_type = EpType::Rdm;
    h.domain_attr.data_progress = Progress::Auto;
    let req = fabric_core::matching::Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..fabric_core::matching::Request::new(Version::CURRENT)
    };
    let list = TcpProvider.getinfo(&req).unwrap();
    assert!(
        list.iter()
            .all(|i| i.domain_attr.data_progress == Progress::Auto)
    );
    let info = rdm_info();
    assert_eq!(info.domain_attr.data_progress, Progress::Manual);
}
