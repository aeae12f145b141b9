//! Verbs between two hosts: the same binary runs on both, one side chosen
//! by `XHOST_ROLE` (`cargo xtask rxe --hosts 2` runs it on two QEMU guests
//! joined by a virtual link; on two real hosts run it the same way).
//!
//! - `server` / `client`: MSG through rdma_cm over IPv4 and IPv6 (messages
//!   and RMA, every byte checked), RDM with connections made on demand by
//!   both sides at once, DGRAM both ways.
//! - `survivor` / `victim`, then `restarted`: the victim's host is powered
//!   off while the survivor sends to it (the survivor prints `XHOST_CUT`,
//!   on which the rig kills the victim's guest) from two endpoints: one
//!   with a full window of sends in flight, the other with rendezvous
//!   sends the victim never receives, which only wait for its FIN (only
//!   the provider's liveness probe can notice that the victim is gone,
//!   and it must not fail them while the victim lives). Every send
//!   outstanding at either endpoint ends in exactly one completion within
//!   [`FAULT_BOUND`]; then the survivor prints `XHOST_RESTORE` (the rig
//!   boots the victim's guest again) and both endpoints talk to the
//!   restarted peer.
//!
//! `XHOST_SELF` / `XHOST_PEER` are this host's and the peer's IPv4
//! addresses on the link, `XHOST_SELF6` / `XHOST_PEER6` the IPv6 ones. The
//! two sides meet over TCP connections of their own (one port per test)
//! to swap names and keep in step. Without `XHOST_ROLE` every test skips.

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::*;
use fabric_core::matching::Request;
use fabric_core::objects::{
    AddressVector, AvAttr, Bind, CompletionQueue, CqEntry, CqErrEntry, Domain, Endpoint, EqEvent,
    Fabric, FiAddr, IoVec, Msg, Provider, RmaIov, RmaMsg,
};
use fabric_core::testing::{pattern, same};
use fabric_core::*;
use prov_verbs::VerbsProvider;

/// How long the two sides wait for each other (two TCG guests are slow).
const MEET: Duration = Duration::from_secs(180);

/// Every send outstanding when the peer's host goes away completes
/// within this time of the power-off: the provider's bound (its RDM
/// module docs), 2 probe intervals of 1 s and 7 ACK timeouts, which
/// rdma_cm makes 2.1 s on RoCE in Linux 6.1 (17 s in all; 15 to 16 s
/// measured in the rig), with room for two TCG guests on 2 cores.
const FAULT_BOUND: Duration = Duration::from_secs(25);

/// This side's role, or `None` (skip) when the tests run on one host.
fn role(group: &[&str]) -> Option<String> {
    let Ok(r) = std::env::var("XHOST_ROLE") else {
        eprintln!("skipped: XHOST_ROLE is not set (cargo xtask rxe --hosts 2 sets it)");
        return None;
    };
    group.contains(&r.as_str()).then_some(r)
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// The control connection: one text line per message.
struct Ctl {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Ctl {
    /// The server side: waits for the peer on `port`.
    fn accept(port: u16) -> Ctl {
        let l = TcpListener::bind(("0.0.0.0", port)).unwrap();
        l.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + MEET;
        loop {
            match l.accept() {
                Ok((s, _)) => return Ctl::new(s),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(
                        Instant::now() < deadline,
                        "no peer on port {port} within {MEET:?}"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("accept on port {port}: {e}"),
            }
        }
    }

    /// The client side: connects to the peer's `port`, retrying while the
    /// peer is not there yet.
    fn connect(peer: &str, port: u16) -> Ctl {
        let ip: IpAddr = peer.parse().unwrap();
        let deadline = Instant::now() + MEET;
        loop {
            match TcpStream::connect_timeout(&SocketAddr::new(ip, port), Duration::from_secs(5)) {
                Ok(s) => return Ctl::new(s),
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "cannot reach {peer}:{port} within {MEET:?}: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn new(s: TcpStream) -> Ctl {
        s.set_nonblocking(false).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(MEET)).unwrap();
        let w = s.try_clone().unwrap();
        Ctl {
            r: BufReader::new(s),
            w,
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.w, "{line}").unwrap();
    }

    fn recv(&mut self) -> String {
        let mut line = String::new();
        let n = self.r.read_line(&mut line).unwrap();
        assert!(n > 0, "the peer closed the control connection");
        line.trim_end().to_string()
    }

    /// Sends `what` and expects the peer to say the same.
    fn step(&mut self, what: &str) {
        self.send(what);
        let got = self.recv();
        assert_eq!(got, what, "the peer is elsewhere");
    }
}

/// `getinfo` of the verbs provider with node / service.
fn getinfo(hints: &Info, node: &str, service: Option<&str>, source: bool) -> Vec<Info> {
    let req = Request {
        node: Some(node),
        service,
        flags: if source {
            GetinfoFlags::SOURCE
        } else {
            GetinfoFlags::empty()
        },
        hints: Some(hints),
        ..Request::new(Version::CURRENT)
    };
    VerbsProvider
        .getinfo(&req)
        .unwrap_or_else(|e| panic!("getinfo for {node} {service:?}: {e}"))
}

/// Reads one completion if there is one.
fn poll(cq: &dyn CompletionQueue) -> Option<std::result::Result<CqEntry, CqErrEntry>> {
    let mut out = [CqEntry::default(); 1];
    match cq.read(&mut out) {
        Ok(1) => Some(Ok(out[0])),
        Ok(_) => None,
        Err(e) if e.kind() == ErrorKind::Again => None,
        Err(e) if e.kind() == ErrorKind::Avail => Some(Err(cq.readerr().unwrap())),
        Err(e) => panic!("CQ read failed: {e:?}"),
    }
}

fn tmsg<'a>(iov: &'a [IoVec], addr: FiAddr, tag: u64, context: u64) -> Msg<'a> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore: 0,
        context,
        data: 0,
    }
}

// ---------------------------------------------------------------------------
// MSG through rdma_cm

const MSG_SIZES: [usize; 6] = [1, 1000, 4096, 4097, 65536, 1 << 20];

#[test]
fn msg_ipv4_through_rdma_cm() {
    msg_run(false, 18901, 7471);
}

#[test]
fn msg_ipv6_through_rdma_cm() {
    msg_run(true, 18902, 7472);
}

fn msg_run(v6: bool, ctl_port: u16, cm_port: u16) {
    let Some(role) = role(&["server", "client"]) else {
        return;
    };
    let mut hints = msg_hints();
    hints.addr_format = if v6 {
        AddrFormat::SockaddrIn6
    } else {
        AddrFormat::SockaddrIn
    };
    let (me, peer) = if v6 {
        (var("XHOST_SELF6"), var("XHOST_PEER6"))
    } else {
        (var("XHOST_SELF"), var("XHOST_PEER"))
    };
    let service = cm_port.to_string();
    if role == "server" {
        let mut ctl = Ctl::accept(ctl_port);
        let info = getinfo(&hints, &me, Some(&service), true).remove(0);
        eprintln!(
            "msg server: listening at {}",
            info.src_addr.as_ref().unwrap()
        );
        let l = listener(&info);
        ctl.step("listening");
        let req = wait_eq(l.eq.as_ref()).unwrap();
        let EqEvent::ConnReq { info, data, .. } = req else {
            panic!("expected a connection request, got {req:?}")
        };
        assert_eq!(data, b"from the client");
        eprintln!(
            "msg server: request from {:?}",
            info.dest_addr.as_ref().map(ToString::to_string)
        );
        let side = open_side(l.fabric.as_ref(), &info);
        side.ep.accept(b"from the server").unwrap();
        let c = wait_eq(side.eq.as_ref()).unwrap();
        assert!(matches!(c, EqEvent::Connected { .. }), "server got {c:?}");
        msg_server(&side, &mut ctl);
        ctl.step("done");
    } else {
        let mut ctl = Ctl::connect(&var("XHOST_PEER"), ctl_port);
        ctl.step("listening");
        // rdma_cm resolves the peer's address and the route to it.
        let info = getinfo(&hints, &peer, Some(&service), false).remove(0);
        let dest = info.dest_addr.clone().unwrap();
        eprintln!(
            "msg client: {} -> {dest}",
            info.src_addr
                .as_ref()
                .map_or("?".to_string(), ToString::to_string)
        );
        let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
        let side = open_side(fabric.as_ref(), &info);
        side.ep.connect(&dest, b"from the client").unwrap();
        let c = wait_eq(side.eq.as_ref()).unwrap();
        assert!(
            matches!(&c, EqEvent::Connected { data, .. } if data == b"from the server"),
            "client got {c:?}"
        );
        msg_client(&side, &mut ctl);
        ctl.step("done");
    }
}

/// Per size: the client's message comes in and is checked, and the
/// server's answer goes out; then the client reads and writes a region.
fn msg_server(side: &Side, ctl: &mut Ctl) {
    for (k, size) in MSG_SIZES.into_iter().enumerate() {
        let seed = 100 + k as u64;
        let mut rbuf = Buf::new(side.domain.as_ref(), size);
        let riov = rbuf.iov();
        let rdesc = [rbuf.mr.desc()];
        // SAFETY: the buffer outlives the completion, waited for below.
        unsafe { side.ep.recvmsg(&msg(&riov, &rdesc, 1, 0), OpFlags::empty()) }.unwrap();
        ctl.step(&format!("posted {size}"));
        let c = wait_cq(side.cq.as_ref()).unwrap();
        assert_eq!((c.context, c.len), (1, size));
        same(
            &format!("{size} B from the client"),
            &rbuf.mem,
            &pattern(size, seed),
        );
        let mut sbuf = Buf::new(side.domain.as_ref(), size);
        sbuf.mem.copy_from_slice(&pattern(size, seed + 1000));
        let siov = sbuf.iov();
        let sdesc = [sbuf.mr.desc()];
        // SAFETY: as above.
        unsafe { side.ep.sendmsg(&msg(&siov, &sdesc, 2, 0), OpFlags::empty()) }.unwrap();
        let c = wait_cq(side.cq.as_ref()).unwrap();
        assert_eq!(c.context, 2);
    }
    // RMA: a region the client reads, then overwrites.
    let len = 1 << 20;
    let mut region = Buf::new(side.domain.as_ref(), len);
    region.mem.copy_from_slice(&pattern(len, 7));
    ctl.send(&format!("{} {}", region.addr(), region.mr.key()));
    assert_eq!(ctl.recv(), "written");
    same("the region the client wrote", &region.mem, &pattern(len, 8));
    ctl.send("checked");
}

fn msg_client(side: &Side, ctl: &mut Ctl) {
    for (k, size) in MSG_SIZES.into_iter().enumerate() {
        let seed = 100 + k as u64;
        let mut rbuf = Buf::new(side.domain.as_ref(), size);
        let riov = rbuf.iov();
        let rdesc = [rbuf.mr.desc()];
        // SAFETY: the buffer outlives the completion, waited for below.
        unsafe { side.ep.recvmsg(&msg(&riov, &rdesc, 3, 0), OpFlags::empty()) }.unwrap();
        ctl.step(&format!("posted {size}"));
        let mut sbuf = Buf::new(side.domain.as_ref(), size);
        sbuf.mem.copy_from_slice(&pattern(size, seed));
        let siov = sbuf.iov();
        let sdesc = [sbuf.mr.desc()];
        // SAFETY: as above.
        unsafe { side.ep.sendmsg(&msg(&siov, &sdesc, 4, 0), OpFlags::empty()) }.unwrap();
        // The send's and the answer's completions, in either order.
        let mut got = [wait_cq(side.cq.as_ref()).unwrap().context, 0];
        got[1] = wait_cq(side.cq.as_ref()).unwrap().context;
        got.sort_unstable();
        assert_eq!(got, [3, 4]);
        same(
            &format!("{size} B from the server"),
            &rbuf.mem,
            &pattern(size, seed + 1000),
        );
    }
    let line = ctl.recv();
    let (addr, key) = line.split_once(' ').unwrap();
    let (addr, key): (u64, u64) = (addr.parse().unwrap(), key.parse().unwrap());
    let len = 1 << 20;
    let remote = [RmaIov { addr, len, key }];
    let mut local = Buf::new(side.domain.as_ref(), len);
    let liov = local.iov();
    let ldesc = [local.mr.desc()];
    let read = RmaMsg {
        iov: &liov,
        desc: &ldesc,
        addr: FiAddr::UNSPEC,
        rma_iov: &remote,
        context: 5,
        data: 0,
    };
    // SAFETY: the buffer outlives the completion, waited for below.
    unsafe { side.ep.readmsg(&read, OpFlags::empty()) }.unwrap();
    assert_eq!(wait_cq(side.cq.as_ref()).unwrap().context, 5);
    same(
        "the region read from the server",
        &local.mem,
        &pattern(len, 7),
    );
    local.mem.copy_from_slice(&pattern(len, 8));
    let write = RmaMsg { context: 6, ..read };
    // SAFETY: as above.
    unsafe { side.ep.writemsg(&write, OpFlags::empty()) }.unwrap();
    assert_eq!(wait_cq(side.cq.as_ref()).unwrap().context, 6);
    ctl.send("written");
    assert_eq!(ctl.recv(), "checked");
}

// ---------------------------------------------------------------------------
// RDM and DGRAM: both sides the same

/// An unconnected endpoint with its own CQ and AV.
struct Ud {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    av: Box<dyn AddressVector>,
    _domain: Box<dyn Domain>,
    _fabric: Box<dyn Fabric>,
}

fn open_ud(info: &Info) -> Ud {
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let cq = domain.cq(&cq_attr()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Av(av.as_ref())).unwrap();
    ep.enable().unwrap();
    Ud {
        ep,
        cq,
        av,
        _domain: domain,
        _fabric: fabric,
    }
}

impl Ud {
    /// Swaps names with the peer and inserts the peer's.
    fn meet(&self, ctl: &mut Ctl) -> FiAddr {
        ctl.send(&self.ep.getname().unwrap().to_string());
        let name: Address = ctl.recv().parse().unwrap();
        eprintln!("me {}, peer {name}", self.ep.getname().unwrap());
        let mut out = [FiAddr(0)];
        assert_eq!(self.av.insert(&[name], &mut out).unwrap(), 1);
        out[0]
    }

    /// Posts a send, retrying while the endpoint says Again (an RDM
    /// connection being made), reading the CQ meanwhile into `seen`.
    fn post(&self, op: impl Fn() -> Result<()>, seen: &mut Vec<CqEntry>) {
        let deadline = Instant::now() + T;
        loop {
            match op() {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again => {
                    if let Some(c) = poll(self.cq.as_ref()) {
                        seen.push(c.unwrap_or_else(|e| panic!("error completion: {e:?}")));
                    }
                }
                Err(e) => panic!("post failed: {e:?}"),
            }
            assert!(Instant::now() < deadline, "still Again after {T:?}");
        }
    }

    /// Reads completions until `n` in all, `seen` included.
    fn collect(&self, seen: &mut Vec<CqEntry>, n: usize) {
        let deadline = Instant::now() + T;
        while seen.len() < n {
            if let Some(c) = poll(self.cq.as_ref()) {
                seen.push(c.unwrap_or_else(|e| panic!("error completion: {e:?}")));
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} completions within {T:?}",
                seen.len()
            );
        }
    }
}

fn rdm_hints() -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::TAGGED;
    h.addr_format = AddrFormat::SockaddrIn;
    h
}

/// Sizes of the RDM run: inline, eager and beyond.
const RDM_SIZES: [usize; 8] = [1, 60, 256, 1000, 4096, 16384, 65536, 262144];

/// Both sides send to each other at the same moment, so both make the
/// on-demand connection at once; every message is checked.
#[test]
fn rdm_on_demand_connections_both_ways_at_once() {
    let Some(role) = role(&["server", "client"]) else {
        return;
    };
    let mut ctl = if role == "server" {
        Ctl::accept(18903)
    } else {
        Ctl::connect(&var("XHOST_PEER"), 18903)
    };
    let info = getinfo(&rdm_hints(), &var("XHOST_SELF"), None, true).remove(0);
    let ud = open_ud(&info);
    let peer = ud.meet(&mut ctl);
    let (mine, theirs) = if role == "server" { (1, 2) } else { (2, 1) };
    let rounds = 3;
    let n = rounds * RDM_SIZES.len();
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|k| vec![0; RDM_SIZES[k % 8]]).collect();
    let riovs: Vec<[IoVec; 1]> = rbufs.iter_mut().map(|b| iov(b)).collect();
    for (k, riov) in riovs.iter().enumerate() {
        // SAFETY: the buffers live until the end of the test, after
        // their completions.
        unsafe {
            ud.ep.trecvmsg(
                &tmsg(riov, FiAddr::UNSPEC, k as u64, k as u64),
                OpFlags::empty(),
            )
        }
        .unwrap();
    }
    ctl.step("posted");
    let mut sbufs: Vec<Vec<u8>> = (0..n)
        .map(|k| pattern(RDM_SIZES[k % 8], mine * 1000 + k as u64))
        .collect();
    let siovs: Vec<[IoVec; 1]> = sbufs.iter_mut().map(|b| iov(b)).collect();
    let mut seen = Vec::new();
    let start = Instant::now();
    for (k, siov) in siovs.iter().enumerate() {
        let m = tmsg(siov, peer, k as u64, 1000 + k as u64);
        // SAFETY: the buffers live until the end of the test.
        ud.post(
            || unsafe { ud.ep.tsendmsg(&m, OpFlags::empty()) },
            &mut seen,
        );
    }
    ud.collect(&mut seen, 2 * n);
    eprintln!(
        "rdm: {n} messages each way in {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let mut recvs = 0;
    for c in &seen {
        if c.context < 1000 {
            let k = c.context as usize;
            assert_eq!((c.tag, c.len), (k as u64, RDM_SIZES[k % 8]));
            recvs += 1;
        }
    }
    assert_eq!(recvs, n);
    for (k, b) in rbufs.iter().enumerate() {
        same(
            &format!("message {k} from the peer"),
            b,
            &pattern(RDM_SIZES[k % 8], theirs * 1000 + k as u64),
        );
    }
    ctl.step("done");
}

/// Datagrams both ways between the two hosts' UD queue pairs.
#[test]
fn dgram_both_ways() {
    let Some(role) = role(&["server", "client"]) else {
        return;
    };
    let mut ctl = if role == "server" {
        Ctl::accept(18904)
    } else {
        Ctl::connect(&var("XHOST_PEER"), 18904)
    };
    let mut h = Info::default();
    h.caps = Caps::MSG;
    h.addr_format = AddrFormat::IbUd;
    let me = var("XHOST_SELF");
    let info = getinfo(&h, &me, None, true).remove(0);
    let ud = open_ud(&info);
    let peer = ud.meet(&mut ctl);
    let (mine, theirs) = if role == "server" { (1, 2) } else { (2, 1) };
    let max = info.ep_attr.max_msg_size.min(1024);
    let n = 16;
    let size = |k: usize| 1 + (k * 67) % max;
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0; max]).collect();
    let riovs: Vec<[IoVec; 1]> = rbufs.iter_mut().map(|b| iov(b)).collect();
    for (k, riov) in riovs.iter().enumerate() {
        // SAFETY: the buffers live until the end of the test.
        unsafe {
            ud.ep
                .recvmsg(&tmsg(riov, FiAddr::UNSPEC, 0, k as u64), OpFlags::empty())
        }
        .unwrap();
    }
    ctl.step("posted");
    let mut sbufs: Vec<Vec<u8>> = (0..n)
        .map(|k| pattern(size(k), mine * 1000 + k as u64))
        .collect();
    let siovs: Vec<[IoVec; 1]> = sbufs.iter_mut().map(|b| iov(b)).collect();
    let mut seen = Vec::new();
    for (k, siov) in siovs.iter().enumerate() {
        let m = tmsg(siov, peer, 0, 1000 + k as u64);
        // SAFETY: the buffers live until the end of the test.
        ud.post(|| unsafe { ud.ep.sendmsg(&m, OpFlags::empty()) }, &mut seen);
    }
    ud.collect(&mut seen, 2 * n);
    // Receives complete in the order they were posted, datagrams arrive
    // in the order they were sent (one link, one path).
    let recvs: Vec<&CqEntry> = seen.iter().filter(|c| c.context < 1000).collect();
    assert_eq!(recvs.len(), n);
    for c in recvs {
        let k = c.context as usize;
        assert_eq!(c.len, size(k), "datagram {k}");
        same(
            &format!("datagram {k} from the peer"),
            &rbufs[k][..size(k)],
            &pattern(size(k), theirs * 1000 + k as u64),
        );
    }
    ctl.step("done");
}

// ---------------------------------------------------------------------------
// A host powered off

/// Sizes of the fault run's messages, alternating: eager (the data goes
/// with the send) and rendezvous (the peer reads it and answers with a
/// FIN); and how many are outstanding.
const FAULT_SIZES: [usize; 2] = [4096, 16384];
const FAULT_WINDOW: usize = 32;
const FAULT_SIZE_MAX: usize = 16384;

/// Rendezvous sends from the survivor's second endpoint that the victim
/// never receives (their tag matches none of its receives): they wait
/// for a FIN with nothing on the wire, so only the provider's liveness
/// probe can find out that the victim is gone. A thread sleeps in `sread`
/// without a timeout for their completions, the only one to touch that
/// endpoint: the probe must go out from a sleeping application too.
const HELD: usize = 4;
const HELD_TAG: u64 = 0x686f_6c64;

/// How long the held sends wait while the victim lives before the
/// power-off: several of the provider's probe intervals (1 s), which a
/// live peer answers without failing anything; half an interval more,
/// so that the power-off falls between two probes.
const HELD_ALIVE: Duration = Duration::from_millis(4500);

fn fault_size(slot: usize) -> usize {
    FAULT_SIZES[slot % 2]
}

#[test]
fn fault_power_off() {
    let Some(role) = role(&["survivor", "victim", "restarted"]) else {
        return;
    };
    let info = getinfo(&rdm_hints(), &var("XHOST_SELF"), None, true).remove(0);
    let ud = open_ud(&info);
    match role.as_str() {
        "survivor" => survivor(&ud, Arc::new(open_ud(&info))),
        "victim" => victim(&ud),
        _ => restarted(&ud),
    }
}

/// Operations outstanding at one of the survivor's endpoints, by the
/// slot in their context's low byte.
struct Outstanding {
    busy: Vec<bool>,
    ok: usize,
    errors: Vec<ErrorKind>,
    /// When the last one ended after the power-off.
    ended: Option<Duration>,
}

impl Outstanding {
    fn new(n: usize) -> Self {
        Outstanding {
            busy: vec![false; n],
            ok: 0,
            errors: Vec::new(),
            ended: None,
        }
    }

    fn count(&self) -> usize {
        self.busy.iter().filter(|b| **b).count()
    }

    /// Takes one completion of `cq`, if any: exactly one per operation,
    /// errors only after the power-off (`cut`).
    fn poll(&mut self, what: &str, cq: &dyn CompletionQueue, cut: Option<Instant>) {
        if let Some(c) = poll(cq) {
            self.take(what, c, cut);
        }
    }

    /// Counts completion `c`.
    fn take(
        &mut self,
        what: &str,
        c: std::result::Result<CqEntry, CqErrEntry>,
        cut: Option<Instant>,
    ) {
        let (slot, err) = match c {
            Ok(c) => ((c.context & 0xff) as usize, None),
            Err(e) => ((e.entry.context & 0xff) as usize, Some(e)),
        };
        assert!(
            self.busy[slot],
            "{what}: a second completion for slot {slot}"
        );
        self.busy[slot] = false;
        match err {
            None => self.ok += 1,
            Some(e) => {
                let Some(t) = cut else {
                    panic!("{what}: an error before the power-off: {e:?}");
                };
                if self.errors.is_empty() {
                    eprintln!(
                        "fault: {what}: first error completion {:.1} ms after the power-off request: {:?} ({})",
                        t.elapsed().as_secs_f64() * 1e3,
                        e.err,
                        e.err_text
                    );
                }
                self.errors.push(e.err);
            }
        }
    }

    /// Notes when all have ended after the power-off (`cut`), some in
    /// error.
    fn settle(&mut self, cut: Option<Instant>) {
        if let Some(t) = cut {
            if self.ended.is_none() && self.count() == 0 && !self.errors.is_empty() {
                self.ended = Some(t.elapsed());
            }
        }
    }
}

/// Sends to the victim with a full window from one endpoint while four
/// rendezvous sends of a second endpoint wait for the victim; asks for the
/// power-off mid-transfer; every operation outstanding at either endpoint
/// then ends in exactly one completion within [`FAULT_BOUND`] (the held
/// sends' completions read by a thread asleep in `sread`); then both
/// endpoints talk to the restarted peer.
fn survivor(ud: &Ud, quiet: Arc<Ud>) {
    let mut ctl = Ctl::accept(18905);
    let victim = ud.meet(&mut ctl);
    let mut out = [FiAddr(0)];
    let name = ud.av.lookup(victim).unwrap();
    assert_eq!(quiet.av.insert(&[name], &mut out).unwrap(), 1);
    let quiet_victim = out[0];

    // The held sends: they wait for the victim's FIN for ever.
    let mut held_bufs: Vec<Vec<u8>> = (0..HELD).map(|k| pattern(16384, 900 + k as u64)).collect();
    let held_iovs: Vec<[IoVec; 1]> = held_bufs.iter_mut().map(|b| iov(b)).collect();
    let mut held = Outstanding::new(HELD);
    for (k, v) in held_iovs.iter().enumerate() {
        let m = tmsg(v, quiet_victim, HELD_TAG, k as u64);
        // SAFETY: the buffers live until the end of the test.
        quiet.post(
            || unsafe { quiet.ep.tsendmsg(&m, OpFlags::empty()) },
            &mut Vec::new(),
        );
        held.busy[k] = true;
    }
    let held_since = Instant::now();
    // Their completions: read by a thread that sleeps in sread with no
    // timeout, the only one to touch that endpoint from here on.
    let (held_tx, held_rx) = mpsc::channel();
    let sleeper = {
        let quiet = Arc::clone(&quiet);
        std::thread::spawn(move || {
            for _ in 0..HELD {
                let mut out = [CqEntry::default(); 1];
                let c = match quiet.cq.sread(&mut out, None) {
                    Ok(1) => Ok(out[0]),
                    Err(e) if e.kind() == ErrorKind::Avail => Err(quiet.cq.readerr().unwrap()),
                    other => panic!("held: sread without a timeout gave {other:?}"),
                };
                if held_tx.send(c).is_err() {
                    return;
                }
            }
        })
    };

    let mut bufs: Vec<Vec<u8>> = (0..FAULT_WINDOW)
        .map(|k| pattern(fault_size(k), k as u64))
        .collect();
    let iovs: Vec<[IoVec; 1]> = bufs.iter_mut().map(|b| iov(b)).collect();
    let post = |slot: usize, seq: u64| {
        let m = tmsg(&iovs[slot], victim, 0, slot as u64 | (seq << 8));
        // SAFETY: the buffers live until the end of the test and are
        // only reused after their completion.
        unsafe { ud.ep.sendmsg(&m, OpFlags::empty()) }
    };
    let mut seq = 0u64;
    let mut window = Outstanding::new(FAULT_WINDOW);
    let mut cut_at: Option<Instant> = None;
    let mut failure = None;
    let start = Instant::now();
    loop {
        // Refill the window while nothing has failed.
        if window.errors.is_empty() {
            for slot in 0..FAULT_WINDOW {
                if !window.busy[slot] {
                    match post(slot, seq) {
                        Ok(()) => {
                            window.busy[slot] = true;
                            seq += 1;
                        }
                        Err(e) if e.kind() == ErrorKind::Again => break,
                        Err(e) if cut_at.is_some() => {
                            // Refused at once, after the power-off: as
                            // good as an error completion.
                            eprintln!("fault: a send after the power-off was refused: {e}");
                            window.errors.push(e.kind());
                            break;
                        }
                        Err(e) => panic!("send before the power-off: {e:?}"),
                    }
                }
            }
        }
        window.poll("window", ud.cq.as_ref(), cut_at);
        while let Ok(c) = held_rx.try_recv() {
            held.take("held", c, cut_at);
        }
        window.settle(cut_at);
        held.settle(cut_at);
        if cut_at.is_none() {
            assert_eq!(
                held.count(),
                HELD,
                "a held send completed while the victim lived"
            );
        }
        if cut_at.is_none() && window.ok >= 4 * FAULT_WINDOW && held_since.elapsed() >= HELD_ALIVE {
            // In the middle of the transfer: the rig powers the victim off.
            let line = var("XHOST_CUT");
            println!("{line}");
            std::io::stdout().flush().unwrap();
            eprintln!(
                "fault: {} sends completed in {:.1} s; power-off requested with {} outstanding, and {HELD} held sends waiting for {:.1} s",
                window.ok,
                start.elapsed().as_secs_f64(),
                window.count(),
                held_since.elapsed().as_secs_f64()
            );
            cut_at = Some(Instant::now());
        }
        if let Some(t) = cut_at {
            if window.ended.is_some() && held.ended.is_some() {
                for (what, o) in [("window", &window), ("held", &held)] {
                    eprintln!(
                        "fault: {what}: all outstanding operations ended {:.1} ms after the power-off request: {} ok, {} in error ({:?})",
                        o.ended.unwrap_or_default().as_secs_f64() * 1e3,
                        o.ok,
                        o.errors.len(),
                        o.errors.first()
                    );
                }
                assert_eq!(held.errors.len(), HELD, "every held send fails");
                break;
            }
            if t.elapsed() >= FAULT_BOUND {
                let left: Vec<usize> = (0..FAULT_WINDOW).filter(|s| window.busy[*s]).collect();
                let sizes: Vec<usize> = left.iter().map(|s| fault_size(*s)).collect();
                let f = format!(
                    "{} window sends ({} ok, {} in error so far; sizes of the rest: {sizes:?}) and {} of {HELD} held sends still outstanding {FAULT_BOUND:?} after the power-off",
                    left.len(),
                    window.ok,
                    window.errors.len(),
                    held.count()
                );
                eprintln!("fault: FAILED: {f}");
                failure = Some(f);
                break;
            }
        }
    }
    if failure.is_none() {
        sleeper.join().unwrap();
        // Nothing more comes for the dead peer.
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            poll(ud.cq.as_ref()).is_none() && poll(quiet.cq.as_ref()).is_none(),
            "a completion after all had ended"
        );
    }
    drop(ctl);

    // The restarted peer: a new boot, a new endpoint, the same endpoints
    // here.
    println!("{}", var("XHOST_RESTORE"));
    std::io::stdout().flush().unwrap();
    let waited = Instant::now();
    let mut ctl = Ctl::accept(18906);
    eprintln!(
        "fault: the restarted peer called after {:.1} s",
        waited.elapsed().as_secs_f64()
    );
    // (After a failure the sleeper may still sit on the second endpoint.)
    let both = [ud, &*quiet];
    let talk = if failure.is_none() {
        &both[..]
    } else {
        &both[..1]
    };
    for u in talk {
        let peer = u.meet(&mut ctl);
        exchange(u, peer, &mut ctl, 1);
    }
    eprintln!("fault: both endpoints talked to the restarted peer");
    if let Some(f) = failure {
        panic!("{f}");
    }
}

/// Receives until its host is powered off.
fn victim(ud: &Ud) {
    let mut ctl = Ctl::connect(&var("XHOST_PEER"), 18905);
    let _survivor = ud.meet(&mut ctl);
    let mut bufs: Vec<Vec<u8>> = (0..2 * FAULT_WINDOW)
        .map(|_| vec![0; FAULT_SIZE_MAX])
        .collect();
    let iovs: Vec<[IoVec; 1]> = bufs.iter_mut().map(|b| iov(b)).collect();
    let post = |slot: usize| {
        let m = tmsg(&iovs[slot], FiAddr::UNSPEC, 0, slot as u64);
        // SAFETY: the buffers live until the end of the test and are
        // reposted only after their completion.
        unsafe { ud.ep.recvmsg(&m, OpFlags::empty()) }.unwrap();
    };
    (0..iovs.len()).for_each(post);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut got = 0usize;
    while Instant::now() < deadline {
        if let Some(c) = poll(ud.cq.as_ref()) {
            let c = c.unwrap_or_else(|e| panic!("error completion: {e:?}"));
            got += 1;
            if got % 64 == 0 {
                eprintln!("victim: {got} messages");
            }
            post(c.context as usize);
        }
    }
    panic!("still running 300 s later: the power-off never came");
}

/// The restarted peer: meets the survivor's two endpoints in turn and
/// swaps messages with each.
fn restarted(ud: &Ud) {
    let mut ctl = Ctl::connect(&var("XHOST_PEER"), 18906);
    for _ in 0..2 {
        let peer = ud.meet(&mut ctl);
        exchange(ud, peer, &mut ctl, 2);
    }
}

/// Eight checked messages each way.
fn exchange(ud: &Ud, peer: FiAddr, ctl: &mut Ctl, me: u64) {
    let n = 8;
    let theirs = 3 - me;
    let mut rbufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0; 4096]).collect();
    let riovs: Vec<[IoVec; 1]> = rbufs.iter_mut().map(|b| iov(b)).collect();
    for (k, riov) in riovs.iter().enumerate() {
        // SAFETY: the buffers outlive their completions, collected below.
        unsafe {
            ud.ep.trecvmsg(
                &tmsg(riov, FiAddr::UNSPEC, k as u64, k as u64),
                OpFlags::empty(),
            )
        }
        .unwrap();
    }
    ctl.step("posted");
    let mut sbufs: Vec<Vec<u8>> = (0..n)
        .map(|k| pattern(4096, me * 5000 + k as u64))
        .collect();
    let siovs: Vec<[IoVec; 1]> = sbufs.iter_mut().map(|b| iov(b)).collect();
    let mut seen = Vec::new();
    for (k, siov) in siovs.iter().enumerate() {
        let m = tmsg(siov, peer, k as u64, 1000 + k as u64);
        // SAFETY: the buffers live until the end of this function.
        ud.post(
            || unsafe { ud.ep.tsendmsg(&m, OpFlags::empty()) },
            &mut seen,
        );
    }
    ud.collect(&mut seen, 2 * n);
    for (k, b) in rbufs.iter().enumerate() {
        same(
            &format!("message {k} from the peer"),
            b,
            &pattern(4096, theirs * 5000 + k as u64),
        );
    }
    ctl.step("done");
}
