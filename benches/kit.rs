//! The shared building blocks of `fabric_core::kit` that every provider
//! runs on its data path, without any transport:
//!
//! - `tag/*`: tag matching ([`Matcher`]) with a deep queue of N = 1, 64,
//!   1024 entries. `unexpected, match last` posts a receive whose tag
//!   matches only the newest unexpected message (a scan of the whole
//!   queue); `unexpected, wildcard` posts a receive that ignores every tag
//!   bit (it takes the oldest message); `posted, match last` is a message
//!   arriving that matches only the newest of N posted receives. Each
//!   iteration puts back what it took, so the queues keep N entries.
//! - `cq/*`: the CQ object over the CQ core ([`Cq`], as the providers open
//!   it): one completion written and read back, with FI_CQ_FORMAT_CONTEXT
//!   and FI_CQ_FORMAT_TAGGED, and a read of an empty CQ (the `FI_EAGAIN`
//!   path a polling loop takes most often).
//! - `av/*`: the AV table ([`AvTable`]): lookup of a handle among 1 and
//!   1000 entries, and an insert followed by the remove of that entry.
//!
//! `cargo bench -p fabric-benches --bench kit`.

#![allow(missing_docs)]

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use fabric_core::kit::av::AvTable;
use fabric_core::kit::objects::{Cq, Progress};
use fabric_core::kit::tag::{Matcher, Posted};
use fabric_core::objects::{
    CompletionFlags, CompletionQueue, CqAttr, CqEntry, CqFormat, FiAddr, WaitObj,
};
use fabric_core::{Address, ErrorKind, Result};

/// Queue depths of the tag-matching benches.
const DEPTHS: [usize; 3] = [1, 64, 1024];

/// A posted receive with tag `tag`, any source, no ignored bits.
fn recv(tag: u64, ignore: u64) -> Posted<u64> {
    Posted {
        tag,
        ignore,
        src: FiAddr::UNSPEC,
        recv: tag,
    }
}

fn tag_matching(c: &mut Criterion) {
    let mut g = c.benchmark_group("tag");
    for n in DEPTHS {
        let last = n as u64 - 1;

        // N unexpected messages with tags 0..N; the receive matches only
        // the newest, so the search walks the whole queue.
        let mut m: Matcher<u64, u64> = Matcher::new(false);
        for t in 0..n as u64 {
            m.push_unexpected(t, FiAddr(t), t);
        }
        g.bench_with_input(BenchmarkId::new("unexpected, match last", n), &n, |b, _| {
            b.iter(|| {
                let (p, u) = m
                    .post(black_box(recv(last, 0)))
                    .expect("the newest unexpected message matches");
                // Put the message back at the tail: the queue is unchanged.
                m.push_unexpected(u.tag, u.src, u.msg);
                p.recv
            })
        });
        assert_eq!(m.unexpected_len(), n);
        assert_eq!(m.posted_len(), 0);

        // The same queue, a receive that ignores every tag bit: it takes
        // the oldest message. Putting it back at the tail rotates the
        // queue, which a wildcard does not notice.
        g.bench_with_input(BenchmarkId::new("unexpected, wildcard", n), &n, |b, _| {
            b.iter(|| {
                let (p, u) = m
                    .post(black_box(recv(0, u64::MAX)))
                    .expect("a wildcard receive matches any message");
                m.push_unexpected(u.tag, u.src, u.msg);
                p.recv
            })
        });
        assert_eq!(m.unexpected_len(), n);
        assert_eq!(m.posted_len(), 0);

        // N posted receives with tags 0..N and no unexpected message; a
        // message arrives that matches only the newest receive.
        let mut m: Matcher<u64, u64> = Matcher::new(false);
        for t in 0..n as u64 {
            assert!(m.post(recv(t, 0)).is_none());
        }
        g.bench_with_input(BenchmarkId::new("posted, match last", n), &n, |b, _| {
            b.iter(|| {
                let p = m
                    .arrive(black_box(last), FiAddr(0))
                    .expect("the newest posted receive matches");
                let ctx = p.recv;
                // Post it again (no unexpected message: it queues at the
                // tail, where it was).
                assert!(m.post(p).is_none());
                ctx
            })
        });
        assert_eq!(m.posted_len(), n);
        assert_eq!(m.unexpected_len(), 0);
    }
    g.finish();
}

/// Progress of a CQ with no transport behind it.
struct NoProgress;

impl Progress for NoProgress {
    fn progress(&self) -> Result<()> {
        Ok(())
    }
    fn wait_fds<'a>(&'a self, _f: &mut dyn FnMut(BorrowedFd<'a>)) {}
}

fn cq(format: CqFormat) -> Cq {
    Cq::new(
        &CqAttr {
            format,
            wait_obj: WaitObj::None,
            ..CqAttr::default()
        },
        Arc::new(NoProgress),
    )
    .expect("open a CQ")
}

fn cq_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("cq");
    let entry = CqEntry {
        context: 7,
        flags: CompletionFlags::TAGGED | CompletionFlags::RECV,
        len: 8,
        buf: 0,
        data: 0,
        tag: 0x1234,
    };
    for (name, format) in [
        ("write+read (context)", CqFormat::Context),
        ("write+read (tagged)", CqFormat::Tagged),
    ] {
        let q = cq(format);
        let mut out = [CqEntry::default()];
        g.bench_function(name, |b| {
            b.iter(|| {
                q.core().push(black_box(entry), FiAddr(3));
                let n = q.read(&mut out).expect("the completion just written");
                black_box(&out);
                n
            })
        });
        assert!(q.core().is_empty(), "every completion was read");
    }

    let q = cq(CqFormat::Tagged);
    let mut out = [CqEntry::default()];
    g.bench_function("read empty (again)", |b| {
        b.iter(|| {
            let e = q.read(black_box(&mut out)).expect_err("the CQ stays empty");
            e.kind() == ErrorKind::Again
        })
    });
    g.finish();
}

/// The `i`-th of distinct IPv4 addresses.
fn addr(i: usize) -> Address {
    let i = i as u32;
    Address::In(SocketAddrV4::new(
        Ipv4Addr::from(0x0a00_0000 | (i >> 8)),
        7471 + (i & 0xff) as u16,
    ))
}

fn av(c: &mut Criterion) {
    let mut g = c.benchmark_group("av");
    for n in [1usize, 1000] {
        let t = AvTable::new();
        for i in 0..n {
            t.insert(addr(i));
        }
        assert_eq!(t.len(), n);
        // The newest handle (all handles cost the same: an index).
        let h = FiAddr(n as u64 - 1);
        g.bench_with_input(BenchmarkId::new("lookup", n), &n, |b, _| {
            b.iter(|| t.lookup(black_box(h)).expect("the handle is in the table"))
        });
    }

    // A removed handle is never reused, so every insert adds a slot to the
    // table. Start a fresh table every CHUNK iterations (outside the
    // timing) so that memory stays bounded however many iterations
    // criterion asks for.
    const CHUNK: u64 = 4096;
    let a = addr(5000);
    g.bench_function("insert+remove (1000 entries)", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let k = left.min(CHUNK);
                let t = AvTable::new();
                for i in 0..1000 {
                    t.insert(addr(i));
                }
                let start = Instant::now();
                for _ in 0..k {
                    let h = t.insert(black_box(a.clone()));
                    t.remove(h).expect("the handle just inserted");
                }
                total += start.elapsed();
                assert_eq!(t.len(), 1000);
                left -= k;
            }
            total
        })
    });
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
    targets = tag_matching, cq_read, av
}
criterion_main!(benches);
