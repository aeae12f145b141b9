//! `cargo xtask bench [--rounds N] [--quick] [--sizes LIST] [--providers
//! LIST] [--strict] [--out FILE]` (`--help` describes them): our
//! `fabric pingpong` against libfabric's `fi_pingpong` on the same machine,
//! in the same run, alternating, several rounds; plus the floors (a
//! busy-polling raw TCP ping-pong, a busy-polling shared-memory ping-pong,
//! a raw TCP stream, the one-copy floor of a 64-message window at each
//! streaming size in every round, memcpy, a cache-line ping-pong). The
//! TCP floors run with the system's socket defaults and with the options
//! prov-tcp gives its connections, and keep the faster (see
//! `floor::Setup`).
//! `fabric bw shm` below 60% of that floor in some round is flagged.
//! Writes BENCHMARKS.md
//! (medians, spreads, our/their ratio per size, the ratio of every round
//! with the host mode it was taken in) and two SVG charts under `bench/`.
//!
//! With `fi_pingpong` installed it also runs Debian's `fi_pingpong` on our
//! C library (`fabric-capi` built in release, copied as `libfabric.so.1`
//! into `<target>/release/capi-lib/`, which `LD_LIBRARY_PATH` names), in
//! the same alternation: the column "fi_pingpong on ours / fabric
//! pingpong" is the cost of the C interface for the same provider and size.
//! Its fair partner is `fabric pingpong --late-recv` (also run), which,
//! like `fi_pingpong`, posts each receive only once the previous one came:
//! "fi_pingpong on ours / fabric pingpong --late-recv" compares the same
//! per-round work.
//!
//! Every `fabric pingpong` configuration also runs a second time in each
//! round (`fabric/again`): "fabric pingpong again / fabric pingpong" is
//! the round-to-round spread of one program on this host, the yardstick
//! for the other per-round ratios (a bound that identical runs break in
//! some round cannot hold in every round for any pair).
//!
//! Server processes run on core 1 and clients on core 0 (`taskset`), as in
//! `../shared/notes/perf-anchors.md`; one extra round puts both on core 1.
//!
//! Host modes: this host's speed changes for seconds at a time. Before and
//! after every run the bench takes a probe (the shared-memory floor at
//! 1 B, see [`floor::shm_pingpong`]); [`modes`] clusters the probes into
//! modes and tags every per-round ratio with the modes of the probes
//! around its two runs. When the probes of one size's runs in a round
//! fall in two modes by themselves, those runs are taken again (up to
//! [`MODE_RETRIES`] times), so that a ratio compares runs made at one
//! host speed; a round that still spans two keeps its mixed tag. The
//! per-size raw TCP and raw shared-memory floors run in the same
//! alternation as the pairs. A size whose ours / theirs
//! latency ratio is above 1.0 in any round is flagged, in the printed
//! table and in the markdown; `--strict` makes that the exit status.
//!
//! The floor helpers run from a release build of this program (built with
//! `fabric` at the start), so that their loops are optimised.

mod floor;
mod modes;
mod opts;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use floor::{cacheline_usec, copy_window_mbps, cross_core_copy_mbps, memcpy_mbps};
use modes::{Modes, RoundRatio, by_mode_text, per_round, rounds_text};
use opts::Opts;

/// One measurement: one-way latency and ping-pong bandwidth, the round it
/// was taken in and the probes around it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    usec: f64,
    mbps: f64,
    round: usize,
    /// Indices of the probes taken just before and just after the run.
    span: Option<(usize, usize)>,
}

/// Samples per size for one configuration.
type Series = BTreeMap<usize, Vec<Sample>>;

/// A ping-pong configuration: how to start its server and its client.
struct Config {
    name: String,
    ours: bool,
    server: Vec<String>,
    client: Vec<String>,
    /// Largest size it is run at.
    max: usize,
    /// Debian's `fi_pingpong` on our C library (its output is
    /// `fi_pingpong`'s; its columns are apart from ours and theirs).
    capi: bool,
    /// Our `fabric pingpong --late-recv` (a receive posted only once the
    /// previous one completed, as `fi_pingpong` does): the partner of
    /// `fi_pingpong` on our C library, not compared with libfabric.
    late: bool,
    /// A second `fabric pingpong` of the same kind, run in the same
    /// alternation: its ratio to the first is the noise of identical
    /// programs, against which every other per-round ratio reads.
    again: bool,
    /// One process (`client`) that runs both sides itself (the
    /// shared-memory floor); `server` is unused.
    one_process: bool,
    /// Environment of both processes.
    env: Vec<(String, String)>,
}

/// Name of the raw TCP ping-pong floor's configuration.
const RAW_TCP: &str = "raw TCP (busy poll)";
/// Name of the raw shared-memory ping-pong floor's configuration.
const RAW_SHM: &str = "raw shm (busy poll, one copy)";

/// Runs the benchmarks, or one of the floor helpers (`floor-*`, run as
/// child processes of this program).
pub(crate) fn main(args: &[String]) -> ExitCode {
    if args.first().is_some_and(|a| a.starts_with("floor-")) {
        return match floor::floor_child(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask bench {}: {e}", args[0]);
                ExitCode::FAILURE
            }
        };
    }
    let opts = match opts::parse_opts(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtask bench: {e}\n(`cargo xtask bench --help` lists the options)");
            return ExitCode::from(2);
        }
    };
    if opts.help {
        // A closed pipe (`| head`) is no error worth a panic.
        let _ = writeln!(std::io::stdout(), "{}", opts::HELP);
        return ExitCode::SUCCESS;
    }
    match run(&opts) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(flagged) if opts.strict => {
            eprintln!(
                "xtask bench --strict: {flagged} ratio/size cell(s) slower than libfabric in some round (above)"
            );
            ExitCode::FAILURE
        }
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Round trips of a ping-pong run at `size`. Shared memory (`shm`) gets
/// more (40 times at 4 KiB and below): its round trips take well under a
/// microsecond, and its first message to a peer (mapping the peer's
/// region, about 1 ms), which `fi_pingpong` times, would otherwise be a
/// good part of the run.
fn iterations(size: usize, quick: bool, shm: bool) -> usize {
    // Every run lasts tens of milliseconds at least: shorter ones (1,000
    // shm round trips at 64 KiB took 4 ms) swing by 15% with an interrupt
    // or a change of host mode. Large sizes also get enough round trips
    // that the first messages and shm's trials of both large-message
    // copies (runs of 8 of each) are a small part of the timed run (100
    // at 256 KiB left them a sixth).
    let n = match size {
        0..=4096 if shm => 200_000,
        0..=4096 => 5000,
        4097..=65536 if shm => 20_000,
        4097..=65536 => 2000,
        65537..=1048576 if shm => 2000,
        65537..=1048576 => 1000,
        _ => 300,
    };
    if quick { (n / 4).max(20) } else { n }
}

/// Whether a configuration runs over shared memory (`fabric shm RDM`,
/// `fi_pingpong/ours shm RDM`, the raw shared-memory floor, ...).
fn is_shm(c: &Config) -> bool {
    c.name.split(' ').nth(1) == Some("shm")
}

/// Sizes of the streaming-bandwidth runs (`fabric bw`, raw TCP stream).
const STREAM_SIZES: &[usize] = &[65536, 1 << 20, 4 << 20];

/// With `--sizes`, streaming runs use the chosen sizes from this one up
/// (a stream of small messages would take long and say little).
const STREAM_MIN: usize = 65536;

/// Window iterations of a `fabric bw` run moving about 1 GiB (256 MiB
/// with `--quick`) in windows of 64.
/// Bytes one streaming run moves (and the one-copy floor copies).
fn stream_bytes(quick: bool) -> usize {
    if quick { 256 << 20 } else { 1 << 30 }
}

fn stream_iterations(size: usize, quick: bool) -> usize {
    (stream_bytes(quick) / size / 64).max(4)
}

fn default_sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![1, 4096, 65536]
    } else {
        vec![
            1,
            64,
            1024,
            4096,
            16384,
            65536,
            131072,
            524288,
            1 << 20,
            4 << 20,
        ]
    }
}

/// Where cargo puts its builds: `$CARGO_TARGET_DIR` (relative to the
/// workspace) or the workspace's `target/`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => root.join(d),
        _ => root.join("target"),
    }
}

/// Times a size's runs of one round are taken again when the host
/// changed mode during them ([`modes::changed`]); after that the round
/// keeps its mixed tag.
const MODE_RETRIES: usize = 2;

/// Runs `attempt` (which returns its measurements and the probes taken
/// around them) until its probes fall in one host mode, at most
/// [`MODE_RETRIES`] times again; `again` hears of every retry (its number
/// and the probes that caused it). The last attempt is kept either way.
fn in_one_mode<T>(
    mut attempt: impl FnMut() -> (T, Vec<f64>),
    mut again: impl FnMut(usize, &[f64]),
) -> T {
    let mut tries = 0;
    loop {
        let (got, probes) = attempt();
        if tries == MODE_RETRIES || !modes::changed(&probes) {
            return got;
        }
        tries += 1;
        again(tries, &probes);
    }
}

/// The probes of a run: the shared-memory floor at 1 B, taken before and
/// after every measured run; NaN for a probe that failed.
struct Prober {
    exe: String,
    probes: Vec<f64>,
    failed: bool,
}

/// Round trips per probe batch, and batches per probe (the probe is the
/// fastest batch, so that preempted batches do not move it).
const PROBE_ITERS: usize = 5000;
const PROBE_BATCHES: usize = 5;

impl Prober {
    /// Takes a probe; returns its index.
    fn probe(&mut self, bar: &indicatif::ProgressBar) -> usize {
        let c = raw_shm(&self.exe);
        let v = run_config(&c, 1, PROBE_ITERS, 0, ("1", "0"), Some(PROBE_BATCHES));
        let usec = match v {
            Ok(s) => s.usec,
            Err(e) => {
                if !self.failed {
                    bar.println(format!(
                        "--- host-mode probe failed (modes will be unknown where it fails): {e}"
                    ));
                    self.failed = true;
                }
                f64::NAN
            }
        };
        self.probes.push(usec);
        self.probes.len() - 1
    }
}

/// Returns how many sizes were flagged (ours slower than theirs in some
/// round).
fn run(o: &Opts) -> Result<usize, String> {
    let start = Instant::now();
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .map(|d| PathBuf::from(d).join(".."))
        .unwrap_or_else(|_| PathBuf::from("."));
    // The output's folder first: a bad `--out` fails now, not after the
    // runs.
    if let Some(dir) = o.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let target = target_dir(&root);
    println!("==> building fabric-cli and the floor helpers (release)");
    let st = Command::new("cargo")
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "fabric-cli",
            "-p",
            "xtask",
        ])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !st.success() {
        return Err("cargo build --release -p fabric-cli -p xtask failed".into());
    }
    let fabric = target.join("release/fabric");
    if !fabric.exists() {
        return Err(format!(
            "{} is missing after the build (CARGO_TARGET_DIR?)",
            fabric.display()
        ));
    }
    let helper = target.join("release/xtask");
    let exe = if helper.exists() {
        helper
    } else {
        println!(
            "--- {} missing: floors run from this (debug) build",
            helper.display()
        );
        std::env::current_exe().map_err(|e| format!("finding xtask: {e}"))?
    }
    .display()
    .to_string();
    if !have("taskset") {
        return Err("`taskset` (util-linux) is needed to pin processes".into());
    }
    let fi = have("fi_pingpong");
    if !fi {
        println!(
            "--- fi_pingpong not found: `apt-get install libfabric-bin` to compare against libfabric"
        );
    }
    let mut providers = compiled_providers(&fabric)?;
    if let Some(want) = &o.providers {
        let known: Vec<&str> = providers.iter().map(|(p, _)| p.as_str()).collect();
        if let Some(bad) = want.iter().find(|w| !known.contains(&w.as_str())) {
            return Err(format!(
                "--providers: `{bad}` is not compiled into {} (it has: {})",
                fabric.display(),
                known.join(", ")
            ));
        }
        providers.retain(|(p, _)| want.contains(p));
    }
    let has = |name: &str| {
        providers
            .iter()
            .any(|(p, eps)| p == name && !eps.is_empty())
    };
    let (with_tcp, with_shm) = (has("tcp"), has("shm"));
    let capi_lib = if fi && (with_tcp || with_shm) {
        capi_lib(&root, &target)
    } else {
        Ok(None)
    }?;
    let mut configs = Vec::new();
    for (p, eps) in &providers {
        if eps.is_empty() {
            println!("--- {p}: no endpoints on this machine, not measured");
            continue;
        }
        for ep in eps {
            configs.push(ours(&fabric, p, ep));
            configs.push(ours_again(&fabric, p, ep));
        }
        if fi {
            match p.as_str() {
                "tcp" => {
                    configs.push(theirs("tcp;ofi_rxm", "rdm"));
                    configs.push(theirs("tcp", "msg"));
                }
                "shm" => configs.push(theirs("shm", "rdm")),
                _ => {}
            }
        }
        if let Some(lib) = &capi_lib {
            if matches!(p.as_str(), "tcp" | "shm") {
                for ep in eps {
                    configs.push(on_capi(lib, p, ep));
                    configs.push(late_recv(&fabric, p, ep));
                }
            }
        }
    }
    if configs.is_empty() {
        return Err("nothing to measure: no selected provider has endpoints here".into());
    }
    let sizes = o.sizes.clone().unwrap_or_else(|| default_sizes(o.quick));
    let stream_sizes: Vec<usize> = match &o.sizes {
        Some(s) => s.iter().copied().filter(|&n| n >= STREAM_MIN).collect(),
        None => STREAM_SIZES.to_vec(),
    };
    // The per-size floors run in the same alternation as the rest, so that
    // their ratios compare runs seconds apart (this host's speed changes
    // for seconds at a time).
    let mut floor_configs = Vec::new();
    if with_tcp {
        floor_configs.push(raw_tcp(&exe));
    }
    if with_shm {
        floor_configs.push(raw_shm(&exe));
    }
    let steps = (o.rounds * sizes.len() * (configs.len() + floor_configs.len())) as u64;
    let bar = if std::io::stdout().is_terminal() {
        indicatif::ProgressBar::new(steps)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut prober = Prober {
        exe: exe.clone(),
        probes: Vec::new(),
        failed: false,
    };
    let mut port = 48600u16;
    let mut results: BTreeMap<String, Series> = BTreeMap::new();
    for round in 0..o.rounds {
        for &size in &sizes {
            // Alternate: every configuration at this size, then the next
            // size; a probe between every two runs. A group whose probes
            // fall in two modes compares runs taken at two host speeds:
            // it runs again (its probes stay in the record).
            let mut first_try = true;
            let group = in_one_mode(
                || {
                    let first = prober.probes.len();
                    let mut group = Vec::new();
                    let mut before = prober.probe(&bar);
                    for c in configs.iter().chain(&floor_configs) {
                        bar.set_message(format!("round {} {} {size} B", round + 1, c.name));
                        if size <= c.max {
                            port = port.wrapping_add(1).max(48600);
                            let iters = iterations(size, o.quick, is_shm(c));
                            let r = run_config(c, size, iters, port, ("1", "0"), None);
                            let after = prober.probe(&bar);
                            match r {
                                Ok(mut s) => {
                                    s.round = round;
                                    s.span = Some((before, after));
                                    group.push((c.name.clone(), s));
                                }
                                Err(e) => bar.println(format!("--- {} {size} B: {e}", c.name)),
                            }
                            before = after;
                        }
                        if first_try {
                            bar.inc(1);
                        }
                    }
                    first_try = false;
                    let probes = prober.probes.get(first..).unwrap_or_default().to_vec();
                    (group, probes)
                },
                |again, probes| {
                    bar.println(format!(
                        "--- round {} at {size} B: the host changed mode during the runs (probes {}); running them again ({again} of {MODE_RETRIES})",
                        round + 1,
                        modes::probes_text(probes),
                    ))
                },
            );
            for (name, s) in group {
                results
                    .entry(name)
                    .or_default()
                    .entry(size)
                    .or_default()
                    .push(s);
            }
        }
    }
    bar.finish_and_clear();
    let bw_providers: Vec<&String> = providers
        .iter()
        .filter(|(_, eps)| eps.contains(&"rdm"))
        .map(|(p, _)| p)
        .collect();
    let mut stream: BTreeMap<String, BTreeMap<usize, Vec<Sample>>> = BTreeMap::new();
    let mut window_rounds: Series = Series::new();
    if stream_sizes.is_empty() || bw_providers.is_empty() {
        println!("==> streaming bandwidth: no size from 64 KiB up or no RDM provider, skipped");
    } else {
        println!(
            "==> streaming bandwidth (fabric bw, window 64), the one-copy floor at each size in every round"
        );
        for round in 0..o.rounds {
            let mut before = prober.probe(&bar);
            for &size in &stream_sizes {
                let mbps = copy_window_mbps(size, stream_bytes(o.quick));
                let after = prober.probe(&bar);
                window_rounds.entry(size).or_default().push(Sample {
                    usec: f64::NAN,
                    mbps,
                    round,
                    span: Some((before, after)),
                });
                before = after;
                for p in &bw_providers {
                    let c = ours_bw(&fabric, p);
                    port = port.wrapping_add(1).max(48600);
                    let r = run_config(
                        &c,
                        size,
                        stream_iterations(size, o.quick),
                        port,
                        ("1", "0"),
                        None,
                    );
                    let after = prober.probe(&bar);
                    match r {
                        Ok(mut s) => {
                            s.round = round;
                            s.span = Some((before, after));
                            stream
                                .entry(c.name.clone())
                                .or_default()
                                .entry(size)
                                .or_default()
                                .push(s)
                        }
                        Err(e) => println!("--- {} {size} B: {e}", c.name),
                    }
                    before = after;
                }
            }
        }
    }
    println!("==> one core (both processes on cpu 1), 1 B");
    let mut one_core: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for round in 0..o.rounds {
        for c in &configs {
            port = port.wrapping_add(1).max(48600);
            let n = if c.ours || c.capi { 2000 } else { 100 };
            match run_config(c, 1, n, port, ("1", "1"), None) {
                Ok(mut s) => {
                    s.round = round;
                    one_core.entry(c.name.clone()).or_default().push(s)
                }
                Err(e) => println!("--- one core {}: {e}", c.name),
            }
        }
    }
    println!("==> floors");
    let floors = Floors {
        tcp_pingpong: results.remove(RAW_TCP).unwrap_or_default(),
        shm_pingpong: results.remove(RAW_SHM).unwrap_or_default(),
        window_rounds,
        ..measure_floors(&exe, o, if with_tcp { &stream_sizes } else { &[] })
    };
    let modes = Modes::cluster(&prober.probes);
    let runs = Runs {
        pingpong: results,
        stream,
        one_core,
    };
    let pairs = pairs(&configs);
    let table = RatioTable::new(&pairs, &runs, &floors, &sizes, &modes);
    print!("{}", table.text(&modes));
    print!(
        "{}",
        stream_text(&runs.stream, &floors, &stream_sizes, &modes)
    );
    let md = report(
        o,
        &configs,
        &runs,
        &floors,
        &Shape {
            sizes: &sizes,
            stream_sizes: &stream_sizes,
        },
        &table,
        &modes,
        start.elapsed(),
    );
    std::fs::write(&o.out, md).map_err(|e| format!("writing {}: {e}", o.out.display()))?;
    let dir = o
        .out
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
        .join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    chart(
        &dir.join("latency.svg"),
        "one-way latency (us)",
        &runs.pingpong,
        &floors,
        &sizes,
        |s| s.usec,
    )?;
    chart(
        &dir.join("bandwidth.svg"),
        "ping-pong bandwidth (MB/s)",
        &runs.pingpong,
        &floors,
        &sizes,
        |s| s.mbps,
    )?;
    println!(
        "wrote {} and {}/{{latency,bandwidth}}.svg in {:.0} s",
        o.out.display(),
        dir.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(table.flagged_sizes())
}

/// The share of the one-copy floor `fabric bw shm` reaches below which a
/// streaming size is flagged (the goal: at least 60% from 64 KiB up).
const SHM_FLOOR_SHARE: f64 = 0.6;

/// The streaming summary printed after the latency table: per size,
/// `fabric bw shm` over the one-copy floor of the same round, flagged when
/// some round is below [`SHM_FLOOR_SHARE`].
fn stream_text(
    stream: &BTreeMap<String, Series>,
    floors: &Floors,
    sizes: &[usize],
    modes: &Modes,
) -> String {
    let mut t = String::new();
    let Some(shm) = stream.get("fabric bw shm") else {
        return t;
    };
    for &size in sizes {
        let (Some(ours), Some(window)) = (shm.get(&size), floors.window_rounds.get(&size)) else {
            continue;
        };
        let rounds = per_round(ours, window, |s| s.mbps, modes);
        if rounds.is_empty() {
            continue;
        }
        let ratios: Vec<f64> = rounds.iter().map(|r| r.ratio).collect();
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            t,
            "  fabric bw shm / one-copy floor {:>8}  median {:.2}  rounds: {}{}",
            size_name(size),
            median(&ratios),
            rounds_text(&rounds),
            if low < SHM_FLOOR_SHARE {
                format!("  <-- BELOW {SHM_FLOOR_SHARE} (min {low:.2})")
            } else {
                String::new()
            }
        );
    }
    t
}

/// The providers compiled into `fabric`, each with the endpoint types
/// (`rdm`, `msg`) it offers on this machine (verbs offers none without an
/// RDMA device).
fn compiled_providers(fabric: &Path) -> Result<Vec<(String, Vec<&'static str>)>, String> {
    let out = Command::new(fabric)
        .args(["info", "-l"])
        .output()
        .map_err(|e| format!("running {} info -l: {e}", fabric.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} info -l failed ({}): {}",
            fabric.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let list: Vec<(String, Vec<&'static str>)> = text
        .lines()
        .filter_map(|l| l.strip_suffix(':'))
        .map(|p| {
            let eps = [("rdm", "FI_EP_RDM"), ("msg", "FI_EP_MSG")]
                .into_iter()
                .filter(|(_, t)| {
                    Command::new(fabric)
                        .args(["info", "-p", p, "-t", t])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success())
                })
                .map(|(e, _)| e)
                .collect();
            (p.to_string(), eps)
        })
        .collect();
    if list.is_empty() {
        return Err(format!(
            "{} info -l listed no provider (expected `NAME:` lines): {:?}",
            fabric.display(),
            text.chars().take(200).collect::<String>()
        ));
    }
    Ok(list)
}

/// Our `fabric pingpong` with provider `p` on endpoint type `ep`.
fn ours(fabric: &Path, p: &str, ep: &str) -> Config {
    let f = fabric.display().to_string();
    let args = |f: String| -> Vec<String> {
        vec![
            f,
            "pingpong".into(),
            "-p".into(),
            p.into(),
            "-e".into(),
            ep.into(),
            // No untimed warm-up: fi_pingpong has none, so both time the
            // same rounds (the first messages of a size, and shm's trials
            // of both large-message copies, count for both).
            "-W".into(),
            "0".into(),
            "--json".into(),
        ]
    };
    Config {
        name: format!("fabric {p} {}", ep.to_uppercase()),
        ours: true,
        server: args(f.clone()),
        client: args(f),
        max: usize::MAX,
        capi: false,
        late: false,
        again: false,
        one_process: false,
        env: Vec::new(),
    }
}

/// Our `fabric pingpong --late-recv` with provider `p` on endpoint type
/// `ep`: the per-round work of `fi_pingpong`.
fn late_recv(fabric: &Path, p: &str, ep: &str) -> Config {
    let mut c = ours(fabric, p, ep);
    c.name = format!("fabric/late-recv {p} {}", ep.to_uppercase());
    c.late = true;
    for args in [&mut c.server, &mut c.client] {
        args.push("--late-recv".into());
    }
    c
}

/// A second `fabric pingpong` with provider `p` on endpoint type `ep`
/// (see [`Config::again`]).
fn ours_again(fabric: &Path, p: &str, ep: &str) -> Config {
    let mut c = ours(fabric, p, ep);
    c.name = format!("fabric/again {p} {}", ep.to_uppercase());
    c.again = true;
    c
}

/// Builds the C library (`fabric-capi`, release, its default providers)
/// and puts it as `libfabric.so.1` in a folder of its own, for
/// `LD_LIBRARY_PATH`; `None` (and a note) if it cannot be built.
fn capi_lib(root: &Path, target: &Path) -> Result<Option<PathBuf>, String> {
    println!("==> building fabric-capi (release): fi_pingpong on our libfabric.so.1");
    let st = Command::new("cargo")
        .args(["build", "--quiet", "--release", "-p", "fabric-capi"])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !st.success() {
        println!(
            "--- cargo build --release -p fabric-capi failed: fi_pingpong on ours not measured"
        );
        return Ok(None);
    }
    let dir = target.join("release/capi-lib");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let so = target.join("release/libfabric_capi.so");
    std::fs::copy(&so, dir.join("libfabric.so.1"))
        .map_err(|e| format!("copying {}: {e}", so.display()))?;
    Ok(Some(dir))
}

/// Debian's `fi_pingpong` with provider `p` on endpoint type `ep`, on our
/// C library in `lib`.
fn on_capi(lib: &Path, p: &str, ep: &str) -> Config {
    let mut c = theirs(p, ep);
    c.name = format!("fi_pingpong/ours {p} {}", ep.to_uppercase());
    c.capi = true;
    c.env = vec![("LD_LIBRARY_PATH".into(), lib.display().to_string())];
    c
}

/// Our `fabric bw` (a window of 64 sends in flight) with provider `p`.
fn ours_bw(fabric: &Path, p: &str) -> Config {
    let f = fabric.display().to_string();
    let args = |f: String| -> Vec<String> {
        vec![
            f,
            "bw".into(),
            "-p".into(),
            p.into(),
            "-W".into(),
            "64".into(),
            "--json".into(),
        ]
    };
    Config {
        name: format!("fabric bw {p}"),
        ours: true,
        server: args(f.clone()),
        client: args(f),
        max: usize::MAX,
        capi: false,
        late: false,
        again: false,
        one_process: false,
        env: Vec::new(),
    }
}

/// Whether `ours` and `theirs` run the same provider and endpoint type
/// (`fabric tcp RDM` pairs with `fi_pingpong tcp;ofi_rxm RDM`).
fn same_kind(ours: &Config, theirs: &Config) -> bool {
    let key = |c: &Config| {
        let w: Vec<&str> = c.name.split(' ').collect();
        let prov = w.get(1).map(|p| p.split(';').next().unwrap_or(p));
        (prov.map(str::to_string), w.last().map(|e| e.to_string()))
    };
    key(ours) == key(theirs)
}

fn theirs(p: &str, ep: &str) -> Config {
    Config {
        name: format!("fi_pingpong {p} {}", ep.to_uppercase()),
        ours: false,
        server: vec![
            "fi_pingpong".into(),
            "-p".into(),
            p.into(),
            "-e".into(),
            ep.into(),
        ],
        client: vec![
            "fi_pingpong".into(),
            "-p".into(),
            p.into(),
            "-e".into(),
            ep.into(),
        ],
        max: usize::MAX,
        capi: false,
        late: false,
        again: false,
        one_process: false,
        env: Vec::new(),
    }
}

/// One run of `c`: the server on `cpus.0`, the client on `cpus.1`; a
/// one-process configuration gets both cores and `batches`. The sample's
/// round and probes are the caller's to fill in.
fn run_config(
    c: &Config,
    size: usize,
    iters: usize,
    port: u16,
    cpus: (&str, &str),
    batches: Option<usize>,
) -> Result<Sample, String> {
    if c.one_process {
        return one_process(c, size, iters, cpus, batches);
    }
    match pingpong(c, size, iters, port, cpus) {
        // The server did not listen: its port (inside the kernel's
        // ephemeral range) may be held by another connection's local end.
        // Once more, well away from the ports the runs walk through.
        Err(e) if e.contains("Connection refused") => {
            let again = port.wrapping_add(5000).max(48600);
            pingpong(c, size, iters, again, cpus)
                .map_err(|e2| format!("{e}; again on port {again}: {e2}"))
        }
        r => r,
    }
}

/// A one-process configuration (the shared-memory floor), which pins its
/// own two threads.
fn one_process(
    c: &Config,
    size: usize,
    iters: usize,
    cpus: (&str, &str),
    batches: Option<usize>,
) -> Result<Sample, String> {
    let (program, args) = c
        .client
        .split_first()
        .ok_or_else(|| format!("{}: empty command", c.name))?;
    let mut cmd = Command::new("timeout");
    cmd.arg("120")
        .arg(program)
        .args(args)
        .args(["-S", &size.to_string(), "-I", &iters.to_string()])
        .args(["--cpus", &format!("{},{}", cpus.0, cpus.1)])
        .envs(c.env.iter().map(|(k, v)| (k, v)));
    if let Some(b) = batches {
        cmd.args(["-R", &b.to_string()]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("starting {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse_ours(&String::from_utf8_lossy(&out.stdout))
}

/// One ping-pong run: the server on `cpus.0`, the client on `cpus.1`.
fn pingpong(
    c: &Config,
    size: usize,
    iters: usize,
    port: u16,
    cpus: (&str, &str),
) -> Result<Sample, String> {
    let (s, i) = (size.to_string(), iters.to_string());
    let port_s = port.to_string();
    let mut server = Command::new("taskset");
    server
        .args(["-c", cpus.0])
        .args(&c.server)
        .args(["-S", &s, "-I", &i, "-B", &port_s]);
    // The server's complaints go to a file (a pipe could fill while it
    // runs, with a log level set), read when the client failed.
    let err_path = std::env::temp_dir().join(format!("fabric-bench-server-{port}.err"));
    let err_file = std::fs::File::create(&err_path)
        .map_err(|e| format!("creating {}: {e}", err_path.display()))?;
    server.stdout(Stdio::null()).stderr(err_file);
    server.envs(c.env.iter().map(|(k, v)| (k, v)));
    let mut srv = server
        .spawn()
        .map_err(|e| format!("starting the server: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Command::new("timeout");
    client
        .args(["120", "taskset", "-c", cpus.1])
        .args(&c.client)
        .args(["-S", &s, "-I", &i, "-P", &port_s, "127.0.0.1"])
        .envs(c.env.iter().map(|(k, v)| (k, v)));
    let out = client
        .output()
        .map_err(|e| format!("starting the client: {e}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = srv.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = srv.kill();
    let _ = srv.wait();
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let server_said = std::fs::read_to_string(&err_path).unwrap_or_default();
        let _ = std::fs::remove_file(&err_path);
        return Err(format!(
            "client failed: {} (server: {})",
            String::from_utf8_lossy(&out.stderr).trim(),
            tail(server_said.trim())
        ));
    }
    let _ = std::fs::remove_file(&err_path);
    if c.ours && !c.capi {
        parse_ours(&text)
    } else {
        parse_theirs(&text)
    }
}

/// The last JSON line of `fabric pingpong --json` (or a floor helper):
/// `usec_per_xfer` and `mb_per_sec`.
fn parse_ours(text: &str) -> Result<Sample, String> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("no JSON line in the client's output: {}", tail(text)))?;
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("bad JSON line {line:?}: {e}"))?;
    let field = |k: &str| {
        v[k].as_f64()
            .ok_or_else(|| format!("JSON line without a number `{k}`: {line:?}"))
    };
    Ok(Sample {
        usec: field("usec_per_xfer")?,
        mbps: field("mb_per_sec")?,
        round: 0,
        span: None,
    })
}

/// `fi_pingpong`'s result line: `bytes #sent #ack total time MB/sec
/// usec/xfer Mxfers/sec`. Both rates print with two decimals, so below
/// 1 µs per transfer the latency comes from Mxfers/sec, its inverse, which
/// has more digits there (0.31 µs is 3.23 Mxfers/sec: a step of 0.3%
/// rather than 3%).
fn parse_theirs(text: &str) -> Result<Sample, String> {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with("bytes"))
        .ok_or_else(|| format!("no result line in fi_pingpong's output: {}", tail(text)))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let field = |i: usize, what: &str| -> Result<f64, String> {
        f.get(i).and_then(|w| w.parse().ok()).ok_or_else(|| {
            format!(
                "fi_pingpong's line has no {what} in column {}: {line:?}",
                i + 1
            )
        })
    };
    let usec = field(6, "usec/xfer")?;
    let rate = field(7, "Mxfers/sec")?;
    Ok(Sample {
        mbps: field(5, "MB/sec")?,
        usec: if rate > usec { 1.0 / rate } else { usec },
        round: 0,
        span: None,
    })
}

/// The end of a program's output, for an error message.
fn tail(text: &str) -> String {
    let t = text.trim();
    let start = t.char_indices().rev().nth(300).map(|(i, _)| i).unwrap_or(0);
    format!("{:?}", &t[start..])
}

/// What the configurations measured.
struct Runs {
    /// Ping-pong samples per configuration and size.
    pingpong: BTreeMap<String, Series>,
    /// Streaming samples (MB/s) per `fabric bw` configuration and size.
    stream: BTreeMap<String, Series>,
    /// 1 B ping-pong samples with both processes on one core.
    one_core: BTreeMap<String, Vec<Sample>>,
}

/// The floors, by name.
struct Floors {
    /// The raw TCP ping-pong, per size, in the alternation.
    tcp_pingpong: Series,
    /// The raw shared-memory ping-pong, per size, in the alternation.
    shm_pingpong: Series,
    tcp_stream_mbps: Vec<(usize, Vec<f64>)>,
    /// The one-copy floor of a 64-message window (MB/s) per size,
    /// measured in every streaming round next to `fabric bw`.
    window_rounds: Series,
    memcpy_mbps: Vec<f64>,
    cross_core_mbps: Vec<f64>,
    cacheline_usec: Vec<f64>,
}

/// The raw TCP ping-pong floor: the `floor-tcp` helper of `exe`.
fn raw_tcp(exe: &str) -> Config {
    let args = |role: &str| -> Vec<String> {
        vec![exe.into(), "bench".into(), "floor-tcp".into(), role.into()]
    };
    Config {
        name: RAW_TCP.into(),
        ours: true,
        server: args("server"),
        client: args("client"),
        max: usize::MAX,
        capi: false,
        late: false,
        again: false,
        one_process: false,
        env: Vec::new(),
    }
}

/// The raw shared-memory ping-pong floor (and the host-mode probe): the
/// `floor-shm` helper of `exe`, one process pinning its two threads.
fn raw_shm(exe: &str) -> Config {
    Config {
        name: RAW_SHM.into(),
        ours: true,
        server: Vec::new(),
        client: vec![exe.into(), "bench".into(), "floor-shm".into()],
        max: usize::MAX,
        capi: false,
        late: false,
        again: false,
        one_process: true,
        env: Vec::new(),
    }
}

/// The floors measured after the alternation: the raw TCP stream at
/// `stream_sizes`, memcpy, the copy across cores, the cache-line
/// ping-pong.
fn measure_floors(exe: &str, o: &Opts, stream_sizes: &[usize]) -> Floors {
    let mut f = Floors {
        tcp_pingpong: Series::new(),
        shm_pingpong: Series::new(),
        tcp_stream_mbps: Vec::new(),
        window_rounds: Series::new(),
        memcpy_mbps: Vec::new(),
        cross_core_mbps: Vec::new(),
        cacheline_usec: Vec::new(),
    };
    let mut port = 49600u16;
    for &size in stream_sizes {
        let mut v = Vec::new();
        for _ in 0..o.rounds {
            port = port.wrapping_add(1).max(49600);
            let stream = Config {
                name: "raw TCP stream".into(),
                ours: true,
                server: vec![
                    exe.into(),
                    "bench".into(),
                    "floor-stream".into(),
                    "server".into(),
                ],
                client: vec![
                    exe.into(),
                    "bench".into(),
                    "floor-stream".into(),
                    "client".into(),
                ],
                max: usize::MAX,
                capi: false,
                late: false,
                again: false,
                one_process: false,
                env: Vec::new(),
            };
            let total = if o.quick { 256 } else { 1024 } * (1 << 20) / size;
            match pingpong(&stream, size, total.max(1), port, ("1", "0")) {
                Ok(s) => v.push(s.mbps),
                Err(e) => println!("--- raw TCP stream {size} B: {e}"),
            }
        }
        f.tcp_stream_mbps.push((size, v));
    }
    for _ in 0..o.rounds {
        f.memcpy_mbps.push(memcpy_mbps());
        f.cross_core_mbps.push(cross_core_copy_mbps());
        f.cacheline_usec.push(cacheline_usec());
    }
    f
}

/// What a ratio compares.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PairKind {
    /// Our program against libfabric's on the same provider: flagged
    /// when ours is slower in some round.
    OursTheirs,
    /// `fi_pingpong` on our library against it on Debian's: flagged too.
    CapiTheirs,
    /// `fi_pingpong` on our library against our own program.
    CapiOurs,
    /// Our program against itself (the noise of identical runs).
    Again,
    /// Ours against a floor.
    Floor,
}

/// Two configurations whose per-round latency ratio `a / b` is reported.
struct Pair {
    a: String,
    b: String,
    /// The column's title.
    label: String,
    kind: PairKind,
}

impl Pair {
    fn flags(&self) -> bool {
        matches!(self.kind, PairKind::OursTheirs | PairKind::CapiTheirs)
    }
}

/// The ratio columns, in the tables' order: ours / theirs, the C library's
/// columns, ours / each floor.
fn pairs(configs: &[Config]) -> Vec<Pair> {
    let ours: Vec<&Config> = configs
        .iter()
        .filter(|c| c.ours && !c.capi && !c.late && !c.again)
        .collect();
    let late: Vec<&Config> = configs.iter().filter(|c| c.late).collect();
    let again: Vec<&Config> = configs.iter().filter(|c| c.again).collect();
    let theirs: Vec<&Config> = configs.iter().filter(|c| !c.ours && !c.capi).collect();
    let capi: Vec<&Config> = configs.iter().filter(|c| c.capi).collect();
    let mut v = Vec::new();
    // Every `a` against every `b` of its provider and endpoint type.
    let mut join = |left: &[&Config],
                    right: &[&Config],
                    label: &dyn Fn(&Config, &Config) -> String,
                    kind: PairKind| {
        for a in left {
            for b in right.iter().filter(|b| same_kind(a, b)) {
                v.push(Pair {
                    a: a.name.clone(),
                    b: b.name.clone(),
                    label: label(a, b),
                    kind,
                });
            }
        }
    };
    let ratio = |a: &Config, b: &Config| format!("{} / {}", a.name, b.name);
    join(&ours, &theirs, &ratio, PairKind::OursTheirs);
    join(
        &again,
        &ours,
        &|_, o| format!("fabric pingpong again / fabric pingpong ({})", o.name),
        PairKind::Again,
    );
    for c in &capi {
        let c = [*c];
        join(
            &c,
            &ours,
            &|c, _| format!("fi_pingpong on ours / fabric pingpong ({})", c.name),
            PairKind::CapiOurs,
        );
        join(
            &c,
            &late,
            &|c, _| {
                format!(
                    "fi_pingpong on ours / fabric pingpong --late-recv ({})",
                    c.name
                )
            },
            PairKind::CapiOurs,
        );
        join(&c, &theirs, &ratio, PairKind::CapiTheirs);
    }
    for (prefix, floor, short) in [
        ("fabric tcp", RAW_TCP, "raw TCP"),
        ("fabric shm", RAW_SHM, "raw shm"),
    ] {
        for o in ours.iter().filter(|c| c.name.starts_with(prefix)) {
            v.push(Pair {
                a: o.name.clone(),
                b: floor.to_string(),
                label: format!("{} / {short}", o.name),
                kind: PairKind::Floor,
            });
        }
    }
    v
}

/// Every pair's per-round latency ratios at every size.
struct RatioTable<'a> {
    pairs: &'a [Pair],
    sizes: Vec<usize>,
    /// `[pair][size]`.
    ratios: Vec<Vec<Vec<RoundRatio>>>,
    by_mode: Vec<Vec<String>>,
}

impl<'a> RatioTable<'a> {
    fn new(
        pairs: &'a [Pair],
        runs: &Runs,
        floors: &Floors,
        sizes: &[usize],
        modes: &Modes,
    ) -> RatioTable<'a> {
        let samples = |name: &str, size: usize| -> Vec<Sample> {
            let series = match name {
                RAW_TCP => Some(&floors.tcp_pingpong),
                RAW_SHM => Some(&floors.shm_pingpong),
                _ => runs.pingpong.get(name),
            };
            series
                .and_then(|s| s.get(&size))
                .cloned()
                .unwrap_or_default()
        };
        let ratios: Vec<Vec<Vec<RoundRatio>>> = pairs
            .iter()
            .map(|p| {
                sizes
                    .iter()
                    .map(|&size| {
                        per_round(
                            &samples(&p.a, size),
                            &samples(&p.b, size),
                            |s| s.usec,
                            modes,
                        )
                    })
                    .collect()
            })
            .collect();
        let by_mode = ratios
            .iter()
            .map(|per_size| per_size.iter().map(|r| by_mode_text(r, modes)).collect())
            .collect();
        RatioTable {
            pairs,
            sizes: sizes.to_vec(),
            ratios,
            by_mode,
        }
    }

    /// The rounds' ratios of pair `p` at size index `s`.
    fn get(&self, p: usize, s: usize) -> &[RoundRatio] {
        &self.ratios[p][s]
    }

    /// The median of the per-round ratios (NaN without any).
    fn median(&self, p: usize, s: usize) -> f64 {
        let v: Vec<f64> = self.get(p, s).iter().map(|r| r.ratio).collect();
        median(&v)
    }

    /// The largest per-round ratio when above 1.0 on a flagged pair.
    fn flag(&self, p: usize, s: usize) -> Option<f64> {
        if !self.pairs[p].flags() {
            return None;
        }
        let max = self
            .get(p, s)
            .iter()
            .map(|r| r.ratio)
            .fold(f64::NEG_INFINITY, f64::max);
        (max > 1.0).then_some(max)
    }

    /// How many (pair, size) cells are flagged: sizes where ours was
    /// slower than theirs in some round, counted per pair.
    fn flagged_sizes(&self) -> usize {
        (0..self.pairs.len())
            .map(|p| {
                (0..self.sizes.len())
                    .filter(|&s| self.flag(p, s).is_some())
                    .count()
            })
            .sum()
    }

    /// The per-round table for the terminal.
    fn text(&self, modes: &Modes) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "\n==> host modes: {}", modes.summary());
        let _ = writeln!(
            t,
            "==> one-way latency ratios, every round (ratio and host mode; A is the fastest mode, A/B a round that spanned two):"
        );
        let width = self.pairs.iter().map(|p| p.label.len()).max().unwrap_or(0);
        for (p, pair) in self.pairs.iter().enumerate() {
            for (s, &size) in self.sizes.iter().enumerate() {
                let r = self.get(p, s);
                if r.is_empty() {
                    continue;
                }
                let flag = match self.flag(p, s) {
                    Some(max) => format!("  <-- ABOVE 1.0 (max {})", fmt(max)),
                    None => String::new(),
                };
                let _ = writeln!(
                    t,
                    "  {:width$}  {:>7}  median {:>5}  by mode: {:<16}  rounds: {}{flag}",
                    pair.label,
                    size_name(size),
                    fmt(self.median(p, s)),
                    self.by_mode[p][s],
                    rounds_text(r),
                );
            }
        }
        let n = self.flagged_sizes();
        if n > 0 {
            let _ = writeln!(
                t,
                "==> {n} ratio/size cell(s) where ours was slower than libfabric in at least one round (flagged above)"
            );
        } else {
            let _ = writeln!(
                t,
                "==> no size where ours was slower than libfabric in any round"
            );
        }
        t
    }

    /// The per-round table in markdown.
    fn markdown(&self, m: &mut String) {
        let _ = writeln!(
            m,
            "| ratio | size | median | median by mode | every round (ratio mode) | above 1.0 in a round |\n|---|---|---|---|---|---|"
        );
        for (p, pair) in self.pairs.iter().enumerate() {
            for (s, &size) in self.sizes.iter().enumerate() {
                let r = self.get(p, s);
                if r.is_empty() {
                    continue;
                }
                let flag = match self.flag(p, s) {
                    Some(max) => format!("⚠ max {}", fmt(max)),
                    None if pair.flags() => "no".into(),
                    None => "(floor or C-interface cost, not flagged)".into(),
                };
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} | {flag} |",
                    pair.label,
                    size_name(size),
                    fmt(self.median(p, s)),
                    self.by_mode[p][s],
                    rounds_text(r),
                );
            }
        }
        let _ = writeln!(m);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        f64::NAN
    } else {
        s[s.len() / 2]
    }
}

fn spread(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{} [{}–{}]", fmt(median(v)), fmt(lo), fmt(hi))
}

fn fmt(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// A size as `--sizes` takes it: `64k`, `1m`, `100`.
fn size_arg(n: usize) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{}m", n >> 20)
    } else if n >= 1024 && n % 1024 == 0 {
        format!("{}k", n >> 10)
    } else {
        n.to_string()
    }
}

fn size_name(s: usize) -> String {
    match s {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1024 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// The sizes of a run.
struct Shape<'a> {
    sizes: &'a [usize],
    stream_sizes: &'a [usize],
}

#[allow(clippy::too_many_arguments)]
fn report(
    o: &Opts,
    configs: &[Config],
    runs: &Runs,
    floors: &Floors,
    shape: &Shape<'_>,
    table: &RatioTable<'_>,
    modes: &Modes,
    took: Duration,
) -> String {
    let (results, stream, one_core) = (&runs.pingpong, &runs.stream, &runs.one_core);
    let sizes = shape.sizes;
    let mut m = String::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|n| n.trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mut invocation = String::from("cargo xtask bench");
    if o.quick {
        invocation.push_str(" --quick");
    }
    if o.rounds != 3 {
        let _ = write!(invocation, " --rounds {}", o.rounds);
    }
    if let Some(s) = &o.sizes {
        let list: Vec<String> = s.iter().map(|&n| size_arg(n)).collect();
        let _ = write!(invocation, " --sizes {}", list.join(","));
    }
    if let Some(p) = &o.providers {
        let _ = write!(invocation, " --providers {}", p.join(","));
    }
    let _ = writeln!(m, "# Benchmarks\n");
    let _ = writeln!(
        m,
        "Generated by `{invocation}` ({} rounds, {:.0} s) on {cores} cores ({cpu}). Servers on core 1, clients on core 0; every configuration runs at every size before the next size, so ours and theirs alternate in the same run. Figures are medians [min–max] over the rounds. One-way latency = run time / (2 × round trips); bandwidth = ping-pong bytes moved / time (fi_pingpong's MB/sec column). Ratios are ours / theirs (lower is better for latency, higher for bandwidth), the median of the per-round ratios: the raw TCP and raw shared-memory ping-pongs run in the same alternation, and each round's pair ran seconds apart, which keeps a ratio in one of this host's speed modes. The raw TCP floors (ping-pong and stream) run twice, over one connection with the system's socket defaults (here BBR, an autotuned receive buffer) and over one with the options prov-tcp gives a connection inside this host (reno in place of BBR, a 2 MiB receive buffer), and keep the faster of the two; the raw ping-pong sends from one buffer and receives into another, as both ping-pong programs do.\n",
        o.rounds,
        took.as_secs_f64()
    );
    let _ = writeln!(
        m,
        "**Host modes.** A probe (a busy-polling shared-memory ping-pong of 1 B between two threads pinned to cores 1 and 0) ran before and after every run; sorted, probes split into modes wherever one is more than {}x the one before it; the modes are named A (fastest), B and so on. This run: {}. Every per-round ratio below is tagged with the modes of the probes around its two runs (`A/B`: the host changed mode in between); a size's runs of one round whose probes fell in two modes were taken again, up to {} times, so `A/B` remains only where the host kept changing. A ⚠ marks a size where ours was slower than libfabric (latency ratio above 1.0) in at least one round, whatever the median.\n",
        modes::MODE_STEP,
        modes.summary(),
        MODE_RETRIES
    );
    let ours: Vec<&Config> = configs.iter().filter(|c| c.ours && !c.capi).collect();
    let theirs: Vec<&Config> = configs.iter().filter(|c| !c.ours && !c.capi).collect();
    let capi: Vec<&Config> = configs.iter().filter(|c| c.capi).collect();
    if configs.iter().any(|c| c.again) {
        let _ = writeln!(
            m,
            "`fabric/again` is the same `fabric pingpong` run a second time in each round's alternation: the column \"fabric pingpong again / fabric pingpong\" is how far two runs of one program differ from round to round on this host, the noise against which every other per-round ratio reads (its median should be 1.00).\n"
        );
    }
    if !capi.is_empty() {
        let _ = writeln!(
            m,
            "`fi_pingpong/ours` is Debian's `fi_pingpong` on this repository's C library (`fabric-capi`, release, as `libfabric.so.1` through `LD_LIBRARY_PATH`) with the same provider; the column \"fi_pingpong on ours / fabric pingpong\" is the cost of the C interface (same provider, endpoint type and size), \"fi_pingpong on ours / fi_pingpong\" compares the same program on our library and on Debian's. `fabric/late-recv` is `fabric pingpong --late-recv`, which posts each receive only once the previous one has come, as `fi_pingpong` does (plain `fabric pingpong` keeps two posted ahead, off the round trip's critical path): \"fi_pingpong on ours / fabric pingpong --late-recv\" compares the same per-round work. Shared-memory runs at 4 KiB and below make 40 times more round trips (200000), so that the first message's cost (mapping the peer's region, about 1 ms, which `fi_pingpong` times) does not weigh.\n"
        );
    }
    let floor_series: Vec<(&str, &Series)> = [
        (RAW_TCP, &floors.tcp_pingpong),
        (RAW_SHM, &floors.shm_pingpong),
    ]
    .into_iter()
    .filter(|(_, s)| !s.is_empty())
    .collect();
    let samples = |name: &str, size: usize| -> Vec<Sample> {
        let series = floor_series
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .or_else(|| results.get(name));
        series
            .and_then(|s| s.get(&size))
            .cloned()
            .unwrap_or_default()
    };
    let value_cols: Vec<&str> = ours
        .iter()
        .chain(theirs.iter())
        .chain(capi.iter())
        .map(|c| c.name.as_str())
        .collect();
    let pairs = table.pairs;
    for (title, pick, latency) in [
        (
            "One-way latency (µs)",
            (|s: &Sample| s.usec) as fn(&Sample) -> f64,
            true,
        ),
        ("Ping-pong bandwidth (MB/s)", |s: &Sample| s.mbps, false),
    ] {
        let _ = writeln!(m, "## {title}\n");
        // Value columns, the ratios between configurations, the floors'
        // values, the ratios to the floors.
        let (head_pairs, floor_pairs): (Vec<usize>, Vec<usize>) =
            (0..pairs.len()).partition(|&p| pairs[p].kind != PairKind::Floor);
        let mut head = String::from("| size |");
        let mut rule = String::from("|---|");
        let col = |h: &mut String, r: &mut String, name: &str| {
            let _ = write!(h, " {name} |");
            r.push_str("---|");
        };
        for c in &value_cols {
            col(&mut head, &mut rule, c);
        }
        for &p in &head_pairs {
            col(&mut head, &mut rule, &pairs[p].label);
        }
        for (name, _) in &floor_series {
            col(&mut head, &mut rule, name);
        }
        for &p in &floor_pairs {
            col(&mut head, &mut rule, &pairs[p].label);
        }
        let _ = writeln!(m, "{head}\n{rule}");
        for (si, &size) in sizes.iter().enumerate() {
            let mut row = format!("| {} |", size_name(size));
            let cell = |v: Vec<f64>| {
                if v.is_empty() {
                    "–".to_string()
                } else {
                    spread(&v)
                }
            };
            let values = |name: &str| samples(name, size).iter().map(pick).collect::<Vec<f64>>();
            let ratio = |p: usize| -> String {
                if latency {
                    let mut s = fmt(table.median(p, si));
                    if let Some(max) = table.flag(p, si) {
                        let _ = write!(s, " ⚠ (max {})", fmt(max));
                    }
                    s
                } else {
                    let r = per_round(
                        &samples(&pairs[p].a, size),
                        &samples(&pairs[p].b, size),
                        pick,
                        modes,
                    );
                    fmt(median(&r.iter().map(|x| x.ratio).collect::<Vec<_>>()))
                }
            };
            for c in &value_cols {
                let _ = write!(row, " {} |", cell(values(c)));
            }
            for &p in &head_pairs {
                let _ = write!(row, " {} |", ratio(p));
            }
            for (name, _) in &floor_series {
                let _ = write!(row, " {} |", cell(values(name)));
            }
            for &p in &floor_pairs {
                let _ = write!(row, " {} |", ratio(p));
            }
            let _ = writeln!(m, "{row}");
        }
        let _ = writeln!(m);
    }
    let _ = writeln!(
        m,
        "## Latency ratios in every round, with the host mode\n\nOne-way latency, a / b, per round; the mode letters are those of the probes around the two runs ({}).\n",
        modes.summary()
    );
    table.markdown(&mut m);
    if !shape.stream_sizes.is_empty() {
        let _ = writeln!(
            m,
            "## Streaming bandwidth (MB/s)\n\n`fabric bw` keeps 64 sends in flight (about {} MiB per run) from 64 buffers; the raw TCP stream writes the same sizes from the same number of buffers on one non-blocking socket, busy polling as `fabric bw` does (the faster of the two socket setups above), and the receiver reads them into 64 buffers (all pages touched before timing on both). Ratios: tcp against the raw stream (measured after the alternation: the ratio of the medians); shm against the one-copy floor at the same size, measured in the same round just before (one thread copying each message once from a window of 64 source buffers into 64 destination buffers, the same bytes in all; the two windows take 8 MiB at 64 KiB, which the caches hold, and 128 MiB at 1 MiB, which they do not; one thread copies, where shm may copy on both cores): the median of the per-round ratios, and every round with its host modes.\n",
            stream_bytes(o.quick) >> 20
        );
        let _ = writeln!(
            m,
            "| size | fabric bw tcp | raw TCP stream | tcp / raw | fabric bw shm | one-copy floor (same rounds) | shm / floor | shm / floor, every round |\n|---|---|---|---|---|---|---|---|"
        );
        for &size in shape.stream_sizes {
            let get = |name: &str| -> Vec<Sample> {
                stream
                    .get(name)
                    .and_then(|s| s.get(&size))
                    .cloned()
                    .unwrap_or_default()
            };
            let mbps = |v: &[Sample]| v.iter().map(|s| s.mbps).collect::<Vec<f64>>();
            let raw = floors
                .tcp_stream_mbps
                .iter()
                .find(|(s, _)| *s == size)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let (tcp, shm) = (get("fabric bw tcp"), get("fabric bw shm"));
            let window = floors.window_rounds.get(&size).cloned().unwrap_or_default();
            let cell = |v: &[f64]| {
                if v.is_empty() {
                    "–".to_string()
                } else {
                    spread(v)
                }
            };
            let vs_floor = per_round(&shm, &window, |s| s.mbps, modes);
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                size_name(size),
                cell(&mbps(&tcp)),
                cell(&raw),
                fmt(median(&mbps(&tcp)) / median(&raw)),
                cell(&mbps(&shm)),
                cell(&mbps(&window)),
                fmt(median(
                    &vs_floor.iter().map(|r| r.ratio).collect::<Vec<_>>()
                )),
                if vs_floor.is_empty() {
                    "–".to_string()
                } else {
                    rounds_text(&vs_floor)
                }
            );
        }
        let _ = writeln!(m);
    }
    let _ = writeln!(
        m,
        "## Both processes on one core (cpu 1), 1 B, one-way µs\n"
    );
    let _ = writeln!(m, "| configuration | one-way µs |\n|---|---|");
    for (name, v) in one_core {
        let us: Vec<f64> = v.iter().map(|s| s.usec).collect();
        let _ = writeln!(m, "| {name} | {} |", spread(&us));
    }
    let _ = writeln!(m, "\n## Floors\n");
    let _ = writeln!(m, "| floor | value |\n|---|---|");
    let _ = writeln!(
        m,
        "| cache-line ping-pong between two threads, one-way µs | {} |",
        spread(&floors.cacheline_usec)
    );
    let _ = writeln!(
        m,
        "| single-thread memcpy at 1 MiB, MB/s | {} |",
        spread(&floors.memcpy_mbps)
    );
    let _ = writeln!(
        m,
        "| copy of 1 MiB just written by another core (one-copy floor of a transfer), MB/s | {} |",
        spread(&floors.cross_core_mbps)
    );
    for (size, v) in &floors.tcp_stream_mbps {
        let _ = writeln!(
            m,
            "| raw TCP stream, {} writes, MB/s | {} |",
            size_name(*size),
            spread(v)
        );
    }
    let _ = writeln!(
        m,
        "\nThe raw shared-memory ping-pong (columns above) is two threads pinned to cores 1 and 0 busy-polling a turn counter; each message is one copy, the receiver copying the sender's freshly written buffer into its own, as cross-memory attach does without its system calls.\n\nCharts: [latency](bench/latency.svg), [bandwidth](bench/bandwidth.svg).\n\nReproduce: `{invocation}` (needs `taskset` and Debian's `libfabric-bin` for `fi_pingpong`; `cargo xtask bench --help` lists the options)."
    );
    m
}

fn chart(
    path: &Path,
    title: &str,
    results: &BTreeMap<String, Series>,
    floors: &Floors,
    sizes: &[usize],
    pick: fn(&Sample) -> f64,
) -> Result<(), String> {
    use plotters::prelude::*;
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = results
        .iter()
        // A second run of a program would draw over the first.
        .filter(|(name, _)| !name.starts_with("fabric/again"))
        .map(|(name, s)| {
            let pts = s
                .iter()
                .map(|(size, v)| {
                    (
                        *size as f64,
                        median(&v.iter().map(pick).collect::<Vec<_>>()),
                    )
                })
                .collect();
            (name.clone(), pts)
        })
        .collect();
    for (name, series) in [
        (RAW_TCP, &floors.tcp_pingpong),
        (RAW_SHM, &floors.shm_pingpong),
    ] {
        if series.is_empty() {
            continue;
        }
        lines.push((
            name.into(),
            series
                .iter()
                .map(|(size, v)| {
                    (
                        *size as f64,
                        median(&v.iter().map(pick).collect::<Vec<_>>()),
                    )
                })
                .collect(),
        ));
    }
    let ymin = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .filter(|y| *y > 0.0)
        .fold(f64::INFINITY, f64::min);
    let ymax = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(0.0f64, f64::max);
    if !ymin.is_finite() || ymax <= 0.0 {
        return Ok(());
    }
    let xmax = sizes.iter().copied().max().unwrap_or(1) as f64;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut ch = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (1f64..xmax * 1.5).log_scale(),
            (ymin * 0.7..ymax * 1.5).log_scale(),
        )
        .map_err(|e| err(&e))?;
    ch.configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(title)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        ch.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    ch.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fi_pingpong_latency_comes_from_the_reading_with_more_digits() {
        let head =
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n";
        let fast = parse_theirs(&format!(
            "{head}1       2m      =2m      3.8m        2.40s      1.66       0.60       1.66\n"
        ))
        .unwrap();
        assert!((fast.usec - 1.0 / 1.66).abs() < 1e-12);
        assert_eq!(fast.mbps, 1.66);
        let slow = parse_theirs(&format!(
            "{head}64k     10k     =10k     1.2g        0.34s   3855.30      17.00       0.06\n"
        ))
        .unwrap();
        assert_eq!(slow.usec, 17.0);
        assert!(parse_theirs(&format!("{head}1 2m =2m 3.8m 2.40s 1.66 0.60\n")).is_err());
    }

    #[test]
    fn a_group_that_spans_two_modes_runs_again() {
        // Mixed once, then in one mode: the second attempt is kept.
        let tries = [vec![0.240, 0.018, 0.250], vec![0.240, 0.251, 0.262]];
        let (mut n, mut heard) = (0, Vec::new());
        let got = in_one_mode(
            || {
                n += 1;
                (n, tries[n - 1].clone())
            },
            |again, probes| heard.push((again, probes.len())),
        );
        assert_eq!((got, heard), (2, vec![(1, 3)]));
        // Mixed every time: MODE_RETRIES more attempts, the last kept.
        let mut n = 0;
        let mut heard = 0;
        let got = in_one_mode(
            || {
                n += 1;
                (n, vec![0.240, 0.018])
            },
            |_, _| heard += 1,
        );
        assert_eq!((got, heard), (MODE_RETRIES + 1, MODE_RETRIES));
        // One mode at once: no retry.
        let got = in_one_mode(|| ("kept", vec![0.240, 0.300]), |_, _| panic!("no retry"));
        assert_eq!(got, "kept");
    }

    fn at(round: usize, usec: f64, span: (usize, usize)) -> Sample {
        Sample {
            usec,
            mbps: 1.0 / usec,
            round,
            span: Some(span),
        }
    }

    #[test]
    fn size_args_read_back() {
        let sizes = [1, 100, 1024, 4096, 65536, 1 << 20, 3 << 20, 1536];
        let text: Vec<String> = sizes.iter().map(|&n| size_arg(n)).collect();
        assert_eq!(text[3], "4k");
        assert_eq!(text[5], "1m");
        let mut sorted = sizes.to_vec();
        sorted.sort_unstable();
        assert_eq!(opts::parse_sizes(&text.join(",")), Ok(sorted));
    }

    #[test]
    fn a_second_run_of_ours_is_paired_with_the_first_only_and_never_flagged() {
        let f = Path::new("fabric");
        let configs = [
            ours(f, "shm", "rdm"),
            ours_again(f, "shm", "rdm"),
            ours(f, "tcp", "msg"),
            ours_again(f, "tcp", "msg"),
            theirs("shm", "rdm"),
        ];
        let pairs = pairs(&configs);
        let again: Vec<(&str, &str)> = pairs
            .iter()
            .filter(|p| p.kind == PairKind::Again)
            .map(|p| (p.a.as_str(), p.b.as_str()))
            .collect();
        assert_eq!(
            again,
            [
                ("fabric/again shm RDM", "fabric shm RDM"),
                ("fabric/again tcp MSG", "fabric tcp MSG")
            ]
        );
        assert!(
            pairs
                .iter()
                .all(|p| p.kind != PairKind::Again || !p.flags())
        );
        // Only the first run is set against libfabric.
        let against: Vec<&str> = pairs
            .iter()
            .filter(|p| p.kind == PairKind::OursTheirs)
            .map(|p| p.a.as_str())
            .collect();
        assert_eq!(against, ["fabric shm RDM"]);
    }

    #[test]
    fn a_size_slower_in_one_round_is_flagged_whatever_its_median() {
        let configs = [
            ours(Path::new("fabric"), "shm", "rdm"),
            theirs("shm", "rdm"),
            raw_shm("xtask"),
        ];
        let pairs = pairs(&configs[..2]);
        assert_eq!(pairs.len(), 2, "ours / theirs and ours / raw shm");
        assert_eq!(pairs[0].kind, PairKind::OursTheirs);
        assert_eq!(pairs[1].kind, PairKind::Floor);
        // Three rounds at 1 B: ours wins twice and loses once (in the
        // slow mode); at 64 B it always wins. Probes: fast, then slow.
        let probes = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3, 0.3, 0.3];
        let modes = Modes::cluster(&probes);
        let series = |v: Vec<(usize, f64, f64)>, off: usize| -> Series {
            let mut s = Series::new();
            for (size, a, b) in v {
                let list = vec![
                    at(0, if off == 0 { a } else { b }, (off, off + 1)),
                    at(1, if off == 0 { a } else { b }, (3 + off, 4 + off)),
                    at(2, if off == 0 { a * 3.0 } else { b }, (6 + off, 7 + off)),
                ];
                s.insert(size, list);
            }
            s
        };
        let mut pingpong = BTreeMap::new();
        pingpong.insert(
            "fabric shm RDM".to_string(),
            series(vec![(1, 0.5, 0.0), (64, 0.5, 0.0)], 0),
        );
        pingpong.insert(
            "fi_pingpong shm RDM".to_string(),
            series(vec![(1, 0.0, 1.0), (64, 0.0, 10.0)], 1),
        );
        let runs = Runs {
            pingpong,
            stream: BTreeMap::new(),
            one_core: BTreeMap::new(),
        };
        let floors = Floors {
            tcp_pingpong: Series::new(),
            shm_pingpong: Series::new(),
            tcp_stream_mbps: Vec::new(),
            window_rounds: Series::new(),
            memcpy_mbps: Vec::new(),
            cross_core_mbps: Vec::new(),
            cacheline_usec: Vec::new(),
        };
        let t = RatioTable::new(&pairs, &runs, &floors, &[1, 64], &modes);
        assert_eq!(t.median(0, 0), 0.5);
        assert_eq!(t.flag(0, 0), Some(1.5));
        assert_eq!(t.flag(0, 1), None);
        // No floor samples: nothing to flag or compare there.
        assert!(t.get(1, 0).is_empty() && t.flag(1, 0).is_none());
        assert_eq!(t.flagged_sizes(), 1);
        assert_eq!(rounds_text(t.get(0, 0)), "0.50 A, 0.50 A, 1.50 B");
        let text = t.text(&modes);
        assert!(text.contains("ABOVE 1.0 (max 1.50)"), "{text}");
        let mut md = String::new();
        t.markdown(&mut md);
        assert!(md.contains("| fabric shm RDM / fi_pingpong shm RDM | 1 B | 0.50 | A 0.50, B 1.50 | 0.50 A, 0.50 A, 1.50 B | ⚠ max 1.50 |"), "{md}");
    }

    #[test]
    fn a_streaming_size_below_the_share_of_the_floor_in_one_round_is_flagged() {
        let modes = Modes::cluster(&[0.1, 0.1, 0.1, 0.1]);
        let mbps = |round: usize, mbps: f64| Sample {
            usec: f64::NAN,
            mbps,
            round,
            span: Some((round * 2, round * 2 + 1)),
        };
        let mut shm = Series::new();
        shm.insert(65536, vec![mbps(0, 700.0), mbps(1, 500.0)]);
        shm.insert(1 << 20, vec![mbps(0, 900.0), mbps(1, 800.0)]);
        let mut stream = BTreeMap::new();
        stream.insert("fabric bw shm".to_string(), shm);
        let mut window = Series::new();
        window.insert(65536, vec![mbps(0, 1000.0), mbps(1, 1000.0)]);
        window.insert(1 << 20, vec![mbps(0, 1000.0), mbps(1, 1000.0)]);
        let floors = Floors {
            tcp_pingpong: Series::new(),
            shm_pingpong: Series::new(),
            tcp_stream_mbps: Vec::new(),
            window_rounds: window,
            memcpy_mbps: Vec::new(),
            cross_core_mbps: Vec::new(),
            cacheline_usec: Vec::new(),
        };
        let t = stream_text(&stream, &floors, &[65536, 1 << 20], &modes);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(
            lines[0].contains("64 KiB") && lines[0].contains("BELOW 0.6 (min 0.50)"),
            "{t}"
        );
        assert!(
            lines[1].contains("rounds: 0.90 A, 0.80 A") && !lines[1].contains("BELOW"),
            "{t}"
        );
    }

    #[test]
    fn the_one_copy_floor_copies_and_reports_a_rate() {
        let r = floor::copy_window_mbps(4096, 1 << 20);
        assert!(r.is_finite() && r > 0.0, "{r}");
    }
}
