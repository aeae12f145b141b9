//! Object semantics: getinfo, binding and enabling rules, CQ formats,
//! selective completion, FI_DELIVERY_COMPLETE, FI_FENCE, counters, AV
//! insert / lookup / remove, auto progress.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use fabric_core::matching::Request;
use fabric_core::objects::{
    AvAttr, Bind, CqAttr, CqEntry, CqFormat, FiAddr, MrAccess, Provider, RmaIov, RmaMsg, WaitObj,
};
use fabric_core::*;
use prov_shm::ShmProvider;

fn getinfo(hints: Option<&Info>, node: Option<&str>, flags: GetinfoFlags) -> Result<Vec<Info>> {
    ShmProvider.getinfo(&Request {
        node,
        flags,
        hints,
        ..Request::new(Version::CURRENT)
    })
}

#[test]
fn getinfo_offers_local_rdm_with_string_addresses() {
    let list = getinfo(None, None, GetinfoFlags::empty()).unwrap();
    assert_eq!(list.len(), 1);
    let i = &list[0];
    assert_eq!(i.ep_attr.ep_type, EpType::Rdm);
    assert_eq!(i.addr_format, AddrFormat::Str);
    assert!(i.caps.contains(Caps::LOCAL_COMM));
    assert!(!i.caps.contains(Caps::REMOTE_COMM));
    assert_eq!(i.ep_attr.protocol, Protocol::Shm);
    let cma = prov_shm::cma::detect().enabled;
    assert_eq!(
        i.ep_attr.protocol_version,
        if cma {
            prov_shm::getinfo::PROTOCOL_CMA
        } else {
            prov_shm::getinfo::PROTOCOL_BOUNCE
        }
    );
    assert_eq!(i.domain_attr.name.as_deref(), Some("shm"));
    // Remote communication, other endpoint types, socket addresses: no.
    for mut h in [Info::default(), Info::default(), Info::default()] {
        h.mode = Mode::all();
        h.caps = Caps::MSG;
        h.ep_attr.ep_type = EpType::Rdm;
        let mut h2 = h.clone();
        h2.caps |= Caps::REMOTE_COMM;
        assert_eq!(
            getinfo(Some(&h2), None, GetinfoFlags::empty())
                .unwrap_err()
                .kind(),
            ErrorKind::NoData
        );
        h2 = h.clone();
        h2.ep_attr.ep_type = EpType::Msg;
        let e = getinfo(Some(&h2), None, GetinfoFlags::empty()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
        h2 = h.clone();
        h2.addr_format = AddrFormat::SockaddrIn;
        let e = getinfo(Some(&h2), None, GetinfoFlags::empty()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
    }
    // A node: an fi_shm address is the destination; others are declined.
    let e = side(&info());
    let name = e.ep.getname().unwrap().to_string();
    let l = getinfo(None, Some(&name), GetinfoFlags::empty()).unwrap();
    assert_eq!(l[0].dest_addr.as_ref().map(ToString::to_string), Some(name));
    for node in [
        "127.0.0.1",
        "fi_shm://bad/name",
        "fi_sockaddr_in://127.0.0.1:1",
    ] {
        assert_eq!(
            getinfo(None, Some(node), GetinfoFlags::empty())
                .unwrap_err()
                .kind(),
            ErrorKind::NoData,
            "{node}"
        );
    }
    // With FI_SOURCE a node naming this host is the local side: the
    // answer gets a fresh source name.
    let l = getinfo(None, Some("127.0.0.1"), GetinfoFlags::SOURCE).unwrap();
    assert!(l[0].src_addr.is_some() && l[0].dest_addr.is_none());
    // Another host is out of shm's reach.
    assert_eq!(
        getinfo(
            None,
            Some("192.0.2.77"),
            GetinfoFlags::SOURCE | GetinfoFlags::NUMERICHOST
        )
        .unwrap_err()
        .kind(),
        ErrorKind::NoData
    );
}

#[test]
fn every_answer_names_the_region_of_its_endpoint() {
    let list = getinfo(None, None, GetinfoFlags::empty()).unwrap();
    let src = list[0].src_addr.clone().expect("src_addr with NULL hints");
    assert!(src.to_string().starts_with("fi_shm://fabric-shm-"), "{src}");
    // Each call names a new region.
    let again = getinfo(None, None, GetinfoFlags::empty()).unwrap();
    assert_ne!(again[0].src_addr, Some(src.clone()));
    // The first endpoint opened from the answer takes that name; a second
    // one from the same answer gets a fresh one.
    let a = side(&list[0]);
    assert_eq!(a.ep.getname().unwrap(), src);
    let b = side(&list[0]);
    assert_ne!(b.ep.getname().unwrap(), src);
}

fn getinfo_svc(node: Option<&str>, service: &str, flags: GetinfoFlags) -> Result<Vec<Info>> {
    let mut h = Info::default();
    h.mode = Mode::all();
    h.caps = Caps::MSG;
    ShmProvider.getinfo(&Request {
        node,
        service: Some(service),
        flags,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    })
}

#[test]
fn node_and_service_name_a_well_known_endpoint() {
    let service = format!("{}-{}", std::process::id(), 9228);
    // The server: FI_SOURCE with node and service; its endpoint takes the
    // service's name.
    let server = getinfo_svc(Some("127.0.0.1"), &service, GetinfoFlags::SOURCE).unwrap();
    let name = server[0].src_addr.clone().unwrap();
    assert!(
        name.to_string().ends_with(&format!("-svc-{service}")),
        "{name}"
    );
    let s = side(&server[0]);
    assert_eq!(s.ep.getname().unwrap(), name);
    // The service is taken while that endpoint lives.
    let fabric = ShmProvider.fabric(&server[0].fabric_attr).unwrap();
    let domain = fabric.domain(&server[0]).unwrap();
    assert_eq!(
        domain.endpoint(&server[0]).err().map(|e| e.kind()),
        Some(ErrorKind::AddrInUse)
    );
    // The client: node and service give the server's address as dest_addr,
    // and its own src_addr is a fresh name.
    for node in [Some("127.0.0.1"), Some("localhost"), None] {
        let client = getinfo_svc(node, &service, GetinfoFlags::empty()).unwrap();
        assert_eq!(client[0].dest_addr.as_ref(), Some(&name), "{node:?}");
        assert!(client[0].src_addr.is_some());
        assert_ne!(client[0].src_addr.as_ref(), Some(&name));
    }
    // A message from a client to the well-known name arrives.
    let client = getinfo_svc(Some("127.0.0.1"), &service, GetinfoFlags::empty()).unwrap();
    let c = side(&client[0]);
    let to_server = insert(&c, client[0].dest_addr.as_ref().unwrap());
    c.ep.inject(b"hello", to_server, None).unwrap();
    let mut buf = [0u8; 8];
    let iov = [fabric_core::objects::IoVec {
        addr: buf.as_mut_ptr(),
        len: buf.len(),
    }];
    // SAFETY: `buf` outlives the receive, which completes below.
    unsafe {
        s.ep.recvmsg(&msg(&iov, FiAddr::UNSPEC, 0, 0, 7), OpFlags::empty())
    }
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut e = [CqEntry::default()];
        match s.cq.read(&mut e) {
            Ok(1) => {
                assert_eq!(e[0].len, 5);
                break;
            }
            _ => {
                c.cq.read(&mut [CqEntry::default()]).ok();
                assert!(
                    Instant::now() < deadline,
                    "the message to the service never came"
                );
            }
        }
    }
    assert_eq!(&buf[..5], b"hello");
    drop(s);
    // Once the server is gone, the name is free again.
    let again = side(&server[0]);
    assert_eq!(again.ep.getname().unwrap(), name);
    // Services are names of digits, lowercase letters and dashes.
    assert_eq!(
        getinfo_svc(None, "Bad/Name", GetinfoFlags::SOURCE)
            .unwrap_err()
            .kind(),
        ErrorKind::NoData
    );
}

#[test]
fn wait_none_cqs_and_passive_endpoints_are_refused() {
    // The enable rules are in the shared suite (tests/semantics.rs).
    let info = info();
    let fabric = ShmProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain
        .cq(&CqAttr {
            wait_obj: WaitObj::None,
            ..CqAttr::default()
        })
        .unwrap();
    // sread on an FI_WAIT_NONE CQ is not supported; no wait fd.
    let mut e = [CqEntry::default()];
    let err = cq
        .sread(&mut e, Some(Duration::from_millis(1)))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoSys, "{err}");
    assert!(cq.wait_fd().is_none());
    assert!(
        fabric
            .passive_endpoint(&info)
            .is_err_and(|e| e.kind() == ErrorKind::OpNotSupp)
    );
}

#[test]
fn av_insert_lookup_remove_and_bad_addresses() {
    let (a, b, _, _) = pair();
    let name = b.ep.getname().unwrap();
    let mut out = [FiAddr(0); 3];
    let bad: Address = "fi_shm://not-a-region".parse().unwrap();
    let sock: Address = "fi_sockaddr_in://127.0.0.1:5".parse().unwrap();
    let n = a.av.insert(&[sock, name.clone(), bad], &mut out).unwrap();
    assert_eq!(n, 1);
    assert_eq!(out[0], FiAddr::NOTAVAIL);
    assert_eq!(out[2], FiAddr::NOTAVAIL);
    assert_eq!(a.av.lookup(out[1]).unwrap(), name);
    let s = name.to_string();
    let via_svc = a.av.insertsvc(&s, "").unwrap();
    assert_eq!(via_svc, out[1], "the same address, the same handle");
    let e = a.av.insertsvc(&s, "7").unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Inval,
        "shm addresses have no service: {e}"
    );
    a.av.remove(&[out[1]]).unwrap();
    assert_eq!(a.av.lookup(out[1]).unwrap_err().kind(), ErrorKind::NoEnt);
    // A region that does not exist: the first operation says so.
    let ghost: Address = "fi_shm://fabric-shm-0-1-2-deadbeef".parse().unwrap();
    let g = insert(&a, &ghost);
    assert_eq!(
        a.ep.inject(b"x", g, None).unwrap_err().kind(),
        ErrorKind::NoEnt
    );
    for t in [AvType::Map, AvType::Table] {
        let av = a
            .domain
            .av(&AvAttr {
                av_type: t,
                ..AvAttr::default()
            })
            .unwrap();
        let mut o = [FiAddr(9)];
        av.insert(std::slice::from_ref(&name), &mut o).unwrap();
        assert_eq!(o[0], FiAddr(0));
    }
}

#[test]
fn selective_completion_delivery_complete_and_fence() {
    let i = info_with(
        Caps::MSG | Caps::RMA | Caps::FENCE,
        MrMode::empty(),
        Progress::Unspec,
    );
    let fabric = ShmProvider.fabric(&i.fabric_attr).unwrap();
    let domain = fabric.domain(&i).unwrap();
    let cq = domain
        .cq(&CqAttr {
            format: CqFormat::Tagged,
            wait_obj: WaitObj::Unspec,
            ..CqAttr::default()
        })
        .unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let a = domain.endpoint(&i).unwrap();
    a.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: true,
    })
    .unwrap();
    a.bind(Bind::Av(av.as_ref())).unwrap();
    a.enable().unwrap();
    let b = side(&i);
    let mut out = [FiAddr(0)];
    av.insert(&[b.ep.getname().unwrap()], &mut out).unwrap();
    let b_at_a = out[0];
    let mut data = *b"abcd";
    let di = iov(&mut data);
    // Without FI_COMPLETION: no success entry; with it: one.
    // SAFETY: `data` outlives the sends.
    unsafe {
        a.sendmsg(&msg(&di, b_at_a, 0, 0, 1), OpFlags::empty())
            .unwrap();
        a.sendmsg(&msg(&di, b_at_a, 0, 0, 2), OpFlags::COMPLETION)
            .unwrap();
    }
    assert_eq!(next(cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 2);
    // FI_DELIVERY_COMPLETE: no completion until the receiver takes it.
    // SAFETY: as above.
    unsafe {
        a.sendmsg(
            &msg(&di, b_at_a, 0, 0, 3),
            OpFlags::COMPLETION | OpFlags::DELIVERY_COMPLETE,
        )
        .unwrap();
    }
    nothing(cq.as_ref(), &[b.cq.as_ref()]);
    // Drain the two earlier messages, then the one delivered late.
    for ctx in [10, 11, 12] {
        let mut r = [0u8; 4];
        let ri = iov(&mut r);
        // SAFETY: `r` outlives its completion, read right below.
        unsafe {
            b.ep.recvmsg(&msg(&ri, FiAddr::UNSPEC, 0, 0, ctx), OpFlags::empty())
                .unwrap()
        };
        assert_eq!(next(b.cq.as_ref(), &[]).unwrap().context, ctx);
    }
    assert_eq!(next(cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 3);
    // FI_FENCE: a read fenced behind a write sees the write.
    let mut target = vec![0u8; 1 << 20];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut target,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            4,
        )
    };
    let mut src = pattern(1 << 20, 3);
    let si = iov(&mut src);
    let mut back = vec![0u8; 1 << 20];
    let bi = iov(&mut back);
    let r = [RmaIov {
        addr: 0,
        len: 1 << 20,
        key: 4,
    }];
    // SAFETY: the buffers outlive the completions.
    unsafe {
        a.writemsg(
            &RmaMsg {
                iov: &si,
                desc: &[],
                addr: b_at_a,
                rma_iov: &r,
                context: 20,
                data: 0,
            },
            OpFlags::COMPLETION,
        )
        .unwrap();
        a.readmsg(
            &RmaMsg {
                iov: &bi,
                desc: &[],
                addr: b_at_a,
                rma_iov: &r,
                context: 21,
                data: 0,
            },
            OpFlags::COMPLETION | OpFlags::FENCE,
        )
        .unwrap();
    }
    assert_eq!(next(cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 20);
    assert_eq!(next(cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 21);
    assert!(back == src);
    drop(mr);
}

#[test]
fn auto_progress_completes_without_reads_on_the_target() {
    let i = info_with(Caps::MSG | Caps::RMA, MrMode::empty(), Progress::Auto);
    assert_eq!(i.domain_attr.data_progress, Progress::Auto);
    let (a, b, b_at_a, _) = pair_of(&i);
    // b's CQ is never read: only its progress thread can take the
    // rendezvous message (and answer RMA) for a's operations to complete.
    let mut r = vec![0u8; 1 << 20];
    let ri = iov(&mut r);
    // SAFETY: `r` outlives the completion.
    unsafe {
        b.ep.recvmsg(&msg(&ri, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
            .unwrap()
    };
    let mut s = pattern(1 << 20, 2);
    let si = iov(&mut s);
    let t = Instant::now();
    // SAFETY: `s` outlives the completion.
    unsafe {
        a.ep.sendmsg(&msg(&si, b_at_a, 0, 0, 2), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[]).unwrap().context, 2);
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(r == s);
    let mut target = vec![0u8; 4096];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_WRITE, 3) };
    let mut w = *b"auto";
    let wi = iov(&mut w);
    let rr = [RmaIov {
        addr: 0,
        len: 4,
        key: 3,
    }];
    // SAFETY: `w` outlives the completion.
    unsafe {
        a.ep.writemsg(
            &RmaMsg {
                iov: &wi,
                desc: &[],
                addr: b_at_a,
                rma_iov: &rr,
                context: 3,
                data: 0,
            },
            OpFlags::empty(),
        )
        .unwrap()
    };
    assert_eq!(next(a.cq.as_ref(), &[]).unwrap().context, 3);
    assert_eq!(&target[..4], b"auto");
    drop(mr);
    // b's receive completed too, though nobody drove it.
    let mut e = [CqEntry::default()];
    assert_eq!(b.cq.read(&mut e).unwrap(), 1);
    assert_eq!(e[0].context, 1);
}
