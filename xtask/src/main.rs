//! Project automation, run as `cargo xtask <task>`.
//!
//! - `ci`: the README's test command and what `.ci/run` calls: the legs of
//!   the CI matrix in `ci/matrix.toml` (fmt, feature sets, clippy, tests,
//!   docs, cargo-deny, fuzzing, the verbs tests on soft-RoCE), each
//!   installing what it needs first (see `ci.rs`, `setup.rs`).
//! - `fuzz`: every cargo-fuzz target for a while (see `fuzz.rs`).
//! - `rxe`: the soft-RoCE test rig (see `rxe.rs`).
//! - `soak`: `fabric soak --self` on tcp and shm (see `soak.rs`).
//! - `bench`: `fabric pingpong` against libfabric's `fi_pingpong` and the
//!   floors, written to BENCHMARKS.md (see `bench.rs`).
//! - `gen-bindings`: regenerates fabric-sys's committed rdma-core bindings
//!   from the system's headers (bindgen, through the crate's `bindgen`
//!   feature).

mod bench;
mod ci;
mod fuzz;
mod rxe;
mod setup;
mod soak;

use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci::main(&args[1..]),
        Some("fuzz") => fuzz::main(&args[1..]),
        Some("rxe") => rxe::main(&args[1..]),
        Some("bench") => bench::main(&args[1..]),
        Some("soak") => soak::soak(&args[1..]),
        Some("gen-bindings") => gen_bindings(),
        Some("-h" | "--help" | "help") | None => {
            println!(
                "usage: cargo xtask <task>\n\ntasks:\n  ci      the full test run (what .ci/run calls; --leg NAME for one leg of ci/matrix.toml, --list)\n  fuzz    every fuzz target for SECONDS (default 60): cargo xtask fuzz [SECONDS] [TARGET]...\n  rxe     run the verbs tests on soft-RoCE (rxe) inside QEMU\n  bench   fabric pingpong against fi_pingpong and the floors, to BENCHMARKS.md\n  soak    many messages with byte checks over tcp and shm (--short for CI)\n  gen-bindings  regenerate crates/fabric-sys/src/gen/ from the system's rdma-core headers"
            );
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("xtask: unknown task `{other}` (try `cargo xtask help`)");
            ExitCode::from(2)
        }
    }
}

/// Regenerates `crates/fabric-sys/src/gen/rdma_core_x86_64.rs`: builds
/// fabric-sys with its `bindgen` feature, whose build script writes the
/// generated text to the file `FABRIC_SYS_BINDINGS_OUT` names.
fn gen_bindings() -> ExitCode {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let out = root.join("crates/fabric-sys/src/gen/rdma_core_x86_64.rs");
    let mut s = step(
        "gen-bindings",
        "cargo build --quiet -p fabric-sys --features bindgen",
    );
    s.env
        .push(("FABRIC_SYS_BINDINGS_OUT".into(), out.display().to_string()));
    match run(&s) {
        Ok(()) => {
            println!("wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "xtask gen-bindings: {e} (needs libibverbs-dev, librdmacm-dev, libclang-dev, pkg-config)"
            );
            ExitCode::FAILURE
        }
    }
}

/// A step of a run: a name and a command line.
struct Step {
    name: String,
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

fn step(name: &str, cmdline: &str) -> Step {
    let mut words = cmdline.split_whitespace().map(str::to_string);
    Step {
        name: name.to_string(),
        program: words.next().unwrap_or_default(),
        args: words.collect(),
        env: Vec::new(),
    }
}

fn run(s: &Step) -> Result<(), String> {
    let start = Instant::now();
    println!("==> {} ({} {})", s.name, s.program, s.args.join(" "));
    let status = Command::new(&s.program)
        .args(&s.args)
        .envs(s.env.iter().map(|(k, v)| (k, v)))
        .status()
        .map_err(|e| format!("{}: cannot run {}: {e}", s.name, s.program))?;
    let secs = start.elapsed().as_secs_f64();
    if status.success() {
        println!("<== {}: ok in {secs:.1} s", s.name);
        Ok(())
    } else {
        Err(format!("{}: failed ({status}) after {secs:.1} s", s.name))
    }
}

fn have(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Debian packages the tests use: libfabric's headers (C ABI layout tests),
/// its tools (`fi_info`, `fi_pingpong` to compare against), valgrind (leak
/// checks of the C interface), gcc and binutils (C test programs,
/// `objdump` for the exported symbol versions); rdma-core's headers and
/// libclang for the `verbs` feature's `bindgen` build (`--all-features`);
/// iproute2 for the tcp test across network namespaces; Open MPI (mpicc,
/// mpirun) for the test that runs an MPI program on the C library;
/// util-linux's `unshare` for the shm tests across PID namespaces; lld for
/// fabric-capi's symbol versions when the toolchain ships none; g++ for
/// libFuzzer (the fuzz crate's build).
/// The rxe rig's own packages are in [`rxe::PACKAGES`].
const APT_PACKAGES: &[&str] = &[
    "libfabric-dev",
    "libfabric-bin",
    "valgrind",
    "pkg-config",
    "gcc",
    "binutils",
    "libibverbs-dev",
    "librdmacm-dev",
    "libclang-dev",
    "iproute2",
    "openmpi-bin",
    "libopenmpi-dev",
    "util-linux",
    "lld",
    "g++",
];

/// The packages of `wanted` that dpkg does not list as installed.
pub(crate) fn missing_packages<'a>(wanted: &[&'a str]) -> Vec<&'a str> {
    wanted
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .collect()
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}
