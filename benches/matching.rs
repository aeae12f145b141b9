//! Hint matching and address parsing: the work every getinfo does per
//! offer. `cargo bench -p fabric-benches --bench matching`.

#![allow(clippy::field_reassign_with_default, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use fabric_core::matching::{self, Request};
use fabric_core::*;

fn offer(ep: EpType) -> Info {
    let mut i = Info::default();
    i.caps = Caps::MSG
        | Caps::TAGGED
        | Caps::RMA
        | Caps::SEND
        | Caps::RECV
        | Caps::READ
        | Caps::WRITE
        | Caps::REMOTE_READ
        | Caps::REMOTE_WRITE
        | Caps::LOCAL_COMM
        | Caps::REMOTE_COMM;
    i.tx_attr.caps = i.caps;
    i.rx_attr.caps = i.caps;
    i.ep_attr.ep_type = ep;
    i.addr_format = AddrFormat::SockaddrIn;
    i.tx_attr.size = 1024;
    i.tx_attr.inject_size = 64;
    i.rx_attr.size = 1024;
    i.domain_attr.threading = Threading::Safe;
    i.domain_attr.data_progress = Progress::Manual;
    i.domain_attr.name = Some("eth0".into());
    i.fabric_attr.name = Some("192.0.2.0/24".into());
    i
}

fn hints() -> Info {
    let mut h = Info::default();
    h.caps = Caps::TAGGED;
    h.mode = Mode::all();
    h.ep_attr.ep_type = EpType::Rdm;
    h.tx_attr.size = 256;
    h
}

fn bench(c: &mut Criterion) {
    let o = offer(EpType::Rdm);
    let h = hints();
    c.bench_function("check (match)", |b| {
        b.iter(|| matching::check(black_box(&o), black_box(&h), Version::CURRENT))
    });
    let m = offer(EpType::Msg);
    c.bench_function("check (miss on ep_type)", |b| {
        b.iter(|| matching::check(black_box(&m), black_box(&h), Version::CURRENT))
    });
    c.bench_function("alter", |b| {
        b.iter(|| matching::alter(black_box(&o), Some(black_box(&h)), Version::CURRENT))
    });
    let offers: Vec<Info> = (0..16)
        .map(|i| offer(if i % 2 == 0 { EpType::Rdm } else { EpType::Msg }))
        .collect();
    let req = Request {
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    c.bench_function("select over 16 offers", |b| {
        b.iter(|| matching::select(black_box(&offers), black_box(&req)))
    });
    c.bench_function("parse fi_sockaddr_in6", |b| {
        b.iter(|| black_box("fi_sockaddr_in6://[2001:db8::1]:7471").parse::<Address>())
    });
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
