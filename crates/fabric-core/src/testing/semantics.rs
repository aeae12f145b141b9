//! The semantics suite every provider's `tests/semantics.rs` runs: the
//! object rules of fi_endpoint(3), fi_msg(3), fi_tagged(3), fi_rma(3),
//! fi_atomic(3), fi_cq(3), fi_eq(3), fi_cntr(3), fi_av(3) and fi_mr(3)
//! checked the same way on every provider, over RDM endpoints; the
//! `srx_*` checks ([`srx_messages`] and the others) cover shared receive
//! contexts (`fi_srx_context`), which a provider without them declines
//! through getinfo ([`Rig::offers_srx`]).
//!
//! A provider's test builds a [`Rig`] (its provider, base hints and the
//! getinfo node / flags) and calls each function of this module from its
//! own `#[test]`, so that a failure names the rule:
//!
//! ```ignore
//! fn rig() -> Option<Rig> { Some(Rig::new(&TcpProvider, hints, Some("127.0.0.1"), GetinfoFlags::SOURCE)) }
//! fabric_core::semantics_tests!(rig); // #[test] fn messages() { semantics::messages(&rig()) } ...
//! ```
//!
//! Where providers differ the suite says so, in one of two ways only:
//!
//! - a capability: a check that needs one ([`Rig::offers`]) runs when
//!   getinfo offers it, and otherwise asserts that getinfo refuses it
//!   (`NoData`) and prints a skip notice: a provider cannot skip a check
//!   by failing it;
//! - [`Rig::bad_key`]: the error of an RMA or atomic naming a key no
//!   region has. A target that checks keys itself (tcp, shm) says
//!   `KeyRejected`; an RDMA NIC reports every protection failure of the
//!   responder as one remote access error, so verbs says `Access`.
//!
//! Every other expected error is one `ErrorKind`. Buffers handed to
//! operations are leaked (a few MiB per test), so that no operation can
//! outlive its memory whatever the provider does.

// Test code: a failed expectation panics with its reason.
#![allow(clippy::result_large_err, clippy::too_many_lines)]

use std::time::{Duration, Instant};

use super::{pattern, same, seed};
use crate::objects::{
    AddressVector, AtomicMsg, AtomicOp, AvAttr, Bind, CntrAttr, CompletionFlags, CompletionQueue,
    Counter, CqAttr, CqEntry, CqErrEntry, CqFormat, Datatype, Domain, Endpoint, EqAttr, EqEvent,
    Fabric, FiAddr, IoVec, MemoryRegion, MrAccess, MrAttr, Msg, Provider, RmaIov, RmaMsg, WaitObj,
};
use crate::{Caps, EpType, ErrorKind, GetinfoFlags, Info, MrMode, OpFlags, Request, Version};

/// One `#[test]` per function of the suite (so a failure names its
/// rule, and no provider leaves one out), each running it on the rig
/// `$rig()` returns; `None` skips (no device).
///
/// ```ignore
/// fn rig() -> Option<Rig> { ... }
/// fabric_core::semantics_tests!(rig);
/// ```
#[macro_export]
macro_rules! semantics_tests {
    ($rig:path) => {
        #[test]
        fn messages() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::messages(&r);
            }
        }
        #[test]
        fn tagged() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::tagged(&r);
            }
        }
        #[test]
        fn peek_claim_discard() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::peek_claim_discard(&r);
            }
        }
        #[test]
        fn directed_recv() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::directed_recv(&r);
            }
        }
        #[test]
        fn multi_recv() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::multi_recv(&r);
            }
        }
        #[test]
        fn cancel() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::cancel(&r);
            }
        }
        #[test]
        fn enable_rules() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::enable_rules(&r);
            }
        }
        #[test]
        fn addresses() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::addresses(&r);
            }
        }
        #[test]
        fn rma_protection() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::rma_protection(&r);
            }
        }
        #[test]
        fn errors_spare_the_endpoint() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::errors_spare_the_endpoint(&r);
            }
        }
        #[test]
        fn atomic_protection() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::atomic_protection(&r);
            }
        }
        #[test]
        fn cq_behaviour() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::cq_behaviour(&r);
            }
        }
        #[test]
        fn eq_behaviour() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::eq_behaviour(&r);
            }
        }
        #[test]
        fn counters() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::counters(&r);
            }
        }
        #[test]
        fn error_completions() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::error_completions(&r);
            }
        }
        #[test]
        fn srx_messages() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::srx_messages(&r);
            }
        }
        #[test]
        fn srx_tagged() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::srx_tagged(&r);
            }
        }
        #[test]
        fn srx_multi_recv() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::srx_multi_recv(&r);
            }
        }
        #[test]
        fn srx_flow_control() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::srx_flow_control(&r);
            }
        }
        #[test]
        fn srx_close() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::srx_close(&r);
            }
        }
        #[test]
        fn srx_cancel() {
            if let Some(r) = $rig() {
                $crate::testing::semantics::srx_cancel(&r);
            }
        }
    };
}

mod srx;
pub use srx::{srx_cancel, srx_close, srx_flow_control, srx_messages, srx_multi_recv, srx_tagged};

/// How long any wait may take (TCG guests are slow).
const T: Duration = Duration::from_secs(30);

/// What a provider's semantics test hands the suite: how to ask its
/// provider for RDM entries.
pub struct Rig {
    /// The provider.
    pub provider: &'static dyn Provider,
    /// Base hints (address format, mode, MR mode...); the suite sets the
    /// endpoint type (RDM) and the capabilities of each check. The
    /// answers must not need FI_MR_LOCAL: the suite passes no descriptors;
    /// it handles FI_MR_VIRT_ADDR, FI_MR_PROV_KEY and FI_MR_ALLOCATED, and
    /// a capability skipped under these hints must not be offered under
    /// those modes either.
    pub hints: Info,
    /// getinfo's node.
    pub node: Option<&'static str>,
    /// getinfo's flags.
    pub flags: GetinfoFlags,
    /// The error of an RMA or atomic naming a key that no region has (a
    /// wrong key, or the key of a closed region): `KeyRejected` by
    /// default; `Access` where the NIC reports all remote protection
    /// failures alike (verbs).
    pub bad_key: ErrorKind,
}

impl std::fmt::Debug for Rig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rig")
            .field("provider", &self.provider.name())
            .field("node", &self.node)
            .finish()
    }
}

/// The capabilities every check uses: messages, with source addresses.
const BASE: Caps = Caps::MSG.union(Caps::SOURCE);

/// Both roles of RMA and atomics: initiator and target.
const DIRECTIONS: Caps = Caps::READ
    .union(Caps::WRITE)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE);

/// The MR modes the suite handles (it passes no descriptors, so not
/// FI_MR_LOCAL).
const MR_MODES: MrMode = MrMode::VIRT_ADDR
    .union(MrMode::PROV_KEY)
    .union(MrMode::ALLOCATED);

impl Rig {
    /// A rig for `provider`'s RDM endpoints, asked with `hints` (its
    /// endpoint type is set to RDM), `node` and `flags`; wrong keys are
    /// `KeyRejected`.
    pub fn new(
        provider: &'static dyn Provider,
        mut hints: Info,
        node: Option<&'static str>,
        flags: GetinfoFlags,
    ) -> Rig {
        hints.ep_attr.ep_type = EpType::Rdm;
        Rig {
            provider,
            hints,
            node,
            flags,
            bad_key: ErrorKind::KeyRejected,
        }
    }

    /// The first RDM answer with `caps`, or `None` when getinfo answers
    /// `NoData`; panics on any other error.
    pub fn info(&self, caps: Caps) -> Option<Info> {
        self.info_in(caps, self.hints.domain_attr.mr_mode)
    }

    fn info_in(&self, caps: Caps, mr_mode: MrMode) -> Option<Info> {
        let mut h = self.hints.clone();
        h.caps |= caps;
        h.domain_attr.mr_mode = mr_mode;
        let req = Request {
            node: self.node,
            flags: self.flags,
            hints: Some(&h),
            ..Request::new(Version::CURRENT)
        };
        match self.provider.getinfo(&req) {
            Ok(mut l) if !l.is_empty() => {
                let i = l.remove(0);
                assert!(i.caps.contains(caps), "getinfo's answer lacks {caps:?}");
                assert!(
                    !i.domain_attr.mr_mode.contains(MrMode::LOCAL),
                    "the suite needs answers without FI_MR_LOCAL"
                );
                Some(i)
            }
            Ok(_) => None,
            Err(e) if e.kind() == ErrorKind::NoData => None,
            Err(e) => panic!("getinfo for {caps:?}: {e}"),
        }
    }

    /// The answer for the base capabilities (FI_MSG, FI_SOURCE) and
    /// `caps`, when the provider offers `caps`. Otherwise asserts that it
    /// does not (the base answer lacks them; asking for them is `NoData`),
    /// prints that `what` is skipped and returns `None`.
    pub fn offers(&self, caps: Caps, what: &str) -> Option<Info> {
        let base = self
            .info(BASE)
            .unwrap_or_else(|| panic!("{} offers no RDM entry", self.provider.name()));
        match self.info(BASE | caps) {
            Some(i) => Some(i),
            None => {
                assert!(
                    !base.caps.contains(caps),
                    "{caps:?} is in the base answer, but asking for it finds nothing"
                );
                assert!(
                    self.info_in(BASE | caps, MR_MODES).is_none(),
                    "{caps:?} is offered with mr_mode {MR_MODES:?}: the rig's hints hide it"
                );
                eprintln!(
                    "semantics: {what}: skipped, {} does not offer {caps:?}",
                    self.provider.name()
                );
                None
            }
        }
    }

    /// The base answer (messages and source addresses); every provider
    /// offers it.
    pub fn base(&self) -> Info {
        self.info(BASE)
            .unwrap_or_else(|| panic!("{} offers no RDM entry", self.provider.name()))
    }

    /// `n` enabled endpoints of `info` in one domain, sharing one AV in
    /// which all are inserted, each with its own CQ of `format`; endpoint
    /// `i` has one counter bound per entry of `counters[i]` (if any).
    pub fn world(&self, info: &Info, n: usize, opts: Opts<'_>) -> World {
        let fabric = self.provider.fabric(&info.fabric_attr).expect("fabric");
        let domain = fabric.domain(info).expect("domain");
        let av = domain.av(&AvAttr::default()).expect("av");
        let mut eps = Vec::new();
        let mut cntrs = Vec::new();
        for i in 0..n {
            let cq = domain
                .cq(&CqAttr {
                    format: opts.format,
                    wait_obj: WaitObj::Unspec,
                    ..CqAttr::default()
                })
                .expect("cq");
            let ep = domain.endpoint(info).expect("endpoint");
            ep.bind(Bind::Cq {
                cq: cq.as_ref(),
                transmit: true,
                recv: true,
                selective: opts.selective && i == 0,
            })
            .expect("bind cq");
            ep.bind(Bind::Av(av.as_ref())).expect("bind av");
            let events = opts.counters.get(i).copied().unwrap_or(&[]);
            let mine: Vec<Box<dyn Counter>> = events
                .iter()
                .map(|_| domain.cntr(&CntrAttr::default()).expect("cntr"))
                .collect();
            for (c, ev) in mine.iter().zip(events) {
                ep.bind(Bind::Cntr(c.as_ref(), *ev)).expect("bind cntr");
            }
            ep.enable().expect("enable");
            eps.push(Ep { ep, cq });
            cntrs.push(mine);
        }
        let names: Vec<_> = eps
            .iter()
            .map(|e| e.ep.getname().expect("getname"))
            .collect();
        let mut addr = vec![FiAddr(0); n];
        assert_eq!(av.insert(&names, &mut addr).expect("av insert"), n);
        World {
            eps,
            cntrs,
            addr,
            av,
            domain,
            fabric,
            info: info.clone(),
        }
    }
}

/// How [`Rig::world`] opens its endpoints.
#[derive(Debug, Clone, Copy)]
pub struct Opts<'a> {
    /// The CQs' format.
    pub format: CqFormat,
    /// Endpoint 0's CQ is bound with FI_SELECTIVE_COMPLETION.
    pub selective: bool,
    /// Counters per endpoint: the events of each.
    pub counters: &'a [&'a [Caps]],
}

impl Default for Opts<'_> {
    fn default() -> Self {
        Opts {
            format: CqFormat::Tagged,
            selective: false,
            counters: &[],
        }
    }
}

/// An endpoint and its CQ (transmit and receive).
pub struct Ep {
    /// The endpoint.
    pub ep: Box<dyn Endpoint>,
    /// Its CQ.
    pub cq: Box<dyn CompletionQueue>,
}

/// Endpoints in one domain sharing an AV (fields drop in order).
pub struct World {
    /// The endpoints.
    pub eps: Vec<Ep>,
    /// Their counters.
    pub cntrs: Vec<Vec<Box<dyn Counter>>>,
    /// Each endpoint's address in the shared AV.
    pub addr: Vec<FiAddr>,
    /// The AV.
    pub av: Box<dyn AddressVector>,
    /// The domain.
    pub domain: Box<dyn Domain>,
    /// The fabric.
    pub fabric: Box<dyn Fabric>,
    /// The entry the endpoints were opened with.
    pub info: Info,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").field("addr", &self.addr).finish()
    }
}

/// A buffer that lives as long as the process: operations posted into it
/// can never outlive it.
fn leak(v: Vec<u8>) -> &'static mut [u8] {
    Box::leak(v.into_boxed_slice())
}

/// A leaked buffer of `len` bytes of `fill`, 8-byte aligned.
fn aligned(len: usize, fill: u8) -> &'static mut [u8] {
    let b = leak(vec![fill; len + 8]);
    let off = (8 - (b.as_ptr() as usize) % 8) % 8;
    &mut b[off..off + len]
}

fn m(iov: &[IoVec], addr: FiAddr, tag: u64, ignore: u64, context: u64) -> Msg<'_> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore,
        context,
        data: 0,
    }
}

fn iov_of(b: &'static mut [u8]) -> [IoVec; 1] {
    [IoVec {
        addr: b.as_mut_ptr(),
        len: b.len(),
    }]
}

/// A message operation to post.
#[derive(Clone, Copy)]
enum Op {
    Send,
    TSend(u64),
}

impl World {
    /// Endpoint `i`.
    pub fn ep(&self, i: usize) -> &dyn Endpoint {
        self.eps[i].ep.as_ref()
    }

    /// Drives every endpoint's progress (reads nothing).
    pub fn spin(&self) {
        for e in &self.eps {
            let _ = e.cq.read(&mut []);
        }
    }

    /// Retries `op` while it says `Again`, driving progress; returns its
    /// final result.
    pub fn retry(&self, mut op: impl FnMut() -> crate::Result<()>) -> crate::Result<()> {
        let deadline = Instant::now() + T;
        loop {
            match op() {
                Err(e) if e.kind() == ErrorKind::Again && Instant::now() < deadline => {
                    self.spin();
                }
                r => return r,
            }
        }
    }

    /// The next completion of endpoint `i` with its source, or its error
    /// entry; drives every endpoint meanwhile; panics after 30 s.
    pub fn next(&self, i: usize) -> Result<(CqEntry, FiAddr), CqErrEntry> {
        let deadline = Instant::now() + T;
        let mut e = [CqEntry::default()];
        let mut s = [FiAddr(0)];
        loop {
            match self.eps[i].cq.readfrom(&mut e, &mut s) {
                Ok(1) => return Ok((e[0], s[0])),
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::Again => self.spin(),
                Err(err) if err.kind() == ErrorKind::Avail => {
                    return Err(self.eps[i].cq.readerr().expect("readerr after Avail"));
                }
                Err(err) => panic!("cq read: {err}"),
            }
            assert!(
                Instant::now() < deadline,
                "endpoint {i}: no completion within {T:?}"
            );
            std::thread::yield_now();
        }
    }

    /// The next completion of endpoint `i`; panics on an error entry.
    pub fn ok(&self, i: usize) -> (CqEntry, FiAddr) {
        self.next(i)
            .unwrap_or_else(|e| panic!("endpoint {i}: error completion {e:?}"))
    }

    /// The next completion of endpoint `i`, which must be an error.
    pub fn err(&self, i: usize) -> CqErrEntry {
        match self.next(i) {
            Err(e) => e,
            Ok(c) => panic!("endpoint {i}: expected an error completion, got {c:?}"),
        }
    }

    /// Panics unless endpoint `i`'s CQ stays empty while every endpoint
    /// progresses for a while.
    pub fn nothing(&self, i: usize) {
        for _ in 0..20 {
            self.spin();
            std::thread::sleep(Duration::from_micros(500));
        }
        let mut e = [CqEntry::default()];
        match self.eps[i].cq.read(&mut e) {
            Err(err) if err.kind() == ErrorKind::Again => {}
            other => panic!(
                "endpoint {i}: expected no completion, got {other:?} {:?}",
                e[0]
            ),
        }
    }

    /// Posts a send of a copy of `data` from `from` to `to` (retrying
    /// while `Again`); returns the posting's result.
    fn post(
        &self,
        from: usize,
        to: FiAddr,
        op: Op,
        data: &[u8],
        ctx: u64,
        flags: OpFlags,
    ) -> crate::Result<()> {
        let buf = leak(data.to_vec());
        let v = iov_of(buf);
        self.retry(|| match op {
            // SAFETY: the buffer is leaked: it outlives the operation.
            Op::Send => unsafe { self.ep(from).sendmsg(&m(&v, to, 0, 0, ctx), flags) },
            // SAFETY: as above.
            Op::TSend(tag) => unsafe { self.ep(from).tsendmsg(&m(&v, to, tag, 0, ctx), flags) },
        })
    }

    /// Sends `data` from endpoint `from` to endpoint `to`; panics if
    /// posting fails.
    fn send(&self, from: usize, to: usize, data: &[u8], ctx: u64) {
        self.post(from, self.addr[to], Op::Send, data, ctx, OpFlags::empty())
            .unwrap_or_else(|e| panic!("send {from} -> {to}: {e}"));
    }

    /// A tagged send of `data` from `from` to `to`.
    fn tsend(&self, from: usize, to: usize, tag: u64, data: &[u8], ctx: u64) {
        self.post(
            from,
            self.addr[to],
            Op::TSend(tag),
            data,
            ctx,
            OpFlags::empty(),
        )
        .unwrap_or_else(|e| panic!("tsend {from} -> {to}: {e}"));
    }

    /// Posts a receive (tagged when `tag` is some) of a new `len`-byte
    /// buffer filled with 0xEE at endpoint `at`; returns the buffer.
    fn recv(
        &self,
        at: usize,
        len: usize,
        src: FiAddr,
        tag: Option<(u64, u64)>,
        ctx: u64,
        flags: OpFlags,
    ) -> crate::Result<&'static [u8]> {
        let buf = leak(vec![0xEE; len]);
        let p = buf.as_mut_ptr();
        let v = [IoVec { addr: p, len }];
        self.retry(|| match tag {
            // SAFETY: the buffer is leaked: it outlives the operation.
            None => unsafe { self.ep(at).recvmsg(&m(&v, src, 0, 0, ctx), flags) },
            // SAFETY: as above.
            Some((t, ign)) => unsafe { self.ep(at).trecvmsg(&m(&v, src, t, ign, ctx), flags) },
        })?;
        // SAFETY: `p` points at the leaked `len` bytes; the provider writes
        // them only before the completion the test awaits before reading.
        Ok(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// Registers a new leaked, 8-byte aligned buffer of `len` bytes of
    /// `fill` with `access`; returns the region and the buffer.
    fn region(
        &self,
        len: usize,
        fill: u8,
        access: MrAccess,
    ) -> (Box<dyn MemoryRegion>, &'static [u8]) {
        use std::sync::atomic::{AtomicU64, Ordering};
        static KEY: AtomicU64 = AtomicU64::new(0x5e_0000);
        let buf = aligned(len, fill);
        let p = buf.as_mut_ptr();
        let v = [IoVec { addr: p, len }];
        // SAFETY: the buffer is leaked: it outlives the region.
        let mr = unsafe {
            self.domain.mr_reg(&MrAttr {
                iov: &v,
                access,
                offset: 0,
                requested_key: KEY.fetch_add(1, Ordering::Relaxed),
                context: 0,
            })
        }
        .expect("mr_reg");
        // SAFETY: leaked; peers write it only through the operations the
        // tests await before they read.
        (mr, unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// The remote address of byte `off` of `buf` (FI_MR_VIRT_ADDR: its
    /// virtual address; otherwise the offset).
    fn raddr(&self, buf: &[u8], off: usize) -> u64 {
        if self.info.domain_attr.mr_mode.contains(MrMode::VIRT_ADDR) {
            buf.as_ptr() as u64 + off as u64
        } else {
            off as u64
        }
    }

    /// An RMA write (`write`) or read from endpoint 0 to endpoint 1's
    /// memory at `remote`, of a local leaked buffer `local`.
    fn rma(
        &self,
        write: bool,
        local: &'static mut [u8],
        remote: RmaIov,
        ctx: u64,
    ) -> crate::Result<()> {
        let v = iov_of(local);
        let r = [remote];
        let msg = RmaMsg {
            iov: &v,
            desc: &[],
            addr: self.addr[1],
            rma_iov: &r,
            context: ctx,
            data: 0,
        };
        self.retry(|| {
            if write {
                // SAFETY: the local buffer is leaked.
                unsafe { self.ep(0).writemsg(&msg, OpFlags::empty()) }
            } else {
                // SAFETY: as above.
                unsafe { self.ep(0).readmsg(&msg, OpFlags::empty()) }
            }
        })
    }
}

/// The error kind of a call that must fail.
trait Refused {
    fn refused(self) -> ErrorKind;
}

impl<T> Refused for crate::Result<T> {
    fn refused(self) -> ErrorKind {
        match self {
            Ok(_) => panic!("expected an error, the call succeeded"),
            Err(e) => e.kind(),
        }
    }
}

/// A key no live region has, of the same width as `live[0]` (verbs'
/// keys are 32 bits: a wider one is refused at once as `NoKey`, which is
/// another check).
fn wrong_key(live: &[u64]) -> u64 {
    let mut k = live[0] ^ 0x5a5a;
    while live.contains(&k) {
        k = k.wrapping_add(0x100);
    }
    k
}

fn has(e: &CqEntry, f: CompletionFlags) -> bool {
    e.flags.contains(f)
}

/// Messages: sizes from one byte to a rendezvous MiB arrive whole, in
/// order, with their length, flags and source; the receive buffer past
/// the message is untouched; unexpected messages (eager and rendezvous)
/// wait for their receives in order; inject.
pub fn messages(rig: &Rig) {
    let w = rig.world(&rig.base(), 2, Opts::default());
    for (k, &n) in [1usize, 100, 4096, 65_539, 1 << 20].iter().enumerate() {
        let k = k as u64;
        let want = pattern(n, seed());
        let r = w
            .recv(1, n + 16, FiAddr::UNSPEC, None, 100 + k, OpFlags::empty())
            .expect("recv");
        w.send(0, 1, &want, 200 + k);
        let (e, src) = w.ok(1);
        assert_eq!(
            (e.context, e.len, src),
            (100 + k, n, w.addr[0]),
            "receive of {n}"
        );
        assert!(
            has(&e, CompletionFlags::RECV | CompletionFlags::MSG),
            "{:?}",
            e.flags
        );
        same(&format!("message of {n}"), &r[..n], &want);
        assert!(
            r[n..].iter().all(|&b| b == 0xEE),
            "bytes past the message of {n} written"
        );
        let (s, _) = w.ok(0);
        assert_eq!(s.context, 200 + k);
        assert!(
            has(&s, CompletionFlags::SEND | CompletionFlags::MSG),
            "{:?}",
            s.flags
        );
    }
    // Unexpected: sent before any receive is posted; they match in order.
    let sizes = [10usize, 3000, 1 << 20];
    let wants: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, seed())).collect();
    for (k, d) in wants.iter().enumerate() {
        w.send(0, 1, d, 300 + k as u64);
    }
    for _ in 0..50 {
        w.spin();
    }
    let mut bufs = Vec::new();
    for k in 0..sizes.len() {
        bufs.push(
            w.recv(
                1,
                1 << 20,
                FiAddr::UNSPEC,
                None,
                400 + k as u64,
                OpFlags::empty(),
            )
            .expect("recv"),
        );
    }
    for (k, d) in wants.iter().enumerate() {
        let (e, src) = w.ok(1);
        assert_eq!(
            (e.context, e.len, src),
            (400 + k as u64, d.len(), w.addr[0])
        );
        same(&format!("unexpected message {k}"), &bufs[k][..d.len()], d);
    }
    let mut sent: Vec<u64> = (0..sizes.len()).map(|_| w.ok(0).0.context).collect();
    sent.sort_unstable();
    assert_eq!(sent, [300, 301, 302]);
    // inject: no completion at the sender.
    let d = pattern(32, seed());
    let r = w
        .recv(1, 32, FiAddr::UNSPEC, None, 500, OpFlags::empty())
        .expect("recv");
    w.retry(|| w.ep(0).inject(&d, w.addr[1], None))
        .expect("inject");
    assert_eq!(w.ok(1).0.context, 500);
    same("injected", r, &d);
    w.nothing(0);
}

/// Tagged messages: tag and ignore-mask matching, the tag in the
/// completion, matching in send order for one tag, untagged receives
/// never taking tagged messages, tinject.
pub fn tagged(rig: &Rig) {
    let Some(info) = rig.offers(Caps::TAGGED, "tagged") else {
        return;
    };
    let w = rig.world(&info, 2, Opts::default());
    // Posted: tag 0x10 ignoring the low nibble takes 0x1f, not 0x20.
    let r = w
        .recv(
            1,
            64,
            FiAddr::UNSPEC,
            Some((0x10, 0x0f)),
            1,
            OpFlags::empty(),
        )
        .expect("trecv");
    let miss = pattern(40, seed());
    let hit = pattern(50, seed());
    w.tsend(0, 1, 0x20, &miss, 11);
    w.tsend(0, 1, 0x1f, &hit, 12);
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.tag, e.len, src), (1, 0x1f, 50, w.addr[0]));
    assert!(
        has(&e, CompletionFlags::RECV | CompletionFlags::TAGGED),
        "{:?}",
        e.flags
    );
    same("tag 0x1f", &r[..50], &hit);
    // The unmatched one waits for its tag.
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, Some((0x20, 0)), 2, OpFlags::empty())
        .expect("trecv");
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.tag, e.len), (2, 0x20, 40));
    same("tag 0x20", &r[..40], &miss);
    for _ in 0..2 {
        let (s, _) = w.ok(0);
        assert!(
            has(&s, CompletionFlags::SEND | CompletionFlags::TAGGED),
            "{:?}",
            s.flags
        );
    }
    // One tag: send order.
    let one_ = pattern(20, seed());
    let two = pattern(30, seed());
    w.tsend(0, 1, 5, &one_, 13);
    w.tsend(0, 1, 5, &two, 14);
    let r1 = w
        .recv(1, 64, FiAddr::UNSPEC, Some((5, 0)), 3, OpFlags::empty())
        .expect("trecv");
    let r2 = w
        .recv(1, 64, FiAddr::UNSPEC, Some((5, 0)), 4, OpFlags::empty())
        .expect("trecv");
    assert_eq!(w.ok(1).0.context, 3);
    assert_eq!(w.ok(1).0.context, 4);
    same("first of tag 5", &r1[..20], &one_);
    same("second of tag 5", &r2[..30], &two);
    w.ok(0);
    w.ok(0);
    // An untagged receive does not take a tagged message.
    let u = w
        .recv(1, 64, FiAddr::UNSPEC, None, 5, OpFlags::empty())
        .expect("recv");
    let d = pattern(24, seed());
    w.retry(|| w.ep(0).tinject(&d, w.addr[1], 7, None))
        .expect("tinject");
    w.nothing(1);
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, Some((7, 0)), 6, OpFlags::empty())
        .expect("trecv");
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.tag, e.len), (6, 7, 24));
    same("tinject", &r[..24], &d);
    assert!(
        u.iter().all(|&b| b == 0xEE),
        "the untagged receive was written"
    );
    w.ep(1).cancel(5).expect("cancel the untagged receive");
    assert_eq!(w.err(1).err, ErrorKind::Canceled);
}

/// FI_PEEK / FI_CLAIM / FI_DISCARD (fi_tagged(3)): a peek reports a
/// message (tag, length, source) without taking it; PEEK|CLAIM reserves
/// it for a later CLAIM, which receives it; CLAIM|DISCARD, PEEK|DISCARD
/// and PEEK|CLAIM|DISCARD drop it; a CLAIM with nothing claimed is
/// refused with `NoMsg`; a peek that finds nothing completes with `NoMsg`.
/// A receive counter counts those completions, errors apart.
pub fn peek_claim_discard(rig: &Rig) {
    let Some(info) = rig.offers(Caps::TAGGED, "peek / claim / discard") else {
        return;
    };
    let w = rig.world(
        &info,
        2,
        Opts {
            counters: &[&[Caps::SEND], &[Caps::RECV]],
            ..Opts::default()
        },
    );
    let msgs: Vec<Vec<u8>> = (0..4).map(|_| pattern(24, seed())).collect();
    for (i, d) in msgs.iter().enumerate() {
        w.tsend(0, 1, i as u64 + 1, d, 10 + i as u64);
        w.ok(0);
    }
    assert_eq!(w.cntrs[0][0].read(), 4, "send counter");
    for _ in 0..50 {
        w.spin();
    }
    let recvd = &w.cntrs[1][0];
    let post = |tag: u64, ctx: u64, flags: OpFlags| {
        w.recv(1, 64, FiAddr::UNSPEC, Some((tag, 0)), ctx, flags)
    };
    // Nothing claimed yet.
    assert_eq!(post(1, 20, OpFlags::CLAIM).refused(), ErrorKind::NoMsg);
    // PEEK: found, with tag, length and source; not taken.
    let b = post(1, 21, OpFlags::PEEK).expect("peek");
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, e.tag, e.len, src),
        (21, 1, 24, w.addr[0]),
        "PEEK"
    );
    // A peek may return data: then `buf` names the buffer (fi_tagged(3)).
    if e.buf == 0 {
        assert!(
            b.iter().all(|&x| x == 0xEE),
            "a peek without data wrote its buffer"
        );
    } else {
        assert_eq!(e.buf, b.as_ptr() as u64, "a peek's data is in its buffer");
        same("peeked data", &b[..24], &msgs[0]);
    }
    // A peek with an ignore mask reports the tag found.
    let v = iov_of(leak(vec![0; 8]));
    w.retry(|| {
        // SAFETY: leaked buffer.
        unsafe {
            w.ep(1)
                .trecvmsg(&m(&v, FiAddr::UNSPEC, 0, 0x3, 22), OpFlags::PEEK)
        }
    })
    .expect("peek with mask");
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.tag), (22, 1), "the oldest match");
    // PEEK|CLAIM, then CLAIM receives it.
    post(1, 23, OpFlags::PEEK | OpFlags::CLAIM).expect("peek claim");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.tag, src), (23, 1, w.addr[0]), "PEEK|CLAIM");
    // A claimed message is only for its CLAIM: a peek misses it.
    post(1, 24, OpFlags::PEEK).expect("peek");
    let err = w.err(1);
    assert_eq!(
        (err.entry.context, err.err),
        (24, ErrorKind::NoMsg),
        "the claimed message is hidden"
    );
    let b = post(1, 23, OpFlags::CLAIM).expect("claim");
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, e.len, e.tag, src),
        (23, 24, 1, w.addr[0]),
        "CLAIM"
    );
    same("claimed", &b[..24], &msgs[0]);
    // PEEK|CLAIM then CLAIM|DISCARD: completes, no data.
    post(2, 25, OpFlags::PEEK | OpFlags::CLAIM).expect("peek claim");
    w.ok(1);
    let b = post(2, 25, OpFlags::CLAIM | OpFlags::DISCARD).expect("claim discard");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (25, 0, w.addr[0]), "CLAIM|DISCARD");
    assert!(b.iter().all(|&x| x == 0xEE), "a discard wrote its buffer");
    // PEEK|DISCARD and PEEK|CLAIM|DISCARD take and drop.
    post(3, 26, OpFlags::PEEK | OpFlags::DISCARD).expect("peek discard");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.tag, src), (26, 3, w.addr[0]), "PEEK|DISCARD");
    post(4, 27, OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD).expect("peek claim discard");
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.tag), (27, 4), "PEEK|CLAIM|DISCARD");
    let before = (recvd.read(), recvd.readerr());
    for (tag, ctx) in [(1, 30), (2, 31), (3, 32), (4, 33)] {
        post(tag, ctx, OpFlags::PEEK).expect("peek");
        let err = w.err(1);
        assert_eq!(
            (err.entry.context, err.err),
            (ctx, ErrorKind::NoMsg),
            "tag {tag} is gone"
        );
    }
    assert_eq!(
        recvd.readerr(),
        before.1 + 4,
        "failed peeks count as errors"
    );
    assert_eq!(recvd.read(), before.0, "failed peeks are no successes");
    assert!(before.0 >= 1, "the claim's receive counted");
}

/// Directed receive (FI_DIRECTED_RECV): a receive naming a source takes
/// only that source's messages, tagged or not.
pub fn directed_recv(rig: &Rig) {
    let Some(info) = rig.offers(Caps::DIRECTED_RECV | Caps::TAGGED, "directed receive") else {
        return;
    };
    let w = rig.world(&info, 3, Opts::default());
    let from2 = pattern(30, seed());
    let from0 = pattern(40, seed());
    let r = w
        .recv(1, 64, w.addr[0], None, 1, OpFlags::empty())
        .expect("recv");
    w.send(2, 1, &from2, 2);
    w.ok(2);
    w.nothing(1);
    w.send(0, 1, &from0, 3);
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (1, 40, w.addr[0]));
    same("from 0", &r[..40], &from0);
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 4, OpFlags::empty())
        .expect("recv");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (4, 30, w.addr[2]));
    same("from 2", &r[..30], &from2);
    w.ok(0);
    // Tagged: the same tag from both; the receive names endpoint 2.
    let t0 = pattern(16, seed());
    let t2 = pattern(17, seed());
    let r = w
        .recv(1, 64, w.addr[2], Some((9, 0)), 5, OpFlags::empty())
        .expect("trecv");
    w.tsend(0, 1, 9, &t0, 6);
    w.tsend(2, 1, 9, &t2, 7);
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (5, 17, w.addr[2]));
    same("tagged from 2", &r[..17], &t2);
    let r = w
        .recv(1, 64, w.addr[0], Some((9, 0)), 8, OpFlags::empty())
        .expect("trecv");
    let (e, src) = w.ok(1);
    assert_eq!((e.context, e.len, src), (8, 16, w.addr[0]));
    same("tagged from 0", &r[..16], &t0);
}

/// FI_MULTI_RECV: messages (unexpected ones first, then eager and
/// rendezvous ones) are placed one after another with patterns that show
/// misplaced bytes; each completion points at its message; the one that
/// leaves less than the minimum releases the buffer (its completion alone
/// carries FI_MULTI_RECV); later messages go to other receives; a tagged
/// multi-receive is refused (`BadFlags`); a cancelled multi-receive
/// buffer is released with FI_MULTI_RECV.
pub fn multi_recv(rig: &Rig) {
    let Some(info) = rig.offers(Caps::MULTI_RECV, "multi-recv") else {
        return;
    };
    let w = rig.world(&info, 2, Opts::default());
    w.ep(1)
        .set_min_multi_recv(2000)
        .expect("set_min_multi_recv");
    assert_eq!(w.ep(1).min_multi_recv().expect("min_multi_recv"), 2000);
    let sizes = [200usize, 301, 20_000, 150, 250, 10_000];
    let wants: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, seed())).collect();
    for (k, d) in wants.iter().enumerate().take(2) {
        w.send(0, 1, d, k as u64);
    }
    for _ in 0..50 {
        w.spin();
    }
    let buf = w
        .recv(1, 32_768, FiAddr::UNSPEC, None, 77, OpFlags::MULTI_RECV)
        .expect("multi recv");
    let base = buf.as_ptr() as u64;
    // Wait for each message before sending the next: placement in order.
    let mut off = 0usize;
    for (k, d) in wants.iter().enumerate() {
        if k >= 2 {
            w.send(0, 1, d, k as u64);
        }
        let (e, src) = w.ok(1);
        assert_eq!(
            (e.context, e.len, src),
            (77, d.len(), w.addr[0]),
            "message {k}"
        );
        assert_eq!(
            e.buf,
            base + off as u64,
            "message {k} placed after the previous"
        );
        assert!(
            has(&e, CompletionFlags::RECV | CompletionFlags::MSG),
            "{:?}",
            e.flags
        );
        // 20901 bytes leave 11867; 30901 leave 1867 < 2000: released.
        assert_eq!(
            has(&e, CompletionFlags::MULTI_RECV),
            k == sizes.len() - 1,
            "message {k}: FI_MULTI_RECV"
        );
        same(
            &format!("multi-recv message {k}"),
            &buf[off..off + d.len()],
            d,
        );
        off += d.len();
    }
    assert!(
        buf[off..].iter().all(|&b| b == 0xEE),
        "bytes past the last message written"
    );
    for _ in 0..sizes.len() {
        w.ok(0);
    }
    // A message now goes to a new receive.
    let d = pattern(50, seed());
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 78, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, &d, 9);
    let (e, _) = w.ok(1);
    assert_eq!((e.context, e.len), (78, 50));
    same("after release", &r[..50], &d);
    assert!(
        buf[off..].iter().all(|&b| b == 0xEE),
        "the released buffer was written"
    );
    w.ok(0);
    // Tagged multi-receive: refused.
    if let Some(ti) = rig.offers(Caps::TAGGED | Caps::MULTI_RECV, "tagged multi-recv refusal") {
        let t = rig.world(&ti, 1, Opts::default());
        let r = t.recv(0, 64, FiAddr::UNSPEC, Some((1, 0)), 1, OpFlags::MULTI_RECV);
        assert_eq!(r.refused(), ErrorKind::BadFlags, "tagged FI_MULTI_RECV");
    }
    // Cancelled: released with FI_MULTI_RECV.
    w.recv(1, 4096, FiAddr::UNSPEC, None, 79, OpFlags::MULTI_RECV)
        .expect("multi recv");
    w.ep(1).cancel(79).expect("cancel");
    let e = w.err(1);
    assert_eq!((e.entry.context, e.err), (79, ErrorKind::Canceled));
    assert!(
        has(&e.entry, CompletionFlags::MULTI_RECV),
        "{:?}",
        e.entry.flags
    );
}

/// fi_cancel: a cancelled receive completes with `Canceled` (its context,
/// RECV flags) and is never written; cancelling it again, or a context
/// never posted, is `NoEnt`; a disabled endpoint refuses with
/// `OpBadState`.
pub fn cancel(rig: &Rig) {
    let info = rig.base();
    let w = rig.world(&info, 2, Opts::default());
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 5, OpFlags::empty())
        .expect("recv");
    w.ep(1).cancel(5).expect("cancel");
    let e = w.err(1);
    assert_eq!((e.entry.context, e.err), (5, ErrorKind::Canceled));
    assert!(has(&e.entry, CompletionFlags::RECV), "{:?}", e.entry.flags);
    assert_eq!(
        w.ep(1).cancel(5).refused(),
        ErrorKind::NoEnt,
        "cancelled twice"
    );
    assert_eq!(
        w.ep(1).cancel(12345).refused(),
        ErrorKind::NoEnt,
        "never posted"
    );
    // The next message goes to the next receive, not the cancelled one.
    let d = pattern(40, seed());
    w.send(0, 1, &d, 1);
    let r2 = w
        .recv(1, 64, FiAddr::UNSPEC, None, 6, OpFlags::empty())
        .expect("recv");
    let (c, _) = w.ok(1);
    assert_eq!((c.context, c.len), (6, 40));
    same("after cancel", &r2[..40], &d);
    assert!(
        r.iter().all(|&b| b == 0xEE),
        "the cancelled receive was written"
    );
    w.ok(0);
    w.nothing(1);
    let fresh = w.domain.endpoint(&info).expect("endpoint");
    assert_eq!(
        fresh.cancel(1).refused(),
        ErrorKind::OpBadState,
        "not enabled"
    );
}

/// fi_endpoint(3)'s enable rules: data operations before enable are
/// `OpBadState`; enable needs an AV (`NoAv`) and a CQ (`NoCq`); a CQ
/// bound for neither direction is `BadFlags`; binding after enable and a
/// second enable are `OpBadState`.
pub fn enable_rules(rig: &Rig) {
    let info = rig.base();
    let w = rig.world(&info, 1, Opts::default());
    let d = w.domain.as_ref();
    let ep = d.endpoint(&info).expect("endpoint");
    assert_eq!(
        ep.inject(b"x", w.addr[0], None).refused(),
        ErrorKind::OpBadState,
        "inject before enable"
    );
    let v = iov_of(leak(vec![0; 8]));
    // SAFETY: leaked buffer.
    let r = unsafe { ep.recvmsg(&m(&v, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty()) };
    assert_eq!(r.refused(), ErrorKind::OpBadState, "recv before enable");
    assert_eq!(
        ep.enable().refused(),
        ErrorKind::NoAv,
        "enable without AV or CQ"
    );
    let cq = d
        .cq(&CqAttr {
            wait_obj: WaitObj::Unspec,
            ..CqAttr::default()
        })
        .expect("cq");
    let bind = |ep: &dyn Endpoint, transmit, recv| {
        ep.bind(Bind::Cq {
            cq: cq.as_ref(),
            transmit,
            recv,
            selective: false,
        })
    };
    assert_eq!(
        bind(ep.as_ref(), false, false).refused(),
        ErrorKind::BadFlags
    );
    bind(ep.as_ref(), true, true).expect("bind cq");
    assert_eq!(ep.enable().refused(), ErrorKind::NoAv, "enable without AV");
    let ep2 = d.endpoint(&info).expect("endpoint");
    ep2.bind(Bind::Av(w.av.as_ref())).expect("bind av");
    assert_eq!(ep2.enable().refused(), ErrorKind::NoCq, "enable without CQ");
    bind(ep2.as_ref(), true, true).expect("bind cq");
    ep2.enable().expect("enable");
    assert_eq!(
        ep2.enable().refused(),
        ErrorKind::OpBadState,
        "second enable"
    );
    assert_eq!(
        ep2.bind(Bind::Av(w.av.as_ref())).refused(),
        ErrorKind::OpBadState,
        "bind after enable"
    );
    assert_eq!(
        bind(ep2.as_ref(), true, true).refused(),
        ErrorKind::OpBadState,
        "bind a CQ after enable"
    );
}

/// fi_av(3): lookup gives the inserted name; an address never inserted,
/// and a removed one, are `NoEnt` for sends and lookups (so is
/// FI_ADDR_UNSPEC, which no AV entry is); a message from a removed peer reports FI_ADDR_NOTAVAIL
/// as its source; a peer inserted again is reachable again.
pub fn addresses(rig: &Rig) {
    let w = rig.world(&rig.base(), 2, Opts::default());
    let names: Vec<_> = w
        .eps
        .iter()
        .map(|e| e.ep.getname().expect("getname"))
        .collect();
    assert_eq!(w.av.lookup(w.addr[1]).expect("lookup"), names[1]);
    let never = FiAddr(w.addr.iter().map(|a| a.0).max().unwrap_or(0) + 1000);
    assert_eq!(
        w.av.lookup(never).refused(),
        ErrorKind::NoEnt,
        "lookup never inserted"
    );
    assert_eq!(
        w.ep(0).inject(b"x", never, None).refused(),
        ErrorKind::NoEnt,
        "inject to never inserted"
    );
    assert_eq!(
        w.post(0, never, Op::Send, b"abc", 1, OpFlags::empty())
            .refused(),
        ErrorKind::NoEnt,
        "send to never inserted"
    );
    assert_eq!(
        w.ep(0).inject(b"x", FiAddr::UNSPEC, None).refused(),
        ErrorKind::NoEnt,
        "inject to FI_ADDR_UNSPEC"
    );
    w.nothing(0);
    // Traffic both ways first, so that any connection exists.
    let d = pattern(20, seed());
    w.recv(1, 64, FiAddr::UNSPEC, None, 1, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, &d, 2);
    assert_eq!(w.ok(1).1, w.addr[0]);
    w.ok(0);
    w.recv(0, 64, FiAddr::UNSPEC, None, 1, OpFlags::empty())
        .expect("recv");
    w.send(1, 0, &d, 2);
    assert_eq!(w.ok(0).1, w.addr[1]);
    w.ok(1);
    // Remove endpoint 0: its messages arrive from FI_ADDR_NOTAVAIL.
    w.av.remove(&[w.addr[0]]).expect("remove");
    assert_eq!(
        w.av.lookup(w.addr[0]).refused(),
        ErrorKind::NoEnt,
        "lookup removed"
    );
    assert_eq!(
        w.av.remove(&[w.addr[0]]).refused(),
        ErrorKind::NoEnt,
        "remove twice"
    );
    assert_eq!(
        w.ep(1).inject(b"x", w.addr[0], None).refused(),
        ErrorKind::NoEnt,
        "inject to removed"
    );
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 3, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, &d, 4);
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, e.len, src),
        (3, 20, FiAddr::NOTAVAIL),
        "source of a removed peer"
    );
    same("from a removed peer", &r[..20], &d);
    w.ok(0);
    // Inserted again: reachable, and named as a source again.
    let mut again = [FiAddr(0)];
    assert_eq!(
        w.av.insert(std::slice::from_ref(&names[0]), &mut again)
            .expect("insert"),
        1
    );
    assert_eq!(w.av.lookup(again[0]).expect("lookup"), names[0]);
    let r = w
        .recv(0, 64, FiAddr::UNSPEC, None, 5, OpFlags::empty())
        .expect("recv");
    w.post(1, again[0], Op::Send, &d, 6, OpFlags::empty())
        .expect("send to the re-inserted");
    let (e, src) = w.ok(0);
    assert_eq!((e.context, src), (5, w.addr[1]));
    same("to the re-inserted", &r[..20], &d);
    w.ok(1);
    let r = w
        .recv(1, 64, FiAddr::UNSPEC, None, 7, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, &d, 8);
    let (e, src) = w.ok(1);
    assert_eq!(
        (e.context, src),
        (7, again[0]),
        "the re-inserted peer as source"
    );
    same("from the re-inserted", &r[..20], &d);
    w.ok(0);
}

/// RMA protection (fi_rma(3), fi_mr(3)): writes and reads within a region
/// with the right access work; a wrong key ([`Rig::bad_key`]), a range
/// past the region's end (`Access`), a write to a read-only region and a
/// read of a write-only one (`Access`) fail as error completions, and
/// nothing is written; the key of a closed region is a wrong key; a
/// region closed while a write into it is in flight ends that write with
/// success or the wrong-key error, never a hang.
///
/// Each refusal runs on fresh endpoints, so that each is checked on its
/// own; [`errors_spare_the_endpoint`] checks that an endpoint goes on
/// after one.
pub fn rma_protection(rig: &Rig) {
    let Some(info) = rig.offers(Caps::RMA | DIRECTIONS, "RMA protection") else {
        return;
    };
    for only in 0..RMA_CASES + 2 {
        rma_protection_case(rig, &info, only);
    }
}

/// The refusals of [`rma_protection`], and a stale key and a region
/// closed in use after them.
const RMA_CASES: usize = 7;

fn rma_protection_case(rig: &Rig, info: &Info, only: usize) {
    let w = rig.world(info, 2, Opts::default());
    let n = 4096;
    let (rw, rwb) = w.region(n, 0, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let (ro, rob) = w.region(n, 1, MrAccess::REMOTE_READ);
    let (wo, wob) = w.region(n, 2, MrAccess::REMOTE_WRITE);
    let at = |b: &[u8], off: usize, len: usize, key: u64| RmaIov {
        addr: w.raddr(b, off),
        len,
        key,
    };
    // Within bounds, with the right access.
    let d = pattern(n, seed());
    w.rma(true, leak(d.clone()), at(rwb, 0, n, rw.key()), 1)
        .expect("write");
    let (e, _) = w.ok(0);
    assert_eq!(e.context, 1);
    assert!(
        has(&e, CompletionFlags::RMA | CompletionFlags::WRITE),
        "{:?}",
        e.flags
    );
    same("written", rwb, &d);
    let back = leak(vec![0; 100]);
    let bp = back.as_ptr();
    w.rma(false, back, at(rwb, 1000, 100, rw.key()), 2)
        .expect("read");
    let (e, _) = w.ok(0);
    assert_eq!(e.context, 2);
    assert!(
        has(&e, CompletionFlags::RMA | CompletionFlags::READ),
        "{:?}",
        e.flags
    );
    // SAFETY: the leaked read buffer, written before the completion above.
    let got = unsafe { std::slice::from_raw_parts(bp, 100) };
    same("read", got, &d[1000..1100]);
    let wrong = wrong_key(&[rw.key(), ro.key(), wo.key()]);
    let cases: [(&str, bool, RmaIov, &[u8], ErrorKind); RMA_CASES] = [
        (
            "write, wrong key",
            true,
            at(rwb, 0, 64, wrong),
            rwb,
            rig.bad_key,
        ),
        (
            "read, wrong key",
            false,
            at(rwb, 0, 64, wrong),
            rwb,
            rig.bad_key,
        ),
        (
            "write past the end",
            true,
            at(rwb, n - 32, 64, rw.key()),
            rwb,
            ErrorKind::Access,
        ),
        (
            "read past the end",
            false,
            at(rwb, n - 32, 64, rw.key()),
            rwb,
            ErrorKind::Access,
        ),
        (
            "write starting past the end",
            true,
            at(rwb, n + 64, 8, rw.key()),
            rwb,
            ErrorKind::Access,
        ),
        (
            "write to a read-only region",
            true,
            at(rob, 0, 64, ro.key()),
            rob,
            ErrorKind::Access,
        ),
        (
            "read of a write-only region",
            false,
            at(wob, 0, 64, wo.key()),
            wob,
            ErrorKind::Access,
        ),
    ];
    for (k, (what, write, remote, target, want)) in cases.into_iter().enumerate() {
        if k != only {
            continue;
        }
        let before = target.to_vec();
        let local = leak(pattern(remote.len, seed()));
        let lp = local.as_ptr();
        let lcopy = local.to_vec();
        let ctx = 10 + k as u64;
        match w.rma(write, local, remote, ctx) {
            Ok(()) => {
                let e = w.err(0);
                assert_eq!((e.entry.context, e.err), (ctx, want), "{what}");
            }
            Err(e) => assert_eq!(e.kind(), want, "{what}, refused at once"),
        }
        same(&format!("target after {what}"), target, &before);
        if !write {
            // SAFETY: the leaked local buffer; the operation has ended.
            let got = unsafe { std::slice::from_raw_parts(lp, remote.len) };
            same(&format!("local after {what}"), got, &lcopy);
        }
    }
    // The key of a closed region is a wrong key.
    if only == RMA_CASES {
        let (stale, sb) = w.region(n, 3, MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ);
        let key = stale.key();
        drop(stale);
        w.rma(true, leak(pattern(64, seed())), at(sb, 0, 64, key), 30)
            .expect("post");
        let e = w.err(0);
        assert_eq!(
            (e.entry.context, e.err),
            (30, rig.bad_key),
            "write with a closed region's key"
        );
        assert!(sb.iter().all(|&b| b == 3), "a closed region was written");
    }
    // Closed while a write into it is in flight.
    if only == RMA_CASES + 1 {
        let big = 4 << 20;
        let (busy, bb) = w.region(big, 4, MrAccess::REMOTE_WRITE);
        w.rma(
            true,
            leak(pattern(big, seed())),
            at(bb, 0, big, busy.key()),
            31,
        )
        .expect("post");
        drop(busy);
        match w.next(0) {
            Ok((e, _)) => assert_eq!(e.context, 31),
            Err(e) => assert_eq!(
                (e.entry.context, e.err),
                (31, rig.bad_key),
                "write into a region closed meanwhile"
            ),
        }
    }
    w.nothing(1);
    drop((rw, ro, wo));
}

/// After a refused RMA (a wrong key), the endpoint goes on: the next
/// write to the same peer and a message both ways complete. An RDM
/// endpoint is connectionless to the application: one failed operation
/// does not fail the ones after it.
pub fn errors_spare_the_endpoint(rig: &Rig) {
    let Some(info) = rig.offers(Caps::RMA | DIRECTIONS, "errors spare the endpoint") else {
        return;
    };
    let w = rig.world(&info, 2, Opts::default());
    let (mr, b) = w.region(256, 0, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let at = RmaIov {
        addr: w.raddr(b, 0),
        len: 64,
        key: mr.key(),
    };
    w.rma(
        true,
        leak(pattern(64, seed())),
        RmaIov {
            key: wrong_key(&[mr.key()]),
            ..at
        },
        1,
    )
    .expect("post");
    assert_eq!(w.err(0).err, rig.bad_key);
    let d = pattern(64, seed());
    w.rma(true, leak(d.clone()), at, 2)
        .expect("write after a refusal");
    let r = w.next(0);
    assert!(
        matches!(r, Ok((e, _)) if e.context == 2),
        "the write after a refused one: {r:?}"
    );
    same("written after a refusal", &b[..64], &d);
    for (from, to) in [(0, 1), (1, 0)] {
        let m = pattern(32, seed());
        let r = w
            .recv(to, 64, FiAddr::UNSPEC, None, 3, OpFlags::empty())
            .expect("recv");
        w.send(from, to, &m, 4);
        assert_eq!(
            w.ok(to).0.context,
            3,
            "message {from} -> {to} after a refusal"
        );
        same("message after a refusal", &r[..32], &m);
        assert_eq!(w.ok(from).0.context, 4);
    }
    drop(mr);
}

/// Atomic protection (fi_atomic(3)): a fetching sum works; a wrong key
/// ([`Rig::bad_key`]), an element past the region's end (`Access`) and a
/// sum into a read-only region (`Access`) fail as error completions and
/// change nothing.
///
/// Each refusal runs on fresh endpoints, as in [`rma_protection`].
pub fn atomic_protection(rig: &Rig) {
    let Some(info) = rig.offers(Caps::ATOMIC | DIRECTIONS, "atomic protection") else {
        return;
    };
    for only in 0..3 {
        atomic_protection_case(rig, &info, only);
    }
}

fn atomic_protection_case(rig: &Rig, info: &Info, only: u64) {
    let w = rig.world(info, 2, Opts::default());
    let (rw, rwb) = w.region(64, 0, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let (ro, rob) = w.region(64, 0, MrAccess::REMOTE_READ);
    let word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let atomic = |target: &[u8],
                  off: usize,
                  key: u64,
                  ctx: u64,
                  fetch: bool|
     -> (crate::Result<()>, *const u8) {
        let opnd = aligned(8, 0);
        opnd.copy_from_slice(&5u64.to_le_bytes());
        let res = aligned(8, 0xEE);
        let rp = res.as_ptr();
        let ov = iov_of(opnd);
        let rv = iov_of(res);
        let r = [RmaIov {
            addr: w.raddr(target, off),
            len: 1,
            key,
        }];
        let msg = AtomicMsg {
            iov: &ov,
            desc: &[],
            addr: w.addr[1],
            rma_iov: &r,
            datatype: Datatype::Uint64,
            op: AtomicOp::Sum,
            result: if fetch { &rv } else { &[] },
            compare: &[],
            context: ctx,
            data: 0,
        };
        // SAFETY: the buffers are leaked.
        (
            w.retry(|| unsafe { w.ep(0).atomicmsg(&msg, OpFlags::empty()) }),
            rp,
        )
    };
    let (r, rp) = atomic(rwb, 8, rw.key(), 1, true);
    r.expect("fetching sum");
    let (e, _) = w.ok(0);
    assert_eq!(e.context, 1);
    assert!(has(&e, CompletionFlags::ATOMIC), "{:?}", e.flags);
    // SAFETY: the leaked result buffer, written before the completion.
    let fetched = unsafe { std::slice::from_raw_parts(rp, 8) };
    assert_eq!(word(fetched), 0, "fetched");
    assert_eq!(word(&rwb[8..]), 5, "summed");
    let (r, _) = atomic(rwb, 8, rw.key(), 2, false);
    r.expect("sum");
    w.ok(0);
    assert_eq!(word(&rwb[8..]), 10);
    let wrong = wrong_key(&[rw.key(), ro.key()]);
    for (what, target, off, key, want, ctx) in [
        ("wrong key", rwb, 0, wrong, rig.bad_key, 10),
        ("past the end", rwb, 64, rw.key(), ErrorKind::Access, 11),
        ("read-only region", rob, 0, ro.key(), ErrorKind::Access, 12),
    ] {
        if ctx != 10 + only {
            continue;
        }
        let before = target.to_vec();
        let (r, _) = atomic(target, off, key, ctx, true);
        match r {
            Ok(()) => {
                let e = w.err(0);
                assert_eq!((e.entry.context, e.err), (ctx, want), "{what}");
            }
            Err(e) => assert_eq!(e.kind(), want, "{what}, refused at once"),
        }
        same(&format!("target after {what}"), target, &before);
    }
    drop((rw, ro));
}

/// fi_cq(3): an empty CQ reads `Again` (read, readerr, and sread on
/// timeout); an error entry makes reads say `Avail` until readerr takes
/// it, and the successes behind it follow; each format keeps only its
/// fields; remote CQ data arrives with FI_REMOTE_CQ_DATA; with
/// FI_SELECTIVE_COMPLETION only FI_COMPLETION operations report success.
pub fn cq_behaviour(rig: &Rig) {
    let w = rig.world(&rig.base(), 2, Opts::default());
    let cq = w.eps[1].cq.as_ref();
    let mut e = [CqEntry::default()];
    assert_eq!(cq.read(&mut e).refused(), ErrorKind::Again, "read empty");
    assert_eq!(cq.readerr().refused(), ErrorKind::Again, "readerr empty");
    assert_eq!(
        cq.sread(&mut e, Some(Duration::from_millis(5))).refused(),
        ErrorKind::Again,
        "sread timeout"
    );
    // An error entry (truncation) ahead of a success.
    w.recv(1, 4, FiAddr::UNSPEC, None, 1, OpFlags::empty())
        .expect("recv");
    w.recv(1, 64, FiAddr::UNSPEC, None, 2, OpFlags::empty())
        .expect("recv");
    w.send(0, 1, b"too long", 3);
    w.send(0, 1, b"fits", 4);
    let deadline = Instant::now() + T;
    loop {
        w.spin();
        match cq.read(&mut e) {
            Err(err) if err.kind() == ErrorKind::Avail => break,
            Err(err) if err.kind() == ErrorKind::Again => {}
            other => panic!("expected Avail, got {other:?}"),
        }
        assert!(Instant::now() < deadline, "no error entry");
    }
    for _ in 0..20 {
        w.spin();
    }
    assert_eq!(cq.read(&mut e).refused(), ErrorKind::Avail, "still Avail");
    let err = cq.readerr().expect("readerr");
    assert_eq!((err.entry.context, err.err), (1, ErrorKind::Trunc));
    assert_eq!(w.ok(1).0.context, 2, "the success behind the error");
    w.ok(0);
    w.ok(0);
    // Remote CQ data and formats.
    if let Some(info) = rig.offers(
        Caps::TAGGED | Caps::REMOTE_CQ_DATA,
        "CQ formats and remote CQ data",
    ) {
        let rf = CompletionFlags::TAGGED | CompletionFlags::RECV | CompletionFlags::REMOTE_CQ_DATA;
        for (format, want) in [
            (
                CqFormat::Context,
                CqEntry {
                    context: 5,
                    ..CqEntry::default()
                },
            ),
            (
                CqFormat::Msg,
                CqEntry {
                    context: 5,
                    flags: rf,
                    len: 3,
                    ..CqEntry::default()
                },
            ),
            (
                CqFormat::Data,
                CqEntry {
                    context: 5,
                    flags: rf,
                    len: 3,
                    data: 8,
                    ..CqEntry::default()
                },
            ),
            (
                CqFormat::Tagged,
                CqEntry {
                    context: 5,
                    flags: rf,
                    len: 3,
                    data: 8,
                    tag: 77,
                    ..CqEntry::default()
                },
            ),
        ] {
            let f = rig.world(
                &info,
                2,
                Opts {
                    format,
                    ..Opts::default()
                },
            );
            f.recv(1, 3, FiAddr::UNSPEC, Some((77, 0)), 5, OpFlags::empty())
                .expect("trecv");
            f.retry(|| f.ep(0).tinject(b"abc", f.addr[1], 77, Some(8)))
                .expect("tinject");
            let (got, _) = f.ok(1);
            assert_eq!(got, want, "{format:?}");
        }
    }
    // Selective completion on endpoint 0.
    let s = rig.world(
        &rig.base(),
        2,
        Opts {
            selective: true,
            ..Opts::default()
        },
    );
    for ctx in [10, 11] {
        s.recv(1, 64, FiAddr::UNSPEC, None, ctx, OpFlags::empty())
            .expect("recv");
    }
    s.post(0, s.addr[1], Op::Send, b"quiet", 1, OpFlags::empty())
        .expect("send");
    s.post(0, s.addr[1], Op::Send, b"loud", 2, OpFlags::COMPLETION)
        .expect("send");
    assert_eq!(s.ok(1).0.context, 10);
    assert_eq!(s.ok(1).0.context, 11);
    assert_eq!(s.ok(0).0.context, 2, "only FI_COMPLETION");
    s.nothing(0);
}

/// fi_eq(3): an empty EQ reads `Again` (read, readerr, and sread on
/// timeout); an event written comes back unchanged, once.
pub fn eq_behaviour(rig: &Rig) {
    let w = rig.world(&rig.base(), 1, Opts::default());
    let eq = w
        .fabric
        .eq(&EqAttr {
            wait_obj: WaitObj::Unspec,
            ..EqAttr::default()
        })
        .expect("eq");
    assert_eq!(eq.read().refused(), ErrorKind::Again, "read empty");
    assert_eq!(eq.readerr().refused(), ErrorKind::Again, "readerr empty");
    assert_eq!(
        eq.sread(Some(Duration::from_millis(5))).refused(),
        ErrorKind::Again,
        "sread timeout"
    );
    let ev = EqEvent::Written {
        event: 0x77,
        data: pattern(24, seed()),
    };
    eq.write(ev.clone()).expect("write");
    assert_eq!(eq.sread(Some(T)).expect("sread"), ev);
    assert_eq!(eq.read().refused(), ErrorKind::Again, "read once");
}

/// fi_cntr(3): send and receive counters count completions, errors
/// (truncation) apart; set / add; wait returns at the threshold, says
/// `TimedOut` below it, and drives progress while blocking; READ / WRITE
/// counters count RMA (and its errors); REMOTE_WRITE counters count
/// writes into the target (FI_RMA_EVENT).
pub fn counters(rig: &Rig) {
    let w = rig.world(
        &rig.base(),
        2,
        Opts {
            counters: &[&[Caps::SEND], &[Caps::RECV]],
            ..Opts::default()
        },
    );
    let (sent, recvd) = (&w.cntrs[0][0], &w.cntrs[1][0]);
    for k in 0..3u64 {
        w.recv(1, 2, FiAddr::UNSPEC, None, k, OpFlags::empty())
            .expect("recv");
        w.send(0, 1, if k == 2 { b"too long" } else { b"ok" }, 10 + k);
        let _ = w.next(1);
        w.ok(0);
    }
    assert_eq!((sent.read(), sent.readerr()), (3, 0), "send counter");
    assert_eq!((recvd.read(), recvd.readerr()), (2, 1), "receive counter");
    recvd.set(10).expect("set");
    recvd.add(1).expect("add");
    assert_eq!(recvd.read(), 11);
    recvd.adderr(2).expect("adderr");
    assert_eq!(recvd.readerr(), 3);
    recvd.seterr(1).expect("seterr");
    assert_eq!(recvd.readerr(), 1);
    sent.wait(3, Some(Duration::from_millis(10)))
        .expect("wait at the threshold");
    assert_eq!(
        sent.wait(5, Some(Duration::from_millis(10))).refused(),
        ErrorKind::TimedOut
    );
    // A blocking wait drives the receiver's progress.
    w.recv(1, 2, FiAddr::UNSPEC, None, 20, OpFlags::empty())
        .expect("recv");
    let before = recvd.read();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            w.post(0, w.addr[1], Op::Send, b"hi", 21, OpFlags::empty())
                .expect("send");
        });
        recvd
            .wait(before + 1, Some(T))
            .expect("wait drives progress");
    });
    w.ok(0);
    let Some(info) = rig.offers(Caps::RMA | DIRECTIONS, "RMA counters") else {
        return;
    };
    let rma_event = rig.offers(
        Caps::RMA | DIRECTIONS | Caps::RMA_EVENT,
        "remote RMA counters",
    );
    let remote: &[Caps] = if rma_event.is_some() {
        &[Caps::REMOTE_WRITE, Caps::REMOTE_READ]
    } else {
        &[]
    };
    let counters: [&[Caps]; 2] = [&[Caps::READ, Caps::WRITE], remote];
    let w = rig.world(
        rma_event.as_ref().unwrap_or(&info),
        2,
        Opts {
            counters: &counters,
            ..Opts::default()
        },
    );
    let (mr, b) = w.region(256, 0, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let at = RmaIov {
        addr: w.raddr(b, 0),
        len: 64,
        key: mr.key(),
    };
    w.rma(true, leak(pattern(64, seed())), at, 1)
        .expect("write");
    w.ok(0);
    w.rma(false, leak(vec![0; 64]), at, 2).expect("read");
    w.ok(0);
    w.rma(
        true,
        leak(vec![0; 64]),
        RmaIov {
            key: wrong_key(&[mr.key()]),
            ..at
        },
        3,
    )
    .expect("write");
    w.err(0);
    let (read, write) = (&w.cntrs[0][0], &w.cntrs[0][1]);
    assert_eq!((read.read(), read.readerr()), (1, 0), "READ counter");
    assert_eq!((write.read(), write.readerr()), (1, 1), "WRITE counter");
    if rma_event.is_some() {
        let (rw, rr) = (&w.cntrs[1][0], &w.cntrs[1][1]);
        let deadline = Instant::now() + T;
        while (rw.read(), rr.read()) != (1, 1) {
            w.spin();
            assert!(
                Instant::now() < deadline,
                "remote counters {} {}",
                rw.read(),
                rr.read()
            );
        }
    }
    drop(mr);
}

/// Error completions: a truncated receive (eager and rendezvous) is an
/// error entry with `Trunc`, its context, flags, the bytes placed (`len`,
/// the message's start) and those cut (`olen`); the sender's completion
/// is a success; a tagged truncation also carries the tag.
pub fn error_completions(rig: &Rig) {
    let w = rig.world(&rig.base(), 2, Opts::default());
    for (k, (n, cap)) in [(10usize, 4usize), (1 << 20, 100_000)]
        .into_iter()
        .enumerate()
    {
        let d = pattern(n, seed());
        let r = w
            .recv(1, cap, FiAddr::UNSPEC, None, 1 + k as u64, OpFlags::empty())
            .expect("recv");
        w.send(0, 1, &d, 10 + k as u64);
        let e = w.err(1);
        assert_eq!(
            (e.err, e.entry.context, e.entry.len, e.olen),
            (ErrorKind::Trunc, 1 + k as u64, cap, n - cap),
            "truncation of {n} into {cap}"
        );
        assert!(
            has(&e.entry, CompletionFlags::RECV | CompletionFlags::MSG),
            "{:?}",
            e.entry.flags
        );
        same("the truncated message's start", r, &d[..cap]);
        assert_eq!(w.ok(0).0.context, 10 + k as u64, "the sender's completion");
    }
    if let Some(info) = rig.offers(Caps::TAGGED, "tagged truncation") {
        let t = rig.world(&info, 2, Opts::default());
        let d = pattern(40, seed());
        t.recv(1, 8, FiAddr::UNSPEC, Some((3, 0)), 7, OpFlags::empty())
            .expect("trecv");
        t.tsend(0, 1, 3, &d, 8);
        let e = t.err(1);
        assert_eq!(
            (e.err, e.entry.context, e.entry.len, e.olen, e.entry.tag),
            (ErrorKind::Trunc, 7, 8, 32, 3)
        );
        assert!(
            has(&e.entry, CompletionFlags::RECV | CompletionFlags::TAGGED),
            "{:?}",
            e.entry.flags
        );
        t.ok(0);
    }
}
