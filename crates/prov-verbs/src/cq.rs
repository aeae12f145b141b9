//! Completion queues: a hardware CQ (MSG queue pairs post their work
//! requests against it) plus a software queue ([`CqCore`]) for
//! completions the provider makes itself (errors, and everything of RDM
//! endpoints, whose protocol engine turns its own hardware completions
//! into application completions).
//!
//! Reading polls the hardware CQ straight into the caller's array: one
//! `ibv_poll_cq` (a call through the driver's ops table, no system call on
//! hardware that polls from user space) per read, into an uninitialised
//! batch on the stack; no allocation, no system call, and no lock but the
//! read side of the queue-pair map, taken only when a work completion came
//! (one lookup per run of completions of the same queue pair: one
//! comparison for the CQ's first queue pair, a multiplicative hash of the
//! QP number for others). The map holds its queue pairs strongly until
//! their endpoint detaches them, so routing a completion counts no
//! references. A read that finds the hardware
//! CQ empty costs the poll and a few atomic loads: protocol engines are
//! progressed only when the CQ has some (RDM, DGRAM). Blocking reads spin
//! briefly (without a PAUSE hint, which leaves the translated code under
//! emulation), then arm the CQ (`ibv_req_notify_cq`) and sleep on its
//! completion channel.
//!
//! The wait fd (`fi_control(FI_GETWAIT)`) is an epoll set, made when first
//! asked for, of the software queue's eventfd, the completion channel and
//! the fds of the engines that deliver here (their CQs' channels and
//! rdma_cm fds). `trywait` takes the channels' events, arms them again and
//! polls once (what it finds stays in the software queue for the next
//! read); after it answered `Ok` the fd turns readable at the next
//! completion with no thread in the CQ. Reads pay for this only once a
//! wait fd was asked for. The domain keeps a second set of the same
//! channels for its counters' wait fds.

use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use fabric_core::kit::binds::CqSink;
use fabric_core::kit::cq::CqCore;
use fabric_core::kit::hash::IdMap;
use fabric_core::kit::objects::{Armed, Progress, add_fds};
use fabric_core::kit::wait::{FdSet, PollSet};
use fabric_core::objects::{
    CompletionQueue, CqAttr, CqEntry, CqErrEntry, CqFormat, FiAddr, WaitObj,
};
use fabric_core::{Error, ErrorKind, Result};
use rustix::event::{PollFd, PollFlags, Timespec, poll};

use crate::ep::QpData;
use crate::raw::device::Context;
use crate::raw::verbs::HwCq;
use crate::raw::wr::Wc;

/// Work completions polled per `ibv_poll_cq` call.
const BATCH: usize = 16;
/// Smallest hardware CQ (queue pairs of several endpoints share it).
const MIN_HW_CQE: usize = 4096;
/// How long a blocking read polls before it arms the CQ and sleeps.
const SPIN: Duration = Duration::from_micros(20);

/// The queue pairs whose work completions a CQ routes, by QP number. The
/// first one attached is kept apart: a CQ of one endpoint (the common
/// case) finds it with one comparison.
#[derive(Default)]
struct Sinks {
    first: Option<(u32, Arc<QpData>)>,
    rest: IdMap<u32, Arc<QpData>>,
}

impl Sinks {
    #[inline]
    fn get(&self, qp_num: u32) -> Option<&Arc<QpData>> {
        match &self.first {
            Some((q, s)) if *q == qp_num => Some(s),
            _ if self.rest.is_empty() => None,
            _ => self.rest.get(&qp_num),
        }
    }

    fn insert(&mut self, qp_num: u32, sink: Arc<QpData>) -> Option<Arc<QpData>> {
        match &mut self.first {
            Some((q, s)) if *q == qp_num => Some(std::mem::replace(s, sink)),
            Some(_) => self.rest.insert(qp_num, sink),
            None => self.first.replace((qp_num, sink)).map(|(_, s)| s),
        }
    }

    fn remove(&mut self, qp_num: u32) -> Option<Arc<QpData>> {
        match &self.first {
            Some((q, _)) if *q == qp_num => self.first.take().map(|(_, s)| s),
            _ => self.rest.remove(&qp_num),
        }
    }
}

/// The shared part of a CQ.
pub(crate) struct CqShared {
    hw: HwCq,
    core: CqCore,
    sinks: RwLock<Sinks>,
    engines: RwLock<Vec<Weak<dyn Progress>>>,
    /// Whether `engines` was ever given one: reads of CQs without engines
    /// (MSG endpoints') skip its lock.
    has_engines: AtomicBool,
    armed: AtomicBool,
    fd_users: AtomicBool,
    sleepers: AtomicU32,
    /// The CQ's wait fd, made when first asked for: an epoll set of the
    /// software queue's eventfd, the hardware CQ's channel and the fds of
    /// the engines that deliver here.
    wait_set: OnceLock<PollSet>,
    /// The domain's progress set (its counters' wait fds nest it): once
    /// made, this CQ's channel and its engines' fds join it.
    domain_set: Arc<OnceLock<PollSet>>,
}

impl std::fmt::Debug for CqShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqShared")
            .field("hw", &self.hw)
            .finish_non_exhaustive()
    }
}

impl CqShared {
    /// A CQ on `ctx` of at least `size` entries.
    pub(crate) fn new(
        ctx: Context,
        size: usize,
        max_cqe: usize,
        domain_set: Arc<OnceLock<PollSet>>,
    ) -> Result<Arc<CqShared>> {
        let cqe = size.max(MIN_HW_CQE).min(max_cqe.max(1));
        let hw = HwCq::new(ctx, i32::try_from(cqe).unwrap_or(i32::MAX))?;
        Ok(Arc::new(CqShared {
            hw,
            core: CqCore::new(size)?,
            sinks: RwLock::new(Sinks::default()),
            engines: RwLock::new(Vec::new()),
            has_engines: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            fd_users: AtomicBool::new(false),
            sleepers: AtomicU32::new(0),
            wait_set: OnceLock::new(),
            domain_set,
        }))
    }

    /// The hardware CQ.
    pub(crate) fn hw(&self) -> &HwCq {
        &self.hw
    }

    /// Routes the work completions of QP `qp_num` to `sink`, which this
    /// CQ holds until [`detach`](CqShared::detach).
    pub(crate) fn attach(&self, qp_num: u32, sink: Arc<QpData>) {
        let old = self
            .sinks
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(qp_num, sink);
        // Dropped outside the lock: it may hold the last reference to
        // this CQ's owner.
        drop(old);
    }

    /// Stops routing QP `qp_num` and lets its queue pair go.
    pub(crate) fn detach(&self, qp_num: u32) {
        let old = self
            .sinks
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(qp_num);
        drop(old);
    }

    /// Adds a protocol engine that delivers into this CQ and is progressed
    /// by its reads.
    pub(crate) fn add_engine(&self, e: Weak<dyn Progress>) {
        let mut v = self
            .engines
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        v.retain(|w| w.strong_count() > 0 && !Weak::ptr_eq(w, &e));
        // Under the write lock: a set made at the same time either sees
        // the engine in the list or is seen here.
        if let Some(p) = e.upgrade() {
            for set in [self.wait_set.get(), self.domain_set.get()]
                .into_iter()
                .flatten()
            {
                if let Err(err) = add_fds(set, &*p) {
                    tracing::warn!(error = %err, "verbs: an engine's fds cannot join a wait fd");
                }
            }
        }
        v.push(e);
        self.has_engines.store(true, Ordering::Release);
    }

    /// The CQ's wait set, made on first use.
    fn wait_set(&self) -> Result<&PollSet> {
        if let Some(s) = self.wait_set.get() {
            return Ok(s);
        }
        // The engines' read lock keeps `add_engine` out while the set is
        // filled and published.
        let v = self
            .engines
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = self.wait_set.get() {
            return Ok(s);
        }
        let set = PollSet::new()?;
        set.add(self.core.signal().fd())?;
        set.add(self.hw.fd())?;
        for p in v.iter().filter_map(Weak::upgrade) {
            add_fds(&set, &*p)?;
        }
        Ok(self.wait_set.get_or_init(|| set))
    }

    /// Adds this CQ's channel and its engines' fds to the domain's
    /// progress set `set` (just made).
    pub(crate) fn join_domain_set(&self, set: &PollSet) -> Result<()> {
        let v = self
            .engines
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set.add(self.hw.fd())?;
        for p in v.iter().filter_map(Weak::upgrade) {
            add_fds(set, &*p)?;
        }
        Ok(())
    }

    /// The provider's part of `fi_trywait` for this CQ: takes the
    /// channel's events and arms it again, lets the engines do the same
    /// with theirs, then polls once: completions that came before the
    /// arming raise no event, so they go to the software queue, where the
    /// next read finds them.
    pub(crate) fn trywait_hw(&self) -> Result<()> {
        self.hw.consume_events();
        self.hw.arm()?;
        self.armed.store(true, Ordering::Release);
        if self.has_engines.load(Ordering::Acquire) {
            let engines: Vec<Arc<dyn Progress>> = self
                .engines
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .filter_map(Weak::upgrade)
                .collect();
            for e in engines {
                e.trywait()?;
            }
        }
        self.drain_hw()
    }

    /// Queues a completion made by the provider, waking a blocked reader.
    pub(crate) fn push(&self, e: CqEntry, src: FiAddr) {
        self.core.push(e, src);
        self.wake();
    }

    /// Queues an error completion, waking a blocked reader.
    pub(crate) fn push_err(&self, e: CqErrEntry) {
        self.core.push_err(e);
        self.wake();
    }

    fn wake(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.core.signal().notify_always();
        } else if self.fd_users.load(Ordering::Relaxed) {
            // Once per re-arm of the fd (trywait, or a read that found
            // nothing).
            self.core.signal().notify();
        }
    }

    #[inline]
    fn engines(&self) -> Result<()> {
        if self.has_engines.load(Ordering::Acquire) {
            self.progress_engines()
        } else {
            Ok(())
        }
    }

    #[inline(never)]
    fn progress_engines(&self) -> Result<()> {
        let v = self
            .engines
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for e in v.iter() {
            if let Some(e) = e.upgrade() {
                e.progress()?;
            }
        }
        Ok(())
    }

    /// Polls the hardware CQ; successes go to `out` (and `src`), or into the
    /// software queue when `out` is `None`. Returns how many went to `out`.
    #[inline]
    fn poll_hw(&self, mut out: Option<(&mut [CqEntry], Option<&mut [FiAddr]>)>) -> Result<usize> {
        // Written by the driver, never zeroed: only the `n` entries it
        // reports are read.
        let mut wcs = [MaybeUninit::<Wc>::uninit(); BATCH];
        let mut n_out = 0;
        loop {
            let room = match &out {
                Some((o, _)) => (o.len() - n_out).min(BATCH),
                None => BATCH,
            };
            if room == 0 {
                break;
            }
            let polled = self.hw.poll(&mut wcs[..room])?;
            let n = polled.len();
            if n == 0 {
                break;
            }
            let sinks = self
                .sinks
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // The sink of the previous completion: runs of one QP's
            // completions look it up once.
            let mut last: Option<(u32, Option<&Arc<QpData>>)> = None;
            for wc in polled {
                let qp_num = wc.qp_num();
                let sink = match last {
                    Some((qp, s)) if qp == qp_num => s,
                    _ => last.insert((qp_num, sinks.get(qp_num))).1,
                };
                let Some(sink) = sink else {
                    continue;
                };
                if let Some((e, from)) = sink.complete(wc, self) {
                    match &mut out {
                        Some((o, s)) => {
                            o[n_out] = e;
                            if let Some(s) = s {
                                s[n_out] = from;
                            }
                            n_out += 1;
                        }
                        None => self.core.push(e, from),
                    }
                }
            }
            drop(sinks);
            if n < room {
                break;
            }
        }
        Ok(n_out)
    }

    /// Moves completions from the hardware CQ into the software queue
    /// (progress driven by counters and other CQs).
    pub(crate) fn drain_hw(&self) -> Result<()> {
        self.poll_hw(None).map(|_| ())
    }

    #[inline]
    fn read_now(&self, out: &mut [CqEntry], mut src: Option<&mut [FiAddr]>) -> Result<usize> {
        if let Some(s) = src.as_deref() {
            if s.len() < out.len() {
                return Err(Error::inval(
                    "readfrom: the source array is shorter than the entry array",
                ));
            }
        }
        self.engines()?;
        if !self.core.is_empty() {
            return self.core.read(out, src);
        }
        if out.is_empty() {
            // Progress only.
            return self.drain_hw().and(Err(Error::again()));
        }
        let n = self.poll_hw(Some((out, src.as_deref_mut())))?;
        if n > 0 {
            return Ok(n);
        }
        self.read_empty(out, src)
    }

    /// The end of a read that found the hardware CQ empty: completions
    /// the polled ones made (errors), and the channel re-armed for fd
    /// users.
    #[inline(never)]
    fn read_empty(&self, out: &mut [CqEntry], src: Option<&mut [FiAddr]>) -> Result<usize> {
        if !self.core.is_empty() {
            return self.core.read(out, src);
        }
        if self.fd_users.load(Ordering::Relaxed) {
            // Cleared first, then looked at again: a completion queued in
            // between raises the fd anew.
            self.core.signal().rearm();
            if !self.core.is_empty() {
                return self.core.read(out, src);
            }
            self.rearm_for_fd();
            let n = self.poll_hw(Some((out, src)))?;
            if n > 0 {
                return Ok(n);
            }
        }
        Err(Error::again())
    }

    /// Keeps the channel fd meaningful for users that wait on it: takes the
    /// events that fired and arms again.
    fn rearm_for_fd(&self) {
        if self.armed.load(Ordering::Acquire) && self.hw.consume_events() == 0 {
            return;
        }
        if self.hw.arm().is_ok() {
            self.armed.store(true, Ordering::Release);
        }
    }

    fn sread(
        &self,
        out: &mut [CqEntry],
        mut src: Option<&mut [FiAddr]>,
        timeout: Option<Duration>,
        wait: WaitObj,
    ) -> Result<usize> {
        if wait == WaitObj::None {
            return Err(Error::new(
                ErrorKind::NoSys,
                "sread on a CQ opened with FI_WAIT_NONE",
            ));
        }
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        loop {
            match self.read_now(out, src.as_deref_mut()) {
                Err(e) if e.kind() == ErrorKind::Again => {}
                r => return r,
            }
            // No `spin_loop` hint: under emulation (QEMU's TCG) a PAUSE
            // leaves the translated code, which delays noticing the
            // completion; the clock read paces the loop instead.
            if start.elapsed() >= SPIN.min(timeout.unwrap_or(SPIN)) {
                break;
            }
        }
        let engines: Vec<Arc<dyn Progress>> = self
            .engines
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        loop {
            // Arm first (this CQ, and the engines' CQs as they collect
            // their fds), then look once more: a completion that arrived
            // before arming is found by the read, one after it fires a
            // channel.
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            if !self.armed.swap(true, Ordering::AcqRel) {
                if let Err(e) = self.hw.arm() {
                    self.armed.store(false, Ordering::Release);
                    self.sleepers.fetch_sub(1, Ordering::SeqCst);
                    return Err(e);
                }
            }
            let mut extra = FdSet::new(self.hw.fd());
            for e in &engines {
                e.wait_fds(&mut |fd| extra.push(fd));
            }
            let r = self.read_now(out, src.as_deref_mut());
            match r {
                Err(e) if e.kind() == ErrorKind::Again => {}
                r => {
                    self.sleepers.fetch_sub(1, Ordering::SeqCst);
                    return r;
                }
            }
            let left = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        self.sleepers.fetch_sub(1, Ordering::SeqCst);
                        return Err(Error::again());
                    }
                    Some(d - now)
                }
                None => None,
            };
            // The engines know a thread sleeps on their fds (verbs RDM
            // ticks its liveness probe's timer for it).
            let armed: Vec<Armed<'_>> = engines.iter().map(|e| Armed::new(&**e)).collect();
            let r = self.block(extra.as_slice(), left);
            drop(armed);
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            r?;
            if self.hw.consume_events() > 0 {
                self.armed.store(false, Ordering::Release);
            }
            self.core.signal().drain();
        }
    }

    fn block(&self, extra: &[BorrowedFd<'_>], left: Option<Duration>) -> Result<()> {
        let ts = left.map(|d| {
            Timespec::try_from(d).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            })
        });
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(2 + extra.len());
        fds.push(PollFd::from_borrowed_fd(self.hw.fd(), PollFlags::IN));
        fds.push(PollFd::from_borrowed_fd(
            self.core.signal().fd(),
            PollFlags::IN,
        ));
        fds.extend(
            extra
                .iter()
                .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN)),
        );
        match poll(&mut fds, ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(Error::new(ErrorKind::Io, format!("poll: {e}"))),
        }
    }
}

impl Progress for CqShared {
    fn progress(&self) -> Result<()> {
        self.engines()?;
        self.drain_hw()
    }

    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        if !self.armed.swap(true, Ordering::AcqRel) && self.hw.arm().is_err() {
            self.armed.store(false, Ordering::Release);
        }
        f(self.hw.fd());
    }
}

/// A completion queue of the verbs provider (`fi_cq`).
pub struct VerbsCq {
    shared: Arc<CqShared>,
    format: CqFormat,
    wait: WaitObj,
}

impl std::fmt::Debug for VerbsCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsCq")
            .field("format", &self.format)
            .field("wait", &self.wait)
            .finish()
    }
}

impl VerbsCq {
    pub(crate) fn new(attr: &CqAttr, shared: Arc<CqShared>) -> VerbsCq {
        VerbsCq {
            shared,
            format: attr.format,
            wait: attr.wait_obj,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<CqShared> {
        &self.shared
    }

    /// Clears the fields the CQ's format leaves out.
    #[inline]
    fn trim(&self, out: &mut [CqEntry], n: usize) {
        let out = &mut out[..n];
        match self.format {
            CqFormat::Tagged | CqFormat::Unspec => {}
            CqFormat::Context => {
                for e in out {
                    *e = CqEntry {
                        context: e.context,
                        ..CqEntry::default()
                    }
                }
            }
            CqFormat::Msg => {
                for e in out {
                    e.buf = 0;
                    e.data = 0;
                    e.tag = 0;
                }
            }
            CqFormat::Data => {
                for e in out {
                    e.tag = 0;
                }
            }
        }
    }
}

impl CompletionQueue for VerbsCq {
    fn read(&self, out: &mut [CqEntry]) -> Result<usize> {
        let n = self.shared.read_now(out, None)?;
        self.trim(out, n);
        Ok(n)
    }

    fn readfrom(&self, out: &mut [CqEntry], src: &mut [FiAddr]) -> Result<usize> {
        let n = self.shared.read_now(out, Some(src))?;
        self.trim(out, n);
        Ok(n)
    }

    fn readerr(&self) -> Result<CqErrEntry> {
        self.shared.core.read_err()
    }

    fn sread(&self, out: &mut [CqEntry], timeout: Option<Duration>) -> Result<usize> {
        let n = self.shared.sread(out, None, timeout, self.wait)?;
        self.trim(out, n);
        Ok(n)
    }

    fn sreadfrom(
        &self,
        out: &mut [CqEntry],
        src: &mut [FiAddr],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        let n = self.shared.sread(out, Some(src), timeout, self.wait)?;
        self.trim(out, n);
        Ok(n)
    }

    fn signal(&self) -> Result<()> {
        self.shared.core.signal().notify_always();
        Ok(())
    }

    /// An epoll set of the completion channel, the software queue's
    /// eventfd and the fds of the engines that deliver here: after
    /// [`trywait`](CompletionQueue::trywait) answered `Ok` (or a read
    /// found the CQ empty), it becomes readable when a completion comes
    /// or progress is needed, with no thread in the CQ (for poll / epoll
    /// / tokio's `AsyncFd`).
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        if self.wait == WaitObj::None {
            return None;
        }
        let set = match self.shared.wait_set() {
            Ok(s) => s,
            Err(e) => {
                // The channel alone still wakes for hardware completions.
                tracing::warn!(error = %e, "verbs: cannot make the CQ's wait set");
                self.shared.fd_users.store(true, Ordering::Relaxed);
                self.shared.rearm_for_fd();
                return Some(self.shared.hw.fd());
            }
        };
        self.shared.core.signal().watch_external();
        self.shared.fd_users.store(true, Ordering::Relaxed);
        self.shared.rearm_for_fd();
        Some(set.fd())
    }

    /// `fi_trywait`: clears and arms the wait fd (the channel, the
    /// engines' channels, the eventfd), then looks for completions;
    /// `Again` when there are some to read (none is lost: those found go
    /// to the software queue).
    fn trywait(&self) -> Result<()> {
        if self.wait == WaitObj::None {
            return Err(Error::new(
                ErrorKind::NoSys,
                "trywait on a CQ opened with FI_WAIT_NONE (it has no wait fd)",
            ));
        }
        let sh = &self.shared;
        sh.wait_set()?;
        let signal = sh.core.signal();
        signal.watch_external();
        sh.fd_users.store(true, Ordering::Relaxed);
        signal.rearm();
        sh.trywait_hw()?;
        if sh.core.is_empty() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Again,
                "the CQ holds completions: read them before sleeping (trywait)",
            ))
        }
    }
}

/// Completions reported through the kit's [`fabric_core::kit::binds::Binds`]
/// (`tx_done`, `rx_done`, `failed`) land here, waking a blocked reader.
impl CqSink for CqShared {
    #[inline]
    fn push(&self, entry: CqEntry, src: FiAddr) {
        CqShared::push(self, entry, src);
    }

    fn push_err(&self, err: CqErrEntry) {
        CqShared::push_err(self, err);
    }

    #[inline]
    fn is_full(&self) -> bool {
        self.core.is_full()
    }

    fn has_room(&self) -> bool {
        self.core.has_room()
    }
}
