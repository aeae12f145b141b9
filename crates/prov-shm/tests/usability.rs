//! What a new Rust user runs into (#22): errors that say what went wrong
//! (an operation before enable, an `sread` that timed out, an address the
//! AV refuses), operations outside the endpoint's capabilities refused.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use std::time::Duration;

use common::*;
use fabric_core::objects::{AvAttr, CqAttr, CqEntry, FiAddr, IoVec, RmaIov};
use fabric_core::*;

#[test]
fn an_operation_before_enable_says_the_endpoint_is_not_enabled() {
    let info = info();
    let a = side(&info);
    let ep = a.domain.endpoint(&info).unwrap();
    let e = ep.inject(b"x", FiAddr(0), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpBadState);
    assert!(e.to_string().contains("endpoint not enabled"), "{e}");
}

#[test]
fn an_sread_timeout_says_it_timed_out() {
    let a = side(&info());
    let cq = a.domain.cq(&CqAttr::default()).unwrap();
    let mut e = [CqEntry::default()];
    let err = cq
        .sread(&mut e, Some(Duration::from_millis(20)))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Again, "as libfabric's -FI_EAGAIN");
    assert!(err.to_string().contains("timed out after 20 ms"), "{err}");
}

#[test]
fn insert_one_keeps_the_reason_of_a_refused_address() {
    let a = side(&info());
    let av = a.domain.av(&AvAttr::default()).unwrap();
    let e = av
        .insert_one(&Address::In("127.0.0.1:5000".parse().unwrap()))
        .unwrap_err();
    assert!(
        !e.to_string().is_empty() && e.kind() != ErrorKind::Again,
        "{e}"
    );
    let good = av.insert_one(&a.ep.getname().unwrap()).unwrap();
    assert_eq!(av.lookup(good).unwrap(), a.ep.getname().unwrap());
}

#[test]
fn rma_and_atomics_need_their_capabilities() {
    let info = info_with(Caps::MSG | Caps::TAGGED, MrMode::empty(), Progress::Unspec);
    assert!(!info.caps.contains(Caps::RMA), "{}", info.caps);
    let (a, _b, b_at_a, _) = pair_of(&info);
    let remote = RmaIov {
        addr: 0,
        len: 1,
        key: 1,
    };
    let e = a.ep.inject_write(b"x", b_at_a, remote, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpNotSupp);
    assert!(e.to_string().contains("FI_RMA"), "{e}");
}

#[test]
fn a_bad_receive_buffer_is_refused_at_once() {
    let (a, b, b_at_a, _) = pair();
    let mut x = [0u8; 8];
    let good = IoVec {
        addr: x.as_mut_ptr(),
        len: x.len(),
    };
    let wraps = IoVec {
        addr: (usize::MAX - 3) as *mut u8,
        len: 8,
    };
    // SAFETY: refused calls keep no buffer.
    unsafe {
        let e =
            b.ep.recvmsg(&msg(&[wraps], FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
                .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
        let e =
            b.ep.recvmsg(&msg(&[good; 5], FiAddr::UNSPEC, 0, 0, 2), OpFlags::empty())
                .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
        let e =
            b.ep.trecvmsg(&msg(&[good], FiAddr::UNSPEC, 0, 0, 3), OpFlags::MULTI_RECV)
                .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadFlags, "{e}");
        // A receive of no bytes (no pieces) takes an empty message.
        b.ep.recvmsg(&msg(&[], FiAddr::UNSPEC, 0, 0, 4), OpFlags::empty())
            .unwrap();
    }
    a.ep.inject(b"", b_at_a, None).unwrap();
    let e = next(&*b.cq, &[&*a.cq]).unwrap();
    assert_eq!((e.context, e.len), (4, 0));
    // The refused receives left nothing posted.
    nothing(&*b.cq, &[&*a.cq]);
}
