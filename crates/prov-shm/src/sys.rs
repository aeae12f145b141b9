//! The system calls of the progress engine (inotify, eventfd, timerfd,
//! poll), behind safe functions on owned and borrowed fds: the engine
//! itself holds no `unsafe`.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use fabric_core::{Error, ErrorKind, Result};

/// The error of system call `what` (errno).
pub(crate) fn sys_err(what: &str) -> Error {
    let e = std::io::Error::last_os_error();
    Error::new(
        ErrorKind::from_errno(e.raw_os_error().unwrap_or(0)).unwrap_or(ErrorKind::Io),
        format!("shm: {what}: {e}"),
    )
}

/// Takes ownership of a descriptor a system call just returned.
fn owned(fd: libc::c_int, what: &str) -> Result<OwnedFd> {
    if fd < 0 {
        return Err(sys_err(what));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A non-blocking inotify instance.
pub(crate) fn inotify() -> Result<OwnedFd> {
    // SAFETY: plain system call; the flags are valid.
    owned(
        unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) },
        "inotify_init1",
    )
}

/// Watches `path` for `IN_MODIFY` on inotify instance `fd`.
pub(crate) fn watch_modify(fd: BorrowedFd<'_>, path: &CStr) -> Result<()> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_MODIFY) };
    if wd < 0 {
        return Err(sys_err("inotify_add_watch"));
    }
    Ok(())
}

/// A non-blocking eventfd with counter `init`.
pub(crate) fn eventfd(init: u32) -> Result<OwnedFd> {
    // SAFETY: plain system call; the flags are valid.
    owned(
        unsafe { libc::eventfd(init, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) },
        "eventfd",
    )
}

/// A non-blocking timerfd, not armed.
pub(crate) fn timer() -> Result<OwnedFd> {
    // SAFETY: plain system call; the flags are valid.
    owned(
        unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        },
        "timerfd_create",
    )
}

/// Arms timerfd `fd` to fire once after `after` (and then every `every`,
/// unless zero); `after` zero disarms it.
pub(crate) fn timer_set(fd: BorrowedFd<'_>, after: Duration, every: Duration) -> Result<()> {
    let ts = |d: Duration| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos()),
    };
    let spec = libc::itimerspec {
        it_interval: ts(every),
        it_value: ts(after),
    };
    // SAFETY: `fd` is a timerfd; `spec` is a live, valid itimerspec.
    if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
        return Err(sys_err("timerfd_settime"));
    }
    Ok(())
}

/// A non-blocking timerfd that fires every `period`.
pub(crate) fn timer_every(period: Duration) -> Result<OwnedFd> {
    let t = timer()?;
    timer_set(t.as_fd(), period, period)?;
    Ok(t)
}

/// Adds 1 to an eventfd's counter (it becomes readable).
pub(crate) fn signal(fd: BorrowedFd<'_>) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live local array to the fd.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}

/// Reads one 8-byte value (an eventfd's counter, a timerfd's expiry
/// count) off a non-blocking fd; whether there was one.
pub(crate) fn take(fd: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 8];
    // SAFETY: reads 8 bytes into a live local buffer.
    let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    r == 8
}

/// Reads whatever is waiting on a non-blocking fd into `buf`; whether
/// anything was.
pub(crate) fn drain_once(fd: BorrowedFd<'_>, buf: &mut [u8]) -> bool {
    // SAFETY: reads at most `buf.len()` bytes into a live buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    n > 0
}

/// Waits until one of `fds` is readable, at most `timeout`.
pub(crate) fn poll_readable(fds: &[Option<BorrowedFd<'_>>; 2], timeout: Duration) {
    let pfd = |f: &Option<BorrowedFd<'_>>| libc::pollfd {
        fd: f.as_ref().map_or(-1, |f| f.as_raw_fd()),
        events: libc::POLLIN,
        revents: 0,
    };
    let mut p = [pfd(&fds[0]), pfd(&fds[1])];
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `p` is a live array of two pollfd structs.
    unsafe { libc::poll(p.as_mut_ptr(), 2, ms) };
}
