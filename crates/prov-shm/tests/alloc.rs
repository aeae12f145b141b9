//! The data path allocates nothing once warmed up: ping-pongs of sends
//! (inline, bounce buffer, rendezvous), injects, tagged messages, RMA
//! writes and reads, with their completions, counted by a global
//! allocator (manual progress: everything runs on the test's thread).

mod common;

use common::*;
use fabric_core::testing::{CountingAlloc, Peer, assert_data_path_allocates_nothing};
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

#[test]
fn the_data_path_does_not_allocate() {
    let (a, b, b_at_a, a_at_b) = pair();
    assert_data_path_allocates_nothing(
        Peer::new(a.ep.as_ref(), a.cq.as_ref(), b_at_a),
        Peer::new(b.ep.as_ref(), b.cq.as_ref(), a_at_b),
        b.domain.as_ref(),
        &[1, 64, 4096, 200_000],
        // Past the period of the liveness checks, which read /proc.
        prov_shm::progress::CHECK_EVERY + Duration::from_millis(20),
    );
}

/// The liveness pass allocates nothing while a send waits for its
/// receiver: it lists the peers of operations in flight and asks the
/// kernel about each. `a` posts a rendezvous send that `b` (not
/// progressed) cannot take yet, waits past the period of the checks and
/// reads its CQ enough times for the pass to run, then `b` receives.
#[test]
fn the_liveness_pass_with_a_send_in_flight_does_not_allocate() {
    use fabric_core::OpFlags;
    use fabric_core::objects::{CqEntry, FiAddr};
    let (a, b, b_at_a, _) = pair();
    let mut src = pattern(200_000, 3);
    let mut dst = vec![0u8; src.len()];
    let mut counted = 0;
    for round in 0..4 {
        let before = CountingAlloc::count();
        let from = iov(&mut src);
        // SAFETY: `src` outlives the send's completion, awaited below.
        unsafe { a.ep.sendmsg(&msg(&from, b_at_a, 0, 0, 2), OpFlags::empty()) }.expect("send");
        std::thread::sleep(prov_shm::progress::CHECK_EVERY + Duration::from_millis(20));
        let mut e = [CqEntry::default()];
        for _ in 0..300 {
            match a.cq.read(&mut e) {
                Err(err) if err.kind() == fabric_core::ErrorKind::Again => {}
                other => panic!("the send completed before its receive: {other:?}"),
            }
        }
        let into = iov(&mut dst);
        // SAFETY: `dst` outlives the receive's completion, awaited next.
        unsafe {
            b.ep.recvmsg(&msg(&into, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
        }
        .expect("recv");
        assert_eq!(
            next(b.cq.as_ref(), &[a.cq.as_ref()])
                .expect("b's receive")
                .context,
            1
        );
        assert_eq!(
            next(a.cq.as_ref(), &[b.cq.as_ref()])
                .expect("a's send")
                .context,
            2
        );
        if round > 0 {
            counted += CountingAlloc::count() - before;
        }
    }
    assert_eq!(dst, src);
    assert_eq!(counted, 0, "allocations with a send in flight");
}
