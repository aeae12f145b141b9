//! Progress: the domain's engine drives every endpoint it opened, and an
//! epoll set of their sockets lets blocking reads sleep until something is
//! ready.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

use fabric_core::kit::objects::Progress;
use fabric_core::{Error, ErrorKind, Result};
use rustix::event::epoll;

/// Something the engine progresses.
pub(crate) trait EpProgress: Send + Sync + std::fmt::Debug {
    /// Does the IO that is ready without blocking: `ready` holds the epoll
    /// tokens that fired (an endpoint picks its own by [`ep_of`]); queued
    /// frames are written whatever `ready` says.
    fn progress(&self, ready: &[u64]) -> Result<()>;
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

/// Most events taken from epoll by one progress call.
const EVENTS: usize = 256;

#[derive(Debug)]
struct State {
    eps: Vec<Weak<dyn EpProgress>>,
    ready: Vec<u64>,
}

/// The engine of one domain: its endpoints and one epoll set of all their
/// sockets. Progress asks epoll what is ready (one system call) and lets
/// each endpoint read only those sockets.
#[derive(Debug)]
pub(crate) struct Poller {
    epoll: OwnedFd,
    state: Mutex<State>,
    tokens: AtomicU64,
}

fn io(e: rustix::io::Errno) -> Error {
    Error::new(ErrorKind::Io, format!("epoll: {e}"))
}

impl Poller {
    pub(crate) fn new() -> Result<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(io)?;
        let state = State {
            eps: Vec::new(),
            ready: Vec::with_capacity(EVENTS),
        };
        Ok(Poller {
            epoll,
            state: Mutex::new(state),
            tokens: AtomicU64::new(1),
        })
    }

    /// The epoll fd: readable when a registered socket is.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// A number for a new endpoint.
    pub(crate) fn next_ep(&self) -> u32 {
        self.tokens.fetch_add(1, Ordering::Relaxed) as u32
    }

    /// Watches a socket for reading.
    pub(crate) fn add(&self, fd: BorrowedFd<'_>, token: u64) -> Result<()> {
        epoll::add(
            &self.epoll,
            fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
        )
        .map_err(io)
    }

    /// Also watches for writability while frames wait to be written.
    pub(crate) fn want_write(&self, fd: BorrowedFd<'_>, token: u64, on: bool) -> Result<()> {
        let mut f = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        if on {
            f |= epoll::EventFlags::OUT;
        }
        epoll::modify(&self.epoll, fd, epoll::EventData::new_u64(token), f).map_err(io)
    }

    /// Adds an endpoint to progress.
    pub(crate) fn register(&self, ep: Weak<dyn EpProgress>) {
        let mut st = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        st.eps.retain(|w| w.strong_count() > 0);
        st.eps.push(ep);
    }
}

impl Progress for Poller {
    fn progress(&self) -> Result<()> {
        let mut guard = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let st = &mut *guard;
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); EVENTS];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        st.ready.clear();
        match epoll::wait(&self.epoll, &mut events[..], Some(&zero)) {
            Ok((got, _)) => st.ready.extend(got.iter().map(|e| e.data.u64())),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io(e)),
        }
        for w in st.eps.iter() {
            if let Some(ep) = w.upgrade() {
                ep.progress(&st.ready)?;
            }
        }
        Ok(())
    }

    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        f(self.epoll.as_fd());
    }
}
