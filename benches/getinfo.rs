//! `getinfo` through the `fabric` facade, with the providers that need no
//! hardware compiled in (tcp and shm): what an application pays for each
//! `fi_getinfo` call, including the tcp provider's walk over the network
//! interfaces and the ranking across providers.
//!
//! - `getinfo/no hints`: NULL hints, every offer of every provider.
//! - `getinfo/rdm tagged`: hints for an RDM endpoint with FI_TAGGED.
//! - `getinfo/rdm tagged, prov_name shm` (and `tcp`): the same hints plus
//!   `fabric_attr.prov_name`, so that the registry asks only one provider.
//!
//! `cargo bench -p fabric-benches --bench getinfo`. The answers depend on
//! the machine's interfaces (tcp gives one entry per interface and
//! endpoint type), so compare figures taken on one machine only.

#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use fabric::{Caps, EpType, GetinfoFlags, Hints, Version};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("getinfo");

    // Check once, outside the timing, that each request has answers, so
    // that an empty or failing getinfo is not measured by accident.
    let none = fabric::getinfo(Version::CURRENT, None, None, GetinfoFlags::empty(), None)
        .expect("getinfo with no hints: tcp and shm are compiled in");
    assert!(!none.is_empty(), "getinfo with no hints answered nothing");
    g.bench_function("no hints", |b| {
        b.iter(|| {
            fabric::getinfo(
                black_box(Version::CURRENT),
                None,
                None,
                GetinfoFlags::empty(),
                None,
            )
        })
    });

    let tagged = Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm);
    let list = tagged
        .getinfo()
        .expect("getinfo for RDM with FI_TAGGED: tcp and shm offer it");
    assert!(list.iter().all(|i| i.caps.contains(Caps::TAGGED)));
    g.bench_function("rdm tagged", |b| b.iter(|| black_box(&tagged).getinfo()));

    for prov in ["shm", "tcp"] {
        let hints = tagged.clone().provider(prov);
        let list = hints
            .getinfo()
            .expect("getinfo for RDM with FI_TAGGED and a provider name");
        assert!(
            list.iter().all(|i| i.prov_name() == Some(prov)),
            "prov_name {prov} selected another provider"
        );
        g.bench_function(format!("rdm tagged, prov_name {prov}"), |b| {
            b.iter(|| black_box(&hints).getinfo())
        });
    }
    g.finish();
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
