//! The fault run of RDM endpoints, shared by every provider's tests: a
//! peer process is killed (SIGKILL) in the middle of a transfer. The
//! survivor (the test process) must see exactly one completion for every
//! operation aimed at the dead peer, an error for each that could not
//! finish, within [`WITHIN`] of the kill; its posted wildcard receives
//! stay posted (another peer may still send) and each cancels with one
//! `FI_ECANCELED`; and it goes on working: the same endpoint and a new
//! one exchange verified messages with a new peer.
//!
//! A provider's test file implements [`FaultRig`] (how to open an
//! endpoint, how to start a peer) and calls [`killing_the_receiver`] and
//! [`killing_the_sender`]. The peers are the test binary run again: a
//! test named `fault_peer` that calls [`serve`] when [`PEER_VAR`] is set
//! and does nothing otherwise. They speak over stdin and stdout.
//!
//! ```ignore
//! #[test]
//! fn fault_peer() {
//!     if let Ok(role) = std::env::var(fabric_core::testing::fault::PEER_VAR) {
//!         fabric_core::testing::fault::serve(&role, MyRig.open());
//!     }
//! }
//! ```
//!
//! This is test support: it panics on every failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::pattern;
use crate::objects::{
    AddressVector, AvAttr, Bind, CompletionQueue, CqAttr, CqEntry, Domain, Endpoint, Fabric,
    FiAddr, IoVec, MemoryRegion, MrAccess, MrAttr, Msg, RmaIov, RmaMsg,
};
use crate::{ErrorKind, Info, MrMode, OpFlags};

/// The bound for the completions of operations aimed at a dead peer.
pub const WITHIN: Duration = Duration::from_secs(1);

/// Above every provider's eager limit (and shm's cross-memory-attach
/// limit): sends of this size wait for the receiver.
pub const BIG: usize = 1 << 20;

/// How long a live exchange may take (a slow emulated guest included).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The environment variable that names a peer process's role.
pub const PEER_VAR: &str = "FAULT_PEER";

// Contexts of the survivor's operations.
const SEND: u64 = 1 << 32;
const TSEND: u64 = 2 << 32;
const READ: u64 = 3 << 32;
const WRITE: u64 = 4 << 32;
const RECV: u64 = 5 << 32;
const TRECV: u64 = 6 << 32;
const WARM: u64 = 7 << 32;

/// What a provider's fault test gives the run.
pub trait FaultRig {
    /// The provider (and endpoint kind) named in messages.
    fn name(&self) -> &str;
    /// A new enabled RDM endpoint (MSG and TAGGED, RMA, unregistered
    /// local buffers) with one CQ of the tagged format and an AV.
    fn open(&self) -> RdmEp;
    /// Starts a peer in `role`: the test binary running `fault_peer` with
    /// [`PEER_VAR`] set so that the peer's [`serve`] gets `role` (see
    /// [`Peer::spawn`]).
    fn peer(&self, role: &str) -> Peer;
}

/// One completion: the entry, or the error's kind.
pub type Completion = std::result::Result<CqEntry, ErrorKind>;

/// An RDM endpoint with its CQ and AV. Fields drop in order: endpoint
/// first.
pub struct RdmEp {
    /// The endpoint.
    pub ep: Box<dyn Endpoint>,
    /// Its CQ (transmit and receive).
    pub cq: Box<dyn CompletionQueue>,
    /// Its AV.
    pub av: Box<dyn AddressVector>,
    /// The domain.
    pub domain: Box<dyn Domain>,
    _fabric: Box<dyn Fabric>,
    /// The entry it was opened from.
    pub info: Info,
}

impl std::fmt::Debug for RdmEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmEp").field("info", &self.info).finish()
    }
}

impl RdmEp {
    /// Opens a domain of `fabric` for `info`, a CQ of `cq`, an AV and an
    /// endpoint bound to both, and enables it.
    pub fn open(fabric: Box<dyn Fabric>, info: &Info, cq: &CqAttr) -> RdmEp {
        assert!(
            !info.domain_attr.mr_mode.contains(MrMode::LOCAL),
            "the fault run uses unregistered local buffers"
        );
        let domain = fabric.domain(info).unwrap();
        let cq = domain.cq(cq).unwrap();
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
        RdmEp {
            ep,
            cq,
            av,
            domain,
            _fabric: fabric,
            info: info.clone(),
        }
    }

    /// The endpoint's name as text.
    pub fn name(&self) -> String {
        self.ep.getname().unwrap().to_string()
    }

    /// Inserts the address `name` into the AV.
    pub fn insert(&self, name: &str) -> FiAddr {
        let mut out = [FiAddr(0)];
        self.av.insert(&[name.parse().unwrap()], &mut out).unwrap();
        assert_ne!(out[0], FiAddr::NOTAVAIL, "`{name}` was not inserted");
        out[0]
    }

    /// The completions there are now.
    pub fn poll(&self) -> Vec<(u64, Completion)> {
        poll(self.cq.as_ref())
    }

    /// Sends (tagged with `tag`, or untagged) from `buf`, retrying while
    /// the provider says "again".
    ///
    /// # Safety
    ///
    /// `buf` must stay valid until the send's completion or the
    /// endpoint's end.
    pub unsafe fn send(&self, buf: &[u8], to: FiAddr, tag: Option<u64>, ctx: u64) {
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
        let deadline = Instant::now() + PATIENCE;
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
                    // Progress without taking completions.
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
    /// As [`RdmEp::send`].
    pub unsafe fn recv(&self, buf: &mut [u8], tag: Option<u64>, ctx: u64) {
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
    pub fn complete(&self, ctxs: &[u64]) -> Seen {
        let mut seen = Seen::default();
        seen.until_all(|| self.poll(), ctxs, Instant::now() + PATIENCE);
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

/// The completions `cq` has now: context and entry, or the error.
pub fn poll(cq: &dyn CompletionQueue) -> Vec<(u64, Completion)> {
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

/// A peer process: the test binary running `fault_peer` in a role.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Peer {
    /// Runs this test binary's `fault_peer` test with [`PEER_VAR`] set to
    /// `role`.
    pub fn spawn(role: &str) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fault_peer", "--nocapture", "--test-threads=1"])
            .env(PEER_VAR, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Peer { child, stdin, out }
    }

    /// The next line the peer wrote with the `FAULT ` prefix (see
    /// [`tell`]).
    pub fn line(&mut self) -> String {
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

    /// Writes `line` to the peer's stdin.
    pub fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Stops the peer (SIGSTOP): its process does nothing more.
    pub fn stop(&self) {
        self.signal("-STOP");
    }

    /// SIGKILL, and the moment it was sent.
    pub fn kill(mut self) -> Instant {
        self.signal("-KILL");
        let t = Instant::now();
        let _ = self.child.wait();
        t
    }

    /// Sends a signal through `kill(1)` (the child is not reaped yet:
    /// its pid is still its own).
    fn signal(&self, sig: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid} failed");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A line from a peer to the test (read by [`Peer::line`]).
pub fn tell(line: std::fmt::Arguments<'_>) {
    println!("FAULT {line}");
}

/// Prints a `fault:` line past libtest's output capture, for the record
/// (an emulated guest's console shows it).
pub fn report(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "fault: {line}");
}

/// Completions gathered by context.
#[derive(Debug, Default)]
pub struct Seen(pub HashMap<u64, Vec<Completion>>);

impl Seen {
    /// Files `v`; returns how many there were.
    pub fn add(&mut self, v: Vec<(u64, Completion)>) -> usize {
        let n = v.len();
        for (ctx, r) in v {
            self.0.entry(ctx).or_default().push(r);
        }
        n
    }

    /// How many completions `ctx` has.
    pub fn count(&self, ctx: u64) -> usize {
        self.0.get(&ctx).map_or(0, Vec::len)
    }

    /// Polls until every context of `ctxs` has a completion, or
    /// `deadline`.
    pub fn until_all(
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

/// Checks the dead peer's operations: `ops` (context, whether it must
/// fail) each completed once by `killed + WITHIN`. Returns the time the
/// last of them took.
pub fn check_targeted(
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
    report(format_args!(
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
pub fn cancel_rest(what: &str, seen: &mut Seen, ep: &RdmEp, ctxs: &[u64]) {
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
fn talk_to_a_new_peer(rig: &dyn FaultRig, what: &str, old: &RdmEp) {
    let fresh = rig.open();
    let mut peer = rig.peer("echo");
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
            seen.until_all(|| ep.poll(), &[rx, tx], Instant::now() + PATIENCE);
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
/// so that nothing its process should do gets done (a NIC may still ack
/// eager sends and serve RMA): big sends aimed at it fail, small sends,
/// tagged sends, an RMA read and write each end in one completion within
/// [`WITHIN`]; wildcard receives stay posted and cancel; then it
/// goes on with a new peer (`talk_to_a_new_peer`).
pub fn killing_the_receiver(rig: &dyn FaultRig) {
    let what = format!("{}, receiver killed", rig.name());
    let what = what.as_str();
    // The buffers first: they outlive the endpoint even on a panic.
    let small = pattern(100, 1);
    let big = pattern(BIG, 2);
    let mut rbuf = vec![0u8; BIG];
    let mut rxs = vec![vec![0u8; BIG]; 8];
    let warm = pattern(16, 3);
    let mut warm_rx = vec![0u8; 64];
    let ep = rig.open();
    let mut peer = rig.peer("target");
    let to = ep.insert(&peer.line());
    let mr: Vec<u64> = peer
        .line()
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap())
        .collect();
    peer.say(&ep.name());
    // Both ways up before the peer stops (connections accepted by its
    // process where the provider has them).
    // SAFETY: the buffers outlive `ep`.
    unsafe {
        ep.recv(&mut warm_rx, None, WARM);
        ep.send(&warm, to, None, WARM + 1);
    }
    ep.complete(&[WARM, WARM + 1]);
    assert_eq!(peer.line(), "ready");
    peer.stop();
    let mut ops = Vec::new();
    let mut seen = Seen::default();
    // SAFETY: every buffer outlives `ep` (declared before it).
    unsafe {
        for (i, rx) in rxs.iter_mut().enumerate() {
            let tag = (i % 2 == 1).then_some(5);
            let base = if tag.is_some() { TRECV } else { RECV };
            ep.recv(rx, tag, base + i as u64);
        }
        // Small sends first: every big one is then part of a burst and
        // waits for the peer. (A lone big message may go eagerly into the
        // kernel's socket buffers and complete without the peer, as tcp
        // does inside one host up to 8 MiB; like any eager send, it then
        // succeeds.)
        for i in 0..4 {
            ep.send(&small, to, None, SEND + 100 + i);
            ops.push((SEND + 100 + i, false));
            ep.send(&small, to, Some(9), TSEND + 100 + i);
            ops.push((TSEND + 100 + i, false));
            ep.send(&big, to, None, SEND + i);
            ops.push((SEND + i, true));
            ep.send(&big, to, Some(9), TSEND + i);
            ops.push((TSEND + i, true));
        }
        for (local, ctx) in [(rbuf.as_mut_ptr(), READ), (big.as_ptr().cast_mut(), WRITE)] {
            let iov = [IoVec {
                addr: local,
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
                context: ctx,
                data: 0,
            };
            if ctx == READ {
                ep.ep.readmsg(&msg, OpFlags::empty()).unwrap();
            } else {
                ep.ep.writemsg(&msg, OpFlags::empty()).unwrap();
            }
        }
    }
    // RMA may complete without the target's process (shm reads and
    // writes its memory directly, a NIC serves it): each completes once
    // either way.
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
    talk_to_a_new_peer(rig, what, &ep);
}

/// Kill the side that sends while it streams messages of all sizes, some
/// taken by this side's receives, and while this side has big sends to it
/// outstanding: those fail within [`WITHIN`], every receive ends in
/// exactly one completion (a wildcard one still posted is cancelled);
/// then it goes on with a new peer (`talk_to_a_new_peer`).
pub fn killing_the_sender(rig: &dyn FaultRig) {
    let what = format!("{}, sender killed", rig.name());
    let what = what.as_str();
    // The buffers first: they outlive the endpoint even on a panic.
    let big = pattern(BIG, 3);
    let mut rxs = vec![vec![0u8; BIG]; 16];
    let ep = rig.open();
    let mut peer = rig.peer("stream");
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
        assert!(t.elapsed() < PATIENCE, "{what}: the stream stalled");
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
    report(format_args!("{what}: after {received} messages"));
    talk_to_a_new_peer(rig, what, &ep);
}

/// Size of message `n` of the `stream` peer: small, medium, and above
/// the eager limits of messages sent while others are in flight.
fn stream_len(n: u64) -> usize {
    [9, 3000, BIG, 100_000, 1][(n % 5) as usize]
}

/// The peer side: runs `role` on `ep` until killed. Roles:
/// - `target`: exposes a registered region, takes the survivor's warm-up
///   message and sends one back, then waits to be killed;
/// - `stream`: sends messages of `stream_len` sizes (remote CQ data:
///   their number), untagged and tagged 5, with sends in flight, until
///   killed; it never posts a receive;
/// - `echo`: sends each message tagged `k` back to the `k`th peer it was
///   told of, with tag `k`.
pub fn serve(role: &str, ep: &RdmEp) -> ! {
    tell(format_args!("{}", ep.name()));
    let mut stdin = std::io::stdin().lock();
    let mut line = || {
        let mut l = String::new();
        stdin.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    };
    match role {
        "target" => serve_target(ep, line),
        "stream" => serve_stream(ep, ep.insert(&line())),
        "echo" => serve_echo(ep, [ep.insert(&line()), ep.insert(&line())]),
        other => panic!("unknown fault peer role {other}"),
    }
}

fn serve_target(ep: &RdmEp, mut survivor: impl FnMut() -> String) -> ! {
    let mut mem = pattern(BIG, 4);
    let iov = [IoVec {
        addr: mem.as_mut_ptr(),
        len: BIG,
    }];
    let attr = MrAttr {
        iov: &iov,
        access: MrAccess::all(),
        offset: 0,
        requested_key: 0x77,
        context: 0,
    };
    // SAFETY: `mem` outlives the region: the process is killed while
    // both live.
    let mr: Box<dyn MemoryRegion> = unsafe { ep.domain.mr_reg(&attr) }.unwrap();
    let virt = ep.info.domain_attr.mr_mode.contains(MrMode::VIRT_ADDR);
    let base = if virt { mem.as_ptr() as u64 } else { 0 };
    tell(format_args!("mr {} {base}", mr.key()));
    let to = ep.insert(&survivor());
    let mut warm = vec![0u8; 64];
    let back = pattern(16, 4);
    // SAFETY: the buffers live until the process is killed.
    unsafe {
        ep.recv(&mut warm, None, 1);
        ep.send(&back, to, None, 2);
    }
    ep.complete(&[1, 2]);
    tell(format_args!("ready"));
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let _ = (&mr, &mem, &warm, &back);
    }
}

fn serve_stream(ep: &RdmEp, to: FiAddr) -> ! {
    tell(format_args!("ready"));
    let mut free: Vec<u64> = (0..8).collect();
    let mut slot_buf: Vec<Vec<u8>> = vec![Vec::new(); 8];
    let mut n = 0u64;
    loop {
        while free.is_empty() {
            free.extend(ep.poll().into_iter().map(|(ctx, _)| ctx));
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
            // SAFETY: the slot's buffer is not replaced before the send's
            // completion.
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
                    free.extend(ep.poll().into_iter().map(|(ctx, _)| ctx));
                }
                Err(e) => panic!("stream send: {e}"),
            }
        }
        n += 1;
    }
}

fn serve_echo(ep: &RdmEp, peers: [FiAddr; 2]) -> ! {
    let mut bufs = vec![vec![0u8; BIG]; 2];
    for (k, b) in bufs.iter_mut().enumerate() {
        // SAFETY: the buffers live until the process is killed.
        unsafe { ep.recv(b, Some(k as u64), k as u64) };
    }
    tell(format_args!("ready"));
    // Replies in flight, by context, kept until they complete.
    let mut replies: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut n = 2u64;
    loop {
        for (ctx, r) in ep.poll() {
            if ctx >= 2 {
                replies.remove(&ctx);
                continue;
            }
            let Ok(e) = r else { continue };
            let k = ctx as usize;
            n += 1;
            let reply = replies.entry(n).or_insert(bufs[k][..e.len].to_vec());
            // SAFETY: `reply` stays in `replies` until the send completes;
            // the receive buffer until the process ends.
            unsafe {
                ep.send(reply, peers[k], Some(k as u64), n);
                ep.recv(&mut bufs[k], Some(k as u64), ctx);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
