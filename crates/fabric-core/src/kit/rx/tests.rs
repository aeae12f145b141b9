//! The engine against a stand-in transport: remote messages are numbers,
//! acks are numbers, peers are bytes; completions go to a real CQ core.

use std::sync::Arc;

use super::*;
use crate::kit::cntr::CntrCore;
use crate::kit::cq::CqCore;
use crate::objects::{CqErrEntry, IoVec};

#[derive(Debug)]
struct Wire;

impl Transport for Wire {
    type Remote = u32;
    type Ack = u32;
    type Peer = u8;
}

type Engine = RxEngine<Wire, 4>;

const A: u8 = 1;
const B: u8 = 2;

fn binds() -> Binds {
    Binds {
        rx_cq: Some(Arc::new(CqCore::new(256).unwrap())),
        cntr_recv: Some(Arc::new(CntrCore::new().unwrap())),
        ..Default::default()
    }
}

/// Every successful completion waiting, with its source.
fn done(b: &Binds) -> Vec<(CqEntry, FiAddr)> {
    let cq = b.rx_cq.as_ref().unwrap();
    let mut out = vec![CqEntry::default(); 64];
    let mut src = vec![FiAddr::NOTAVAIL; 64];
    match cq.read(&mut out, Some(&mut src)) {
        Ok(n) => out.into_iter().zip(src).take(n).collect(),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Again, "an error completion is waiting");
            Vec::new()
        }
    }
}

/// The next error completion.
fn failed(b: &Binds) -> CqErrEntry {
    b.rx_cq
        .as_ref()
        .unwrap()
        .read_err()
        .expect("an error completion")
}

fn no_errors(b: &Binds) {
    assert!(!b.rx_cq.as_ref().unwrap().has_err());
}

fn iov(buf: &mut [u8]) -> [IoVec; 1] {
    [IoVec {
        addr: buf.as_mut_ptr(),
        len: buf.len(),
    }]
}

fn recv<'a>(iov: &'a [IoVec], context: u64, tag: u64, ignore: u64, addr: FiAddr) -> Msg<'a> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore,
        context,
        data: 0,
    }
}

fn actions(e: &mut Engine) -> Vec<Action<Wire>> {
    std::iter::from_fn(|| e.next_action()).collect()
}

fn bytes(e: &mut Engine, data: &[u8], ack: Option<u32>) -> Held<Wire> {
    let mut v = e.take_buf(data.len());
    v.extend_from_slice(data);
    Held::Bytes { bytes: v, ack }
}

fn meta(tagged: bool, tag: u64, len: u64, src: u64) -> Meta {
    Meta {
        tagged,
        tag,
        len,
        data: None,
        src: FiAddr(src),
    }
}

#[test]
fn a_posted_receive_takes_an_arriving_message() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    let mut buf = [0u8; 16];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 7, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    assert_eq!(e.posted(false), 1);
    let id = e.arrive(false, 0, FiAddr(3), 5).expect("matched");
    // SAFETY: `buf` is live and reached only through the receive.
    unsafe { e.recv(id).unwrap().buf.write_at(0, b"hello") };
    e.complete(&b, id, meta(false, 0, 5, 3));
    let got = done(&b);
    assert_eq!(got.len(), 1);
    let (c, src) = got[0];
    assert_eq!((c.context, c.len, src), (7, 5, FiAddr(3)));
    assert_eq!(c.flags, CompletionFlags::MSG | CompletionFlags::RECV);
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(b.cntr_recv.as_ref().unwrap().read(), 1);
    assert_eq!(e.live(), 0);
}

#[test]
fn a_kept_message_is_copied_into_a_later_receive_and_acknowledged() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    assert!(e.arrive(true, 9, FiAddr(1), 3).is_none());
    assert!(e.admit(A, 3));
    let held = bytes(&mut e, b"abc", Some(44));
    e.keep(
        true,
        9,
        FiAddr(1),
        Entry {
            len: 3,
            data: Some(5),
            peer: A,
            held,
        },
    );
    assert!(e.unexpected_bytes() > 3);
    let mut buf = [0u8; 8];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 1, 9, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        true,
    )
    .unwrap();
    assert_eq!(&buf[..3], b"abc");
    let got = done(&b);
    assert_eq!(got.len(), 1);
    let c = got[0].0;
    assert_eq!((c.context, c.len, c.tag, c.data), (1, 3, 9, 5));
    assert!(
        c.flags
            .contains(CompletionFlags::TAGGED | CompletionFlags::REMOTE_CQ_DATA)
    );
    assert!(matches!(actions(&mut e)[..], [Action::Ack(44)]));
    assert_eq!(e.unexpected_bytes(), 0);
    assert_eq!(e.posted(true), 0);
}

#[test]
fn a_longer_message_completes_truncated() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    let mut buf = [0u8; 4];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 2, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    let id = e.arrive(false, 0, FiAddr(0), 10).unwrap();
    e.complete(&b, id, meta(false, 0, 10, 0));
    let err = failed(&b);
    assert_eq!(err.err, ErrorKind::Trunc);
    assert_eq!((err.entry.context, err.entry.len, err.olen), (2, 4, 6));
    assert_eq!(b.cntr_recv.as_ref().unwrap().read_err(), 1);
}

#[test]
fn tags_ignore_bits_directed_receive_and_the_oldest_wins() {
    let b = binds();
    let mut e = Engine::new(true, Budget::DEFAULT);
    let mut b1 = [0u8; 4];
    let mut b2 = [0u8; 4];
    let mut b3 = [0u8; 4];
    let (v1, v2, v3) = (iov(&mut b1), iov(&mut b2), iov(&mut b3));
    // From source 5 only; any source with tag 0x10 (low nibble ignored);
    // any source with tag 0x10 again.
    e.post(
        &b,
        &recv(&v1, 1, 0x10, 0, FiAddr(5)),
        OpFlags::empty(),
        true,
    )
    .unwrap();
    e.post(
        &b,
        &recv(&v2, 2, 0x10, 0xf, FiAddr::UNSPEC),
        OpFlags::empty(),
        true,
    )
    .unwrap();
    e.post(
        &b,
        &recv(&v3, 3, 0x10, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        true,
    )
    .unwrap();
    let ctx = |e: &Engine, id| e.recv(id).unwrap().context;
    // From 6: not the directed one; the oldest of the others.
    let id = e.arrive(true, 0x13, FiAddr(6), 0).unwrap();
    assert_eq!(ctx(&e, id), 2);
    let id2 = e.arrive(true, 0x10, FiAddr(5), 0).unwrap();
    assert_eq!(ctx(&e, id2), 1);
    assert!(e.arrive(true, 0x13, FiAddr(5), 0).is_none());
    let id3 = e.arrive(true, 0x10, FiAddr(6), 0).unwrap();
    assert_eq!(ctx(&e, id3), 3);
    // Untagged messages do not meet tagged receives.
    assert!(e.arrive(false, 0, FiAddr(5), 0).is_none());
}

#[test]
fn a_remote_message_is_fetched_into_the_receive_that_takes_it() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    e.keep(
        false,
        0,
        FiAddr(4),
        Entry {
            len: 1 << 20,
            data: None,
            peer: B,
            held: Held::Remote(77),
        },
    );
    let mut buf = [0u8; 64];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 5, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    assert!(done(&b).is_empty(), "a fetch completes later");
    let acts = actions(&mut e);
    let [
        Action::Fetch {
            recv: id,
            meta: m,
            remote: 77,
        },
    ] = acts[..]
    else {
        panic!("expected one fetch, got {acts:?}");
    };
    assert_eq!((m.len, m.src), (1 << 20, FiAddr(4)));
    assert_eq!(e.recv(id).unwrap().context, 5);
    e.fail(&b, id, false, &Error::new(ErrorKind::ConnReset, "gone"));
    let err = failed(&b);
    assert_eq!((err.err, err.entry.context), (ErrorKind::ConnReset, 5));
    assert_eq!(e.live(), 0);
}

#[test]
fn peek_claim_and_discard() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    let mut buf = [0u8; 8];
    let v = iov(&mut buf);
    let any = FiAddr::UNSPEC;
    // Nothing to see: a peek completes with NoMsg, a claim is refused.
    e.post(&b, &recv(&v, 1, 3, 0, any), OpFlags::PEEK, true)
        .unwrap();
    assert_eq!(failed(&b).err, ErrorKind::NoMsg);
    let r = e.post(&b, &recv(&v, 1, 3, 0, any), OpFlags::CLAIM, true);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::NoMsg);
    for (tag, data, ack) in [(3, b"one", 1), (3, b"two", 2), (4, b"six", 3)] {
        let held = bytes(&mut e, data, Some(ack));
        e.keep(
            true,
            tag,
            FiAddr(8),
            Entry {
                len: 3,
                data: None,
                peer: A,
                held,
            },
        );
    }
    // A peek sees the oldest and leaves it.
    e.post(&b, &recv(&v, 2, 3, 0, any), OpFlags::PEEK, true)
        .unwrap();
    let got = done(&b);
    assert_eq!(
        (got[0].0.context, got[0].0.len, got[0].1),
        (2, 3, FiAddr(8))
    );
    assert_eq!(e.unexpected(true), 3);
    // Peek and claim it, then take it by context.
    e.post(
        &b,
        &recv(&v, 3, 3, 0, any),
        OpFlags::PEEK | OpFlags::CLAIM,
        true,
    )
    .unwrap();
    assert_eq!(done(&b).len(), 1);
    // A plain receive now skips the claimed message.
    let mut other = [0u8; 8];
    let vo = iov(&mut other);
    e.post(&b, &recv(&vo, 9, 3, 0, any), OpFlags::empty(), true)
        .unwrap();
    assert_eq!(&other[..3], b"two");
    assert_eq!(done(&b)[0].0.context, 9);
    e.post(&b, &recv(&v, 3, 0, 0, any), OpFlags::CLAIM, true)
        .unwrap();
    assert_eq!(&buf[..3], b"one");
    let got = done(&b);
    assert_eq!((got[0].0.context, got[0].0.len), (3, 3));
    // Peek and discard: reported, dropped, its sender acknowledged.
    e.post(
        &b,
        &recv(&v, 4, 4, 0, any),
        OpFlags::PEEK | OpFlags::DISCARD,
        true,
    )
    .unwrap();
    let got = done(&b);
    assert_eq!((got[0].0.context, got[0].0.len, got[0].0.tag), (4, 3, 4));
    assert_eq!(e.unexpected(true), 0);
    let acts = actions(&mut e);
    assert!(
        matches!(acts[..], [Action::Ack(2), Action::Ack(1), Action::Ack(3)]),
        "{acts:?}"
    );
    assert_eq!(e.unexpected_bytes(), 0);
    no_errors(&b);
}

#[test]
fn claim_and_discard_releases_a_remote_message() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    e.keep(
        true,
        1,
        FiAddr(2),
        Entry {
            len: 100_000,
            data: Some(6),
            peer: B,
            held: Held::Remote(31),
        },
    );
    let v: [IoVec; 0] = [];
    let any = FiAddr::UNSPEC;
    e.post(
        &b,
        &recv(&v, 8, 1, 0, any),
        OpFlags::PEEK | OpFlags::CLAIM,
        true,
    )
    .unwrap();
    let got = done(&b);
    assert_eq!((got[0].0.len, got[0].0.data), (100_000, 6));
    e.post(
        &b,
        &recv(&v, 8, 1, 0, any),
        OpFlags::CLAIM | OpFlags::DISCARD,
        true,
    )
    .unwrap();
    let got = done(&b);
    assert_eq!(
        (got[0].0.context, got[0].0.len, got[0].1),
        (8, 0, FiAddr(2))
    );
    assert!(matches!(actions(&mut e)[..], [Action::Release(31)]));
}

#[test]
fn a_multi_receive_buffer_is_carved_and_released_once() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    e.set_min_multi_recv(64);
    let mut buf = vec![0u8; 256];
    let base = buf.as_ptr() as u64;
    let v = iov(&mut buf);
    // Two messages kept before the buffer is posted, one after.
    for (i, fill) in [b'a', b'b'].into_iter().enumerate() {
        let held = bytes(&mut e, &[fill; 80], None);
        e.keep(
            false,
            0,
            FiAddr(i as u64),
            Entry {
                len: 80,
                data: None,
                peer: A,
                held,
            },
        );
    }
    e.post(
        &b,
        &recv(&v, 11, 0, 0, FiAddr::UNSPEC),
        OpFlags::MULTI_RECV,
        false,
    )
    .unwrap();
    let got = done(&b);
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].0.buf, got[1].0.buf), (base, base + 80));
    assert!(got.iter().all(|(c, _)| c.context == 11 && c.len == 80));
    assert!(!got[1].0.flags.contains(CompletionFlags::MULTI_RECV));
    // 96 bytes left: one more message of 80 takes it; 16 < 64 left, so
    // the buffer is released with that message's completion.
    let id = e.arrive(false, 0, FiAddr(2), 80).unwrap();
    // SAFETY: the part of `buf` the engine carved for this message.
    unsafe { e.recv(id).unwrap().buf.write_at(0, &[b'c'; 80]) };
    assert!(e.arrive(false, 0, FiAddr(2), 1).is_none(), "released");
    e.complete(&b, id, meta(false, 0, 80, 2));
    let got = done(&b);
    assert_eq!(got[0].0.buf, base + 160);
    assert!(got[0].0.flags.contains(CompletionFlags::MULTI_RECV));
    assert_eq!(&buf[..240], [[b'a'; 80], [b'b'; 80], [b'c'; 80]].concat());
    assert_eq!(e.live(), 0);
}

#[test]
fn cancel_ends_a_posted_receive_and_releases_a_multi_receive_buffer() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    let mut buf = [0u8; 512];
    let v = iov(&mut buf);
    assert_eq!(e.cancel(&b, 1).unwrap_err().kind(), ErrorKind::NoEnt);
    e.post(
        &b,
        &recv(&v, 1, 5, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        true,
    )
    .unwrap();
    e.cancel(&b, 1).unwrap();
    let err = failed(&b);
    assert_eq!((err.err, err.entry.context), (ErrorKind::Canceled, 1));
    assert!(err.entry.flags.contains(CompletionFlags::TAGGED));
    // A multi-receive buffer with a part in flight: the cancel releases
    // it; the FI_MULTI_RECV flag comes with the last part's completion.
    e.post(
        &b,
        &recv(&v, 2, 0, 0, FiAddr::UNSPEC),
        OpFlags::MULTI_RECV,
        false,
    )
    .unwrap();
    let id = e.arrive(false, 0, FiAddr(0), 10).unwrap();
    e.cancel(&b, 2).unwrap();
    let err = failed(&b);
    assert_eq!(err.err, ErrorKind::Canceled);
    assert!(!err.entry.flags.contains(CompletionFlags::MULTI_RECV));
    e.complete(&b, id, meta(false, 0, 10, 0));
    let got = done(&b);
    assert!(got[0].0.flags.contains(CompletionFlags::MULTI_RECV));
    assert_eq!(e.live(), 0);
}

#[test]
fn drain_fails_every_posted_receive() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    let mut buf = [0u8; 8];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 1, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    e.post(
        &b,
        &recv(&v, 2, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        true,
    )
    .unwrap();
    e.drain(&b, &Error::new(ErrorKind::Shutdown, "closed"));
    let mut ctx = [failed(&b), failed(&b)].map(|x| {
        assert_eq!(x.err, ErrorKind::Shutdown);
        x.entry.context
    });
    ctx.sort_unstable();
    assert_eq!(ctx, [1, 2]);
    assert_eq!((e.posted(false), e.posted(true), e.live()), (0, 0, 0));
}

#[test]
fn the_budget_pauses_senders_and_resumes_them() {
    let b = binds();
    let budget = Budget {
        total: 1000,
        hard: 2000,
        reserve: 300,
        entry_cost: 0,
        spare_max: 4096,
    };
    let mut e = Engine::new(false, budget);
    let keep = |e: &mut Engine, peer: u8, n: usize| {
        assert!(e.admit(peer, n));
        let mut v = Vec::with_capacity(n);
        v.resize(n, peer);
        e.keep(
            false,
            0,
            FiAddr(u64::from(peer)),
            Entry {
                len: n as u64,
                data: None,
                peer,
                held: Held::Bytes {
                    bytes: v,
                    ack: None,
                },
            },
        );
    };
    // A keeps 900, B 200: past the total, but B holds less than its
    // reserve; A's next message pauses A.
    keep(&mut e, A, 900);
    keep(&mut e, B, 200);
    assert!(matches!(actions(&mut e)[..], []));
    keep(&mut e, A, 50);
    assert!(matches!(actions(&mut e)[..], [Action::Pause(A)]));
    keep(&mut e, B, 50);
    assert!(matches!(actions(&mut e)[..], []), "B holds 250 <= 300");
    // 1200 kept: 900 more would pass the hard limit: refused, B paused.
    assert!(!e.admit(B, 900));
    assert!(matches!(actions(&mut e)[..], [Action::Pause(B)]));
    // A receive takes A's 900: 300 left <= half the total, both resume.
    let mut buf = vec![0u8; 1000];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 1, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    let acts = actions(&mut e);
    assert_eq!(acts.len(), 2, "{acts:?}");
    assert!(acts.iter().all(|a| matches!(a, Action::Resume(_))));
    assert_eq!(e.unexpected_bytes(), 300);
}

#[test]
fn remote_cq_data_is_reported_or_takes_a_receive() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    e.remote_cq_data(&b, 0xaa, FiAddr(3), A, false);
    let got = done(&b);
    assert_eq!((got[0].0.data, got[0].0.flags), (0xaa, RMA_DATA));
    // FI_RX_CQ_DATA: kept until a receive comes, which it consumes.
    e.remote_cq_data(&b, 0xbb, FiAddr(3), A, true);
    assert!(done(&b).is_empty());
    let mut buf = [0u8; 8];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 4, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    let got = done(&b);
    assert_eq!((got[0].0.context, got[0].0.data), (4, 0xbb));
    assert_eq!(e.unexpected_bytes(), 0);
    // Into a multi-receive buffer: a part of no bytes; the buffer is
    // released once it is cancelled with nothing in flight.
    let mut big = [0u8; 256];
    let vb = iov(&mut big);
    e.post(
        &b,
        &recv(&vb, 5, 0, 0, FiAddr::UNSPEC),
        OpFlags::MULTI_RECV,
        false,
    )
    .unwrap();
    e.remote_cq_data(&b, 0xcc, FiAddr(3), A, true);
    assert_eq!(done(&b)[0].0.context, 5);
    e.cancel(&b, 5).unwrap();
    assert!(failed(&b).entry.flags.contains(CompletionFlags::MULTI_RECV));
    assert_eq!(e.live(), 0);
}

#[test]
fn a_sender_that_goes_away_leaves_its_buffered_messages() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    let held = bytes(&mut e, b"kept", None);
    for (peer, held) in [(A, held), (A, Held::Remote(1)), (B, Held::Remote(2))] {
        e.keep(
            false,
            0,
            FiAddr(u64::from(peer)),
            Entry {
                len: 4,
                data: None,
                peer,
                held,
            },
        );
    }
    e.peer_gone(A);
    assert_eq!(e.unexpected(false), 2);
    let mut buf = [0u8; 8];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 1, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    assert_eq!(&buf[..4], b"kept");
    e.post(
        &b,
        &recv(&v, 2, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    assert!(matches!(
        actions(&mut e)[..],
        [Action::Fetch { remote: 2, .. }]
    ));
}

#[test]
fn a_sender_that_goes_away_leaves_what_the_transport_holds() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    for (peer, remote) in [(A, 1), (A, 2), (A, 3), (B, 4)] {
        e.keep(
            false,
            0,
            FiAddr(u64::from(peer)),
            Entry {
                len: 4,
                data: None,
                peer,
                held: Held::Remote(remote),
            },
        );
    }
    let mut dropped = Vec::new();
    // Odd numbers hold their data here.
    e.peer_gone_with(A, |r| r % 2 == 1, &mut dropped);
    assert_eq!(dropped, [2]);
    assert_eq!(e.unexpected(false), 3);
    let mut buf = [0u8; 8];
    let v = iov(&mut buf);
    for ctx in [1, 2, 3] {
        e.post(
            &b,
            &recv(&v, ctx, 0, 0, FiAddr::UNSPEC),
            OpFlags::empty(),
            false,
        )
        .unwrap();
    }
    let fetched: Vec<u32> = actions(&mut e)
        .into_iter()
        .filter_map(|a| match a {
            Action::Fetch { remote, .. } => Some(remote),
            _ => None,
        })
        .collect();
    assert_eq!(fetched, [1, 3, 4]);
}

#[test]
fn selective_completion_reports_only_what_asks() {
    let mut b = binds();
    b.rx_selective = true;
    let mut e = Engine::new(false, Budget::DEFAULT);
    let mut buf = [0u8; 8];
    let v = iov(&mut buf);
    e.post(
        &b,
        &recv(&v, 1, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    e.post(
        &b,
        &recv(&v, 2, 0, 0, FiAddr::UNSPEC),
        OpFlags::COMPLETION,
        false,
    )
    .unwrap();
    for _ in 0..2 {
        let id = e.arrive(false, 0, FiAddr(0), 1).unwrap();
        e.complete(&b, id, meta(false, 0, 1, 0));
    }
    let got = done(&b);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.context, 2);
    assert_eq!(b.cntr_recv.as_ref().unwrap().read(), 2, "both counted");
}

#[test]
fn bad_receives_are_refused() {
    let b = binds();
    let mut e = Engine::new(false, Budget::DEFAULT);
    let mut buf = [0u8; 8];
    let v = iov(&mut buf);
    let r = e.post(
        &b,
        &recv(&v, 1, 0, 0, FiAddr::UNSPEC),
        OpFlags::MULTI_RECV,
        true,
    );
    assert_eq!(r.unwrap_err().kind(), ErrorKind::BadFlags);
    let five = [v[0]; 5];
    let r = e.post(
        &b,
        &recv(&five, 1, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    );
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval);
    assert_eq!(e.live(), 0);
}

#[test]
fn remote_cq_data_that_fills_the_cq_pauses_its_sender_until_read() {
    let b = Binds {
        rx_cq: Some(Arc::new(CqCore::new(4).unwrap())),
        ..Default::default()
    };
    let mut e = Engine::new(false, Budget::DEFAULT);
    for i in 0..4 {
        e.remote_cq_data(&b, i, FiAddr(1), A, false);
    }
    assert!(matches!(actions(&mut e)[..], [Action::Pause(A)]));
    assert!(e.waits_for_cq());
    // Whatever still arrives is kept (nothing accepted is lost), with no
    // second pause.
    e.remote_cq_data(&b, 4, FiAddr(1), A, false);
    assert!(actions(&mut e).is_empty());
    e.cq_read(&b);
    assert!(actions(&mut e).is_empty(), "still full");
    let cq = b.rx_cq.as_ref().unwrap();
    let mut out = [CqEntry::default(); 4];
    assert_eq!(cq.read(&mut out, None).unwrap(), 4);
    e.cq_read(&b);
    assert!(matches!(actions(&mut e)[..], [Action::Resume(A)]));
    assert!(!e.waits_for_cq());
    assert_eq!(cq.read(&mut out, None).unwrap(), 1);
    assert_eq!(out[0].data, 4);
}

/// A shared receive context's routing: peer A's messages report to the
/// first binds, B's to the second, what concerns no message to the first.
struct Two<'a>(&'a Binds, &'a Binds);

impl Route<u8> for Two<'_> {
    type To = Binds;

    fn to(&self, peer: Option<&u8>) -> &Binds {
        match peer {
            Some(&B) => self.1,
            _ => self.0,
        }
    }
}

#[test]
fn a_router_sends_each_completion_to_the_endpoint_of_its_sender() {
    let (ba, bb) = (binds(), binds());
    let two = Two(&ba, &bb);
    let mut e = Engine::new(false, Budget::DEFAULT);
    // Kept messages from B then A, then two receives: each completes
    // where its sender's endpoint reports, in the order kept.
    for (peer, data) in [(B, b"from b"), (A, b"from a")] {
        let held = bytes(&mut e, data, None);
        let entry = Entry {
            len: 6,
            data: None,
            peer,
            held,
        };
        e.keep(false, 0, FiAddr(u64::from(peer)), entry);
    }
    let mut r1 = [0u8; 8];
    let mut r2 = [0u8; 8];
    let (v1, v2) = (iov(&mut r1), iov(&mut r2));
    e.post(
        &two,
        &recv(&v1, 1, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    e.post(
        &two,
        &recv(&v2, 2, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    let (a, b) = (done(&ba), done(&bb));
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].0.context, b[0].1), (1, FiAddr(u64::from(B))));
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].0.context, a[0].1), (2, FiAddr(u64::from(A))));
    assert_eq!((&r1[..6], &r2[..6]), (&b"from b"[..], &b"from a"[..]));
    // A cancel concerns no message: the first.
    let mut r3 = [0u8; 8];
    let v3 = iov(&mut r3);
    e.post(
        &two,
        &recv(&v3, 3, 0, 0, FiAddr::UNSPEC),
        OpFlags::empty(),
        false,
    )
    .unwrap();
    e.cancel(&two, 3).unwrap();
    assert_eq!(failed(&ba).entry.context, 3);
    no_errors(&bb);
    // Work put back comes out again.
    e.requeue(Action::Resume(B));
    assert!(matches!(actions(&mut e)[..], [Action::Resume(B)]));
}
