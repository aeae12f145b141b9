//! Wait fds that wake (`fi_trywait` + `epoll`): an application sleeps on
//! the CQ's and counter's fds in its own epoll set, with no thread in any
//! object, and a peer's message wakes it (the peer writes into our region
//! and rings the doorbell we armed); idle fds stay quiet.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use common::*;
use fabric_core::objects::{CntrAttr, Counter, CqFormat, Provider, WaitObj};
use fabric_core::testing::sleep::{Receiver, Sender, rdm_wakes};
use fabric_core::*;
use prov_shm::ShmProvider;

fn receiver(info: &Info) -> (Side, Box<dyn Counter>) {
    let fabric = ShmProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    let cntr = domain
        .cntr(&CntrAttr {
            wait_obj: WaitObj::Fd,
        })
        .unwrap();
    let side = open_in(
        info,
        fabric,
        domain,
        CqFormat::Tagged,
        &[(cntr.as_ref(), Caps::RECV)],
    );
    (side, cntr)
}

fn run(info: &Info) {
    let a = side(&self::info());
    let (b, cntr) = receiver(info);
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    insert(&b, &a.ep.getname().unwrap());
    let wakes = rdm_wakes(
        Sender {
            ep: a.ep.as_ref(),
            cq: a.cq.as_ref(),
            to: b_at_a,
        },
        Receiver {
            ep: b.ep.as_ref(),
            cq: b.cq.as_ref(),
            cntr: cntr.as_ref(),
        },
    );
    eprintln!("idle wake-ups in 200 ms: {wakes}");
}

#[test]
fn cq_and_counter_fds_wake_an_epoll_in_another_thread() {
    run(&info());
}

#[test]
fn auto_progress_cq_and_counter_fds_wake() {
    run(&info_with(
        Caps::MSG | Caps::TAGGED,
        MrMode::empty(),
        Progress::Auto,
    ));
}

const ROLE: &str = "PROV_SHM_WAIT_FD_PEER";

/// The peer process: every message it receives it sends on to the
/// parent's receiving endpoint (whose name it was given), until "quit" or
/// a minute passes.
#[test]
fn peer_process() {
    use fabric_core::objects::{CqEntry, FiAddr};
    use std::time::{Duration, Instant};
    if std::env::var(ROLE).is_err() {
        return;
    }
    let me = side(&info());
    let mut region = vec![0u8; 64];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let (_mr, parent) = unsafe {
        fabric_core::testing::peer_start(me.domain.as_ref(), me.ep.as_ref(), &mut region, 1)
    };
    let parent = insert(&me, &parent);
    let mut buf = vec![0u8; 64];
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        let v = iov(&mut buf);
        // SAFETY: `buf` outlives the receive, completed below.
        unsafe {
            me.ep
                .recvmsg(&msg(&v, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
                .unwrap()
        };
        let mut e = [CqEntry::default()];
        let n = loop {
            match me.cq.sread(&mut e, Some(Duration::from_millis(100))) {
                Ok(_) if e[0].context == 1 => break e[0].len,
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::Again => {
                    if Instant::now() >= end {
                        return;
                    }
                }
                Err(err) => panic!("peer: {err}"),
            }
        };
        if &buf[..n] == b"quit" {
            return;
        }
        me.ep.inject(&buf[..n], parent, None).unwrap();
    }
}

#[test]
fn a_message_from_another_process_wakes_the_sleep() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let a = side(&info());
    let (b, cntr) = receiver(&info());
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.env(ROLE, "forward");
    // The peer sends what `a` asks it to the receiver `b`.
    let peer = fabric_core::testing::PeerProcess::spawn(cmd, &b.ep.getname().unwrap());
    let peer_at_a = insert(&a, &peer.name);
    insert(&b, &peer.name);
    let send = |what: &[u8], done: &AtomicBool| {
        std::thread::sleep(Duration::from_millis(100));
        a.ep.inject(what, peer_at_a, None).unwrap();
        let end = Instant::now() + Duration::from_secs(30);
        let mut e = [fabric_core::objects::CqEntry::default()];
        while !done.load(Ordering::SeqCst) && Instant::now() < end {
            let _ = a.cq.read(&mut e);
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let wakes = fabric_core::testing::sleep::rdm_wakes_by(
        &send,
        Receiver {
            ep: b.ep.as_ref(),
            cq: b.cq.as_ref(),
            cntr: cntr.as_ref(),
        },
    );
    eprintln!("idle wake-ups in 200 ms: {wakes}");
    let _ = a.ep.inject(b"quit", peer_at_a, None);
    let mut e = [fabric_core::objects::CqEntry::default()];
    for _ in 0..100 {
        let _ = a.cq.read(&mut e);
    }
    drop(peer);
}

#[test]
fn a_peer_that_closes_under_an_operation_in_flight_wakes_the_sleep() {
    use fabric_core::objects::{CqEntry, CqErrEntry};
    use fabric_core::testing::sleep::Sleeper;
    use std::cell::RefCell;
    use std::time::Duration;
    // `a` sends a message larger than the eager limit to `b`, which posts
    // no receive: the send stays in flight. The application sleeps on
    // `a`'s CQ fd; `b` closes, which writes nothing into `a`'s region: the
    // one-shot check timer that trywait armed must wake the sleep, and the
    // send must fail.
    let (a, b, b_at_a, _) = pair();
    let big: &'static mut [u8] = Box::leak(vec![5u8; 4 << 20].into_boxed_slice());
    let v = iov(big);
    // SAFETY: the buffer is leaked: it outlives the operation.
    unsafe {
        a.ep.sendmsg(&msg(&v, b_at_a, 0, 0, 9), OpFlags::empty())
            .unwrap()
    };
    let fd = a.cq.wait_fd().unwrap();
    let sl = Sleeper::new(&[fd]);
    let failed: RefCell<Option<CqErrEntry>> = RefCell::new(None);
    let drain = || {
        let mut e = [CqEntry::default()];
        match a.cq.read(&mut e) {
            Err(err) if err.kind() == ErrorKind::Avail => {
                *failed.borrow_mut() = Some(a.cq.readerr().unwrap());
            }
            Ok(_) => panic!("the send completed: {:?}", e[0]),
            Err(_) => {}
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            drop(b);
        });
        sl.sleep_until(
            &|| a.cq.trywait(),
            &mut || drain(),
            &|| failed.borrow().is_some(),
            Duration::from_secs(30),
        );
    });
    let e = failed.into_inner().unwrap();
    assert_eq!((e.entry.context, e.err), (9, ErrorKind::ConnReset), "{e:?}");
}
