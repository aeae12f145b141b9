//! The cost of the safe layer: a 1-byte message between two RDM endpoints
//! of one process (post a receive, send, read both completions), through
//! `fabric::safe` and through the zero-copy object traits, on tcp and shm.
//!
//! `cargo bench -p fabric --bench safe_vs_raw`; issue #22 asks for the safe
//! path within 1.1x of the raw one.

#![allow(clippy::unwrap_used, missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use fabric::prelude::*;

mod common;

use common::{RawPair, SafePair, entry};

fn bench(c: &mut Criterion) {
    for prov in ["tcp", "shm"] {
        let Some(info) = entry(prov) else {
            continue;
        };
        let domain = safe::Domain::open(&info).unwrap();

        let mut pair = SafePair::new(&domain);
        c.bench_function(&format!("{prov}/safe/send+recv 1 B"), |bench| {
            bench.iter(|| pair.round())
        });
        drop(pair);

        let mut pair = RawPair::new(&domain, &info);
        c.bench_function(&format!("{prov}/raw/send+recv 1 B"), |bench| {
            bench.iter(|| pair.round())
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
