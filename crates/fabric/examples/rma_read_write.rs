//! RMA and atomics through the safe layer: a target exposes memory and
//! sends its description (a `RemoteRegion`, as JSON) to an initiator, which
//! writes, reads back and updates a counter with atomics; then the target
//! takes its memory back and checks every byte.
//!
//! ```text
//! cargo run -p fabric --example rma_read_write        # tcp on 127.0.0.1
//! cargo run -p fabric --example rma_read_write -- shm
//! ```
//!
//! One thread drives both endpoints. Exits 0 when every byte and value is
//! as expected, 1 otherwise.

mod common;

use common::{Res, drive};
use fabric::prelude::*;

/// Size of the exposed window; the initiator writes its first half and
/// reads its second.
const WINDOW: usize = 64 * 1024;
const HALF: usize = WINDOW / 2;

fn main() -> std::process::ExitCode {
    common::main_with("rma_read_write", run)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn check(what: &str, got: &[u8], want: &[u8]) -> Res<()> {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None if got.len() == want.len() => Ok(()),
        None => Err(format!("{what}: {} bytes, expected {}", got.len(), want.len()).into()),
        Some(i) => Err(format!(
            "{what}: byte {i} is {:#04x}, expected {:#04x}",
            got[i], want[i]
        )
        .into()),
    }
}

fn run() -> Res<()> {
    let prov = common::provider();
    let info = common::entry(&prov, Caps::MSG | Caps::RMA | Caps::ATOMIC)?;
    let domain = safe::Domain::open(&info)?;
    let mut target: safe::Endpoint = domain.endpoint()?;
    let mut initiator: safe::Endpoint = domain.endpoint()?;
    let to_target = initiator.insert(&target.name()?)?;
    let to_initiator = target.insert(&initiator.name()?)?;
    println!("rma_read_write over {prov}");

    // The target: a window whose second half holds data to read, and a
    // counter, both open to remote reads and writes.
    let mut start = vec![0u8; WINDOW];
    start[HALF..].copy_from_slice(&pattern(HALF, 0xa0));
    let rw = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let window = domain.expose(start, rw)?;
    let counter = domain.expose(100u64.to_ne_bytes().to_vec(), rw)?;
    let regions = serde_json::to_vec(&[window.region(), counter.region()])?;

    // The description travels as an ordinary message.
    let posted = initiator.recv(vec![0; 1024])?;
    let sent = target.send(to_initiator, regions)?;
    let got = drive(&mut initiator, &mut target, posted)?;
    drive(&mut target, &mut initiator, sent)?;
    let [win, cnt]: [RemoteRegion; 2] = serde_json::from_slice(got.received().unwrap_or_default())?;
    println!(
        "window: {} bytes, key {:#x}; counter: key {:#x}",
        win.len, win.key.0, cnt.key.0
    );

    // Write the first half, read the second, read the first back.
    let put = initiator.write(to_target, pattern(HALF, 0x5c), &win.slice(..HALF)?)?;
    let put = drive(&mut initiator, &mut target, put)?;
    println!("wrote {} bytes", put.transferred());
    let get = initiator.read(to_target, vec![0; HALF], &win.slice(HALF..)?)?;
    let get = drive(&mut initiator, &mut target, get)?;
    check(
        "read of the second half",
        get.received().unwrap_or_default(),
        &pattern(HALF, 0xa0),
    )?;
    let again = initiator.read(to_target, vec![0; HALF], &win.slice(..HALF)?)?;
    let again = drive(&mut initiator, &mut target, again)?;
    check(
        "read back of the written half",
        again.received().unwrap_or_default(),
        &pattern(HALF, 0x5c),
    )?;
    println!(
        "read {} + {} bytes, as expected",
        get.transferred(),
        again.transferred()
    );

    // Atomics on the counter: 100 + 5, then a swap that matches and one
    // that does not.
    let steps: [(&str, u64, u64); 3] = [
        ("fetch_add 5", 100, 105),
        ("swap 105 -> 1", 105, 1),
        ("swap 105 -> 2", 1, 1),
    ];
    let add = initiator.fetch_add(to_target, &cnt, 5u64)?;
    let hit = initiator.compare_swap(to_target, &cnt, 105u64, 1)?;
    let miss = initiator.compare_swap(to_target, &cnt, 105u64, 2)?;
    for ((what, old, _), id) in steps.iter().zip([add, hit, miss]) {
        let c = drive(&mut initiator, &mut target, id)?;
        let fetched = c.fetched::<u64>().ok_or("an atomic returned no value")?;
        if fetched != *old {
            return Err(format!("{what}: the old value is {fetched}, expected {old}").into());
        }
        println!("{what}: old value {fetched}");
    }

    // Done: the target takes its memory back and checks it.
    let posted = target.recv(vec![0; 16])?;
    let sent = initiator.send(to_target, b"done".to_vec())?;
    drive(&mut target, &mut initiator, posted)?;
    drive(&mut initiator, &mut target, sent)?;
    let bytes = window.revoke();
    check(
        "the target's first half",
        &bytes[..HALF],
        &pattern(HALF, 0x5c),
    )?;
    check(
        "the target's second half",
        &bytes[HALF..],
        &pattern(HALF, 0xa0),
    )?;
    let value = u64::from_ne_bytes(counter.revoke()[..8].try_into()?);
    if value != steps[2].2 {
        return Err(format!("the counter is {value}, expected {}", steps[2].2).into());
    }
    println!("the target's memory holds what was written; counter = {value}");
    Ok(())
}
