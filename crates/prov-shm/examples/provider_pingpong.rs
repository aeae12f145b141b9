//! Cross-process ping-pong through the shm provider's endpoints: one-way
//! latency by size, with buffers written once before timing (so no page of
//! them is the shared zero page), for choosing the eager / rendezvous
//! threshold.
//!
//! ```text
//! cargo run --release -p prov-shm --example provider_pingpong -- [options]
//!   --cpus A,B     pin the parent to CPU A and the child to CPU B (default 0,1)
//!   --iters N      round trips per size (default 20000; fewer above 64 KiB)
//!   --sizes LIST   message sizes (default 1,64,1024,2048,4096,8192,16384,32768,65536,1048576)
//!   --bw W         measure one-way bandwidth instead: windows of W sends
//!                  (distinct, pre-written buffers), the receiver keeping W
//!                  receives posted
//! ```
//!
//! `FI_SHM_EAGER_MAX` and `FI_SHM_DISABLE_CMA` apply as usual. The
//! completion queue is polled (`fi_cq_read` in a loop), as `fi_pingpong`
//! does. One-way latency = elapsed / (2 x round trips); the first round
//! trip of the run (mapping the regions, `HELLO`) is printed at the end.
//! Not a test.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fabric_core::matching::Request;
use fabric_core::objects::{
    AvAttr, Bind, CompletionQueue, CqAttr, CqEntry, Endpoint, FiAddr, IoVec, Msg, Provider, WaitObj,
};
use fabric_core::{Address, EpType, ErrorKind, Info, OpFlags, Version};
use prov_shm::ShmProvider;

const ROLE: &str = "PROVIDER_PINGPONG_CHILD";

fn pin(cpu: usize) {
    // SAFETY: `set` is a plain bitmask, zeroed then filled by the libc
    // helpers; sched_setaffinity reads it for the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "sched_setaffinity({cpu})");
}

fn wait(cq: &dyn CompletionQueue) -> CqEntry {
    let mut e = [CqEntry::default()];
    let end = Instant::now() + Duration::from_secs(30);
    let mut turns = 0u32;
    loop {
        match cq.read(&mut e) {
            Ok(_) => return e[0],
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("cq: {err}"),
        }
        turns = turns.wrapping_add(1);
        if turns % 65536 == 0 {
            assert!(Instant::now() < end, "peer went silent");
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let cpus: Vec<usize> = opt("--cpus")
        .unwrap_or_else(|| "0,1".into())
        .split(',')
        .map(|c| c.parse().expect("cpu"))
        .collect();
    let iters: usize = opt("--iters").map_or(20_000, |v| v.parse().expect("iters"));
    let sizes: Vec<usize> = opt("--sizes")
        .unwrap_or_else(|| "1,64,1024,2048,4096,8192,16384,32768,65536,1048576".into())
        .split(',')
        .map(|s| s.parse().expect("size"))
        .collect();
    let child = std::env::var(ROLE).is_ok();
    pin(if child { cpus[1] } else { cpus[0] });
    let mut hints = Info::default();
    hints.ep_attr.ep_type = EpType::Rdm;
    let req = Request {
        hints: Some(&hints),
        ..Request::new(Version::CURRENT)
    };
    let info = ShmProvider.getinfo(&req).expect("getinfo").remove(0);
    let fabric = ShmProvider.fabric(&info.fabric_attr).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let cq = domain
        .cq(&CqAttr {
            wait_obj: WaitObj::None,
            ..CqAttr::default()
        })
        .expect("cq");
    let av = domain.av(&AvAttr::default()).expect("av");
    let ep: Box<dyn Endpoint> = domain.endpoint(&info).expect("endpoint");
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .expect("bind cq");
    ep.bind(Bind::Av(av.as_ref())).expect("bind av");
    ep.enable().expect("enable");
    let me = ep.getname().expect("name");
    let (peer_name, mut kid) = if child {
        println!("NAME={me}");
        std::io::stdout().flush().expect("flush");
        let mut l = String::new();
        std::io::stdin().read_line(&mut l).expect("read");
        (l.trim().to_string(), None)
    } else {
        let exe = std::env::current_exe().expect("exe");
        let mut c = Command::new(exe)
            .args(&args[1..])
            .env(ROLE, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut lines = BufReader::new(c.stdout.take().expect("stdout")).lines();
        let name = loop {
            let l = lines.next().expect("child exited").expect("line");
            if let Some(n) = l.strip_prefix("NAME=") {
                break n.to_string();
            }
        };
        let mut stdin = c.stdin.take().expect("stdin");
        writeln!(stdin, "{me}").expect("write");
        stdin.flush().expect("flush");
        (name, Some((c, stdin)))
    };
    let addr: Address = peer_name.parse().expect("address");
    let mut out = [FiAddr(0)];
    av.insert(&[addr], &mut out).expect("insert");
    let peer = out[0];
    let max = sizes.iter().copied().max().unwrap_or(1);
    if let Some(w) = opt("--bw").map(|v| v.parse::<usize>().expect("window")) {
        bandwidth(ep.as_ref(), cq.as_ref(), peer, child, &sizes, iters, w);
        if let Some((mut c, stdin)) = kid.take() {
            drop(stdin);
            let _ = c.wait();
        }
        return;
    }
    let mut tx = vec![0x5au8; max];
    let mut rx = vec![0xa5u8; max];
    if !child {
        println!("size,one_way_us,mb_per_s");
    }
    let mut first = None;
    for &size in &sizes {
        let n = if size > 65536 { iters / 10 } else { iters }.max(10);
        let warm = n / 10;
        let mut t0 = Instant::now();
        for i in 0..warm + n {
            if i == 1 && !child && first.is_none() {
                // The first round trip to the peer (its region mapped,
                // ours mapped by it on our `HELLO`).
                first = Some(t0.elapsed());
            }
            if i == warm {
                t0 = Instant::now();
            }
            let riov = [IoVec {
                addr: rx.as_mut_ptr(),
                len: size,
            }];
            let siov = [IoVec {
                addr: tx.as_mut_ptr(),
                len: size,
            }];
            let rm = Msg {
                iov: &riov,
                desc: &[],
                addr: FiAddr::UNSPEC,
                tag: 0,
                ignore: 0,
                context: 1,
                data: 0,
            };
            let sm = Msg {
                addr: peer,
                context: 2,
                iov: &siov,
                ..rm
            };
            // SAFETY: both buffers outlive the operations: their
            // completions are awaited in this iteration.
            unsafe { ep.recvmsg(&rm, OpFlags::empty()).expect("recv") };
            if !child {
                // SAFETY: as above.
                unsafe { ep.sendmsg(&sm, OpFlags::empty()).expect("send") };
            }
            let mut got = (false, child);
            while !(got.0 && got.1) {
                let e = wait(cq.as_ref());
                if e.context == 1 {
                    got.0 = true;
                    if child {
                        // SAFETY: as above.
                        unsafe { ep.sendmsg(&sm, OpFlags::empty()).expect("send") };
                        got.1 = false;
                    }
                } else {
                    got.1 = true;
                }
            }
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / (2.0 * n as f64);
        if !child {
            println!("{size},{us:.3},{:.0}", size as f64 / us);
        }
    }
    if let Some(f) = first {
        println!("first round trip: {:.1} us", f.as_secs_f64() * 1e6);
    }
    if let Some((mut c, stdin)) = kid.take() {
        drop(stdin);
        let _ = c.wait();
    }
}

/// Windows of `w` sends of `size` bytes from the parent; the child keeps
/// `w` receives posted and acknowledges each window with a 1-byte message.
fn bandwidth(
    ep: &dyn Endpoint,
    cq: &dyn CompletionQueue,
    peer: FiAddr,
    child: bool,
    sizes: &[usize],
    iters: usize,
    w: usize,
) {
    let max = sizes.iter().copied().max().unwrap_or(1);
    let mut bufs = vec![0x3cu8; max * w];
    let mut ack = [0u8; 1];
    if !child {
        println!("size,window,mb_per_s");
    }
    for &size in sizes {
        let rounds = (iters * 4096 / size.max(4096) / w).clamp(20, 2000);
        let mut t0 = Instant::now();
        for r in 0..rounds + 2 {
            if r == 2 {
                t0 = Instant::now();
            }
            let mut done = 0;
            for k in 0..w {
                let v = [IoVec {
                    addr: bufs[k * size..].as_mut_ptr(),
                    len: size,
                }];
                let m = Msg {
                    iov: &v,
                    desc: &[],
                    addr: if child { FiAddr::UNSPEC } else { peer },
                    tag: 0,
                    ignore: 0,
                    context: 10 + k as u64,
                    data: 0,
                };
                // SAFETY: `bufs` outlives the operations, awaited below.
                unsafe {
                    if child {
                        ep.recvmsg(&m, OpFlags::empty()).expect("recv");
                    } else {
                        loop {
                            match ep.sendmsg(&m, OpFlags::empty()) {
                                Ok(()) => break,
                                Err(e) if e.kind() == ErrorKind::Again => {
                                    let _ = wait(cq);
                                    done += 1;
                                }
                                Err(e) => panic!("send: {e}"),
                            }
                        }
                    }
                }
            }
            let av = [IoVec {
                addr: ack.as_mut_ptr(),
                len: 1,
            }];
            if !child {
                let m = Msg {
                    iov: &av,
                    desc: &[],
                    addr: FiAddr::UNSPEC,
                    tag: 0,
                    ignore: 0,
                    context: 1,
                    data: 0,
                };
                // SAFETY: `ack` outlives the receive, awaited below.
                unsafe { ep.recvmsg(&m, OpFlags::empty()).expect("recv ack") };
                let mut got_ack = false;
                while done < w || !got_ack {
                    let e = wait(cq);
                    if e.context == 1 {
                        got_ack = true;
                    } else {
                        done += 1;
                    }
                }
            } else {
                while done < w {
                    wait(cq);
                    done += 1;
                }
                ep.inject(&[1], peer, None).expect("ack");
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        if !child {
            println!("{size},{w},{:.0}", (rounds * w * size) as f64 / secs / 1e6);
        }
    }
}
