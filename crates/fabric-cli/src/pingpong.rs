//! `fabric pingpong`: round-trip latency between two endpoints, with
//! libfabric's `fi_pingpong` options and table, so the same experiment runs
//! on both.
//!
//! The server waits on a TCP control port (`-B`, default 47592); the
//! client connects to it (`ADDRESS`, `-P`). Over that connection the two
//! exchange their endpoint names and agree on each size; the data itself
//! moves through the chosen provider. `--self` starts the server as a
//! second process of this program and runs the client against it.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::Args;
use fabric::objects::{
    AddressVector, AvAttr, Bind, CompletionQueue, CqAttr, CqEntry, CqFormat, Domain, Endpoint,
    FiAddr, IoVec, Msg, WaitObj,
};
use fabric::{Address, Caps, EpType, Error, ErrorKind, Hints, Info, Mode, OpFlags, Registry};

use crate::Status;

/// Default control port, as fi_pingpong's.
const CONTROL_PORT: u16 = 47592;

/// Endpoint type argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EpArg {
    /// Connected, reliable (FI_EP_MSG).
    Msg,
    /// Reliable, unconnected (FI_EP_RDM).
    Rdm,
    /// Unreliable datagrams (FI_EP_DGRAM).
    Dgram,
}

/// Transmit mode argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// Untagged messages.
    Msg,
    /// Tagged messages.
    Tagged,
}

/// Options of `fabric pingpong` (those of `fi_pingpong`, plus `--self`,
/// `--json` and `-W`).
#[derive(Debug, Clone, Args)]
pub(crate) struct PingpongArgs {
    /// Provider to use (tcp, shm, verbs).
    #[arg(short = 'p', long = "provider")]
    pub provider: Option<String>,
    /// Endpoint type.
    #[arg(short = 'e', long = "ep_type", value_enum, default_value = "rdm")]
    pub ep_type: EpArg,
    /// Domain name.
    #[arg(short = 'd', long = "domain")]
    pub domain: Option<String>,
    /// Transfer size in bytes, or `all` for powers of two from 1 B to 8 MiB.
    #[arg(short = 'S', long = "size", default_value = "all", value_parser = parse_sizes)]
    pub sizes: Sizes,
    /// Timed iterations per size.
    #[arg(short = 'I', long = "iterations", default_value_t = 10)]
    pub iterations: usize,
    /// Untimed warm-up iterations per size (default: a tenth of -I, at least 1).
    #[arg(short = 'W', long = "warmup")]
    pub warmup: Option<usize>,
    /// Control port to listen on (server) or to bind (client).
    #[arg(short = 'B', long = "src_port")]
    pub src_port: Option<u16>,
    /// Control port of the server (client).
    #[arg(short = 'P', long = "dst_port")]
    pub dst_port: Option<u16>,
    /// Transmit mode.
    #[arg(short = 'm', long = "mode", value_enum, default_value = "msg")]
    pub mode: ModeArg,
    /// Check every byte of every message (fi_pingpong's -c).
    #[arg(short = 'v', short_alias = 'c', long = "verify")]
    pub verify: bool,
    /// One JSON object per size and line, instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run server and client as two processes on this machine.
    #[arg(long = "self")]
    pub self_run: bool,
    /// The server's address: given, this side is the client.
    pub address: Option<String>,
}

/// The transfer sizes of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sizes(pub Vec<usize>);

fn parse_sizes(s: &str) -> Result<Sizes, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Sizes((0..=23).map(|p| 1usize << p).collect()));
    }
    let n: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a size in bytes or `all`"))?;
    if n == 0 {
        return Err("the size must be at least 1 byte".into());
    }
    Ok(Sizes(vec![n]))
}

/// One measured size.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub size: usize,
    pub iterations: usize,
    pub seconds: f64,
    pub verified: bool,
}

impl Row {
    /// One-way latency: the run time over twice the round trips.
    pub(crate) fn usec_per_xfer(&self) -> f64 {
        self.seconds * 1e6 / (2.0 * self.iterations as f64)
    }

    /// Bytes moved per second, in MB/s (10^6), both directions counted.
    pub(crate) fn mb_per_sec(&self) -> f64 {
        (2 * self.iterations * self.size) as f64 / self.seconds / 1e6
    }
}

/// fi_pingpong's compact numbers: 1k = 1024.
fn units(n: f64) -> String {
    const K: f64 = 1024.0;
    if n >= K * K * K {
        format!("{:.1}g", n / (K * K * K))
    } else if n >= K * K {
        format!("{:.1}m", n / (K * K))
    } else if n >= K {
        let v = n / K;
        if v.fract() == 0.0 {
            format!("{v:.0}k")
        } else {
            format!("{v:.1}k")
        }
    } else {
        format!("{n:.0}")
    }
}

/// The table header, as fi_pingpong prints it.
pub(crate) const HEADER: &str =
    "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec";

/// One table line.
pub(crate) fn table_line(r: &Row) -> String {
    let total = (2 * r.iterations * r.size) as f64;
    format!(
        "{:<8}{:<8}={:<8}{:<12}{:<11}{:<10.2}{:<12.2}{:.2}",
        units(r.size as f64),
        units(r.iterations as f64),
        units(r.iterations as f64),
        units(total),
        format!("{:.2}s", r.seconds),
        r.mb_per_sec(),
        r.usec_per_xfer(),
        1.0 / r.usec_per_xfer(),
    )
}

/// One JSON line.
pub(crate) fn json_line(r: &Row, provider: &str, ep: EpType) -> String {
    serde_json::json!({
        "provider": provider,
        "ep_type": ep.to_string(),
        "size": r.size,
        "iterations": r.iterations,
        "seconds": r.seconds,
        "usec_per_xfer": r.usec_per_xfer(),
        "mb_per_sec": r.mb_per_sec(),
        "verified": r.verified,
    })
    .to_string()
}

/// Runs the subcommand.
pub(crate) fn run(args: &PingpongArgs) -> Status {
    let r = if args.self_run {
        run_self(args)
    } else if let Some(addr) = &args.address {
        run_client(args, addr)
    } else {
        run_server(args)
    };
    match r {
        Ok(()) => Status::Success,
        Err(e) => {
            eprintln!(
                "fabric pingpong: {} ({}): {}",
                e.kind().c_name(),
                e.code(),
                e.detail()
            );
            Status::Failure
        }
    }
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::new(ErrorKind::Io, format!("{what}: {e}"))
}

fn ep_type(a: EpArg) -> EpType {
    match a {
        EpArg::Msg => EpType::Msg,
        EpArg::Rdm => EpType::Rdm,
        EpArg::Dgram => EpType::Dgram,
    }
}

/// The entry to use: `getinfo` with the options as hints, for the given
/// node (server: the local address; client: the server's).
fn pick(args: &PingpongArgs, node: IpAddr, source: bool) -> fabric::Result<Info> {
    let caps = Caps::MSG
        | if args.mode == ModeArg::Tagged {
            Caps::TAGGED
        } else {
            Caps::empty()
        };
    let mut h = Hints::new()
        .caps(caps)
        .ep_type(ep_type(args.ep_type))
        .mode(Mode::all());
    if let Some(p) = &args.provider {
        h = h.provider(p.clone());
    }
    if let Some(d) = &args.domain {
        h = h.domain_name(d.clone());
    }
    let with_node = if source {
        h.clone().node(node.to_string()).source()
    } else {
        h.clone().node(node.to_string())
    };
    match with_node.getinfo() {
        Ok(mut list) => Ok(list.remove(0)),
        // Providers whose addresses are not IP (shm) answer without a node.
        Err(e) if e.kind() == ErrorKind::NoData => h.getinfo().map(|mut l| l.remove(0)),
        Err(e) => Err(e),
    }
}

/// An open endpoint with its CQ and AV. Fields drop in order: endpoint
/// first, domain last.
struct Side {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    av: Box<dyn AddressVector>,
    _domain: Box<dyn Domain>,
    _fabric: Box<dyn fabric::objects::Fabric>,
    info: Info,
}

fn open(info: Info) -> fabric::Result<Side> {
    let fabric = Registry::global().fabric(&info)?;
    let domain = fabric.domain(&info)?;
    let cq = domain.cq(&CqAttr {
        format: CqFormat::Msg,
        wait_obj: WaitObj::Unspec,
        ..CqAttr::default()
    })?;
    let av = domain.av(&AvAttr::default())?;
    let ep = domain.endpoint(&info)?;
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })?;
    ep.bind(Bind::Av(av.as_ref()))?;
    ep.enable()?;
    Ok(Side {
        ep,
        cq,
        av,
        _domain: domain,
        _fabric: fabric,
        info,
    })
}

/// The control connection: one text line per message.
struct Control {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Control {
    fn new(s: TcpStream) -> fabric::Result<Self> {
        s.set_nodelay(true).map_err(io_err("control socket"))?;
        let writer = s.try_clone().map_err(io_err("control socket"))?;
        Ok(Control {
            reader: BufReader::new(s),
            writer,
        })
    }

    fn send(&mut self, line: &str) -> fabric::Result<()> {
        writeln!(self.writer, "{line}").map_err(io_err("control connection"))
    }

    fn recv(&mut self) -> fabric::Result<String> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(io_err("control connection"))?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::ConnReset,
                "the peer closed the control connection",
            ));
        }
        Ok(line.trim_end().to_string())
    }
}

fn run_server(args: &PingpongArgs) -> fabric::Result<()> {
    let port = args.src_port.unwrap_or(CONTROL_PORT);
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(io_err("control port"))?;
    let (sock, _) = listener.accept().map_err(io_err("control port"))?;
    let local = sock.local_addr().map_err(io_err("control socket"))?.ip();
    let mut ctl = Control::new(sock)?;
    let side = open(pick(args, local, true)?)?;
    let peer_name = ctl.recv()?;
    ctl.send(&side.ep.getname()?.to_string())?;
    let peer = insert_peer(&side, &peer_name, None)?;
    session(args, &side, peer, &mut ctl, false)
}

fn run_client(args: &PingpongArgs, addr: &str) -> fabric::Result<()> {
    let port = args.dst_port.unwrap_or(CONTROL_PORT);
    let ip: IpAddr = addr.parse().or_else(|_| {
        use std::net::ToSocketAddrs;
        (addr, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip())
            .ok_or_else(|| Error::inval(format!("cannot resolve server address `{addr}`")))
    })?;
    let sock = connect_retry(SocketAddr::new(ip, port))?;
    let server_ip = ip;
    let mut ctl = Control::new(sock)?;
    let side = open(pick(args, server_ip, false)?)?;
    ctl.send(&side.ep.getname()?.to_string())?;
    let peer_name = ctl.recv()?;
    let peer = insert_peer(&side, &peer_name, Some(server_ip))?;
    session(args, &side, peer, &mut ctl, true)
}

/// Connects, retrying for a few seconds while the server starts.
fn connect_retry(to: SocketAddr) -> fabric::Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(to) {
            Ok(s) => return Ok(s),
            Err(e)
                if Instant::now() < deadline
                    && e.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(io_err("connecting to the server's control port")(e)),
        }
    }
}

/// Inserts the peer's endpoint name; a wildcard IP is replaced by the
/// address the control connection reached.
fn insert_peer(side: &Side, name: &str, seen_ip: Option<IpAddr>) -> fabric::Result<FiAddr> {
    let mut addr: Address = name.parse()?;
    if let (Some(sa), Some(ip)) = (addr.socket_addr(), seen_ip) {
        if sa.ip().is_unspecified() {
            addr = Address::from(SocketAddr::new(ip, sa.port()));
        }
    }
    let mut out = [FiAddr(0)];
    side.av.insert(&[addr], &mut out)?;
    if out[0] == FiAddr::NOTAVAIL {
        return Err(Error::inval(format!(
            "the peer's address `{name}` was refused by the AV"
        )));
    }
    Ok(out[0])
}

/// Waits for one completion; `Err` on an error completion.
fn wait_one(side: &Side) -> fabric::Result<CqEntry> {
    let mut e = [CqEntry::default()];
    match side.cq.sread(&mut e, Some(Duration::from_secs(60))) {
        Ok(_) => Ok(e[0]),
        Err(err) if err.kind() == ErrorKind::Again => {
            Err(Error::new(ErrorKind::TimedOut, "no completion within 60 s"))
        }
        Err(err) if err.kind() == ErrorKind::Avail => {
            let ee = side.cq.readerr()?;
            Err(Error::new(
                ee.err,
                format!("error completion: {}", ee.err_text),
            ))
        }
        Err(err) => Err(err),
    }
}

fn pattern(buf: &mut [u8], seed: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8;
    }
}

fn check(buf: &[u8], seed: u64, size: usize) -> fabric::Result<()> {
    for (i, b) in buf.iter().enumerate() {
        let want = (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8;
        if *b != want {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "data check failed: size {size}, round {seed}, byte {i}: {b} instead of {want}"
                ),
            ));
        }
    }
    Ok(())
}

/// Message buffers of a run; they outlive every operation that uses them.
struct Buffers {
    tx: Vec<u8>,
    rx: Vec<u8>,
}

fn session(
    args: &PingpongArgs,
    side: &Side,
    peer: FiAddr,
    ctl: &mut Control,
    client: bool,
) -> fabric::Result<()> {
    let max = args.sizes.0.iter().copied().max().unwrap_or(1);
    let mut bufs = Buffers {
        tx: vec![0; max],
        rx: vec![0; max],
    };
    let warmup = args.warmup.unwrap_or((args.iterations / 10).max(1));
    let provider = side.info.prov_name().unwrap_or("?").to_string();
    if !args.json {
        println!("{HEADER}");
    }
    for &size in &args.sizes.0 {
        if size > side.info.ep_attr.max_msg_size {
            break;
        }
        // Both sides start a size together.
        if client {
            ctl.send(&format!("size {size}"))?;
            ctl.recv()?;
        } else {
            let line = ctl.recv()?;
            if line != format!("size {size}") {
                return Err(Error::inval(format!(
                    "the peer runs a different size list (`{line}`)"
                )));
            }
            ctl.send("go")?;
        }
        let mut elapsed = Duration::ZERO;
        for i in 0..warmup + args.iterations {
            let t = Instant::now();
            round(args, side, peer, &mut bufs, size, i as u64, client)?;
            if i >= warmup {
                elapsed += t.elapsed();
            }
        }
        let row = Row {
            size,
            iterations: args.iterations,
            seconds: elapsed.as_secs_f64(),
            verified: args.verify,
        };
        if args.json {
            println!("{}", json_line(&row, &provider, side.info.ep_attr.ep_type));
        } else {
            println!("{}", table_line(&row));
        }
    }
    if client {
        ctl.send("done")?;
    } else {
        let _ = ctl.recv();
    }
    Ok(())
}

/// One round trip: the client sends first, the server answers.
fn round(
    args: &PingpongArgs,
    side: &Side,
    peer: FiAddr,
    bufs: &mut Buffers,
    size: usize,
    seq: u64,
    client: bool,
) -> fabric::Result<()> {
    let tagged = args.mode == ModeArg::Tagged;
    let riov = [IoVec {
        addr: bufs.rx.as_mut_ptr(),
        len: size,
    }];
    let rmsg = Msg {
        iov: &riov,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag: 7,
        ignore: 0,
        context: 1,
        data: 0,
    };
    // SAFETY: `bufs` outlives the receive: this function waits for its
    // completion before returning, and on error the process ends.
    unsafe {
        if tagged {
            side.ep.trecvmsg(&rmsg, OpFlags::empty())?
        } else {
            side.ep.recvmsg(&rmsg, OpFlags::empty())?
        }
    };
    let send = |bufs: &mut Buffers, seed: u64| -> fabric::Result<bool> {
        if args.verify {
            pattern(&mut bufs.tx[..size], seed);
        }
        if size <= side.info.tx_attr.inject_size {
            let data = &bufs.tx[..size];
            if tagged {
                side.ep.tinject(data, peer, 7, None)?
            } else {
                side.ep.inject(data, peer, None)?
            }
            return Ok(false);
        }
        let siov = [IoVec {
            addr: bufs.tx.as_mut_ptr(),
            len: size,
        }];
        let smsg = Msg {
            iov: &siov,
            desc: &[],
            addr: peer,
            tag: 7,
            ignore: 0,
            context: 2,
            data: 0,
        };
        // SAFETY: as for the receive; the send's completion is awaited.
        unsafe {
            if tagged {
                side.ep.tsendmsg(&smsg, OpFlags::empty())?
            } else {
                side.ep.sendmsg(&smsg, OpFlags::empty())?
            }
        };
        Ok(true)
    };
    let mut pending_tx = false;
    if client {
        pending_tx = send(bufs, seq * 2)?;
    }
    // Wait for the receive (and the send, if it reports a completion).
    let mut got_rx = false;
    while !got_rx || pending_tx {
        let e = wait_one(side)?;
        match e.context {
            1 => got_rx = true,
            2 => pending_tx = false,
            _ => {}
        }
        if got_rx && !client && e.context == 1 {
            if args.verify {
                check(&bufs.rx[..size], seq * 2, size)?;
            }
            pending_tx = send(bufs, seq * 2 + 1)?;
        }
    }
    if client && args.verify {
        check(&bufs.rx[..size], seq * 2 + 1, size)?;
    }
    Ok(())
}

/// `--self`: the server as a child process on a free control port, the
/// client here.
fn run_self(args: &PingpongArgs) -> fabric::Result<()> {
    let port = {
        let l = TcpListener::bind(("127.0.0.1", 0)).map_err(io_err("finding a free port"))?;
        l.local_addr()
            .map_err(io_err("finding a free port"))?
            .port()
    };
    let exe = std::env::current_exe().map_err(io_err("finding this program"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("pingpong").args(["-B", &port.to_string()]);
    cmd.args(child_args(args));
    let mut child = cmd.spawn().map_err(io_err("starting the server process"))?;
    let mut client = args.clone();
    client.self_run = false;
    client.dst_port = Some(port);
    let r = run_client(&client, "127.0.0.1");
    let status = child
        .wait()
        .map_err(io_err("waiting for the server process"))?;
    r?;
    if !status.success() {
        return Err(Error::new(
            ErrorKind::Other,
            format!("the server process failed ({status})"),
        ));
    }
    Ok(())
}

/// The options the server process of `--self` gets.
fn child_args(a: &PingpongArgs) -> Vec<String> {
    let mut v = vec!["-e".to_string(), format!("{:?}", a.ep_type).to_lowercase()];
    if let Some(p) = &a.provider {
        v.extend(["-p".to_string(), p.clone()]);
    }
    if let Some(d) = &a.domain {
        v.extend(["-d".to_string(), d.clone()]);
    }
    let sizes = if a.sizes.0.len() == 1 {
        a.sizes.0[0].to_string()
    } else {
        "all".to_string()
    };
    v.extend([
        "-S".to_string(),
        sizes,
        "-I".to_string(),
        a.iterations.to_string(),
    ]);
    if let Some(w) = a.warmup {
        v.extend(["-W".to_string(), w.to_string()]);
    }
    v.extend(["-m".to_string(), format!("{:?}", a.mode).to_lowercase()]);
    if a.verify {
        v.push("-v".to_string());
    }
    if a.json {
        v.push("--json".to_string());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_sizes("64"), Ok(Sizes(vec![64])));
        assert_eq!(parse_sizes("all").map(|s| s.0.len()), Ok(24));
        assert!(parse_sizes("0").is_err());
        assert!(parse_sizes("x").is_err());
    }

    #[test]
    fn figures_and_lines() {
        let r = Row {
            size: 1,
            iterations: 1000,
            seconds: 0.03,
            verified: true,
        };
        assert!((r.usec_per_xfer() - 15.0).abs() < 1e-9);
        let line = table_line(&r);
        assert!(line.starts_with("1       1000    =1000    2.0k"), "{line}");
        let j: serde_json::Value =
            serde_json::from_str(&json_line(&r, "tcp", EpType::Rdm)).unwrap();
        assert_eq!(j["provider"], "tcp");
        assert_eq!(j["ep_type"], "FI_EP_RDM");
        assert_eq!(j["verified"], true);
        assert_eq!(units(20000.0), "19.5k");
        assert_eq!(units(1024.0), "1k");
    }

    #[test]
    fn pattern_check() {
        let mut b = vec![0u8; 1000];
        pattern(&mut b, 5);
        assert!(check(&b, 5, 1000).is_ok());
        b[999] ^= 1;
        assert!(check(&b, 5, 1000).is_err());
    }
}
