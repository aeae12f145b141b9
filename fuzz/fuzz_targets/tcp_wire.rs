//! The tcp wire decoder on arbitrary bytes. The first byte picks the limits
//! and seeds the sizes of the pieces the rest is fed in, as a non-blocking
//! socket would return them. The decoder must never panic, must make
//! progress on every call, and every frame it accepts must pass the same
//! checks again, encode to exactly the bytes it came from, and decode back
//! to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use prov_tcp::wire::{Decoder, Event, Frame, Limits};

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let limits = if seed & 0x80 != 0 {
        Limits {
            max_msg_size: 4096,
            max_private_data: 16,
            max_rma_iov: 2,
            max_atomic_count: 8,
        }
    } else {
        Limits::default()
    };
    let mut dec = Decoder::new(limits);
    // xorshift over the seed: piece sizes 1..=64.
    let mut x = u32::from(seed) | 0x100;
    let mut pos = 0usize;
    let mut frame_start = 0usize;
    while pos < stream.len() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let piece = usize::try_from(x % 64).unwrap_or(0) + 1;
        let end = stream.len().min(pos + piece);
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
});
