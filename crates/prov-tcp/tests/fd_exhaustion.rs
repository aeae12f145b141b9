//! Accepting without file descriptors (issue #21, item 3): a listener that
//! cannot accept (EMFILE) rests instead of being retried in a tight loop,
//! and accepts again once descriptors are back. Its own test binary: it
//! lowers the process's descriptor limit.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use std::time::Duration;

use common::*;
use fabric_core::objects::{FiAddr, Msg, Provider};
use fabric_core::*;

fn cpu_time() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a whole rusage into the pointer on success.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    assert_eq!(rc, 0);
    // SAFETY: initialised by the successful call above.
    let u = unsafe { u.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}

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
    let mut h = Info::default();
    h.caps = Caps::MSG;
    h.mode = Mode::all();
    h.ep_attr.ep_type = EpType::Rdm;
    h.domain_attr.data_progress = Progress::Auto;
    let req = fabric_core::matching::Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..fabric_core::matching::Request::new(Version::CURRENT)
    };
    let info = prov_tcp::TcpProvider.getinfo(&req).unwrap().remove(0);
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
