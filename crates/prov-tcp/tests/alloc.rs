//! The data path allocates nothing once warmed up: ping-pongs of sends,
//! injects, tagged messages, RMA writes and reads, with their completions,
//! counted by a global allocator (manual progress: everything runs on the
//! test's thread).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use fabric_core::objects::MrAccess;
use fabric_core::testing::{CountingAlloc, DataPath, Peer};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

#[test]
fn the_data_path_does_not_allocate() {
    let (a, b, b_at_a, a_at_b) = pair();
    let sizes = [1, 64, 4096];
    let mut target = vec![0u8; sizes[sizes.len() - 1]];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut target,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            9,
        )
    };
    let pa = Peer::new(a.ep.as_ref(), a.cq.as_ref(), b_at_a);
    let pb = Peer::new(b.ep.as_ref(), b.cq.as_ref(), a_at_b);
    let mut path = DataPath::new(&sizes);
    path.rounds(pa, pb, 9, 200);
    let before = CountingAlloc::count();
    assert!(before > 0, "the counter counts");
    path.rounds(pa, pb, 9, 300);
    let during = CountingAlloc::count() - before;
    assert_eq!(during, 0, "allocations on the warmed-up data path");
}
