//! RMA and atomics at the target: each request is checked against the
//! domain's memory regions, then executed (inline data, cross-memory
//! attach, or pushed through bounce buffers).

use fabric_core::ErrorKind;
use fabric_core::kit::atomic::{self, AtomicKind};
use fabric_core::objects::{AtomicOp, MrAccess, RmaIov};

use super::binds::Binds;
use super::rndv::*;
use super::shared::EpShared;
use super::state::*;
use super::tx::{Push, PushSrc, Reply};
use crate::cma::{self, CmaError};
use crate::ring::{Message, Payload};
use crate::wire::{self, Desc, flag};

/// Most elements of one atomic operation.
pub(crate) const MAX_ATOMIC_COUNT: usize = 1024;

impl RxState {
    // -----------------------------------------------------------------
    // RMA and atomics at the target.

    /// Reads and checks the descriptor at the start of a request; answers
    /// `Inval` to the sender when it is malformed.
    pub(super) fn desc_of(
        &mut self,
        sh: &EpShared,
        pi: u32,
        m: &Message,
        p: &Payload<'_>,
    ) -> Option<Desc> {
        let mut raw = [0u8; wire::DESC_MAX];
        let n = p.copy_to(&mut raw);
        let d = Desc::decode(&raw[..n]).filter(|d| d.len <= m.len && d.rma_total().is_some());
        if d.is_none() {
            tracing::debug!("shm: malformed RMA / atomic descriptor refused");
            self.reply(sh, pi, Reply::ack(m.cmd.tag, Some(ErrorKind::Inval)));
        }
        d
    }

    /// Checks every range of `d` for `need`; the refusal's kind.
    pub(super) fn check_ranges(
        sh: &EpShared,
        rma: &[RmaIov],
        need: MrAccess,
    ) -> Result<(), ErrorKind> {
        for r in rma {
            sh.mr
                .check(r.key, r.addr, r.len, need)
                .map_err(|e| refusal(e.kind()))?;
        }
        Ok(())
    }

    /// Answers a refused request with `k` and, when one of `rma` fails the
    /// registration check for `need`, that check's reason (which range,
    /// which key, which right), so that the initiator can say why.
    #[cold]
    fn refuse(
        &mut self,
        sh: &EpShared,
        pi: u32,
        id: u64,
        k: ErrorKind,
        rma: &[RmaIov],
        need: MrAccess,
    ) {
        let why = rma
            .iter()
            .find_map(|r| sh.mr.check(r.key, r.addr, r.len, need).err());
        match why {
            Some(e) => {
                let text = format!("{} (at the target)", e.detail());
                let r = Reply::AckErr {
                    id,
                    status: wire::status_of(Some(k)),
                    text: text.as_bytes(),
                };
                self.reply(sh, pi, r);
            }
            None => self.reply(sh, pi, Reply::ack(id, Some(k))),
        }
    }

    pub(super) fn on_write(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let Some(pi) = self.peer_of(m) else {
            return Self::unknown_sender(m);
        };
        let c = m.cmd;
        let Some(d) = self.desc_of(sh, pi, m, p) else {
            return;
        };
        let id = c.tag;
        let total = d.rma_total().unwrap_or(usize::MAX);
        let data = (c.flags & flag::CQ_DATA != 0).then_some(c.data);
        let bad = if d.atomic.is_some() {
            Err(ErrorKind::Inval)
        } else {
            Self::check_ranges(sh, d.rma(), MrAccess::REMOTE_WRITE)
        };
        if let Err(k) = bad {
            return self.refuse(sh, pi, id, k, d.rma(), MrAccess::REMOTE_WRITE);
        }
        let inline = c.flags & flag::INLINE != 0;
        let push = c.flags & flag::PUSH != 0 || d.n_local == 0;
        let status = if inline {
            if m.len - d.len != total {
                Err(ErrorKind::Inval)
            } else {
                write_ranges(sh, d.rma(), 0, p, total).map(|()| true)
            }
        } else if push {
            Ok(false)
        } else if d.local_total() != Some(total) {
            Err(ErrorKind::Inval)
        } else {
            self.pull_write(sh, pi, &d)
        };
        match status {
            Ok(true) => {
                if let Some(cn) = &b.cntr_remote_write {
                    cn.add(1);
                }
                if let Some(v) = data {
                    let src = self.src_of(b, pi, false);
                    self.remote_cq_data(sh, b, pi, v, src);
                }
                self.reply(sh, pi, Reply::ack(id, None));
            }
            Ok(false) => {
                // Push mode: the initiator sends the data once cleared.
                let mut rma = [RmaIov {
                    addr: 0,
                    len: 0,
                    key: 0,
                }; wire::RMA_IOV_LIMIT];
                for (dst, src) in rma.iter_mut().zip(d.rma()) {
                    *dst = *src;
                }
                let x = RxXfer {
                    peer: pi,
                    split: None,
                    op_id: id,
                    dest: XferDest::Write {
                        rma,
                        n: d.n_rma,
                        data,
                    },
                    want: total,
                    got: 0,
                    failed: None,
                    acked: false,
                };
                if total == 0 {
                    return self.finish_xfer(sh, b, x, None);
                }
                let xid = self.xfers.insert(x);
                self.reply(
                    sh,
                    pi,
                    Reply::Cts {
                        id,
                        xfer: xid,
                        accept: total as u64,
                    },
                );
            }
            Err(k) => self.reply(sh, pi, Reply::ack(id, Some(k))),
        }
    }

    /// An RMA write by cross-memory attach: each checked range is filled
    /// from the initiator's buffer while its registration is held.
    /// `Ok(true)` done, `Ok(false)` the kernel refused (push instead).
    pub(super) fn pull_write(
        &mut self,
        sh: &EpShared,
        pi: u32,
        d: &Desc,
    ) -> Result<bool, ErrorKind> {
        let Some(Some(peer)) = self.peers.get_mut(pi as usize) else {
            return Err(ErrorKind::ConnReset);
        };
        if peer.no_cma {
            return Ok(false);
        }
        cma_ranges(sh, peer, d, MrAccess::REMOTE_WRITE)
    }

    pub(super) fn on_read(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let Some(pi) = self.peer_of(m) else {
            return Self::unknown_sender(m);
        };
        let c = m.cmd;
        let Some(d) = self.desc_of(sh, pi, m, p) else {
            return;
        };
        let id = c.tag;
        let total = d.rma_total().unwrap_or(usize::MAX);
        let bad = if d.atomic.is_some() || m.len != d.len {
            Err(ErrorKind::Inval)
        } else {
            Self::check_ranges(sh, d.rma(), MrAccess::REMOTE_READ)
        };
        if let Err(k) = bad {
            return self.refuse(sh, pi, id, k, d.rma(), MrAccess::REMOTE_READ);
        }
        let Some(Some(peer)) = self.peers.get_mut(pi as usize) else {
            return;
        };
        let inline_cap = peer.sender.inline_capacity();
        let push = c.flags & flag::PUSH != 0 || d.n_local == 0 || peer.no_cma;
        if total <= inline_cap {
            // Small: the data rides in the ACK.
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            let r = read_ranges(sh, d.rma(), &mut buf);
            let reply = match r {
                Ok(()) => {
                    if let Some(cn) = &b.cntr_remote_read {
                        cn.add(1);
                    }
                    Reply::AckData { id, bytes: &buf }
                }
                Err(k) => Reply::ack(id, Some(k)),
            };
            self.reply(sh, pi, reply);
            self.scratch = buf;
            return;
        }
        if !push {
            if d.local_total() != Some(total) {
                return self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Inval)));
            }
            match push_read(sh, peer, &d) {
                Ok(true) => {
                    if let Some(cn) = &b.cntr_remote_read {
                        cn.add(1);
                    }
                    return self.reply(sh, pi, Reply::ack(id, None));
                }
                Ok(false) => {}
                Err(k) => return self.reply(sh, pi, Reply::ack(id, Some(k))),
            }
        }
        let Some(Some(peer)) = self.peers.get(pi as usize) else {
            return;
        };
        let mut rma = [RmaIov {
            addr: 0,
            len: 0,
            key: 0,
        }; wire::RMA_IOV_LIMIT];
        for (dst, src) in rma.iter_mut().zip(d.rma()) {
            *dst = *src;
        }
        self.pushes.push_back(Push {
            to: peer.sender.clone(),
            dest: id,
            to_tx: true,
            src: PushSrc::Mem { rma, n: d.n_rma },
            off: 0,
            end: total,
            op: None,
            rx_peer: Some(pi),
            ack: Some(id),
            count_read: true,
        });
    }

    pub(super) fn on_atomic(&mut self, sh: &EpShared, b: &Binds, m: &Message, p: &Payload<'_>) {
        let Some(pi) = self.peer_of(m) else {
            return Self::unknown_sender(m);
        };
        let c = m.cmd;
        let Some(d) = self.desc_of(sh, pi, m, p) else {
            return;
        };
        let id = c.tag;
        let Some((dt, aop, kind)) = d.atomic else {
            return self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Inval)));
        };
        let count = d.rma_total().unwrap_or(usize::MAX);
        let want = kind
            .payload_len(dt, aop, count as u64)
            .and_then(|v| usize::try_from(v).ok());
        if count == 0 || count > MAX_ATOMIC_COUNT || want != Some(m.len - d.len) {
            return self.reply(sh, pi, Reply::ack(id, Some(ErrorKind::Inval)));
        }
        let mut operands = std::mem::take(&mut self.scratch);
        operands.clear();
        operands.resize(m.len - d.len, 0);
        p.copy_range_to(d.len, &mut operands);
        let mut results = std::mem::take(&mut self.results);
        results.clear();
        let status = atomic::execute(&sh.mr, kind, dt, aop, d.rma(), &operands, &mut results).err();
        if status.is_none() {
            let cn = if aop == AtomicOp::AtomicRead {
                &b.cntr_remote_read
            } else {
                &b.cntr_remote_write
            };
            if let Some(cn) = cn {
                cn.add(1);
            }
            if c.flags & flag::CQ_DATA != 0 {
                let src = self.src_of(b, pi, false);
                self.remote_cq_data(sh, b, pi, c.data, src);
            }
        } else {
            tracing::debug!(error = ?status, "shm: refused an atomic operation");
        }
        if let Some(k) = status {
            let need = match (kind, aop) {
                (_, AtomicOp::AtomicRead) => MrAccess::REMOTE_READ,
                (AtomicKind::Plain, _) => MrAccess::REMOTE_WRITE,
                _ => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            };
            self.refuse(sh, pi, id, k, d.rma(), need);
            self.scratch = operands;
            self.results = results;
            return;
        }
        let reply = match (kind, status) {
            (AtomicKind::Plain, s) | (_, s @ Some(_)) => Reply::ack(id, s),
            _ => Reply::AckData {
                id,
                bytes: &results,
            },
        };
        self.reply(sh, pi, reply);
        self.scratch = operands;
        self.results = results;
    }
}

/// The error kind a refused remote access reports.
pub(super) fn refusal(k: ErrorKind) -> ErrorKind {
    match k {
        ErrorKind::NoKey => ErrorKind::KeyRejected,
        k => k,
    }
}

/// Copies the last `len` bytes of a payload into checked registered
/// ranges, at byte `off` of the ranges' concatenation (inline writes: the
/// data after the descriptor, at 0; pushed chunks: the whole payload, at
/// the chunk's offset). Each piece is copied while its registration is
/// held.
pub(super) fn write_ranges(
    sh: &EpShared,
    rma: &[RmaIov],
    off: usize,
    p: &Payload<'_>,
    len: usize,
) -> Result<(), ErrorKind> {
    // Inline writes carry the descriptor first; pushed chunks carry only
    // data. The payload offset of the data is what precedes it.
    let data_start = p.len() - len;
    let mut pos = 0usize;
    let mut copied = 0usize;
    for r in rma {
        let (start, end) = (pos, pos + r.len);
        pos = end;
        let lo = off.max(start);
        let hi = (off + len).min(end);
        if lo >= hi {
            continue;
        }
        let at = r.addr.wrapping_add((lo - start) as u64);
        let n = hi - lo;
        sh.mr
            .with_access(r.key, at, n, MrAccess::REMOTE_WRITE, |base| {
                // SAFETY: `base..base + n` is checked registered memory
                // held registered during the copy; mr_reg's contract lets
                // peers write it.
                let dst = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, n) };
                p.copy_range_to(data_start + (lo - off), dst);
            })
            .map_err(|e| refusal(e.kind()))?;
        copied += n;
    }
    if copied == len {
        Ok(())
    } else {
        Err(ErrorKind::Inval)
    }
}

/// Appends the bytes of checked registered ranges to `out`.
pub(super) fn read_ranges(
    sh: &EpShared,
    rma: &[RmaIov],
    out: &mut Vec<u8>,
) -> Result<(), ErrorKind> {
    for r in rma {
        sh.mr
            .with_access(r.key, r.addr, r.len, MrAccess::REMOTE_READ, |base| {
                // SAFETY: checked registered memory held registered while
                // it is copied (mr_reg's contract lets peers read it).
                let src = unsafe { std::slice::from_raw_parts(base as *const u8, r.len) };
                out.extend_from_slice(src);
            })
            .map_err(|e| refusal(e.kind()))?;
    }
    Ok(())
}

/// An RMA read by cross-memory attach: each checked range is written into
/// the initiator's buffer. `Ok(false)` when the kernel refused (push
/// instead).
pub(super) fn push_read(sh: &EpShared, peer: &mut RxPeer, d: &Desc) -> Result<bool, ErrorKind> {
    cma_ranges(sh, peer, d, MrAccess::REMOTE_READ)
}

/// Moves the data of RMA descriptor `d` between our registered ranges and
/// the initiator's buffer by cross-memory attach, each range checked for
/// `access` and held registered during its copy: REMOTE_WRITE fills our
/// ranges from the initiator, REMOTE_READ fills the initiator's buffer.
/// `Ok(false)` when the kernel refused before anything moved (the peer is
/// then marked for bounce buffers), `Perm` when it refused midway.
pub(super) fn cma_ranges(
    sh: &EpShared,
    peer: &mut RxPeer,
    d: &Desc,
    access: MrAccess,
) -> Result<bool, ErrorKind> {
    let into_local = access == MrAccess::REMOTE_WRITE;
    let mut off = 0usize;
    for r in d.rma() {
        let (remote, k) = sub_list(d.local(), off, r.len);
        let res = sh
            .mr
            .with_access(r.key, r.addr, r.len, access, |base| {
                // SAFETY: `base..base + r.len` is checked registered memory
                // whose registration is held during the call (mr_reg's
                // contract lets peers read and write it); the remote ranges
                // are interpreted by the kernel only.
                unsafe { cma::transfer(peer.pid, &[(base, r.len)], &remote[..k], into_local) }
            })
            .map_err(|e| refusal(e.kind()))?;
        match res {
            Ok(()) => {}
            Err(CmaError::Refused) => {
                tracing::warn!(peer = %peer.addr, "shm: cross-memory attach refused by the kernel for this peer; using bounce buffers");
                peer.no_cma = true;
                if off == 0 {
                    return Ok(false);
                }
                return Err(ErrorKind::Perm);
            }
            Err(e) => return Err(e.kind()),
        }
        off += r.len;
    }
    Ok(true)
}
