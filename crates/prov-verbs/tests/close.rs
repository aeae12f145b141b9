//! Closing MSG endpoints frees what they used, counted by open files: a
//! test binary of its own, so that no other test opens or closes files in
//! this process meanwhile. Skips without a device (see `common`).

#![allow(clippy::unwrap_used, clippy::result_large_err)]

mod common;

use common::*;
use fabric_core::objects::FiAddr;
use fabric_core::*;

#[test]
fn closed_endpoints_let_their_queue_pairs_and_cqs_go() {
    // A CQ holds the queue pairs it routes completions to until their
    // endpoint closes; if that link outlived the endpoint, the CQ (and
    // its completion channel's fd) would never be freed.
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let round = || {
        let (server, client) = connected(&l);
        let mut b = Buf::new(server.domain.as_ref(), 64);
        let iov = b.iov();
        let desc = [b.mr.desc()];
        // SAFETY: the buffer outlives the receive, which completes below.
        unsafe { server.ep.recvmsg(&msg(&iov, &desc, 5, 0), OpFlags::empty()) }.unwrap();
        client.ep.inject(b"ping", FiAddr::UNSPEC, None).unwrap();
        assert_eq!(wait_cq(server.cq.as_ref()).unwrap().context, 5);
        drop(b);
        drop((server, client));
        // The listener's EQ hears of the closed connection.
        while l.eq.read().is_ok() {}
    };
    // The first round opens what stays open (the device's files).
    round();
    let before = fds();
    for _ in 0..4 {
        round();
    }
    assert_eq!(fds(), before, "endpoints left files open");
}
