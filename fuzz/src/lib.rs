//! The bodies of the fuzz targets, one function per target.
//!
//! `fuzz_targets/<name>.rs` hands libFuzzer's input to the function of the
//! same name; `tests/replay.rs` feeds the same functions the seed corpora
//! (`corpus/<name>/`) and every input that once crashed
//! (`regressions/<name>/`), so a normal `cargo test` replays them. Each
//! function panics only when the property it checks is broken.

use fabric_core::addr::parse::parse;
use fabric_core::matching::validate_hints;
use fabric_core::{AddrFormat, Address, Info};
use prov_tcp::wire::{
    CM_LEN, CmHeader, Decoder, Event, Ext, Frame, HEADER_LEN, Limits, MAX_REASON_LEN, MIN_VERSION,
    Op, PayloadKind, Simultaneous, VERSION, Want, decode_header, decode_header_fast,
    resolve_simultaneous,
};

/// A target's body: panics when its property is broken.
pub type Body = fn(&[u8]);

/// Every target: its name (a file in `fuzz_targets/`, a folder in
/// `corpus/` and `regressions/`) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("addr_bytes", addr_bytes),
    ("addr_str", addr_str),
    ("info_json", info_json),
    ("shm_desc", shm_desc),
    ("tcp_cm", tcp_cm),
    ("tcp_frames", tcp_frames),
    ("tcp_wire", tcp_wire),
];

/// Address bytes: the first byte picks an address format (0..=15), the rest
/// is the C representation handed to `Address::from_bytes`. Whatever decodes
/// must encode to bytes that decode to the same address, and print as a
/// string that parses back to it.
pub fn addr_bytes(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(format) = AddrFormat::try_from(u32::from(first & 0x0f)) else {
        return;
    };
    let Ok(a) = Address::from_bytes(format, rest) else {
        return;
    };
    let bytes = a.to_bytes();
    assert_eq!(bytes.len(), a.c_len(), "{a:?}");
    assert_eq!(
        Address::from_bytes(a.format(), &bytes),
        Ok(a.clone()),
        "{format} {rest:?}"
    );
    assert_eq!(parse(&a.to_string()), Ok(a), "{format} {rest:?}");
}

/// Address strings: any UTF-8 input either fails to parse with an error, or
/// parses to an address whose printed form is canonical (it prints the same
/// again) and parses back to the same address.
pub fn addr_str(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(a) = parse(s) else {
        return;
    };
    let printed = a.to_string();
    let again: Address = match parse(&printed) {
        Ok(b) => b,
        Err(e) => panic!("{s:?} parsed to {a:?}, whose form {printed:?} does not parse: {e:?}"),
    };
    assert_eq!(a, again, "{s:?} -> {printed:?}");
    assert_eq!(again.to_string(), printed, "the printed form is canonical");
}

/// Hints from JSON (`fabric info --hints FILE`): any bytes either fail to
/// parse as an `Info` or give an `Info` that prints and parses back to
/// itself, and validation never panics.
pub fn info_json(data: &[u8]) {
    let Ok(info) = serde_json::from_slice::<Info>(data) else {
        return;
    };
    let _ = validate_hints(&info);
    let text = serde_json::to_string(&info).expect("an Info always serializes");
    let back: Info = serde_json::from_str(&text).expect("printed JSON parses");
    assert_eq!(back, info);
    let _ = info.verbose().to_string();
}

/// The shm provider's decoders of command payloads, which another process
/// writes into our region: RMA / atomic descriptors and rendezvous iovec
/// lists. They must never panic on any bytes, and a descriptor they accept
/// must encode back to exactly the bytes it was read from.
pub fn shm_desc(data: &[u8]) {
    prov_shm::fuzzing::descriptor_round_trip(data);
}

/// Small limits (the first input byte's top bit) or the defaults.
fn limits_of(seed: u8) -> Limits {
    if seed & 0x80 != 0 {
        Limits {
            max_msg_size: 4096,
            max_private_data: 16,
            max_rma_iov: 2,
            max_atomic_count: 8,
        }
    } else {
        Limits::default()
    }
}

/// The newest frame version a decoder accepts: [`MIN_VERSION`] (a
/// connection that agreed on version 1) when the seed's bit 6 is set, else
/// [`VERSION`].
fn version_of(seed: u8) -> u8 {
    if seed & 0x40 != 0 {
        MIN_VERSION
    } else {
        VERSION
    }
}

/// A decoder with the seed's limits and version.
fn decoder_of(seed: u8) -> Decoder {
    let mut d = Decoder::new(limits_of(seed));
    d.set_version(version_of(seed));
    d
}

/// What every accepted frame must satisfy beyond the round trip: a frame
/// version the decoder allows, version 2 exactly for refusal reasons, and
/// a reason only on a failed answer, within [`MAX_REASON_LEN`].
fn check_version(f: &Frame, dec: &Decoder) {
    let v = f.header.version;
    assert!((MIN_VERSION..=dec.version()).contains(&v), "{f:?}");
    let reason = f.payload_kind() == PayloadKind::Reason;
    assert_eq!(v == 2, reason, "{f:?}");
    if reason {
        assert!(
            f.header.status.is_some() && f.header.op.takes_reason(),
            "{f:?}"
        );
        assert!(f.header.payload_len <= MAX_REASON_LEN as u64, "{f:?}");
    }
}

/// Piece sizes `1..=max` from a xorshift over a seed: how a non-blocking
/// socket hands out a stream.
struct Pieces(u32);

impl Pieces {
    fn new(seed: u8) -> Pieces {
        Pieces(u32::from(seed) | 0x100)
    }

    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 0
    }

    fn size(&mut self, max: u32) -> usize {
        usize::try_from(self.next() % max.max(1)).unwrap_or(0) + 1
    }
}

/// The tcp wire decoder on arbitrary bytes. The first byte picks the limits
/// and the newest frame version accepted (a connection of version 1 or 2)
/// and seeds the sizes of the pieces the rest is fed in, as a non-blocking
/// socket would return them. The decoder must never panic, must make
/// progress on every call, and every frame it accepts must pass the same
/// checks again, encode to exactly the bytes it came from, decode back to
/// itself, and be of a version the connection allows (version 2 exactly
/// for a failed answer's bounded refusal reason).
pub fn tcp_wire(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let limits = limits_of(seed);
    // The decoder's shortcut for messages decides as the full path does.
    if let Some(h) = stream.first_chunk::<HEADER_LEN>() {
        assert_eq!(decode_header_fast(h, &limits), decode_header(h, &limits));
    }
    let mut dec = decoder_of(seed);
    let mut pieces = Pieces::new(seed);
    let mut pos = 0usize;
    let mut frame_start = 0usize;
    while pos < stream.len() {
        let end = stream.len().min(pos + pieces.size(64));
        let mut input = &stream[pos..end];
        while !input.is_empty() {
            if dec.is_at_boundary() {
                frame_start = pos;
            }
            let (used, event) = match dec.feed(input) {
                Ok(r) => r,
                Err(_) => {
                    assert!(dec.is_failed());
                    assert!(dec.feed(input).is_err());
                    return;
                }
            };
            assert!(used >= 1 && used <= input.len());
            pos += used;
            match event {
                Some(Event::Frame(f)) => {
                    assert_eq!(f.validate(&limits), Ok(()));
                    check_version(&f, &dec);
                    let (bytes, len) = f.to_bytes();
                    assert_eq!(&bytes[..len], &stream[frame_start..pos]);
                    assert_eq!(Frame::decode(&bytes[..len], &limits), Ok(f));
                }
                Some(Event::Payload { data, remaining }) => {
                    assert_eq!(data.len(), used);
                    assert_eq!(dec.payload_remaining(), remaining);
                }
                None => assert_eq!(used, input.len()),
            }
            input = &input[used..];
        }
    }
    let _ = dec.eof();
}

/// What a reader made of a stream: each frame with its payload, then how
/// the stream ended (`eof()` of the decoder, or the error that failed it).
#[derive(Debug, PartialEq)]
struct Transcript {
    frames: Vec<(Frame, Vec<u8>)>,
    end: fabric_core::Result<()>,
}

/// The reference reading of a stream: all of it fed at once, every payload
/// taken through [`Event::Payload`].
fn read_at_once(stream: &[u8], limits: Limits, version: u8) -> Transcript {
    let mut dec = Decoder::new(limits);
    dec.set_version(version);
    let mut frames: Vec<(Frame, Vec<u8>)> = Vec::new();
    let mut input = stream;
    while !input.is_empty() {
        let (used, event) = match dec.feed(input) {
            Ok(r) => r,
            Err(e) => {
                return Transcript {
                    frames,
                    end: Err(e),
                };
            }
        };
        input = &input[used..];
        match event {
            Some(Event::Frame(f)) => frames.push((f, Vec::new())),
            Some(Event::Payload { data, .. }) => match frames.last_mut() {
                Some((_, p)) => p.extend_from_slice(data),
                None => panic!("payload before any frame"),
            },
            None => {}
        }
    }
    Transcript {
        frames,
        end: dec.eof(),
    }
}

/// The tcp frame sequence as a connection reader consumes it: the input is
/// a seed byte (limits, piece sizes, read-buffer size) and a byte stream of
/// successive frames. The stream arrives in pieces through a read buffer;
/// each payload is taken either inline from the buffer (when all of it is
/// there), through [`Event::Payload`], or read "straight into its
/// destination" past the buffer and accounted with
/// [`Decoder::consume_payload`], as `ep/core.rs` does. Whatever the pieces
/// and the choices, the reader must see the same frames with the same
/// payloads and end the same way (cleanly, mid-frame, or with the same
/// error) as when the whole stream is decoded at once.
pub fn tcp_frames(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let limits = limits_of(seed);
    let expected = read_at_once(stream, limits, version_of(seed));

    let mut choice = Pieces::new(seed.rotate_left(3));
    let mut pieces = Pieces::new(seed);
    // A read buffer of 1..=128 bytes: headers and payloads straddle reads.
    let rbuf = choice.size(128);
    let mut dec = decoder_of(seed);
    let mut frames: Vec<(Frame, Vec<u8>)> = Vec::new();
    let mut pos = 0usize;
    let end = loop {
        // A payload with a destination may bypass the read buffer.
        if let Want::Payload(n) = dec.want()
            && pos < stream.len()
            && choice.coin()
        {
            let avail = stream.len() - pos;
            let k = pieces
                .size(256)
                .min(avail)
                .min(usize::try_from(n).unwrap_or(usize::MAX));
            dec.consume_payload(k as u64)
                .expect("consume_payload within the remaining payload");
            assert_eq!(dec.payload_remaining(), n - k as u64);
            let (_, p) = frames.last_mut().expect("a payload follows a frame");
            p.extend_from_slice(&stream[pos..pos + k]);
            pos += k;
            continue;
        }
        if pos >= stream.len() {
            break dec.eof();
        }
        // One read into the buffer, then the frames it holds.
        let len = pieces.size(64).min(rbuf).min(stream.len() - pos);
        let buf = &stream[pos..pos + len];
        pos += len;
        let mut at = 0usize;
        let mut failed = None;
        while at < buf.len() {
            let (used, event) = match dec.feed(&buf[at..]) {
                Ok(r) => r,
                Err(e) => {
                    assert!(dec.is_failed());
                    assert_eq!(dec.want(), Want::Failed);
                    failed = Some(e);
                    break;
                }
            };
            assert!(used >= 1, "feed makes progress");
            at += used;
            match event {
                Some(Event::Frame(f)) => {
                    assert_eq!(f.validate(&limits), Ok(()));
                    check_version(&f, &dec);
                    let plen = f.header.payload_len;
                    assert_eq!(dec.payload_remaining(), plen);
                    assert_eq!(dec.is_at_boundary(), plen == 0);
                    let mut payload = Vec::new();
                    // The whole payload already in the buffer: taken at once.
                    let inline = usize::try_from(plen)
                        .ok()
                        .filter(|&n| n > 0 && n <= buf.len() - at);
                    if let Some(n) = inline.filter(|_| choice.coin()) {
                        payload.extend_from_slice(&buf[at..at + n]);
                        dec.consume_payload(plen)
                            .expect("consume_payload of the whole payload");
                        assert!(dec.is_at_boundary());
                        at += n;
                    }
                    frames.push((f, payload));
                }
                Some(Event::Payload { data, remaining }) => {
                    assert_eq!(dec.payload_remaining(), remaining);
                    let (_, p) = frames.last_mut().expect("a payload follows a frame");
                    p.extend_from_slice(data);
                }
                None => assert_eq!(at, buf.len(), "no event only at the end of the input"),
            }
        }
        if let Some(e) = failed {
            break Err(e);
        }
    };
    let got = Transcript { frames, end };
    assert_eq!(got, expected);
    // Taking more payload than remains fails the decoder, never panics.
    if got.end.is_ok() {
        assert!(dec.consume_payload(1).is_err());
        assert!(dec.is_failed());
    }
}

/// A request (or answer) and its private data are in.
fn complete(frame: Option<&Frame>, dec: &Decoder) -> bool {
    frame.is_some() && dec.is_at_boundary()
}

/// The connection management exchange of tcp MSG endpoints. The first
/// byte says which side reads (bit 0: a passive endpoint reading a
/// `ConnReq`, or the connecting endpoint reading the `ConnAccept` /
/// `ConnReject`), picks the limits (bit 7) and seeds the piece sizes; the
/// rest is what the peer sent. The reader works as `ep/passive.rs` reads a
/// request: the first frame must be the expected op, its payload is the
/// private data, and the bytes after it belong to the endpoint that takes
/// the connection over. Accepted: private data within `cm_data_size`, a
/// version range that `check_ext` allows, a CM header that encodes to the
/// bytes it came from, and a negotiation that picks the highest version
/// both sides speak or refuses when there is none (for a side speaking up
/// to [`VERSION`], and for one held to [`MIN_VERSION`]); the answer a
/// passive side would send must pass the peer's decoder and name, for the
/// peer, the version chosen.
pub fn tcp_cm(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let passive = seed & 1 == 0;
    let limits = Limits {
        max_private_data: if seed & 0x80 != 0 { 16 } else { 256 },
        ..Limits::default()
    };
    let mut dec = Decoder::new(limits);
    let mut pieces = Pieces::new(seed);
    let mut frame: Option<Frame> = None;
    let mut private = Vec::new();
    let mut pos = 0usize;
    // Read until the request (or answer) and its private data are in.
    while pos < stream.len() && !complete(frame.as_ref(), &dec) {
        let end = stream.len().min(pos + pieces.size(64));
        let mut input = &stream[pos..end];
        while !input.is_empty() && !complete(frame.as_ref(), &dec) {
            let Ok((used, event)) = dec.feed(input) else {
                return;
            };
            input = &input[used..];
            pos += used;
            match event {
                Some(Event::Frame(f)) => {
                    let expected = if passive {
                        f.header.op == Op::ConnReq
                    } else {
                        matches!(f.header.op, Op::ConnAccept | Op::ConnReject)
                    };
                    if !expected || frame.is_some() {
                        // Refused: the connection is closed.
                        return;
                    }
                    frame = Some(f);
                }
                Some(Event::Payload { data, .. }) => private.extend_from_slice(data),
                None => {}
            }
        }
    }
    let Some(f) = frame.filter(|_| dec.is_at_boundary()) else {
        // Incomplete: the peer closed early, or the handshake times out.
        return;
    };
    let Ext::Cm(cm) = f.ext else {
        panic!("{} accepted without its CM header: {f:?}", f.header.op);
    };
    let start = pos - private.len() - f.header_len();
    assert_eq!(f.header_len(), HEADER_LEN + CM_LEN);
    assert_eq!(private.len() as u64, f.header.payload_len);
    assert!(private.len() as u64 <= limits.max_private_data);
    assert_eq!(&private[..], &stream[pos - private.len()..pos]);

    // The CM header is what was sent, field for field.
    let (bytes, len) = f.to_bytes();
    assert_eq!(&bytes[..len], &stream[start..start + len]);
    let cm_bytes = &stream[start + HEADER_LEN..start + len];
    assert_eq!(CmHeader::decode(cm_bytes), Ok(cm));
    assert!(cm.min_version >= 1 && cm.min_version <= cm.max_version);

    for max in [MIN_VERSION, VERSION] {
        let common = (cm.min_version..=cm.max_version)
            .rev()
            .find(|v| (MIN_VERSION..=max).contains(v));
        assert_eq!(cm.negotiate_up_to(max), common, "{cm:?} up to {max}");
    }
    assert_eq!(cm.negotiate(), cm.negotiate_up_to(VERSION));
    if let Some(key) = cm.conn_key() {
        assert_eq!(resolve_simultaneous(key, key), Simultaneous::SelfConnect);
        let ours = CmHeader::new(Some(([127, 0, 0, 1], 4242).into()), 7)
            .conn_key()
            .expect("an address gives a key");
        let mirrored = match resolve_simultaneous(key, ours) {
            Simultaneous::KeepOutgoing => Simultaneous::KeepIncoming,
            Simultaneous::KeepIncoming => Simultaneous::KeepOutgoing,
            Simultaneous::SelfConnect => Simultaneous::SelfConnect,
        };
        assert_eq!(resolve_simultaneous(ours, key), mirrored);
    }

    if passive {
        // The answer goes back through the connecting side's decoder.
        let answer = match cm.negotiate() {
            Some(v) => {
                let mut ours = CmHeader::new(None, 1);
                ours.min_version = v;
                ours.max_version = v;
                // The connecting side (offering what this peer offered)
                // takes it.
                assert_eq!(ours.chosen(cm.max_version), Some(v));
                Frame::conn_accept(ours, private.len() as u64)
            }
            None => Frame::conn_reject(
                CmHeader::new(None, 0),
                Some(fabric_core::ErrorKind::NoProtoOpt),
                0,
            ),
        };
        let (bytes, len) = answer.to_bytes();
        assert_eq!(Frame::decode(&bytes[..len], &limits), Ok(answer));
    }
    // The rest belongs to the endpoint that takes the connection over.
    let _ = read_at_once(&stream[pos..], Limits::default(), VERSION);
}
