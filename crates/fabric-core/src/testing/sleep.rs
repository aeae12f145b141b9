//! An application that sleeps on wait fds in its own `epoll` set, outside
//! any call of the objects (`fi_trywait`, then `epoll_wait`): what the
//! providers' wait-fd tests do, from another thread than the peer's.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::epoll;

use crate::error::{ErrorKind, Result};

/// An epoll set of objects' wait fds.
#[derive(Debug)]
pub struct Sleeper {
    epoll: OwnedFd,
}

impl Sleeper {
    /// A set watching `fds` for reading. Panics on failure.
    pub fn new(fds: &[BorrowedFd<'_>]) -> Sleeper {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .unwrap_or_else(|e| panic!("epoll_create: {e}"));
        for (i, fd) in fds.iter().enumerate() {
            if let Err(e) = epoll::add(
                &epoll,
                *fd,
                epoll::EventData::new_u64(i as u64),
                epoll::EventFlags::IN,
            ) {
                panic!("epoll_ctl ADD of wait fd {i}: {e}");
            }
        }
        Sleeper { epoll }
    }

    /// Calls `trywait` until it answers `Ok`, calling `drain` (read what
    /// is there) after each `Again`; panics on another error or when that
    /// takes longer than `limit`.
    pub fn settle(
        &self,
        trywait: &dyn Fn() -> Result<()>,
        drain: &mut dyn FnMut(),
        limit: Duration,
    ) {
        let end = Instant::now() + limit;
        loop {
            match trywait() {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again => {
                    assert!(
                        Instant::now() < end,
                        "trywait kept answering Again for {limit:?}: {e}"
                    );
                    drain();
                }
                Err(e) => panic!("trywait: {e}"),
            }
            std::thread::yield_now();
        }
    }

    /// Sleeps in `epoll_wait` until a watched fd is readable or `limit`
    /// passes; the indexes (in the order given to [`Sleeper::new`]) of the
    /// fds that woke it, empty on timeout.
    pub fn wait(&self, limit: Duration) -> Vec<usize> {
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 8];
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let ts = rustix::event::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            match epoll::wait(self.epoll.as_fd(), &mut events[..], Some(&ts)) {
                Ok((got, _)) => return got.iter().map(|e| e.data.u64() as usize).collect(),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => panic!("epoll_wait: {e}"),
            }
        }
    }

    /// The application loop: settle with `trywait` (calling `drain`, which
    /// reads the objects, after each `Again`), sleep, `drain` after each
    /// wake-up, until `done` (which looks only at what `drain` gathered)
    /// answers `true`; panics if that takes longer than `limit`. Returns
    /// how many times the sleep woke up.
    pub fn sleep_until(
        &self,
        trywait: &dyn Fn() -> Result<()>,
        drain: &mut dyn FnMut(),
        done: &dyn Fn() -> bool,
        limit: Duration,
    ) -> usize {
        let end = Instant::now() + limit;
        let mut wakes = 0;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "not done within {limit:?} ({wakes} wake-ups)"
            );
            self.settle(trywait, drain, left);
            if done() {
                return wakes;
            }
            if self
                .wait(end.saturating_duration_since(Instant::now()))
                .is_empty()
            {
                continue;
            }
            wakes += 1;
            drain();
            if done() {
                return wakes;
            }
        }
    }

    /// How many times the sleep wakes up within `window` (each wake-up is
    /// followed by `drain` and a `trywait` settle, as an application does):
    /// the spurious wake-ups of an idle object.
    pub fn idle_wakes(
        &self,
        trywait: &dyn Fn() -> Result<()>,
        drain: &mut dyn FnMut(),
        window: Duration,
    ) -> usize {
        let end = Instant::now() + window;
        let mut wakes = 0;
        self.settle(trywait, drain, Duration::from_secs(30));
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || self.wait(left).is_empty() {
                return wakes;
            }
            wakes += 1;
            drain();
            self.settle(trywait, drain, Duration::from_secs(30));
        }
    }
}

/// The sender's side of [`rdm_wakes`]: an enabled RDM endpoint, its CQ,
/// and its address of the receiver.
#[derive(Clone, Copy)]
pub struct Sender<'a> {
    /// The endpoint.
    pub ep: &'a dyn crate::objects::Endpoint,
    /// Its CQ (read to drive its progress).
    pub cq: &'a dyn crate::objects::CompletionQueue,
    /// The receiver, in the sender's AV.
    pub to: crate::objects::FiAddr,
}

/// The receiver's side of [`rdm_wakes`]: an enabled RDM endpoint, its CQ
/// (any wait object but none) and a counter of its receives (FI_WAIT_FD).
#[derive(Clone, Copy)]
pub struct Receiver<'a> {
    /// The endpoint.
    pub ep: &'a dyn crate::objects::Endpoint,
    /// Its CQ.
    pub cq: &'a dyn crate::objects::CompletionQueue,
    /// A counter bound to it for receives.
    pub cntr: &'a dyn crate::objects::Counter,
}

/// Sends `what` after a pause, then drives the sender's progress until
/// `done` is set (or the deadline passes).
fn send_until(s: Sender<'_>, what: &[u8], done: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering;
    std::thread::sleep(Duration::from_millis(100));
    if let Err(e) = s.ep.inject(what, s.to, None) {
        panic!("inject: {e}");
    }
    let end = Instant::now() + Duration::from_secs(30);
    let mut e = [crate::objects::CqEntry::default()];
    while !done.load(Ordering::SeqCst) && Instant::now() < end {
        let _ = s.cq.read(&mut e);
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The wait-fd run every provider passes: the receiver's CQ and counter
/// wait fds go into an `epoll` set in another thread, which calls
/// `trywait` until it answers `Ok` and sleeps in `epoll_wait` with no
/// thread in any object; a message from the sender must wake it (first
/// with both fds, then with the counter's alone). Then the set must stay
/// quiet while idle. Returns the wake-ups seen in 200 ms of idling
/// (asserted to be at most one). Panics on failure.
pub fn rdm_wakes(s: Sender<'_>, r: Receiver<'_>) -> usize {
    rdm_wakes_by(&|what, done| send_until(s, what, done), r)
}

/// As [`rdm_wakes`], with the messages sent by `send(bytes, done)`: it
/// runs on another thread, must have `bytes` arrive at the receiver (from
/// anywhere: another process, say) after a pause, and keep whatever
/// progress that needs going until `done` is set.
pub fn rdm_wakes_by(
    send: &(dyn Fn(&[u8], &std::sync::atomic::AtomicBool) + Sync),
    r: Receiver<'_>,
) -> usize {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicBool, Ordering};
    const LIMIT: Duration = Duration::from_secs(30);
    let (Some(cq_fd), Some(cntr_fd)) = (r.cq.wait_fd(), r.cntr.wait_fd()) else {
        panic!("the receiver's CQ and counter need wait fds")
    };
    let mut buf = [0u8; 16];
    let mut buf2 = [0u8; 16];
    let v = super::iov(&mut buf);
    let v2 = super::iov(&mut buf2);
    let post = |v: &[crate::objects::IoVec], ctx: u64| {
        let m = crate::objects::Msg {
            iov: v,
            desc: &[],
            addr: crate::objects::FiAddr::UNSPEC,
            tag: 0,
            ignore: 0,
            context: ctx,
            data: 0,
        };
        // SAFETY: the buffers outlive the receives' completions, which
        // this function waits for.
        if let Err(e) = unsafe { r.ep.recvmsg(&m, crate::flags::OpFlags::empty()) } {
            panic!("recvmsg: {e}");
        }
    };
    post(&v, 7);
    post(&v2, 8);
    let got: RefCell<Vec<crate::objects::CqEntry>> = RefCell::new(Vec::new());
    let take = || {
        let mut e = [crate::objects::CqEntry::default(); 4];
        while let Ok(n) = r.cq.read(&mut e) {
            got.borrow_mut().extend_from_slice(&e[..n]);
        }
    };
    let both = || -> Result<()> {
        r.cq.trywait()?;
        r.cntr.trywait()
    };
    // 1: both fds; woken by the first message.
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| send(b"wake", &done));
        let sl = Sleeper::new(&[cq_fd, cntr_fd]);
        sl.sleep_until(&both, &mut || take(), &|| !got.borrow().is_empty(), LIMIT);
        done.store(true, Ordering::SeqCst);
    });
    {
        let g = got.borrow();
        assert_eq!(
            (g[0].context, g[0].len),
            (7, 4),
            "the first receive completes"
        );
    }
    assert_eq!(r.cntr.read(), 1, "the counter counted the receive");
    // 2: the counter's fd alone.
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| send(b"again", &done));
        let sl = Sleeper::new(&[cntr_fd]);
        let count = std::cell::Cell::new(0);
        sl.sleep_until(
            &|| r.cntr.trywait(),
            &mut || count.set(r.cntr.read()),
            &|| count.get() >= 2,
            LIMIT,
        );
        done.store(true, Ordering::SeqCst);
    });
    let end = Instant::now() + LIMIT;
    while got.borrow().len() < 2 {
        assert!(Instant::now() < end, "the second receive did not complete");
        take();
    }
    assert_eq!((got.borrow()[1].context, got.borrow()[1].len), (8, 5));
    // 3: idle, nothing may wake the sleep (a busy fd would wake it
    // thousands of times).
    let sl = Sleeper::new(&[cq_fd, cntr_fd]);
    let wakes = sl.idle_wakes(&both, &mut || take(), Duration::from_millis(200));
    assert!(wakes <= 1, "{wakes} wake-ups in 200 ms of idling");
    wakes
}
