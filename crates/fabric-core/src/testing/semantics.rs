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
        $crate::semantics_tests!(@each $rig;
            messages,
            unexpected_burst,
            tagged,
            peek_claim_discard,
            directed_recv,
            multi_recv,
            cancel,
            enable_rules,
            addresses,
            rma_protection,
            rma_burst,
            rma_fan_out,
            errors_spare_the_endpoint,
            atomic_protection,
            cq_behaviour,
            eq_behaviour,
            counters,
            error_completions,
            srx_messages,
            srx_tagged,
            srx_multi_recv,
            srx_flow_control,
            srx_close,
            srx_cancel,
        );
    };
    (@each $rig:path; $($check:ident,)*) => {
        $(
            #[test]
            fn $check() {
                if let Some(r) = $rig() {
                    $crate::testing::semantics::$check(&r);
                }
            }
        )*
    };
}

mod messages;
mod protection;
mod queues;
mod rules;
mod srx;
pub use messages::{
    cancel, directed_recv, messages, multi_recv, peek_claim_discard, tagged, unexpected_burst,
};
pub use protection::{
    atomic_protection, errors_spare_the_endpoint, rma_burst, rma_fan_out, rma_protection,
};
pub use queues::{counters, cq_behaviour, eq_behaviour, error_completions};
pub use rules::{addresses, enable_rules};
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

    /// The next `n` completions of endpoint `i`, whose contexts must be
    /// `0..n`, each once (`what`: the operations, for the message).
    pub fn each_once(&self, i: usize, n: usize, what: &str) -> Vec<(CqEntry, FiAddr)> {
        let mut done = vec![false; n];
        (0..n)
            .map(|_| {
                let (e, src) = self.ok(i);
                let k = usize::try_from(e.context).expect("context");
                assert!(
                    k < n && !done[k],
                    "{what} {k}: completed twice, or never posted"
                );
                done[k] = true;
                (e, src)
            })
            .collect()
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
