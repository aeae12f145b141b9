//! An eager limit set below the inject size (`FI_SHM_EAGER_MAX=256`):
//! injects of up to the inject size still go out at once, by `inject` and
//! by `sendmsg` with FI_INJECT (they must copy their data in the call;
//! they used to fail with `Again` for ever), and
//! larger plain sends take the rendezvous. The limit is read from the
//! environment, so the checks run in a child process started with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use fabric_core::objects::FiAddr;
use fabric_core::*;

const VAR: &str = "FI_SHM_EAGER_MAX";
const ROLE: &str = "PROV_SHM_EAGER_LIMIT_ROLE";

#[test]
fn injects_with_an_eager_limit_below_the_inject_size() {
    checks_in_child(
        "injects_with_an_eager_limit_below_the_inject_size",
        ROLE,
        &[(VAR, "256")],
        checks,
    );
}

fn checks() {
    let (a, b, b_at_a, _) = pair();
    let inject = a.ep.info().tx_attr.inject_size;
    assert!(inject > 256, "inject size {inject}");
    for (i, size) in [256, 257, 300, inject - 1, inject, inject + 1, 4096]
        .into_iter()
        .enumerate()
    {
        let ctx = 10 + i as u64;
        let mut got = vec![0u8; size];
        let gi = iov(&mut got);
        // SAFETY: `got` outlives the receive's completion, read below.
        unsafe {
            b.ep.recvmsg(&msg(&gi, FiAddr::UNSPEC, 0, 0, ctx), OpFlags::empty())
                .unwrap()
        };
        let mut out = pattern(size, i as u8);
        if size <= inject && i % 2 == 0 {
            a.ep.inject(&out, b_at_a, None)
                .unwrap_or_else(|e| panic!("inject of {size} B: {e}"));
        } else if size <= inject {
            // `sendmsg` with FI_INJECT: the general send path.
            let oi = iov(&mut out);
            // SAFETY: FI_INJECT: the data is copied before the call returns.
            unsafe { a.ep.sendmsg(&msg(&oi, b_at_a, 0, 0, 1), OpFlags::INJECT) }
                .unwrap_or_else(|e| panic!("sendmsg(FI_INJECT) of {size} B: {e}"));
        } else {
            let oi = iov(&mut out);
            // SAFETY: `out` outlives the send's completion, read below.
            unsafe {
                a.ep.sendmsg(&msg(&oi, b_at_a, 0, 0, 1), OpFlags::empty())
                    .unwrap()
            };
            assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 1);
        }
        let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
        assert_eq!((e.context, e.len), (ctx, size));
        assert_eq!(got, out, "{size} B arrived intact");
    }
}
