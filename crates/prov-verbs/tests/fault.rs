//! The fault run on verbs: a peer process is killed (SIGKILL) in the
//! middle of a transfer. The survivor (this process) must see exactly one
//! completion for every operation aimed at the dead peer, an error for
//! each that could not finish, within 1 s of the kill; on RDM its posted
//! wildcard receives stay posted (another peer may still send) and each
//! cancels with one `FI_ECANCELED`; and it goes on working: the same RDM
//! endpoint and a new one exchange verified messages with a new peer
//! process (on MSG, whose endpoint ends with its connection, a new
//! endpoint connects to a new peer).
//!
//! The peers are this test binary run again (`fault_peer`, which does
//! nothing unless `FAULT_PEER` names its role), speaking over stdin and
//! stdout. Each test prints `rxe-fault: ...` lines with the measured
//! detection times (the last completion after the kill).
//!
//! Needs an RDMA device (skips without one, fails then under
//! `FABRIC_VERBS_REQUIRE_DEVICE=1`, as the rxe rig sets): see `common`.

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::{
    AddressVector, AvAttr, Bind, CompletionQueue, CqEntry, Domain, Endpoint, EqEvent, Fabric,
    FiAddr, IoVec, Msg, Provider, RmaIov, RmaMsg,
};
use fabric_core::*;
use prov_verbs::VerbsProvider;

/// The bound the issue sets for error completions after a peer died.
const WITHIN: Duration = Duration::from_secs(1);

/// Above the eager limit (8 KiB): these sends wait for the receiver's
/// RDMA read and FIN.
const BIG: usize = 1 << 20;

/// One fault test at a time: each measures a deadline, and a TCG guest has
/// two slow CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn rdm_hints() -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::TAGGED | Caps::RMA;
    h.addr_format = AddrFormat::SockaddrIn;
    h
}

/// An RDM endpoint with its CQ and AV. Fields drop in order: endpoint
/// first.
struct Ep {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    av: Box<dyn AddressVector>,
    domain: Box<dyn Domain>,
    _fabric: Box<dyn Fabric>,
    info: Info,
}

fn rdm_info() -> Option<Info> {
    let info = entries(EpType::Rdm, rdm_hints())?.remove(0);
    assert!(!info.domain_attr.mr_mode.contains(MrMode::LOCAL));
    Some(info)
}

fn open(info: &Info) -> Ep {
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    let cq = domain.cq(&cq_attr()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    ep.bind(Bind::Av(av.as_ref())).unwrap();
    ep.enable().unwrap();
    Ep {
        ep,
        cq,
        av,
        domain,
        _fabric: fabric,
        info: info.clone(),
    }
}

/// The completions there are now: context and entry, or the error.
fn poll(cq: &dyn CompletionQueue) -> Vec<(u64, std::result::Result<CqEntry, ErrorKind>)> {
    let mut out = Vec::new();
    let mut e = [CqEntry::default(); 16];
    loop {
        match cq.read(&mut e) {
            Ok(n) => out.extend(e[..n].iter().map(|e| (e.context, Ok(*e)))),
            Err(err) if err.kind() == ErrorKind::Avail => {
                let ee = cq.readerr().unwrap();
                out.push((ee.entry.context, Err(ee.err)));
            }
            Err(err) if err.kind() == ErrorKind::Again => return out,
            Err(err) => panic!("cq read: {err}"),
        }
    }
}

impl Ep {
    fn name(&self) -> String {
        self.ep.getname().unwrap().to_string()
    }

    fn insert(&self, name: &str) -> FiAddr {
        let mut out = [FiAddr(0)];
        self.av.insert(&[name.parse().unwrap()], &mut out).unwrap();
        assert_ne!(out[0], FiAddr::NOTAVAIL);
        out[0]
    }

    fn poll(&self) -> Vec<(u64, std::result::Result<CqEntry, ErrorKind>)> {
        poll(self.cq.as_ref())
    }

    /// Sends (tagged with `tag`, or untagged) from `buf`.
    ///
    /// # Safety
    ///
    /// `buf` must stay valid until the send's completion or the
    /// endpoint's end.
    unsafe fn send(&self, buf: &[u8], to: FiAddr, tag: Option<u64>, ctx: u64) {
        let iov = [IoVec {
            addr: buf.as_ptr().cast_mut(),
            len: buf.len(),
        }];
        let msg = Msg {
            iov: &iov,
            desc: &[],
            addr: to,
            tag: tag.unwrap_or(0),
            ignore: 0,
            context: ctx,
            data: 0,
        };
        let deadline = Instant::now() + T;
        loop {
            // SAFETY: the caller keeps `buf` valid.
            let r = unsafe {
                match tag {
                    Some(_) => self.ep.tsendmsg(&msg, OpFlags::empty()),
                    None => self.ep.sendmsg(&msg, OpFlags::empty()),
                }
            };
            match r {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again && Instant::now() < deadline => {
                    let _ = self.cq.read(&mut []);
                }
                Err(e) => panic!("send: {e}"),
            }
        }
    }

    /// Posts a receive into `buf`: tagged (exactly `tag`) or untagged,
    /// from anyone.
    ///
    /// # Safety
    ///
    /// As [`Ep::send`].
    unsafe fn recv(&self, buf: &mut [u8], tag: Option<u64>, ctx: u64) {
        let iov = [IoVec {
            addr: buf.as_mut_ptr(),
            len: buf.len(),
        }];
        let msg = Msg {
            iov: &iov,
            desc: &[],
            addr: FiAddr::UNSPEC,
            tag: tag.unwrap_or(0),
            ignore: 0,
            context: ctx,
            data: 0,
        };
        // SAFETY: the caller keeps `buf` valid.
        unsafe {
            match tag {
                Some(_) => self.ep.trecvmsg(&msg, OpFlags::empty()),
                None => self.ep.recvmsg(&msg, OpFlags::empty()),
            }
        }
        .unwrap();
    }

    /// Waits for the completions of `ctxs`, all successful.
    fn complete(&self, ctxs: &[u64]) -> Seen {
        let mut seen = Seen::default();
        seen.until_all(|| self.poll(), ctxs, Instant::now() + T);
        for c in ctxs {
            assert!(
                matches!(seen.0.get(c).map(Vec::as_slice), Some([Ok(_)])),
                "operation {c:#x}: {:?}",
                seen.0.get(c)
            );
        }
        seen
    }
}

/// Bytes of message `seed`.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A peer process: this binary running `fault_peer` in `role`.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Peer {
    fn spawn(role: &str) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fault_peer", "--nocapture", "--test-threads=1"])
            .env("FAULT_PEER", role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Peer { child, stdin, out }
    }

    /// The next line the peer wrote with the `FAULT ` prefix.
    fn line(&mut self) -> String {
        let mut l = String::new();
        loop {
            l.clear();
            assert_ne!(self.out.read_line(&mut l).unwrap(), 0, "the peer ended");
            // libtest's "test fault_peer ... " may precede it on a line.
            if let Some(at) = l.find("FAULT ") {
                return l[at + 6..].trim_end().to_string();
            }
        }
    }

    fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn signal(&self, sig: i32) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid (not reaped yet: `child`
        // is waited for only after this).
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }

    /// SIGKILL, and the moment it was sent.
    fn kill(mut self) -> Instant {
        self.signal(libc::SIGKILL);
        let t = Instant::now();
        let _ = self.child.wait();
        t
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Completion = std::result::Result<CqEntry, ErrorKind>;

/// Completions gathered by context.
#[derive(Default)]
struct Seen(HashMap<u64, Vec<Completion>>);

impl Seen {
    fn add(&mut self, v: Vec<(u64, Completion)>) -> usize {
        let n = v.len();
        for (ctx, r) in v {
            self.0.entry(ctx).or_default().push(r);
        }
        n
    }

    fn count(&self, ctx: u64) -> usize {
        self.0.get(&ctx).map_or(0, Vec::len)
    }

    /// Polls until every context of `ctxs` has a completion, or
    /// `deadline`.
    fn until_all(
        &mut self,
        mut poll: impl FnMut() -> Vec<(u64, Completion)>,
        ctxs: &[u64],
        deadline: Instant,
    ) {
        while ctxs.iter().any(|c| self.count(*c) == 0) && Instant::now() < deadline {
            if self.add(poll()) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

// Contexts of the survivor's operations.
const SEND: u64 = 1 << 32;
const TSEND: u64 = 2 << 32;
const READ: u64 = 3 << 32;
const WRITE: u64 = 4 << 32;
const RECV: u64 = 5 << 32;
const TRECV: u64 = 6 << 32;
const WARM: u64 = 7 << 32;

/// Prints a `rxe-fault:` line past libtest's output capture (the rig's
/// console shows it).
fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "rxe-fault: {line}");
}

/// Checks the dead peer's operations: `ops` (context, whether it must
/// fail) each completed once by `killed + WITHIN`. Returns the time the
/// last of them took.
fn check_targeted(
    what: &str,
    seen: &mut Seen,
    mut poll: impl FnMut() -> Vec<(u64, Completion)>,
    ops: &[(u64, bool)],
    killed: Instant,
) -> Duration {
    let ctxs: Vec<u64> = ops.iter().map(|o| o.0).collect();
    seen.until_all(&mut poll, &ctxs, killed + WITHIN);
    let late = killed.elapsed();
    // Anything after the bound would be a second completion.
    std::thread::sleep(Duration::from_millis(100));
    seen.add(poll());
    for &(ctx, must_fail) in ops {
        let got = seen.0.get(&ctx).cloned().unwrap_or_default();
        assert_eq!(
            got.len(),
            1,
            "{what}: operation {ctx:#x} has {} completions {late:.0?} after the kill: {got:?}",
            got.len(),
        );
        if must_fail {
            assert!(
                got[0].is_err(),
                "{what}: operation {ctx:#x} toward the dead peer succeeded: {got:?}"
            );
        }
    }
    let errors: Vec<ErrorKind> = ops.iter().filter_map(|o| seen.0[&o.0][0].err()).collect();
    let mut kinds: Vec<String> = errors.iter().map(|k| format!("{k:?}")).collect();
    kinds.dedup();
    say(format_args!(
        "{what}: {} operations completed once each, {} in error ({}), the last {:.1} ms after the kill",
        ops.len(),
        errors.len(),
        kinds.join(", "),
        late.as_secs_f64() * 1e3
    ));
    assert!(
        late <= WITHIN,
        "{what}: the last completion came {late:?} after the kill"
    );
    late
}

/// Cancels the receives `ctxs` that have no completion: each then gets
/// exactly one (`FI_ECANCELED`) within the bound.
fn cancel_rest(what: &str, seen: &mut Seen, ep: &Ep, ctxs: &[u64]) {
    let open: Vec<u64> = ctxs
        .iter()
        .copied()
        .filter(|c| seen.count(*c) == 0)
        .collect();
    for &c in &open {
        ep.ep.cancel(c).unwrap();
    }
    seen.until_all(|| ep.poll(), &open, Instant::now() + WITHIN);
    std::thread::sleep(Duration::from_millis(50));
    seen.add(ep.poll());
    for &c in ctxs {
        let got = seen.0.get(&c).cloned().unwrap_or_default();
        assert_eq!(got.len(), 1, "{what}: receive {c:#x}: {got:?}");
    }
    for &c in &open {
        let got = &seen.0[&c];
        assert_eq!(got[0], Err(ErrorKind::Canceled), "{what}: receive {c:#x}");
    }
}

/// The survivor goes on: `old` (which lost its peer) and a new endpoint
/// each exchange verified messages, small and big, with a new peer.
fn talk_to_a_new_peer(what: &str, old: &Ep) {
    let fresh = open(&old.info);
    let mut peer = Peer::spawn("echo");
    let name = peer.line();
    let a_old = old.insert(&name);
    let a_new = fresh.insert(&name);
    peer.say(&old.name());
    peer.say(&fresh.name());
    assert_eq!(peer.line(), "ready");
    for (k, (ep, to)) in [(old, a_old), (&fresh, a_new)].into_iter().enumerate() {
        for (round, len) in [7, 4000, BIG].into_iter().enumerate() {
            let seed = 1000 + 10 * k as u64 + round as u64;
            let out = pattern(len, seed);
            let mut back = vec![0u8; len];
            let mut seen = Seen::default();
            let (rx, tx) = (900 + round as u64, 800 + round as u64);
            // SAFETY: both buffers live until their completions, awaited
            // below (the test panics, ending the process, otherwise).
            unsafe {
                ep.recv(&mut back, Some(k as u64), rx);
                ep.send(&out, to, Some(k as u64), tx);
            }
            seen.until_all(|| ep.poll(), &[rx, tx], Instant::now() + T);
            assert!(
                matches!(seen.0.get(&tx).map(Vec::as_slice), Some([Ok(_)])),
                "{what}: endpoint {k}, {len} B to the new peer: {:?}",
                seen.0.get(&tx)
            );
            match seen.0.get(&rx).map(Vec::as_slice) {
                Some([Ok(e)]) => assert_eq!(e.len, len, "{what}"),
                other => panic!("{what}: endpoint {k}, {len} B echo: {other:?}"),
            }
            assert!(
                back == out,
                "{what}: endpoint {k}: the echo of {len} B differs"
            );
        }
    }
}

/// Kill the side that receives and is RMA target, stopped first (SIGSTOP)
/// so that nothing its process should do gets done (the NIC still acks
/// eager sends and serves RMA): big sends (rendezvous) aimed at it fail,
/// small sends, tagged sends, an RMA read and write each end in one
/// completion, within 1 s; wildcard receives stay posted and cancel.
#[test]
fn rdm_killing_the_receiver_fails_what_was_aimed_at_it_within_a_second() {
    let Some(info) = rdm_info() else { return };
    let _serial = serial();
    let what = "RDM, receiver killed";
    // The buffers first: they outlive the endpoint even on a panic.
    let small = pattern(100, 1);
    let big = pattern(BIG, 2);
    let mut rbuf = vec![0u8; BIG];
    let mut rxs = vec![vec![0u8; BIG]; 8];
    let warm = pattern(16, 3);
    let mut warm_rx = vec![0u8; 64];
    let ep = open(&info);
    let mut peer = Peer::spawn("target");
    let to = ep.insert(&peer.line());
    let mr: Vec<u64> = peer
        .line()
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap())
        .collect();
    peer.say(&ep.name());
    // Both connections up before the peer stops (its process accepts).
    // SAFETY: the buffers outlive `ep`.
    unsafe {
        ep.recv(&mut warm_rx, None, WARM);
        ep.send(&warm, to, None, WARM + 1);
    }
    ep.complete(&[WARM, WARM + 1]);
    assert_eq!(peer.line(), "ready");
    peer.signal(libc::SIGSTOP);
    let mut ops = Vec::new();
    let mut seen = Seen::default();
    // SAFETY: every buffer outlives `ep` (declared before it).
    unsafe {
        for (i, rx) in rxs.iter_mut().enumerate() {
            let tag = (i % 2 == 1).then_some(5);
            let base = if tag.is_some() { TRECV } else { RECV };
            ep.recv(rx, tag, base + i as u64);
        }
        for i in 0..4 {
            ep.send(&big, to, None, SEND + i);
            ops.push((SEND + i, true));
            ep.send(&big, to, Some(9), TSEND + i);
            ops.push((TSEND + i, true));
            ep.send(&small, to, None, SEND + 100 + i);
            ops.push((SEND + 100 + i, false));
            ep.send(&small, to, Some(9), TSEND + 100 + i);
            ops.push((TSEND + 100 + i, false));
        }
        for i in 0..2u64 {
            let iov = [IoVec {
                addr: if i == 0 {
                    rbuf.as_mut_ptr()
                } else {
                    big.as_ptr().cast_mut()
                },
                len: BIG,
            }];
            let rma = [RmaIov {
                addr: mr[1],
                len: BIG,
                key: mr[0],
            }];
            let msg = RmaMsg {
                iov: &iov,
                desc: &[],
                addr: to,
                rma_iov: &rma,
                context: if i == 0 { READ } else { WRITE },
                data: 0,
            };
            if i == 0 {
                ep.ep.readmsg(&msg, OpFlags::empty()).unwrap();
            } else {
                ep.ep.writemsg(&msg, OpFlags::empty()).unwrap();
            }
        }
    }
    // The NIC serves RMA without the target's process: each completes
    // once, either way.
    ops.push((READ, false));
    ops.push((WRITE, false));
    // Some progress while the peer is stopped: the big sends cannot
    // finish without it.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        seen.add(ep.poll());
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..4 {
        assert_eq!(seen.count(SEND + i), 0, "{what}: a big send completed");
    }
    let killed = peer.kill();
    check_targeted(what, &mut seen, || ep.poll(), &ops, killed);
    let rx_ctxs: Vec<u64> = (0..8u64)
        .map(|i| if i % 2 == 1 { TRECV + i } else { RECV + i })
        .collect();
    for &c in &rx_ctxs {
        assert_eq!(
            seen.count(c),
            0,
            "{what}: a wildcard receive completed: {:?}",
            seen.0[&c]
        );
    }
    cancel_rest(what, &mut seen, &ep, &rx_ctxs);
    talk_to_a_new_peer(what, &ep);
}

/// Kill the side that sends while it streams messages of all sizes, some
/// taken by this side's receives, and while this side has big sends to it
/// outstanding: those fail within 1 s, every receive ends in exactly one
/// completion (a wildcard one still posted is cancelled).
#[test]
fn rdm_killing_the_sender_mid_stream_leaves_nothing_hanging() {
    let Some(info) = rdm_info() else { return };
    let _serial = serial();
    let what = "RDM, sender killed";
    // The buffers first: they outlive the endpoint even on a panic.
    let big = pattern(BIG, 3);
    let mut rxs = vec![vec![0u8; BIG]; 16];
    let ep = open(&info);
    let mut peer = Peer::spawn("stream");
    let to = ep.insert(&peer.line());
    peer.say(&ep.name());
    assert_eq!(peer.line(), "ready");
    let mut seen = Seen::default();
    let tag_of = |i: usize| (i % 2 == 1).then_some(5);
    // The context of each buffer's posted receive; a fresh one per post.
    let mut posted: Vec<u64> = (0..16)
        .map(|i| if i % 2 == 1 { TRECV } else { RECV } + i as u64)
        .collect();
    let mut ops = Vec::new();
    // SAFETY: every buffer outlives `ep` (declared before it).
    unsafe {
        for (i, rx) in rxs.iter_mut().enumerate() {
            ep.recv(rx, tag_of(i), posted[i]);
        }
        for i in 0..4 {
            ep.send(&big, to, Some(77), TSEND + i);
            ops.push((TSEND + i, true));
        }
    }
    // Receive (and repost) for a while, then kill mid-stream.
    let mut received = 0u64;
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(500) || received < 20 {
        assert!(t.elapsed() < T, "{what}: the stream stalled");
        for (ctx, r) in ep.poll() {
            let Some(i) = posted.iter().position(|&c| c == ctx) else {
                seen.0.entry(ctx).or_default().push(r);
                continue;
            };
            let e = r.unwrap_or_else(|k| panic!("{what}: a receive failed before the kill: {k:?}"));
            assert_eq!(e.len, stream_len(e.data), "{what}: message {}", e.data);
            assert!(
                rxs[i][..e.len] == pattern(e.len, e.data),
                "{what}: message {} differs",
                e.data
            );
            received += 1;
            posted[i] += 1 << 16;
            // SAFETY: as above.
            unsafe { ep.recv(&mut rxs[i], tag_of(i), posted[i]) };
        }
    }
    assert!(
        ops.iter().all(|o| seen.count(o.0) == 0),
        "{what}: a big send to a peer that posts no receive completed"
    );
    let killed = peer.kill();
    // Receives the dead peer's data was landing in may end (in error)
    // too; every posted one ends exactly once below.
    check_targeted(what, &mut seen, || ep.poll(), &ops, killed);
    cancel_rest(what, &mut seen, &ep, &posted);
    say(format_args!("{what}: after {received} messages"));
    talk_to_a_new_peer(what, &ep);
}

/// Size of message `n` of the `stream` peer: small, medium, and above the
/// eager limit.
fn stream_len(n: u64) -> usize {
    [9, 3000, BIG, 100_000, 1][(n % 5) as usize]
}

/// MSG: the server process of a connection is killed while the client
/// (this process) has sends (the server posts no receive: they wait in
/// RNR retries), receives and an RMA read and write outstanding: the
/// client hears the shutdown, and every operation ends in one
/// completion, sends and receives in error, within 1 s; a new endpoint
/// then connects to a new server and exchanges verified messages.
#[test]
fn msg_killing_the_server_fails_the_connection_within_a_second() {
    let Some(info) = msg_info() else { return };
    let _serial = serial();
    let what = "MSG, server killed";
    let mut peer = Peer::spawn("msg-idle");
    let server = peer.line();
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let c = open_side(fabric.as_ref(), &info);
    let mut tx = Buf::new(c.domain.as_ref(), 4 * 4096);
    let rx = Buf::new(c.domain.as_ref(), 4 * 4096);
    let mut rma = Buf::new(c.domain.as_ref(), 65536);
    c.ep.connect(&server.parse().unwrap(), b"").unwrap();
    let e = wait_eq(c.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Connected { .. }), "{what}: {e:?}");
    let mr: Vec<u64> = peer
        .line()
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(peer.line(), "ready");
    let mut ops = Vec::new();
    let txd = [tx.mr.desc()];
    let rxd = [rx.mr.desc()];
    let rmad = [rma.mr.desc()];
    let (tx_base, rx_base, rma_base) = (tx.addr(), rx.addr(), rma.mem.as_mut_ptr());
    for i in 0..4u64 {
        let riov = [IoVec {
            addr: (rx_base + i * 4096) as *mut u8,
            len: 4096,
        }];
        // SAFETY: the buffers outlive the endpoint's completions (read
        // below, before they are dropped).
        unsafe {
            c.ep.recvmsg(&msg(&riov, &rxd, RECV + i, 0), OpFlags::empty())
        }
        .unwrap();
        ops.push((RECV + i, true));
        let siov = [IoVec {
            addr: (tx_base + i * 4096) as *mut u8,
            len: 4096,
        }];
        // SAFETY: as above.
        unsafe {
            c.ep.sendmsg(&msg(&siov, &txd, SEND + i, 0), OpFlags::empty())
        }
        .unwrap();
        ops.push((SEND + i, true));
    }
    for (i, ctx) in [READ, WRITE].into_iter().enumerate() {
        let iov = [IoVec {
            // SAFETY: within the 64 KiB buffer.
            addr: unsafe { rma_base.add(i * 32768) },
            len: 32768,
        }];
        let remote = [RmaIov {
            addr: mr[1],
            len: 32768,
            key: mr[0],
        }];
        let m = RmaMsg {
            iov: &iov,
            desc: &rmad,
            addr: FiAddr::UNSPEC,
            rma_iov: &remote,
            context: ctx,
            data: 0,
        };
        // SAFETY: as above.
        unsafe {
            if ctx == READ {
                c.ep.readmsg(&m, OpFlags::empty())
            } else {
                c.ep.writemsg(&m, OpFlags::empty())
            }
        }
        .unwrap();
        ops.push((ctx, false));
    }
    let mut seen = Seen::default();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        seen.add(poll(c.cq.as_ref()));
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..4 {
        assert_eq!(seen.count(SEND + i), 0, "{what}: a send completed");
        assert_eq!(seen.count(RECV + i), 0, "{what}: a receive completed");
    }
    let killed = peer.kill();
    // The connection's end is an EQ event (rdma_cm events are progressed
    // by EQ reads, as an application waiting for its completions does).
    let shutdown = std::cell::Cell::new(None);
    let poll_both = || {
        match c.eq.read() {
            Ok(EqEvent::Shutdown { .. }) => shutdown.set(Some(killed.elapsed())),
            Ok(e) => panic!("{what}: unexpected event {e:?}"),
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("{what}: EQ: {e:?}"),
        }
        poll(c.cq.as_ref())
    };
    check_targeted(what, &mut seen, poll_both, &ops, killed);
    let shutdown = shutdown
        .get()
        .unwrap_or_else(|| panic!("{what}: no shutdown event within {WITHIN:?}"));
    say(format_args!(
        "{what}: shutdown event {:.1} ms after the kill",
        shutdown.as_secs_f64() * 1e3
    ));
    // SAFETY: as above.
    let e = unsafe {
        let siov = tx.iov_n(8);
        c.ep.sendmsg(&msg(&siov, &txd, SEND + 9, 0), OpFlags::empty())
    }
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shutdown, "{what}");
    // Every operation ended: the buffers may go, then the endpoint.
    drop((tx, rx, rma));
    drop(c);

    // A new endpoint, a new server.
    let mut peer = Peer::spawn("msg-echo");
    let server = peer.line();
    let c = open_side(fabric.as_ref(), &info);
    c.ep.connect(&server.parse().unwrap(), b"").unwrap();
    let e = wait_eq(c.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Connected { .. }), "{what}: {e:?}");
    peer.line(); // mr
    assert_eq!(peer.line(), "ready");
    let out = pattern(4096, 77);
    let mut tx2 = Buf::new(c.domain.as_ref(), 4096);
    tx2.mem.copy_from_slice(&out);
    let mut rx2 = Buf::new(c.domain.as_ref(), 4096);
    let (riov, siov) = (rx2.iov(), tx2.iov());
    let (rd, sd) = ([rx2.mr.desc()], [tx2.mr.desc()]);
    // SAFETY: the buffers outlive the completions awaited below.
    unsafe {
        c.ep.recvmsg(&msg(&riov, &rd, 1, 0), OpFlags::empty())
            .unwrap();
        c.ep.sendmsg(&msg(&siov, &sd, 2, 0), OpFlags::empty())
            .unwrap();
    }
    let mut seen = Seen::default();
    seen.until_all(|| poll(c.cq.as_ref()), &[1, 2], Instant::now() + T);
    assert!(
        matches!(seen.0.get(&2).map(Vec::as_slice), Some([Ok(_)])),
        "{what}: {:?}",
        seen.0
    );
    assert!(
        matches!(seen.0.get(&1).map(Vec::as_slice), Some([Ok(e)]) if e.len == 4096),
        "{what}: {:?}",
        seen.0
    );
    assert!(rx2.mem == out, "{what}: the echo differs");
    drop((tx2, rx2));
    drop(c);
    drop(peer);
}

/// A peer process (see the module docs); a no-op test unless
/// `FAULT_PEER` is set. Roles:
/// - `target` (RDM): exposes a registered region, takes the survivor's
///   warm-up message and sends one back, then waits to be killed;
/// - `stream` (RDM): sends messages of [`stream_len`] sizes (remote CQ
///   data: their number), untagged and tagged 5, with sends in flight,
///   until killed; it never posts a receive;
/// - `echo` (RDM): sends each message tagged `k` back to the `k`th peer it
///   was told of, with tag `k`;
/// - `msg-idle` (MSG): listens, accepts one connection, exposes a
///   registered region, then waits to be killed, posting no receive;
/// - `msg-echo` (MSG): as `msg-idle`, but sends each message back.
#[test]
fn fault_peer() {
    let Ok(role) = std::env::var("FAULT_PEER") else {
        return;
    };
    let mut stdin = std::io::stdin().lock();
    let mut line = || {
        let mut l = String::new();
        stdin.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    };
    if role.starts_with("msg-") {
        return msg_peer(&role);
    }
    let info = rdm_info().unwrap();
    let ep = open(&info);
    println!("FAULT {}", ep.name());
    match role.as_str() {
        "target" => {
            let mem = Buf::new(ep.domain.as_ref(), BIG);
            let virt = ep.info.domain_attr.mr_mode.contains(MrMode::VIRT_ADDR);
            let base = if virt { mem.addr() } else { 0 };
            println!("FAULT mr {} {base}", mem.mr.key());
            let to = ep.insert(&line());
            let mut warm = vec![0u8; 64];
            let back = pattern(16, 4);
            // SAFETY: the buffers live until the process is killed.
            unsafe {
                ep.recv(&mut warm, None, 1);
                ep.send(&back, to, None, 2);
            }
            ep.complete(&[1, 2]);
            println!("FAULT ready");
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let _ = (&mem, &warm, &back);
            }
        }
        "stream" => {
            let to = ep.insert(&line());
            println!("FAULT ready");
            let mut free: Vec<u64> = (0..8).collect();
            let mut slot_buf: Vec<Vec<u8>> = vec![Vec::new(); 8];
            for n in 0u64.. {
                while free.is_empty() {
                    for (ctx, _) in ep.poll() {
                        free.push(ctx);
                    }
                }
                let k = free.pop().unwrap();
                slot_buf[k as usize] = pattern(stream_len(n), n);
                let buf = &slot_buf[k as usize];
                let iov = [IoVec {
                    addr: buf.as_ptr().cast_mut(),
                    len: buf.len(),
                }];
                let msg = Msg {
                    iov: &iov,
                    desc: &[],
                    addr: to,
                    tag: 5,
                    ignore: 0,
                    context: k,
                    data: n,
                };
                loop {
                    // SAFETY: the slot's buffer is not replaced before
                    // the send's completion.
                    let r = unsafe {
                        if n % 2 == 1 {
                            ep.ep.tsendmsg(&msg, OpFlags::REMOTE_CQ_DATA)
                        } else {
                            ep.ep.sendmsg(&msg, OpFlags::REMOTE_CQ_DATA)
                        }
                    };
                    match r {
                        Ok(()) => break,
                        Err(e) if e.kind() == ErrorKind::Again => {
                            for (ctx, _) in ep.poll() {
                                free.push(ctx);
                            }
                        }
                        Err(e) => panic!("stream send: {e}"),
                    }
                }
            }
        }
        "echo" => {
            let peers = [ep.insert(&line()), ep.insert(&line())];
            let mut bufs = vec![vec![0u8; BIG]; 2];
            for (k, b) in bufs.iter_mut().enumerate() {
                // SAFETY: the buffers live until the process is killed.
                unsafe { ep.recv(b, Some(k as u64), k as u64) };
            }
            println!("FAULT ready");
            // Replies in flight, by context, kept until they complete.
            let mut replies: HashMap<u64, Vec<u8>> = HashMap::new();
            for n in 2u64.. {
                for (ctx, r) in ep.poll() {
                    if ctx >= 2 {
                        replies.remove(&ctx);
                        continue;
                    }
                    let Ok(e) = r else { continue };
                    let k = ctx as usize;
                    let reply = replies.entry(n).or_insert(bufs[k][..e.len].to_vec());
                    // SAFETY: `reply` stays in `replies` until the send
                    // completes; the receive buffer until the process ends.
                    unsafe {
                        ep.send(reply, peers[k], Some(k as u64), n);
                        ep.recv(&mut bufs[k], Some(k as u64), ctx);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// The MSG roles of [`fault_peer`].
fn msg_peer(role: &str) {
    let info = msg_info().unwrap();
    let l = listener(&info);
    println!("FAULT {}", l.pep.getname().unwrap());
    let req = wait_eq(l.eq.as_ref()).unwrap();
    let EqEvent::ConnReq { info, .. } = req else {
        panic!("expected a connection request, got {req:?}")
    };
    let s = open_side(l.fabric.as_ref(), &info);
    s.ep.accept(b"").unwrap();
    let e = wait_eq(s.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Connected { .. }), "{e:?}");
    let mut mem = Buf::new(s.domain.as_ref(), 65536);
    println!("FAULT mr {} {}", mem.mr.key(), mem.addr());
    let echo = role == "msg-echo";
    let desc = [mem.mr.desc()];
    if echo {
        let iov = mem.iov_n(4096);
        // SAFETY: the buffer lives until the process ends.
        unsafe { s.ep.recvmsg(&msg(&iov, &desc, 1, 0), OpFlags::empty()) }.unwrap();
    }
    println!("FAULT ready");
    loop {
        if echo {
            for (ctx, r) in poll(s.cq.as_ref()) {
                if ctx == 1 {
                    let n = r.unwrap().len;
                    let iov = mem.iov_n(n);
                    // SAFETY: as above.
                    unsafe { s.ep.sendmsg(&msg(&iov, &desc, 2, 0), OpFlags::empty()) }.unwrap();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
