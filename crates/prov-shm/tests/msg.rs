//! Messages and tagged messages between two endpoints of one process:
//! every size class (inline, bounce buffer, rendezvous), vectors, CQ data,
//! truncation, unexpected messages, peek / claim / discard, directed
//! receive, cancel, multi-receive, CQ formats and sread.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use std::time::Duration;

use common::*;
use fabric_core::objects::{CompletionFlags, CqEntry, FiAddr, IoVec};
use fabric_core::*;

/// Every protocol and its edges: inline (to 4 KiB), one bounce buffer (to
/// the 64 KiB eager limit), pushed through bounce buffers (to 1 MiB), and
/// cross-memory attach.
const SIZES: [usize; 14] = [
    0,
    1,
    64,
    1024,
    1025,
    4096,
    4097,
    16 * 1024,
    32 * 1024,
    32 * 1024 + 1,
    64 * 1024,
    64 * 1024 + 1,
    40_000,
    3 << 20,
];

#[test]
fn every_size_untagged_and_tagged_expected_and_unexpected() {
    let (a, b, b_at_a, a_at_b) = pair();
    for (i, &size) in SIZES.iter().enumerate() {
        for tagged in [false, true] {
            for expected in [true, false] {
                let mut out = pattern(size, i as u8);
                let mut back = vec![0u8; size];
                let oiov = iov(&mut out);
                let biov = iov(&mut back);
                let tag = 0x40 + i as u64;
                // SAFETY: the buffers outlive the operation, whose completion is read below.
                let post = || unsafe {
                    // SAFETY: `back` outlives the completion read below.
                    if tagged {
                        b.ep.trecvmsg(&msg(&biov, FiAddr::UNSPEC, tag, 0, 7), OpFlags::empty())
                    } else {
                        b.ep.recvmsg(&msg(&biov, FiAddr::UNSPEC, 0, 0, 7), OpFlags::empty())
                    }
                    .unwrap()
                };
                if expected {
                    post();
                    settle(&[b.cq.as_ref()], 1);
                }
                // SAFETY: `out` outlives the send's completion.
                unsafe {
                    if tagged {
                        a.ep.tsendmsg(&msg(&oiov, b_at_a, tag, 0, 9), OpFlags::empty())
                    } else {
                        a.ep.sendmsg(&msg(&oiov, b_at_a, 0, 0, 9), OpFlags::empty())
                    }
                    .unwrap();
                }
                if !expected {
                    settle(&[b.cq.as_ref(), a.cq.as_ref()], 2);
                    post();
                }
                let (e, src) = next_from(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
                assert_eq!((e.context, e.len), (7, size), "size {size} tagged {tagged}");
                assert_eq!(src, a_at_b, "FI_SOURCE");
                let kind = if tagged {
                    CompletionFlags::TAGGED
                } else {
                    CompletionFlags::MSG
                };
                assert_eq!(e.flags, kind | CompletionFlags::RECV);
                assert_eq!(e.tag, if tagged { tag } else { 0 });
                assert!(back == out, "data of size {size}");
                let s = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
                assert_eq!((s.context, s.len), (9, size));
                assert_eq!(s.flags, kind | CompletionFlags::SEND);
            }
        }
    }
}

#[test]
fn inject_senddata_and_vectors() {
    let (a, b, b_at_a, _) = pair();
    let mut r1 = [0u8; 3];
    let mut r2 = [0u8; 100];
    let v = [
        IoVec {
            addr: r1.as_mut_ptr(),
            len: 3,
        },
        IoVec {
            addr: r2.as_mut_ptr(),
            len: 100,
        },
    ];
    // SAFETY: the buffers outlive the completions.
    unsafe {
        b.ep.recvmsg(&msg(&v, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
            .unwrap()
    };
    a.ep.inject(b"hello world", b_at_a, Some(0xdada)).unwrap();
    let e = next(b.cq.as_ref(), &[]).unwrap();
    assert_eq!(e.len, 11);
    assert_eq!(e.data, 0xdada);
    assert!(e.flags.contains(CompletionFlags::REMOTE_CQ_DATA));
    assert_eq!(&r1, b"hel");
    assert_eq!(&r2[..8], b"lo world");
    // Injects report nothing.
    nothing(a.cq.as_ref(), &[b.cq.as_ref()]);
    // A vector send of three pieces into one buffer, with data.
    let mut p1 = pattern(5000, 1);
    let mut p2 = pattern(7000, 2);
    let mut p3 = pattern(30, 3);
    let sv = [
        IoVec {
            addr: p1.as_mut_ptr(),
            len: p1.len(),
        },
        IoVec {
            addr: p2.as_mut_ptr(),
            len: p2.len(),
        },
        IoVec {
            addr: p3.as_mut_ptr(),
            len: p3.len(),
        },
    ];
    let mut all = vec![0u8; 12_030];
    let ai = iov(&mut all);
    // SAFETY: buffers outlive their completions.
    unsafe {
        b.ep.trecvmsg(&msg(&ai, FiAddr::UNSPEC, 5, 0, 2), OpFlags::empty())
            .unwrap();
        let mut m = msg(&sv, b_at_a, 5, 0, 3);
        m.data = 77;
        a.ep.tsendmsg(&m, OpFlags::REMOTE_CQ_DATA).unwrap();
    }
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.len, e.data, e.tag), (12_030, 77, 5));
    assert_eq!(&all[..5000], &p1[..]);
    assert_eq!(&all[5000..12_000], &p2[..]);
    assert_eq!(&all[12_000..], &p3[..]);
    assert_eq!(next(a.cq.as_ref(), &[]).unwrap().context, 3);
    a.ep.tinject(b"t", b_at_a, 9, None).unwrap();
    let mut one = [0u8; 1];
    let oi = iov(&mut one);
    // SAFETY: as above.
    unsafe {
        b.ep.trecvmsg(&msg(&oi, FiAddr::UNSPEC, 9, 0, 4), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(b.cq.as_ref(), &[]).unwrap().tag, 9);
    assert_eq!(&one, b"t");
    // The largest inject (a whole slot's payload) arrives whole.
    let max = pattern(a.ep.info().tx_attr.inject_size, 6);
    let mut got = vec![0u8; max.len() + 1];
    let gi = iov(&mut got);
    // SAFETY: as above.
    unsafe {
        b.ep.recvmsg(&msg(&gi, FiAddr::UNSPEC, 0, 0, 5), OpFlags::empty())
            .unwrap()
    };
    a.ep.inject(&max, b_at_a, None).unwrap();
    assert_eq!(next(b.cq.as_ref(), &[]).unwrap().len, max.len());
    assert_eq!(&got[..max.len()], &max[..]);
    let big = vec![0u8; a.ep.info().tx_attr.inject_size + 1];
    assert_eq!(
        a.ep.inject(&big, b_at_a, None).unwrap_err().kind(),
        ErrorKind::MsgSize
    );
}

#[test]
fn truncation_is_the_receivers_error() {
    let (a, b, b_at_a, _) = pair();
    // 50 000 B: an eager message sent alone, received as it lands (stepped).
    for size in [100usize, 20_000, 50_000, 1 << 20] {
        truncated((&a, &b, b_at_a), size, 10, 4);
    }
}

/// Sends `size` bytes into a receive of `room`: the receiver gets what
/// fits and `FI_ETRUNC`, the sender succeeds.
fn truncated(sides: (&Side, &Side, FiAddr), size: usize, room: usize, seed: u8) {
    let (a, b, _) = sides;
    let mut out = pattern(size, seed);
    let oi = iov(&mut out);
    let mut into = vec![0u8; room];
    let ii = iov(&mut into);
    // SAFETY: buffers outlive completions.
    unsafe { recv_then_send(sides, &oi, &ii, (1, 2)) };
    let err = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap_err();
    assert_eq!(err.err, ErrorKind::Trunc);
    assert_eq!((err.entry.len, err.olen), (room, size - room));
    assert!(
        into[..] == out[..room],
        "{size} B into {room} (seed {seed})"
    );
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 2);
}

#[test]
fn a_split_rendezvous_into_a_shorter_buffer_takes_what_fits() {
    // 100 000 B messages into 60 000 B receives. The copy choice tries
    // pushing, then cross-memory attach; once that worked with the peer,
    // the receiver splits what it takes with the sender, and its SPLIT
    // names the split and the length (not the whole message's).
    let (a, b, b_at_a, _) = pair();
    for k in 0..24u8 {
        truncated((&a, &b, b_at_a), 100_000, 60_000, k);
    }
}

#[test]
fn peek_claim_discard_and_directed_receive() {
    let info = common::info_with(
        Caps::TAGGED | Caps::DIRECTED_RECV,
        MrMode::empty(),
        Progress::Unspec,
    );
    let (a, b, b_at_a, a_at_b) = pair_of(&info);
    let c = side(&info);
    let b_at_c = insert(&c, &b.ep.getname().unwrap());
    let c_at_b = insert(&b, &c.ep.getname().unwrap());
    let mut none = [0u8; 0];
    let ni = iov(&mut none);
    // Nothing there: FI_PEEK fails with ENOMSG.
    // SAFETY: no data lands in these buffers.
    unsafe {
        b.ep.trecvmsg(&msg(&ni, FiAddr::UNSPEC, 1, 0, 10), OpFlags::PEEK)
            .unwrap()
    };
    assert_eq!(next(b.cq.as_ref(), &[]).unwrap_err().err, ErrorKind::NoMsg);
    a.ep.tinject(b"from a", b_at_a, 1, None).unwrap();
    c.ep.tinject(b"from c", b_at_c, 1, None).unwrap();
    let mut big = vec![9u8; 100_000];
    let bi = iov(&mut big);
    // SAFETY: `big` outlives the send's completion.
    unsafe {
        a.ep.tsendmsg(&msg(&bi, b_at_a, 2, 0, 50), OpFlags::empty())
            .unwrap()
    };
    settle(&[a.cq.as_ref(), b.cq.as_ref(), c.cq.as_ref()], 3);
    // Peek finds the oldest; peek with claim reserves it.
    // SAFETY: as above.
    unsafe {
        b.ep.trecvmsg(&msg(&ni, FiAddr::UNSPEC, 1, 0, 11), OpFlags::PEEK)
            .unwrap()
    };
    let (e, src) = next_from(b.cq.as_ref(), &[]).unwrap();
    assert_eq!((e.context, e.len, e.tag, src), (11, 6, 1, a_at_b));
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    unsafe {
        b.ep.trecvmsg(
            &msg(&ni, FiAddr::UNSPEC, 1, 0, 12),
            OpFlags::PEEK | OpFlags::CLAIM,
        )
        .unwrap()
    };
    assert_eq!(next(b.cq.as_ref(), &[]).unwrap().context, 12);
    // A directed receive from c skips a's (claimed anyway).
    let mut r = [0u8; 6];
    let ri = iov(&mut r);
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    unsafe {
        b.ep.trecvmsg(&msg(&ri, c_at_b, 1, 0, 13), OpFlags::empty())
            .unwrap()
    };
    let (e, src) = next_from(b.cq.as_ref(), &[]).unwrap();
    assert_eq!((e.context, src), (13, c_at_b));
    assert_eq!(&r, b"from c");
    // The claimed message, by its context.
    let mut r2 = [0u8; 6];
    let r2i = iov(&mut r2);
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    unsafe {
        b.ep.trecvmsg(&msg(&r2i, FiAddr::UNSPEC, 1, 0, 12), OpFlags::CLAIM)
            .unwrap()
    };
    assert_eq!(next(b.cq.as_ref(), &[]).unwrap().context, 12);
    assert_eq!(&r2, b"from a");
    // Peek and discard the rendezvous message; its sender completes.
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    unsafe {
        b.ep.trecvmsg(
            &msg(&ni, FiAddr::UNSPEC, 2, 0, 14),
            OpFlags::PEEK | OpFlags::DISCARD,
        )
        .unwrap()
    };
    let e = next(b.cq.as_ref(), &[]).unwrap();
    assert_eq!((e.context, e.len), (14, 100_000));
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 50);
    drop(c);
}

#[test]
fn cancel_and_multi_recv() {
    let (a, b, b_at_a, _) = pair();
    let mut buf = [0u8; 16];
    let bi = iov(&mut buf);
    // SAFETY: cancelled before anything lands.
    unsafe {
        b.ep.recvmsg(&msg(&bi, FiAddr::UNSPEC, 0, 0, 5), OpFlags::empty())
            .unwrap()
    };
    b.ep.cancel(5).unwrap();
    let e = next(b.cq.as_ref(), &[]).unwrap_err();
    assert_eq!((e.err, e.entry.context), (ErrorKind::Canceled, 5));
    assert_eq!(b.ep.cancel(5).unwrap_err().kind(), ErrorKind::NoEnt);
    // Multi-receive: 3 messages of 100 bytes land in a 300-byte buffer;
    // the buffer is released with the third (less than 64 bytes left).
    let mut mbuf = vec![0u8; 300];
    let mi = iov(&mut mbuf);
    let base = mbuf.as_ptr() as u64;
    // SAFETY: `mbuf` outlives the buffer's release.
    unsafe {
        b.ep.recvmsg(&msg(&mi, FiAddr::UNSPEC, 0, 0, 8), OpFlags::MULTI_RECV)
            .unwrap()
    };
    for k in 0..3u8 {
        a.ep.inject(&[k; 100], b_at_a, None).unwrap();
    }
    for k in 0..3u64 {
        let e = next(b.cq.as_ref(), &[]).unwrap();
        assert_eq!((e.context, e.len, e.buf), (8, 100, base + 100 * k));
        assert_eq!(e.flags.contains(CompletionFlags::MULTI_RECV), k == 2);
    }
    assert_eq!(&mbuf[100..200], &[1u8; 100][..]);
    assert!(
        matches!(
            // SAFETY: the buffers outlive the operation, whose completion is read below.
            unsafe { b.ep.trecvmsg(&msg(&mi, FiAddr::UNSPEC, 0, 0, 8), OpFlags::MULTI_RECV) },
            Err(e) if e.kind() == ErrorKind::BadFlags
        ),
        "multi-receive is untagged only"
    );
}

/// `FI_OPT_MIN_MULTI_RECV`: with a minimum of 40 a 100-byte buffer takes
/// three 30-byte messages (released with the third, 10 bytes left); with
/// the default (64) it is released with the second (40 left).
#[test]
fn min_multi_recv_decides_when_the_buffer_is_released() {
    let (a, b, b_at_a, _) = pair();
    assert_eq!(b.ep.min_multi_recv().unwrap(), 64);
    for (min, released_at) in [(40usize, 2u64), (64, 1)] {
        b.ep.set_min_multi_recv(min).unwrap();
        assert_eq!(b.ep.min_multi_recv().unwrap(), min);
        let mut mbuf = vec![0u8; 100];
        let mi = iov(&mut mbuf);
        let base = mbuf.as_ptr() as u64;
        // SAFETY: `mbuf` outlives the buffer's release, read below.
        unsafe {
            b.ep.recvmsg(&msg(&mi, FiAddr::UNSPEC, 0, 0, 9), OpFlags::MULTI_RECV)
                .unwrap()
        };
        for k in 0..=released_at {
            a.ep.inject(&[k as u8; 30], b_at_a, None).unwrap();
        }
        for k in 0..=released_at {
            let e = next(b.cq.as_ref(), &[]).unwrap();
            assert_eq!((e.context, e.len, e.buf), (9, 30, base + 30 * k));
            assert_eq!(
                e.flags.contains(CompletionFlags::MULTI_RECV),
                k == released_at,
                "minimum {min}, message {k}"
            );
        }
    }
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec into a live local.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(r, 0);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Polls `side`'s CQ with `read` until it has `n` completions or `d`
/// passed, returning their contexts.
fn poll_for(side: &Side, n: usize, d: Duration) -> Vec<u64> {
    let mut got = Vec::new();
    let mut e = [CqEntry::default()];
    let t = std::time::Instant::now();
    while got.len() < n && t.elapsed() < d {
        if let Ok(1) = side.cq.read(&mut e) {
            got.push(e[0].context);
        }
    }
    got
}

/// A reader that busy-polls an idle endpoint (past the announcement delay,
/// when progress stops reading off wake-ups on every look) still gets
/// every message, and a blocking read afterwards sleeps (little CPU) and
/// wakes for the next message.
#[test]
fn busy_polling_an_idle_endpoint_then_blocking() {
    let (a, b, b_at_a, _) = pair();
    let mut bufs = [[0u8; 4]; 4];
    for (i, buf) in bufs.iter_mut().enumerate() {
        let bi = iov(buf);
        // SAFETY: `bufs` outlives the completions, read below.
        unsafe {
            b.ep.recvmsg(
                &msg(&bi, FiAddr::UNSPEC, 0, 0, 10 + i as u64),
                OpFlags::empty(),
            )
            .unwrap()
        };
    }
    // The sender is another thread, so that its wake-up write can land
    // after the reader already took the message (a stale wake-up, which
    // must not keep the later blocking read from sleeping).
    let idle = prov_shm::progress::ANNOUNCE_AFTER * 20;
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            for m in [b"one!", b"two!", b"tri!"] {
                std::thread::sleep(idle);
                a.ep.inject(m, b_at_a, None).unwrap();
            }
        });
        poll_for(&b, 3, Duration::from_secs(20))
    });
    assert_eq!(got, [10, 11, 12]);
    // Idle again, past the announcement, still polling.
    assert!(poll_for(&b, 1, idle).is_empty());
    let mut e = [CqEntry::default()];
    let reading = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // 300 ms after the reader is about to block (a loaded machine
            // may start either thread late): the read must have slept.
            while !reading.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(300));
            a.ep.inject(b"for!", b_at_a, None).unwrap();
        });
        reading.store(true, std::sync::atomic::Ordering::Release);
        let cpu = thread_cpu();
        let t = std::time::Instant::now();
        let n = b.cq.sread(&mut e, Some(Duration::from_secs(20))).unwrap();
        let (cpu, wall) = (thread_cpu() - cpu, t.elapsed());
        assert_eq!((n, e[0].context), (1, 13));
        assert!(
            cpu < wall / 10,
            "sread used {cpu:?} of CPU over {wall:?}: it spun instead of sleeping"
        );
    });
    assert_eq!(bufs, [*b"one!", *b"two!", *b"tri!", *b"for!"]);
}

#[test]
fn sread_blocks_until_a_message_and_times_out() {
    let (a, b, b_at_a, _) = pair();
    let mut e = [CqEntry::default()];
    let t = std::time::Instant::now();
    assert_eq!(
        b.cq.sread(&mut e, Some(Duration::from_millis(30)))
            .unwrap_err()
            .kind(),
        ErrorKind::Again
    );
    assert!(t.elapsed() >= Duration::from_millis(30));
    let mut buf = [0u8; 4];
    let bi = iov(&mut buf);
    // SAFETY: `buf` outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&bi, FiAddr::UNSPEC, 0, 0, 3), OpFlags::empty())
            .unwrap()
    };
    let name = a.ep.getname().unwrap();
    drop(name);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            a.ep.inject(b"ping", b_at_a, None).unwrap();
        });
        let n = b.cq.sread(&mut e, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((n, e[0].context), (1, 3));
    });
    assert_eq!(&buf, b"ping");
    assert!(b.cq.wait_fd().is_some());
}

/// FI_CLAIM with nothing claimed by its context is refused by the call
/// (`NoMsg`), not by a later error completion; so is FI_CLAIM|FI_DISCARD.
#[test]
fn a_claim_with_nothing_claimed_is_refused_by_the_call() {
    let (a, b, b_at_a, _) = pair();
    let mut none = [0u8; 0];
    let ni = iov(&mut none);
    for flags in [OpFlags::CLAIM, OpFlags::CLAIM | OpFlags::DISCARD] {
        // SAFETY: nothing is claimed, so nothing lands.
        let r = unsafe { b.ep.trecvmsg(&msg(&ni, FiAddr::UNSPEC, 1, 0, 21), flags) };
        assert_eq!(r.unwrap_err().kind(), ErrorKind::NoMsg, "{flags:?}");
    }
    // No error completion follows, and the endpoint works on.
    a.ep.tinject(b"x", b_at_a, 1, None).unwrap();
    let mut r = [0u8; 1];
    let ri = iov(&mut r);
    // SAFETY: the buffer outlives the receive, whose completion is read below.
    unsafe {
        b.ep.trecvmsg(&msg(&ri, FiAddr::UNSPEC, 1, 0, 22), OpFlags::empty())
            .unwrap()
    };
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, &r), (22, b"x"));
}

/// FI_RX_CQ_DATA: remote CQ data that consumes the last part of a
/// multi-receive buffer completes with FI_MULTI_RECV (the buffer is
/// released with it).
#[test]
fn remote_cq_data_releasing_a_multi_receive_buffer_says_so() {
    use fabric_core::objects::{MrAccess, RmaIov};
    let mut i = info();
    i.mode |= Mode::RX_CQ_DATA;
    let (a, b, b_at_a, _) = pair_of(&i);
    let mut target = vec![0u8; 64];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 7) };
    let r = RmaIov {
        addr: 0,
        len: 8,
        key: mr.key(),
    };
    // A 100-byte buffer released once less than 64 bytes are left: the
    // 50-byte message leaves 50.
    let mut mbuf = vec![0u8; 100];
    let mi = iov(&mut mbuf);
    // SAFETY: `mbuf` outlives the buffer's release, read below.
    unsafe {
        b.ep.recvmsg(&msg(&mi, FiAddr::UNSPEC, 0, 0, 30), OpFlags::MULTI_RECV)
            .unwrap()
    };
    a.ep.inject(&[5u8; 50], b_at_a, None).unwrap();
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, e.len), (30, 50));
    assert!(e.flags.contains(CompletionFlags::MULTI_RECV));
    // A second buffer: the write's CQ data takes no bytes, and with the
    // minimum above the buffer's size it is released with that part.
    b.ep.set_min_multi_recv(200).unwrap();
    let mut m2 = vec![0u8; 100];
    let m2i = iov(&mut m2);
    // SAFETY: `m2` outlives the buffer's release, read below.
    unsafe {
        b.ep.recvmsg(&msg(&m2i, FiAddr::UNSPEC, 0, 0, 31), OpFlags::MULTI_RECV)
            .unwrap()
    };
    a.ep.inject_write(&7u64.to_le_bytes(), b_at_a, r, Some(77))
        .unwrap();
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, e.data), (31, 77));
    assert!(e.flags.contains(CompletionFlags::REMOTE_CQ_DATA));
    assert!(
        e.flags.contains(CompletionFlags::MULTI_RECV),
        "the completion that releases the buffer says so: {:?}",
        e.flags
    );
    drop(mr);
}

/// A message above the eager limit (32 KiB) that fits a bounce buffer and
/// goes alone travels eagerly: it reaches the receiver before any receive
/// is posted, so it is still delivered after its sender closed, which a
/// rendezvous (whose data stays with the sender) could not do.
#[test]
fn a_lone_message_above_the_eager_limit_travels_with_its_data() {
    let (a, b, b_at_a, _) = pair();
    let size = 48 * 1024;
    let mut out = pattern(size, 5);
    let oiov = iov(&mut out);
    // SAFETY: `out` outlives the send: it is dropped after `a`.
    unsafe {
        a.ep.sendmsg(&msg(&oiov, b_at_a, 0, 0, 9), OpFlags::empty())
            .unwrap();
    }
    // The message reaches b's engine (held as unexpected there).
    settle(&[b.cq.as_ref(), a.cq.as_ref()], 4);
    drop(a);
    let mut back = vec![0u8; size];
    let biov = iov(&mut back);
    // SAFETY: `back` outlives the completion read below.
    unsafe {
        b.ep.recvmsg(&msg(&biov, FiAddr::UNSPEC, 0, 0, 7), OpFlags::empty())
            .unwrap();
    }
    let e = next(b.cq.as_ref(), &[]).unwrap();
    assert_eq!((e.context, e.len), (7, size));
    assert!(back == out, "the data came with the message");
}

/// Reads everything `cq` has after `passes` progress passes (each read
/// runs one pass of its domain's engine).
fn read_passes(cq: &dyn fabric_core::objects::CompletionQueue, passes: usize) -> Vec<CqEntry> {
    let mut got = Vec::new();
    for _ in 0..passes {
        let mut e = [CqEntry::default()];
        if cq.read(&mut e).is_ok() {
            got.push(e[0]);
        }
    }
    got
}

/// A window of pushed messages is copied a bounded amount per progress
/// pass of the sender (two bounce buffers), so the receiver finishes the
/// first messages, and the sender reports them, while the rest of the
/// window is still to be copied; it used to copy the whole window in one
/// pass, every completion waiting for its end. Every message arrives
/// intact.
#[test]
fn a_window_of_pushes_completes_message_by_message() {
    const N: usize = 12;
    // Above one bounce buffer (never eager), below the CMA limit: pushed
    // after a `CTS`.
    const SIZE: usize = 200_000;
    let info = info_with(Caps::MSG, MrMode::empty(), Progress::Manual);
    let (a, b, b_at_a, _) = pair_of(&info);
    let src: Vec<Vec<u8>> = (0..N).map(|i| pattern(SIZE, i as u8)).collect();
    let mut dst = vec![vec![0u8; SIZE]; N];
    for (i, d) in dst.iter_mut().enumerate() {
        let v = iov(d);
        // SAFETY: `dst` outlives the receives, all awaited below.
        unsafe {
            b.ep.recvmsg(
                &msg(&v, FiAddr::UNSPEC, 0, 0, 100 + i as u64),
                OpFlags::empty(),
            )
        }
        .unwrap();
    }
    for (i, s) in src.iter().enumerate() {
        let v = [IoVec {
            addr: s.as_ptr().cast_mut(),
            len: s.len(),
        }];
        // SAFETY: `src` outlives the sends, all awaited below.
        unsafe {
            a.ep.sendmsg(&msg(&v, b_at_a, 0, 0, 200 + i as u64), OpFlags::empty())
        }
        .unwrap();
    }
    // The announcements go out; the receiver matches them and clears them.
    assert!(read_passes(a.cq.as_ref(), 1).is_empty());
    assert!(read_passes(b.cq.as_ref(), 20).is_empty());
    // One pass of the sender: the `CTS`s, then at most two bounce buffers.
    assert!(read_passes(a.cq.as_ref(), 1).is_empty());
    let first = read_passes(b.cq.as_ref(), 20);
    assert!(
        !first.is_empty() && first.len() < N / 2,
        "one pass of the sender brought {} of {N} messages",
        first.len()
    );
    assert_eq!(first[0].context, 100);
    // The next pass of the sender takes the receiver's ACK first.
    let sent = read_passes(a.cq.as_ref(), 1);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].context, 200);
    // The rest, in order.
    let (mut recvs, mut sends) = (first, sent);
    for _ in 0..10_000 {
        if recvs.len() == N && sends.len() == N {
            break;
        }
        sends.extend(read_passes(a.cq.as_ref(), 1));
        recvs.extend(read_passes(b.cq.as_ref(), 1));
    }
    let ctx = |v: &[CqEntry]| v.iter().map(|e| e.context).collect::<Vec<_>>();
    assert_eq!(ctx(&recvs), (100..100 + N as u64).collect::<Vec<_>>());
    assert_eq!(ctx(&sends), (200..200 + N as u64).collect::<Vec<_>>());
    for (i, (s, d)) in src.iter().zip(&dst).enumerate() {
        assert!(s == d, "message {i} differs");
        assert_eq!(recvs[i].len, SIZE);
    }
}

#[test]
fn receives_of_one_piece_and_of_several_keep_the_order_they_were_posted_in() {
    // One-piece receives (`recv_one`, `fi_recv`'s path, and `recvmsg`)
    // wait in the endpoint's queue; a receive of several pieces is posted
    // at once, after the queue's. Four messages must fill them in order.
    let (a, b, b_at_a, _) = pair();
    let mut first = [0u8; 8];
    let (mut p1, mut p2) = ([0u8; 3], [0u8; 5]);
    let mut third = [0u8; 8];
    let mut fourth = [0u8; 8];
    let one = |buf: &mut [u8]| IoVec {
        addr: buf.as_mut_ptr(),
        len: buf.len(),
    };
    let two = [one(&mut p1), one(&mut p2)];
    let no_desc = fabric_core::objects::MrDesc(0);
    // SAFETY: every buffer outlives its completion, read below.
    unsafe {
        b.ep.recv_one(
            one(&mut first),
            no_desc,
            FiAddr::UNSPEC,
            1,
            OpFlags::empty(),
        )
        .unwrap();
        b.ep.recvmsg(&msg(&two, FiAddr::UNSPEC, 0, 0, 2), OpFlags::empty())
            .unwrap();
        b.ep.recvmsg(
            &msg(&iov(&mut third), FiAddr::UNSPEC, 0, 0, 3),
            OpFlags::empty(),
        )
        .unwrap();
        b.ep.recv_one(
            one(&mut fourth),
            no_desc,
            FiAddr::UNSPEC,
            4,
            OpFlags::empty(),
        )
        .unwrap();
    }
    for m in [b"message1", b"message2", b"message3", b"message4"] {
        a.ep.inject(m, b_at_a, None).unwrap();
    }
    let order: Vec<u64> = (0..4)
        .map(|_| next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap().context)
        .collect();
    assert_eq!(order, [1, 2, 3, 4]);
    assert_eq!(&first, b"message1");
    assert_eq!((&p1, &p2), (b"mes", b"sage2"));
    assert_eq!(&third, b"message3");
    assert_eq!(&fourth, b"message4");
    // The tagged short form takes the same queue.
    let mut tagged = [0u8; 8];
    // SAFETY: as above.
    unsafe {
        b.ep.trecv_one(
            one(&mut tagged),
            no_desc,
            FiAddr::UNSPEC,
            7,
            0,
            5,
            OpFlags::empty(),
        )
        .unwrap();
    }
    a.ep.tinject(b"tagged!!", b_at_a, 7, None).unwrap();
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, e.tag, e.len), (5, 7, 8));
    assert_eq!(&tagged, b"tagged!!");
    // A buffer whose end wraps around the address space is refused.
    let wraps = IoVec {
        addr: usize::MAX as *mut u8,
        len: 2,
    };
    // SAFETY: refused before any use of the buffer.
    let r = unsafe {
        b.ep.recv_one(wraps, no_desc, FiAddr::UNSPEC, 6, OpFlags::empty())
    };
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval);
}
