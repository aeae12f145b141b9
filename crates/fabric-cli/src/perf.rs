//! What `fabric pingpong` and `fabric bw` share: the options they have in
//! common (those of libfabric's `fi_pingpong`), the out-of-band control
//! connection, opening an endpoint from `getinfo`, the table and JSON
//! lines, and `--self`.
//!
//! The server waits on a TCP control port (`-B`, default 47592); the
//! client connects to it (`ADDRESS`, `-P`). Over that connection the two
//! exchange their endpoint names and agree on each size; the data moves
//! through the chosen provider. With `-e msg` the server sends its passive
//! endpoint's name instead, and the two connect through the provider's
//! connection management (EQ events `FI_CONNREQ`, `FI_CONNECTED`).

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::Args;
use fabric::objects::{
    AddressVector, AvAttr, Bind, CompletionQueue, CqAttr, CqEntry, CqFormat, Domain, Endpoint,
    EqAttr, EqEvent, EventQueue, Fabric, FiAddr, IoVec, MemoryRegion, MrAccess, MrAttr, MrDesc,
    PassiveEndpoint, WaitObj,
};
use fabric::{Address, Caps, EpType, Error, ErrorKind, Hints, Info, Mode, MrMode, Registry};
use indicatif::{ProgressBar, ProgressStyle};

/// Default control port, as fi_pingpong's.
pub(crate) const CONTROL_PORT: u16 = 47592;

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

impl EpArg {
    /// The FI_EP_* value.
    pub(crate) fn ep_type(self) -> EpType {
        match self {
            EpArg::Msg => EpType::Msg,
            EpArg::Rdm => EpType::Rdm,
            EpArg::Dgram => EpType::Dgram,
        }
    }
}

/// Transmit mode argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// Untagged messages.
    Msg,
    /// Tagged messages.
    Tagged,
}

/// Options both tools take (fi_pingpong's, plus `--json` and `--self`).
#[derive(Debug, Clone, Args)]
pub(crate) struct Common {
    /// Provider to use (tcp, shm, verbs).
    #[arg(short = 'p', long = "provider")]
    pub provider: Option<String>,
    /// Endpoint type.
    #[arg(short = 'e', long = "ep_type", value_enum, default_value = "rdm")]
    pub ep_type: EpArg,
    /// Domain name.
    #[arg(short = 'd', long = "domain")]
    pub domain: Option<String>,
    /// Transfer sizes: `all` (powers of two from 1 B to 8 MiB), one size in
    /// bytes, a list (`1,64,4096`), or `MIN:MAX` (the powers of two from MIN
    /// to MAX, with both ends).
    #[arg(short = 'S', long = "size", default_value = "all", value_parser = parse_sizes)]
    pub sizes: Sizes,
    /// Timed iterations per size.
    #[arg(short = 'I', long = "iterations", default_value_t = 10)]
    pub iterations: usize,
    /// Control port to listen on (server) or to bind (client).
    #[arg(short = 'B', long = "src_port")]
    pub src_port: Option<u16>,
    /// Control port of the server (client).
    #[arg(short = 'P', long = "dst_port")]
    pub dst_port: Option<u16>,
    /// Check every byte of every message (fi_pingpong's -c).
    #[arg(short = 'v', short_alias = 'c', long = "verify")]
    pub verify: bool,
    /// One JSON object per size and line, instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run server and client as two processes on this machine.
    #[arg(long = "self")]
    pub self_run: bool,
    /// Draw no progress bar (one is drawn on a terminal for a size sweep).
    #[arg(long = "no-progress")]
    pub no_progress: bool,
    /// Start the message buffers this many bytes past a page boundary
    /// (0-4095; default 0, as `fi_pingpong`): buffers from `malloc` start
    /// anywhere, and copies can depend on where.
    #[arg(long = "buf-offset", default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..4096))]
    pub buf_offset: u16,
    /// The server's address: given, this side is the client.
    pub address: Option<String>,
}

impl Common {
    /// The options a `--self` server process gets.
    pub(crate) fn child_args(&self) -> Vec<String> {
        let mut v = vec![
            "-e".to_string(),
            format!("{:?}", self.ep_type).to_lowercase(),
        ];
        if let Some(p) = &self.provider {
            v.extend(["-p".to_string(), p.clone()]);
        }
        if let Some(d) = &self.domain {
            v.extend(["-d".to_string(), d.clone()]);
        }
        let sizes = self.sizes.arg();
        v.extend([
            "-S".to_string(),
            sizes,
            "-I".to_string(),
            self.iterations.to_string(),
        ]);
        if self.verify {
            v.push("-v".to_string());
        }
        if self.json {
            v.push("--json".to_string());
        }
        if self.buf_offset != 0 {
            v.extend(["--buf-offset".to_string(), self.buf_offset.to_string()]);
        }
        // The client draws the one progress bar of a `--self` run.
        v.push("--no-progress".to_string());
        v
    }

    /// A progress bar over the sizes of a sweep, on stderr; hidden for a
    /// single size, with `--json` or `--no-progress`, and when stderr is
    /// not a terminal.
    pub(crate) fn progress(&self) -> ProgressBar {
        let n = self.sizes.0.len();
        if n < 2 || self.json || self.no_progress || !std::io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(n as u64);
        if let Ok(style) =
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} sizes, {msg}")
        {
            bar.set_style(style);
        }
        bar
    }
}

/// The transfer sizes of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sizes(pub Vec<usize>);

impl Sizes {
    /// The `-S` argument that gives these sizes back.
    pub(crate) fn arg(&self) -> String {
        let list: Vec<String> = self.0.iter().map(usize::to_string).collect();
        list.join(",")
    }
}

/// One size in bytes, at least 1.
fn parse_size(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a size in bytes, a list, MIN:MAX or `all`"))?;
    if n == 0 {
        return Err("the size must be at least 1 byte".into());
    }
    Ok(n)
}

pub(crate) fn parse_sizes(s: &str) -> Result<Sizes, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Sizes((0..=23).map(|p| 1usize << p).collect()));
    }
    if let Some((lo, hi)) = s.split_once(':') {
        let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
        if lo > hi {
            return Err(format!("`{s}`: MIN is above MAX"));
        }
        let mut v: Vec<usize> =
            std::iter::successors(Some(lo.next_power_of_two()), |n| n.checked_mul(2))
                .take_while(|n| *n <= hi)
                .collect();
        if v.first() != Some(&lo) {
            v.insert(0, lo);
        }
        if v.last() != Some(&hi) {
            v.push(hi);
        }
        return Ok(Sizes(v));
    }
    let v = s
        .split(',')
        .map(parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Sizes(v))
}

/// One measured size: `transfers` transfers of `size` bytes in `seconds`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub size: usize,
    pub iterations: usize,
    pub transfers: usize,
    pub seconds: f64,
    pub verified: bool,
}

impl Row {
    /// Time per transfer (for ping-pong: one-way latency).
    pub(crate) fn usec_per_xfer(&self) -> f64 {
        self.seconds * 1e6 / self.transfers as f64
    }

    /// Bytes moved per second, in MB/s (10^6).
    pub(crate) fn mb_per_sec(&self) -> f64 {
        (self.transfers * self.size) as f64 / self.seconds / 1e6
    }
}

/// fi_pingpong's compact numbers: 1k = 1024.
pub(crate) fn units(n: f64) -> String {
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
    let total = (r.transfers * r.size) as f64;
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
pub(crate) fn json_line(r: &Row, test: &str, provider: &str, ep: EpType) -> String {
    serde_json::json!({
        "test": test,
        "provider": provider,
        "ep_type": ep.to_string(),
        "size": r.size,
        "iterations": r.iterations,
        "transfers": r.transfers,
        "seconds": r.seconds,
        "usec_per_xfer": r.usec_per_xfer(),
        "mb_per_sec": r.mb_per_sec(),
        "verified": r.verified,
    })
    .to_string()
}

/// Prints a result line in the chosen form, above the progress bar.
pub(crate) fn print_row(c: &Common, test: &str, side: &Side, r: &Row, bar: &ProgressBar) {
    bar.suspend(|| print_line(c, test, side, r));
    bar.inc(1);
}

fn print_line(c: &Common, test: &str, side: &Side, r: &Row) {
    if c.json {
        println!(
            "{}",
            json_line(
                r,
                test,
                side.info.prov_name().unwrap_or("?"),
                side.info.ep_attr.ep_type
            )
        );
    } else {
        println!("{}", table_line(r));
    }
}

pub(crate) fn io_err(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::new(ErrorKind::Io, format!("{what}: {e}"))
}

/// The entry to use: `getinfo` with the options as hints, for `node` (the
/// server: the local address; the client: the server's).
pub(crate) fn pick(c: &Common, caps: Caps, node: IpAddr, source: bool) -> fabric::Result<Info> {
    let mut h = Hints::new()
        .caps(caps)
        .ep_type(c.ep_type.ep_type())
        .mode(Mode::all());
    h = h.mr_mode(MrMode::all() - MrMode::LEGACY);
    if let Some(p) = &c.provider {
        h = h.provider(p.clone());
    }
    if let Some(d) = &c.domain {
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

/// An open endpoint with its CQ, and its AV (unconnected endpoints) or EQ
/// (connected ones). Fields drop in order: endpoint first, fabric last.
pub(crate) struct Side {
    pub ep: Box<dyn Endpoint>,
    pub cq: Box<dyn CompletionQueue>,
    pub av: Option<Box<dyn AddressVector>>,
    eq: Option<Box<dyn EventQueue>>,
    _pep: Option<Box<dyn PassiveEndpoint>>,
    pub domain: Box<dyn Domain>,
    _fabric: Box<dyn Fabric>,
    pub info: Info,
}

/// Opens an endpoint on `info` with a CQ, and an AV unless the endpoint is
/// connected; `eq` (connected endpoints) is bound too.
fn open_with(
    fabric: Box<dyn Fabric>,
    info: Info,
    eq: Option<Box<dyn EventQueue>>,
    pep: Option<Box<dyn PassiveEndpoint>>,
    format: CqFormat,
) -> fabric::Result<Side> {
    let domain = fabric.domain(&info)?;
    let cq = domain.cq(&CqAttr {
        format,
        wait_obj: WaitObj::Unspec,
        ..CqAttr::default()
    })?;
    let ep = domain.endpoint(&info)?;
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })?;
    let av = if info.ep_attr.ep_type == EpType::Msg {
        None
    } else {
        let av = domain.av(&AvAttr::default())?;
        ep.bind(Bind::Av(av.as_ref()))?;
        Some(av)
    };
    if let Some(eq) = &eq {
        ep.bind(Bind::Eq(eq.as_ref()))?;
    }
    ep.enable()?;
    Ok(Side {
        ep,
        cq,
        av,
        eq,
        _pep: pep,
        domain,
        _fabric: fabric,
        info,
    })
}

/// Opens an unconnected endpoint (RDM, DGRAM) on `info`.
pub(crate) fn open(info: Info) -> fabric::Result<Side> {
    open_as(info, CqFormat::Data)
}

/// [`open`], with completions of `format` (`Tagged` to see tags).
pub(crate) fn open_as(info: Info, format: CqFormat) -> fabric::Result<Side> {
    let fabric = Registry::global().fabric(&info)?;
    open_with(fabric, info, None, None, format)
}

/// An EQ for connection management.
fn new_eq(fabric: &dyn Fabric) -> fabric::Result<Box<dyn EventQueue>> {
    fabric.eq(&EqAttr {
        wait_obj: WaitObj::Unspec,
        ..EqAttr::default()
    })
}

/// The next connection-management event; `Err` on an error event (a
/// refused connection, say) or after 60 s.
fn next_event(eq: &dyn EventQueue) -> fabric::Result<EqEvent> {
    match eq.sread(Some(Duration::from_secs(60))) {
        Ok(e) => Ok(e),
        Err(err) if err.kind() == ErrorKind::Again => Err(Error::new(
            ErrorKind::TimedOut,
            "no connection event within 60 s",
        )),
        Err(err) if err.kind() == ErrorKind::Avail => {
            let ee = eq.readerr()?;
            Err(Error::new(
                ee.err,
                format!("connection error event: {}", ee.err_text),
            ))
        }
        Err(err) => Err(err),
    }
}

/// Waits for `FI_CONNECTED` on the side's EQ.
fn await_connected(side: &Side) -> fabric::Result<()> {
    let Some(eq) = side.eq.as_deref() else {
        return Err(Error::inval("a connected endpoint needs an EQ"));
    };
    match next_event(eq)? {
        EqEvent::Connected { .. } => Ok(()),
        other => Err(Error::new(
            ErrorKind::OpBadState,
            format!("expected FI_CONNECTED, got {other:?}"),
        )),
    }
}

/// Server side of a connected endpoint: listens, tells the client the
/// passive endpoint's name over the control connection, accepts.
fn accept_msg(ctl: &mut Control, info: Info) -> fabric::Result<Side> {
    let fabric = Registry::global().fabric(&info)?;
    let eq = new_eq(fabric.as_ref())?;
    let pep = fabric.passive_endpoint(&info)?;
    pep.bind_eq(eq.as_ref())?;
    pep.listen()?;
    let hello = ctl.recv()?;
    if hello != "connect" {
        return Err(Error::inval(format!(
            "the peer sent `{hello}`, not `connect` (is it using -e msg too?)"
        )));
    }
    ctl.send(&pep.getname()?.to_string())?;
    let req = match next_event(eq.as_ref())? {
        EqEvent::ConnReq { info, .. } => *info,
        other => {
            return Err(Error::new(
                ErrorKind::OpBadState,
                format!("expected FI_CONNREQ, got {other:?}"),
            ));
        }
    };
    let side = open_with(fabric, req, Some(eq), Some(pep), CqFormat::Data)?;
    side.ep.accept(&[])?;
    await_connected(&side)?;
    Ok(side)
}

/// Client side of a connected endpoint: learns the server's passive
/// endpoint over the control connection and connects to it.
fn connect_msg(ctl: &mut Control, info: Info, server: IpAddr) -> fabric::Result<Side> {
    ctl.send("connect")?;
    let name = ctl.recv()?;
    let dest = peer_address(&name, Some(server))?;
    let fabric = Registry::global().fabric(&info)?;
    let eq = new_eq(fabric.as_ref())?;
    let side = open_with(fabric, info, Some(eq), None, CqFormat::Data)?;
    side.ep.connect(&dest, &[])?;
    await_connected(&side)?;
    Ok(side)
}

/// The longest line the control connection takes (options and
/// addresses fit in far less).
const CONTROL_LINE_MAX: usize = 64 * 1024;

/// The control connection: one text line per message.
pub(crate) struct Control {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Control {
    pub(crate) fn new(s: TcpStream) -> fabric::Result<Self> {
        s.set_nodelay(true).map_err(io_err("control socket"))?;
        let writer = s.try_clone().map_err(io_err("control socket"))?;
        Ok(Control {
            reader: BufReader::new(s),
            writer,
        })
    }

    pub(crate) fn send(&mut self, line: &str) -> fabric::Result<()> {
        writeln!(self.writer, "{line}").map_err(io_err("control connection"))
    }

    /// The next line; at most [`CONTROL_LINE_MAX`] bytes are read for it
    /// (a peer sending an endless line gets an error, not this side's
    /// memory).
    pub(crate) fn recv(&mut self) -> fabric::Result<String> {
        let mut line = String::new();
        let n = (&mut self.reader)
            .take(CONTROL_LINE_MAX as u64 + 1)
            .read_line(&mut line)
            .map_err(io_err("control connection"))?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::ConnReset,
                "the peer closed the control connection",
            ));
        }
        if !line.ends_with('\n') && n > CONTROL_LINE_MAX {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("the peer sent a control line longer than {CONTROL_LINE_MAX} bytes"),
            ));
        }
        Ok(line.trim_end().to_string())
    }

    /// Whether the peer has closed the connection (a peek that does not
    /// block; data waiting to be read means open).
    pub(crate) fn closed(&self) -> bool {
        if self.writer.set_nonblocking(true).is_err() {
            return false;
        }
        let r = self.writer.peek(&mut [0u8; 1]);
        let _ = self.writer.set_nonblocking(false);
        matches!(r, Ok(0))
            || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
    }

    /// Both sides reach this point before going on.
    pub(crate) fn sync(&mut self, client: bool, what: &str) -> fabric::Result<()> {
        if client {
            self.send(what)?;
            self.recv().map(|_| ())
        } else {
            let line = self.recv()?;
            if line != what {
                return Err(Error::inval(format!(
                    "the peer is at `{line}`, not `{what}` (different options?)"
                )));
            }
            self.send("ok")
        }
    }
}

/// A connected pair: this side's endpoint, the peer's address, the
/// control connection, and whether this side is the client.
pub(crate) struct Session {
    pub side: Side,
    pub peer: FiAddr,
    pub ctl: Control,
    pub client: bool,
}

/// Sets up a session as server (no address) or client.
pub(crate) fn connect(c: &Common, caps: Caps) -> fabric::Result<Session> {
    match &c.address {
        None => {
            let port = c.src_port.unwrap_or(CONTROL_PORT);
            let listener = listen_control(port)?;
            let (sock, _) = listener.accept().map_err(io_err("control port"))?;
            let local = control_local_ip(&sock)?;
            let mut ctl = Control::new(sock)?;
            let info = pick(c, caps, local, true)?;
            if info.ep_attr.ep_type == EpType::Msg {
                let side = accept_msg(&mut ctl, info)?;
                return Ok(Session {
                    side,
                    peer: FiAddr::UNSPEC,
                    ctl,
                    client: false,
                });
            }
            let side = open(info)?;
            let peer_name = ctl.recv()?;
            ctl.send(&side.ep.getname()?.to_string())?;
            let peer = insert_peer(&side, &peer_name, None)?;
            Ok(Session {
                side,
                peer,
                ctl,
                client: false,
            })
        }
        Some(addr) => {
            let port = c.dst_port.unwrap_or(CONTROL_PORT);
            let ip: IpAddr = addr.parse().or_else(|_| {
                use std::net::ToSocketAddrs;
                (addr.as_str(), port)
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .map(|a| a.ip())
                    .ok_or_else(|| Error::inval(format!("cannot resolve server address `{addr}`")))
            })?;
            let sock = connect_retry(SocketAddr::new(ip, port))?;
            let mut ctl = Control::new(sock)?;
            let info = pick(c, caps, ip, false)?;
            if info.ep_attr.ep_type == EpType::Msg {
                let side = connect_msg(&mut ctl, info, ip)?;
                return Ok(Session {
                    side,
                    peer: FiAddr::UNSPEC,
                    ctl,
                    client: true,
                });
            }
            let side = open(info)?;
            ctl.send(&side.ep.getname()?.to_string())?;
            let peer_name = ctl.recv()?;
            let peer = insert_peer(&side, &peer_name, Some(ip))?;
            Ok(Session {
                side,
                peer,
                ctl,
                client: true,
            })
        }
    }
}

/// Listens for the control connection on every address of the host, IPv6
/// and IPv4 alike (one dual-stack socket), or on IPv4 only where the host
/// has no IPv6.
pub(crate) fn listen_control(port: u16) -> fabric::Result<TcpListener> {
    match listen_dual_stack(port) {
        Ok(l) => Ok(l),
        Err(e) => {
            tracing::debug!(error = %e, "no IPv6 control port; listening on IPv4 only");
            TcpListener::bind(("0.0.0.0", port)).map_err(io_err("control port"))
        }
    }
}

fn listen_dual_stack(port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::STREAM, None)?;
    s.set_only_v6(false)?;
    // As std's listeners do: a server restarted on the port at once binds.
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
    s.listen(128)?;
    Ok(s.into())
}

/// The address the client reached on this host (an IPv4 client of the
/// dual-stack port shows as `::ffff:a.b.c.d`: given back as IPv4).
pub(crate) fn control_local_ip(sock: &TcpStream) -> fabric::Result<IpAddr> {
    Ok(sock
        .local_addr()
        .map_err(io_err("control socket"))?
        .ip()
        .to_canonical())
}

/// Connects, retrying for a few seconds while the server starts.
pub(crate) fn connect_retry(to: SocketAddr) -> fabric::Result<TcpStream> {
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

/// Parses the peer's endpoint name; a wildcard IP is replaced by the
/// address the control connection reached.
fn peer_address(name: &str, seen_ip: Option<IpAddr>) -> fabric::Result<Address> {
    let mut addr: Address = name.parse()?;
    if let (Some(sa), Some(ip)) = (addr.socket_addr(), seen_ip) {
        if sa.ip().is_unspecified() {
            addr = Address::from(SocketAddr::new(ip, sa.port()));
        }
    }
    Ok(addr)
}

/// Inserts the peer's endpoint name into the side's AV.
pub(crate) fn insert_peer(
    side: &Side,
    name: &str,
    seen_ip: Option<IpAddr>,
) -> fabric::Result<FiAddr> {
    let addr = peer_address(name, seen_ip)?;
    let Some(av) = side.av.as_deref() else {
        return Err(Error::inval("an unconnected endpoint needs an AV"));
    };
    let mut out = [FiAddr(0)];
    av.insert(&[addr], &mut out)?;
    if out[0] == FiAddr::NOTAVAIL {
        return Err(Error::inval(format!(
            "the peer's address `{name}` was refused by the AV"
        )));
    }
    Ok(out[0])
}

/// How long [`wait_one`] spins on the CQ before it starts yielding.
const SPIN_FOR: Duration = Duration::from_micros(20);

/// How long [`wait_one`] polls the CQ, yielding the CPU between reads,
/// before it blocks in `sread`.
const POLL_FOR: Duration = Duration::from_millis(2);

/// Empty CQ reads before [`wait_one`] first reads the clock (the start of
/// its spin). More would save readings where they are slow, but lengthen
/// the spin where reads are slow too (`tcp`: a system call each), which
/// one core shared by both sides pays for in every message.
const SPIN_FIRST: u32 = 1;

/// Empty CQ reads between [`wait_one`]'s clock readings while it spins.
/// The spin ends at the first reading past [`SPIN_FOR`], so the gap
/// between readings lengthens it: with 64 reads, tcp's cheaper empty
/// reads put the first reading just short of 20 us and the spin ran to
/// the second, near 40 us, which both processes on one core pay per
/// message (one-way 45 us against 31 us with 16).
const SPIN_CHECK: u32 = 16;

/// Yields between clock readings while [`wait_one`] yields (each yield is
/// a system call already; a clock reading per yield would double it).
const YIELD_CHECK: u32 = 8;

/// Waits for one completion; `Err` on an error completion or after 60 s.
///
/// Like `fi_pingpong` and `ibv_rc_pingpong`, it polls the CQ (each read
/// also drives manual progress) instead of blocking at once, since a
/// blocking wait would add the provider's wake-up time (arming, `poll`, a
/// context switch) to every transfer measured. Unlike them it spins only
/// for [`SPIN_FOR`], then yields the CPU between reads (so a peer on the
/// same core gets to run: busy polling there costs a scheduler tick per
/// message), and after [`POLL_FOR`] blocks in `sread`.
pub(crate) fn wait_one(side: &Side) -> fabric::Result<CqEntry> {
    let mut e = [CqEntry::default()];
    // The clock is read rarely: in some virtual machines a reading costs
    // several CQ reads (an emulated HPET access, ~0.7 us). A completion
    // that is there already (the second of a round, often) costs no
    // reading at all; the spin's clock starts after the first empty read.
    let mut start: Option<Instant> = None;
    let mut reads = 0u32;
    let mut yielding = false;
    loop {
        match side.cq.read(&mut e) {
            Ok(_) => return Ok(e[0]),
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) => return cq_failure(side, err),
        }
        reads = reads.wrapping_add(1);
        if yielding {
            std::thread::yield_now();
            if reads % YIELD_CHECK == 0 && start.is_some_and(|t| t.elapsed() >= POLL_FOR) {
                break;
            }
        } else if reads == SPIN_FIRST {
            start = Some(Instant::now());
        } else if reads > SPIN_FIRST && (reads - SPIN_FIRST) % SPIN_CHECK == 0 {
            // No `spin_loop` hint: under emulation (QEMU's TCG) a PAUSE
            // leaves the translated code, which delays noticing the
            // completion.
            yielding = start.is_some_and(|t| t.elapsed() >= SPIN_FOR);
        }
    }
    match side.cq.sread(&mut e, Some(Duration::from_secs(60))) {
        Ok(_) => Ok(e[0]),
        Err(err) if err.kind() == ErrorKind::Again => {
            Err(Error::new(ErrorKind::TimedOut, "no completion within 60 s"))
        }
        Err(err) => cq_failure(side, err),
    }
}

/// Bytes of a page of a [`MsgBuf`].
const PAGE: usize = 4096;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

/// A message buffer of a run: it starts on a page boundary, as
/// `ibv_rc_pingpong`'s and `fi_pingpong`'s do (a device or the kernel then
/// touches the fewest pages; under soft-RoCE this took 4 KiB from 1.08x to
/// 1.01-1.03x `ibv_rc_pingpong`), and every page is written before the
/// run. An untouched zeroed allocation would map the kernel's shared zero
/// page: a cross-memory-attach read of it reads one cached page over and
/// over, which made shm look 8-15% faster at 1-4 MiB than with real
/// memory. With an offset (`--buf-offset`) it starts that many bytes past
/// the boundary instead.
pub(crate) struct MsgBuf {
    pages: Vec<Page>,
    off: usize,
    len: usize,
}

/// What a fresh [`MsgBuf`] holds: not zero, so that no allocator can hand
/// out zero pages for it.
pub(crate) const FILL: u8 = 0x5a;

impl MsgBuf {
    /// A buffer of `len` bytes, each [`FILL`], on a page boundary.
    pub(crate) fn new(len: usize) -> MsgBuf {
        MsgBuf::at(len, 0)
    }

    /// A buffer of `len` bytes, each [`FILL`], starting `off % PAGE` bytes
    /// past a page boundary.
    pub(crate) fn at(len: usize, off: usize) -> MsgBuf {
        let off = off % PAGE;
        MsgBuf {
            pages: vec![Page([FILL; PAGE]); (off + len).div_ceil(PAGE)],
            off,
            len,
        }
    }
}

impl std::ops::Deref for MsgBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the pages are `(off + len).div_ceil(PAGE) * PAGE >= off +
        // len` contiguous, initialised bytes, borrowed with `self`.
        unsafe {
            std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>().add(self.off), self.len)
        }
    }
}

impl std::ops::DerefMut for MsgBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed mutably with `self`.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.pages.as_mut_ptr().cast::<u8>().add(self.off),
                self.len,
            )
        }
    }
}

/// The error of a failed CQ read: the error completion's, when there is one.
pub(crate) fn cq_failure(side: &Side, err: Error) -> fabric::Result<CqEntry> {
    if err.kind() != ErrorKind::Avail {
        return Err(err);
    }
    let ee = side.cq.readerr()?;
    Err(Error::new(
        ee.err,
        format!("error completion: {}", ee.err_text),
    ))
}

/// Registers `buf` with the side's domain when the provider needs local
/// buffers registered (FI_MR_LOCAL, as verbs' MSG endpoints do); `None`
/// when it does not. Data operations then carry the region's descriptor.
///
/// # Safety
///
/// `buf` must stay valid, and not move, until the region is dropped.
pub(crate) unsafe fn register_local(
    side: &Side,
    buf: &mut [u8],
) -> fabric::Result<Option<Box<dyn MemoryRegion>>> {
    if !side.info.domain_attr.mr_mode.contains(MrMode::LOCAL) || buf.is_empty() {
        return Ok(None);
    }
    let iov = [IoVec {
        addr: buf.as_mut_ptr(),
        len: buf.len(),
    }];
    let attr = MrAttr {
        iov: &iov,
        access: MrAccess::SEND | MrAccess::RECV | MrAccess::READ | MrAccess::WRITE,
        offset: 0,
        requested_key: 0,
        context: 0,
    };
    // SAFETY: the caller keeps `buf` valid until the region is dropped.
    unsafe { side.domain.mr_reg(&attr) }.map(Some)
}

/// The descriptor of an optional region.
pub(crate) fn desc_of(mr: Option<&dyn MemoryRegion>) -> Option<MrDesc> {
    mr.map(MemoryRegion::desc)
}

/// The pattern's words: a xorshift sequence started from `seed`.
fn words(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// Fills a buffer with a pattern that depends on `seed`, eight bytes per
/// step of the generator (so that `-v` costs little next to the transfer).
pub(crate) fn pattern(buf: &mut [u8], seed: u64) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut w = words(seed);
    for (c, x) in (&mut chunks).zip(&mut w) {
        c.copy_from_slice(&x.to_le_bytes());
    }
    let tail = chunks.into_remainder();
    if let Some(x) = w.next() {
        let n = tail.len();
        tail.copy_from_slice(&x.to_le_bytes()[..n]);
    }
}

/// Checks a buffer against [`pattern`].
pub(crate) fn check(buf: &[u8], seed: u64, size: usize) -> fabric::Result<()> {
    let mut w = words(seed);
    for (k, got) in buf.chunks(8).enumerate() {
        let want = w.next().unwrap_or_default().to_le_bytes();
        if got != &want[..got.len()] {
            let i = got.iter().zip(want).position(|(a, b)| *a != b).unwrap_or(0);
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "data check failed: size {size}, round {seed}, byte {}: {} instead of {}",
                    8 * k + i,
                    got[i],
                    want[i]
                ),
            ));
        }
    }
    Ok(())
}

/// `--self`: the server as a child process (`subcommand` with `child_args`
/// on a free control port), the client here running `client`.
pub(crate) fn run_self(
    subcommand: &str,
    child_args: Vec<String>,
    client: impl FnOnce(u16) -> fabric::Result<()>,
) -> fabric::Result<()> {
    let port = {
        let l = TcpListener::bind(("127.0.0.1", 0)).map_err(io_err("finding a free port"))?;
        l.local_addr()
            .map_err(io_err("finding a free port"))?
            .port()
    };
    let exe = std::env::current_exe().map_err(io_err("finding this program"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(subcommand)
        .args(["-B", &port.to_string()])
        .args(child_args)
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(io_err("starting the server process"))?;
    // The server's table is collected while it runs and printed after the
    // client's, so that the two never interleave.
    let reader = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = out.read_to_end(&mut text);
            text
        })
    });
    let r = client(port);
    if r.is_err() {
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(io_err("waiting for the server process"))?;
    if let Some(text) = reader.and_then(|h| h.join().ok()) {
        if !text.is_empty() {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&text).and_then(|()| out.flush());
        }
    }
    r?;
    if !status.success() {
        return Err(Error::new(
            ErrorKind::Other,
            format!("the server process failed ({status})"),
        ));
    }
    Ok(())
}

/// A measuring tool: its options hold the [`Common`] ones.
pub(crate) trait Tool: Clone {
    /// The subcommand's name.
    const NAME: &'static str;
    /// The shared options.
    fn common_mut(&mut self) -> &mut Common;
    /// The shared options.
    fn common(&self) -> &Common;
    /// Its own options, as the `--self` server process gets them.
    fn own_args(&self) -> Vec<String>;
    /// Runs as server or client, as the options say.
    fn session(&self) -> fabric::Result<()>;
}

/// Runs a tool: as server, as client, or (`--self`) both, the server as a
/// child process.
pub(crate) fn run_tool<T: Tool>(args: &T) -> crate::Status {
    let r = if args.common().self_run {
        let mut child = args.common().child_args();
        child.extend(args.own_args());
        run_self(T::NAME, child, |port| {
            let mut a = args.clone();
            let c = a.common_mut();
            c.self_run = false;
            c.dst_port = Some(port);
            c.address = Some("127.0.0.1".into());
            a.session()
        })
    } else {
        args.session()
    };
    finish(T::NAME, r)
}

/// Reports a run's outcome as the process status.
pub(crate) fn finish(tool: &str, r: fabric::Result<()>) -> crate::Status {
    match r {
        Ok(()) => crate::Status::Success,
        Err(e) => {
            eprintln!(
                "fabric {tool}: {} ({}): {}",
                e.kind().c_name(),
                e.code(),
                e.detail()
            );
            crate::Status::Failure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_line_without_end_is_refused_not_buffered() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            // 1 MiB without a newline, then a normal line.
            let _ = s.write_all(&vec![b'x'; 1 << 20]);
            let _ = s.write_all(b"\nfine\n");
        });
        let (s, _) = l.accept().unwrap();
        let mut c = Control::new(s).unwrap();
        let e = c.recv().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MsgSize, "{e}");
        drop(c);
        let _ = writer.join();
    }

    #[test]
    fn message_buffers_start_on_a_page_and_are_filled() {
        for len in [0, 1, 4095, 4096, 4097, 3 * 4096 + 5] {
            let mut b = MsgBuf::new(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % PAGE, 0);
            assert!(b.iter().all(|&x| x == FILL));
            b.fill(7);
            assert!(b.iter().all(|&x| x == 7));
        }
    }

    #[test]
    fn message_buffers_can_start_past_a_page_boundary() {
        for (len, off) in [
            (1, 16),
            (4096, 16),
            (4097, 4095),
            (65536, 48),
            (10, 4096 + 8),
        ] {
            let mut b = MsgBuf::at(len, off);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % PAGE, off % PAGE);
            assert!(b.iter().all(|&x| x == FILL));
            b.fill(3);
            assert!(b.iter().all(|&x| x == 3));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_sizes("64"), Ok(Sizes(vec![64])));
        assert_eq!(parse_sizes("1,64,4096"), Ok(Sizes(vec![1, 64, 4096])));
        assert_eq!(parse_sizes("1:8"), Ok(Sizes(vec![1, 2, 4, 8])));
        assert_eq!(parse_sizes("3:20"), Ok(Sizes(vec![3, 4, 8, 16, 20])));
        let all = parse_sizes("all").unwrap();
        assert_eq!(parse_sizes(&all.arg()), Ok(all));
        assert!(parse_sizes("8:1").is_err());
        assert!(parse_sizes("1,0").is_err());
        assert_eq!(parse_sizes("all").map(|s| s.0.len()), Ok(24));
        assert!(parse_sizes("0").is_err());
        assert!(parse_sizes("x").is_err());
    }

    #[test]
    fn figures_and_lines() {
        let r = Row {
            size: 1,
            iterations: 1000,
            transfers: 2000,
            seconds: 0.03,
            verified: true,
        };
        assert!((r.usec_per_xfer() - 15.0).abs() < 1e-9);
        let line = table_line(&r);
        assert!(line.starts_with("1       1000    =1000    2.0k"), "{line}");
        let j: serde_json::Value =
            serde_json::from_str(&json_line(&r, "pingpong", "tcp", EpType::Rdm)).unwrap();
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
        assert!(check(&b, 6, 1000).is_err());
        b[999] ^= 1;
        assert!(check(&b, 5, 1000).is_err());
        // Every length, including ones that end mid-word; the error names
        // the first wrong byte.
        for len in 0..40 {
            let mut b = vec![0u8; len];
            pattern(&mut b, 9);
            assert!(check(&b, 9, len).is_ok());
            if len > 0 {
                b[len - 1] ^= 0x80;
                let e = check(&b, 9, len).unwrap_err();
                assert!(e.detail().contains(&format!("byte {}", len - 1)), "{e}");
            }
        }
    }
}
