//! Debian's unmodified `fi_pingpong` (libfabric-bin, built against
//! libfabric 1.17) runs server and client on this library: RDM endpoints
//! over tcp and shm, and MSG endpoints over tcp (passive endpoint, EQ,
//! fi_listen / fi_connect / fi_accept, fi_eq_sread of fi_eq_cm_entry),
//! message and tagged transfers, every size of `-S all` (1 B to several
//! MiB) with data checks (`-c`).
//!
//! Each case starts the server and the client as two processes on
//! loopback with a free control port and `LD_LIBRARY_PATH` pointing at a
//! [`common::Stage`]; both must exit 0 within a generous timeout (on
//! timeout both are killed and the test fails). That the processes run
//! on this library, not on an installed libfabric, is read from the
//! server's `/proc/<pid>/maps` while it runs.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FI_PINGPONG: &str = "/usr/bin/fi_pingpong";
/// The longest a case may take (both processes).
const TIMEOUT: Duration = Duration::from_secs(180);

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local address").port()
}

/// Whether something listens on 127.0.0.1 / any address at `port`
/// (`/proc/net/tcp`, state 0A).
fn listening(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let needle = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        cols.len() > 3 && cols[1].ends_with(&needle) && cols[3] == "0A"
    })
}

/// The shared objects a process maps.
fn maps(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default()
}

fn spawn(stage: &Path, args: &[&str]) -> Child {
    Command::new(FI_PINGPONG)
        .args(args)
        .env("LD_LIBRARY_PATH", stage)
        .env_remove("FI_PROVIDER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fi_pingpong")
}

/// Waits for `child` until `deadline`; kills it and returns `None` then.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        if let Some(s) = child.try_wait().expect("wait for fi_pingpong") {
            return Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn output(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(o) = child.stdout.as_mut() {
        let _ = o.read_to_string(&mut s);
    }
    if let Some(e) = child.stderr.as_mut() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Runs one server / client pair with `args` (plus the ports) and checks
/// both succeed on this library.
fn pingpong(test: &str, args: &[&str]) {
    if !Path::new(FI_PINGPONG).exists() {
        common::skip(
            test,
            "no /usr/bin/fi_pingpong (apt-get install libfabric-bin)",
        );
        return;
    }
    let Some(stage) = common::Stage::new(test, false) else {
        return;
    };
    let port = free_port().to_string();
    let deadline = Instant::now() + TIMEOUT;

    let mut server_args = args.to_vec();
    server_args.extend(["-B", &port]);
    let mut server = spawn(&stage.dir, &server_args);
    // The server listens on its control port once its fabric is open.
    let mut ours = false;
    while !listening(port.parse().expect("port")) {
        if server.try_wait().expect("server state").is_some() || Instant::now() > deadline {
            let _ = server.kill();
            let _ = server.wait();
            panic!(
                "{test}: the server never listened:\n{}",
                output(&mut server)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let m = maps(server.id());
    if m.contains("libfabric_capi.so") && !m.contains("x86_64-linux-gnu/libfabric.so") {
        ours = true;
    }

    let mut client_args = args.to_vec();
    client_args.extend(["-P", &port, "127.0.0.1"]);
    let mut client = spawn(&stage.dir, &client_args);
    let c = wait_until(&mut client, deadline);
    let s = wait_until(&mut server, deadline);
    let (c_out, s_out) = (output(&mut client), output(&mut server));
    let report = format!(
        "fi_pingpong {}\n--- server ({s:?}):\n{s_out}\n--- client ({c:?}):\n{c_out}",
        args.join(" ")
    );
    assert!(c.is_some() && s.is_some(), "{test}: timed out\n{report}");
    assert!(
        c.is_some_and(|c| c.success()) && s.is_some_and(|s| s.success()),
        "{test}: failed\n{report}"
    );
    assert!(
        ours,
        "{test}: the server did not map this library:\n{m}\n{report}"
    );
    // Every size of `-S all` was exchanged, up to 1 MiB and beyond.
    for out in [&c_out, &s_out] {
        for size in ["\n1 ", "\n64k ", "\n1m "] {
            assert!(out.contains(size), "{test}: no line for {size:?}\n{report}");
        }
    }
}

#[test]
fn tcp_rdm_msg() {
    pingpong(
        "fi_pingpong_tcp_rdm_msg",
        &["-p", "tcp", "-e", "rdm", "-c", "-S", "all"],
    );
}

#[test]
fn tcp_rdm_tagged() {
    pingpong(
        "fi_pingpong_tcp_rdm_tagged",
        &["-p", "tcp", "-e", "rdm", "-m", "tagged", "-c", "-S", "all"],
    );
}

#[test]
fn shm_rdm_msg() {
    pingpong(
        "fi_pingpong_shm_rdm_msg",
        &["-p", "shm", "-e", "rdm", "-c", "-S", "all"],
    );
}

#[test]
fn shm_rdm_tagged() {
    pingpong(
        "fi_pingpong_shm_rdm_tagged",
        &["-p", "shm", "-e", "rdm", "-m", "tagged", "-c", "-S", "all"],
    );
}

#[test]
fn tcp_msg_msg() {
    pingpong(
        "fi_pingpong_tcp_msg_msg",
        &["-p", "tcp", "-e", "msg", "-c", "-S", "all"],
    );
}

#[test]
fn tcp_msg_tagged() {
    pingpong(
        "fi_pingpong_tcp_msg_tagged",
        &["-p", "tcp", "-e", "msg", "-m", "tagged", "-c", "-S", "all"],
    );
}
