//! An idle async endpoint costs no CPU: a task awaiting a receive that
//! does not come for 300 ms, and a listener awaiting a connection that
//! does not come, measured with the process's CPU time (one test, alone in
//! its process, so nothing else runs meanwhile).

#![cfg(feature = "tokio")]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use fabric::prelude::*;
use fabric::safe::{AsyncEndpoint, AsyncListener};

mod common;

/// User plus system CPU time of the process, from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // Clock ticks are 1/100 s on Linux (USER_HZ).
    Duration::from_millis(ticks * 10)
}

#[test]
fn idle_waits_use_no_cpu() {
    for prov in ["tcp", "shm"] {
        let mut h = Hints::new()
            .caps(Caps::MSG)
            .ep_type(EpType::Rdm)
            .provider(prov);
        if prov == "tcp" {
            h = h.node("127.0.0.1").source();
        }
        let Some(info) = h.getinfo().ok().and_then(|v| v.into_iter().next()) else {
            continue;
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let d = safe::Domain::open(&info).unwrap();
            let ep = AsyncEndpoint::new(d.endpoint().unwrap()).unwrap();
            assert!(ep.parks(), "{prov}: no wait fd to park on");
            let before = cpu_time();
            let r = tokio::time::timeout(Duration::from_millis(300), ep.recv(vec![0; 64])).await;
            let used = cpu_time() - before;
            assert!(r.is_err(), "{prov}: a receive completed with no sender");
            // A busy loop would use about 300 ms; the 2 ms polling window
            // and parking use a few.
            assert!(
                used < Duration::from_millis(100),
                "{prov}: {used:?} of CPU in 300 ms of waiting"
            );
            eprintln!("{prov}: {used:?} of CPU while awaiting a receive for 300 ms");
        });
    }
    // A listener waiting for connections (tcp: shm has no MSG endpoints).
    let Some(info) = common::tcp_info(EpType::Msg, Caps::MSG) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let d = safe::Domain::open(&info).unwrap();
        let listener = AsyncListener::bind(&d).unwrap();
        assert!(
            listener.parks(),
            "tcp: the listener has no wait fd to park on"
        );
        let before = cpu_time();
        let r = tokio::time::timeout(Duration::from_millis(300), listener.next_request()).await;
        let used = cpu_time() - before;
        assert!(r.is_err(), "a connection request with nobody connecting");
        // No polling window here: parked from the first empty read.
        assert!(
            used < Duration::from_millis(100),
            "tcp: {used:?} of CPU in 300 ms of listening"
        );
        eprintln!("tcp: {used:?} of CPU while a listener waited 300 ms");
    });
}
