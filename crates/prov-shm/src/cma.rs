//! Cross-memory attach (CMA): `process_vm_readv` / `process_vm_writev`
//! copy straight between two processes' memories, one copy instead of the
//! two of a bounce buffer.
//!
//! The kernel allows it when the caller may ptrace the other process
//! (`PTRACE_MODE_ATTACH_REALCREDS`): same user, and Yama's
//! `kernel.yama.ptrace_scope` at 0 (at 1 only towards descendants; 2 and
//! 3 forbid it); a seccomp filter may also refuse the calls. [`detect`]
//! decides once per process, from `FI_SHM_DISABLE_CMA`, the Yama setting
//! and a probe call on this process, says why in a log line, and getinfo
//! reports it (`ep_attr.protocol_version`, see
//! [`getinfo`](crate::getinfo)). A peer that refuses at run time anyway
//! (`EPERM`) is switched to the bounce-buffer path for good.

use std::sync::OnceLock;

use crate::pieces::IOV_LIMIT;

/// Whether this process uses CMA, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmaStatus {
    /// CMA is used for large messages and RMA.
    pub enabled: bool,
    /// Why (or why not), for the log and for users.
    pub reason: String,
}

/// The environment variable that turns CMA off (`1`, `true`, `yes`, `on`).
pub const DISABLE_VAR: &str = "FI_SHM_DISABLE_CMA";

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on" | "y"
    )
}

/// Decides whether CMA is used (once per process; later calls return the
/// first answer) and logs the decision.
pub fn detect() -> &'static CmaStatus {
    static STATUS: OnceLock<CmaStatus> = OnceLock::new();
    STATUS.get_or_init(|| {
        let s = probe();
        if s.enabled {
            tracing::info!(reason = %s.reason, "shm: cross-memory attach (single copy) enabled for large messages and RMA");
        } else {
            tracing::warn!(reason = %s.reason, "shm: cross-memory attach unavailable; large messages and RMA go through bounce buffers (two copies)");
        }
        s
    })
}

fn probe() -> CmaStatus {
    let no = |reason: String| CmaStatus {
        enabled: false,
        reason,
    };
    if let Ok(v) = std::env::var(DISABLE_VAR) {
        if truthy(&v) {
            return no(format!("{DISABLE_VAR}={v}"));
        }
    }
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        match s.trim() {
            "0" => {}
            "1" => {
                return no(
                    "kernel.yama.ptrace_scope = 1 allows cross-memory attach only to descendants"
                        .into(),
                );
            }
            v => {
                return no(format!(
                    "kernel.yama.ptrace_scope = {v} forbids cross-memory attach"
                ));
            }
        }
    }
    let src = [0x5au8; 16];
    let mut dst = [0u8; 16];
    let local = [libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    }];
    let remote = [libc::iovec {
        iov_base: src.as_ptr() as *mut libc::c_void,
        iov_len: src.len(),
    }];
    // SAFETY: both iovecs describe live local arrays of the stated
    // lengths; the call reads `src` (in this process) into `dst`.
    let n =
        unsafe { libc::process_vm_readv(libc::getpid(), local.as_ptr(), 1, remote.as_ptr(), 1, 0) };
    if n != 16 || dst != src {
        let e = std::io::Error::last_os_error();
        return no(format!("process_vm_readv on this process failed: {e}"));
    }
    CmaStatus {
        enabled: true,
        reason: "process_vm_readv works and ptrace_scope permits it".into(),
    }
}

/// Why a CMA transfer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmaError {
    /// The kernel refused (`EPERM`, `ENOSYS`): use bounce buffers with
    /// this peer from now on.
    Refused,
    /// The peer process is gone (`ESRCH`).
    Gone,
    /// A range was not mapped in one of the processes (`EFAULT`), or the
    /// copy stopped short.
    Fault,
    /// Anything else.
    Other(i32),
}

impl CmaError {
    /// The error kind an operation that failed this way completes with.
    pub(crate) fn kind(self) -> fabric_core::ErrorKind {
        use fabric_core::ErrorKind;
        match self {
            CmaError::Refused => ErrorKind::Perm,
            CmaError::Gone => ErrorKind::ConnReset,
            CmaError::Fault => ErrorKind::Fault,
            CmaError::Other(_) => ErrorKind::Io,
        }
    }
}

/// Copies between this process's `local` pieces and process `pid`'s
/// `remote` pieces (both at most [`IOV_LIMIT`] long, equal totals): from
/// the remote side into local memory with `read`, the other way without.
///
/// # Safety
///
/// `local` must be valid local memory: writable (read) or readable
/// (write), and not accessed otherwise during the call. The remote
/// addresses are not dereferenced by this process; the kernel checks
/// them against the other process's mappings.
pub(crate) unsafe fn transfer(
    pid: u32,
    local: &[(usize, usize)],
    remote: &[(u64, u64)],
    read: bool,
) -> Result<(), CmaError> {
    let want: usize = local.iter().map(|p| p.1).sum();
    let mut l = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; IOV_LIMIT];
    let mut r = l;
    for (o, &(a, n)) in l.iter_mut().zip(local) {
        *o = libc::iovec {
            iov_base: a as *mut libc::c_void,
            iov_len: n,
        };
    }
    for (o, &(a, n)) in r.iter_mut().zip(remote) {
        *o = libc::iovec {
            iov_base: a as usize as *mut libc::c_void,
            iov_len: usize::try_from(n).map_err(|_| CmaError::Fault)?,
        };
    }
    let nl = local.len().min(IOV_LIMIT);
    let nr = remote.len().min(IOV_LIMIT);
    let pid = libc::pid_t::try_from(pid).map_err(|_| CmaError::Gone)?;
    let mut done = 0usize;
    // A transfer may stop short (the kernel copies at most what it can map
    // in one go); continue from where it stopped, a bounded number of
    // times.
    for _ in 0..64 {
        if done >= want {
            return Ok(());
        }
        let (ls, lc) = skip(&l[..nl], done);
        let (rs, rc) = skip(&r[..nr], done);
        // SAFETY: `ls` / `rs` are arrays of `lc` / `rc` valid iovec
        // structs; the local ranges are memory the caller vouches for, the
        // remote ones are only interpreted by the kernel.
        let n = unsafe {
            if read {
                libc::process_vm_readv(pid, ls.as_ptr(), lc as _, rs.as_ptr(), rc as _, 0)
            } else {
                libc::process_vm_writev(pid, ls.as_ptr(), lc as _, rs.as_ptr(), rc as _, 0)
            }
        };
        if n < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(match e {
                libc::EPERM | libc::ENOSYS => CmaError::Refused,
                libc::ESRCH => CmaError::Gone,
                libc::EFAULT | libc::ENOMEM => CmaError::Fault,
                e => CmaError::Other(e),
            });
        }
        if n == 0 {
            return Err(CmaError::Fault);
        }
        done += n as usize;
    }
    if done >= want {
        Ok(())
    } else {
        Err(CmaError::Fault)
    }
}

/// The iovec list with its first `off` bytes dropped.
fn skip(v: &[libc::iovec], mut off: usize) -> ([libc::iovec; IOV_LIMIT], usize) {
    let mut out = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; IOV_LIMIT];
    let mut n = 0;
    for iv in v {
        if off >= iv.iov_len {
            off -= iv.iov_len;
            continue;
        }
        if let Some(o) = out.get_mut(n) {
            *o = libc::iovec {
                iov_base: (iv.iov_base as usize + off) as *mut libc::c_void,
                iov_len: iv.iov_len - off,
            };
            n += 1;
        }
        off = 0;
    }
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_transfer_reads_and_writes() {
        if !detect().enabled {
            return;
        }
        let src: Vec<u8> = (0..100u8).collect();
        let mut dst = vec![0u8; 100];
        let (a, b) = dst.split_at_mut(30);
        let local = [(a.as_mut_ptr() as usize, 30), (b.as_mut_ptr() as usize, 70)];
        let remote = [(src.as_ptr() as u64, 100)];
        // SAFETY: `dst` is live local memory; `src` is read by the kernel.
        unsafe { transfer(std::process::id(), &local, &remote, true) }.expect("read");
        assert_eq!(dst, src);
        let bogus = [(8u64, 100)];
        // SAFETY: as above; the remote range is unmapped on purpose.
        let e = unsafe { transfer(std::process::id(), &local, &bogus, true) };
        assert_eq!(e, Err(CmaError::Fault));
    }
}
