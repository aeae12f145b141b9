//! Replays the seed corpora (`corpus/<target>/`) and the inputs that once
//! crashed a target (`regressions/<target>/`, see its README) through the
//! targets' bodies, so that `cargo test --manifest-path fuzz/Cargo.toml`
//! (stable, no sanitizer) keeps every found crash fixed.

use std::collections::BTreeSet;
use std::panic::catch_unwind;
use std::path::{Path, PathBuf};

use fabric_fuzz::TARGETS;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The entries of `dir` (none when it does not exist), sorted.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd.map(|e| e.expect("read_dir entry").path()).collect();
    v.sort();
    v
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Runs every file of `dir/<target>/` through its target; returns how many
/// ran and the ones that panicked.
fn replay(dir: &str) -> (usize, Vec<String>) {
    let base = root().join(dir);
    let known: BTreeSet<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
    for e in entries(&base) {
        if e.is_dir() {
            assert!(
                known.contains(name(&e).as_str()),
                "{} names no fuzz target (known: {known:?})",
                e.display()
            );
        }
    }
    let mut ran = 0;
    let mut failed = Vec::new();
    for (target, body) in TARGETS {
        for file in entries(&base.join(target)) {
            let data = std::fs::read(&file).expect("read an input");
            ran += 1;
            if catch_unwind(|| body(&data)).is_err() {
                failed.push(format!("{dir}/{target}/{}", name(&file)));
            }
        }
    }
    (ran, failed)
}

#[test]
fn regressions_stay_fixed() {
    let (ran, failed) = replay("regressions");
    println!("replayed {ran} regression inputs");
    assert!(failed.is_empty(), "crash again: {failed:?}");
}

#[test]
fn seed_corpora_pass() {
    let (ran, failed) = replay("corpus");
    println!("replayed {ran} seed inputs");
    assert!(
        ran > 0,
        "no seed corpus under {}",
        root().join("corpus").display()
    );
    assert!(failed.is_empty(), "seeds that fail: {failed:?}");
}

#[test]
fn every_target_file_is_listed() {
    let files: BTreeSet<String> = entries(&root().join("fuzz_targets"))
        .iter()
        .filter_map(|p| name(p).strip_suffix(".rs").map(str::to_string))
        .collect();
    let listed: BTreeSet<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(files, listed, "fuzz_targets/*.rs and fabric_fuzz::TARGETS");
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    for n in &listed {
        assert!(
            manifest.contains(&format!("name = \"{n}\"")),
            "Cargo.toml has no [[bin]] for {n}"
        );
    }
}
