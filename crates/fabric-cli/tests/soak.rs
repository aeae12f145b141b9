//! `fabric soak`: a short soak on each provider compiled in, and a soak
//! whose server or client is killed: the survivor fails soon and says so,
//! instead of hanging. (`cargo xtask soak` runs the long one.)

#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The providers compiled in.
fn providers() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "tcp") {
        v.push("tcp");
    }
    if cfg!(feature = "shm") {
        v.push("shm");
    }
    v
}

fn fabric(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fabric"));
    cmd.args(args).env_remove("FI_PROVIDER");
    cmd
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn a_short_soak_checks_every_message_on_every_provider() {
    for p in providers() {
        let out = fabric(&["soak", "--self", "-p", p, "-n", "4000", "-j", "3"])
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{p}: {}\n{stdout}", text(&out.stderr));
        assert!(
            stdout.contains(&format!("soak {p}: 4000 messages"))
                && stdout.contains("no loss, no duplicate, every byte verified"),
            "{p}: {stdout}"
        );
        // The server's line: every endpoint's share arrived.
        assert!(stdout.contains("(1334 1333 1333)"), "{p}: {stdout}");
    }
}

/// A free TCP port for the control connection.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether a connection to loopback port `port` is established (an entry
/// of `/proc/net/tcp` in state 01 whose local or remote end is
/// 127.0.0.1:`port`).
fn control_connected(port: &str) -> bool {
    let Ok(port) = port.parse::<u16>() else {
        return false;
    };
    let end = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| {
        t.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[3] == "01" && (f[1] == end || f[2] == end)
        })
    })
}

/// Waits for `child` to end, at most `limit`; its output and how long
/// it took, or `None` (then it is killed).
fn wait_for(mut child: Child, limit: Duration) -> Option<(Output, Duration)> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            return Some((child.wait_with_output().unwrap(), t.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A server and a client of a soak too long to finish, running for a
/// moment; then `victim` (server or client) is killed. The other must
/// fail within a few seconds (its operations end in error completions
/// within 1 s; the rest is process teardown), naming the failure.
fn kill_mid_soak(p: &str, kill_server: bool) {
    let port = free_port().to_string();
    let spawn = |args: &[&str]| {
        fabric(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut server = spawn(&["soak", "-p", p, "-B", &port]);
    let mut client = spawn(&["soak", "-p", p, "-P", &port, "-n", "100000000", "127.0.0.1"]);
    // The sides have met once their control connection is up (a loaded
    // machine may take a while to start them); then the soak runs for a
    // moment.
    let started = Instant::now();
    while !control_connected(&port) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{p}: the client did not connect to the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    for c in [&mut server, &mut client] {
        assert!(
            c.try_wait().unwrap().is_none(),
            "{p}: a side ended before the kill"
        );
    }
    let (mut victim, survivor) = if kill_server {
        (server, client)
    } else {
        (client, server)
    };
    victim.kill().unwrap();
    let _ = victim.wait();
    let who = if kill_server { "client" } else { "server" };
    let Some((out, took)) = wait_for(survivor, Duration::from_secs(5)) else {
        panic!("{p}: the {who} still runs 5 s after its peer was killed");
    };
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{p}: the {who} succeeded: {err}");
    assert!(
        err.contains("fabric soak: FI_E"),
        "{p}: the {who} said: {err}"
    );
    eprintln!(
        "{p}: the {who} failed {took:.1?} after the kill: {}",
        err.trim()
    );
}

#[test]
fn killing_the_soak_server_fails_the_client_soon() {
    for p in providers() {
        kill_mid_soak(p, true);
    }
}

#[test]
fn killing_the_soak_client_fails_the_server_soon() {
    for p in providers() {
        kill_mid_soak(p, false);
    }
}
