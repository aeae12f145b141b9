//! Shared receive contexts (`fi_srx_context(3)`, fi_endpoint(3)): the
//! receives posted on one context are matched, in the order posted, by
//! the messages arriving at every endpoint bound to it; each completion
//! goes to the CQ of the endpoint its message arrived at, with that
//! endpoint's source address.
//!
//! A provider offers them when getinfo answers hints with
//! `ep_attr.rx_ctx_cnt` = FI_SHARED_CONTEXT (its `max_ep_srx_ctx` is
//! then above 0). One that does not must say so: getinfo refuses those
//! hints (`NoData`), its `max_ep_srx_ctx` is 0 and
//! [`Domain::srx_context`] is `NoSys`; the checks then print a skip
//! notice.
//!
//! The world of these checks: endpoints 0 and 3 send; endpoints 1 and 2
//! are bound to the context. All four share one AV.

use std::time::{Duration, Instant};

use super::{BASE, Ep, Opts, Refused, Rig, T, World, has, iov_of, leak, m};
use crate::attr::SHARED_CONTEXT;
use crate::objects::{
    AvAttr, Bind, CompletionFlags, CqAttr, CqEntry, FiAddr, IoVec, SharedRx, WaitObj,
};
use crate::testing::{pattern, same, seed};
use crate::{Caps, ErrorKind, OpFlags, Request, Version};

/// The endpoints bound to the context.
const BOUND: [usize; 2] = [1, 2];

impl Rig {
    /// The answer for the base capabilities and `caps` with
    /// `ep_attr.rx_ctx_cnt` = FI_SHARED_CONTEXT, when the provider offers
    /// shared receive contexts (and `caps`). Otherwise asserts that it
    /// says so everywhere (getinfo refuses; `max_ep_srx_ctx` is 0;
    /// `srx_context` is `NoSys`), prints that `what` is skipped and
    /// returns `None`.
    pub fn offers_srx(&self, caps: Caps, what: &str) -> Option<crate::Info> {
        let plain = self.offers(caps, what)?;
        let mut h = self.hints.clone();
        h.caps |= BASE | caps;
        h.ep_attr.rx_ctx_cnt = SHARED_CONTEXT;
        let req = Request {
            node: self.node,
            flags: self.flags,
            hints: Some(&h),
            ..Request::new(Version::CURRENT)
        };
        match self.provider.getinfo(&req) {
            Ok(mut l) if !l.is_empty() => {
                let i = l.remove(0);
                assert!(
                    i.domain_attr.max_ep_srx_ctx > 0,
                    "FI_SHARED_CONTEXT is answered, but max_ep_srx_ctx is 0"
                );
                assert_eq!(
                    i.ep_attr.rx_ctx_cnt, SHARED_CONTEXT,
                    "the answer to FI_SHARED_CONTEXT hints"
                );
                assert!(
                    plain.domain_attr.max_ep_srx_ctx > 0,
                    "the plain answer hides max_ep_srx_ctx"
                );
                Some(i)
            }
            Ok(_) => panic!("getinfo answered an empty list"),
            Err(e) if e.kind() == ErrorKind::NoData => {
                assert_eq!(
                    plain.domain_attr.max_ep_srx_ctx, 0,
                    "max_ep_srx_ctx > 0, but FI_SHARED_CONTEXT hints find nothing"
                );
                let fabric = self.provider.fabric(&plain.fabric_attr).expect("fabric");
                let domain = fabric.domain(&plain).expect("domain");
                assert_eq!(
                    domain.srx_context(&plain.rx_attr).refused(),
                    ErrorKind::NoSys,
                    "srx_context of a provider without shared receive contexts"
                );
                eprintln!(
                    "semantics: {what}: skipped, {} has no shared receive contexts",
                    self.provider.name()
                );
                None
            }
            Err(e) => panic!("getinfo for FI_SHARED_CONTEXT: {e}"),
        }
    }

    /// Four enabled endpoints in one domain sharing an AV, each with its
    /// own CQ; endpoints 1 and 2 (opened with `shared`, whose
    /// `rx_ctx_cnt` is FI_SHARED_CONTEXT) bound to a new shared receive
    /// context, the others opened with `shared` but its context count
    /// set back to 1. `early` runs on the context before any endpoint is
    /// opened.
    fn srx_world(
        &self,
        shared: &crate::Info,
        early: impl FnOnce(&dyn SharedRx),
    ) -> (World, Box<dyn SharedRx>) {
        let fabric = self.provider.fabric(&shared.fabric_attr).expect("fabric");
        let domain = fabric.domain(shared).expect("domain");
        let srx = domain.srx_context(&shared.rx_attr).expect("srx_context");
        early(srx.as_ref());
        let mut plain = shared.clone();
        plain.ep_attr.rx_ctx_cnt = 1;
        let av = domain.av(&AvAttr::default()).expect("av");
        let mut eps = Vec::new();
        for i in 0..4 {
            let cq = domain
                .cq(&CqAttr {
                    format: Opts::default().format,
                    wait_obj: WaitObj::Unspec,
                    ..CqAttr::default()
                })
                .expect("cq");
            let info = if BOUND.contains(&i) { shared } else { &plain };
            let ep = domain.endpoint(info).expect("endpoint");
            ep.bind(Bind::Cq {
                cq: cq.as_ref(),
                transmit: true,
                recv: true,
                selective: false,
            })
            .expect("bind cq");
            ep.bind(Bind::Av(av.as_ref())).expect("bind av");
            if BOUND.contains(&i) {
                ep.bind_srx(srx.as_ref()).expect("bind srx");
            }
            ep.enable().expect("enable");
            eps.push(Ep { ep, cq });
        }
        assert_eq!(srx.bound_endpoints(), 2, "endpoints bound to the context");
        let names: Vec<_> = eps
            .iter()
            .map(|e| e.ep.getname().expect("getname"))
            .collect();
        let mut addr = vec![FiAddr(0); eps.len()];
        assert_eq!(av.insert(&names, &mut addr).expect("av insert"), eps.len());
        let w = World {
            eps,
            cntrs: Vec::new(),
            addr,
            av,
            domain,
            fabric,
            info: shared.clone(),
        };
        (w, srx)
    }
}

/// A receive posted on the context.
fn srx_recv(
    w: &World,
    srx: &dyn SharedRx,
    len: usize,
    src: FiAddr,
    tag: Option<(u64, u64)>,
    ctx: u64,
    flags: OpFlags,
) -> crate::Result<&'static [u8]> {
    let buf = leak(vec![0xEE; len]);
    let p = buf.as_mut_ptr();
    let v = [IoVec { addr: p, len }];
    w.retry(|| match tag {
        // SAFETY: the buffer is leaked: it outlives the operation.
        None => unsafe { srx.recvmsg(&m(&v, src, 0, 0, ctx), flags) },
        // SAFETY: as above.
        Some((t, ign)) => unsafe { srx.trecvmsg(&m(&v, src, t, ign, ctx), flags) },
    })?;
    // SAFETY: `p` points at the leaked `len` bytes; the provider writes
    // them only before the completion the test awaits before reading.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Waits for the next completion on endpoint `i`'s CQ, asserting that the
/// other bound endpoint's CQ has none meanwhile.
fn ok_at(w: &World, i: usize) -> (CqEntry, FiAddr) {
    let (e, src) = w.ok(i);
    let other = if i == 1 { 2 } else { 1 };
    let mut none = [CqEntry::default()];
    match w.eps[other].cq.read(&mut none) {
        Err(err) if err.kind() == ErrorKind::Again => {}
        r => panic!("endpoint {other} has a completion too: {r:?} {:?}", none[0]),
    }
    (e, src)
}

/// Waits until what `from` sent to `at` so far has arrived: a message
/// sent after it (the same connection keeps order) completes a receive
/// posted on the context for it.
fn arrived(w: &World, srx: &dyn SharedRx, from: usize, at: usize) {
    let r = srx_recv(w, srx, 16, FiAddr::UNSPEC, None, 0xfe, OpFlags::empty()).expect("recv");
    let d = pattern(16, seed());
    w.send(from, at, &d, 0xfe);
    let (e, src) = ok_at(w, at);
    assert_eq!((e.context, e.len, src), (0xfe, 16, w.addr[from]), "marker");
    same("marker", r, &d);
    w.ok(from);
}

/// The checks every message of [`srx_messages`] passes: received on the
/// CQ of endpoint `at`, from `from`, into receive `ctx` whose buffer
/// holds `want` followed by untouched bytes.
fn landed(w: &World, at: usize, from: usize, ctx: u64, buf: &[u8], want: &[u8]) {
    let (e, src) = ok_at(w, at);
    assert_eq!(
        (e.context, e.len, src),
        (ctx, want.len(), w.addr[from]),
        "message {from} -> {at} into receive {ctx}"
    );
    assert!(
        has(&e, CompletionFlags::RECV | CompletionFlags::MSG),
        "{:?}",
        e.flags
    );
    same(
        &format!("message {from} -> {at} into receive {ctx}"),
        &buf[..want.len()],
        want,
    );
    assert!(
        buf[want.len()..].iter().all(|&b| b == 0xEE),
        "receive {ctx}: bytes past the message written"
    );
}

/// Messages from two peers to both bound endpoints take the context's
/// receives in the order posted (a receive posted before any endpoint
/// was opened included), eager and rendezvous, expected and unexpected;
/// each completes on its own endpoint's CQ with its source; the bound
/// endpoints' own receive calls and the context's sends are refused.
pub fn srx_messages(rig: &Rig) {
    let Some(info) = rig.offers_srx(Caps::empty(), "shared receive context messages") else {
        return;
    };
    let mut early: Option<&'static [u8]> = None;
    let (w, srx) = rig.srx_world(&info, |s| {
        let buf = leak(vec![0xEE; 256]);
        let p = buf.as_mut_ptr();
        let v = [IoVec { addr: p, len: 256 }];
        // SAFETY: the buffer is leaked: it outlives the operation.
        unsafe { s.recvmsg(&m(&v, FiAddr::UNSPEC, 0, 0, 1000), OpFlags::empty()) }
            .expect("recv before any endpoint is enabled");
        // SAFETY: `p` points at the leaked 256 bytes.
        early = Some(unsafe { std::slice::from_raw_parts(p, 256) });
    });
    let srx = srx.as_ref();
    // The receive posted before the endpoints existed takes the first
    // message, at endpoint 2.
    let d = pattern(200, seed());
    w.send(3, 2, &d, 1);
    landed(&w, 2, 3, 1000, early.expect("early receive"), &d);
    w.ok(3);
    // Expected messages: receives first, one message at a time, from
    // both senders to both bound endpoints, eager and rendezvous.
    let route = [(0, 1), (3, 2), (0, 2), (3, 1), (0, 1), (3, 2)];
    let sizes = [1usize, 100, 4096, 65_539, 1 << 20, 333];
    let mut bufs = Vec::new();
    for (k, &n) in sizes.iter().enumerate() {
        let r = srx_recv(
            &w,
            srx,
            n + 16,
            FiAddr::UNSPEC,
            None,
            100 + k as u64,
            OpFlags::empty(),
        )
        .expect("srx recv");
        bufs.push(r);
    }
    for (k, (&(from, to), &n)) in route.iter().zip(&sizes).enumerate() {
        let want = pattern(n, seed());
        w.send(from, to, &want, 200 + k as u64);
        landed(&w, to, from, 100 + k as u64, bufs[k], &want);
        let (s, _) = w.ok(from);
        assert_eq!(s.context, 200 + k as u64, "send completion");
    }
    // Unexpected messages (eager and rendezvous) to both endpoints, then
    // the receives: each message is whole in the receive it took, which
    // completes on the CQ of the endpoint it arrived at.
    let sent = [
        (0usize, 1usize, pattern(700, seed())),
        (3, 2, pattern(1 << 20, seed())),
        (3, 1, pattern(90_000, seed())),
        (0, 2, pattern(33, seed())),
    ];
    for (k, (from, to, d)) in sent.iter().enumerate() {
        w.send(*from, *to, d, 300 + k as u64);
    }
    for _ in 0..50 {
        w.spin();
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut got = Vec::new();
    for k in 0..sent.len() {
        let ctx = 400 + k as u64;
        let r = srx_recv(
            &w,
            srx,
            (1 << 20) + 64,
            FiAddr::UNSPEC,
            None,
            ctx,
            OpFlags::empty(),
        )
        .expect("srx recv");
        got.push((ctx, r));
    }
    // Which message takes which receive depends on arrival, and a
    // rendezvous message completes after an eager one that arrived later:
    // each (sender, endpoint) pair sent one message, found by where its
    // completion came and its source.
    let mut used = Vec::new();
    let deadline = Instant::now() + T;
    while used.len() < sent.len() {
        assert!(
            Instant::now() < deadline,
            "unexpected messages not delivered"
        );
        for at in BOUND {
            let mut e = [CqEntry::default()];
            let mut s = [FiAddr(0)];
            match w.eps[at].cq.readfrom(&mut e, &mut s) {
                Ok(1) => {}
                Ok(_) => continue,
                Err(err) if err.kind() == ErrorKind::Again => {
                    w.spin();
                    continue;
                }
                Err(err) => panic!("endpoint {at}: {err}"),
            }
            let (e, src) = (e[0], s[0]);
            let (_, r) = got
                .iter()
                .find(|(c, _)| *c == e.context)
                .unwrap_or_else(|| panic!("completion of unknown receive {}", e.context));
            assert!(
                !used.contains(&e.context),
                "receive {} completed twice",
                e.context
            );
            used.push(e.context);
            let (_, _, d) = sent
                .iter()
                .find(|(from, to, _)| *to == at && w.addr[*from] == src)
                .unwrap_or_else(|| panic!("endpoint {at}: a message from {src:?} nobody sent"));
            assert_eq!(e.len, d.len(), "at {at} from {src:?}");
            same(&format!("unexpected message at {at}"), &r[..d.len()], d);
            assert!(
                r[d.len()..].iter().all(|&b| b == 0xEE),
                "bytes past the message written"
            );
        }
    }
    for (from, _, _) in &sent {
        w.ok(*from);
    }
    // The bound endpoints' own receive calls, and the context's sends,
    // are refused.
    let b = leak(vec![0; 8]);
    let v = iov_of(b);
    for at in BOUND {
        // SAFETY: the buffer is leaked.
        let r = unsafe {
            w.ep(at)
                .recvmsg(&m(&v, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
        };
        assert_eq!(
            r.refused(),
            ErrorKind::OpNotSupp,
            "recv on bound endpoint {at}"
        );
        assert_eq!(
            w.ep(at).cancel(1).refused(),
            ErrorKind::OpNotSupp,
            "cancel on bound endpoint {at}"
        );
    }
    // SAFETY: the buffer is leaked.
    let s = unsafe { srx.sendmsg(&m(&v, w.addr[1], 0, 0, 1), OpFlags::empty()) };
    assert_eq!(s.refused(), ErrorKind::OpNotSupp, "send on the context");
    assert_eq!(
        srx.inject(&[1, 2], w.addr[1], None).refused(),
        ErrorKind::OpNotSupp,
        "inject on the context"
    );
    // An endpoint opened without FI_SHARED_CONTEXT is not bound, nor one
    // already enabled.
    let mut plain = info.clone();
    plain.ep_attr.rx_ctx_cnt = 1;
    let ep = w.domain.endpoint(&plain).expect("endpoint");
    assert_eq!(
        ep.bind_srx(srx).refused(),
        ErrorKind::Inval,
        "bind to an endpoint without FI_SHARED_CONTEXT"
    );
    assert_eq!(
        w.ep(1).bind_srx(srx).refused(),
        ErrorKind::OpBadState,
        "bind after enable"
    );
    // The endpoints of a context share one AV: one with another is not
    // enabled.
    let other_av = w.domain.av(&AvAttr::default()).expect("av");
    let cq = w
        .domain
        .cq(&CqAttr {
            format: Opts::default().format,
            wait_obj: WaitObj::Unspec,
            ..CqAttr::default()
        })
        .expect("cq");
    let ep = w.domain.endpoint(&info).expect("endpoint");
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .expect("bind cq");
    ep.bind(Bind::Av(other_av.as_ref())).expect("bind av");
    // Opened with FI_SHARED_CONTEXT, it needs a context.
    assert_eq!(
        ep.enable().refused(),
        ErrorKind::Inval,
        "enable of an FI_SHARED_CONTEXT endpoint without a context"
    );
    ep.bind_srx(srx).expect("bind srx");
    assert_eq!(
        ep.enable().refused(),
        ErrorKind::Inval,
        "enable with another AV than the context's other endpoints"
    );
    for i in 0..4 {
        w.nothing(i);
    }
}

/// Tagged receives on the context: directed receive by the source's
/// address in the shared AV; FI_PEEK / FI_CLAIM / FI_DISCARD report on
/// the CQ of the endpoint the message arrived at (a peek that finds
/// nothing on the first bound endpoint's).
pub fn srx_tagged(rig: &Rig) {
    let Some(info) = rig.offers_srx(
        Caps::TAGGED | Caps::DIRECTED_RECV,
        "shared receive context tagged",
    ) else {
        return;
    };
    let (w, srx) = rig.srx_world(&info, |_| {});
    let srx = srx.as_ref();
    // A receive only endpoint 3 may fill, then one from anyone.
    let directed = srx_recv(&w, srx, 128, w.addr[3], Some((7, 0)), 1, OpFlags::empty())
        .expect("directed trecv");
    let any = srx_recv(
        &w,
        srx,
        128,
        FiAddr::UNSPEC,
        Some((7, 0)),
        2,
        OpFlags::empty(),
    )
    .expect("trecv");
    let a = pattern(50, seed());
    w.tsend(0, 1, 7, &a, 10);
    let (e, src) = ok_at(&w, 1);
    assert_eq!((e.context, e.len, e.tag, src), (2, 50, 7, w.addr[0]));
    assert!(
        has(&e, CompletionFlags::RECV | CompletionFlags::TAGGED),
        "{:?}",
        e.flags
    );
    same("from 0 into the undirected receive", &any[..50], &a);
    let b = pattern(60, seed());
    w.tsend(3, 2, 7, &b, 11);
    let (e, src) = ok_at(&w, 2);
    assert_eq!((e.context, e.len, e.tag, src), (1, 60, 7, w.addr[3]));
    same("from 3 into the directed receive", &directed[..60], &b);
    w.ok(0);
    w.ok(3);
    // Tags select: a message of another tag waits.
    let c = pattern(70, seed());
    w.tsend(0, 2, 0x55, &c, 12);
    w.ok(0);
    arrived(&w, srx, 0, 2);
    // Peek it (on the CQ of endpoint 2, where it arrived), claim it,
    // then take it with the claim.
    let peek_ctx = 20;
    w.retry(|| {
        // SAFETY: no buffer.
        unsafe {
            srx.trecvmsg(
                &m(&[], FiAddr::UNSPEC, 0x55, 0, peek_ctx),
                OpFlags::PEEK | OpFlags::CLAIM,
            )
        }
    })
    .expect("peek|claim");
    let (e, src) = ok_at(&w, 2);
    assert_eq!(
        (e.context, e.len, e.tag, src),
        (peek_ctx, 70, 0x55, w.addr[0])
    );
    let r = srx_recv(
        &w,
        srx,
        128,
        FiAddr::UNSPEC,
        Some((0x55, 0)),
        peek_ctx,
        OpFlags::CLAIM,
    )
    .expect("claim");
    let (e, _) = ok_at(&w, 2);
    assert_eq!((e.context, e.len), (peek_ctx, 70));
    same("claimed", &r[..70], &c);
    // A peek that finds nothing: NoMsg on the first bound endpoint's CQ.
    w.retry(|| {
        // SAFETY: no buffer.
        unsafe { srx.trecvmsg(&m(&[], FiAddr::UNSPEC, 0x99, 0, 30), OpFlags::PEEK) }
    })
    .expect("peek");
    let e = w.err(1);
    assert_eq!((e.entry.context, e.err), (30, ErrorKind::NoMsg));
    // Peek with discard drops a message at endpoint 1.
    let d = pattern(80, seed());
    w.tsend(3, 1, 0x66, &d, 13);
    w.ok(3);
    arrived(&w, srx, 3, 1);
    w.retry(|| {
        // SAFETY: no buffer.
        unsafe {
            srx.trecvmsg(
                &m(&[], FiAddr::UNSPEC, 0x66, 0, 31),
                OpFlags::PEEK | OpFlags::DISCARD,
            )
        }
    })
    .expect("peek|discard");
    let (e, src) = ok_at(&w, 1);
    assert_eq!((e.context, e.tag, src), (31, 0x66, w.addr[3]));
    let gone = srx_recv(
        &w,
        srx,
        128,
        FiAddr::UNSPEC,
        Some((0x66, 0)),
        32,
        OpFlags::empty(),
    )
    .expect("trecv");
    w.nothing(1);
    assert!(
        gone.iter().all(|&x| x == 0xEE),
        "a discarded message was delivered"
    );
    srx.cancel(32).expect("cancel");
    let e = w.err(1);
    assert_eq!((e.entry.context, e.err), (32, ErrorKind::Canceled));
    for i in 0..4 {
        w.nothing(i);
    }
}

/// A multi-receive buffer on the context takes messages arriving at both
/// endpoints, one after the other, each completing on its own endpoint's
/// CQ; the one after which less than the context's minimum is left
/// carries FI_MULTI_RECV.
pub fn srx_multi_recv(rig: &Rig) {
    let Some(info) = rig.offers_srx(Caps::MULTI_RECV, "shared receive context multi-recv") else {
        return;
    };
    let (w, srx) = rig.srx_world(&info, |_| {});
    let srx = srx.as_ref();
    srx.set_min_multi_recv(1500).expect("set_min_multi_recv");
    assert_eq!(srx.min_multi_recv().expect("min_multi_recv"), 1500);
    let buf =
        srx_recv(&w, srx, 8192, FiAddr::UNSPEC, None, 77, OpFlags::MULTI_RECV).expect("multi recv");
    let base = buf.as_ptr() as u64;
    // 1000 + 2001 + 3000 = 6001 leave 2191; + 999 leave 1192 < 1500.
    let plan = [
        (0usize, 1usize, 1000usize),
        (3, 2, 2001),
        (3, 1, 3000),
        (0, 2, 999),
    ];
    let mut off = 0;
    for (k, &(from, to, n)) in plan.iter().enumerate() {
        let d = pattern(n, seed());
        w.send(from, to, &d, k as u64);
        let (e, src) = ok_at(&w, to);
        assert_eq!(
            (e.context, e.len, src),
            (77, n, w.addr[from]),
            "message {k}"
        );
        assert_eq!(
            e.buf,
            base + off as u64,
            "message {k} placed after the previous"
        );
        assert_eq!(
            has(&e, CompletionFlags::MULTI_RECV),
            k == plan.len() - 1,
            "message {k}: FI_MULTI_RECV"
        );
        same(&format!("multi-recv message {k}"), &buf[off..off + n], &d);
        off += n;
        w.ok(from);
    }
    assert!(
        buf[off..].iter().all(|&b| b == 0xEE),
        "bytes past the last message written"
    );
    // The next message needs a new receive.
    let d = pattern(64, seed());
    w.send(0, 2, &d, 9);
    w.ok(0);
    let r = srx_recv(&w, srx, 64, FiAddr::UNSPEC, None, 78, OpFlags::empty()).expect("recv");
    let (e, _) = ok_at(&w, 2);
    assert_eq!((e.context, e.len), (78, 64));
    same("after release", r, &d);
    assert!(
        buf[off..].iter().all(|&b| b == 0xEE),
        "the released buffer was written"
    );
}

/// Cancel on the context: the receive completes with `Canceled` on the
/// first bound endpoint's CQ, a second cancel is `NoEnt`, and messages go
/// to the receives after it; dropping the context's handle while
/// endpoints use it leaves its receives working until they close.
pub fn srx_cancel(rig: &Rig) {
    let Some(info) = rig.offers_srx(Caps::empty(), "shared receive context cancel") else {
        return;
    };
    let (w, srx) = rig.srx_world(&info, |_| {});
    let r = srx_recv(
        &w,
        srx.as_ref(),
        64,
        FiAddr::UNSPEC,
        None,
        5,
        OpFlags::empty(),
    )
    .expect("recv");
    let r2 = srx_recv(
        &w,
        srx.as_ref(),
        64,
        FiAddr::UNSPEC,
        None,
        6,
        OpFlags::empty(),
    )
    .expect("recv");
    srx.cancel(5).expect("cancel");
    let e = w.err(1);
    assert_eq!((e.entry.context, e.err), (5, ErrorKind::Canceled));
    assert!(has(&e.entry, CompletionFlags::RECV), "{:?}", e.entry.flags);
    assert_eq!(srx.cancel(5).refused(), ErrorKind::NoEnt, "cancelled twice");
    assert_eq!(srx.cancel(999).refused(), ErrorKind::NoEnt, "never posted");
    let d = pattern(40, seed());
    w.send(3, 2, &d, 1);
    let (c, src) = ok_at(&w, 2);
    assert_eq!((c.context, c.len, src), (6, 40, w.addr[3]));
    same("after cancel", &r2[..40], &d);
    assert!(
        r.iter().all(|&b| b == 0xEE),
        "the cancelled receive was written"
    );
    w.ok(3);
    // The handle goes; a receive posted before still takes a message.
    let r3 = srx_recv(
        &w,
        srx.as_ref(),
        64,
        FiAddr::UNSPEC,
        None,
        7,
        OpFlags::empty(),
    )
    .expect("recv");
    drop(srx);
    let d = pattern(48, seed());
    w.send(0, 1, &d, 2);
    let (c, src) = ok_at(&w, 1);
    assert_eq!((c.context, c.len, src), (7, 48, w.addr[0]));
    same("after the handle closed", &r3[..48], &d);
    w.ok(0);
    for i in 0..4 {
        w.nothing(i);
    }
}

/// Flow control through a context: two senders each send more to their
/// bound endpoint than the unexpected-message budget holds (eager
/// messages, which are buffered at the receiver) before any receive is
/// posted; senders are paused and resumed, and every message arrives
/// whole and in its sender's order, on its own endpoint's CQ.
pub fn srx_flow_control(rig: &Rig) {
    let Some(info) = rig.offers_srx(Caps::empty(), "shared receive context flow control") else {
        return;
    };
    let (w, srx) = rig.srx_world(&info, |_| {});
    let srx = srx.as_ref();
    // 8 KiB: eager on every provider (verbs sends larger messages by
    // rendezvous, tcp bursts of larger than 16 KiB, and the receiver does
    // not buffer those). 12.5 MiB in all, beyond the 8 MiB budget.
    const N: usize = 800;
    const LEN: usize = 8 * 1024;
    let seeds: [u64; 2] = [seed(), seed()];
    // Endpoint 0 sends to endpoint 1, endpoint 3 to endpoint 2.
    let pairs = [(0usize, 1usize), (3, 2)];
    std::thread::scope(|scope| {
        for (p, &(from, to)) in pairs.iter().enumerate() {
            let w = &w;
            let sd = seeds[p];
            scope.spawn(move || {
                for k in 0..N {
                    let d = pattern(LEN, sd.wrapping_add(k as u64));
                    w.send(from, to, &d, k as u64);
                }
            });
        }
        // Let the budget fill before any receive is posted.
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            w.spin();
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut bufs = Vec::new();
        for k in 0..2 * N {
            let r = srx_recv(
                &w,
                srx,
                LEN,
                FiAddr::UNSPEC,
                None,
                k as u64,
                OpFlags::empty(),
            )
            .expect("srx recv");
            bufs.push(r);
        }
        let mut seen = [0usize; 2];
        // A stall, not slowness, fails the check: T without a message
        // arriving (a bound on the whole run would be a bound on the
        // throughput of soft-RoCE in an emulated guest). Only the
        // receivers are progressed here: eager messages need nothing more
        // of their senders.
        let mut last = Instant::now();
        let mut was = 0;
        while seen.iter().sum::<usize>() < 2 * N {
            let now_seen = seen.iter().sum::<usize>();
            if now_seen != was {
                (was, last) = (now_seen, Instant::now());
            }
            assert!(
                last.elapsed() < T,
                "only {seen:?} of {N} messages each arrived, none for {T:?}"
            );
            for (p, &(from, at)) in pairs.iter().enumerate() {
                let mut e = [CqEntry::default()];
                let mut src = [FiAddr(0)];
                match w.eps[at].cq.readfrom(&mut e, &mut src) {
                    Ok(1) => {}
                    Ok(_) => continue,
                    Err(err) if err.kind() == ErrorKind::Again => {
                        std::thread::yield_now();
                        continue;
                    }
                    Err(err) => panic!("endpoint {at}: {err}"),
                }
                let k = seen[p];
                assert_eq!(
                    (e[0].len, src[0]),
                    (LEN, w.addr[from]),
                    "message {k} at {at}"
                );
                let want = pattern(LEN, seeds[p].wrapping_add(k as u64));
                let r = bufs[usize::try_from(e[0].context).expect("context")];
                same(&format!("message {k} from {from} at {at}"), r, &want);
                seen[p] += 1;
            }
        }
    });
    for (from, _) in pairs {
        for _ in 0..N {
            w.ok(from);
        }
    }
    for i in 0..4 {
        w.nothing(i);
    }
}

/// An endpoint bound to a context closes: a rendezvous message kept for
/// it (its data still with its sender) goes with it, so the context's
/// next receive takes a message of the endpoint that stays; its sender's
/// send fails (`ConnReset`); the context goes on serving the other
/// endpoint.
pub fn srx_close(rig: &Rig) {
    let Some(info) = rig.offers_srx(Caps::TAGGED, "shared receive context endpoint close") else {
        return;
    };
    let (mut w, srx) = rig.srx_world(&info, |_| {});
    let srx = srx.as_ref();
    // A large message kept at endpoint 2, then a tagged one behind it on
    // the same connection: once that one is received, the first arrived.
    let big = pattern(1 << 20, seed());
    w.send(3, 2, &big, 50);
    let mark = srx_recv(
        &w,
        srx,
        16,
        FiAddr::UNSPEC,
        Some((3, 0)),
        51,
        OpFlags::empty(),
    )
    .expect("trecv");
    let d = pattern(16, seed());
    w.tsend(3, 2, 3, &d, 52);
    let (e, src) = ok_at(&w, 2);
    assert_eq!((e.context, e.len, src), (51, 16, w.addr[3]), "marker");
    same("marker", mark, &d);
    // Endpoint 2 closes (endpoint 3 is index 2 from now on).
    drop(w.eps.remove(2));
    let r = srx_recv(&w, srx, 64, FiAddr::UNSPEC, None, 53, OpFlags::empty()).expect("recv");
    let d = pattern(40, seed());
    w.send(0, 1, &d, 54);
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, e.len, src),
        (53, 40, w.addr[0]),
        "the receive after the close took the closed endpoint's message"
    );
    same("after the close", &r[..40], &d);
    w.ok(0);
    // Endpoint 3's sends: the marker completed, the large one fails.
    let mut got = Vec::new();
    for _ in 0..2 {
        match w.next(2) {
            Ok((e, _)) => got.push((e.context, None)),
            Err(e) => got.push((e.entry.context, Some(e.err))),
        }
    }
    got.sort_unstable_by_key(|(c, _)| *c);
    assert_eq!(
        got,
        [(50, Some(ErrorKind::ConnReset)), (52, None)],
        "the sends to the closed endpoint"
    );
    for i in 0..3 {
        w.nothing(i);
    }
}
