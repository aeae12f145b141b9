//! What the benches of the raw, safe and tokio paths share: the provider
//! entry, and one 1-byte round (a receive and a send, both completions
//! read) between two RDM endpoints of one process on each path.

#![allow(dead_code, clippy::unwrap_used)]

use std::hint::black_box;

use fabric::objects::{IoVec, Msg};
use fabric::prelude::*;
#[cfg(feature = "tokio")]
use fabric::safe::AsyncEndpoint;

/// The first RDM answer of provider `prov` (tcp on loopback), if built in.
pub(crate) fn entry(prov: &str) -> Option<Info> {
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
    _av: Box<dyn AddressVector>,
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
    Raw { ep, cq, _av: av }
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

/// Two endpoints of the zero-copy object traits, `a` sending to `b`.
pub(crate) struct RawPair {
    a: Raw,
    b: Raw,
    to_b: FiAddr,
    sbuf: [u8; 1],
    rbuf: [u8; 1],
}

impl RawPair {
    /// Opens the pair in `domain`.
    pub(crate) fn new(domain: &safe::Domain, info: &Info) -> RawPair {
        let a = raw(domain.raw(), info);
        let b = raw(domain.raw(), info);
        let mut to = [FiAddr(0)];
        a._av
            .insert(std::slice::from_ref(&b.ep.getname().unwrap()), &mut to)
            .unwrap();
        RawPair {
            a,
            b,
            to_b: to[0],
            sbuf: [7],
            rbuf: [0],
        }
    }

    /// One round.
    pub(crate) fn round(&mut self) {
        let riov = [IoVec {
            addr: self.rbuf.as_mut_ptr(),
            len: 1,
        }];
        let siov = [IoVec {
            addr: self.sbuf.as_mut_ptr(),
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
        // SAFETY: both buffers live in `self`, and both completions are
        // read before this returns.
        unsafe {
            self.b
                .ep
                .recvmsg(&msg(&riov, FiAddr::UNSPEC, 1), OpFlags::empty())
                .unwrap();
            self.a
                .ep
                .sendmsg(&msg(&siov, self.to_b, 2), OpFlags::empty())
                .unwrap();
        }
        black_box(one(self.b.cq.as_ref(), self.a.cq.as_ref()).len);
        black_box(one(self.a.cq.as_ref(), self.b.cq.as_ref()).len);
    }
}

/// Two endpoints of the safe layer, polled back to back.
pub(crate) struct SafePair {
    a: safe::Endpoint,
    b: safe::Endpoint,
    to_b: FiAddr,
    out: Option<Vec<u8>>,
    inbox: Option<Vec<u8>>,
}

impl SafePair {
    /// Opens the pair in `domain`.
    pub(crate) fn new(domain: &safe::Domain) -> SafePair {
        let a: safe::Endpoint = domain.endpoint().unwrap();
        let b: safe::Endpoint = domain.endpoint().unwrap();
        let to_b = a.insert(&b.name().unwrap()).unwrap();
        SafePair {
            a,
            b,
            to_b,
            out: Some(vec![7u8; 1]),
            inbox: Some(vec![0u8; 1]),
        }
    }

    /// One round.
    pub(crate) fn round(&mut self) {
        let r = self.b.recv(self.inbox.take().unwrap()).unwrap();
        let s = self.a.send(self.to_b, self.out.take().unwrap()).unwrap();
        let got = loop {
            self.a.progress().unwrap();
            if let Some(c) = self.b.try_take(r).unwrap() {
                break c;
            }
        };
        black_box(got.transferred());
        self.inbox = got.into_buf();
        let sent = loop {
            self.b.progress().unwrap();
            if let Some(c) = self.a.try_take(s).unwrap() {
                break c;
            }
        };
        self.out = sent.into_buf();
    }
}

/// Two tokio endpoints (made inside `rt`), `a` sending to `b`.
#[cfg(feature = "tokio")]
pub(crate) fn async_pair(
    rt: &tokio::runtime::Runtime,
    domain: &safe::Domain,
) -> (AsyncEndpoint, AsyncEndpoint, FiAddr) {
    rt.block_on(async {
        let a = AsyncEndpoint::new(domain.endpoint().unwrap()).unwrap();
        let b = AsyncEndpoint::new(domain.endpoint().unwrap()).unwrap();
        let to_b = a.insert(&b.name().unwrap()).unwrap();
        (a, b, to_b)
    })
}

/// `n` rounds on the tokio path, both futures polled by the caller's task;
/// the time they took.
#[cfg(feature = "tokio")]
pub(crate) async fn async_rounds(
    a: &AsyncEndpoint,
    b: &AsyncEndpoint,
    to_b: FiAddr,
    n: u64,
) -> std::time::Duration {
    let mut out = vec![7u8; 1];
    let mut inbox = vec![0u8; 1];
    let start = std::time::Instant::now();
    for _ in 0..n {
        let (got, sent) = tokio::join!(b.recv(inbox), a.send(to_b, out));
        let got = got.unwrap();
        black_box(got.transferred());
        inbox = got.into_buf().unwrap();
        out = sent.unwrap().into_buf().unwrap();
    }
    start.elapsed()
}
