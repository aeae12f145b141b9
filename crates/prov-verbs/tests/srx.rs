//! Shared receive contexts of RDM endpoints on a real RDMA device, where
//! verbs differs from the other providers (the semantics suite checks the
//! rest): messages the unexpected budget refused stay in the receive
//! buffers of the endpoint they arrived at, and a receive posted on the
//! context later has that endpoint copy them out; MSG and DGRAM endpoints
//! take no shared context. Skips without a device (see `common`).

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::Provider;
use fabric_core::objects::{AvAttr, Bind, CompletionQueue, CqEntry, Endpoint, FiAddr, IoVec};
use fabric_core::*;
use prov_verbs::VerbsProvider;

fn shared_hints() -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::SOURCE;
    h.addr_format = AddrFormat::SockaddrIn;
    h.ep_attr.rx_ctx_cnt = SHARED_CONTEXT;
    h
}

struct Ep {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
}

/// Message `k` of sender `s`: every byte depends on both and its offset.
fn pattern(s: u64, k: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(29).wrapping_add(k * 97 + s * 13) as u8)
        .collect()
}

fn spin(eps: &[Ep]) {
    for e in eps {
        let _ = e.cq.read(&mut []);
    }
}

/// Two senders (0 and 3) each send more eager messages to their own bound
/// endpoint (1 and 2) than a small unexpected budget admits, before any
/// receive is posted: the messages over the budget stay in the receive
/// buffers they arrived in. Receives posted on the context then take them
/// all, each whole, in its sender's order, on its endpoint's CQ.
#[test]
fn srx_takes_messages_held_in_receive_buffers() {
    let Some(list) = entries(EpType::Rdm, shared_hints()) else {
        return;
    };
    let info = list.into_iter().next().unwrap();
    assert_eq!(info.ep_attr.rx_ctx_cnt, SHARED_CONTEXT);
    assert!(info.domain_attr.max_ep_srx_ctx > 0);
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let mut rx_attr = info.rx_attr.clone();
    rx_attr.total_buffered_recv = 4096;
    let srx = domain.srx_context(&rx_attr).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let mut plain = info.clone();
    plain.ep_attr.rx_ctx_cnt = 1;
    let eps: Vec<Ep> = (0..4)
        .map(|i| {
            let bound = i == 1 || i == 2;
            let cq = domain.cq(&cq_attr()).unwrap();
            let ep = domain.endpoint(if bound { &info } else { &plain }).unwrap();
            ep.bind(Bind::Cq {
                cq: cq.as_ref(),
                transmit: true,
                recv: true,
                selective: false,
            })
            .unwrap();
            ep.bind(Bind::Av(av.as_ref())).unwrap();
            if bound {
                ep.bind_srx(srx.as_ref()).unwrap();
            }
            ep.enable().unwrap();
            Ep { ep, cq }
        })
        .collect();
    assert_eq!(srx.bound_endpoints(), 2);
    let names: Vec<_> = eps.iter().map(|e| e.ep.getname().unwrap()).collect();
    let mut addr = vec![FiAddr(0); 4];
    assert_eq!(av.insert(&names, &mut addr).unwrap(), 4);

    const N: u64 = 20;
    const LEN: usize = 2000;
    let pairs = [(0usize, 1usize), (3, 2)];
    let mut sent: Vec<Vec<u8>> = Vec::new();
    for k in 0..N {
        for &(from, to) in &pairs {
            let mut d = pattern(from as u64, k, LEN);
            let v = [IoVec {
                addr: d.as_mut_ptr(),
                len: LEN,
            }];
            let deadline = Instant::now() + T;
            loop {
                // SAFETY: `d` is kept in `sent` until the send completes.
                match unsafe {
                    eps[from]
                        .ep
                        .sendmsg(&msg_to(&v, addr[to], k), OpFlags::empty())
                } {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::Again && Instant::now() < deadline => {
                        spin(&eps);
                    }
                    Err(e) => panic!("send: {e}"),
                }
            }
            sent.push(d);
        }
    }
    // Every send completes once its message is in a receive buffer.
    let deadline = Instant::now() + T;
    for &(from, _) in &pairs {
        let mut n = 0;
        let mut e = [CqEntry::default(); 8];
        while n < N as usize {
            match eps[from].cq.read(&mut e) {
                Ok(k) => n += k,
                Err(err) if err.kind() == ErrorKind::Again => spin(&eps),
                Err(err) => panic!("sender {from}: {err}"),
            }
            assert!(Instant::now() < deadline, "sends of {from}: {n} of {N}");
        }
    }
    for _ in 0..20 {
        spin(&eps);
        std::thread::sleep(Duration::from_millis(2));
    }
    // The receives, posted on the context.
    let total = 2 * N as usize;
    let mut bufs: Vec<Vec<u8>> = (0..total).map(|_| vec![0xEE; LEN]).collect();
    for (k, b) in bufs.iter_mut().enumerate() {
        let v = [IoVec {
            addr: b.as_mut_ptr(),
            len: LEN,
        }];
        // SAFETY: `bufs` outlives every completion read below.
        unsafe { srx.recvmsg(&msg_to(&v, FiAddr::UNSPEC, k as u64), OpFlags::empty()) }.unwrap();
    }
    let mut got: [Vec<(u64, FiAddr)>; 2] = [Vec::new(), Vec::new()];
    let deadline = Instant::now() + T;
    while got.iter().map(Vec::len).sum::<usize>() < total {
        for (p, &(_, at)) in pairs.iter().enumerate() {
            let mut e = [CqEntry::default()];
            let mut src = [FiAddr(0)];
            match eps[at].cq.readfrom(&mut e, &mut src) {
                Ok(1) => {
                    assert_eq!(e[0].len, LEN);
                    got[p].push((e[0].context, src[0]));
                }
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::Again => spin(&eps),
                Err(err) => panic!(
                    "endpoint {at}: {err}: {:?}",
                    eps[at].cq.readerr().map(|e| e.err_text)
                ),
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} and {} of {N} messages arrived",
            got[0].len(),
            got[1].len()
        );
    }
    for (p, &(from, at)) in pairs.iter().enumerate() {
        let mut list = got[p].clone();
        assert_eq!(list.len(), N as usize, "at endpoint {at}");
        list.sort_unstable_by_key(|(c, _)| *c);
        for (k, (ctx, src)) in list.iter().enumerate() {
            assert_eq!(*src, addr[from], "source of message {k} at {at}");
            let b = &bufs[usize::try_from(*ctx).unwrap()];
            assert!(
                *b == pattern(from as u64, k as u64, LEN),
                "message {k} from {from} at {at} (receive {ctx})"
            );
        }
    }
    drop(sent);
}

/// Only RDM endpoints take a shared receive context: getinfo answers
/// FI_SHARED_CONTEXT for MSG with nothing and says `max_ep_srx_ctx` 0
/// there, and a MSG endpoint opened with it is refused.
#[test]
fn srx_not_offered_on_msg_endpoints() {
    let Some(list) = entries(EpType::Msg, msg_hints()) else {
        return;
    };
    let info = list.into_iter().next().unwrap();
    assert_eq!(info.domain_attr.max_ep_srx_ctx, 0);
    let mut h = msg_hints();
    h.ep_attr.ep_type = EpType::Msg;
    h.ep_attr.rx_ctx_cnt = SHARED_CONTEXT;
    let req = Request {
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    assert_eq!(
        VerbsProvider
            .getinfo(&req)
            .map(|l| l.len())
            .err()
            .map(|e| e.kind()),
        Some(ErrorKind::NoData),
        "FI_SHARED_CONTEXT hints for MSG"
    );
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let mut shared = info.clone();
    shared.ep_attr.rx_ctx_cnt = SHARED_CONTEXT;
    assert_eq!(
        domain.endpoint(&shared).err().map(|e| e.kind()),
        Some(ErrorKind::Inval),
        "a MSG endpoint opened with FI_SHARED_CONTEXT"
    );
}
