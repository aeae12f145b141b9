//! `fabric pingpong` and `fabric bw` between two processes (`--self`), with
//! every byte verified, for each provider compiled in.

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn fabric(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `fabric` with `args`, which must succeed (`what` names the run
/// in a failure), and returns its JSON rows and its standard output.
fn json_rows(args: &[&str], what: &str) -> (Vec<serde_json::Value>, String) {
    let out = fabric(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (rows, stdout)
}

/// The providers compiled in that offer an RDM endpoint on this machine
/// (verbs lists none without an RDMA device; the rxe rig tests it).
fn providers() -> Vec<String> {
    providers_with("FI_EP_RDM")
}

/// The providers compiled in that offer endpoints of type `ep_type` here.
fn providers_with(ep_type: &str) -> Vec<String> {
    let out = fabric(&["info", "-l"]);
    let all: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(':').map(str::to_string))
        .collect();
    assert!(!all.is_empty(), "fabric info -l lists no provider");
    all.into_iter()
        .filter(|p| {
            let usable = fabric(&["info", "-p", p, "-t", ep_type]).status.success();
            if !usable {
                eprintln!("skipping {p}: it offers no {ep_type} endpoint on this machine");
            }
            usable
        })
        .collect()
}

#[test]
fn pingpong_self_verifies_every_provider() {
    for p in providers() {
        for mode in ["msg", "tagged"] {
            // Both processes print every size: 24 sizes each.
            let (rows, stdout) = json_rows(
                &[
                    "pingpong", "--self", "-p", &p, "-m", mode, "-S", "all", "-I", "20", "-v",
                    "--json",
                ],
                &format!("{p} {mode}"),
            );
            assert_eq!(rows.len(), 48, "{p} {mode}: {stdout}");
            for r in &rows {
                assert_eq!(r["provider"], p.as_str());
                assert_eq!(r["verified"], true);
                assert!(r["usec_per_xfer"].as_f64().unwrap() > 0.0);
            }
        }
    }
}

/// `--late-recv` (one receive posted at a time, the next once a message
/// came, as fi_pingpong) moves and verifies every size too, both modes.
#[test]
fn pingpong_late_recv_verifies_every_provider() {
    for p in providers() {
        for mode in ["msg", "tagged"] {
            let (rows, stdout) = json_rows(
                &[
                    "pingpong",
                    "--self",
                    "--late-recv",
                    "-p",
                    &p,
                    "-m",
                    mode,
                    "-S",
                    "all",
                    "-I",
                    "20",
                    "-v",
                    "--json",
                ],
                &format!("{p} {mode} --late-recv"),
            );
            assert_eq!(rows.len(), 48, "{p} {mode} --late-recv: {stdout}");
            for r in &rows {
                assert_eq!(r["provider"], p.as_str());
                assert_eq!(r["verified"], true);
            }
        }
    }
}

#[test]
fn pingpong_self_verifies_msg_endpoints() {
    let msg = providers_with("FI_EP_MSG");
    if cfg!(feature = "tcp") {
        assert!(msg.iter().any(|p| p == "tcp"), "tcp offers MSG: {msg:?}");
    }
    for p in msg {
        let (rows, stdout) = json_rows(
            &[
                "pingpong", "--self", "-p", &p, "-e", "msg", "-S", "all", "-I", "20", "-v",
                "--json",
            ],
            &format!("{p} msg endpoints"),
        );
        assert_eq!(rows.len(), 48, "{p} msg endpoints: {stdout}");
        for r in &rows {
            assert_eq!(r["provider"], p.as_str());
            assert_eq!(r["ep_type"], "FI_EP_MSG");
            assert_eq!(r["verified"], true);
        }
    }
}

#[test]
fn bw_self_verifies_every_provider() {
    for p in providers() {
        for op in ["send", "tagged"] {
            let (rows, stdout) = json_rows(
                &[
                    "bw", "--self", "-p", &p, "-o", op, "-S", "65536", "-I", "10", "-W", "8", "-v",
                    "--json",
                ],
                &format!("{p} {op}"),
            );
            assert_eq!(rows.len(), 2, "{p} {op}: {stdout}");
            assert!(
                rows.iter()
                    .all(|r| r["verified"] == true && r["transfers"] == 80)
            );
        }
    }
}

/// Buffers 16 bytes past a page boundary (and 4080, its mirror) put the
/// copies in and out of shm's page-aligned bounce buffers and ring slots
/// at the distances where the CPU's string copy is not used: every byte
/// must still arrive, at every size and in a window.
#[test]
fn buffers_off_the_page_boundary_carry_every_byte() {
    for p in providers() {
        for off in ["16", "4080"] {
            let (rows, stdout) = json_rows(
                &[
                    "pingpong",
                    "--self",
                    "-p",
                    &p,
                    "-S",
                    "1:262144",
                    "-I",
                    "5",
                    "-v",
                    "--json",
                    "--buf-offset",
                    off,
                ],
                &format!("{p} pingpong at offset {off}"),
            );
            // Both sides print a row per size: 19 sizes from 1 B to 256 KiB.
            assert_eq!(rows.len(), 38, "{p} pingpong at offset {off}: {stdout}");
            assert!(rows.iter().all(|r| r["verified"] == true), "{stdout}");
            let (rows, stdout) = json_rows(
                &[
                    "bw",
                    "--self",
                    "-p",
                    &p,
                    "-S",
                    "65536",
                    "-I",
                    "10",
                    "-W",
                    "8",
                    "-v",
                    "--json",
                    "--buf-offset",
                    off,
                ],
                &format!("{p} bw at offset {off}"),
            );
            assert!(rows.iter().all(|r| r["verified"] == true), "{stdout}");
        }
    }
}

#[test]
fn unsupported_operations_fail_cleanly() {
    // A provider without RMA says so through getinfo; no hang, exit 1.
    let out = fabric(&["bw", "--self", "-p", "nosuch", "-S", "1", "-I", "1"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("FI_ENODATA"));
}
