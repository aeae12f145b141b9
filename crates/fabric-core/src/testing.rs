//! Test support for providers (feature `testing`): a global allocator that
//! counts the calling thread's allocations, [`DataPath`], the exchange
//! that "the data path allocates nothing" tests count, and
//! [`PeerProcess`] / [`peer_start`], the two ends of a test that runs its
//! peer in another process, the shared semantics suite ([`semantics`]),
//! fault run ([`fault`]) and an application sleeping on wait fds
//! ([`sleep`]).
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: fabric_core::testing::CountingAlloc = fabric_core::testing::CountingAlloc;
//! let before = fabric_core::testing::CountingAlloc::count();
//! ```

pub mod fault;
pub mod semantics;
pub mod sleep;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting allocations and reallocations per
/// thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

impl CountingAlloc {
    /// How many allocations and reallocations this thread has made.
    pub fn count() -> u64 {
        ALLOCS.with(Cell::get)
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a plain thread-local without a destructor.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's guarantees on `layout` are passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// One side of [`DataPath`]'s exchanges: an enabled RDM endpoint, the CQ
/// bound to it for transmit and receive, and the other side's address in
/// its AV.
#[derive(Clone, Copy)]
pub struct Peer<'a> {
    /// The endpoint.
    pub ep: &'a dyn crate::objects::Endpoint,
    /// Its CQ.
    pub cq: &'a dyn crate::objects::CompletionQueue,
    /// The other side, as this endpoint addresses it.
    pub other: crate::objects::FiAddr,
}

impl<'a> Peer<'a> {
    /// `ep` with its CQ `cq`, addressing the other side as `other`.
    pub fn new(
        ep: &'a dyn crate::objects::Endpoint,
        cq: &'a dyn crate::objects::CompletionQueue,
        other: crate::objects::FiAddr,
    ) -> Self {
        Peer { ep, cq, other }
    }
}

impl std::fmt::Debug for Peer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("other", &self.other).finish()
    }
}

/// The buffers of a warmed-up data path exercise, allocated before it is
/// counted: tagged and untagged sends with their receives, injects, RMA
/// writes and reads, every operation awaited through its completion.
#[derive(Debug)]
pub struct DataPath {
    rb: Vec<u8>,
    ra: Vec<u8>,
    sbuf: Vec<u8>,
    sizes: Vec<usize>,
    /// Every how many rounds, and for how long, a round sleeps with its
    /// send in flight ([`pausing`](Self::pausing)).
    pause: Option<(usize, std::time::Duration)>,
}

impl DataPath {
    /// Buffers for messages of the given sizes, used in turn.
    pub fn new(sizes: &[usize]) -> DataPath {
        let max = sizes.iter().copied().max().unwrap_or(0);
        DataPath {
            rb: vec![0; max],
            ra: vec![0; max],
            sbuf: vec![7; max],
            sizes: sizes.to_vec(),
            pause: None,
        }
    }

    /// Makes every `every`-th round sleep `pause` after posting its send,
    /// with operations in flight, so that what a provider does only now
    /// and then (periodic liveness checks, timers) runs in the rounds too.
    pub fn pausing(mut self, every: usize, pause: std::time::Duration) -> DataPath {
        self.pause = Some((every.max(1), pause));
        self
    }

    /// Runs `n` rounds between `a` and `b`: `a` sends to `b` (tagged every
    /// other round), `b` answers with an inject, then `a` writes to and
    /// reads from `b`'s region `key` (at offset 0, at least as large as
    /// the largest size). Manual progress: each wait reads both CQs.
    ///
    /// Panics when an operation fails or a completion does not come within
    /// 30 s: returning early could leave an operation posted into
    /// buffers the caller may then drop.
    pub fn rounds(&mut self, a: Peer<'_>, b: Peer<'_>, key: u64, n: usize) {
        use crate::OpFlags;
        use crate::objects::{FiAddr, IoVec, Msg, RmaIov, RmaMsg};
        let one = iov;
        fn msg(iov: &[IoVec], addr: FiAddr, tag: u64, context: u64) -> Msg<'_> {
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
        fn rma<'a>(iov: &'a [IoVec], to: FiAddr, remote: &'a [RmaIov], context: u64) -> RmaMsg<'a> {
            RmaMsg {
                iov,
                desc: &[],
                addr: to,
                rma_iov: remote,
                context,
                data: 0,
            }
        }
        let none = OpFlags::empty();
        for i in 0..n {
            let size = self
                .sizes
                .get(i % self.sizes.len().max(1))
                .copied()
                .unwrap_or(0);
            let rbi = one(&mut self.rb[..]);
            let rai = one(&mut self.ra[..]);
            let si = one(&mut self.sbuf[..size]);
            let tagged = i % 2 == 0;
            // SAFETY: the buffers are owned by `self` and outlive the
            // completions awaited below.
            unsafe {
                if tagged {
                    b.ep.trecvmsg(&msg(&rbi, FiAddr::UNSPEC, 5, 1), none)
                        .expect("post");
                    a.ep.trecvmsg(&msg(&rai, FiAddr::UNSPEC, 6, 2), none)
                        .expect("post");
                    a.ep.tsendmsg(&msg(&si, a.other, 5, 3), none).expect("post");
                } else {
                    b.ep.recvmsg(&msg(&rbi, FiAddr::UNSPEC, 0, 1), none)
                        .expect("post");
                    a.ep.recvmsg(&msg(&rai, FiAddr::UNSPEC, 0, 2), none)
                        .expect("post");
                    a.ep.sendmsg(&msg(&si, a.other, 0, 3), none).expect("post");
                }
            }
            if let Some((every, pause)) = self.pause {
                if i % every == every - 1 {
                    std::thread::sleep(pause);
                }
            }
            assert_eq!(wait(b, a).context, 1, "b's receive");
            if tagged {
                b.ep.tinject(&[1; 8], b.other, 6, None).expect("tinject");
            } else {
                b.ep.inject(&[1; 8], b.other, None).expect("inject");
            }
            // a's send (3) and receive (2), in either order.
            let mut got = [false; 2];
            while got != [true, true] {
                let c = wait(a, b).context;
                assert!(c == 2 || c == 3, "unexpected completion {c}");
                got[(c - 2) as usize] = true;
            }
            let remote = [RmaIov {
                addr: 0,
                len: size,
                key,
            }];
            let wi = one(&mut self.sbuf[..size]);
            // SAFETY: `sbuf` outlives the completion awaited next.
            unsafe { a.ep.writemsg(&rma(&wi, a.other, &remote, 4), none) }.expect("write");
            assert_eq!(wait(a, b).context, 4, "a's RMA write");
            let ri = one(&mut self.ra[..size]);
            // SAFETY: `ra` outlives the completion awaited next.
            unsafe { a.ep.readmsg(&rma(&ri, a.other, &remote, 5), none) }.expect("read");
            assert_eq!(wait(a, b).context, 5, "a's RMA read");
        }
    }
}

/// Checks that the data path between `a` and `b` allocates nothing once
/// warmed up: registers a target in `b_domain` (key 9, as large as the
/// largest size), runs 200 [`DataPath::rounds`], then asserts that 300 more
/// make no allocation. Every 50th of those 500 rounds sleeps `pause` with
/// its send in flight ([`DataPath::pausing`]; longer than the provider's
/// period of checks, so that they run in the count too). The test
/// binary's global allocator must be [`CountingAlloc`] (asserted: the
/// warm-up must have counted some).
pub fn assert_data_path_allocates_nothing(
    a: Peer<'_>,
    b: Peer<'_>,
    b_domain: &dyn crate::objects::Domain,
    sizes: &[usize],
    pause: std::time::Duration,
) {
    use crate::objects::MrAccess;
    let mut target = vec![0u8; sizes.iter().copied().max().unwrap_or(0)];
    // SAFETY: `target` is declared before the region, so it outlives it.
    let _mr = unsafe {
        reg(
            b_domain,
            &mut target,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            9,
        )
    };
    let mut path = DataPath::new(sizes).pausing(50, pause);
    path.rounds(a, b, 9, 200);
    let before = CountingAlloc::count();
    assert!(before > 0, "the counter counts");
    path.rounds(a, b, 9, 300);
    let during = CountingAlloc::count() - before;
    assert_eq!(during, 0, "allocations on the warmed-up data path");
}

/// The next completion of `p`'s CQ, reading `other`'s CQ too (to drive
/// its progress); panics on an error completion or after 30 s.
fn wait(p: Peer<'_>, other: Peer<'_>) -> crate::objects::CqEntry {
    next(p.cq, &[other.cq]).unwrap_or_else(|e| panic!("error completion: {:?}", e.err))
}

/// The next completion of `cq` (or its error entry, as `Err`), reading
/// the CQs of `drive` meanwhile to drive their progress; panics after 30 s.
// The error entry is an answer tests inspect, not a failure to propagate.
#[allow(clippy::result_large_err)]
pub fn next(
    cq: &dyn crate::objects::CompletionQueue,
    drive: &[&dyn crate::objects::CompletionQueue],
) -> std::result::Result<crate::objects::CqEntry, crate::objects::CqErrEntry> {
    next_from(cq, drive).map(|(e, _)| e)
}

/// [`next`], with the completion's source address (`fi_cq_readfrom`).
#[allow(clippy::result_large_err)]
pub fn next_from(
    cq: &dyn crate::objects::CompletionQueue,
    drive: &[&dyn crate::objects::CompletionQueue],
) -> std::result::Result<
    (crate::objects::CqEntry, crate::objects::FiAddr),
    crate::objects::CqErrEntry,
> {
    use crate::ErrorKind;
    let mut e = [crate::objects::CqEntry::default()];
    let mut s = [crate::objects::FiAddr(0)];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        for d in drive {
            let _ = d.read(&mut []);
        }
        match cq.readfrom(&mut e, &mut s) {
            Ok(_) => return Ok((e[0], s[0])),
            Err(err) if err.kind() == ErrorKind::Again => {}
            Err(err) if err.kind() == ErrorKind::Avail => {
                return match cq.readerr() {
                    Ok(entry) => Err(entry),
                    Err(e) => panic!("cq readerr after FI_EAVAIL: {e}"),
                };
            }
            Err(err) => panic!("cq read: {err}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no completion within 30 s"
        );
        std::thread::yield_now();
    }
}

/// Reads every CQ of `cqs` (driving progress) `rounds` times, 200 µs apart.
pub fn settle(cqs: &[&dyn crate::objects::CompletionQueue], rounds: usize) {
    for _ in 0..rounds {
        for c in cqs {
            let _ = c.read(&mut []);
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// Panics unless `cq` stays empty for a while (driving `drive`).
pub fn nothing(
    cq: &dyn crate::objects::CompletionQueue,
    drive: &[&dyn crate::objects::CompletionQueue],
) {
    settle(drive, 10);
    let mut e = [crate::objects::CqEntry::default()];
    match cq.read(&mut e) {
        Err(err) if err.kind() == crate::ErrorKind::Again => {}
        other => panic!("expected no completion, got {other:?} {:?}", e[0]),
    }
}

/// `b` as one iovec.
pub fn iov(b: &mut [u8]) -> [crate::objects::IoVec; 1] {
    [crate::objects::IoVec {
        addr: b.as_mut_ptr(),
        len: b.len(),
    }]
}

/// An untagged message of `iov` to (or, posted as a receive, from)
/// `addr`, without descriptors or remote CQ data.
pub fn msg_to(
    iov: &[crate::objects::IoVec],
    addr: crate::objects::FiAddr,
    context: u64,
) -> crate::objects::Msg<'_> {
    crate::objects::Msg {
        iov,
        desc: &[],
        addr,
        tag: 0,
        ignore: 0,
        context,
        data: 0,
    }
}

/// Registers `buf` with `access` under `key`; panics on failure.
///
/// # Safety
///
/// `buf` stays alive and unmoved while the region lives (peers may write
/// into it until the region is dropped).
pub unsafe fn reg(
    d: &dyn crate::objects::Domain,
    buf: &mut [u8],
    access: crate::objects::MrAccess,
    key: u64,
) -> Box<dyn crate::objects::MemoryRegion> {
    let v = iov(buf);
    // SAFETY: the caller's contract: the buffer outlives the region.
    let r = unsafe {
        d.mr_reg(&crate::objects::MrAttr {
            iov: &v,
            access,
            offset: 0,
            requested_key: key,
            context: 0,
        })
    };
    match r {
        Ok(mr) => mr,
        Err(e) => panic!("mr_reg: {e}"),
    }
}

/// A peer process of a two-process test: the test binary run again, so
/// that only its `peer_process` test runs, which plays the peer when the
/// environment names a role. The two exchange endpoint names as lines:
/// the peer prints `NAME=<address>` (see [`peer_start`]) and reads the
/// parent's address from its stdin. Dropping it kills the process.
#[derive(Debug)]
pub struct PeerProcess {
    /// The process.
    pub child: std::process::Child,
    _stdin: std::process::ChildStdin,
    /// The peer endpoint's name.
    pub name: crate::Address,
    /// The peer's later stdout lines (read on a thread, so that it never
    /// blocks on a full pipe).
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl PeerProcess {
    /// Starts `cmd` (this test binary, or a command that runs it) with the
    /// arguments that run just `peer_process`, reads the peer's name and
    /// sends it `mine`.
    pub fn spawn(mut cmd: std::process::Command, mine: &crate::Address) -> PeerProcess {
        use std::io::{BufRead, Write};
        use std::process::Stdio;
        let mut child = cmd
            .args(["--exact", "peer_process", "--nocapture", "--test-threads=1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning the peer: {e}"));
        let (Some(out), Some(mut stdin)) = (child.stdout.take(), child.stdin.take()) else {
            panic!("the peer has no piped stdin / stdout")
        };
        let mut lines = std::io::BufReader::new(out).lines();
        let name = loop {
            let Some(Ok(l)) = lines.next() else {
                panic!("the peer exited before naming its endpoint")
            };
            // libtest may have printed "test peer_process ... " before it.
            if let Some(i) = l.find("NAME=") {
                match l[i + 5..].trim().parse::<crate::Address>() {
                    Ok(a) => break a,
                    Err(e) => panic!("the peer's name {l:?}: {e}"),
                }
            }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in lines.map_while(|l| l.ok()) {
                let _ = tx.send(l);
            }
        });
        if let Err(e) = writeln!(stdin, "{mine}").and_then(|()| stdin.flush()) {
            panic!("telling the peer our name: {e}");
        }
        PeerProcess {
            child,
            _stdin: stdin,
            name,
            lines: rx,
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The peer process's start: registers `region` for remote reads and
/// writes under `key`, prints `ep`'s name as a `NAME=` line and returns
/// the parent's address, read from stdin. Panics on failure.
///
/// # Safety
///
/// As [`reg`]: `region` outlives the returned registration.
pub unsafe fn peer_start(
    domain: &dyn crate::objects::Domain,
    ep: &dyn crate::objects::Endpoint,
    region: &mut [u8],
    key: u64,
) -> (Box<dyn crate::objects::MemoryRegion>, crate::Address) {
    use std::io::Write;
    let access = crate::objects::MrAccess::REMOTE_READ | crate::objects::MrAccess::REMOTE_WRITE;
    // SAFETY: the caller's contract.
    let mr = unsafe { reg(domain, region, access, key) };
    let name = match ep.getname() {
        Ok(n) => n,
        Err(e) => panic!("getname: {e}"),
    };
    println!("NAME={name}");
    let mut line = String::new();
    if let Err(e) = std::io::stdout()
        .flush()
        .and_then(|()| std::io::stdin().read_line(&mut line).map(|_| ()))
    {
        panic!("exchanging names with the parent: {e}");
    }
    match line.trim().parse() {
        Ok(a) => (mr, a),
        Err(e) => panic!("the parent's name {line:?}: {e}"),
    }
}

/// A pseudo-random byte pattern of `len` bytes, different for every seed
/// (xorshift), to tell one transfer's bytes from another's.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Panics naming the first differing byte unless `got == want`.
pub fn same(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: byte {i} of {} is {:#x}, expected {:#x}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// A seed nobody used before in this process.
pub fn seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A read-only buffer as one iovec (for sends and RMA sources).
pub fn one(b: &[u8]) -> [crate::objects::IoVec; 1] {
    [crate::objects::IoVec {
        addr: b.as_ptr().cast_mut(),
        len: b.len(),
    }]
}

/// `count` little-endian copies of the 64-bit word `v` (atomic operands).
pub fn words(v: u64, count: usize) -> Vec<u8> {
    (0..count).flat_map(|_| v.to_le_bytes()).collect()
}
