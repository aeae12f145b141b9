//! The data path allocates nothing once warmed up: ping-pongs of sends,
//! injects, tagged messages, RMA writes and reads, with their completions,
//! counted by a global allocator (manual progress: everything runs on the
//! test's thread).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use fabric_core::objects::{CqEntry, FiAddr, IoVec, MrAccess, Msg, RmaIov, RmaMsg};
use fabric_core::*;

#[global_allocator]
static ALLOCATOR: fabric_core::testing::CountingAlloc = fabric_core::testing::CountingAlloc;

fn allocs() -> u64 {
    fabric_core::testing::CountingAlloc::count()
}

fn wait(
    cq: &dyn fabric_core::objects::CompletionQueue,
    drive: &dyn fabric_core::objects::CompletionQueue,
) -> CqEntry {
    let mut e = [CqEntry::default()];
    loop {
        let _ = drive.read(&mut []);
        match cq.read(&mut e) {
            Ok(_) => return e[0],
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("{err}"),
        }
    }
}

fn m(iov: &[IoVec], addr: FiAddr, tag: u64, ctx: u64) -> Msg<'_> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore: 0,
        context: ctx,
        data: 0,
    }
}

#[test]
fn the_data_path_does_not_allocate() {
    let (a, b, b_at_a, a_at_b) = pair();
    let mut target = vec![0u8; 4096];
    let _mr = reg(
        b.domain.as_ref(),
        &mut target,
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        9,
    );
    let mut rb = vec![0u8; 4096];
    let mut ra = vec![0u8; 4096];
    let mut sbuf = vec![7u8; 4096];
    let mut round = |n: usize| {
        for i in 0..n {
            let size = [1usize, 64, 4096][i % 3];
            let rbi = iov(&mut rb[..]);
            let rai = iov(&mut ra[..]);
            let si = iov(&mut sbuf[..size]);
            let tagged = i % 2 == 0;
            // SAFETY: the buffers outlive the completions awaited here.
            unsafe {
                if tagged {
                    b.ep.trecvmsg(&m(&rbi, FiAddr::UNSPEC, 5, 1), OpFlags::empty())
                        .unwrap();
                    a.ep.trecvmsg(&m(&rai, FiAddr::UNSPEC, 6, 2), OpFlags::empty())
                        .unwrap();
                    a.ep.tsendmsg(&m(&si, b_at_a, 5, 3), OpFlags::empty())
                        .unwrap();
                } else {
                    b.ep.recvmsg(&m(&rbi, FiAddr::UNSPEC, 0, 1), OpFlags::empty())
                        .unwrap();
                    a.ep.recvmsg(&m(&rai, FiAddr::UNSPEC, 0, 2), OpFlags::empty())
                        .unwrap();
                    a.ep.sendmsg(&m(&si, b_at_a, 0, 3), OpFlags::empty())
                        .unwrap();
                }
            }
            assert_eq!(wait(b.cq.as_ref(), a.cq.as_ref()).context, 1);
            if tagged {
                b.ep.tinject(&[1; 8], a_at_b, 6, None).unwrap();
            } else {
                b.ep.inject(&[1; 8], a_at_b, None).unwrap();
            }
            let mut got = [false; 2];
            while got != [true, true] {
                let e = wait(a.cq.as_ref(), b.cq.as_ref());
                got[(e.context - 2) as usize] = true;
            }
            // RMA write and read of the registered buffer.
            let remote = [RmaIov {
                addr: 0,
                len: size,
                key: 9,
            }];
            let wi = iov(&mut sbuf[..size]);
            // SAFETY: sbuf outlives the completion.
            unsafe {
                a.ep.writemsg(
                    &RmaMsg {
                        iov: &wi,
                        desc: &[],
                        addr: b_at_a,
                        rma_iov: &remote,
                        context: 4,
                        data: 0,
                    },
                    OpFlags::empty(),
                )
                .unwrap();
            }
            assert_eq!(wait(a.cq.as_ref(), b.cq.as_ref()).context, 4);
            let ri = iov(&mut ra[..size]);
            // SAFETY: ra outlives the completion.
            unsafe {
                a.ep.readmsg(
                    &RmaMsg {
                        iov: &ri,
                        desc: &[],
                        addr: b_at_a,
                        rma_iov: &remote,
                        context: 5,
                        data: 0,
                    },
                    OpFlags::empty(),
                )
                .unwrap();
            }
            assert_eq!(wait(a.cq.as_ref(), b.cq.as_ref()).context, 5);
        }
    };
    round(200);
    let before = allocs();
    assert!(before > 0, "the counter counts");
    round(300);
    let during = allocs() - before;
    assert_eq!(during, 0, "allocations on the warmed-up data path");
}
