//! The bounce-buffer path, as used where cross-memory attach is not
//! permitted: this binary runs its checks in a child process started with
//! `FI_SHM_DISABLE_CMA=1` (the decision is made once per process), and
//! that child talks both to endpoints of its own (no CMA on either side)
//! and to a grandchild that has CMA (mixed peers).

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
use fabric_core::objects::{CqEntry, Endpoint, FiAddr, MrAccess, RmaIov, RmaMsg};
use fabric_core::*;
use prov_shm::ShmEndpoint;

const VAR: &str = "FI_SHM_DISABLE_CMA";
const ROLE: &str = "PROV_SHM_NOCMA_ROLE";

fn uses_cma(ep: &dyn Endpoint) -> bool {
    ep.as_any()
        .downcast_ref::<ShmEndpoint>()
        .expect("an shm endpoint")
        .uses_cma()
}

fn roundtrip_rma(a: &Side, b: &Side, b_at_a: FiAddr, key: u64, size: usize) {
    let mut src = pattern(size, 5);
    let si = iov(&mut src);
    let r = [RmaIov {
        addr: 0,
        len: size,
        key,
    }];
    // SAFETY: the buffers outlive their completions.
    unsafe {
        a.ep.writemsg(
            &RmaMsg {
                iov: &si,
                desc: &[],
                addr: b_at_a,
                rma_iov: &r,
                context: 1,
                data: 0,
            },
            OpFlags::empty(),
        )
        .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 1);
    let mut back = vec![0u8; size];
    let bi = iov(&mut back);
    // SAFETY: as above.
    unsafe {
        a.ep.readmsg(
            &RmaMsg {
                iov: &bi,
                desc: &[],
                addr: b_at_a,
                rma_iov: &r,
                context: 2,
                data: 0,
            },
            OpFlags::empty(),
        )
        .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 2);
    assert!(back == src, "RMA of {size} bytes");
}

fn roundtrip_msg(a: &Side, b: &Side, b_at_a: FiAddr, size: usize, cap: usize) {
    let mut out = pattern(size, 7);
    let oi = iov(&mut out);
    let mut back = vec![0u8; cap];
    let bi = iov(&mut back);
    // SAFETY: the buffers outlive their completions.
    unsafe { recv_then_send((a, b, b_at_a), &oi, &bi, (3, 4)) };
    let r = next(b.cq.as_ref(), &[a.cq.as_ref()]);
    if cap < size {
        let e = r.unwrap_err();
        assert_eq!((e.err, e.olen), (ErrorKind::Trunc, size - cap));
    } else {
        assert_eq!(r.unwrap().len, size);
    }
    let n = size.min(cap);
    assert!(back[..n] == out[..n], "message of {size} bytes");
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 4);
}

/// A push larger than the receiver's bounce pool completes while its
/// sender blocks in `sread` and the receiver looks only now and then. The
/// receiver frees pool buffers without writing to the sender, so the
/// sender must keep polling while its push waits for room: asleep, it
/// would stay so until the read timed out.
fn push_larger_than_the_pool_while_the_sender_blocks(a: &Side, b: &Side, b_at_a: FiAddr) {
    let pool = {
        let c = prov_shm::region::RegionConfig::default();
        c.bounce_count as usize * c.bounce_size as usize
    };
    let size = 2 * pool;
    let mut out = pattern(size, 11);
    let oi = iov(&mut out);
    let mut back = vec![0u8; size];
    let bi = iov(&mut back);
    // SAFETY: the buffers outlive their completions.
    unsafe { recv_then_send((a, b, b_at_a), &oi, &bi, (1, 2)) };
    std::thread::scope(|s| {
        s.spawn(|| {
            // One look every 20 ms, each taking at most a ring budget of
            // commands: the sender fills the pool and waits for room.
            let mut e = [CqEntry::default()];
            for _ in 0..1000 {
                if b.cq.read(&mut e).unwrap_or(0) == 1 {
                    assert_eq!(e[0].context, 1);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            panic!("the receive of {size} bytes did not complete");
        });
        let mut e = [CqEntry::default()];
        let n = a.cq.sread(&mut e, Some(Duration::from_secs(15)));
        assert_eq!(
            n.ok(),
            Some(1),
            "the send did not complete while its sender blocked"
        );
        assert_eq!(e[0].context, 2);
    });
    assert!(back == out, "pushed message of {size} bytes");
}

/// The grandchild: an endpoint with cross-memory attach that echoes RMA
/// into its region and answers one message.
fn grandchild() {
    let me = side(&info());
    let mut region = vec![0u8; 4 << 20];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe {
        reg(
            me.domain.as_ref(),
            &mut region,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            9,
        )
    };
    assert!(uses_cma(me.ep.as_ref()));
    println!("NAME={}", me.ep.getname().unwrap());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let parent = insert(&me, &line.trim().parse().unwrap());
    // Receive one large message (pulled with CMA from a peer without it:
    // the peer asked for push mode), send one back, then serve RMA.
    let mut buf = vec![0u8; 3 << 20];
    let bi = iov(&mut buf);
    // SAFETY: `buf` outlives the completion.
    unsafe {
        me.ep
            .recvmsg(&msg(&bi, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().len, 3 << 20);
    let bi = iov(&mut buf);
    // SAFETY: as above.
    unsafe {
        me.ep
            .sendmsg(&msg(&bi, parent, 0, 0, 2), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 2);
    loop {
        let mut e = [CqEntry::default()];
        let _ = me.cq.sread(&mut e, Some(Duration::from_millis(50)));
    }
}

fn checks() {
    // getinfo says so, and endpoints follow.
    let i = info();
    assert_eq!(
        i.ep_attr.protocol_version,
        prov_shm::getinfo::PROTOCOL_BOUNCE
    );
    let (a, b, b_at_a, _) = pair_of(&i);
    assert!(!uses_cma(a.ep.as_ref()));
    for size in [40_000usize, 1 << 20, 3 << 20] {
        roundtrip_msg(&a, &b, b_at_a, size, size);
    }
    roundtrip_msg(&a, &b, b_at_a, 200_000, 70_000);
    push_larger_than_the_pool_while_the_sender_blocks(&a, &b, b_at_a);
    let mut region = vec![0u8; 4 << 20];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut region,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            5,
        )
    };
    for size in [10usize, 40_000, 3 << 20] {
        roundtrip_rma(&a, &b, b_at_a, mr.key(), size);
    }
    drop(mr);
    // A peer with CMA in another process.
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "bounce_path_when_cma_is_disabled", "--nocapture"])
        .env_remove(VAR)
        .env(ROLE, "grandchild")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let name: Address = loop {
        let l = lines.next().expect("grandchild exited").unwrap();
        if let Some(at) = l.find("NAME=") {
            break l[at + 5..].trim().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", a.ep.getname().unwrap()).unwrap();
    stdin.flush().unwrap();
    let g = insert(&a, &name);
    let mut out = pattern(3 << 20, 1);
    let oi = iov(&mut out);
    let mut back = vec![0u8; 3 << 20];
    let bi = iov(&mut back);
    // SAFETY: the buffers outlive their completions.
    unsafe {
        a.ep.recvmsg(&msg(&bi, FiAddr::UNSPEC, 0, 0, 7), OpFlags::empty())
            .unwrap();
        a.ep.sendmsg(&msg(&oi, g, 0, 0, 8), OpFlags::empty())
            .unwrap();
    }
    let mut seen = 0;
    while seen < 2 {
        let e = next(a.cq.as_ref(), &[]).unwrap();
        assert!(e.context == 7 || e.context == 8);
        seen += 1;
    }
    assert!(back == out, "echo through a CMA peer");
    // RMA into the grandchild's region, pushed both ways.
    let mut src = pattern(2 << 20, 3);
    let si = iov(&mut src);
    let r = [RmaIov {
        addr: 100,
        len: 2 << 20,
        key: 9,
    }];
    // SAFETY: as above.
    unsafe {
        a.ep.writemsg(
            &RmaMsg {
                iov: &si,
                desc: &[],
                addr: g,
                rma_iov: &r,
                context: 9,
                data: 0,
            },
            OpFlags::empty(),
        )
        .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[]).unwrap().context, 9);
    let mut rb = vec![0u8; 2 << 20];
    let rbi = iov(&mut rb);
    // SAFETY: as above.
    unsafe {
        a.ep.readmsg(
            &RmaMsg {
                iov: &rbi,
                desc: &[],
                addr: g,
                rma_iov: &r,
                context: 10,
                data: 0,
            },
            OpFlags::empty(),
        )
        .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[]).unwrap().context, 10);
    assert!(rb == src);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn bounce_path_when_cma_is_disabled() {
    if std::env::var(ROLE).as_deref() == Ok("grandchild") {
        return grandchild();
    }
    checks_in_child(
        "bounce_path_when_cma_is_disabled",
        ROLE,
        &[(VAR, "1")],
        checks,
    );
}
