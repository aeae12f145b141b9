//! The ring in one process: threads stand in for sender processes, and a
//! model checks every answer of a random operation sequence.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fabric_core::error::ErrorKind;
use proptest::prelude::*;
use prov_shm::region::{Region, RegionConfig};
use prov_shm::ring::{Command, Sender};

/// 4 producer threads x 100k commands into a 64-slot ring (every 16th
/// through a bounce buffer), one consumer: nothing lost, nothing
/// duplicated, each producer's commands in order, payloads intact.
#[test]
fn four_producers_no_loss_no_duplication() {
    const PRODUCERS: u64 = 4;
    const EACH: u64 = 100_000;
    let region = Region::create(&RegionConfig {
        ring_slots: 64,
        slot_size: 128,
        bounce_count: 8,
        bounce_size: 256,
    })
    .expect("region");
    let mut rx = region.receiver().expect("receiver");
    let failed = Arc::new(AtomicBool::new(false));
    let again = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|t| {
            let tx: Sender = region.sender();
            let failed = failed.clone();
            let again = again.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let cmd = Command {
                        src: t as u32,
                        tag: i,
                        data: t << 32 | i,
                        ..Command::default()
                    };
                    let mut payload = [0u8; 100];
                    payload[..8].copy_from_slice(&i.to_le_bytes());
                    payload[8] = t as u8;
                    let len = if i % 16 == 0 { 100 } else { 9 };
                    let end = Instant::now() + Duration::from_secs(60);
                    loop {
                        match tx.try_send(&cmd, &payload[..len]) {
                            Ok(()) => break,
                            Err(e) if e.kind() == ErrorKind::Again && Instant::now() < end => {
                                again.fetch_add(1, Ordering::Relaxed);
                                std::thread::yield_now();
                            }
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                panic!("producer {t}: {e:?}");
                            }
                        }
                    }
                }
            })
        })
        .collect();
    let mut next = [0u64; PRODUCERS as usize];
    let mut buf = [0u8; 256];
    let mut bounced = 0u64;
    let total = PRODUCERS * EACH;
    let end = Instant::now() + Duration::from_secs(120);
    let mut received = 0;
    while received < total {
        assert!(!failed.load(Ordering::Relaxed), "a producer failed");
        assert!(Instant::now() < end, "stalled at {received} of {total}");
        match rx.try_recv(|m, p| (*m, p.copy_to(&mut buf))) {
            Ok((m, n)) => {
                let t = m.cmd.src as usize;
                assert!(t < PRODUCERS as usize);
                assert_eq!(m.cmd.tag, next[t], "producer {t}: order, loss or duplicate");
                assert_eq!(m.cmd.data, (t as u64) << 32 | next[t]);
                assert_eq!(&buf[..8], &next[t].to_le_bytes());
                assert_eq!(buf[8] as usize, t);
                assert_eq!(n, if next[t] % 16 == 0 { 100 } else { 9 });
                assert_eq!(m.bounce.is_some(), n > 64);
                bounced += u64::from(m.bounce.is_some());
                next[t] += 1;
                received += 1;
            }
            Err(e) if e.kind() == ErrorKind::Again => {
                rx.wait(Duration::from_millis(100));
            }
            Err(e) => panic!("receive: {e:?}"),
        }
    }
    for p in producers {
        p.join().expect("producer thread");
    }
    assert_eq!(next, [EACH; PRODUCERS as usize]);
    assert_eq!(bounced, PRODUCERS * EACH.div_ceil(16));
    assert_eq!(
        rx.try_recv_vec().expect_err("empty").kind(),
        ErrorKind::Again
    );
    println!(
        "{total} commands, {bounced} through bounce buffers, {} Again answers on the way",
        again.load(Ordering::Relaxed)
    );
}

#[derive(Clone, Debug)]
enum Op {
    Send { len: usize, bounce: bool },
    Recv,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..=300, any::<bool>()).prop_map(|(len, bounce)| Op::Send { len, bounce }),
        Just(Op::Recv),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Against a model (a FIFO of at most 8 commands, at most 3 of them in
    /// bounce buffers, where the slot of the command received last comes
    /// back to the senders only at the receiver's next call): `Again`
    /// exactly when the model is full, `MsgSize` exactly when too big,
    /// receives give the model's front.
    #[test]
    fn ring_matches_a_fifo_model(ops in proptest::collection::vec(op(), 1..200)) {
        let region = Region::create(&RegionConfig {
            ring_slots: 8,
            slot_size: 128,
            bounce_count: 3,
            bounce_size: 256,
        }).expect("region");
        let tx = region.sender();
        let mut rx = region.receiver().expect("receiver");
        let mut model: VecDeque<(u64, Vec<u8>, bool)> = VecDeque::new();
        // A slot consumed by the last receive and not yet freed.
        let mut held = 0;
        for (i, op) in ops.into_iter().enumerate() {
            let i = i as u64;
            match op {
                Op::Send { len, bounce } => {
                    let payload: Vec<u8> = (0..len).map(|j| (i as usize * 31 + j) as u8).collect();
                    let cmd = Command { tag: i, ..Command::default() };
                    let uses_bounce = bounce || len > 64;
                    let r = if bounce {
                        tx.try_send_bounce(&cmd, &payload)
                    } else {
                        tx.try_send(&cmd, &payload)
                    };
                    let in_bounce = model.iter().filter(|m| m.2).count();
                    if len > 256 {
                        prop_assert_eq!(r.expect_err("too big").kind(), ErrorKind::MsgSize);
                    } else if model.len() + held == 8 || (uses_bounce && in_bounce == 3) {
                        prop_assert_eq!(r.expect_err("full").kind(), ErrorKind::Again);
                    } else {
                        prop_assert!(r.is_ok(), "{:?}", r);
                        model.push_back((i, payload, uses_bounce));
                    }
                }
                Op::Recv => {
                    let r = rx.try_recv_vec();
                    held = usize::from(!model.is_empty());
                    match model.pop_front() {
                        None => prop_assert_eq!(r.expect_err("empty").kind(), ErrorKind::Again),
                        Some((tag, payload, bounce)) => {
                            let (m, p) = r.expect("message");
                            prop_assert_eq!(m.cmd.tag, tag);
                            prop_assert_eq!(p, payload);
                            prop_assert_eq!(m.bounce.is_some(), bounce);
                        }
                    }
                }
            }
            prop_assert_eq!(rx.is_ready(), !model.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Both sides keep working without a panic (or a hang) when any words
    /// of the region hold any values: senders answer Ok, Again, Io or
    /// Canceled; the receiver Ok, Again or Io; `recover` restores service
    /// for the control words it owns.
    #[test]
    fn scribbled_regions_never_panic_either_side(
        pokes in proptest::collection::vec((0usize..2048, any::<u64>(), 0u8..4), 1..40),
        sends in proptest::collection::vec(0usize..400, 1..40),
    ) {
        use std::os::unix::fs::FileExt;
        let region = Region::create(&RegionConfig {
            ring_slots: 8,
            slot_size: 128,
            bounce_count: 3,
            bounce_size: 256,
        }).expect("region");
        let words = region.layout().total_size() / 8;
        let tx = region.sender();
        let mut rx = region.receiver().expect("receiver");
        let file = std::fs::OpenOptions::new().write(true).open(region.path()).expect("open");
        for (i, (word, value, shape)) in pokes.into_iter().enumerate() {
            // Small values and all-ones are likelier to pass a check and
            // reach deeper code than uniform ones.
            let v = match shape {
                0 => value,
                1 => value % 16,
                2 => u64::MAX,
                _ => value & 0xffff_ffff,
            };
            file.write_all_at(&v.to_ne_bytes(), (word % words * 8) as u64).expect("poke");
            let len = sends[i % sends.len()];
            let r = tx.try_send(&Command { tag: i as u64, ..Command::default() }, &vec![7; len]);
            if let Err(e) = r {
                prop_assert!(
                    matches!(e.kind(), ErrorKind::Again | ErrorKind::Io | ErrorKind::Canceled | ErrorKind::MsgSize),
                    "{:?}", e
                );
            }
            for _ in 0..4 {
                if let Err(e) = rx.try_recv(|_, p| p.to_vec()) {
                    prop_assert!(matches!(e.kind(), ErrorKind::Again | ErrorKind::Io), "{:?}", e);
                }
            }
            if i % 8 == 7 {
                rx.recover(|_| false);
            }
        }
        // Once the scribbling stops, recovery (every sender taken for dead)
        // and draining bring the ring back into service.
        for _ in 0..4 {
            rx.recover(|_| true);
            for _ in 0..64 {
                match rx.try_recv(|_, _| ()) {
                    Err(e) if e.kind() == ErrorKind::Again => break,
                    _ => {}
                }
            }
        }
        let cmd = Command { tag: 99, ..Command::default() };
        tx.try_send_inline(&cmd, b"still here").expect("service restored");
        let (m, p) = rx.try_recv_vec().expect("received");
        prop_assert_eq!((m.cmd.tag, p.as_slice()), (99, &b"still here"[..]));
    }
}
