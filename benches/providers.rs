//! The data path of each provider that needs no hardware (tcp, shm), in
//! one process: one RDM endpoint, opened through the `fabric` facade and
//! the `Provider` trait, sends to itself (its own name is in its AV).
//!
//! - `<prov>/inject 8 B + recv`: post an 8-byte receive, `fi_inject` 8
//!   bytes to ourselves, poll the CQ until the receive completes.
//! - `<prov>/send+recv 1 KiB`: post a 1 KiB receive, `fi_send` 1 KiB to
//!   ourselves, poll the CQ until both the send and the receive completed.
//!
//! - `<prov>/empty cq read`: one CQ read that finds nothing (it runs the
//!   provider's progress first). A polling receiver notices a message
//!   half such a read late on average, so this cost is part of latency.
//!
//! Each iteration completes every receive it posted and reads every
//! completion it caused, so nothing accumulates. Polling the CQ drives the
//! provider's manual progress. tcp goes through the kernel's loopback
//! (127.0.0.1; the endpoint holds both ends of its connection to itself),
//! shm through the endpoint's own shared-memory ring.
//!
//! `cargo bench -p fabric-benches --bench providers`.

#![allow(missing_docs, clippy::field_reassign_with_default)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use fabric::objects::{
    AddressVector, AvAttr, Bind, CompletionQueue, CqAttr, CqEntry, CqFormat, Domain, Endpoint,
    Fabric, FiAddr, IoVec, Msg, WaitObj,
};
use fabric::{
    AddrFormat, Caps, EpType, ErrorKind, GetinfoFlags, Info, Mode, OpFlags, Registry, Request,
    Version,
};

/// Context of the receives.
const RECV_CTX: u64 = 1;
/// Context of the sends.
const SEND_CTX: u64 = 2;
/// Give up on a completion after this long (a bug, not a slow machine).
const PATIENCE: Duration = Duration::from_secs(30);

/// One enabled RDM endpoint with its CQ and AV. Fields drop in order: the
/// endpoint before the objects it is bound to.
struct Side {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    _av: Box<dyn AddressVector>,
    _domain: Box<dyn Domain>,
    _fabric: Box<dyn Fabric>,
    /// The endpoint's own handle in its AV.
    me: FiAddr,
}

/// The first RDM message entry of provider `prov` (tcp: on 127.0.0.1).
fn info(prov: &str) -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG;
    h.mode = Mode::all();
    h.ep_attr.ep_type = EpType::Rdm;
    h.fabric_attr.prov_name = Some(prov.to_string());
    let (node, flags) = if prov == "tcp" {
        h.addr_format = AddrFormat::SockaddrIn;
        (Some("127.0.0.1"), GetinfoFlags::SOURCE)
    } else {
        (None, GetinfoFlags::empty())
    };
    let req = Request {
        node,
        flags,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    Registry::global()
        .getinfo(&req)
        .expect("getinfo for an RDM endpoint of the provider")
        .remove(0)
}

/// Opens an endpoint of `prov` that knows itself.
fn open(prov: &str) -> Side {
    let info = info(prov);
    let fabric = Registry::global()
        .fabric(&info)
        .expect("open the provider's fabric");
    let domain = fabric.domain(&info).expect("open a domain");
    let cq = domain
        .cq(&CqAttr {
            format: CqFormat::Tagged,
            wait_obj: WaitObj::None,
            ..CqAttr::default()
        })
        .expect("open a CQ");
    let av = domain.av(&AvAttr::default()).expect("open an AV");
    let ep = domain.endpoint(&info).expect("open an endpoint");
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .expect("bind the CQ");
    ep.bind(Bind::Av(av.as_ref())).expect("bind the AV");
    ep.enable().expect("enable the endpoint");
    let name = ep.getname().expect("the endpoint's name");
    let mut me = [FiAddr(0)];
    av.insert(std::slice::from_ref(&name), &mut me)
        .expect("insert our own name");
    Side {
        ep,
        cq,
        _av: av,
        _domain: domain,
        _fabric: fabric,
        me: me[0],
    }
}

/// Reads completions until those with the contexts in `want` (a bit per
/// context) have all come, driving progress. Panics on an error
/// completion, an unexpected context, or after [`PATIENCE`].
fn complete(cq: &dyn CompletionQueue, mut want: u64) {
    let mut out = [CqEntry::default(); 4];
    let mut start: Option<Instant> = None;
    let mut spins = 0u32;
    while want != 0 {
        match cq.read(&mut out) {
            Ok(n) => {
                for e in &out[..n] {
                    let bit = match e.context {
                        RECV_CTX | SEND_CTX => 1 << e.context,
                        _ => 0,
                    };
                    assert!(want & bit != 0, "unexpected completion {e:?}");
                    want &= !bit;
                }
            }
            Err(e) if e.kind() == ErrorKind::Again => {
                spins += 1;
                if spins % 4096 == 0 {
                    let t = *start.get_or_insert_with(Instant::now);
                    assert!(t.elapsed() < PATIENCE, "no completion within {PATIENCE:?}");
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == ErrorKind::Avail => {
                let err = cq.readerr();
                panic!("error completion: {err:?}");
            }
            Err(e) => panic!("cq read: {e}"),
        }
    }
}

/// Calls `op` until it does not answer `FI_EAGAIN` (a full transmit
/// queue), driving progress in between.
fn retry(cq: &dyn CompletionQueue, what: &str, op: impl Fn() -> fabric::Result<()>) {
    let start = Instant::now();
    loop {
        match op() {
            Ok(()) => return,
            Err(e) if e.kind() == ErrorKind::Again => {
                let _ = cq.read(&mut []);
                assert!(
                    start.elapsed() < PATIENCE,
                    "{what}: FI_EAGAIN for {PATIENCE:?}"
                );
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// One receive of `rbuf` and one message of `payload` to ourselves
/// (`inject`, or `send` with its own completion), both completed.
fn round(s: &Side, riov: &[IoVec], siov: &[IoVec], payload: &[u8], inject: bool) {
    let recv = Msg {
        iov: riov,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag: 0,
        ignore: 0,
        context: RECV_CTX,
        data: 0,
    };
    // SAFETY: the receive buffer lives for the whole benchmark (the caller
    // owns it) and nobody touches it until the receive's completion has
    // been read by `complete` below.
    unsafe { s.ep.recvmsg(&recv, OpFlags::empty()) }.expect("post the receive");
    if inject {
        retry(s.cq.as_ref(), "inject", || s.ep.inject(payload, s.me, None));
        complete(s.cq.as_ref(), 1 << RECV_CTX);
    } else {
        let send = Msg {
            iov: siov,
            desc: &[],
            addr: s.me,
            tag: 0,
            ignore: 0,
            context: SEND_CTX,
            data: 0,
        };
        // SAFETY: the send buffer lives for the whole benchmark and is not
        // written; its completion is read by `complete` below.
        retry(s.cq.as_ref(), "send", || unsafe {
            s.ep.sendmsg(&send, OpFlags::empty())
        });
        complete(s.cq.as_ref(), (1 << RECV_CTX) | (1 << SEND_CTX));
    }
}

fn iov(b: &mut Vec<u8>) -> [IoVec; 1] {
    [IoVec {
        addr: b.as_mut_ptr(),
        len: b.len(),
    }]
}

fn bench(c: &mut Criterion) {
    for prov in ["tcp", "shm"] {
        let s = open(prov);
        let mut g = c.benchmark_group(prov);
        for (name, size, inject) in [
            ("inject 8 B + recv", 8usize, true),
            ("send+recv 1 KiB", 1024, false),
        ] {
            let mut sbuf: Vec<u8> = (0..size).map(|i| i as u8 ^ 0x5a).collect();
            let mut rbuf = vec![0u8; size];
            let siov = iov(&mut sbuf);
            let riov = iov(&mut rbuf);
            // One checked round first (and, for tcp, the connection to
            // ourselves is made here, outside the timing).
            round(&s, &riov, &siov, &sbuf, inject);
            // SAFETY: the round is complete: the provider no longer
            // touches either buffer, and `riov` points into `rbuf`.
            let got = unsafe { std::slice::from_raw_parts(riov[0].addr, size) };
            assert_eq!(got, &sbuf[..], "{prov} {name}: payload arrived intact");
            g.bench_function(name, |b| {
                b.iter(|| round(&s, &riov, &siov, black_box(&sbuf), inject))
            });
        }
        g.bench_function("empty cq read", |b| {
            let mut e = [CqEntry::default()];
            b.iter(|| {
                let r = s.cq.read(black_box(&mut e));
                assert!(
                    matches!(&r, Err(err) if err.kind() == ErrorKind::Again),
                    "{prov}: the CQ is empty between rounds"
                );
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    // Short runs: the whole `cargo bench -p fabric-benches` should take a
    // few minutes on a 2-core machine.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = bench
}
criterion_main!(benches);
