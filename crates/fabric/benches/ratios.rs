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

use std::time::{Duration, Instant};

use fabric::prelude::*;

/// Messages per block (about a millisecond), and rounds of blocks.
const BLOCK: u32 = 2_000;
const ROUNDS: usize = 300;

mod common;

use common::{RawPair, SafePair, async_pair, async_rounds, entry};

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
    let mut raw = RawPair::new(&domain, info);
    let mut raw_block = || {
        let start = Instant::now();
        for _ in 0..BLOCK {
            raw.round();
        }
        start.elapsed()
    };

    // Safe, synchronous busy-poll.
    let mut safe = SafePair::new(&domain);
    let mut safe_block = || {
        let start = Instant::now();
        for _ in 0..BLOCK {
            safe.round();
        }
        start.elapsed()
    };

    // Tokio: polled by `block_on`, and in a spawned task.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (ta, tb, tto_b) = async_pair(&rt, &domain);
    let tokio_block = || rt.block_on(async_rounds(&ta, &tb, tto_b, u64::from(BLOCK)));
    let task_block = || {
        let (a, b) = (ta.clone(), tb.clone());
        rt.block_on(async move {
            tokio::spawn(async move { async_rounds(&a, &b, tto_b, u64::from(BLOCK)).await })
                .await
                .unwrap()
        })
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
