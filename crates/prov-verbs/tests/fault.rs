//! The fault run on verbs: a peer process is killed (SIGKILL) in the
//! middle of a transfer. On RDM this is the shared fault run
//! (`fabric_core::testing::fault`): every operation aimed at the dead
//! peer ends in exactly one completion within 1 s, posted wildcard
//! receives stay posted and cancel, and the same endpoint and a new one go
//! on with a new peer process. On MSG, whose endpoint ends with its
//! connection, the client hears the shutdown, every operation ends once
//! in error within 1 s, and a new endpoint connects to a new peer.
//!
//! The peers are this test binary run again (`fault_peer`, which does
//! nothing unless `FAULT_PEER` names its role), speaking over stdin and
//! stdout. Each test prints `fault: ...` lines with the measured
//! detection times (the last completion after the kill).
//!
//! Needs an RDMA device (skips without one, fails then under
//! `FABRIC_VERBS_REQUIRE_DEVICE=1`, as the rxe rig sets): see `common`.

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::{EqEvent, FiAddr, IoVec, Provider, RmaIov, RmaMsg};
use fabric_core::testing::fault::{
    FaultRig, PEER_VAR, Peer, RdmEp, Seen, WITHIN, check_targeted, killing_the_receiver,
    killing_the_sender, poll, report, serve, tell,
};
use fabric_core::testing::pattern;
use fabric_core::*;
use prov_verbs::VerbsProvider;

// Contexts of the MSG run's operations.
const SEND: u64 = 1 << 32;
const READ: u64 = 3 << 32;
const WRITE: u64 = 4 << 32;
const RECV: u64 = 5 << 32;

/// One fault test at a time: each measures a deadline, and a TCG guest has
/// two slow CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn rdm_info() -> Option<Info> {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::TAGGED | Caps::RMA;
    h.addr_format = AddrFormat::SockaddrIn;
    Some(entries(EpType::Rdm, h)?.remove(0))
}

/// Verbs RDM endpoints of `info`.
struct Rig(Info);

impl FaultRig for Rig {
    fn name(&self) -> &str {
        "RDM"
    }

    fn open(&self) -> RdmEp {
        let fabric = VerbsProvider.fabric(&self.0.fabric_attr).unwrap();
        RdmEp::open(fabric, &self.0, &cq_attr())
    }

    fn peer(&self, role: &str) -> Peer {
        Peer::spawn(role)
    }
}

/// RDM: kill the receiver and RMA target, stopped first (its NIC still
/// acks eager sends and serves RMA): what was aimed at it ends within 1 s.
#[test]
fn rdm_killing_the_receiver_fails_what_was_aimed_at_it_within_a_second() {
    let Some(info) = rdm_info() else { return };
    let _serial = serial();
    killing_the_receiver(&Rig(info));
}

/// RDM: kill the sender mid-stream: nothing is left hanging.
#[test]
fn rdm_killing_the_sender_mid_stream_leaves_nothing_hanging() {
    let Some(info) = rdm_info() else { return };
    let _serial = serial();
    killing_the_sender(&Rig(info));
}

/// MSG: the server process of a connection is killed while the client
/// (this process) has sends (the server posts no receive: they wait in
/// RNR retries), receives and an RMA read and write outstanding: the
/// client hears the shutdown, and every operation ends in one
/// completion, sends and receives in error, within 1 s; a new endpoint
/// then connects to a new server and exchanges verified messages.
#[test]
fn msg_killing_the_server_fails_the_connection_within_a_second() {
    let Some(info) = msg_info() else { return };
    let _serial = serial();
    let what = "MSG, server killed";
    let mut peer = Peer::spawn("msg-idle");
    let server = peer.line();
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let c = open_side(fabric.as_ref(), &info);
    let mut tx = Buf::new(c.domain.as_ref(), 4 * 4096);
    let rx = Buf::new(c.domain.as_ref(), 4 * 4096);
    let mut rma = Buf::new(c.domain.as_ref(), 65536);
    c.ep.connect(&server.parse().unwrap(), b"").unwrap();
    let e = wait_eq(c.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Connected { .. }), "{what}: {e:?}");
    let mr: Vec<u64> = peer
        .line()
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(peer.line(), "ready");
    let mut ops = Vec::new();
    let txd = [tx.mr.desc()];
    let rxd = [rx.mr.desc()];
    let rmad = [rma.mr.desc()];
    let (tx_base, rx_base, rma_base) = (tx.addr(), rx.addr(), rma.mem.as_mut_ptr());
    for i in 0..4u64 {
        let riov = [IoVec {
            addr: (rx_base + i * 4096) as *mut u8,
            len: 4096,
        }];
        // SAFETY: the buffers outlive the endpoint's completions (read
        // below, before they are dropped).
        unsafe {
            c.ep.recvmsg(&msg(&riov, &rxd, RECV + i, 0), OpFlags::empty())
        }
        .unwrap();
        ops.push((RECV + i, true));
        let siov = [IoVec {
            addr: (tx_base + i * 4096) as *mut u8,
            len: 4096,
        }];
        // SAFETY: as above.
        unsafe {
            c.ep.sendmsg(&msg(&siov, &txd, SEND + i, 0), OpFlags::empty())
        }
        .unwrap();
        ops.push((SEND + i, true));
    }
    for (i, ctx) in [READ, WRITE].into_iter().enumerate() {
        let iov = [IoVec {
            // SAFETY: within the 64 KiB buffer.
            addr: unsafe { rma_base.add(i * 32768) },
            len: 32768,
        }];
        let remote = [RmaIov {
            addr: mr[1],
            len: 32768,
            key: mr[0],
        }];
        let m = RmaMsg {
            iov: &iov,
            desc: &rmad,
            addr: FiAddr::UNSPEC,
            rma_iov: &remote,
            context: ctx,
            data: 0,
        };
        // SAFETY: as above.
        unsafe {
            if ctx == READ {
                c.ep.readmsg(&m, OpFlags::empty())
            } else {
                c.ep.writemsg(&m, OpFlags::empty())
            }
        }
        .unwrap();
        ops.push((ctx, false));
    }
    let mut seen = Seen::default();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        seen.add(poll(c.cq.as_ref()));
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..4 {
        assert_eq!(seen.count(SEND + i), 0, "{what}: a send completed");
        assert_eq!(seen.count(RECV + i), 0, "{what}: a receive completed");
    }
    let killed = peer.kill();
    // The connection's end is an EQ event (rdma_cm events are progressed
    // by EQ reads, as an application waiting for its completions does).
    let shutdown = std::cell::Cell::new(None);
    let poll_both = || {
        match c.eq.read() {
            Ok(EqEvent::Shutdown { .. }) => shutdown.set(Some(killed.elapsed())),
            Ok(e) => panic!("{what}: unexpected event {e:?}"),
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("{what}: EQ: {e:?}"),
        }
        poll(c.cq.as_ref())
    };
    check_targeted(what, &mut seen, poll_both, &ops, killed);
    let shutdown = shutdown
        .get()
        .unwrap_or_else(|| panic!("{what}: no shutdown event within {WITHIN:?}"));
    report(format_args!(
        "{what}: shutdown event {:.1} ms after the kill",
        shutdown.as_secs_f64() * 1e3
    ));
    // SAFETY: as above.
    let e = unsafe {
        let siov = tx.iov_n(8);
        c.ep.sendmsg(&msg(&siov, &txd, SEND + 9, 0), OpFlags::empty())
    }
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shutdown, "{what}");
    // Every operation ended: the buffers may go, then the endpoint.
    drop((tx, rx, rma));
    drop(c);

    // A new endpoint, a new server.
    let mut peer = Peer::spawn("msg-echo");
    let server = peer.line();
    let c = open_side(fabric.as_ref(), &info);
    c.ep.connect(&server.parse().unwrap(), b"").unwrap();
    let e = wait_eq(c.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Connected { .. }), "{what}: {e:?}");
    peer.line(); // mr
    assert_eq!(peer.line(), "ready");
    let out = pattern(4096, 77);
    let mut tx2 = Buf::new(c.domain.as_ref(), 4096);
    tx2.mem.copy_from_slice(&out);
    let mut rx2 = Buf::new(c.domain.as_ref(), 4096);
    let (riov, siov) = (rx2.iov(), tx2.iov());
    let (rd, sd) = ([rx2.mr.desc()], [tx2.mr.desc()]);
    // SAFETY: the buffers outlive the completions awaited below.
    unsafe {
        c.ep.recvmsg(&msg(&riov, &rd, 1, 0), OpFlags::empty())
            .unwrap();
        c.ep.sendmsg(&msg(&siov, &sd, 2, 0), OpFlags::empty())
            .unwrap();
    }
    let mut seen = Seen::default();
    seen.until_all(|| poll(c.cq.as_ref()), &[1, 2], Instant::now() + T);
    assert!(
        matches!(seen.0.get(&2).map(Vec::as_slice), Some([Ok(_)])),
        "{what}: {:?}",
        seen.0
    );
    assert!(
        matches!(seen.0.get(&1).map(Vec::as_slice), Some([Ok(e)]) if e.len == 4096),
        "{what}: {:?}",
        seen.0
    );
    assert!(rx2.mem == out, "{what}: the echo differs");
    drop((tx2, rx2));
    drop(c);
    drop(peer);
}

/// A peer process (see the module docs); a no-op test unless
/// `FAULT_PEER` is set. Roles: those of `fabric_core::testing::fault::serve`
/// (RDM), and
/// - `msg-idle` (MSG): listens, accepts one connection, exposes a
///   registered region, then waits to be killed, posting no receive;
/// - `msg-echo` (MSG): as `msg-idle`, but sends each message back.
#[test]
fn fault_peer() {
    let Ok(role) = std::env::var(PEER_VAR) else {
        return;
    };
    if role.starts_with("msg-") {
        return msg_peer(&role);
    }
    let rig = Rig(rdm_info().unwrap());
    serve(&role, &rig.open());
}

/// The MSG roles of [`fault_peer`].
fn msg_peer(role: &str) {
    let info = msg_info().unwrap();
    let l = listener(&info);
    tell(format_args!("{}", l.pep.getname().unwrap()));
    let req = wait_eq(l.eq.as_ref()).unwrap();
    let EqEvent::ConnReq { info, .. } = req else {
        panic!("expected a connection request, got {req:?}")
    };
    let s = open_side(l.fabric.as_ref(), &info);
    s.ep.accept(b"").unwrap();
    let e = wait_eq(s.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Connected { .. }), "{e:?}");
    let mut mem = Buf::new(s.domain.as_ref(), 65536);
    tell(format_args!("mr {} {}", mem.mr.key(), mem.addr()));
    let echo = role == "msg-echo";
    let desc = [mem.mr.desc()];
    if echo {
        let iov = mem.iov_n(4096);
        // SAFETY: the buffer lives until the process ends.
        unsafe { s.ep.recvmsg(&msg(&iov, &desc, 1, 0), OpFlags::empty()) }.unwrap();
    }
    tell(format_args!("ready"));
    loop {
        if echo {
            for (ctx, r) in poll(s.cq.as_ref()) {
                if ctx == 1 {
                    let n = r.unwrap().len;
                    let iov = mem.iov_n(n);
                    // SAFETY: as above.
                    unsafe { s.ep.sendmsg(&msg(&iov, &desc, 2, 0), OpFlags::empty()) }.unwrap();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
