//! Connections on tokio (`AsyncListener`, `AsyncConnection`) over tcp on
//! loopback: accept and connect with private data, many tasks echoing on
//! one connection, refusals, and a peer's shutdown. The idle-CPU check of
//! a waiting listener is in `tokio_idle.rs` (its own process).

#![cfg(feature = "tokio")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use fabric::prelude::*;
use fabric::safe::{AsyncConnection, AsyncListener};

mod common;
use common::msg_domain;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("timed out")
}

#[test]
fn many_tasks_echo_over_connections_accepted_in_a_loop() {
    let Some(domain) = msg_domain() else { return };
    const CONNS: u64 = 3;
    const TASKS: u64 = 8;
    const ROUNDS: u64 = 10;
    runtime().block_on(within(async move {
        let listener = AsyncListener::bind(&domain).unwrap();
        assert!(listener.parks());
        let to = listener.name().unwrap();
        let server = tokio::spawn(async move {
            let mut served = Vec::new();
            for _ in 0..CONNS {
                let req = listener.next_request().await.unwrap();
                let n = u64::from(req.data()[0]);
                let conn: AsyncConnection = AsyncConnection::accept(req, b"ok").await.unwrap();
                // Echo each tagged message back with the response bit.
                served.push(tokio::spawn(async move {
                    let mut handles = Vec::new();
                    for _ in 0..TASKS {
                        let conn = conn.clone();
                        handles.push(tokio::spawn(async move {
                            for _ in 0..ROUNDS {
                                let got = conn
                                    .trecv(0, u32::MAX.into(), vec![0; 256])
                                    .await
                                    .unwrap()
                                    .check()
                                    .unwrap();
                                let (tag, len) = (got.tag(), got.transferred());
                                let mut b = got.into_buf().unwrap();
                                b.truncate(len);
                                conn.tsend(tag | 1 << 40, b).await.unwrap().check().unwrap();
                            }
                        }));
                    }
                    for h in handles {
                        h.await.unwrap();
                    }
                    conn.closed().await.unwrap();
                    n
                }));
            }
            let mut seen = Vec::new();
            for s in served {
                seen.push(s.await.unwrap());
            }
            seen.sort_unstable();
            seen
        });
        let mut clients = Vec::new();
        for c in 0..CONNS {
            let conn: AsyncConnection = AsyncConnection::connect_with(&domain, &to, &[c as u8])
                .await
                .unwrap();
            assert_eq!(conn.peer_data(), b"ok");
            let mut tasks = Vec::new();
            for t in 0..TASKS {
                let conn = conn.clone();
                tasks.push(tokio::spawn(async move {
                    for r in 0..ROUNDS {
                        let tag = (t << 8) | r;
                        let msg: Vec<u8> = (0..(1 + tag as usize % 200))
                            .map(|i| i as u8 ^ c as u8)
                            .collect();
                        let (echo, sent) = tokio::join!(
                            conn.trecv(tag | 1 << 40, 0, vec![0; 256]),
                            conn.tsend(tag, msg.clone()),
                        );
                        sent.unwrap().check().unwrap();
                        assert_eq!(echo.unwrap().check().unwrap().received(), Some(&msg[..]));
                    }
                }));
            }
            clients.push((conn, tasks));
        }
        for (conn, tasks) in clients {
            for t in tasks {
                t.await.unwrap();
            }
            conn.shutdown().unwrap();
            conn.closed().await.unwrap();
            assert!(conn.is_closed().unwrap());
        }
        assert_eq!(server.await.unwrap(), (0..CONNS).collect::<Vec<_>>());
    }));
}

#[test]
fn a_rejected_or_unanswered_request_fails_the_connect() {
    let Some(domain) = msg_domain() else { return };
    runtime().block_on(within(async move {
        let listener = AsyncListener::bind(&domain).unwrap();
        let to = listener.name().unwrap();
        let connect = |data: &'static [u8]| {
            let (domain, to) = (domain.clone(), to.clone());
            tokio::spawn(async move {
                AsyncConnection::<Vec<u8>>::connect_with(&domain, &to, data).await
            })
        };
        let connecting = connect(b"let me in");
        let req = listener.next_request().await.unwrap();
        assert_eq!(req.data(), b"let me in");
        req.reject(b"go away").unwrap();
        let e = connecting.await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnRefused, "{e}");
        assert!(e.to_string().contains("go away"), "{e}");
        // A request dropped unanswered is rejected.
        let connecting = connect(b"");
        drop(listener.next_request().await.unwrap());
        let e = connecting.await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnRefused, "{e}");
    }));
}

#[test]
fn the_peers_shutdown_ends_awaited_receives_and_resolves_closed() {
    let Some(domain) = msg_domain() else { return };
    runtime().block_on(within(async move {
        let listener = AsyncListener::bind(&domain).unwrap();
        let to = listener.name().unwrap();
        let (server, client) = tokio::join!(
            listener.accept::<Vec<u8>>(),
            AsyncConnection::<Vec<u8>>::connect(&domain, &to),
        );
        let (server, client) = (server.unwrap(), client.unwrap());
        assert_eq!(server.peer().unwrap(), client.name().unwrap());
        let waiting = {
            let server = server.clone();
            tokio::spawn(async move { server.recv(vec![0; 64]).await })
        };
        // Give the receive time to be posted (it fails either way: posted
        // and then failed, or refused on the closed connection).
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!server.is_closed().unwrap());
        drop(client);
        server.closed().await.unwrap();
        match waiting.await.unwrap() {
            Ok(done) => {
                assert!(!done.is_ok(), "a receive completed from a closed peer");
                assert_eq!(done.into_buf().map(|b| b.len()), Some(64));
            }
            Err(refused) => assert_eq!(refused.kind(), ErrorKind::Shutdown),
        }
        let refused = server.send(vec![1; 4]).await.unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Shutdown);
        assert_eq!(refused.into_buf(), Some(vec![1; 4]));
    }));
}
