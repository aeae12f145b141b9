//! The peers that sent to an endpoint: introductions (`HELLO`), who sent
//! a command, answers and their backlog, and liveness (peers that went
//! away are forgotten; their announced messages and transfers fail).

use std::collections::VecDeque;

use fabric_core::objects::FiAddr;
use fabric_core::{Address, Error, ErrorKind};

use super::binds::Binds;
use super::rndv::*;
use super::shared::{EpShared, attach};
use super::state::*;
use super::tx::{Queued, Reply};
use crate::config::SCHEME;
use crate::region::OwnerStatus;
use crate::ring::{Message, Payload};

impl RxState {
    // -----------------------------------------------------------------
    // Peers.

    /// The peer that sent `m`, if it introduced itself.
    #[inline]
    pub(super) fn peer_of(&mut self, m: &Message) -> Option<u32> {
        let key = (m.sender_pid, m.cmd.src);
        if let Some((k, i)) = self.last {
            if k == key {
                return Some(i);
            }
        }
        let i = *self.peer_map.get(&key)?;
        self.last = Some((key, i));
        Some(i)
    }

    /// The AV handle of peer `pi` (for FI_SOURCE and directed receive),
    /// looked up again now and then while the application has not
    /// inserted it yet.
    #[inline]
    pub(super) fn src_of(&mut self, b: &Binds, pi: u32, directed: bool) -> FiAddr {
        let Some(Some(p)) = self.peers.get_mut(pi as usize) else {
            return FiAddr::NOTAVAIL;
        };
        let Some(av) = &b.av else {
            return p.fi;
        };
        // Asked again once the AV changed: a removed peer is
        // FI_ADDR_NOTAVAIL (fi_av(3)), an inserted one has a handle.
        let now = av.changes();
        if now != p.fi_gen {
            p.fi_gen = now;
            p.fi = av.reverse(&p.addr);
            return p.fi;
        }
        if p.fi != FiAddr::NOTAVAIL {
            return p.fi;
        }
        p.fi_misses = p.fi_misses.wrapping_add(1);
        if directed || p.fi_misses % 64 == 1 {
            p.fi = av.reverse(&p.addr);
        }
        p.fi
    }

    pub(super) fn on_hello(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let mut raw = [0u8; 128];
        if p.len() > raw.len() {
            tracing::debug!(len = p.len(), "shm: HELLO with an oversized name");
            return;
        }
        let n = p.copy_to(&mut raw);
        let Ok(name) = std::str::from_utf8(&raw[..n]) else {
            tracing::debug!("shm: HELLO with a name that is not UTF-8");
            return;
        };
        let region = match attach(name) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(name, error = %e, "shm: cannot attach the region of a new peer");
                return;
            }
        };
        if region.owner_pid() != m.sender_pid {
            tracing::debug!(
                name,
                claimed = m.sender_pid,
                owner = region.owner_pid(),
                "shm: HELLO from a process that does not own the region it names"
            );
            return;
        }
        let key = (m.sender_pid, m.cmd.src);
        if let Some(&old) = self.peer_map.get(&key) {
            let same = matches!(
                self.peers.get(old as usize),
                Some(Some(p)) if p.region.name() == name && p.region.is_open()
            );
            if same {
                // The same endpoint again (it reached us through another
                // AV handle): nothing changes.
                return;
            }
            // The same (pid, endpoint) with another region: a new process
            // reusing the pid. Whatever the old one left is void.
            self.drop_peer(sh, b, old);
        }
        let local = region.same_pid_ns();
        let peer = RxPeer {
            sender: region.sender(),
            pid: region.owner_pid(),
            addr: Address::Str(format!("{SCHEME}{name}")),
            region,
            fi: FiAddr::NOTAVAIL,
            fi_misses: 0,
            fi_gen: u64::MAX,
            // Cross-memory attach names the peer by pid, which means
            // something only within its PID namespace.
            no_cma: !sh.cma || !local,
            cma_ok: false,
            backlog: VecDeque::new(),
            uid: self.next_uid,
        };
        self.next_uid += 1;
        let idx = match self.peers.iter().position(Option::is_none) {
            Some(i) => {
                self.peers[i] = Some(peer);
                i
            }
            None => {
                self.peers.push(Some(peer));
                self.peers.len() - 1
            }
        } as u32;
        self.peer_map.insert(key, idx);
        self.last = None;
        let _ = self.src_of(b, idx, true);
    }

    /// Forgets peer `pi` (it exited, closed, or was replaced): its
    /// announced messages are dropped, receives being pushed by it fail,
    /// pushes and answers to it are dropped.
    pub(crate) fn drop_peer(&mut self, sh: &EpShared, b: &Binds, pi: u32) {
        let Some(Some(peer)) = self.peers.get_mut(pi as usize).map(Option::take) else {
            return;
        };
        self.peer_map.retain(|_, v| *v != pi);
        self.last = None;
        if !peer.backlog.is_empty() {
            self.backlogged = self.backlogged.saturating_sub(1);
        }
        // Its announced messages go (their data was with the sender);
        // messages whose bytes are here stay deliverable.
        self.rx.peer_gone((pi, peer.uid));
        self.ring_held = false;
        for id in self.xfers.ids_where(|x| x.peer == pi) {
            if let Some(x) = self.xfers.remove(id) {
                if let XferDest::Recv { id, meta, .. } = x.dest {
                    let err = Error::new(
                        ErrorKind::ConnReset,
                        "shm: the sender went away in the middle of the message",
                    );
                    self.rx.fail(b, id, meta.tagged, &err);
                }
            }
        }
        self.pushes.retain(|p| p.rx_peer != Some(pi));
        if self.filling.is_some_and(|f| f.pi == pi) {
            self.fill_failed(b, "shm: the sender went away in the middle of the message");
        }
        // What it held may let other senders resume.
        self.run_actions(sh, b);
        tracing::debug!(peer = %peer.addr, "shm: forgot a peer");
    }

    /// Sends an answer to peer `pi`, or queues it behind earlier ones.
    pub(crate) fn reply(&mut self, sh: &EpShared, pi: u32, r: Reply<'_>) {
        let Some(Some(peer)) = self.peers.get_mut(pi as usize) else {
            return;
        };
        let (cmd, mut bytes) = r.command(sh.id);
        if matches!(r, Reply::AckErr { .. }) {
            // A reason rides inline (clipped to what a slot holds).
            let cap = peer.sender.inline_capacity().min(super::tx::REASON_MAX);
            bytes = &bytes[..bytes.len().min(cap)];
        }
        if peer.backlog.is_empty() {
            match peer.sender.try_send(&cmd, bytes) {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::Again => {}
                Err(e) => {
                    tracing::debug!(error = %e, "shm: an answer to a peer failed");
                    return;
                }
            }
            self.backlogged += 1;
        }
        peer.backlog.push_back(Queued {
            cmd,
            bytes: bytes.to_vec(),
        });
    }

    /// Sends queued answers.
    pub(super) fn flush_backlogs(&mut self) -> bool {
        let mut work = false;
        let mut left = 0;
        for p in self.peers.iter_mut().flatten() {
            while let Some(q) = p.backlog.front() {
                match p.sender.try_send(&q.cmd, &q.bytes) {
                    Ok(()) => {
                        work = true;
                        p.backlog.pop_front();
                    }
                    Err(e) if e.kind() == ErrorKind::Again => break,
                    Err(_) => {
                        p.backlog.pop_front();
                    }
                }
            }
            if !p.backlog.is_empty() {
                left += 1;
            }
        }
        self.backlogged = left;
        work
    }

    // -----------------------------------------------------------------
    // Liveness.

    /// Whether the process that claimed a slot or holds a bounce buffer
    /// of our ring (by its pid, as it recorded it) is gone, for
    /// [`Receiver::recover`]. A pid of a known peer of another PID
    /// namespace means some other process here (or none): such a peer is
    /// judged by its region's lock instead. Other pids are asked about
    /// here ([`process_gone`](crate::region::process_gone)).
    pub(crate) fn claimer_gone(&self, pid: u32) -> bool {
        let mut foreign = None;
        for p in self.peers.iter().flatten() {
            if p.pid == pid && !p.region.same_pid_ns() {
                let gone = p.region.owner_status() == OwnerStatus::Gone;
                if !gone {
                    return false;
                }
                foreign = Some(gone);
            }
        }
        foreign.unwrap_or_else(|| crate::region::process_gone(pid))
    }

    /// The peers whose endpoint closed or whose process exited (`deep`:
    /// ask the kernel about peers with something pending; otherwise only
    /// the cheap `alive` word is read), by index and number.
    pub(crate) fn gone_peers(&self, deep: bool) -> Vec<(u32, u64)> {
        self.peers
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = p.as_ref().filter(|p| peer_gone(p, deep))?;
                Some((u32::try_from(i).ok()?, p.uid))
            })
            .collect()
    }

    /// Forgets the peers of `gone` ([`gone_peers`](Self::gone_peers))
    /// still in their places (a slot freed meanwhile may hold a new peer,
    /// with another number). Returns whether a peer was dropped.
    pub(crate) fn forget_peers(&mut self, sh: &EpShared, b: &Binds, gone: &[(u32, u64)]) -> bool {
        let mut dropped = false;
        for &(pi, uid) in gone {
            if matches!(self.peers.get(pi as usize), Some(Some(p)) if p.uid == uid) {
                self.drop_peer(sh, b, pi);
                dropped = true;
            }
        }
        dropped
    }
}

/// A peer whose endpoint closed, or (`deep`: asking the kernel) whose
/// process is gone.
fn peer_gone(p: &RxPeer, deep: bool) -> bool {
    !p.region.is_open() || (deep && p.region.owner_status() != OwnerStatus::Alive)
}
