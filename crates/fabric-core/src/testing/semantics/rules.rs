//! The enable rules and addressing.

#[allow(clippy::wildcard_imports)]
use super::*;

/// fi_endpoint(3)'s enable rules: data operations before enable are
/// `OpBadState`; enable needs an AV (`NoAv`) and a CQ (`NoCq`); a CQ
/// bound for neither direction is `BadFlags`; binding after enable and a
/// second enable are `OpBadState`.
pub fn enable_rules(rig: &Rig) {
    let info = rig.base();
    let w = rig.world(&info, 1, Opts::default());
    let d = w.domain.as_ref();
    let ep = d.endpoint(&info).expect("endpoint");
    assert_eq!(
        ep.inject(b"x", w.addr[0], None).refused(),
        ErrorKind::OpBadState,
        "inject before enable"
    );
    let v = iov_of(leak(vec![0; 8]));
    // SAFETY: leaked buffer.
    let r = unsafe { ep.recvmsg(&m(&v, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty()) };
    assert_eq!(r.refused(), ErrorKind::OpBadState, "recv before enable");
    assert_eq!(
        ep.enable().refused(),
        ErrorKind::NoAv,
        "enable without AV or CQ"
    );
    let cq = d
        .cq(&CqAttr {
            wait_obj: WaitObj::Unspec,
            ..CqAttr::default()
        })
        .expect("cq");
    let bind = |ep: &dyn Endpoint, transmit, recv| {
        ep.bind(Bind::Cq {
            cq: cq.as_ref(),
            transmit,
            recv,
            selective: false,
        })
    };
    assert_eq!(
        bind(ep.as_ref(), false, false).refused(),
        ErrorKind::BadFlags
    );
    bind(ep.as_ref(), true, true).expect("bind cq");
    assert_eq!(ep.enable().refused(), ErrorKind::NoAv, "enable without AV");
    let ep2 = d.endpoint(&info).expect("endpoint");
    ep2.bind(Bind::Av(w.av.as_ref())).expect("bind av");
    assert_eq!(ep2.enable().refused(), ErrorKind::NoCq, "enable without CQ");
    bind(ep2.as_ref(), true, true).expect("bind cq");
    ep2.enable().expect("enable");
    assert_eq!(
        ep2.enable().refused(),
        ErrorKind::OpBadState,
        "second enable"
    );
    assert_eq!(
        ep2.bind(Bind::Av(w.av.as_ref())).refused(),
        ErrorKind::OpBadState,
        "bind after enable"
    );
    assert_eq!(
        bind(ep2.as_ref(), true, true).refused(),
        ErrorKind::OpBadState,
        "bind a CQ after enable"
    );
}

/// fi_av(3): lookup gives the inserted name; an address never inserted,
/// and a removed one, are `NoEnt` for sends and lookups (so is
/// FI_ADDR_UNSPEC, which no AV entry is); a message from a removed peer reports FI_ADDR_NOTAVAIL
/// as its source; a peer inserted again is reachable again.
pub fn addresses(rig: &Rig) {
    let w = rig.world(&rig.base(), 2, Opts::default());
    let names: Vec<_> = w
        .eps
        .iter()
        .map(|e| e.ep.getname().expect("getname"))
        .collect();
    assert_eq!(w.av.lookup(w.addr[1]).expect("lookup"), names[1]);
    let never = FiAddr(w.addr.iter().map(|a| a.0).max().unwrap_or(0) + 1000);
    assert_eq!(
        w.av.lookup(never).refused(),
        ErrorKind::NoEnt,
        "lookup never inserted"
    );
    assert_eq!(
        w.ep(0).inject(b"x", never, None).refused(),
        ErrorKind::NoEnt,
        "inject to never inserted"
    );
    assert_eq!(
        w.post(0, never, Op::Send, b"abc", 1, OpFlags::empty())
            .refused(),
        ErrorKind::NoEnt,
        "send to never inserted"
    );
    assert_eq!(
        w.ep(0).inject(b"x", FiAddr::UNSPEC, None).refused(),
        ErrorKind::NoEnt,
        "inject to FI_ADDR_UNSPEC"
    );
    w.nothing(0);
    // Traffic both ways first, so that any connection exists.
    let d = pattern(20, seed());
    w.recv(1, 64, FiAddr::UNSPEC, None, 1, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, &d, 2);
    assert_eq!(w.ok(1).1, w.addr[0]);
    w.ok(0);
    w.recv(0, 64, FiAddr::UNSPEC, None, 1, OpFlags::empty())
        .expect("recv");
    w.send(1, 0, &d, 2);
    assert_eq!(w.ok(0).1, w.addr[1]);
    w.ok(1);
    // Remove endpoint 0: its messages arrive from FI_ADDR_NOTAVAIL.
    w.av.remove(&[w.addr[0]]).expect("remove");
    assert_eq!(
        w.av.lookup(w.addr[0]).refused(),
        ErrorKind::NoEnt,
        "lookup removed"
    );
    assert_eq!(
        w.av.remove(&[w.addr[0]]).refused(),
        ErrorKind::NoEnt,
        "remove twice"
    );
    assert_eq!(
        w.ep(1).inject(b"x", w.addr[0], None).refused(),
        ErrorKind::NoEnt,
        "inject to removed"
    );
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 3, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, &d, 4);
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, e.len, src),
        (3, 20, FiAddr::NOTAVAIL),
        "source of a removed peer"
    );
    same("from a removed peer", &r[..20], &d);
    w.ok(0);
    // Inserted again: reachable, and named as a source again.
    let mut again = [FiAddr(0)];
    assert_eq!(
        w.av.insert(std::slice::from_ref(&names[0]), &mut again)
            .expect("insert"),
        1
    );
    assert_eq!(w.av.lookup(again[0]).expect("lookup"), names[0]);
    let r = w
        .recv(0, 64, FiAddr::UNSPEC, None, 5, OpFlags::empty())
        .expect("recv");
    w.post(1, again[0], Op::Send, &d, 6, OpFlags::empty())
        .expect("send to the re-inserted");
    let (e, src) = w.ok(0);
    assert_eq!((e.context, src), (5, w.addr[1]));
    same("to the re-inserted", &r[..20], &d);
    w.ok(1);
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 7, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, &d, 8);
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, src),
        (7, again[0]),
        "the re-inserted peer as source"
    );
    same("from the re-inserted", &r[..20], &d);
    w.ok(0);
}
