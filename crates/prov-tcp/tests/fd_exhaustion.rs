//! Accepting without file descriptors (issue #21, item 3): a listener that
//! cannot accept (EMFILE) rests instead of being retried in a tight loop,
//! and accepts again once descriptors are back. Its own test binary: it
//! lowers the process's descriptor limit.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use std::time::Duration;

use common::*;
use fabric_core::objects::{FiAddr, Msg};
use fabric_core::*;

fn set_fd_limit(soft: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        let old = r.rlim_cur;
        r.rlim_cur = soft;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        old
    }
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

#[test]
fn a_listener_out_of_descriptors_rests_and_recovers() {
    // b progresses by itself (a thread), so a spinning accept shows as CPU.
    let info = auto_info_with(Caps::MSG);
    let b = side(&info);
    let a = side(&rdm_info());
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    let name = b.ep.getname().unwrap().socket_addr().unwrap();
    // Sockets made while descriptors last; connected once they are gone.
    let clients: Vec<socket2::Socket> = (0..100)
        .map(|_| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap())
        .collect();
    let old = set_fd_limit(open_fds() + 2);
    for c in &clients {
        c.connect(&name.into()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_time();
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_time() - before;
    set_fd_limit(old);
    assert!(used < Duration::from_millis(100), "{used:?} of CPU in 1 s");
    drop(clients);
    // Descriptors are back: b accepts a's connection, and a's message
    // arrives.
    let mut r = [0u8; 4];
    let riov = iov(&mut r);
    let m = Msg {
        iov: &riov,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag: 0,
        ignore: 0,
        context: 3,
        data: 0,
    };
    // SAFETY: `r` outlives the completion awaited below.
    unsafe { b.ep.recvmsg(&m, OpFlags::empty()) }.unwrap();
    a.ep.inject(b"back", b_at_a, None).unwrap();
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, &r), (3, b"back"));
}
