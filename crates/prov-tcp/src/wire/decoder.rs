//! The streaming decoder: one per connection, fed the bytes of a
//! non-blocking socket as they come.

use fabric_core::{Error, ErrorKind, Result};

use super::header::{HEADER_LEN, Header, MIN_VERSION, VERSION, decode_header_fast};
use super::{Ext, Frame, Limits, MAX_EXT_LEN, local, proto, u64_of};

/// What [`Decoder::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The headers of a frame, checked. `header.payload_len` bytes of
    /// payload follow (see [`Frame::payload_kind`] for where they go); when
    /// that is 0 the frame is complete.
    Frame(Frame),
    /// Payload of the current frame: `data` is a piece of the input, and
    /// `remaining` bytes of payload are still to come (0: the frame is
    /// complete).
    Payload {
        /// The piece of payload (borrowed from the input).
        data: &'a [u8],
        /// Payload bytes after this piece.
        remaining: u64,
    },
}

/// What the decoder needs next ([`Decoder::want`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Want {
    /// At least this many header bytes before the next [`Event::Frame`]
    /// (exact once the base header is in: then it counts the extended
    /// header).
    Header(usize),
    /// This many payload bytes of the current frame; the caller may read
    /// them straight into their destination and report them with
    /// [`Decoder::consume_payload`].
    Payload(u64),
    /// The decoder failed; the connection must be closed.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the base header; `filled` bytes of it are in `base`.
    Base { filled: usize },
    /// Reading the extended header of `header`; `filled` bytes in `ext`.
    Ext { header: Header, filled: usize },
    /// Inside the payload of a frame.
    Payload { remaining: u64 },
    /// A check failed; every further call fails.
    Failed,
}

/// The receive side of a connection: a state machine fed bytes in any
/// pieces, reporting frames and payload.
///
/// It holds one frame's headers at most (inline, [`HEADER_LEN`] +
/// [`MAX_EXT_LEN`] bytes), never allocates while decoding, and every call
/// with non-empty input consumes at least one byte or reports an event, so
/// a loop over the input ends. The first check that fails puts it in a
/// failed state; the connection is then to be closed.
///
/// ```
/// use prov_tcp::wire::{Decoder, Event, Frame, Limits};
///
/// // The sender: headers into a stack buffer, payload from the user's.
/// let payload = b"hello";
/// let (headers, len) = Frame::tagged(7, 0x42, 5).to_bytes();
/// let mut stream = headers[..len].to_vec();
/// stream.extend_from_slice(payload);
///
/// // The receiver, bytes arriving in two pieces.
/// let mut dec = Decoder::new(Limits::default());
/// let mut got = Vec::new();
/// for piece in [&stream[..3], &stream[3..]] {
///     let mut input = piece;
///     while !input.is_empty() {
///         let (used, event) = dec.feed(input)?;
///         input = &input[used..];
///         match event {
///             Some(Event::Frame(f)) => assert_eq!(f.header.tag, 0x42),
///             Some(Event::Payload { data, .. }) => got.extend_from_slice(data),
///             None => {}
///         }
///     }
/// }
/// assert_eq!(got, payload);
/// assert!(dec.is_at_boundary());
/// # Ok::<(), fabric_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Decoder {
    limits: Limits,
    version: u8,
    state: State,
    base: [u8; HEADER_LEN],
    ext: [u8; MAX_EXT_LEN],
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(Limits::default())
    }
}

fn failed() -> Error {
    proto("tcp wire: the connection's decoder failed earlier")
}

/// Copies as much of `src` as fits into `dst`; returns the bytes copied.
fn fill(dst: &mut [u8], src: &[u8]) -> usize {
    let n = dst.len().min(src.len());
    if let (Some(d), Some(s)) = (dst.get_mut(..n), src.get(..n)) {
        d.copy_from_slice(s);
    }
    n
}

impl Decoder {
    /// A decoder at the start of a stream, checking frames against `limits`.
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            version: VERSION,
            state: State::Base { filled: 0 },
            base: [0; HEADER_LEN],
            ext: [0; MAX_EXT_LEN],
        }
    }

    /// The limits frames are checked against.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The newest frame version accepted: [`VERSION`] unless
    /// [`Decoder::set_version`] lowered it.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Accepts frames of versions [`MIN_VERSION`] to `version` only (the
    /// version a connection agreed on; before that, [`MIN_VERSION`]), for
    /// the frames whose headers are not complete yet. Values outside the
    /// known versions are clamped to them.
    pub fn set_version(&mut self, version: u8) {
        self.version = version.clamp(MIN_VERSION, VERSION);
    }

    /// Changes the limits, for the frames whose headers are not complete
    /// yet (after connection setup, for example).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Back to the start of a stream, failure forgotten (for a new
    /// connection).
    pub fn reset(&mut self) {
        self.state = State::Base { filled: 0 };
    }

    /// What the decoder needs next.
    pub fn want(&self) -> Want {
        match self.state {
            State::Base { filled } => Want::Header(HEADER_LEN.saturating_sub(filled)),
            State::Ext { header, filled } => {
                Want::Header(usize::from(header.ext_len).saturating_sub(filled))
            }
            State::Payload { remaining } => Want::Payload(remaining),
            State::Failed => Want::Failed,
        }
    }

    /// Payload bytes of the current frame still to come (0 outside a
    /// payload).
    pub fn payload_remaining(&self) -> u64 {
        match self.state {
            State::Payload { remaining } => remaining,
            _ => 0,
        }
    }

    /// Whether the decoder is between frames (no partial frame buffered or
    /// expected): where a stream may end cleanly.
    pub fn is_at_boundary(&self) -> bool {
        self.state == State::Base { filled: 0 }
    }

    /// Whether a check failed.
    pub fn is_failed(&self) -> bool {
        self.state == State::Failed
    }

    /// The stream ended (the peer closed): `Ok` between frames, else an
    /// `FI_EIO` error saying where in the frame it stopped.
    pub fn eof(&self) -> Result<()> {
        match self.state {
            State::Base { filled: 0 } => Ok(()),
            State::Base { filled } => Err(proto(format!(
                "tcp wire: connection closed after {filled} of {HEADER_LEN} header bytes"
            ))),
            State::Ext { header, filled } => Err(proto(format!(
                "tcp wire: connection closed after {filled} of {} {} extended header bytes",
                header.ext_len, header.op
            ))),
            State::Payload { remaining } => Err(proto(format!(
                "tcp wire: connection closed with {remaining} payload bytes missing"
            ))),
            State::Failed => Err(failed()),
        }
    }

    /// Feeds bytes from the connection. Returns how many bytes of `input`
    /// were used and what they completed, if anything: the headers of a
    /// frame, or a piece of payload (borrowed from `input`). Call again with
    /// the unused rest. At most one event per call; a call with non-empty
    /// input uses at least one byte.
    ///
    /// Errors (`FI_EIO`, message naming the field and value) are final: the
    /// decoder stays failed.
    #[inline]
    pub fn feed<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>)> {
        let r = self.step(input);
        if r.is_err() {
            self.state = State::Failed;
        }
        r
    }

    #[inline]
    fn step<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>)> {
        let mut used = 0usize;
        loop {
            let rest = input.get(used..).unwrap_or_default();
            match self.state {
                State::Failed => return Err(failed()),
                State::Payload { remaining } => {
                    let n = if remaining >= u64_of(rest.len()) {
                        rest.len()
                    } else {
                        // remaining < rest.len(), so it fits in usize.
                        usize::try_from(remaining).unwrap_or(rest.len())
                    };
                    if n == 0 {
                        return Ok((used, None));
                    }
                    let data = rest.get(..n).unwrap_or_default();
                    let left = remaining.saturating_sub(u64_of(n));
                    self.state = if left == 0 {
                        State::Base { filled: 0 }
                    } else {
                        State::Payload { remaining: left }
                    };
                    return Ok((
                        used.saturating_add(n),
                        Some(Event::Payload {
                            data,
                            remaining: left,
                        }),
                    ));
                }
                State::Base { filled } => {
                    let header = match rest.first_chunk::<HEADER_LEN>() {
                        // Fast path: a whole base header in the input,
                        // decoded in place.
                        Some(b) if filled == 0 => {
                            used = used.saturating_add(HEADER_LEN);
                            decode_header_fast(b, &self.limits)?
                        }
                        _ => {
                            let n = fill(self.base.get_mut(filled..).unwrap_or_default(), rest);
                            used = used.saturating_add(n);
                            let filled = filled.saturating_add(n);
                            if filled < HEADER_LEN {
                                self.state = State::Base { filled };
                                return Ok((used, None));
                            }
                            decode_header_fast(&self.base, &self.limits)?
                        }
                    };
                    if header.version > self.version {
                        return Err(proto(format!(
                            "tcp wire: version {} {} frame on a connection that speaks version {}",
                            header.version, header.op, self.version
                        )));
                    }
                    if header.ext_len == 0 {
                        return Ok((used, Some(self.complete(header, Ext::None))));
                    }
                    self.state = State::Ext { header, filled: 0 };
                }
                State::Ext { header, filled } => {
                    let need = usize::from(header.ext_len);
                    let ext = match rest.get(..need) {
                        // Fast path: the whole extended header in the input.
                        Some(b) if filled == 0 => {
                            used = used.saturating_add(need);
                            Ext::decode(&header, b, &self.limits)?
                        }
                        _ => {
                            let dst = self.ext.get_mut(filled..need).unwrap_or_default();
                            let n = fill(dst, rest);
                            used = used.saturating_add(n);
                            let filled = filled.saturating_add(n);
                            if filled < need {
                                self.state = State::Ext { header, filled };
                                return Ok((used, None));
                            }
                            let bytes = self.ext.get(..need).unwrap_or_default();
                            Ext::decode(&header, bytes, &self.limits)?
                        }
                    };
                    return Ok((used, Some(self.complete(header, ext))));
                }
            }
        }
    }

    fn complete<'a>(&mut self, header: Header, ext: Ext) -> Event<'a> {
        self.state = if header.payload_len == 0 {
            State::Base { filled: 0 }
        } else {
            State::Payload {
                remaining: header.payload_len,
            }
        };
        Event::Frame(Frame { header, ext })
    }

    /// Accounts `n` payload bytes of the current frame that the caller read
    /// from the socket itself, straight into their destination (zero-copy
    /// receive). `Inval` (and the decoder fails) when `n` is more than
    /// [`Decoder::payload_remaining`].
    pub fn consume_payload(&mut self, n: u64) -> Result<()> {
        match self.state {
            State::Failed => Err(failed()),
            _ if n == 0 => Ok(()),
            State::Payload { remaining } if n <= remaining => {
                let left = remaining.saturating_sub(n);
                self.state = if left == 0 {
                    State::Base { filled: 0 }
                } else {
                    State::Payload { remaining: left }
                };
                Ok(())
            }
            _ => {
                let remaining = self.payload_remaining();
                self.state = State::Failed;
                Err(local(
                    ErrorKind::Inval,
                    format!(
                        "tcp wire: consume_payload({n}) with {remaining} payload bytes remaining"
                    ),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{CmHeader, Flags, Op};

    fn stream(frames: &[(Frame, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (f, payload) in frames {
            let (h, len) = f.to_bytes();
            out.extend_from_slice(&h[..len]);
            out.extend_from_slice(payload);
        }
        out
    }

    #[test]
    fn whole_frames_in_one_buffer() {
        let hello = Frame::hello(CmHeader::new(Some("127.0.0.1:5".parse().unwrap()), 3));
        let msg = Frame::msg(1, 3).with_flags(Flags::ACK_DELIVERY);
        let bytes = stream(&[(hello, b""), (msg, b"abc")]);
        let mut d = Decoder::default();
        let (n, e) = d.feed(&bytes).unwrap();
        assert_eq!(n, 72);
        assert_eq!(e, Some(Event::Frame(hello)));
        assert!(d.is_at_boundary());
        let (m, e) = d.feed(&bytes[n..]).unwrap();
        assert_eq!(m, 40);
        assert_eq!(e, Some(Event::Frame(msg)));
        assert_eq!(d.want(), Want::Payload(3));
        let (k, e) = d.feed(&bytes[n + m..]).unwrap();
        assert_eq!(k, 3);
        assert_eq!(
            e,
            Some(Event::Payload {
                data: b"abc",
                remaining: 0
            })
        );
        assert_eq!(d.eof(), Ok(()));
        assert_eq!(d.feed(&[]), Ok((0, None)));
    }

    #[test]
    fn zero_copy_payload_accounting() {
        let bytes = stream(&[(Frame::msg(1, 10), &[0; 10])]);
        let mut d = Decoder::default();
        let (n, _) = d.feed(&bytes[..44]).unwrap();
        assert_eq!(n, 40);
        assert_eq!(d.want(), Want::Payload(10));
        d.consume_payload(4).unwrap();
        assert_eq!(d.payload_remaining(), 6);
        assert!(d.eof().unwrap_err().detail().contains("6 payload bytes"));
        d.consume_payload(6).unwrap();
        assert!(d.is_at_boundary());
        let e = d.consume_payload(1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert!(d.is_failed());
    }

    #[test]
    fn failure_is_sticky() {
        let mut bad = Frame::ack(1, None).header.to_bytes();
        bad[2] = 0x7f;
        let mut d = Decoder::default();
        let e = d.feed(&bad).unwrap_err();
        assert_eq!(e.detail(), "tcp wire: unknown op 0x7f in header");
        assert_eq!(d.want(), Want::Failed);
        let good = Frame::ack(1, None).header.to_bytes();
        assert!(d.feed(&good).is_err());
        d.reset();
        assert_eq!(d.feed(&good).unwrap().0, 40);
    }

    #[test]
    fn eof_mid_header() {
        let (h, len) = Frame::read_req(
            3,
            &[fabric_core::objects::RmaIov {
                addr: 1,
                len: 2,
                key: 3,
            }],
        )
        .unwrap()
        .to_bytes();
        assert_eq!(len, 72);
        let mut d = Decoder::default();
        d.feed(&h[..10]).unwrap();
        assert_eq!(d.want(), Want::Header(30));
        assert!(d.eof().unwrap_err().detail().contains("10 of 40 header"));
        d.feed(&h[10..50]).unwrap();
        assert_eq!(d.want(), Want::Header(22));
        assert!(
            d.eof()
                .unwrap_err()
                .detail()
                .contains("10 of 32 ReadReq extended")
        );
        let (n, e) = d.feed(&h[50..len]).unwrap();
        assert_eq!(n, 22);
        assert!(matches!(e, Some(Event::Frame(f)) if f.header.op == Op::ReadReq));
    }
}
