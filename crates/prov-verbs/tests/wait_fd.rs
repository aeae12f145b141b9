//! Wait fds that wake (`fi_trywait` + `epoll`) on a real RDMA device: an
//! application thread calls `trywait` until it answers `Ok`, then sleeps
//! in its own `epoll_wait` on the CQ's, a counter's (and, for MSG, an
//! EQ's) wait fds with no thread in any object; a peer's message (or a
//! connection request) wakes it, and idle fds stay quiet. Skips without
//! a device (see `common`).

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::cell::{Cell, RefCell};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::{
    AvAttr, Bind, CntrAttr, CompletionQueue, Counter, CqAttr, CqEntry, CqFormat, Domain, Endpoint,
    EqAttr, EqEvent, EventQueue, Fabric, FiAddr, Provider, WaitObj,
};
use fabric_core::testing::sleep::{Receiver, Sender, Sleeper, rdm_wakes};
use fabric_core::*;
use prov_verbs::VerbsProvider;

/// How long a wake-up may take (TCG guests are slow).
const LIMIT: Duration = Duration::from_secs(60);

fn fd_cq(domain: &dyn Domain) -> Box<dyn CompletionQueue> {
    domain
        .cq(&CqAttr {
            format: CqFormat::Tagged,
            wait_obj: WaitObj::Fd,
            ..Default::default()
        })
        .unwrap()
}

fn fd_cntr(domain: &dyn Domain) -> Box<dyn Counter> {
    domain
        .cntr(&CntrAttr {
            wait_obj: WaitObj::Fd,
        })
        .unwrap()
}

/// An RDM endpoint of its own domain, with an AV and a CQ (and a receive
/// counter when `cntr`), enabled.
struct RdmSide {
    ep: Box<dyn Endpoint>,
    cntr: Option<Box<dyn Counter>>,
    cq: Box<dyn CompletionQueue>,
    av: Box<dyn fabric_core::objects::AddressVector>,
    _domain: Box<dyn Domain>,
    _fabric: Box<dyn Fabric>,
}

fn rdm_side(info: &Info, cntr: bool) -> RdmSide {
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    let cq = fd_cq(domain.as_ref());
    let cntr = cntr.then(|| fd_cntr(domain.as_ref()));
    let av = domain.av(&AvAttr::default()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Av(av.as_ref())).unwrap();
    if let Some(c) = &cntr {
        ep.bind(Bind::Cntr(c.as_ref(), Caps::RECV)).unwrap();
    }
    ep.enable().unwrap();
    RdmSide {
        ep,
        cntr,
        cq,
        av,
        _domain: domain,
        _fabric: fabric,
    }
}

fn insert(s: &RdmSide, name: &Address) -> FiAddr {
    let mut out = [FiAddr(0)];
    assert_eq!(
        s.av.insert(std::slice::from_ref(name), &mut out).unwrap(),
        1
    );
    out[0]
}

/// Two RDM endpoints (`b` with a counter when `b_counts`) that know each
/// other, and b's address at a; `None` (skip) without a device.
fn rdm_pair(b_counts: bool) -> Option<(RdmSide, RdmSide, FiAddr)> {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::TAGGED;
    h.addr_format = AddrFormat::SockaddrIn;
    let info = entries(EpType::Rdm, h)?.into_iter().next().unwrap();
    let a = rdm_side(&info, false);
    let b = rdm_side(&info, b_counts);
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    insert(&b, &a.ep.getname().unwrap());
    Some((a, b, b_at_a))
}

#[test]
fn rdm_cq_and_counter_fds_wake_an_epoll_in_another_thread() {
    let Some((a, b, b_at_a)) = rdm_pair(true) else {
        return;
    };
    let wakes = rdm_wakes(
        Sender {
            ep: a.ep.as_ref(),
            cq: a.cq.as_ref(),
            to: b_at_a,
        },
        Receiver {
            ep: b.ep.as_ref(),
            cq: b.cq.as_ref(),
            cntr: b.cntr.as_deref().unwrap(),
        },
    );
    eprintln!("RDM: idle wake-ups in 200 ms: {wakes}");
}

/// A rendezvous send waits for a peer that never takes it, and the
/// application sleeps in its own `epoll` on the CQ's wait fd (after
/// `trywait`), with no thread in any call: the liveness probe's timer
/// (every 0.5 s while such sends wait) wakes it, so that its next read
/// makes the sweep that fails sends to a dead peer (`cross_host.rs`
/// shows that for a thread in `sread`). Nothing else is left to wake it:
/// the connection is made and quiet before the send.
#[test]
fn an_epoll_sleeper_wakes_for_the_liveness_probe_while_a_rendezvous_send_waits() {
    let Some((a, b, b_at_a)) = rdm_pair(false) else {
        return;
    };
    // The connection first: an eager message that b receives.
    let mut small = [0u8; 8];
    let small_iov = iov(&mut small);
    // SAFETY: `small` outlives the receive, which completes below.
    unsafe {
        b.ep.recvmsg(&msg_to(&small_iov, FiAddr::UNSPEC, 1), OpFlags::empty())
    }
    .unwrap();
    let end = Instant::now() + LIMIT;
    loop {
        match a.ep.inject(b"hello", b_at_a, None) {
            Ok(()) => break,
            Err(e) if e.kind() == ErrorKind::Again => {
                let mut out = [CqEntry::default(); 4];
                let _ = a.cq.read(&mut out);
                assert!(Instant::now() < end, "inject kept answering Again");
            }
            Err(e) => panic!("inject: {e}"),
        }
    }
    // Both sides progress (the connection is made on demand by both).
    let got = loop {
        let mut out = [CqEntry::default(); 1];
        match a.cq.read(&mut out) {
            Ok(k) => panic!("a's CQ reported {k} completions for an inject"),
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("a's CQ read: {e}"),
        }
        match b.cq.read(&mut out) {
            Ok(1) => break out[0],
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("b's CQ read: {e}"),
        }
        assert!(Instant::now() < end, "b did not receive the message");
    };
    assert_eq!((got.context, got.len), (1, 5));
    // The rendezvous send, which b never receives: it waits for b's
    // answer with nothing on the wire.
    let n = 256 * 1024;
    let mut big = vec![7u8; n];
    let big_iov = iov(&mut big);
    // SAFETY: `big` outlives the send: it is cancelled by closing the
    // endpoints below, before `big` goes.
    unsafe { a.ep.sendmsg(&msg_to(&big_iov, b_at_a, 2), OpFlags::empty()) }.unwrap();
    let mut drain = || {
        let mut out = [CqEntry::default(); 4];
        match a.cq.read(&mut out) {
            Ok(k) => panic!("the waiting send completed ({k} entries)"),
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("CQ read: {e}"),
        }
    };
    // Let the announcement go out and its work completion be read.
    let quiet = Instant::now() + Duration::from_millis(300);
    while Instant::now() < quiet {
        drain();
    }
    let fd = a.cq.wait_fd().expect("a CQ with FI_WAIT_FD has a wait fd");
    let sleeper = Sleeper::new(&[fd]);
    // Three sleeps in a row, each woken by the timer (0.5 s): the first
    // tick, and the timer started again by each trywait after a wake-up.
    for i in 0..3 {
        sleeper.settle(&|| a.cq.trywait(), &mut drain, LIMIT);
        let t = Instant::now();
        let woke = sleeper.wait(Duration::from_secs(10));
        assert!(
            !woke.is_empty(),
            "sleep {i}: the CQ's wait fd stayed quiet for 10 s while a rendezvous send waited"
        );
        eprintln!("sleep {i}: woken after {:?}", t.elapsed());
        drain();
    }
    drop(a);
    drop(b);
    drop(big);
}

/// Drives `eq` (a peer's progress) until `done`, keeping its events.
fn drive_eq(eq: &dyn EventQueue, done: &AtomicBool, got: &Mutex<Vec<EqEvent>>) {
    let end = Instant::now() + LIMIT;
    while !done.load(Ordering::SeqCst) && Instant::now() < end {
        if let Ok(e) = eq.read() {
            got.lock().unwrap().push(e);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sleeps on `eq`'s wait fd alone until it has an event; the event.
fn sleep_for_event(eq: &dyn EventQueue) -> EqEvent {
    let sl = Sleeper::new(&[eq.wait_fd().unwrap()]);
    let got = RefCell::new(None);
    sl.sleep_until(
        &|| eq.trywait(),
        &mut || {
            if got.borrow().is_none() {
                if let Ok(e) = eq.read() {
                    *got.borrow_mut() = Some(e);
                }
            }
        },
        &|| got.borrow().is_some(),
        LIMIT,
    );
    got.into_inner().unwrap()
}

#[test]
fn msg_cq_counter_and_eq_fds_wake_an_epoll_in_another_thread() {
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let fd_eq = |f: &dyn Fabric| {
        f.eq(&EqAttr {
            wait_obj: WaitObj::Fd,
            ..EqAttr::default()
        })
        .unwrap()
    };
    // The listener's EQ: quiet while idle, woken by a connection request.
    let sl = Sleeper::new(&[l.eq.wait_fd().unwrap()]);
    let idle = sl.idle_wakes(&|| l.eq.trywait(), &mut || {}, Duration::from_millis(200));
    assert!(idle <= 1, "{idle} wake-ups of an idle EQ in 200 ms");
    drop(sl);
    let client = open_side(l.fabric.as_ref(), &info);
    let client_events = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let req = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            client
                .ep
                .connect(&l.pep.getname().unwrap(), b"hello")
                .unwrap();
            drive_eq(client.eq.as_ref(), &done, &client_events);
        });
        let e = sleep_for_event(l.eq.as_ref());
        done.store(true, Ordering::SeqCst);
        e
    });
    let EqEvent::ConnReq {
        info: sinfo, data, ..
    } = req
    else {
        panic!("expected a connection request, got {req:?}")
    };
    assert_eq!(data, b"hello");
    // The server: its own domain, EQ, CQ and receive counter, all FI_WAIT_FD.
    let domain = l.fabric.domain(&sinfo).unwrap();
    let eq = fd_eq(l.fabric.as_ref());
    let cq = fd_cq(domain.as_ref());
    let cntr = fd_cntr(domain.as_ref());
    let ep = domain.endpoint(&sinfo).unwrap();
    ep.bind(Bind::Eq(eq.as_ref())).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Cntr(cntr.as_ref(), Caps::RECV)).unwrap();
    ep.enable().unwrap();
    ep.accept(b"welcome").unwrap();
    // The server's EQ fd wakes for the connection's establishment.
    let done = AtomicBool::new(false);
    let established = std::thread::scope(|s| {
        s.spawn(|| drive_eq(client.eq.as_ref(), &done, &client_events));
        let e = sleep_for_event(eq.as_ref());
        // The client's side of the connection too.
        let end = Instant::now() + LIMIT;
        while !client_events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, EqEvent::Connected { .. }))
        {
            assert!(Instant::now() < end, "the client did not connect");
            std::thread::sleep(Duration::from_millis(1));
        }
        done.store(true, Ordering::SeqCst);
        e
    });
    assert!(
        matches!(established, EqEvent::Connected { .. }),
        "server got {established:?}"
    );
    // Messages wake the CQ's and the counter's fds.
    let mut bufs = [Buf::new(domain.as_ref(), 16), Buf::new(domain.as_ref(), 16)];
    let post = |b: &mut Buf, ctx: u64| {
        let iov = b.iov();
        let desc = [b.mr.desc()];
        // SAFETY: the buffers outlive the receives' completions, which
        // the test waits for.
        unsafe {
            ep.recvmsg(&msg(&iov, &desc, ctx, 0), OpFlags::empty())
                .unwrap()
        };
    };
    let [b1, b2] = &mut bufs;
    post(b1, 7);
    post(b2, 8);
    let send = |what: &'static [u8], done: &AtomicBool| {
        std::thread::sleep(Duration::from_millis(100));
        client.ep.inject(what, FiAddr::UNSPEC, None).unwrap();
        let end = Instant::now() + LIMIT;
        let mut e = [CqEntry::default()];
        while !done.load(Ordering::SeqCst) && Instant::now() < end {
            let _ = client.cq.read(&mut e);
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let (cq_fd, cntr_fd) = (cq.wait_fd().unwrap(), cntr.wait_fd().unwrap());
    let got: RefCell<Vec<CqEntry>> = RefCell::new(Vec::new());
    let take = || {
        let mut e = [CqEntry::default(); 4];
        while let Ok(n) = cq.read(&mut e) {
            got.borrow_mut().extend_from_slice(&e[..n]);
        }
    };
    let both = || -> Result<()> {
        cq.trywait()?;
        cntr.trywait()
    };
    // 1: the CQ's and the counter's fds.
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| send(b"wake", &done));
        let sl = Sleeper::new(&[cq_fd, cntr_fd]);
        sl.sleep_until(&both, &mut || take(), &|| !got.borrow().is_empty(), LIMIT);
        done.store(true, Ordering::SeqCst);
    });
    assert_eq!((got.borrow()[0].context, got.borrow()[0].len), (7, 4));
    assert_eq!(&bufs[0].mem[..4], b"wake");
    assert_eq!(cntr.read(), 1, "the counter counted the receive");
    // 2: the counter's fd alone (hardware completions nobody reads from
    // the CQ).
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| send(b"again", &done));
        let sl = Sleeper::new(&[cntr_fd]);
        let count = Cell::new(0);
        sl.sleep_until(
            &|| cntr.trywait(),
            &mut || count.set(cntr.read()),
            &|| count.get() >= 2,
            LIMIT,
        );
        done.store(true, Ordering::SeqCst);
    });
    let end = Instant::now() + LIMIT;
    while got.borrow().len() < 2 {
        assert!(Instant::now() < end, "the second receive did not complete");
        take();
    }
    assert_eq!((got.borrow()[1].context, got.borrow()[1].len), (8, 5));
    assert_eq!(&bufs[1].mem[..5], b"again");
    // 3: idle, nothing wakes the CQ's, counter's and EQ's fds.
    let eq_fd = eq.wait_fd().unwrap();
    let sl = Sleeper::new(&[cq_fd, cntr_fd, eq_fd]);
    let all = || -> Result<()> {
        both()?;
        eq.trywait()
    };
    let wakes = sl.idle_wakes(
        &all,
        &mut || {
            take();
            let _ = eq.read();
        },
        Duration::from_millis(200),
    );
    assert!(wakes <= 1, "{wakes} wake-ups in 200 ms of idling");
    eprintln!("MSG: idle wake-ups in 200 ms: {wakes}");
    drop(ep);
    drop(client);
}
