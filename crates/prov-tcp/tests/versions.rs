//! Wire protocol versions: an endpoint speaks version 2 (a refused RMA or
//! atomic request's reason travels back to the initiator), and one held to
//! version 1 (`ep_attr.protocol_version = 1`, what a peer built before
//! version 2 speaks) keeps the version 1 format with a version 2 peer, in
//! both directions; raw-socket peers check the bytes on the wire.

#![allow(
    clippy::unwrap_used,
    clippy::result_large_err,
    clippy::field_reassign_with_default
)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use common::*;
use fabric_core::matching::Request;
use fabric_core::objects::{FiAddr, IoVec, MrAccess, RmaIov, RmaMsg};
use fabric_core::*;
use prov_tcp::TcpProvider;
use prov_tcp::wire::{
    CmHeader, Ext, Frame, HEADER_LEN, Header, Limits, MAX_REASON_LEN, Op, VERSION, decode_header,
};

fn rma<'a>(iov: &'a [IoVec], addr: FiAddr, remote: &'a [RmaIov], ctx: u64) -> RmaMsg<'a> {
    RmaMsg {
        iov,
        desc: &[],
        addr,
        rma_iov: remote,
        context: ctx,
        data: 0,
    }
}

fn with_version(info: &Info, v: u32) -> Info {
    let mut i = info.clone();
    i.ep_attr.protocol_version = v;
    i
}

#[test]
fn getinfo_offers_version_2() {
    assert_eq!(VERSION, 2);
    assert_eq!(rdm_info().ep_attr.protocol_version, 2);
}

/// A refused write and a refused read from `a` to `b`: with `reasons`, the
/// target's reason text comes back; without, the status's meaning. Then a
/// read that is allowed works on the same connection.
fn refusals(a: &Side, b: &Side, b_at_a: FiAddr, reasons: bool) {
    let mut ro = vec![3u8; 64];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _mr = unsafe { reg(b.domain.as_ref(), &mut ro, MrAccess::REMOTE_READ, 7) };
    let mut src = vec![9u8; 16];
    let siov = iov(&mut src);
    let remote = [RmaIov {
        addr: 0,
        len: 16,
        key: 7,
    }];
    // SAFETY: `src` outlives the completion awaited below.
    unsafe {
        a.ep.writemsg(&rma(&siov, b_at_a, &remote, 1), OpFlags::empty())
    }
    .unwrap();
    let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err();
    assert_eq!(
        (e.err, e.entry.context, e.entry.len),
        (ErrorKind::Access, 1, 16)
    );
    if reasons {
        assert_eq!(
            e.err_text,
            "tcp: the peer refused the RMA write: memory key 0x7 does not grant FI_REMOTE_WRITE"
        );
    } else {
        assert!(e.err_text.contains("(FI_EACCES)"), "{}", e.err_text);
        assert!(!e.err_text.contains("0x7"), "{}", e.err_text);
    }
    let mut back = vec![0u8; 16];
    let biov = iov(&mut back);
    let bad = [RmaIov {
        addr: 0,
        len: 16,
        key: 0x55,
    }];
    // SAFETY: `back` outlives the completion awaited below.
    unsafe { a.ep.readmsg(&rma(&biov, b_at_a, &bad, 2), OpFlags::empty()) }.unwrap();
    let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err();
    assert_eq!(
        (e.err, e.entry.context, e.entry.len),
        (ErrorKind::KeyRejected, 2, 16)
    );
    if reasons {
        assert_eq!(
            e.err_text,
            "tcp: the peer refused the RMA read: no memory region with key 0x55"
        );
    } else {
        assert!(e.err_text.contains("(FI_EKEYREJECTED)"), "{}", e.err_text);
    }
    // SAFETY: as above.
    unsafe {
        a.ep.readmsg(&rma(&biov, b_at_a, &remote, 3), OpFlags::empty())
    }
    .unwrap();
    let ok = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
    assert_eq!((ok.context, ok.len), (3, 16));
    assert_eq!(back, [3u8; 16]);
    assert_eq!(ro, [3u8; 64], "nothing was written");
}

#[test]
fn version_1_and_version_2_endpoints_interoperate_both_ways() {
    let v2 = rdm_info();
    let v1 = with_version(&v2, 1);
    for (init, target, reasons) in [
        (&v2, &v2, true),
        (&v2, &v1, false),
        (&v1, &v2, false),
        (&v1, &v1, false),
    ] {
        let a = side(init);
        let b = side(target);
        let b_at_a = insert(&a, &b.ep.getname().unwrap());
        let _ = insert(&b, &a.ep.getname().unwrap());
        refusals(&a, &b, b_at_a, reasons);
    }
}

/// Reads one frame's headers and payload from `s`, with the raw base
/// header.
fn read_frame(s: &mut TcpStream) -> ([u8; HEADER_LEN], Header, Vec<u8>) {
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h).unwrap();
    let header = decode_header(&h, &Limits::default()).unwrap();
    let mut rest = vec![0u8; usize::from(header.ext_len) + header.payload_len as usize];
    s.read_exact(&mut rest).unwrap();
    (h, header, rest)
}

fn write_frame(s: &mut TcpStream, f: &Frame, payload: &[u8]) {
    let (b, n) = f.to_bytes();
    let mut v = b[..n].to_vec();
    v.extend_from_slice(payload);
    s.write_all(&v).unwrap();
}

fn cm_of(ext: &[u8]) -> CmHeader {
    CmHeader::decode(&ext[..prov_tcp::wire::CM_LEN]).unwrap()
}

/// A raw peer says hello speaking versions 1 to `max` and reads the answer:
/// the version the endpoint chose.
fn hello(to: SocketAddr, max: u8) -> (TcpStream, u8) {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut cm = CmHeader::new(Some(s.local_addr().unwrap()), 7);
    cm.max_version = max;
    write_frame(&mut s, &Frame::hello(cm), &[]);
    let (raw, h, rest) = read_frame(&mut s);
    assert_eq!((h.op, h.status, raw[1]), (Op::HelloAck, None, 1));
    let answer = cm_of(&rest);
    assert_eq!(answer.min_version, answer.max_version);
    (s, answer.min_version)
}

#[test]
fn a_version_1_peer_gets_version_1_answers() {
    let b = side(&auto_info_with(Caps::MSG | Caps::RMA));
    let name = b.ep.getname().unwrap().socket_addr().unwrap();
    let bad = [RmaIov {
        addr: 0,
        len: 8,
        key: 0xbad,
    }];
    for (max, want) in [(1u8, 1u8), (2, 2), (9, 2)] {
        let (mut s, chosen) = hello(name, max);
        assert_eq!(chosen, want, "hello speaking 1..={max}");
        let (req, n) = Frame::read_req(5, &bad).unwrap().to_bytes();
        s.write_all(&req[..n]).unwrap();
        let (raw, h, rest) = read_frame(&mut s);
        assert_eq!(
            (h.op, h.id, h.status),
            (Op::ReadRsp, 5, Some(ErrorKind::KeyRejected))
        );
        assert_eq!(raw[1], want, "the answer's version byte");
        if want == 1 {
            assert_eq!(h.payload_len, 0, "a version 1 answer carries no reason");
        } else {
            assert!(rest.len() <= MAX_REASON_LEN);
            assert_eq!(
                std::str::from_utf8(&rest).unwrap(),
                "no memory region with key 0xbad"
            );
        }
    }
    // The endpoint held to version 1 answers every hello with version 1.
    let v1 = side(&with_version(&auto_info_with(Caps::MSG | Caps::RMA), 1));
    let name = v1.ep.getname().unwrap().socket_addr().unwrap();
    assert_eq!(hello(name, 2).1, 1);
}

/// A raw RDM peer on 127.0.0.1 that accepts one connection and answers
/// its hello with version `v`.
fn fake_target(l: &TcpListener, me: SocketAddr, v: u8) -> TcpStream {
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (raw, h, rest) = read_frame(&mut s);
    assert_eq!((h.op, raw[1]), (Op::Hello, 1));
    let offered = cm_of(&rest);
    assert_eq!((offered.min_version, offered.max_version), (1, 2));
    let mut cm = CmHeader::new(Some(me), 99);
    cm.min_version = v;
    cm.max_version = v;
    write_frame(&mut s, &Frame::hello_ack(cm, None), &[]);
    s
}

/// An RMA write from a real endpoint to a raw peer that answers the
/// hello with `version` and then refuses the write with `answer` and
/// `reason` as payload: the error completion of the write.
fn refused_by_raw_peer(version: u8, reason: &'static [u8]) -> objects::CqErrEntry {
    let a = side(&rdm_info());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap();
    let to = insert(&a, &Address::from(fake));
    let mut src = vec![1u8; 8];
    let siov = iov(&mut src);
    let remote = [RmaIov {
        addr: 0,
        len: 8,
        key: 1,
    }];
    // SAFETY: `src` outlives the completion awaited below.
    unsafe { a.ep.writemsg(&rma(&siov, to, &remote, 4), OpFlags::empty()) }.unwrap();
    let peer = std::thread::spawn(move || {
        let mut s = fake_target(&l, fake, version);
        let (_, h, _) = read_frame(&mut s);
        assert_eq!(h.op, Op::Write);
        let ack = Frame::ack(h.id, Some(ErrorKind::Access)).with_reason(reason.len());
        write_frame(&mut s, &ack, reason);
        s
    });
    let e = next(a.cq.as_ref(), &[]).unwrap_err();
    drop(peer.join().unwrap());
    assert_eq!((e.entry.context, e.entry.len), (4, 8));
    e
}

#[test]
fn a_reason_is_shown_as_untrusted_text() {
    let e = refused_by_raw_peer(2, b"range \xff\x1b[2J outside\n");
    assert_eq!(e.err, ErrorKind::Access);
    assert_eq!(
        e.err_text,
        "tcp: the peer refused the RMA write: range \u{fffd}\u{fffd}[2J outside"
    );
}

#[test]
fn a_reason_on_a_version_1_connection_is_a_protocol_error() {
    let e = refused_by_raw_peer(1, b"not in version 1");
    assert_eq!(e.err, ErrorKind::Io);
    assert!(
        e.err_text
            .contains("version 2 Ack frame on a connection that speaks version 1"),
        "{}",
        e.err_text
    );
}

/// The first MSG answer for 127.0.0.1.
fn msg_info() -> Info {
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
    TcpProvider
        .getinfo(&req)
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
}

#[test]
fn msg_connection_requests_offer_the_endpoints_versions() {
    for (v, max) in [(0u32, 2u8), (2, 2), (1, 1)] {
        let info = with_version(&msg_info(), v);
        let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
        let eq = fabric
            .eq(&objects::EqAttr {
                wait_obj: objects::WaitObj::Unspec,
                ..objects::EqAttr::default()
            })
            .unwrap();
        let domain = fabric.domain(&info).unwrap();
        let cq = domain
            .cq(&objects::CqAttr {
                wait_obj: objects::WaitObj::Unspec,
                ..objects::CqAttr::default()
            })
            .unwrap();
        let ep = domain.endpoint(&info).unwrap();
        ep.bind(objects::Bind::Eq(eq.as_ref())).unwrap();
        ep.bind(objects::Bind::Cq {
            cq: cq.as_ref(),
            transmit: true,
            recv: true,
            selective: false,
        })
        .unwrap();
        ep.enable().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        ep.connect(&Address::from(l.local_addr().unwrap()), b"")
            .unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let (raw, h, rest) = read_frame(&mut s);
        assert_eq!((h.op, raw[1]), (Op::ConnReq, 1));
        let Ok(Frame {
            ext: Ext::Cm(cm), ..
        }) = Frame::decode(&[&raw[..], &rest[..]].concat(), &Limits::default())
        else {
            panic!("a ConnReq without its CM header");
        };
        assert_eq!(
            (cm.min_version, cm.max_version),
            (1, max),
            "protocol_version {v}"
        );
    }
}
