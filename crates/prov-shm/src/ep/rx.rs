//! Messages and the kit's receive engine: messages from the ring are
//! matched against posted receives or kept as unexpected, receives posted
//! by the application reach the engine, remote CQ data is reported, and
//! what the engine asks of the transport is done.

use fabric_core::kit::rx::{Action, Entry, Held, Meta, RecvId, Transport};
use fabric_core::objects::{CqEntry, FiAddr, Msg};
use fabric_core::{Error, ErrorKind, Mode, OpFlags};

use super::binds::{Binds, msg_flags};
use super::shared::{EpShared, RxReq};
use super::state::*;
use super::tx::Reply;
use crate::pieces::{IOV_LIMIT, PiecesExt};
use crate::ring::{Message, Payload};
use crate::wire::{self, flag};

/// What shm's transport brings to the kit's receive engine.
#[derive(Debug)]
pub(crate) struct ShmWire;

/// A sender: its index among the endpoint's peers and its number (an
/// index reused by a later peer has another number). The number's high
/// 32 bits are the endpoint's id ([`owner`]): the engine of a shared
/// receive context, which several endpoints feed, names each sender with
/// the endpoint it belongs to.
pub(crate) type Peer = (u32, u64);

impl Transport for ShmWire {
    /// An announced message whose data stays with its sender.
    type Remote = Rts;
    /// The sender and operation id of a message whose sender asked for
    /// an acknowledgement.
    type Ack = (Peer, u64);
    type Peer = Peer;
}

/// The id of the endpoint whose sender a piece of the engine's work
/// concerns.
pub(crate) fn owner(a: &Action<ShmWire>) -> u32 {
    let uid = match a {
        Action::Fetch { remote, .. } | Action::Release(remote) => remote.uid,
        Action::Ack(((_, uid), _)) | Action::Pause((_, uid)) | Action::Resume((_, uid)) => *uid,
    };
    (uid >> 32) as u32
}

/// A message matched to a receive while its sender still fills its
/// stepped bounce buffer (see
/// [`Sender::try_send_parts_stepped`](crate::ring::Sender::try_send_parts_stepped)):
/// it stays the ring's head, and each look copies what landed since the
/// last, until the last byte is in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Filling {
    /// The head command it belongs to, checked at every look (a peer
    /// could rewrite the slot meanwhile).
    pub bounce: Option<u32>,
    pub len: usize,
    pub pi: u32,
    pub id: RecvId,
    pub meta: Meta,
    /// The sender's op id, acknowledged at the end.
    pub ack: Option<u64>,
    /// Bytes copied into the receive so far.
    pub done: usize,
}

/// A rendezvous announcement: where the sender's data is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rts {
    pub peer: u32,
    /// The sender's number (see [`Peer`]).
    pub uid: u64,
    pub id: u64,
    pub len: usize,
    pub iovs: [(u64, u64); IOV_LIMIT],
    pub n: usize,
    /// The sender asked for push mode.
    pub push: bool,
}

impl RxState {
    // -----------------------------------------------------------------
    // The receive engine's work.

    /// Takes what the receive engine asks of the transport: fetching an
    /// announced message into its receive, releasing or acknowledging a
    /// sender, `PAUSE` / `RESUME`.
    pub(crate) fn run_actions(&mut self, sh: &EpShared, b: &Binds) {
        while let Some(a) = self.rx.next_action() {
            // The engine of a shared receive context also holds work about
            // the senders of the other endpoints bound to it: theirs to do
            // (the domain's engine hands it on).
            if owner(&a) != sh.id {
                self.foreign.push(a);
                continue;
            }
            match a {
                Action::Fetch { recv, meta, remote } => {
                    self.accept_rts(sh, b, recv, meta, remote);
                }
                Action::Release(r) => self.reply(sh, r.peer, Reply::ack(r.id, None)),
                Action::Ack(((pi, _), id)) => self.reply(sh, pi, Reply::ack(id, None)),
                Action::Pause(p) => self.flow(sh, p, true),
                Action::Resume(p) => {
                    // Room again: a message left in the ring is tried again.
                    self.ring_held = false;
                    self.flow(sh, p, false);
                }
            }
        }
    }

    /// The number of peer `pi`.
    pub(super) fn peer_uid(&self, pi: u32) -> u64 {
        match self.peers.get(pi as usize) {
            Some(Some(p)) => p.uid,
            _ => u64::MAX,
        }
    }

    // -----------------------------------------------------------------
    // Messages.

    #[inline]
    pub(super) fn on_msg(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        m: &Message,
        p: &Payload<'_>,
    ) -> bool {
        let Some(pi) = self.peer_of(m) else {
            Self::unknown_sender(m);
            return true;
        };
        let c = &m.cmd;
        let tagged = c.flags & flag::TAGGED != 0;
        let tag = if tagged { c.tag } else { 0 };
        let data = wire::cq_data(c);
        let ack = (c.flags & flag::ACK_REQ != 0).then(|| wire::op_id(c, 0));
        let src = self.src_of(b, pi, sh.directed);
        let len = m.len as u64;
        if let Some(id) = self.rx.arrive(tagged, tag, src, len) {
            let meta = Meta {
                tagged,
                tag,
                len,
                data,
                src,
            };
            if !p.is_complete() {
                self.filling = Some(Filling {
                    bounce: m.bounce,
                    len: m.len,
                    pi,
                    id,
                    meta,
                    ack,
                    done: 0,
                });
                return self.fill_more(sh, b, m, p);
            }
            if let Some(r) = self.rx.recv(id) {
                // SAFETY: the receive contract of recvmsg / trecvmsg: the
                // buffer is valid and ours until its completion.
                unsafe { r.buf.fill_from(0, p, 0, m.len) };
            }
            self.rx.complete(b, id, meta);
            if let Some(id) = ack {
                self.reply(sh, pi, Reply::ack(id, None));
            }
            return true;
        }
        if !p.is_complete() {
            // A kept message is copied whole: it waits for its last byte.
            self.ring_filling = true;
            return false;
        }
        let peer = (pi, self.peer_uid(pi));
        if !self.rx.admit(peer, m.len) {
            self.run_actions(sh, b);
            // Over the hard limit: the message stays in the ring.
            return false;
        }
        let mut v = self.rx.take_buf(m.len);
        v.resize(m.len, 0);
        p.copy_to(&mut v);
        let entry = Entry {
            len,
            data,
            peer,
            held: Held::Bytes {
                bytes: v,
                ack: ack.map(|id| (peer, id)),
            },
        };
        self.rx.keep(tagged, tag, src, entry);
        self.run_actions(sh, b);
        true
    }

    /// Copies what landed of the stepped message being filled (the head,
    /// `m`) into its receive since the last look, and completes the
    /// receive once every byte is in; until then the message stays the
    /// ring's head (`false`).
    #[cold]
    pub(super) fn fill_more(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        m: &Message,
        p: &Payload<'_>,
    ) -> bool {
        let Some(mut f) = self.filling.take() else {
            return self.on_command(sh, b, m, p);
        };
        if m.bounce != f.bounce || m.len != f.len || m.cmd.op != crate::wire::op::MSG {
            // Another command at the head: the slot was rewritten or
            // dropped as malformed, which only a peer writing outside the
            // protocol does. The receive fails; the command is taken as
            // any other.
            let err = Error::new(
                ErrorKind::Io,
                "shm: a peer rewrote a message's ring slot while it was received",
            );
            self.rx.fail(b, f.id, f.meta.tagged, &err);
            return self.on_command(sh, b, m, p);
        }
        let ready = p.ready();
        if ready > f.done {
            if let Some(r) = self.rx.recv(f.id) {
                // SAFETY: the receive contract of recvmsg / trecvmsg: the
                // buffer is valid and ours until its completion.
                unsafe { r.buf.fill_from(f.done, p, f.done, ready - f.done) };
            }
            f.done = ready;
        }
        if f.done < f.len {
            self.filling = Some(f);
            self.ring_filling = true;
            return false;
        }
        self.rx.complete(b, f.id, f.meta);
        if let Some(id) = f.ack {
            self.reply(sh, f.pi, Reply::ack(id, None));
        }
        true
    }

    /// The head's stepped message `m` will not be filled (its sender went
    /// away or stopped): the receive it was matched to fails, and a
    /// sender that waits for an `ACK` gets one with `FI_EIO`.
    pub(crate) fn give_up_head(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        m: &Message,
        why: &'static str,
    ) {
        self.fill_failed(b, why);
        if m.cmd.op == crate::wire::op::MSG && m.cmd.flags & flag::ACK_REQ != 0 {
            if let Some(pi) = self.peer_of(m) {
                self.reply(
                    sh,
                    pi,
                    Reply::ack(wire::op_id(&m.cmd, 0), Some(ErrorKind::Io)),
                );
            }
        }
    }

    /// The head's stepped message will not be filled (its sender went
    /// away or stopped): the receive it was matched to fails.
    pub(crate) fn fill_failed(&mut self, b: &Binds, why: &'static str) {
        if let Some(f) = self.filling.take() {
            let err = Error::new(ErrorKind::Io, why);
            self.rx.fail(b, f.id, f.meta.tagged, &err);
        }
    }

    pub(super) fn on_rts(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        m: &Message,
        p: &Payload<'_>,
    ) -> bool {
        let Some(pi) = self.peer_of(m) else {
            Self::unknown_sender(m);
            return true;
        };
        let c = &m.cmd;
        let id = wire::op_id(c, 1);
        let mut raw = [0u8; IOV_LIMIT * 16];
        let iovs = if p.len() <= raw.len() {
            let n = p.copy_to(&mut raw);
            wire::decode_iovs(&raw[..n])
        } else {
            None
        };
        // The ranges' total: the length, or (in `aux`) equal to it.
        let total = iovs.and_then(|(v, n)| {
            v.iter()
                .take(n)
                .try_fold(0u64, |a, (_, l)| a.checked_add(*l))
        });
        let len = if c.flags & flag::ID_IN_DATA != 0 {
            total
        } else {
            total.filter(|&t| t == c.aux[0])
        };
        let (Some((iovs, n)), Some(len)) = (iovs, len.map(usize_of)) else {
            tracing::debug!("shm: malformed rendezvous request refused");
            self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Inval)));
            return true;
        };
        if len > sh.info.ep_attr.max_msg_size {
            tracing::debug!(len, "shm: rendezvous request over max_msg_size refused");
            self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::MsgSize)));
            return true;
        }
        let tagged = c.flags & flag::TAGGED != 0;
        let tag = if tagged { c.tag } else { 0 };
        let data = wire::cq_data(c);
        let src = self.src_of(b, pi, sh.directed);
        let rts = Rts {
            peer: pi,
            uid: self.peer_uid(pi),
            id,
            len,
            iovs,
            n,
            push: c.flags & flag::PUSH != 0,
        };
        let meta = Meta {
            tagged,
            tag,
            len: len as u64,
            data,
            src,
        };
        if let Some(id) = self.rx.arrive(tagged, tag, src, len as u64) {
            self.accept_rts(sh, b, id, meta, rts);
            return true;
        }
        let peer = (pi, self.peer_uid(pi));
        if !self.rx.admit(peer, 0) {
            self.run_actions(sh, b);
            return false;
        }
        let entry = Entry {
            len: len as u64,
            data,
            peer,
            held: Held::Remote(rts),
        };
        self.rx.keep(tagged, tag, src, entry);
        self.run_actions(sh, b);
        true
    }

    /// A receive from the application (posted through the queue).
    pub(super) fn take_post(&mut self, sh: &EpShared, b: &Binds, r: RxReq) {
        let msg = Msg {
            iov: r.buf.pieces(),
            desc: &[],
            addr: r.src,
            tag: r.tag,
            ignore: r.ignore,
            context: r.context,
            data: 0,
        };
        if let Err(e) = self.post(sh, b, &msg, r.flags, r.tagged) {
            // Checked when it was posted; reported rather than lost.
            let entry = CqEntry {
                context: r.context,
                flags: msg_flags(r.tagged, true),
                ..CqEntry::default()
            };
            b.failed(true, entry, &e, 0);
        }
        if self.rx.has_actions() {
            self.run_actions(sh, b);
        }
    }

    /// Posts a receive into the receive engine (queued ones by
    /// [`take_post`](Self::take_post), others at once).
    pub(super) fn post(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        msg: &Msg<'_>,
        flags: OpFlags,
        tagged: bool,
    ) -> fabric_core::Result<()> {
        // A message left in the ring may match this receive.
        self.ring_held = false;
        if flags.contains(OpFlags::MULTI_RECV) {
            self.rx
                .set_min_multi_recv(sh.min_multi_recv.load(std::sync::atomic::Ordering::Relaxed));
        }
        self.rx.post(b, msg, flags, tagged)
    }

    /// Takes every receive request still queued (before a cancel or a
    /// peek).
    pub(crate) fn drain_posted(&mut self, sh: &EpShared, b: &Binds) {
        while let Some(r) = sh.posted.pop() {
            self.take_post(sh, b, r);
        }
        self.run_actions(sh, b);
    }

    /// The endpoint, bound to a shared receive context, closes: every
    /// peer is forgotten, so that the context's receives its transfers
    /// were filling fail and the announced messages kept for it in the
    /// context go (its buffered ones stay deliverable).
    pub(crate) fn leave_srx(&mut self, sh: &EpShared, b: &Binds) {
        for pi in 0..self.peers.len() {
            let pi = u32::try_from(pi).unwrap_or(u32::MAX);
            self.drop_peer(sh, b, pi);
        }
    }

    /// Remote CQ data of an RMA write or atomic: a completion at the
    /// target (consuming a posted receive in FI_RX_CQ_DATA mode).
    pub(super) fn remote_cq_data(
        &mut self,
        sh: &EpShared,
        b: &Binds,
        pi: u32,
        data: u64,
        src: FiAddr,
    ) {
        let consume = sh.info.mode.contains(Mode::RX_CQ_DATA);
        let peer = (pi, self.peer_uid(pi));
        self.rx.remote_cq_data(b, data, src, peer, consume);
        if self.rx.waits_for_cq() {
            self.cq_watch = true;
        }
        self.run_actions(sh, b);
    }
}
