//! One TCP connection: a non-blocking socket, a queue of frames waiting to
//! be written, and the state of the frame being read.
//!
//! Sending writes header and payload with one `writev` when the socket
//! takes it; what does not fit waits in the queue, pointing at the
//! caller's buffer (zero-copy operations) or at a private copy (inject).
//! Receiving reads into a buffer and parses frames from it; once a
//! message's header has matched a posted receive, the rest of its payload
//! is read straight into the receive's buffer.

use std::collections::VecDeque;
use std::io::{IoSlice, Read, Write};
use std::net::TcpStream;

use fabric_core::objects::{CompletionFlags, IoVec};
use fabric_core::{Error, ErrorKind, OpFlags, Result};

use crate::frame::{Frame, HEADER_LEN};
use crate::getinfo::IOV_LIMIT;

/// Size of a connection's read buffer.
const RBUF: usize = 64 * 1024;

/// Pieces of a caller's buffer, kept until the operation completes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces {
    pub iov: [IoVec; IOV_LIMIT],
    pub n: usize,
}

// SAFETY: the pointers are only dereferenced by the endpoint's progress
// while the operation is outstanding, which the caller of the unsafe
// operation promised keeps the memory valid and unaliased; moving the
// descriptor between threads does not change that.
unsafe impl Send for Pieces {}

impl Pieces {
    /// Copies up to `IOV_LIMIT` pieces; `Inval` for more.
    pub(crate) fn new(iov: &[IoVec]) -> Result<Self> {
        if iov.len() > IOV_LIMIT {
            return Err(Error::inval(format!(
                "{} iov pieces, more than the limit {IOV_LIMIT}",
                iov.len()
            )));
        }
        let mut p = Pieces {
            iov: [IoVec {
                addr: std::ptr::null_mut(),
                len: 0,
            }; IOV_LIMIT],
            n: iov.len(),
        };
        p.iov[..iov.len()].copy_from_slice(iov);
        Ok(p)
    }

    /// Total bytes.
    pub(crate) fn len(&self) -> usize {
        self.iov[..self.n].iter().map(|v| v.len).sum()
    }

    /// A private copy of the bytes.
    ///
    /// # Safety
    ///
    /// The pieces must be valid for reads (the send contract).
    pub(crate) unsafe fn copy_out(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for piece in &self.iov[..self.n] {
            // SAFETY: valid for reads per the caller's contract.
            v.extend_from_slice(unsafe { std::slice::from_raw_parts(piece.addr, piece.len) });
        }
        v
    }

    /// Copies `data` into the pieces starting at byte `at`; returns how
    /// many bytes fit.
    ///
    /// # Safety
    ///
    /// The pieces must be valid for writes (the recv contract).
    pub(crate) unsafe fn write_at(&self, mut at: usize, mut data: &[u8]) -> usize {
        let mut written = 0;
        for v in &self.iov[..self.n] {
            if data.is_empty() {
                break;
            }
            if at >= v.len {
                at -= v.len;
                continue;
            }
            let k = (v.len - at).min(data.len());
            // SAFETY: `at + k <= v.len`, and the caller guarantees the
            // piece is valid for writes and not aliased.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), v.addr.add(at), k) };
            written += k;
            data = &data[k..];
            at = 0;
        }
        written
    }

    /// The writable space from byte `at`, as one slice of one piece.
    ///
    /// # Safety
    ///
    /// As [`write_at`](Pieces::write_at); the slice must not outlive the
    /// operation.
    pub(crate) unsafe fn slice_at<'a>(&self, mut at: usize) -> Option<&'a mut [u8]> {
        for v in &self.iov[..self.n] {
            if at < v.len {
                // SAFETY: inside the piece; valid and unaliased per the
                // recv contract.
                return Some(unsafe { std::slice::from_raw_parts_mut(v.addr.add(at), v.len - at) });
            }
            at -= v.len;
        }
        None
    }
}

/// A posted receive.
#[derive(Debug)]
pub(crate) struct RecvOp {
    pub buf: Pieces,
    pub context: u64,
    pub flags: OpFlags,
}

/// What a finished transmit reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxDone {
    pub context: u64,
    pub flags: CompletionFlags,
    pub len: usize,
    /// Report a success completion (not suppressed by selective
    /// completion).
    pub report: bool,
}

/// Payload of a queued frame.
#[derive(Debug)]
pub(crate) enum Payload {
    /// A private copy (inject, hello).
    Owned(Vec<u8>),
    /// The caller's buffer (zero-copy send).
    Borrowed(Pieces),
}

/// A frame waiting to be written.
#[derive(Debug)]
pub(crate) struct TxItem {
    head: [u8; HEADER_LEN],
    payload: Payload,
    /// Bytes of header + payload written so far.
    sent: usize,
    total: usize,
    pub done: Option<TxDone>,
}

impl TxItem {
    pub(crate) fn new(frame: &Frame, payload: Payload, done: Option<TxDone>) -> Self {
        let plen = match &payload {
            Payload::Owned(v) => v.len(),
            Payload::Borrowed(p) => p.len(),
        };
        TxItem {
            head: frame.encode(),
            payload,
            sent: 0,
            total: HEADER_LEN + plen,
            done,
        }
    }

    /// The unsent bytes as io slices (at most `out.len()`).
    fn slices<'a>(&'a self, out: &mut [IoSlice<'a>; IOV_LIMIT + 1]) -> usize {
        let mut n = 0;
        let mut skip = self.sent;
        if skip < HEADER_LEN {
            out[n] = IoSlice::new(&self.head[skip..]);
            n += 1;
            skip = 0;
        } else {
            skip -= HEADER_LEN;
        }
        match &self.payload {
            Payload::Owned(v) => {
                if skip < v.len() {
                    out[n] = IoSlice::new(&v[skip..]);
                    n += 1;
                }
            }
            Payload::Borrowed(p) => {
                for v in &p.iov[..p.n] {
                    if skip >= v.len {
                        skip -= v.len;
                        continue;
                    }
                    // SAFETY: the send contract keeps the piece valid and
                    // unchanged until the completion; `skip < v.len`.
                    let s = unsafe { std::slice::from_raw_parts(v.addr.add(skip), v.len - skip) };
                    out[n] = IoSlice::new(s);
                    n += 1;
                    skip = 0;
                }
            }
        }
        n
    }
}

/// Where the payload of the frame being read goes.
#[derive(Debug)]
pub(crate) enum Sink {
    /// A matched receive.
    User(RecvOp),
    /// A private buffer (unexpected message, hello).
    Owned(Vec<u8>),
}

/// Reading state.
#[derive(Debug)]
enum Rx {
    Header { buf: [u8; HEADER_LEN], have: usize },
    Body { frame: Frame, sink: Sink, got: u64 },
}

/// Something the connection read, for the endpoint to act on.
#[derive(Debug)]
pub(crate) enum Input {
    /// A header arrived; the endpoint says where the payload goes.
    Header(Frame),
    /// A whole frame arrived, payload in its sink.
    Frame(Frame, Sink),
}

/// A connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub sock: TcpStream,
    /// Still connecting (non-blocking connect in progress).
    pub connecting: bool,
    pub tx: VecDeque<TxItem>,
    rx: Rx,
    rbuf: Box<[u8]>,
    rpos: usize,
    rlen: usize,
    max_len: u64,
}

impl Conn {
    pub(crate) fn new(sock: TcpStream, connecting: bool, max_len: u64) -> Self {
        Conn {
            sock,
            connecting,
            tx: VecDeque::new(),
            rx: Rx::Header {
                buf: [0; HEADER_LEN],
                have: 0,
            },
            rbuf: vec![0u8; RBUF].into_boxed_slice(),
            rpos: 0,
            rlen: 0,
            max_len,
        }
    }

    /// Writes queued frames until the socket is full; calls `done` for
    /// each frame fully written. `Err` when the connection failed.
    pub(crate) fn flush(&mut self, mut done: impl FnMut(TxDone)) -> Result<()> {
        if self.connecting {
            match self.sock.peer_addr() {
                Ok(_) => self.connecting = false,
                Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {
                    if let Ok(Some(err)) = self.sock.take_error() {
                        return Err(err.into());
                    }
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        while let Some(item) = self.tx.front_mut() {
            let mut sl = [IoSlice::new(&[]); IOV_LIMIT + 1];
            let n = item.slices(&mut sl);
            match self.sock.write_vectored(&sl[..n]) {
                Ok(0) => {
                    return Err(Error::new(
                        ErrorKind::ConnReset,
                        "tcp: connection closed while sending",
                    ));
                }
                Ok(k) => {
                    item.sent += k;
                    if item.sent == item.total {
                        if let Some(item) = self.tx.pop_front() {
                            if let Some(d) = item.done {
                                done(d);
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Queues a frame, trying to write it at once when nothing is queued.
    pub(crate) fn send(&mut self, item: TxItem, done: impl FnMut(TxDone)) -> Result<()> {
        self.tx.push_back(item);
        if self.tx.len() == 1 && !self.connecting {
            self.flush(done)?;
        }
        Ok(())
    }

    /// Reads what the socket has and hands every input to `on`, which
    /// returns, for a header, where its payload goes. Returns `Ok(false)`
    /// on end of stream.
    pub(crate) fn read(
        &mut self,
        mut on: impl FnMut(&mut Conn, Input) -> Result<Option<Sink>>,
    ) -> Result<bool> {
        loop {
            // Parse what is buffered.
            while self.rpos < self.rlen {
                self.step(&mut on)?;
            }
            // A large payload of a matched receive: read straight into it.
            if let Rx::Body {
                frame,
                sink: Sink::User(op),
                got,
            } = &mut self.rx
            {
                let left = frame.len - *got;
                if left as usize >= RBUF / 2 {
                    let cap = op.buf.len() as u64;
                    if *got < cap {
                        // SAFETY: the receive contract; the slice is used
                        // only for this read.
                        if let Some(dst) = unsafe { op.buf.slice_at(*got as usize) } {
                            let k = dst.len().min(left as usize);
                            match self.sock.read(&mut dst[..k]) {
                                Ok(0) => return Ok(false),
                                Ok(r) => {
                                    *got += r as u64;
                                    if *got == frame.len {
                                        self.finish(&mut on)?;
                                    }
                                    continue;
                                }
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                    return Ok(true);
                                }
                                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                                Err(e) => return Err(e.into()),
                            }
                        }
                    }
                }
            }
            match self.sock.read(&mut self.rbuf) {
                Ok(0) => return Ok(false),
                Ok(r) => {
                    self.rpos = 0;
                    self.rlen = r;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn step(
        &mut self,
        on: &mut impl FnMut(&mut Conn, Input) -> Result<Option<Sink>>,
    ) -> Result<()> {
        let avail = &self.rbuf[self.rpos..self.rlen];
        match &mut self.rx {
            Rx::Header { buf, have } => {
                let k = (HEADER_LEN - *have).min(avail.len());
                buf[*have..*have + k].copy_from_slice(&avail[..k]);
                *have += k;
                self.rpos += k;
                if *have == HEADER_LEN {
                    let frame = Frame::decode(buf, self.max_len)?;
                    self.rx = Rx::Header {
                        buf: [0; HEADER_LEN],
                        have: 0,
                    };
                    let sink = on(self, Input::Header(frame))?.unwrap_or(Sink::Owned(Vec::new()));
                    self.rx = Rx::Body {
                        frame,
                        sink,
                        got: 0,
                    };
                    if frame.len == 0 {
                        self.finish(on)?;
                    }
                }
            }
            Rx::Body { frame, sink, got } => {
                let left = frame.len - *got;
                let k = (left.min(avail.len() as u64)) as usize;
                let chunk = &avail[..k];
                match sink {
                    Sink::Owned(v) => v.extend_from_slice(chunk),
                    Sink::User(op) => {
                        // SAFETY: the receive contract. Bytes beyond the
                        // buffer are dropped (truncation, reported later).
                        unsafe { op.buf.write_at(*got as usize, chunk) };
                    }
                }
                *got += k as u64;
                self.rpos += k;
                if *got == frame.len {
                    self.finish(on)?;
                }
            }
        }
        Ok(())
    }

    fn finish(
        &mut self,
        on: &mut impl FnMut(&mut Conn, Input) -> Result<Option<Sink>>,
    ) -> Result<()> {
        let done = std::mem::replace(
            &mut self.rx,
            Rx::Header {
                buf: [0; HEADER_LEN],
                have: 0,
            },
        );
        if let Rx::Body { frame, sink, .. } = done {
            on(self, Input::Frame(frame, sink))?;
        }
        Ok(())
    }

    /// Takes every queued frame (the connection failed).
    pub(crate) fn drain_tx(&mut self) -> impl Iterator<Item = TxItem> + '_ {
        self.tx.drain(..)
    }

    /// Whether a receive is filling right now (for failure reporting).
    pub(crate) fn take_partial(&mut self) -> Option<RecvOp> {
        match std::mem::replace(
            &mut self.rx,
            Rx::Header {
                buf: [0; HEADER_LEN],
                have: 0,
            },
        ) {
            Rx::Body {
                sink: Sink::User(op),
                ..
            } => Some(op),
            _ => None,
        }
    }
}
