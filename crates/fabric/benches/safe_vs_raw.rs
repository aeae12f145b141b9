//! The cost of the safe layer: a 1-byte message between two RDM endpoints
//! of one process (post a receive, send, read both completions), through
//! `fabric::safe` and through the zero-copy object traits, on tcp and shm.
//!
//! `cargo bench -p fabric --bench safe_vs_raw`; issue #22 asks for the safe
//! path within 1.1x of the raw one.

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use fabric::objects::{IoVec, Msg};
use fabric::prelude::*;

fn entry(prov: &str) -> Option<Info> {
    let mut h = Hints::new()
        .caps(Caps::MSG)
        .ep_type(EpType::Rdm)
        .provider(prov);
    if prov == "tcp" {
        h = h.node("127.0.0.1").source();
    }
    h.getinfo().ok()?.into_iter().next()
}

/// An endpoint opened through the object traits, bound and enabled.
struct Raw {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    av: Box<dyn AddressVector>,
}

fn raw(domain: &dyn Domain, info: &Info) -> Raw {
    let cq = domain
        .cq(&CqAttr {
            format: CqFormat::Tagged,
            ..CqAttr::default()
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
    ep.enable().unwrap();
    Raw { ep, cq, av }
}

/// Reads `cq` until one completion comes, driving `other`.
fn one(cq: &dyn CompletionQueue, other: &dyn CompletionQueue) -> CqEntry {
    let mut e = [CqEntry::default()];
    loop {
        let _ = other.read(&mut []);
        if let Ok(1) = cq.read(&mut e) {
            return e[0];
        }
    }
}

fn bench(c: &mut Criterion) {
    for prov in ["tcp", "shm"] {
        let Some(info) = entry(prov) else {
            continue;
        };
        let domain = safe::Domain::open(&info).unwrap();

        let mut a: safe::Endpoint = domain.endpoint().unwrap();
        let mut b: safe::Endpoint = domain.endpoint().unwrap();
        let to_b = a.insert(&b.name().unwrap()).unwrap();
        let mut out = Some(vec![7u8; 1]);
        let mut inbox = Some(vec![0u8; 1]);
        c.bench_function(&format!("{prov}/safe/send+recv 1 B"), |bench| {
            bench.iter(|| {
                let r = b.recv(inbox.take().unwrap()).unwrap();
                let s = a.send(to_b, out.take().unwrap()).unwrap();
                let got = loop {
                    a.progress().unwrap();
                    if let Some(c) = b.try_take(r).unwrap() {
                        break c;
                    }
                };
                black_box(got.transferred());
                inbox = got.into_buf();
                let sent = loop {
                    b.progress().unwrap();
                    if let Some(c) = a.try_take(s).unwrap() {
                        break c;
                    }
                };
                out = sent.into_buf();
            })
        });

        let ra = raw(domain.raw(), &info);
        let rb = raw(domain.raw(), &info);
        let mut to = [FiAddr(0)];
        ra.av
            .insert(std::slice::from_ref(&rb.ep.getname().unwrap()), &mut to)
            .unwrap();
        let mut sbuf = [7u8; 1];
        let mut rbuf = [0u8; 1];
        c.bench_function(&format!("{prov}/raw/send+recv 1 B"), |bench| {
            bench.iter(|| {
                let riov = [IoVec {
                    addr: rbuf.as_mut_ptr(),
                    len: 1,
                }];
                let siov = [IoVec {
                    addr: sbuf.as_mut_ptr(),
                    len: 1,
                }];
                let msg = |iov, addr, context| Msg {
                    iov,
                    desc: &[],
                    addr,
                    tag: 0,
                    ignore: 0,
                    context,
                    data: 0,
                };
                // SAFETY: both buffers outlive the loop below, which reads
                // both completions before the iteration ends.
                unsafe {
                    rb.ep
                        .recvmsg(&msg(&riov, FiAddr::UNSPEC, 1), OpFlags::empty())
                        .unwrap();
                    ra.ep
                        .sendmsg(&msg(&siov, to[0], 2), OpFlags::empty())
                        .unwrap();
                }
                black_box(one(rb.cq.as_ref(), ra.cq.as_ref()).len);
                black_box(one(ra.cq.as_ref(), rb.cq.as_ref()).len);
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
