//! Silent connections (issue #21, item 4): an accepted socket costs no
//! buffers until it sends, must say hello within the handshake timeout,
//! and at most a fixed number wait for their hello at once. Its own test
//! binary: it measures the process's memory.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::{FiAddr, Msg, Provider};
use fabric_core::*;

/// Whether the server closed `s` (reads end of file or a reset).
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

/// How many of `silent` the server closed already (a look that does not
/// block).
fn closed_now(silent: &mut [TcpStream]) -> usize {
    let mut n = 0;
    for s in silent.iter_mut() {
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 1];
        if matches!(s.read(&mut buf), Ok(0)) {
            n += 1;
        }
        s.set_nonblocking(false).unwrap();
    }
    n
}

/// Gives the server time to take `silent` in and close those over the cap
/// of 256 waiting for their hello: at least 500 ms, and on a loaded
/// machine until they are closed (at most 5 s, well before the 10 s
/// handshake timeout).
fn let_the_cap_act(silent: &mut [TcpStream]) {
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    while closed_now(silent) < silent.len().saturating_sub(256)
        && start.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checks that of `silent`, those beyond the cap are closed at once and
/// the rest once the handshake timeout passes, `start` being when they
/// connected.
fn closed_by_cap_then_timeout(silent: &mut [TcpStream], start: Instant) {
    let at_once = closed_now(silent);
    for s in silent.iter_mut() {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    }
    assert!(
        at_once >= silent.len() - 256,
        "only {at_once} closed at once"
    );
    for s in silent.iter_mut() {
        assert!(closed(s), "a silent connection is still open");
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(9),
        "closed after {took:?}, before the timeout"
    );
}

#[test]
fn silent_connection_requests_to_a_passive_endpoint_are_capped_and_time_out() {
    use fabric_core::objects::EqAttr;
    let mut h = Info::default();
    h.caps = Caps::MSG;
    h.ep_attr.ep_type = EpType::Msg;
    h.addr_format = AddrFormat::SockaddrIn;
    h.domain_attr.data_progress = Progress::Auto;
    let req = fabric_core::matching::Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..fabric_core::matching::Request::new(Version::CURRENT)
    };
    let info = prov_tcp::TcpProvider.getinfo(&req).unwrap().remove(0);
    let fabric = prov_tcp::TcpProvider.fabric(&info.fabric_attr).unwrap();
    let eq = fabric.eq(&EqAttr::default()).unwrap();
    let pep = fabric.passive_endpoint(&info).unwrap();
    pep.bind_eq(eq.as_ref()).unwrap();
    pep.listen().unwrap();
    let name = pep.getname().unwrap().socket_addr().unwrap();
    let start = Instant::now();
    let mut silent: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(name).unwrap())
        .collect();
    let_the_cap_act(&mut silent);
    closed_by_cap_then_timeout(&mut silent, start);
}

#[test]
fn silent_connections_cost_little_are_capped_and_time_out() {
    let info = auto_info_with(Caps::MSG);
    let b = side(&info);
    let name = b.ep.getname().unwrap().socket_addr().unwrap();
    let before = rss();
    let start = Instant::now();
    let mut silent: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(name).unwrap())
        .collect();
    let_the_cap_act(&mut silent);
    let grown = rss().saturating_sub(before);
    // 64 KiB + 4 KiB of buffers each used to be 20 MB here.
    assert!(grown < 8 << 20, "300 silent connections cost {grown} bytes");
    closed_by_cap_then_timeout(&mut silent, start);
    drop(silent);
    // The endpoint still serves a real peer.
    let a = side(&rdm_info());
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    let mut r = [0u8; 4];
    let riov = iov(&mut r);
    let m = Msg {
        iov: &riov,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag: 0,
        ignore: 0,
        context: 9,
        data: 0,
    };
    // SAFETY: `r` outlives the completion awaited below.
    unsafe { b.ep.recvmsg(&m, OpFlags::empty()) }.unwrap();
    a.ep.inject(b"live", b_at_a, None).unwrap();
    let e = next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    assert_eq!((e.context, &r), (9, b"live"));
}
