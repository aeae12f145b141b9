//! `cargo xtask rxe [--hosts 1|2] [--keep] [--kvm] [--bench] [--timeout SECS] [--features LIST]
//! [--extra-test PATH]... [--script PATH] [-- TEST ARGS]`: the soft-RoCE (rxe)
//! test rig.
//!
//! CI machines have neither an RDMA NIC nor rxe in their kernel, so the rig
//! boots Debian's own kernel under QEMU (`../shared/notes/rxe-rig.md`):
//!
//! 1. installs the Debian packages it needs when root ([`PACKAGES`]);
//! 2. fetches the kernel package and caches it under `target/rxe/kernel/`;
//! 3. builds the verbs test binaries (`cargo test -p prov-verbs --no-run`)
//!    and the `fabric` CLI with the verbs provider;
//! 4. packs them, their shared libraries, busybox, rdma-core's tools and
//!    the rxe modules into `target/rxe/initramfs.cpio.gz`;
//! 5. boots it (TCG unless `--kvm`); the guest's `/init` creates two rxe
//!    devices (`rxe0` on 10.99.0.1/24, `rxe1` on 10.99.1.1/24), checks them
//!    with `ibv_devinfo` and `ibv_rc_pingpong`, runs `fabric info`, then
//!    each test binary with TEST ARGS and `FABRIC_VERBS_REQUIRE_DEVICE=1`,
//!    then `fabric pingpong` and `fabric bw --self -p verbs -v` (MSG and
//!    RDM; each must succeed with every size verified), and prints one
//!    result line;
//! 6. reads that line from the console (also saved to
//!    `target/rxe/console.log`) and exits with it. A guest that does not
//!    finish within the timeout is killed and counts as a failure.
//!
//! `--bench` runs a latency comparison instead of the tests, in one guest
//! on `rxe0`: `fabric pingpong -p verbs` (release build; `-e msg` and
//! `-e rdm`), `ibv_rc_pingpong`, perftest's `ib_send_lat` and libfabric's
//! `fi_pingpong -p verbs` (`-e msg`, `-e rdm`) at 1 B to 4 KiB, every tool
//! once per pass, three passes; before them the guest's clocksource and
//! prov-verbs' hot-path probe (`tests/cost.rs`, release build: a clock
//! reading, an empty CQ read, a one-way inject polled on one thread). The
//! host prints the table of one-way latencies (each cell the median of
//! the passes) with ratios, the minima, and the probe's figures (also
//! written to `target/rxe/bench.txt`).
//!
//! `--hosts 2` boots two guests joined by a QEMU-internal link instead (a
//! Unix stream socket between the two QEMUs: lossless, as RoCE needs),
//! each with its own rxe device, and runs verbs and tcp between them (see
//! `rxe/hosts.rs`): reachability, `ibv_rc_pingpong` and `fi_pingpong` as
//! anchors, `fabric pingpong` / `bw` with every byte checked (RDM up to
//! 1 MiB with 16 in flight), prov-verbs' `tests/cross_host.rs`, and one
//! guest powered off mid-transfer and started again (everything the other
//! had outstanding towards it must end in error within a bound, and its
//! endpoints must then talk to the restarted guest). 100 to 150 s on 2
//! cores. Its files go under `target/rxe-hosts/`.
//!
//! `--script PATH` runs a shell script of one's own in the guest instead
//! of the tests (after the devices are up; `$FABRIC` is the release CLI,
//! `say` prints a line): PASS when it exits with 0. For reproducing
//! problems, e.g. a loop of `fabric pingpong` runs.

mod cpio;
mod guest;
mod hosts;
mod kernel;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Debian packages the rig uses on the host: QEMU, and what it copies into
/// the guest. The kernel is fetched separately (`apt-get download`).
pub(crate) const PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "kmod",
    "libibverbs1",
    "ibverbs-providers",
    "librdmacm1",
    "iproute2",
    "ibverbs-utils",
];

/// More packages of `--bench`: the tools ours is compared with.
const BENCH_PACKAGES: &[&str] = &["perftest", "libfabric1", "libfabric-bin"];

/// The tools of `--bench` and their packages.
const BENCH_TOOLS: &[(&str, &str)] = &[
    ("ib_send_lat", "perftest"),
    ("fi_pingpong", "libfabric-bin"),
];

/// Kernel modules the guest loads (with their dependencies). Without
/// `crc32_generic`, `rdma link add` fails: rxe cannot init crc32.
const MODULES: &[&str] = &[
    "crc32_generic",
    "dummy",
    "rdma_rxe",
    "ib_uverbs",
    "rdma_ucm",
];

/// The modules of `--hosts 2`: the NIC of the link besides.
const MODULES_TWO_HOSTS: &[&str] = &[
    "crc32_generic",
    "virtio_pci",
    "virtio_net",
    "rdma_rxe",
    "ib_uverbs",
    "rdma_ucm",
];

/// The kernel command line of every guest. `tsc=reliable`: under TCG the
/// kernel would distrust the TSC and fall back to the HPET, whose every
/// reading is an emulated device access (958 ns against 99 ns per clock
/// reading, measured with `--bench`); QEMU derives the guest TSC from the
/// host clock.
const APPEND: &str = "console=ttyS0 quiet panic=-1 tsc=reliable";

/// rdma-core's tools the guest runs, from `ibverbs-utils` and `iproute2`.
const TOOLS: &[&str] = &["ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "rdma"];

/// Libraries the verbs provider opens at run time (`dlopen`), so `ldd`
/// does not list them.
const DLOPENED: &[&str] = &["libibverbs.so.1", "librdmacm.so.1"];

const USAGE: &str = "usage: cargo xtask rxe [--hosts 1|2] [--keep] [--kvm] [--bench] [--timeout SECS] [--features LIST] [--extra-test PATH]... [--script PATH] [-- TEST ARGS]

Runs the verbs provider's tests inside a QEMU guest with two soft-RoCE
devices (rxe0 on 10.99.0.1/24, rxe1 on 10.99.1.1/24).

  --hosts 2         two guests joined by a virtual link instead (10.99.0.1
                    and .2, fd99::1 and ::2): reachability, ibv_rc_pingpong,
                    fabric pingpong / bw for verbs and tcp, the cross-host
                    verbs tests, RDM at 1 MiB, and guest b powered off
                    mid-transfer and started again; server on guest a,
                    client on guest b (logs in target/rxe-hosts/)
  --keep            keep target/rxe/initramfs.cpio.gz for inspection
  --kvm             use KVM instead of TCG (software emulation; the default)
  --bench           instead of the tests, compare fabric pingpong's latency
                    with ibv_rc_pingpong, ib_send_lat and fi_pingpong
  --timeout SECS    kill a guest that has not finished by then (default 900)
  --features LIST   features for `cargo test -p prov-verbs`
  --extra-test PATH also run this test binary in the guest (checks the rig)
  --script PATH     instead of the tests, run this shell script in the guest
                    (release CLI as $FABRIC; PASS when it exits with 0)
  --add PATH        also pack this host file, at the same path (with the
                    libraries it needs), e.g. valgrind for a --script
  -- TEST ARGS      given to every test binary, e.g. `-- --test-threads=1 cq`";

#[derive(Debug, PartialEq)]
struct Options {
    /// 1: the one-guest rig; 2: two linked guests.
    hosts: u8,
    keep: bool,
    kvm: bool,
    bench: bool,
    timeout: Duration,
    features: Option<String>,
    extra_tests: Vec<PathBuf>,
    script: Option<PathBuf>,
    extra_files: Vec<PathBuf>,
    test_args: Vec<String>,
}

/// `Ok(None)` asks for the usage text.
fn parse_options(args: &[String]) -> Result<Option<Options>, String> {
    let mut o = Options {
        hosts: 1,
        keep: false,
        kvm: false,
        bench: false,
        timeout: Duration::from_secs(900),
        features: None,
        extra_tests: Vec::new(),
        script: None,
        extra_files: Vec::new(),
        test_args: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--hosts" => {
                o.hosts = it
                    .next()
                    .and_then(|v| v.parse::<u8>().ok())
                    .filter(|n| (1..=2).contains(n))
                    .ok_or("--hosts needs 1 or 2")?;
            }
            "--keep" => o.keep = true,
            "--kvm" => o.kvm = true,
            "--bench" => o.bench = true,
            "--timeout" => {
                let secs = it
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|s| *s > 0)
                    .ok_or("--timeout needs a number of seconds above 0")?;
                o.timeout = Duration::from_secs(secs);
            }
            "--features" => {
                o.features = Some(it.next().ok_or("--features needs a list")?.clone());
            }
            "--extra-test" => {
                let path = it.next().ok_or("--extra-test needs a path")?;
                o.extra_tests.push(PathBuf::from(path));
            }
            "--script" => {
                let path = it.next().ok_or("--script needs a path")?;
                o.script = Some(PathBuf::from(path));
            }
            "--add" => {
                let path = it.next().ok_or("--add needs a path")?;
                o.extra_files.push(PathBuf::from(path));
            }
            "-h" | "--help" => return Ok(None),
            "--" => {
                o.test_args = it.cloned().collect();
                break;
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if o.hosts == 2 && (o.bench || o.script.is_some() || !o.extra_tests.is_empty()) {
        return Err("--hosts 2 runs its own steps: no --bench, --script or --extra-test".into());
    }
    Ok(Some(o))
}

/// Runs the rig.
pub(crate) fn main(args: &[String]) -> ExitCode {
    let o = match parse_options(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("xtask rxe: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    let result = run(&o);
    let secs = start.elapsed().as_secs_f64();
    match result {
        Ok(()) => {
            println!("xtask rxe: PASS in {secs:.1} s");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask rxe: FAIL after {secs:.1} s: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Options) -> Result<(), String> {
    if o.hosts == 2 {
        return run_two_hosts(o);
    }
    ensure_packages(PACKAGES)?;
    if o.bench {
        ensure_packages(BENCH_PACKAGES)?;
    }
    let workspace = Workspace::find()?;
    let dir = workspace.target.join("rxe");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let k = timed("kernel", || kernel::prepare(&dir, MODULES))?;
    println!("rxe: kernel {} ({})", k.version, k.package);
    let built = timed("build", || build(&workspace, o))?;
    let marker = marker();
    let initrd = dir.join("initramfs.cpio.gz");
    let init = |modules: Vec<String>, fabric: &str, tests: Vec<String>| -> Result<String, String> {
        let script = match &o.script {
            Some(p) => {
                Some(fs::read_to_string(p).map_err(|e| format!("--script {}: {e}", p.display()))?)
            }
            None => None,
        };
        Ok(guest::init_script(&guest::Plan {
            marker: &marker,
            modules,
            fabric,
            tests,
            test_args: &o.test_args,
            bench: o.bench,
            script: script.as_deref(),
        }))
    };
    timed("initramfs", || pack(&dir, &initrd, &k, &built, o, &init))?;
    let log = dir.join("console.log");
    let outcome = timed("guest", || boot(&k.vmlinuz, &initrd, &log, o, &marker));
    if o.keep {
        println!("rxe: kept {}", initrd.display());
    } else {
        let _ = fs::remove_file(&initrd);
    }
    let outcome = outcome?;
    if o.bench {
        let table = bench_table(&fs::read_to_string(&log).unwrap_or_default());
        println!("{table}");
        let out = dir.join("bench.txt");
        if matches!(outcome, Outcome::Pass) {
            fs::write(&out, &table).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
            println!("rxe: wrote {}", out.display());
        } else {
            // Keep the last good table rather than an empty or partial one.
            println!(
                "rxe: {} left as it was (the guest did not pass)",
                out.display()
            );
        }
    }
    match outcome {
        Outcome::Pass => Ok(()),
        Outcome::Fail => Err(format!(
            "the guest reported a failure (console above, saved in {})",
            log.display()
        )),
        Outcome::Silent => Err(guest_gave_no_result(
            &log,
            "the guest stopped without a result line",
        )),
        Outcome::TimedOut => Err(guest_gave_no_result(
            &log,
            &format!(
                "the guest did not finish within {} s and was killed",
                o.timeout.as_secs()
            ),
        )),
    }
}

/// `--hosts 2`: two guests on a link (see `hosts.rs`).
fn run_two_hosts(o: &Options) -> Result<(), String> {
    ensure_packages(PACKAGES)?;
    // fi_pingpong, the second anchor.
    ensure_packages(BENCH_PACKAGES)?;
    let workspace = Workspace::find()?;
    let dir = workspace.target.join("rxe-hosts");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let k = timed("kernel", || kernel::prepare(&dir, MODULES_TWO_HOSTS))?;
    println!("rxe: kernel {} ({})", k.version, k.package);
    let built = timed("build", || build(&workspace, o))?;
    let marker = marker();
    let initrd = dir.join("initramfs.cpio.gz");
    let init = |modules: Vec<String>, fabric: &str, tests: Vec<String>| -> Result<String, String> {
        let cross_host = tests.iter().find(|t| {
            Path::new(t)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("cross_host-"))
        });
        let cross_host = cross_host.ok_or("no cross_host test binary was built")?;
        Ok(hosts::init_script(&hosts::Plan {
            marker: &marker,
            modules,
            fabric,
            cross_host: Some(cross_host),
            test_args: &o.test_args,
            fault: true,
            large: true,
        }))
    };
    timed("initramfs", || pack(&dir, &initrd, &k, &built, o, &init))?;
    let qemu = || qemu_command(o, &k.vmlinuz, &initrd);
    let outcome = timed("guests", || {
        hosts::run(&hosts::Boot {
            qemu: &qemu,
            append: APPEND,
            dir: &dir,
            marker: &marker,
            timeout: o.timeout,
        })
    });
    if o.keep {
        println!("rxe: kept {}", initrd.display());
    } else {
        let _ = fs::remove_file(&initrd);
    }
    let console_b = fs::read_to_string(dir.join("console-b.log")).unwrap_or_default();
    println!("{}", hosts::figures_table(&console_b));
    let logs = format!(
        "{} and {}",
        dir.join("console-a.log").display(),
        dir.join("console-b.log").display()
    );
    match outcome? {
        hosts::Outcome::Pass => Ok(()),
        hosts::Outcome::Fail(why) => Err(format!("{why} (consoles above, saved in {logs})")),
        hosts::Outcome::TimedOut => Err(format!(
            "the guests did not finish within {} s and were killed (consoles in {logs})",
            o.timeout.as_secs()
        )),
    }
}

/// Runs one phase and prints its duration.
fn timed<T>(name: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let start = Instant::now();
    let r = f();
    let secs = start.elapsed().as_secs_f64();
    match &r {
        Ok(_) => println!("rxe: {name}: done in {secs:.1} s"),
        Err(_) => println!("rxe: {name}: failed after {secs:.1} s"),
    }
    r.map_err(|e| format!("{name}: {e}"))
}

/// The error of a guest without a result line, with the console's end.
fn guest_gave_no_result(log: &Path, what: &str) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = match &lines[lines.len().saturating_sub(40)..] {
        [] => "(nothing: the console stayed empty)".to_string(),
        last => last.join("\n"),
    };
    format!(
        "{what}; the last lines of its console ({}):\n{tail}",
        log.display()
    )
}

// ---------------------------------------------------------------------------
// Host packages and programs

fn ensure_packages(packages: &[&str]) -> Result<(), String> {
    let missing = crate::missing_packages(packages);
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    if !crate::is_root() {
        return Err(format!(
            "missing Debian packages: {list}; install them with `sudo apt-get install --no-install-recommends {list}` (or run as root)"
        ));
    }
    println!("rxe: installing {list}");
    run_quiet(Command::new("apt-get").args(["update", "-qq"]))?;
    run_quiet(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// Runs a command with its output shown only when it fails.
fn run_quiet(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{shown} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// A program in `PATH` or in the sbin folders a non-root `PATH` may lack.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn require_program(name: &str, package: &str) -> Result<PathBuf, String> {
    find_program(name).ok_or_else(|| {
        format!("{name} not found (Debian package {package}: `apt-get install {package}`)")
    })
}

// ---------------------------------------------------------------------------
// Building the binaries

/// The workspace root and its target folder (honours `CARGO_TARGET_DIR`).
struct Workspace {
    root: PathBuf,
    target: PathBuf,
}

impl Workspace {
    fn find() -> Result<Self, String> {
        let out = Command::new(cargo())
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
        if !out.status.success() {
            return Err(format!("cargo metadata failed ({})", out.status));
        }
        let meta: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("cargo metadata: bad JSON: {e}"))?;
        let get = |key: &str| {
            meta[key]
                .as_str()
                .map(PathBuf::from)
                .ok_or_else(|| format!("cargo metadata has no {key}"))
        };
        Ok(Workspace {
            root: get("workspace_root")?,
            target: get("target_directory")?,
        })
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// The host binaries that go into the guest.
struct Built {
    tests: Vec<PathBuf>,
    fabric: PathBuf,
}

fn build(w: &Workspace, o: &Options) -> Result<Built, String> {
    // With --bench, only the hot-path probe, optimised as the CLI is.
    let mut test_args = vec!["test", "-p", "prov-verbs", "--no-run"];
    if o.bench {
        test_args.extend(["--release", "--test", "cost"]);
    }
    if o.hosts == 2 {
        test_args.extend(["--test", "cross_host"]);
    }
    if let Some(f) = &o.features {
        test_args.extend(["--features", f.as_str()]);
    }
    let mut tests = executables(w, &test_args, |a| a["profile"]["test"] == true)?;
    tests.sort();
    for extra in o.extra_tests.iter().filter(|_| !o.bench) {
        if !extra.is_file() {
            return Err(format!("--extra-test {}: no such file", extra.display()));
        }
        tests.push(extra.clone());
    }
    // Measured with --bench (and --script): optimised then.
    let mut cli = vec!["build", "-p", "fabric-cli", "--features", "verbs"];
    if o.bench || o.script.is_some() {
        cli.push("--release");
    }
    let fabric = executables(w, &cli, |a| {
        a["target"]["name"] == "fabric" && a["profile"]["test"] == false
    })?
    .pop()
    .ok_or("cargo build -p fabric-cli produced no `fabric` binary")?;
    for t in &tests {
        println!("rxe: test binary {}", t.display());
    }
    Ok(Built { tests, fabric })
}

/// Runs a cargo build and returns the executables of the artifacts `pick`
/// accepts (from `--message-format=json`).
fn executables(
    w: &Workspace,
    args: &[&str],
    pick: impl Fn(&Value) -> bool,
) -> Result<Vec<PathBuf>, String> {
    println!("rxe: cargo {}", args.join(" "));
    let out = Command::new(cargo())
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(&w.root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo {} failed ({})", args.join(" "), out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|a| a["reason"] == "compiler-artifact" && pick(a))
        .filter_map(|a| a["executable"].as_str().map(PathBuf::from))
        .collect())
}

// ---------------------------------------------------------------------------
// The initramfs

/// What goes into the initramfs, by guest path (without the leading `/`).
#[derive(Default)]
struct Image {
    entries: BTreeMap<String, Node>,
}

enum Node {
    Dir,
    File { data: Vec<u8>, mode: u32 },
}

impl Image {
    fn add(&mut self, guest: &str, node: Node) {
        let guest = guest.trim_start_matches('/');
        let mut parent = Path::new(guest).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            self.entries
                .entry(p.to_string_lossy().into_owned())
                .or_insert(Node::Dir);
            parent = p.parent();
        }
        self.entries.insert(guest.to_string(), node);
    }

    /// Copies a host file (following symlinks) to a guest path.
    fn copy(&mut self, host: &Path, guest: &str) -> Result<(), String> {
        let data = fs::read(host).map_err(|e| format!("cannot read {}: {e}", host.display()))?;
        self.add(guest, Node::File { data, mode: 0o755 });
        Ok(())
    }

    /// Copies a host file to the same path in the guest.
    fn copy_same(&mut self, host: &Path) -> Result<(), String> {
        self.copy(host, &host.to_string_lossy())
    }

    /// Writes the archive through `gzip -1`.
    fn write_gz(&self, out: &Path) -> Result<u64, String> {
        let file =
            fs::File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
        let mut gzip = Command::new("gzip")
            .args(["-1", "-n", "-c"])
            .stdin(Stdio::piped())
            .stdout(file)
            .spawn()
            .map_err(|e| format!("cannot run gzip: {e}"))?;
        let stdin = gzip.stdin.take().ok_or("gzip has no stdin")?;
        let written = self.write_cpio(BufWriter::new(stdin));
        let status = gzip.wait().map_err(|e| format!("gzip: {e}"))?;
        written.map_err(|e| format!("writing the archive: {e}"))?;
        if !status.success() {
            return Err(format!("gzip failed ({status})"));
        }
        Ok(fs::metadata(out).map(|m| m.len()).unwrap_or(0))
    }

    fn write_cpio(&self, out: impl Write) -> std::io::Result<()> {
        let mut w = cpio::Writer::new(out);
        for (name, node) in &self.entries {
            match node {
                Node::Dir => w.dir(name, 0o755)?,
                Node::File { data, mode } => w.file(name, *mode, data)?,
            }
        }
        // Dropping the writer closes gzip's stdin.
        w.finish().map(drop)
    }
}

/// A result-line marker no test prints by chance.
fn marker() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "xtask-rxe-result-{:x}",
        nanos ^ u128::from(std::process::id())
    )
}

/// The guest's `/init`, from the guest paths of the modules, the CLI and
/// the test binaries.
type InitScript<'a> = dyn Fn(Vec<String>, &str, Vec<String>) -> Result<String, String> + 'a;

fn pack(
    dir: &Path,
    initrd: &Path,
    k: &kernel::Kernel,
    built: &Built,
    o: &Options,
    init: &InitScript<'_>,
) -> Result<(), String> {
    let mut img = Image::default();
    let mut elves = Vec::new();

    let busybox = require_program("busybox", "busybox-static")?;
    img.copy(&busybox, "/bin/busybox")?;
    for tool in TOOLS {
        let package = if *tool == "rdma" {
            "iproute2"
        } else {
            "ibverbs-utils"
        };
        let host = require_program(tool, package)?;
        img.copy(&host, &format!("/usr/bin/{tool}"))?;
        elves.push(host);
    }
    if o.bench || o.hosts == 2 {
        for (tool, package) in BENCH_TOOLS {
            let host = require_program(tool, package)?;
            img.copy(&host, &format!("/usr/bin/{tool}"))?;
            elves.push(host);
        }
    }
    for lib in dlopened_libraries()? {
        img.copy_same(&lib)?;
        elves.push(lib);
    }
    for f in &o.extra_files {
        img.copy_same(f)?;
        elves.push(f.clone());
    }
    let (driver, provider) = rxe_provider()?;
    img.copy_same(&driver)?;
    img.copy_same(&provider)?;
    elves.push(provider);

    let stage = dir.join("stage");
    let _ = fs::remove_dir_all(&stage);
    fs::create_dir_all(&stage).map_err(|e| format!("cannot create {}: {e}", stage.display()))?;
    let fabric = "/usr/bin/fabric";
    img.copy(&stripped(&built.fabric, &stage)?, fabric)?;
    elves.push(built.fabric.clone());
    let mut tests = Vec::new();
    for t in &built.tests {
        let name = t.file_name().ok_or("test binary without a name")?;
        let guest = format!("/rxe/tests/{}", name.to_string_lossy());
        img.copy(&stripped(t, &stage)?, &guest)?;
        elves.push(t.clone());
        tests.push(guest);
    }
    for lib in shared_libraries(&elves)? {
        img.copy_same(&lib)?;
    }

    let mut modules = Vec::new();
    for m in &k.modules {
        let name = m.file_name().ok_or("module without a name")?;
        let guest = format!("/lib/modules/{}", name.to_string_lossy());
        img.copy(m, &guest)?;
        modules.push(guest);
    }

    let script = init(modules, fabric, tests)?;
    img.add(
        "/init",
        Node::File {
            data: script.into_bytes(),
            mode: 0o755,
        },
    );
    let bytes = img.write_gz(initrd)?;
    let _ = fs::remove_dir_all(&stage);
    println!(
        "rxe: {} ({} entries, {:.1} MiB)",
        initrd.display(),
        img.entries.len(),
        bytes as f64 / 1048576.0
    );
    Ok(())
}

/// A copy of a binary without debug info (`strip --strip-debug`, from
/// binutils), or the binary itself when `strip` is not installed.
fn stripped(bin: &Path, stage: &Path) -> Result<PathBuf, String> {
    let Some(strip) = find_program("strip") else {
        return Ok(bin.to_path_buf());
    };
    let name = bin.file_name().ok_or("binary without a name")?;
    let out = stage.join(name);
    run_quiet(
        Command::new(strip)
            .arg("--strip-debug")
            .arg("-o")
            .arg(&out)
            .arg(bin),
    )?;
    Ok(out)
}

/// Where the dynamic linker finds each library in [`DLOPENED`].
fn dlopened_libraries() -> Result<Vec<PathBuf>, String> {
    let ldconfig = require_program("ldconfig", "libc-bin")?;
    let out = Command::new(ldconfig)
        .arg("-p")
        .output()
        .map_err(|e| format!("cannot run ldconfig -p: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    DLOPENED
        .iter()
        .map(|lib| {
            ldconfig_path(&text, lib).ok_or_else(|| {
                format!("{lib} not found by ldconfig (Debian packages libibverbs1, librdmacm1)")
            })
        })
        .collect()
}

/// The path `ldconfig -p` gives for an x86-64 library.
fn ldconfig_path(text: &str, lib: &str) -> Option<PathBuf> {
    text.lines().find_map(|l| {
        let (left, path) = l.trim().split_once(" => ")?;
        (left.split_whitespace().next() == Some(lib) && left.contains("x86-64"))
            .then(|| PathBuf::from(path.trim()))
    })
}

/// libibverbs' rxe driver file and provider library.
fn rxe_provider() -> Result<(PathBuf, PathBuf), String> {
    let driver = PathBuf::from("/etc/libibverbs.d/rxe.driver");
    let dir = Path::new("/usr/lib/x86_64-linux-gnu/libibverbs");
    let provider = fs::read_dir(dir).ok().and_then(|entries| {
        entries.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("librxe-"))
        })
    });
    match provider {
        Some(p) if driver.is_file() => Ok((driver, p)),
        _ => Err(format!(
            "the rxe provider of libibverbs ({} and {}/librxe-*.so) is missing (Debian package ibverbs-providers)",
            driver.display(),
            dir.display()
        )),
    }
}

/// The shared libraries `ldd` lists for the given binaries.
fn shared_libraries(elves: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut all = std::collections::BTreeSet::new();
    for elf in elves {
        let out = Command::new("ldd")
            .arg(elf)
            .output()
            .map_err(|e| format!("cannot run ldd: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        all.extend(parse_ldd(&text).map_err(|e| format!("{}: {e}", elf.display()))?);
    }
    Ok(all.into_iter().collect())
}

/// The library paths in `ldd` output; a library it cannot find is an error.
fn parse_ldd(text: &str) -> Result<Vec<PathBuf>, String> {
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim) {
        let target = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(format!("ldd: {} not found", name.trim()));
                }
                rest
            }
            None => line,
        };
        let path = target.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

// ---------------------------------------------------------------------------
// The latency comparison

/// Columns of the comparison: the tool's name in the guest's lines, and
/// its heading.
const BENCH_COLUMNS: [(&str, &str); 6] = [
    ("fabric_msg", "ours msg"),
    ("ibv_rc_pingpong", "ibv_rc_pp"),
    ("ib_send_lat", "ib_send_lat"),
    ("fi_pingpong_msg", "fi_pp msg"),
    ("fabric_rdm", "ours rdm"),
    ("fi_pingpong_rdm", "fi_pp rdm"),
];

/// Ratios of the comparison: (numerator, denominator, heading).
const BENCH_RATIOS: [(&str, &str, &str); 4] = [
    ("fabric_msg", "ibv_rc_pingpong", "msg/ibv"),
    ("fabric_msg", "ib_send_lat", "msg/lat"),
    ("fabric_msg", "fi_pingpong_msg", "msg/fi"),
    ("fabric_rdm", "fi_pingpong_rdm", "rdm/fi"),
];

/// A statistic of a cell's passes.
type Stat = fn(&[f64]) -> Option<f64>;

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn minimum(v: &[f64]) -> Option<f64> {
    v.iter().copied().min_by(f64::total_cmp)
}

/// The table of the guest's `rxe-bench:` lines: one-way microseconds per
/// tool and size (the median of the passes), ratios (ours over theirs;
/// below 1 is faster), then the same of the minima, and the hot-path
/// probe's `rxe-cost:` lines.
fn bench_table(console: &str) -> String {
    let mut got: BTreeMap<(usize, String), Vec<f64>> = BTreeMap::new();
    let mut costs = Vec::new();
    for line in console.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix(guest::COST_PREFIX) {
            costs.push(rest.trim().to_string());
            continue;
        }
        let Some(rest) = line.strip_prefix(guest::BENCH_PREFIX) else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        if let [tool, size, us] = w[..] {
            if let (Ok(size), Ok(us)) = (size.parse::<usize>(), us.parse::<f64>()) {
                got.entry((size, tool.to_string())).or_default().push(us);
            }
        }
    }
    let mut t = format!(
        "one-way latency in the rxe guest, usec ({} round trips per size; ibv_rc_pingpong's round trip halved)\n",
        guest::BENCH_ITERS,
    );
    let stats: [(&str, Stat); 2] = [
        ("median of the passes", median),
        ("minimum of the passes", minimum),
    ];
    for (what, stat) in stats {
        let passes = got.values().map(Vec::len).max().unwrap_or(0);
        t.push_str(&format!("{what} ({passes} passes)\n{:>6}", "bytes"));
        for (_, head) in BENCH_COLUMNS {
            t.push_str(&format!(" {head:>11}"));
        }
        for (_, _, head) in BENCH_RATIOS {
            t.push_str(&format!(" {head:>8}"));
        }
        t.push('\n');
        for size in guest::BENCH_SIZES {
            let get = |tool: &str| got.get(&(size, tool.to_string())).and_then(|v| stat(v));
            t.push_str(&format!("{size:>6}"));
            for (tool, _) in BENCH_COLUMNS {
                match get(tool) {
                    Some(us) => t.push_str(&format!(" {us:>11.2}")),
                    None => t.push_str(&format!(" {:>11}", "-")),
                }
            }
            for (a, b, _) in BENCH_RATIOS {
                match (get(a), get(b)) {
                    (Some(a), Some(b)) if b > 0.0 => t.push_str(&format!(" {:>8.2}", a / b)),
                    _ => t.push_str(&format!(" {:>8}", "-")),
                }
            }
            t.push('\n');
        }
    }
    if !costs.is_empty() {
        t.push_str("prov-verbs hot path (tests/cost.rs, one thread):");
        for c in &costs {
            t.push_str(&format!(" {c};"));
        }
        t.pop();
        t.push('\n');
    }
    t
}

// ---------------------------------------------------------------------------
// The guest

enum Outcome {
    Pass,
    Fail,
    /// QEMU exited without the result line.
    Silent,
    TimedOut,
}

fn boot(
    vmlinuz: &Path,
    initrd: &Path,
    log: &Path,
    o: &Options,
    marker: &str,
) -> Result<Outcome, String> {
    let mut cmd = qemu_command(o, vmlinuz, initrd)?;
    cmd.args(["-append", APPEND])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    println!(
        "rxe: booting the guest ({}; timeout {} s)",
        if o.kvm { "KVM" } else { "TCG" },
        o.timeout.as_secs()
    );
    let mut child = cmd.spawn().map_err(|e| format!("cannot start QEMU: {e}"))?;
    let stdout = child.stdout.take().ok_or("QEMU has no stdout")?;
    let log_file =
        fs::File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let (tx, rx) = mpsc::channel();
    let marker = marker.to_string();
    let reader = std::thread::spawn(move || relay_console(stdout, log_file, &marker, &tx));
    let timed_out = wait_or_kill(&mut child, o.timeout)?;
    let _ = reader.join();
    let result = rx.try_iter().last();
    Ok(match (timed_out, result) {
        (true, _) => Outcome::TimedOut,
        (false, Some(true)) => Outcome::Pass,
        (false, Some(false)) => Outcome::Fail,
        (false, None) => Outcome::Silent,
    })
}

/// QEMU with the accelerator, memory, CPUs, console, kernel and initramfs
/// of a guest; the caller adds the kernel command line (`-append`).
fn qemu_command(o: &Options, vmlinuz: &Path, initrd: &Path) -> Result<Command, String> {
    let qemu = require_program("qemu-system-x86_64", "qemu-system-x86")?;
    let mut cmd = Command::new(qemu);
    if o.kvm {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .map_err(|e| format!("--kvm: cannot open /dev/kvm: {e}"))?;
        cmd.args(["-accel", "kvm", "-cpu", "host"]);
    } else {
        cmd.args(["-accel", "tcg"]);
    }
    cmd.args(["-m", "2048", "-smp", "2", "-nodefaults", "-no-user-config"])
        .args(["-display", "none", "-serial", "stdio", "-no-reboot"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd);
    Ok(cmd)
}

/// Copies the console to our stdout and the log; sends each result line's
/// verdict (`true` for PASS).
fn relay_console(
    console: impl std::io::Read,
    log: fs::File,
    marker: &str,
    verdicts: &mpsc::Sender<bool>,
) {
    let mut console = BufReader::new(console);
    let mut log = BufWriter::new(log);
    let stdout = std::io::stdout();
    let mut line = Vec::new();
    let pass = format!("{marker}: PASS");
    let fail = format!("{marker}: FAIL");
    loop {
        line.clear();
        match console.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        let _ = writeln!(log, "{text}");
        let _ = writeln!(stdout.lock(), "{text}");
        if text.contains(&pass) {
            let _ = verdicts.send(true);
        } else if text.contains(&fail) {
            let _ = verdicts.send(false);
        }
    }
    let _ = log.flush();
}

/// Waits for QEMU; kills it after `timeout`. True when it was killed.
fn wait_or_kill(child: &mut Child, timeout: Duration) -> Result<bool, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if child
            .try_wait()
            .map_err(|e| format!("waiting for QEMU: {e}"))?
            .is_some()
        {
            return Ok(false);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_pass_everything_after_the_separator_to_the_tests() -> Result<(), String> {
        let o = parse_options(&args(&["--keep", "--timeout", "60", "--", "--keep", "x"]))?
            .ok_or("no options")?;
        assert!(o.keep && !o.kvm);
        assert_eq!(o.timeout, Duration::from_secs(60));
        assert_eq!(o.test_args, args(&["--keep", "x"]));
        Ok(())
    }

    #[test]
    fn the_bench_table_has_every_size_and_the_ratios() {
        let console = "rxe-guest: x\n\
                       rxe-bench: fabric_msg 1 50.0\n\
                       rxe-bench: ibv_rc_pingpong 1 47.5\n\
                       rxe-bench: fi_pingpong_msg 1 -\n";
        let t = bench_table(console);
        assert_eq!(
            t.lines().count(),
            1 + 2 * (2 + guest::BENCH_SIZES.len()),
            "{t}"
        );
        let row = t.lines().nth(3).unwrap_or_default();
        assert!(row.starts_with("     1       50.00       47.50"), "{row}");
        assert!(row.contains(" 1.05 "), "{row}");
    }

    #[test]
    fn the_bench_table_takes_the_median_and_the_minimum_of_the_passes() {
        let console = "rxe-cost: cq_read_empty 41.000 ns\n\
                       rxe-bench: fabric_msg 4 30.0\n\
                       rxe-bench: fabric_msg 4 10.0\n\
                       rxe-bench: fabric_msg 4 12.0\n\
                       rxe-bench: ibv_rc_pingpong 4 10.0\n";
        let t = bench_table(console);
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("     4 ")).collect();
        assert_eq!(rows.len(), 2, "{t}");
        assert!(rows[0].starts_with("     4       12.00       10.00"), "{t}");
        assert!(rows[0].contains(" 1.20 "), "{t}");
        assert!(rows[1].starts_with("     4       10.00       10.00"), "{t}");
        assert!(t.contains("(3 passes)"), "{t}");
        assert!(t.trim_end().ends_with("cq_read_empty 41.000 ns"), "{t}");
    }

    #[test]
    fn bad_options_are_errors() {
        assert!(parse_options(&args(&["--timeout", "0"])).is_err());
        assert!(parse_options(&args(&["--timeout"])).is_err());
        assert!(parse_options(&args(&["--bogus"])).is_err());
        assert_eq!(parse_options(&args(&["--help"])), Ok(None));
    }

    #[test]
    fn ldd_output_gives_paths_and_reports_missing_libraries() -> Result<(), String> {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text)?,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
        assert_eq!(
            parse_ldd("\tnot a dynamic executable\n")?,
            Vec::<PathBuf>::new()
        );
        Ok(())
    }

    #[test]
    fn ldconfig_output_gives_the_x86_64_library() {
        let text = "3 libs found in cache `/etc/ld.so.cache'\n\
                    \tlibibverbs.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libibverbs.so.1\n\
                    \tlibibverbs.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libibverbs.so\n";
        assert_eq!(
            ldconfig_path(text, "libibverbs.so.1"),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libibverbs.so.1"))
        );
        assert_eq!(ldconfig_path(text, "librdmacm.so.1"), None);
    }
}
