//! Tests of the ring module.

use super::*;
use crate::region::{Region, RegionConfig};

fn small() -> RegionConfig {
    RegionConfig {
        ring_slots: 4,
        slot_size: 128,
        bounce_count: 2,
        bounce_size: 256,
    }
}

#[test]
fn fills_then_again_then_drains_in_order() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    assert_eq!(
        rx.try_recv_vec().expect_err("empty").kind(),
        ErrorKind::Again
    );
    for i in 0..4u8 {
        let cmd = Command {
            tag: u64::from(i),
            ..Command::default()
        };
        tx.try_send(&cmd, &[i; 10]).expect("room");
    }
    let e = tx.try_send(&Command::default(), b"x").expect_err("full");
    assert_eq!(e.kind(), ErrorKind::Again);
    for i in 0..4u8 {
        let (m, p) = rx.try_recv_vec().expect("message");
        assert_eq!((m.cmd.tag, p), (u64::from(i), vec![i; 10]));
        assert_eq!(m.sender_pid, std::process::id());
    }
    assert_eq!(
        rx.try_recv_vec().expect_err("empty").kind(),
        ErrorKind::Again
    );
}

#[test]
fn aux_words_travel_only_when_set() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    let map = &*tx.map;
    let l = *map.layout();
    let aux_at = l.slot(0) + l.slot_size() - slot::AUX_FROM_END;
    let with = Command {
        op: 1,
        flags: 2,
        src: 3,
        tag: 4,
        data: 5,
        aux: [6, 7],
    };
    tx.try_send(&with, &[9; 64]).expect("send");
    assert_eq!(
        rx.try_recv_vec().expect("recv"),
        (
            Message {
                cmd: with,
                len: 64,
                sender_pid: std::process::id(),
                bounce: None,
            },
            vec![9; 64]
        )
    );
    // Stale aux words in the slot are not read for a command without.
    map.u64(aux_at).store(0xbad, Ordering::Relaxed);
    for _ in 0..4 {
        tx.try_send(
            &Command {
                tag: 1,
                ..Command::default()
            },
            b"",
        )
        .expect("send");
        let (m, _) = rx.try_recv_vec().expect("recv");
        assert_eq!(m.cmd.aux, [0, 0]);
    }
}

#[test]
fn bounce_buffers_run_out_and_come_back() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    let big = [7u8; 200];
    tx.try_send(&Command::default(), &big).expect("buffer 1");
    tx.try_send(&Command::default(), &big).expect("buffer 2");
    assert_eq!(
        tx.try_send(&Command::default(), &big)
            .expect_err("pool empty")
            .kind(),
        ErrorKind::Again
    );
    // The inline path still works while the pool is empty.
    tx.try_send(&Command::default(), b"small").expect("inline");
    let (m, p) = rx.try_recv_vec().expect("first");
    assert!(m.bounce.is_some());
    assert_eq!(p, big);
    tx.try_send(&Command::default(), &big)
        .expect("a buffer came back");
    assert_eq!(
        tx.try_send(&Command::default(), &[0; 257])
            .expect_err("too big")
            .kind(),
        ErrorKind::MsgSize
    );
    assert_eq!(rx.try_recv_vec().expect("second").1, big);
    assert_eq!(rx.try_recv_vec().expect("third").1, b"small");
    assert_eq!(rx.try_recv_vec().expect("fourth").1, big);
}

#[test]
fn malformed_slots_are_errors_and_the_ring_moves_on() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    let map = &*region.sender().map;
    let l = *map.layout();
    // Inline length beyond the slot.
    tx.try_send(&Command::default(), b"abc").expect("send");
    map.u32(l.slot(0) + slot::LEN)
        .store(10_000, Ordering::Relaxed);
    assert_eq!(
        rx.try_recv_vec().expect_err("bad len").kind(),
        ErrorKind::Io
    );
    // A bounce index beyond the pool.
    tx.try_send(&Command::default(), b"abc").expect("send");
    map.u32(l.slot(1) + slot::BOUNCE)
        .store(99, Ordering::Relaxed);
    assert_eq!(
        rx.try_recv_vec().expect_err("bad index").kind(),
        ErrorKind::Io
    );
    // A bounce buffer nobody holds.
    tx.try_send(&Command::default(), b"abc").expect("send");
    map.u32(l.slot(2) + slot::BOUNCE)
        .store(1, Ordering::Relaxed);
    assert_eq!(
        rx.try_recv_vec().expect_err("free buffer").kind(),
        ErrorKind::Io
    );
    // Ring flags this version does not know.
    tx.try_send(&Command::default(), b"abc").expect("send");
    map.u32(l.slot(3) + slot::RING_FLAGS)
        .store(6, Ordering::Relaxed);
    assert_eq!(
        rx.try_recv_vec().expect_err("bad flags").kind(),
        ErrorKind::Io
    );
    // A garbage sequence number on an unclaimed slot is repaired.
    map.u64(l.slot(4) + slot::SEQ)
        .store(0xdead, Ordering::Relaxed);
    assert!(rx.is_ready());
    assert_eq!(
        rx.try_recv_vec().expect_err("bad seq").kind(),
        ErrorKind::Io
    );
    assert_eq!(
        rx.try_recv_vec().expect_err("repaired").kind(),
        ErrorKind::Again
    );
    tx.try_send(&Command::default(), b"ok")
        .expect("send after repair");
    assert_eq!(rx.try_recv_vec().expect("good").1, b"ok");
}

#[test]
fn recover_skips_a_dead_claimer_and_frees_its_buffers() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    let map = &*tx.map;
    let l = *map.layout();
    const DEAD: u32 = 0x7fff_fff0;
    // A sender claims position 0 and "dies" before committing.
    let pos = tx.claim(false).expect("claim");
    map.u32(l.slot(pos) + slot::CLAIMER)
        .store(DEAD, Ordering::Relaxed);
    // Another takes a bounce buffer and dies before sending.
    let b = bounce::pop(map, DEAD).expect("buffer");
    // A live sender queues behind the stuck slot.
    tx.try_send(
        &Command {
            tag: 5,
            ..Command::default()
        },
        b"behind",
    )
    .expect("send");
    assert_eq!(
        rx.try_recv_vec().expect_err("stuck").kind(),
        ErrorKind::Again
    );
    let is_dead = |pid: u32| pid == DEAD;
    assert_eq!(
        rx.recover(is_dead),
        Recovery {
            skipped_slots: 1,
            freed_buffers: 1,
            repaired: 0,
        }
    );
    let (m, p) = rx.try_recv_vec().expect("unstuck");
    assert_eq!((m.cmd.tag, p.as_slice()), (5, &b"behind"[..]));
    // The late commit of a sender that was taken for dead fails.
    let pos2 = tx.claim(false).expect("claim");
    map.u32(l.slot(pos2) + slot::CLAIMER)
        .store(DEAD, Ordering::Relaxed);
    assert_eq!(rx.recover(is_dead).skipped_slots, 1);
    assert_eq!(
        tx.commit(l.slot(pos2), pos2).expect_err("reclaimed").kind(),
        ErrorKind::Canceled
    );
    // Both buffers are usable again.
    assert_ne!(b, u32::MAX);
    tx.try_send_bounce(&Command::default(), b"1")
        .expect("buffer");
    tx.try_send_bounce(&Command::default(), b"2")
        .expect("buffer");
    assert_eq!(rx.try_recv_vec().expect("1").1, b"1");
    assert_eq!(rx.try_recv_vec().expect("2").1, b"2");
}

#[test]
fn recover_skips_a_claim_whose_pid_was_never_recorded_but_not_a_live_one() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    let map = &*tx.map;
    let l = *map.layout();
    let alive = |_: u32| false;
    // Claimed by a live sender that recorded its pid: left alone.
    let pos = tx.claim(false).expect("claim");
    map.u32(l.slot(pos) + slot::CLAIMER)
        .store(std::process::id(), Ordering::Relaxed);
    assert_eq!(rx.recover(alive).skipped_slots, 0);
    assert!(rx.head_claimed());
    // Its sender finishes; the next claim "dies" before writing its
    // header (senders record their pid with it), behind it a live send.
    tx.write_header(l.slot(pos), &Command::default(), 0, bounce::NONE, 0);
    tx.commit(l.slot(pos), pos).expect("commit");
    rx.try_recv_vec().expect("first");
    let _ = tx.claim(false).expect("claim");
    tx.try_send(
        &Command {
            tag: 9,
            ..Command::default()
        },
        b"after",
    )
    .expect("send");
    assert_eq!(
        rx.try_recv_vec().expect_err("stuck").kind(),
        ErrorKind::Again
    );
    assert_eq!(rx.recover(alive).skipped_slots, 1);
    let (m, p) = rx.try_recv_vec().expect("unstuck");
    assert_eq!((m.cmd.tag, p.as_slice()), (9, &b"after"[..]));
}

#[test]
fn a_sender_taken_for_dead_keeps_its_hands_off_a_reused_buffer() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let map = &*tx.map;
    const OTHER: u32 = 0x7fff_fff1;
    // The sender pops a buffer; the receiver, taking it for dead, frees it
    // (as `recover` does) and another sender pops it.
    let b = bounce::pop(map, tx.pid).expect("buffer");
    assert!(bounce::release_if_held_by(map, b, tx.pid.max(1)));
    assert_eq!(bounce::pop(map, OTHER).expect("buffer"), b);
    // The first sender's send fails (its commit was refused): giving its
    // buffer back must leave the other sender's alone.
    tx.give_back(b);
    assert_eq!(bounce::holder(map, b), OTHER);
    // Its own buffer it gives back.
    let mine = bounce::pop(map, tx.pid).expect("buffer");
    tx.give_back(mine);
    assert_eq!(bounce::holder(map, mine), 0);
}

#[test]
fn recover_repairs_scribbled_control_words() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    let map = &*tx.map;
    let l = *map.layout();
    tx.try_send(
        &Command {
            tag: 1,
            ..Command::default()
        },
        b"kept",
    )
    .expect("send");
    // A tail far away: every claim sees "full" or "taken".
    map.u64(offsets::RING_TAIL)
        .store(1 << 40, Ordering::Relaxed);
    assert_eq!(
        tx.try_send(&Command::default(), b"x")
            .expect_err("wedged")
            .kind(),
        ErrorKind::Again
    );
    // A free slot with a foreign sequence, and a free-list head naming
    // no buffer.
    map.u64(l.slot(2) + slot::SEQ).store(77, Ordering::Relaxed);
    map.u64(offsets::BOUNCE_FREE).store(5, Ordering::Relaxed);
    assert!(bounce::pop(map, 1).is_err());
    let r = rx.recover(|_| false);
    assert_eq!(
        r,
        Recovery {
            skipped_slots: 0,
            freed_buffers: 0,
            repaired: 3
        }
    );
    assert_eq!(
        rx.recover(|_| false),
        Recovery::default(),
        "nothing left to fix"
    );
    // The committed command survived; the ring and pool work again.
    assert_eq!(rx.try_recv_vec().expect("kept").1, b"kept");
    for i in 0..4u8 {
        tx.try_send(&Command::default(), &[i; 100])
            .expect("room again");
        assert_eq!(rx.try_recv_vec().expect("back").1, [i; 100]);
    }
}

#[test]
fn a_committed_command_of_a_dead_sender_keeps_its_buffer() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    tx.try_send_bounce(&Command::default(), b"last words")
        .expect("send");
    // Pretend the sender died right after sending.
    assert_eq!(rx.recover(|_| true), Recovery::default());
    assert_eq!(rx.try_recv_vec().expect("delivered").1, b"last words");
}

#[test]
fn a_panicking_callback_releases_the_slot() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    tx.try_send(&Command::default(), b"boom").expect("send");
    tx.try_send(&Command::default(), b"next").expect("send");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = rx.try_recv(|_, _| panic!("callback failed"));
    }));
    assert!(r.is_err());
    assert_eq!(rx.try_recv_vec().expect("moved on").1, b"next");
}

#[test]
fn wait_times_out_and_wakes() {
    let region = Region::create(&small()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    rx.set_wait_policy(WaitPolicy::BLOCK);
    assert!(!rx.wait(Duration::from_millis(20)));
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        tx.try_send(&Command::default(), b"wake").expect("send");
    });
    let (_, p) = rx.recv_vec(Duration::from_secs(30)).expect("woken");
    assert_eq!(p, b"wake");
    t.join().expect("sender thread");
}

fn stepped_config() -> RegionConfig {
    RegionConfig {
        ring_slots: 8,
        slot_size: 128,
        bounce_count: 4,
        bounce_size: 256 * 1024,
    }
}

#[test]
fn stepped_payloads_are_taken_as_they_land() {
    let region = Region::create(&stepped_config()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    let sizes = [STEPPED_MIN - 1, STEPPED_MIN, 65_536, 100_001, 256 * 1024];
    let t = std::thread::spawn(move || {
        for (k, &len) in sizes.iter().enumerate() {
            let body: Vec<u8> = (0..len).map(|i| (i * 13 + k) as u8).collect();
            let (a, b) = body.split_at(len / 3);
            let cmd = Command {
                tag: k as u64,
                ..Command::default()
            };
            while let Err(e) = tx.try_send_parts_stepped(&cmd, &[a, b]) {
                assert_eq!(e.kind(), ErrorKind::Again);
                std::thread::yield_now();
            }
        }
    });
    for (k, &len) in sizes.iter().enumerate() {
        let mut got = vec![0u8; len];
        let mut done = 0;
        let mut looks = 0u64;
        loop {
            let r = rx.try_recv_or_keep(|m, p| {
                assert_eq!((m.cmd.tag, m.len), (k as u64, len));
                let ready = p.ready();
                assert!(ready >= done && ready <= len);
                p.copy_range_to(done, &mut got[done..ready]);
                done = ready;
                // Not `is_complete`, which looks at the mark again.
                (ready == len).then_some(())
            });
            match r {
                Ok(Some(())) => break,
                Ok(None) => looks += 1,
                Err(e) => assert_eq!(e.kind(), ErrorKind::Again),
            }
        }
        let want: Vec<u8> = (0..len).map(|i| (i * 13 + k) as u8).collect();
        assert!(got == want, "payload {k} ({len} bytes) differs");
        if len < STEPPED_MIN {
            assert_eq!(looks, 0, "a payload under the minimum comes whole");
        }
    }
    t.join().expect("sender");
    // Every buffer came back.
    let map = region.sender().map;
    assert!((0..4).all(|i| bounce::holder(&map, i) == 0));
}

#[test]
fn an_unfilled_stepped_payload_consumed_keeps_its_buffer_until_filled() {
    let region = Region::create(&stepped_config()).expect("create");
    let tx = region.sender();
    let mut rx = region.receiver().expect("receiver");
    let map = tx.map.clone();
    let me = std::process::id();
    assert_eq!(rx.filling_head(), None);
    for (k, fill_to) in [(0u64, 70_000u32), (1, 0)] {
        tx.try_send_parts_stepped(&Command::default(), &[&[5u8; 70_000]])
            .expect("send");
        // Complete: not a filling head.
        assert_eq!(rx.filling_head(), None);
        // The sender stopped after its second step (a peer rewrote the
        // mark).
        let idx = (0..4)
            .find(|&i| bounce::holder(&map, i) != 0)
            .expect("a held buffer");
        let mark = map.u32(bounce::fill_word(&map, idx));
        mark.store(2 * STEP as u32, Ordering::Release);
        assert_eq!(rx.filling_head(), Some((k, me)));
        let seen = rx
            .try_recv(|m, p| {
                assert_eq!(m.bounce, Some(idx));
                assert_eq!((p.ready(), p.is_complete()), (2 * STEP, false));
                p.ready()
            })
            .expect("the head");
        assert_eq!(seen, 2 * STEP);
        // Consumed; the buffer stays with its (live) sender.
        assert_eq!(rx.filling_head(), None);
        assert_eq!(bounce::holder(&map, idx), me);
        assert_eq!((rx.forsaken(), rx.reclaim_forsaken(|_| false)), (1, 0));
        if fill_to > 0 {
            // The sender finished: the buffer comes back.
            mark.store(fill_to, Ordering::Release);
            assert_eq!(rx.reclaim_forsaken(|_| false), 1);
        } else {
            // Still unfilled, but its sender is gone.
            assert_eq!(rx.reclaim_forsaken(|pid| pid == me), 1);
        }
        assert_eq!((rx.forsaken(), bounce::holder(&map, idx)), (0, 0));
    }
    assert_eq!(
        rx.try_recv_vec().expect_err("empty").kind(),
        ErrorKind::Again
    );
    // A stepped flag on an inline payload is malformed.
    tx.try_send_inline(&Command::default(), b"tiny")
        .expect("send");
    let s = map.layout().slot(2);
    map.u32(s + slot::RING_FLAGS)
        .store(slot::STEPPED, Ordering::Relaxed);
    assert_eq!(
        rx.try_recv_vec().expect_err("malformed").kind(),
        ErrorKind::Io
    );
}
