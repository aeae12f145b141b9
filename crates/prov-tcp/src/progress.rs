//! Progress: a domain's engine drives every endpoint it opened; an epoll
//! set of their sockets lets blocking reads sleep until something is
//! ready, and lets an auto-progress thread (FI_PROGRESS_AUTO) sleep until
//! there is work.
//!
//! The wait fd of a CQ, EQ or counter (FI_WAIT_FD) is an epoll set of the
//! object's eventfd and this engine's epoll fd, so an application can
//! sleep on it in its own epoll (or tokio's `AsyncFd`) with no thread in
//! the object. Its `trywait` progresses, arms the engine (sockets that
//! busy polling took out of the set go back in) until the application
//! reads something again, and says `Again` while work waits that no
//! socket announces. Under FI_PROGRESS_AUTO the object's set holds only
//! its eventfd: the auto thread makes the completions.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fabric_core::kit::objects::Progress;
use fabric_core::kit::patient_lock;
use fabric_core::{DomainAttr, Error, ErrorKind, Result};
use rustix::event::epoll;
use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_gettime, timerfd_settime,
};
use spin::mutex::SpinMutex;

/// Something the engine progresses.
pub(crate) trait EpProgress: Send + Sync + std::fmt::Debug {
    /// Does the IO that is ready without blocking: `ready` holds the epoll
    /// tokens that fired (an endpoint picks its own by [`ep_of`]); queued
    /// frames are written whatever `ready` says.
    fn progress(&self, ready: &[u64]) -> Result<()>;

    /// Progress without asking epoll: an endpoint with a few established
    /// connections reads them directly (a read that finds nothing costs
    /// what an `epoll_wait` costs, and one that finds data saves the
    /// `epoll_wait`). `None` when the endpoint cannot (too many
    /// connections, not enabled, busy).
    fn progress_direct(&self) -> Option<()> {
        None
    }

    /// Puts every socket that busy-polling took out of the epoll set back
    /// in ([`Poller::may_unwatch`] just became false).
    fn watch_all(&self) {}

    /// Whether epoll never has news for this endpoint while it can be
    /// progressed directly: it listens for nothing and arms no timer (a
    /// MSG endpoint, whose established connection busy polling reads). An
    /// engine of such endpoints only asks epoll when one of them cannot be
    /// progressed directly, instead of every [`EPOLL_EVERY`] calls.
    fn epoll_quiet(&self) -> bool {
        false
    }

    /// Whether work waits for a progress pass that no socket's readiness
    /// announces (work a shared receive context handed over): an
    /// application must not sleep on the wait fd then (`fi_trywait` says
    /// `Again`).
    fn pending(&self) -> bool {
        false
    }
}

/// Epoll tokens: the endpoint's number in the high 32 bits, the
/// connection's in the low 32 (0 is the endpoint's listening socket).
pub(crate) fn token(ep: u32, conn: u32) -> u64 {
    (u64::from(ep) << 32) | u64::from(conn)
}

/// The endpoint number of a token.
pub(crate) fn ep_of(token: u64) -> u32 {
    (token >> 32) as u32
}

/// The connection number of a token.
pub(crate) fn conn_of(token: u64) -> u32 {
    token as u32
}

/// The epoll token of the engine's timer (no endpoint has this number).
const TIMER: u64 = u64::MAX;

/// Most events taken from epoll by one progress call.
const EVENTS: usize = 256;

#[derive(Debug)]
struct State {
    /// The endpoints, by number: held strongly, so that a progress pass
    /// reaches them without an upgrade (two locked instructions per
    /// endpoint and pass); an endpoint's handle takes it out when it is
    /// closed ([`Poller::unregister`]).
    eps: Vec<(u32, Arc<dyn EpProgress>)>,
    /// Endpoints in `eps` that are not [`EpProgress::epoll_quiet`].
    loud: usize,
    ready: Vec<u64>,
    /// Progress calls, for [`EPOLL_EVERY`].
    calls: u32,
}

/// The engine of one domain (or passive endpoint): its endpoints and one
/// epoll set of their sockets. Progress asks epoll what is ready (one
/// system call) and lets each endpoint read only those sockets.
///
/// An endpoint that busy-polls its few established connections directly
/// ([`EpProgress::progress_direct`]) takes them out of the epoll set while
/// nobody can block on it: a socket in an epoll set costs every packet that
/// arrives a wake-up walk in the sender's softirq (about 0.3 us one-way on
/// loopback). Blocking waits ([`Progress::arm`]), the auto-progress thread
/// and an epoll fd handed to the application ([`Poller::pin`]) put them
/// back.
#[derive(Debug)]
pub(crate) struct Poller {
    epoll: OwnedFd,
    /// A one-shot timer in the epoll set ([`TIMER`]): wakes the waiters
    /// when a resting listener is due back ([`Poller::wake_after`]).
    timer: OwnedFd,
    /// The endpoints and the pass's scratch: a spin lock, tried by every
    /// progress call and waited for with [`patient_lock`] by the rest
    /// (registration, `trywait`, the end of busy polling).
    state: SpinMutex<State>,
    tokens: AtomicU64,
    /// Threads inside an [`Progress::arm`]ed wait.
    waiters: AtomicU32,
    /// Someone else waits on the epoll fd at any time: every socket stays
    /// watched.
    pinned: AtomicBool,
    /// An auto-progress thread drives the engine: an application sleeping
    /// on a CQ's wait fd need not watch the sockets.
    auto: AtomicBool,
}

/// Every this many progress calls, epoll is asked even when every
/// endpoint can be progressed directly (new connections, listeners).
const EPOLL_EVERY: u32 = 16;

fn io(e: rustix::io::Errno) -> Error {
    Error::new(ErrorKind::Io, format!("epoll: {e}"))
}

/// The events of a socket that waits for reading and / or writing. The
/// peer's half-close (RDHUP) is asked for only with reading: it stays
/// signalled, so a paused connection watching it would wake its waiter
/// for ever.
fn flags(read: bool, write: bool) -> epoll::EventFlags {
    let mut f = epoll::EventFlags::empty();
    if read {
        f |= epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
    }
    if write {
        f |= epoll::EventFlags::OUT;
    }
    f
}

impl Poller {
    pub(crate) fn new() -> Result<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(io)?;
        let timer = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .map_err(io)?;
        epoll::add(
            &epoll,
            &timer,
            epoll::EventData::new_u64(TIMER),
            epoll::EventFlags::IN,
        )
        .map_err(io)?;
        let state = State {
            eps: Vec::new(),
            loud: 0,
            ready: Vec::with_capacity(EVENTS),
            calls: 0,
        };
        Ok(Poller {
            epoll,
            timer,
            state: SpinMutex::new(state),
            tokens: AtomicU64::new(1),
            waiters: AtomicU32::new(0),
            pinned: AtomicBool::new(false),
            auto: AtomicBool::new(false),
        })
    }

    /// The epoll fd: readable when a watched socket is ready.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// A number for a new endpoint.
    pub(crate) fn next_ep(&self) -> u32 {
        self.tokens.fetch_add(1, Ordering::Relaxed) as u32
    }

    /// Watches a socket for reading.
    pub(crate) fn add(&self, fd: BorrowedFd<'_>, token: u64) -> Result<()> {
        self.watch(fd, token, true, false)
    }

    /// Watches a socket again, for reading and / or writing.
    pub(crate) fn watch(
        &self,
        fd: BorrowedFd<'_>,
        token: u64,
        read: bool,
        write: bool,
    ) -> Result<()> {
        epoll::add(
            &self.epoll,
            fd,
            epoll::EventData::new_u64(token),
            flags(read, write),
        )
        .map_err(io)
    }

    /// Wakes the engine's waiters in `after` (or sooner, when an earlier
    /// wake-up is armed already).
    pub(crate) fn wake_after(&self, after: Duration) {
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let armed = timerfd_gettime(&self.timer).map(|t| t.it_value);
        let sooner = armed.is_ok_and(|v| {
            (v.tv_sec != 0 || v.tv_nsec != 0)
                && Duration::new(
                    v.tv_sec.max(0) as u64,
                    v.tv_nsec.clamp(0, 999_999_999) as u32,
                ) <= after
        });
        if sooner {
            return;
        }
        let value = Timespec {
            tv_sec: after.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: after.subsec_nanos().into(),
        };
        let spec = Itimerspec {
            it_interval: zero,
            it_value: value,
        };
        if let Err(e) = timerfd_settime(&self.timer, TimerfdTimerFlags::empty(), &spec) {
            tracing::debug!(error = %e, "tcp: cannot arm the engine's timer");
        }
    }

    /// Stops watching a socket (it moves to another engine, or busy
    /// polling reads it).
    pub(crate) fn remove(&self, fd: BorrowedFd<'_>) -> Result<()> {
        epoll::delete(&self.epoll, fd).map_err(io)
    }

    /// What to watch a socket for: reading (not while its connection is
    /// paused) and writing (while frames wait).
    pub(crate) fn interest(
        &self,
        fd: BorrowedFd<'_>,
        token: u64,
        read: bool,
        write: bool,
    ) -> Result<()> {
        epoll::modify(
            &self.epoll,
            fd,
            epoll::EventData::new_u64(token),
            flags(read, write),
        )
        .map_err(io)
    }

    /// Whether an endpoint may take its busy-polled sockets out of the
    /// epoll set: nobody waits on it. Read under the endpoint's lock, which
    /// [`Poller::watch_all`] takes after the counts change, so a socket
    /// taken out concurrently is put back.
    pub(crate) fn may_unwatch(&self) -> bool {
        self.waiters.load(Ordering::Relaxed) == 0 && !self.pinned.load(Ordering::Relaxed)
    }

    /// Every socket stays watched from now on (the epoll fd is handed out,
    /// or an auto-progress thread sleeps on it).
    pub(crate) fn pin(&self) {
        self.pinned.store(true, Ordering::SeqCst);
        self.watch_all();
    }

    fn watch_all(&self) {
        let eps: Vec<_> = {
            let st = patient_lock(&self.state);
            st.eps.iter().map(|(_, ep)| ep.clone()).collect()
        };
        for ep in eps {
            ep.watch_all();
        }
    }

    /// Adds endpoint number `no` to progress, until
    /// [`Poller::unregister`].
    pub(crate) fn register(&self, no: u32, ep: Arc<dyn EpProgress>) {
        let mut st = patient_lock(&self.state);
        if !ep.epoll_quiet() {
            st.loud += 1;
        }
        st.eps.push((no, ep));
    }

    /// Takes endpoint number `no` out of progress (its handle is closed).
    /// A pass in progress finishes first; the endpoint is released after
    /// the engine's lock, so that its drop runs outside it.
    pub(crate) fn unregister(&self, no: u32) {
        let gone = {
            let mut st = patient_lock(&self.state);
            let gone = st
                .eps
                .iter()
                .position(|(n, _)| *n == no)
                .map(|i| st.eps.remove(i));
            if gone.as_ref().is_some_and(|(_, ep)| !ep.epoll_quiet()) {
                st.loud = st.loud.saturating_sub(1);
            }
            gone
        };
        drop(gone);
    }

    /// Blocks until a watched socket is ready or the timeout passes.
    pub(crate) fn wait(&self, timeout: Duration) {
        let mut fds = [rustix::event::PollFd::new(
            &self.epoll,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec::try_from(timeout).ok();
        let _ = rustix::event::poll(&mut fds, ts.as_ref());
    }
}

impl Progress for Poller {
    fn progress(&self) -> Result<()> {
        // `None`: another thread is progressing this engine right now.
        let Some(mut guard) = self.state.try_lock() else {
            return Ok(());
        };
        let st = &mut *guard;
        st.calls = st.calls.wrapping_add(1);
        if st.loud == 0 || st.calls % EPOLL_EVERY != 0 {
            let mut direct = !st.eps.is_empty();
            for (_, ep) in st.eps.iter() {
                if ep.progress_direct().is_none() {
                    direct = false;
                    break;
                }
            }
            if direct {
                return Ok(());
            }
        }
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); EVENTS];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        st.ready.clear();
        match epoll::wait(&self.epoll, &mut events[..], Some(&zero)) {
            Ok((got, _)) => {
                st.ready.extend(got.iter().map(|e| e.data.u64()));
                if st.ready.contains(&TIMER) {
                    // Fired: read it off, or it stays readable.
                    let _ = rustix::io::read(&self.timer, &mut [0u8; 8]);
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io(e)),
        }
        for (_, ep) in st.eps.iter() {
            ep.progress(&st.ready)?;
        }
        Ok(())
    }

    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        f(self.epoll.as_fd());
    }

    fn arm(&self) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        self.watch_all();
    }

    fn disarm(&self) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// The epoll set, unless an auto-progress thread watches it (then the
    /// completions it makes wake the object's own eventfd).
    fn trywait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        if !self.auto.load(Ordering::SeqCst) {
            f(self.epoll.as_fd());
        }
    }

    /// Progress, then `Again` while an endpoint has work that no socket
    /// will announce. The sockets busy polling took out of the epoll set
    /// are back in it: the object armed this engine first
    /// ([`Progress::arm_external`], the default: [`Progress::arm`]).
    fn trywait(&self) -> Result<()> {
        self.progress()?;
        if self.auto.load(Ordering::SeqCst) {
            return Ok(());
        }
        let eps: Vec<_> = {
            let st = patient_lock(&self.state);
            st.eps.iter().map(|(_, ep)| ep.clone()).collect()
        };
        if eps.iter().any(|ep| ep.pending()) {
            return Err(Error::new(
                ErrorKind::Again,
                "tcp: progress is pending (call trywait again)",
            ));
        }
        Ok(())
    }
}

/// Whether a domain asks for an auto-progress thread.
pub(crate) fn wants_auto(d: &DomainAttr) -> bool {
    d.data_progress == fabric_core::Progress::Auto
        || d.control_progress == fabric_core::Progress::Auto
}

/// Starts the auto-progress thread of an engine: it sleeps until a socket
/// is ready (or 50 ms pass, to notice that the engine was closed) and then
/// progresses every endpoint, so operations complete without CQ reads. It
/// ends once the engine is dropped.
pub(crate) fn spawn_auto(poller: Weak<Poller>) {
    if let Some(p) = poller.upgrade() {
        p.auto.store(true, Ordering::SeqCst);
    }
    let r = std::thread::Builder::new()
        .name("tcp-progress".into())
        .spawn(move || {
            if let Some(p) = poller.upgrade() {
                p.pin();
            }
            loop {
                let Some(p) = poller.upgrade() else { return };
                p.wait(Duration::from_millis(50));
                if let Err(e) = p.progress() {
                    tracing::debug!(error = %e, "tcp: auto progress failed");
                }
            }
        });
    if let Err(e) = r {
        tracing::warn!(error = %e, "tcp: cannot start the auto-progress thread");
    }
}
