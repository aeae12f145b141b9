//! The floors: helpers run as child processes of `xtask bench` (raw TCP
//! ping-pong, raw TCP stream, raw shared-memory ping-pong) and the
//! in-process ones (memcpy, a copy across cores, a cache-line ping-pong).

use std::cell::UnsafeCell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The floor helpers, run as child processes, each printing a JSON line
/// like `fabric pingpong --json`:
///
/// - `bench floor-tcp server|client -S SIZE -I N -B|-P PORT [ADDR]`: a
///   busy-polling TCP ping-pong over loopback, from a send buffer into a
///   receive buffer, run with each socket [`Setup`] (two connections one
///   after the other), reporting the faster;
/// - `bench floor-stream server|client ...`: a busy-polling TCP stream,
///   run and reported the same way;
/// - `bench floor-shm -S SIZE -I N [-R BATCHES] [--cpus SERVER,CLIENT]`:
///   a busy-polling ping-pong through memory shared by two threads, each
///   pinned to its core (see [`shm_pingpong`]).
pub(super) fn floor_child(args: &[String]) -> Result<(), String> {
    let kind = args.first().map(String::as_str).unwrap_or("");
    if kind == "floor-shm" {
        return shm_child(&args[1..]);
    }
    let role = args.get(1).map(String::as_str).unwrap_or("");
    let mut size = 1usize;
    let mut iters = 1000usize;
    let mut port = 0u16;
    let mut i = 2;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "-S" => size = number("-S", &v)?,
            "-I" => iters = number("-I", &v)?,
            "-B" | "-P" => port = number("port", &v)?,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    let io = |e: std::io::Error| e.to_string();
    // A ping-pong sends from one buffer and receives into another, as
    // `fabric pingpong` and `fi_pingpong` do: sending the bytes it has
    // just received sends them from the cache, which at 1 MiB made a raw
    // C ping-pong 110-126 us one-way against 136-152 us with two buffers
    // (5 alternating runs; level at 64 KiB and below). Both are written
    // first, so that neither maps the kernel's shared zero page, and start
    // on a page boundary, as the ping-pongs' buffers do.
    let (mut rx, tx) = (PageBuf::new(size, 0x5a), PageBuf::new(size, 0xa5));
    match (kind, role) {
        ("floor-tcp", "server") => {
            let l = TcpListener::bind(("127.0.0.1", port)).map_err(io)?;
            for setup in SETUPS {
                let (mut s, _) = l.accept().map_err(io)?;
                setup.apply(&s);
                s.set_nodelay(true).map_err(io)?;
                s.set_nonblocking(true).map_err(io)?;
                for _ in 0..iters + 100 {
                    spin_read(&mut s, &mut rx)?;
                    spin_write(&mut s, &tx)?;
                }
            }
            Ok(())
        }
        ("floor-tcp", "client") => {
            let mut usec = [0f64; SETUPS.len()];
            for (setup, out) in SETUPS.iter().zip(&mut usec) {
                let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
                setup.apply(&s);
                s.set_nodelay(true).map_err(io)?;
                s.set_nonblocking(true).map_err(io)?;
                let mut t = Instant::now();
                for k in 0..iters + 100 {
                    if k == 100 {
                        t = Instant::now();
                    }
                    spin_write(&mut s, &tx)?;
                    spin_read(&mut s, &mut rx)?;
                }
                *out = t.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64);
            }
            let best = usec.iter().copied().fold(f64::INFINITY, f64::min);
            println!(
                "{}",
                serde_json::json!({"usec_per_xfer": best, "mb_per_sec": size as f64 / best, "usec_system": usec[0], "usec_provider": usec[1]})
            );
            Ok(())
        }
        ("floor-stream", "server") => {
            let l = TcpListener::bind(("127.0.0.1", port)).map_err(io)?;
            let mut window = stream_window(size);
            for setup in SETUPS {
                let (mut s, _) = l.accept().map_err(io)?;
                setup.apply(&s);
                s.set_nonblocking(true).map_err(io)?;
                for k in 0..iters {
                    let b = &mut window[(k % STREAM_WINDOW) * size..][..size];
                    spin_read(&mut s, b)?;
                }
                spin_write(&mut s, &[1])?;
            }
            Ok(())
        }
        ("floor-stream", "client") => {
            let window = stream_window(size);
            let mut mbps = [0f64; SETUPS.len()];
            for (setup, out) in SETUPS.iter().zip(&mut mbps) {
                let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
                setup.apply(&s);
                s.set_nonblocking(true).map_err(io)?;
                let t = Instant::now();
                for k in 0..iters {
                    spin_write(&mut s, &window[(k % STREAM_WINDOW) * size..][..size])?;
                }
                let mut one = [0u8; 1];
                spin_read(&mut s, &mut one)?;
                *out = (iters * size) as f64 / t.elapsed().as_secs_f64() / 1e6;
            }
            let best = mbps.iter().copied().fold(0.0, f64::max);
            println!(
                "{}",
                serde_json::json!({"usec_per_xfer": 0.0, "mb_per_sec": best, "mbps_system": mbps[0], "mbps_provider": mbps[1]})
            );
            Ok(())
        }
        _ => Err(format!("unknown floor helper `{kind} {role}`")),
    }
}

/// How a raw floor's sockets are set up. Each TCP floor runs once with
/// each and keeps the faster, so that it is the best a plain socket does
/// on this host, whatever the provider changes.
#[derive(Debug, Clone, Copy)]
enum Setup {
    /// The system's defaults (here BBR, an autotuned receive buffer).
    System,
    /// What prov-tcp does to a connection inside this host
    /// (`prov_tcp::sys::tune` and `unpaced`): reno (or cubic) in place of
    /// BBR, and a 2 MiB receive buffer where `net.core.rmem_max` allows
    /// it. Under BBR a raw 1 MiB ping-pong took 239-286 µs one-way, with
    /// these 102-104; a busy-polling 64 KiB stream ran at 1.7-2.0 GB/s,
    /// with these at 6.6-6.8.
    Provider,
}

/// The setups every TCP floor runs, in order.
const SETUPS: [Setup; 2] = [Setup::System, Setup::Provider];

impl Setup {
    /// Applies the setup to a connected socket (best effort, as the
    /// provider does).
    fn apply(self, s: &TcpStream) {
        if let Setup::Provider = self {
            let r = socket2::SockRef::from(s);
            if r.tcp_congestion().is_ok_and(|cc| cc.starts_with(b"bbr"))
                && r.set_tcp_congestion(b"reno").is_err()
            {
                let _ = r.set_tcp_congestion(b"cubic");
            }
            let rmem_max = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
            if rmem_max.is_some_and(|m| m >= PROVIDER_RCVBUF) {
                let _ = r.set_recv_buffer_size(PROVIDER_RCVBUF);
            }
        }
    }
}

/// The receive buffer prov-tcp asks for.
const PROVIDER_RCVBUF: usize = 2 << 20;

/// Buffers the raw stream rotates through, as `fabric bw -W 64` does.
pub(super) const STREAM_WINDOW: usize = 64;

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

/// `len` bytes, each `fill`, starting on a page boundary. The floors copy
/// between such buffers: glibc's `memcpy` takes `rep movsb` from 4 KiB on,
/// which on the AMD hosts ran 15-25x slower when the destination lay 1-63
/// bytes after the source modulo 4 KiB, and heap buffers of some sizes
/// fall there (a floor must be the fastest copy, not a lucky one).
struct PageBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl PageBuf {
    fn new(len: usize, fill: u8) -> PageBuf {
        let v = vec![fill; len + 4096];
        let off = v.as_ptr().align_offset(4096).min(4096);
        PageBuf { v, off, len }
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// Single-thread memcpy bandwidth at 1 MiB, MB/s.
pub(super) fn memcpy_mbps() -> f64 {
    let src = PageBuf::new(1 << 20, 7);
    let mut dst = PageBuf::new(1 << 20, 0);
    let n = 400;
    let t = Instant::now();
    for i in 0..n {
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst[..]);
        dst[i % 4096] = 1;
    }
    (n as f64 * (1 << 20) as f64) / t.elapsed().as_secs_f64() / 1e6
}

/// The one-copy floor of a stream of `size`-byte messages with
/// [`STREAM_WINDOW`] in flight, MB/s: one thread copies message `i` from
/// source buffer `i % 64` into destination buffer `i % 64`, `total` bytes
/// in all (page-aligned buffers, every page touched before timing), as a
/// protocol that moves each byte once must at least do. The two windows
/// take 8 MiB at 64 KiB (the caches hold them) and 128 MiB at 1 MiB (they
/// do not), where a single 1 MiB memcpy always stays in the cache. One
/// thread copies: a protocol that copies on both cores can pass it.
pub(super) fn copy_window_mbps(size: usize, total: usize) -> f64 {
    let size = size.max(1);
    let src: Vec<PageBuf> = (0..STREAM_WINDOW)
        .map(|i| PageBuf::new(size, i as u8 | 1))
        .collect();
    let mut dst: Vec<PageBuf> = (0..STREAM_WINDOW).map(|_| PageBuf::new(size, 0)).collect();
    let n = (total / size).max(STREAM_WINDOW);
    let t = Instant::now();
    for i in 0..n {
        let k = i % STREAM_WINDOW;
        dst[k].copy_from_slice(&src[k]);
        std::hint::black_box(&mut dst[k][..]);
    }
    (n as f64 * size as f64) / t.elapsed().as_secs_f64() / 1e6
}

/// A copy of 1 MiB that another thread has just written, so that the data
/// comes from the other core's cache, MB/s: the floor of any protocol that
/// moves a message between cores with one copy. Both threads spin while
/// they wait, so that they stay on two cores; only the copy is timed.
pub(super) fn cross_core_copy_mbps() -> f64 {
    use std::sync::Mutex;
    const LEN: usize = 1 << 20;
    let n = 300u64;
    let buf = Arc::new(Mutex::new(PageBuf::new(LEN, 0)));
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
    let mut dst = PageBuf::new(LEN, 0);
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
        std::hint::black_box(&mut dst[..]);
        turn.store(2 * i + 2, Ordering::Release);
    }
    let _ = writer.join();
    n as f64 * LEN as f64 / busy.as_secs_f64() / 1e6
}

/// Cache-line ping-pong between two threads, one-way microseconds.
pub(super) fn cacheline_usec() -> f64 {
    let flag = Arc::new(AtomicU64::new(0));
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

/// `value` as a number, or an error naming the option and the value.
fn number<T: std::str::FromStr>(what: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{what}: `{value}` is not a number"))
}

/// `bench floor-shm -S SIZE -I N [-R BATCHES] [--cpus SERVER,CLIENT]`:
/// [`shm_pingpong`], printing the fastest batch as a JSON line.
fn shm_child(args: &[String]) -> Result<(), String> {
    let (mut size, mut iters, mut batches) = (1usize, 1000usize, 1usize);
    let (mut server_cpu, mut client_cpu) = ("1".to_string(), "0".to_string());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it
            .next()
            .ok_or_else(|| format!("floor-shm: {a} needs a value"))?;
        match a.as_str() {
            "-S" => size = number("-S", v)?,
            "-I" => iters = number("-I", v)?,
            "-R" => batches = number("-R", v)?,
            "--cpus" => {
                let (s, c) = v
                    .split_once(',')
                    .ok_or_else(|| format!("--cpus: `{v}` is not SERVER,CLIENT"))?;
                (server_cpu, client_cpu) = (s.to_string(), c.to_string());
            }
            other => return Err(format!("floor-shm: unknown option `{other}`")),
        }
    }
    if size == 0 || iters == 0 || batches == 0 {
        return Err("floor-shm: -S, -I and -R must be above 0".into());
    }
    let usec = shm_pingpong(size, iters, batches, &server_cpu, &client_cpu)?;
    println!(
        "{}",
        serde_json::json!({"usec_per_xfer": usec, "mb_per_sec": size as f64 / usec})
    );
    Ok(())
}

/// Pins the calling thread to `cpu` with `taskset -p` on its thread id
/// (this program links no libc bindings of its own).
fn pin_this_thread(cpu: &str) -> Result<(), String> {
    let link = std::fs::read_link("/proc/thread-self")
        .map_err(|e| format!("reading /proc/thread-self: {e}"))?;
    // The link reads `PID/task/TID`.
    let tid = link
        .file_name()
        .and_then(|t| t.to_str())
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("/proc/thread-self -> {}: no thread id", link.display()))?
        .to_string();
    let out = Command::new("taskset")
        .args(["-p", "-c", cpu, &tid])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("running taskset: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset -p -c {cpu} {tid} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A turn counter on a cache line of its own.
#[repr(align(128))]
struct Turn(AtomicU64);

/// The two buffers of the shared-memory ping-pong and whose turn it is to
/// use them: the client owns both while `turn` is even, the server while
/// it is odd; `ABORT` stops the server.
struct Exchange {
    turn: Turn,
    /// `[client's buffer, server's buffer]`, each `len` bytes from `start`
    /// (page-aligned within its allocation).
    bufs: UnsafeCell<[Vec<u8>; 2]>,
    start: [usize; 2],
    len: usize,
}

const ABORT: u64 = u64::MAX;

// SAFETY: `bufs` is only reached through `Exchange::buffers`, whose callers
// hold the turn: a thread touches the buffers only after an Acquire load
// has shown the turn passed to it, and stops touching them before its
// Release store passes the turn on, so accesses of the two threads never
// overlap and each sees the other's writes.
unsafe impl Sync for Exchange {}

impl Exchange {
    fn new(len: usize) -> Exchange {
        let page = 4096;
        // Written before the run, so that no page is the shared zero page.
        let bufs = [vec![0x5au8; len + page], vec![0xa5u8; len + page]];
        let start = [
            bufs[0].as_ptr().align_offset(page).min(page),
            bufs[1].as_ptr().align_offset(page).min(page),
        ];
        Exchange {
            turn: Turn(AtomicU64::new(0)),
            bufs: UnsafeCell::new(bufs),
            start,
            len,
        }
    }

    /// Waits until the turn reads `want`; false if the run was aborted.
    fn wait(&self, want: u64) -> bool {
        loop {
            let t = self.turn.0.load(Ordering::Acquire);
            if t == want {
                return true;
            }
            if t == ABORT {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// Copies the buffer of side `from` into the buffer of the other side.
    ///
    /// # Safety
    ///
    /// The caller holds the turn: it has seen (Acquire) the turn value that
    /// hands the buffers to it and has not yet passed it on.
    unsafe fn copy_from(&self, from: usize) {
        // SAFETY: the caller holds the turn (above), so no other reference
        // to the buffers exists while this one lives.
        let bufs = unsafe { &mut *self.bufs.get() };
        let [client, server] = bufs;
        let c = &mut client[self.start[0]..][..self.len];
        let s = &mut server[self.start[1]..][..self.len];
        if from == 0 {
            s.copy_from_slice(c);
        } else {
            c.copy_from_slice(s);
        }
    }
}

/// The shared-memory floor: a ping-pong of `size` bytes between a client
/// thread on `client_cpu` and a server thread on `server_cpu`, both busy
/// polling a turn counter. A message is one copy: the receiver copies the
/// sender's buffer, just written on the other core, into its own, which it
/// then sends back (as a one-copy transfer such as cross-memory attach
/// does, without its system calls). After 100 warm-up round trips,
/// `batches` batches of `iters` round trips are timed; returns the fastest
/// batch's one-way microseconds (a host mode lasts seconds, a batch about
/// a millisecond: the fastest batch is the mode's speed, the slower ones
/// were interrupted).
pub(super) fn shm_pingpong(
    size: usize,
    iters: usize,
    batches: usize,
    server_cpu: &str,
    client_cpu: &str,
) -> Result<f64, String> {
    const WARM: usize = 100;
    let total = (WARM + iters * batches) as u64;
    let x = Arc::new(Exchange::new(size));
    let x2 = x.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let cpu = server_cpu.to_string();
    let server = std::thread::spawn(move || {
        let pinned = pin_this_thread(&cpu);
        let ok = pinned.is_ok();
        let _ = tx.send(pinned);
        if !ok {
            return;
        }
        for k in 0..total {
            if !x2.wait(2 * k + 1) {
                return;
            }
            // SAFETY: the odd turn 2k+1 hands the buffers to this thread
            // until the store below.
            unsafe { x2.copy_from(0) };
            x2.turn.0.store(2 * k + 2, Ordering::Release);
        }
    });
    let abort = |e: String| {
        x.turn.0.store(ABORT, Ordering::Release);
        e
    };
    let started = rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|e| format!("the server thread did not start: {e}"))
        .and_then(|r| r.map_err(|e| format!("pinning the server thread: {e}")))
        .and_then(|()| pin_this_thread(client_cpu).map_err(|e| format!("pinning the client: {e}")))
        .map_err(abort);
    if let Err(e) = started {
        let _ = server.join();
        return Err(e);
    }
    let mut times = Vec::with_capacity(batches);
    let mut t = Instant::now();
    for k in 0..total {
        let timed = k as usize >= WARM;
        if timed && (k as usize - WARM) % iters == 0 {
            if k as usize > WARM {
                times.push(t.elapsed());
            }
            t = Instant::now();
        }
        // The client's buffer is the message: it passes the turn to the
        // server, which copies it, and copies the reply back when it
        // gets the turn again.
        x.turn.0.store(2 * k + 1, Ordering::Release);
        if !x.wait(2 * k + 2) {
            break;
        }
        // SAFETY: the even turn 2k+2 hands the buffers to this thread
        // until the next store.
        unsafe { x.copy_from(1) };
    }
    times.push(t.elapsed());
    server
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    times
        .iter()
        .map(|d| d.as_secs_f64() * 1e6 / (2.0 * iters as f64))
        .min_by(f64::total_cmp)
        .ok_or_else(|| "no batch was timed".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shm_floor_runs_and_moves_the_bytes() {
        // Pinning needs taskset and two cores; without them the floor is
        // an error, which is what the bench reports.
        match shm_pingpong(4096, 200, 3, "1", "0") {
            Ok(usec) => assert!(usec > 0.0 && usec.is_finite(), "{usec}"),
            Err(e) => assert!(e.contains("pinning") || e.contains("taskset"), "{e}"),
        }
        let x = Exchange::new(100);
        // SAFETY: no other thread holds this exchange.
        unsafe { x.copy_from(0) };
        // SAFETY: as above.
        let bufs = unsafe { &*x.bufs.get() };
        assert!(bufs[1][x.start[1]..][..100].iter().all(|b| *b == 0x5a));
    }
}
