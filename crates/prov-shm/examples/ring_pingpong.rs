//! Cross-process ping-pong over the shm ring: one-way latency by size.
//!
//! ```text
//! cargo run --release -p prov-shm --example ring_pingpong -- [options]
//!   --cpus A,B     pin the parent to CPU A and the child to CPU B (default 0,1;
//!                  the same CPU twice puts both processes on one core)
//!   --mode M       spin: busy-poll try_recv; wait: Receiver::recv (spin,
//!                  yield, then futex); default spin
//!   --iters N      round trips per size for sizes up to 1 KiB (default 20000;
//!                  larger sizes use fewer)
//!   --sizes LIST   payload sizes (default 1,64,256,1024,4096,32768)
//!   --spin-us N    wait mode: WaitPolicy::spin (default: the crate default)
//!   --yield-us N   wait mode: WaitPolicy::yield_for (default: the crate default)
//! ```
//!
//! `RING_PINGPONG_SLOT_SIZE=N` overrides the slot size of both regions.
//!
//! One-way latency = elapsed / (2 x round trips), after a warm-up of a
//! tenth of the round trips, as `fi_pingpong` reports it. Payloads up to
//! 4 KiB (the default slot's payload) travel inline in the slot, larger ones
//! through a bounce buffer.
//! Not a test: nothing is asserted about time.

use std::process::{Command as Proc, Stdio};
use std::time::{Duration, Instant};

use prov_shm::region::{PeerRegion, Region, RegionConfig};
use prov_shm::ring::{Command, Receiver, Sender, WaitPolicy};

const ROLE: &str = "RING_PINGPONG_CHILD";
const OP_HELLO: u16 = 1;
const OP_DATA: u16 = 2;
const OP_STOP: u16 = 3;
const LIMIT: Duration = Duration::from_secs(30);

fn pin(cpu: usize) {
    // SAFETY: `set` is a plain bitmask struct, zero-initialised and then
    // filled by the libc helpers; sched_setaffinity reads `size_of` bytes
    // of it for the calling thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        eprintln!(
            "sched_setaffinity(cpu {cpu}) failed: {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(2);
    }
}

fn send(tx: &Sender, cmd: &Command, payload: &[u8]) {
    let mut end = None;
    loop {
        match tx.try_send(cmd, payload) {
            Ok(()) => return,
            Err(e) if e.kind() == fabric_core::error::ErrorKind::Again => {
                let end = *end.get_or_insert_with(|| Instant::now() + LIMIT);
                assert!(Instant::now() < end, "peer stopped draining");
                std::hint::spin_loop();
            }
            Err(e) => panic!("send: {e:?}"),
        }
    }
}

/// Receives one command into `buf`; returns its op and length.
fn recv(rx: &mut Receiver, spin: bool, buf: &mut [u8]) -> (u16, usize) {
    if spin {
        let end = Instant::now() + LIMIT;
        let mut turns = 0u32;
        loop {
            match rx.try_recv(|m, p| (m.cmd.op, p.copy_to(buf))) {
                Ok(r) => return r,
                Err(e) if e.kind() == fabric_core::error::ErrorKind::Again => {
                    turns = turns.wrapping_add(1);
                    if turns % 4096 == 0 {
                        assert!(Instant::now() < end, "peer went silent");
                    }
                    std::hint::spin_loop();
                }
                Err(e) => panic!("recv: {e:?}"),
            }
        }
    } else {
        rx.recv(LIMIT, |m, p| (m.cmd.op, p.copy_to(buf)))
            .expect("recv")
    }
}

fn config() -> RegionConfig {
    let mut cfg = RegionConfig::default();
    if let Ok(v) = std::env::var("RING_PINGPONG_SLOT_SIZE") {
        cfg.slot_size = v.parse().expect("RING_PINGPONG_SLOT_SIZE");
    }
    cfg
}

fn child(parent: &str, cpu: usize, spin: bool, policy: WaitPolicy) {
    pin(cpu);
    let mine = Region::create(&config()).expect("region");
    let mut rx = mine.receiver().expect("receiver");
    rx.set_wait_policy(policy);
    let peer = PeerRegion::attach(parent).expect("attach parent");
    let tx = peer.sender();
    let hello = Command {
        op: OP_HELLO,
        ..Command::default()
    };
    send(&tx, &hello, mine.name().as_bytes());
    let mut buf = vec![0u8; tx.bounce_capacity().max(tx.inline_capacity())];
    let echo = Command {
        op: OP_DATA,
        ..Command::default()
    };
    loop {
        let (op, n) = recv(&mut rx, spin, &mut buf);
        if op == OP_STOP {
            return;
        }
        send(&tx, &echo, &buf[..n]);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Ok(spec) = std::env::var(ROLE) {
        let mut it = spec.split(' ');
        let (Some(name), Some(cpu), Some(mode), Some(spin_us), Some(yield_us)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            panic!("bad child spec {spec:?}");
        };
        let policy = WaitPolicy {
            spin: Duration::from_micros(spin_us.parse().expect("spin")),
            yield_for: Duration::from_micros(yield_us.parse().expect("yield")),
        };
        child(name, cpu.parse().expect("cpu"), mode == "spin", policy);
        return;
    }
    let mut cpus = (0usize, 1usize);
    let mut spin = true;
    let mut iters = 20_000u64;
    let mut sizes = vec![1usize, 64, 256, 1024, 4096, 32768];
    let mut policy = WaitPolicy::default();
    let mut i = 1;
    while i < args.len() {
        let val = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--cpus" => {
                let (a, b) = val.split_once(',').expect("--cpus A,B");
                cpus = (a.parse().expect("cpu"), b.parse().expect("cpu"));
            }
            "--mode" => spin = val == "spin",
            "--iters" => iters = val.parse().expect("--iters N"),
            "--spin-us" => policy.spin = Duration::from_micros(val.parse().expect("--spin-us N")),
            "--yield-us" => {
                policy.yield_for = Duration::from_micros(val.parse().expect("--yield-us N"))
            }
            "--sizes" => sizes = val.split(',').map(|s| s.parse().expect("size")).collect(),
            other => {
                eprintln!("unknown option {other}; see the file's docs");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    pin(cpus.0);
    let mine = Region::create(&config()).expect("region");
    let mut rx = mine.receiver().expect("receiver");
    rx.set_wait_policy(policy);
    let mode = if spin { "spin" } else { "wait" };
    let mut kid = Proc::new(std::env::current_exe().expect("exe"))
        .env(
            ROLE,
            format!(
                "{} {} {mode} {} {}",
                mine.name(),
                cpus.1,
                policy.spin.as_micros(),
                policy.yield_for.as_micros()
            ),
        )
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn child");
    let mut buf = vec![0u8; 64 * 1024];
    let (op, n) = rx
        .recv(LIMIT, |m, p| (m.cmd.op, p.copy_to(&mut buf)))
        .expect("hello");
    assert_eq!(op, OP_HELLO);
    let peer = PeerRegion::attach(std::str::from_utf8(&buf[..n]).expect("name")).expect("attach");
    let tx = peer.sender();
    println!(
        "ring ping-pong: parent on cpu {}, child on cpu {}, receive by {mode}{}",
        cpus.0,
        cpus.1,
        if spin {
            String::new()
        } else {
            format!(" ({policy:?})")
        }
    );
    println!(
        "{:>8} {:>8} {:>12} {:>10}  path",
        "bytes", "iters", "one-way us", "MB/s"
    );
    let data = Command {
        op: OP_DATA,
        ..Command::default()
    };
    for &size in &sizes {
        let payload: Vec<u8> = (0..size).map(|j| j as u8).collect();
        let n_iter = if size <= 1024 {
            iters
        } else if size <= 4096 {
            (iters / 2).max(1)
        } else {
            (iters / 10).max(1)
        };
        let mut round = |count: u64| {
            for _ in 0..count {
                send(&tx, &data, &payload);
                let (_, got) = recv(&mut rx, spin, &mut buf);
                assert_eq!(got, size);
            }
        };
        round((n_iter / 10).max(1));
        let t = Instant::now();
        round(n_iter);
        let one_way = t.elapsed().as_secs_f64() / (2.0 * n_iter as f64);
        println!(
            "{size:>8} {n_iter:>8} {:>12.3} {:>10.1}  {}",
            one_way * 1e6,
            size as f64 / one_way / 1e6,
            if size <= tx.inline_capacity() {
                "inline"
            } else {
                "bounce"
            }
        );
    }
    send(
        &tx,
        &Command {
            op: OP_STOP,
            ..Command::default()
        },
        &[],
    );
    let _ = kid.wait();
}
