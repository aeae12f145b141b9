//! The unexpected-message budget: an endpoint that posts no receives
//! keeps a bounded amount of unexpected data, applies flow control to the
//! senders that bring more (well-behaved ones are paused, a hostile one
//! finds the ring full), loses nothing it accepted, and lets a sender
//! below its reserve through while another floods.
//!
//! The hostile sender is another process (this test binary re-run with a
//! role in the environment) writing `MSG` commands straight into the
//! victim's ring, never reading its own.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::{CqEntry, FiAddr, IoVec, Msg};
use fabric_core::*;
use prov_shm::region::{PeerRegion, Region, RegionConfig};
use prov_shm::ring::Command as Cmd;

const ROLE: &str = "PROV_SHM_UNEXP_ROLE";
/// Bounds waits against hangs only (nothing is timed).
const LIMIT: Duration = Duration::from_secs(60);

const HELLO: u16 = 1;
const MSG: u16 = 2;
const TAGGED: u16 = 1;

/// The provider's budget (`UNEXP_BUDGET`, crate docs).
const BUDGET: usize = 8 << 20;

/// The tests of this file run one at a time: the hostile one measures
/// this process's memory, which the others' message bodies would inflate.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Resident memory of this process, in bytes.
fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// CPU time (user + system) this process has used, in clock ticks.
fn cpu_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &s[s.rfind(')').unwrap() + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime); `f[0]` is field 3.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The bytes of message `i` (its number first, then a pattern).
fn body(i: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|k| (i as usize).wrapping_mul(31).wrapping_add(k) as u8)
        .collect();
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

fn msg<'a>(iov: &'a [IoVec], addr: FiAddr, tag: u64, context: u64) -> Msg<'a> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore: 0,
        context,
        data: 0,
    }
}

/// Posts a tagged receive of `buf` for `tag`.
fn post(s: &Side, buf: &mut [u8], tag: u64, context: u64) {
    let iov = [IoVec {
        addr: buf.as_mut_ptr(),
        len: buf.len(),
    }];
    // SAFETY: the caller keeps `buf` alive until its completion is read.
    unsafe {
        s.ep.trecvmsg(&msg(&iov, FiAddr::UNSPEC, tag, context), OpFlags::empty())
    }
    .unwrap();
}

/// Receives `n` messages of `len` bytes with `tag` at `s` (driving
/// `others` too) and checks that they are `first..first + n`, in order.
fn receive_in_order(s: &Side, others: &[&Side], tag: u64, first: u64, n: u64, len: usize) {
    let mut buf = vec![0u8; len];
    for i in first..first + n {
        post(s, &mut buf, tag, i);
        let mut drive: Vec<&dyn fabric_core::objects::CompletionQueue> =
            others.iter().map(|o| o.cq.as_ref()).collect();
        drive.push(s.cq.as_ref());
        let e = next(s.cq.as_ref(), &drive).unwrap_or_else(|e| panic!("message {i}: {e:?}"));
        assert_eq!(e.context, i, "completion order");
        assert_eq!(e.len, len, "message {i} length");
        let got = u64::from_le_bytes(buf[..8].try_into().unwrap());
        assert_eq!(got, i, "message {i} arrived out of order");
        assert!(buf == body(i, len), "message {i} corrupted");
    }
}

/// Drains transmit completions of `s` (and progresses it).
fn reap(s: &Side) -> usize {
    let mut e = [CqEntry::default(); 64];
    let mut n = 0;
    while let Ok(k) = s.cq.read(&mut e) {
        if k == 0 {
            break;
        }
        n += k;
    }
    let _ = s.cq.readerr();
    n
}

/// One `tsendmsg` attempt.
fn try_send(s: &Side, to: FiAddr, tag: u64, data: &[u8], context: u64) -> Result<()> {
    let iov = [IoVec {
        addr: data.as_ptr().cast_mut(),
        len: data.len(),
    }];
    // SAFETY: `data` stays alive until the send's completion is reaped
    // (the callers keep every message body until the end).
    unsafe {
        s.ep.tsendmsg(&msg(&iov, to, tag, context), OpFlags::empty())
    }
}

// ---------------------------------------------------------------------
// A hostile process.

/// The child: attaches the victim's region (name on stdin), introduces
/// itself with a region of its own, then pushes `MSG` commands of 16 KiB
/// as fast as the ring takes them, never reading its own ring (so it
/// ignores any `PAUSE`). It stops after 256 MiB, or once the ring stayed
/// full for a while, says how many went in, and waits for stdin to close.
fn hostile_child() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let victim = PeerRegion::attach(line.trim()).unwrap();
    let tx = victim.sender();
    let mine = Region::create(&RegionConfig::default()).unwrap();
    let hello = Cmd {
        op: HELLO,
        src: 1,
        ..Cmd::default()
    };
    tx.try_send(&hello, mine.name().as_bytes()).unwrap();
    let len = 16 << 10;
    let mut sent = 0u64;
    let mut full_since: Option<Instant> = None;
    while sent < (256 << 20) / len as u64 {
        let cmd = Cmd {
            op: MSG,
            flags: TAGGED,
            src: 1,
            tag: 7,
            ..Cmd::default()
        };
        match tx.try_send(&cmd, &body(sent, len)) {
            Ok(()) => {
                sent += 1;
                full_since = None;
            }
            Err(e) if e.kind() == ErrorKind::Again => {
                // The victim stopped taking: back-pressure. Give up once
                // it lasted (the parent keeps progressing meanwhile).
                let t = *full_since.get_or_insert_with(Instant::now);
                if t.elapsed() > Duration::from_secs(2) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
    println!("@@sent {sent}");
    std::io::stdout().flush().unwrap();
    // Stay alive (a sender that exits is forgotten, with what is still in
    // the ring) until the parent is done.
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
}

#[test]
fn a_hostile_flood_of_unexpected_messages_stays_bounded_and_loses_nothing() {
    if std::env::var(ROLE).is_ok() {
        return hostile_child();
    }
    let _one = serial();
    let victim = side(&info());
    // Warm up: the region and a few receives, so the baseline includes
    // what any endpoint touches.
    let _ = victim.cq.read(&mut []);
    let before = rss();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "a_hostile_flood_of_unexpected_messages_stays_bounded_and_loses_nothing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "child")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let name = victim.ep.getname().unwrap().to_string();
    writeln!(stdin, "{}", name.trim_start_matches("fi_shm://")).unwrap();
    stdin.flush().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if let Some(at) = l.find("@@sent ") {
                let _ = tx.send(l[at + 7..].trim().parse::<u64>().unwrap());
            }
        }
    });
    // Progress (no receives posted) while the child floods.
    let end = Instant::now() + LIMIT;
    let sent = loop {
        let _ = victim.cq.read(&mut []);
        if let Ok(n) = rx.try_recv() {
            break n;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the hostile child exited early: {st}");
        }
        assert!(Instant::now() < end, "the hostile child never finished");
        std::thread::sleep(Duration::from_micros(50));
    };
    for _ in 0..1000 {
        let _ = victim.cq.read(&mut []);
    }
    let after = rss();
    let grew = after.saturating_sub(before);
    println!(
        "hostile flood: {sent} messages of 16 KiB accepted ({} MiB), RSS {} -> {} MiB (+{} MiB)",
        sent * 16 / 1024,
        before >> 20,
        after >> 20,
        grew >> 20
    );
    assert!(
        sent * (16 << 10) > 2 * BUDGET as u64,
        "the flood did not even exceed the budget ({sent} messages): nothing was tested"
    );
    assert!(
        grew < 64 << 20,
        "RSS grew by {} MiB under an unexpected-message flood",
        grew >> 20
    );
    // With the ring held (the flood's next message left in it), a
    // blocking read sleeps instead of spinning on that message. Reported,
    // not asserted (no timed assertions): ticks of CPU over the wait.
    let (t0, c0) = (Instant::now(), cpu_ticks());
    let mut e = [CqEntry::default(); 1];
    let r = victim.cq.sread(&mut e, Some(Duration::from_millis(500)));
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::Again),
        "a completion while no receive is posted: {r:?}"
    );
    println!(
        "blocking read over a held ring: {} CPU ticks in {:?}",
        cpu_ticks() - c0,
        t0.elapsed()
    );
    // Everything accepted (buffered, or still in the ring) arrives intact
    // and in order once receives are posted.
    receive_in_order(&victim, &[], 7, 0, sent, 16 << 10);
    drop(stdin);
    let _ = child.wait();
}

// ---------------------------------------------------------------------
// Well-behaved senders.

#[test]
fn a_well_behaved_flood_larger_than_the_budget_loses_nothing() {
    let _one = serial();
    let (a, b, b_at_a, _) = pair();
    let len = 8 << 10;
    let n = (3 * BUDGET / len) as u64;
    let bodies: Vec<Vec<u8>> = (0..n).map(|i| body(i, len)).collect();
    // Send everything; the receiver posts no receive until the sender is
    // stuck (paused), and then a batch at a time.
    let mut received = 0u64;
    let mut first_stall: Option<u64> = None;
    let mut buf = vec![0u8; len];
    for i in 0..n {
        let mut tries = 0u64;
        loop {
            match try_send(&a, b_at_a, 3, &bodies[i as usize], i) {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::Again => {
                    reap(&a);
                    let _ = b.cq.read(&mut []);
                    tries += 1;
                    if tries % 2000 == 0 {
                        // Stuck: the receiver takes a batch.
                        first_stall.get_or_insert(i);
                        let upto = (received + 64).min(i);
                        assert!(upto > received, "stuck with nothing to receive");
                        for k in received..upto {
                            post(&b, &mut buf, 3, k);
                            let e = next(b.cq.as_ref(), &[a.cq.as_ref(), b.cq.as_ref()])
                                .unwrap_or_else(|e| panic!("message {k}: {e:?}"));
                            assert_eq!(e.context, k);
                            assert!(buf == bodies[k as usize], "message {k} corrupted");
                        }
                        received = upto;
                    }
                    assert!(tries < 10_000_000, "send {i} never went through");
                }
                Err(e) => panic!("send {i}: {e}"),
            }
        }
        reap(&a);
    }
    let stall = first_stall.expect("the receiver never paused the sender");
    println!(
        "well-behaved flood: {n} messages of 8 KiB; the sender was first held after {stall} ({} MiB unexpected)",
        stall * 8 / 1024
    );
    assert!(
        stall * len as u64 >= BUDGET as u64,
        "paused before the budget was used ({stall} messages)"
    );
    receive_in_order(&b, &[&a], 3, received, n - received, len);
    for _ in 0..100 {
        reap(&a);
    }
}

#[test]
fn a_flooding_sender_does_not_starve_another() {
    let _one = serial();
    let i = info();
    let b = side(&i);
    let a = side(&i);
    let c = side(&i);
    let bname = b.ep.getname().unwrap();
    let b_at_a = insert(&a, &bname);
    let b_at_c = insert(&c, &bname);
    let len = 8 << 10;
    let bodies: Vec<Vec<u8>> = (0..(4 * BUDGET / len) as u64)
        .map(|k| body(k, len))
        .collect();
    // `a` floods until it is held back.
    let mut sent = 0u64;
    let mut again = 0u64;
    while again < 5000 && (sent as usize) < bodies.len() {
        match try_send(&a, b_at_a, 1, &bodies[sent as usize], sent) {
            Ok(()) => {
                sent += 1;
                again = 0;
            }
            Err(e) if e.kind() == ErrorKind::Again => {
                again += 1;
                reap(&a);
                let _ = b.cq.read(&mut []);
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        (sent as usize) < bodies.len(),
        "the flooding sender was never held back"
    );
    // A paused sender blocking on its CQ sleeps (the `RESUME` it waits
    // for would wake it). Reported, not asserted.
    reap(&a);
    let (t0, c0) = (Instant::now(), cpu_ticks());
    let mut e = [CqEntry::default(); 1];
    let r = a.cq.sread(&mut e, Some(Duration::from_millis(300)));
    println!(
        "paused sender's blocking read: {r:?}, {} CPU ticks in {:?}",
        cpu_ticks() - c0,
        t0.elapsed()
    );
    // `c` still gets its messages through, and `b` receives them while
    // all of `a`'s are still waiting.
    let small: Vec<Vec<u8>> = (0..16).map(|k| body(k, 512)).collect();
    for (k, m) in small.iter().enumerate() {
        let mut tries = 0;
        loop {
            match try_send(&c, b_at_c, 2, m, k as u64) {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::Again => {
                    reap(&c);
                    reap(&a);
                    let _ = b.cq.read(&mut []);
                    tries += 1;
                    assert!(tries < 1_000_000, "the second sender was starved");
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    receive_in_order(&b, &[&a, &c], 2, 0, 16, 512);
    // Then everything `a` sent, in order; then the rest of its flood.
    receive_in_order(&b, &[&a, &c], 1, 0, sent, len);
    for _ in 0..100 {
        reap(&a);
        reap(&c);
    }
}

#[test]
fn remote_cq_data_kept_for_receives_is_bounded_and_complete() {
    use fabric_core::objects::{MrAccess, RmaIov};
    let _one = serial();
    // FI_RX_CQ_DATA: every RMA write with remote CQ data consumes a
    // receive; without one posted, the data is kept (64 bytes counted per
    // entry). The writer is paused once the budget (8 MiB) is used up
    // (one that ignored PAUSE would be held back at the hard limit,
    // 16 MiB), and every CQ data value arrives once receives are posted.
    let mut i = info();
    i.mode |= Mode::RX_CQ_DATA;
    let (a, b, b_at_a, _) = pair_of(&i);
    let mut target = vec![0u8; 64];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 5) };
    let r = RmaIov {
        addr: 0,
        len: 8,
        key: mr.key(),
    };
    let limit = (2 * BUDGET / 64) as u64;
    let mut sent = 0u64;
    let mut again = 0u64;
    while again < 20_000 {
        assert!(sent < 2 * limit, "the writer was never held back");
        match a
            .ep
            .inject_write(&sent.to_le_bytes(), b_at_a, r, Some(sent))
        {
            Ok(()) => {
                sent += 1;
                again = 0;
            }
            Err(e) if e.kind() == ErrorKind::Again => {
                again += 1;
                reap(&a);
                let _ = b.cq.read(&mut []);
            }
            Err(e) => panic!("write {sent}: {e}"),
        }
    }
    println!(
        "remote CQ data: the writer was held back after {sent} writes (limit {limit} entries)"
    );
    assert!(
        sent >= limit / 2,
        "held back before the budget was used up ({sent} writes)"
    );
    // Every value, in order: kept ones first, then those still in the
    // ring, which the receives let in.
    let mut none = [0u8; 0];
    for k in 0..sent {
        let iov = [IoVec {
            addr: none.as_mut_ptr(),
            len: 0,
        }];
        let m = Msg {
            iov: &iov,
            desc: &[],
            addr: FiAddr::UNSPEC,
            tag: 0,
            ignore: 0,
            context: k,
            data: 0,
        };
        // SAFETY: an empty buffer; nothing is written.
        unsafe { b.ep.recvmsg(&m, OpFlags::empty()) }.unwrap();
        let e = next(b.cq.as_ref(), &[a.cq.as_ref(), b.cq.as_ref()])
            .unwrap_or_else(|e| panic!("CQ data {k}: {e:?}"));
        assert_eq!((e.context, e.data), (k, k), "CQ data out of order");
    }
    for _ in 0..100 {
        reap(&a);
    }
    drop(mr);
}

#[test]
fn remote_cq_data_into_a_full_cq_pauses_the_writer_until_the_application_reads() {
    use fabric_core::objects::{
        Bind, CompletionFlags, CqAttr, CqFormat, MrAccess, Provider, RmaIov, WaitObj,
    };
    let _one = serial();
    // Remote CQ data of RMA writes goes to the target's receive CQ, which
    // its application may never read. With a receive CQ of 64 entries
    // that nobody reads (the target progresses by reading its transmit
    // CQ), the writer is paused once it is full: the CQ holds a bounded
    // number of entries. Once the application reads, the writer resumes
    // and every value arrives once, in order.
    let i = info();
    let a = side(&i);
    let fabric = prov_shm::ShmProvider.fabric(&i.fabric_attr).unwrap();
    let domain = fabric.domain(&i).unwrap();
    let attr = |size| CqAttr {
        size,
        format: CqFormat::Data,
        wait_obj: WaitObj::Unspec,
        ..CqAttr::default()
    };
    let rx_cq = domain.cq(&attr(64)).unwrap();
    let tx_cq = domain.cq(&attr(0)).unwrap();
    let av = domain.av(&Default::default()).unwrap();
    let ep = domain.endpoint(&i).unwrap();
    ep.bind(Bind::Cq {
        cq: rx_cq.as_ref(),
        transmit: false,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Cq {
        cq: tx_cq.as_ref(),
        transmit: true,
        recv: false,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Av(av.as_ref())).unwrap();
    ep.enable().unwrap();
    let b_at_a = insert(&a, &ep.getname().unwrap());
    let mut target = vec![0u8; 64];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe { reg(domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 6) };
    let r = RmaIov {
        addr: 0,
        len: 8,
        key: mr.key(),
    };
    let total = 20_000u64;
    let progress_target = || {
        let _ = tx_cq.read(&mut []);
    };
    let mut sent = 0u64;
    let mut again = 0u64;
    // Write until the writer is held back for a while.
    while again < 20_000 && sent < total {
        match a
            .ep
            .inject_write(&sent.to_le_bytes(), b_at_a, r, Some(sent))
        {
            Ok(()) => {
                sent += 1;
                again = 0;
            }
            Err(e) if e.kind() == ErrorKind::Again => {
                again += 1;
                reap(&a);
                progress_target();
            }
            Err(e) => panic!("write {sent}: {e}"),
        }
    }
    println!("remote CQ data into a full CQ: the writer was held back after {sent} writes");
    assert!(sent < total, "the writer was never held back");
    // The CQ holds what was written (bounded by the pause), nothing more.
    assert!(
        sent < 4096,
        "the writer went on long past the full CQ ({sent})"
    );
    // The application reads: everything arrives once, in order, and the
    // writer goes on to the end.
    let mut got = 0u64;
    let deadline = Instant::now() + LIMIT;
    let mut e = [CqEntry::default(); 16];
    while got < total {
        assert!(Instant::now() < deadline, "stalled at {got} of {total}");
        if sent < total {
            match a
                .ep
                .inject_write(&sent.to_le_bytes(), b_at_a, r, Some(sent))
            {
                Ok(()) => sent += 1,
                Err(e) if e.kind() == ErrorKind::Again => {
                    reap(&a);
                }
                Err(e) => panic!("write {sent}: {e}"),
            }
        }
        match rx_cq.read(&mut e) {
            Ok(n) => {
                for c in &e[..n] {
                    assert!(c.flags.contains(CompletionFlags::REMOTE_CQ_DATA));
                    assert_eq!(c.data, got, "CQ data lost, repeated or out of order");
                    got += 1;
                }
            }
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("rx CQ: {e}"),
        }
    }
    for _ in 0..100 {
        reap(&a);
        progress_target();
    }
    assert!(
        !matches!(rx_cq.read(&mut e), Ok(n) if n > 0),
        "more CQ data than was written"
    );
    drop(mr);
    drop(ep);
}
