//! The command queue: a bounded lock-free MPSC ring in the receiver's
//! region, senders in any process, one receiver (the owner).
//!
//! The algorithm (Vyukov's bounded queue, specialised to one consumer and
//! hardened for a shared, untrusted region) is described in the
//! [crate docs](crate::docs#the-ring); this module holds the code. A [`Sender`]
//! claims a position with a compare-and-swap on the shared tail, fills the
//! slot, and commits it with a compare-and-swap on the slot's sequence
//! number; the [`Receiver`] keeps its head in private memory, copies a
//! committed slot out and hands the slot to the next lap.

mod bounce;
pub mod pace;
mod wait;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fabric_core::error::{Error, ErrorKind, Result};

use crate::region::shared::{Fixed, Mapping};
use crate::region::{Layout, offsets};

pub use self::wait::WaitPolicy;

/// Bytes of each slot not available to the inline payload: the 48-byte
/// command header at its start and the two `aux` words at its end.
pub const SLOT_HEADER: usize = 64;

/// Byte offsets inside a slot (all fields accessed atomically; the payload
/// with volatile copies). The header and the first 16 payload bytes share
/// the slot's first cache line, so a command with at most 16 bytes of
/// payload and no `aux` words moves as one line.
pub mod slot {
    /// `u64`: the sequence number (see the crate docs).
    pub const SEQ: usize = 0;
    /// `u32`: pid of the sender that claimed the slot (0 when released).
    pub const CLAIMER: usize = 8;
    /// `u16`: [`Command::op`](super::Command::op).
    pub const OP: usize = 12;
    /// `u16`: [`Command::flags`](super::Command::flags).
    pub const FLAGS: usize = 14;
    /// `u32`: payload length.
    pub const LEN: usize = 16;
    /// `u32`: bounce buffer index, or `u32::MAX` for an inline payload.
    pub const BOUNCE: usize = 20;
    /// `u32`: [`Command::src`](super::Command::src).
    pub const SRC: usize = 24;
    /// `u32`: the ring's own flags: [`HAS_AUX`]; other bits must be 0.
    pub const RING_FLAGS: usize = 28;
    /// `u64`: [`Command::tag`](super::Command::tag).
    pub const TAG: usize = 32;
    /// `u64`: [`Command::data`](super::Command::data).
    pub const DATA: usize = 40;
    /// Inline payload, up to `slot_size - 64` bytes.
    pub const PAYLOAD: usize = 48;
    /// Bytes of the header fields above.
    pub const HEADER: usize = 48;
    /// `u64` x 2: [`Command::aux`](super::Command::aux), in the last 16
    /// bytes of the slot (`slot_size - AUX_FROM_END`); written and read
    /// only when [`HAS_AUX`] is set, so commands without them do not touch
    /// that line.
    pub const AUX_FROM_END: usize = 16;
    /// [`RING_FLAGS`] bit: the `aux` words are present (else they are 0).
    pub const HAS_AUX: u32 = 1;
    /// [`RING_FLAGS`] bit: the bounce buffer was committed while its
    /// sender still fills it; its fill mark says how many bytes are in
    /// (see [`Payload::ready`](super::Payload::ready)).
    pub const STEPPED: u32 = 2;
    /// The ring flags a sender may set.
    pub const KNOWN: u32 = HAS_AUX | STEPPED;
}

/// A bounce payload sent with [`Sender::try_send_parts_stepped`] from
/// this size on is committed after its first [`STEP`] bytes, and the
/// receiver copies each step out while the sender copies the next.
pub const STEPPED_MIN: usize = 32 * 1024;

/// The bytes copied between two advances of a stepped payload's fill
/// mark.
pub const STEP: usize = 16 * 1024;

/// A slot's header fields, checked once per use (see [`Mapping::fixed`]).
type Header<'a> = Fixed<'a, { slot::HEADER }>;

/// Bound on claim retries while other senders keep winning the tail;
/// past it `try_send` answers `Again` instead of spinning on.
const CLAIM_TURNS: u32 = 1 << 16;

/// The fields of a command besides its payload. The ring carries them
/// without interpreting them; the provider layer defines their meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Command {
    /// Operation code.
    pub op: u16,
    /// Operation flags.
    pub flags: u16,
    /// Sender identity as the receiver knows it (e.g. its AV index).
    pub src: u32,
    /// Tag of a tagged message.
    pub tag: u64,
    /// Remote CQ data or an immediate operand.
    pub data: u64,
    /// Two more words (context ids, RMA keys, offsets).
    pub aux: [u64; 2],
}

/// A command as received: its fields as copied out of the slot, the
/// payload length, and where the payload was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// The command fields.
    pub cmd: Command,
    /// Payload length in bytes (validated against the slot or buffer).
    pub len: usize,
    /// The pid the sender recorded when it claimed the slot. A peer can
    /// write anything here; use it as a hint.
    pub sender_pid: u32,
    /// The bounce buffer that carried the payload, `None` for inline.
    pub bounce: Option<u32>,
}

/// A received payload still in shared memory, valid for the duration of
/// the [`Receiver::try_recv`] callback. It can only be copied out, with
/// volatile reads, so a peer scribbling on it meanwhile yields wrong bytes
/// but never undefined behaviour.
#[derive(Debug)]
pub struct Payload<'a> {
    map: &'a Mapping,
    off: usize,
    len: usize,
    /// The fill mark of a stepped payload (see [`slot::STEPPED`]).
    mark: Option<usize>,
}

impl Payload<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// How many bytes, from the start, are in place: all of them, but for
    /// a payload sent with
    /// [`try_send_parts_stepped`](Sender::try_send_parts_stepped) whose
    /// sender is still copying. Bytes past this may still change; the
    /// copies below copy them all the same (never undefined behaviour).
    #[inline]
    pub fn ready(&self) -> usize {
        match self.mark {
            None => self.len,
            // Acquire: pairs with the sender's Release after each step.
            Some(w) => (self.map.u32(w).load(Ordering::Acquire) as usize).min(self.len),
        }
    }

    /// Whether every byte is in place ([`ready`](Self::ready) is the
    /// length). It reads the fill mark anew: a caller that copied up to
    /// an earlier `ready` compares that with the length instead.
    #[inline]
    pub fn is_complete(&self) -> bool {
        self.mark.is_none() || self.ready() == self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the first `min(len, dst.len())` bytes into `dst` and returns
    /// that count.
    pub fn copy_to(&self, dst: &mut [u8]) -> usize {
        self.copy_range_to(0, dst)
    }

    /// Copies bytes from `offset` on into `dst` (as many as fit or remain)
    /// and returns the count; 0 when `offset >= len`.
    pub fn copy_range_to(&self, offset: usize, dst: &mut [u8]) -> usize {
        let n = self.len.saturating_sub(offset).min(dst.len());
        if n > 0 {
            self.map.copy_out(self.off + offset, &mut dst[..n]);
        }
        n
    }

    /// The payload as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.copy_to(&mut v);
        v
    }
}

/// Writes the initial ring state: slot `i` holds sequence `i` (free for
/// position `i`), the tail is 0, nobody sleeps; then the bounce pool.
pub(crate) fn init(map: &Mapping) {
    let l = *map.layout();
    for i in 0..u64::from(l.ring_slots()) {
        map.u64(l.slot(i) + slot::SEQ).store(i, Ordering::Relaxed);
        map.u32(l.slot(i) + slot::CLAIMER)
            .store(0, Ordering::Relaxed);
    }
    map.u64(offsets::RING_TAIL).store(0, Ordering::Relaxed);
    map.u32(offsets::WAIT_FUTEX).store(0, Ordering::Relaxed);
    map.u32(offsets::WAIT_SLEEPING).store(0, Ordering::Relaxed);
    bounce::init(map);
}

/// The sending side of a region's ring. Clone it freely; all clones and
/// all threads may send at once.
#[derive(Clone, Debug)]
pub struct Sender {
    map: Arc<Mapping>,
    pid: u32,
}

impl Sender {
    pub(crate) fn new(map: Arc<Mapping>) -> Sender {
        Sender {
            map,
            pid: std::process::id(),
        }
    }

    /// The layout of the destination region.
    pub fn layout(&self) -> Layout {
        *self.map.layout()
    }

    /// Largest payload sent inline (in the slot itself).
    pub fn inline_capacity(&self) -> usize {
        self.map.layout().inline_capacity()
    }

    /// Largest payload sent through one bounce buffer (0: no pool).
    pub fn bounce_capacity(&self) -> usize {
        self.map.layout().bounce_size()
    }

    /// Sends `cmd` with `payload`: inline when it fits the slot, else
    /// through a bounce buffer. Never blocks: `Again` when the ring (or the
    /// pool) is full, `MsgSize` when the payload exceeds a bounce buffer.
    pub fn try_send(&self, cmd: &Command, payload: &[u8]) -> Result<()> {
        self.try_send_parts(cmd, &[payload])
    }

    /// Sends with the payload in the slot. `MsgSize` if it does not fit.
    pub fn try_send_inline(&self, cmd: &Command, payload: &[u8]) -> Result<()> {
        self.try_send_parts_inline(cmd, &[payload])
    }

    /// [`try_send`](Self::try_send) with the payload given in pieces, which
    /// are copied one after the other (a gather: no staging copy).
    pub fn try_send_parts(&self, cmd: &Command, parts: &[&[u8]]) -> Result<()> {
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        if len <= self.inline_capacity() {
            self.try_send_parts_inline(cmd, parts)
        } else {
            self.try_send_parts_bounce(cmd, parts)
        }
    }

    fn try_send_parts_inline(&self, cmd: &Command, parts: &[&[u8]]) -> Result<()> {
        let map = &*self.map;
        let l = map.layout();
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        if len > l.inline_capacity() {
            return Err(too_big(len, "inline", l.inline_capacity()));
        }
        let one_line = len <= 64 - slot::PAYLOAD && cmd.aux == [0, 0];
        let mut turns = 0;
        loop {
            let pos = self.claim(one_line)?;
            let s = l.slot(pos);
            if len > 2 * 64 - slot::PAYLOAD {
                // The payload's further lines, fetched for writing in
                // parallel rather than one by one as the copy reaches them.
                map.prefetch_for_write(s + 64, len - (64 - slot::PAYLOAD));
            }
            // The bytes past the slot's first line go first, that line
            // (payload head, header with our pid) last: the receiver polls
            // it, and took it back each time it looked in between (64 B
            // one-way 0.41-0.74 -> 0.39-0.43 us with the host's cache-line
            // probe at 165 ns).
            let head = (64 - slot::PAYLOAD).min(len);
            copy_parts_range(map, s + slot::PAYLOAD, parts, head, len);
            copy_parts_range(map, s + slot::PAYLOAD, parts, 0, head);
            self.write_header(s, cmd, len, bounce::NONE, 0);
            match self.commit(s, pos) {
                // The receiver skipped the slot (its claimer was not
                // recorded for a long while, see `Receiver::recover`):
                // nothing was delivered, so the payload, still in the
                // caller's buffers, is sent anew.
                Err(e) if e.kind() == ErrorKind::Canceled && turns < 3 => turns += 1,
                r => return r,
            }
        }
    }

    fn try_send_parts_bounce(&self, cmd: &Command, parts: &[&[u8]]) -> Result<()> {
        let map = &*self.map;
        let l = map.layout();
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        if len > l.bounce_size() {
            return Err(too_big(len, "bounce-buffer", l.bounce_size()));
        }
        // Fill the buffer before claiming a slot: the claimed-but-not-
        // committed window, during which the receiver must wait on this
        // slot, then covers only the header writes. One kind of stores
        // for the whole payload, however many pieces it comes in.
        let idx = bounce::pop(map, self.pid)?;
        map.copy_in_steps(l.bounce_data(idx), parts, usize::MAX, |_| true);
        let pos = self.claim_holding(idx, cmd.aux == [0, 0])?;
        let s = l.slot(pos);
        self.write_header(s, cmd, len, idx, 0);
        self.commit(s, pos).inspect_err(|_| self.give_back(idx))
    }

    /// [`try_send_parts`](Self::try_send_parts) that, for a payload of
    /// [`STEPPED_MIN`] bytes or more, commits the command once the first
    /// [`STEP`] bytes are in the bounce buffer and copies the rest while
    /// the receiver copies out what is in, advancing the buffer's fill
    /// mark after each step. The receiver must then take the payload as
    /// it lands ([`Payload::ready`]). Returns once every byte is in.
    pub fn try_send_parts_stepped(&self, cmd: &Command, parts: &[&[u8]]) -> Result<()> {
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        if len < STEPPED_MIN || len > self.bounce_capacity() {
            return self.try_send_parts(cmd, parts);
        }
        let map = &*self.map;
        let l = map.layout();
        // The first step is copied before a slot is claimed, as the other
        // bounce sends copy their payload first: a claimed slot holds the
        // receiver until it is committed, and that window then covers the
        // header writes only (a sender stopped in a later step is given
        // up, see the crate docs). A full ring is seen before any copy.
        if !self.tail_free() {
            return Err(Error::again());
        }
        let idx = bounce::pop(map, self.pid)?;
        let mark = map.u32(bounce::fill_word(map, idx));
        let mut sent: Option<Result<()>> = None;
        map.copy_in_steps(l.bounce_data(idx), parts, STEP, |done| {
            let done = done as u32;
            // Release: the step's bytes (and, for non-temporal stores, the
            // fence after them) come before the mark. The first store is
            // Release too: a sender that popped the buffer list before us
            // and reads this word as a link then sees the list's new head
            // (see `bounce::pop`).
            mark.store(done, Ordering::Release);
            if sent.is_none() {
                sent = Some(self.claim(cmd.aux == [0, 0]).and_then(|pos| {
                    let s = l.slot(pos);
                    self.write_header(s, cmd, len, idx, slot::STEPPED);
                    self.commit(s, pos)
                }));
            }
            matches!(sent, Some(Ok(())))
        });
        sent.unwrap_or(Ok(())).inspect_err(|_| self.give_back(idx))
    }

    /// Whether the slot at the ring's tail is free (a claim would find it
    /// so now; another sender may still take it first).
    fn tail_free(&self) -> bool {
        let map = &*self.map;
        let pos = map.u64(offsets::RING_TAIL).load(Ordering::Relaxed);
        let h: Header<'_> = map.fixed(map.layout().slot(pos));
        h.u64::<{ slot::SEQ }>().load(Ordering::Relaxed) == pos
    }

    /// Sends with the payload in a bounce buffer (even a small one).
    /// `Again` when no buffer is free or the ring is full; `MsgSize` when
    /// the payload exceeds a buffer.
    pub fn try_send_bounce(&self, cmd: &Command, payload: &[u8]) -> Result<()> {
        self.try_send_parts_bounce(cmd, &[payload])
    }

    /// [`claim`](Self::claim) while holding bounce buffer `idx`, which
    /// goes back to the pool if no position can be claimed.
    fn claim_holding(&self, idx: u32, one_line: bool) -> Result<u64> {
        self.claim(one_line).inspect_err(|_| self.give_back(idx))
    }

    /// Returns bounce buffer `idx`, popped by this sender and not sent, to
    /// the pool, unless the receiver already did: a receiver that took
    /// this process for dead frees its buffers ([`Receiver::recover`]),
    /// and one of them may be another sender's by now.
    fn give_back(&self, idx: u32) {
        let _ = bounce::release_if_held_by(&self.map, idx, self.pid.max(1));
    }

    /// Claims the next position: `Ok(pos)` makes this sender the only one
    /// that may fill slot `pos & mask` for this lap. `one_line`: the whole
    /// command goes into the slot's first line, right after the claim.
    fn claim(&self, one_line: bool) -> Result<u64> {
        let map = &*self.map;
        let l = map.layout();
        let tail = map.u64(offsets::RING_TAIL);
        let mut pos = tail.load(Ordering::Relaxed);
        for _ in 0..CLAIM_TURNS {
            // Acquire: pairs with the receiver's Release when it freed the
            // slot, so our writes below come after its reads of the last
            // lap. (A read-modify-write here, to fetch the line for writing
            // in one go, measured no faster.)
            // The slot's first line is in the receiver's cache (it freed
            // the slot and polls it): fetch it once, ready for the writes,
            // when they follow at once. (A command that fills other lines
            // first would lose it to the receiver's polling meanwhile and
            // pay the trip twice: 64 B one-way 0.195 -> 0.212 us.)
            if one_line {
                map.prefetch_for_write(l.slot(pos), 1);
            }
            let h: Header<'_> = map.fixed(l.slot(pos));
            let seq = h.u64::<{ slot::SEQ }>().load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as i64;
            if diff == 0 {
                match tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return Ok(pos);
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                // The slot still holds the previous lap: full.
                return Err(Error::again());
            } else {
                // Another sender took `pos`; catch up with the tail.
                std::hint::spin_loop();
                pos = tail.load(Ordering::Relaxed);
            }
        }
        Err(Error::again())
    }

    /// Writes the command's fields into slot `s`; `ring_flags`: bits of
    /// the ring's own flags besides [`slot::HAS_AUX`].
    fn write_header(&self, s: usize, cmd: &Command, len: usize, bounce: u32, ring_flags: u32) {
        let m = &*self.map;
        let r = Ordering::Relaxed;
        let h: Header<'_> = m.fixed(s);
        h.u32::<{ slot::CLAIMER }>().store(self.pid, r);
        h.u16::<{ slot::OP }>().store(cmd.op, r);
        h.u16::<{ slot::FLAGS }>().store(cmd.flags, r);
        h.u32::<{ slot::LEN }>().store(len as u32, r);
        h.u32::<{ slot::BOUNCE }>().store(bounce, r);
        h.u32::<{ slot::SRC }>().store(cmd.src, r);
        h.u64::<{ slot::TAG }>().store(cmd.tag, r);
        h.u64::<{ slot::DATA }>().store(cmd.data, r);
        if cmd.aux == [0, 0] {
            h.u32::<{ slot::RING_FLAGS }>().store(ring_flags, r);
        } else {
            let aux = s + m.layout().slot_size() - slot::AUX_FROM_END;
            m.u64(aux).store(cmd.aux[0], r);
            m.u64(aux + 8).store(cmd.aux[1], r);
            h.u32::<{ slot::RING_FLAGS }>()
                .store(ring_flags | slot::HAS_AUX, r);
        }
    }

    /// Publishes the slot, then wakes the receiver if it sleeps.
    fn commit(&self, s: usize, pos: u64) -> Result<()> {
        let map = &*self.map;
        // SeqCst (a Release, and half of the Dekker pair with the
        // receiver's `sleeping` flag, see `wait`). A CAS rather than a
        // store: if the receiver reclaimed the slot (it took this process
        // for dead), the commit fails instead of resurrecting it.
        let h: Header<'_> = map.fixed(s);
        if h.u64::<{ slot::SEQ }>()
            .compare_exchange(
                pos,
                pos.wrapping_add(1),
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return Err(Error::new(
                ErrorKind::Canceled,
                "the receiver reclaimed the ring slot before the command was committed",
            ));
        }
        let sleeping = map.u32(offsets::WAIT_SLEEPING).load(Ordering::SeqCst);
        if sleeping != 0 {
            wait::wake(map, sleeping);
        }
        Ok(())
    }
}

/// Copies bytes `from..to` of the payload given as `parts` to `to_off + from`.
#[inline(always)]
fn copy_parts_range(map: &Mapping, to_off: usize, parts: &[&[u8]], from: usize, to: usize) {
    let mut at = 0;
    for p in parts {
        let (a, b) = (from.max(at), to.min(at + p.len()));
        if a < b {
            map.copy_in(to_off + a, &p[a - at..b - at]);
        }
        at += p.len();
        if at >= to {
            break;
        }
    }
}

fn too_big(len: usize, how: &'static str, cap: usize) -> Error {
    Error::new(
        ErrorKind::MsgSize,
        format!("a {len}-byte payload exceeds the {cap}-byte {how} capacity"),
    )
}

fn corrupt_slot(idx: u64, what: String) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("ring slot {idx} is malformed: {what}; the command was dropped"),
    )
}

/// What [`Receiver::recover`] cleaned up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Slots claimed by a dead sender that never committed them, skipped.
    pub skipped_slots: u32,
    /// Bounce buffers held by dead senders and referenced by no pending
    /// command, returned to the pool.
    pub freed_buffers: u32,
    /// Shared words found in states the protocol cannot produce (a tail
    /// outside `[head, head + slots]`, a free slot with a foreign sequence
    /// number, a free-list head naming no buffer) and reset.
    pub repaired: u32,
}

/// The receiving side of a region's ring (one per region: see
/// [`Region::receiver`](crate::region::Region::receiver)).
#[derive(Debug)]
pub struct Receiver {
    map: Arc<Mapping>,
    /// Next position to consume. Private: no peer can move it.
    head: u64,
    policy: WaitPolicy,
    /// Bounce buffers of stepped payloads consumed before their senders
    /// filled them (`index, sender pid, length`): kept out of the pool
    /// while those senders may still write into them (see
    /// [`reclaim_forsaken`](Self::reclaim_forsaken)). At most one entry
    /// per buffer.
    forsaken: Vec<(u32, u32, u32)>,
    /// The position of the command taken last, whose slot is handed back
    /// to the senders at the start of the receiver's next call rather
    /// than right away: the stores that free it pull the slot's line away
    /// from the sender's core, and the next atomic operation (the
    /// completion queue's lock, the answer's claim) would wait for that
    /// trip on the message's path; at the next call the receiver is
    /// polling. It holds one slot back for that long.
    unreleased: Option<u64>,
    /// When [`poll_ready`](Self::poll_ready) last found the ring empty.
    pace: pace::Pace,
}

/// Releases the head slot (and its bounce buffer) when dropped, so that a
/// panicking callback does not wedge the ring. With `defer`, the slot's
/// own stores wait there for the receiver's next call (see
/// `Receiver::unreleased`); the head moves on and the buffer goes back
/// now.
struct Release<'a> {
    map: &'a Mapping,
    head: &'a mut u64,
    bounce: Option<u32>,
    defer: Option<&'a mut Option<u64>>,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let pos = *self.head;
        if let Some(b) = self.bounce {
            // A failure means a duplicate reference or a scribbled free
            // list; the buffer is left out of the pool rather than handed
            // out twice.
            let _ = bounce::release(self.map, b);
        }
        match self.defer.as_deref_mut() {
            Some(d) => *d = Some(pos),
            None => free_slot(self.map, pos),
        }
        *self.head = pos.wrapping_add(1);
    }
}

/// Hands the slot of `pos`, consumed, to the next lap's sender.
#[inline(always)]
fn free_slot(map: &Mapping, pos: u64) {
    let l = map.layout();
    let h: Header<'_> = map.fixed(l.slot(pos));
    h.u32::<{ slot::CLAIMER }>().store(0, Ordering::Relaxed);
    // Release: our reads of the slot happen before the next lap's
    // sender (which loads this with Acquire) overwrites it.
    h.u64::<{ slot::SEQ }>().store(
        pos.wrapping_add(u64::from(l.ring_slots())),
        Ordering::Release,
    );
}

impl Receiver {
    pub(crate) fn new(map: Arc<Mapping>) -> Receiver {
        Receiver {
            map,
            head: 0,
            policy: WaitPolicy::default(),
            forsaken: Vec::new(),
            unreleased: None,
            pace: pace::Pace::default(),
        }
    }

    /// [`is_ready`](Self::is_ready) for a reader that polls: a ring found
    /// empty is looked at again only [`pace::LOOK_GAP`] later, and the
    /// polls in between answer `false` without reading its slot (see
    /// [`pace`]). `now` is [`pace::now`] and `gap` [`pace::gap`], read once
    /// per progress call by the caller (a clock reading per look, taken
    /// again after each command, made `fabric pingpong` 6% slower).
    #[inline(always)]
    pub fn poll_ready(&mut self, now: u64, gap: u64) -> bool {
        if !self.pace.may_look(now, gap) {
            return false;
        }
        let ready = self.is_ready();
        if !ready {
            self.pace.found_empty(now);
        }
        ready
    }

    /// Frees the slot of the command taken last, if it waits: the
    /// receive calls do so first; a poller that found the ring empty
    /// calls this so that the slot is not held until the next command.
    #[inline(always)]
    pub fn release_taken(&mut self) {
        if let Some(pos) = self.unreleased.take() {
            free_slot(&self.map, pos);
        }
    }

    /// The region's layout.
    pub fn layout(&self) -> Layout {
        *self.map.layout()
    }

    /// Sets how [`wait`](Self::wait) polls before blocking.
    pub fn set_wait_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    /// The wait policy in use.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }

    /// Receives the next command if one is committed: validates the slot,
    /// calls `f` with the command and a view of its payload, then releases
    /// the slot (and bounce buffer) for reuse, also if `f` panics.
    ///
    /// Errors: `Again` when the ring is empty (or the head command is still
    /// being written); `Io` when the head slot is malformed (bad sequence,
    /// length or buffer index: a peer wrote outside the protocol). A
    /// malformed slot is consumed or repaired, and `f` is not called, so
    /// the next call moves on.
    pub fn try_recv<R>(&mut self, f: impl FnOnce(&Message, Payload<'_>) -> R) -> Result<R> {
        self.take(|m, p| (f(m, p), false))
    }

    /// [`try_recv`](Self::try_recv) that may leave the command where it
    /// is: when `f` returns `None`, the slot (and its bounce buffer) stays
    /// the ring's head, and the next call sees the same command again
    /// (flow control: the receiver cannot take it yet, and senders find
    /// the ring full once it fills up behind it).
    pub fn try_recv_or_keep<R>(
        &mut self,
        f: impl FnOnce(&Message, Payload<'_>) -> Option<R>,
    ) -> Result<Option<R>> {
        self.take(|m, p| {
            let r = f(m, p);
            let keep = r.is_none();
            (r, keep)
        })
    }

    /// The body of the receive calls: `f` says whether to keep the slot.
    /// A stepped payload consumed before its sender filled it keeps its
    /// bounce buffer out of the pool (see
    /// [`reclaim_forsaken`](Self::reclaim_forsaken)).
    #[inline(always)]
    fn take<R>(&mut self, f: impl FnOnce(&Message, Payload<'_>) -> (R, bool)) -> Result<R> {
        self.release_taken();
        let map: &Mapping = &self.map;
        let l = *map.layout();
        let pos = self.head;
        let s = l.slot(pos);
        let h: Header<'_> = map.fixed(s);
        let seq = h.u64::<{ slot::SEQ }>().load(Ordering::Acquire);
        if seq == pos {
            return Err(Error::again());
        }
        if seq != pos.wrapping_add(1) {
            return Err(self.bad_sequence(pos, seq));
        }
        let r = Ordering::Relaxed;
        let len = h.u32::<{ slot::LEN }>().load(r) as usize;
        let bounce = h.u32::<{ slot::BOUNCE }>().load(r);
        let ring_flags = h.u32::<{ slot::RING_FLAGS }>().load(r);
        let aux = if ring_flags & slot::HAS_AUX != 0 {
            let a = s + l.slot_size() - slot::AUX_FROM_END;
            [map.u64(a).load(r), map.u64(a + 8).load(r)]
        } else {
            [0, 0]
        };
        let msg = Message {
            cmd: Command {
                op: h.u16::<{ slot::OP }>().load(r),
                flags: h.u16::<{ slot::FLAGS }>().load(r),
                src: h.u32::<{ slot::SRC }>().load(r),
                tag: h.u64::<{ slot::TAG }>().load(r),
                data: h.u64::<{ slot::DATA }>().load(r),
                aux,
            },
            len,
            sender_pid: h.u32::<{ slot::CLAIMER }>().load(r),
            bounce: (bounce != bounce::NONE).then_some(bounce),
        };
        let idx = pos & u64::from(l.ring_slots() - 1);
        let stepped = ring_flags & slot::STEPPED != 0;
        let checked = if ring_flags & !slot::KNOWN != 0 {
            Err(corrupt_slot(
                idx,
                format!("unknown ring flags {ring_flags:#x}"),
            ))
        } else if bounce == bounce::NONE {
            if stepped {
                Err(corrupt_slot(idx, "an inline payload marked stepped".into()))
            } else if len <= l.inline_capacity() {
                Ok(s + slot::PAYLOAD)
            } else {
                Err(corrupt_slot(
                    idx,
                    format!(
                        "inline length {len} exceeds the {}-byte slot payload",
                        l.inline_capacity()
                    ),
                ))
            }
        } else if bounce >= l.bounce_count() {
            Err(corrupt_slot(
                idx,
                format!(
                    "bounce buffer {bounce} does not exist (the pool has {})",
                    l.bounce_count()
                ),
            ))
        } else if len > l.bounce_size() {
            Err(corrupt_slot(
                idx,
                format!(
                    "length {len} exceeds the {}-byte bounce buffer",
                    l.bounce_size()
                ),
            ))
        } else if bounce::holder(map, bounce) == 0 {
            Err(corrupt_slot(
                idx,
                format!("bounce buffer {bounce} is not held by a sender"),
            ))
        } else {
            Ok(l.bounce_data(bounce))
        };
        let head = &mut self.head;
        match checked {
            Ok(off) => {
                let mark = stepped.then(|| bounce::fill_word(map, bounce));
                let p = Payload {
                    map,
                    off,
                    len,
                    mark,
                };
                // Only the lines in place: the others are being written.
                map.prefetch(off, if stepped { p.ready() } else { len });
                let mut release = Release {
                    map,
                    head,
                    bounce: msg.bounce,
                    defer: Some(&mut self.unreleased),
                };
                let (r, keep) = f(&msg, p);
                if keep {
                    // Not consumed: the slot stays committed at the head
                    // (the guard holds only references; nothing leaks).
                    std::mem::forget(release);
                } else if let Some(w) = mark {
                    if (map.u32(w).load(Ordering::Acquire) as usize) < len
                        && self.forsaken.len() < l.bounce_count() as usize
                        && !self.forsaken.iter().any(|e| e.0 == bounce)
                    {
                        // Its sender may still be copying into it.
                        release.bounce = None;
                        let holder = bounce::holder(map, bounce);
                        self.forsaken.push((bounce, holder, len as u32));
                    }
                }
                Ok(r)
            }
            Err(e) => {
                drop(Release {
                    map,
                    head,
                    bounce: None,
                    defer: None,
                });
                Err(e)
            }
        }
    }

    /// [`try_recv`](Self::try_recv) that copies the payload into a new
    /// vector.
    pub fn try_recv_vec(&mut self) -> Result<(Message, Vec<u8>)> {
        self.try_recv(|m, p| (*m, p.to_vec()))
    }

    /// Waits (see [`wait`](Self::wait)) up to `timeout` for a command, then
    /// receives it as [`try_recv`](Self::try_recv) does. `Again` when none
    /// came in time.
    pub fn recv<R>(
        &mut self,
        timeout: Duration,
        f: impl FnOnce(&Message, Payload<'_>) -> R,
    ) -> Result<R> {
        // The fast path (a command is already there) reads no clock.
        if self.is_ready() {
            return self.try_recv(f);
        }
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            if !self.wait(left) {
                return Err(Error::new(
                    ErrorKind::Again,
                    format!("no command arrived within {timeout:?}"),
                ));
            }
            // `wait` said the head slot changed; it can still be a slot
            // being written (seen through a repaired sequence): retry.
            if self.is_ready() {
                return self.try_recv(f);
            }
        }
    }

    /// [`recv`](Self::recv) into a new vector.
    pub fn recv_vec(&mut self, timeout: Duration) -> Result<(Message, Vec<u8>)> {
        self.recv(timeout, |m, p| (*m, p.to_vec()))
    }

    /// Whether [`try_recv`](Self::try_recv) would return something other
    /// than `Again` (a command, or an error about a malformed slot).
    pub fn is_ready(&self) -> bool {
        self.ready_with(Ordering::Acquire)
    }

    #[inline(always)]
    fn ready_with(&self, order: Ordering) -> bool {
        let s = self.map.layout().slot(self.head);
        self.map.u64(s + slot::SEQ).load(order) != self.head
    }

    /// Waits until a command is ready or `timeout` passed; returns whether
    /// one is ready. Spins, then yields, then sleeps on the region's futex
    /// as the [`WaitPolicy`] says; senders wake it only when it sleeps.
    pub fn wait(&self, timeout: Duration) -> bool {
        if self.is_ready() {
            return true;
        }
        let start = Instant::now();
        let spin_end = self.policy.spin.min(timeout);
        let yield_end = self
            .policy
            .spin
            .saturating_add(self.policy.yield_for)
            .min(timeout);
        // Phase 1: spin.
        while start.elapsed() < spin_end {
            for _ in 0..64 {
                if self.is_ready() {
                    return true;
                }
                std::hint::spin_loop();
            }
        }
        // Phase 2: yield between looks.
        while start.elapsed() < yield_end {
            wait::yield_now();
            if self.is_ready() {
                return true;
            }
        }
        // Phase 3: sleep.
        let map = &*self.map;
        let futex = map.u32(offsets::WAIT_FUTEX);
        let sleeping = map.u32(offsets::WAIT_SLEEPING);
        loop {
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return self.is_ready();
            }
            let v = futex.load(Ordering::Acquire);
            sleeping.fetch_or(wait::ON_FUTEX, Ordering::SeqCst);
            if self.ready_with(Ordering::SeqCst) {
                sleeping.fetch_and(!wait::ON_FUTEX, Ordering::Relaxed);
                return true;
            }
            wait::sleep(map, v, timeout - elapsed);
            sleeping.fetch_and(!wait::ON_FUTEX, Ordering::Relaxed);
            if self.is_ready() {
                return true;
            }
        }
    }

    /// Announces that the receiver is about to block in `poll(2)` on an
    /// inotify watch of the region file (`IN_MODIFY`): from now on every
    /// sender that commits a command `pwrite(2)`s the header's wake word,
    /// which makes that watch readable. Returns whether a command is ready
    /// already (then do not block; the announcement may stay, it costs
    /// senders a system call per command until
    /// [`clear_poll_sleep`](Self::clear_poll_sleep)).
    ///
    /// The announcement (`SeqCst`) and the look at the ring after it pair
    /// with the sender's commit and its look at the announcement, so a
    /// command committed after this call returns `false` always pokes.
    pub fn announce_poll_sleep(&self) -> bool {
        self.map
            .u32(offsets::WAIT_SLEEPING)
            .fetch_or(wait::IN_POLL, Ordering::SeqCst);
        self.ready_with(Ordering::SeqCst)
    }

    /// Withdraws [`announce_poll_sleep`](Self::announce_poll_sleep).
    pub fn clear_poll_sleep(&self) {
        self.map
            .u32(offsets::WAIT_SLEEPING)
            .fetch_and(!wait::IN_POLL, Ordering::Relaxed);
    }

    /// Whether a sender claimed the head position without committing it
    /// yet: the ring is not empty, only blocked behind that slot. If it
    /// stays so, the sender may have died mid-send (see
    /// [`recover`](Self::recover)).
    pub fn head_claimed(&self) -> bool {
        if self.is_ready() {
            return false;
        }
        let tail = self.map.u64(offsets::RING_TAIL).load(Ordering::Relaxed);
        tail.wrapping_sub(self.head) as i64 > 0
    }

    /// Returns to the pool the bounce buffers of stepped payloads that
    /// were consumed before their senders filled them, once the sender
    /// finished (the fill mark reached the length: it writes no more) or
    /// is gone (`is_dead(pid)`, as for [`recover`](Self::recover)), and
    /// forgets those another path returned already. Returns how many it
    /// returned.
    pub fn reclaim_forsaken(&mut self, mut is_dead: impl FnMut(u32) -> bool) -> u32 {
        let map: &Mapping = &self.map;
        let mut n = 0;
        self.forsaken.retain(|&(idx, pid, len)| {
            if bounce::holder(map, idx) != pid.max(1) {
                return false;
            }
            let mark = map.u32(bounce::fill_word(map, idx)).load(Ordering::Acquire);
            if mark < len && !is_dead(pid) {
                return true;
            }
            n += u32::from(bounce::release_if_held_by(map, idx, pid.max(1)));
            false
        });
        n
    }

    /// Bounce buffers waiting in [`reclaim_forsaken`](Self::reclaim_forsaken).
    pub fn forsaken(&self) -> usize {
        self.forsaken.len()
    }

    /// The ring position and sender pid of the head command when it is a
    /// stepped payload whose sender has not filled it yet (see
    /// [`Sender::try_send_parts_stepped`]); `None` for any other head.
    pub fn filling_head(&self) -> Option<(u64, u32)> {
        let map: &Mapping = &self.map;
        let l = map.layout();
        let s = l.slot(self.head);
        let h: Header<'_> = map.fixed(s);
        if h.u64::<{ slot::SEQ }>().load(Ordering::Acquire) != self.head.wrapping_add(1)
            || h.u32::<{ slot::RING_FLAGS }>().load(Ordering::Relaxed) & slot::STEPPED == 0
        {
            return None;
        }
        let b = h.u32::<{ slot::BOUNCE }>().load(Ordering::Relaxed);
        if b >= l.bounce_count() {
            return None;
        }
        let len = h.u32::<{ slot::LEN }>().load(Ordering::Relaxed) as usize;
        let mark = map.u32(bounce::fill_word(map, b)).load(Ordering::Acquire) as usize;
        let pid = h.u32::<{ slot::CLAIMER }>().load(Ordering::Relaxed);
        (mark < len).then_some((self.head, pid))
    }

    /// Step 3 of [`recover`](Self::recover).
    fn repair(&mut self) -> u32 {
        let map: &Mapping = &self.map;
        let l = *map.layout();
        let slots = u64::from(l.ring_slots());
        let head = self.head;
        let seq_of = |p: u64| map.u64(l.slot(p) + slot::SEQ);
        let mut fixed = 0;
        // A live ring always has head <= tail <= head + slots: a sender can
        // claim `p` only after the receiver freed `p - slots`.
        let tail_word = map.u64(offsets::RING_TAIL);
        let mut tail = tail_word.load(Ordering::Relaxed);
        if tail.wrapping_sub(head) > slots {
            let committed = (head..head.wrapping_add(slots))
                .take_while(|&p| seq_of(p).load(Ordering::Acquire) == p.wrapping_add(1))
                .count() as u64;
            let want = head.wrapping_add(committed);
            if tail_word
                .compare_exchange(tail, want, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                fixed += 1;
                tail = want;
            }
        }
        // A position not yet claimed must hold its own position as
        // sequence (the receiver freed it a lap ago). A sender can only
        // change that after claiming it, which moves the tail past it, so a
        // foreign value is reset, with a CAS, only while the tail (read
        // again after the sequence) has not reached the position.
        let mut p = tail;
        while p.wrapping_sub(head) < slots {
            let seq = seq_of(p).load(Ordering::Acquire);
            if seq != p {
                let now = tail_word.load(Ordering::Acquire);
                if now.wrapping_sub(p) as i64 <= 0
                    && seq_of(p)
                        .compare_exchange(seq, p, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    fixed += 1;
                }
            }
            p = p.wrapping_add(1);
        }
        if bounce::repair(map) {
            fixed += 1;
        }
        fixed
    }

    /// The head slot holds `seq`, which is neither "free for this lap"
    /// (`pos`) nor "committed" (`pos + 1`): only a peer writing outside the
    /// protocol produces that. If some sender claimed the position (the
    /// tail is past it), the slot is skipped; otherwise its sequence is
    /// reset to "free" so senders can use it. Either way the ring keeps
    /// going and the caller gets an `Io` error.
    fn bad_sequence(&mut self, pos: u64, seq: u64) -> Error {
        let map: &Mapping = &self.map;
        let l = *map.layout();
        let idx = pos & u64::from(l.ring_slots() - 1);
        let tail = map.u64(offsets::RING_TAIL).load(Ordering::Relaxed);
        if tail.wrapping_sub(pos) as i64 > 0 {
            drop(Release {
                map,
                head: &mut self.head,
                bounce: None,
                defer: None,
            });
        } else {
            map.u64(l.slot(pos) + slot::SEQ)
                .store(pos, Ordering::Release);
        }
        corrupt_slot(
            idx,
            format!(
                "sequence {seq:#x} where {pos:#x} or {:#x} was expected",
                pos.wrapping_add(1)
            ),
        )
    }

    /// Cleans up after senders that died mid-operation. `is_dead(pid)` says
    /// whether a sender process is gone ([`process_gone`] is the usual
    /// choice).
    ///
    /// 1. While the head slot was claimed (the tail is past it) but never
    ///    committed, and its claimer is dead or not recorded (pid 0), the
    ///    slot is skipped. A sender records its pid with the header, right
    ///    before the commit, so call this only once the head has stayed
    ///    claimed far longer than a slot's copy takes (the engine waits
    ///    50 ms). Should the claimer be alive after all, its commit then
    ///    fails with `Canceled`; an inline send then claims anew.
    /// 2. Bounce buffers held by a dead pid and not named by any committed
    ///    command still in the ring go back to the pool.
    /// 3. Shared words a peer scribbled on are put back in a state senders
    ///    can work with (after such damage every send would otherwise fail
    ///    with `Again`): a tail outside `[head, head + slots]` is set just
    ///    past the committed commands at the head; an unclaimed slot whose
    ///    sequence is neither its position nor "committed" gets its
    ///    position back; a free-list head naming no buffer is rebuilt from
    ///    the buffers nobody holds. Words in states a live sender can
    ///    produce are never touched, so this is safe to call at any time.
    ///
    /// [`process_gone`]: crate::region::process_gone
    pub fn recover(&mut self, mut is_dead: impl FnMut(u32) -> bool) -> Recovery {
        self.release_taken();
        let mut out = Recovery {
            repaired: self.repair(),
            ..Recovery::default()
        };
        let map: &Mapping = &self.map;
        let l = *map.layout();
        let slots = u64::from(l.ring_slots());
        for _ in 0..slots {
            let pos = self.head;
            let s = l.slot(pos);
            let seq = map.u64(s + slot::SEQ);
            if seq.load(Ordering::Acquire) != pos {
                break;
            }
            let tail = map.u64(offsets::RING_TAIL).load(Ordering::Relaxed);
            if tail.wrapping_sub(pos) as i64 <= 0 {
                break;
            }
            let claimer = map.u32(s + slot::CLAIMER).load(Ordering::Relaxed);
            // Pid 0: no claimer recorded yet (see above).
            if claimer != 0 && !is_dead(claimer) {
                break;
            }
            if seq
                .compare_exchange(
                    pos,
                    pos.wrapping_add(slots),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                break;
            }
            map.u32(s + slot::CLAIMER).store(0, Ordering::Relaxed);
            self.head = pos.wrapping_add(1);
            out.skipped_slots += 1;
        }
        out.freed_buffers = self.free_dead_holders(is_dead);
        out
    }

    /// The ring position of the head: every command before it has been
    /// taken (or skipped).
    pub fn position(&self) -> u64 {
        self.head
    }

    /// The ring position just past the last slot any sender has claimed
    /// (the shared tail, which a peer can write: clamped to at most a
    /// ring's length ahead of the head, as a live ring keeps it).
    pub fn claimed_end(&self) -> u64 {
        let slots = u64::from(self.map.layout().ring_slots());
        let tail = self.map.u64(offsets::RING_TAIL).load(Ordering::Acquire);
        if tail.wrapping_sub(self.head) > slots {
            self.head.wrapping_add(slots)
        } else {
            tail
        }
    }

    /// Whether the bounce pool has no free buffer now.
    pub fn pool_dry(&self) -> bool {
        bounce::is_dry(&self.map)
    }

    /// Step 2 of [`recover`](Self::recover) alone: returns to the pool
    /// the bounce buffers held by a dead pid (`is_dead`, asked once per
    /// pid) and named by no committed command in the ring. A sender that
    /// dies after taking a buffer and before its command is committed
    /// leaves one so, with no ring slot claimed that would make the head
    /// stall and `recover` run: the engine calls this when the pool runs
    /// dry. Returns how many it returned.
    pub fn free_dead_holders(&mut self, mut is_dead: impl FnMut(u32) -> bool) -> u32 {
        self.release_taken();
        let map: &Mapping = &self.map;
        let l = *map.layout();
        let count = l.bounce_count();
        if count == 0 {
            return 0;
        }
        let slots = u64::from(l.ring_slots());
        let mut named = vec![false; count as usize];
        for pos in self.head..self.head.wrapping_add(slots) {
            let s = l.slot(pos);
            if map.u64(s + slot::SEQ).load(Ordering::Acquire) == pos.wrapping_add(1) {
                let b = map.u32(s + slot::BOUNCE).load(Ordering::Relaxed);
                if let Some(n) = named.get_mut(b as usize) {
                    *n = true;
                }
            }
        }
        // Holders are few (the live senders hold most buffers of a dry
        // pool), and asking about a pid may read /proc: once per pid.
        let mut asked: Vec<(u32, bool)> = Vec::new();
        let mut freed = 0;
        for b in 0..count {
            let holder = bounce::holder(map, b);
            if holder == 0 || named.get(b as usize).copied().unwrap_or(true) {
                continue;
            }
            let dead = match asked.iter().find(|(p, _)| *p == holder) {
                Some(&(_, d)) => d,
                None => {
                    let d = is_dead(holder);
                    asked.push((holder, d));
                    d
                }
            };
            if dead && bounce::release_if_held_by(map, b, holder) {
                freed += 1;
            }
        }
        freed
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.release_taken();
    }
}

#[cfg(test)]
mod tests;
