//! Rendezvous transfers: an announced message is pulled by cross-memory
//! attach (whole, or split with its sender), or cleared to send and
//! pushed by its sender; pushed data lands here (messages, and RMA writes
//! in push mode).

use fabric_core::kit::rx::{Meta, RecvId};
use fabric_core::objects::RmaIov;
use fabric_core::{Error, ErrorKind};

use super::binds::Binds;
use super::rx::*;
use super::shared::EpShared;
use super::state::*;
use super::target::*;
use super::tx::Reply;
use crate::cma::{self, CmaError};
use crate::pieces::{IOV_LIMIT, Pieces, PiecesExt};
use crate::ring::{Message, Payload};
use crate::wire::{self, flag, op};

/// How many more bytes than the sender the receiver copies in a split
/// rendezvous: about what it copies while the `SPLIT` travels to the
/// sender and the `PUT_DONE` comes back. Measured: see the
/// [crate docs](crate::docs#thresholds).
pub(crate) const SPLIT_BIAS: usize = 4 * 1024;

/// Where pushed data for a transfer goes.
#[derive(Debug)]
pub(crate) enum XferDest {
    /// A matched receive (its buffer as the engine holds it).
    Recv { id: RecvId, meta: Meta, buf: Pieces },
    /// Registered memory (an RMA write in push mode).
    Write {
        rma: [RmaIov; wire::RMA_IOV_LIMIT],
        n: usize,
        data: Option<u64>,
    },
}

/// Data being pushed to this endpoint by a peer.
#[derive(Debug)]
pub(crate) struct RxXfer {
    pub peer: u32,
    /// A split rendezvous: where the sender's buffer is (to pull the tail
    /// ourselves if the sender cannot write it) and where the tail starts.
    pub split: Option<Rts>,
    /// The initiator's op id, acknowledged at the end.
    pub op_id: u64,
    pub dest: XferDest,
    pub want: usize,
    pub got: usize,
    /// A part of a split transfer failed (reported once both are done).
    pub failed: Option<ErrorKind>,
    /// The sender already had its `ACK` (split rendezvous: our part was in
    /// place and the sender wrote its own): none is sent at the end.
    pub acked: bool,
}

impl RxState {
    /// Takes an announced message into receive `id`: pulls it with
    /// cross-memory attach, or clears the sender to push it.
    pub(super) fn accept_rts(&mut self, sh: &EpShared, b: &Binds, id: RecvId, meta: Meta, r: Rts) {
        let buf = self.rx.recv(id).map_or(Pieces::EMPTY, |recv| recv.buf);
        let accept = r.len.min(buf.len());
        let Some(Some(peer)) = self.peers.get_mut(r.peer as usize) else {
            let err = Error::new(ErrorKind::ConnReset, "shm: the sender went away");
            return self.rx.fail(b, id, meta.tagged, &err);
        };
        if accept == 0 {
            self.rx.complete(b, id, meta);
            return self.reply(sh, r.peer, Reply::ack(r.id, None));
        }
        if !r.push && !peer.no_cma {
            if !peer.region.is_open() {
                let err = Error::new(ErrorKind::ConnReset, "shm: the sender closed its endpoint");
                return self.rx.fail(b, id, meta.tagged, &err);
            }
            if peer.cma_ok && accept >= sh.split_min {
                return self.split_rts(sh, b, id, buf, meta, r, accept);
            }
            let local = buf.sub(0, accept);
            let (remote, k) = clip(&r.iovs[..r.n], accept);
            // SAFETY: `local` is the receive buffer (the receive contract);
            // the remote ranges are only interpreted by the kernel, in the
            // sender's address space.
            let res = unsafe { cma::transfer(peer.pid, &local.pairs(), &remote[..k], true) };
            match res {
                Ok(()) => {
                    peer.cma_ok = true;
                    self.rx.complete(b, id, meta);
                    return self.reply(sh, r.peer, Reply::ack(r.id, None));
                }
                Err(CmaError::Refused) => {
                    tracing::warn!(peer = %peer.addr, "shm: cross-memory attach refused by the kernel for this peer; using bounce buffers");
                    peer.no_cma = true;
                }
                Err(CmaError::Gone) => {
                    let err = Error::new(ErrorKind::ConnReset, "shm: the sender exited");
                    return self.rx.fail(b, id, meta.tagged, &err);
                }
                Err(e) => {
                    let err = Error::new(
                        e.kind(),
                        "shm: cross-memory attach of the sender's buffer failed",
                    );
                    self.rx.fail(b, id, meta.tagged, &err);
                    return self.reply(sh, r.peer, Reply::ack(r.id, Some(e.kind())));
                }
            }
        }
        let xid = self.xfers.insert(RxXfer {
            peer: r.peer,
            split: None,
            op_id: r.id,
            dest: XferDest::Recv { id, meta, buf },
            want: accept,
            got: 0,
            failed: None,
            acked: false,
        });
        self.reply(
            sh,
            r.peer,
            Reply::Cts {
                id: r.id,
                xfer: xid,
                accept: accept as u64,
            },
        );
    }

    /// Split rendezvous: asks the sender to write the tail of the message
    /// into `op` (from [`split_point`] on) while this side pulls the head,
    /// so both processes copy at once.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn split_rts(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        id: RecvId,
        buf: Pieces,
        meta: Meta,
        r: Rts,
        accept: usize,
    ) {
        let split = split_point(accept);
        let tail = buf.sub(split, accept - split);
        let mut raw = [0u8; IOV_LIMIT * 16];
        let n = wire::encode_iovs(&tail.pairs(), &mut raw);
        let local = buf.sub(0, split);
        let pid = match self.peers.get(r.peer as usize) {
            Some(Some(p)) => p.pid,
            _ => return,
        };
        let xid = self.xfers.insert(RxXfer {
            peer: r.peer,
            split: Some(r),
            op_id: r.id,
            dest: XferDest::Recv { id, meta, buf },
            want: accept,
            got: 0,
            failed: None,
            acked: false,
        });
        self.reply(
            sh,
            r.peer,
            Reply::Split {
                id: r.id,
                xfer: xid,
                split: split as u64,
                accept: accept as u64,
                whole: accept == r.len,
                iovs: &raw[..n],
            },
        );
        let (remote, k) = clip(&r.iovs[..r.n], split);
        // SAFETY: `local` is the head of the receive buffer (the receive
        // contract; the sender writes only the tail); the remote ranges are
        // interpreted by the kernel in the sender's address space.
        let res = unsafe { cma::transfer(pid, &local.pairs(), &remote[..k], true) };
        if res.is_ok() {
            // Acknowledge now, while waiting for the sender's part: the
            // sender finishes once its own write worked, and the ACK is off
            // the path to our completion.
            if let Some(x) = self.xfers.get_mut(xid) {
                x.acked = true;
            }
            self.reply(sh, r.peer, Reply::AckHead { id: r.id });
        }
        self.split_progress(sh, b, xid, split, res.err());
    }

    /// Part `len` of a split transfer is in place (or failed).
    pub(super) fn split_progress(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        xid: u64,
        len: usize,
        err: Option<CmaError>,
    ) {
        let Some(x) = self.xfers.get_mut(xid) else {
            return;
        };
        if let Some(e) = err {
            x.failed.get_or_insert(e.kind());
        }
        x.got += len;
        if x.got >= x.want {
            if let Some(x) = self.xfers.remove(xid) {
                let failed = x.failed;
                self.finish_xfer(sh, b, x, failed);
            }
        }
    }

    /// `SPLIT` (at the sender): write the tail of our message into the
    /// receiver's buffer, then say so.
    pub(super) fn on_split(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let c = &m.cmd;
        let _ = b;
        let Some(op) = self.ops.get(c.tag) else {
            return tracing::debug!("shm: SPLIT for an unknown operation dropped");
        };
        if op.peer.pid != m.sender_pid {
            return tracing::debug!("shm: SPLIT from a process that is not the receiver dropped");
        }
        let (split, accept) = if c.flags & flag::WHOLE != 0 {
            let len = op.buf.len();
            (split_point(len), len)
        } else {
            (usize_of(c.aux[0]), usize_of(c.aux[1]))
        };
        let mut raw = [0u8; IOV_LIMIT * 16];
        let iovs = if p.len() <= raw.len() {
            let n = p.copy_to(&mut raw);
            wire::decode_iovs(&raw[..n])
        } else {
            None
        };
        let status = match iovs {
            Some((v, n))
                if split < accept
                    && accept <= op.buf.len()
                    && v.iter()
                        .take(n)
                        .try_fold(0u64, |a, (_, l)| a.checked_add(*l))
                        .is_some_and(|t| usize_of(t) == accept - split) =>
            {
                let src = op.buf.sub(split, accept - split);
                if sh.cma && !op.peer.no_cma.load(std::sync::atomic::Ordering::Relaxed) {
                    // SAFETY: our message buffer, readable until the
                    // operation completes (the send contract); the remote
                    // ranges are the receiver's, interpreted by the kernel.
                    match unsafe { cma::transfer(op.peer.pid, &src.pairs(), &v[..n], false) } {
                        Ok(()) => None,
                        Err(e) => Some(e.kind()),
                    }
                } else {
                    Some(ErrorKind::Perm)
                }
            }
            _ => Some(ErrorKind::Inval),
        };
        let cmd = crate::ring::Command {
            op: op::PUT_DONE,
            src: sh.id,
            tag: c.data,
            data: wire::status_of(status),
            ..crate::ring::Command::default()
        };
        let peer = op.peer.clone();
        if status.is_some() {
            if let Some(op) = self.ops.get_mut(c.tag) {
                op.put_failed = true;
            }
        }
        if peer.sender.try_send(&cmd, &[]).is_err() {
            // The receiver's ring is full: queue it with the operations
            // to start (it only ever waits behind them).
            self.put_done_backlog.push_back((peer, cmd));
        }
    }

    /// `PUT_DONE` (at the receiver): the sender wrote the tail of a split
    /// transfer; if it could not, pull the tail ourselves.
    pub(super) fn on_put_done(&mut self, sh: &EpShared, b: &Binds, m: &Message) {
        let c = &m.cmd;
        let pi = self.peer_of(m);
        let Some(x) = self.xfers.get_mut(c.tag) else {
            return tracing::debug!("shm: PUT_DONE for an unknown transfer dropped");
        };
        let Some(r) = x.split.filter(|_| pi == Some(x.peer)) else {
            return tracing::debug!("shm: PUT_DONE out of place dropped");
        };
        let (want, split) = (x.want, split_point(x.want));
        let err = match wire::kind_of_status(c.data) {
            None => None,
            Some(_) => {
                // The sender waits for a final ACK even after an early one.
                x.acked = false;
                // Pull the tail ourselves.
                let tail = match &x.dest {
                    XferDest::Recv { buf, .. } => buf.sub(split, want - split),
                    XferDest::Write { .. } => return,
                };
                let (remote, k) = sub_list(&r.iovs[..r.n], split, want - split);
                let pid = match self.peers.get(x.peer as usize) {
                    Some(Some(p)) => p.pid,
                    _ => return,
                };
                // SAFETY: the tail of the receive buffer (the receive
                // contract); the remote ranges are the sender's.
                unsafe { cma::transfer(pid, &tail.pairs(), &remote[..k], true) }.err()
            }
        };
        self.split_progress(sh, b, c.tag, want - split, err);
    }

    // -----------------------------------------------------------------
    // Pushed data and answers.

    pub(super) fn on_data(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let c = &m.cmd;
        let off = usize_of(c.data);
        if c.flags & flag::TO_TX != 0 {
            // Read data or atomic results for one of our operations.
            let Some(op) = self.ops.get_mut(c.tag) else {
                return tracing::debug!("shm: data for an unknown operation dropped");
            };
            if op.peer.pid != m.sender_pid || off.checked_add(m.len).is_none_or(|e| e > op.expect) {
                return tracing::debug!("shm: data outside its operation dropped");
            }
            // SAFETY: the buffer of a read / fetching atomic: the operation's
            // contract keeps it valid and ours until completion.
            let n = unsafe { op.buf.fill_from(off, p, 0, m.len) };
            op.got += n;
            return;
        }
        let pi = self.peer_of(m);
        let Some(x) = self.xfers.get_mut(c.tag) else {
            return tracing::debug!("shm: data for an unknown transfer dropped");
        };
        if pi != Some(x.peer) || off != x.got || m.len > x.want - x.got {
            return tracing::debug!("shm: data out of place in a transfer dropped");
        }
        let n = m.len;
        let ok = match &x.dest {
            XferDest::Recv { buf, .. } => {
                // SAFETY: the matched receive's buffer (receive contract).
                unsafe { buf.fill_from(off, p, 0, n) };
                Ok(())
            }
            XferDest::Write { rma, n: nr, .. } => write_ranges(sh, &rma[..*nr], off, p, n),
        };
        x.got += n;
        let done = x.got == x.want;
        if let Err(kind) = ok {
            if let Some(x) = self.xfers.remove(c.tag) {
                self.finish_xfer(sh, b, x, Some(kind));
            }
        } else if done {
            if let Some(x) = self.xfers.remove(c.tag) {
                self.finish_xfer(sh, b, x, None);
            }
        }
    }

    /// A pushed transfer is complete (or failed at the target).
    pub(crate) fn finish_xfer(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        x: RxXfer,
        err: Option<ErrorKind>,
    ) {
        match x.dest {
            XferDest::Recv { id, meta, .. } => match err {
                None => self.rx.complete(b, id, meta),
                Some(k) => {
                    let e = Error::new(k, "shm: receiving the pushed message failed");
                    self.rx.fail(b, id, meta.tagged, &e);
                }
            },
            XferDest::Write { data, .. } => {
                if err.is_none() {
                    if let Some(c) = &b.cntr_remote_write {
                        c.add(1);
                    }
                    if let Some(d) = data {
                        let src = self.src_of(b, x.peer, false);
                        self.remote_cq_data(sh, b, x.peer, d, src);
                    }
                }
            }
        }
        if !x.acked {
            self.reply(sh, x.peer, Reply::ack(x.op_id, err));
        }
    }
}

/// Where a split rendezvous of `len` bytes splits: the receiver pulls
/// the bytes before this point, the sender writes the rest. The sender
/// starts one command later than the receiver and its `PUT_DONE` takes
/// another to arrive, so the receiver takes [`SPLIT_BIAS`] more than the
/// sender (at most three quarters), on a cache line.
pub(super) fn split_point(len: usize) -> usize {
    ((len + SPLIT_BIAS) / 2).min(len - len / 4) & !63
}

/// The first `len` bytes of a list of (address, length) pieces.
pub(super) fn clip(v: &[(u64, u64)], len: usize) -> ([(u64, u64); IOV_LIMIT], usize) {
    sub_list(v, 0, len)
}

/// Bytes `off..off + len` of a list of (address, length) pieces.
pub(crate) fn sub_list(
    v: &[(u64, u64)],
    mut off: usize,
    mut len: usize,
) -> ([(u64, u64); IOV_LIMIT], usize) {
    let mut out = [(0u64, 0u64); IOV_LIMIT];
    let mut n = 0;
    for &(a, l) in v {
        if len == 0 {
            break;
        }
        let l = usize_of(l);
        if off >= l {
            off -= l;
            continue;
        }
        let k = (l - off).min(len);
        if let Some(o) = out.get_mut(n) {
            *o = (a.wrapping_add(off as u64), k as u64);
            n += 1;
        }
        len -= k;
        off = 0;
    }
    (out, n)
}
