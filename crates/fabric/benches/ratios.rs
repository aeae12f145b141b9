//! The ratios issue #22 sets budgets for, measured so that machine noise
//! cancels: the raw, safe (synchronous busy-poll) and tokio paths of a
//! 1-byte message between two RDM endpoints of one process (a receive and
//! a send, both completions read) run in short alternating blocks, and
//! each ratio is taken between neighbouring blocks, then the median over
//! all rounds is printed (with the median time per message of each path).
//!
//! `cargo bench -p fabric --features tokio --bench ratios [-- PROVIDER]`.
//! Budgets: safe / raw within 1.1x; tokio / sync busy-poll within 1.5x.
//! `safe_vs_raw` and `tokio_vs_sync` measure the same paths with criterion,
//! one after the other.

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use fabric::objects::{IoVec, Msg};
use fabric::prelude::*;
use fabric::safe::AsyncEndpoint;

/// Messages per block (about a millisecond), and rounds of blocks.
const BLOCK: u32 = 2_000;
const ROUNDS: usize = 300;

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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn per_msg(d: Duration) -> f64 {
    d.as_nanos() as f64 / f64::from(BLOCK)
}

fn main() {
    // `cargo bench` passes `--bench`; a provider name may follow.
    let provs: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let provs = if provs.is_empty() {
        vec!["shm".to_string(), "tcp".to_string()]
    } else {
        provs
    };
    for prov in &provs {
        let Some(info) = entry(prov) else {
            continue;
        };
        run(prov, &info);
    }
}

fn run(prov: &str, info: &Info) {
    let domain = safe::Domain::open(info).unwrap();

    // Raw.
    let ra = raw(domain.raw(), info);
    let rb = raw(domain.raw(), info);
    let mut to = [FiAddr(0)];
    ra.av
        .insert(std::slice::from_ref(&rb.ep.getname().unwrap()), &mut to)
        .unwrap();
    let mut sbuf = [7u8; 1];
    let mut rbuf = [0u8; 1];
    let mut raw_block = || {
        let start = Instant::now();
        for _ in 0..BLOCK {
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
            // SAFETY: both buffers outlive the reads below, which take
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
        }
        start.elapsed()
    };

    // Safe, synchronous busy-poll.
    let mut a: safe::Endpoint = domain.endpoint().unwrap();
    let mut b: safe::Endpoint = domain.endpoint().unwrap();
    let to_b = a.insert(&b.name().unwrap()).unwrap();
    let mut out = Some(vec![7u8; 1]);
    let mut inbox = Some(vec![0u8; 1]);
    let mut safe_block = || {
        let start = Instant::now();
        for _ in 0..BLOCK {
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
        }
        start.elapsed()
    };

    // Tokio: polled by `block_on`, and in a spawned task.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (ta, tb, tto_b) = rt.block_on(async {
        let a = AsyncEndpoint::new(domain.endpoint().unwrap()).unwrap();
        let b = AsyncEndpoint::new(domain.endpoint().unwrap()).unwrap();
        let to_b = a.insert(&b.name().unwrap()).unwrap();
        (a, b, to_b)
    });
    let pingpong = |a: AsyncEndpoint, b: AsyncEndpoint| async move {
        let mut out = vec![7u8; 1];
        let mut inbox = vec![0u8; 1];
        let start = Instant::now();
        for _ in 0..BLOCK {
            let (got, sent) = tokio::join!(b.recv(inbox), a.send(tto_b, out));
            let got = got.unwrap();
            black_box(got.transferred());
            inbox = got.into_buf().unwrap();
            out = sent.unwrap().into_buf().unwrap();
        }
        start.elapsed()
    };
    let tokio_block = || rt.block_on(pingpong(ta.clone(), tb.clone()));
    let task_block = || {
        let f = pingpong(ta.clone(), tb.clone());
        rt.block_on(async move { tokio::spawn(f).await.unwrap() })
    };

    // Warm up, then alternate.
    for _ in 0..20 {
        raw_block();
        safe_block();
        tokio_block();
        task_block();
    }
    let (mut t_raw, mut t_safe, mut t_tokio, mut t_task) = (vec![], vec![], vec![], vec![]);
    let (mut r_safe, mut r_tokio, mut r_task) = (vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        // Vary the order so that no path always follows the same one.
        let (raw, safe, tokio, task) = if round % 2 == 0 {
            let raw = per_msg(raw_block());
            let safe = per_msg(safe_block());
            let tokio = per_msg(tokio_block());
            let task = per_msg(task_block());
            (raw, safe, tokio, task)
        } else {
            let task = per_msg(task_block());
            let tokio = per_msg(tokio_block());
            let safe = per_msg(safe_block());
            let raw = per_msg(raw_block());
            (raw, safe, tokio, task)
        };
        t_raw.push(raw);
        t_safe.push(safe);
        t_tokio.push(tokio);
        t_task.push(task);
        r_safe.push(safe / raw);
        r_tokio.push(tokio / safe);
        r_task.push(task / safe);
    }
    println!(
        "{prov}: median ns per message: raw {:.0}, safe {:.0}, tokio block_on {:.0}, tokio task {:.0}",
        median(&mut t_raw),
        median(&mut t_safe),
        median(&mut t_tokio),
        median(&mut t_task)
    );
    println!(
        "{prov}: median ratios of neighbouring blocks ({ROUNDS} rounds of {BLOCK} messages): \
         safe/raw {:.3} (budget 1.1), tokio block_on/sync {:.3}, tokio task/sync {:.3} (budget 1.5)",
        median(&mut r_safe),
        median(&mut r_tokio),
        median(&mut r_task)
    );
}
