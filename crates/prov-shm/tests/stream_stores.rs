//! Bounce buffers filled by non-temporal stores (`FI_SHM_STREAM=1`):
//! messages of every protocol that copies through bounce buffers (one
//! buffer eagerly, pushed in chunks, unaligned and vectored sources)
//! arrive intact. The variable is read once per process,
//! so the checks run in a child process started with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use fabric_core::objects::{FiAddr, IoVec};
use fabric_core::*;

const ROLE: &str = "PROV_SHM_STREAM_ROLE";

#[test]
fn streamed_bounce_copies_arrive_intact() {
    checks_in_child(
        "streamed_bounce_copies_arrive_intact",
        ROLE,
        &[(prov_shm::getinfo::STREAM_VAR, "1")],
        checks,
    );
}

fn checks() {
    let (a, b, b_at_a, _) = pair();
    let sizes = [
        32 * 1024,
        40_000,
        64 * 1024,
        64 * 1024 + 1,
        128 * 1024,
        128 * 1024 + 1,
        200_000,
        1 << 20,
    ];
    for (i, &size) in sizes.iter().enumerate() {
        // Sources 0, 1 and 33 bytes past an aligned start, the last one
        // in two pieces.
        for (k, skew) in [0usize, 1, 33].into_iter().enumerate() {
            let mut src = pattern(size + skew, (i * 3 + k) as u8);
            let mut got = vec![0u8; size];
            let gi = iov(&mut got);
            let ctx = 100 + (i * 3 + k) as u64;
            // SAFETY: `got` outlives the receive's completion, read below.
            unsafe {
                b.ep.recvmsg(&msg(&gi, FiAddr::UNSPEC, 0, 0, ctx), OpFlags::empty())
                    .unwrap()
            };
            settle(&[b.cq.as_ref()], 1);
            let base = src[skew..].as_mut_ptr();
            let half = size / 2 + 5;
            let pieces = if skew == 33 {
                vec![
                    IoVec {
                        addr: base,
                        len: half,
                    },
                    IoVec {
                        addr: base.wrapping_add(half),
                        len: size - half,
                    },
                ]
            } else {
                vec![IoVec {
                    addr: base,
                    len: size,
                }]
            };
            // SAFETY: `src` outlives the send's completion, read below.
            unsafe {
                a.ep.sendmsg(&msg(&pieces, b_at_a, 0, 0, ctx + 1000), OpFlags::empty())
                    .unwrap()
            };
            let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
            assert_eq!((e.context, e.len), (ctx, size), "size {size} skew {skew}");
            assert!(got[..] == src[skew..], "data of size {size}, skew {skew}");
            let s = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
            assert_eq!(s.context, ctx + 1000);
        }
    }
}
