//! `cargo xtask soak [--short] [-n MESSAGES] [-p PROVIDER]...`: builds the
//! `fabric` tool in release and runs `fabric soak --self` on each provider
//! (tcp and shm by default): 1,000,000 messages of mixed sizes from four
//! endpoints to one, every message checked once (`--short`: 50,000, for
//! CI). Fails when a run fails or a provider cannot run.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

/// Messages of a full run.
const FULL: u64 = 1_000_000;
/// Messages of a `--short` run.
const SHORT: u64 = 50_000;

/// What to run.
#[derive(Debug, PartialEq, Eq)]
struct Opts {
    messages: u64,
    providers: Vec<String>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        messages: FULL,
        providers: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--short" => o.messages = SHORT,
            "-n" | "--messages" => {
                o.messages = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("-n needs a count of messages above 0")?;
            }
            "-p" | "--provider" => o
                .providers
                .push(it.next().ok_or("-p needs a provider name")?.clone()),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    if o.providers.is_empty() {
        o.providers = vec!["tcp".into(), "shm".into()];
    }
    Ok(o)
}

/// Runs the soak; the entry of `cargo xtask soak`.
pub(crate) fn soak(args: &[String]) -> ExitCode {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "xtask soak: {e}\nusage: cargo xtask soak [--short] [-n MESSAGES] [-p PROVIDER]..."
            );
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask soak: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> Result<(), String> {
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .map(|d| PathBuf::from(d).join(".."))
        .unwrap_or_else(|_| PathBuf::from("."));
    println!("==> building fabric-cli (release)");
    let st = Command::new("cargo")
        .args(["build", "--quiet", "--release", "-p", "fabric-cli"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !st.success() {
        return Err("cargo build --release -p fabric-cli failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let fabric = target.join("release/fabric");
    let mut failed = Vec::new();
    for p in &o.providers {
        println!("==> soak {p}: {} messages", o.messages);
        let t = Instant::now();
        let st = Command::new(&fabric)
            .args(["soak", "--self", "-p", p, "-n", &o.messages.to_string()])
            .current_dir(&root)
            .status()
            .map_err(|e| format!("running {}: {e}", fabric.display()))?;
        let secs = t.elapsed().as_secs_f64();
        if st.success() {
            println!("--- soak {p}: passed in {secs:.1} s");
        } else {
            println!("--- soak {p}: FAILED ({st}) after {secs:.1} s");
            failed.push(p.as_str());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("the soak failed on {}", failed.join(", ")))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options() {
        let full = parse(&[]).unwrap();
        assert_eq!(full.messages, FULL);
        assert_eq!(full.providers, ["tcp", "shm"]);
        let short = parse(&args(&["--short", "-p", "shm"])).unwrap();
        assert_eq!(
            (short.messages, short.providers),
            (SHORT, vec!["shm".into()])
        );
        assert_eq!(parse(&args(&["-n", "7"])).unwrap().messages, 7);
        for bad in [&["-n"][..], &["-n", "0"], &["-p"], &["--long"]] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
