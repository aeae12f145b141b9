//! MSG endpoints over loopback, in one process: passive endpoint, connect
//! / accept / reject with private data, data both ways, shutdown, refused
//! connections.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

use std::time::{Duration, Instant};

use fabric_core::matching::Request;
use fabric_core::objects::{
    Bind, CompletionQueue, CqAttr, CqEntry, CqFormat, Domain, Endpoint, EqAttr, EqEvent,
    EventQueue, Fabric, FiAddr, IoVec, Msg, PassiveEndpoint, Provider, WaitObj,
};
use fabric_core::*;
use prov_tcp::TcpProvider;

const T: Option<Duration> = Some(Duration::from_secs(20));

fn msg_info() -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::TAGGED;
    h.ep_attr.ep_type = EpType::Msg;
    h.addr_format = AddrFormat::SockaddrIn;
    let req = Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    let list = TcpProvider.getinfo(&req).unwrap();
    assert!(list.iter().all(|i| i.ep_attr.ep_type == EpType::Msg));
    list.into_iter().next().unwrap()
}

fn eq_attr() -> EqAttr {
    EqAttr {
        wait_obj: WaitObj::Unspec,
        ..EqAttr::default()
    }
}

fn cq_attr() -> CqAttr {
    CqAttr {
        format: CqFormat::Tagged,
        wait_obj: WaitObj::Unspec,
        ..CqAttr::default()
    }
}

struct Side {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    _domain: Box<dyn Domain>,
}

fn open(fabric: &dyn Fabric, info: &Info, eq: &dyn EventQueue) -> Side {
    let domain = fabric.domain(info).unwrap();
    let cq = domain.cq(&cq_attr()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Eq(eq)).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.enable().unwrap();
    Side {
        ep,
        cq,
        _domain: domain,
    }
}

struct Listener {
    fabric: Box<dyn Fabric>,
    eq: Box<dyn EventQueue>,
    pep: Box<dyn PassiveEndpoint>,
}

fn listener() -> Listener {
    let info = msg_info();
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let eq = fabric.eq(&eq_attr()).unwrap();
    let pep = fabric.passive_endpoint(&info).unwrap();
    pep.bind_eq(eq.as_ref()).unwrap();
    pep.listen().unwrap();
    Listener { fabric, eq, pep }
}

/// Reads the next EQ event, driving the progress of other endpoints
/// meanwhile (through their CQs, without taking completions).
fn event(
    eq: &dyn EventQueue,
    drive: &[&dyn CompletionQueue],
) -> std::result::Result<EqEvent, Error> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for cq in drive {
            let _ = cq.read(&mut []);
        }
        match eq.sread(Some(Duration::from_millis(5))) {
            Ok(e) => return Ok(e),
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => return Err(e),
        }
        assert!(Instant::now() < deadline, "no EQ event within 20 s");
    }
}

/// A connected pair: (server side, client side) plus their EQs.
fn connected(l: &Listener) -> (Side, Side, Box<dyn EventQueue>) {
    let info = msg_info();
    let ceq = l.fabric.eq(&eq_attr()).unwrap();
    let client = open(l.fabric.as_ref(), &info, ceq.as_ref());
    client
        .ep
        .connect(&l.pep.getname().unwrap(), b"hello from the client")
        .unwrap();
    let EqEvent::ConnReq {
        info: req,
        data,
        fid,
    } = event(l.eq.as_ref(), &[client.cq.as_ref()]).unwrap()
    else {
        panic!("expected a connection request");
    };
    assert_eq!(data, b"hello from the client");
    let pep_fid = l
        .pep
        .as_any()
        .downcast_ref::<prov_tcp::TcpPassiveEndpoint>()
        .unwrap()
        .fid();
    assert_eq!(fid, pep_fid);
    assert!(req.handle.is_some());
    let server = open(l.fabric.as_ref(), &req, l.eq.as_ref());
    server.ep.accept(b"welcome").unwrap();
    let ev = event(ceq.as_ref(), &[server.cq.as_ref()]).unwrap();
    assert!(
        matches!(&ev, EqEvent::Connected { data, .. } if data == b"welcome"),
        "{ev:?}"
    );
    let ev = event(l.eq.as_ref(), &[client.cq.as_ref()]).unwrap();
    assert!(
        matches!(&ev, EqEvent::Connected { data, .. } if data.is_empty()),
        "{ev:?}"
    );
    (server, client, ceq)
}

fn iov(b: &mut [u8]) -> [IoVec; 1] {
    [IoVec {
        addr: b.as_mut_ptr(),
        len: b.len(),
    }]
}

fn msg(iov: &[IoVec], tag: u64, ctx: u64) -> Msg<'_> {
    Msg {
        iov,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag,
        ignore: 0,
        context: ctx,
        data: 0,
    }
}

fn next(
    cq: &dyn CompletionQueue,
    other: &dyn CompletionQueue,
) -> std::result::Result<CqEntry, Error> {
    let mut e = [CqEntry::default()];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let _ = other.read(&mut []);
        match cq.read(&mut e) {
            Ok(_) => return Ok(e[0]),
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => return Err(err),
        }
        assert!(Instant::now() < deadline, "no completion within 20 s");
    }
}

#[test]
fn getinfo_offers_msg_with_its_caps() {
    let info = msg_info();
    assert!(info.caps.contains(Caps::MSG | Caps::TAGGED));
    assert!(!info.caps.contains(Caps::DIRECTED_RECV));
}

#[test]
fn connect_accept_and_data_both_ways() {
    let l = listener();
    let (server, client, _ceq) = connected(&l);
    assert_eq!(
        client.ep.getpeer().unwrap(),
        l.pep.getname().unwrap(),
        "the client's peer is the listening address"
    );
    assert_eq!(server.ep.getpeer().unwrap(), client.ep.getname().unwrap());
    let mut r = vec![0u8; 64];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&riov, 0, 1), OpFlags::empty())
            .unwrap()
    };
    client.ep.inject(b"ping", FiAddr::UNSPEC, Some(7)).unwrap();
    let e = next(server.cq.as_ref(), client.cq.as_ref()).unwrap();
    assert_eq!((e.context, e.len, e.data), (1, 4, 7));
    assert_eq!(&r[..4], b"ping");
    // Tagged, large, the other way: 1 MiB goes eagerly on this loopback
    // connection (lone, and no congestion control paces it), 9 MiB is
    // above that limit (8 MiB) and goes by rendezvous.
    for (k, n) in [(0u64, 1 << 20), (2, 9 << 20)] {
        let mut big: Vec<u8> = (0..n).map(|i| (i % 249) as u8).collect();
        let mut rbig = vec![0u8; n];
        let riov = iov(&mut rbig);
        // SAFETY: rbig outlives the completion.
        unsafe {
            client
                .ep
                .trecvmsg(&msg(&riov, 5, 2 + k), OpFlags::empty())
                .unwrap()
        };
        let siov = iov(&mut big);
        // SAFETY: big outlives the completion.
        unsafe {
            server
                .ep
                .tsendmsg(&msg(&siov, 5, 3 + k), OpFlags::empty())
                .unwrap()
        };
        let e = next(client.cq.as_ref(), server.cq.as_ref()).unwrap();
        assert_eq!((e.context, e.len, e.tag), (2 + k, n, 5));
        assert!(rbig == big);
        let e = next(server.cq.as_ref(), client.cq.as_ref()).unwrap();
        assert_eq!(e.context, 3 + k);
    }
}

#[test]
fn sends_before_the_accept_wait_for_it() {
    let l = listener();
    let info = msg_info();
    let ceq = l.fabric.eq(&eq_attr()).unwrap();
    let client = open(l.fabric.as_ref(), &info, ceq.as_ref());
    client.ep.connect(&l.pep.getname().unwrap(), b"").unwrap();
    client.ep.inject(b"early", FiAddr::UNSPEC, None).unwrap();
    let EqEvent::ConnReq {
        info: req, data, ..
    } = event(l.eq.as_ref(), &[client.cq.as_ref()]).unwrap()
    else {
        panic!("expected a connection request");
    };
    assert!(data.is_empty());
    let server = open(l.fabric.as_ref(), &req, l.eq.as_ref());
    let mut r = vec![0u8; 16];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&riov, 0, 1), OpFlags::empty())
            .unwrap()
    };
    server.ep.accept(b"").unwrap();
    let e = next(server.cq.as_ref(), client.cq.as_ref()).unwrap();
    assert_eq!((e.context, &r[..e.len]), (1, &b"early"[..]));
}

#[test]
fn reject_carries_private_data() {
    let l = listener();
    let info = msg_info();
    let ceq = l.fabric.eq(&eq_attr()).unwrap();
    let client = open(l.fabric.as_ref(), &info, ceq.as_ref());
    client
        .ep
        .connect(&l.pep.getname().unwrap(), b"let me in")
        .unwrap();
    let EqEvent::ConnReq { info: req, .. } = event(l.eq.as_ref(), &[client.cq.as_ref()]).unwrap()
    else {
        panic!("expected a connection request");
    };
    l.pep.reject(req.handle.unwrap(), b"go away").unwrap();
    let err = event(ceq.as_ref(), &[]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Avail);
    let e = ceq.readerr().unwrap();
    assert_eq!(
        (e.err, &e.data[..]),
        (ErrorKind::ConnRefused, &b"go away"[..])
    );
    // The handle is used up.
    assert_eq!(
        l.pep.reject(req.handle.unwrap(), b"").unwrap_err().kind(),
        ErrorKind::NoEnt
    );
    // And so is the client endpoint.
    let e = client.ep.inject(b"x", FiAddr::UNSPEC, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shutdown, "its connection ended: {e}");
}

#[test]
fn refused_by_the_os_is_an_eq_error() {
    // A port nobody listens on: bind one, learn its number, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let info = msg_info();
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let ceq = fabric.eq(&eq_attr()).unwrap();
    let client = open(fabric.as_ref(), &info, ceq.as_ref());
    let dest: Address = format!("fi_sockaddr_in://127.0.0.1:{port}")
        .parse()
        .unwrap();
    client.ep.connect(&dest, b"anyone?").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match ceq.sread(Some(Duration::from_millis(10))) {
            Err(e) if e.kind() == ErrorKind::Avail => break,
            Err(e) if e.kind() == ErrorKind::Again => {}
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline);
    }
    let e = ceq.readerr().unwrap();
    assert_eq!(e.err, ErrorKind::ConnRefused, "{e:?}");
}

#[test]
fn shutdown_reaches_the_peer_and_fails_pending_operations() {
    let l = listener();
    let (server, client, ceq) = connected(&l);
    let mut r = vec![0u8; 16];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion (an error completion below).
    unsafe {
        server
            .ep
            .recvmsg(&msg(&riov, 0, 9), OpFlags::empty())
            .unwrap()
    };
    let mut rc = vec![0u8; 16];
    let rciov = iov(&mut rc);
    // SAFETY: as above.
    unsafe {
        client
            .ep
            .recvmsg(&msg(&rciov, 0, 8), OpFlags::empty())
            .unwrap()
    };
    client.ep.shutdown().unwrap();
    let ev = event(ceq.as_ref(), &[server.cq.as_ref()]).unwrap();
    assert!(matches!(ev, EqEvent::Shutdown { .. }), "{ev:?}");
    let ev = event(l.eq.as_ref(), &[client.cq.as_ref()]).unwrap();
    assert!(matches!(ev, EqEvent::Shutdown { .. }), "{ev:?}");
    for (side, ctx) in [(&server, 9), (&client, 8)] {
        let err = next(side.cq.as_ref(), side.cq.as_ref()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Avail);
        let e = side.cq.readerr().unwrap();
        assert_eq!(e.entry.context, ctx);
    }
    for ep in [&server.ep, &client.ep] {
        let e = ep.inject(b"x", FiAddr::UNSPEC, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Shutdown, "{e}");
    }
    // SAFETY: nothing is posted (the endpoint is shut down).
    let again = unsafe { client.ep.recvmsg(&msg(&rciov, 0, 8), OpFlags::empty()) };
    assert_eq!(again.unwrap_err().kind(), ErrorKind::Shutdown);
}

#[test]
fn eq_sread_sees_a_shutdown_after_busy_polling() {
    // Busy polling takes the established connection out of the epoll set;
    // a blocking EQ read must put it back and wake for the peer's shutdown.
    let l = listener();
    let (server, client, _ceq) = connected(&l);
    let mut r = vec![0u8; 16];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion, read below.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&riov, 0, 5), OpFlags::empty())
            .unwrap()
    };
    client.ep.inject(b"ping", FiAddr::UNSPEC, None).unwrap();
    assert_eq!(
        next(server.cq.as_ref(), client.cq.as_ref())
            .unwrap()
            .context,
        5
    );
    let mut e = [CqEntry::default()];
    for _ in 0..100 {
        let _ = client.cq.read(&mut e);
        assert_eq!(server.cq.read(&mut e).unwrap_err().kind(), ErrorKind::Again);
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            client.ep.shutdown().unwrap();
        });
        let start = Instant::now();
        let ev = l.eq.sread(Some(Duration::from_secs(30))).unwrap();
        assert!(matches!(ev, EqEvent::Shutdown { .. }), "{ev:?}");
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the EQ read slept through the shutdown"
        );
    });
}

#[test]
fn a_bad_handle_and_bad_binds() {
    let info = msg_info();
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let mut bad = info.clone();
    bad.handle = Some(Handle(u64::MAX));
    assert_eq!(
        domain.endpoint(&bad).err().unwrap().kind(),
        ErrorKind::NoEnt
    );
    let ep = domain.endpoint(&info).unwrap();
    let cq = domain.cq(&cq_attr()).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    assert_eq!(ep.enable().unwrap_err().kind(), ErrorKind::NoEq);
    let av = domain.av(&Default::default()).unwrap();
    assert_eq!(
        ep.bind(Bind::Av(av.as_ref())).unwrap_err().kind(),
        ErrorKind::OpNotSupp
    );
    assert_eq!(
        ep.inject(b"x", FiAddr::UNSPEC, None).unwrap_err().kind(),
        ErrorKind::OpBadState
    );
    let _ = T;
}

/// Drives both sides until the completions with `contexts` arrived (from
/// either CQ); returns them in the order they came.
fn completions(a: &Side, b: &Side, contexts: &[u64]) -> Vec<CqEntry> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < contexts.len() {
        for cq in [a.cq.as_ref(), b.cq.as_ref()] {
            let mut e = [CqEntry::default()];
            match cq.read(&mut e) {
                Ok(_) => {
                    assert!(contexts.contains(&e[0].context), "{:?}", e[0]);
                    got.push(e[0]);
                }
                Err(err) if err.kind() == ErrorKind::Again => {}
                Err(err) => panic!("{err}: {:?}", cq.readerr()),
            }
        }
        assert!(Instant::now() < deadline, "only {got:?} within 30 s");
    }
    got
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_mul(37))
        .collect()
}

/// Large MSG messages arrive intact and match receives in order: into a
/// receive posted first, into one posted after the message arrived, and
/// for a message larger than the unexpected budget (8 MiB) with a small
/// one behind it.
#[test]
fn large_messages_arrive_intact_and_in_order() {
    let l = listener();
    let (server, client, _ceq) = connected(&l);
    let send = |buf: &mut Vec<u8>, ctx: u64| {
        let siov = iov(buf);
        // SAFETY: every buffer outlives its completion, awaited below.
        unsafe { client.ep.sendmsg(&msg(&siov, 0, ctx), OpFlags::empty()) }.unwrap();
    };
    let post = |buf: &mut Vec<u8>, ctx: u64| {
        let riov = iov(buf);
        // SAFETY: as above.
        unsafe { server.ep.recvmsg(&msg(&riov, 0, ctx), OpFlags::empty()) }.unwrap();
    };

    // Expected: the receive waits.
    let n = 1 << 20;
    let mut big = pattern(n, 1);
    let mut r1 = vec![0u8; n];
    post(&mut r1, 10);
    send(&mut big, 11);
    let got = completions(&server, &client, &[10, 11]);
    let rx = got.iter().find(|e| e.context == 10).unwrap();
    assert_eq!(rx.len, n);
    assert!(r1 == big);

    // Unexpected: the receive is posted after both sides progressed.
    let mut big2 = pattern(n, 2);
    send(&mut big2, 21);
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(20) {
        let _ = server.cq.read(&mut []);
        let _ = client.cq.read(&mut []);
    }
    let mut r2 = vec![0u8; n];
    post(&mut r2, 20);
    let got = completions(&server, &client, &[20, 21]);
    let rx = got.iter().find(|e| e.context == 20).unwrap();
    assert_eq!(rx.len, n);
    assert!(r2 == big2);

    // Larger than the unexpected budget, then a small one behind it.
    let huge = 12 << 20;
    let mut big3 = pattern(huge, 3);
    let mut small = b"behind the large one".to_vec();
    send(&mut big3, 31);
    send(&mut small, 32);
    // Both sides progress for a while before the receives are posted.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(50) {
        let _ = server.cq.read(&mut []);
        let _ = client.cq.read(&mut []);
    }
    let mut r3 = vec![0u8; huge];
    let mut r4 = vec![0u8; 64];
    post(&mut r3, 30);
    post(&mut r4, 33);
    let got = completions(&server, &client, &[30, 31, 32, 33]);
    // Messages match receives in order (a rendezvous one may complete
    // after the small one behind it).
    let len = |ctx| got.iter().find(|e| e.context == ctx).unwrap().len;
    assert_eq!((len(30), len(33)), (huge, small.len()));
    assert!(r3 == big3);
    assert_eq!(&r4[..small.len()], &small[..]);
}
