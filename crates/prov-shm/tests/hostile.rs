//! Hostile commands: a peer can write anything into an endpoint's ring.
//! Malformed, forged and random commands (well-formed at the ring level,
//! nonsense at the provider level) must be dropped or refused, never
//! panic, hang or touch memory they should not; the endpoint keeps
//! working afterwards. In-process (the raw sender is this test) and from
//! another process.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use fabric_core::objects::{CqEntry, FiAddr, MrAccess};
use fabric_core::*;
use proptest::prelude::*;
use prov_shm::region::{PeerRegion, Region, RegionConfig};
use prov_shm::ring::{Command as Cmd, STEP, Sender, slot as ring_slot};

const ROLE: &str = "PROV_SHM_HOSTILE_ROLE";

// Ops and flags as the crate docs' command table gives them.
const HELLO: u16 = 1;
const MSG: u16 = 2;
const RTS: u16 = 3;
const CTS: u16 = 4;
const DATA: u16 = 5;
const ACK: u16 = 6;
const WRITE: u16 = 7;
const READ: u16 = 8;
const ATOMIC: u16 = 9;
const PUSH: u16 = 16;
const INLINE: u16 = 32;

fn name_of(a: &Address) -> String {
    a.to_string().trim_start_matches("fi_shm://").to_string()
}

/// A raw sender into `victim`'s ring.
fn raw(victim: &Side) -> Sender {
    let r = PeerRegion::attach(&name_of(&victim.ep.getname().unwrap())).unwrap();
    let s = r.sender();
    // Keep the mapping: the sender holds its own reference.
    drop(r);
    s
}

fn send(tx: &Sender, cmd: Cmd, payload: &[u8], drive: &Side) {
    for _ in 0..10_000 {
        match tx.try_send(&cmd, payload) {
            Ok(()) => return,
            Err(e) if e.kind() == ErrorKind::Again => {
                let _ = drive.cq.read(&mut []);
                let _ = drive.cq.readerr();
            }
            Err(e) => panic!("raw send: {e}"),
        }
    }
    panic!("the victim stopped draining its ring");
}

fn words(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Drains every completion and error completion of `s` (progress too).
fn drain(s: &Side) -> (usize, Vec<ErrorKind>) {
    let mut ok = 0;
    let mut errs = Vec::new();
    for _ in 0..200 {
        let mut e = [CqEntry::default(); 8];
        match s.cq.read(&mut e) {
            Ok(n) => ok += n,
            Err(x) if x.kind() == ErrorKind::Avail => errs.push(s.cq.readerr().unwrap().err),
            Err(_) => std::thread::sleep(Duration::from_micros(100)),
        }
    }
    (ok, errs)
}

/// The victim still delivers a real message from a real peer.
fn still_works(victim: &Side, friend: &Side) {
    let v_at_f = insert(friend, &victim.ep.getname().unwrap());
    let mut buf = [0u8; 5];
    let bi = iov(&mut buf);
    // A tagged receive only the friend's message matches (the garbage
    // may have left unexpected messages of its own).
    // SAFETY: `buf` outlives the completion.
    unsafe {
        victim
            .ep
            .trecvmsg(
                &msg(&bi, FiAddr::UNSPEC, 0x0a11_7e57, 0, 4242),
                OpFlags::empty(),
            )
            .unwrap()
    };
    friend
        .ep
        .tinject(b"alive", v_at_f, 0x0a11_7e57, None)
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let e = loop {
        match next(victim.cq.as_ref(), &[friend.cq.as_ref()]) {
            Ok(e) if e.context == 4242 => break e,
            Ok(_) | Err(_) => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the victim no longer delivers messages"
        );
    };
    assert_eq!(e.len, 5);
    assert_eq!(&buf, b"alive");
}

#[test]
fn malformed_and_forged_commands_are_dropped_or_refused() {
    let victim = side(&info());
    let friend = side(&info());
    let mut mem = vec![7u8; 4096];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe {
        reg(
            victim.domain.as_ref(),
            &mut mem,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            1,
        )
    };
    let tx = raw(&victim);
    let friend_name = name_of(&friend.ep.getname().unwrap());
    let c = |op: u16, src: u32| Cmd {
        op,
        src,
        ..Cmd::default()
    };
    // Before any introduction: dropped.
    send(&tx, c(MSG, 5), b"who am i", &victim);
    // Introductions that fail: oversized, not UTF-8, no such region, a
    // path, a region that is not the sender's.
    send(&tx, c(HELLO, 5), &[b'a'; 200], &victim);
    send(&tx, c(HELLO, 5), &[0xff, 0xfe], &victim);
    send(&tx, c(HELLO, 5), b"fabric-shm-0-1-2-ffff", &victim);
    send(&tx, c(HELLO, 5), b"../../etc/passwd", &victim);
    let foreign = Region::create(&RegionConfig::default()).unwrap();
    send(&tx, c(HELLO, 6), foreign.name().as_bytes(), &victim);
    send(&tx, c(MSG, 6), b"still unknown", &victim);
    // A valid introduction (the friend's region is this process's own).
    send(&tx, c(HELLO, 7), friend_name.as_bytes(), &victim);
    // Unknown ops and flags.
    send(&tx, c(0, 7), b"", &victim);
    send(&tx, c(77, 7), b"x", &victim);
    send(
        &tx,
        Cmd {
            flags: 0x8000,
            ..c(MSG, 7)
        },
        b"x",
        &victim,
    );
    // Answers naming no operation.
    for op in [ACK, CTS, DATA] {
        for flags in [0, 8] {
            send(
                &tx,
                Cmd {
                    flags,
                    tag: 0x1234_5678_9abc,
                    data: u64::MAX,
                    aux: [u64::MAX, 3],
                    ..c(op, 7)
                },
                &[1, 2, 3],
                &victim,
            );
        }
    }
    // Rendezvous requests with bad iovec lists, then one whose iovec
    // points to unmapped memory (the matched receive fails, the victim
    // does not).
    for payload in [vec![], vec![0u8; 7], vec![0u8; 17], vec![0u8; 200]] {
        send(
            &tx,
            Cmd {
                aux: [100, 1],
                ..c(RTS, 7)
            },
            &payload,
            &victim,
        );
    }
    send(
        &tx,
        Cmd {
            aux: [u64::MAX, 1],
            ..c(RTS, 7)
        },
        &words(&[0x1000, u64::MAX]),
        &victim,
    );
    let mut rbuf = vec![0u8; 70_000];
    let ri = iov(&mut rbuf);
    // SAFETY: `rbuf` outlives the receive.
    unsafe {
        victim
            .ep
            .recvmsg(&msg(&ri, FiAddr::UNSPEC, 0, 0, 99), OpFlags::empty())
            .unwrap()
    };
    send(
        &tx,
        Cmd {
            aux: [65536, 2],
            ..c(RTS, 7)
        },
        &words(&[0x10, 65536]),
        &victim,
    );
    // RMA and atomic descriptors: no ranges, too many, reserved bits,
    // inline data of the wrong length, unknown datatype, zero and huge
    // element counts; all refused.
    let bad_descs: Vec<(u16, u16, Vec<u8>)> = vec![
        (WRITE, INLINE, words(&[0])),
        (WRITE, INLINE, words(&[9])),
        (WRITE, INLINE, words(&[1 | 1 << 60, 0, 8, 1])),
        (WRITE, INLINE, words(&[1, 0, 8, 1, 5, 6])),
        (WRITE, PUSH, words(&[1, 4000, 200, 1])),
        (READ, PUSH, words(&[1, u64::MAX, 8, 1])),
        (READ, PUSH, words(&[1, 0, 8, 99])),
        (ATOMIC, 0, words(&[1 | 1 << 16 | 200 << 24, 0, 1, 1, 0])),
        (
            ATOMIC,
            0,
            words(&[1 | 1 << 16 | 7 << 24 | 2 << 32, 0, 0, 1]),
        ),
        (
            ATOMIC,
            0,
            words(&[1 | 1 << 16 | 7 << 24 | 2 << 32, 0, 100_000, 1]),
        ),
        (
            ATOMIC,
            0,
            words(&[1 | 1 << 16 | 7 << 24 | 12 << 32, 0, 1, 1, 5]),
        ),
    ];
    for (op, flags, payload) in bad_descs {
        send(
            &tx,
            Cmd {
                flags,
                tag: 55,
                ..c(op, 7)
            },
            &payload,
            &victim,
        );
    }
    let (_, errs) = drain(&victim);
    assert!(
        errs.contains(&ErrorKind::Fault),
        "the receive matched by the bogus rendezvous fails: {errs:?}"
    );
    assert!(
        mem[..4000].iter().all(|&b| b == 7),
        "no refused write landed"
    );
    // The refusals went to the friend's ring (the introduced region) as
    // ACKs for operations it never issued: it drops them.
    let (ok, errs) = drain(&friend);
    assert_eq!((ok, errs.len()), (0, 0));
    still_works(&victim, &friend);
    drop(mr);
    drop(foreign);
}

fn random_cmd(rng: &mut impl FnMut() -> u64, src: u32) -> (Cmd, Vec<u8>) {
    let pick = |r: u64| match r % 5 {
        0 => 0,
        1 => r % 8,
        2 => u64::MAX - r % 4,
        3 => r % 100_000,
        _ => r,
    };
    let op = (rng() % 11) as u16;
    let mut flags = match rng() % 3 {
        0 => 0,
        1 => (rng() % 64) as u16,
        _ => rng() as u16,
    };
    if op == READ {
        // A read asks the target to write the initiator's memory by
        // cross-memory attach; here the "initiator" would be this very
        // process, so keep it in push mode.
        flags |= PUSH;
    }
    let cmd = Cmd {
        op,
        flags,
        src,
        tag: pick(rng()),
        data: pick(rng()),
        aux: [pick(rng()), pick(rng())],
    };
    let n = (rng() % 40) as usize;
    let mut payload: Vec<u8> = Vec::new();
    if rng() % 2 == 0 && op != HELLO {
        // Descriptor-like: a plausible head word, then random words.
        let head =
            (1 + rng() % 4) | ((rng() % 3) << 8) | ((rng() % 2) << 16) | ((rng() % 12) << 24);
        payload.extend(head.to_le_bytes());
        for _ in 0..n {
            payload.extend(pick(rng()).to_le_bytes());
        }
    } else {
        payload.extend((0..n * 3).map(|_| rng() as u8));
    }
    (cmd, payload)
}

fn random_case(seed: u64) {
    {
        let victim = side(&info());
        let friend = side(&info());
        let mut mem = vec![0u8; 1 << 16];
        // SAFETY: the buffer is declared before the region, so it outlives it.
        let mr = unsafe {
            reg(
                victim.domain.as_ref(),
                &mut mem,
                MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
                1,
            )
        };
        let mut rbufs = vec![vec![0u8; 4096]; 4];
        for (i, b) in rbufs.iter_mut().enumerate() {
            let v = iov(b);
            // SAFETY: the buffers outlive the endpoint.
            unsafe {
                if i % 2 == 0 {
                    victim
                        .ep
                        .recvmsg(&msg(&v, FiAddr::UNSPEC, 0, 0, i as u64), OpFlags::empty())
                } else {
                    victim.ep.trecvmsg(
                        &msg(&v, FiAddr::UNSPEC, i as u64, 0, i as u64),
                        OpFlags::empty(),
                    )
                }
                .unwrap();
            }
        }
        let tx = raw(&victim);
        let mut x = seed | 1;
        let mut rng = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        send(
            &tx,
            Cmd {
                op: HELLO,
                src: 3,
                ..Cmd::default()
            },
            name_of(&friend.ep.getname().unwrap()).as_bytes(),
            &victim,
        );
        for _ in 0..200 {
            let (cmd, payload) = random_cmd(&mut rng, 3);
            send(&tx, cmd, &payload, &victim);
        }
        drain(&victim);
        drain(&friend);
        still_works(&victim, &friend);
        drop(mr);
    }
}
proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn random_commands_never_panic(seed in any::<u64>()) {
        random_case(seed);
    }
}

/// The other process: introduces itself with a region of its own, then
/// fires random commands (rendezvous and RMA requests naming its own
/// memory, at random) and exits.
fn hostile_child() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let victim = PeerRegion::attach(line.trim()).unwrap();
    let tx = victim.sender();
    let mine = Region::create(&RegionConfig::default()).unwrap();
    let seed = (u64::from(std::process::id()) * 0x9e37_79b9) | 1;
    let mut x = seed;
    let mut rng = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let hello = Cmd {
        op: HELLO,
        src: 1,
        ..Cmd::default()
    };
    let push = |c: &Cmd, p: &[u8]| {
        // A deadline, not a count of tries: the parent drains the ring
        // whenever a loaded machine lets it run.
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(30) {
            match tx.try_send(c, p) {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        panic!("the victim stopped draining its ring");
    };
    push(&hello, mine.name().as_bytes());
    for _ in 0..3000 {
        let (mut cmd, payload) = random_cmd(&mut rng, 1);
        cmd.flags &= !PUSH;
        push(&cmd, &payload);
    }
    println!("@@done");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
}

#[test]
fn a_hostile_process_cannot_break_an_endpoint() {
    if std::env::var(ROLE).is_ok() {
        return hostile_child();
    }
    let victim = side(&info());
    let friend = side(&info());
    let mut mem = vec![0u8; 1 << 16];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe {
        reg(
            victim.domain.as_ref(),
            &mut mem,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            1,
        )
    };
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "a_hostile_process_cannot_break_an_endpoint",
            "--nocapture",
        ])
        .env(ROLE, "child")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", name_of(&victim.ep.getname().unwrap())).unwrap();
    stdin.flush().unwrap();
    let out = child.stdout.take().unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if l.contains("@@done") {
                let _ = done_tx.send(());
            }
        }
    });
    // Keep progressing while the child fires, and until it exits: it
    // must have sent everything and exited well (a child that panicked,
    // or found the victim's ring stuck, fails the test).
    let start = std::time::Instant::now();
    let mut done = false;
    let status = loop {
        drain(&victim);
        done |= done_rx.try_recv().is_ok();
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the hostile child did not finish within 120 s");
        }
    };
    // The reader thread may see the marker after the exit.
    done |= done_rx.recv_timeout(Duration::from_secs(5)).is_ok();
    assert!(status.success(), "the hostile child failed: {status}");
    assert!(done, "the hostile child exited without sending everything");
    drain(&victim);
    still_works(&victim, &friend);
    drop(mr);
}

/// The victim's region file, mapped here to write what a hostile peer
/// writes.
fn map_region(victim: &Side) -> (memmap2::MmapRaw, prov_shm::region::Layout) {
    let name = name_of(&victim.ep.getname().unwrap());
    let layout = PeerRegion::attach(&name).unwrap().layout();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(std::path::Path::new(prov_shm::region::SHM_DIR).join(&name))
        .unwrap();
    let map = memmap2::MmapOptions::new()
        .len(layout.total_size())
        .map_raw(&file)
        .unwrap();
    (map, layout)
}

/// Sets the fill mark of every bounce buffer named by a committed stepped
/// command of `len` bytes in the victim's ring to `mark`, as a sender that
/// stopped copying would leave it. Returns how many it set.
fn stall_stepped(victim: &Side, len: u32, mark: u32) -> usize {
    use std::sync::atomic::{AtomicU32, Ordering};
    let (map, l) = map_region(victim);
    let word = |off: usize| {
        assert!(off % 4 == 0 && off + 4 <= l.total_size());
        // SAFETY: in bounds and aligned; the region is shared memory that
        // both sides access atomically.
        unsafe { AtomicU32::from_ptr(map.as_mut_ptr().add(off).cast()) }
    };
    let mut n = 0;
    for i in 0..l.ring_slots() as usize {
        let s = l.ring_offset() + i * l.slot_size();
        let (flags, op, size, b) = (
            word(s + ring_slot::RING_FLAGS).load(Ordering::Acquire),
            word(s + ring_slot::OP).load(Ordering::Acquire) & 0xffff,
            word(s + ring_slot::LEN).load(Ordering::Acquire),
            word(s + ring_slot::BOUNCE).load(Ordering::Acquire),
        );
        if flags & ring_slot::STEPPED != 0 && op == u32::from(MSG) && size == len {
            // The fill mark: the buffer's first metadata word.
            word(l.bounce_meta_offset() + b as usize * 8).store(mark, Ordering::Release);
            n += 1;
        }
    }
    n
}

/// Sends `body` from sender 7 through `tx` as a stepped message, then
/// sets its fill mark back to `mark`, as a sender that stopped copying
/// there would leave it.
fn send_stalled(tx: &Sender, victim: &Side, body: &[u8], mark: usize) {
    let cmd = Cmd {
        op: MSG,
        src: 7,
        ..Cmd::default()
    };
    tx.try_send_parts_stepped(&cmd, &[body]).unwrap();
    assert_eq!(stall_stepped(victim, body.len() as u32, mark as u32), 1);
}

/// Posts an untagged receive of `buf` with context `ctx` on `s`.
///
/// # Safety
///
/// `buf` must outlive the receive's completion (or its cancellation).
unsafe fn post_recv(s: &Side, buf: &mut [u8], ctx: u64) {
    let bi = iov(buf);
    // SAFETY: the caller's contract.
    unsafe {
        s.ep.recvmsg(&msg(&bi, FiAddr::UNSPEC, 0, 0, ctx), OpFlags::empty())
            .unwrap()
    };
}

/// A victim, a friend, and a raw sender into the victim's ring that
/// introduced itself (as sender 7) with the friend's region.
fn introduced() -> (Side, Side, Sender) {
    let victim = side(&info());
    let friend = side(&info());
    let tx = raw(&victim);
    let friend_name = name_of(&friend.ep.getname().unwrap());
    let hello = Cmd {
        op: HELLO,
        src: 7,
        ..Cmd::default()
    };
    send(&tx, hello, friend_name.as_bytes(), &victim);
    drain(&victim);
    (victim, friend, tx)
}

#[test]
fn a_stalled_stepped_message_fails_its_receive_and_the_ring_moves_on() {
    let (victim, friend, tx) = introduced();
    let len = 65_536;
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` outlives the completion.
    unsafe { post_recv(&victim, &mut buf, 77) };
    let body = pattern(len, 9);
    // The sender stopped after two steps (it is this process, alive).
    send_stalled(&tx, &victim, &body, 2 * STEP);
    let start = std::time::Instant::now();
    let err = loop {
        let (ok, errs) = drain(&victim);
        assert_eq!(ok, 0, "a receive completed without its message");
        if let Some(&e) = errs.first() {
            break e;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the stalled message was never given up"
        );
    };
    assert_eq!(err, ErrorKind::Io);
    // The steps that landed were delivered into the receive meanwhile.
    assert!(buf[..2 * STEP] == body[..2 * STEP]);
    // The ring moved on.
    still_works(&victim, &friend);
}

#[test]
fn an_unmatched_stalled_stepped_message_is_dropped() {
    let (victim, friend, tx) = introduced();
    let len = 40_000;
    send_stalled(&tx, &victim, &pattern(len, 3), STEP);
    let start = std::time::Instant::now();
    // Waits (no receive is posted; a kept message is copied whole), then
    // given up: the ring moves on, nothing is completed.
    while start.elapsed() < Duration::from_secs(4) {
        let (ok, errs) = drain(&victim);
        assert_eq!((ok, errs.len()), (0, 0));
    }
    still_works(&victim, &friend);
    // The dropped message is not delivered to a later receive.
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` outlives the completion.
    unsafe { post_recv(&victim, &mut buf, 78) };
    let (ok, errs) = drain(&victim);
    assert_eq!((ok, errs.len()), (0, 0));
    victim.ep.cancel(78).unwrap();
    let (_, errs) = drain(&victim);
    assert_eq!(errs, vec![ErrorKind::Canceled]);
}

#[test]
fn a_stalled_message_of_a_real_sender_fails_on_both_sides() {
    let victim = side(&info());
    let friend = side(&info());
    let v_at_f = insert(&friend, &victim.ep.getname().unwrap());
    let len = 65_536;
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` outlives the completion.
    unsafe { post_recv(&victim, &mut buf, 301) };
    let body = pattern(len, 5);
    // SAFETY: `body` outlives the send, awaited below. Alone, the message
    // goes eagerly and stepped, and asks for an `ACK`.
    unsafe { send_body(&friend, v_at_f, &body, None, 300) };
    // The friend's progress sends it; the victim has not looked yet.
    let start = std::time::Instant::now();
    while stall_stepped(&victim, len as u32, 3 * STEP as u32) == 0 {
        let (ok, errs) = drain(&friend);
        assert_eq!((ok, errs.len()), (0, 0));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the message was not sent"
        );
    }
    // Each side gets exactly one completion, an error.
    let (mut recv_errs, mut send_errs) = (Vec::new(), Vec::new());
    while recv_errs.is_empty() || send_errs.is_empty() {
        let (ok, errs) = drain(&victim);
        assert_eq!(ok, 0);
        recv_errs.extend(errs);
        let (ok, errs) = drain(&friend);
        assert_eq!(ok, 0);
        send_errs.extend(errs);
        assert!(start.elapsed() < Duration::from_secs(30), "no completions");
    }
    let (ok_v, more_v) = drain(&victim);
    let (ok_f, more_f) = drain(&friend);
    assert_eq!((ok_v, ok_f, more_v.len(), more_f.len()), (0, 0, 0, 0));
    assert_eq!(recv_errs, vec![ErrorKind::Io]);
    assert_eq!(send_errs, vec![ErrorKind::Io]);
    assert!(buf[..3 * STEP] == body[..3 * STEP]);
    still_works(&victim, &friend);
}

/// Sends `body` from `s` to `dest` with context `ctx`: tagged with `tag`,
/// or untagged.
///
/// # Safety
///
/// `body` must outlive the send's completion (or the endpoint).
unsafe fn send_body(s: &Side, dest: FiAddr, body: &[u8], tag: Option<u64>, ctx: u64) {
    let v = [objects::IoVec {
        addr: body.as_ptr().cast_mut(),
        len: body.len(),
    }];
    let m = msg(&v, dest, tag.unwrap_or(0), 0, ctx);
    // SAFETY: the caller's contract.
    let r = unsafe {
        match tag {
            Some(_) => s.ep.tsendmsg(&m, OpFlags::empty()),
            None => s.ep.sendmsg(&m, OpFlags::empty()),
        }
    };
    r.unwrap();
}

/// Posts a receive of `buf` for tag `tag` with context `ctx` on `s`.
///
/// # Safety
///
/// `buf` must outlive the receive's completion (or its cancellation).
unsafe fn post_trecv(s: &Side, buf: &mut [u8], tag: u64, ctx: u64) {
    let bi = iov(buf);
    // SAFETY: the caller's contract.
    unsafe {
        s.ep.trecvmsg(&msg(&bi, FiAddr::UNSPEC, tag, 0, ctx), OpFlags::empty())
            .unwrap()
    };
}

#[test]
fn a_closed_peers_last_messages_behind_a_stalled_message_are_delivered() {
    const TAG: u64 = 0x7e57_c105;
    let (victim, _friend, tx) = introduced();
    let closer = side(&info());
    let v_at_c = insert(&closer, &victim.ep.getname().unwrap());
    let mut bufs = [[0u8; 4]; 3];
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: `bufs` outlives the completions, awaited below.
        unsafe { post_trecv(&victim, b, TAG, 600 + i as u64) };
    }
    // The victim learns the closer from a first message.
    closer.ep.tinject(b"one!", v_at_c, TAG, None).unwrap();
    let (ok, errs) = drain(&victim);
    assert_eq!((ok, errs.len()), (1, 0));
    // A stepped message that no receive matches stalls at the ring's head
    // (its sender, this process, stopped after the first step) ...
    let len = 40_000;
    send_stalled(&tx, &victim, &pattern(len, 3), STEP);
    // ... the closer's last two messages land behind it, and it closes.
    closer.ep.tinject(b"two!", v_at_c, TAG, None).unwrap();
    closer.ep.tinject(b"3333", v_at_c, TAG, None).unwrap();
    drop(closer);
    // The liveness checks see the closer gone while the head still waits;
    // once the stalled message is given up, its messages are delivered.
    let start = std::time::Instant::now();
    let mut got = 0;
    while got < 2 {
        let (ok, errs) = drain(&victim);
        assert_eq!(errs.len(), 0);
        got += ok;
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the closed peer's last messages were lost ({got} of 2 delivered)"
        );
    }
    assert_eq!(got, 2);
    assert_eq!(bufs, [*b"one!", *b"two!", *b"3333"]);
}

#[test]
fn a_receive_being_filled_fails_when_a_peer_rewrites_its_slot() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let (victim, friend, tx) = introduced();
    let len = 65_536;
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` outlives the completion.
    unsafe { post_recv(&victim, &mut buf, 88) };
    send_stalled(&tx, &victim, &pattern(len, 4), 2 * STEP);
    // The victim matches it and copies the two steps in.
    let (ok, errs) = drain(&victim);
    assert_eq!((ok, errs.len()), (0, 0));
    // A peer sets an unknown ring flag on the slot: the next look drops it
    // as malformed, and the receive fails at once (not at the next
    // command, nor never).
    let (map, l) = map_region(&victim);
    let mut rewritten = 0;
    for i in 0..l.ring_slots() as usize {
        let at = l.ring_offset() + i * l.slot_size() + ring_slot::RING_FLAGS;
        // SAFETY: in bounds and aligned; shared memory accessed atomically.
        let flags = unsafe { AtomicU32::from_ptr(map.as_mut_ptr().add(at).cast()) };
        if flags.load(Ordering::Acquire) & ring_slot::STEPPED != 0 {
            flags.fetch_or(1 << 31, Ordering::AcqRel);
            rewritten += 1;
        }
    }
    assert_eq!(rewritten, 1);
    let start = std::time::Instant::now();
    let mut errs = Vec::new();
    while errs.is_empty() && start.elapsed() < Duration::from_secs(1) {
        let (ok, e) = drain(&victim);
        assert_eq!(ok, 0);
        errs.extend(e);
    }
    assert_eq!(errs, vec![ErrorKind::Io]);
    let (ok, more) = drain(&victim);
    assert_eq!((ok, more.len()), (0, 0));
    still_works(&victim, &friend);
}

/// The pid of a process that has exited (and was waited for).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Marks every bounce buffer of `victim` as held by `pid` and empties the
/// free list, as a sender that took them all and died before committing
/// a command would leave the pool. Returns how many it took.
fn take_all_buffers(victim: &Side, pid: u32) -> u32 {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    let (map, l) = map_region(victim);
    for i in 0..l.bounce_count() as usize {
        let at = l.bounce_meta_offset() + i * 8 + 4;
        // SAFETY: in bounds and aligned; shared memory accessed atomically.
        let holder = unsafe { AtomicU32::from_ptr(map.as_mut_ptr().add(at).cast()) };
        holder.store(pid, Ordering::Release);
    }
    let at = prov_shm::region::offsets::BOUNCE_FREE;
    // SAFETY: as above; the free-list head is a u64 at an 8-aligned offset.
    let head = unsafe { AtomicU64::from_ptr(map.as_mut_ptr().add(at).cast()) };
    let h = head.load(Ordering::Acquire);
    head.store(
        ((h >> 32) + 1) << 32 | u64::from(u32::MAX),
        Ordering::Release,
    );
    l.bounce_count()
}

#[test]
fn buffers_of_a_sender_that_died_before_sending_return_to_the_pool() {
    let victim = side(&info());
    let friend = side(&info());
    let v_at_f = insert(&friend, &victim.ep.getname().unwrap());
    assert!(take_all_buffers(&victim, dead_pid()) > 0);
    // Larger than a ring slot holds: the message needs a bounce buffer.
    let len = 3 * 4096;
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` outlives the completion, awaited below.
    unsafe { post_recv(&victim, &mut buf, 401) };
    let body = pattern(len, 6);
    // SAFETY: `body` outlives the send, awaited below.
    unsafe { send_body(&friend, v_at_f, &body, None, 400) };
    // The victim's checks see the pool dry and its holder dead: the
    // buffers go back, and the message goes through.
    let start = std::time::Instant::now();
    let (mut recv_ok, mut send_ok) = (0, 0);
    while recv_ok == 0 || send_ok == 0 {
        let (ok, errs) = drain(&victim);
        assert_eq!(errs, vec![]);
        recv_ok += ok;
        let (ok, errs) = drain(&friend);
        assert_eq!(errs, vec![]);
        send_ok += ok;
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the dead sender's buffers never came back ({recv_ok} received, {send_ok} sent)"
        );
    }
    assert_eq!((recv_ok, send_ok), (1, 1));
    assert!(buf == body);
    still_works(&victim, &friend);
}

#[test]
fn a_gone_peer_is_forgotten_while_stalled_senders_take_turns_at_the_head() {
    const TAG: u64 = 0x0907_7e57;
    let (victim, _friend, tx) = introduced();
    let closer = side(&info());
    let v_at_c = insert(&closer, &victim.ep.getname().unwrap());
    // The closer announces a message too large to send eagerly; no
    // receive takes it, so the victim keeps the announcement (its bytes
    // stay with the sender).
    let body = pattern(1 << 20, 2);
    // SAFETY: `body` outlives the test; the send never completes (its
    // endpoint closes first).
    unsafe { send_body(&closer, v_at_c, &body, Some(TAG), 500) };
    drain(&closer);
    drain(&victim);
    // A stepped message whose sender stopped holds the ring's head; the
    // closer goes, and the checks see it gone while the head waits.
    send_stalled(&tx, &victim, &pattern(40_000, 3), STEP);
    drop(closer);
    // A few checks (every 100 ms) see it gone.
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(400) {
        let (ok, errs) = drain(&victim);
        assert_eq!((ok, errs.len()), (0, 0));
    }
    // Another stalled message lands behind: when the first is given up,
    // the head waits again (for this one), past every command the closer
    // could have sent.
    send_stalled(&tx, &victim, &pattern(40_064, 4), STEP);
    let start = std::time::Instant::now();
    while start.elapsed() < engine_fill_patience() + Duration::from_millis(800) {
        let (ok, errs) = drain(&victim);
        assert_eq!((ok, errs.len()), (0, 0));
    }
    // The closer is forgotten by now, its announcement with it: a receive
    // for it finds nothing and stays posted (while the head kept waiting
    // it was not forgotten, and the receive took the announcement).
    let mut buf = vec![0u8; body.len()];
    // SAFETY: `buf` outlives the receive, cancelled below.
    unsafe { post_trecv(&victim, &mut buf, TAG, 501) };
    let (ok, errs) = drain(&victim);
    assert_eq!((ok, errs.len()), (0, 0));
    let r = victim.ep.cancel(501);
    assert!(
        r.is_ok(),
        "the receive took the gone peer's announcement: the peer was not forgotten ({r:?})"
    );
    let (ok, errs) = drain(&victim);
    assert_eq!((ok, errs), (0, vec![ErrorKind::Canceled]));
}

/// How long the victim waits for a stalled stepped message before giving
/// it up (the crate's `FILL_PATIENCE`).
fn engine_fill_patience() -> Duration {
    Duration::from_secs(2)
}
