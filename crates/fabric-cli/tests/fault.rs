//! The fault run: a peer process is killed (SIGKILL) in the middle of a
//! transfer, on each provider compiled in. The survivor (this process)
//! must see exactly one completion for every operation aimed at the dead
//! peer, an error for each that could not finish, within 1 s of the kill;
//! its posted wildcard receives stay posted (RDM: another peer may still
//! send) and cancel cleanly; and it goes on working: the same endpoint and
//! a new one exchange verified messages with a new peer.
//!
//! The peers are this test binary run again (`fault_peer`, which does
//! nothing unless `FAULT_PEER` names its role), speaking over stdin and
//! stdout.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use fabric::objects::{
    AddressVector, AvAttr, Bind, CompletionQueue, CqAttr, CqEntry, CqFormat, Domain, Endpoint,
    Fabric, FiAddr, IoVec, MemoryRegion, MrAccess, MrAttr, Msg, RmaIov, RmaMsg, WaitObj,
};
use fabric::{Caps, ErrorKind, Hints, Info, MrMode, OpFlags, Registry};

/// The bound the issue sets for error completions after a peer died.
const WITHIN: Duration = Duration::from_secs(1);

/// Above every eager limit (tcp, shm 32 KiB) and shm's cross-memory
/// attach limit (256 KiB): these sends wait for the receiver.
const BIG: usize = 1 << 20;

/// The providers compiled in (those with an RDM endpoint here).
fn providers() -> Vec<String> {
    let mut v = Vec::new();
    if cfg!(feature = "tcp") {
        v.push("tcp".to_string());
    }
    if cfg!(feature = "shm") {
        v.push("shm".to_string());
    }
    v
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

fn open(provider: &str) -> Ep {
    let info = Hints::new()
        .provider(provider)
        .ep_type(fabric::EpType::Rdm)
        .caps(
            Caps::MSG
                | Caps::TAGGED
                | Caps::RMA
                | Caps::READ
                | Caps::WRITE
                | Caps::REMOTE_READ
                | Caps::REMOTE_WRITE,
        )
        .mr_mode(MrMode::all() - MrMode::LEGACY)
        .getinfo()
        .unwrap_or_else(|e| panic!("{provider}: no RDM endpoint with RMA: {e}"))
        .remove(0);
    assert!(
        !info.domain_attr.mr_mode.contains(MrMode::LOCAL),
        "{provider}: these tests use unregistered local buffers"
    );
    let fabric = Registry::global().fabric(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain
        .cq(&CqAttr {
            format: CqFormat::Tagged,
            wait_obj: WaitObj::Unspec,
            ..CqAttr::default()
        })
        .unwrap();
    let ep = domain.endpoint(&info).unwrap();
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
        info,
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

    /// The completions there are now: context and entry, or the error.
    fn poll(&self) -> Vec<(u64, Result<CqEntry, ErrorKind>)> {
        let mut out = Vec::new();
        let mut e = [CqEntry::default(); 16];
        loop {
            match self.cq.read(&mut e) {
                Ok(n) => out.extend(e[..n].iter().map(|e| (e.context, Ok(*e)))),
                Err(err) if err.kind() == ErrorKind::Avail => {
                    let ee = self.cq.readerr().unwrap();
                    out.push((ee.entry.context, Err(ee.err)));
                }
                Err(err) if err.kind() == ErrorKind::Again => return out,
                Err(err) => panic!("cq read: {err}"),
            }
        }
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
        let deadline = Instant::now() + Duration::from_secs(10);
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
                    std::thread::yield_now()
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
    fn spawn(role: &str, provider: &str) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fault_peer", "--nocapture", "--test-threads=1"])
            .env("FAULT_PEER", format!("{role}:{provider}"))
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

    fn signal(&self, sig: libc_sig::Signal) {
        libc_sig::send(self.child.id(), sig);
    }

    /// SIGKILL, and the moment it was sent.
    fn kill(mut self) -> Instant {
        self.signal(libc_sig::Signal::Kill);
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

/// Signals through `kill(1)`: this crate has no libc dependency.
mod libc_sig {
    pub(crate) enum Signal {
        Stop,
        Kill,
    }

    pub(crate) fn send(pid: u32, sig: Signal) {
        let name = match sig {
            Signal::Stop => "-STOP",
            Signal::Kill => "-KILL",
        };
        let ok = std::process::Command::new("kill")
            .args([name, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {name} {pid} failed");
    }
}

/// Completions gathered by context.
#[derive(Default)]
struct Seen(HashMap<u64, Vec<Result<CqEntry, ErrorKind>>>);

impl Seen {
    fn take(&mut self, ep: &Ep) -> usize {
        let v = ep.poll();
        let n = v.len();
        for (ctx, r) in v {
            self.0.entry(ctx).or_default().push(r);
        }
        n
    }

    fn count(&self, ctx: u64) -> usize {
        self.0.get(&ctx).map_or(0, Vec::len)
    }

    /// Drives progress until every context of `ctxs` has a completion, or
    /// `deadline`.
    fn until_all(&mut self, ep: &Ep, ctxs: &[u64], deadline: Instant) {
        while ctxs.iter().any(|c| self.count(*c) == 0) && Instant::now() < deadline {
            if self.take(ep) == 0 {
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

/// Checks the dead peer's operations: `ops` (context, whether it must
/// fail) each completed once by `killed + WITHIN`, and the errors.
fn check_targeted(p: &str, seen: &mut Seen, ep: &Ep, ops: &[(u64, bool)], killed: Instant) {
    let ctxs: Vec<u64> = ops.iter().map(|o| o.0).collect();
    seen.until_all(ep, &ctxs, killed + WITHIN);
    let late = killed.elapsed();
    // Anything after the bound would be a second completion.
    std::thread::sleep(Duration::from_millis(100));
    seen.take(ep);
    for &(ctx, must_fail) in ops {
        let got = seen.0.get(&ctx).cloned().unwrap_or_default();
        assert_eq!(
            got.len(),
            1,
            "{p}: operation {ctx:#x} has {} completions {:.0?} after the kill: {got:?}",
            got.len(),
            late
        );
        if must_fail {
            assert!(
                got[0].is_err(),
                "{p}: operation {ctx:#x} toward the dead peer succeeded: {got:?}"
            );
        }
    }
}

/// Cancels the receives `ctxs` that have no completion: each then gets
/// exactly one (`FI_ECANCELED`) within the bound.
fn cancel_rest(p: &str, seen: &mut Seen, ep: &Ep, ctxs: &[u64]) {
    let open: Vec<u64> = ctxs
        .iter()
        .copied()
        .filter(|c| seen.count(*c) == 0)
        .collect();
    for &c in &open {
        ep.ep.cancel(c).unwrap();
    }
    seen.until_all(ep, &open, Instant::now() + WITHIN);
    std::thread::sleep(Duration::from_millis(50));
    seen.take(ep);
    for &c in ctxs {
        let got = seen.0.get(&c).cloned().unwrap_or_default();
        assert_eq!(got.len(), 1, "{p}: receive {c:#x}: {got:?}");
    }
    for &c in &open {
        let got = &seen.0[&c];
        assert_eq!(got[0], Err(ErrorKind::Canceled), "{p}: receive {c:#x}");
    }
}

/// The survivor goes on: `old` (which lost its peer) and a new endpoint
/// each exchange verified messages, small and big, with a new peer.
fn talk_to_a_new_peer(p: &str, old: &Ep) {
    let fresh = open(p);
    let mut peer = Peer::spawn("echo", p);
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
            seen.until_all(ep, &[rx, tx], Instant::now() + Duration::from_secs(20));
            assert!(
                matches!(seen.0.get(&tx).map(Vec::as_slice), Some([Ok(_)])),
                "{p}: endpoint {k}, {len} B to the new peer: {:?}",
                seen.0.get(&tx)
            );
            match seen.0.get(&rx).map(Vec::as_slice) {
                Some([Ok(e)]) => assert_eq!(e.len, len, "{p}"),
                other => panic!("{p}: endpoint {k}, {len} B echo: {other:?}"),
            }
            assert!(
                back == out,
                "{p}: endpoint {k}: the echo of {len} B differs"
            );
        }
    }
}

/// Kill the side that receives and is RMA target (a server), stopped
/// first so that nothing it should do gets done: sends, tagged sends,
/// RMA reads and writes aimed at it each end in one completion, the ones
/// that needed it in an error, within 1 s.
#[test]
fn killing_the_receiver_fails_what_was_aimed_at_it_within_a_second() {
    for p in providers() {
        // The buffers first: they outlive the endpoint even on a panic.
        let small = pattern(100, 1);
        let big = pattern(BIG, 2);
        let mut rbuf = vec![0u8; BIG];
        let mut rxs = vec![vec![0u8; BIG]; 8];
        let ep = open(&p);
        let mut peer = Peer::spawn("target", &p);
        let to = ep.insert(&peer.line());
        let mr: Vec<u64> = peer
            .line()
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        peer.say(&ep.name());
        assert_eq!(peer.line(), "ready");
        peer.signal(libc_sig::Signal::Stop);
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
        // RMA may complete without the target's help (shm reads and
        // writes its memory directly); each completes once either way.
        ops.push((READ, false));
        ops.push((WRITE, false));
        // Some progress while the peer is stopped: the big sends cannot
        // finish without it.
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(200) {
            seen.take(&ep);
            std::thread::sleep(Duration::from_millis(1));
        }
        for i in 0..4 {
            assert_eq!(seen.count(SEND + i), 0, "{p}: a big send completed");
        }
        let killed = peer.kill();
        check_targeted(&p, &mut seen, &ep, &ops, killed);
        let rx_ctxs: Vec<u64> = (0..8u64)
            .map(|i| if i % 2 == 1 { TRECV + i } else { RECV + i })
            .collect();
        for &c in &rx_ctxs {
            assert_eq!(
                seen.count(c),
                0,
                "{p}: a wildcard receive completed: {:?}",
                seen.0[&c]
            );
        }
        cancel_rest(&p, &mut seen, &ep, &rx_ctxs);
        talk_to_a_new_peer(&p, &ep);
        eprintln!("{p}: receiver killed: every operation completed once within {WITHIN:?}");
    }
}

/// Kill the side that sends (a client) while it streams messages of all
/// sizes, some taken by this side's receives, and while this side has
/// big sends to it outstanding: those fail within 1 s, every receive ends
/// in exactly one completion (a wildcard one still posted is cancelled).
#[test]
fn killing_the_sender_mid_stream_leaves_nothing_hanging() {
    for p in providers() {
        // The buffers first: they outlive the endpoint even on a panic.
        let big = pattern(BIG, 3);
        let mut rxs = vec![vec![0u8; BIG]; 16];
        let ep = open(&p);
        let mut peer = Peer::spawn("stream", &p);
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
        while t.elapsed() < Duration::from_millis(300) || received < 20 {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{p}: the stream stalled"
            );
            for (ctx, r) in ep.poll() {
                let Some(i) = posted.iter().position(|&c| c == ctx) else {
                    seen.0.entry(ctx).or_default().push(r);
                    continue;
                };
                let e =
                    r.unwrap_or_else(|k| panic!("{p}: a receive failed before the kill: {k:?}"));
                assert_eq!(e.len, stream_len(e.data), "{p}: message {}", e.data);
                assert!(
                    rxs[i][..e.len] == pattern(e.len, e.data),
                    "{p}: message {} differs",
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
            "{p}: a big send to a peer that posts no receive completed"
        );
        let killed = peer.kill();
        check_targeted(&p, &mut seen, &ep, &ops, killed);
        cancel_rest(&p, &mut seen, &ep, &posted);
        talk_to_a_new_peer(&p, &ep);
        eprintln!("{p}: sender killed after {received} messages: nothing left hanging");
    }
}

/// Size of message `n` of the `stream` peer: small, medium, and above the
/// eager and cross-memory-attach limits.
fn stream_len(n: u64) -> usize {
    [9, 3000, BIG, 100_000, 1][(n % 5) as usize]
}

/// A peer process (see the module docs); a no-op test unless
/// `FAULT_PEER` is set. Roles:
/// - `target`: exposes a registered region, then waits to be killed;
/// - `stream`: sends messages of [`stream_len`] sizes (remote CQ data:
///   their number), untagged and tagged 5, with sends in flight, until
///   killed; it never posts a receive;
/// - `echo`: sends each message tagged `k` back to the `k`th peer it was
///   told of, with tag `k`.
#[test]
fn fault_peer() {
    let Ok(spec) = std::env::var("FAULT_PEER") else {
        return;
    };
    let (role, p) = spec.split_once(':').unwrap();
    let ep = open(p);
    println!("FAULT {}", ep.name());
    let mut stdin = std::io::stdin().lock();
    let mut line = || {
        let mut l = String::new();
        stdin.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    };
    match role {
        "target" => {
            let mut mem = pattern(BIG, 4);
            let iov = [IoVec {
                addr: mem.as_mut_ptr(),
                len: BIG,
            }];
            let attr = MrAttr {
                iov: &iov,
                access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
                offset: 0,
                requested_key: 0x77,
                context: 0,
            };
            // SAFETY: `mem` outlives the region: the process is killed.
            let mr: Box<dyn MemoryRegion> = unsafe { ep.domain.mr_reg(&attr) }.unwrap();
            let virt = ep.info.domain_attr.mr_mode.contains(MrMode::VIRT_ADDR);
            let base = if virt { mem.as_ptr() as u64 } else { 0 };
            println!("FAULT mr {} {base}", mr.key());
            ep.insert(&line());
            println!("FAULT ready");
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let _ = (&mr, &mem);
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
