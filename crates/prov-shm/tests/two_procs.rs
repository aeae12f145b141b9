//! Two processes: the test binary runs itself again as the peer (the
//! `peer_process` test, which does nothing unless `PROV_SHM_PEER` names a
//! role). The two exchange endpoint names over the child's stdin / stdout
//! (lines starting with `NAME=`), then talk through the provider:
//! messages, tagged messages, RMA and atomics across processes; a peer
//! killed with SIGKILL in the middle of transfers; region files removed
//! after a normal close and after a kill.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::{AtomicMsg, AtomicOp, CqEntry, Datatype, FiAddr, RmaIov, RmaMsg};
use fabric_core::*;

const ROLE: &str = "PROV_SHM_PEER";
/// The key of the peer's registered buffer.
const KEY: u64 = 77;
/// Its size.
const REGION: usize = 16 << 20;

fn region_file(name: &Address) -> std::path::PathBuf {
    let s = name.to_string();
    let n = s.strip_prefix("fi_shm://").unwrap();
    Path::new("/dev/shm").join(n)
}

/// The peer side, in the child process.
#[test]
fn peer_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let me = side(&info());
    let mut region = vec![0u8; REGION];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let (_mr, parent) = unsafe { peer_start(me.domain.as_ref(), me.ep.as_ref(), &mut region, KEY) };
    let parent = insert(&me, &parent);
    match role.as_str() {
        // Echo every message back (tagged ones with their tag and CQ data)
        // until "quit"; RMA and atomics land in `region` meanwhile.
        "echo" => {
            let mut bufs = [vec![0u8; 8 << 20], vec![0u8; 8 << 20]];
            let post = |i: usize, b: &mut Vec<u8>| {
                let v = iov(b);
                // SAFETY: the buffers live until the process exits.
                unsafe {
                    if i == 0 {
                        me.ep
                            .recvmsg(&msg(&v, FiAddr::UNSPEC, 0, 0, 0), OpFlags::empty())
                    } else {
                        me.ep
                            .trecvmsg(&msg(&v, FiAddr::UNSPEC, 0, u64::MAX, 1), OpFlags::empty())
                    }
                }
                .unwrap();
            };
            for (i, b) in bufs.iter_mut().enumerate() {
                post(i, b);
            }
            let mut copies = Vec::new();
            loop {
                let mut e = [CqEntry::default()];
                match me.cq.sread(&mut e, Some(Duration::from_millis(100))) {
                    Ok(_) => {}
                    Err(err) if err.kind() == ErrorKind::Again => continue,
                    Err(err) => panic!("peer: {err}"),
                }
                let e = e[0];
                if e.context > 1 {
                    continue; // an echo went out
                }
                let i = e.context as usize;
                let data = bufs[i][..e.len].to_vec();
                if data == b"quit" {
                    break;
                }
                let mut copy = data;
                let v = iov(&mut copy);
                let mut m = msg(&v, parent, e.tag, 0, 2 + i as u64);
                m.data = e.data;
                // SAFETY: `copy` is kept in `copies` until the process exits.
                unsafe {
                    if i == 0 {
                        me.ep.sendmsg(&m, OpFlags::REMOTE_CQ_DATA)
                    } else {
                        me.ep.tsendmsg(&m, OpFlags::REMOTE_CQ_DATA)
                    }
                }
                .unwrap();
                copies.push(copy);
                post(i, &mut bufs[i]);
            }
            settle(&[me.cq.as_ref()], 50);
        }
        // Progress forever, never posting a receive.
        "sink" => loop {
            let mut e = [CqEntry::default()];
            let _ = me.cq.sread(&mut e, Some(Duration::from_millis(100)));
        },
        // Do nothing until killed (no progress at all).
        "idle" => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
        // Close the endpoint at once, then wait.
        "close" => {
            drop(me);
            println!("CLOSED");
            std::io::stdout().flush().unwrap();
            std::thread::sleep(Duration::from_secs(30));
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn(role: &str, me: &Side) -> PeerProcess {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(ROLE, role);
    PeerProcess::spawn(cmd, &me.ep.getname().unwrap())
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "the peer process did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_gone(path: &Path, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while path.exists() {
        assert!(
            Instant::now() < deadline,
            "{what}: {} is still there",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn messages_rma_and_atomics_across_processes() {
    let me = side(&info());
    let mut peer = spawn("echo", &me);
    let p = insert(&me, &peer.name);
    // Every size class, untagged and tagged, with remote CQ data.
    for (i, size) in [0usize, 1, 1000, 5000, 16 * 1024, 40_000, 1 << 20, 4 << 20]
        .into_iter()
        .enumerate()
    {
        for tagged in [false, true] {
            let mut out = pattern(size, i as u8 + tagged as u8);
            let mut back = vec![0u8; size];
            let biov = iov(&mut back);
            let oiov = iov(&mut out);
            let tag = 0x100 + i as u64;
            // SAFETY: the buffers outlive the completions read below.
            unsafe {
                if tagged {
                    me.ep
                        .trecvmsg(&msg(&biov, FiAddr::UNSPEC, tag, 0, 1), OpFlags::empty())
                        .unwrap();
                    let mut m = msg(&oiov, p, tag, 0, 2);
                    m.data = 1000 + i as u64;
                    me.ep.tsendmsg(&m, OpFlags::REMOTE_CQ_DATA).unwrap();
                } else {
                    me.ep
                        .recvmsg(&msg(&biov, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
                        .unwrap();
                    let mut m = msg(&oiov, p, 0, 0, 2);
                    m.data = 1000 + i as u64;
                    me.ep.sendmsg(&m, OpFlags::REMOTE_CQ_DATA).unwrap();
                }
            }
            let mut got = [false; 2];
            while !(got[0] && got[1]) {
                let (e, src) = next_from(me.cq.as_ref(), &[]).unwrap();
                match e.context {
                    1 => {
                        assert_eq!(e.len, size);
                        assert_eq!(src, p, "FI_SOURCE across processes");
                        assert_eq!(e.data, 1000 + i as u64);
                        if tagged {
                            assert_eq!(e.tag, tag);
                        }
                        got[0] = true;
                    }
                    2 => got[1] = true,
                    c => panic!("unexpected context {c}"),
                }
            }
            assert!(back == out, "echo of {size} bytes (tagged {tagged})");
        }
    }
    // RMA into the peer's registered region: write, read back.
    for size in [8usize, 3000, 100_000, 5 << 20] {
        let mut src = pattern(size, 9);
        let siov = iov(&mut src);
        let r = [RmaIov {
            addr: 4096,
            len: size,
            key: KEY,
        }];
        // SAFETY: as above.
        unsafe {
            me.ep
                .writemsg(
                    &RmaMsg {
                        iov: &siov,
                        desc: &[],
                        addr: p,
                        rma_iov: &r,
                        context: 10,
                        data: 0,
                    },
                    OpFlags::empty(),
                )
                .unwrap()
        };
        assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 10);
        let mut back = vec![0u8; size];
        let biov = iov(&mut back);
        // SAFETY: as above.
        unsafe {
            me.ep
                .readmsg(
                    &RmaMsg {
                        iov: &biov,
                        desc: &[],
                        addr: p,
                        rma_iov: &r,
                        context: 11,
                        data: 0,
                    },
                    OpFlags::empty(),
                )
                .unwrap()
        };
        assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 11);
        assert!(back == src, "RMA round trip of {size} bytes");
    }
    // A bad key is refused by the peer.
    let mut x = [0u8; 8];
    let xiov = iov(&mut x);
    let bad = [RmaIov {
        addr: 0,
        len: 8,
        key: KEY + 1,
    }];
    // SAFETY: as above.
    unsafe {
        me.ep
            .writemsg(
                &RmaMsg {
                    iov: &xiov,
                    desc: &[],
                    addr: p,
                    rma_iov: &bad,
                    context: 12,
                    data: 0,
                },
                OpFlags::empty(),
            )
            .unwrap()
    };
    assert_eq!(
        next(me.cq.as_ref(), &[]).unwrap_err().err,
        ErrorKind::KeyRejected
    );
    // Atomics executed by the peer: sum, then compare-and-swap.
    let mut one = 3u64.to_le_bytes();
    let oiov = iov(&mut one);
    let at = [RmaIov {
        addr: 64,
        len: 1,
        key: KEY,
    }];
    let mut old = [0u8; 8];
    let riov = iov(&mut old);
    let base = AtomicMsg {
        iov: &oiov,
        desc: &[],
        addr: p,
        rma_iov: &at,
        datatype: Datatype::Uint64,
        op: AtomicOp::Sum,
        result: &riov,
        compare: &[],
        context: 20,
        data: 0,
    };
    // SAFETY: as above.
    unsafe {
        me.ep.atomicmsg(&base, OpFlags::empty()).unwrap();
    }
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 20);
    let first = u64::from_le_bytes(old);
    let mut cmp = (first + 3).to_le_bytes();
    let ciov = iov(&mut cmp);
    let mut nine = 9u64.to_le_bytes();
    let niov = iov(&mut nine);
    let cas = AtomicMsg {
        iov: &niov,
        compare: &ciov,
        op: AtomicOp::Cswap,
        context: 21,
        ..base
    };
    // SAFETY: as above.
    unsafe { me.ep.atomicmsg(&cas, OpFlags::empty()).unwrap() };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 21);
    assert_eq!(u64::from_le_bytes(old), first + 3);
    let read = AtomicMsg {
        iov: &[],
        op: AtomicOp::AtomicRead,
        context: 22,
        ..base
    };
    // SAFETY: as above.
    unsafe { me.ep.atomicmsg(&read, OpFlags::empty()).unwrap() };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 22);
    assert_eq!(u64::from_le_bytes(old), 9);
    // Done: the peer closes normally and its region file goes away.
    let file = region_file(&peer.name);
    assert!(file.exists());
    me.ep.inject(b"quit", p, None).unwrap();
    settle(&[me.cq.as_ref()], 20);
    let status = wait_exit(&mut peer.child, Duration::from_secs(30));
    assert!(status.success(), "peer: {status}");
    assert!(!file.exists(), "the peer's region was removed at close");
}

#[test]
fn a_killed_peer_fails_pending_operations_and_its_region_is_removed() {
    let me = side(&info());
    let mut peer = spawn("sink", &me);
    let p = insert(&me, &peer.name);
    let file = region_file(&peer.name);
    // Rendezvous sends the peer never takes, and a read that may finish.
    let mut big = vec![1u8; 4 << 20];
    let siov = iov(&mut big);
    let mut back = vec![0u8; 8 << 20];
    let biov = iov(&mut back);
    let remote = [RmaIov {
        addr: 0,
        len: 8 << 20,
        key: KEY,
    }];
    // SAFETY: the buffers outlive the completions read below.
    unsafe {
        for i in 0..4 {
            me.ep
                .sendmsg(&msg(&siov, p, 0, 0, 100 + i), OpFlags::empty())
                .unwrap();
        }
        me.ep
            .readmsg(
                &RmaMsg {
                    iov: &biov,
                    desc: &[],
                    addr: p,
                    rma_iov: &remote,
                    context: 200,
                    data: 0,
                },
                OpFlags::empty(),
            )
            .unwrap();
    }
    settle(&[me.cq.as_ref()], 20);
    peer.child.kill().unwrap();
    let _ = peer.child.wait();
    let mut errors = 0;
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while done < 5 {
        let mut e = [CqEntry::default()];
        match me.cq.read(&mut e) {
            Ok(_) => {
                // Only the read may have finished before the kill.
                assert_eq!(e[0].context, 200);
                done += 1;
            }
            Err(err) if err.kind() == ErrorKind::Avail => {
                let ee = me.cq.readerr().unwrap();
                assert_eq!(ee.err, ErrorKind::ConnReset, "{ee:?}");
                errors += 1;
                done += 1;
            }
            Err(err) => assert_eq!(err.kind(), ErrorKind::Again),
        }
        assert!(
            Instant::now() < deadline,
            "{done} of 5 operations finished 30 s after the peer died"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(errors >= 4, "the sends fail ({errors} errors)");
    // The dead peer's region file is removed by the survivor.
    wait_gone(&file, Duration::from_secs(10), "after SIGKILL");
    // New operations towards it fail at once.
    // SAFETY: the buffers outlive the operation, whose completion is read below.
    let e = unsafe { me.ep.sendmsg(&msg(&siov, p, 0, 0, 300), OpFlags::empty()) };
    assert_eq!(e.unwrap_err().kind(), ErrorKind::ConnReset);
    // The endpoint still works: another peer can be reached.
    let other = side(&info());
    let o = insert(&me, &other.ep.getname().unwrap());
    let mut r = vec![0u8; 4];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        other
            .ep
            .recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
            .unwrap()
    };
    me.ep.inject(b"next", o, None).unwrap();
    assert_eq!(next(other.cq.as_ref(), &[]).unwrap().len, 4);
    assert_eq!(&r, b"next");
}

#[test]
fn regions_are_removed_after_close_and_after_a_kill_without_peers() {
    let me = side(&info());
    // A peer that closes its endpoint: the file goes at once, and its
    // name can no longer be reached.
    let mut closing = spawn("close", &me);
    let file = region_file(&closing.name);
    let l = closing.lines.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(l.contains("CLOSED"), "{l}");
    assert!(!file.exists(), "closed region removed");
    let p = insert(&me, &closing.name);
    let e = me.ep.inject(b"x", p, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoEnt, "the peer's region is gone: {e}");
    let _ = closing.child.kill();
    // A peer killed while idle (no one talking to it): the next fabric
    // opened by any process removes its region.
    let mut idle = spawn("idle", &me);
    let file = region_file(&idle.name);
    assert!(file.exists());
    idle.child.kill().unwrap();
    let _ = idle.child.wait();
    let _fabric = side(&info());
    assert!(!file.exists(), "killed peer's region reclaimed");
}

#[test]
fn a_peer_that_never_progresses_fills_its_ring_and_injects_get_again() {
    let me = side(&info());
    let peer = spawn("idle", &me);
    let p = insert(&me, &peer.name);
    let mut again = false;
    for _ in 0..10_000 {
        match me.ep.inject(b"0123456789", p, None) {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Again);
                again = true;
                break;
            }
        }
    }
    assert!(again, "a full ring answers FI_EAGAIN");
    // Queued operations are bounded by tx_attr.size.
    let mut one = [0u8; 100_000];
    let oiov = iov(&mut one);
    let mut queued = 0;
    let e = loop {
        // SAFETY: nothing reads `one` after the test: the peer never
        // takes these messages.
        match unsafe { me.ep.sendmsg(&msg(&oiov, p, 0, 0, 5), OpFlags::empty()) } {
            Ok(()) => queued += 1,
            Err(e) => break e,
        }
        assert!(queued <= 4096, "no limit on queued operations");
    };
    assert_eq!(e.kind(), ErrorKind::Again);
    assert!(queued >= 16, "queued {queued}");
    // Once the peer is gone, the queued sends fail and a full ring says
    // so.
    let mut peer = peer;
    peer.child.kill().unwrap();
    let _ = peer.child.wait();
    let mut failed = 0;
    while failed < queued {
        let e = next(me.cq.as_ref(), &[]).unwrap_err();
        assert_eq!(e.err, ErrorKind::ConnReset);
        failed += 1;
    }
    assert_eq!(
        me.ep.inject(b"0123456789", p, None).unwrap_err().kind(),
        ErrorKind::ConnReset
    );
}

/// A reader blocked in `sread` (manual progress, nothing else calling
/// in) sees every operation toward a peer that was killed fail within
/// 1 s: the engine's peer checks must run while it sleeps.
#[test]
fn a_blocked_reader_sees_a_killed_peer_fail_its_operations_within_a_second() {
    for role in ["idle", "sink"] {
        let me = side(&info());
        let mut peer = spawn(role, &me);
        let p = insert(&me, &peer.name);
        let mut big = vec![1u8; 1 << 20];
        let siov = iov(&mut big);
        // SAFETY: `big` outlives the completions read below.
        unsafe {
            for i in 0..4 {
                me.ep
                    .sendmsg(&msg(&siov, p, 0, 0, 100 + i), OpFlags::empty())
                    .unwrap();
            }
        }
        settle(&[me.cq.as_ref()], 20);
        peer.child.kill().unwrap();
        let killed = Instant::now();
        let _ = peer.child.wait();
        let mut failed = Vec::new();
        while failed.len() < 4 && killed.elapsed() < Duration::from_secs(5) {
            let mut e = [CqEntry::default()];
            match me.cq.sread(&mut e, Some(Duration::from_secs(5))) {
                Ok(_) => panic!("{role}: a send to a peer that took nothing succeeded: {e:?}"),
                Err(err) if err.kind() == ErrorKind::Avail => {
                    let ee = me.cq.readerr().unwrap();
                    assert_eq!(ee.err, ErrorKind::ConnReset, "{role}: {ee:?}");
                    failed.push(ee.entry.context);
                }
                Err(err) => assert_eq!(err.kind(), ErrorKind::Again, "{role}"),
            }
        }
        let took = killed.elapsed();
        failed.sort_unstable();
        assert_eq!(failed, [100, 101, 102, 103], "{role}: after {took:?}");
        assert!(
            took < Duration::from_secs(1),
            "{role}: the errors came {took:?} after the kill"
        );
    }
}
