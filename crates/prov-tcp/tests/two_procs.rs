//! Two processes: the test binary runs itself again as the peer (the
//! `peer_process` test, which does nothing unless `PROV_TCP_PEER` names a
//! role). The two exchange endpoint names over the child's stdin / stdout
//! (lines starting with `NAME=`), then talk through the provider: messages,
//! tagged messages, RMA and atomics across processes, and a peer killed
//! with SIGKILL in the middle of transfers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fabric_core::objects::{
    AtomicMsg, AtomicOp, CqEntry, Datatype, FiAddr, IoVec, Msg, RmaIov, RmaMsg,
};
use fabric_core::*;

const ROLE: &str = "PROV_TCP_PEER";
/// The address the peer's endpoint uses (default 127.0.0.1).
const NODE: &str = "PROV_TCP_NODE";
/// The key of the peer's registered buffer.
const KEY: u64 = 77;
/// Its size.
const REGION: usize = 64 << 20;

fn msg(iov: &[IoVec], addr: FiAddr, tag: u64, ignore: u64, ctx: u64) -> Msg<'_> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore,
        context: ctx,
        data: 0,
    }
}

/// The peer side, in the child process.
#[test]
fn peer_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let node = std::env::var(NODE).unwrap_or_else(|_| "127.0.0.1".into());
    let me = side(&rdm_info_with(
        Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC,
        MrMode::empty(),
        &node,
    ));
    let mut region = vec![0u8; REGION];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let (_mr, parent) = unsafe { peer_start(me.domain.as_ref(), me.ep.as_ref(), &mut region, KEY) };
    let parent = insert(&me, &parent);
    match role.as_str() {
        // Echo every message back (tagged ones with their tag) until
        // "quit"; RMA and atomics land in `region` meanwhile.
        "echo" => {
            let mut bufs = [vec![0u8; 1 << 20], vec![0u8; 1 << 20]];
            let post = |i: usize, b: &mut Vec<u8>| {
                let v = iov(b);
                // SAFETY: the buffers live until the process exits.
                unsafe {
                    if i == 0 {
                        me.ep
                            .recvmsg(&msg(&v, FiAddr::UNSPEC, 0, 0, 0), OpFlags::empty())
                    } else {
                        me.ep
                            .trecvmsg(&msg(&v, FiAddr::UNSPEC, 0, u64::MAX, 1), OpFlags::empty())
                    }
                }
                .unwrap();
            };
            for (i, b) in bufs.iter_mut().enumerate() {
                post(i, b);
            }
            loop {
                let mut e = [CqEntry::default()];
                match me.cq.sread(&mut e, Some(Duration::from_millis(100))) {
                    Ok(_) => {}
                    Err(err) if err.kind() == ErrorKind::Again => continue,
                    Err(err) => panic!("peer: {err}"),
                }
                let e = e[0];
                if e.context > 1 {
                    continue; // an echo went out
                }
                let i = e.context as usize;
                let data = bufs[i][..e.len].to_vec();
                if data == b"quit" {
                    break;
                }
                let mut copy = data.clone();
                let v = iov(&mut copy);
                // SAFETY: `copy` is leaked below until its completion.
                unsafe {
                    if i == 0 {
                        me.ep.sendmsg(&msg(&v, parent, 0, 0, 2), OpFlags::empty())
                    } else {
                        me.ep
                            .tsendmsg(&msg(&v, parent, e.tag, 0, 3), OpFlags::empty())
                    }
                }
                .unwrap();
                std::mem::forget(copy);
                post(i, &mut bufs[i]);
            }
            // Let the last frames out.
            settle(&[me.cq.as_ref()], 50);
        }
        // Progress forever, never posting a receive.
        "sink" => loop {
            let mut e = [CqEntry::default()];
            let _ = me.cq.sread(&mut e, Some(Duration::from_millis(100)));
        },
        other => panic!("unknown role {other}"),
    }
}

fn spawn(role: &str, me: &Side) -> PeerProcess {
    spawn_in(role, me, None)
}

/// Starts the peer, inside network namespace `ns` with address `node`
/// when given.
fn spawn_in(role: &str, me: &Side, ns: Option<(&str, &str)>) -> PeerProcess {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match ns {
        Some((ns, node)) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&exe).env(NODE, node);
            c
        }
        None => Command::new(&exe),
    };
    cmd.env(ROLE, role);
    PeerProcess::spawn(cmd, &me.ep.getname().unwrap())
}

#[test]
fn messages_rma_and_atomics_across_processes() {
    let me = side(&rdm_info());
    let mut peer = spawn("echo", &me);
    let p = insert(&me, &peer.name);
    // Messages of several sizes, eager and rendezvous, untagged and tagged.
    for (i, size) in [1usize, 4096, 40_000, 1 << 20].into_iter().enumerate() {
        for tagged in [false, true] {
            let mut out: Vec<u8> = (0..size).map(|k| (k * 7 + i) as u8).collect();
            let mut back = vec![0u8; size];
            let biov = iov(&mut back);
            let oiov = iov(&mut out);
            let tag = 0x100 + i as u64;
            // SAFETY: the buffers outlive the completions read below.
            unsafe {
                if tagged {
                    me.ep
                        .trecvmsg(&msg(&biov, FiAddr::UNSPEC, tag, 0, 10), OpFlags::empty())
                        .unwrap();
                    me.ep
                        .tsendmsg(&msg(&oiov, p, tag, 0, 11), OpFlags::empty())
                        .unwrap();
                } else {
                    me.ep
                        .recvmsg(&msg(&biov, FiAddr::UNSPEC, 0, 0, 10), OpFlags::empty())
                        .unwrap();
                    me.ep
                        .sendmsg(&msg(&oiov, p, 0, 0, 11), OpFlags::empty())
                        .unwrap();
                }
            }
            let mut got = [false; 2];
            while got != [true, true] {
                let (e, src) = next_from(me.cq.as_ref(), &[]).unwrap();
                got[(e.context - 10) as usize] = true;
                if e.context == 10 {
                    assert_eq!((e.len, src), (size, p));
                    if tagged {
                        assert_eq!(e.tag, tag);
                    }
                }
            }
            assert!(back == out, "size {size}, tagged {tagged}");
        }
    }
    // RMA: write a pattern at an offset, read it back.
    let n = 3 << 20;
    let mut pat: Vec<u8> = (0..n).map(|k| (k % 241) as u8).collect();
    let piov = iov(&mut pat);
    let remote = [RmaIov {
        addr: 4096,
        len: n,
        key: KEY,
    }];
    // SAFETY: pat outlives the completion.
    unsafe {
        me.ep
            .writemsg(
                &RmaMsg {
                    iov: &piov,
                    desc: &[],
                    addr: p,
                    rma_iov: &remote,
                    context: 20,
                    data: 0,
                },
                OpFlags::empty(),
            )
            .unwrap()
    };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 20);
    let mut back = vec![0u8; n];
    let biov = iov(&mut back);
    // SAFETY: back outlives the completion.
    unsafe {
        me.ep
            .readmsg(
                &RmaMsg {
                    iov: &biov,
                    desc: &[],
                    addr: p,
                    rma_iov: &remote,
                    context: 21,
                    data: 0,
                },
                OpFlags::empty(),
            )
            .unwrap()
    };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 21);
    assert!(back == pat);
    // A bad key across processes.
    let bad = [RmaIov {
        addr: 0,
        len: 8,
        key: KEY + 1,
    }];
    // SAFETY: back outlives the completion.
    unsafe {
        me.ep
            .readmsg(
                &RmaMsg {
                    iov: &biov[..],
                    desc: &[],
                    addr: p,
                    rma_iov: &bad,
                    context: 22,
                    data: 0,
                },
                OpFlags::empty(),
            )
            .unwrap_err()
    };
    // Atomics: a fetching sum and a compare-swap on the first u64.
    let mut one = 5u64.to_le_bytes();
    let mut old = [0u8; 8];
    let mut cmp = 5u64.to_le_bytes();
    let mut new = 9u64.to_le_bytes();
    let oiov = iov(&mut one);
    let riov = iov(&mut old);
    let at0 = [RmaIov {
        addr: 0,
        len: 1,
        key: KEY,
    }];
    let base = AtomicMsg {
        iov: &oiov,
        desc: &[],
        addr: p,
        rma_iov: &at0,
        datatype: Datatype::Uint64,
        op: AtomicOp::Sum,
        result: &riov,
        compare: &[],
        context: 30,
        data: 0,
    };
    // SAFETY: the buffers outlive the completions.
    unsafe { me.ep.atomicmsg(&base, OpFlags::empty()).unwrap() };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 30);
    assert_eq!(u64::from_le_bytes(old), 0);
    let niov = iov(&mut new);
    let ciov = iov(&mut cmp);
    let riov = iov(&mut old);
    let cas = AtomicMsg {
        iov: &niov,
        compare: &ciov,
        result: &riov,
        op: AtomicOp::Cswap,
        context: 31,
        ..base
    };
    // SAFETY: as above.
    unsafe { me.ep.atomicmsg(&cas, OpFlags::empty()).unwrap() };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 31);
    assert_eq!(u64::from_le_bytes(old), 5);
    let mut now = [0u8; 8];
    let niov = iov(&mut now);
    let read = AtomicMsg {
        iov: &[],
        result: &niov,
        op: AtomicOp::AtomicRead,
        context: 32,
        ..base
    };
    // SAFETY: as above.
    unsafe { me.ep.atomicmsg(&read, OpFlags::empty()).unwrap() };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 32);
    assert_eq!(u64::from_le_bytes(now), 9);
    // Done.
    me.ep.inject(b"quit", p, None).unwrap();
    settle(&[me.cq.as_ref()], 20);
    let status = wait_exit(&mut peer.child, Duration::from_secs(30));
    assert!(status.success(), "peer: {status}");
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the peer process did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_killed_peer_fails_pending_operations() {
    let me = side(&rdm_info());
    let mut peer = spawn("sink", &me);
    let p = insert(&me, &peer.name);
    // A large read in flight (the peer streams 64 MiB), plus rendezvous
    // sends the peer never takes.
    let mut back = vec![0u8; REGION];
    let biov = iov(&mut back);
    let remote = [RmaIov {
        addr: 0,
        len: REGION,
        key: KEY,
    }];
    let mut big = vec![1u8; 4 << 20];
    let siov = iov(&mut big);
    // SAFETY: the buffers outlive the completions read below.
    unsafe {
        for i in 0..4 {
            me.ep
                .sendmsg(&msg(&siov, p, 0, 0, 100 + i), OpFlags::empty())
                .unwrap();
        }
        me.ep
            .readmsg(
                &RmaMsg {
                    iov: &biov,
                    desc: &[],
                    addr: p,
                    rma_iov: &remote,
                    context: 200,
                    data: 0,
                },
                OpFlags::empty(),
            )
            .unwrap();
    }
    // Let the transfer start, then kill the peer.
    settle(&[me.cq.as_ref()], 20);
    peer.child.kill().unwrap();
    let _ = peer.child.wait();
    let mut errors = 0;
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < 5 {
        let mut e = [CqEntry::default()];
        match me.cq.read(&mut e) {
            Ok(_) => {
                // Only the read may have finished before the kill.
                assert_eq!(e[0].context, 200);
                done += 1;
            }
            Err(err) if err.kind() == ErrorKind::Avail => {
                let ee = me.cq.readerr().unwrap();
                assert!(
                    matches!(
                        ee.err,
                        ErrorKind::ConnReset | ErrorKind::Io | ErrorKind::ConnAborted
                    ),
                    "{ee:?}"
                );
                errors += 1;
                done += 1;
            }
            Err(err) => assert_eq!(err.kind(), ErrorKind::Again),
        }
        assert!(
            Instant::now() < deadline,
            "{done} of 5 operations finished 60 s after the peer died"
        );
    }
    assert!(errors >= 4, "the sends fail ({errors} errors)");
    // The endpoint still works: a new peer can be reached.
    let other = side(&rdm_info());
    let o = insert(&me, &other.ep.getname().unwrap());
    let mut r = vec![0u8; 4];
    let riov = iov(&mut r);
    // SAFETY: r outlives the completion.
    unsafe {
        other
            .ep
            .recvmsg(&msg(&riov, FiAddr::UNSPEC, 0, 0, 1), OpFlags::empty())
            .unwrap()
    };
    me.ep.inject(b"next", o, None).unwrap();
    assert_eq!(
        next(other.cq.as_ref(), &[me.cq.as_ref()]).unwrap().context,
        1
    );
}

/// A network namespace joined to this one by a veth pair; removed on drop.
struct Netns {
    name: String,
    link: String,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Creates the namespace and the link, or says why it cannot.
fn netns() -> Result<(Netns, String, String), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    if !ip(&["-V"]) {
        return Err("the `ip` command (iproute2) is missing".into());
    }
    let id = std::process::id() % 100_000;
    let ns = Netns {
        name: format!("provtcp{id}"),
        link: format!("pt{id}a"),
    };
    let peer_link = format!("pt{id}b");
    let net = id % 250 + 1;
    let host = format!("10.251.{net}.1");
    let inside = format!("10.251.{net}.2");
    let steps: Vec<Vec<String>> = vec![
        vec!["netns".into(), "add".into(), ns.name.clone()],
        vec![
            "link".into(),
            "add".into(),
            ns.link.clone(),
            "type".into(),
            "veth".into(),
            "peer".into(),
            "name".into(),
            peer_link.clone(),
        ],
        vec![
            "link".into(),
            "set".into(),
            peer_link.clone(),
            "netns".into(),
            ns.name.clone(),
        ],
        vec![
            "addr".into(),
            "add".into(),
            format!("{host}/24"),
            "dev".into(),
            ns.link.clone(),
        ],
        vec!["link".into(), "set".into(), ns.link.clone(), "up".into()],
        vec![
            "-n".into(),
            ns.name.clone(),
            "addr".into(),
            "add".into(),
            format!("{inside}/24"),
            "dev".into(),
            peer_link.clone(),
        ],
        vec![
            "-n".into(),
            ns.name.clone(),
            "link".into(),
            "set".into(),
            peer_link.clone(),
            "up".into(),
        ],
        vec![
            "-n".into(),
            ns.name.clone(),
            "link".into(),
            "set".into(),
            "lo".into(),
            "up".into(),
        ],
    ];
    for step in &steps {
        let args: Vec<&str> = step.iter().map(String::as_str).collect();
        if !ip(&args) {
            return Err(format!("`ip {}` failed", step.join(" ")));
        }
    }
    Ok((ns, host, inside))
}

#[test]
fn rdm_across_network_namespaces() {
    let (ns, host, inside) = match netns() {
        Ok(x) => x,
        Err(why) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "rdm_across_network_namespaces cannot run in CI: {why} (needs root and iproute2)"
            );
            println!("SKIPPED rdm_across_network_namespaces: {why} (needs root and iproute2)");
            return;
        }
    };
    // The veth address takes a moment to leave the tentative state.
    let deadline = Instant::now() + Duration::from_secs(10);
    let info = loop {
        let mut h = fabric_core::Info::default();
        h.caps = Caps::MSG | Caps::TAGGED | Caps::RMA;
        h.ep_attr.ep_type = EpType::Rdm;
        let req = fabric_core::matching::Request {
            node: Some(&host),
            flags: GetinfoFlags::SOURCE,
            hints: Some(&h),
            ..fabric_core::matching::Request::new(Version::CURRENT)
        };
        match fabric_core::objects::Provider::getinfo(&prov_tcp::TcpProvider, &req) {
            Ok(mut l) => break l.remove(0),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("no tcp interface for {host}: {e}"),
        }
    };
    assert_ne!(info.domain_attr.name.as_deref(), Some("lo"));
    let me = side(&info);
    let mut peer = spawn_in("echo", &me, Some((&ns.name, &inside)));
    let p = insert(&me, &peer.name);
    assert_eq!(
        peer.name.socket_addr().unwrap().ip().to_string(),
        inside,
        "the peer lives at the namespace's address"
    );
    for size in [64usize, 100_000] {
        let mut out: Vec<u8> = (0..size).map(|k| (k % 199) as u8).collect();
        let mut back = vec![0u8; size];
        let biov = iov(&mut back);
        let oiov = iov(&mut out);
        // SAFETY: the buffers outlive the completions read below.
        unsafe {
            me.ep
                .recvmsg(&msg(&biov, FiAddr::UNSPEC, 0, 0, 10), OpFlags::empty())
                .unwrap();
            me.ep
                .sendmsg(&msg(&oiov, p, 0, 0, 11), OpFlags::empty())
                .unwrap();
        }
        let mut got = [false; 2];
        while got != [true, true] {
            let (e, src) = next_from(me.cq.as_ref(), &[]).unwrap();
            got[(e.context - 10) as usize] = true;
            if e.context == 10 {
                assert_eq!((e.len, src), (size, p));
            }
        }
        assert!(back == out);
    }
    let mut pat = vec![0x5au8; 1 << 20];
    let piov = iov(&mut pat);
    let remote = [RmaIov {
        addr: 0,
        len: pat.len(),
        key: KEY,
    }];
    fn rm<'a>(iov: &'a [IoVec], p: FiAddr, remote: &'a [RmaIov], ctx: u64) -> RmaMsg<'a> {
        RmaMsg {
            iov,
            desc: &[],
            addr: p,
            rma_iov: remote,
            context: ctx,
            data: 0,
        }
    }
    // SAFETY: pat outlives the completion.
    unsafe {
        me.ep
            .writemsg(&rm(&piov, p, &remote, 20), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 20);
    let mut back = vec![0u8; 1 << 20];
    let biov = iov(&mut back);
    // SAFETY: back outlives the completion.
    unsafe {
        me.ep
            .readmsg(&rm(&biov, p, &remote, 21), OpFlags::empty())
            .unwrap()
    };
    assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, 21);
    assert!(back == pat);
    me.ep.inject(b"quit", p, None).unwrap();
    settle(&[me.cq.as_ref()], 20);
    let status = wait_exit(&mut peer.child, Duration::from_secs(30));
    assert!(status.success(), "peer: {status}");
    drop(ns);
}
