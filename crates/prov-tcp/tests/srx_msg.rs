//! A shared receive context serving MSG endpoints (the semantics suite
//! covers RDM ones): two accepted connections in one domain receive
//! through one context, each message completing on its own endpoint's CQ;
//! a connection that shuts down does not take the context's receives
//! with it.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

use std::time::{Duration, Instant};

use fabric_core::matching::Request;
use fabric_core::objects::{
    Bind, CompletionQueue, CqAttr, CqEntry, CqFormat, Endpoint, EqAttr, EqEvent, EventQueue,
    FiAddr, IoVec, Msg, Provider, SharedRx, WaitObj,
};
use fabric_core::testing::{pattern, same};
use fabric_core::*;
use prov_tcp::TcpProvider;

fn msg_info(shared: bool) -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG;
    h.ep_attr.ep_type = EpType::Msg;
    h.addr_format = AddrFormat::SockaddrIn;
    if shared {
        h.ep_attr.rx_ctx_cnt = SHARED_CONTEXT;
    }
    let req = Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    TcpProvider.getinfo(&req).unwrap().remove(0)
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

/// The next EQ event, reading `drive` meanwhile (progress).
fn event(eq: &dyn EventQueue, drive: &[&dyn CompletionQueue]) -> EqEvent {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for cq in drive {
            let _ = cq.read(&mut []);
        }
        match eq.sread(Some(Duration::from_millis(5))) {
            Ok(e) => return e,
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("eq: {e}"),
        }
        assert!(Instant::now() < deadline, "no EQ event within 20 s");
    }
}

/// The next completion of `cq`, reading `drive` meanwhile.
fn next(cq: &dyn CompletionQueue, drive: &[&dyn CompletionQueue]) -> CqEntry {
    let mut e = [CqEntry::default()];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for d in drive {
            let _ = d.read(&mut []);
        }
        match cq.read(&mut e) {
            Ok(_) => return e[0],
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("cq: {err}"),
        }
        assert!(Instant::now() < deadline, "no completion within 20 s");
    }
}

/// A receive of `len` leaked bytes on the context.
fn post(srx: &dyn SharedRx, len: usize, ctx: u64) -> &'static [u8] {
    let b: &'static mut [u8] = Box::leak(vec![0xEE; len].into_boxed_slice());
    let p = b.as_mut_ptr();
    let v = [IoVec { addr: p, len }];
    let m = Msg {
        iov: &v,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag: 0,
        ignore: 0,
        context: ctx,
        data: 0,
    };
    // SAFETY: the buffer is leaked: it outlives the receive.
    unsafe { srx.recvmsg(&m, OpFlags::empty()) }.unwrap();
    // SAFETY: the leaked bytes; read after the receive's completion.
    unsafe { std::slice::from_raw_parts(p, len) }
}

/// Sends a copy of `d` on a connected endpoint.
fn send(ep: &dyn Endpoint, d: &[u8], ctx: u64) {
    let b: &'static mut [u8] = Box::leak(d.to_vec().into_boxed_slice());
    let v = [IoVec {
        addr: b.as_mut_ptr(),
        len: b.len(),
    }];
    let m = Msg {
        iov: &v,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag: 0,
        ignore: 0,
        context: ctx,
        data: 0,
    };
    // SAFETY: the buffer is leaked.
    unsafe { ep.sendmsg(&m, OpFlags::empty()) }.unwrap();
}

#[test]
fn one_context_serves_two_accepted_connections() {
    let plain = msg_info(false);
    let shared = msg_info(true);
    assert_eq!(shared.ep_attr.rx_ctx_cnt, SHARED_CONTEXT);
    assert!(shared.domain_attr.max_ep_srx_ctx >= 2);
    let fabric = TcpProvider.fabric(&shared.fabric_attr).unwrap();
    let leq = fabric.eq(&eq_attr()).unwrap();
    let pep = fabric.passive_endpoint(&plain).unwrap();
    pep.bind_eq(leq.as_ref()).unwrap();
    pep.listen().unwrap();
    let sdom = fabric.domain(&shared).unwrap();
    let srx = sdom.srx_context(&shared.rx_attr).unwrap();
    let early = post(srx.as_ref(), 128, 1);

    let cdom = fabric.domain(&plain).unwrap();
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for k in 0..2 {
        let ceq = fabric.eq(&eq_attr()).unwrap();
        let ccq = cdom.cq(&cq_attr()).unwrap();
        let c = cdom.endpoint(&plain).unwrap();
        c.bind(Bind::Eq(ceq.as_ref())).unwrap();
        c.bind(Bind::Cq {
            cq: ccq.as_ref(),
            transmit: true,
            recv: true,
            selective: false,
        })
        .unwrap();
        c.enable().unwrap();
        c.connect(&pep.getname().unwrap(), &[]).unwrap();
        let EqEvent::ConnReq { mut info, .. } = event(leq.as_ref(), &[ccq.as_ref()]) else {
            panic!("connection {k}: expected a request");
        };
        info.ep_attr.rx_ctx_cnt = SHARED_CONTEXT;
        let scq = sdom.cq(&cq_attr()).unwrap();
        let s = sdom.endpoint(&info).unwrap();
        s.bind(Bind::Eq(leq.as_ref())).unwrap();
        s.bind(Bind::Cq {
            cq: scq.as_ref(),
            transmit: true,
            recv: true,
            selective: false,
        })
        .unwrap();
        s.bind_srx(srx.as_ref()).unwrap();
        s.enable().unwrap();
        s.accept(&[]).unwrap();
        assert!(matches!(
            event(ceq.as_ref(), &[scq.as_ref()]),
            EqEvent::Connected { .. }
        ));
        assert!(matches!(
            event(leq.as_ref(), &[ccq.as_ref()]),
            EqEvent::Connected { .. }
        ));
        clients.push((c, ccq, ceq));
        servers.push((s, scq));
    }
    assert_eq!(srx.bound_endpoints(), 2);
    let all: Vec<&dyn CompletionQueue> = clients
        .iter()
        .map(|c| c.1.as_ref())
        .chain(servers.iter().map(|s| s.1.as_ref()))
        .collect();

    // The early receive takes client 1's message, at server 1.
    let d = pattern(100, 1);
    send(clients[1].0.as_ref(), &d, 10);
    let e = next(servers[1].1.as_ref(), &all);
    assert_eq!((e.context, e.len), (1, 100));
    same("early receive", &early[..100], &d);
    next(clients[1].1.as_ref(), &all);
    // Then one each way, in the order posted.
    let r: Vec<_> = (0..2).map(|k| post(srx.as_ref(), 4096, 20 + k)).collect();
    for (k, who) in [0usize, 1].into_iter().enumerate() {
        let d = pattern(3000 + k, 2 + k as u64);
        send(clients[who].0.as_ref(), &d, 30);
        let e = next(servers[who].1.as_ref(), &all);
        assert_eq!((e.context, e.len), (20 + k as u64, d.len()), "message {k}");
        same(&format!("message {k}"), &r[k][..d.len()], &d);
        next(clients[who].1.as_ref(), &all);
    }
    // Client 0 shuts down: the context's receive stays for client 1.
    let kept = post(srx.as_ref(), 256, 40);
    clients[0].0.shutdown().unwrap();
    let ev = event(clients[0].2.as_ref(), &all);
    assert!(matches!(ev, EqEvent::Shutdown { .. }), "{ev:?}");
    let ev = event(leq.as_ref(), &all);
    assert!(matches!(ev, EqEvent::Shutdown { .. }), "{ev:?}");
    let d = pattern(200, 9);
    send(clients[1].0.as_ref(), &d, 41);
    let e = next(servers[1].1.as_ref(), &all);
    assert_eq!((e.context, e.len), (40, 200));
    same("after a shutdown", &kept[..200], &d);
    let mut none = [CqEntry::default()];
    assert_eq!(
        servers[0].1.read(&mut none).map_err(|e| e.kind()),
        Err(ErrorKind::Again),
        "the shut down endpoint reported the context's receive: {:?}",
        none[0]
    );
}
