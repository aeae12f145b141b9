//! What a new user meets: operations outside the endpoint's capabilities
//! are refused with `OpNotSupp` naming the missing capability, operations
//! before `enable` say how to enable, and objects opened with
//! FI_WAIT_NONE have no wait fd. Skips without a device (see `common`).

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use common::*;
use fabric_core::objects::{AvAttr, Bind, CntrAttr, CqAttr, FiAddr, Provider, RmaIov, WaitObj};
use fabric_core::*;
use prov_verbs::VerbsProvider;

fn rdm_info(caps: Caps) -> Option<Info> {
    let mut h = Info::default();
    h.caps = caps;
    h.addr_format = AddrFormat::SockaddrIn;
    entries(EpType::Rdm, h).map(|l| l.into_iter().next().unwrap())
}

#[test]
fn rdm_refuses_rma_and_atomics_outside_its_caps_and_says_how_to_enable() {
    let Some(info) = rdm_info(Caps::MSG | Caps::TAGGED) else {
        return;
    };
    assert!(!info.caps.contains(Caps::RMA), "{}", info.caps);
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&cq_attr()).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    let e = ep.inject(b"x", FiAddr(0), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpBadState);
    assert!(
        e.to_string()
            .contains("endpoint not enabled (call enable after binding its CQ and AV)"),
        "{e}"
    );
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Av(av.as_ref())).unwrap();
    ep.enable().unwrap();
    let mut me = [FiAddr(0)];
    av.insert(&[ep.getname().unwrap()], &mut me).unwrap();
    let remote = RmaIov {
        addr: 0,
        len: 8,
        key: 1,
    };
    let e = ep
        .inject_write(b"12345678", me[0], remote, None)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{e}");
    assert!(e.to_string().contains("FI_RMA"), "{e}");
}

#[test]
fn msg_refuses_rma_outside_its_caps_and_says_how_to_enable() {
    let mut h = msg_hints();
    h.caps = Caps::MSG;
    let Some(list) = entries(EpType::Msg, h) else {
        return;
    };
    let info = list.into_iter().next().unwrap();
    assert!(!info.caps.contains(Caps::RMA), "{}", info.caps);
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    let remote = RmaIov {
        addr: 0,
        len: 8,
        key: 1,
    };
    let e = ep
        .inject_write(b"12345678", FiAddr::UNSPEC, remote, None)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{e}");
    assert!(e.to_string().contains("FI_RMA"), "{e}");
    let e = ep.inject(b"x", FiAddr::UNSPEC, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpBadState);
    assert!(e.to_string().contains("endpoint not enabled"), "{e}");
}

#[test]
fn objects_without_a_wait_object_have_no_wait_fd() {
    let Some(info) = rdm_info(Caps::MSG) else {
        return;
    };
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cntr = domain
        .cntr(&CntrAttr {
            wait_obj: WaitObj::None,
        })
        .unwrap();
    assert!(cntr.wait_fd().is_none());
    assert_eq!(cntr.trywait().unwrap_err().kind(), ErrorKind::NoSys);
    let cq = domain
        .cq(&CqAttr {
            wait_obj: WaitObj::None,
            ..CqAttr::default()
        })
        .unwrap();
    assert!(cq.wait_fd().is_none());
    assert_eq!(cq.trywait().unwrap_err().kind(), ErrorKind::NoSys);
    // With a wait object, an idle CQ and counter may be slept on at once.
    let cq = domain.cq(&cq_attr()).unwrap();
    let cntr = domain
        .cntr(&CntrAttr {
            wait_obj: WaitObj::Unspec,
        })
        .unwrap();
    assert!(cq.wait_fd().is_some() && cntr.wait_fd().is_some());
    cq.trywait().unwrap();
    cntr.trywait().unwrap();
}
