//! Process identity and liveness: who owns a region, and is that owner
//! still the process that created it?
//!
//! A pid alone is not an identity (pids are reused), so an owner is the
//! pair (pid, start time), the start time being field 22 of
//! `/proc/<pid>/stat` (clock ticks after boot). A process is gone when
//! `kill(pid, 0)` says `ESRCH`, when it is a zombie (dead, not yet reaped:
//! `kill` still finds it), or when the pid now belongs to a process that
//! started at another time.
//!
//! Pids mean something only inside one PID namespace: containers that
//! share `/dev/shm` see each other's regions, but `kill(pid, 0)` there asks
//! about whatever process has that number in *our* namespace. So the owner
//! of a region also holds an exclusive `flock(2)` on its file for as long
//! as the region lives ([`lock_owner`]; locks belong to the file, which
//! every namespace sharing the mount sees the same), and the header records
//! the owner's PID namespace ([`my_pid_ns`]). A region's owner is gone when
//! nobody holds that lock any more ([`lock_free`]: the kernel drops it when
//! the last descriptor closes, at exit, crash or `SIGKILL`), or, while it
//! is held, when the owner is of our namespace and its pid is gone (a child
//! that inherited the descriptor across `fork` keeps the lock alive after
//! the owner died). Owners of another namespace are never judged by pid.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// This process's pid.
pub(crate) fn my_pid() -> u32 {
    std::process::id()
}

/// This process's real uid.
pub(crate) fn my_uid() -> u32 {
    // SAFETY: getuid takes no arguments, cannot fail and touches no memory
    // of ours.
    unsafe { libc::getuid() }
}

/// This process's start time (field 22 of `/proc/self/stat`), or 0 when
/// `/proc` cannot be read.
pub(crate) fn my_start_time() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(|| read_stat_at("/proc/self/stat").map_or(0, |st| st.start_time))
}

/// The inode of this process's PID namespace (`/proc/self/ns/pid`), or 0
/// when it cannot be read.
pub(crate) fn my_pid_ns() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino()))
}

/// Whether an owner whose header records PID namespace `ns` lives in ours,
/// so that its pid can be asked about here. Two processes that both could
/// not read their namespace (no `/proc`) count as of one namespace, as
/// every process did before namespaces were recorded.
pub(crate) fn same_pid_ns(ns: u64) -> bool {
    ns == my_pid_ns()
}

/// `flock(2)` on `file`, not blocking: `Ok(())` taken, `Err(errno)` not.
fn flock(file: &File, how: libc::c_int) -> Result<(), i32> {
    // SAFETY: flock takes a descriptor we own (borrowed from `file`, open
    // for the call) and an operation; it touches no memory of ours.
    let rc = unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

/// Takes the owner's exclusive lock on a region file just created. Only
/// a prober holding its shared lock for an instant can be in the way, so
/// this retries for at most a second (a process that holds a shared lock
/// longer is refused with the error, never waited for without a bound).
pub(crate) fn lock_owner(file: &File) -> std::io::Result<()> {
    let end = Instant::now() + Duration::from_secs(1);
    loop {
        match flock(file, libc::LOCK_EX) {
            Ok(()) => return Ok(()),
            Err(e) if e == libc::EWOULDBLOCK && Instant::now() < end => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(std::io::Error::from_raw_os_error(e)),
        }
    }
}

/// Whether nobody holds the owner's lock on `file` (an open description
/// of a region file): a shared lock is taken and given back at once.
/// `false` when it is held, and when the probe fails otherwise (no
/// verdict: count as held).
pub(crate) fn lock_free(file: &File) -> bool {
    match flock(file, libc::LOCK_SH) {
        Ok(()) => {
            let _ = flock(file, libc::LOCK_UN);
            true
        }
        Err(_) => false,
    }
}

/// Whether the owner of a region (its file `file`, lock protocol as of
/// layout version 3) is gone: its lock is free, or it is of our PID
/// namespace and its process (pid, start time) is gone.
pub(crate) fn owner_gone(file: &File, pid: u32, start_time: u64, ns: u64) -> bool {
    lock_free(file) || (same_pid_ns(ns) && gone(pid, Some(start_time), true))
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub(crate) state: char,
    /// Field 22: start time in clock ticks after boot.
    pub(crate) start_time: u64,
}

/// Parses a `/proc/<pid>/stat` line (or its first part, up to field 22
/// at least). The command name (field 2) is in parentheses and may itself
/// hold spaces, parentheses and bytes that are not UTF-8, so fields are
/// counted from the last `)`: the field after it is field 3.
pub(crate) fn parse_stat(line: &[u8]) -> Option<Stat> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(line.get(close + 1..)?).ok()?;
    let mut rest = rest.split_ascii_whitespace();
    let state = rest.next()?.chars().next()?;
    // `rest` now starts at field 4; field 22 is 18 further on.
    let start_time = rest.nth(18)?.parse().ok()?;
    Some(Stat { state, start_time })
}

/// Room for the start of a stat line: the command name is at most 64
/// bytes and the 20 fields after it up to 21 bytes each, so field 22
/// always ends within it.
const STAT_PREFIX: usize = 1024;

/// Reads the stat line at `path` (its first [`STAT_PREFIX`] bytes) into
/// a buffer on the stack, without allocating: the periodic liveness
/// checks run on the data path.
fn read_stat_at(path: &str) -> Option<Stat> {
    use std::io::Read;
    let mut f = File::open(path).ok()?;
    let mut buf = [0u8; STAT_PREFIX];
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_stat(&buf[..len])
}

/// [`read_stat_at`] for `/proc/<pid>/stat`, the path formatted on the
/// stack.
fn read_stat(pid: i32) -> Option<Stat> {
    use std::io::Write;
    let mut path = [0u8; 32];
    let room = path.len();
    let mut w = &mut path[..];
    write!(w, "/proc/{pid}/stat").ok()?;
    let n = room - w.len();
    read_stat_at(std::str::from_utf8(&path[..n]).ok()?)
}

/// `kill(pid, 0)`: `Some(true)` the pid exists (possibly another user's),
/// `Some(false)` it does not (`ESRCH`).
fn pid_exists(pid: i32) -> bool {
    debug_assert!(pid > 0);
    // SAFETY: signal 0 delivers nothing; the call only checks that `pid`
    // exists. `pid` is positive, so it names one process, never a process
    // group (0, negative) or every process (-1).
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether process `pid` has certainly gone away. With `start_time`, a live
/// process with that pid but another start time counts as gone (the pid was
/// reused). Pid 0 and pids beyond `i32::MAX` name no single process, so they
/// are reported gone only when `invalid_is_gone`.
pub(crate) fn gone(pid: u32, start_time: Option<u64>, invalid_is_gone: bool) -> bool {
    let pid = match i32::try_from(pid) {
        Ok(p) if p > 0 => p,
        _ => return invalid_is_gone,
    };
    if !pid_exists(pid) {
        return true;
    }
    match read_stat(pid) {
        Some(st) => {
            matches!(st.state, 'Z' | 'X')
                || start_time.is_some_and(|want| want != 0 && st.start_time != want)
        }
        // /proc/<pid> vanished between the two looks, or /proc is not
        // readable: trust kill alone.
        None => !pid_exists(pid),
    }
}

/// Whether process `pid` has exited (or is a zombie). Pid 0, which the ring
/// stores for "no claimer recorded", is never reported gone. Useful as the
/// predicate of [`Receiver::recover`](crate::ring::Receiver::recover).
pub fn process_gone(pid: u32) -> bool {
    gone(pid, None, false)
}

/// A random 64-bit value from the kernel, falling back to a mix of the
/// clock, the pid and a counter when `getrandom` is unavailable.
pub(crate) fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is 8 writable bytes; getrandom writes at most that many.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == 8 {
        return u64::from_ne_bytes(buf);
    }
    static FALLBACK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let c = FALLBACK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut x = t ^ (u64::from(my_pid()) << 32) ^ c.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_paren() {
        let line =
            "1234 (a) b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200";
        let st = parse_stat(line.as_bytes()).expect("parses");
        assert_eq!(st.state, 'S');
        assert_eq!(st.start_time, 987654);
        assert_eq!(parse_stat(b"12 (x) S 1 2"), None);
        assert_eq!(parse_stat(b""), None);
        // A command name that is not UTF-8 (any bytes but NUL and `/`).
        let mut raw = b"1234 (\xff\xfe)) ".to_vec();
        raw.extend_from_slice(&line.as_bytes()[line.find(" S ").expect("state") + 1..]);
        assert_eq!(parse_stat(&raw), Some(st));
    }

    #[test]
    fn this_process_is_alive_and_bogus_pids_are_not_processes() {
        assert!(my_start_time() > 0);
        assert!(!gone(my_pid(), Some(my_start_time()), true));
        assert!(
            gone(my_pid(), Some(my_start_time() + 1), true),
            "pid reuse guard"
        );
        assert!(gone(0, None, true));
        assert!(!gone(0, None, false));
        assert!(gone(u32::MAX, None, true));
        assert!(!process_gone(0));
        assert!(!process_gone(my_pid()));
    }

    #[test]
    fn randoms_differ() {
        assert_ne!(random_u64(), random_u64());
    }
}
