//! `fabric soak`: many messages of mixed sizes from several endpoints to
//! one, each received exactly once with every byte checked.
//!
//! The client opens `-j` RDM endpoints, one thread each, and sends `-n`
//! messages in all to the server's one endpoint: mostly small, some above
//! the eager and cross-memory-attach limits (up to `--max-size`), untagged
//! and tagged, posted or injected. Everything about a message (size,
//! kind, content) follows from the seed, the sending endpoint and the
//! message's sequence number; the sequence number travels as remote CQ
//! data (and in the tag). The server, which learns the plan over the
//! control connection, checks each arrival against it and keeps one bit
//! per message: a message that never comes, comes twice or comes wrong
//! fails the run.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use clap::Args;
use fabric::objects::{CompletionFlags, CqEntry, CqFormat, FiAddr, IoVec, Msg};
use fabric::{Caps, Error, ErrorKind, OpFlags};

use crate::Status;
use crate::perf::{self, Common, Control, EpArg, MsgBuf, Side, Sizes};

/// Options of `fabric soak`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SoakArgs {
    /// Provider to use (tcp, shm).
    #[arg(short = 'p', long = "provider")]
    pub provider: Option<String>,
    /// Messages in all (client; the server takes the client's plan).
    #[arg(short = 'n', long = "messages", default_value_t = 1_000_000)]
    pub messages: u64,
    /// Sending endpoints, one thread each (client).
    #[arg(short = 'j', long = "endpoints", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub endpoints: u32,
    /// Largest message in bytes (client).
    #[arg(long = "max-size", default_value_t = 1 << 20, value_parser = parse_max)]
    pub max_size: usize,
    /// Sends in flight per endpoint (client).
    #[arg(short = 'W', long = "window", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub window: u32,
    /// Seed of the sizes, kinds and contents (client).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Control port to listen on (server).
    #[arg(short = 'B', long = "src_port")]
    pub src_port: Option<u16>,
    /// Control port of the server (client).
    #[arg(short = 'P', long = "dst_port")]
    pub dst_port: Option<u16>,
    /// Run server and client as two processes on this machine.
    #[arg(long = "self")]
    pub self_run: bool,
    /// The server's address: given, this side is the client.
    pub address: Option<String>,
}

fn parse_max(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=1 << 30).contains(&n) => Ok(n),
        _ => Err(format!("`{s}`: the largest message must be 1 B to 1 GiB")),
    }
}

/// Runs the subcommand.
pub(crate) fn run(args: &SoakArgs) -> Status {
    let r = if args.self_run {
        let mut child = Vec::new();
        if let Some(p) = &args.provider {
            child.extend(["-p".to_string(), p.clone()]);
        }
        perf::run_self("soak", child, |port| {
            client(args, "127.0.0.1", port).map(|line| println!("{line}"))
        })
    } else if let Some(addr) = &args.address {
        let port = args.dst_port.unwrap_or(perf::CONTROL_PORT);
        client(args, addr, port).map(|line| println!("{line}"))
    } else {
        server(args).map(|line| println!("{line}"))
    };
    perf::finish("soak", r)
}

/// Set in the tag of every tagged message; the rest of the tag is the
/// message's id, which tagged receives ignore.
const TAG_MARK: u64 = 1 << 63;

/// Bits of a message id that hold its sequence number; the sending
/// endpoint's number is above them.
const SEQ_BITS: u32 = 40;

/// A run without any completion for this long has lost something.
const STALL: Duration = Duration::from_secs(30);

/// How long the server watches for stray messages after the last one.
const GRACE: Duration = Duration::from_millis(200);

/// What both sides know of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    messages: u64,
    endpoints: u32,
    max_size: usize,
    seed: u64,
}

/// One message of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Planned {
    size: usize,
    tagged: bool,
    /// Sent with `inject` when the provider's inject size allows.
    inject: bool,
    /// The seed of its content.
    pattern: u64,
}

/// SplitMix64's output function: a well-mixed 64-bit value of `z`.
fn mix(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Plan {
    /// Messages sent by endpoint `s`.
    fn count(&self, s: u32) -> u64 {
        let k = u64::from(self.endpoints);
        self.messages / k + u64::from(u64::from(s) < self.messages % k)
    }

    /// The id of message `i` of endpoint `s`: its remote CQ data.
    fn id(s: u32, i: u64) -> u64 {
        (u64::from(s) << SEQ_BITS) | i
    }

    /// Message `i` of endpoint `s`. Sizes: 55% 1-64 B, 20% up to 1 KiB,
    /// 18% up to 32 KiB (eager), 6% up to 256 KiB (rendezvous), 1% up to
    /// the largest (cross-memory attach on shm).
    fn message(&self, s: u32, i: u64) -> Planned {
        let r = mix(self.seed ^ mix(Self::id(s, i)));
        let (lo, hi) = match r % 1000 {
            0..550 => (1, 64),
            550..750 => (65, 1 << 10),
            750..930 => ((1 << 10) + 1, 32 << 10),
            930..990 => ((32 << 10) + 1, 256 << 10),
            _ => ((256 << 10) + 1, self.max_size),
        };
        let hi = hi.min(self.max_size);
        let lo = lo.min(hi);
        let size = lo + ((r >> 16) % (hi - lo + 1) as u64) as usize;
        Planned {
            size,
            tagged: r & (1 << 10) != 0,
            inject: r & (1 << 11) != 0,
            pattern: r,
        }
    }

    /// The control line that carries the plan.
    fn line(&self) -> String {
        format!(
            "plan {} {} {} {}",
            self.messages, self.endpoints, self.max_size, self.seed
        )
    }

    fn parse(line: &str) -> fabric::Result<Plan> {
        let bad = || Error::inval(format!("bad plan line from the client: `{line}`"));
        let mut it = line.split_whitespace();
        if it.next() != Some("plan") {
            return Err(bad());
        }
        let mut num = || {
            it.next()
                .and_then(|w| w.parse::<u64>().ok())
                .ok_or_else(bad)
        };
        let plan = Plan {
            messages: num()?,
            endpoints: u32::try_from(num()?).map_err(|_| bad())?,
            max_size: usize::try_from(num()?).map_err(|_| bad())?,
            seed: num()?,
        };
        let sane = (1..=1024).contains(&plan.endpoints)
            && (1..=1 << 30).contains(&plan.max_size)
            && plan.messages / u64::from(plan.endpoints) < 1 << SEQ_BITS;
        if !sane {
            return Err(bad());
        }
        Ok(plan)
    }
}

/// The options `getinfo` needs, as the measuring tools take them.
fn common(args: &SoakArgs, max_size: usize) -> Common {
    Common {
        provider: args.provider.clone(),
        ep_type: EpArg::Rdm,
        domain: None,
        sizes: Sizes(vec![max_size]),
        iterations: 0,
        src_port: args.src_port,
        dst_port: args.dst_port,
        verify: true,
        json: false,
        self_run: false,
        no_progress: true,
        buf_offset: 0,
        address: args.address.clone(),
    }
}

/// Opens an RDM endpoint for the soak on the entry for `node`.
fn open(args: &SoakArgs, plan: &Plan, node: IpAddr, source: bool) -> fabric::Result<Side> {
    let info = perf::pick(
        &common(args, plan.max_size),
        Caps::MSG | Caps::TAGGED,
        node,
        source,
    )?;
    if info.domain_attr.cq_data_size < 8 {
        return Err(Error::new(
            ErrorKind::NoSys,
            "the soak needs 8 bytes of remote CQ data",
        ));
    }
    if info.domain_attr.mr_mode.contains(fabric::MrMode::LOCAL) {
        return Err(Error::new(
            ErrorKind::NoSys,
            "the soak needs a provider without FI_MR_LOCAL",
        ));
    }
    if plan.max_size > info.ep_attr.max_msg_size {
        return Err(Error::inval(format!(
            "--max-size {} is above the provider's largest message ({})",
            plan.max_size, info.ep_attr.max_msg_size
        )));
    }
    perf::open_as(info, CqFormat::Tagged)
}

/// The server: receives the client's plan, checks every message, and
/// answers with the verdict. Returns its summary line. A client that
/// closes the control connection early (it died) fails the run.
fn server(args: &SoakArgs) -> fabric::Result<String> {
    let port = args.src_port.unwrap_or(perf::CONTROL_PORT);
    let listener = perf::listen_control(port)?;
    let (sock, _) = listener.accept().map_err(perf::io_err("control port"))?;
    let local = perf::control_local_ip(&sock)?;
    let mut ctl = Control::new(sock)?;
    let plan = Plan::parse(&ctl.recv()?)?;
    let side = open(args, &plan, local, true)?;
    ctl.send(&side.ep.getname()?.to_string())?;
    for _ in 0..plan.endpoints {
        let name = ctl.recv()?;
        perf::insert_peer(&side, &name, None)?;
    }
    match receive(&mut ctl, side, &plan) {
        Ok(tally) => {
            ctl.send(&format!("ok {} {}", tally.messages, tally.bytes))?;
            Ok(format!(
                "soak server: {} messages ({} tagged, {} bytes) from {} endpoints ({}), each received once, every byte verified",
                tally.messages,
                tally.tagged,
                tally.bytes,
                plan.endpoints,
                tally
                    .per_sender
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
            ))
        }
        Err(e) => {
            let _ = ctl.send(&format!("fail {}", e.detail()));
            Err(e)
        }
    }
}

/// What the server received.
#[derive(Debug, Default)]
struct Tally {
    messages: u64,
    tagged: u64,
    bytes: u64,
    per_sender: Vec<u64>,
}

/// A posted receive buffer of the server.
struct Rx {
    buf: MsgBuf,
    tagged: bool,
}

/// Posts receive `k` (its context).
fn post(side: &Side, rx: &mut Rx, k: usize) -> fabric::Result<()> {
    let iov = [IoVec {
        addr: rx.buf.as_mut_ptr(),
        len: rx.buf.len(),
    }];
    let msg = Msg {
        iov: &iov,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag: TAG_MARK,
        ignore: TAG_MARK - 1,
        context: k as u64,
        data: 0,
    };
    // SAFETY: the buffers outlive the endpoint (see `receive`).
    unsafe {
        if rx.tagged {
            side.ep.trecvmsg(&msg, OpFlags::empty())
        } else {
            side.ep.recvmsg(&msg, OpFlags::empty())
        }
    }
}

/// Receives and checks the whole plan.
fn receive(ctl: &mut Control, side: Side, plan: &Plan) -> fabric::Result<Tally> {
    let per_kind = 32.min(side.info.rx_attr.size / 2).max(1);
    let mut rxs: Vec<Rx> = (0..2 * per_kind)
        .map(|k| Rx {
            buf: MsgBuf::new(plan.max_size),
            tagged: k % 2 == 1,
        })
        .collect();
    // Dropped before `rxs` (locals drop in reverse order): no receive
    // outlives its buffer.
    let side = side;
    let mut seen: Vec<Vec<u64>> = (0..plan.endpoints)
        .map(|s| vec![0; plan.count(s).div_ceil(64) as usize])
        .collect();
    let mut tally = Tally {
        per_sender: vec![0; plan.endpoints as usize],
        ..Tally::default()
    };
    for (k, rx) in rxs.iter_mut().enumerate() {
        post(&side, rx, k)?;
    }
    ctl.send("ready")?;
    let mut entries = [CqEntry::default(); 16];
    let mut last = Instant::now();
    let mut handle = |entries: &[CqEntry], tally: &mut Tally| -> fabric::Result<()> {
        for e in entries {
            let Some(rx) = usize::try_from(e.context).ok().and_then(|k| rxs.get_mut(k)) else {
                return Err(Error::new(
                    ErrorKind::Other,
                    format!("a completion with an unknown context {}", e.context),
                ));
            };
            let (s, size) = check(plan, e, rx, &mut seen)?;
            tally.messages += 1;
            tally.tagged += u64::from(rx.tagged);
            tally.bytes += size as u64;
            tally.per_sender[s as usize] += 1;
            post(&side, rx, e.context as usize)?;
        }
        Ok(())
    };
    let poll = |entries: &mut [CqEntry], wait: Duration| -> fabric::Result<usize> {
        let r = match side.cq.read(entries) {
            Err(e) if e.kind() == ErrorKind::Again => side.cq.sread(entries, Some(wait)),
            r => r,
        };
        match r {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == ErrorKind::Again => Ok(0),
            Err(e) => perf::cq_failure(&side, e).map(|_| 0),
        }
    };
    while tally.messages < plan.messages {
        let n = poll(&mut entries, Duration::from_millis(100))?;
        if n > 0 {
            last = Instant::now();
            handle(&entries[..n], &mut tally)?;
        } else if ctl.closed() {
            return Err(Error::new(
                ErrorKind::ConnReset,
                format!(
                    "the client went away after {} of {} messages",
                    tally.messages, plan.messages
                ),
            ));
        } else if last.elapsed() >= STALL {
            return Err(Error::new(
                ErrorKind::TimedOut,
                format!(
                    "no message for {} s; missing: {}",
                    STALL.as_secs(),
                    missing(plan, &seen)
                ),
            ));
        }
    }
    // Every send completed at the client; nothing more may come.
    let line = ctl.recv()?;
    if line != "sent" {
        return Err(Error::inval(format!(
            "the client sent `{line}`, not `sent`"
        )));
    }
    let end = Instant::now() + GRACE;
    while Instant::now() < end {
        let n = poll(&mut entries, GRACE / 4)?;
        if n > 0 {
            let e = entries[0];
            return Err(Error::new(
                ErrorKind::Other,
                format!(
                    "a message beyond the plan: data {:#x}, {} bytes (duplicate?)",
                    e.data, e.len
                ),
            ));
        }
    }
    Ok(tally)
}

/// Checks one arrival against the plan and marks it seen; returns its
/// sender and size.
fn check(plan: &Plan, e: &CqEntry, rx: &Rx, seen: &mut [Vec<u64>]) -> fabric::Result<(u32, usize)> {
    let fail = |what: String| Err(Error::new(ErrorKind::Other, what));
    let s = u32::try_from(e.data >> SEQ_BITS).unwrap_or(u32::MAX);
    let i = e.data & ((1 << SEQ_BITS) - 1);
    if !e.flags.contains(CompletionFlags::REMOTE_CQ_DATA) {
        return fail(format!(
            "a receive completion without remote CQ data ({e:?})"
        ));
    }
    if s >= plan.endpoints || i >= plan.count(s) {
        return fail(format!(
            "a message that was never sent: data {:#x}, {} bytes",
            e.data, e.len
        ));
    }
    let m = plan.message(s, i);
    let kind = |t: bool| if t { "tagged" } else { "untagged" };
    if m.tagged != rx.tagged {
        return fail(format!(
            "message {i} of endpoint {s} was sent {} and matched a {} receive",
            kind(m.tagged),
            kind(rx.tagged)
        ));
    }
    if rx.tagged && e.tag != TAG_MARK | e.data {
        return fail(format!(
            "message {i} of endpoint {s} carries tag {:#x}, sent with {:#x}",
            e.tag,
            TAG_MARK | e.data
        ));
    }
    if e.len != m.size {
        return fail(format!(
            "message {i} of endpoint {s}: {} bytes arrived, {} were sent",
            e.len, m.size
        ));
    }
    let word = &mut seen[s as usize][(i / 64) as usize];
    let bit = 1u64 << (i % 64);
    if *word & bit != 0 {
        return fail(format!("message {i} of endpoint {s} arrived twice"));
    }
    *word |= bit;
    perf::check(&rx.buf[..m.size], m.pattern, m.size).map_err(|err| {
        Error::new(
            ErrorKind::Other,
            format!("message {i} of endpoint {s}: {}", err.detail()),
        )
    })?;
    Ok((s, m.size))
}

/// The messages not seen, per sender: how many and the first.
fn missing(plan: &Plan, seen: &[Vec<u64>]) -> String {
    let mut out = Vec::new();
    for (s, bits) in seen.iter().enumerate() {
        let count = plan.count(s as u32);
        let absent = (0..count).filter(|&i| bits[(i / 64) as usize] & (1 << (i % 64)) == 0);
        let (n, first) = absent.fold((0u64, None), |(n, f), i| (n + 1, f.or(Some(i))));
        if let Some(first) = first {
            out.push(format!("endpoint {s}: {n} (first {first})"));
        }
    }
    out.join(", ")
}

/// What one sending endpoint did.
#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    messages: u64,
    injected: u64,
    tagged: u64,
    bytes: u64,
}

/// The client: opens the endpoints, sends the plan, and returns its
/// summary line once the server has accepted everything.
fn client(args: &SoakArgs, addr: &str, port: u16) -> fabric::Result<String> {
    let plan = Plan {
        messages: args.messages,
        endpoints: args.endpoints,
        max_size: args.max_size,
        seed: args.seed,
    };
    let ip: IpAddr = match addr.parse() {
        Ok(ip) => ip,
        Err(_) => {
            use std::net::ToSocketAddrs;
            (addr, port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .map(|a| a.ip())
                .ok_or_else(|| Error::inval(format!("cannot resolve server address `{addr}`")))?
        }
    };
    let mut ctl = Control::new(perf::connect_retry(std::net::SocketAddr::new(ip, port))?)?;
    ctl.send(&plan.line())?;
    let server_name = ctl.recv()?;
    let mut sides = Vec::new();
    for _ in 0..plan.endpoints {
        let side = open(args, &plan, ip, false)?;
        let peer = perf::insert_peer(&side, &server_name, Some(ip))?;
        ctl.send(&side.ep.getname()?.to_string())?;
        sides.push((side, peer));
    }
    let provider = sides[0].0.info.prov_name().unwrap_or("?").to_string();
    let ready = ctl.recv()?;
    if ready != "ready" {
        return Err(Error::inval(format!("the server sent `{ready}`")));
    }
    let start = Instant::now();
    let window = args.window as usize;
    let results: Vec<fabric::Result<Sent>> = std::thread::scope(|scope| {
        let handles: Vec<_> = sides
            .into_iter()
            .enumerate()
            .map(|(s, (side, peer))| {
                let plan = &plan;
                scope.spawn(move || send_all(side, peer, plan, s as u32, window))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::new(ErrorKind::Other, "a sender panicked")))
            })
            .collect()
    });
    let mut total = Sent::default();
    for (s, r) in results.into_iter().enumerate() {
        let r =
            r.map_err(|e| Error::new(e.kind(), format!("sending endpoint {s}: {}", e.detail())))?;
        total.messages += r.messages;
        total.injected += r.injected;
        total.tagged += r.tagged;
        total.bytes += r.bytes;
    }
    ctl.send("sent")?;
    let verdict = ctl.recv()?;
    let seconds = start.elapsed().as_secs_f64();
    let mut it = verdict.split_whitespace();
    let (got, bytes) = match (it.next(), it.next(), it.next()) {
        (Some("ok"), Some(n), Some(b)) => (n.parse::<u64>().ok(), b.parse::<u64>().ok()),
        _ => {
            return Err(Error::new(
                ErrorKind::Other,
                format!("the server: {verdict}"),
            ));
        }
    };
    if got != Some(total.messages) || bytes != Some(total.bytes) {
        return Err(Error::new(
            ErrorKind::Other,
            format!(
                "sent {} messages of {} bytes, the server counted `{verdict}`",
                total.messages, total.bytes
            ),
        ));
    }
    Ok(format!(
        "soak {provider}: {} messages ({} tagged, {} injected, {:.2} GB) from {} endpoints in {seconds:.1} s ({:.0} messages/s, {:.0} MB/s): no loss, no duplicate, every byte verified",
        total.messages,
        total.tagged,
        total.injected,
        total.bytes as f64 / 1e9,
        plan.endpoints,
        total.messages as f64 / seconds,
        total.bytes as f64 / seconds / 1e6,
    ))
}

/// Sends endpoint `s`'s share of the plan with `window` sends in flight,
/// and waits until every send has completed.
fn send_all(side: Side, peer: FiAddr, plan: &Plan, s: u32, window: usize) -> fabric::Result<Sent> {
    let window = window.min(side.info.tx_attr.size.max(1));
    let mut slots: Vec<MsgBuf> = (0..window).map(|_| MsgBuf::new(plan.max_size)).collect();
    let mut small = vec![0u8; side.info.tx_attr.inject_size];
    // Dropped before `slots`: no send outlives its buffer.
    let side = side;
    let mut free: Vec<usize> = (0..window).rev().collect();
    let mut sent = Sent::default();
    let mut entries = [CqEntry::default(); 16];
    // Takes the completions there are (`block`: at least one).
    let mut reap = |free: &mut Vec<usize>, block: bool| -> fabric::Result<()> {
        let n = if block {
            entries[0] = perf::wait_one(&side)?;
            1
        } else {
            match side.cq.read(&mut entries) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Again => {
                    std::thread::yield_now();
                    0
                }
                Err(e) => perf::cq_failure(&side, e).map(|_| 0)?,
            }
        };
        for e in &entries[..n] {
            free.push(e.context as usize);
        }
        Ok(())
    };
    for i in 0..plan.count(s) {
        let m = plan.message(s, i);
        let data = Plan::id(s, i);
        let tag = TAG_MARK | data;
        let since = Instant::now();
        let again = |e: Error| -> fabric::Result<()> {
            if e.kind() != ErrorKind::Again {
                return Err(e);
            }
            if since.elapsed() >= STALL {
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "message {i}: the provider refused it for {} s",
                        STALL.as_secs()
                    ),
                ));
            }
            Ok(())
        };
        if m.inject && m.size <= small.len() {
            let buf = &mut small[..m.size];
            perf::pattern(buf, m.pattern);
            loop {
                let r = if m.tagged {
                    side.ep.tinject(buf, peer, tag, Some(data))
                } else {
                    side.ep.inject(buf, peer, Some(data))
                };
                match r {
                    Ok(()) => break,
                    Err(e) => {
                        again(e)?;
                        reap(&mut free, false)?;
                    }
                }
            }
            sent.injected += 1;
        } else {
            while free.is_empty() {
                reap(&mut free, true)?;
            }
            let k = free.pop().unwrap_or_default();
            let buf = &mut slots[k][..m.size];
            perf::pattern(buf, m.pattern);
            let iov = [IoVec {
                addr: buf.as_mut_ptr(),
                len: m.size,
            }];
            let msg = Msg {
                iov: &iov,
                desc: &[],
                addr: peer,
                tag,
                ignore: 0,
                context: k as u64,
                data,
            };
            loop {
                // SAFETY: the slot is not reused before the send's
                // completion, and the slots outlive the endpoint.
                let r = unsafe {
                    if m.tagged {
                        side.ep.tsendmsg(&msg, OpFlags::REMOTE_CQ_DATA)
                    } else {
                        side.ep.sendmsg(&msg, OpFlags::REMOTE_CQ_DATA)
                    }
                };
                match r {
                    Ok(()) => break,
                    Err(e) => {
                        again(e)?;
                        reap(&mut free, false)?;
                    }
                }
            }
        }
        sent.messages += 1;
        sent.tagged += u64::from(m.tagged);
        sent.bytes += m.size as u64;
    }
    while free.len() < window {
        reap(&mut free, true)?;
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_line_round_trips_and_bad_lines_are_refused() {
        let p = Plan {
            messages: 1000,
            endpoints: 3,
            max_size: 1 << 20,
            seed: 9,
        };
        assert_eq!(Plan::parse(&p.line()), Ok(p));
        for bad in [
            "",
            "plan",
            "plan 1 0 1 1",
            "plan 1 1 0 1",
            "plan x 1 1 1",
            "nope 1 1 1 1",
        ] {
            assert!(Plan::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn counts_add_up() {
        let p = Plan {
            messages: 1003,
            endpoints: 4,
            max_size: 64,
            seed: 1,
        };
        assert_eq!((0..4).map(|s| p.count(s)).sum::<u64>(), 1003);
    }

    #[test]
    fn sizes_are_mostly_small_and_reach_the_largest_classes() {
        let p = Plan {
            messages: 100_000,
            endpoints: 1,
            max_size: 1 << 20,
            seed: 3,
        };
        let msgs: Vec<Planned> = (0..p.messages).map(|i| p.message(0, i)).collect();
        assert!(msgs.iter().all(|m| (1..=1 << 20).contains(&m.size)));
        let small = msgs.iter().filter(|m| m.size <= 64).count();
        assert!(small > 50_000 && small < 60_000, "{small}");
        assert!(msgs.iter().any(|m| m.size == 1));
        assert!(msgs.iter().filter(|m| m.size > 256 << 10).count() > 500);
        let tagged = msgs.iter().filter(|m| m.tagged).count();
        assert!(tagged > 45_000 && tagged < 55_000, "{tagged}");
        // The same message every time; a small largest size caps all.
        assert_eq!(p.message(0, 77), p.message(0, 77));
        let tiny = Plan { max_size: 10, ..p };
        assert!((0..1000).all(|i| tiny.message(0, i).size <= 10));
    }

    #[test]
    fn missing_names_the_first_absent_message() {
        let p = Plan {
            messages: 130,
            endpoints: 1,
            max_size: 8,
            seed: 1,
        };
        let mut seen = vec![vec![u64::MAX, u64::MAX, 0b11]];
        assert_eq!(missing(&p, &seen), "");
        seen[0][1] &= !(1 << 5);
        assert_eq!(missing(&p, &seen), "endpoint 0: 1 (first 69)");
    }
}
