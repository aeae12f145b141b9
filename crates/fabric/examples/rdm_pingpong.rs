//! Ping-pong between two RDM endpoints of one program through the safe
//! layer: every message is a buffer the operation owns and hands back, and
//! every echo is checked byte for byte.
//!
//! ```text
//! cargo run -p fabric --example rdm_pingpong          # tcp on 127.0.0.1
//! cargo run -p fabric --example rdm_pingpong -- shm
//! ```
//!
//! One thread drives both endpoints (manual progress: each moves when its
//! completion queue is read). Exits 0 when every echo matched, 1
//! otherwise.

mod common;

use std::time::Instant;

use common::{Res, drive};
use fabric::prelude::*;

/// Message sizes, and round trips per size.
const SIZES: &[usize] = &[1, 64, 4096, 65536, 1 << 20];
const ROUNDS: usize = 200;

fn main() -> std::process::ExitCode {
    common::main_with("rdm_pingpong", run)
}

/// The bytes of round `round`: a pattern that shows misplaced bytes,
/// different every round.
fn fill(buf: &mut [u8], round: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i.wrapping_mul(7) ^ round.wrapping_mul(131)) as u8;
    }
}

fn run() -> Res<()> {
    let prov = common::provider();
    let info = common::entry(&prov, Caps::MSG)?;
    let domain = safe::Domain::open(&info)?;
    let mut ping: safe::Endpoint = domain.endpoint()?;
    let mut pong: safe::Endpoint = domain.endpoint()?;
    let to_pong = ping.insert(&pong.name()?)?;
    let to_ping = pong.insert(&ping.name()?)?;
    println!("rdm_pingpong over {prov}: {ROUNDS} round trips per size");

    // Three buffers go round: the ping's message, the pong's receive
    // buffer (which becomes the echo), and the ping's receive buffer.
    let mut out = Vec::new();
    let mut pong_in = Vec::new();
    let mut ping_in = Vec::new();
    for &size in SIZES {
        out.resize(size, 0);
        pong_in.resize(size, 0);
        ping_in.resize(size, 0);
        let start = Instant::now();
        for round in 0..ROUNDS {
            fill(&mut out, round);
            let at_pong = pong.recv(pong_in)?;
            let at_ping = ping.recv(ping_in)?;
            let sent = ping.send(to_pong, out)?;

            // The pong echoes the message in the buffer it came in.
            let got = drive(&mut pong, &mut ping, at_pong)?;
            let echo = got.into_buf().ok_or("a receive gave no buffer back")?;
            let echoed = pong.send(to_ping, echo)?;

            let back = drive(&mut ping, &mut pong, at_ping)?;
            out = drive(&mut ping, &mut pong, sent)?
                .into_buf()
                .unwrap_or_default();
            if back.received() != Some(&out[..]) {
                return Err(format!(
                    "the echo of round {round} of {size} bytes differs from what was sent"
                )
                .into());
            }
            ping_in = back.into_buf().unwrap_or_default();
            pong_in = drive(&mut pong, &mut ping, echoed)?
                .into_buf()
                .unwrap_or_default();
        }
        let per_trip = start.elapsed() / ROUNDS as u32;
        println!(
            "{size:>8} bytes: {:>8.1} us per round trip",
            per_trip.as_secs_f64() * 1e6
        );
    }
    println!("all {} echoes matched", SIZES.len() * ROUNDS);
    Ok(())
}
