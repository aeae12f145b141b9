//! The data path allocates nothing once warmed up: ping-pongs of sends,
//! injects, tagged messages, RMA writes and reads, with their completions,
//! counted by a global allocator (manual progress: everything runs on the
//! test's thread).

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
        &[1, 64, 4096],
        // Past the progress thread's longest sleep (50 ms).
        Duration::from_millis(70),
    );
}
