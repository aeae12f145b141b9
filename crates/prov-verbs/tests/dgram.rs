//! DGRAM endpoints on a real RDMA device: datagrams on UD queue pairs,
//! addressed by FI_ADDR_IB_UD names. Skips without a device (see `common`).

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::time::Instant;

use common::*;
use fabric_core::objects::{
    AvAttr, Bind, CompletionFlags, CompletionQueue, CqEntry, FiAddr, IoVec, Msg, Provider,
};
use fabric_core::*;
use prov_verbs::VerbsProvider;

fn dgram_info() -> Option<Info> {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::SOURCE;
    h.addr_format = AddrFormat::IbUd;
    // Only the IPv4 port addresses (a GID of the rxe rig's own subnet).
    let list = entries(EpType::Dgram, h)?;
    let v4 = list.iter().find(|i| {
        matches!(&i.src_addr, Some(Address::Raw { bytes, .. }) if bytes[..12] == [0,0,0,0,0,0,0,0,0,0,0xff,0xff])
    });
    Some(v4.unwrap_or(&list[0]).clone())
}

fn wait(
    cq: &dyn CompletionQueue,
) -> std::result::Result<(CqEntry, FiAddr), fabric_core::objects::CqErrEntry> {
    let deadline = Instant::now() + T;
    let mut out = [CqEntry::default(); 1];
    let mut src = [FiAddr(0); 1];
    loop {
        match cq.sreadfrom(
            &mut out,
            &mut src,
            Some(std::time::Duration::from_millis(50)),
        ) {
            Ok(1) => return Ok((out[0], src[0])),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Avail => return Err(cq.readerr().unwrap()),
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("CQ read failed: {e:?}"),
        }
        assert!(Instant::now() < deadline, "no completion within {T:?}");
    }
}

/// [`msg_to`] with remote CQ data.
fn m<'a>(iov: &'a [IoVec], addr: FiAddr, context: u64, data: u64) -> Msg<'a> {
    Msg {
        data,
        ..msg_to(iov, addr, context)
    }
}

#[test]
fn datagrams_with_sources_data_and_truncation() {
    let Some(info) = dgram_info() else { return };
    assert_eq!(info.addr_format, AddrFormat::IbUd);
    let max = info.ep_attr.max_msg_size;
    assert!(max >= 200, "max_msg_size {max}");
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
    let names = [a.getname().unwrap(), b.getname().unwrap()];
    assert_eq!(names[0].format(), AddrFormat::IbUd);
    assert_ne!(names[0], names[1]);
    let mut fi = [FiAddr(0); 2];
    assert_eq!(av.insert(&names, &mut fi).unwrap(), 2);
    let (to_a, to_b) = (fi[0], fi[1]);

    let mut r = vec![0u8; max];
    let riov = [IoVec {
        addr: r.as_mut_ptr(),
        len: r.len(),
    }];
    // SAFETY: the buffer outlives its completion, read below.
    unsafe { b.recvmsg(&m(&riov, FiAddr::UNSPEC, 1, 0), OpFlags::empty()) }.unwrap();
    let mut s: Vec<u8> = (0..max).map(|i| (i % 199) as u8).collect();
    let siov = [IoVec {
        addr: s.as_mut_ptr(),
        len: s.len(),
    }];
    // SAFETY: the buffer is copied before the call returns.
    unsafe { a.sendmsg(&m(&siov, to_b, 2, 0x42), OpFlags::REMOTE_CQ_DATA) }.unwrap();
    let (c, _) = wait(acq.as_ref()).unwrap();
    assert_eq!(c.context, 2);
    let (c, src) = wait(bcq.as_ref()).unwrap();
    assert_eq!((c.context, c.len, c.data), (1, max, 0x42));
    assert!(
        c.flags
            .contains(CompletionFlags::RECV | CompletionFlags::REMOTE_CQ_DATA)
    );
    assert_eq!(src, to_a, "FI_SOURCE: the sender's AV handle");
    assert!(r == s);

    // Inject back, into a receive that is too small.
    let mut small = [0u8; 4];
    let smiov = [IoVec {
        addr: small.as_mut_ptr(),
        len: 4,
    }];
    // SAFETY: as above.
    unsafe { a.recvmsg(&m(&smiov, FiAddr::UNSPEC, 3, 0), OpFlags::empty()) }.unwrap();
    b.inject(b"datagram", to_a, None).unwrap();
    let e = wait(acq.as_ref()).unwrap_err();
    assert_eq!((e.entry.context, e.err, e.olen), (3, ErrorKind::Trunc, 4));
    assert_eq!(&small, b"data");

    // Too large for a datagram; cancel a receive.
    let mut big = vec![0u8; max + 1];
    let biov = [IoVec {
        addr: big.as_mut_ptr(),
        len: big.len(),
    }];
    // SAFETY: as above.
    let err = unsafe { a.sendmsg(&m(&biov, to_b, 4, 0), OpFlags::empty()) }.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MsgSize);
    // SAFETY: as above.
    unsafe { a.recvmsg(&m(&riov, FiAddr::UNSPEC, 5, 0), OpFlags::empty()) }.unwrap();
    a.cancel(5).unwrap();
    let e = wait(acq.as_ref()).unwrap_err();
    assert_eq!((e.entry.context, e.err), (5, ErrorKind::Canceled));
}
