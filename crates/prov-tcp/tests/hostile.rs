//! Hostile or broken peers (issue #21), written with the wire codec over a
//! raw socket: whatever a peer sends, every operation ends in exactly one
//! completion, and a stranger cannot take over a live peer's connection.

#![allow(
    clippy::unwrap_used,
    clippy::result_large_err,
    clippy::field_reassign_with_default
)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use common::*;
use fabric_core::objects::{CompletionFlags, CqEntry, CqErrEntry, FiAddr, Msg};
use fabric_core::*;
use prov_tcp::wire::{CmHeader, Frame, HEADER_LEN, Limits, Op, decode_header};

/// The tests of this file run one at a time (each holds this lock): some
/// measure the whole process (CPU time, RSS), and the work of a test
/// running beside them would count in it.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reads one frame's header, extended header and payload from `s`.
fn read_frame(s: &mut TcpStream) -> (prov_tcp::wire::Header, Vec<u8>) {
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h).unwrap();
    let header = decode_header(&h, &Limits::default()).unwrap();
    let mut rest = vec![0u8; usize::from(header.ext_len) + header.payload_len as usize];
    s.read_exact(&mut rest).unwrap();
    (header, rest)
}

fn write_frame(s: &mut TcpStream, f: &Frame) {
    let (b, n) = f.to_bytes();
    s.write_all(&b[..n]).unwrap();
}

/// A fake RDM peer on 127.0.0.1: accepts one connection and answers its
/// hello; returns the stream.
fn fake_peer_accept(l: &TcpListener, me: SocketAddr) -> TcpStream {
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (h, _) = read_frame(&mut s);
    assert_eq!(h.op, Op::Hello);
    // It answers as a version 1 peer does: one version, 1.
    let mut cm = CmHeader::new(Some(me), 99);
    cm.max_version = 1;
    write_frame(&mut s, &Frame::hello_ack(cm, None));
    s
}

fn msg<'a>(iov: &'a [fabric_core::objects::IoVec], to: FiAddr, ctx: u64) -> Msg<'a> {
    Msg {
        iov,
        desc: &[],
        addr: to,
        tag: 0,
        ignore: 0,
        context: ctx,
        data: 0,
    }
}

/// The next completion of `s`, which must be an error.
fn error_of(s: &Side) -> CqErrEntry {
    match next(s.cq.as_ref(), &[]) {
        Ok(e) => panic!("expected an error completion, got {e:?}"),
        Err(e) => e,
    }
}

#[test]
fn a_reply_of_the_wrong_kind_fails_the_operation_instead_of_losing_it() {
    let _serial = serial();
    let a = side(&rdm_info());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap();
    let to = insert(&a, &Address::from(fake));
    // A rendezvous send (well above the eager limit) waits for a Cts.
    let mut big = vec![7u8; 1 << 20];
    let siov = iov(&mut big);
    // SAFETY: `big` outlives the completion awaited below.
    unsafe { a.ep.sendmsg(&msg(&siov, to, 41), OpFlags::empty()) }.unwrap();
    let peer = std::thread::spawn(move || {
        let mut s = fake_peer_accept(&l, fake);
        let (h, _) = read_frame(&mut s);
        assert_eq!(h.op, Op::MsgRts, "a rendezvous send starts with an Rts");
        // Answer the clear-to-send it awaits with a read response.
        write_frame(&mut s, &Frame::read_rsp(h.id, None, 0));
        s
    });
    let e = error_of(&a);
    assert_eq!(e.entry.context, 41);
    drop(peer.join().unwrap());
}

#[test]
fn a_hello_for_a_live_peers_address_is_refused() {
    let _serial = serial();
    let (a, b, b_at_a, a_at_b) = pair();
    // a and b talk: their connection is established.
    let mut r = [0u8; 4];
    let riov = iov(&mut r);
    // SAFETY: `r` outlives the completion awaited below.
    unsafe {
        b.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 1), OpFlags::empty())
    }
    .unwrap();
    a.ep.inject(b"ping", b_at_a, None).unwrap();
    next(b.cq.as_ref(), &[a.cq.as_ref()]).unwrap();
    // A stranger connects to b claiming to be a.
    let a_name = a.ep.getname().unwrap().socket_addr().unwrap();
    let b_name = b.ep.getname().unwrap().socket_addr().unwrap();
    let mut s = TcpStream::connect(b_name).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write_frame(&mut s, &Frame::hello(CmHeader::new(Some(a_name), 12345)));
    // b refuses it (and closes it) while driving its progress.
    let refused = std::thread::spawn(move || {
        let (h, _) = read_frame(&mut s);
        (h.op, h.status)
    });
    while !refused.is_finished() {
        settle(&[a.cq.as_ref(), b.cq.as_ref()], 5);
    }
    let (op, status) = refused.join().unwrap();
    assert_eq!(op, Op::HelloAck);
    assert!(status.is_some(), "the impostor's hello must be refused");
    // b's messages still reach the real a.
    let mut r = [0u8; 4];
    let riov = iov(&mut r);
    // SAFETY: `r` outlives the completion awaited below.
    unsafe {
        a.ep.recvmsg(&msg(&riov, FiAddr::UNSPEC, 2), OpFlags::empty())
    }
    .unwrap();
    b.ep.inject(b"pong", a_at_b, None).unwrap();
    let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap();
    assert_eq!((e.context, &r), (2, b"pong"));
}

#[test]
fn a_hello_whose_address_is_not_the_sockets_is_refused() {
    let _serial = serial();
    let b = side(&rdm_info());
    let b_name = b.ep.getname().unwrap().socket_addr().unwrap();
    // From 127.0.0.1, claiming an address of another host.
    let mut s = TcpStream::connect(b_name).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let claimed: SocketAddr = "192.0.2.200:7000".parse().unwrap();
    write_frame(&mut s, &Frame::hello(CmHeader::new(Some(claimed), 5)));
    let refused = std::thread::spawn(move || {
        let (h, _) = read_frame(&mut s);
        (h.op, h.status)
    });
    while !refused.is_finished() {
        settle(&[b.cq.as_ref()], 5);
    }
    let (op, status) = refused.join().unwrap();
    assert_eq!(op, Op::HelloAck);
    assert!(status.is_some(), "a hello from another IP must be refused");
}

/// Connects to `to` as an RDM peer (the hello names this socket's own
/// address) and waits for the answer.
fn hello_to(to: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let me = s.local_addr().unwrap();
    write_frame(&mut s, &Frame::hello(CmHeader::new(Some(me), 7)));
    let (h, _) = read_frame(&mut s);
    assert_eq!((h.op, h.status), (Op::HelloAck, None));
    s
}

#[test]
fn a_paused_half_closed_connection_costs_no_cpu() {
    let _serial = serial();
    let b = side(&auto_info_with(Caps::MSG | Caps::TAGGED));
    let name = b.ep.getname().unwrap().socket_addr().unwrap();
    let mut s = hello_to(name);
    // One unexpected tagged message larger than the 8 MiB budget: the
    // connection is paused with its payload in the socket; then the
    // sender half-closes.
    let (h, n) = Frame::tagged(1, 5, 9 << 20).to_bytes();
    s.write_all(&h[..n]).unwrap();
    s.write_all(&[0u8; 4096]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The progress thread must sleep now: at most a tenth of the second
    // measured is spent, where a spinning thread spends all of it.
    let before = cpu_time();
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_time() - before;
    assert!(used < Duration::from_millis(100), "{used:?} of CPU in 1 s");
    drop(s);
}

#[test]
fn a_peer_that_never_reads_its_answers_is_not_read_either() {
    let _serial = serial();
    use fabric_core::objects::RmaIov;
    let b = side(&auto_info_with(Caps::MSG | Caps::TAGGED));
    let name = b.ep.getname().unwrap().socket_addr().unwrap();
    let before = rss();
    let mut s = hello_to(name);
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    // RMA reads with a key that names nothing: each is answered with an
    // error status, which this peer never reads.
    let bad = [RmaIov {
        addr: 0,
        len: 8,
        key: 0xbad,
    }];
    let mut batch = Vec::new();
    for id in 0..1000u64 {
        let (h, n) = Frame::read_req(id, &bad).unwrap().to_bytes();
        batch.extend_from_slice(&h[..n]);
    }
    let limit: u64 = 300 << 20;
    let mut sent = 0u64;
    let blocked = loop {
        match s.write_all(&batch) {
            Ok(()) => sent += batch.len() as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break true;
            }
            Err(e) => panic!("{e}"),
        }
        if sent >= limit {
            break false;
        }
    };
    let grown = rss().saturating_sub(before);
    assert!(
        blocked,
        "the endpoint kept reading: {sent} bytes of requests taken"
    );
    assert!(
        grown < 64 << 20,
        "RSS grew by {grown} bytes after {sent} bytes sent"
    );
    drop(s);
}

#[test]
fn rma_and_atomics_reach_only_endpoints_that_asked_for_them() {
    let _serial = serial();
    use fabric_core::objects::{MrAccess, RmaIov};
    // A message-only endpoint with a registered buffer.
    let b = side(&auto_info_with(Caps::MSG));
    let mut mem = vec![0u8; 64];
    // SAFETY: `mem` outlives the region (dropped first, below).
    let mr = unsafe {
        reg(
            b.domain.as_ref(),
            &mut mem,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            0x77,
        )
    };
    let name = b.ep.getname().unwrap().socket_addr().unwrap();
    let mut s = hello_to(name);
    let range = [RmaIov {
        addr: 0,
        len: 8,
        key: 0x77,
    }];
    write_frame(&mut s, &Frame::read_req(1, &range).unwrap());
    let answer = std::thread::spawn(move || {
        let (h, _) = read_frame(&mut s);
        (h.op, h.id, h.status)
    });
    assert_eq!(
        answer.join().unwrap(),
        (Op::ReadRsp, 1, Some(ErrorKind::Access)),
        "an RMA read of an endpoint without FI_RMA is refused"
    );
    drop(mr);
    assert!(mem.iter().all(|&x| x == 0));
}

/// RMA writes of 8 bytes from `a` into key 9 at `to`, with remote CQ data
/// `first..first + n` (also their contexts), from the caller's `siov`;
/// `a`'s CQ is read meanwhile (counted in `done`). Stops once all are
/// posted or nothing moved for `idle` (one try at least); returns how many
/// were posted.
fn writes_with_data(
    a: &Side,
    to: FiAddr,
    siov: &[fabric_core::objects::IoVec],
    first: u64,
    n: u64,
    idle: Duration,
    done: &mut u64,
) -> u64 {
    use fabric_core::objects::{CqEntry, RmaIov, RmaMsg};
    use std::time::Instant;
    let remote = [RmaIov {
        addr: 0,
        len: 8,
        key: 9,
    }];
    let mut out = [CqEntry::default(); 64];
    let mut posted = 0;
    let mut last = Instant::now();
    loop {
        let m = RmaMsg {
            iov: siov,
            desc: &[],
            addr: to,
            rma_iov: &remote,
            context: first + posted,
            data: first + posted,
        };
        // SAFETY: the caller's buffer outlives the completions it awaits.
        match unsafe { a.ep.writemsg(&m, OpFlags::REMOTE_CQ_DATA) } {
            Ok(()) => {
                posted += 1;
                last = Instant::now();
            }
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("{e}"),
        }
        if let Ok(k) = a.cq.read(&mut out) {
            *done += k as u64;
            if k > 0 {
                last = Instant::now();
            }
        }
        if posted == n || last.elapsed() >= idle {
            return posted;
        }
    }
}

/// How long a writer tries before it counts as stopped.
const IDLE: Duration = Duration::from_millis(300);

/// A writer endpoint (manual progress) and a target whose domain
/// progresses by itself, with 64 bytes registered under key 9; the
/// writer's handle for the target.
fn writer_and_target(
    target: &Info,
) -> (
    Side,
    Side,
    FiAddr,
    Box<dyn fabric_core::objects::MemoryRegion>,
) {
    use fabric_core::objects::MrAccess;
    let a = side(&rdm_info());
    let b = side(target);
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    insert(&b, &a.ep.getname().unwrap());
    let mem: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
    // SAFETY: the memory is leaked: it outlives the region.
    let mr = unsafe { reg(b.domain.as_ref(), mem, MrAccess::REMOTE_WRITE, 9) };
    (a, b, b_at_a, mr)
}

#[test]
fn remote_cq_data_into_a_cq_nobody_reads_pauses_the_writer() {
    let _serial = serial();
    use fabric_core::objects::CqEntry;
    let n = 20_000u64;
    let (a, b, b_at_a, _mr) = writer_and_target(&auto_info_with(Caps::MSG | Caps::RMA));
    let mut src = [1u8; 8];
    let siov = iov(&mut src);
    let mut done = 0;
    // b's application reads nothing: once its CQ (1024 entries) is full,
    // b stops reading a's writes, whose acks then stop too.
    let posted = writes_with_data(&a, b_at_a, &siov, 0, n, IDLE, &mut done);
    assert!(posted < n, "all {n} writes went through a full CQ");
    assert!(
        done <= 2 * 1024,
        "{done} writes completed into a CQ of 1024 nobody reads"
    );
    // Once b reads, every write arrives, each once.
    let mut seen = vec![false; n as usize];
    let mut got = 0u64;
    let mut posted = posted;
    let mut out = [CqEntry::default(); 64];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while got < n || done < n {
        assert!(std::time::Instant::now() < deadline, "{got} of {n} arrived");
        if let Ok(k) = b.cq.read(&mut out) {
            for e in &out[..k] {
                assert!(e.flags.contains(CompletionFlags::REMOTE_CQ_DATA));
                assert!(!std::mem::replace(&mut seen[e.data as usize], true));
                got += 1;
            }
        }
        if posted < n {
            posted += writes_with_data(&a, b_at_a, &siov, posted, 1, Duration::ZERO, &mut done);
        } else if let Ok(k) = a.cq.read(&mut out) {
            done += k as u64;
        }
    }
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn kept_remote_cq_data_counts_against_the_budget_and_pauses_its_sender() {
    let _serial = serial();
    use fabric_core::objects::CqEntry;
    const MSGS: usize = 500;
    const LEN: usize = 16 << 10;
    let n = 20_000u64;
    let mut target = auto_info_with(Caps::MSG | Caps::RMA);
    target.mode |= Mode::RX_CQ_DATA;
    let (a, b, b_at_a, _mr) = writer_and_target(&target);
    // 500 unexpected messages of 16 KiB (eager: the eager limit): most of
    // b's 8 MiB budget.
    let mut payload: Vec<u8> = (0..LEN).map(|i| (i * 7 % 251) as u8).collect();
    let piov = iov(&mut payload);
    for i in 0..MSGS {
        // SAFETY: `payload` outlives the completions awaited below.
        unsafe {
            a.ep.sendmsg(&msg(&piov, b_at_a, i as u64), OpFlags::empty())
        }
        .unwrap();
    }
    for _ in 0..MSGS {
        next(a.cq.as_ref(), &[]).unwrap();
    }
    // FI_RX_CQ_DATA: each write's data waits for a receive, charged an
    // entry: the rest of the budget holds a few thousand, then b stops
    // reading a.
    let mut src = [1u8; 8];
    let siov = iov(&mut src);
    let mut done = 0;
    let posted = writes_with_data(&a, b_at_a, &siov, 0, n, IDLE, &mut done);
    assert!(posted < n, "all {n} writes were kept");
    assert!(done < 8_000, "{done} writes were kept");
    // Receives take the messages, then the data; nothing is lost.
    let mut bufs = vec![vec![0u8; LEN]; MSGS];
    let mut small = [0u8; 8];
    let small_iov = iov(&mut small);
    let mut seen = vec![false; n as usize];
    let (mut msgs, mut datas, mut recvs) = (0usize, 0u64, 0u64);
    let mut posted = posted;
    let mut out = [CqEntry::default(); 64];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while msgs < MSGS || datas < n || done < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{msgs} messages and {datas} of {n} data arrived"
        );
        if recvs < MSGS as u64 + n && recvs < msgs as u64 + datas + 256 {
            let r = match bufs.get_mut(recvs as usize) {
                Some(buf) => {
                    let v = iov(buf);
                    // SAFETY: `bufs` outlives the completions read below.
                    unsafe {
                        b.ep.recvmsg(&msg(&v, FiAddr::UNSPEC, recvs), OpFlags::empty())
                    }
                }
                // SAFETY: nothing is written into `small` (the data
                // completions carry no bytes).
                None => unsafe {
                    b.ep.recvmsg(&msg(&small_iov, FiAddr::UNSPEC, recvs), OpFlags::empty())
                },
            };
            r.unwrap();
            recvs += 1;
        }
        if let Ok(k) = b.cq.read(&mut out) {
            for e in &out[..k] {
                if e.flags.contains(CompletionFlags::REMOTE_CQ_DATA) {
                    assert!(!std::mem::replace(&mut seen[e.data as usize], true));
                    datas += 1;
                } else {
                    assert_eq!(e.len, LEN);
                    msgs += 1;
                }
            }
        }
        if posted < n {
            posted += writes_with_data(&a, b_at_a, &siov, posted, 1, Duration::ZERO, &mut done);
        } else if let Ok(k) = a.cq.read(&mut out) {
            done += k as u64;
        }
    }
    assert!(bufs.iter().all(|b| b[..] == payload[..]));
    assert!(seen.iter().all(|&s| s));
}

/// A peer's eager message larger than the unexpected budget stays in its
/// socket, and the connection reads nothing behind it until a receive
/// takes it: then both arrive intact, in order.
#[test]
fn a_payload_left_in_the_socket_waits_for_its_receive_and_arrives_intact() {
    let _serial = serial();
    use fabric_core::objects::CqEntry;
    let b = side(&auto_info_with(Caps::MSG | Caps::TAGGED));
    let name = b.ep.getname().unwrap().socket_addr().unwrap();
    let mut s = hello_to(name);
    let len = 9 << 20;
    let big: Vec<u8> = (0..len).map(|i| (i * 31 % 253) as u8).collect();
    let sent = big.clone();
    let writer = std::thread::spawn(move || {
        let (h, n) = Frame::tagged(1, 5, len as u64).to_bytes();
        s.write_all(&h[..n]).unwrap();
        s.write_all(&sent).unwrap();
        let (h, n) = Frame::tagged(2, 6, 5).to_bytes();
        s.write_all(&h[..n]).unwrap();
        s.write_all(b"after").unwrap();
        s
    });
    let trecv = |buf: &mut [u8], tag: u64, ctx: u64| {
        let v = iov(buf);
        let m = Msg {
            iov: &v,
            desc: &[],
            addr: FiAddr::UNSPEC,
            tag,
            ignore: 0,
            context: ctx,
            data: 0,
        };
        // SAFETY: the buffers outlive the completions awaited below.
        unsafe { b.ep.trecvmsg(&m, OpFlags::empty()) }.unwrap();
    };
    // The small message behind the big one is not read while the big
    // one's payload waits in the socket.
    let mut small = [0u8; 8];
    trecv(&mut small, 6, 60);
    let mut out = [CqEntry::default(); 4];
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        assert!(
            matches!(b.cq.read(&mut out), Err(e) if e.kind() == ErrorKind::Again),
            "a message behind a stalled payload was delivered"
        );
    }
    let mut r = vec![0u8; len];
    trecv(&mut r, 5, 50);
    let first = next(b.cq.as_ref(), &[]).unwrap();
    let second = next(b.cq.as_ref(), &[]).unwrap();
    assert_eq!((first.context, first.len), (50, len));
    assert_eq!((second.context, second.len), (60, 5));
    assert!(r == big);
    assert_eq!(&small[..5], b"after");
    drop(writer.join().unwrap());
}

/// A lone message (nothing else in flight) on an established connection
/// inside this host goes eagerly up to 8 MiB, and by rendezvous above:
/// what the peer reads off the socket says which.
#[test]
fn a_lone_message_inside_this_host_goes_eagerly_up_to_8_mib() {
    let _serial = serial();
    let a = side(&rdm_info());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap();
    let to = insert(&a, &Address::from(fake));
    let (said, heard) = std::sync::mpsc::channel();
    let peer = std::thread::spawn(move || {
        let mut s = fake_peer_accept(&l, fake);
        let mut ops = Vec::new();
        for _ in 0..3 {
            let (h, _) = read_frame(&mut s);
            ops.push((h.op, h.payload_len));
            said.send(()).unwrap();
        }
        (s, ops)
    });
    // A first message connects; the sizes then go one at a time, each
    // posted once the one before it was read and its completion taken.
    let sizes = [8usize, 1 << 20, 9 << 20];
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![3u8; n]).collect();
    for (i, buf) in bufs.iter_mut().enumerate() {
        let siov = iov(buf);
        // SAFETY: `bufs` outlives the endpoint (dropped first, below): the
        // last send waits for a clear-to-send that never comes.
        unsafe { a.ep.sendmsg(&msg(&siov, to, i as u64), OpFlags::empty()) }.unwrap();
        if i + 1 < sizes.len() {
            // Progress until the peer has read it and the send completed.
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let (mut read, mut done) = (false, false);
            while !(read && done) {
                assert!(std::time::Instant::now() < deadline, "size {}", sizes[i]);
                read |= heard.try_recv().is_ok();
                let mut e = [CqEntry::default()];
                if a.cq.read(&mut e).is_ok() {
                    assert_eq!(e[0].context, i as u64);
                    done = true;
                }
            }
        }
    }
    let (_s, ops) = peer.join().unwrap();
    assert_eq!(
        ops,
        vec![(Op::Msg, 8), (Op::Msg, 1 << 20), (Op::MsgRts, 0)],
        "8 B and 1 MiB eagerly, 9 MiB announced by an Rts"
    );
    drop(a);
    drop(bufs);
}
