//! The sending side of an endpoint: sends (eager and rendezvous), RMA
//! writes and reads, atomics at the initiator; frames queued on
//! connections (behind a fence, in a peer's backlog until it is
//! connected) and written; the answers the peer sends back (clear to send,
//! acknowledgements, read data, atomic results).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use fabric_core::kit::atomic::AtomicKind;
use fabric_core::kit::binds::{Binds, msg_flags};
use fabric_core::objects::{AtomicMsg, AtomicOp, CompletionFlags, CqEntry, FiAddr, RmaIov, RmaMsg};
use fabric_core::{Error, ErrorKind, OpFlags, Result};

use super::core::{EpInner, Kind, Peer, State, proto, u64_of, usize_of};
use crate::atomic;
use crate::conn::{
    Conn, Done, Pending, Phase, Pieces, Queued, Sink, Src, TxDone, TxItem, copy_out,
};
use crate::limits::EAGER_MAX;
use crate::wire::{Ext, Flags, Frame};

/// Takes request `id` out of `pending` when `is` accepts its kind. A reply
/// of another kind leaves the request where it is: the connection then
/// fails, and every request still pending ends in an error completion,
/// this one included (a hostile or broken peer must not make an operation
/// vanish).
fn take_pending(
    pending: &mut HashMap<u64, Pending>,
    id: u64,
    reply: &str,
    is: impl FnOnce(&Pending) -> bool,
) -> Result<Pending> {
    match pending.get(&id) {
        Some(p) if is(p) => pending
            .remove(&id)
            .ok_or_else(|| proto(format!("tcp: {reply} for unknown request {id}"))),
        Some(_) => Err(proto(format!(
            "tcp: {reply} for request {id}, which awaits another answer"
        ))),
        None => Err(proto(format!("tcp: {reply} for unknown request {id}"))),
    }
}

#[cold]
fn remote(kind: ErrorKind, what: &str) -> Error {
    // A version 1 peer sends the status only (not the target's text): say
    // what the status means for remote memory.
    let why = match kind {
        ErrorKind::KeyRejected => {
            "it has no memory region with the key given (FI_EKEYREJECTED)".to_owned()
        }
        ErrorKind::Access => "a range is outside the region of its key, or the region \
             does not grant the access, or the endpoint does not serve it (FI_EACCES)"
            .to_owned(),
        k => k.description().to_owned(),
    };
    Error::new(kind, format!("tcp: the peer refused the {what}: {why}"))
}

/// The error of an operation the target refused with `kind` and the
/// reason `text` (protocol version 2; from the network, so bounded by the
/// decoder, read as lossy UTF-8 and with control characters replaced);
/// without a reason, what the status means.
#[cold]
pub(super) fn remote_said(kind: ErrorKind, what: &str, text: &[u8]) -> Error {
    let text: String = String::from_utf8_lossy(text)
        .trim()
        .chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if text.is_empty() {
        return remote(kind, what);
    }
    Error::new(kind, format!("tcp: the peer refused the {what}: {text}"))
}

/// The failed answer `f` to an operation of this side: fails it now, or,
/// when the answer carries the target's reason, once that is read.
#[cold]
fn refused_answer(
    ep: &EpInner,
    st: &mut State,
    b: &Binds,
    cid: u32,
    f: &Frame,
    done: TxDone,
    what: &'static str,
) {
    let Some(kind) = f.header.status else {
        return;
    };
    if f.header.payload_len == 0 {
        ep.tx_complete(b, done, Some(&remote(kind, what)));
    } else {
        let sink = Sink::Refusal {
            done,
            kind,
            what,
            text: Vec::new(),
        };
        ep.set_cur(st, cid, f, sink);
    }
}

/// The header flags asking for an acknowledgement, from an operation's
/// flags.
/// Why a MSG endpoint has no destination: shut down, or not connected.
#[cold]
fn msg_dest_error(closed: bool) -> Error {
    if closed {
        Error::new(ErrorKind::Shutdown, "tcp: the connection is shut down")
    } else {
        Error::new(ErrorKind::NotConn, "tcp: the endpoint is not connected")
    }
}

fn ack_flags(flags: OpFlags) -> Flags {
    if flags.contains(OpFlags::DELIVERY_COMPLETE) {
        Flags::ACK_DELIVERY
    } else if flags.contains(OpFlags::TRANSMIT_COMPLETE) {
        Flags::ACK_TRANSMIT
    } else {
        Flags::NONE
    }
}

impl EpInner {
    /// A transmit operation finished.
    ///
    /// Called with the endpoint's state locked, as every change of
    /// `outstanding` is (see [`EpInner::op_started`]).
    pub(crate) fn tx_complete(&self, b: &Binds, done: TxDone, err: Option<&Error>) {
        // Changes are serialized by the state lock: a load and a store, no
        // locked instruction.
        let n = self.outstanding.load(Ordering::Relaxed);
        self.outstanding
            .store(n.saturating_sub(1), Ordering::Release);
        let e = CqEntry {
            context: done.context,
            flags: done.flags,
            len: done.len,
            ..CqEntry::default()
        };
        match err {
            None => b.tx_done(e, done.report),
            Some(err) => b.failed(false, e, err, 0),
        }
    }

    #[inline]
    fn on_written(&self, b: &Binds, d: Done, note: &mut WriteNote) {
        match d {
            Done::None => {}
            Done::Tx(t) => self.tx_complete(b, t, None),
            Done::Connected => note.connected = true,
            Done::Close => note.close = true,
        }
    }

    /// Fails a queued frame's operation.
    pub(super) fn fail_queued(&self, b: &Binds, q: Queued, err: &Error) {
        let (_, done) = q.item.into_parts();
        if let Done::Tx(t) = done {
            self.tx_complete(b, t, Some(err));
        }
        if let Some((_, p)) = q.pending {
            self.tx_complete(b, p.done(), Some(err));
        }
    }

    /// Queues a frame to the peer `key`: on its established connection, or
    /// in its backlog until there is one (RDM: connecting first).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn submit(
        &self,
        st: &mut State,
        b: &Binds,
        key: SocketAddr,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
        pending: Option<(u64, Pending)>,
        fence: bool,
    ) {
        if let Some(cid) = self.ready_conn(st, key) {
            self.conn_submit(st, b, cid, frame, src, done, pending, fence);
            return;
        }
        let peer = st.peers.entry(key).or_default();
        peer.backlog.push_back(Queued {
            item: TxItem::new(frame, src.into_owned_body(), done),
            pending,
            fence,
        });
        let connect =
            self.kind == Kind::Rdm && peer.connecting.is_none() && peer.orphaned.is_none();
        if connect {
            self.rdm_connect(st, b, key);
        }
    }

    /// Queues a frame of an operation on an established connection,
    /// behind a fence if one is pending, and writes at once when the queue
    /// was empty.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn conn_submit(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
        pending: Option<(u64, Pending)>,
        fence: bool,
    ) {
        let Some(conn) = st.conns.get_mut(&cid) else {
            return;
        };
        if !conn.held.is_empty() || (fence && conn.outstanding() > 0) {
            conn.held.push_back(Queued {
                item: TxItem::new(frame, src.into_owned_body(), done),
                pending,
                fence,
            });
            return;
        }
        if let Some((id, p)) = pending {
            conn.pending.insert(id, p);
        }
        self.write_frame(st, b, cid, frame, src, done);
    }

    /// Queues a protocol frame (a response, a rendezvous chunk) on a
    /// connection, ahead of any fence, and writes at once when the queue
    /// was empty.
    pub(crate) fn push_frame(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
    ) {
        if !st.conns.contains_key(&cid) {
            if let Done::Tx(t) = done {
                let err = Error::new(ErrorKind::ConnReset, "tcp: the connection is gone");
                self.tx_complete(b, t, Some(&err));
            }
            return;
        }
        self.write_frame(st, b, cid, frame, src, done);
    }

    /// Writes a frame on a connection: at once, straight from its source,
    /// when nothing is queued on an established connection; else behind
    /// the queued frames.
    pub(super) fn write_frame(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
    ) {
        let Some(conn) = st.conns.get_mut(&cid) else {
            return;
        };
        let direct = conn.phase == Phase::Ready
            && !conn.connecting
            && conn.held.is_empty()
            && matches!(done, Done::None | Done::Tx(_));
        if !direct {
            let body = conn.tx.body(src);
            conn.tx.push(TxItem::new(frame, body, done));
            if conn.tx.len() == 1 {
                self.flush_one(st, b, cid);
            } else {
                self.tx_waiting.store(true, Ordering::Release);
            }
            return;
        }
        let Conn { sock, tx, .. } = conn;
        match tx.send_now(sock.as_fd(), frame, src, done) {
            Ok(Some(d)) => self.on_written(b, d, &mut WriteNote::default()),
            Ok(None) => {
                // Queued: written by progress once the socket has room.
                self.tx_waiting.store(true, Ordering::Release);
                if !conn.want_write {
                    conn.want_write = true;
                    self.rewatch(conn, cid);
                }
            }
            Err(e) => st.dead.push((cid, e)),
        }
    }

    /// Moves a frame (with its request) onto an established connection.
    pub(super) fn enqueue(&self, st: &mut State, b: &Binds, cid: u32, q: Queued) {
        let Some(conn) = st.conns.get_mut(&cid) else {
            let err = Error::new(ErrorKind::ConnReset, "tcp: the connection is gone");
            self.fail_queued(b, q, &err);
            return;
        };
        if !conn.held.is_empty() || (q.fence && conn.outstanding() > 0) {
            conn.held.push_back(q);
            return;
        }
        if let Some((id, p)) = q.pending {
            conn.pending.insert(id, p);
        }
        conn.tx.push(q.item);
    }

    /// A connection to `key` is established: the backlog goes on it.
    pub(crate) fn peer_ready(&self, st: &mut State, b: &Binds, key: SocketAddr, cid: u32) {
        let backlog = match st.peers.get_mut(&key) {
            Some(p) => {
                p.conn = Some(cid);
                if p.orphaned.take().is_some() {
                    st.orphans = st.orphans.saturating_sub(1);
                }
                std::mem::take(&mut p.backlog)
            }
            None => {
                st.peers.insert(
                    key,
                    Peer {
                        conn: Some(cid),
                        ..Peer::default()
                    },
                );
                VecDeque::new()
            }
        };
        for q in backlog {
            self.enqueue(st, b, cid, q);
        }
        self.flush_one(st, b, cid);
    }

    /// Fails everything waiting for a connection to `key`.
    pub(crate) fn fail_backlog(&self, st: &mut State, b: &Binds, key: SocketAddr, err: &Error) {
        let backlog = match st.peers.get_mut(&key) {
            Some(p) => {
                if p.orphaned.take().is_some() {
                    st.orphans = st.orphans.saturating_sub(1);
                }
                std::mem::take(&mut p.backlog)
            }
            None => return,
        };
        for q in backlog {
            self.fail_queued(b, q, err);
        }
    }

    /// Writes what a connection has queued; records a failure in
    /// `st.dead`.
    pub(crate) fn flush_one(&self, st: &mut State, b: &Binds, cid: u32) {
        let Some(conn) = st.conns.get_mut(&cid) else {
            return;
        };
        let mut note = WriteNote::default();
        let r = conn.flush(&self.mr, &mut |d| self.on_written(b, d, &mut note));
        if conn.rx.tx_full && conn.tx.may_resume() {
            conn.rx.tx_full = false;
            st.resume.push(cid);
        }
        let want = conn.connecting || !conn.tx.is_empty();
        if want {
            self.tx_waiting.store(true, Ordering::Release);
        }
        if want != conn.want_write {
            conn.want_write = want;
            self.rewatch(conn, cid);
        }
        let idle = conn.tx.is_empty() && !conn.connecting;
        if let Err(e) = r {
            st.dead.push((cid, e));
            return;
        }
        if note.connected {
            self.msg_connected_sent(st);
        }
        if note.close
            || (idle
                && st
                    .conns
                    .get(&cid)
                    .is_some_and(|c| c.phase == Phase::Closing))
        {
            st.conns.remove(&cid);
            return;
        }
        if idle {
            self.release_held(st, b, cid);
        }
    }

    /// Issues frames held behind a fence once nothing is outstanding.
    pub(super) fn release_held(&self, st: &mut State, b: &Binds, cid: u32) {
        let mut moved = false;
        loop {
            let Some(conn) = st.conns.get_mut(&cid) else {
                return;
            };
            let Some(front) = conn.held.front() else {
                break;
            };
            if front.fence && conn.outstanding() > 0 {
                break;
            }
            let Some(q) = conn.held.pop_front() else {
                break;
            };
            if let Some((id, p)) = q.pending {
                conn.pending.insert(id, p);
            }
            conn.tx.push(q.item);
            moved = true;
        }
        if moved {
            self.flush_one(st, b, cid);
        }
    }

    /// One more transmit operation outstanding. Every change of the count
    /// happens with the endpoint's state locked (`st` says so; completions
    /// run inside operations and progress passes, which hold it), so a load
    /// and a store suffice where a locked read-modify-write would cost the
    /// send path a locked instruction; readers outside the lock
    /// ([`EpInner::tx_start`]) only load it.
    #[inline]
    pub(crate) fn op_started(&self, st: &State) {
        let _ = st;
        let n = self.outstanding.load(Ordering::Relaxed);
        self.outstanding.store(n + 1, Ordering::Release);
    }

    /// Checks that a transmit operation may start; `Again` when
    /// `tx_attr.size` operations are outstanding (after one progress
    /// attempt).
    pub(crate) fn tx_start(&self) -> Result<&Binds> {
        if !self.enabled.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::OpBadState,
                "tcp: endpoint not enabled (call enable after binding its CQ and AV)",
            ));
        }
        let b = self.bound()?;
        let size = self.info.tx_attr.size.max(1);
        if self.outstanding.load(Ordering::Acquire) >= size {
            let _ = fabric_core::kit::objects::Progress::progress(&*self.poller);
            if self.outstanding.load(Ordering::Acquire) >= size {
                return Err(Error::again());
            }
        }
        Ok(b)
    }

    /// The peer key of an operation's destination: for MSG a field read
    /// in the caller, for RDM a call to [`EpInner::rdm_dest`].
    #[inline(always)]
    pub(crate) fn dest_key(&self, st: &mut State, b: &Binds, dest: FiAddr) -> Result<SocketAddr> {
        match self.kind {
            Kind::Rdm => self.rdm_dest(st, b, dest),
            Kind::Msg => match st.msg.peer {
                Some(peer) if !st.msg.closed => Ok(peer),
                _ => Err(msg_dest_error(st.msg.closed)),
            },
        }
    }

    /// The established connection frames to peer `key` go on: a MSG
    /// endpoint's one connection is `msg.conn` (it becomes Ready together
    /// with its peer entry); RDM looks the peer up.
    fn ready_conn(&self, st: &State, key: SocketAddr) -> Option<u32> {
        let conn = match self.kind {
            Kind::Msg => st.msg.conn,
            Kind::Rdm => st.peers.get(&key).and_then(|p| p.conn),
        };
        conn.filter(|cid| st.conns.get(cid).is_some_and(|c| c.phase == Phase::Ready))
    }

    /// The lone-eager limit toward peer `key`: further on an established
    /// connection inside this host that nothing paces.
    fn lone_max_to(&self, st: &State, key: SocketAddr) -> usize {
        match self.ready_conn(st, key).and_then(|cid| st.conns.get(&cid)) {
            Some(c) if c.unpaced => self.lone_max_unpaced,
            _ => self.lone_max,
        }
    }

    /// Sends a message (every send form ends here).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &self,
        dest: FiAddr,
        tagged: bool,
        tag: u64,
        flags: OpFlags,
        data: u64,
        context: u64,
        src: Src<'_>,
        len: usize,
    ) -> Result<()> {
        let b = self.tx_start()?;
        if len > self.info.ep_attr.max_msg_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("message of {len} bytes is over max_msg_size"),
            ));
        }
        let inject = flags.contains(OpFlags::INJECT);
        let report = !inject && (!b.tx_selective || flags.contains(OpFlags::COMPLETION));
        let done = TxDone {
            context,
            flags: msg_flags(tagged, false),
            len,
            report,
        };
        let ack = ack_flags(flags);
        let cq = flags.contains(OpFlags::REMOTE_CQ_DATA);
        let mut st = self.lock();
        let key = self.dest_key(&mut st, b, dest)?;
        let id = st.new_op_id();
        let n = u64_of(len);
        // Lone: nothing in flight and no other send since the last
        // progress call (a stream posts its sends back to back).
        // A load and a store, not a swap: a race between two senders only
        // blurs the heuristic, and an uncontended swap still costs a locked
        // instruction.
        let burst = self.sent_since_progress.load(Ordering::Relaxed);
        if !burst {
            self.sent_since_progress.store(true, Ordering::Relaxed);
        }
        let lone = !burst && self.outstanding.load(Ordering::Acquire) == 0;
        let eager = len <= EAGER_MAX || (lone && len <= self.lone_max_to(&st, key));
        let (frame, src, now, pending) = if eager {
            let mut f = if tagged {
                Frame::tagged(id, tag, n)
            } else {
                Frame::msg(id, n)
            };
            if cq {
                f = f.with_cq_data(data);
            }
            if ack.is_empty() {
                (f, src, Done::Tx(done), None)
            } else {
                let f = f.with_flags(ack);
                (f, src, Done::None, Some((id, Pending::Ack { done })))
            }
        } else {
            let Src::User(buf) = src else {
                return Err(Error::inval("tcp: a large message needs a user buffer"));
            };
            let mut f = Frame::rts(id, tagged.then_some(tag), n).with_flags(ack);
            if cq {
                f = f.with_cq_data(data);
            }
            (
                f,
                Src::None,
                Done::None,
                Some((id, Pending::Rndv { buf, done, ack })),
            )
        };
        self.op_started(&st);
        self.submit(
            &mut st,
            b,
            key,
            &frame,
            src,
            now,
            pending,
            flags.contains(OpFlags::FENCE),
        );
        self.finish_pass(&mut st, b);
        Ok(())
    }

    /// An RMA write.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &self,
        dest: FiAddr,
        rma_iov: &[RmaIov],
        src: Src<'_>,
        len: usize,
        flags: OpFlags,
        data: u64,
        context: u64,
    ) -> Result<()> {
        let b = self.tx_start()?;
        let total = rma_iov
            .iter()
            .try_fold(0usize, |acc, r| acc.checked_add(r.len))
            .ok_or_else(|| Error::inval("tcp: rma iov lengths overflow"))?;
        if total != len {
            return Err(Error::inval(format!(
                "tcp: {len} local bytes for {total} remote bytes"
            )));
        }
        if len > self.info.ep_attr.max_msg_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("RMA write of {len} bytes is over max_msg_size"),
            ));
        }
        let inject = flags.contains(OpFlags::INJECT);
        let report = !inject && (!b.tx_selective || flags.contains(OpFlags::COMPLETION));
        let done = TxDone {
            context,
            flags: CompletionFlags::RMA | CompletionFlags::WRITE,
            len,
            report,
        };
        let mut st = self.lock();
        let key = self.dest_key(&mut st, b, dest)?;
        let id = st.new_op_id();
        // Writes are always acknowledged, so that a refusal at the target
        // reaches the initiator.
        let mut f = Frame::write(id, rma_iov)?.with_flags(Flags::ACK_DELIVERY);
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            f = f.with_cq_data(data);
        }
        self.op_started(&st);
        self.submit(
            &mut st,
            b,
            key,
            &f,
            src,
            Done::None,
            Some((id, Pending::Ack { done })),
            flags.contains(OpFlags::FENCE),
        );
        self.finish_pass(&mut st, b);
        Ok(())
    }

    /// An RMA read.
    pub(crate) fn read(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        let b = self.tx_start()?;
        let buf = Pieces::new(msg.iov)?;
        let len = buf.len();
        let total = msg
            .rma_iov
            .iter()
            .try_fold(0usize, |acc, r| acc.checked_add(r.len))
            .ok_or_else(|| Error::inval("tcp: rma iov lengths overflow"))?;
        if total != len {
            return Err(Error::inval(format!(
                "tcp: {len} local bytes for {total} remote bytes"
            )));
        }
        if len > self.info.ep_attr.max_msg_size {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!("RMA read of {len} bytes is over max_msg_size"),
            ));
        }
        let done = TxDone {
            context: msg.context,
            flags: CompletionFlags::RMA | CompletionFlags::READ,
            len,
            report: !b.tx_selective || flags.contains(OpFlags::COMPLETION),
        };
        let mut st = self.lock();
        let key = self.dest_key(&mut st, b, msg.addr)?;
        let id = st.new_op_id();
        let f = Frame::read_req(id, msg.rma_iov)?;
        self.op_started(&st);
        self.submit(
            &mut st,
            b,
            key,
            &f,
            Src::None,
            Done::None,
            Some((
                id,
                Pending::Read {
                    buf,
                    len: u64_of(len),
                    done,
                },
            )),
            flags.contains(OpFlags::FENCE),
        );
        self.finish_pass(&mut st, b);
        Ok(())
    }

    /// An atomic operation (plain, fetching or compare).
    pub(crate) fn atomic(&self, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        let b = self.tx_start()?;
        let kind = AtomicKind::of(!msg.compare.is_empty(), !msg.result.is_empty());
        atomic::valid(msg.datatype, msg.op, kind)?;
        let count = msg
            .rma_iov
            .iter()
            .try_fold(0u64, |acc, r| acc.checked_add(u64_of(r.len)))
            .ok_or_else(|| Error::inval("tcp: atomic counts overflow"))?;
        if count == 0 || count > self.limits.max_atomic_count {
            return Err(Error::inval(format!(
                "tcp: {count} atomic elements (1 to {} allowed)",
                self.limits.max_atomic_count
            )));
        }
        let size = u64_of(msg.datatype.size());
        let bytes = count * size;
        let mut operands = Pieces::EMPTY;
        if msg.op != AtomicOp::AtomicRead {
            operands.extend(msg.iov)?;
            if u64_of(operands.len()) != bytes {
                return Err(Error::inval(format!(
                    "tcp: {} operand bytes for {count} elements of {size} bytes",
                    operands.len()
                )));
            }
        }
        if kind == AtomicKind::Compare {
            let cmp = Pieces::new(msg.compare)?;
            if u64_of(cmp.len()) != bytes {
                return Err(Error::inval(format!(
                    "tcp: {} compare bytes for {count} elements of {size} bytes",
                    cmp.len()
                )));
            }
            operands.extend(msg.compare)?;
        }
        let result = Pieces::new(msg.result)?;
        if kind != AtomicKind::Plain && u64_of(result.len()) < bytes {
            return Err(Error::new(
                ErrorKind::TooSmall,
                format!(
                    "tcp: {} result bytes for {count} elements of {size} bytes",
                    result.len()
                ),
            ));
        }
        let inject = flags.contains(OpFlags::INJECT);
        let report = !inject && (!b.tx_selective || flags.contains(OpFlags::COMPLETION));
        let done = TxDone {
            context: msg.context,
            flags: CompletionFlags::ATOMIC
                | if kind == AtomicKind::Plain {
                    CompletionFlags::WRITE
                } else {
                    CompletionFlags::READ
                },
            len: usize_of(bytes),
            report,
        };
        let mut st = self.lock();
        let key = self.dest_key(&mut st, b, msg.addr)?;
        let id = st.new_op_id();
        let mut f = Frame::atomic(id, kind, msg.datatype, msg.op, msg.rma_iov)?;
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            f = f.with_cq_data(msg.data);
        }
        let pending = if kind == AtomicKind::Plain {
            f = f.with_flags(Flags::ACK_DELIVERY);
            Pending::Ack { done }
        } else {
            Pending::Fetch {
                buf: result,
                len: bytes,
                done,
            }
        };
        let copy;
        let src = if inject && !operands.is_empty() {
            let mut v = vec![0u8; operands.len()];
            // Readable now: the inject contract.
            copy_out(&operands, 0, &mut v);
            copy = v;
            Src::Bytes(&copy)
        } else if !operands.is_empty() {
            Src::User(operands)
        } else {
            Src::None
        };
        self.op_started(&st);
        self.submit(
            &mut st,
            b,
            key,
            &f,
            src,
            Done::None,
            Some((id, pending)),
            flags.contains(OpFlags::FENCE),
        );
        self.finish_pass(&mut st, b);
        Ok(())
    }

    // ---------------------------------------------------------------
    // Answers to this side's requests.

    /// The peer's clear-to-send for a rendezvous send of this side: the
    /// data goes, straight from the user's buffer.
    pub(super) fn on_cts(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let Some(conn) = st.conns.get_mut(&cid) else {
            return Ok(());
        };
        let Ext::Cts { accept_len } = f.ext else {
            return Err(proto("tcp: Cts without its length"));
        };
        let id = f.header.id;
        let Pending::Rndv { buf, done, ack } = take_pending(&mut conn.pending, id, "Cts", |p| {
            matches!(p, Pending::Rndv { .. })
        })?
        else {
            return Err(proto(format!("tcp: Cts for request {id} of another kind")));
        };
        if f.header.status.is_some() {
            refused_answer(self, st, b, cid, f, done, "message");
        } else if accept_len > u64_of(buf.len()) {
            let e = proto(format!(
                "tcp: Cts accepts {accept_len} bytes of a {}-byte message",
                buf.len()
            ));
            self.tx_complete(b, done, Some(&e));
            return Err(e);
        } else if accept_len == 0 {
            self.tx_complete(b, done, None);
        } else {
            let data = Frame::rndv_data(id, 0, accept_len);
            let part = Src::User(buf.sub(0, usize_of(accept_len)));
            if ack.is_empty() {
                self.push_frame(st, b, cid, &data, part, Done::Tx(done));
            } else {
                if let Some(c) = st.conns.get_mut(&cid) {
                    c.pending.insert(id, Pending::Ack { done });
                }
                self.push_frame(st, b, cid, &data, part, Done::None);
            }
        }
        Ok(())
    }

    /// The peer acknowledges an operation of this side.
    pub(super) fn on_ack(&self, st: &mut State, b: &Binds, cid: u32, f: &Frame) -> Result<()> {
        let Some(conn) = st.conns.get_mut(&cid) else {
            return Ok(());
        };
        let id = f.header.id;
        match conn.pending.remove(&id) {
            Some(Pending::Ack { done }) => {
                if f.header.status.is_some() {
                    let what = if done.flags.contains(CompletionFlags::ATOMIC) {
                        "atomic operation"
                    } else if done.flags.contains(CompletionFlags::RMA) {
                        "RMA write"
                    } else {
                        "operation"
                    };
                    refused_answer(self, st, b, cid, f, done, what);
                } else {
                    self.tx_complete(b, done, None);
                }
            }
            Some(other) => {
                conn.pending.insert(id, other);
                return Err(proto(format!(
                    "tcp: Ack for request {id}, which awaits data"
                )));
            }
            None => return Err(proto(format!("tcp: Ack for unknown request {id}"))),
        }
        Ok(())
    }

    /// The answer to a request of this side that brings data back: an RMA
    /// read (`ReadRsp`, `read`) or a fetching atomic (`AtomicRsp`). A
    /// status ends the operation in error; the payload goes to the
    /// operation's buffer.
    pub(super) fn on_data_rsp(
        &self,
        st: &mut State,
        b: &Binds,
        cid: u32,
        f: &Frame,
        read: bool,
    ) -> Result<()> {
        let (name, what) = if read {
            ("ReadRsp", "RMA read")
        } else {
            ("AtomicRsp", "atomic operation")
        };
        let plen = f.header.payload_len;
        let Some(conn) = st.conns.get_mut(&cid) else {
            return Ok(());
        };
        let id = f.header.id;
        let p = take_pending(&mut conn.pending, id, name, |p| match p {
            Pending::Read { .. } => read,
            Pending::Fetch { .. } => !read,
            _ => false,
        })?;
        let (Pending::Read { buf, len, done } | Pending::Fetch { buf, len, done }) = p else {
            return Err(proto(format!(
                "tcp: {name} for request {id} of another kind"
            )));
        };
        if f.header.status.is_some() {
            refused_answer(self, st, b, cid, f, done, what);
        } else if plen != len {
            let e = proto(format!("tcp: {name} of {plen} bytes for a {what} of {len}"));
            self.tx_complete(b, done, Some(&e));
            return Err(e);
        } else if plen == 0 {
            self.tx_complete(b, done, None);
        } else {
            let sink = if read {
                Sink::Read { buf, done }
            } else {
                Sink::Fetch { buf, done }
            };
            self.set_cur(st, cid, f, sink);
        }
        Ok(())
    }
}

/// What the frames just written asked for.
#[derive(Debug, Default)]
struct WriteNote {
    connected: bool,
    close: bool,
}
