//! The `tokio` feature over real providers (tcp on loopback, shm):
//! ping-pong, many operations in flight from many tasks, RMA and atomics,
//! the completion stream, and futures dropped with their operation in
//! flight. The idle-CPU check is in `tokio_idle.rs` (its own process).

#![cfg(feature = "tokio")]
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use fabric::prelude::*;
use fabric::safe::AsyncEndpoint;

fn entry(prov: &str, caps: Caps) -> Option<Info> {
    let mut h = Hints::new().caps(caps).ep_type(EpType::Rdm).provider(prov);
    if prov == "tcp" {
        h = h.node("127.0.0.1").source();
    }
    h.getinfo().ok()?.into_iter().next()
}

fn providers(caps: Caps) -> Vec<Info> {
    let v: Vec<Info> = ["tcp", "shm"]
        .iter()
        .filter_map(|p| entry(p, caps))
        .collect();
    assert!(!v.is_empty(), "neither tcp nor shm offers {caps}");
    v
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Two async endpoints of one domain, and each one's handle for the other.
fn pair(info: &Info) -> (AsyncEndpoint, AsyncEndpoint, FiAddr, FiAddr) {
    let d = safe::Domain::open(info).unwrap();
    let a = AsyncEndpoint::new(d.endpoint().unwrap()).unwrap();
    let b = AsyncEndpoint::new(d.endpoint().unwrap()).unwrap();
    let b_at_a = a.insert(&b.name().unwrap()).unwrap();
    let a_at_b = b.insert(&a.name().unwrap()).unwrap();
    (a, b, b_at_a, a_at_b)
}

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("timed out")
}

#[test]
fn ping_pong_on_tcp_and_shm() {
    for info in providers(Caps::MSG) {
        let prov = info.prov_name().unwrap_or_default().to_string();
        runtime().block_on(within(async move {
            let (client, server, to_server, to_client) = pair(&info);
            let rounds = 300;
            let echo = tokio::spawn(async move {
                let mut buf = vec![0u8; 256];
                for _ in 0..rounds {
                    let got = server.recv(buf).await.unwrap().check().unwrap();
                    let n = got.transferred();
                    let mut back = got.into_buf().unwrap();
                    back.truncate(n);
                    let sent = server.send(to_client, back).await.unwrap();
                    buf = sent.check().unwrap().into_buf().unwrap();
                    buf.resize(256, 0);
                }
            });
            let mut rbuf = vec![0u8; 256];
            let t0 = std::time::Instant::now();
            for i in 0..rounds {
                let msg = vec![i as u8; 1 + i % 200];
                let (sent, got) = tokio::join!(client.send(to_server, msg.clone()), async {
                    client.recv(std::mem::take(&mut rbuf)).await
                });
                sent.unwrap().check().unwrap();
                let got = got.unwrap().check().unwrap();
                assert_eq!(got.received(), Some(&msg[..]), "{prov} round {i}");
                rbuf = got.into_buf().unwrap();
            }
            eprintln!("{prov}: {rounds} round trips in {:?}", t0.elapsed());
            echo.await.unwrap();
            assert_eq!(client.in_flight(), 0);
        }));
    }
}

#[test]
fn many_operations_in_flight_from_many_tasks() {
    for info in providers(Caps::MSG | Caps::TAGGED) {
        let prov = info.prov_name().unwrap_or_default().to_string();
        runtime().block_on(within(async move {
            let (client, server, to_server, to_client) = pair(&info);
            // The server echoes through the completion stream: a pool of
            // tagged receives for any tag, each echoed with its tag.
            let tasks = 64u64;
            let per_task = 8u64;
            let echoer = {
                let server = server.clone();
                tokio::spawn(async move {
                    let mut stream = server.completions();
                    for _ in 0..32 {
                        server.post_trecv(0, u64::MAX, vec![0; 64]).unwrap();
                    }
                    let mut echoed = 0;
                    while echoed < tasks * per_task {
                        // Every other completion through the `Stream` trait.
                        let c = if echoed % 2 == 0 {
                            stream.next().await.unwrap()
                        } else {
                            let next = std::future::poll_fn(|cx| {
                                futures_core::Stream::poll_next(std::pin::Pin::new(&mut stream), cx)
                            });
                            next.await.unwrap().unwrap()
                        };
                        let c = c.check().unwrap();
                        match c.kind() {
                            OpKind::TaggedRecv => {
                                let tag = c.tag();
                                let msg = c.received().unwrap().to_vec();
                                let mut sent = server.post_tsend(to_client, tag, msg);
                                while let Err(r) = sent {
                                    assert_eq!(r.kind(), ErrorKind::Again, "{r}");
                                    tokio::task::yield_now().await;
                                    sent = server.post_tsend(to_client, tag, r.into_buf().unwrap());
                                }
                                server
                                    .post_trecv(0, u64::MAX, c.into_buf().unwrap())
                                    .unwrap();
                            }
                            OpKind::TaggedSend => echoed += 1,
                            other => panic!("unexpected {other}"),
                        }
                    }
                })
            };
            let mut handles = Vec::new();
            for t in 0..tasks {
                let client = client.clone();
                handles.push(tokio::spawn(async move {
                    for k in 0..per_task {
                        let tag = (t << 16) | k;
                        let msg = tag.to_le_bytes().repeat(1 + (t % 4) as usize);
                        let (got, sent) = tokio::join!(
                            client.trecv(tag, 0, vec![0; 64]),
                            client.tsend(to_server, tag, msg.clone()),
                        );
                        sent.unwrap().check().unwrap();
                        let got = got.unwrap().check().unwrap();
                        assert_eq!(got.tag(), tag);
                        assert_eq!(got.received(), Some(&msg[..]));
                    }
                }));
            }
            for h in handles {
                h.await.unwrap();
            }
            echoer.await.unwrap();
            assert_eq!(client.in_flight(), 0, "{prov}");
        }));
    }
}

#[test]
fn rma_and_atomics() {
    for info in providers(Caps::MSG | Caps::RMA | Caps::ATOMIC) {
        let d = safe::Domain::open(&info).unwrap();
        runtime().block_on(within(async move {
            let target = AsyncEndpoint::new(d.endpoint().unwrap()).unwrap();
            let initiator = AsyncEndpoint::new(d.endpoint().unwrap()).unwrap();
            let peer = initiator.insert(&target.name().unwrap()).unwrap();
            let window = d
                .expose(
                    vec![0u8; 64],
                    MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
                )
                .unwrap();
            let region = window.region();
            // With manual progress the target moves only while read: a
            // receive that never comes keeps it polled.
            let keep = {
                let target = target.clone();
                tokio::spawn(async move { target.recv(vec![0; 8]).await })
            };
            initiator
                .write(peer, vec![5; 8], &region.slice(8..16).unwrap())
                .await
                .unwrap()
                .check()
                .unwrap();
            let back = initiator
                .read(peer, vec![0; 8], &region.slice(8..16).unwrap())
                .await
                .unwrap()
                .check()
                .unwrap();
            assert_eq!(back.received(), Some(&[5u8; 8][..]));
            let counter = region.slice(0..8).unwrap();
            for i in 0..10u64 {
                let c = initiator.fetch_add(peer, &counter, 1u64).await.unwrap();
                assert_eq!(c.check().unwrap().fetched::<u64>(), Some(i));
            }
            let c = initiator
                .compare_swap(peer, &counter, 10u64, 99)
                .await
                .unwrap();
            assert_eq!(c.check().unwrap().fetched::<u64>(), Some(10));
            keep.abort();
            let _ = keep.await;
            let bytes = window.revoke();
            assert_eq!(u64::from_ne_bytes(bytes[..8].try_into().unwrap()), 99);
        }));
    }
}

/// A buffer that records when it is dropped.
struct Tracked {
    bytes: Vec<u8>,
    dropped: Arc<AtomicBool>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

// SAFETY: the bytes are a Vec's, on the heap, and stay put while the value
// moves.
unsafe impl IoBuf for Tracked {
    fn stable_ptr(&self) -> *const u8 {
        self.bytes.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.bytes.len()
    }
}

// SAFETY: as for `IoBuf`.
unsafe impl IoBufMut for Tracked {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }
}

/// Polls `f` once and drops it.
async fn poll_once_and_drop<F: Future>(f: F) -> bool {
    let mut f = Box::pin(f);
    std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx).is_ready())).await
}

#[test]
fn a_dropped_future_leaves_its_buffer_to_the_driver_until_the_completion() {
    for info in providers(Caps::MSG) {
        let prov = info.prov_name().unwrap_or_default().to_string();
        runtime().block_on(within(async move {
            let d = safe::Domain::open(&info).unwrap();
            let a = AsyncEndpoint::<Tracked>::new(d.endpoint().unwrap()).unwrap();
            let b = AsyncEndpoint::<Tracked>::new(d.endpoint().unwrap()).unwrap();
            let to_b = a.insert(&b.name().unwrap()).unwrap();
            let tracked = |len: usize, fill: u8| {
                let dropped = Arc::new(AtomicBool::new(false));
                (
                    Tracked {
                        bytes: vec![fill; len],
                        dropped: dropped.clone(),
                    },
                    dropped,
                )
            };

            // A receive dropped in flight is cancelled; its buffer is kept
            // until the cancellation completes, then dropped.
            let (buf, recv_dropped) = tracked(64, 0);
            assert!(!poll_once_and_drop(b.recv(buf)).await);
            assert!(b.in_flight() == 0 || !recv_dropped.load(Ordering::SeqCst));

            // A large send dropped in flight keeps running: the buffer
            // stays alive while it is in flight.
            let (buf, send_dropped) = tracked(1 << 20, 7);
            assert!(!poll_once_and_drop(a.send(to_b, buf)).await);
            assert!(a.in_flight() == 0 || !send_dropped.load(Ordering::SeqCst));

            // The message still arrives, whole, in a later receive (the
            // cancelled one took nothing).
            let (buf, _) = tracked(1 << 20, 0);
            let keep_a = {
                let a = a.clone();
                let (buf, _) = tracked(8, 0);
                tokio::spawn(async move { a.recv(buf).await.map(drop) })
            };
            let got = b.recv(buf).await.unwrap().check().unwrap();
            assert_eq!(got.transferred(), 1 << 20, "{prov}");
            assert!(got.buf().unwrap().bytes.iter().all(|&x| x == 7));
            keep_a.abort();
            let _ = keep_a.await;
            // Reading completions (any future does) delivers the dropped
            // operations' completions, which drop their buffers.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while a.in_flight() + b.in_flight() > 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{prov}: still in flight: {} and {}",
                    a.in_flight(),
                    b.in_flight()
                );
                // Awaiting the (empty) completion stream reads the queues
                // without posting anything.
                let _ =
                    tokio::time::timeout(Duration::from_millis(5), a.completions().next()).await;
                let _ =
                    tokio::time::timeout(Duration::from_millis(5), b.completions().next()).await;
            }
            assert!(
                recv_dropped.load(Ordering::SeqCst),
                "{prov}: receive buffer kept"
            );
            assert!(
                send_dropped.load(Ordering::SeqCst),
                "{prov}: send buffer kept"
            );
        }));
    }
}

#[test]
fn a_current_thread_runtime_drives_both_ends_of_a_pair() {
    for info in providers(Caps::MSG | Caps::TAGGED) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(within(async move {
            let (a, b, to_b, _) = pair(&info);
            for i in 0..100u64 {
                let (got, sent) = tokio::join!(
                    b.trecv(i, 0, vec![0; 8]),
                    a.tsend(to_b, i, i.to_le_bytes().to_vec())
                );
                sent.unwrap().check().unwrap();
                assert_eq!(
                    got.unwrap().check().unwrap().received(),
                    Some(&i.to_le_bytes()[..])
                );
            }
        }));
    }
}

#[test]
fn the_driver_role_passes_on_when_futures_finish_or_are_dropped() {
    for info in providers(Caps::MSG | Caps::TAGGED) {
        runtime().block_on(within(async move {
            let (a, b, to_b, _) = pair(&info);
            // The first waiter drives b; it gives up after 20 ms, parked,
            // and the others must take over.
            let quitter = {
                let b = b.clone();
                tokio::spawn(async move {
                    tokio::time::timeout(Duration::from_millis(20), b.trecv(999, 0, vec![0; 8]))
                        .await
                        .is_err()
                })
            };
            tokio::time::sleep(Duration::from_millis(5)).await;
            let mut waiters = Vec::new();
            for i in 0..16u64 {
                let b = b.clone();
                waiters.push(tokio::spawn(async move {
                    let c = b.trecv(i, 0, vec![0; 8]).await.unwrap().check().unwrap();
                    assert_eq!(c.received(), Some(&i.to_le_bytes()[..]));
                }));
            }
            assert!(quitter.await.unwrap(), "the quitter's receive completed");
            // Well after every waiter parked: one message at a time, each
            // completing one waiter, whose driver must then hand over.
            tokio::time::sleep(Duration::from_millis(20)).await;
            for i in 0..16u64 {
                a.tsend(to_b, i, i.to_le_bytes().to_vec())
                    .await
                    .unwrap()
                    .check()
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            for w in waiters {
                w.await.unwrap();
            }
        }));
    }
}

#[test]
fn drain_cancels_receives_and_waits_for_what_is_in_flight() {
    for info in providers(Caps::MSG | Caps::TAGGED) {
        let prov = info.prov_name().unwrap_or_default().to_string();
        runtime().block_on(within(async move {
            let (a, b, to_b, _) = pair(&info);
            // Receives posted for the stream and awaited by futures, and
            // sends in flight.
            for _ in 0..8 {
                b.post_recv(vec![0; 64]).unwrap();
            }
            let waiting = {
                let b = b.clone();
                tokio::spawn(async move { b.trecv(1, 0, vec![0; 64]).await })
            };
            // The tagged receive is posted on the task's first poll: wait
            // for it (a worker may be late on a loaded machine), so that
            // the drain below finds it posted.
            let posted = std::time::Instant::now();
            while b.in_flight() < 9 {
                assert!(
                    posted.elapsed() < Duration::from_secs(10),
                    "{prov}: the tagged receive was not posted"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            for i in 0..4u8 {
                a.post_send(to_b, vec![i; 16]).unwrap();
            }
            // b's receives are cancelled (or took a message first); a's
            // sends complete.
            let (da, db) = tokio::join!(a.drain(), b.drain());
            da.unwrap();
            db.unwrap();
            assert_eq!((a.in_flight(), b.in_flight()), (0, 0), "{prov}");
            let r = waiting.await.unwrap().unwrap();
            assert_eq!(
                r.error().map(|e| e.kind()),
                Some(ErrorKind::Canceled),
                "{prov}"
            );
            let mut stream = b.completions();
            let mut got = 0;
            let mut cancelled = 0;
            for _ in 0..8 {
                let c = stream.next().await.unwrap();
                match c.error().map(|e| e.kind()) {
                    None => got += 1,
                    Some(ErrorKind::Canceled) => cancelled += 1,
                    Some(other) => panic!("{prov}: {other:?}"),
                }
            }
            assert_eq!(got + cancelled, 8, "{prov}");
            assert!(
                cancelled >= 4,
                "{prov}: only {cancelled} receives cancelled"
            );
            let mut sent = a.completions();
            for _ in 0..4 {
                let c = sent.next().await.unwrap();
                assert_eq!(c.kind(), OpKind::Send);
                c.check().unwrap();
            }
        }));
    }
}
