//! The tcp wire protocol: round trips of every op and extended header,
//! every class of malformed frame refused with its own message, streaming
//! decode independent of how the input is split, random bytes handled
//! without panic, and length claims refused without allocating.
//!
//! Property tests honour `PROPTEST_CASES` (default 256).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;

use fabric_core::objects::{AtomicOp, Datatype, RmaIov};
use fabric_core::{Error, ErrorKind};
use proptest::prelude::*;
use prov_tcp::wire::{
    AtomicHeader, AtomicKind, CM_LEN, CmHeader, ConnKey, Decoder, Event, Ext, Flags, Frame,
    HEADER_LEN, Header, Limits, MAX_EXT_LEN, MAX_FRAME_HEADER_LEN, MAX_REASON_LEN, MAX_RMA_IOV,
    MIN_VERSION, Op, PayloadKind, RmaHeader, Simultaneous, VERSION, Want, decode_header,
    decode_header_fast, resolve_simultaneous,
};

// ---------------------------------------------------------------------------
// An allocator that counts, per thread, the allocations and the largest one.

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds the GlobalAlloc contract; the counters are plain thread-locals
// without destructors and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        let _ = LARGEST.try_with(|m| m.set(m.get().max(layout.size())));
        // SAFETY: the caller's guarantees on `layout` are passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f`; returns its result, the allocations it made on this thread and
/// the size of the largest.
fn measure<R>(f: impl FnOnce() -> R) -> (R, u64, usize) {
    ALLOCS.with(|c| c.set(0));
    LARGEST.with(|m| m.set(0));
    let r = f();
    (r, ALLOCS.with(Cell::get), LARGEST.with(Cell::get))
}

// ---------------------------------------------------------------------------
// Helpers.

fn iov(addr: u64, len: usize, key: u64) -> RmaIov {
    RmaIov { addr, len, key }
}

fn v4(s: &str) -> Option<SocketAddr> {
    Some(s.parse().unwrap())
}

fn encode(f: &Frame) -> Vec<u8> {
    let (b, len) = f.to_bytes();
    b[..len].to_vec()
}

/// A stream of frames, each followed by its payload (a pattern).
fn stream_of(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        out.extend(encode(f));
        out.extend(pattern(i, f.payload_len()));
    }
    out
}

fn pattern(seed: usize, len: u64) -> impl Iterator<Item = u8> {
    (0..len).map(move |i| (i as u8).wrapping_mul(31) ^ (seed as u8))
}

/// What a decode produced: each frame with its payload, and the error that
/// ended it, if any.
#[derive(Debug, PartialEq)]
struct Decoded {
    frames: Vec<(Frame, Vec<u8>)>,
    error: Option<Error>,
    at_boundary: bool,
}

/// Decodes `chunks` in order with one decoder, checking on the way that
/// every call makes progress, that payload pieces add up, and that every
/// frame's header bytes are exactly its encoding (one encoding per frame).
fn decode_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>, limits: &Limits) -> Decoded {
    let mut dec = Decoder::new(*limits);
    let mut frames: Vec<(Frame, Vec<u8>)> = Vec::new();
    let mut seen: Vec<u8> = Vec::new();
    let mut frame_start = 0usize;
    for chunk in chunks {
        let mut input = chunk;
        while !input.is_empty() {
            if dec.is_at_boundary() {
                frame_start = seen.len();
            }
            match dec.feed(input) {
                Ok((used, event)) => {
                    assert!(used >= 1 && used <= input.len(), "used {used}");
                    seen.extend_from_slice(&input[..used]);
                    match event {
                        Some(Event::Frame(f)) => {
                            let header = &seen[frame_start..];
                            assert_eq!(header, encode(&f).as_slice(), "{f:?}");
                            f.validate(limits).unwrap();
                            frames.push((f, Vec::new()));
                        }
                        Some(Event::Payload { data, remaining }) => {
                            assert_eq!(data, &input[..used]);
                            let (f, p) = frames.last_mut().unwrap();
                            p.extend_from_slice(data);
                            assert_eq!(f.payload_len() - p.len() as u64, remaining);
                            assert_eq!(dec.payload_remaining(), remaining);
                        }
                        None => assert_eq!(used, input.len()),
                    }
                    input = &input[used..];
                }
                Err(e) => {
                    assert!(dec.is_failed());
                    assert_eq!(e.kind(), ErrorKind::Io, "{e:?}");
                    assert!(e.detail().starts_with("tcp wire: "), "{e:?}");
                    return Decoded {
                        frames,
                        error: Some(e),
                        at_boundary: false,
                    };
                }
            }
        }
    }
    Decoded {
        frames,
        error: None,
        at_boundary: dec.is_at_boundary(),
    }
}

fn decode_all(bytes: &[u8], limits: &Limits) -> Decoded {
    decode_chunks([bytes], limits)
}

/// The error a single frame's bytes give.
fn refuse(bytes: &[u8], limits: &Limits) -> Error {
    let d = decode_all(bytes, limits);
    let e = d
        .error
        .unwrap_or_else(|| panic!("accepted: {:?}", d.frames));
    // Frame::decode agrees with the streaming decoder.
    if bytes.len() >= HEADER_LEN {
        let whole = Frame::decode(bytes, limits).unwrap_err();
        assert_eq!(whole, e);
    }
    e
}

fn assert_refused(bytes: &[u8], limits: &Limits, message: &str) {
    let e = refuse(bytes, limits);
    assert!(
        e.detail().contains(message),
        "expected {message:?}, got {:?}",
        e.detail()
    );
}

/// One valid frame of every op.
fn one_of_each() -> Vec<Frame> {
    let cm = CmHeader::new(v4("192.0.2.7:7471"), 0x1234_5678_9abc_def0);
    let r = [iov(0x1000, 16, 7), iov(0x2000, 8, 7)];
    let frames = vec![
        Frame::msg(1, 5).with_cq_data(0xfeed),
        Frame::tagged(2, 0xabcd, 3).with_flags(Flags::ACK_DELIVERY),
        Frame::rts(3, None, 1 << 20),
        Frame::rts(4, Some(9), 1 << 21).with_cq_data(1),
        Frame::cts(4, 1 << 20, None),
        Frame::rndv_data(4, 4096, 7),
        Frame::ack(2, Some(ErrorKind::Trunc)),
        Frame::write(5, &r)
            .unwrap()
            .with_cq_data(77)
            .with_flags(Flags::ACK_TRANSMIT),
        Frame::read_req(6, &r).unwrap(),
        Frame::read_rsp(6, None, 24),
        Frame::atomic(7, AtomicKind::Plain, Datatype::Uint64, AtomicOp::Sum, &r).unwrap(),
        Frame::atomic(
            8,
            AtomicKind::Fetch,
            Datatype::Float,
            AtomicOp::AtomicRead,
            &r[..1],
        )
        .unwrap(),
        Frame::atomic(9, AtomicKind::Compare, Datatype::Int32, AtomicOp::Cswap, &r).unwrap(),
        Frame::atomic_rsp(9, None, 96),
        Frame::conn_req(CmHeader::new(None, 0), 10),
        Frame::conn_accept(CmHeader::new(None, 5), 0),
        Frame::conn_reject(CmHeader::new(None, 0), Some(ErrorKind::NoProtoOpt), 0),
        Frame::hello(cm),
        Frame::hello_ack(cm, Some(ErrorKind::Already)),
        // Version 2: failed answers with the target's reason.
        Frame::cts(3, 0, Some(ErrorKind::Canceled)).with_reason(1),
        Frame::ack(5, Some(ErrorKind::Access)).with_reason(40),
        Frame::read_rsp(6, Some(ErrorKind::KeyRejected), 0).with_reason(MAX_REASON_LEN),
        Frame::atomic_rsp(9, Some(ErrorKind::OpNotSupp), 0).with_reason(17),
    ];
    for &op in Op::ALL {
        assert!(frames.iter().any(|f| f.header.op == op), "{op} missing");
    }
    frames
}

// ---------------------------------------------------------------------------
// Strategies.

fn arb_status() -> impl Strategy<Value = Option<ErrorKind>> {
    prop_oneof![
        Just(None),
        prop::sample::select(ErrorKind::ALL).prop_map(Some)
    ]
}

fn arb_ack() -> impl Strategy<Value = Flags> {
    prop_oneof![
        Just(Flags::NONE),
        Just(Flags::ACK_TRANSMIT),
        Just(Flags::ACK_DELIVERY)
    ]
}

fn arb_cq() -> impl Strategy<Value = Option<u64>> {
    prop::option::of(any::<u64>())
}

fn arb_iovs(max_len: usize) -> impl Strategy<Value = Vec<RmaIov>> {
    prop::collection::vec(
        (any::<u64>(), 0..=max_len, any::<u64>()).prop_map(|(a, l, k)| iov(a, l, k)),
        1..=MAX_RMA_IOV,
    )
}

fn arb_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
    ]
}

fn arb_cm(need_addr: bool) -> impl Strategy<Value = CmHeader> {
    let addr = if need_addr {
        arb_addr().prop_map(Some).boxed()
    } else {
        prop::option::of(arb_addr()).boxed()
    };
    (1u8..=4, 0u8..=3, addr, any::<u64>()).prop_map(|(min, extra, addr, nonce)| CmHeader {
        min_version: min,
        max_version: min + extra,
        addr,
        nonce,
    })
}

fn with_extras(f: Frame, cq: Option<u64>, ack: Flags) -> Frame {
    let f = f.with_flags(ack);
    match cq {
        Some(d) => f.with_cq_data(d),
        None => f,
    }
}

/// Any valid frame under the default limits whose payload is at most
/// `max` bytes.
fn arb_frame(max: u64) -> impl Strategy<Value = Frame> {
    let limits = Limits::default();
    let id = any::<u64>();
    let data_ops = prop_oneof![
        (id, 0..=max, arb_cq(), arb_ack()).prop_map(|(id, len, cq, ack)| with_extras(
            Frame::msg(id, len),
            cq,
            ack
        )),
        (id, any::<u64>(), 0..=max, arb_cq(), arb_ack()).prop_map(|(id, tag, len, cq, ack)| {
            with_extras(Frame::tagged(id, tag, len), cq, ack)
        }),
        (
            id,
            prop::option::of(any::<u64>()),
            0..=limits.max_msg_size,
            arb_cq(),
            arb_ack()
        )
            .prop_map(|(id, tag, n, cq, ack)| with_extras(Frame::rts(id, tag, n), cq, ack)),
        (id, arb_status(), 0..=limits.max_msg_size)
            .prop_map(|(id, st, n)| { Frame::cts(id, if st.is_some() { 0 } else { n }, st) }),
        (id, 0..=limits.max_msg_size - max, 0..=max)
            .prop_map(|(id, off, len)| Frame::rndv_data(id, off, len)),
        (id, arb_status()).prop_map(|(id, st)| Frame::ack(id, st)),
    ];
    let per_iov = usize::try_from(max / MAX_RMA_IOV as u64).unwrap();
    let rma_ops = prop_oneof![
        (id, arb_iovs(per_iov), arb_cq(), arb_ack())
            .prop_map(|(id, r, cq, ack)| { with_extras(Frame::write(id, &r).unwrap(), cq, ack) }),
        (id, arb_iovs(1 << 28)).prop_map(|(id, r)| Frame::read_req(id, &r).unwrap()),
        (id, arb_status(), 0..=max).prop_map(|(id, st, len)| {
            Frame::read_rsp(id, st, if st.is_some() { 0 } else { len })
        }),
    ];
    // Element counts such that the operands fit in `max` bytes.
    let per_elem_iov = usize::try_from(
        (max / 64 / MAX_RMA_IOV as u64).clamp(1, limits.max_atomic_count / MAX_RMA_IOV as u64),
    )
    .unwrap();
    let kind_and_op = prop::sample::select(vec![
        AtomicKind::Plain,
        AtomicKind::Fetch,
        AtomicKind::Compare,
    ])
    .prop_flat_map(|kind| {
        let ops: Vec<AtomicOp> = AtomicOp::ALL
            .iter()
            .copied()
            .filter(|&op| kind.allows(op))
            .collect();
        (Just(kind), prop::sample::select(ops))
    });
    let atomic_ops = prop_oneof![
        (
            id,
            kind_and_op,
            prop::sample::select(Datatype::ALL),
            arb_iovs(per_elem_iov),
            arb_cq(),
            arb_ack(),
        )
            .prop_map(|(id, (kind, op), dt, r, cq, ack)| {
                let f = Frame::atomic(id, kind, dt, op, &r).unwrap();
                let ack = if kind == AtomicKind::Plain {
                    ack
                } else {
                    Flags::NONE
                };
                with_extras(f, cq, ack)
            }),
        (id, arb_status(), 0..=max.min(limits.max_atomic_result())).prop_map(|(id, st, len)| {
            Frame::atomic_rsp(id, st, if st.is_some() { 0 } else { len })
        }),
    ];
    let private = max.min(limits.max_private_data);
    let cm_ops = prop_oneof![
        (arb_cm(false), 0..=private).prop_map(|(cm, n)| Frame::conn_req(cm, n)),
        (arb_cm(false), 0..=private).prop_map(|(cm, n)| Frame::conn_accept(cm, n)),
        (arb_cm(false), arb_status(), 0..=private)
            .prop_map(|(cm, st, n)| Frame::conn_reject(cm, st, n)),
        arb_cm(true).prop_map(Frame::hello),
        (arb_cm(true), arb_status()).prop_map(|(cm, st)| Frame::hello_ack(cm, st)),
    ];
    let reason = 1..=max.clamp(1, MAX_REASON_LEN as u64);
    let refusals = (
        id,
        prop::sample::select(vec![Op::Cts, Op::Ack, Op::ReadRsp, Op::AtomicRsp]),
        prop::sample::select(ErrorKind::ALL),
        reason,
    )
        .prop_map(|(id, op, st, n)| {
            let f = match op {
                Op::Cts => Frame::cts(id, 0, Some(st)),
                Op::Ack => Frame::ack(id, Some(st)),
                Op::ReadRsp => Frame::read_rsp(id, Some(st), 0),
                _ => Frame::atomic_rsp(id, Some(st), 0),
            };
            f.with_reason(n as usize)
        });
    prop_oneof![
        4 => data_ops,
        4 => rma_ops,
        4 => atomic_ops,
        4 => cm_ops,
        1 => refusals
    ]
}

// ---------------------------------------------------------------------------
// Round trips.

#[test]
fn every_op_round_trips() {
    let limits = Limits::default();
    for f in one_of_each() {
        f.validate(&limits).unwrap();
        let bytes = encode(&f);
        assert_eq!(bytes.len(), f.header_len());
        assert_eq!(bytes[0], 0xFA);
        // The oldest version that defines the frame: 2 only for reasons.
        let v = if f.payload_kind() == PayloadKind::Reason {
            2
        } else {
            MIN_VERSION
        };
        assert_eq!((bytes[1], f.header.version), (v, v));
        assert_eq!(bytes[2], f.header.op as u8);
        assert_eq!(usize::from(bytes[3]), bytes.len() - HEADER_LEN);
        assert_eq!(Frame::decode(&bytes, &limits), Ok(f));
        let base: &[u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        assert_eq!(decode_header(base, &limits), Ok(f.header));
    }
}

#[test]
fn header_layout_is_the_documented_one() {
    let f = Frame::tagged(0x1122_3344_5566_7788, 0x0102_0304_0506_0708, 0x99)
        .with_cq_data(0xa1a2_a3a4_a5a6_a7a8)
        .with_flags(Flags::ACK_TRANSMIT);
    let b = encode(&f);
    let mut want = vec![0xFA, 1, 0x02, 0, 0b011, 0, 0, 0];
    want.extend(0x99u64.to_le_bytes());
    want.extend(0x1122_3344_5566_7788u64.to_le_bytes());
    want.extend(0x0102_0304_0506_0708u64.to_le_bytes());
    want.extend(0xa1a2_a3a4_a5a6_a7a8u64.to_le_bytes());
    assert_eq!(b, want);

    let w = Frame::write(1, &[iov(0x10, 4, 0x20)]).unwrap();
    let b = encode(&w);
    assert_eq!(b.len(), 72);
    assert_eq!(b[3], 32);
    assert_eq!(&b[40..48], &[1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&b[48..56], &0x10u64.to_le_bytes());
    assert_eq!(&b[56..64], &4u64.to_le_bytes());
    assert_eq!(&b[64..72], &0x20u64.to_le_bytes());

    let a = Frame::atomic(
        1,
        AtomicKind::Compare,
        Datatype::Double,
        AtomicOp::CswapGe,
        &[iov(0, 2, 3)],
    )
    .unwrap();
    let b = encode(&a);
    assert_eq!(&b[40..48], &[1, 9, 16, 0, 0, 0, 0, 0]);
    assert_eq!(a.payload_len(), 2 * 8 * 2);

    let h = Frame::hello(CmHeader::new(v4("10.0.0.2:258"), 0x0807_0605_0403_0201));
    let b = encode(&h);
    assert_eq!(b.len(), HEADER_LEN + CM_LEN);
    // Versions 1 to 2 offered.
    assert_eq!(&b[40..48], &[1, 2, 4, 0, 2, 1, 0, 0]);
    assert_eq!(&b[48..56], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&b[56..60], &[10, 0, 0, 2]);
    assert_eq!(&b[60..72], &[0; 12]);

    let e = encode(&Frame::ack(5, Some(ErrorKind::Access)));
    assert_eq!(&e[6..8], &13u16.to_le_bytes());
    assert_eq!(MAX_FRAME_HEADER_LEN, 144);
    assert_eq!(MAX_EXT_LEN, 104);
}

#[test]
fn extended_headers_round_trip_alone() {
    let limits = Limits::default();
    let r = RmaHeader::new(&[iov(1, 2, 3), iov(4, 5, 6), iov(7, 8, 9)]).unwrap();
    let mut buf = [0u8; MAX_EXT_LEN];
    let n = Ext::Rma(r).encode(&mut buf).unwrap();
    assert_eq!(RmaHeader::decode(&buf[..n], &limits), Ok(r));
    let a = AtomicHeader::new(Datatype::Int8, AtomicOp::Bxor, &[iov(1, 2, 3)]).unwrap();
    let n = Ext::Atomic(a).encode(&mut buf).unwrap();
    assert_eq!(AtomicHeader::decode(&buf[..n], &limits), Ok(a));
    let c = CmHeader::new(Some("[2001:db8::5]:9".parse().unwrap()), 3);
    let n = Ext::Cm(c).encode(&mut buf).unwrap();
    assert_eq!(CmHeader::decode(&buf[..n]), Ok(c));
    assert_eq!(
        Ext::Cm(c).encode(&mut buf[..31]).unwrap_err().kind(),
        ErrorKind::TooSmall
    );
}

#[test]
fn payload_kinds() {
    let kinds: Vec<_> = one_of_each()
        .iter()
        .map(|f| {
            (
                f.header.op,
                f.header.status,
                f.payload_len(),
                f.payload_kind(),
            )
        })
        .collect();
    for (op, status, len, kind) in kinds {
        let want = match op {
            Op::Cts | Op::Ack | Op::ReadRsp | Op::AtomicRsp if status.is_some() && len > 0 => {
                PayloadKind::Reason
            }
            Op::Msg | Op::Tagged => PayloadKind::Message,
            Op::RndvData => PayloadKind::RndvData,
            Op::Write => PayloadKind::RmaWrite,
            Op::ReadRsp => PayloadKind::ReadResponse,
            Op::Atomic | Op::FetchAtomic | Op::CompareAtomic => PayloadKind::AtomicOperands,
            Op::AtomicRsp => PayloadKind::AtomicResult,
            Op::ConnReq | Op::ConnAccept | Op::ConnReject => PayloadKind::PrivateData,
            _ => PayloadKind::None,
        };
        assert_eq!(kind, want, "{op}");
    }
}

#[test]
fn constructors_refuse_bad_local_arguments() {
    let five = [iov(0, 1, 0); 5];
    assert_eq!(Frame::write(1, &five).unwrap_err().kind(), ErrorKind::Inval);
    assert_eq!(
        Frame::read_req(1, &[]).unwrap_err().kind(),
        ErrorKind::Inval
    );
    let huge = [iov(0, usize::MAX, 0), iov(0, 1, 0)];
    assert_eq!(
        Frame::write(1, &huge).unwrap_err().kind(),
        ErrorKind::Overflow
    );
    let e = Frame::atomic(
        1,
        AtomicKind::Plain,
        Datatype::Int32,
        AtomicOp::Cswap,
        &[iov(0, 1, 0)],
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    let e = Frame::atomic(
        1,
        AtomicKind::Plain,
        Datatype::LongDoubleComplex,
        AtomicOp::Sum,
        &[iov(0, usize::MAX / 16, 0)],
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Overflow);
}

#[test]
fn validate_reports_what_the_peer_would_refuse() {
    let limits = Limits::default();
    let big = Frame::msg(1, limits.max_msg_size + 1);
    assert!(big.validate(&limits).is_err());
    let mut wrong_ext = Frame::msg(1, 1);
    wrong_ext.ext = Ext::Rts { msg_len: 1 };
    let e = wrong_ext.validate(&limits).unwrap_err();
    assert!(
        e.detail().contains("Msg frame with extended header"),
        "{e:?}"
    );
    let mut stale_len = Frame::rts(1, None, 5);
    stale_len.header.ext_len = 0;
    let e = stale_len.validate(&limits).unwrap_err();
    assert!(e.detail().contains("extended header length 0"), "{e:?}");
    // Encoding takes ext_len from the extended header.
    assert_eq!(
        Frame::decode(&encode(&stale_len), &limits),
        Ok(Frame::rts(1, None, 5))
    );
}

proptest! {
    #[test]
    fn any_valid_frame_round_trips(f in arb_frame(1 << 30)) {
        let limits = Limits::default();
        prop_assert_eq!(f.validate(&limits), Ok(()));
        let bytes = encode(&f);
        prop_assert_eq!(bytes.len(), f.header_len());
        prop_assert_eq!(Frame::decode(&bytes, &limits), Ok(f));
        let mut into = [0u8; 200];
        prop_assert_eq!(f.encode_into(&mut into), Ok(bytes.len()));
        prop_assert_eq!(&into[..bytes.len()], bytes.as_slice());
    }

    #[test]
    fn simultaneous_connect_keeps_one(
        a in (any::<u64>(), arb_addr()),
        b in (any::<u64>(), arb_addr()),
    ) {
        let ka = ConnKey::new(a.0, a.1);
        let kb = ConnKey::new(b.0, b.1);
        let at_a = resolve_simultaneous(ka, kb);
        let at_b = resolve_simultaneous(kb, ka);
        let want_b = match at_a {
            Simultaneous::KeepOutgoing => Simultaneous::KeepIncoming,
            Simultaneous::KeepIncoming => Simultaneous::KeepOutgoing,
            Simultaneous::SelfConnect => Simultaneous::SelfConnect,
        };
        prop_assert_eq!(at_b, want_b);
        prop_assert_eq!(at_a == Simultaneous::SelfConnect, a == b);
        let cm = CmHeader::new(Some(a.1), a.0);
        prop_assert_eq!(cm.conn_key(), Some(ka));
    }
}

// ---------------------------------------------------------------------------
// Malformed frames: each class refused with its own message.

fn msg_bytes() -> Vec<u8> {
    encode(&Frame::msg(1, 0))
}

#[test]
fn refuses_bad_magic() {
    let mut b = msg_bytes();
    b[0] = b'G';
    assert_refused(&b, &Limits::default(), "bad magic 0x47 in header");
}

#[test]
fn refuses_other_versions() {
    let mut b = msg_bytes();
    b[1] = 3;
    assert_refused(&b, &Limits::default(), "unsupported version 3 in header");
    b[1] = 2;
    assert_refused(
        &b,
        &Limits::default(),
        "version 2 Msg frame without a refusal reason (it is a version 1 frame)",
    );
    b[1] = 0;
    assert_refused(&b, &Limits::default(), "unsupported version 0 in header");
}

#[test]
fn refuses_unknown_ops() {
    let mut b = msg_bytes();
    for v in 0..=u8::MAX {
        if Op::from_u8(v).is_some() {
            continue;
        }
        b[2] = v;
        let e = refuse(&b, &Limits::default());
        assert_eq!(
            e.detail(),
            format!("tcp wire: unknown op 0x{v:02x} in header")
        );
    }
}

#[test]
fn refuses_reserved_flag_bits() {
    let mut b = msg_bytes();
    b[4] = 0x08;
    assert_refused(
        &b,
        &Limits::default(),
        "reserved flag bits 0x0008 set in Msg header",
    );
    b[4] = 0;
    b[5] = 0x80;
    assert_refused(&b, &Limits::default(), "reserved flag bits 0x8000");
}

#[test]
fn refuses_flags_the_op_does_not_take() {
    let mut h = Frame::read_req(1, &[iov(0, 1, 0)]).unwrap();
    h.header.flags = Flags::ACK_DELIVERY;
    assert_refused(
        &encode(&h),
        &Limits::default(),
        "flags ACK_DELIVERY (0x0004) not allowed on ReadReq",
    );
    let both = Frame::msg(1, 0).with_flags(Flags::ACK_DELIVERY | Flags::ACK_TRANSMIT);
    assert_refused(
        &encode(&both),
        &Limits::default(),
        "flags ACK_TRANSMIT and ACK_DELIVERY both set on Msg",
    );
}

#[test]
fn refuses_fields_the_op_does_not_use() {
    let mut f = Frame::msg(1, 0);
    f.header.tag = 5;
    assert_refused(&encode(&f), &Limits::default(), "tag 0x5 on untagged Msg");
    let mut f = Frame::msg(1, 0);
    f.header.data = 6;
    assert_refused(
        &encode(&f),
        &Limits::default(),
        "cq data 0x6 without REMOTE_CQ_DATA on Msg",
    );
    let mut f = Frame::msg(1, 0);
    f.header.status = Some(ErrorKind::Io);
    assert_refused(
        &encode(&f),
        &Limits::default(),
        "status FI_EIO on Msg, which carries none",
    );
}

#[test]
fn refuses_unknown_status_codes() {
    let mut b = encode(&Frame::ack(1, None));
    b[6..8].copy_from_slice(&3u16.to_le_bytes());
    assert_refused(
        &b,
        &Limits::default(),
        "unknown status code 3 in Ack header",
    );
}

#[test]
fn refuses_wrong_extended_header_lengths() {
    let mut b = msg_bytes();
    b[3] = 8;
    assert_refused(
        &b,
        &Limits::default(),
        "extended header length 8 on Msg, which has none",
    );
    let mut b = encode(&Frame::hello(CmHeader::new(v4("1.2.3.4:5"), 1)));
    b[3] = 31;
    assert_refused(
        &b,
        &Limits::default(),
        "extended header length 31 of Hello (expected 32)",
    );
    let mut b = encode(&Frame::read_req(1, &[iov(0, 1, 0)]).unwrap());
    b[3] = 33;
    assert_refused(
        &b,
        &Limits::default(),
        "extended header length 33 of ReadReq is not 8 + 24 x ranges",
    );
    b[3] = 8;
    assert_refused(
        &b,
        &Limits::default(),
        "extended header length 8 of ReadReq",
    );
}

#[test]
fn refuses_lengths_over_the_limits() {
    let limits = Limits {
        max_msg_size: 1 << 20,
        ..Limits::default()
    };
    assert_refused(
        &encode(&Frame::msg(1, (1 << 20) + 1)),
        &limits,
        "payload length 1048577 of Msg exceeds the limit 1048576 (max_msg_size)",
    );
    assert_refused(
        &encode(&Frame::conn_req(CmHeader::new(None, 0), 257)),
        &limits,
        "payload length 257 of ConnReq exceeds the limit 256 (max_private_data)",
    );
    assert_refused(
        &encode(&Frame::rts(1, None, (1 << 20) + 1)),
        &limits,
        "message length 1048577 of MsgRts exceeds the limit 1048576",
    );
    assert_refused(
        &encode(&Frame::read_req(1, &[iov(0, 1 << 20, 0), iov(0, 1, 0)]).unwrap()),
        &limits,
        "rma iov total 1048577 of ReadReq exceeds the limit 1048576",
    );
    assert_refused(
        &encode(&Frame::rndv_data(1, 1 << 20, 1)),
        &limits,
        "end offset 1048577 of RndvData exceeds the limit",
    );
    let atomic = Frame::atomic(
        1,
        AtomicKind::Plain,
        Datatype::Int8,
        AtomicOp::Sum,
        &[iov(0, 1025, 0)],
    )
    .unwrap();
    assert_refused(
        &encode(&atomic),
        &limits,
        "atomic count 1025 of Atomic exceeds the limit 1024",
    );
    let mut none = Frame::ack(1, None);
    none.header.payload_len = 1;
    assert_refused(
        &encode(&none),
        &limits,
        "payload length 1 on Ack, which carries none",
    );
    let failed = Frame::read_rsp(1, Some(ErrorKind::KeyRejected), 4);
    assert_refused(
        &encode(&failed),
        &limits,
        "payload length 4 on a failed ReadRsp",
    );
}

#[test]
fn refusal_reasons_are_version_2_bounded_and_only_on_failed_answers() {
    let limits = Limits::default();
    // A version 1 failed answer carries nothing.
    let mut v1 = Frame::ack(1, Some(ErrorKind::Access));
    v1.header.payload_len = 5;
    assert_refused(
        &encode(&v1),
        &limits,
        "payload length 5 on Ack, which carries none",
    );
    let mut v1 = Frame::atomic_rsp(1, Some(ErrorKind::Access), 0);
    v1.header.payload_len = 5;
    assert_refused(
        &encode(&v1),
        &limits,
        "payload length 5 on a failed AtomicRsp",
    );
    // Version 2: up to MAX_REASON_LEN bytes, and its payload is the reason.
    let ok = Frame::ack(1, Some(ErrorKind::Access)).with_reason(MAX_REASON_LEN);
    ok.validate(&limits).unwrap();
    assert_eq!(ok.payload_kind(), PayloadKind::Reason);
    let long = Frame::ack(1, Some(ErrorKind::Access)).with_reason(MAX_REASON_LEN + 1);
    assert_refused(
        &encode(&long),
        &limits,
        "refusal reason of 257 bytes on a failed Ack (limit 256)",
    );
    let huge = Frame::read_rsp(1, Some(ErrorKind::Access), 0).with_reason(1 << 40);
    assert_refused(
        &encode(&huge),
        &limits,
        "refusal reason of 1099511627776 bytes on a failed ReadRsp (limit 256)",
    );
    // A successful answer with version 2 is not canonical; data stays data.
    let mut good = Frame::read_rsp(1, None, 8);
    good.header.version = 2;
    assert_refused(
        &encode(&good),
        &limits,
        "version 2 ReadRsp frame without a refusal reason",
    );
    assert_eq!(
        Frame::read_rsp(1, None, 8).payload_kind(),
        PayloadKind::ReadResponse
    );
    // Only Cts, Ack, ReadRsp and AtomicRsp take reasons.
    let reject =
        Frame::conn_reject(CmHeader::new(None, 0), Some(ErrorKind::Access), 0).with_reason(4);
    assert_refused(
        &encode(&reject),
        &limits,
        "version 2 ConnReject frame without a refusal reason",
    );
    let hello_ack = Frame::hello_ack(
        CmHeader::new(v4("192.0.2.7:7471"), 1),
        Some(ErrorKind::Access),
    )
    .with_reason(4);
    assert_refused(
        &encode(&hello_ack),
        &limits,
        "version 2 HelloAck frame without a refusal reason",
    );
}

#[test]
fn a_decoder_held_to_version_1_refuses_version_2_frames() {
    let f = Frame::ack(3, Some(ErrorKind::Access)).with_reason(4);
    let mut bytes = encode(&f);
    bytes.extend_from_slice(b"why?");
    let mut d = Decoder::default();
    assert_eq!(d.version(), VERSION);
    let (n, e) = d.feed(&bytes).unwrap();
    assert_eq!((n, e), (HEADER_LEN, Some(Event::Frame(f))));
    let (_, e) = d.feed(&bytes[n..]).unwrap();
    assert_eq!(
        e,
        Some(Event::Payload {
            data: b"why?",
            remaining: 0
        })
    );
    let mut d = Decoder::default();
    d.set_version(1);
    assert_eq!(d.version(), 1);
    let e = d.feed(&bytes).unwrap_err();
    assert_eq!(
        e.detail(),
        "tcp wire: version 2 Ack frame on a connection that speaks version 1"
    );
    // Version 1 frames still pass, and out-of-range settings are clamped.
    let mut d = Decoder::default();
    d.set_version(0);
    assert_eq!(d.version(), MIN_VERSION);
    d.feed(&encode(&Frame::ack(3, Some(ErrorKind::Access))))
        .unwrap();
    d.set_version(200);
    assert_eq!(d.version(), VERSION);
}

#[test]
fn refuses_too_many_rma_iov_entries() {
    // Five ranges announced by the base header's ext_len.
    let f = Frame::write(1, &[iov(0, 1, 0); 4]).unwrap();
    let mut b = encode(&f);
    b[3] = 8 + 5 * 24;
    b[40] = 5;
    b.extend([0; 24]);
    assert_refused(
        &b,
        &Limits::default(),
        "extended header length 128 of Write holds 5 rma iov entries (limit 4)",
    );
    // A lower configured limit.
    let limits = Limits {
        max_rma_iov: 2,
        ..Limits::default()
    };
    assert_refused(
        &encode(&Frame::read_req(1, &[iov(0, 1, 0); 3]).unwrap()),
        &limits,
        "holds 3 rma iov entries (limit 2)",
    );
    // The count byte of the extended header itself.
    let mut ext = [0u8; 8 + 3 * 24];
    ext[0] = 3;
    let e = RmaHeader::decode(&ext, &limits).unwrap_err();
    assert_eq!(
        e.detail(),
        "tcp wire: too many rma iov entries in rma extended header: 3 (limit 2)"
    );
    ext[0] = 0;
    let e = RmaHeader::decode(&ext, &limits).unwrap_err();
    assert!(e.detail().contains("with no rma iov entries"), "{e:?}");
}

#[test]
fn refuses_truncated_extended_headers() {
    // The count byte says 3 ranges, ext_len holds 2.
    let f = Frame::read_req(1, &[iov(0, 1, 0), iov(0, 1, 0)]).unwrap();
    let mut b = encode(&f);
    b[40] = 3;
    assert_refused(
        &b,
        &Limits::default(),
        "truncated rma extended header: 3 rma iov entries need 80 bytes, got 56",
    );
    let a = Frame::atomic(
        1,
        AtomicKind::Plain,
        Datatype::Int8,
        AtomicOp::Sum,
        &[iov(0, 1, 0)],
    )
    .unwrap();
    let mut b = encode(&a);
    b[40] = 2;
    assert_refused(
        &b,
        &Limits::default(),
        "truncated atomic extended header: 2 rma iov entries need 56 bytes, got 32",
    );
    // A whole frame cut short.
    let b = encode(&Frame::hello(CmHeader::new(v4("1.1.1.1:1"), 1)));
    let e = Frame::decode(&b[..60], &Limits::default()).unwrap_err();
    assert_eq!(
        e.detail(),
        "tcp wire: truncated Hello extended header: 20 of 32 bytes"
    );
    let e = Frame::decode(&b[..39], &Limits::default()).unwrap_err();
    assert_eq!(e.detail(), "tcp wire: truncated header: 39 of 40 bytes");
    // Cut short in a stream: the stream ends inside the frame.
    let mut dec = Decoder::default();
    assert_eq!(dec.feed(&b[..60]), Ok((60, None)));
    assert_eq!(dec.want(), Want::Header(12));
    let e = dec.eof().unwrap_err();
    assert_eq!(
        e.detail(),
        "tcp wire: connection closed after 20 of 32 Hello extended header bytes"
    );
    let ext = &b[40..];
    let e = CmHeader::decode(&ext[..31]).unwrap_err();
    assert!(e.detail().contains("31 bytes (expected 32)"), "{e:?}");
}

#[test]
fn refuses_reserved_bytes_in_extended_headers() {
    let mut b = encode(&Frame::write(1, &[iov(0, 0, 0)]).unwrap());
    b[47] = 1;
    assert_refused(
        &b,
        &Limits::default(),
        "reserved bytes [00, 00, 00, 00, 00, 00, 01] set in rma extended header",
    );
    let a = Frame::atomic(
        1,
        AtomicKind::Plain,
        Datatype::Int8,
        AtomicOp::Sum,
        &[iov(0, 0, 0)],
    )
    .unwrap();
    let mut b = encode(&a);
    b[43] = 2;
    assert_refused(
        &b,
        &Limits::default(),
        "reserved bytes [02, 00, 00, 00, 00] set in atomic",
    );
    let cm = encode(&Frame::hello(CmHeader::new(v4("1.2.3.4:5"), 1)));
    for (at, msg) in [
        (43, "reserved bytes set in cm extended header"),
        (46, "reserved bytes set in cm extended header"),
        (60, "bytes after the IPv4 address set"),
    ] {
        let mut b = cm.clone();
        b[at] = 1;
        assert_refused(&b, &Limits::default(), msg);
    }
    let mut b = encode(&Frame::conn_req(CmHeader::new(None, 0), 0));
    b[44] = 1;
    assert_refused(
        &b,
        &Limits::default(),
        "address bytes set with address family 0",
    );
}

#[test]
fn refuses_inconsistent_extended_headers() {
    let limits = Limits::default();
    let a = encode(
        &Frame::atomic(
            1,
            AtomicKind::Plain,
            Datatype::Int8,
            AtomicOp::Sum,
            &[iov(0, 4, 0)],
        )
        .unwrap(),
    );
    let mut b = a.clone();
    b[41] = 14;
    assert_refused(
        &b,
        &limits,
        "unknown atomic datatype 14 in atomic extended header",
    );
    let mut b = a.clone();
    b[42] = 19;
    assert_refused(
        &b,
        &limits,
        "unknown atomic op 19 in atomic extended header",
    );
    let mut b = a.clone();
    b[42] = AtomicOp::Cswap as u8;
    assert_refused(&b, &limits, "atomic op FI_CSWAP not allowed on Atomic");
    let mut b = a.clone();
    b[41] = Datatype::Int16 as u8;
    assert_refused(
        &b,
        &limits,
        "Atomic payload length 4 differs from 4 x FI_INT16 operands (8 bytes)",
    );
    let mut w = Frame::write(1, &[iov(0, 4, 0)]).unwrap();
    w.header.payload_len = 5;
    assert_refused(
        &encode(&w),
        &limits,
        "Write payload length 5 differs from its rma iov total 4",
    );
    let mut b = encode(&Frame::read_req(1, &[iov(0, 1, 0), iov(0, 1, 0)]).unwrap());
    b[56..64].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_refused(&b, &limits, "rma iov lengths of ReadReq overflow");
    let mut b = encode(&Frame::rndv_data(1, 0, 1));
    b[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_refused(
        &b,
        &limits,
        "RndvData offset 18446744073709551615 + length 1 overflows",
    );
    let mut b = encode(&Frame::cts(1, 0, Some(ErrorKind::Canceled)));
    b[40] = 1;
    assert_refused(&b, &limits, "failed Cts accepts length 1");
    let mut b = encode(&Frame::hello(CmHeader::new(v4("1.2.3.4:5"), 1)));
    b[42] = 0;
    b[44..46].fill(0);
    b[56..60].fill(0);
    assert_refused(&b, &limits, "Hello without an address");
    let mut b = encode(&Frame::conn_req(CmHeader::new(None, 0), 0));
    b[42] = 5;
    assert_refused(&b, &limits, "unknown address family 5");
    b[42] = 0;
    b[40] = 3;
    b[41] = 2;
    assert_refused(&b, &limits, "bad version range 3..=2 in ConnReq");
    b[40] = 0;
    assert_refused(&b, &limits, "bad version range 0..=2 in ConnReq");
}

#[test]
fn refused_stream_stops_at_the_bad_frame() {
    let good = Frame::msg(1, 3);
    let mut bytes = stream_of(&[good]);
    let mut bad = encode(&Frame::msg(2, 0));
    bad[2] = 0x7f;
    bytes.extend(&bad);
    bytes.extend(stream_of(&[good]));
    let d = decode_all(&bytes, &Limits::default());
    assert_eq!(d.frames.len(), 1);
    assert_eq!(
        d.error.unwrap().detail(),
        "tcp wire: unknown op 0x7f in header"
    );
}

// ---------------------------------------------------------------------------
// Streaming.

#[test]
fn split_at_every_byte_boundary_gives_the_same_result() {
    let limits = Limits::default();
    let frames = one_of_each();
    let bytes = stream_of(&frames);
    let whole = decode_all(&bytes, &limits);
    assert_eq!(whole.error, None);
    assert!(whole.at_boundary);
    assert_eq!(
        whole.frames.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
        frames
    );
    for (i, (f, p)) in whole.frames.iter().enumerate() {
        assert_eq!(p, &pattern(i, f.payload_len()).collect::<Vec<_>>());
    }
    for cut in 0..=bytes.len() {
        let (a, b) = bytes.split_at(cut);
        assert_eq!(decode_chunks([a, b], &limits), whole, "cut at {cut}");
    }
    for cut in (0..=bytes.len()).step_by(7) {
        for cut2 in (cut..=bytes.len()).step_by(13) {
            let parts = [&bytes[..cut], &bytes[cut..cut2], &bytes[cut2..]];
            assert_eq!(decode_chunks(parts, &limits), whole, "cuts {cut} {cut2}");
        }
    }
    assert_eq!(decode_chunks(bytes.chunks(1), &limits), whole);
}

#[test]
fn malformed_stream_split_anywhere_fails_the_same_way() {
    let limits = Limits::default();
    let mut bytes = stream_of(&one_of_each()[..8]);
    let mut bad = encode(&Frame::write(1, &[iov(0, 4, 0)]).unwrap());
    bad[45] = 9;
    bytes.extend(bad);
    let whole = decode_all(&bytes, &limits);
    assert!(whole.error.is_some());
    for cut in 0..=bytes.len() {
        let (a, b) = bytes.split_at(cut);
        assert_eq!(decode_chunks([a, b], &limits), whole, "cut at {cut}");
    }
}

#[test]
fn payload_read_straight_into_the_user_buffer() {
    // The receive path of a large message: headers and the first bytes come
    // with a prefetch read; the rest is read by the caller into the posted
    // buffer itself.
    let payload: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let frame = Frame::tagged(3, 0x77, payload.len() as u64);
    let mut wire = encode(&frame);
    wire.extend(&payload);
    wire.extend(encode(&Frame::ack(9, None)));

    let mut dec = Decoder::default();
    let mut user = vec![0u8; payload.len()];
    let mut placed = 0usize;
    let prefetch = &wire[..1000];
    let (n, e) = dec.feed(prefetch).unwrap();
    assert_eq!(e, Some(Event::Frame(frame)));
    let (m, e) = dec.feed(&prefetch[n..]).unwrap();
    let Some(Event::Payload { data, remaining }) = e else {
        panic!("{e:?}")
    };
    user[..data.len()].copy_from_slice(data);
    placed += data.len();
    assert_eq!(remaining, (payload.len() - placed) as u64);
    let mut pos = n + m;
    // "recv" straight into user memory, in socket-sized pieces.
    while let Want::Payload(left) = dec.want() {
        let take = (left as usize).min(16384);
        user[placed..placed + take].copy_from_slice(&wire[pos..pos + take]);
        dec.consume_payload(take as u64).unwrap();
        placed += take;
        pos += take;
    }
    assert_eq!(user, payload);
    let (k, e) = dec.feed(&wire[pos..]).unwrap();
    assert_eq!(k, HEADER_LEN);
    assert_eq!(e, Some(Event::Frame(Frame::ack(9, None))));
    assert!(dec.is_at_boundary());
}

proptest! {
    #[test]
    fn random_chunking_gives_the_same_result(
        frames in prop::collection::vec(arb_frame(300), 1..8),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let limits = Limits::default();
        let bytes = stream_of(&frames);
        let whole = decode_all(&bytes, &limits);
        prop_assert_eq!(whole.error.as_ref(), None);
        prop_assert!(whole.at_boundary);
        prop_assert_eq!(whole.frames.iter().map(|(f, _)| *f).collect::<Vec<_>>(), frames);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut parts = Vec::new();
        let mut from = 0;
        for p in points {
            parts.push(&bytes[from..p]);
            from = p;
        }
        parts.push(&bytes[from..]);
        prop_assert_eq!(decode_chunks(parts, &limits), whole);
    }

    #[test]
    fn random_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        chunk in 1usize..64,
    ) {
        let d = decode_chunks(bytes.chunks(chunk), &Limits::default());
        prop_assert_eq!(decode_all(&bytes, &Limits::default()), d);
    }

    #[test]
    fn damaged_valid_streams_never_panic(
        frames in prop::collection::vec(arb_frame(64), 1..6),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        chunk in 1usize..50,
    ) {
        let mut bytes = stream_of(&frames);
        for (i, v) in flips {
            let at = i.index(bytes.len());
            bytes[at] = v;
        }
        let limits = Limits::default();
        let d = decode_chunks(bytes.chunks(chunk), &limits);
        prop_assert_eq!(decode_all(&bytes, &limits), d);
    }

    #[test]
    fn random_headers_are_checked_or_refused(
        mut b in any::<[u8; HEADER_LEN]>(),
        op in prop::sample::select(Op::ALL),
        ext_len in prop_oneof![Just(0u8), Just(8), Just(32), Just(56), any::<u8>()],
        small in any::<bool>(),
        version in MIN_VERSION..=VERSION,
    ) {
        // Past the magic, version and op, so the deeper checks are reached.
        b[0] = 0xFA;
        b[1] = version;
        b[2] = op as u8;
        b[3] = ext_len;
        let limits = if small {
            Limits { max_msg_size: 10, max_private_data: 1, max_rma_iov: 1, max_atomic_count: 1 }
        } else {
            Limits::default()
        };
        match decode_header(&b, &limits) {
            Ok(h) => {
                prop_assert_eq!(h.to_bytes(), b);
                prop_assert!(h.payload_len <= limits.max_msg_size.max(limits.max_atomic_payload()));
            }
            Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Io),
        }
        prop_assert_eq!(decode_header_fast(&b, &limits), decode_header(&b, &limits));
    }

    #[test]
    fn the_message_shortcut_decides_as_the_full_path(
        tagged in any::<bool>(),
        version in prop_oneof![Just(1u8), Just(2), any::<u8>()],
        ext_len in prop_oneof![Just(0u8), any::<u8>()],
        flags in prop_oneof![0u16..8, any::<u16>()],
        status in prop_oneof![Just(0u16), any::<u16>()],
        payload_len in prop_oneof![0u64..=20, any::<u64>()],
        id in any::<u64>(),
        tag in prop_oneof![Just(0u64), any::<u64>()],
        data in prop_oneof![Just(0u64), any::<u64>()],
        magic in prop_oneof![Just(0xFAu8), any::<u8>()],
        small in any::<bool>(),
    ) {
        // Headers close to a message's (where the shortcut decides), each
        // field sometimes off.
        let mut b = [0u8; HEADER_LEN];
        b[0] = magic;
        b[1] = version;
        b[2] = if tagged { 0x02 } else { 0x01 };
        b[3] = ext_len;
        b[4..6].copy_from_slice(&flags.to_le_bytes());
        b[6..8].copy_from_slice(&status.to_le_bytes());
        b[8..16].copy_from_slice(&payload_len.to_le_bytes());
        b[16..24].copy_from_slice(&id.to_le_bytes());
        b[24..32].copy_from_slice(&tag.to_le_bytes());
        b[32..40].copy_from_slice(&data.to_le_bytes());
        let limits = Limits {
            max_msg_size: if small { 10 } else { 1 << 30 },
            ..Limits::default()
        };
        prop_assert_eq!(decode_header_fast(&b, &limits), decode_header(&b, &limits));
    }
}

// ---------------------------------------------------------------------------
// Allocation.

#[test]
fn a_4_gib_claim_is_refused_without_allocating_it() {
    for claim in [1u64 << 32, u64::MAX, (1 << 32) - 1] {
        let mut f = Frame::msg(1, 0);
        f.header.payload_len = claim;
        let bytes = encode(&f);
        let (r, _, largest) = measure(|| {
            let mut dec = Decoder::default();
            dec.feed(&bytes)
        });
        let e = r.unwrap_err();
        assert!(e.detail().contains("exceeds the limit 1073741824"), "{e:?}");
        assert!(largest < 1024, "largest allocation {largest} bytes");
    }
    // The same claims where no payload is allowed at all.
    let mut f = Frame::hello(CmHeader::new(v4("1.2.3.4:5"), 1));
    f.header.payload_len = 1 << 32;
    let bytes = encode(&f);
    let (r, _, largest) = measure(|| Decoder::default().feed(&bytes));
    assert!(r.unwrap_err().detail().contains("which carries none"));
    assert!(largest < 1024);
    // And a claim within an (unusually large) limit is just a count.
    let limits = Limits {
        max_msg_size: u64::MAX,
        ..Limits::default()
    };
    let mut f = Frame::msg(1, 0);
    f.header.payload_len = 1 << 32;
    let bytes = encode(&f);
    let (r, allocs, _) = measure(|| {
        let mut dec = Decoder::new(limits);
        let r = dec.feed(&bytes).map(|(n, _)| n);
        (r, dec.want())
    });
    assert_eq!(r, (Ok(HEADER_LEN), Want::Payload(1 << 32)));
    assert_eq!(allocs, 0);
}

#[test]
fn decoding_and_encoding_valid_frames_does_not_allocate() {
    let frames = one_of_each();
    let bytes = stream_of(&frames);
    let limits = Limits::default();
    let ((), allocs, _) = measure(|| {
        let mut dec = Decoder::new(limits);
        let mut count = 0;
        for chunk in bytes.chunks(5) {
            let mut input = chunk;
            while !input.is_empty() {
                let (n, e) = dec.feed(input).unwrap();
                if let Some(Event::Frame(_)) = e {
                    count += 1;
                }
                input = &input[n..];
            }
        }
        assert_eq!(count, frames.len());
        let mut out = [0u8; MAX_FRAME_HEADER_LEN];
        for f in &frames {
            let n = f.encode(&mut out);
            assert!(n >= HEADER_LEN);
            f.validate(&limits).unwrap();
        }
        let mut h = [0u8; HEADER_LEN];
        Header::new(Op::Msg).encode(&mut h);
    });
    assert_eq!(allocs, 0);
}

// ---------------------------------------------------------------------------
// Seeds for the fuzz target (`fuzz/corpus/tcp_wire`): run with
// `TCP_WIRE_CORPUS=fuzz/corpus/tcp_wire cargo test -p prov-tcp --test wire -- --ignored`.

#[test]
#[ignore = "writes the fuzz corpus when TCP_WIRE_CORPUS names a directory"]
fn write_fuzz_corpus() {
    let Ok(dir) = std::env::var("TCP_WIRE_CORPUS") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    std::fs::create_dir_all(dir).unwrap();
    let frames = one_of_each();
    // The fuzz input: one byte choosing chunk sizes and limits, then the stream.
    for (i, f) in frames.iter().enumerate() {
        let mut data = vec![i as u8];
        data.extend(stream_of(std::slice::from_ref(f)));
        std::fs::write(dir.join(format!("{:02}-{}", i, f.header.op)), data).unwrap();
    }
    let mut all = vec![0x03];
    all.extend(stream_of(&frames));
    std::fs::write(dir.join("all-ops"), all).unwrap();
}
