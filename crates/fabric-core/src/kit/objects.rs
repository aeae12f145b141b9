//! Ready-made CQ, counter and AV objects over the kit's cores, for any
//! provider: the provider supplies only how to drive progress.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use super::av::AvTable;
use super::cntr::CntrCore;
use super::cq::CqCore;
use super::wait::FdSet;
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
pub struct Cq {
    core: Arc<CqCore>,
    format: CqFormat,
    wait: WaitObj,
    progress: Arc<dyn Progress>,
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
        Ok(Cq {
            core: Arc::new(CqCore::new(attr.size)?),
            format: attr.format,
            wait: attr.wait_obj,
            progress,
        })
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
        r.ok_or_else(Error::again)
    }
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
        match self.wait {
            WaitObj::None => None,
            _ => Some(self.core.signal().fd()),
        }
    }
}

/// A counter: [`CntrCore`] plus the domain's progress.
pub struct Cntr {
    core: Arc<CntrCore>,
    progress: Arc<dyn Progress>,
}

impl std::fmt::Debug for Cntr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cntr").field("core", &self.core).finish()
    }
}

impl Cntr {
    /// A counter progressed by `progress`.
    pub fn new(progress: Arc<dyn Progress>) -> Result<Self> {
        Ok(Cntr {
            core: Arc::new(CntrCore::new()?),
            progress,
        })
    }

    /// The core, for the provider to count into.
    pub fn core(&self) -> &Arc<CntrCore> {
        &self.core
    }
}

impl Counter for Cntr {
    fn read(&self) -> u64 {
        let _ = self.progress.progress();
        self.core.read()
    }
    fn readerr(&self) -> u64 {
        let _ = self.progress.progress();
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
}

impl std::fmt::Debug for EqCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EqCore").finish_non_exhaustive()
    }
}

impl EqCore {
    fn new() -> Result<Self> {
        Ok(EqCore {
            events: std::sync::Mutex::new(std::collections::VecDeque::new()),
            signal: super::wait::Signal::new()?,
            progress: std::sync::RwLock::new(Vec::new()),
        })
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
        v.push(Source::Weak(p));
    }

    /// Replaces every progress source by `p`, held strongly.
    pub fn set_progress(&self, p: Arc<dyn Progress>) {
        *self
            .progress
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = vec![Source::Strong(p)];
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

impl crate::objects::EventQueue for Eq {
    fn read(&self) -> Result<crate::objects::EqEvent> {
        self.core.progress()?;
        self.core.take()
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
        r.ok_or_else(Error::again)
    }

    fn write(&self, event: crate::objects::EqEvent) -> Result<()> {
        self.core.push(event);
        Ok(())
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        match self.wait {
            WaitObj::None => None,
            _ => Some(self.core.signal.fd()),
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
        assert_eq!(
            eq.sread(Some(Duration::from_millis(5))).unwrap_err().kind(),
            crate::ErrorKind::Again
        );
    }
}
