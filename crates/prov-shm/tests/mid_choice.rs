//! Mid-size messages (8 KiB up to the CMA limit) that answer something, as
//! in a ping-pong, go by bounce buffer or by cross-memory attach, as the
//! sender's measurements say (`ep::choice`): every size class takes a run
//! of eager messages, then a run by CMA, before it compares them, and
//! looks at the slower one again now and then. A ping-pong long enough
//! to pass those runs in both directions moves every byte intact either
//! way, with the right lengths and contexts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use fabric_core::objects::FiAddr;
use fabric_core::*;

/// Round trips per size: past the first two runs of 8 (eager, then CMA)
/// and into the measured choice.
const ROUNDS: u64 = 40;

/// One message from `from` to `to` (`to_at`: `to` in `from`'s AV), `size`
/// bytes at `offset` in its buffers, checked on arrival.
fn one_way(from: &Side, to: &Side, to_at: FiAddr, size: usize, offset: usize, seed: u64) {
    let mut got = vec![0u8; size + offset];
    let gi = iov(&mut got[offset..]);
    let rctx = 1_000_000 + seed;
    // SAFETY: `got` outlives the receive's completion, awaited below.
    unsafe {
        to.ep
            .recvmsg(&msg(&gi, FiAddr::UNSPEC, 0, 0, rctx), OpFlags::empty())
            .unwrap()
    };
    let mut out = vec![0u8; offset];
    out.extend(pattern(size, seed as u8));
    let oi = iov(&mut out[offset..]);
    // SAFETY: `out` outlives the send's completion, awaited below.
    unsafe {
        from.ep
            .sendmsg(&msg(&oi, to_at, 0, 0, seed), OpFlags::empty())
            .unwrap_or_else(|e| panic!("send of {size} B: {e}"))
    };
    let r = next(to.cq.as_ref(), &[from.cq.as_ref()])
        .unwrap_or_else(|e| panic!("receive of {size} B failed: {:?}", e.err));
    assert_eq!((r.context, r.len), (rctx, size), "receive of {size} B");
    assert!(
        got[offset..] == out[offset..],
        "{size} B message {seed} corrupted"
    );
    let s = next(from.cq.as_ref(), &[to.cq.as_ref()])
        .unwrap_or_else(|e| panic!("send of {size} B failed: {:?}", e.err));
    assert_eq!(s.context, seed, "send of {size} B");
}

#[test]
fn a_mid_size_ping_pong_is_intact_by_either_copy() {
    let (a, b, b_at_a, a_at_b) = pair();
    // Below the eager limit, at it, above it (a lone message), and
    // buffers that start off a page boundary.
    for (size, offset) in [
        (8 << 10, 0),
        (16 << 10, 16),
        (20_000, 3),
        (32 << 10, 0),
        ((32 << 10) + 1, 0),
        (100_000, 64),
    ] {
        for i in 0..ROUNDS {
            one_way(&a, &b, b_at_a, size, offset, 2 * i);
            one_way(&b, &a, a_at_b, size, offset, 2 * i + 1);
        }
    }
}
