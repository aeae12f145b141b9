//! The raw socket calls of the data path: `sendmsg` over raw iovecs with
//! `MSG_NOSIGNAL` (a peer that went away must give an error, never a
//! SIGPIPE that kills the process), and `recv` into raw memory (a posted
//! receive buffer or registered memory, which Rust code never borrows as a
//! slice while the peer's data lands in it).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The receive buffer a connection asks for, when the system allows it
/// (see [`tune`]).
const RCVBUF: usize = 2 << 20;

/// Readies a connection's socket for the data path: no Nagle delay, and a
/// fixed 2 MiB receive buffer when `net.core.rmem_max` allows that much.
///
/// The kernel's receive-buffer autotuning made a lone eager message of
/// 128-256 KiB take one of two times from run to run (loopback on a
/// 2-vCPU Intel Xeon guest, RDM 256 KiB ping-pong: 28-30 us or 44-58
/// us, half the runs slow); with a
/// fixed buffer of 1, 2 or 4 MiB every run took 28.8-30.5 us. For 4 MiB
/// ping-pongs, 4 alternating rounds, one-way us, autotuned / fixed: 4
/// MiB buffer 901 / 919 (MSG), 1 MiB 890 / 936 (MSG) and 886 / 929
/// (RDM), 2 MiB 901 / 905 and 890 / 864 (MSG), 886 / 892 (RDM): 2 MiB
/// it is. The kernel doubles it for its bookkeeping, so a connection
/// holds up to 4 MiB of kernel memory whatever the application reads
/// (autotuning starts at `tcp_rmem`'s default, 128 KiB, and grows only
/// while the application reads fast, up to `tcp_rmem`'s maximum). Where
/// `rmem_max` is below 2 MiB (a stock kernel allows 208 KiB) a fixed
/// buffer would be smaller than what autotuning grows to, so the socket
/// keeps autotuning, and lone messages go eagerly only up to 64 KiB
/// ([`crate::limits::EAGER_LONE_MAX_AUTOTUNED`]).
///
/// The raw TCP floors of `cargo xtask bench` (`xtask/src/bench/floor.rs`,
/// `Setup::Provider`) set the same options as this and [`unpaced`]: a
/// change here belongs there too.
pub(crate) fn tune(sock: socket2::SockRef<'_>) -> io::Result<()> {
    sock.set_nodelay(true)?;
    if fixed_rcvbuf() {
        // Best effort: the buffer is a speed matter, not a correctness one.
        let _ = sock.set_recv_buffer_size(RCVBUF);
    }
    Ok(())
}

/// Takes a connection inside this host off a pacing congestion control:
/// where the system default is BBR, which paces every connection to its
/// bandwidth estimate, a connection whose peer is this host (a loopback
/// address, or the connection's own address) gets reno, or cubic where
/// unprivileged processes may not choose reno
/// (`net.ipv4.tcp_allowed_congestion_control`). No network path lies
/// between its ends, and BBR's estimate from request-sized traffic held
/// large messages back: `fabric pingpong` MSG on loopback, 3 alternating
/// rounds, one-way µs with BBR / cubic / reno, 512 KiB 101 / 75 / 77,
/// 1 MiB 206 / 158 / 153, 4 MiB 1118 / 563 / 558 (`fi_pingpong`, which
/// keeps BBR, 69-89, 316 and 1138). Reno, whose per-ACK work is the
/// least, beat cubic at every size measured (8 alternating rounds of
/// `fabric pingpong`, reno / cubic: MSG 1 B 0.978, RDM 1 B 0.976, MSG
/// 64 KiB 0.983, 1 MiB 0.988). Connections to other hosts keep
/// the system's choice. Best effort: the connection works either way.
/// Returns whether the connection is inside this host and now unpaced
/// (lone messages then go eagerly further:
/// [`crate::limits::EAGER_LONE_MAX_UNPACED`]).
pub(crate) fn unpaced(sock: &std::net::TcpStream) -> bool {
    let inside = match (sock.local_addr(), sock.peer_addr()) {
        (Ok(local), Ok(peer)) => intra_host(local.ip(), peer.ip()),
        _ => false,
    };
    if !inside {
        return false;
    }
    let s = socket2::SockRef::from(sock);
    match s.tcp_congestion() {
        Ok(cc) if cc.starts_with(b"bbr") => {}
        Ok(_) => return true,
        Err(_) => return false,
    }
    if s.set_tcp_congestion(b"reno").is_ok() || s.set_tcp_congestion(b"cubic").is_ok() {
        return true;
    }
    tracing::debug!("tcp: a connection inside this host keeps BBR");
    false
}

/// Whether a connection from `local` to `peer` stays inside this host.
fn intra_host(local: std::net::IpAddr, peer: std::net::IpAddr) -> bool {
    let peer = peer.to_canonical();
    peer.is_loopback() || peer == local.to_canonical()
}

/// Whether [`tune`] fixes connections' receive buffers:
/// `net.core.rmem_max` is at least [`RCVBUF`] (read once).
pub(crate) fn fixed_rcvbuf() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .is_some_and(|max| max >= RCVBUF)
    })
}

/// Most iovecs one `sendmsg` carries (well under `IOV_MAX`, 1024).
pub(crate) const MAX_IOV: usize = 64;

/// An empty iovec.
pub(crate) const NO_IOV: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

/// An iovec over `len` bytes at `ptr`.
pub(crate) fn iov(ptr: *const u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: ptr.cast_mut().cast(),
        iov_len: len,
    }
}

/// Whether `e` says the socket would block (EAGAIN): checked on the raw
/// errno, which costs a compare where `kind()` decodes the error.
#[inline]
pub(crate) fn would_block(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN))
}

/// Writes what the socket takes of `iov` without blocking; `WouldBlock`
/// when it takes nothing.
///
/// # Safety
///
/// Every iovec must describe memory valid for reads for the duration of
/// the call.
pub(crate) unsafe fn send_iov(fd: BorrowedFd<'_>, iov: &[libc::iovec]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is a valid empty message header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len().min(MAX_IOV) as _;
    loop {
        // SAFETY: `msg` points at `iov`, whose memory the caller guarantees
        // readable; the kernel only reads it.
        let r = unsafe {
            libc::sendmsg(
                fd.as_raw_fd(),
                &msg,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            return Ok(r.unsigned_abs());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Sends `buf` (non-blocking, no SIGPIPE); the bytes the socket took.
pub(crate) fn send_buf(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is a live slice; the kernel only reads it.
        let r = unsafe {
            libc::send(
                fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            return Ok(r.unsigned_abs());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Reads up to `len` bytes into `ptr` without blocking, failing with the
/// errno: `Ok(0)` is the end of the stream, `EAGAIN` when nothing is
/// there. A busy-polling read that finds nothing (see
/// [`errno_would_block`]) so makes and drops no `io::Error`.
///
/// # Safety
///
/// `ptr..ptr + len` must be valid for writes for the duration of the call.
#[inline]
unsafe fn recv_errno(fd: BorrowedFd<'_>, ptr: *mut u8, len: usize) -> Result<usize, i32> {
    loop {
        // SAFETY: the caller guarantees the memory is writable.
        let r = unsafe { libc::recv(fd.as_raw_fd(), ptr.cast(), len, libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(r.unsigned_abs());
        }
        // SAFETY: `__errno_location` returns the calling thread's errno
        // slot, valid to read for the thread's life; `recv` just set it.
        let e = unsafe { *libc::__errno_location() };
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// [`recv_errno`] with the error as an `io::Error` (`WouldBlock` when
/// nothing is there).
///
/// # Safety
///
/// As [`recv_errno`].
pub(crate) unsafe fn recv_raw(fd: BorrowedFd<'_>, ptr: *mut u8, len: usize) -> io::Result<usize> {
    // SAFETY: the caller's contract.
    unsafe { recv_errno(fd, ptr, len) }.map_err(io::Error::from_raw_os_error)
}

/// Reads into a byte buffer as [`recv_buf`] does, failing with the errno
/// (see [`recv_errno`]).
pub(crate) fn recv_buf_errno(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is a live, exclusively borrowed slice.
    unsafe { recv_errno(fd, buf.as_mut_ptr(), buf.len()) }
}

/// Whether an errno says the socket had nothing (as [`would_block`]).
pub(crate) fn errno_would_block(e: i32) -> bool {
    e == libc::EAGAIN
}

/// Reads into a byte buffer; as [`recv_raw`].
pub(crate) fn recv_buf(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, exclusively borrowed slice.
    unsafe { recv_raw(fd, buf.as_mut_ptr(), buf.len()) }
}

/// Writes all of `bytes` to a socket, waiting up to `timeout` for room (for
/// the few small frames sent outside the data path: a rejection).
pub(crate) fn send_all(
    fd: BorrowedFd<'_>,
    mut bytes: &[u8],
    timeout: std::time::Duration,
) -> io::Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    while !bytes.is_empty() {
        let one = [iov(bytes.as_ptr(), bytes.len())];
        // SAFETY: `one` describes the live slice `bytes`.
        match unsafe { send_iov(fd, &one) } {
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if std::time::Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the peer does not read",
                    ));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A process-wide unique object id (the `fid` of EQ events).
pub(crate) fn next_fid() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn congestion(s: &std::net::TcpStream) -> io::Result<String> {
        let cc = socket2::SockRef::from(s).tcp_congestion()?;
        Ok(String::from_utf8_lossy(&cc)
            .trim_end_matches('\0')
            .to_string())
    }

    #[test]
    fn a_connection_inside_the_host_leaves_bbr_and_keeps_others() -> io::Result<()> {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let s = std::net::TcpStream::connect(l.local_addr()?)?;
        let sock = socket2::SockRef::from(&s);
        // Reno (always built in) is not a pacing control: kept.
        sock.set_tcp_congestion(b"reno")?;
        assert!(unpaced(&s), "a loopback connection under reno is unpaced");
        assert_eq!(congestion(&s)?, "reno");
        if let Err(e) = sock.set_tcp_congestion(b"bbr") {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(
                !ci,
                "this kernel lacks the tcp_bbr congestion control ({e}): `modprobe tcp_bbr`"
            );
            eprintln!("skipped the BBR half: no tcp_bbr here ({e})");
            return Ok(());
        }
        assert!(unpaced(&s), "switched off BBR");
        let now = congestion(&s)?;
        assert!(now == "cubic" || now == "reno", "{now}");
        Ok(())
    }

    #[test]
    fn intra_host_is_loopback_or_the_own_address() {
        let ip = |s: &str| {
            s.parse::<std::net::IpAddr>()
                .unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]))
        };
        assert!(intra_host(ip("127.0.0.1"), ip("127.0.0.1")));
        assert!(intra_host(ip("192.0.2.2"), ip("192.0.2.2")));
        assert!(intra_host(ip("::1"), ip("::1")));
        assert!(intra_host(ip("::ffff:192.0.2.2"), ip("192.0.2.2")));
        assert!(intra_host(ip("192.0.2.2"), ip("::ffff:127.0.0.1")));
        assert!(!intra_host(ip("192.0.2.2"), ip("192.0.2.3")));
        assert!(!intra_host(ip("fe80::1"), ip("fe80::2")));
    }

    #[test]
    fn tune_fixes_the_receive_buffer_where_the_system_allows_it() -> io::Result<()> {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let s = std::net::TcpStream::connect(l.local_addr()?)?;
        let before = socket2::SockRef::from(&s).recv_buffer_size()?;
        tune((&s).into())?;
        let sock = socket2::SockRef::from(&s);
        assert!(sock.nodelay()?);
        let after = sock.recv_buffer_size()?;
        if fixed_rcvbuf() {
            // The kernel doubles what it is asked for (bookkeeping).
            assert!(after >= RCVBUF, "{after} B after tune");
        } else {
            assert_eq!(after, before, "autotuning kept");
        }
        Ok(())
    }
}
