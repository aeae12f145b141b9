//! The sending side of the engine: operations handed over by the
//! application's threads ([`TxReq`]) are started here (rendezvous
//! announcements, RMA and atomic requests, eager messages that found a
//! full ring), finished by the target's `ACK`, fed by `CTS` in push mode;
//! pushes stream data in bounce-buffer chunks; answers are built here.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use fabric_core::kit::atomic::AtomicKind;
use fabric_core::objects::{MrAccess, RmaIov};
use fabric_core::{Error, ErrorKind, OpFlags, Result};

use super::binds::{Binds, TxDone, TxReport};
use super::choice::Probe;
use super::shared::{EpShared, TxKind, TxPeer, TxReq, peer_gone};
use super::state::RxState;
use crate::pieces::{IOV_LIMIT, Pieces, PiecesExt};
use crate::ring::{Command, Message, Payload, Sender};
use crate::wire::{self, DESC_MAX, Desc, INJECT_ID, flag, op};

/// An answer to a peer (built on the stack; queued owned when the peer's
/// ring is full).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reply<'a> {
    /// An operation is finished.
    Ack { id: u64, status: u64 },
    /// An operation failed at the target: the status and the target's
    /// reason as text (the initiator's error completion says it; a peer
    /// that does not know this reads a plain error `ACK`).
    AckErr {
        id: u64,
        status: u64,
        text: &'a [u8],
    },
    /// The receiver's part of a split rendezvous is in place.
    AckHead { id: u64 },
    /// An operation is finished and its results are these bytes.
    AckData { id: u64, bytes: &'a [u8] },
    /// Clear to send (push mode).
    Cts { id: u64, xfer: u64, accept: u64 },
    /// Split rendezvous: write the tail into these ranges. `whole`: the
    /// receiver takes the whole message, split at `split_point` of its
    /// length (sent without `split` and `accept`, see `flag::WHOLE`).
    Split {
        id: u64,
        xfer: u64,
        split: u64,
        accept: u64,
        whole: bool,
        iovs: &'a [u8],
    },
    /// Flow control of unexpected messages: `PAUSE` (`pause`) or
    /// `RESUME`, naming our region.
    Flow { pause: bool, region: &'a str },
}

impl Reply<'_> {
    /// An ACK with an optional error.
    pub(crate) fn ack(id: u64, err: Option<ErrorKind>) -> Reply<'static> {
        Reply::Ack {
            id,
            status: wire::status_of(err),
        }
    }

    /// The command and payload.
    pub(crate) fn command(&self, src: u32) -> (Command, &[u8]) {
        match *self {
            Reply::Ack { id, status } => (
                Command {
                    op: op::ACK,
                    src,
                    tag: id,
                    data: status,
                    ..Command::default()
                },
                &[],
            ),
            Reply::AckErr { id, status, text } => (
                Command {
                    op: op::ACK,
                    src,
                    tag: id,
                    data: status,
                    ..Command::default()
                },
                text,
            ),
            Reply::AckHead { id } => (
                Command {
                    op: op::ACK,
                    flags: flag::HEAD,
                    src,
                    tag: id,
                    ..Command::default()
                },
                &[],
            ),
            Reply::AckData { id, bytes } => (
                Command {
                    op: op::ACK,
                    src,
                    tag: id,
                    ..Command::default()
                },
                bytes,
            ),
            Reply::Split {
                id,
                xfer,
                split,
                accept,
                whole,
                iovs,
            } => (
                Command {
                    op: op::SPLIT,
                    flags: if whole { flag::WHOLE } else { 0 },
                    src,
                    tag: id,
                    data: xfer,
                    aux: if whole { [0, 0] } else { [split, accept] },
                },
                iovs,
            ),
            Reply::Flow { pause, region } => (
                Command {
                    op: if pause { op::PAUSE } else { op::RESUME },
                    src,
                    ..Command::default()
                },
                region.as_bytes(),
            ),
            Reply::Cts { id, xfer, accept } => (
                Command {
                    op: op::CTS,
                    src,
                    tag: id,
                    data: xfer,
                    aux: [accept, 0],
                    ..Command::default()
                },
                &[],
            ),
        }
    }
}

/// An answer waiting for room in a peer's ring.
#[derive(Debug)]
pub(crate) struct Queued {
    pub cmd: Command,
    pub bytes: Vec<u8>,
}

/// An operation started and waiting for its target.
#[derive(Debug)]
pub(crate) struct TxOp {
    pub peer: Arc<TxPeer>,
    /// Where results land (reads, fetching atomics); the source of
    /// pushed data (sends, writes in push mode).
    pub buf: Pieces,
    pub done: TxDone,
    /// Bytes of results expected.
    pub expect: usize,
    /// Bytes of results received.
    pub got: usize,
    /// The target moves the data itself (cross-memory attach): its `ACK`
    /// means all of it is in place.
    pub cma: bool,
    /// A split rendezvous whose part we were asked to write failed: the
    /// target pulls it itself, so its early `ACK` (flag HEAD) does not
    /// finish the operation.
    pub put_failed: bool,
    /// The protocol choice of a message timed until its `ACK`: a
    /// rendezvous, a lone eager message or a timed eager sample.
    pub probe: Option<Probe>,
}

/// Where pushed data comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PushSrc {
    /// An operation's user buffer.
    User(Pieces),
    /// Checked registered memory (an RMA read in push mode), checked again
    /// chunk by chunk while it is copied.
    Mem {
        rma: [RmaIov; wire::RMA_IOV_LIMIT],
        n: usize,
    },
}

/// A stream of `DATA` chunks to a peer.
#[derive(Debug)]
pub(crate) struct Push {
    pub to: Sender,
    /// The destination id at the peer.
    pub dest: u64,
    /// The destination is the peer's own operation (read data).
    pub to_tx: bool,
    pub src: PushSrc,
    pub off: usize,
    pub end: usize,
    /// Our operation this push belongs to (dropped when it fails).
    pub op: Option<u64>,
    /// The peer this push answers (dropped when it goes away).
    pub rx_peer: Option<u32>,
    /// After the last chunk, acknowledge this op id to the peer.
    pub ack: Option<u64>,
    /// Count a remote read when done.
    pub count_read: bool,
}

fn u64_of(n: usize) -> u64 {
    n as u64
}

impl RxState {
    /// Starts the operations handed over, in order. An operation that
    /// finds its target's ring full waits at the head (so order is kept).
    pub(crate) fn start_ops(&mut self, sh: &EpShared, b: &Binds) -> bool {
        let mut work = false;
        self.send_paused = false;
        loop {
            // (`is_empty` first: an empty `pop` costs a full fence.)
            let Some(req) = self
                .pending
                .pop_front()
                .or_else(|| (!sh.txq.is_empty()).then(|| sh.txq.pop()).flatten())
            else {
                break;
            };
            if req.flags.contains(OpFlags::FENCE) && self.ops.len() > 0 {
                self.pending.push_front(req);
                break;
            }
            if req.peer.dead.load(Ordering::Relaxed) {
                work = true;
                sh.queued.fetch_sub(1, Ordering::AcqRel);
                sh.outstanding.fetch_sub(1, Ordering::AcqRel);
                b.tx_failed(&req.done, &peer_gone());
                continue;
            }
            let flowed = matches!(req.kind, TxKind::Send { .. })
                || req.flags.contains(OpFlags::REMOTE_CQ_DATA);
            if flowed && req.peer.paused.load(Ordering::Relaxed) {
                // The peer paused our messages (unexpected-message flow
                // control) or our remote CQ data (its receive CQ is
                // full): wait for its `RESUME`, which arrives in our
                // ring and so wakes a sleeper; later operations queue
                // behind (send-after-send order).
                self.pending.push_front(req);
                self.send_paused = true;
                break;
            }
            match self.start(sh, b, &req) {
                Ok(()) => {
                    work = true;
                    sh.queued.fetch_sub(1, Ordering::AcqRel);
                }
                Err(e) if e.kind() == ErrorKind::Again => {
                    self.pending.push_front(req);
                    break;
                }
                Err(e) => {
                    work = true;
                    sh.queued.fetch_sub(1, Ordering::AcqRel);
                    sh.outstanding.fetch_sub(1, Ordering::AcqRel);
                    b.tx_failed(&req.done, &e);
                }
            }
        }
        work
    }

    /// Sends the first command of an operation. `Again` leaves nothing
    /// behind.
    fn start(&mut self, sh: &EpShared, b: &Binds, req: &TxReq) -> Result<()> {
        let peer = &req.peer;
        let cma_works = sh.cma && !peer.no_cma.load(Ordering::Relaxed);
        // Below `cma_min` two pipelined copies through bounce buffers beat
        // the system calls of cross-memory attach.
        let use_cma = |len: usize| cma_works && len >= sh.cma_min;
        let cap = peer
            .sender
            .bounce_capacity()
            .max(peer.sender.inline_capacity());
        let mut cmd = Command {
            src: sh.id,
            ..Command::default()
        };
        if req.flags.contains(OpFlags::REMOTE_CQ_DATA) {
            cmd.flags |= flag::CQ_DATA;
            cmd.data = req.data;
        }
        match req.kind {
            TxKind::Send { tagged, tag } => {
                let len = req.buf.len();
                if tagged {
                    cmd.flags |= flag::TAGGED;
                    cmd.tag = tag;
                }
                // Above the eager limit, a message that fits one bounce
                // buffer still goes eagerly when it goes alone (nothing else
                // of this endpoint in flight: a ping-pong), and asks for an
                // `ACK`: its completion waits for it, so the next messages of
                // a window take the rendezvous (see the crate docs, eager
                // limit).
                let lone = sh.lone_eager && len > sh.eager_max && self.ops.len() == 0;
                // From `MID_MIN` to the CMA limit, the copy is chosen by
                // measurement (see `choice`): the calling thread chose for
                // messages up to the eager limit (a choice of CMA, or a timed
                // eager sample, comes here with its probe); a lone message
                // above it, which asks for an `ACK` anyway, is chosen and
                // timed here.
                let probe = req.probe.or_else(|| {
                    (lone && sh.adaptive && cma_works && len < sh.cma_min && len <= cap)
                        .then(|| peer.choice.pick(len))
                });
                let eager = match probe {
                    Some(p) => !p.cma(),
                    None => (len <= sh.eager_max || lone) && len <= cap,
                };
                if eager {
                    cmd.op = op::MSG;
                    // A timed message (alone above the eager limit, or a
                    // sample of the mid sizes below it) is timed to its `ACK`.
                    let wants_ack =
                        lone || probe.is_some() || req.flags.contains(OpFlags::DELIVERY_COMPLETE);
                    let id = wants_ack.then(|| self.insert(req, Pieces::EMPTY, 0));
                    if let Some(id) = id {
                        cmd.flags |= flag::ACK_REQ;
                        wire::set_op_id(&mut cmd, id, 0);
                        if let Some(op) = self.ops.get_mut(id) {
                            op.probe = probe;
                        }
                    }
                    // SAFETY: the send contract: the buffer is readable until
                    // the operation completes.
                    let (parts, n) = unsafe { req.buf.slices() };
                    // Stepped only with an `ACK` asked for: should the
                    // receiver give the message up half filled, the send
                    // learns it (see the crate docs, stepped messages).
                    // Not a timed sample (`req.probe`): it must cost what the
                    // unstepped messages it stands for cost.
                    let stepped =
                        id.is_some() && req.probe.is_none() && len >= crate::ring::STEPPED_MIN;
                    let sent = if stepped {
                        peer.sender.try_send_parts_stepped(&cmd, &parts[..n])
                    } else {
                        peer.sender.try_send_parts(&cmd, &parts[..n])
                    };
                    if let Err(e) = sent {
                        if let Some(id) = id {
                            self.ops.remove(id);
                        }
                        return Err(e);
                    }
                    if id.is_none() {
                        sh.outstanding.fetch_sub(1, Ordering::AcqRel);
                        b.tx_op_done(&req.done);
                    }
                    return Ok(());
                }
                cmd.op = op::RTS;
                // From the CMA limit on, which copy is faster depends on the
                // machine's state: measure (see `choice`).
                let probe = probe.or_else(|| {
                    (sh.adaptive && cma_works && len >= sh.cma_min).then(|| peer.choice.pick(len))
                });
                if !probe.map_or(use_cma(len), |p| p.cma()) {
                    cmd.flags |= flag::PUSH;
                }
                let id = self.insert(req, req.buf, 0);
                if let Some(op) = self.ops.get_mut(id) {
                    op.probe = probe;
                }
                wire::set_op_id(&mut cmd, id, 1);
                if cmd.flags & flag::ID_IN_DATA == 0 {
                    // The length rides only with an op id in `aux`.
                    cmd.aux[0] = u64_of(len);
                }
                let mut raw = [0u8; IOV_LIMIT * 16];
                let n = wire::encode_iovs(&req.buf.pairs(), &mut raw);
                self.send_or_forget(peer, &cmd, &[&raw[..n]], id)
            }
            TxKind::Write { rma } => {
                let rma = &rma.0[..rma.1];
                let total = req.buf.len();
                // Inline when the data fits one command after its
                // descriptor (which, without local ranges, is small).
                let inline = total <= sh.eager_max && total + DESC_MAX <= cap;
                let pairs = req.buf.pairs();
                let local: &[(usize, usize)] = if inline || !use_cma(total) {
                    &[]
                } else {
                    &pairs
                };
                let d = Desc::new(rma, local).ok_or_else(|| Error::inval("shm: bad RMA ranges"))?;
                let mut raw = [0u8; DESC_MAX];
                let n = d.encode(&mut raw);
                cmd.op = op::WRITE;
                let id = self.insert(req, req.buf, 0);
                cmd.tag = id;
                if inline {
                    cmd.flags |= flag::INLINE;
                    // SAFETY: the write's source buffer is readable until
                    // completion (the RMA contract).
                    let (parts, k) = unsafe { req.buf.slices() };
                    let mut all: [&[u8]; IOV_LIMIT + 1] = [&[]; IOV_LIMIT + 1];
                    all[0] = &raw[..n];
                    for (d, s) in all[1..].iter_mut().zip(&parts[..k]) {
                        *d = s;
                    }
                    return self.send_or_forget(peer, &cmd, &all[..=k], id);
                }
                if !use_cma(total) {
                    cmd.flags |= flag::PUSH;
                }
                self.send_or_forget(peer, &cmd, &[&raw[..n]], id)
            }
            TxKind::Read { rma } => {
                let rma = &rma.0[..rma.1];
                let total = req.buf.len();
                let push = total <= sh.eager_max || !use_cma(total);
                let pairs = req.buf.pairs();
                let local: &[(usize, usize)] = if push { &[] } else { &pairs };
                let d = Desc::new(rma, local).ok_or_else(|| Error::inval("shm: bad RMA ranges"))?;
                let mut raw = [0u8; DESC_MAX];
                let n = d.encode(&mut raw);
                cmd.op = op::READ;
                if push {
                    cmd.flags |= flag::PUSH;
                }
                let id = self.insert(req, req.buf, total);
                if let Some(op) = self.ops.get_mut(id) {
                    op.cma = !push;
                }
                cmd.tag = id;
                self.send_or_forget(peer, &cmd, &[&raw[..n]], id)
            }
            TxKind::Atomic {
                rma,
                dt,
                op: aop,
                kind,
                compare,
                result,
            } => {
                let rma = &rma.0[..rma.1];
                let mut d =
                    Desc::new(rma, &[]).ok_or_else(|| Error::inval("shm: bad RMA ranges"))?;
                d.atomic = Some((dt, aop, kind));
                let mut raw = [0u8; DESC_MAX];
                let n = d.encode(&mut raw);
                let count: usize = rma.iter().map(|r| r.len).sum();
                let expect = if kind == AtomicKind::Plain {
                    0
                } else {
                    count * dt.size()
                };
                cmd.op = op::ATOMIC;
                let id = self.insert(req, result, expect);
                cmd.tag = id;
                // SAFETY: the operands and compare values are readable
                // until completion (the atomic contract).
                let ((parts, k), (cparts, ck)) = unsafe { (req.buf.slices(), compare.slices()) };
                let mut all: [&[u8]; 2 * IOV_LIMIT + 1] = [&[]; 2 * IOV_LIMIT + 1];
                all[0] = &raw[..n];
                for (d, s) in all[1..]
                    .iter_mut()
                    .zip(parts[..k].iter().chain(&cparts[..ck]))
                {
                    *d = s;
                }
                self.send_or_forget(peer, &cmd, &all[..=k + ck], id)
            }
        }
    }

    fn insert(&mut self, req: &TxReq, buf: Pieces, expect: usize) -> u64 {
        self.ops.insert(TxOp {
            peer: req.peer.clone(),
            buf,
            done: req.done,
            expect,
            got: 0,
            cma: false,
            put_failed: false,
            probe: None,
        })
    }

    /// Sends `cmd`; on failure the op `id` is forgotten again.
    fn send_or_forget(
        &mut self,
        peer: &TxPeer,
        cmd: &Command,
        parts: &[&[u8]],
        id: u64,
    ) -> Result<()> {
        peer.sender.try_send_parts(cmd, parts).inspect_err(|_| {
            self.ops.remove(id);
        })
    }

    /// Ends operation `id`: its completion (or error), the outstanding
    /// count, its pushes.
    fn finish_op(&mut self, sh: &EpShared, b: &Binds, id: u64, err: Option<Error>) {
        let Some(op) = self.ops.remove(id) else {
            return;
        };
        sh.outstanding.fetch_sub(1, Ordering::AcqRel);
        self.pushes.retain(|p| p.op != Some(id));
        match err {
            None => {
                if let Some(probe) = op.probe {
                    op.peer.choice.record(probe);
                }
                b.tx_op_done(&op.done)
            }
            Some(e) => b.tx_failed(&op.done, &e),
        }
    }

    /// `ACK`: the target finished an operation of ours.
    pub(crate) fn on_ack(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let c = &m.cmd;
        let status = wire::kind_of_status(c.data);
        if c.tag == INJECT_ID {
            // An injected write or atomic: it only counts.
            if let Some(cn) = &b.cntr_write {
                match status {
                    None => cn.add(1),
                    Some(_) => cn.add_err(1),
                }
            }
            return;
        }
        let Some(op) = self.ops.get_mut(c.tag) else {
            return tracing::debug!("shm: ACK for an unknown operation dropped");
        };
        if op.peer.pid != m.sender_pid {
            return tracing::debug!("shm: ACK from a process that is not the target dropped");
        }
        if c.flags & flag::HEAD != 0 {
            // The target's part of a split rendezvous is in place; ours is
            // too unless our write failed (then the target pulls it and
            // acknowledges again).
            if !op.put_failed {
                self.finish_op(sh, b, c.tag, None);
            }
            return;
        }
        if !p.is_empty() && status.is_none() {
            if p.len() > op.expect {
                return self.finish_op(
                    sh,
                    b,
                    c.tag,
                    Some(Error::new(
                        ErrorKind::Io,
                        "shm: the target answered with too many bytes",
                    )),
                );
            }
            // SAFETY: the result buffer of a read / fetching atomic (the
            // operation's contract).
            let n = unsafe { op.buf.fill_from(0, p, 0, p.len()) };
            op.got = op.got.max(n);
        }
        let err = match status {
            Some(k) => Some(Error::new(k, remote_text(k, p))),
            None if op.got < op.expect && !op.cma => Some(Error::new(
                ErrorKind::Io,
                "shm: the target finished without sending all the data",
            )),
            None => None,
        };
        self.finish_op(sh, b, c.tag, err);
    }

    /// `CTS`: the target takes `accept` bytes of a push-mode operation.
    pub(crate) fn on_cts(&mut self, sh: &EpShared, m: &Message) {
        let c = &m.cmd;
        let _ = sh;
        let Some(op) = self.ops.get(c.tag) else {
            return tracing::debug!("shm: CTS for an unknown operation dropped");
        };
        if op.peer.pid != m.sender_pid {
            return tracing::debug!("shm: CTS from a process that is not the target dropped");
        }
        let accept = usize::try_from(c.aux[0])
            .unwrap_or(usize::MAX)
            .min(op.buf.len());
        if accept == 0 {
            return;
        }
        self.pushes.push_back(Push {
            to: op.peer.sender.clone(),
            dest: c.data,
            to_tx: false,
            src: PushSrc::User(op.buf),
            off: 0,
            end: accept,
            op: Some(c.tag),
            rx_peer: None,
            ack: None,
            count_read: false,
        });
    }

    /// Streams data chunks, oldest push first, while the peers' rings and
    /// bounce pools have room, up to [`PUSH_BUDGET`] bytes per pass.
    pub(crate) fn run_pushes(&mut self, sh: &EpShared, b: &Binds) -> bool {
        let mut work = false;
        let mut i = 0;
        let mut budget = PUSH_BUDGET;
        // A lone push is cut into pipelined chunks; several at once keep
        // both cores busy with whole bounce buffers.
        let alone = self.pushes.len() == 1;
        while i < self.pushes.len() && budget > 0 {
            let Some(p) = self.pushes.get_mut(i) else {
                break;
            };
            let mut failed = None;
            while p.off < p.end && budget > 0 {
                let before = p.off;
                match push_chunk(sh, p, alone) {
                    Ok(()) => {
                        work = true;
                        budget = budget.saturating_sub(p.off - before);
                    }
                    Err(e) if e.kind() == ErrorKind::Again => break,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let done = p.off >= p.end;
            if let Some(e) = failed {
                let p = self.pushes.remove(i);
                work = true;
                if let Some(p) = p {
                    if let Some(id) = p.op {
                        self.finish_op(sh, b, id, Some(e));
                    }
                    if let (Some(pi), Some(id)) = (p.rx_peer, p.ack) {
                        self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Io)));
                    }
                }
                continue;
            }
            if done {
                work = true;
                if let Some(p) = self.pushes.remove(i) {
                    if p.count_read {
                        if let Some(cn) = &b.cntr_remote_read {
                            cn.add(1);
                        }
                    }
                    if let (Some(pi), Some(id)) = (p.rx_peer, p.ack) {
                        self.reply(sh, pi, Reply::ack(id, None));
                    }
                }
                continue;
            }
            i += 1;
        }
        work
    }

    /// Fails every operation towards a dead peer (and their pushes).
    pub(crate) fn fail_ops_of(&mut self, sh: &EpShared, b: &Binds, dead: &TxPeer) {
        let ids = self
            .ops
            .ids_where(|op| std::ptr::eq(Arc::as_ptr(&op.peer), dead));
        for id in ids {
            self.finish_op(sh, b, id, Some(peer_gone()));
        }
    }

    /// Fills `v` (emptied first) with the peers of operations in flight,
    /// each once, for the liveness pass: a buffer kept between passes, so
    /// that the periodic check allocates nothing once warmed up.
    pub(crate) fn op_peers_into(&self, v: &mut Vec<Arc<TxPeer>>) {
        v.clear();
        let peers = self.ops.values().map(|op| &op.peer);
        for p in peers.chain(self.pending.iter().map(|r| &r.peer)) {
            if !v.iter().any(|q| Arc::ptr_eq(q, p)) {
                v.push(p.clone());
            }
        }
    }
}

/// The text of an operation the target refused: the target's reason when
/// its `ACK` carries one, else the error's description.
#[cold]
fn remote_text(k: ErrorKind, p: &Payload<'_>) -> String {
    if p.is_empty() {
        return format!("shm: the target refused the operation: {}", k.description());
    }
    let mut raw = [0u8; REASON_MAX];
    let n = p.copy_to(&mut raw);
    format!(
        "shm: the target refused the operation: {}",
        String::from_utf8_lossy(&raw[..n])
    )
}

/// Longest reason of a refusal carried back to the initiator.
pub(crate) const REASON_MAX: usize = 256;

/// Bytes of pushed data one progress pass copies at most (two bounce
/// buffers of the default size): the pass then returns, so that the `ACK`s and `CTS`s that
/// came meanwhile are taken while a window of pushes is still being
/// copied (see the [crate docs](crate::docs#progress-and-locking)).
const PUSH_BUDGET: usize = 256 * 1024;

/// A push that runs alone is cut into this many chunks, so that the
/// receiver copies one out while the sender fills the next (see the
/// [crate docs](crate::docs#thresholds)).
const PIPELINE_PARTS: usize = 4;

/// Smallest chunk of a push cut for pipelining.
const PIPELINE_MIN: usize = 16 * 1024;

/// The chunk size of a lone push of `total` bytes whose peer takes
/// `room` bytes per command: a [`PIPELINE_PARTS`]th of it, on a cache
/// line, from [`PIPELINE_MIN`] up to `room`.
fn chunk_size(total: usize, room: usize) -> usize {
    total
        .div_ceil(PIPELINE_PARTS)
        .next_multiple_of(64)
        .max(PIPELINE_MIN)
        .min(room)
}

/// Sends the next chunk of a push (at most one bounce buffer, within one
/// piece of the source; smaller when the push is `alone`, see
/// [`chunk_size`]).
fn push_chunk(sh: &EpShared, p: &mut Push, alone: bool) -> Result<()> {
    let room = p.to.bounce_capacity().max(p.to.inline_capacity());
    let room = if alone { chunk_size(p.end, room) } else { room };
    let cmd = Command {
        op: op::DATA,
        flags: if p.to_tx { flag::TO_TX } else { 0 },
        src: sh.id,
        tag: p.dest,
        data: u64_of(p.off),
        ..Command::default()
    };
    match p.src {
        PushSrc::User(buf) => {
            let piece = buf.sub(p.off, (p.end - p.off).min(room));
            let Some(&(a, l)) = piece.pairs().first() else {
                return Err(Error::new(ErrorKind::Io, "shm: push beyond the buffer"));
            };
            // SAFETY: the operation's buffer, readable until it completes
            // (the send / write contract); the push is dropped when the
            // operation ends.
            let bytes = unsafe { std::slice::from_raw_parts(a as *const u8, l) };
            p.to.try_send(&cmd, bytes)?;
            p.off += l;
            Ok(())
        }
        PushSrc::Mem { rma, n } => {
            let mut pos = 0usize;
            for r in rma.iter().take(n) {
                if p.off < pos + r.len {
                    let within = p.off - pos;
                    let k = (r.len - within).min(room).min(p.end - p.off);
                    let at = r.addr.wrapping_add(within as u64);
                    let to = &p.to;
                    let sent = sh
                        .mr
                        .with_access(r.key, at, k, MrAccess::REMOTE_READ, |base| {
                            // SAFETY: checked registered memory held
                            // registered while it is copied (mr_reg's
                            // contract lets peers read it).
                            let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, k) };
                            to.try_send(&cmd, bytes)
                        })
                        .map_err(|e| {
                            Error::new(e.kind(), "shm: the read's memory region went away")
                        })?;
                    sent?;
                    p.off += k;
                    return Ok(());
                }
                pos += r.len;
            }
            Err(Error::new(ErrorKind::Io, "shm: push beyond the ranges"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_pushes_are_cut_in_four_from_16_kib_to_a_bounce_buffer() {
        let room = 64 * 1024;
        assert_eq!(chunk_size(40_000, room), 16 * 1024);
        assert_eq!(chunk_size(64 * 1024, room), 16 * 1024);
        assert_eq!(chunk_size(100_000, room), 25_024);
        assert_eq!(chunk_size(128 * 1024, room), 32 * 1024);
        assert_eq!(chunk_size(1 << 20, room), room);
        assert_eq!(chunk_size(1 << 20, 1024), 1024, "never above the room");
    }
}
