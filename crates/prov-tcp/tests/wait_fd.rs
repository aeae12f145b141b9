//! Wait fds that wake (`fi_trywait` + `epoll`): an application sleeps on
//! the CQ's, counter's and EQ's fds in its own epoll set, with no thread
//! in any object, and a peer's message (or connection request) wakes it;
//! idle fds stay quiet.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use std::time::Duration;

use common::*;
use fabric_core::matching::Request;
use fabric_core::objects::{
    AvAttr, Bind, CntrAttr, CqAttr, CqFormat, EqAttr, EqEvent, Provider, WaitObj,
};
use fabric_core::testing::sleep::{Receiver, Sender, Sleeper, rdm_wakes};
use fabric_core::*;
use prov_tcp::TcpProvider;

/// An RDM receiver whose CQ and receive counter have wait fds; `info`
/// decides the progress model.
fn receiver(info: &Info) -> (Side, Box<dyn fabric_core::objects::Counter>) {
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    let cq = domain
        .cq(&CqAttr {
            format: CqFormat::Tagged,
            wait_obj: WaitObj::Fd,
            ..Default::default()
        })
        .unwrap();
    let cntr = domain
        .cntr(&CntrAttr {
            wait_obj: WaitObj::Fd,
        })
        .unwrap();
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
    ep.bind(Bind::Cntr(cntr.as_ref(), Caps::RECV)).unwrap();
    ep.enable().unwrap();
    (
        Side {
            ep,
            cq,
            av,
            domain,
            fabric,
        },
        cntr,
    )
}

fn run(info: &Info) {
    let a = side(&rdm_info());
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
    run(&rdm_info());
}

#[test]
fn auto_progress_cq_and_counter_fds_wake() {
    run(&auto_info_with(Caps::MSG | Caps::TAGGED));
}

#[test]
fn eq_fd_wakes_on_a_connection_request() {
    let mut h = Info::default();
    h.caps = Caps::MSG;
    h.ep_attr.ep_type = EpType::Msg;
    h.addr_format = AddrFormat::SockaddrIn;
    let req = Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    let info = TcpProvider.getinfo(&req).unwrap().remove(0);
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let eq = fabric
        .eq(&EqAttr {
            wait_obj: WaitObj::Fd,
            ..EqAttr::default()
        })
        .unwrap();
    let pep = fabric.passive_endpoint(&info).unwrap();
    pep.bind_eq(eq.as_ref()).unwrap();
    pep.listen().unwrap();
    let addr = pep.getname().unwrap();
    let fd = eq.wait_fd().unwrap();
    let sl = Sleeper::new(&[fd]);
    // Idle first: nothing wakes the sleep.
    let idle = sl.idle_wakes(&|| eq.trywait(), &mut || {}, Duration::from_millis(200));
    assert!(idle <= 1, "{idle} wake-ups of an idle EQ in 200 ms");
    let cfab = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let ceq = cfab.eq(&EqAttr::default()).unwrap();
    let cdom = cfab.domain(&info).unwrap();
    let cep = cdom.endpoint(&info).unwrap();
    cep.bind(Bind::Eq(ceq.as_ref())).unwrap();
    let cq = cdom
        .cq(&CqAttr {
            wait_obj: WaitObj::Unspec,
            ..Default::default()
        })
        .unwrap();
    cep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    cep.enable().unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut got = None;
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            cep.connect(&addr, b"hello").unwrap();
            // The connector's progress: its EQ and CQ reads.
            let end = std::time::Instant::now() + Duration::from_secs(30);
            while std::time::Instant::now() < end && !done.load(std::sync::atomic::Ordering::SeqCst)
            {
                let _ = ceq.read();
                let _ = cq.read(&mut []);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let got_c = std::cell::RefCell::new(None);
        sl.sleep_until(
            &|| eq.trywait(),
            &mut || {
                if let Ok(e) = eq.read() {
                    *got_c.borrow_mut() = Some(e);
                }
            },
            &|| got_c.borrow().is_some(),
            Duration::from_secs(30),
        );
        got = got_c.into_inner();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    match got {
        Some(EqEvent::ConnReq { data, .. }) => assert_eq!(data, b"hello"),
        other => panic!("expected a connection request, got {other:?}"),
    }
    drop(pep);
}
