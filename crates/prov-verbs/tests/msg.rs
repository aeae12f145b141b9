//! MSG endpoints on a real RDMA device (soft-RoCE in the rig): connection
//! management, messages, RMA, atomics, errors. Skips without a device (see
//! `common`).

#![allow(
    clippy::unwrap_used,
    clippy::field_reassign_with_default,
    clippy::result_large_err
)]

mod common;

use std::time::Duration;

use common::*;
use fabric_core::objects::{
    AtomicMsg, AtomicOp, CompletionFlags, CqEntry, Datatype, EqEvent, FiAddr, IoVec, RmaIov, RmaMsg,
};
use fabric_core::*;

#[test]
fn getinfo_lists_the_device() {
    let Some(list) = entries(EpType::Unspec, msg_hints()) else {
        return;
    };
    for i in &list {
        eprintln!(
            "{} {} {} {:?}",
            i.ep_attr.ep_type,
            i.domain_attr.name.as_deref().unwrap_or("?"),
            i.fabric_attr.name.as_deref().unwrap_or("?"),
            i.src_addr.as_ref().map(ToString::to_string)
        );
    }
    assert!(list.iter().any(|i| i.ep_attr.ep_type == EpType::Msg));
    assert!(
        list.iter()
            .all(|i| i.tx_attr.size > 0 && i.ep_attr.max_msg_size > 0)
    );
}

#[test]
fn connect_accept_send_recv_and_shutdown() {
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let (server, client) = connected(&l);
    let mut sbuf = Buf::new(server.domain.as_ref(), 4096);
    let mut cbuf = Buf::new(client.domain.as_ref(), 4096);

    // Client -> server, registered, 4 KiB.
    let siov = sbuf.iov();
    let sdesc = [sbuf.mr.desc()];
    // SAFETY: buffers outlive their completions.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&siov, &sdesc, 11, 0), OpFlags::empty())
    }
    .unwrap();
    cbuf.mem
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = i as u8);
    let ciov = cbuf.iov();
    let cdesc = [cbuf.mr.desc()];
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        client
            .ep
            .sendmsg(&msg(&ciov, &cdesc, 22, 0), OpFlags::empty())
    }
    .unwrap();
    let c = wait_cq(client.cq.as_ref()).unwrap();
    assert_eq!(c.context, 22);
    assert!(c.flags.contains(CompletionFlags::SEND));
    let s = wait_cq(server.cq.as_ref()).unwrap();
    assert_eq!((s.context, s.len), (11, 4096));
    assert!(
        s.flags
            .contains(CompletionFlags::RECV | CompletionFlags::MSG)
    );
    assert_eq!(sbuf.mem, cbuf.mem);

    // Senddata: immediate data lands in the target's CQ.
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&siov, &sdesc, 12, 0), OpFlags::empty())
    }
    .unwrap();
    let ciov8 = cbuf.iov_n(8);
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        client
            .ep
            .sendmsg(&msg(&ciov8, &cdesc, 23, 0xfeed), OpFlags::REMOTE_CQ_DATA)
    }
    .unwrap();
    wait_cq(client.cq.as_ref()).unwrap();
    let s = wait_cq(server.cq.as_ref()).unwrap();
    assert_eq!((s.context, s.len, s.data), (12, 8, 0xfeed));
    assert!(s.flags.contains(CompletionFlags::REMOTE_CQ_DATA));

    // Inject (no descriptor, no completion), server -> client.
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        client
            .ep
            .recvmsg(&msg(&ciov, &cdesc, 31, 0), OpFlags::empty())
    }
    .unwrap();
    server
        .ep
        .inject(b"injected!", FiAddr::UNSPEC, None)
        .unwrap();
    let c = wait_cq(client.cq.as_ref()).unwrap();
    assert_eq!((c.context, c.len), (31, 9));
    assert_eq!(&cbuf.mem[..9], b"injected!");

    // A small send without a descriptor is staged.
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&siov, &sdesc, 13, 0), OpFlags::empty())
    }
    .unwrap();
    let mut small = *b"no descriptor";
    let small_iov = [fabric_core::objects::IoVec {
        addr: small.as_mut_ptr(),
        len: small.len(),
    }];
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        client
            .ep
            .sendmsg(&msg(&small_iov, &[], 24, 0), OpFlags::empty())
    }
    .unwrap();
    wait_cq(client.cq.as_ref()).unwrap();
    let s = wait_cq(server.cq.as_ref()).unwrap();
    assert_eq!(&sbuf.mem[..s.len], b"no descriptor");

    // Shutdown: both sides hear it; a pending receive fails with the verbs
    // status text.
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&siov, &sdesc, 14, 0), OpFlags::empty())
    }
    .unwrap();
    client.ep.shutdown().unwrap();
    let e = wait_eq(client.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Shutdown { .. }), "{e:?}");
    let e = wait_eq(server.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Shutdown { .. }), "{e:?}");
    let err = wait_cq(server.cq.as_ref()).unwrap_err();
    assert_eq!(err.entry.context, 14);
    assert_eq!(err.err, ErrorKind::Canceled);
    assert!(err.err_text.contains("Flush"), "{}", err.err_text);
    // After shutdown, operations fail.
    // SAFETY: the test keeps the buffers alive until their completions.
    let e = unsafe {
        client
            .ep
            .sendmsg(&msg(&ciov8, &cdesc, 25, 0), OpFlags::empty())
    }
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shutdown);
}

#[test]
fn reject_carries_private_data() {
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let client = open_side(l.fabric.as_ref(), &l.info);
    client
        .ep
        .connect(&l.pep.getname().unwrap(), b"let me in")
        .unwrap();
    let EqEvent::ConnReq { info, data, .. } = wait_eq(l.eq.as_ref()).unwrap() else {
        panic!("expected a connection request")
    };
    assert_eq!(data, b"let me in");
    l.pep.reject(info.handle.unwrap(), b"go away").unwrap();
    let err = wait_eq(client.eq.as_ref()).unwrap_err();
    assert_eq!(err.err, ErrorKind::ConnRefused);
    assert_eq!(err.data, b"go away");
    // A second reject of the same handle: it is gone.
    assert_eq!(
        l.pep.reject(info.handle.unwrap(), b"").unwrap_err().kind(),
        ErrorKind::NoEnt
    );
}

#[test]
fn connecting_to_nobody_fails() {
    let Some(info) = msg_info() else { return };
    let fabric = prov_verbs::VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let client = open_side(fabric.as_ref(), &info);
    let mut dest = info.src_addr.clone().unwrap().socket_addr().unwrap();
    dest.set_port(9); // nobody listens there
    client.ep.connect(&Address::from(dest), b"").unwrap();
    let err = wait_eq(client.eq.as_ref()).unwrap_err();
    assert!(
        matches!(err.err, ErrorKind::ConnRefused | ErrorKind::HostUnreach),
        "{err:?}"
    );
    // Private data beyond the limit is refused up front.
    let other = open_side(fabric.as_ref(), &info);
    assert_eq!(
        other
            .ep
            .connect(&Address::from(dest), &[0u8; 55])
            .unwrap_err()
            .kind(),
        ErrorKind::Inval
    );
}

#[test]
fn rma_write_read_writedata_and_bad_key() {
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let (server, client) = connected(&l);
    let target = Buf::new(server.domain.as_ref(), 1 << 16);
    let mut local = Buf::new(client.domain.as_ref(), 1 << 16);
    local
        .mem
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i * 7) as u8);
    let liov = local.iov();
    let ldesc = [local.mr.desc()];
    let remote = [RmaIov {
        addr: target.addr(),
        len: 1 << 16,
        key: target.mr.key(),
    }];
    let wmsg = RmaMsg {
        iov: &liov,
        desc: &ldesc,
        addr: FiAddr::UNSPEC,
        rma_iov: &remote,
        context: 41,
        data: 0,
    };
    // SAFETY: buffers outlive their completions.
    unsafe { client.ep.writemsg(&wmsg, OpFlags::empty()) }.unwrap();
    let c = wait_cq(client.cq.as_ref()).unwrap();
    assert_eq!(c.context, 41);
    assert!(
        c.flags
            .contains(CompletionFlags::RMA | CompletionFlags::WRITE)
    );
    assert_eq!(target.mem, local.mem);

    // Read it back into a cleared buffer.
    local.mem.fill(0);
    let rmsg = RmaMsg {
        context: 42,
        ..wmsg
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe { client.ep.readmsg(&rmsg, OpFlags::empty()) }.unwrap();
    let c = wait_cq(client.cq.as_ref()).unwrap();
    assert_eq!(c.context, 42);
    assert!(c.flags.contains(CompletionFlags::READ));
    assert_eq!(target.mem, local.mem);

    // Writedata consumes a posted receive at the target (FI_RX_CQ_DATA).
    let mut rbuf = Buf::new(server.domain.as_ref(), 64);
    let riov = rbuf.iov();
    let rdesc = [rbuf.mr.desc()];
    let m = fabric_core::objects::Msg {
        iov: &riov,
        desc: &rdesc,
        addr: FiAddr::UNSPEC,
        tag: 0,
        ignore: 0,
        context: 51,
        data: 0,
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe { server.ep.recvmsg(&m, OpFlags::empty()) }.unwrap();
    let liov8 = local.iov_n(8);
    let remote8 = [RmaIov {
        len: 8,
        ..remote[0]
    }];
    let dmsg = RmaMsg {
        iov: &liov8,
        rma_iov: &remote8,
        context: 43,
        data: 0x1234,
        ..wmsg
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe { client.ep.writemsg(&dmsg, OpFlags::REMOTE_CQ_DATA) }.unwrap();
    wait_cq(client.cq.as_ref()).unwrap();
    let s = wait_cq(server.cq.as_ref()).unwrap();
    assert_eq!((s.context, s.data), (51, 0x1234));
    assert!(
        s.flags
            .contains(CompletionFlags::REMOTE_WRITE | CompletionFlags::REMOTE_CQ_DATA)
    );

    // A wrong key: a remote access error completion; nothing written.
    let before = target.mem.clone();
    let bad = [RmaIov {
        key: target.mr.key() ^ 0x5a5a,
        ..remote[0]
    }];
    let bmsg = RmaMsg {
        rma_iov: &bad,
        context: 44,
        ..wmsg
    };
    local.mem.fill(0xee);
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe { client.ep.writemsg(&bmsg, OpFlags::empty()) }.unwrap();
    let err = wait_cq(client.cq.as_ref()).unwrap_err();
    assert_eq!(err.entry.context, 44);
    assert_eq!(err.err, ErrorKind::Access, "{err:?}");
    assert!(err.err_text.contains("verbs:"), "{}", err.err_text);
    assert_eq!(target.mem, before);
}

#[test]
fn atomics_fetch_add_and_compare_swap() {
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let (server, client) = connected(&l);
    let target = Buf::new(server.domain.as_ref(), 64);
    let remote = [RmaIov {
        addr: target.addr(),
        len: 1,
        key: target.mr.key(),
    }];
    let mut operand = 5u64;
    let op_ptr: *mut u64 = &raw mut operand;
    let mut result = 0u64;
    let op_iov = [fabric_core::objects::IoVec {
        addr: op_ptr.cast(),
        len: 8,
    }];
    let res_iov = [fabric_core::objects::IoVec {
        addr: (&raw mut result).cast(),
        len: 8,
    }];
    assert_eq!(
        client
            .ep
            .atomic_valid(Datatype::Uint64, AtomicOp::Sum, true, false)
            .unwrap(),
        1
    );
    assert!(
        client
            .ep
            .atomic_valid(Datatype::Uint32, AtomicOp::Max, false, false)
            .is_err()
    );
    let add = AtomicMsg {
        iov: &op_iov,
        desc: &[],
        addr: FiAddr::UNSPEC,
        rma_iov: &remote,
        datatype: Datatype::Uint64,
        op: AtomicOp::Sum,
        result: &res_iov,
        compare: &[],
        context: 61,
        data: 0,
    };
    // SAFETY: operands and result outlive the completions.
    unsafe { client.ep.atomicmsg(&add, OpFlags::empty()) }.unwrap();
    let c = wait_cq(client.cq.as_ref()).unwrap();
    assert_eq!(c.context, 61);
    assert!(c.flags.contains(CompletionFlags::ATOMIC));
    assert_eq!(result, 0);
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe {
        client
            .ep
            .atomicmsg(&AtomicMsg { context: 62, ..add }, OpFlags::empty())
    }
    .unwrap();
    wait_cq(client.cq.as_ref()).unwrap();
    assert_eq!(result, 5);
    let word = || u64::from_ne_bytes(target.mem[..8].try_into().unwrap());
    assert_eq!(word(), 10);
    // Compare-swap: 10 -> 99 succeeds, then 10 -> 7 fails (old value 99).
    let mut cmp = 10u64;
    // SAFETY: `op_ptr` points to `operand`, alive for the whole test.
    unsafe { op_ptr.write(99) };
    let cmp_iov = [fabric_core::objects::IoVec {
        addr: (&raw mut cmp).cast(),
        len: 8,
    }];
    let cas = AtomicMsg {
        op: AtomicOp::Cswap,
        compare: &cmp_iov,
        context: 63,
        ..add
    };
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe { client.ep.atomicmsg(&cas, OpFlags::empty()) }.unwrap();
    wait_cq(client.cq.as_ref()).unwrap();
    assert_eq!((result, word()), (10, 99));
    // SAFETY: as above.
    unsafe { op_ptr.write(7) };
    // SAFETY: the test keeps the buffers alive until their completions.
    unsafe { client.ep.atomicmsg(&cas, OpFlags::empty()) }.unwrap();
    wait_cq(client.cq.as_ref()).unwrap();
    assert_eq!((result, word()), (99, 99));
}

#[test]
fn full_receive_queue_is_again() {
    let Some(mut info) = msg_info() else { return };
    info.rx_attr.size = 4;
    info.tx_attr.size = 4;
    let l = listener(&info);
    let (server, _client) = connected(&l);
    let mut b = Buf::new(server.domain.as_ref(), 64);
    let iov = b.iov();
    let desc = [b.mr.desc()];
    let mut n = 0;
    loop {
        // SAFETY: the buffer outlives the endpoint.
        match unsafe { server.ep.recvmsg(&msg(&iov, &desc, n, 0), OpFlags::empty()) } {
            Ok(()) => n += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Again);
                break;
            }
        }
        assert!(n < 10_000, "the receive queue never filled");
    }
    assert!(n >= 4, "only {n} receives fit");
    let mut out = [CqEntry::default(); 4];
    assert_eq!(
        server
            .cq
            .sread(&mut out, Some(Duration::from_millis(10)))
            .unwrap_err()
            .kind(),
        ErrorKind::Again
    );
}

#[test]
fn a_peer_that_disappears_ends_the_connection() {
    let Some(info) = msg_info() else { return };
    let l = listener(&info);
    let (server, client) = connected(&l);
    let mut cbuf = Buf::new(client.domain.as_ref(), 64);
    let ciov = cbuf.iov();
    let cdesc = [cbuf.mr.desc()];
    // SAFETY: the buffer outlives its (error) completion, read below.
    unsafe {
        client
            .ep
            .recvmsg(&msg(&ciov, &cdesc, 71, 0), OpFlags::empty())
    }
    .unwrap();
    // The server goes away without a shutdown (its id is destroyed).
    drop(server);
    let e = wait_eq(client.eq.as_ref()).unwrap();
    assert!(matches!(e, EqEvent::Shutdown { .. }), "{e:?}");
    let err = wait_cq(client.cq.as_ref()).unwrap_err();
    assert_eq!((err.entry.context, err.err), (71, ErrorKind::Canceled));
    // SAFETY: as above.
    let e = unsafe {
        client
            .ep
            .sendmsg(&msg(&ciov, &cdesc, 72, 0), OpFlags::empty())
    }
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shutdown);
}

/// A MSG endpoint is enabled once: a second `fi_enable` fails with
/// `OpBadState` (as RDM's, which the semantics suite checks).
#[test]
fn a_second_enable_is_refused() {
    let Some(info) = msg_info() else { return };
    let fabric = prov_verbs::VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let side = open_side(fabric.as_ref(), &info);
    assert_eq!(side.ep.enable().unwrap_err().kind(), ErrorKind::OpBadState);
}

/// A pattern that shows misplaced bytes: different per message and offset.
fn pattern(k: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(k.wrapping_mul(101)))
        .collect()
}

/// FI_MULTI_RECV on MSG: messages sent back to back are carved one after
/// another out of one registered buffer (each completion points at its
/// message); the one that leaves less than FI_OPT_MIN_MULTI_RECV releases
/// it (its completion alone carries FI_MULTI_RECV) and nothing past the
/// last message is written; a receive posted behind the buffer is held
/// until then, takes the next message, and can be cancelled meanwhile
/// (`Canceled` once, then `NoEnt`); a receive in the NIC's queue cannot
/// be cancelled (`OpNotSupp`) and still takes its message.
#[test]
fn multi_recv_carves_a_buffer_and_held_receives_cancel() {
    let Some(info) = msg_info() else { return };
    assert!(info.caps.contains(Caps::MULTI_RECV));
    let mut hints = msg_hints();
    hints.rx_attr.op_flags = OpFlags::MULTI_RECV;
    assert!(
        entries(EpType::Msg, hints).is_some(),
        "MSG entries accept FI_MULTI_RECV as a receive flag"
    );
    let l = listener(&info);
    let (server, client) = connected(&l);
    server.ep.set_min_multi_recv(1000).unwrap();
    assert_eq!(server.ep.min_multi_recv().unwrap(), 1000);
    let mut multi = Buf::new(server.domain.as_ref(), 4096);
    multi.mem.fill(0xEE);
    let miov = multi.iov();
    let mdesc = [multi.mr.desc()];
    // SAFETY: the buffers outlive their completions, read below.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&miov, &mdesc, 77, 0), OpFlags::MULTI_RECV)
    }
    .unwrap();
    let mut after = Buf::new(server.domain.as_ref(), 256);
    let aiov = after.iov();
    let adesc = [after.mr.desc()];
    // Held behind the multi-receive buffer: cancellable.
    // SAFETY: as above.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&aiov, &adesc, 79, 0), OpFlags::empty())
    }
    .unwrap();
    // SAFETY: as above.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&aiov, &adesc, 78, 0), OpFlags::empty())
    }
    .unwrap();
    server.ep.cancel(79).unwrap();
    let e = wait_cq(server.cq.as_ref()).unwrap_err();
    assert_eq!((e.entry.context, e.err), (79, ErrorKind::Canceled));
    assert_eq!(server.ep.cancel(79).unwrap_err().kind(), ErrorKind::NoEnt);

    // 100 + 300 + 1500 + 1000 leave 1196; 300 more leave 896 < 1000.
    let sizes = [100usize, 300, 1500, 1000, 300, 50];
    let mut src = Buf::new(client.domain.as_ref(), 8192);
    let mut offs = Vec::new();
    let mut at = 0;
    for (k, &n) in sizes.iter().enumerate() {
        src.mem[at..at + n].copy_from_slice(&pattern(k as u8, n));
        offs.push(at);
        at += n;
    }
    let sdesc = [src.mr.desc()];
    let base = src.mem.as_mut_ptr();
    for (k, (&n, &o)) in sizes.iter().zip(&offs).enumerate() {
        let piece = [IoVec {
            addr: base.wrapping_add(o),
            len: n,
        }];
        // SAFETY: `src` outlives the sends, completed below.
        unsafe {
            client
                .ep
                .sendmsg(&msg(&piece, &sdesc, 100 + k as u64, 0), OpFlags::empty())
        }
        .unwrap();
    }
    let mut off = 0usize;
    for (k, &n) in sizes.iter().enumerate().take(5) {
        let c = wait_cq(server.cq.as_ref()).unwrap();
        assert_eq!((c.context, c.len), (77, n), "message {k}");
        assert_eq!(c.buf, multi.addr() + off as u64, "message {k}'s place");
        assert!(
            c.flags
                .contains(CompletionFlags::RECV | CompletionFlags::MSG)
        );
        assert_eq!(
            c.flags.contains(CompletionFlags::MULTI_RECV),
            k == 4,
            "message {k}: FI_MULTI_RECV"
        );
        assert_eq!(
            &multi.mem[off..off + n],
            &pattern(k as u8, n)[..],
            "message {k}"
        );
        off += n;
    }
    let c = wait_cq(server.cq.as_ref()).unwrap();
    assert_eq!((c.context, c.len), (78, 50), "the receive held behind");
    assert_eq!(&after.mem[..50], &pattern(5, 50)[..]);
    assert!(
        multi.mem[off..].iter().all(|&b| b == 0xEE),
        "bytes past the last message written"
    );
    for k in 0..sizes.len() {
        assert_eq!(wait_cq(client.cq.as_ref()).unwrap().context, 100 + k as u64);
    }

    // A receive in the NIC's queue: not cancellable, still posted.
    // SAFETY: `after` outlives the receive, completed below.
    unsafe {
        server
            .ep
            .recvmsg(&msg(&aiov, &adesc, 80, 0), OpFlags::empty())
    }
    .unwrap();
    let e = server.ep.cancel(80).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{e}");
    client
        .ep
        .inject(b"still posted", FiAddr::UNSPEC, None)
        .unwrap();
    let c = wait_cq(server.cq.as_ref()).unwrap();
    assert_eq!((c.context, c.len), (80, 12));
    assert_eq!(&after.mem[..12], b"still posted");
}
