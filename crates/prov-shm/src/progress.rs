//! Progress: a domain's engine drives every endpoint it opened (their
//! rings, queued operations, pushes), notices peers that went away, and
//! lets blocking reads sleep until a peer writes.
//!
//! # Sleeping and waking
//!
//! A blocking CQ read (`sread`) spins a little, then blocks in `poll` on
//! the CQ's eventfd and on the engine's two wait fds:
//!
//! - one inotify instance watching every endpoint region of the domain for
//!   `IN_MODIFY`. Once progress has found nothing for [`ANNOUNCE_AFTER`],
//!   it announces in each region that the receiver may be blocking
//!   ([`Receiver::announce_poll_sleep`](crate::ring::Receiver::announce_poll_sleep));
//!   from then on a sender that commits a command `pwrite`s the region's
//!   wake word, which raises `IN_MODIFY` and wakes the poll. The first
//!   progress call that finds work withdraws the announcement, so busy
//!   traffic makes no system call at all. The wake-ups are read off the
//!   inotify fd when the announcement is made, and while it stands only
//!   when a thread may block on the fd (armed by a blocking read, or the
//!   auto thread going idle) or a ring holds a command: a reader that
//!   keeps polling an idle endpoint pays no system call per look (an
//!   empty `cq.read` took 330 ns with one, 19 ns without).
//! - an eventfd that is readable exactly while no announcement is in
//!   place. A caller may decide to block right after a progress call that
//!   did work (and so withdrew the announcement) without producing a
//!   completion for it, such as an RMA write at its target; this fd keeps
//!   its `poll` from sleeping until progress has announced again. It
//!   costs one `write` when an announcement is withdrawn and one `read`
//!   when one is made: at most once per idle period, never on busy paths.
//!
//! With both processes on one core, this is what lets the peer run
//! instead of a spinning reader.
//!
//! # Sleeping outside any call (`fi_trywait`, FI_WAIT_FD)
//!
//! The wait fd of a CQ, EQ or counter is an epoll set of the object's own
//! eventfd and the engine's inotify fd, `unannounced` and a one-shot
//! timerfd. `trywait` makes a pass that announces at once when it finds
//! nothing (`Engine::trywait`): from then on
//! a peer that writes into one of our rings rings the doorbell (the
//! `pwrite` of the wake word, as for a blocked `sread`), a thread that
//! withdraws the announcement makes `unannounced` readable, and a
//! completion made by another thread writes the object's eventfd (once
//! per `trywait`). No thread of ours is blocked anywhere, and the busy
//! path is unchanged: senders look at the announcement word they already
//! look at, and a reader that finds work withdraws it as before. While
//! operations or transfers are in flight, `trywait` arms the one-shot
//! timer for the liveness checks ([`CHECK_EVERY`]); an idle endpoint's fd
//! stays quiet. Under FI_PROGRESS_AUTO the set holds only the object's
//! eventfd: the auto thread makes the completions.
//!
//! No announcement is made while outgoing work waits for room at a peer
//! (a full ring or bounce pool there): the peer makes
//! room in its own region without writing to ours, so nothing would wake
//! the sleeper, and a send larger than the peer's bounce pool, pushed
//! while its sender blocks in `sread`, would wait for the read's timeout.
//! Blocking reads poll instead until the work is done.
//!
//! # Liveness
//!
//! About every [`CHECK_EVERY`], the engine asks the kernel whether the
//! peers it waits for still exist (the lock on their region, and pid and
//! start time within our PID namespace; a closed region is
//! seen at once from its `alive` word): operations towards a peer that
//! went away fail with `FI_ECONNRESET`, its half-received transfers fail,
//! its announced messages are dropped, and the files of dead processes'
//! regions are removed. A ring blocked behind a slot claimed by a sender
//! that died mid-send is recovered.
//!
//! A dead peer writes nothing that would wake a sleeper, so the wait fds
//! include a third: a timerfd that fires every [`CHECK_EVERY`]. A thread
//! blocked in `sread` wakes with it, and the pass it makes reads the
//! timer and runs the checks: its operations towards a peer killed while
//! it slept fail within about two periods. Only passes made while a
//! thread is armed to block read the timer (one `read`, never on a busy
//! path).

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use fabric_core::Result;
use fabric_core::kit::objects::Progress;

use crate::ep::engine::Engine;
pub use crate::ep::engine::{ANNOUNCE_AFTER, CHECK_EVERY};

/// A domain's engine; with `auto`, a thread progresses it.
pub(crate) fn engine(auto: bool) -> Result<Arc<Engine>> {
    let e = Engine::new(auto)?;
    if auto {
        spawn_auto(Arc::downgrade(&e));
    }
    Ok(e)
}

impl Progress for Engine {
    fn progress(&self) -> Result<()> {
        self.run(false);
        Ok(())
    }

    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        f(self.inotify.as_fd());
        f(self.unannounced.as_fd());
        f(self.timer.as_fd());
    }

    fn arm(&self) {
        self.armed.fetch_add(1, Ordering::SeqCst);
    }

    fn disarm(&self) {
        self.armed.fetch_sub(1, Ordering::SeqCst);
    }

    /// The inotify watch of the regions, `unannounced` and the one-shot
    /// check timer; none under an auto-progress thread (its completions
    /// wake the object's eventfd).
    fn trywait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        if !self.is_auto() {
            f(self.inotify.as_fd());
            f(self.unannounced.as_fd());
            f(self.ext_timer.as_fd());
        }
    }

    fn trywait(&self) -> Result<()> {
        Engine::trywait(self)
    }

    /// Nothing: an application sleeping outside any call is served by the
    /// announcement and the one-shot timer `Engine::trywait` sets up,
    /// not by [`Progress::arm`] (which would make every pass read the
    /// periodic timer).
    fn arm_external(&self) {}

    /// Nothing (see [`Progress::arm_external`]).
    fn disarm_external(&self) {}
}

/// Starts the auto-progress thread (FI_PROGRESS_AUTO): it progresses the
/// engine while there is work and sleeps (on the regions' inotify watch
/// and a nudge eventfd, at most `AUTO_SLEEP`) while there is none. It
/// ends once the engine is dropped.
fn spawn_auto(engine: Weak<Engine>) {
    let r = std::thread::Builder::new()
        .name("shm-progress".into())
        .spawn(move || {
            loop {
                let Some(e) = engine.upgrade() else { return };
                if !e.run(true) {
                    e.auto_wait();
                }
            }
        });
    if let Err(e) = r {
        tracing::warn!(error = %e, "shm: cannot start the auto-progress thread");
    }
}
