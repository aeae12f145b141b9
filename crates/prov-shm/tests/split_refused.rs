//! The split rendezvous when the sender's half fails: the receiver pulls
//! the head and acknowledges it early, but the sender may not write the
//! tail into the receiver (the kernel refuses its `process_vm_writev`), so
//! the receiver must pull the tail itself, and the sender must not report
//! its send complete (and free its buffer) until that second pull is done.
//!
//! The kernel is made to refuse one direction only: this test process (the
//! receiver) marks itself not dumpable, and the child (the sender) drops
//! `CAP_SYS_PTRACE` from its effective capabilities (a no-op when not
//! root). The receiver, reading from a dumpable process of its own user,
//! is still allowed. The child checks that premise before it sends.
//!
//! A file of its own: being not dumpable would change the paths other
//! tests take in the same process.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::*;
use fabric_core::objects::FiAddr;
use fabric_core::*;

const ROLE: &str = "PROV_SHM_SPLIT_REFUSED_ROLE";
/// Rendezvous without split first (the receiver learns that CMA works
/// with this peer), then split ones.
const SIZES: [usize; 4] = [20_000, 1 << 20, 3 << 20, 1 << 20];

/// Drops `CAP_SYS_PTRACE` from this process's effective set.
fn drop_ptrace_cap() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_SYS_PTRACE: u32 = 19;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: a version-3 header and two data words, as capget(2) wants.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
    assert_eq!(r, 0, "capget: {}", std::io::Error::last_os_error());
    d[0].effective &= !(1 << CAP_SYS_PTRACE);
    // SAFETY: as above; clearing an effective bit is always permitted.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) };
    assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
}

/// Whether `process_vm_writev` into `pid` is refused with `EPERM`.
fn write_refused(pid: i32, addr: usize) -> bool {
    let src = [1u8; 8];
    let local = [libc::iovec {
        iov_base: src.as_ptr() as *mut libc::c_void,
        iov_len: src.len(),
    }];
    let remote = [libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: src.len(),
    }];
    // SAFETY: `local` describes a live array; the remote range is only
    // interpreted by the kernel in the other process.
    let n = unsafe { libc::process_vm_writev(pid, local.as_ptr(), 1, remote.as_ptr(), 1, 0) };
    n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The sender, in the child process.
#[test]
fn sender_process() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    drop_ptrace_cap();
    let me = side(&info());
    println!("NAME={}", me.ep.getname().unwrap());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (name, probe) = line.trim().split_once(' ').unwrap();
    let parent = insert(&me, &name.parse().unwrap());
    let probe: usize = probe.parse().unwrap();
    let ppid = std::os::unix::process::parent_id() as i32;
    assert!(
        write_refused(ppid, probe),
        "premise: writing into the receiver must be refused"
    );
    for (i, &size) in SIZES.iter().enumerate() {
        let mut out = pattern(size, i as u8);
        let v = iov(&mut out);
        // SAFETY: `out` lives until the completion below.
        unsafe {
            me.ep
                .sendmsg(&msg(&v, parent, 0, 0, i as u64), OpFlags::empty())
                .unwrap()
        };
        let e = next(me.cq.as_ref(), &[]).expect("the send completes without error");
        assert_eq!(e.context, i as u64);
        // The buffer is ours again: a receiver still reading it would see
        // this.
        out.fill(0xee);
        println!("SENT {i}");
        std::io::stdout().flush().unwrap();
    }
    // Stay until the receiver has everything.
    std::io::stdin().read_line(&mut line).unwrap();
}

#[test]
fn receiver_pulls_the_tail_when_the_senders_write_is_refused() {
    // SAFETY: prctl with integer arguments only.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) }, 0);
    let me = side(&info());
    let probe = Box::new(0u64);
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(&exe)
        .args([
            "--exact",
            "sender_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let name = loop {
        let l = lines.next().expect("the sender exited early").unwrap();
        if let Some(i) = l.find("NAME=") {
            break l[i + 5..].trim().to_string();
        }
    };
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "{} {}",
        me.ep.getname().unwrap(),
        &*probe as *const u64 as usize
    )
    .unwrap();
    stdin.flush().unwrap();
    let _peer = insert(&me, &name.parse().unwrap());
    for (i, &size) in SIZES.iter().enumerate() {
        let mut back = vec![0u8; size];
        let v = iov(&mut back);
        // SAFETY: `back` outlives the completion below.
        unsafe {
            me.ep
                .recvmsg(
                    &msg(&v, FiAddr::UNSPEC, 0, 0, 100 + i as u64),
                    OpFlags::empty(),
                )
                .unwrap()
        };
        let e = next(me.cq.as_ref(), &[]).expect("the receive completes without error");
        assert_eq!((e.context, e.len), (100 + i as u64, size));
        assert!(
            back == pattern(size, i as u8),
            "message {i} of {size} bytes"
        );
        let sent = loop {
            let l = lines.next().expect("the sender exited early").unwrap();
            if let Some(i) = l.find("SENT ") {
                break l[i + 5..].trim().parse::<usize>().unwrap();
            }
        };
        assert_eq!(sent, i);
    }
    writeln!(stdin, "done").unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    // The child's own test result: its premise and its completions.
    assert!(status.success(), "the sender failed: {status}");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) }, 0);
}
