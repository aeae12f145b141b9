//! The engine of a domain: it holds the receive-side state of every
//! endpoint the domain opened ([`EpRx`]) under one spin lock, and one
//! progress pass ([`Engine::run`]) drives them all: their rings, queued
//! operations, pushes, and the periodic liveness checks. How it is driven
//! (CQ and counter reads, the auto-progress thread) and how blocking
//! reads sleep and wake is in [`crate::progress`].

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fabric_core::kit::rx::{Action, Route, RxEngine};
use fabric_core::{Error, ErrorKind, Result};
use spin::mutex::{SpinMutex, SpinMutexGuard};

use super::binds::Binds;
use super::rx::{Peer, ShmWire, owner};
use super::state::EpRx;
use crate::pieces::IOV_LIMIT;
use crate::{region, sys};

/// Idle time after which progress announces that it may block (counted
/// from the 64th empty pass in a row, where the engine first reads the
/// clock).
pub const ANNOUNCE_AFTER: Duration = Duration::from_micros(200);

/// How often the engine checks peers and rings (while it is called).
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// A ring head claimed and not committed for this long is recovered (the
/// claimer may have died between claim and commit).
const STUCK_AFTER: Duration = Duration::from_millis(50);

/// A stepped message still being filled this long after the liveness
/// checks first saw it at the ring's head is given up, whether its sender
/// lives or not: the receive it was matched to fails with `FI_EIO`, its
/// sender gets an `ACK` with that error, and the ring moves on. The
/// sender is in the middle of one copy of at most a bounce buffer, which
/// takes microseconds; only a stopped process (a signal, a debugger, a
/// page fault on a swapped-out source) or a misbehaving one takes this
/// long.
pub(crate) const FILL_PATIENCE: Duration = Duration::from_secs(2);

/// Longest sleep of the auto-progress thread between looks.
pub(crate) const AUTO_SLEEP: Duration = Duration::from_millis(50);

/// A receive engine of shm.
pub(crate) type ShmRx = RxEngine<ShmWire, IOV_LIMIT>;

/// A shared receive context (`fi_srx_context`): its engine, which takes
/// the place of each bound endpoint's own while the engine works on that
/// endpoint ([`on_ep`]).
#[derive(Debug)]
struct SrxSlot {
    id: u32,
    engine: ShmRx,
    /// Ids of the endpoints bound, in the order they were bound.
    members: Vec<u32>,
    /// The handle was dropped: the slot goes with its last endpoint.
    closed: bool,
    /// Most endpoints bound at once (`domain_attr.max_ep_srx_ctx`).
    limit: usize,
}

#[derive(Debug)]
struct State {
    eps: Vec<EpRx>,
    srxs: Vec<SrxSlot>,
    next_srx: u32,
    /// Where completions of a shared receive context go when none of its
    /// endpoints is enabled.
    nowhere: Binds,
    idle_since: Option<Instant>,
    announced: bool,
    calls: u32,
    empty_calls: u32,
    last_check: Instant,
}

/// The engine of one domain.
#[derive(Debug)]
pub(crate) struct Engine {
    /// A spin lock: every CQ read takes it with one compare-and-swap and
    /// releases it with a plain store (std's mutex releases with a swap,
    /// a second locked instruction on the path from a command's arrival
    /// to its completion). Waiters for it ([`Engine::lock`]) yield.
    state: SpinMutex<State>,
    /// inotify instance watching the domain's region files.
    pub(crate) inotify: OwnedFd,
    /// eventfd readable while no announcement is in place.
    pub(crate) unannounced: OwnedFd,
    /// timerfd firing every [`CHECK_EVERY`]: wakes blocked readers for
    /// the liveness checks.
    pub(crate) timer: OwnedFd,
    /// One-shot timerfd in the wait fds of an application that sleeps
    /// outside any call (`fi_trywait`): armed only while operations or
    /// transfers are in flight, for their liveness checks.
    pub(crate) ext_timer: OwnedFd,
    /// `ext_timer` is armed (so that disarming it costs a system call only
    /// when it was).
    ext_timer_on: AtomicBool,
    /// eventfd that wakes the auto-progress thread (FI_PROGRESS_AUTO).
    nudge: Option<OwnedFd>,
    auto_sleeping: AtomicBool,
    /// Threads blocked (or about to block) on the wait fds: between
    /// [`Progress::arm`] and [`Progress::disarm`] (blocking CQ and counter
    /// reads).
    pub(crate) armed: AtomicUsize,
}

impl Engine {
    /// An engine; with `auto`, it has the nudge fd of an auto-progress
    /// thread ([`crate::progress`] starts it).
    pub(crate) fn new(auto: bool) -> Result<Arc<Engine>> {
        // The rings' look spacing, measured now rather than at the first
        // poll, which may be an operation's path.
        crate::ring::pace::gap();
        let inotify = sys::inotify()?;
        let unannounced = sys::eventfd(1)?;
        // Wakes blocked readers for the liveness checks.
        let timer = sys::timer_every(CHECK_EVERY)?;
        let ext_timer = sys::timer()?;
        let nudge = if auto { Some(sys::eventfd(0)?) } else { None };
        let e = Arc::new(Engine {
            state: SpinMutex::new(State {
                eps: Vec::new(),
                srxs: Vec::new(),
                next_srx: 1,
                nowhere: Binds::default(),
                idle_since: None,
                announced: false,
                calls: 0,
                empty_calls: 0,
                last_check: Instant::now(),
            }),
            inotify,
            unannounced,
            timer,
            ext_timer,
            ext_timer_on: AtomicBool::new(false),
            nudge,
            auto_sleeping: AtomicBool::new(false),
            armed: AtomicUsize::new(0),
        });
        Ok(e)
    }

    /// The state, waiting for it (opening and closing endpoints): another
    /// thread may be in a progress pass, which can take a while (a large
    /// copy), so the waiter soon yields the CPU, then sleeps, between tries.
    fn lock(&self) -> SpinMutexGuard<'_, State> {
        fabric_core::kit::patient_lock(&self.state)
    }

    /// Adds an endpoint and watches its region.
    pub(crate) fn add(&self, ep: EpRx) -> Result<()> {
        let path = std::ffi::CString::new(ep.region.path().as_os_str().as_encoded_bytes())
            .map_err(|_| Error::inval("shm: region path with a NUL byte"))?;
        sys::watch_modify(self.inotify.as_fd(), &path)?;
        let mut st = self.lock();
        if st.announced {
            let _ = ep.rx.announce_poll_sleep();
        }
        st.eps.push(ep);
        Ok(())
    }

    /// Removes (and so closes) the endpoint with id `id`.
    pub(crate) fn remove(&self, id: u32) {
        let ep = {
            let mut st = self.lock();
            let i = st.eps.iter().position(|e| e.shared.id == id);
            if let Some(i) = i.filter(|&i| st.eps[i].shared.srx.get().is_some()) {
                on_ep(&mut st, i, |ep| {
                    let sh = ep.shared.clone();
                    if let Some(b) = sh.bound.get() {
                        ep.st.leave_srx(&sh, b);
                    }
                });
            }
            let ep = i.map(|i| st.eps.swap_remove(i));
            let State { eps, srxs, .. } = &mut *st;
            srxs.retain(|s| {
                !s.closed
                    || s.members
                        .iter()
                        .any(|m| eps.iter().any(|e| e.shared.id == *m))
            });
            ep
        };
        // The region file goes with the endpoint; inotify drops the watch
        // by itself when the file is removed.
        drop(ep);
    }

    /// Runs `f` on endpoint `id` under the engine's lock (waiting for it).
    pub(crate) fn with_ep<R>(&self, id: u32, f: impl FnOnce(&mut EpRx) -> R) -> Option<R> {
        let mut st = self.lock();
        let i = st.eps.iter().position(|e| e.shared.id == id)?;
        Some(on_ep(&mut st, i, f))
    }

    /// Starts the operations endpoint `id` queued, at once, unless another
    /// thread progresses the engine right now (it will start them): a
    /// rendezvous announcement then leaves with the call that made it,
    /// not with the next CQ read.
    #[inline]
    pub(crate) fn try_start(&self, id: u32) {
        if let Some(mut st) = self.state.try_lock() {
            if let Some(i) = st.eps.iter().position(|e| e.shared.id == id) {
                on_ep(&mut st, i, EpRx::start_queued);
            }
        }
    }

    /// Wakes the auto-progress thread if it sleeps (after work was queued
    /// for it). Nothing under manual progress.
    #[inline]
    pub(crate) fn nudge(&self) {
        if let Some(fd) = &self.nudge {
            if self.auto_sleeping.load(Ordering::SeqCst) {
                sys::signal(fd.as_fd());
            }
        }
    }

    /// Makes the `unannounced` fd readable (`true`) or not.
    fn set_unannounced(&self, on: bool) {
        let fd = self.unannounced.as_fd();
        if on {
            sys::signal(fd);
        } else {
            let _ = sys::take(fd);
        }
    }

    fn drain_inotify(&self) {
        // Room for 32 events of our watches (16 bytes each: they name no
        // file) and for any event with the longest name (the kernel
        // refuses a read that cannot hold the next event). It is zeroed on
        // every call, and this runs where a message may be waiting: a
        // 4 KiB buffer cost about 4,000 instructions a call.
        let mut buf = [0u8; 512];
        for _ in 0..64 {
            if !sys::drain_once(self.inotify.as_fd(), &mut buf) {
                break;
            }
        }
    }

    /// Whether the check timer fired since it was last read (reading it
    /// makes it quiet until it fires again).
    fn timer_fired(&self) -> bool {
        sys::take(self.timer.as_fd())
    }

    /// One progress pass over every endpoint. `idle_now`: announce a
    /// possible sleep at once when nothing is found (the auto-progress
    /// thread, about to block). Returns whether anything happened.
    pub(crate) fn run(&self, idle_now: bool) -> bool {
        self.pass(idle_now, false)
    }

    /// Whether an auto-progress thread drives this engine.
    pub(crate) fn is_auto(&self) -> bool {
        self.nudge.is_some()
    }

    /// The engine's part of `fi_trywait`: a pass that announces a possible
    /// sleep at once when it finds nothing, then `Ok` if the announcement
    /// stands (a peer that writes into one of our rings then makes the
    /// inotify fd readable; a thread that withdraws it makes `unannounced`
    /// readable) and the one-shot check timer is armed if anything is in
    /// flight. `Again` when the pass did work, the announcement could not
    /// be made (work stalled on a peer: keep polling), or another thread
    /// holds the engine.
    pub(crate) fn trywait(&self) -> Result<()> {
        if self.is_auto() {
            // The auto thread progresses; completions wake the object's
            // own eventfd.
            return Ok(());
        }
        let again = |why: &str| Err(Error::new(ErrorKind::Again, format!("shm: {why}")));
        // The check timer fired: run the checks in this pass.
        let due = sys::take(self.ext_timer.as_fd());
        if self.pass(true, due) {
            return again("progress was made; read, then call trywait again");
        }
        let Some(st) = self.state.try_lock() else {
            return again("another thread is progressing the domain");
        };
        if !st.announced || st.eps.iter().any(EpRx::ring_ready) {
            return again("progress is pending (work waits for room at a peer)");
        }
        let checks = st.eps.iter().any(EpRx::in_flight);
        drop(st);
        // One system call per trywait while something is in flight; a
        // wait with nothing in flight needs no checks and stays quiet.
        if checks {
            self.ext_timer_on.store(true, Ordering::SeqCst);
            sys::timer_set(self.ext_timer.as_fd(), CHECK_EVERY, Duration::ZERO)?;
        } else if self.ext_timer_on.swap(false, Ordering::SeqCst) {
            sys::timer_set(self.ext_timer.as_fd(), Duration::ZERO, Duration::ZERO)?;
            // A firing that came before the disarm is read off too.
            let _ = sys::take(self.ext_timer.as_fd());
        }
        Ok(())
    }

    /// One progress pass; `force_check`: run the liveness checks whatever
    /// their schedule says.
    fn pass(&self, idle_now: bool, force_check: bool) -> bool {
        // `None`: another thread is progressing right now.
        let Some(mut guard) = self.state.try_lock() else {
            return false;
        };
        let st = &mut *guard;
        // Pending wake-ups are read off the inotify fd only when someone
        // may block on it (an armed reader, the auto thread going idle) or
        // a command came in, not on every empty look of a busy-polling
        // reader: the read is a system call (an empty `cq.read` of an
        // idle endpoint took 330 ns with it).
        if st.announced
            && (idle_now
                || self.armed.load(Ordering::SeqCst) > 0
                || st.eps.iter().any(|ep| ep.ring_ready()))
        {
            self.drain_inotify();
        }
        let mut work = false;
        for i in 0..st.eps.len() {
            work |= on_ep(st, i, EpRx::progress);
        }
        st.calls = st.calls.wrapping_add(1);
        let mut now = None;
        if work {
            st.empty_calls = 0;
            st.idle_since = None;
            if st.announced {
                for ep in &st.eps {
                    ep.rx.clear_poll_sleep();
                }
                st.announced = false;
                self.set_unannounced(true);
            }
        } else if !st.announced {
            st.empty_calls = st.empty_calls.wrapping_add(1);
            // The clock is read at every 64th empty call only: spinning
            // callers look at the ring more often so, and a ping-pong,
            // whose waits are a few looks long, never reads it (it did
            // at the first empty look of every wait: about 140
            // instructions and a clock read per round trip, where the
            // answer may be arriving).
            if idle_now || st.empty_calls % 64 == 0 {
                let t = Instant::now();
                now = Some(t);
                let since = *st.idle_since.get_or_insert(t);
                // Work stalled on a peer's full ring or bounce pool cannot
                // wake a sleeper (the peer frees room without writing to
                // us): no announcement then, so blocking reads keep polling.
                let idle = idle_now || t.duration_since(since) >= ANNOUNCE_AFTER;
                if idle && !st.eps.iter().any(|ep| ep.stalled()) {
                    // Wake-ups left from before (a poke whose command an
                    // earlier pass took) would make a waiter's poll return
                    // at once.
                    self.drain_inotify();
                    let mut ready = false;
                    for ep in &st.eps {
                        ready |= ep.rx.announce_poll_sleep();
                    }
                    st.announced = true;
                    self.set_unannounced(false);
                    if ready {
                        // A command came in before the announcement: take
                        // it now (the announcement stays: the caller may
                        // block right after this call).
                        for i in 0..st.eps.len() {
                            work |= on_ep(st, i, EpRx::progress);
                        }
                    }
                }
            }
        }
        // A blocked reader woke for the checks (see the module docs); it
        // runs them however recently they ran, since no other wake-up may
        // come.
        let tick = force_check || (self.armed.load(Ordering::SeqCst) > 0 && self.timer_fired());
        if tick || st.calls % 256 == 0 || now.is_some() {
            let t = now.unwrap_or_else(Instant::now);
            if tick || t.duration_since(st.last_check) >= CHECK_EVERY {
                st.last_check = t;
                housekeeping(st, t);
            }
        }
        work
    }

    /// Whether work is queued for the engine (the auto thread's last look
    /// before sleeping).
    fn queued(&self) -> bool {
        match self.state.try_lock() {
            Some(st) => st
                .eps
                .iter()
                .any(|e| !e.shared.posted.is_empty() || !e.shared.txq.is_empty() || e.ring_ready()),
            None => true,
        }
    }

    pub(crate) fn auto_wait(&self) {
        self.auto_sleeping.store(true, Ordering::SeqCst);
        if !self.queued() {
            let fds = [
                Some(self.inotify.as_fd()),
                self.nudge.as_ref().map(|f| f.as_fd()),
            ];
            sys::poll_readable(&fds, AUTO_SLEEP);
        }
        self.auto_sleeping.store(false, Ordering::SeqCst);
        if let Some(fd) = &self.nudge {
            let _ = sys::take(fd.as_fd());
        }
    }
}

/// The periodic checks: peers of operations in flight, senders with
/// pending transfers, rings blocked by a dead claimer.
fn housekeeping(st: &mut State, now: Instant) {
    let mut reclaim = false;
    for i in 0..st.eps.len() {
        reclaim |= on_ep(st, i, |ep| check_ep(ep, now));
    }
    if reclaim {
        match region::reclaim_stale() {
            Ok(v) if !v.is_empty() => {
                tracing::debug!(removed = ?v, "shm: removed regions of exited processes")
            }
            _ => {}
        }
    }
}

/// Passes over an endpoint's ring before its gone peers are forgotten.
const DRAIN_PASSES: usize = 16;

/// The periodic checks of one endpoint; `true`: a peer went away.
fn check_ep(ep: &mut EpRx, now: Instant) -> bool {
    let mut reclaim = false;
    {
        let sh = ep.shared.clone();
        let Some(b) = sh.bound.get() else {
            return false;
        };
        let mut peers = std::mem::take(&mut ep.st.op_peers);
        ep.st.op_peers_into(&mut peers);
        for p in peers.drain(..) {
            if !p.check_alive() {
                tracing::debug!(
                    peer = p.region.name(),
                    "shm: a peer went away; failing its operations"
                );
                ep.st.fail_ops_of(&sh, b, &p);
                reclaim = true;
            }
        }
        ep.st.op_peers = peers;
        // A peer closes (or exits) after its last sends: those commands
        // are in the ring by the time it is seen gone, and once it is
        // forgotten they would be dropped as from an unknown sender. So
        // the peers seen gone now are forgotten only after the ring was
        // read (a bounded number of passes); one that goes while it is
        // read waits for the next check (its last commands may be in the
        // ring after this drain).
        let gone = ep.st.gone_peers(true);
        ep.st
            .gone_marks
            .retain(|&(pi, uid, _)| gone.contains(&(pi, uid)));
        if !gone.is_empty() {
            for _ in 0..DRAIN_PASSES {
                if !ep.progress() {
                    break;
                }
            }
            // A head that waits for its sender (a stepped message still
            // landing, a slot claimed and not committed) hides the
            // commands behind it, which may be the gone peers' last ones.
            // A gone peer sends no more: its last command lies before the
            // last slot claimed now. So each is forgotten once the head
            // passes that position, even if by then the head waits for
            // another sender (senders taking turns at it would otherwise
            // put the forgetting off for ever).
            let due = if ep.head_waits() {
                let end = ep.rx.claimed_end();
                let head = ep.rx.position();
                let marks = &mut ep.st.gone_marks;
                gone.iter()
                    .copied()
                    .filter(|&(pi, uid)| {
                        let mark = match marks.iter().find(|m| (m.0, m.1) == (pi, uid)) {
                            Some(&(_, _, mark)) => mark,
                            None => {
                                marks.push((pi, uid, end));
                                end
                            }
                        };
                        head.wrapping_sub(mark) as i64 >= 0
                    })
                    .collect()
            } else {
                gone
            };
            if !due.is_empty() {
                ep.st
                    .gone_marks
                    .retain(|&(pi, uid, _)| !due.contains(&(pi, uid)));
                if ep.st.forget_peers(&sh, b, &due) {
                    reclaim = true;
                }
            }
        }
        if ep.rx.head_claimed() {
            let since = *ep.st.stuck_since.get_or_insert(now);
            if now.duration_since(since) >= STUCK_AFTER {
                let st = &ep.st;
                let r = ep.rx.recover(|pid| st.claimer_gone(pid));
                if r != crate::ring::Recovery::default() {
                    tracing::warn!(
                        ?r,
                        "shm: recovered a ring left blocked by a sender that died"
                    );
                }
                ep.st.stuck_since = None;
            }
        } else {
            ep.st.stuck_since = None;
        }
        if ep.rx.pool_dry() {
            // A sender that died between taking a bounce buffer and
            // committing its command left no claimed slot behind, so the
            // recovery above never runs for it: its buffers are swept
            // here, whenever no buffer is free.
            let st = &ep.st;
            let freed = ep.rx.free_dead_holders(|pid| st.claimer_gone(pid));
            if freed > 0 {
                tracing::warn!(
                    freed,
                    "shm: returned bounce buffers held by senders that died"
                );
            }
        }
        check_filling(ep, &sh, b, now);
    }
    reclaim
}

/// Gives up a stepped message at the ring's head whose sender died or
/// stopped filling it (see [`FILL_PATIENCE`]).
fn check_filling(ep: &mut EpRx, sh: &super::shared::EpShared, b: &Binds, now: Instant) {
    if ep.rx.forsaken() > 0 {
        let st = &ep.st;
        ep.rx.reclaim_forsaken(|pid| st.claimer_gone(pid));
    }
    let Some((pos, pid)) = ep.rx.filling_head() else {
        ep.st.fill_seen = None;
        return;
    };
    // Timed from the first look at this head, however its mark moves (a
    // peer moving it back and forth must not hold the ring forever).
    let since = match ep.st.fill_seen {
        Some((seen, since)) if seen == pos => since,
        _ => {
            ep.st.fill_seen = Some((pos, now));
            now
        }
    };
    let gone = ep.st.claimer_gone(pid);
    if !gone && now.duration_since(since) < FILL_PATIENCE {
        return;
    }
    let why = if gone {
        "shm: the sender went away in the middle of the message"
    } else {
        "shm: the sender stopped filling the message"
    };
    tracing::warn!(pid, "{why}; the message was dropped");
    let st = &mut ep.st;
    // Consumed unfilled, its bounce buffer stays out of the pool until its
    // sender finished or is gone (`Receiver::reclaim_forsaken`).
    let _ = ep.rx.try_recv(|m, _| st.give_up_head(sh, b, m, why));
    st.fill_seen = None;
    st.ring_filling = false;
}

/// Runs `f` on endpoint `i` (an index in `st.eps`). For an endpoint bound
/// to a shared receive context the context's engine takes the place of
/// its own for the call, and the work the engine left about other
/// endpoints' senders is done on them afterwards.
#[inline]
fn on_ep<R>(st: &mut State, i: usize, f: impl FnOnce(&mut EpRx) -> R) -> R {
    match st.eps[i].shared.srx.get() {
        None => f(&mut st.eps[i]),
        Some(&sid) => on_shared(st, i, sid, f),
    }
}

#[cold]
fn on_shared<R>(st: &mut State, i: usize, sid: u32, f: impl FnOnce(&mut EpRx) -> R) -> R {
    let Some(s) = st.srxs.iter().position(|x| x.id == sid) else {
        return f(&mut st.eps[i]);
    };
    std::mem::swap(&mut st.eps[i].st.rx, &mut st.srxs[s].engine);
    let r = f(&mut st.eps[i]);
    std::mem::swap(&mut st.eps[i].st.rx, &mut st.srxs[s].engine);
    let mut work = std::mem::take(&mut st.eps[i].st.foreign);
    hand_on(st, s, &mut work);
    st.eps[i].st.foreign = work;
    r
}

/// Does `work` (and what the context's engine holds) on the endpoints it
/// concerns, each with the context's engine in place, until none is
/// left; a fetch for an endpoint that closed fails its receive.
fn hand_on(st: &mut State, s: usize, work: &mut Vec<Action<ShmWire>>) {
    loop {
        while let Some(a) = st.srxs[s].engine.next_action() {
            work.push(a);
        }
        if work.is_empty() {
            return;
        }
        let a = work.remove(0);
        let to = owner(&a);
        let found = st
            .eps
            .iter()
            .position(|e| e.shared.id == to && e.shared.bound.get().is_some());
        let Some(j) = found else {
            if let Action::Fetch { recv, meta, .. } = a {
                let err = Error::new(
                    ErrorKind::ConnReset,
                    "shm: the endpoint the message arrived at is closed",
                );
                let State {
                    eps, srxs, nowhere, ..
                } = st;
                let SrxSlot {
                    engine, members, ..
                } = &mut srxs[s];
                let router = Router {
                    eps,
                    members,
                    nowhere,
                };
                engine.fail(&router, recv, meta.tagged, &err);
            }
            continue;
        };
        let sh = st.eps[j].shared.clone();
        let Some(b) = sh.bound.get() else { continue };
        std::mem::swap(&mut st.eps[j].st.rx, &mut st.srxs[s].engine);
        st.eps[j].st.rx.requeue(a);
        st.eps[j].st.run_actions(&sh, b);
        std::mem::swap(&mut st.eps[j].st.rx, &mut st.srxs[s].engine);
        work.append(&mut st.eps[j].st.foreign);
    }
}

/// Routes the completions of a shared receive context's own calls to the
/// endpoint each sender belongs to (by the endpoint id in its number),
/// else to the first bound endpoint that is enabled.
pub(crate) struct Router<'a> {
    eps: &'a [EpRx],
    members: &'a [u32],
    nowhere: &'a Binds,
}

impl Router<'_> {
    fn binds_of(&self, id: u32) -> Option<&Binds> {
        self.eps
            .iter()
            .find(|e| e.shared.id == id)
            .and_then(|e| e.shared.bound.get())
    }
}

impl Route<Peer> for Router<'_> {
    type To = Binds;

    fn to(&self, peer: Option<&Peer>) -> &Binds {
        let first = || self.members.iter().find_map(|m| self.binds_of(*m));
        peer.and_then(|(_, uid)| {
            let id = (uid >> 32) as u32;
            self.members
                .contains(&id)
                .then(|| self.binds_of(id))
                .flatten()
        })
        .or_else(first)
        .unwrap_or(self.nowhere)
    }
}

impl Engine {
    /// Opens a shared receive context; its id.
    /// At most `limit` endpoints may be bound to it at once.
    pub(crate) fn srx_open(&self, directed: bool, limit: usize) -> u32 {
        let mut st = self.lock();
        let id = st.next_srx;
        st.next_srx = st.next_srx.wrapping_add(1);
        st.srxs.push(SrxSlot {
            id,
            engine: ShmRx::new(directed, super::flow::BUDGET),
            members: Vec::new(),
            closed: false,
            limit,
        });
        id
    }

    /// Binds endpoint `ep` to context `sid`.
    pub(crate) fn srx_attach(&self, sid: u32, ep: u32) -> Result<()> {
        let mut st = self.lock();
        let State { eps, srxs, .. } = &mut *st;
        let slot = srxs
            .iter_mut()
            .find(|x| x.id == sid && !x.closed)
            .ok_or_else(|| Error::inval("shm: the shared receive context is closed"))?;
        slot.members
            .retain(|m| eps.iter().any(|e| e.shared.id == *m));
        if slot.members.len() >= slot.limit {
            return Err(Error::new(
                ErrorKind::NoSpc,
                format!(
                    "shm: the shared receive context serves {} endpoints already \
                     (domain_attr.max_ep_srx_ctx)",
                    slot.members.len()
                ),
            ));
        }
        slot.members.push(ep);
        Ok(())
    }

    /// Enables a bound endpoint whose binds are `b` (`set` keeps them),
    /// unless another enabled endpoint of context `sid` uses another
    /// address vector: the endpoints of a shared receive context share
    /// one (fi_endpoint(3)), which directed receives name sources in.
    pub(crate) fn srx_enable(
        &self,
        sid: u32,
        b: Binds,
        set: impl FnOnce(Binds) -> Result<()>,
    ) -> Result<()> {
        let st = self.lock();
        let same = |o: &Binds| match (&o.av, &b.av) {
            (None, None) => true,
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            _ => false,
        };
        let other = st
            .srxs
            .iter()
            .filter(|x| x.id == sid)
            .flat_map(|x| x.members.iter())
            .filter_map(|m| st.eps.iter().find(|e| e.shared.id == *m))
            .any(|e| e.shared.bound.get().is_some_and(|o| !same(o)));
        if other {
            return Err(Error::inval(
                "shm: the endpoints of a shared receive context share one address vector",
            ));
        }
        set(b)
    }

    /// The handle of context `sid` was dropped: the context goes now, or
    /// with the last endpoint bound to it.
    pub(crate) fn srx_close(&self, sid: u32) {
        let mut st = self.lock();
        let State { eps, srxs, .. } = &mut *st;
        for s in srxs.iter_mut().filter(|x| x.id == sid) {
            s.closed = true;
        }
        srxs.retain(|s| {
            !s.closed
                || s.members
                    .iter()
                    .any(|m| eps.iter().any(|e| e.shared.id == *m))
        });
    }

    /// The endpoints bound to context `sid` and still open.
    pub(crate) fn srx_bound(&self, sid: u32) -> usize {
        let st = self.lock();
        st.srxs.iter().find(|x| x.id == sid).map_or(0, |s| {
            s.members
                .iter()
                .filter(|m| st.eps.iter().any(|e| e.shared.id == **m))
                .count()
        })
    }

    /// Runs `f` on context `sid`'s engine, with the router of its
    /// endpoints, then does the work it left on the endpoints concerned.
    /// Receives posted may take what messages held in the endpoints'
    /// rings wait for: those rings are read again.
    pub(crate) fn srx_call<R>(
        &self,
        sid: u32,
        f: impl FnOnce(&mut ShmRx, &Router<'_>) -> R,
    ) -> Result<R> {
        let mut g = self.lock();
        let st = &mut *g;
        let s = st
            .srxs
            .iter()
            .position(|x| x.id == sid)
            .ok_or_else(|| Error::inval("shm: the shared receive context is closed"))?;
        let r = {
            let State {
                eps, srxs, nowhere, ..
            } = &mut *st;
            let SrxSlot {
                engine, members, ..
            } = &mut srxs[s];
            let router = Router {
                eps,
                members,
                nowhere,
            };
            f(engine, &router)
        };
        for ep in st.eps.iter_mut() {
            if ep.shared.srx.get() == Some(&sid) {
                ep.st.ring_held = false;
            }
        }
        let mut work = Vec::new();
        hand_on(st, s, &mut work);
        Ok(r)
    }
}
