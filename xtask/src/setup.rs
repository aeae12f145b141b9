//! What a CI leg or `cargo xtask fuzz` needs on the machine, installed when
//! missing: Debian packages (as root, or through `sudo -n`), rustup
//! components and toolchains, cargo tools.
//!
//! In CI (`CI=true`) a need that cannot be met is an error naming what is
//! missing; elsewhere a leg without its Debian packages goes on (tests that
//! need them say they skip) and one without the rxe rig's is skipped.

use std::process::Command;

use crate::{APT_PACKAGES, have, is_root, missing_packages, rxe};

/// Something a leg needs, as named in `ci/matrix.toml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// The Debian packages the tests use ([`APT_PACKAGES`]).
    Apt,
    /// The rxe rig's Debian packages ([`rxe::PACKAGES`]).
    Rxe,
    Rustfmt,
    Clippy,
    /// A nightly toolchain (cargo-fuzz builds with sanitizers).
    Nightly,
    CargoFuzz,
    CargoDeny,
}

impl Need {
    pub(crate) const ALL: &[(&str, Need)] = &[
        ("apt", Need::Apt),
        ("rxe", Need::Rxe),
        ("rustfmt", Need::Rustfmt),
        ("clippy", Need::Clippy),
        ("nightly", Need::Nightly),
        ("cargo-fuzz", Need::CargoFuzz),
        ("cargo-deny", Need::CargoDeny),
    ];

    pub(crate) fn from_name(name: &str) -> Option<Need> {
        Need::ALL.iter().find(|(n, _)| *n == name).map(|(_, w)| *w)
    }
}

/// What [`ensure`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Met {
    /// Present, or installed now.
    Yes,
    /// Not met outside CI, and the leg can still run (its tests say what
    /// they skip).
    Partly,
    /// Not met outside CI, and the leg cannot run: skip it, saying why.
    No(String),
}

/// Whether this is a CI run (`CI=true`): nothing may be skipped.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Makes `need` met, installing what is missing. `Err` names what is
/// missing when it cannot be installed in CI (or a tool install failed).
pub(crate) fn ensure(need: Need) -> Result<Met, String> {
    match need {
        Need::Apt => packages(APT_PACKAGES, false),
        Need::Rxe => packages(rxe::PACKAGES, true),
        Need::Rustfmt => component("rustfmt", &["fmt", "--version"]),
        Need::Clippy => component("clippy", &["clippy", "--version"]),
        Need::Nightly => nightly(),
        Need::CargoFuzz => cargo_tool("cargo-fuzz", "fuzz"),
        Need::CargoDeny => cargo_tool("cargo-deny", "deny"),
    }
}

fn packages(wanted: &[&str], hard: bool) -> Result<Met, String> {
    let missing = missing_packages(wanted);
    if missing.is_empty() {
        return Ok(Met::Yes);
    }
    let list = missing.join(" ");
    let sudo = !is_root() && have("sudo", &["-n", "true"]);
    if !is_root() && !sudo {
        let why = format!(
            "not root and no `sudo -n`, so the Debian packages {list} cannot be installed; run `sudo apt-get install --no-install-recommends {list}`"
        );
        if in_ci() {
            return Err(why);
        }
        println!("--- setup: {why}");
        return Ok(if hard { Met::No(why) } else { Met::Partly });
    }
    println!("--- setup: installing {list}");
    let apt = |args: &[&str]| {
        let mut c = if sudo {
            let mut c = Command::new("sudo");
            c.args(["-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
            c
        } else {
            let mut c = Command::new("apt-get");
            c.env("DEBIAN_FRONTEND", "noninteractive");
            c
        };
        c.args(args);
        run_status(&mut c)
    };
    apt(&["update", "-qq"])?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend(&missing);
    apt(&args)?;
    let still = missing_packages(wanted);
    if still.is_empty() {
        Ok(Met::Yes)
    } else {
        Err(format!("still missing after apt-get: {}", still.join(" ")))
    }
}

fn component(name: &str, probe: &[&str]) -> Result<Met, String> {
    if have("cargo", probe) {
        return Ok(Met::Yes);
    }
    println!("--- setup: rustup component add {name}");
    run_status(Command::new("rustup").args(["component", "add", name]))?;
    Ok(Met::Yes)
}

fn nightly() -> Result<Met, String> {
    if have("rustup", &["run", "nightly", "rustc", "--version"]) {
        return Ok(Met::Yes);
    }
    println!("--- setup: rustup toolchain install nightly --profile minimal");
    run_status(Command::new("rustup").args([
        "toolchain",
        "install",
        "nightly",
        "--profile",
        "minimal",
    ]))?;
    Ok(Met::Yes)
}

/// A cargo subcommand (`cargo SUB`) from the crate `krate`.
fn cargo_tool(krate: &str, sub: &str) -> Result<Met, String> {
    if have("cargo", &[sub, "--version"]) {
        return Ok(Met::Yes);
    }
    println!("--- setup: cargo install {krate} --locked");
    run_status(Command::new("cargo").args(["install", krate, "--locked"]))?;
    Ok(Met::Yes)
}

fn run_status(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{shown} failed ({s})")),
        Err(e) => Err(format!("cannot run {shown}: {e}")),
    }
}
