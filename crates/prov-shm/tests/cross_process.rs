//! Parent and child processes sharing regions. The test binary re-runs
//! itself as the child: `<this exe> --exact child --ignored` with the role
//! in an environment variable, so `child` below is the child's `main`.
//! Children print protocol lines marked with `@@` on stdout; every wait
//! for a child is bounded (30 s), and a child still running when its test
//! ends is killed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver as LineRx, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use fabric_core::error::ErrorKind;
use prov_shm::region::{self, OwnerStatus, PeerRegion, Region, RegionConfig};
use prov_shm::ring::{self, Command as Cmd, Sender};

const ROLE: &str = "PROV_SHM_TEST_ROLE";
const ARG: &str = "PROV_SHM_TEST_ARG";
const LIMIT: Duration = Duration::from_secs(30);

const OP_HELLO: u16 = 1;
const OP_DATA: u16 = 2;
const OP_STOP: u16 = 3;

struct Kid {
    child: Child,
    lines: LineRx<String>,
}

impl Kid {
    fn spawn(role: &str, arg: &str) -> Kid {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .env(ARG, arg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                // libtest prints "test child ... " without a newline before
                // the child's first line, so look anywhere in the line.
                if let Some(at) = line.find("@@") {
                    if tx.send(line[at + 2..].to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        Kid { child, lines }
    }

    /// The next `@@` line, within the limit.
    fn line(&self) -> String {
        match self.lines.recv_timeout(LIMIT) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => panic!("child said nothing for {LIMIT:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("child exited without saying more"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child to exit, within the limit.
    fn exit(&mut self) -> ExitStatus {
        let end = Instant::now() + LIMIT;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(Instant::now() < end, "child did not exit within {LIMIT:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn exists(name: &str) -> bool {
    Path::new(region::SHM_DIR).join(name).exists()
}

/// Sends, retrying while the ring or pool is full, within the limit.
fn send(tx: &Sender, cmd: &Cmd, payload: &[u8]) {
    let end = Instant::now() + LIMIT;
    loop {
        match tx.try_send(cmd, payload) {
            Ok(()) => return,
            Err(e) if e.kind() == ErrorKind::Again && Instant::now() < end => {
                std::thread::yield_now();
            }
            Err(e) => panic!("send failed: {e:?}"),
        }
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The child's entry point; does nothing when run without a role.
#[test]
#[ignore = "entry point of the child processes the other tests spawn"]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let arg = std::env::var(ARG).unwrap_or_default();
    match role.as_str() {
        "echo" => child_echo(&arg),
        "fill" => child_fill(&arg),
        "hostile" => child_hostile(&arg),
        "hold" => child_hold(),
        other => panic!("unknown child role {other}"),
    }
}

/// Creates its own region, says hello (with that region's name) into the
/// parent's, then echoes every data command back until told to stop.
fn child_echo(parent: &str) {
    let mine = Region::create(&RegionConfig::default()).expect("child region");
    let mut rx = mine.receiver().expect("receiver");
    let peer = PeerRegion::attach(parent).expect("attach parent");
    let tx = peer.sender();
    let hello = Cmd {
        op: OP_HELLO,
        ..Cmd::default()
    };
    send(&tx, &hello, mine.name().as_bytes());
    let mut buf = vec![0u8; tx.bounce_capacity()];
    loop {
        let (cmd, len) = rx
            .recv(LIMIT, |m, p| (m.cmd, p.copy_to(&mut buf)))
            .expect("command from the parent");
        if cmd.op == OP_STOP {
            break;
        }
        send(&tx, &cmd, &buf[..len]);
    }
    println!("@@bye");
}

#[test]
fn ping_pong_inline_and_bounce_across_processes() {
    let mine = Region::create(&RegionConfig::default()).expect("region");
    let mut rx = mine.receiver().expect("receiver");
    let mut kid = Kid::spawn("echo", mine.name());
    let (hello, name) = rx.recv_vec(LIMIT).expect("hello");
    assert_eq!(hello.cmd.op, OP_HELLO);
    assert!(hello.bounce.is_none());
    assert_eq!(hello.sender_pid, kid.pid());
    let child_name = String::from_utf8(name).expect("utf-8 name");
    assert!(exists(&child_name));
    let peer = PeerRegion::attach(&child_name).expect("attach child");
    assert_eq!(peer.owner_pid(), kid.pid());
    assert_eq!(peer.owner_status(), OwnerStatus::Alive);
    let tx = peer.sender();
    let inline = tx.inline_capacity();
    let sizes = [
        0,
        1,
        8,
        63,
        64,
        65,
        200,
        1000,
        inline,
        inline + 1,
        4096,
        20_000,
        32 * 1024,
    ];
    let rounds = 3000u64;
    let mut got = vec![0u8; 32 * 1024];
    for i in 0..rounds {
        let len = sizes[i as usize % sizes.len()];
        let data = pattern(i, len);
        let cmd = Cmd {
            op: OP_DATA,
            flags: i as u16,
            src: 9,
            tag: i,
            data: !i,
            aux: [i * 3, i * 5],
        };
        send(&tx, &cmd, &data);
        let (m, n) = rx
            .recv(LIMIT, |m, p| (*m, p.copy_to(&mut got)))
            .expect("echo");
        assert_eq!(m.cmd, cmd, "round {i}");
        assert_eq!(m.len, len, "round {i}");
        assert_eq!(
            m.bounce.is_some(),
            len > inline,
            "round {i}: protocol by size"
        );
        assert_eq!(&got[..n], &data[..], "round {i}: payload");
    }
    send(
        &tx,
        &Cmd {
            op: OP_STOP,
            ..Cmd::default()
        },
        &[],
    );
    assert_eq!(kid.line(), "bye");
    assert!(kid.exit().success());
    // The child dropped its region on the way out: the file is gone, and
    // we see it closed.
    assert!(!exists(&child_name), "child's region left behind");
    assert_ne!(peer.owner_status(), OwnerStatus::Alive);
}

/// Sends into the parent's small region until the pool and then the ring
/// are full, reports where `Again` came, then sends the rest as room
/// appears.
fn child_fill(parent: &str) {
    let peer = PeerRegion::attach(parent).expect("attach");
    let tx = peer.sender();
    let cmd = |tag: u64| Cmd {
        op: OP_DATA,
        tag,
        ..Cmd::default()
    };
    let big = |tag: u64| pattern(tag, tx.inline_capacity() + 1 + tag as usize % 50);
    let small = |tag: u64| pattern(tag, tag as usize % 60);
    let mut tag = 0;
    // The pool first: every buffer, then `Again` while the ring has room.
    loop {
        match tx.try_send_bounce(&cmd(tag), &big(tag)) {
            Ok(()) => tag += 1,
            Err(e) if e.kind() == ErrorKind::Again => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    println!("@@pool {tag}");
    loop {
        match tx.try_send_inline(&cmd(tag), &small(tag)) {
            Ok(()) => tag += 1,
            Err(e) if e.kind() == ErrorKind::Again => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    // A second `Again`: still full, nothing was lost or half-sent. (Before
    // telling the parent, which starts draining once told.)
    let e = tx.try_send(&cmd(tag), &small(tag)).expect_err("still full");
    assert_eq!(e.kind(), ErrorKind::Again);
    println!("@@ring {tag}");
    while tag < 300 {
        let p = if tag % 5 == 0 { big(tag) } else { small(tag) };
        send(&tx, &cmd(tag), &p);
        tag += 1;
    }
    println!("@@sent {tag}");
}

#[test]
fn full_queue_says_again_then_drains_in_order() {
    let cfg = RegionConfig {
        ring_slots: 8,
        slot_size: 128,
        bounce_count: 3,
        bounce_size: 1024,
    };
    let mine = Region::create(&cfg).expect("region");
    let mut rx = mine.receiver().expect("receiver");
    let mut kid = Kid::spawn("fill", mine.name());
    assert_eq!(kid.line(), "pool 3");
    assert_eq!(kid.line(), "ring 8");
    let inline = mine.layout().inline_capacity();
    let mut got = vec![0u8; 1024];
    for tag in 0..300u64 {
        let (m, n) = rx
            .recv(LIMIT, |m, p| (*m, p.copy_to(&mut got)))
            .expect("message");
        assert_eq!(m.cmd.tag, tag, "order");
        let expect_len = if tag < 3 || (tag >= 8 && tag % 5 == 0) {
            inline + 1 + tag as usize % 50
        } else {
            tag as usize % 60
        };
        assert_eq!(&got[..n], &pattern(tag, expect_len)[..], "payload of {tag}");
    }
    assert_eq!(kid.line(), "sent 300");
    assert!(kid.exit().success());
    assert_eq!(
        rx.try_recv_vec().expect_err("drained").kind(),
        ErrorKind::Again
    );
}

/// Writes random garbage all over the parent's region (header, control
/// words, bounce metadata, slots) interleaved with valid sends (half of the
/// 20000 rounds).
fn child_hostile(parent: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let rounds: u64 = 20_000;
    let peer = PeerRegion::attach(parent).expect("attach");
    let layout = peer.layout();
    let tx = peer.sender();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(Path::new(region::SHM_DIR).join(parent))
        .expect("open");
    let map = memmap2::MmapOptions::new()
        .len(layout.total_size())
        .map_raw(&file)
        .expect("map");
    let base = map.as_mut_ptr();
    let words = layout.total_size() / 8;
    let mut x = u64::from(std::process::id()) | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let poke = |off: usize, v: u64| {
        let off = off & !7;
        assert!(off + 8 <= layout.total_size());
        // SAFETY: in bounds and aligned; this process is the hostile one
        // and does not care what the other side sees.
        unsafe { AtomicU64::from_ptr(base.add(off).cast()) }.store(v, Ordering::Relaxed);
    };
    let slot_base = layout.ring_offset();
    let slot_size = layout.slot_size();
    for i in 0..rounds {
        let r = rnd();
        let v = match rnd() % 4 {
            0 => rnd(),
            1 => rnd() % 64,
            2 => u64::from(u32::MAX) << (rnd() % 2 * 32),
            _ => rnd() & 0xffff_ffff,
        };
        match r % 16 {
            0..=7 => {
                let cmd = Cmd {
                    tag: i,
                    ..Cmd::default()
                };
                let len = (rnd() % 3000) as usize;
                let _ = tx.try_send(&cmd, &pattern(i, len));
            }
            12 | 13 => {
                // A slot header word (sequence, claimer, length, index...).
                let slot = (rnd() % u64::from(layout.ring_slots())) as usize;
                let field = (rnd() % 8) as usize * 8;
                poke(slot_base + slot * slot_size + field, v);
            }
            8 | 9 => {
                // The length / bounce-index or src / reserved word of a slot.
                let slot = (rnd() % u64::from(layout.ring_slots())) as usize;
                poke(
                    slot_base + slot * slot_size + 16 + (rnd() % 2) as usize * 8,
                    v,
                );
            }
            10 => poke((rnd() % 48) as usize * 8, v), // header and control lines
            11 => poke(
                layout.bounce_meta_offset()
                    + (rnd() % u64::from(layout.bounce_count())) as usize * 8,
                v,
            ),
            _ => poke((rnd() % words as u64) as usize * 8, v),
        }
        if i % 1000 == 0 {
            std::thread::yield_now();
        }
    }
    println!("@@done {rounds}");
}

#[test]
fn hostile_writer_never_panics_the_reader() {
    let cfg = RegionConfig {
        ring_slots: 16,
        slot_size: 256,
        bounce_count: 8,
        bounce_size: 4096,
    };
    let mine = Region::create(&cfg).expect("region");
    let mut rx = mine.receiver().expect("receiver");
    let mut kid = Kid::spawn("hostile", mine.name());
    let (mut ok, mut err) = (0u64, 0u64);
    let mut buf = vec![0u8; 64 * 1024];
    let end = Instant::now() + LIMIT * 2;
    let mut turns = 0u64;
    loop {
        let exited = kid.child.try_wait().expect("try_wait").is_some();
        // Drain what is there (bounded, in case the peer keeps the ring
        // looking busy).
        for _ in 0..64 {
            match rx.try_recv(|m, p| {
                assert!(m.len <= p.len());
                p.copy_to(&mut buf)
            }) {
                Ok(n) => {
                    assert!(n <= 4096);
                    ok += 1;
                }
                Err(e) if e.kind() == ErrorKind::Again => break,
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Io, "{e:?}");
                    err += 1;
                }
            }
        }
        turns += 1;
        if turns % 16 == 0 {
            let _ = rx.wait(Duration::from_millis(1));
            let _ = rx.recover(region::process_gone);
        }
        if exited {
            break;
        }
        assert!(Instant::now() < end, "hostile child ran too long");
    }
    assert_eq!(kid.line(), "done 20000");
    assert!(kid.exit().success());
    // The header was scribbled on: attaching now either fails cleanly or
    // describes the very same layout.
    match PeerRegion::attach(mine.name()) {
        Ok(p) => assert_eq!(p.layout(), mine.layout()),
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::Inval | ErrorKind::Again | ErrorKind::Access | ErrorKind::ConnRefused
            ),
            "{e:?}"
        ),
    }
    // A bounded number of further receives, all without panicking.
    for _ in 0..1000 {
        let _ = rx.try_recv(|_, p| p.copy_to(&mut buf));
    }
    println!("hostile run: {ok} commands received, {err} malformed slots reported");
    assert!(err > 0, "20000 rounds of garbage produced no error at all");
}

/// Creates a region, says its name, and waits to be killed.
fn child_hold() {
    let mine = Region::create(&RegionConfig::default()).expect("region");
    println!("@@name {}", mine.name());
    std::thread::sleep(LIMIT * 2);
}

#[test]
fn regions_of_killed_processes_are_reclaimed() {
    let mine = Region::create(&RegionConfig::default()).expect("own region");

    // 1. Killed and reaped.
    let mut kid = Kid::spawn("hold", "");
    let line = kid.line();
    let name = line.strip_prefix("name ").expect("name line").to_owned();
    assert!(exists(&name));
    let peer = PeerRegion::attach(&name).expect("attach");
    assert_eq!(peer.owner_status(), OwnerStatus::Alive);
    kid.child.kill().expect("SIGKILL");
    kid.exit();
    assert!(exists(&name), "nobody removed it yet");
    assert_eq!(peer.owner_status(), OwnerStatus::Gone);
    let e = PeerRegion::attach(&name).expect_err("owner is dead");
    assert_eq!(e.kind(), ErrorKind::ConnRefused, "{e:?}");
    let removed = region::reclaim_stale().expect("reclaim");
    assert!(!exists(&name), "stale region left in /dev/shm");
    assert!(exists(mine.name()), "a live region was reclaimed");
    assert!(!removed.contains(&mine.name().to_owned()));
    // Sends into the dead peer's (unlinked, still mapped) region do no harm.
    let _ = peer.sender().try_send(&Cmd::default(), b"anyone?");

    // 2. Killed and not yet reaped: a zombie counts as dead.
    let mut kid = Kid::spawn("hold", "");
    let line = kid.line();
    let name = line.strip_prefix("name ").expect("name line").to_owned();
    let pid = i32::try_from(kid.pid()).expect("pid");
    // SAFETY: sending SIGKILL to our own child, whose pid is positive.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let end = Instant::now() + LIMIT;
    while exists(&name) {
        assert!(Instant::now() < end, "zombie's region never reclaimed");
        let _ = region::reclaim_stale().expect("reclaim");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!kid.exit().success());
    assert!(exists(mine.name()));
}

#[test]
fn ring_constants_match_the_documented_layout() {
    assert_eq!(ring::SLOT_HEADER, 64);
    assert_eq!(ring::slot::PAYLOAD, 48);
    assert_eq!(
        ring::slot::PAYLOAD + 16,
        64,
        "16 payload bytes share line 0"
    );
    assert_eq!(region::offsets::RING_TAIL % 64, 0);
    assert_eq!(region::offsets::BOUNCE_FREE % 64, 0);
}
