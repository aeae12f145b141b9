//! One TCP connection: a non-blocking socket, the queue of frames waiting
//! to be written, and the receive state (a [`wire::Decoder`], a read
//! buffer, and where the payload of the frame being read goes).
//!
//! Sending: a frame's headers are encoded into the queue item (no
//! allocation); its payload is the caller's buffer (zero-copy operations),
//! a range of the connection's staging buffer (injected data, private data,
//! atomic results: copied once, the buffer is reused), or registered memory
//! (read responses, written straight from the region while its
//! registration is held). One `sendmsg` writes as many queued frames as fit
//! in its iovecs, so small frames coalesce when the socket is busy.
//!
//! Receiving: the endpoint feeds the read buffer to the decoder (see
//! `ep::rx`); a frame's payload goes to its [`Sink`], and large payloads
//! with a known destination are read straight into it
//! ([`Sink::recv_direct`]).
//!
//! With `sys`, this is the crate's unsafe gateway: the copies into and out
//! of callers' buffers ([`copy_in`], [`copy_out`]), sends from them and
//! direct reads into them or into registered memory. Each `unsafe` block
//! says why it is sound; the rest of the crate denies `unsafe`.

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};

use fabric_core::kit::mr::MrTable;
use fabric_core::kit::rx::{Meta, RecvId, RxEngine, Transport};
use fabric_core::objects::{CompletionFlags, FiAddr, MrAccess};
use fabric_core::{Error, ErrorKind, Result};

use crate::limits::IOV_LIMIT;
use crate::sys::{self, MAX_IOV, NO_IOV};
use crate::wire::{self, Flags, Frame, MAX_FRAME_HEADER_LEN, RmaHeader};

/// Size of a connection's read buffer.
pub(crate) const RBUF: usize = 64 * 1024;

/// Payloads at least this large with a known destination are read straight
/// into it; smaller ones go through the read buffer, where the frames that
/// follow may already be. A direct read costs a second `recv` (the
/// headers are read first, with a little more), a read through the buffer
/// a copy: on loopback (2-vCPU Intel Xeon guest, `fabric pingpong` MSG,
/// 3-5 alternating rounds, one-way time with the buffer / direct) 16 KiB
/// 0.93, 24 KiB 0.96, 32 KiB 0.96, 48 KiB 0.97 and 56 KiB 1.03; a raw
/// TCP ping-pong split the same way loses 0.2-0.4 µs a message at 16 KiB.
/// For streams (`fabric bw`, 64 in flight) the buffer lost 5% at 48 KiB
/// (MSG) and nothing measurable at 16-32 KiB.
pub(crate) const DIRECT_READ_MIN: u64 = 40 * 1024;

/// Pieces of a caller's buffer, kept until the operation completes (the
/// kit's, with tcp's iovec limit).
pub(crate) type Pieces = fabric_core::kit::rx::Pieces<IOV_LIMIT>;

/// Copies `data` into a caller's buffer from byte `at` (what does not fit
/// is dropped); the bytes written.
///
/// Every [`Pieces`] of this crate describes the buffer of an operation
/// (or a receive the kit's engine holds) still outstanding, whose contract
/// (`recvmsg`, `readmsg`, the fetching atomics) keeps it valid for writes
/// and unaliased until the operation completes: that is what makes this
/// and [`copy_out`] safe to call from the rest of the crate.
pub(crate) fn copy_in(p: &Pieces, at: usize, data: &[u8]) -> usize {
    // SAFETY: see above; the pieces belong to an outstanding operation.
    unsafe { p.write_at(at, data) }
}

/// Copies a caller's buffer from byte `at` into `out` (an inject's
/// copy, atomic operands); the bytes copied. The send contract keeps the
/// buffer readable until the operation completes (see [`copy_in`]).
pub(crate) fn copy_out(p: &Pieces, at: usize, out: &mut [u8]) -> usize {
    // SAFETY: as for `copy_in`, readable per the send contract.
    unsafe { p.read_at(at, out) }
}

/// Appends iovecs for the bytes of `p` from `skip` to `out` (at most its
/// room); returns how many were appended.
fn push_iov(p: &Pieces, mut skip: usize, out: &mut [libc::iovec]) -> usize {
    let mut n = 0;
    for v in p.pieces() {
        if skip >= v.len {
            skip -= v.len;
            continue;
        }
        let Some(slot) = out.get_mut(n) else { break };
        *slot = sys::iov(v.addr.wrapping_add(skip), v.len - skip);
        n += 1;
        skip = 0;
    }
    n
}

/// A frame waiting for its connection (not established yet, or held
/// behind a fence), with the request it starts.
#[derive(Debug)]
pub(crate) struct Queued {
    pub item: TxItem,
    pub pending: Option<(u64, Pending)>,
    pub fence: bool,
}

/// What a finished transmit operation reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxDone {
    pub context: u64,
    pub flags: CompletionFlags,
    pub len: usize,
    /// Report a success completion (not suppressed by selective completion
    /// or inject).
    pub report: bool,
}

/// What happens when a queued frame is fully written.
#[derive(Debug)]
pub(crate) enum Done {
    /// Nothing (protocol frames, requests awaiting a response).
    None,
    /// A transmit operation completes.
    Tx(TxDone),
    /// A MSG accept went out: the endpoint is connected.
    Connected,
    /// Close the connection (a refused hello).
    Close,
}

/// Payload of a queued frame.
#[derive(Debug)]
pub(crate) enum Body {
    None,
    /// The caller's buffer (zero-copy send, RMA write, atomic operands).
    User(Pieces),
    /// Bytes in the connection's staging buffer.
    Stage {
        off: usize,
        len: usize,
    },
    /// A private copy (frames queued before their connection exists).
    Owned(Vec<u8>),
    /// Registered memory (read response), checked again for every write.
    Region(RmaHeader),
}

/// Where a frame's payload comes from, when it is submitted.
#[derive(Debug)]
pub(crate) enum Src<'a> {
    None,
    /// Copied (inject, private data, atomic results).
    Bytes(&'a [u8]),
    User(Pieces),
    Region(RmaHeader),
}

impl Src<'_> {
    /// The payload as a body that owns or borrows nothing transient.
    pub(crate) fn into_owned_body(self) -> Body {
        match self {
            Src::None => Body::None,
            Src::Bytes(b) => Body::Owned(b.to_vec()),
            Src::User(p) => Body::User(p),
            Src::Region(r) => Body::Region(r),
        }
    }
}

/// A frame waiting to be written.
#[derive(Debug)]
pub(crate) struct TxItem {
    head: [u8; MAX_FRAME_HEADER_LEN],
    head_len: usize,
    body: Body,
    total: usize,
    sent: usize,
    pub done: Done,
}

fn body_len(body: &Body) -> usize {
    match body {
        Body::None => 0,
        Body::User(p) => p.len(),
        Body::Stage { len, .. } => *len,
        Body::Owned(v) => v.len(),
        Body::Region(r) => r
            .iov()
            .iter()
            .fold(0usize, |acc, i| acc.saturating_add(i.len)),
    }
}

impl TxItem {
    pub(crate) fn new(frame: &Frame, body: Body, done: Done) -> Self {
        let mut head = [0u8; MAX_FRAME_HEADER_LEN];
        let head_len = frame.encode(&mut head);
        let total = head_len + body_len(&body);
        TxItem {
            head,
            head_len,
            body,
            total,
            sent: 0,
            done,
        }
    }

    /// Takes the body out (for failure reporting or moving it).
    pub(crate) fn into_parts(self) -> (Body, Done) {
        (self.body, self.done)
    }

    /// Appends iovecs of the unsent bytes (not for region bodies); returns
    /// how many.
    fn push_iov(&self, stage: &[u8], out: &mut [libc::iovec]) -> usize {
        let mut n = 0;
        if self.sent < self.head_len {
            if let (Some(slot), Some(h)) = (out.get_mut(0), self.head.get(self.sent..self.head_len))
            {
                *slot = sys::iov(h.as_ptr(), h.len());
                n = 1;
            }
        }
        let skip = self.sent.saturating_sub(self.head_len);
        let rest = out.get_mut(n..).unwrap_or_default();
        let bytes: Option<&[u8]> = match &self.body {
            Body::None | Body::Region(_) => None,
            Body::Stage { off, len } => stage.get(off + skip..off + len),
            Body::Owned(v) => v.get(skip..),
            Body::User(p) => {
                return n + push_iov(p, skip, rest);
            }
        };
        if let (Some(b), Some(slot)) = (bytes.filter(|b| !b.is_empty()), rest.first_mut()) {
            *slot = sys::iov(b.as_ptr(), b.len());
            n += 1;
        }
        n
    }
}

/// Frames with at most this much payload are copied behind their headers
/// and written as one buffer: the kernel takes one contiguous buffer
/// markedly faster than headers and payload as two iovecs (on loopback
/// 0.15-0.3 us one-way from 64 B to 4 KiB).
pub(crate) const FLAT_MAX: usize = 4096;

/// Most frames a connection's transmit queue holds before reading from it
/// pauses. This side's own operations are at most `tx_attr.size` (1024),
/// and each of a well-behaved peer's outstanding operations asks for at
/// most one answer, so only a peer that sends requests and does not read
/// the answers gets here.
pub(crate) const TX_ITEMS_MAX: usize = 4096;
/// Most bytes copied into a connection's staging buffer before reading
/// from it pauses.
pub(crate) const TX_STAGE_MAX: usize = 8 << 20;

/// How long an accepted connection (or a passive endpoint's incoming
/// one) may take to say hello (send its connection request); then it is
/// closed.
pub(crate) const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Most accepted connections of an endpoint that have not said hello yet
/// (connection requests not yet complete, on a passive endpoint); more
/// are closed as they come.
pub(crate) const HELLO_PENDING_MAX: usize = 256;

/// The transmit side of a connection.
#[derive(Debug)]
pub(crate) struct Tx {
    items: VecDeque<TxItem>,
    stage: Vec<u8>,
    /// Where a small frame is laid out whole ([`FLAT_MAX`]).
    flat: Box<[u8]>,
}

impl Tx {
    pub(crate) fn new() -> Self {
        Tx {
            items: VecDeque::new(),
            stage: Vec::new(),
            flat: Box::default(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the queue holds more than a connection may have waiting
    /// ([`TX_ITEMS_MAX`] frames or [`TX_STAGE_MAX`] copied bytes).
    pub(crate) fn over_cap(&self) -> bool {
        self.items.len() >= TX_ITEMS_MAX || self.stage.len() >= TX_STAGE_MAX
    }

    /// Whether a connection paused by [`Tx::over_cap`] may be read again:
    /// the queue is down to half.
    pub(crate) fn may_resume(&self) -> bool {
        self.items.len() <= TX_ITEMS_MAX / 2 && self.stage.len() < TX_STAGE_MAX / 2
    }

    /// A body for `src`, copying transient bytes into the staging buffer.
    pub(crate) fn body(&mut self, src: Src<'_>) -> Body {
        match src {
            Src::None => Body::None,
            Src::Bytes(b) => {
                let off = self.stage.len();
                self.stage.extend_from_slice(b);
                Body::Stage { off, len: b.len() }
            }
            Src::User(p) => Body::User(p),
            Src::Region(r) => Body::Region(r),
        }
    }

    pub(crate) fn push(&mut self, item: TxItem) {
        self.items.push_back(item);
    }

    /// Writes a frame straight from `src` when nothing is queued (the
    /// common case), so injected bytes are not copied into the staging
    /// buffer first and the queue is not touched. What the socket does not
    /// take is queued as usual (transient bytes copied then). Returns
    /// `Ok(Some(done))` when the whole frame was written, `Ok(None)` when
    /// it was queued (fully or partly unsent), and `Err` (with the frame
    /// queued, so the failure reports it) when the socket failed.
    /// Registered-memory bodies and a non-empty queue take the queue.
    pub(crate) fn send_now(
        &mut self,
        fd: BorrowedFd<'_>,
        frame: &Frame,
        src: Src<'_>,
        done: Done,
    ) -> Result<Option<Done>> {
        if !self.items.is_empty() || matches!(src, Src::Region(_)) {
            let body = self.body(src);
            self.push(TxItem::new(frame, body, done));
            return Ok(None);
        }
        let body_len = match &src {
            Src::None | Src::Region(_) => 0,
            Src::Bytes(b) => b.len(),
            Src::User(p) => p.len(),
        };
        if self.flat.is_empty() {
            // Allocated on the first send: a connection that never gets
            // as far as sending (a silent accepted socket) costs nothing.
            self.flat = vec![0; MAX_FRAME_HEADER_LEN + FLAT_MAX].into_boxed_slice();
        }
        // Small: headers and payload copied into one buffer, one send.
        // Else the headers on the stack and the payload where it is.
        let flat = self
            .flat
            .first_chunk_mut::<MAX_FRAME_HEADER_LEN>()
            .filter(|_| body_len <= FLAT_MAX);
        let (r, total) = if let Some(h) = flat {
            let head_len = frame.encode(h);
            let total = head_len + body_len;
            let body = self.flat.get_mut(head_len..total).unwrap_or_default();
            match &src {
                Src::Bytes(b) => body.copy_from_slice(b),
                // SAFETY: the send contract keeps the user's buffer
                // readable until the operation completes.
                Src::User(p) => _ = unsafe { p.read_at(0, body) },
                Src::None | Src::Region(_) => {}
            }
            (
                sys::send_buf(fd, self.flat.get(..total).unwrap_or_default()),
                total,
            )
        } else {
            let mut head = [0u8; MAX_FRAME_HEADER_LEN];
            let head_len = frame.encode(&mut head);
            let mut iov = [NO_IOV; 1 + IOV_LIMIT];
            iov[0] = sys::iov(head.as_ptr(), head_len);
            let n = match &src {
                Src::Bytes(b) => {
                    iov[1] = sys::iov(b.as_ptr(), b.len());
                    2
                }
                Src::User(p) => 1 + push_iov(p, 0, iov.get_mut(1..).unwrap_or_default()),
                Src::None | Src::Region(_) => 1,
            };
            // SAFETY: the iovecs point into `head` and `src`: transient
            // bytes borrowed for this call, or user buffers that the send
            // contract keeps valid until the operation completes.
            let r = unsafe { sys::send_iov(fd, iov.get(..n).unwrap_or_default()) };
            (r, head_len + body_len)
        };
        let (sent, err) = match r {
            Ok(k) if k == total => return Ok(Some(done)),
            Ok(0) => (
                0,
                Some(Error::new(
                    ErrorKind::ConnReset,
                    "tcp: the socket takes no more data",
                )),
            ),
            Ok(k) => (k, None),
            Err(e) if sys::would_block(&e) => (0, None),
            Err(e) => (0, Some(e.into())),
        };
        let body = self.body(src);
        let mut item = TxItem::new(frame, body, done);
        item.sent = sent;
        self.push(item);
        match err {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Takes every queued frame (the connection failed).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = TxItem> + '_ {
        self.stage.clear();
        self.items.drain(..)
    }

    /// Writes queued frames until the socket is full or the queue empty;
    /// calls `done` for each frame fully written. `Err` when the connection
    /// failed (or a region a read response comes from was deregistered).
    pub(crate) fn flush(
        &mut self,
        fd: BorrowedFd<'_>,
        mr: &MrTable,
        done: &mut dyn FnMut(Done),
    ) -> Result<()> {
        loop {
            let Some(front) = self.items.front() else {
                self.stage.clear();
                return Ok(());
            };
            let r = if let Body::Region(rma) = &front.body {
                send_region(fd, front, rma, mr)?
            } else {
                let mut iov = [NO_IOV; MAX_IOV];
                let mut n = 0;
                for item in &self.items {
                    if matches!(item.body, Body::Region(_)) || n + 1 + IOV_LIMIT > MAX_IOV {
                        break;
                    }
                    n += item.push_iov(&self.stage, iov.get_mut(n..).unwrap_or_default());
                }
                // SAFETY: the iovecs point into queued items' headers, the
                // staging buffer and owned bodies (all alive and unchanged
                // during the call) and into user buffers that the send
                // contract keeps valid until the operation completes.
                unsafe { sys::send_iov(fd, iov.get(..n).unwrap_or_default()) }
            };
            match r {
                Ok(0) => {
                    return Err(Error::new(
                        ErrorKind::ConnReset,
                        "tcp: the socket takes no more data",
                    ));
                }
                Ok(k) => self.advance(k, done),
                Err(e) if sys::would_block(&e) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn advance(&mut self, mut k: usize, done: &mut dyn FnMut(Done)) {
        while k > 0 {
            let Some(item) = self.items.front_mut() else {
                return;
            };
            let left = item.total - item.sent;
            if k < left {
                item.sent += k;
                return;
            }
            k -= left;
            if let Some(item) = self.items.pop_front() {
                done(item.done);
            }
        }
        // Zero-length remainders (none today) would be popped here.
        while self.items.front().is_some_and(|i| i.sent == i.total) {
            if let Some(item) = self.items.pop_front() {
                done(item.done);
            }
        }
    }
}

/// Writes the next piece of a read response from registered memory: the
/// rest of the headers and the rest of the current range, while the
/// registration is held.
fn send_region(
    fd: BorrowedFd<'_>,
    item: &TxItem,
    rma: &RmaHeader,
    mr: &MrTable,
) -> Result<std::io::Result<usize>> {
    let mut iov = [NO_IOV; 2];
    let mut n = 0;
    if let Some(h) = item.head.get(item.sent..item.head_len) {
        if !h.is_empty() {
            iov[0] = sys::iov(h.as_ptr(), h.len());
            n = 1;
        }
    }
    let mut skip = item.sent.saturating_sub(item.head_len);
    for r in rma.iov() {
        if skip >= r.len {
            skip -= r.len;
            continue;
        }
        let off = u64::try_from(skip).unwrap_or(u64::MAX);
        let len = r.len - skip;
        let addr = r
            .addr
            .checked_add(off)
            .ok_or_else(|| Error::new(ErrorKind::Access, "tcp: read response range overflows"))?;
        return mr
            .with_access(r.key, addr, len, MrAccess::REMOTE_READ, |base| {
                iov[n] = sys::iov(base as *const u8, len);
                // SAFETY: the table holds the registration while this runs,
                // and mr_reg's contract keeps registered memory valid while
                // it is registered; the kernel only reads it.
                unsafe { sys::send_iov(fd, &iov[..=n]) }
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "tcp: the memory a peer is reading was deregistered mid-transfer: {}",
                        e.detail()
                    ),
                )
            });
    }
    // SAFETY: the iovec points into the item's header.
    Ok(unsafe { sys::send_iov(fd, &iov[..n]) })
}

/// A transmit operation waiting for the peer's answer.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A rendezvous send waiting for its clear-to-send.
    Rndv {
        buf: Pieces,
        done: TxDone,
        ack: Flags,
    },
    /// Waiting for an acknowledgement (delivery or transmit complete, RMA
    /// write, plain atomic).
    Ack { done: TxDone },
    /// An RMA read waiting for its data.
    Read { buf: Pieces, len: u64, done: TxDone },
    /// A fetching or compare atomic waiting for the old values.
    Fetch { buf: Pieces, len: u64, done: TxDone },
}

impl Pending {
    pub(crate) fn done(&self) -> TxDone {
        match self {
            Pending::Rndv { done, .. }
            | Pending::Ack { done }
            | Pending::Read { done, .. }
            | Pending::Fetch { done, .. } => *done,
        }
    }
}

/// A rendezvous message this side accepted and is receiving.
#[derive(Debug)]
pub(crate) struct RndvRecv {
    /// The receive it goes into.
    pub recv: RecvId,
    /// What its completion says.
    pub meta: Meta,
    pub accept: u64,
    pub got: u64,
    pub ack: Flags,
    /// Message offset of the `RndvData` frame being read.
    pub frame_off: u64,
}

/// Where the payload of the frame being read goes.
#[derive(Debug)]
pub(crate) enum Sink {
    /// Read and dropped (a refused request, bytes past a truncated buffer).
    Discard,
    /// Into a matched receive (held by the receive engine).
    Recv(RecvId),
    /// Buffered: an unexpected message within the endpoint's budget.
    Unexp(Vec<u8>),
    /// Left in the socket until a receive matches the message (the
    /// unexpected budget is spent); the connection reads nothing else.
    Stalled,
    /// Rendezvous data.
    Rndv(RndvRecv),
    /// RMA write into registered memory; `status` once a check failed.
    Region {
        rma: RmaHeader,
        status: Option<ErrorKind>,
    },
    /// Read response data into the read's buffer.
    Read { buf: Pieces, done: TxDone },
    /// Old values of a fetching atomic into its result buffer.
    Fetch { buf: Pieces, done: TxDone },
    /// Atomic operands, applied when complete.
    Scratch(Vec<u8>),
    /// Connection private data.
    Private(Vec<u8>),
    /// The target's reason for refusing this side's operation (a failed
    /// answer of protocol version 2; the decoder bounds it): the operation
    /// fails with it once the reason is in.
    Refusal {
        done: TxDone,
        kind: ErrorKind,
        what: &'static str,
        text: Vec<u8>,
    },
}

/// Where a message frame's payload went, once all of it is read.
#[derive(Debug)]
pub(crate) enum Landed {
    /// Into a matched receive.
    Recv(RecvId),
    /// Buffered as unexpected.
    Unexp(Vec<u8>),
    /// Nowhere (dropped, or left in the socket).
    Elsewhere,
}

impl Sink {
    /// Where the payload went, for a message frame.
    pub(crate) fn landed(self) -> Landed {
        match self {
            Sink::Recv(id) => Landed::Recv(id),
            Sink::Unexp(v) => Landed::Unexp(v),
            _ => Landed::Elsewhere,
        }
    }

    /// Stores payload bytes that arrived at offset `at` of the payload.
    pub(crate) fn write(&mut self, at: u64, data: &[u8], mr: &MrTable, rx: &Engine) {
        let at = usize::try_from(at).unwrap_or(usize::MAX);
        match self {
            Sink::Discard | Sink::Stalled => {}
            Sink::Recv(id) => {
                if let Some(r) = rx.recv(*id) {
                    // SAFETY: the receive contract keeps the buffer valid
                    // and unaliased until its completion.
                    unsafe { r.buf.write_at(at, data) };
                }
            }
            Sink::Rndv(r) => {
                let at = usize::try_from(r.frame_off)
                    .unwrap_or(usize::MAX)
                    .saturating_add(at);
                if let Some(recv) = rx.recv(r.recv) {
                    // SAFETY: as above.
                    unsafe { recv.buf.write_at(at, data) };
                }
            }
            Sink::Read { buf, .. } | Sink::Fetch { buf, .. } => {
                // SAFETY: the read / atomic contract keeps the result buffer
                // valid and unaliased until the completion.
                unsafe { buf.write_at(at, data) };
            }
            Sink::Unexp(v)
            | Sink::Scratch(v)
            | Sink::Private(v)
            | Sink::Refusal { text: v, .. } => v.extend_from_slice(data),
            Sink::Region { rma, status } => {
                if status.is_some() {
                    return;
                }
                let mut data = data;
                let mut pos = at;
                while !data.is_empty() {
                    let Some((key, addr, room)) = locate(rma, pos) else {
                        *status = Some(ErrorKind::Inval);
                        return;
                    };
                    let k = room.min(data.len());
                    let chunk = data.get(..k).unwrap_or_default();
                    let r = mr.with_access(key, addr, k, MrAccess::REMOTE_WRITE, |dst| {
                        // SAFETY: the range was checked inside the region
                        // and the registration is held while this runs;
                        // mr_reg's contract lets peers write it.
                        unsafe {
                            fabric_core::kit::copy::copy_bytes(chunk.as_ptr(), dst as *mut u8, k);
                        }
                    });
                    if let Err(e) = r {
                        *status = Some(e.kind());
                        return;
                    }
                    data = data.get(k..).unwrap_or_default();
                    pos += k;
                }
            }
        }
    }

    /// Reads up to `n` bytes of the payload, from offset `at`, straight
    /// from the socket into their destination (registered memory checked
    /// and held meanwhile, or a receive or result buffer): the read's
    /// result and the bytes asked. `None`: no direct destination (read
    /// through the read buffer), or a region deregistered meanwhile (the
    /// rest is read and dropped).
    pub(crate) fn recv_direct(
        &mut self,
        fd: BorrowedFd<'_>,
        at: u64,
        n: u64,
        mr: &MrTable,
        rx: &Engine,
    ) -> Option<(std::io::Result<usize>, usize)> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        match self {
            Sink::Region { rma, status } if status.is_none() => {
                let (key, addr, room) = locate(rma, usize::try_from(at).ok()?)?;
                let k = room.min(n);
                let r = mr.with_access(key, addr, k, MrAccess::REMOTE_WRITE, |dst| {
                    // SAFETY: the range is inside a region whose
                    // registration is held during the call; peers may
                    // write registered memory.
                    unsafe { sys::recv_raw(fd, dst as *mut u8, k) }
                });
                match r {
                    Ok(io) => Some((io, k)),
                    Err(e) => {
                        *status = Some(refusal(&e));
                        None
                    }
                }
            }
            sink => sink.span_at(at, rx).map(|(ptr, room)| {
                let k = room.min(n);
                // SAFETY: the span is inside a receive or result buffer that
                // the operation's contract keeps valid and unaliased until
                // its completion.
                (unsafe { sys::recv_raw(fd, ptr, k) }, k)
            }),
        }
    }

    /// Where bytes at payload offset `at` can be read straight from the
    /// socket (user buffers only; `None`: through the read buffer).
    fn span_at(&self, at: u64, rx: &Engine) -> Option<(*mut u8, usize)> {
        let at = usize::try_from(at).ok()?;
        match self {
            Sink::Recv(id) => rx.recv(*id)?.buf.span_at(at),
            Sink::Rndv(r) => rx
                .recv(r.recv)?
                .buf
                .span_at(usize::try_from(r.frame_off).ok()?.checked_add(at)?),
            Sink::Read { buf, .. } | Sink::Fetch { buf, .. } => buf.span_at(at),
            _ => None,
        }
    }
}

/// The status a refused remote access travels back with: a bad key is
/// `FI_EKEYREJECTED`, a range outside the region or a missing right
/// `FI_EACCES`.
pub(crate) fn refusal(e: &Error) -> ErrorKind {
    match e.kind() {
        ErrorKind::NoKey => ErrorKind::KeyRejected,
        ErrorKind::Access => ErrorKind::Access,
        other => other,
    }
}

/// The range of an RMA request holding payload byte `pos`: key, remote
/// address and bytes left in that range.
pub(crate) fn locate(rma: &RmaHeader, mut pos: usize) -> Option<(u64, u64, usize)> {
    for r in rma.iov() {
        if pos < r.len {
            let addr = r.addr.checked_add(u64::try_from(pos).ok()?)?;
            return Some((r.key, addr, r.len - pos));
        }
        pos -= r.len;
    }
    None
}

/// The frame being read: its headers, where its payload goes, and how
/// much of the payload has arrived.
#[derive(Debug)]
pub(crate) struct Cur {
    pub frame: Frame,
    pub sink: Sink,
    pub got: u64,
}

/// The receive side of a connection.
#[derive(Debug)]
pub(crate) struct Rx {
    pub dec: wire::Decoder,
    pub buf: Box<[u8]>,
    pub pos: usize,
    pub len: usize,
    pub cur: Option<Cur>,
    /// The receive engine paused this sender (the unexpected budget is
    /// spent, or its remote CQ data fills the receive CQ): no new frame
    /// is read (the current one's payload still is).
    pub paused: bool,
    /// Reading paused: this connection's transmit queue is over its cap
    /// ([`Tx::over_cap`]), a peer that sends requests and does not read
    /// the answers.
    pub tx_full: bool,
    /// The last frame carried a large payload.
    pub last_large: bool,
}

impl Rx {
    /// Whether reading stops here: paused between frames, over the
    /// transmit cap, or the current frame's payload left in the socket
    /// until a receive fetches it ([`Sink::Stalled`], whatever the engine
    /// says about pausing).
    pub(crate) fn blocked(&self) -> bool {
        match &self.cur {
            Some(c) => matches!(c.sink, Sink::Stalled),
            None => self.paused || self.tx_full,
        }
    }
}

/// The receive engine's view of tcp ([`fabric_core::kit::rx`]): kept
/// messages whose data is not here are rendezvous requests or payloads
/// left in a paused socket, buffered messages are acknowledged by
/// connection and request id, and senders are connections.
///
/// Connections are named by their epoll token (endpoint number and
/// connection number, [`crate::progress::token`]), so that the engine of
/// a shared receive context, which several endpoints drive, names each
/// sender with the endpoint it belongs to.
#[derive(Debug)]
pub(crate) struct TcpWire;

/// A kept message whose data is not here.
#[derive(Debug)]
pub(crate) enum Remote {
    /// Announced by a rendezvous request; the data stays with the sender
    /// until a clear-to-send.
    Rndv {
        /// The connection's token.
        conn: u64,
        /// The sender's request id.
        id: u64,
        /// The acknowledgement the sender asked for.
        ack: Flags,
    },
    /// Its payload is still in the socket of `conn`, which reads nothing
    /// else until a receive takes it or it is discarded.
    Stalled {
        /// The connection's token.
        conn: u64,
    },
}

impl Transport for TcpWire {
    type Remote = Remote;
    /// Connection token and request id.
    type Ack = (u64, u64);
    /// Connection token.
    type Peer = u64;
}

/// An endpoint's receive engine.
pub(crate) type Engine = RxEngine<TcpWire, IOV_LIMIT>;

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// RDM, initiated here: hello sent (or queued until the TCP connect
    /// completes), waiting for the answer.
    HelloSent,
    /// RDM, accepted here: waiting for the peer's hello.
    AwaitHello,
    /// MSG active side: connection request sent, waiting for the answer.
    ConnReqSent,
    /// MSG passive side: waiting for the application's accept.
    AwaitAccept,
    /// Data flows.
    Ready,
    /// Closed as soon as the queued frames are written.
    Closing,
}

/// A connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub sock: TcpStream,
    /// When the connection was made (an accepted one must say hello
    /// within [`HELLO_TIMEOUT`]).
    pub since: std::time::Instant,
    /// The non-blocking TCP connect is still in progress.
    pub connecting: bool,
    pub phase: Phase,
    /// The peer's listening address (RDM) or socket address (MSG): the key
    /// of its peer entry in the endpoint.
    pub peer: Option<SocketAddr>,
    /// The peer's handle in the AV (source of receive completions).
    pub src: FiAddr,
    /// The AV's change count when `src` was looked up (`u64::MAX`: never).
    pub src_gen: u64,
    pub tx: Tx,
    pub rx: Rx,
    /// This side's requests waiting for the peer's answer, by id.
    pub pending: HashMap<u64, Pending>,
    /// The peer's rendezvous messages this side accepted, by the peer's id.
    pub rndv: HashMap<u64, RndvRecv>,
    /// Frames held behind a fenced operation.
    pub held: VecDeque<Queued>,
    /// Reusable buffers: atomic operands and results.
    pub scratch: Vec<u8>,
    pub results: Vec<u8>,
    /// Frames wait for room in the socket (EPOLLOUT while watched).
    pub want_write: bool,
    /// The socket is in the engine's epoll set (it starts there; busy
    /// polling takes it out while nobody can block on the set).
    pub watched: bool,
    /// The wire protocol version the connection agreed on in its
    /// handshake ([`wire::MIN_VERSION`] until then).
    pub version: u8,
    /// Inside this host and paced by no congestion control
    /// ([`crate::sys::unpaced`]), once connected.
    pub unpaced: bool,
}

impl Conn {
    pub(crate) fn new(
        sock: TcpStream,
        connecting: bool,
        phase: Phase,
        limits: wire::Limits,
    ) -> Self {
        let unpaced = !connecting && crate::sys::unpaced(&sock);
        Conn {
            sock,
            since: std::time::Instant::now(),
            connecting,
            phase,
            peer: None,
            src: FiAddr::NOTAVAIL,
            src_gen: u64::MAX,
            tx: Tx::new(),
            rx: Rx {
                dec: {
                    // Until the handshake agrees on more, the peer may
                    // send only what every version reads.
                    let mut d = wire::Decoder::new(limits);
                    d.set_version(wire::MIN_VERSION);
                    d
                },
                // Allocated on the first read (`EpInner::read_conn`).
                buf: Box::default(),
                pos: 0,
                len: 0,
                cur: None,
                paused: false,
                tx_full: false,
                last_large: false,
            },
            pending: HashMap::new(),
            rndv: HashMap::new(),
            held: VecDeque::new(),
            scratch: Vec::new(),
            results: Vec::new(),
            want_write: false,
            watched: true,
            version: wire::MIN_VERSION,
            unpaced,
        }
    }

    /// The handshake agreed on wire version `v`: frames of it may now go
    /// both ways.
    pub(crate) fn set_version(&mut self, v: u8) {
        self.version = v;
        self.rx.dec.set_version(v);
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Operations started on this connection and not finished (what a
    /// fence waits for).
    pub(crate) fn outstanding(&self) -> usize {
        // A read or fetching atomic whose answer is arriving has left
        // `pending` for the receive state, and is still outstanding.
        let answering = matches!(
            &self.rx.cur,
            Some(Cur {
                sink: Sink::Read { .. } | Sink::Fetch { .. } | Sink::Refusal { .. },
                ..
            })
        );
        self.pending.len() + self.tx.len() + usize::from(answering)
    }

    /// Checks whether a non-blocking connect finished; `Err` if it failed.
    pub(crate) fn check_connected(&mut self) -> Result<bool> {
        if !self.connecting {
            return Ok(true);
        }
        if let Ok(Some(err)) = self.sock.take_error() {
            return Err(err.into());
        }
        match self.sock.peer_addr() {
            Ok(_) => {
                self.connecting = false;
                self.unpaced = crate::sys::unpaced(&self.sock);
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Flushes the queue once the connect finished.
    pub(crate) fn flush(&mut self, mr: &MrTable, done: &mut dyn FnMut(Done)) -> Result<()> {
        if !self.check_connected()? {
            return Ok(());
        }
        let Conn { sock, tx, .. } = self;
        tx.flush(sock.as_fd(), mr, done)
    }
}
