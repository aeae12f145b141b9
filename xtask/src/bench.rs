//! `cargo xtask bench [--rounds N] [--quick] [--out FILE]`: our
//! `fabric pingpong` against libfabric's `fi_pingpong` on the same machine,
//! in the same run, alternating, several rounds; plus the floors (a
//! busy-polling raw TCP ping-pong, a raw TCP stream, memcpy, a cache-line
//! ping-pong). Writes BENCHMARKS.md (medians, spreads, our/their ratio per
//! size) and two SVG charts under `bench/`.
//!
//! With `fi_pingpong` installed it also runs Debian's `fi_pingpong` on our
//! C library (`fabric-capi` built in release, copied as `libfabric.so.1`
//! into `target/release/capi-lib/`, which `LD_LIBRARY_PATH` names), in the
//! same alternation: the column "fi_pingpong on ours / fabric pingpong"
//! is the cost of the C interface for the same provider and size.
//!
//! Server processes run on core 1 and clients on core 0 (`taskset`), as in
//! `../shared/notes/perf-anchors.md`; one extra round puts both on core 1.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// One measurement: one-way latency and ping-pong bandwidth.
#[derive(Debug, Clone, Copy)]
struct Sample {
    usec: f64,
    mbps: f64,
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
    /// Environment of both processes.
    env: Vec<(String, String)>,
}

struct Opts {
    rounds: usize,
    quick: bool,
    out: PathBuf,
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        rounds: 3,
        quick: false,
        out: PathBuf::from("BENCHMARKS.md"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" => {
                o.rounds = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--rounds needs a number")?
            }
            "--quick" => o.quick = true,
            "--out" => o.out = it.next().map(PathBuf::from).ok_or("--out needs a file")?,
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// Runs the benchmarks, or one of the floor helpers (`floor-*`, run as
/// child processes of this program).
pub(crate) fn main(args: &[String]) -> ExitCode {
    if args.first().is_some_and(|a| a.starts_with("floor-")) {
        return match floor_child(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask bench {}: {e}", args[0]);
                ExitCode::FAILURE
            }
        };
    }
    let opts = match parse_opts(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "xtask bench: {e}\nusage: cargo xtask bench [--rounds N] [--quick] [--out FILE]"
            );
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
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

fn iterations(size: usize, quick: bool) -> usize {
    let n = match size {
        0..=4096 => 5000,
        4097..=65536 => 1000,
        _ => 100,
    };
    if quick { (n / 4).max(20) } else { n }
}

/// Sizes of the streaming-bandwidth runs (`fabric bw`, raw TCP stream).
const STREAM_SIZES: &[usize] = &[65536, 1 << 20, 4 << 20];

/// Window iterations of a `fabric bw` run moving about 1 GiB (256 MiB
/// with `--quick`) in windows of 64.
fn stream_iterations(size: usize, quick: bool) -> usize {
    let total: usize = if quick { 256 << 20 } else { 1 << 30 };
    (total / size / 64).max(4)
}

fn sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![1, 4096, 65536]
    } else {
        vec![1, 64, 1024, 4096, 65536, 1 << 20, 4 << 20]
    }
}

fn run(o: &Opts) -> Result<(), String> {
    let start = Instant::now();
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .map(|d| PathBuf::from(d).join(".."))
        .unwrap_or_else(|_| PathBuf::from("."));
    // The output's folder first: a bad `--out` fails now, not after the
    // runs.
    if let Some(dir) = o.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    println!("==> building fabric-cli (release)");
    let st = Command::new("cargo")
        .args(["build", "--quiet", "--release", "-p", "fabric-cli"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !st.success() {
        return Err("cargo build --release -p fabric-cli failed".into());
    }
    let fabric = root.join("target/release/fabric");
    if !have("taskset") {
        return Err("`taskset` (util-linux) is needed to pin processes".into());
    }
    let fi = have("fi_pingpong");
    if !fi {
        println!(
            "--- fi_pingpong not found: `apt-get install libfabric-bin` to compare against libfabric"
        );
    }
    let capi_lib = if fi { capi_lib(&root) } else { Ok(None) }?;
    let providers = compiled_providers(&fabric);
    let mut configs = Vec::new();
    for (p, eps) in &providers {
        if eps.is_empty() {
            println!("--- {p}: no endpoints on this machine, not measured");
            continue;
        }
        for ep in eps {
            configs.push(ours(&fabric, p, ep));
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
                }
            }
        }
    }
    let sizes = sizes(o.quick);
    // The raw TCP floor runs in the same alternation as the rest, so that
    // its ratios compare runs seconds apart (this host's speed changes
    // for seconds at a time).
    let raw = raw_tcp()?;
    let steps = (o.rounds * sizes.len() * (configs.len() + 1)) as u64;
    let bar = if std::io::stdout().is_terminal() {
        indicatif::ProgressBar::new(steps)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut port = 48600u16;
    let mut results: BTreeMap<String, Series> = BTreeMap::new();
    for round in 0..o.rounds {
        for &size in &sizes {
            // Alternate: every configuration at this size, then the next size.
            for c in configs.iter().chain(std::iter::once(&raw)) {
                bar.set_message(format!("round {} {} {size} B", round + 1, c.name));
                if size <= c.max {
                    port = port.wrapping_add(1).max(48600);
                    match pingpong(c, size, iterations(size, o.quick), port, ("1", "0")) {
                        Ok(s) => results
                            .entry(c.name.clone())
                            .or_default()
                            .entry(size)
                            .or_default()
                            .push(s),
                        Err(e) => bar.println(format!("--- {} {size} B: {e}", c.name)),
                    }
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    println!("==> streaming bandwidth (fabric bw, window 64)");
    let mut stream: BTreeMap<String, BTreeMap<usize, Vec<f64>>> = BTreeMap::new();
    for _ in 0..o.rounds {
        for (p, eps) in &providers {
            if !eps.contains(&"rdm") {
                continue;
            }
            let c = ours_bw(&fabric, p);
            for &size in STREAM_SIZES {
                port = port.wrapping_add(1).max(48600);
                match pingpong(&c, size, stream_iterations(size, o.quick), port, ("1", "0")) {
                    Ok(s) => stream
                        .entry(c.name.clone())
                        .or_default()
                        .entry(size)
                        .or_default()
                        .push(s.mbps),
                    Err(e) => println!("--- {} {size} B: {e}", c.name),
                }
            }
        }
    }
    println!("==> one core (both processes on cpu 1), 1 B");
    let mut one_core: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for _ in 0..o.rounds {
        for c in &configs {
            port = port.wrapping_add(1).max(48600);
            let n = if c.ours || c.capi { 2000 } else { 100 };
            match pingpong(c, 1, n, port, ("1", "1")) {
                Ok(s) => one_core.entry(c.name.clone()).or_default().push(s),
                Err(e) => println!("--- one core {}: {e}", c.name),
            }
        }
    }
    println!("==> floors");
    let raw_pingpong = results.remove(&raw.name).unwrap_or_default();
    let floors = measure_floors(raw_pingpong, o)?;
    let runs = Runs {
        pingpong: results,
        stream,
        one_core,
    };
    let md = report(o, &configs, &runs, &floors, &sizes, start.elapsed());
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
    Ok(())
}

/// The providers compiled into `fabric`, each with the endpoint types
/// (`rdm`, `msg`) it offers on this machine (verbs offers none without an
/// RDMA device).
fn compiled_providers(fabric: &Path) -> Vec<(String, Vec<&'static str>)> {
    let out = Command::new(fabric).args(["info", "-l"]).output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    text.lines()
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
        .collect()
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
        env: Vec::new(),
    }
}

/// Builds the C library (`fabric-capi`, release, its default providers)
/// and puts it as `libfabric.so.1` in a folder of its own, for
/// `LD_LIBRARY_PATH`; `None` (and a note) if it cannot be built.
fn capi_lib(root: &Path) -> Result<Option<PathBuf>, String> {
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
    let dir = root.join("target/release/capi-lib");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let so = root.join("target/release/libfabric_capi.so");
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
        env: Vec::new(),
    }
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
    server.stdout(Stdio::null()).stderr(Stdio::null());
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
        return Err(format!(
            "client failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let sample = if c.ours && !c.capi {
        parse_ours(&text)
    } else {
        parse_theirs(&text)
    };
    sample.ok_or_else(|| format!("no result in the client's output: {text:?}"))
}

fn parse_ours(text: &str) -> Option<Sample> {
    let line = text.lines().rev().find(|l| l.starts_with('{'))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    Some(Sample {
        usec: v["usec_per_xfer"].as_f64()?,
        mbps: v["mb_per_sec"].as_f64()?,
    })
}

fn parse_theirs(text: &str) -> Option<Sample> {
    // bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with("bytes"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    Some(Sample {
        mbps: f.get(5)?.parse().ok()?,
        usec: f.get(6)?.parse().ok()?,
    })
}

/// What the configurations measured.
struct Runs {
    /// Ping-pong samples per configuration and size.
    pingpong: BTreeMap<String, Series>,
    /// Streaming bandwidth (MB/s) per `fabric bw` configuration and size.
    stream: BTreeMap<String, BTreeMap<usize, Vec<f64>>>,
    /// 1 B ping-pong samples with both processes on one core.
    one_core: BTreeMap<String, Vec<Sample>>,
}

/// The floors, by name.
struct Floors {
    tcp_pingpong: Series,
    tcp_stream_mbps: Vec<(usize, Vec<f64>)>,
    memcpy_mbps: Vec<f64>,
    cross_core_mbps: Vec<f64>,
    cacheline_usec: Vec<f64>,
}

fn self_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("finding xtask: {e}"))
}

/// The raw TCP ping-pong floor: this program's `floor-tcp` helper.
fn raw_tcp() -> Result<Config, String> {
    let exe = self_exe()?.display().to_string();
    let args = |role: &str| -> Vec<String> {
        vec![exe.clone(), "bench".into(), "floor-tcp".into(), role.into()]
    };
    Ok(Config {
        name: "raw TCP (busy poll)".into(),
        ours: true,
        server: args("server"),
        client: args("client"),
        max: usize::MAX,
        capi: false,
        env: Vec::new(),
    })
}

/// The floors besides the raw ping-pong (measured with the rest):
/// streaming, memcpy, cache-line ping-pong.
fn measure_floors(tcp_pingpong: Series, o: &Opts) -> Result<Floors, String> {
    let exe = self_exe()?.display().to_string();
    let mut f = Floors {
        tcp_pingpong,
        tcp_stream_mbps: Vec::new(),
        memcpy_mbps: Vec::new(),
        cross_core_mbps: Vec::new(),
        cacheline_usec: Vec::new(),
    };
    let mut port = 49600u16;
    for &size in STREAM_SIZES {
        let mut v = Vec::new();
        for _ in 0..o.rounds {
            port += 1;
            let stream = Config {
                name: "raw TCP stream".into(),
                ours: true,
                server: vec![
                    exe.clone(),
                    "bench".into(),
                    "floor-stream".into(),
                    "server".into(),
                ],
                client: vec![
                    exe.clone(),
                    "bench".into(),
                    "floor-stream".into(),
                    "client".into(),
                ],
                max: usize::MAX,
                capi: false,
                env: Vec::new(),
            };
            let total = if o.quick { 256 } else { 1024 } * (1 << 20) / size;
            match pingpong(&stream, size, total, port, ("1", "0")) {
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
    Ok(f)
}

/// The floor helpers, run as child processes (`bench floor-tcp server|client
/// -S SIZE -I N -B|-P PORT [ADDR]`), printing a JSON line like `fabric
/// pingpong --json`.
fn floor_child(args: &[String]) -> Result<(), String> {
    let kind = args.first().map(String::as_str).unwrap_or("");
    let role = args.get(1).map(String::as_str).unwrap_or("");
    let mut size = 1usize;
    let mut iters = 1000usize;
    let mut port = 0u16;
    let mut i = 2;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "-S" => size = v.parse().map_err(|_| "bad -S")?,
            "-I" => iters = v.parse().map_err(|_| "bad -I")?,
            "-B" | "-P" => port = v.parse().map_err(|_| "bad port")?,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    let io = |e: std::io::Error| e.to_string();
    let mut buf = vec![0u8; size];
    match (kind, role) {
        ("floor-tcp", "server") => {
            let l = TcpListener::bind(("127.0.0.1", port)).map_err(io)?;
            let (mut s, _) = l.accept().map_err(io)?;
            s.set_nodelay(true).map_err(io)?;
            s.set_nonblocking(true).map_err(io)?;
            for _ in 0..iters + 100 {
                spin_read(&mut s, &mut buf)?;
                spin_write(&mut s, &buf)?;
            }
            Ok(())
        }
        ("floor-tcp", "client") => {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
            s.set_nodelay(true).map_err(io)?;
            s.set_nonblocking(true).map_err(io)?;
            let mut t = Instant::now();
            for k in 0..iters + 100 {
                if k == 100 {
                    t = Instant::now();
                }
                spin_write(&mut s, &buf)?;
                spin_read(&mut s, &mut buf)?;
            }
            let secs = t.elapsed().as_secs_f64();
            println!(
                "{}",
                serde_json::json!({"usec_per_xfer": secs * 1e6 / (2.0 * iters as f64), "mb_per_sec": (2 * iters * size) as f64 / secs / 1e6})
            );
            Ok(())
        }
        ("floor-stream", "server") => {
            let l = TcpListener::bind(("127.0.0.1", port)).map_err(io)?;
            let (mut s, _) = l.accept().map_err(io)?;
            let mut window = stream_window(size);
            for k in 0..iters {
                let b = &mut window[(k % STREAM_WINDOW) * size..][..size];
                s.read_exact(b).map_err(io)?;
            }
            s.write_all(&[1]).map_err(io)
        }
        ("floor-stream", "client") => {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
            let window = stream_window(size);
            let t = Instant::now();
            for k in 0..iters {
                s.write_all(&window[(k % STREAM_WINDOW) * size..][..size])
                    .map_err(io)?;
            }
            let mut one = [0u8; 1];
            s.read_exact(&mut one).map_err(io)?;
            let secs = t.elapsed().as_secs_f64();
            println!(
                "{}",
                serde_json::json!({"usec_per_xfer": 0.0, "mb_per_sec": (iters * size) as f64 / secs / 1e6})
            );
            Ok(())
        }
        _ => Err(format!("unknown floor helper `{kind} {role}`")),
    }
}

/// Buffers the raw stream rotates through, as `fabric bw -W 64` does.
const STREAM_WINDOW: usize = 64;

/// The raw stream's buffers: [`STREAM_WINDOW`] of `size` bytes, every page
/// touched before timing (as `fabric bw` does with its window).
fn stream_window(size: usize) -> Vec<u8> {
    vec![0x5a; size * STREAM_WINDOW]
}

fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> Result<(), String> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err("peer closed".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

fn spin_write(s: &mut TcpStream, buf: &[u8]) -> Result<(), String> {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Single-thread memcpy bandwidth at 1 MiB, MB/s.
fn memcpy_mbps() -> f64 {
    let src = vec![7u8; 1 << 20];
    let mut dst = vec![0u8; 1 << 20];
    let n = 400;
    let t = Instant::now();
    for i in 0..n {
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
        dst[i % 4096] = 1;
    }
    (n as f64 * (1 << 20) as f64) / t.elapsed().as_secs_f64() / 1e6
}

/// A copy of 1 MiB that another thread has just written, so that the data
/// comes from the other core's cache, MB/s: the floor of any protocol that
/// moves a message between cores with one copy. Both threads spin while
/// they wait, so that they stay on two cores; only the copy is timed.
fn cross_core_copy_mbps() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    const LEN: usize = 1 << 20;
    let n = 300u64;
    let buf = Arc::new(Mutex::new(vec![0u8; LEN]));
    let turn = Arc::new(AtomicU64::new(0));
    let (b2, t2) = (buf.clone(), turn.clone());
    let writer = std::thread::spawn(move || {
        for i in 0..n {
            while t2.load(Ordering::Acquire) != 2 * i {
                std::hint::spin_loop();
            }
            if let Ok(mut b) = b2.lock() {
                b.fill(i as u8 | 1);
            }
            t2.store(2 * i + 1, Ordering::Release);
        }
    });
    let mut dst = vec![0u8; LEN];
    let mut busy = Duration::ZERO;
    for i in 0..n {
        while turn.load(Ordering::Acquire) != 2 * i + 1 {
            std::hint::spin_loop();
        }
        if let Ok(b) = buf.lock() {
            let t = Instant::now();
            dst.copy_from_slice(&b);
            busy += t.elapsed();
        }
        std::hint::black_box(&mut dst);
        turn.store(2 * i + 2, Ordering::Release);
    }
    let _ = writer.join();
    n as f64 * LEN as f64 / busy.as_secs_f64() / 1e6
}

/// Cache-line ping-pong between two threads, one-way microseconds.
fn cacheline_usec() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    let flag = std::sync::Arc::new(AtomicU64::new(0));
    let n = 200_000u64;
    let f2 = flag.clone();
    let h = std::thread::spawn(move || {
        for i in 0..n {
            while f2.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            f2.store(2 * i + 2, Ordering::Release);
        }
    });
    let t = Instant::now();
    for i in 0..n {
        flag.store(2 * i + 1, Ordering::Release);
        while flag.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let _ = h.join();
    secs * 1e6 / (2.0 * n as f64)
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

/// The median of the per-round ratios `a[i] / b[i]`: each pair ran
/// seconds apart, in the same alternation. Without one sample per round on
/// both sides (a failed run), the ratio of the medians.
fn paired(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return median(a) / median(b);
    }
    let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    median(&r)
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

fn size_name(s: usize) -> String {
    match s {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1024 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn report(
    o: &Opts,
    configs: &[Config],
    runs: &Runs,
    floors: &Floors,
    sizes: &[usize],
    took: Duration,
) -> String {
    let (results, stream, one_core) = (&runs.pingpong, &runs.stream, &runs.one_core);
    let mut m = String::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let _ = writeln!(m, "# Benchmarks\n");
    let _ = writeln!(
        m,
        "Generated by `cargo xtask bench{}` ({} rounds, {:.0} s) on {cores} cores ({cpu}). Servers on core 1, clients on core 0; every configuration runs at every size before the next size, so ours and theirs alternate in the same run. Figures are medians [min–max] over the rounds. One-way latency = run time / (2 × round trips); bandwidth = ping-pong bytes moved / time (fi_pingpong's MB/sec column). Ratios are ours / theirs (lower is better for latency, higher for bandwidth), the median of the per-round ratios: the raw TCP ping-pong runs in the same alternation, and each round's pair ran seconds apart, which keeps a ratio in one of this host's speed modes.\n",
        if o.quick { " --quick" } else { "" },
        o.rounds,
        took.as_secs_f64()
    );
    let ours: Vec<&Config> = configs.iter().filter(|c| c.ours && !c.capi).collect();
    let theirs: Vec<&Config> = configs.iter().filter(|c| !c.ours && !c.capi).collect();
    let capi: Vec<&Config> = configs.iter().filter(|c| c.capi).collect();
    if !capi.is_empty() {
        let _ = writeln!(
            m,
            "`fi_pingpong/ours` is Debian's `fi_pingpong` on this repository's C library (`fabric-capi`, release, as `libfabric.so.1` through `LD_LIBRARY_PATH`) with the same provider; the column \"fi_pingpong on ours / fabric pingpong\" is the cost of the C interface (same provider, endpoint type and size), \"fi_pingpong on ours / fi_pingpong\" compares the same program on our library and on Debian's.\n"
        );
    }
    for (title, pick) in [
        (
            "One-way latency (µs)",
            (|s: &Sample| s.usec) as fn(&Sample) -> f64,
        ),
        ("Ping-pong bandwidth (MB/s)", |s: &Sample| s.mbps),
    ] {
        let _ = writeln!(m, "## {title}\n");
        let mut head = String::from("| size |");
        let mut rule = String::from("|---|");
        for c in ours.iter().chain(theirs.iter()).chain(capi.iter()) {
            let _ = write!(head, " {} |", c.name);
            rule.push_str("---|");
        }
        for o in &ours {
            for t in &theirs {
                if same_kind(o, t) {
                    let _ = write!(head, " {} / {} |", o.name, t.name);
                    rule.push_str("---|");
                }
            }
        }
        for c in &capi {
            for o in &ours {
                if same_kind(o, c) {
                    let _ = write!(
                        head,
                        " fi_pingpong on ours / fabric pingpong ({}) |",
                        c.name
                    );
                    rule.push_str("---|");
                }
            }
            for t in &theirs {
                if same_kind(c, t) {
                    let _ = write!(head, " {} / {} |", c.name, t.name);
                    rule.push_str("---|");
                }
            }
        }
        head.push_str(" raw TCP (busy poll) |");
        rule.push_str("---|");
        let vs_raw: Vec<&&Config> = ours
            .iter()
            .filter(|c| c.name.starts_with("fabric tcp"))
            .collect();
        for c in &vs_raw {
            let _ = write!(head, " {} / raw TCP |", c.name);
            rule.push_str("---|");
        }
        let _ = writeln!(m, "{head}\n{rule}");
        for &size in sizes {
            let mut row = format!("| {} |", size_name(size));
            let get = |name: &str| -> Vec<f64> {
                results
                    .get(name)
                    .and_then(|s| s.get(&size))
                    .map(|v| v.iter().map(pick).collect())
                    .unwrap_or_default()
            };
            for c in ours.iter().chain(theirs.iter()).chain(capi.iter()) {
                let v = get(&c.name);
                let _ = write!(
                    row,
                    " {} |",
                    if v.is_empty() {
                        "–".into()
                    } else {
                        spread(&v)
                    }
                );
            }
            for o in &ours {
                for t in &theirs {
                    if same_kind(o, t) {
                        let _ = write!(row, " {} |", fmt(paired(&get(&o.name), &get(&t.name))));
                    }
                }
            }
            for c in &capi {
                for o in &ours {
                    if same_kind(o, c) {
                        let _ = write!(row, " {} |", fmt(paired(&get(&c.name), &get(&o.name))));
                    }
                }
                for t in &theirs {
                    if same_kind(c, t) {
                        let _ = write!(row, " {} |", fmt(paired(&get(&c.name), &get(&t.name))));
                    }
                }
            }
            let raw: Vec<f64> = floors
                .tcp_pingpong
                .get(&size)
                .map(|v| v.iter().map(pick).collect())
                .unwrap_or_default();
            let _ = write!(
                row,
                " {} |",
                if raw.is_empty() {
                    "–".into()
                } else {
                    spread(&raw)
                }
            );
            for c in &vs_raw {
                let _ = write!(row, " {} |", fmt(paired(&get(&c.name), &raw)));
            }
            let _ = writeln!(m, "{row}");
        }
        let _ = writeln!(m);
    }
    let _ = writeln!(
        m,
        "## Streaming bandwidth (MB/s)\n\n`fabric bw` keeps 64 sends in flight (about {} MiB per run) from 64 buffers; the raw TCP stream writes the same sizes from the same number of buffers with `write_all` on one blocking socket, and the receiver reads them into 64 buffers (all pages touched before timing on both). Ratios: tcp against the raw stream; shm against single-thread memcpy of one 1 MiB buffer, which stays in cache while the window's 64 buffers do not (so this ratio understates shm; the ping-pong bandwidth above reuses one buffer and compares with memcpy directly).\n",
        if o.quick { 256 } else { 1024 }
    );
    let memcpy = median(&floors.memcpy_mbps);
    let _ = writeln!(
        m,
        "| size | fabric bw tcp | raw TCP stream | tcp / raw | fabric bw shm | shm / memcpy |\n|---|---|---|---|---|---|"
    );
    for &size in STREAM_SIZES {
        let get = |name: &str| -> Vec<f64> {
            stream
                .get(name)
                .and_then(|s| s.get(&size))
                .cloned()
                .unwrap_or_default()
        };
        let raw = floors
            .tcp_stream_mbps
            .iter()
            .find(|(s, _)| *s == size)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let (tcp, shm) = (get("fabric bw tcp"), get("fabric bw shm"));
        let cell = |v: &[f64]| {
            if v.is_empty() {
                "–".to_string()
            } else {
                spread(v)
            }
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} |",
            size_name(size),
            cell(&tcp),
            cell(&raw),
            fmt(median(&tcp) / median(&raw)),
            cell(&shm),
            fmt(median(&shm) / memcpy)
        );
    }
    let _ = writeln!(m);
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
        "\nCharts: [latency](bench/latency.svg), [bandwidth](bench/bandwidth.svg).\n\nReproduce: `cargo xtask bench` (needs `taskset` and Debian's `libfabric-bin` for `fi_pingpong`)."
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
    lines.push((
        "raw TCP (busy poll)".into(),
        floors
            .tcp_pingpong
            .iter()
            .map(|(size, v)| {
                (
                    *size as f64,
                    median(&v.iter().map(pick).collect::<Vec<_>>()),
                )
            })
            .collect(),
    ));
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
