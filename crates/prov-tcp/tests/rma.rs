//! RMA between two RDM endpoints in one process: writes, reads, remote CQ
//! data, counters, refused accesses that change nothing, fences.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use fabric_core::objects::{CompletionFlags, FiAddr, IoVec, MrAccess, RmaIov, RmaMsg};
use fabric_core::*;

fn rma<'a>(
    iov: &'a [IoVec],
    addr: FiAddr,
    remote: &'a [RmaIov],
    ctx: u64,
    data: u64,
) -> RmaMsg<'a> {
    RmaMsg {
        iov,
        desc: &[],
        addr,
        rma_iov: remote,
        context: ctx,
        data,
    }
}

fn at(addr: u64, len: usize, key: u64) -> RmaIov {
    RmaIov { addr, len, key }
}

#[test]
fn write_then_read_back() {
    let (a, b, b_at_a, _) = pair();
    let mut target = vec![0u8; 4096];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut target,
            MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ,
            42,
        )
    };
    let mut src: Vec<u8> = (0..1000).map(|i| (i % 256) as u8).collect();
    let siov = iov(&mut src);
    let remote = [at(100, 1000, 42)];
    // SAFETY: src outlives the completion.
    unsafe {
        a.ep.writemsg(&rma(&siov, b_at_a, &remote, 1, 0), OpFlags::empty())
            .unwrap()
    };
    let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
    assert_eq!((e.context, e.len), (1, 1000));
    assert!(
        e.flags
            .contains(CompletionFlags::RMA | CompletionFlags::WRITE)
    );
    assert_eq!(&target[100..1100], &src[..]);
    assert!(target[..100].iter().all(|&x| x == 0));
    // Read it back, plus the zeros around it.
    let mut back = vec![9u8; 1200];
    let biov = iov(&mut back);
    let remote = [at(0, 1200, 42)];
    // SAFETY: back outlives the completion.
    unsafe {
        a.ep.readmsg(&rma(&biov, b_at_a, &remote, 2, 0), OpFlags::empty())
            .unwrap()
    };
    let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
    assert_eq!((e.context, e.len), (2, 1200));
    assert!(
        e.flags
            .contains(CompletionFlags::RMA | CompletionFlags::READ)
    );
    assert_eq!(&back[..], &target[..1200]);
    // Nothing shows up at the target.
    let mut none = [fabric_core::objects::CqEntry::default()];
    assert_eq!(b.cq.read(&mut none).unwrap_err().kind(), ErrorKind::Again);
}

#[test]
fn large_and_multi_range_transfers() {
    let (a, b, b_at_a, _) = pair();
    let n = 4 << 20;
    let mut target = vec![0u8; 2 * n];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut target,
            MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ,
            7,
        )
    };
    let mut src: Vec<u8> = (0..n).map(|i| (i * 13 % 251) as u8).collect();
    // Two local pieces into three remote ranges.
    let (s1, s2) = src.split_at_mut(n / 3);
    let siov = [
        IoVec {
            addr: s1.as_mut_ptr(),
            len: s1.len(),
        },
        IoVec {
            addr: s2.as_mut_ptr(),
            len: s2.len(),
        },
    ];
    let q = n / 4;
    let remote = [
        at(0, q, 7),
        at(n as u64, 2 * q, 7),
        at((n + 3 * q) as u64, n - 3 * q, 7),
    ];
    // SAFETY: src outlives the completion.
    unsafe {
        a.ep.writemsg(&rma(&siov, b_at_a, &remote, 1, 0), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 1);
    assert!(target[..q] == src[..q]);
    assert!(target[n..n + 2 * q] == src[q..3 * q]);
    assert!(target[n + 3 * q..2 * n] == src[3 * q..]);
    assert!(target[q..n].iter().all(|&x| x == 0));
    // Read the same ranges into one buffer.
    let mut back = vec![0u8; n];
    let biov = iov(&mut back);
    // SAFETY: back outlives the completion.
    unsafe {
        a.ep.readmsg(&rma(&biov, b_at_a, &remote, 2, 0), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 2);
    assert!(back == src);
}

#[test]
fn writedata_reports_remote_cq_data_and_consumes_no_receive() {
    let (a, b, b_at_a, a_at_b) = pair();
    let mut target = vec![0u8; 64];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 5) };
    let mut r = vec![0u8; 8];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        b.ep.recvmsg(
            &fabric_core::objects::Msg {
                iov: &riov,
                desc: &[],
                addr: FiAddr::UNSPEC,
                tag: 0,
                ignore: 0,
                context: 77,
                data: 0,
            },
            OpFlags::empty(),
        )
        .unwrap()
    };
    let mut src = *b"remote data!";
    let siov = iov(&mut src);
    let remote = [at(0, 12, 5)];
    // SAFETY: src outlives the completion.
    unsafe {
        a.ep.writemsg(
            &rma(&siov, b_at_a, &remote, 1, 0xfeed_beef),
            OpFlags::REMOTE_CQ_DATA,
        )
        .unwrap()
    };
    let (e, src_addr) = next_from(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!(e.data, 0xfeed_beef);
    assert!(e.flags.contains(
        CompletionFlags::RMA | CompletionFlags::REMOTE_WRITE | CompletionFlags::REMOTE_CQ_DATA
    ));
    assert_ne!(e.context, 77, "the posted receive is not consumed");
    assert_eq!(src_addr, a_at_b);
    assert_eq!(&target[..12], b"remote data!");
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 1);
    // The receive is still there.
    a.ep.inject(b"msg", b_at_a, None).unwrap();
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, &r[..3]), (77, &b"msg"[..]));
}

#[test]
fn inject_write_and_counters() {
    let info = rdm_info();
    let (a, ac) = side_counting(&info, &[Caps::WRITE]);
    let (b, bc) = side_counting(&info, &[Caps::REMOTE_WRITE]);
    let (write_cntr, remote_cntr) = (&ac[0], &bc[0]);
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    let mut target = vec![0u8; 16];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 3) };
    for i in 0..4u64 {
        a.ep.inject_write(&[i as u8 + 1; 4], b_at_a, at(4 * i, 4, 3), None)
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while write_cntr.read() < 4 || remote_cntr.read() < 4 {
        settle(&[a.cq.as_ref(), b.cq.as_ref()], 1);
        assert!(std::time::Instant::now() < deadline);
    }
    assert_eq!((write_cntr.readerr(), remote_cntr.readerr()), (0, 0));
    assert_eq!(target, [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4]);
    // Injects report no completion.
    let mut none = [fabric_core::objects::CqEntry::default()];
    assert_eq!(a.cq.read(&mut none).unwrap_err().kind(), ErrorKind::Again);
    // A refused inject counts as an error.
    a.ep.inject_write(&[9; 4], b_at_a, at(0, 4, 999), None)
        .unwrap();
    while write_cntr.readerr() < 1 {
        settle(&[a.cq.as_ref(), b.cq.as_ref()], 1);
        assert!(std::time::Instant::now() < deadline);
    }
    assert_eq!(target[0], 1);
}

#[test]
fn counter_wait_wakes_on_a_remote_write() {
    // A blocking counter wait sleeps on the provider's sockets too: a
    // write that arrives while it sleeps wakes it, also after busy polling
    // took the connection out of the epoll set.
    let info = rdm_info();
    let (a, _) = side_counting(&info, &[]);
    let (b, bc) = side_counting(&info, &[Caps::REMOTE_WRITE]);
    let remote_cntr = &bc[0];
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    let mut target = vec![0u8; 8];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 3) };
    a.ep.inject_write(&[1; 4], b_at_a, at(0, 4, 3), None)
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while remote_cntr.read() < 1 {
        settle(&[a.cq.as_ref(), b.cq.as_ref()], 1);
        assert!(std::time::Instant::now() < deadline);
    }
    settle(&[a.cq.as_ref(), b.cq.as_ref()], 20);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            a.ep.inject_write(&[2; 4], b_at_a, at(4, 4, 3), None)
                .unwrap();
            settle(&[a.cq.as_ref()], 100);
        });
        let start = std::time::Instant::now();
        remote_cntr
            .wait(2, Some(std::time::Duration::from_secs(30)))
            .unwrap();
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "the counter wait slept through the write"
        );
    });
    assert_eq!(target[4..8], [2; 4]);
}

#[test]
fn refused_accesses_fail_and_change_nothing() {
    let (a, b, b_at_a, _) = pair();
    let mut ro = vec![1u8; 256];
    let mut wo = vec![2u8; 256];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _r = unsafe { reg(b.domain.as_ref(), &mut ro, MrAccess::REMOTE_READ, 10) };
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _w = unsafe { reg(b.domain.as_ref(), &mut wo, MrAccess::REMOTE_WRITE, 11) };
    let mut src = vec![0xeeu8; 64];
    let siov = iov(&mut src);
    let cases: [(RmaIov, ErrorKind, &str); 4] = [
        (at(0, 64, 12345), ErrorKind::KeyRejected, "bad key"),
        (at(200, 64, 11), ErrorKind::Access, "out of bounds"),
        (
            at(u64::MAX - 10, 64, 11),
            ErrorKind::Access,
            "wrapping address",
        ),
        (at(0, 64, 10), ErrorKind::Access, "no write access"),
    ];
    for (i, (remote, kind, what)) in cases.iter().enumerate() {
        let remote = [*remote];
        // SAFETY: src outlives the completion.
        unsafe {
            a.ep.writemsg(&rma(&siov, b_at_a, &remote, i as u64, 0), OpFlags::empty())
                .unwrap()
        };
        let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err();
        assert_eq!((e.err, e.entry.context), (*kind, i as u64), "{what}: {e:?}");
        assert_eq!(e.entry.len, 64, "{what}: the operation's length");
        // The target's own reason comes back (protocol version 2).
        let says = match i {
            0 => "the peer refused the RMA write: no memory region with key 0x3039",
            1 => "range 0xc8+64 is outside the region of key 0xb (0x0+256)",
            2 => "range 0xfffffffffffffff5+64 is outside the region of key 0xb",
            _ => "memory key 0xa does not grant FI_REMOTE_WRITE",
        };
        assert!(e.err_text.contains(says), "{what}: {}", e.err_text);
    }
    // A multi-range write with one bad range writes none of them.
    let remote = [at(0, 32, 11), at(0, 32, 99)];
    // SAFETY: as above.
    unsafe {
        a.ep.writemsg(&rma(&siov, b_at_a, &remote, 9, 0), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(
        next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err().err,
        ErrorKind::KeyRejected
    );
    assert!(ro.iter().all(|&x| x == 1), "read-only region unchanged");
    assert!(wo.iter().all(|&x| x == 2), "write-only region unchanged");
    // Reads: bad key, no read access, out of bounds.
    let mut back = vec![0u8; 64];
    let biov = iov(&mut back);
    for (i, (remote, kind, says)) in [
        (
            at(0, 64, 777),
            ErrorKind::KeyRejected,
            "the peer refused the RMA read: no memory region with key 0x309",
        ),
        (
            at(0, 64, 11),
            ErrorKind::Access,
            "memory key 0xb does not grant FI_REMOTE_READ",
        ),
        (
            at(250, 64, 10),
            ErrorKind::Access,
            "range 0xfa+64 is outside the region of key 0xa (0x0+256)",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let remote = [remote];
        // SAFETY: back outlives the completion.
        unsafe {
            a.ep.readmsg(
                &rma(&biov, b_at_a, &remote, 20 + i as u64, 0),
                OpFlags::empty(),
            )
            .unwrap()
        };
        let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err();
        assert_eq!((e.err, e.entry.context), (kind, 20 + i as u64));
        assert!(e.err_text.contains(says), "{}", e.err_text);
        // The operation's length, as shm reports it.
        assert_eq!(e.entry.len, 64);
    }
    assert!(back.iter().all(|&x| x == 0));
    // The connection is still fine.
    let remote = [at(0, 64, 11)];
    // SAFETY: src outlives the completion.
    unsafe {
        a.ep.writemsg(&rma(&siov, b_at_a, &remote, 30, 0), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 30);
    assert!(wo[..64].iter().all(|&x| x == 0xee));
}

#[test]
fn local_argument_errors() {
    let (a, _b, b_at_a, _) = pair();
    let mut src = vec![0u8; 10];
    let siov = iov(&mut src);
    let remote = [at(0, 11, 1)];
    // SAFETY: rejected before anything is queued.
    let r = unsafe {
        a.ep.writemsg(&rma(&siov, b_at_a, &remote, 1, 0), OpFlags::empty())
    };
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval, "lengths differ");
    let five = [at(0, 2, 1); 5];
    // SAFETY: as above.
    let r = unsafe {
        a.ep.writemsg(&rma(&siov, b_at_a, &five, 1, 0), OpFlags::empty())
    };
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval, "too many ranges");
}

#[test]
fn virtual_addresses_and_provider_keys() {
    let info = rdm_info_with(Caps::RMA, MrMode::BASIC, "127.0.0.1");
    assert_eq!(info.domain_attr.mr_mode, MrMode::BASIC);
    let (a, b, b_at_a, _) = pair_of(&info);
    let mut target = vec![0u8; 128];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 0) };
    let base = target.as_ptr() as u64;
    let mut src = *b"at a virtual address";
    let siov = iov(&mut src);
    let remote = [at(base + 8, src.len(), mr.key())];
    // SAFETY: src outlives the completion.
    unsafe {
        a.ep.writemsg(&rma(&siov, b_at_a, &remote, 1, 0), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 1);
    assert_eq!(&target[8..8 + src.len()], &src[..]);
    // An offset is out of bounds in this mode.
    let remote = [at(8, 4, mr.key())];
    // SAFETY: as above.
    unsafe {
        a.ep.writemsg(&rma(&siov[..], b_at_a, &remote, 2, 0), OpFlags::empty())
            .unwrap_err()
    };
}

#[test]
fn a_fenced_write_waits_for_the_read_before_it() {
    let (a, b, b_at_a, _) = pair();
    let n = 8 << 20;
    let mut target = vec![1u8; n];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut target,
            MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ,
            4,
        )
    };
    let mut back = vec![0u8; n];
    let biov = iov(&mut back);
    let remote = [at(0, n, 4)];
    let mut twos = vec![2u8; n];
    let tiov = iov(&mut twos);
    // SAFETY: back and twos outlive the completions.
    unsafe {
        a.ep.readmsg(&rma(&biov, b_at_a, &remote, 1, 0), OpFlags::empty())
            .unwrap();
        a.ep.writemsg(&rma(&tiov, b_at_a, &remote, 2, 0), OpFlags::FENCE)
            .unwrap();
    }
    let e1 = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
    let e2 = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
    assert_eq!((e1.context, e2.context), (1, 2));
    assert!(
        back.iter().all(|&x| x == 1),
        "the read saw no byte of the write"
    );
    assert!(target.iter().all(|&x| x == 2));
}

/// FI_RX_CQ_DATA: remote CQ data takes a part (of no bytes) of a
/// multi-receive buffer, whether it was kept before the buffer was posted
/// or found the buffer posted; the buffer is still released exactly once
/// (its last completion carries FI_MULTI_RECV).
#[test]
fn rx_cq_data_takes_parts_of_a_multi_receive_buffer_that_is_still_released() {
    use fabric_core::objects::Msg;
    let mut info = rdm_info();
    info.mode |= Mode::RX_CQ_DATA;
    let (a, b, b_at_a, _) = pair_of(&info);
    let mut target = vec![0u8; 64];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 5) };
    let mut src = *b"12345678";
    let siov = iov(&mut src);
    let remote = [at(0, 8, 5)];
    let recv = |buf: &mut [u8], ctx: u64| {
        let v = iov(buf);
        let m = Msg {
            iov: &v,
            desc: &[],
            addr: FiAddr::UNSPEC,
            tag: 0,
            ignore: 0,
            context: ctx,
            data: 0,
        };
        // SAFETY: the caller's buffer outlives the completions awaited.
        unsafe { b.ep.recvmsg(&m, OpFlags::MULTI_RECV) }.unwrap();
    };
    let write = |ctx: u64, data: u64| {
        // SAFETY: src outlives the completion awaited.
        unsafe {
            a.ep.writemsg(
                &rma(&siov, b_at_a, &remote, ctx, data),
                OpFlags::REMOTE_CQ_DATA,
            )
        }
        .unwrap();
        assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, ctx);
    };
    // Kept first: the write completes (b kept its data), then a buffer of
    // 128 bytes takes it as a part of no bytes and stays posted.
    write(1, 0xd1);
    let mut big = vec![0u8; 128];
    recv(&mut big, 10);
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, e.data, e.len), (10, 0xd1, 0));
    assert!(!e.flags.contains(CompletionFlags::MULTI_RECV));
    // A message of 100 bytes leaves 28, under the minimum: the buffer is
    // released with this completion, nothing of it still in flight.
    let pattern: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37)).collect();
    let mut m = pattern.clone();
    let miov = iov(&mut m);
    // SAFETY: m outlives the completion awaited.
    unsafe {
        a.ep.sendmsg(
            &Msg {
                iov: &miov,
                desc: &[],
                addr: b_at_a,
                tag: 0,
                ignore: 0,
                context: 2,
                data: 0,
            },
            OpFlags::empty(),
        )
    }
    .unwrap();
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, e.len), (10, 100));
    assert!(e.flags.contains(CompletionFlags::MULTI_RECV), "{e:?}");
    assert_eq!(&big[..100], &pattern[..]);
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 2);
    // Posted first, with a minimum above the buffer's size: the part of
    // no bytes releases it at once.
    b.ep.set_min_multi_recv(200).unwrap();
    let mut small = vec![0u8; 128];
    recv(&mut small, 11);
    write(3, 0xd3);
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, e.data, e.len), (11, 0xd3, 0));
    assert!(e.flags.contains(CompletionFlags::MULTI_RECV), "{e:?}");
}
