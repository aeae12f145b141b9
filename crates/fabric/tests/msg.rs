//! Connected (MSG) endpoints in the safe layer: listen / connect / accept,
//! data both ways with owned buffers, refusals, a peer's shutdown and
//! what a drop does. The server side runs in a thread of its own (manual
//! progress: each side drives its own connection).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fabric::prelude::*;
use fabric::safe::{Connection, Listener};

mod common;
use common::{msg_domain, tcp_info};

/// The longest any step may take before the test fails instead of hanging.
const LONG: Duration = Duration::from_secs(30);

/// A connected pair: (server side, client side).
fn pair(domain: &safe::Domain) -> (Connection, Connection) {
    let listener = domain.listen().unwrap();
    let to = listener.name().unwrap();
    let accepting = std::thread::spawn(move || listener.accept::<Vec<u8>>().unwrap());
    let client = domain.connect(&to).unwrap().wait_timeout(LONG).unwrap();
    (accepting.join().unwrap(), client)
}

#[test]
fn connect_accept_with_private_data_both_ways() {
    let Some(domain) = msg_domain() else { return };
    let listener = domain.listen().unwrap();
    let to = listener.name().unwrap();
    let server = std::thread::spawn(move || {
        let req = listener.next_request_timeout(LONG).unwrap();
        assert_eq!(req.data(), b"hello from the client");
        let conn: Connection = req.accept_with(b"welcome").unwrap();
        (conn.name().unwrap(), conn.peer().unwrap())
    });
    let client: Connection = domain
        .connect_with(&to, b"hello from the client")
        .unwrap()
        .wait_timeout(LONG)
        .unwrap();
    assert_eq!(client.peer_data(), b"welcome");
    assert_eq!(
        client.peer().unwrap(),
        to,
        "the client's peer is the listener"
    );
    let (server_name, server_peer) = server.join().unwrap();
    assert_eq!(server_peer, client.name().unwrap());
    assert!(!server_name.to_string().is_empty());
}

#[test]
fn echo_with_owned_buffers_messages_and_tagged() {
    let Some(domain) = msg_domain() else { return };
    let (mut server, mut client) = pair(&domain);
    const ROUNDS: u64 = 50;
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        for i in 0..ROUNDS {
            // Untagged request, tagged reply.
            let r = server.recv(buf).unwrap();
            let got = server.wait_for_timeout(r, LONG).unwrap().check().unwrap();
            let len = got.transferred();
            let mut b = got.into_buf().unwrap();
            b.truncate(len);
            let s = server.tsend(i, b).unwrap();
            buf = server
                .wait_for_timeout(s, LONG)
                .unwrap()
                .check()
                .unwrap()
                .into_buf()
                .unwrap();
            buf.resize(4096, 0);
        }
        server
    });
    for i in 0..ROUNDS {
        let msg: Vec<u8> = (0..(1 + i as usize * 61))
            .map(|j| (i as u8) ^ (j as u8))
            .collect();
        let r = client.trecv(i, 0, vec![0; 4096]).unwrap();
        let s = client.send(msg.clone()).unwrap();
        let sent = client.wait_for_timeout(s, LONG).unwrap().check().unwrap();
        assert_eq!(
            sent.into_buf().unwrap(),
            msg,
            "the send's buffer comes back"
        );
        let got = client.wait_for_timeout(r, LONG).unwrap().check().unwrap();
        assert_eq!(got.tag(), i);
        assert_eq!(got.received(), Some(&msg[..]));
    }
    // Small messages copied at once.
    let r = client.recv(vec![0; 16]).unwrap();
    let mut server = echo.join().unwrap();
    server.inject(b"bye").unwrap();
    let got = client.wait_for_timeout(r, LONG).unwrap().check().unwrap();
    assert_eq!(got.received(), Some(&b"bye"[..]));
    // Connected endpoints have no address vector.
    assert_eq!(server.in_flight(), 0);
}

#[test]
fn a_rejected_request_fails_the_connect_with_the_reason() {
    let Some(domain) = msg_domain() else { return };
    let listener = domain.listen().unwrap();
    let to = listener.name().unwrap();
    let server = std::thread::spawn(move || {
        let req = listener.next_request_timeout(LONG).unwrap();
        assert_eq!(req.data(), b"let me in");
        req.reject(b"go away").unwrap();
        // A request dropped unanswered is rejected too.
        drop(listener.next_request_timeout(LONG).unwrap());
    });
    let e = domain
        .connect_with::<Vec<u8>>(&to, b"let me in")
        .unwrap()
        .wait_timeout(LONG)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnRefused, "{e}");
    assert!(e.to_string().contains("go away"), "{e}");
    let e = domain
        .connect::<Vec<u8>>(&to)
        .unwrap()
        .wait_timeout(LONG)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnRefused, "{e}");
    server.join().unwrap();
}

#[test]
fn connecting_where_nobody_listens_is_refused() {
    let Some(domain) = msg_domain() else { return };
    // A port nobody listens on: bind one, learn its number, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let to: Address = format!("fi_sockaddr_in://127.0.0.1:{port}")
        .parse()
        .unwrap();
    let e = domain
        .connect::<Vec<u8>>(&to)
        .unwrap()
        .wait_timeout(LONG)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnRefused, "{e}");
}

#[test]
fn the_peers_shutdown_is_seen_and_fails_what_is_in_flight() {
    let Some(domain) = msg_domain() else { return };
    let (mut server, mut client) = pair(&domain);
    let r = server.recv(vec![0; 64]).unwrap();
    assert!(!server.peer_closed().unwrap());
    client.shutdown().unwrap();
    client.wait_closed(Some(LONG)).unwrap();
    server.wait_closed(Some(LONG)).unwrap();
    assert!(server.peer_closed().unwrap());
    // The posted receive fails, with its buffer handed back.
    let done = server.wait_for_timeout(r, LONG).unwrap();
    assert!(!done.is_ok(), "a receive completed on a closed connection");
    assert_eq!(done.into_buf().map(|b| b.len()), Some(64));
    // New operations are refused, handing their buffers back.
    let refused = server.send(vec![1; 8]).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Shutdown);
    assert_eq!(refused.into_buf(), Some(vec![1; 8]));
    assert_eq!(client.inject(b"x").unwrap_err().kind(), ErrorKind::Shutdown);
}

#[test]
fn dropping_a_connection_closes_it_for_the_peer() {
    let Some(domain) = msg_domain() else { return };
    let (mut server, mut client) = pair(&domain);
    // A receive in flight: the drop cancels it and returns (no hang, no
    // leak warning needed).
    client.recv(vec![0; 64]).unwrap();
    client.set_drain_timeout(LONG);
    drop(client);
    let r = server.recv(vec![0; 64]).unwrap();
    server.wait_closed(Some(LONG)).unwrap();
    let done = server.wait_for_timeout(r, LONG).unwrap();
    assert!(!done.is_ok(), "a receive completed from a dropped peer");
    // The listener outlived by its connection, and a connection outliving
    // its domain handle, are fine too.
    drop(domain);
    assert!(server.peer_closed().unwrap());
}

#[test]
fn the_endpoint_kinds_are_kept_apart() {
    let Some(domain) = msg_domain() else { return };
    let e = domain.endpoint::<Vec<u8>>().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpNotSupp);
    assert!(e.to_string().contains("Domain::listen"), "{e}");
    let Some(rdm) = tcp_info(EpType::Rdm, Caps::MSG) else {
        return;
    };
    let rdm = safe::Domain::open(&rdm).unwrap();
    let e: fabric::Error = rdm.listen().map(|_: Listener| ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{e}");
    let e = rdm
        .connect::<Vec<u8>>(&"fi_sockaddr_in://127.0.0.1:1".parse().unwrap())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{e}");
}
