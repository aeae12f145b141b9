//! RMA and atomics between two endpoints of one process: every size
//! class, every mr_mode addressing, and the target's checks (key, bounds,
//! access) refusing without writing.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use common::*;
use fabric_core::objects::{
    AtomicMsg, AtomicOp, CompletionFlags, Datatype, FiAddr, IoVec, MrAccess, RmaIov, RmaMsg,
};
use fabric_core::*;

fn rma<'a>(iov: &'a [IoVec], addr: FiAddr, r: &'a [RmaIov], ctx: u64) -> RmaMsg<'a> {
    RmaMsg {
        iov,
        desc: &[],
        addr,
        rma_iov: r,
        context: ctx,
        data: 0,
    }
}

fn rma_info(mr_mode: MrMode) -> Info {
    info_with(
        Caps::MSG | Caps::RMA | Caps::ATOMIC,
        mr_mode,
        Progress::Unspec,
    )
}

#[test]
fn writes_and_reads_of_every_size_and_addressing() {
    for hint in [MrMode::empty(), MrMode::BASIC] {
        let info = rma_info(hint);
        let mode = info.domain_attr.mr_mode;
        assert_eq!(mode, hint);
        let (a, b, b_at_a, _) = pair_of(&info);
        let mut target = vec![0u8; 8 << 20];
        // SAFETY: the buffer is declared before the region, so it outlives it.
        let mr = unsafe {
            reg(
                b.domain.as_ref(),
                &mut target,
                MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
                42,
            )
        };
        let key = mr.key();
        let base = if mode.contains(MrMode::BASIC) {
            target.as_ptr() as u64
        } else {
            0
        };
        for (i, size) in [
            1usize,
            100,
            1024,
            5000,
            16 * 1024,
            32 * 1024,
            40_000,
            3 << 20,
        ]
        .into_iter()
        .enumerate()
        {
            let off = 1000 * i as u64 + 7;
            let mut src = pattern(size, i as u8);
            let si = iov(&mut src);
            let r = [RmaIov {
                addr: base + off,
                len: size,
                key,
            }];
            // SAFETY: `src` outlives the completion.
            unsafe {
                a.ep.writemsg(&rma(&si, b_at_a, &r, 1), OpFlags::empty())
                    .unwrap()
            };
            let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
            assert_eq!(
                (e.context, e.len, e.flags),
                (1, size, CompletionFlags::RMA | CompletionFlags::WRITE),
                "write of {size}"
            );
            assert!(
                target[off as usize..off as usize + size] == src[..],
                "write of {size}"
            );
            let mut back = vec![0u8; size];
            let bi = iov(&mut back);
            // SAFETY: `back` outlives the completion.
            unsafe {
                a.ep.readmsg(&rma(&bi, b_at_a, &r, 2), OpFlags::empty())
                    .unwrap()
            };
            let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
            assert_eq!((e.context, e.len), (2, size), "read of {size}");
            assert!(back == src, "read of {size}");
        }
        drop(mr);
    }
}

#[test]
fn bad_key_bounds_and_access_are_refused_without_writing() {
    let info = rma_info(MrMode::empty());
    let (a, b, b_at_a, _) = pair_of(&info);
    let mut ro = vec![1u8; 4096];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe { reg(b.domain.as_ref(), &mut ro, MrAccess::REMOTE_READ, 7) };
    for size in [8usize, 100_000] {
        let mut src = vec![9u8; size];
        let si = iov(&mut src);
        for (r, want) in [
            (
                RmaIov {
                    addr: 0,
                    len: size.min(4096),
                    key: 8,
                },
                ErrorKind::KeyRejected,
            ),
            (
                RmaIov {
                    addr: 4000,
                    len: size.min(4096),
                    key: 7,
                },
                ErrorKind::Access,
            ),
            (
                RmaIov {
                    addr: 0,
                    len: size.min(4096),
                    key: 7,
                },
                ErrorKind::Access,
            ),
        ] {
            let v = [IoVec {
                addr: si[0].addr,
                len: r.len,
            }];
            // SAFETY: `src` outlives the completion.
            unsafe {
                a.ep.writemsg(&rma(&v, b_at_a, &[r], 3), OpFlags::empty())
                    .unwrap()
            };
            let err = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err();
            assert_eq!((err.err, err.entry.context), (want, 3), "{r:?}");
            // The target's reason comes back, and the length is the
            // operation's.
            // (The region is read-only: writes into it lack the right.)
            let why = match want {
                ErrorKind::KeyRejected => "no memory region with key",
                _ => "does not grant FI_REMOTE_WRITE",
            };
            assert!(err.err_text.contains(why), "{r:?}: {}", err.err_text);
            assert_eq!(err.entry.len, r.len, "{r:?}");
        }
        // Reading beyond the region is refused too.
        let mut back = vec![0u8; 5000];
        let bi = iov(&mut back);
        let r = [RmaIov {
            addr: 0,
            len: 5000,
            key: 7,
        }];
        // SAFETY: as above.
        unsafe {
            a.ep.readmsg(&rma(&bi, b_at_a, &r, 4), OpFlags::empty())
                .unwrap()
        };
        let err = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err();
        assert_eq!(err.err, ErrorKind::Access);
        assert!(
            err.err_text.contains("is outside the region of key"),
            "{}",
            err.err_text
        );
        assert_eq!(err.entry.len, 5000);
    }
    assert!(ro.iter().all(|&x| x == 1), "nothing was written");
    drop(mr);
}

#[test]
fn remote_cq_data_counters_and_inject_write() {
    let info = rma_info(MrMode::empty());
    let (a, ac) = side_counting(&info, &[Caps::WRITE, Caps::READ]);
    let (b, bc) = side_counting(&info, &[Caps::REMOTE_WRITE, Caps::REMOTE_READ]);
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    let _ = insert(&b, &a.ep.getname().unwrap());
    let mut target = vec![0u8; 1 << 20];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut target,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            11,
        )
    };
    let mut src = pattern(600_000, 3);
    let si = iov(&mut src);
    let r = [RmaIov {
        addr: 0,
        len: 600_000,
        key: 11,
    }];
    let mut m = rma(&si, b_at_a, &r, 5);
    m.data = 0xcafe;
    // SAFETY: `src` outlives the completion.
    unsafe { a.ep.writemsg(&m, OpFlags::REMOTE_CQ_DATA).unwrap() };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 5);
    let e = next(b.cq.as_ref(), &[]).unwrap();
    assert_eq!(e.data, 0xcafe);
    assert_eq!(
        e.flags,
        CompletionFlags::RMA | CompletionFlags::REMOTE_WRITE | CompletionFlags::REMOTE_CQ_DATA
    );
    a.ep.inject_write(
        b"inject",
        b_at_a,
        RmaIov {
            addr: 10,
            len: 6,
            key: 11,
        },
        None,
    )
    .unwrap();
    settle(&[a.cq.as_ref(), b.cq.as_ref()], 5);
    assert_eq!(&target[10..16], b"inject");
    assert_eq!(
        ac[0].read(),
        2,
        "write counter (the inject counts when acknowledged)"
    );
    assert_eq!(bc[0].read(), 2, "remote write counter");
    let mut back = [0u8; 6];
    let bi = iov(&mut back);
    let r = [RmaIov {
        addr: 10,
        len: 6,
        key: 11,
    }];
    // SAFETY: as above.
    unsafe {
        a.ep.readmsg(&rma(&bi, b_at_a, &r, 6), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 6);
    assert_eq!(&back, b"inject");
    assert_eq!((ac[1].read(), bc[1].read()), (1, 1));
    drop(mr);
}

#[test]
fn atomics_fetch_compare_and_refusals() {
    let info = rma_info(MrMode::empty());
    let (a, b, b_at_a, _) = pair_of(&info);
    let mut target = [0u64; 16];
    // SAFETY: the words are only accessed through the provider while the
    // region lives, and read after it is gone.
    let bytes = unsafe { std::slice::from_raw_parts_mut(target.as_mut_ptr().cast::<u8>(), 128) };
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe {
        reg(
            b.domain.as_ref(),
            bytes,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            3,
        )
    };
    let mut five = 5u64.to_le_bytes();
    let fi = iov(&mut five);
    let r = [RmaIov {
        addr: 8,
        len: 1,
        key: 3,
    }];
    let base = AtomicMsg {
        iov: &fi,
        desc: &[],
        addr: b_at_a,
        rma_iov: &r,
        datatype: Datatype::Uint64,
        op: AtomicOp::Sum,
        result: &[],
        compare: &[],
        context: 1,
        data: 0,
    };
    // SAFETY: operand and result buffers outlive the completions.
    unsafe { a.ep.atomicmsg(&base, OpFlags::empty()).unwrap() };
    let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
    assert_eq!(e.flags, CompletionFlags::ATOMIC | CompletionFlags::WRITE);
    let mut old = [0u8; 8];
    let oi = iov(&mut old);
    let fetch = AtomicMsg {
        result: &oi,
        context: 2,
        ..base
    };
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    unsafe { a.ep.atomicmsg(&fetch, OpFlags::empty()).unwrap() };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 2);
    assert_eq!(u64::from_le_bytes(old), 5);
    let mut cmp = 10u64.to_le_bytes();
    let ci = iov(&mut cmp);
    let mut new = 77u64.to_le_bytes();
    let ni = iov(&mut new);
    let cas = AtomicMsg {
        iov: &ni,
        compare: &ci,
        result: &oi,
        op: AtomicOp::Cswap,
        context: 3,
        ..base
    };
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    unsafe { a.ep.atomicmsg(&cas, OpFlags::empty()).unwrap() };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 3);
    assert_eq!(u64::from_le_bytes(old), 10);
    // Many elements at once (results through a DATA chunk).
    let mut ops = vec![0u8; 8 * 512];
    for (i, c) in ops.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(i as u64).to_le_bytes());
    }
    let mut big = vec![0u8; 1 << 16];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let bmr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut big,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            4,
        )
    };
    let opi = iov(&mut ops);
    let mut res = vec![0u8; 8 * 512];
    let resi = iov(&mut res);
    let rr = [RmaIov {
        addr: 0,
        len: 512,
        key: 4,
    }];
    let many = AtomicMsg {
        iov: &opi,
        rma_iov: &rr,
        result: &resi,
        op: AtomicOp::AtomicWrite,
        context: 4,
        ..base
    };
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    unsafe { a.ep.atomicmsg(&many, OpFlags::empty()).unwrap() };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 4);
    let again = AtomicMsg {
        op: AtomicOp::AtomicRead,
        iov: &[],
        context: 5,
        ..many
    };
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    unsafe { a.ep.atomicmsg(&again, OpFlags::empty()).unwrap() };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 5);
    assert_eq!(res, ops);
    // Refusals: bad key, out of bounds.
    for (r, want) in [
        (
            RmaIov {
                addr: 0,
                len: 1,
                key: 99,
            },
            ErrorKind::KeyRejected,
        ),
        (
            RmaIov {
                addr: 128,
                len: 1,
                key: 3,
            },
            ErrorKind::Access,
        ),
    ] {
        let rr = [r];
        let bad = AtomicMsg {
            rma_iov: &rr,
            context: 6,
            ..base
        };
        // SAFETY: the buffers outlive the operation, whose completion is read below.
        unsafe { a.ep.atomicmsg(&bad, OpFlags::empty()).unwrap() };
        assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err().err, want);
    }
    assert_eq!(
        a.ep.atomic_valid(Datatype::Double, AtomicOp::Bor, false, false)
            .unwrap_err()
            .kind(),
        ErrorKind::OpNotSupp
    );
    assert_eq!(
        a.ep.atomic_valid(Datatype::Uint32, AtomicOp::Cswap, false, true)
            .unwrap(),
        1024
    );
    drop(bmr);
    drop(mr);
    assert_eq!(target[1], 77);
}
