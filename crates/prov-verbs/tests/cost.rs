//! Costs of the MSG hot path, measured on the test's thread (ignored by
//! default: a measurement, not a check). The rxe rig's `--bench` runs it
//! in its guest (`-- --ignored --nocapture`) next to the latency
//! comparison, so that the provider's share of a round trip can be told
//! from the clock's, the kernel's and the CLI's. Each line it prints is
//! `rxe-cost: <what> <value> <unit>`:
//!
//! - `clock_now`: one `Instant::now()` (the vDSO, or a system call where
//!   the guest's clocksource cannot be read from user space);
//! - `cq_read_empty`: one `CompletionQueue::read` that finds nothing (what
//!   a polling loop repeats while it waits);
//! - `inject_oneway`: half a round trip of 1-byte injects between two
//!   connected endpoints, every step polled by this one thread (no
//!   scheduling, no second process).

#![allow(clippy::unwrap_used, clippy::result_large_err)]

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::{CompletionQueue, CqEntry, FiAddr, IoVec, MrDesc, Msg};
use fabric_core::*;

fn report(what: &str, value: f64, unit: &str) {
    println!("rxe-cost: {what} {value:.3} {unit}");
}

/// Nanoseconds per call of `f`, over `n` calls.
fn ns_per(n: u32, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_secs_f64() * 1e9 / f64::from(n)
}

/// Polls `cq` until one successful completion.
fn poll(cq: &dyn CompletionQueue) -> CqEntry {
    let mut e = [CqEntry::default()];
    let mut spins = 0u64;
    let start = Instant::now();
    loop {
        match cq.read(&mut e) {
            Ok(_) => return e[0],
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => panic!("CQ read failed: {err:?}"),
        }
        spins += 1;
        if spins % 4096 == 0 {
            assert!(start.elapsed() < T, "no completion within {T:?}");
        }
    }
}

#[test]
#[ignore = "a measurement; `cargo xtask rxe --bench` runs it in its guest"]
fn msg_hot_path_costs() {
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let (server, client) = connected(&l);

    let clock = ns_per(200_000, || {
        black_box(Instant::now());
    });
    report("clock_now", clock, "ns");

    let mut e = [CqEntry::default()];
    let empty = ns_per(200_000, || {
        let r = client.cq.read(&mut e);
        assert!(matches!(&r, Err(err) if err.kind() == ErrorKind::Again));
    });
    report("cq_read_empty", empty, "ns");

    let mut sbuf = Buf::new(server.domain.as_ref(), 64);
    let mut cbuf = Buf::new(client.domain.as_ref(), 64);
    let siov = sbuf.iov_n(1);
    let ciov = cbuf.iov_n(1);
    let sdesc = [sbuf.mr.desc()];
    let cdesc = [cbuf.mr.desc()];
    let recv = |side: &Side, iov: &[IoVec], desc: &[MrDesc]| {
        let m = Msg {
            iov,
            desc,
            addr: FiAddr::UNSPEC,
            tag: 0,
            ignore: 0,
            context: 1,
            data: 0,
        };
        // SAFETY: the buffers outlive every receive (each completes within
        // its round; the last one is left posted and dropped with the
        // endpoint before the buffers).
        unsafe { side.ep.recvmsg(&m, OpFlags::empty()) }.unwrap();
    };
    recv(&server, &siov, &sdesc);
    recv(&client, &ciov, &cdesc);
    let round = || {
        client.ep.inject(b"p", FiAddr::UNSPEC, None).unwrap();
        poll(server.cq.as_ref());
        recv(&server, &siov, &sdesc);
        server.ep.inject(b"q", FiAddr::UNSPEC, None).unwrap();
        poll(client.cq.as_ref());
        recv(&client, &ciov, &cdesc);
    };
    for _ in 0..200 {
        round();
    }
    let rounds = 2000;
    let t = Instant::now();
    for _ in 0..rounds {
        round();
    }
    let oneway = t.elapsed() / (2 * rounds);
    report("inject_oneway", oneway.as_secs_f64() * 1e6, "us");
    assert!(oneway < Duration::from_secs(1));
}
