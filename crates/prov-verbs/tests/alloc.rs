//! The data path allocates nothing once warmed up: MSG sends, receives,
//! injects, RMA writes and reads, and RDM eager tagged messages, with
//! their completions, counted by a global allocator. Everything runs on
//! the test's thread (manual progress through CQ reads). Skips without a
//! device (see `common`).

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::time::Instant;

use common::*;
use fabric_core::objects::{
    AvAttr, Bind, CompletionQueue, CqEntry, FiAddr, IoVec, Msg, Provider, RmaIov, RmaMsg,
};
use fabric_core::*;
use prov_verbs::VerbsProvider;

#[global_allocator]
static ALLOCATOR: fabric_core::testing::CountingAlloc = fabric_core::testing::CountingAlloc;

fn allocs() -> u64 {
    fabric_core::testing::CountingAlloc::count()
}

/// Polls `cq` (driving `other` too) until one successful completion.
fn poll(cq: &dyn CompletionQueue, other: &dyn CompletionQueue) -> CqEntry {
    let deadline = Instant::now() + T;
    let mut e = [CqEntry::default()];
    loop {
        let _ = other.read(&mut []);
        match cq.read(&mut e) {
            Ok(_) => return e[0],
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("CQ read failed: {err:?}"),
        }
        assert!(Instant::now() < deadline, "no completion within {T:?}");
    }
}

fn msg<'a>(
    iov: &'a [IoVec],
    desc: &'a [fabric_core::objects::MrDesc],
    addr: FiAddr,
    tag: u64,
) -> Msg<'a> {
    Msg {
        iov,
        desc,
        addr,
        tag,
        ignore: 0,
        context: 7,
        data: 0,
    }
}

#[test]
fn msg_data_path_allocates_nothing() {
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let (server, client) = connected(&l);
    let mut sbuf = Buf::new(server.domain.as_ref(), 4096);
    let mut cbuf = Buf::new(client.domain.as_ref(), 4096);
    let siov = sbuf.iov();
    let sdesc = [sbuf.mr.desc()];
    let ciov = cbuf.iov();
    let cdesc = [cbuf.mr.desc()];
    let remote = [RmaIov {
        addr: sbuf.addr(),
        len: 4096,
        key: sbuf.mr.key(),
    }];
    let round = || {
        // SAFETY: the buffers outlive every completion, read in the round.
        unsafe {
            server
                .ep
                .recvmsg(&msg(&siov, &sdesc, FiAddr::UNSPEC, 0), OpFlags::empty())
        }
        .unwrap();
        // SAFETY: as above.
        unsafe {
            client
                .ep
                .sendmsg(&msg(&ciov, &cdesc, FiAddr::UNSPEC, 0), OpFlags::empty())
        }
        .unwrap();
        poll(client.cq.as_ref(), server.cq.as_ref());
        poll(server.cq.as_ref(), client.cq.as_ref());
        // SAFETY: as above.
        unsafe {
            server
                .ep
                .recvmsg(&msg(&siov, &sdesc, FiAddr::UNSPEC, 0), OpFlags::empty())
        }
        .unwrap();
        client.ep.inject(b"small", FiAddr::UNSPEC, None).unwrap();
        poll(server.cq.as_ref(), client.cq.as_ref());
        let rma = RmaMsg {
            iov: &ciov,
            desc: &cdesc,
            addr: FiAddr::UNSPEC,
            rma_iov: &remote,
            context: 8,
            data: 0,
        };
        // SAFETY: as above.
        unsafe { client.ep.writemsg(&rma, OpFlags::empty()) }.unwrap();
        poll(client.cq.as_ref(), server.cq.as_ref());
        // SAFETY: as above.
        unsafe { client.ep.readmsg(&rma, OpFlags::empty()) }.unwrap();
        poll(client.cq.as_ref(), server.cq.as_ref());
    };
    for _ in 0..50 {
        round();
    }
    let before = allocs();
    for _ in 0..200 {
        round();
    }
    assert_eq!(allocs() - before, 0, "allocations on the MSG data path");
}

#[test]
fn rdm_eager_path_allocates_nothing() {
    let mut h = Info::default();
    h.caps = Caps::TAGGED;
    h.addr_format = AddrFormat::SockaddrIn;
    let Some(list) = entries(EpType::Rdm, h) else {
        return;
    };
    let info = list.into_iter().next().unwrap();
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let open = || {
        let cq = domain.cq(&cq_attr()).unwrap();
        let ep = domain.endpoint(&info).unwrap();
        ep.bind(Bind::Cq {
            cq: cq.as_ref(),
            transmit: true,
            recv: true,
            selective: false,
        })
        .unwrap();
        ep.bind(Bind::Av(av.as_ref())).unwrap();
        ep.enable().unwrap();
        (ep, cq)
    };
    let (a, acq) = open();
    let (b, bcq) = open();
    let mut fi = [FiAddr(0); 2];
    av.insert(&[a.getname().unwrap(), b.getname().unwrap()], &mut fi)
        .unwrap();
    let to_b = fi[1];
    let mut s = vec![1u8; 2048];
    let mut r = vec![0u8; 2048];
    let siov = [IoVec {
        addr: s.as_mut_ptr(),
        len: s.len(),
    }];
    let riov = [IoVec {
        addr: r.as_mut_ptr(),
        len: r.len(),
    }];
    let round = || {
        // SAFETY: the buffers outlive every completion, read in the round.
        unsafe { b.trecvmsg(&msg(&riov, &[], FiAddr::UNSPEC, 3), OpFlags::empty()) }.unwrap();
        // SAFETY: as above.
        unsafe { a.tsendmsg(&msg(&siov, &[], to_b, 3), OpFlags::empty()) }.unwrap();
        poll(acq.as_ref(), bcq.as_ref());
        poll(bcq.as_ref(), acq.as_ref());
        a.tinject(b"tiny", to_b, 4, None).unwrap();
        // SAFETY: as above.
        unsafe { b.trecvmsg(&msg(&riov, &[], FiAddr::UNSPEC, 4), OpFlags::empty()) }.unwrap();
        poll(bcq.as_ref(), acq.as_ref());
    };
    for _ in 0..50 {
        round();
    }
    let before = allocs();
    for _ in 0..200 {
        round();
    }
    assert_eq!(allocs() - before, 0, "allocations on the RDM eager path");
}
