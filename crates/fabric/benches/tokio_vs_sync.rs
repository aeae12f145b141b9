//! The cost of the `tokio` path: a 1-byte message between two RDM
//! endpoints of one process (a receive and a send, both completions read),
//! through `AsyncEndpoint` futures on a current-thread runtime (polled by
//! `block_on`, and in a spawned task) and through the synchronous safe
//! layer polling back to back, on tcp and shm.
//!
//! `cargo bench -p fabric --features tokio --bench tokio_vs_sync`; issue
//! #22 asks for the tokio path within 1.5x of the synchronous busy-poll
//! path. The spawned task is how an application runs: `block_on` parks
//! on the reactor (a system call) every time its future is pending, which
//! a busy ping-pong is once per message. `benches/ratios.rs` measures the
//! same paths in alternating blocks, for ratios that machine noise does
//! not move. (The idle CPU of the tokio path is checked by
//! `tests/tokio_idle.rs`.)

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use fabric::prelude::*;
use fabric::safe::AsyncEndpoint;

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

fn bench(c: &mut Criterion) {
    for prov in ["tcp", "shm"] {
        let Some(info) = entry(prov) else {
            continue;
        };
        let domain = safe::Domain::open(&info).unwrap();

        // The synchronous path, polling back to back.
        let mut a: safe::Endpoint = domain.endpoint().unwrap();
        let mut b: safe::Endpoint = domain.endpoint().unwrap();
        let to_b = a.insert(&b.name().unwrap()).unwrap();
        let mut out = Some(vec![7u8; 1]);
        let mut inbox = Some(vec![0u8; 1]);
        c.bench_function(&format!("{prov}/sync busy-poll/send+recv 1 B"), |bench| {
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
        drop((a, b));

        // The tokio path: both futures polled by one task.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (a, b, to_b) = rt.block_on(async {
            let a = AsyncEndpoint::new(domain.endpoint().unwrap()).unwrap();
            let b = AsyncEndpoint::new(domain.endpoint().unwrap()).unwrap();
            let to_b = a.insert(&b.name().unwrap()).unwrap();
            (a, b, to_b)
        });
        c.bench_function(&format!("{prov}/tokio/send+recv 1 B"), |bench| {
            bench.iter_custom(|iters| {
                rt.block_on(async {
                    let mut out = vec![7u8; 1];
                    let mut inbox = vec![0u8; 1];
                    let start = Instant::now();
                    for _ in 0..iters {
                        let (got, sent) = tokio::join!(b.recv(inbox), a.send(to_b, out));
                        let got = got.unwrap();
                        black_box(got.transferred());
                        inbox = got.into_buf().unwrap();
                        out = sent.unwrap().into_buf().unwrap();
                    }
                    start.elapsed()
                })
            })
        });

        // The same inside a spawned task: the runtime's scheduler polls it
        // (as in an application), not `block_on`, which parks on the
        // reactor every time its future is pending.
        c.bench_function(&format!("{prov}/tokio task/send+recv 1 B"), |bench| {
            bench.iter_custom(|iters| {
                let (a, b) = (a.clone(), b.clone());
                rt.block_on(async move {
                    tokio::spawn(async move {
                        let mut out = vec![7u8; 1];
                        let mut inbox = vec![0u8; 1];
                        let start = Instant::now();
                        for _ in 0..iters {
                            let (got, sent) = tokio::join!(b.recv(inbox), a.send(to_b, out));
                            let got = got.unwrap();
                            black_box(got.transferred());
                            inbox = got.into_buf().unwrap();
                            out = sent.unwrap().into_buf().unwrap();
                        }
                        start.elapsed()
                    })
                    .await
                    .unwrap()
                })
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
