//! `cargo xtask fuzz [SECONDS] [TARGET]...`: runs every fuzz target of
//! `fuzz/` (or those named) for SECONDS each (default 60) with cargo-fuzz
//! on the nightly toolchain, installing both when missing.
//!
//! Each target starts from its seeds (`fuzz/corpus/<target>/`), its
//! regressions (`fuzz/regressions/<target>/`) and what earlier runs found
//! (`fuzz/target/corpus/<target>/`, where new inputs go, so the committed
//! seeds stay as they are). libFuzzer's output goes to
//! `fuzz/target/logs/<target>.log`; a crash fails the run and names the
//! artifact that reproduces it, to be fixed and then copied into
//! `fuzz/regressions/<target>/`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Instant, SystemTime};

use crate::ci::root;
use crate::setup::{self, Need};

/// The longest a single input may take before libFuzzer calls it a hang.
const INPUT_TIMEOUT_SECS: u32 = 20;

pub(crate) fn main(args: &[String]) -> ExitCode {
    let mut secs = 60u32;
    let mut only: Vec<String> = Vec::new();
    for a in args {
        match a.parse::<u32>() {
            Ok(s) if s > 0 => secs = s,
            Err(_) if !a.starts_with('-') => only.push(a.clone()),
            _ => {
                eprintln!("usage: cargo xtask fuzz [SECONDS] [TARGET]...");
                return ExitCode::from(2);
            }
        }
    }
    match fuzz(secs, &only) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask fuzz: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cargo_fuzz() -> Command {
    let mut c = Command::new("cargo");
    c.args(["+nightly", "fuzz"]).current_dir(root());
    c
}

fn fuzz(secs: u32, only: &[String]) -> Result<(), String> {
    for need in [Need::Nightly, Need::CargoFuzz] {
        setup::ensure(need)?;
    }
    let out = cargo_fuzz()
        .args(["list", "--fuzz-dir", "fuzz"])
        .output()
        .map_err(|e| format!("cannot run cargo fuzz list: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo fuzz list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let all: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if let Some(unknown) = only.iter().find(|t| !all.contains(t)) {
        return Err(format!(
            "no fuzz target `{unknown}` (targets: {})",
            all.join(" ")
        ));
    }
    let targets: Vec<&String> = all
        .iter()
        .filter(|t| only.is_empty() || only.contains(t))
        .collect();
    if targets.is_empty() {
        return Err("cargo fuzz list names no targets".into());
    }

    let start = Instant::now();
    println!("==> fuzz: building {} targets", targets.len());
    let built = cargo_fuzz()
        .args(["build", "--fuzz-dir", "fuzz"])
        .status()
        .map_err(|e| format!("cannot run cargo fuzz build: {e}"))?;
    if !built.success() {
        return Err(format!("cargo fuzz build failed ({built})"));
    }
    println!("<== fuzz: built in {:.1} s", start.elapsed().as_secs_f64());

    let dir = root().join("fuzz");
    let logs = dir.join("target/logs");
    fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut crashed = Vec::new();
    for t in targets {
        let began = SystemTime::now();
        let t0 = Instant::now();
        let scratch = dir.join("target/corpus").join(t);
        fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        let mut corpora = vec![scratch];
        corpora.extend(
            ["corpus", "regressions"]
                .iter()
                .map(|d| dir.join(d).join(t))
                .filter(|p| p.is_dir()),
        );
        let log_path = logs.join(format!("{t}.log"));
        let log =
            fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let status = cargo_fuzz()
            .args(["run", "--fuzz-dir", "fuzz", t])
            .args(&corpora)
            .arg("--")
            .arg(format!("-max_total_time={secs}"))
            .arg(format!("-timeout={INPUT_TIMEOUT_SECS}"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .status()
            .map_err(|e| format!("cannot run cargo fuzz run {t}: {e}"))?;
        let text = fs::read_to_string(&log_path).unwrap_or_default();
        let secs_taken = t0.elapsed().as_secs_f64();
        if status.success() {
            let done = text
                .lines()
                .rev()
                .find(|l| l.starts_with("Done "))
                .unwrap_or("done");
            println!("<== fuzz {t}: {done} ({secs_taken:.1} s)");
            continue;
        }
        for l in what_failed(&text) {
            eprintln!("    {l}");
        }
        eprintln!("    (libFuzzer's output: {})", log_path.display());
        let found = artifacts(&dir.join("artifacts").join(t), began);
        let names = if found.is_empty() {
            format!("no artifact written; see {}", log_path.display())
        } else {
            found
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        eprintln!(
            "<== fuzz {t}: FAILED ({status}) after {secs_taken:.1} s: {names}\n    reproduce: cargo +nightly fuzz run --fuzz-dir fuzz {t} <artifact>; once fixed, copy it into fuzz/regressions/{t}/"
        );
        crashed.push(format!("{t} ({names})"));
    }
    if crashed.is_empty() {
        println!(
            "xtask fuzz: no crash in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        Ok(())
    } else {
        Err(format!("crashed: {}", crashed.join("; ")))
    }
}

/// The lines of a failed run's output that say what failed: the panic and
/// its message, libFuzzer's error and summary.
fn what_failed(log: &str) -> Vec<&str> {
    let lines: Vec<&str> = log.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.contains("panicked at") {
            out.extend(lines.iter().skip(i).take(3).copied());
        } else if l.contains("ERROR:") || l.starts_with("SUMMARY:") {
            out.push(*l);
        }
    }
    if out.is_empty() {
        out.extend(lines.iter().rev().take(20).rev().copied());
    }
    out
}

/// The files of `dir` written since `since` (crash-, leak-, timeout- and
/// oom- inputs).
fn artifacts(dir: &Path, since: SystemTime) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|m| m >= since)
        })
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}
