//! Ready-made CQ, counter and AV objects over the kit's cores, for any
//! provider: the provider supplies only how to drive progress.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use super::av::AvTable;
use super::cntr::CntrCore;
use super::cq::CqCore;
use super::wait::{FdSet, PollSet};
use crate::addr::Address;
use crate::error::{Error, Result};
use crate::objects::{
    AddressVector, CompletionQueue, Counter, CqAttr, CqEntry, CqErrEntry, CqFormat, FiAddr, WaitObj,
};

/// How a provider makes progress (manual progress: called from CQ reads,
/// counter reads and waits).
pub trait Progress: Send + Sync {
    /// Does whatever IO is ready, without blocking.
    fn progress(&self) -> Result<()>;

    /// Calls `f` with every fd whose readiness means progress can be made
    /// (for example the provider's sockets), so that blocking waits wake up.
    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>));

    /// A thread is about to wait on [`Progress::wait_fds`] until the
    /// matching [`Progress::disarm`]. A provider that keeps fds out of its
    /// wait set while readers busy-poll (a watched socket costs every
    /// arriving packet a wake-up walk) watches them all again here. The
    /// default does nothing.
    fn arm(&self) {}

    /// The wait that [`Progress::arm`] announced is over.
    fn disarm(&self) {}

    /// The fds an application sleeps on after a successful
    /// [`Progress::trywait`] (they go into the object's wait fd, see
    /// [`PollSet`]): readable when progress is needed. The default is
    /// [`Progress::wait_fds`]. A provider whose own thread makes progress
    /// (FI_PROGRESS_AUTO) gives none: its completions wake the object's
    /// eventfd.
    fn trywait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        self.wait_fds(f);
    }

    /// The provider's part of `fi_trywait`: drives progress and makes sure
    /// that [`Progress::trywait_fds`] turn readable when progress is
    /// needed again; `Again` when progress is pending that no fd will
    /// announce (call it again after reading). The default drives progress
    /// and reports success, right for providers whose fds are always
    /// accurate.
    fn trywait(&self) -> Result<()> {
        self.progress()
    }

    /// An object starts to let an application sleep on its wait fd
    /// outside any call (its first `trywait`, or the first after it
    /// released the last with [`Progress::disarm_external`]). The default
    /// is [`Progress::arm`].
    fn arm_external(&self) {
        self.arm();
    }

    /// The application that [`Progress::arm_external`] was for is awake
    /// again (it read something), or the object closed. The default is
    /// [`Progress::disarm`].
    fn disarm_external(&self) {
        self.disarm();
    }
}

/// The wait fd of a CQ or counter: an epoll set of its own signal's fd,
/// which the progress source's fds join the first time the fd is asked
/// for (or `trywait` is called). Until then nothing is nested in it: a
/// provider fd in an epoll set costs every event on it a wake-up walk,
/// which objects whose fd nobody uses should not pay.
struct WaitSet {
    set: PollSet,
    joined: std::sync::Once,
    /// Why the source's fds could not join (reported by `trywait`).
    err: std::sync::Mutex<Option<Error>>,
}

impl WaitSet {
    fn new(own: BorrowedFd<'_>) -> Result<WaitSet> {
        let set = PollSet::new()?;
        set.add(own)?;
        Ok(WaitSet {
            set,
            joined: std::sync::Once::new(),
            err: std::sync::Mutex::new(None),
        })
    }

    /// The fd, with `p`'s fds joined.
    fn fd(&self, p: &dyn Progress) -> BorrowedFd<'_> {
        self.joined.call_once(|| {
            if let Err(e) = add_fds(&self.set, p) {
                *super::lock(&self.err) = Some(e);
            }
        });
        self.set.fd()
    }

    /// The fds joined, or why they could not.
    fn ready(&self, p: &dyn Progress) -> Result<()> {
        self.fd(p);
        match &*super::lock(&self.err) {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// Adds the fds of `p` that mean progress is needed
/// ([`Progress::trywait_fds`]) to `set`: what a wait fd must hold to wake
/// for work the provider has to do before a completion exists.
pub fn add_fds(set: &PollSet, p: &dyn Progress) -> Result<()> {
    let mut r = Ok(());
    p.trywait_fds(&mut |fd| {
        if r.is_ok() {
            r = set.add(fd);
        }
    });
    r
}

/// The error of `trywait` on an object opened without a wait object.
fn no_wait(what: &str) -> Error {
    Error::new(
        crate::ErrorKind::NoSys,
        format!("trywait on {what} opened with FI_WAIT_NONE (it has no wait fd)"),
    )
}

/// `trywait`'s answer when something is there to read.
fn ready(what: &str) -> Error {
    Error::new(
        crate::ErrorKind::Again,
        format!("{what}: read what is there before sleeping (trywait)"),
    )
}

/// Arms a progress source ([`Progress::arm`]) for as long as it lives,
/// around a wait that may block on its fds.
pub struct Armed<'a>(&'a dyn Progress);

impl std::fmt::Debug for Armed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Armed")
    }
}

impl<'a> Armed<'a> {
    /// Arms `p`; dropping the value disarms it.
    pub fn new(p: &'a dyn Progress) -> Self {
        p.arm();
        Armed(p)
    }
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.0.disarm();
    }
}

/// A completion queue: [`CqCore`] plus the domain's progress.
///
/// Its wait fd (any wait object but FI_WAIT_NONE) is an epoll set of the
/// core's eventfd and the progress source's [`Progress::trywait_fds`]:
/// after [`CompletionQueue::trywait`] returned `Ok`, it turns readable
/// when a completion arrives or progress is needed, with no thread in the
/// CQ.
pub struct Cq {
    core: Arc<CqCore>,
    format: CqFormat,
    wait: WaitObj,
    progress: Arc<dyn Progress>,
    poll: Option<WaitSet>,
    /// The progress source is armed for an application sleeping on the
    /// wait fd ([`Progress::arm_external`]).
    external: std::sync::atomic::AtomicBool,
}

impl Drop for Cq {
    fn drop(&mut self) {
        self.release();
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("core", &self.core)
            .field("format", &self.format)
            .finish()
    }
}

impl Cq {
    /// A CQ with `attr`, progressed by `progress`.
    pub fn new(attr: &CqAttr, progress: Arc<dyn Progress>) -> Result<Self> {
        let core = Arc::new(CqCore::new(attr.size)?);
        let poll = match attr.wait_obj {
            WaitObj::None => None,
            _ => Some(WaitSet::new(core.signal().fd())?),
        };
        Ok(Cq {
            core,
            format: attr.format,
            wait: attr.wait_obj,
            progress,
            poll,
            external: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The application that slept on the wait fd is awake: the progress
    /// source need not stay armed for it.
    fn release(&self) {
        use std::sync::atomic::Ordering;
        if self.external.load(Ordering::Relaxed) && self.external.swap(false, Ordering::AcqRel) {
            self.progress.disarm_external();
        }
    }

    /// The core, for the provider to push completions into.
    pub fn core(&self) -> &Arc<CqCore> {
        &self.core
    }

    /// The entry format.
    pub fn format(&self) -> CqFormat {
        self.format
    }

    fn read_now(&self, out: &mut [CqEntry], src: Option<&mut [FiAddr]>) -> Result<usize> {
        self.progress.progress()?;
        let n = self.core.read(out, src)?;
        self.release();
        // Keep only what the format carries.
        for e in &mut out[..n] {
            trim(e, self.format);
        }
        Ok(n)
    }

    fn sread_any(
        &self,
        out: &mut [CqEntry],
        mut src: Option<&mut [FiAddr]>,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        if self.wait == WaitObj::None {
            return Err(Error::new(
                crate::ErrorKind::NoSys,
                "sread on a CQ opened with FI_WAIT_NONE",
            ));
        }
        let signal = self.core.signal();
        let mut fds = FdSet::new(signal.fd());
        self.progress.wait_fds(&mut |fd| fds.push(fd));
        let _armed = Armed::new(&*self.progress);
        let r = signal.wait(fds.as_slice(), timeout, || {
            match self.read_now(out, src.as_deref_mut()) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == crate::ErrorKind::Again => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        r.ok_or_else(|| timed_out("CQ", timeout))
    }
}

/// A blocking read's timeout: `Again`, as `fi_cq_sread` / `fi_eq_sread`
/// return -FI_EAGAIN, with a message that says it timed out.
fn timed_out(what: &str, timeout: Option<Duration>) -> Error {
    let ms = timeout.map_or(0, |t| t.as_millis());
    Error::new(
        crate::ErrorKind::Again,
        format!("{what} sread timed out after {ms} ms with nothing to read"),
    )
}

fn trim(e: &mut CqEntry, format: CqFormat) {
    match format {
        CqFormat::Context => {
            *e = CqEntry {
                context: e.context,
                ..CqEntry::default()
            }
        }
        CqFormat::Msg => {
            e.buf = 0;
            e.data = 0;
            e.tag = 0;
        }
        CqFormat::Data => e.tag = 0,
        CqFormat::Tagged | CqFormat::Unspec => {}
    }
}

impl CompletionQueue for Cq {
    fn read(&self, out: &mut [CqEntry]) -> Result<usize> {
        self.read_now(out, None)
    }

    fn readfrom(&self, out: &mut [CqEntry], src: &mut [FiAddr]) -> Result<usize> {
        self.read_now(out, Some(src))
    }

    fn readerr(&self) -> Result<CqErrEntry> {
        self.core.read_err()
    }

    fn sread(&self, out: &mut [CqEntry], timeout: Option<Duration>) -> Result<usize> {
        self.sread_any(out, None, timeout)
    }

    fn sreadfrom(
        &self,
        out: &mut [CqEntry],
        src: &mut [FiAddr],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.sread_any(out, Some(src), timeout)
    }

    fn signal(&self) -> Result<()> {
        self.core.signal().notify_always();
        Ok(())
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        self.poll.as_ref().map(|w| w.fd(&*self.progress))
    }

    fn trywait(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let Some(w) = &self.poll else {
            return Err(no_wait("a CQ"));
        };
        w.ready(&*self.progress)?;
        let signal = self.core.signal();
        signal.watch_external();
        if !self.external.swap(true, Ordering::AcqRel) {
            self.progress.arm_external();
        }
        signal.rearm();
        self.progress.trywait()?;
        if self.core.is_empty() {
            Ok(())
        } else {
            Err(ready("the CQ holds completions"))
        }
    }
}

/// A counter: [`CntrCore`] plus the domain's progress.
///
/// Its wait fd (unless opened with FI_WAIT_NONE) is built like a
/// [`Cq`]'s: after [`Counter::trywait`] returned `Ok`, it turns readable
/// when the counter (or its error count) changes or progress is needed.
pub struct Cntr {
    core: Arc<CntrCore>,
    progress: Arc<dyn Progress>,
    poll: Option<WaitSet>,
    external: std::sync::atomic::AtomicBool,
    /// The counts the last `trywait` saw.
    seen: std::sync::Mutex<(u64, u64)>,
}

impl Drop for Cntr {
    fn drop(&mut self) {
        self.release();
    }
}

impl std::fmt::Debug for Cntr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cntr").field("core", &self.core).finish()
    }
}

impl Cntr {
    /// A counter progressed by `progress`, with a wait fd.
    pub fn new(progress: Arc<dyn Progress>) -> Result<Self> {
        Self::with_attr(
            &crate::objects::CntrAttr {
                wait_obj: WaitObj::Unspec,
            },
            progress,
        )
    }

    /// A counter with `attr` (FI_WAIT_NONE: no wait fd), progressed by
    /// `progress`.
    pub fn with_attr(attr: &crate::objects::CntrAttr, progress: Arc<dyn Progress>) -> Result<Self> {
        let core = Arc::new(CntrCore::new()?);
        let poll = match attr.wait_obj {
            WaitObj::None => None,
            _ => Some(WaitSet::new(core.signal().fd())?),
        };
        Ok(Cntr {
            core,
            progress,
            poll,
            external: std::sync::atomic::AtomicBool::new(false),
            seen: std::sync::Mutex::new((0, 0)),
        })
    }

    /// The core, for the provider to count into.
    pub fn core(&self) -> &Arc<CntrCore> {
        &self.core
    }

    /// The application that slept on the wait fd is awake (it reads the
    /// counter): the progress source need not stay armed for it.
    fn release(&self) {
        use std::sync::atomic::Ordering;
        if self.external.load(Ordering::Relaxed) && self.external.swap(false, Ordering::AcqRel) {
            self.progress.disarm_external();
        }
    }
}

impl Counter for Cntr {
    fn read(&self) -> u64 {
        let _ = self.progress.progress();
        self.release();
        self.core.read()
    }
    fn readerr(&self) -> u64 {
        let _ = self.progress.progress();
        self.release();
        self.core.read_err()
    }
    fn add(&self, value: u64) -> Result<()> {
        self.core.add(value);
        Ok(())
    }
    fn set(&self, value: u64) -> Result<()> {
        self.core.set(value);
        Ok(())
    }
    fn adderr(&self, value: u64) -> Result<()> {
        self.core.add_err(value);
        Ok(())
    }
    fn seterr(&self, value: u64) -> Result<()> {
        self.core.set_err(value);
        Ok(())
    }
    fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        // The provider's fds wake a sleep when IO is ready (the counter's
        // own signal only fills unused slots).
        let mut fds = FdSet::new(self.core.signal().fd());
        self.progress.wait_fds(&mut |fd| fds.push(fd));
        let _armed = Armed::new(&*self.progress);
        self.core.wait(threshold, fds.as_slice(), timeout, || {
            self.progress.progress()
        })
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        self.poll.as_ref().map(|w| w.fd(&*self.progress))
    }

    /// `Again` when either count changed since the previous `trywait` (or,
    /// the first time, is not zero); the change is then taken as seen.
    fn trywait(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let Some(w) = &self.poll else {
            return Err(no_wait("a counter"));
        };
        w.ready(&*self.progress)?;
        let signal = self.core.signal();
        signal.watch_external();
        if !self.external.swap(true, Ordering::AcqRel) {
            self.progress.arm_external();
        }
        signal.rearm();
        self.progress.trywait()?;
        let now = (self.core.read(), self.core.read_err());
        let mut seen = super::lock(&self.seen);
        if *seen == now {
            Ok(())
        } else {
            *seen = now;
            Err(ready("the counter changed"))
        }
    }
}

/// How a provider turns `insertsvc`'s node and service into an address,
/// and which addresses it accepts.
pub trait AddressBook: Send + Sync {
    /// Resolves node / service (`fi_av_insertsvc`).
    fn resolve(&self, node: &str, service: &str) -> Result<Address>;
    /// Checks that an address is one the provider can reach.
    fn accept(&self, addr: &Address) -> Result<()>;
}

/// An address vector: [`AvTable`] plus the provider's address rules.
pub struct Av {
    table: Arc<AvTable>,
    book: Arc<dyn AddressBook>,
}

impl std::fmt::Debug for Av {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Av").field("table", &self.table).finish()
    }
}

impl Av {
    /// An empty AV.
    pub fn new(book: Arc<dyn AddressBook>) -> Self {
        Av {
            table: Arc::new(AvTable::new()),
            book,
        }
    }

    /// The table, for the provider's endpoints.
    pub fn table(&self) -> &Arc<AvTable> {
        &self.table
    }
}

impl AddressVector for Av {
    fn insert(&self, addrs: &[Address], out: &mut [FiAddr]) -> Result<usize> {
        if out.len() < addrs.len() {
            return Err(Error::inval(
                "av insert: the output array is shorter than the address array",
            ));
        }
        let mut n = 0;
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            match self.book.accept(a) {
                Ok(()) => {
                    *o = self.table.insert(a.clone());
                    n += 1;
                }
                Err(_) => *o = FiAddr::NOTAVAIL,
            }
        }
        Ok(n)
    }

    /// The address book's reason when it refuses the address.
    fn insert_one(&self, addr: &Address) -> Result<FiAddr> {
        self.book.accept(addr)?;
        Ok(self.table.insert(addr.clone()))
    }

    fn insertsvc(&self, node: &str, service: &str) -> Result<FiAddr> {
        let a = self.book.resolve(node, service)?;
        self.book.accept(&a)?;
        Ok(self.table.insert(a))
    }

    fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        for a in addrs {
            self.table.remove(*a)?;
        }
        Ok(())
    }

    fn lookup(&self, addr: FiAddr) -> Result<Address> {
        self.table.lookup(addr)
    }
}

/// A progress source of an event queue: held strongly (the EQ keeps it
/// alive) or weakly (its owner does; an endpoint that holds the EQ must not
/// be kept alive by it).
enum Source {
    Strong(Arc<dyn Progress>),
    Weak(std::sync::Weak<dyn Progress>),
}

impl Source {
    fn get(&self) -> Option<Arc<dyn Progress>> {
        match self {
            Source::Strong(p) => Some(p.clone()),
            Source::Weak(w) => w.upgrade(),
        }
    }
}

type EqItem = std::result::Result<crate::objects::EqEvent, crate::objects::EqErrEntry>;

/// The shared part of an event queue: what providers push events into
/// (from their progress), and the progress sources the EQ drives when read.
pub struct EqCore {
    events: std::sync::Mutex<std::collections::VecDeque<EqItem>>,
    signal: super::wait::Signal,
    progress: std::sync::RwLock<Vec<Source>>,
    /// The wait fd: the signal's fd and every source's trywait fds.
    poll: PollSet,
    /// Sources armed for an application sleeping on the wait fd
    /// ([`Progress::arm_external`]).
    external: std::sync::Mutex<Vec<std::sync::Weak<dyn Progress>>>,
    /// Why a source's fds could not join the wait fd.
    watch_err: std::sync::Mutex<Option<Error>>,
    /// The wait fd was asked for (or `trywait` called): sources' fds are
    /// in it (before, nothing is nested in it; see `WaitSet`).
    active: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for EqCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EqCore").finish_non_exhaustive()
    }
}

impl EqCore {
    fn new() -> Result<Self> {
        let signal = super::wait::Signal::new()?;
        let poll = PollSet::new()?;
        poll.add(signal.fd())?;
        Ok(EqCore {
            events: std::sync::Mutex::new(std::collections::VecDeque::new()),
            signal,
            progress: std::sync::RwLock::new(Vec::new()),
            poll,
            external: std::sync::Mutex::new(Vec::new()),
            watch_err: std::sync::Mutex::new(None),
            active: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The wait fd, with every source's fds in it from now on.
    fn wait_fd(&self) -> BorrowedFd<'_> {
        use std::sync::atomic::Ordering;
        if !self.active.load(Ordering::Acquire) {
            // Under the sources' lock, so that a source added at the same
            // time is watched by one side or the other.
            let v = self
                .progress
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !self.active.swap(true, Ordering::AcqRel) {
                for p in v.iter().filter_map(Source::get) {
                    self.watch(&*p);
                }
            }
        }
        self.poll.fd()
    }

    /// Watches a new source's fds in the wait fd; a failure is kept for
    /// the next `trywait` to report (the wait fd would not wake for it).
    fn watch(&self, p: &dyn Progress) {
        if let Err(e) = add_fds(&self.poll, p) {
            *super::lock(&self.watch_err) = Some(e);
        }
    }

    /// The application that slept on the wait fd is awake.
    fn release(&self) {
        let mut ext = super::lock(&self.external);
        for w in ext.drain(..) {
            if let Some(p) = w.upgrade() {
                p.disarm_external();
            }
        }
    }

    /// Queues an event.
    pub fn push(&self, e: crate::objects::EqEvent) {
        super::lock(&self.events).push_back(Ok(e));
        self.signal.notify();
    }

    /// Queues an error event.
    pub fn push_err(&self, e: crate::objects::EqErrEntry) {
        super::lock(&self.events).push_back(Err(e));
        self.signal.notify();
    }

    /// Adds a progress source held weakly: reading the EQ drives it while
    /// its owner keeps it alive (a passive endpoint, a domain's engine).
    /// Sources that died are forgotten.
    pub fn add_progress(&self, p: std::sync::Weak<dyn Progress>) {
        let mut v = self
            .progress
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        v.retain(|s| match s {
            Source::Strong(_) => true,
            Source::Weak(w) => w.strong_count() > 0 && !std::sync::Weak::ptr_eq(w, &p),
        });
        if self.active.load(std::sync::atomic::Ordering::Acquire) {
            if let Some(a) = p.upgrade() {
                self.watch(&*a);
            }
        }
        v.push(Source::Weak(p));
    }

    /// Replaces every progress source by `p`, held strongly.
    pub fn set_progress(&self, p: Arc<dyn Progress>) {
        let mut v = self
            .progress
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.active.load(std::sync::atomic::Ordering::Acquire) {
            self.watch(&*p);
        }
        *v = vec![Source::Strong(p)];
    }

    fn sources(&self) -> Vec<Arc<dyn Progress>> {
        self.progress
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter_map(Source::get)
            .collect()
    }

    fn progress(&self) -> Result<()> {
        for p in self.sources() {
            p.progress()?;
        }
        Ok(())
    }

    fn take(&self) -> Result<crate::objects::EqEvent> {
        let mut q = super::lock(&self.events);
        match q.front() {
            None => Err(Error::again()),
            Some(Err(_)) => Err(Error::from_kind(crate::ErrorKind::Avail)),
            Some(Ok(_)) => match q.pop_front() {
                Some(Ok(e)) => Ok(e),
                _ => Err(Error::again()),
            },
        }
    }
}

/// An event queue: events and error events in arrival order, a signal for
/// blocking reads, and the provider's progress sources (connection
/// management is progressed by EQ reads under manual progress; one EQ may
/// serve a passive endpoint and the endpoints of several domains).
pub struct Eq {
    core: Arc<EqCore>,
    wait: WaitObj,
}

impl std::fmt::Debug for Eq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eq").field("wait", &self.wait).finish()
    }
}

impl Eq {
    /// An empty event queue.
    pub fn new(attr: &crate::objects::EqAttr) -> Result<Self> {
        Ok(Eq {
            core: Arc::new(EqCore::new()?),
            wait: attr.wait_obj,
        })
    }

    /// The shared part, for the provider to push events into and to add
    /// progress sources to.
    pub fn core(&self) -> &Arc<EqCore> {
        &self.core
    }

    /// Sets what drives connection progress when the EQ is read (the EQ is
    /// opened on the fabric, before the domain that progresses it),
    /// replacing any earlier source; see [`EqCore::add_progress`] for
    /// several.
    pub fn set_progress(&self, p: Arc<dyn Progress>) {
        self.core.set_progress(p);
    }

    /// Queues an event.
    pub fn push(&self, e: crate::objects::EqEvent) {
        self.core.push(e);
    }

    /// Queues an error event.
    pub fn push_err(&self, e: crate::objects::EqErrEntry) {
        self.core.push_err(e);
    }
}

impl Drop for Eq {
    fn drop(&mut self) {
        self.core.release();
    }
}

impl crate::objects::EventQueue for Eq {
    fn read(&self) -> Result<crate::objects::EqEvent> {
        self.core.progress()?;
        let e = self.core.take()?;
        if !super::lock(&self.core.external).is_empty() {
            self.core.release();
        }
        Ok(e)
    }

    fn readerr(&self) -> Result<crate::objects::EqErrEntry> {
        let mut q = super::lock(&self.core.events);
        match q.front() {
            Some(Err(_)) => match q.pop_front() {
                Some(Err(e)) => Ok(e),
                _ => Err(Error::again()),
            },
            _ => Err(Error::again()),
        }
    }

    fn sread(&self, timeout: Option<Duration>) -> Result<crate::objects::EqEvent> {
        let sources = self.core.sources();
        let mut fds = FdSet::new(self.core.signal.fd());
        for p in &sources {
            p.wait_fds(&mut |fd| fds.push(fd));
        }
        let _armed: Vec<Armed<'_>> = sources.iter().map(|p| Armed::new(&**p)).collect();
        let r = self.core.signal.wait(fds.as_slice(), timeout, || {
            for p in &sources {
                p.progress()?;
            }
            match self.core.take() {
                Ok(e) => Ok(Some(e)),
                Err(e) if e.kind() == crate::ErrorKind::Again => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        r.ok_or_else(|| timed_out("EQ", timeout))
    }

    fn write(&self, event: crate::objects::EqEvent) -> Result<()> {
        self.core.push(event);
        Ok(())
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        match self.wait {
            WaitObj::None => None,
            _ => Some(self.core.wait_fd()),
        }
    }

    fn trywait(&self) -> Result<()> {
        if self.wait == WaitObj::None {
            return Err(no_wait("an EQ"));
        }
        self.core.wait_fd();
        if let Some(e) = super::lock(&self.core.watch_err).take() {
            return Err(e);
        }
        self.core.signal.watch_external();
        let sources = self.core.sources();
        {
            let mut ext = super::lock(&self.core.external);
            ext.retain(|w| w.strong_count() > 0);
            for p in &sources {
                let w = Arc::downgrade(p);
                if !ext.iter().any(|x| std::sync::Weak::ptr_eq(x, &w)) {
                    p.arm_external();
                    ext.push(w);
                }
            }
        }
        self.core.signal.rearm();
        for p in &sources {
            p.trywait()?;
        }
        if super::lock(&self.core.events).is_empty() {
            Ok(())
        } else {
            Err(ready("the EQ holds events"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{EqAttr, EqEvent, EventQueue};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A progress hook that completes something on its third call.
    struct Later {
        calls: AtomicU32,
        cq: std::sync::OnceLock<Arc<CqCore>>,
    }

    impl Progress for Later {
        fn progress(&self) -> Result<()> {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 2 {
                if let Some(cq) = self.cq.get() {
                    cq.push(
                        CqEntry {
                            context: 9,
                            len: 5,
                            tag: 3,
                            ..Default::default()
                        },
                        FiAddr(1),
                    );
                }
            }
            Ok(())
        }
        fn wait_fds<'a>(&'a self, _: &mut dyn FnMut(BorrowedFd<'a>)) {}
    }

    #[test]
    fn cq_reads_drive_progress_and_trim_to_format() {
        let p = Arc::new(Later {
            calls: AtomicU32::new(0),
            cq: std::sync::OnceLock::new(),
        });
        let attr = CqAttr {
            format: CqFormat::Msg,
            wait_obj: WaitObj::Unspec,
            ..Default::default()
        };
        let cq = Cq::new(&attr, p.clone()).unwrap();
        let _ = p.cq.set(cq.core().clone());
        let mut out = [CqEntry::default(); 4];
        assert_eq!(
            cq.read(&mut out).unwrap_err().kind(),
            crate::ErrorKind::Again
        );
        let mut src = [FiAddr(0); 4];
        let n = cq
            .sreadfrom(&mut out, &mut src, Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            (out[0].context, out[0].len, out[0].tag),
            (9, 5, 0),
            "Msg format has no tag"
        );
        assert_eq!(src[0], FiAddr(1));
        assert!(cq.wait_fd().is_some());
    }

    struct Counting(AtomicU32);

    impl Progress for Counting {
        fn progress(&self) -> Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn wait_fds<'a>(&'a self, _: &mut dyn FnMut(BorrowedFd<'a>)) {}
    }

    #[test]
    fn eq_drives_several_weak_sources() {
        let eq = Eq::new(&EqAttr::default()).unwrap();
        let a: Arc<dyn Progress> = Arc::new(Counting(AtomicU32::new(0)));
        let b = Arc::new(Counting(AtomicU32::new(0)));
        let b_dyn: Arc<dyn Progress> = b.clone();
        eq.core().add_progress(Arc::downgrade(&a));
        eq.core().add_progress(Arc::downgrade(&b_dyn));
        eq.core().add_progress(Arc::downgrade(&b_dyn));
        assert_eq!(eq.read().unwrap_err().kind(), crate::ErrorKind::Again);
        assert_eq!(
            b.0.load(Ordering::SeqCst),
            1,
            "a source added twice runs once"
        );
        drop(a);
        assert_eq!(eq.read().unwrap_err().kind(), crate::ErrorKind::Again);
        assert_eq!(b.0.load(Ordering::SeqCst), 2);
        eq.set_progress(b_dyn);
        assert_eq!(eq.read().unwrap_err().kind(), crate::ErrorKind::Again);
        assert_eq!(b.0.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn eq_events_and_errors_in_order() {
        let eq = Eq::new(&EqAttr {
            wait_obj: WaitObj::Unspec,
            ..Default::default()
        })
        .unwrap();
        eq.push(EqEvent::Shutdown { fid: 1 });
        eq.push_err(crate::objects::EqErrEntry {
            fid: 2,
            context: 0,
            err: crate::ErrorKind::ConnRefused,
            prov_errno: 111,
            data: b"no".to_vec(),
            err_text: "refused".into(),
        });
        assert_eq!(eq.read().unwrap(), EqEvent::Shutdown { fid: 1 });
        assert_eq!(eq.read().unwrap_err().kind(), crate::ErrorKind::Avail);
        assert_eq!(eq.readerr().unwrap().data, b"no");
        let e = eq.sread(Some(Duration::from_millis(5))).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Again);
        assert!(e.to_string().contains("timed out after 5 ms"), "{e}");
    }

    #[test]
    fn a_cq_sread_timeout_says_so() {
        let p: Arc<dyn Progress> = Arc::new(Counting(AtomicU32::new(0)));
        let cq = Cq::new(&CqAttr::default(), p).unwrap();
        let mut out = [CqEntry::default(); 1];
        let e = cq
            .sread(&mut out, Some(Duration::from_millis(3)))
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Again);
        assert!(e.to_string().contains("timed out after 3 ms"), "{e}");
    }

    #[test]
    fn trywait_arms_the_cq_fd_and_reports_what_is_there() {
        let p: Arc<dyn Progress> = Arc::new(Counting(AtomicU32::new(0)));
        let cq = Cq::new(&CqAttr::default(), p.clone()).unwrap();
        let fd = cq.wait_fd().unwrap();
        let readable = || {
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let zero = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            rustix::event::poll(&mut fds, Some(&zero)).unwrap()
        };
        cq.trywait().unwrap();
        assert_eq!(readable(), 0);
        cq.core().push(CqEntry::default(), FiAddr::NOTAVAIL);
        assert_eq!(readable(), 1, "a completion wakes the fd");
        assert_eq!(
            cq.trywait().unwrap_err().kind(),
            crate::ErrorKind::Again,
            "a completion is there"
        );
        let mut out = [CqEntry::default(); 1];
        assert_eq!(cq.read(&mut out).unwrap(), 1);
        cq.trywait().unwrap();
        assert_eq!(readable(), 0, "trywait cleared the fd");
        let none = Cq::new(
            &CqAttr {
                wait_obj: WaitObj::None,
                ..CqAttr::default()
            },
            p,
        )
        .unwrap();
        assert_eq!(none.trywait().unwrap_err().kind(), crate::ErrorKind::NoSys);
    }
}
