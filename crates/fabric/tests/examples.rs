//! Runs every example of the crate and checks that it exits 0 (the
//! examples verify their own data and exit 1 on any mismatch).
//!
//! `cargo test` builds the examples with the tests; run alone
//! (`cargo test --test examples`), this test builds them itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The examples, and whether they take a provider argument.
const EXAMPLES: &[(&str, bool)] = &[
    ("info", false),
    ("rdm_pingpong", true),
    ("tagged_rpc", true),
    ("rma_read_write", true),
    ("tokio_echo", true),
];

/// Examples that need a feature of their own, and the feature.
const NEEDS: &[(&str, &str)] = &[("tokio_echo", "tokio")];

/// Whether this build has the features example `name` needs (tokio_echo
/// runs with `--features tokio`; CI builds the tests with all features).
fn built_with_needs(name: &str) -> bool {
    NEEDS
        .iter()
        .filter(|(n, _)| *n == name)
        .all(|(_, feature)| *feature == "tokio" && cfg!(feature = "tokio"))
}

/// The providers compiled in that the examples run on here.
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

/// Where cargo puts the examples: `target/<profile>/examples`, next to the
/// `deps` directory this test runs from.
fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples"))
        .unwrap()
}

/// The example's binary, built if `cargo test` did not build it.
fn binary(name: &str) -> PathBuf {
    let path = examples_dir().join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "fabric", "--example", name]);
        let mut features: Vec<&str> = providers();
        features.extend(NEEDS.iter().filter(|(n, _)| *n == name).map(|(_, f)| *f));
        cmd.arg("--no-default-features");
        if !features.is_empty() {
            cmd.args(["--features", &features.join(",")]);
        }
        let status = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "building example {name} failed");
    }
    path
}

fn run(name: &str, args: &[&str]) {
    let start = Instant::now();
    let out = Command::new(binary(name)).args(args).output().unwrap();
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "example {name} {args:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < Duration::from_secs(120),
        "example {name} {args:?} took {took:?}"
    );
}

#[test]
fn every_example_runs_and_verifies_its_data() {
    let provs = providers();
    for &(name, takes_provider) in EXAMPLES {
        if !built_with_needs(name) {
            eprintln!("skipping example {name}: built without its feature");
            continue;
        }
        if !takes_provider {
            run(name, &[]);
            continue;
        }
        for prov in &provs {
            run(name, &[prov]);
        }
    }
}

#[test]
fn the_list_names_every_example() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(
                EXAMPLES.iter().any(|(n, _)| *n == stem),
                "example {stem} is not run by this test"
            );
        }
    }
}
