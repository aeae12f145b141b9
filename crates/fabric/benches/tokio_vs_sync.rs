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

use criterion::{Criterion, criterion_group, criterion_main};
use fabric::prelude::*;

mod common;

use common::{SafePair, async_pair, async_rounds, entry};

fn bench(c: &mut Criterion) {
    for prov in ["tcp", "shm"] {
        let Some(info) = entry(prov) else {
            continue;
        };
        let domain = safe::Domain::open(&info).unwrap();

        // The synchronous path, polling back to back.
        let mut pair = SafePair::new(&domain);
        c.bench_function(&format!("{prov}/sync busy-poll/send+recv 1 B"), |bench| {
            bench.iter(|| pair.round())
        });
        drop(pair);

        // The tokio path: both futures polled by one task.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (a, b, to_b) = async_pair(&rt, &domain);
        c.bench_function(&format!("{prov}/tokio/send+recv 1 B"), |bench| {
            bench.iter_custom(|iters| rt.block_on(async_rounds(&a, &b, to_b, iters)))
        });

        // The same inside a spawned task: the runtime's scheduler polls it
        // (as in an application), not `block_on`, which parks on the
        // reactor every time its future is pending.
        c.bench_function(&format!("{prov}/tokio task/send+recv 1 B"), |bench| {
            bench.iter_custom(|iters| {
                let (a, b) = (a.clone(), b.clone());
                rt.block_on(async move {
                    tokio::spawn(async move { async_rounds(&a, &b, to_b, iters).await })
                        .await
                        .unwrap()
                })
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
