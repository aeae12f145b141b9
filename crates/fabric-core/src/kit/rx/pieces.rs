//! The pieces of a caller's buffer (an iovec list of at most `N` entries),
//! kept by value until the operation that uses them completes.

use crate::objects::IoVec;
use crate::{Error, Result};

const NULL: IoVec = IoVec {
    addr: std::ptr::null_mut(),
    len: 0,
};

/// Up to `N` pieces of a caller's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Pieces<const N: usize> {
    iov: [IoVec; N],
    n: usize,
}

// SAFETY: the pointers are dereferenced only through the `unsafe` methods,
// whose callers promise (the contract of the zero-copy operations) that the
// memory stays valid and unaliased while the operation is outstanding;
// moving the descriptor between threads does not change that.
unsafe impl<const N: usize> Send for Pieces<N> {}

impl<const N: usize> Default for Pieces<N> {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<const N: usize> Pieces<N> {
    /// No buffer.
    pub const EMPTY: Self = Pieces {
        iov: [NULL; N],
        n: 0,
    };

    /// Copies `iov`; `Inval` for more than `N` pieces.
    pub fn new(iov: &[IoVec]) -> Result<Self> {
        let mut p = Self::EMPTY;
        p.extend(iov)?;
        Ok(p)
    }

    /// `Inval` for more than `N` pieces.
    pub fn check(iov: &[IoVec]) -> Result<()> {
        if iov.len() > N {
            return Err(Error::inval(format!(
                "{} iov pieces, more than the limit {N}",
                iov.len()
            )));
        }
        Ok(())
    }

    /// Replaces the pieces with `iov`, writing only the pieces given (none
    /// when there are more than `N`).
    pub fn set(&mut self, iov: &[IoVec]) {
        // One piece (the usual receive): a copy of 16 bytes, not a call
        // to memcpy with a length known only at run time.
        if let ([one], Some(dst)) = (iov, self.iov.first_mut()) {
            *dst = *one;
            self.n = 1;
            return;
        }
        match self.iov.get_mut(..iov.len()) {
            Some(dst) => {
                dst.copy_from_slice(iov);
                self.n = iov.len();
            }
            None => self.n = 0,
        }
    }

    /// Appends pieces; `Inval` beyond `N`.
    pub fn extend(&mut self, iov: &[IoVec]) -> Result<()> {
        let end = self.n + iov.len();
        let Some(dst) = self.iov.get_mut(self.n..end) else {
            return Err(Error::inval(format!(
                "{end} iov pieces, more than the limit {N}"
            )));
        };
        dst.copy_from_slice(iov);
        self.n = end;
        Ok(())
    }

    /// The pieces.
    pub fn pieces(&self) -> &[IoVec] {
        self.iov.get(..self.n).unwrap_or_default()
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.pieces().iter().map(|v| v.len).sum()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address of the first byte (0 without pieces).
    pub fn base(&self) -> u64 {
        self.pieces().first().map_or(0, |v| v.addr as u64)
    }

    /// The bytes `off..off + len`, clamped to the buffer.
    pub fn sub(&self, mut off: usize, mut len: usize) -> Self {
        let mut out = Self::EMPTY;
        for v in self.pieces() {
            if len == 0 {
                break;
            }
            if off >= v.len {
                off -= v.len;
                continue;
            }
            let k = (v.len - off).min(len);
            if let Some(slot) = out.iov.get_mut(out.n) {
                *slot = IoVec {
                    addr: v.addr.wrapping_add(off),
                    len: k,
                };
                out.n += 1;
            }
            len -= k;
            off = 0;
        }
        out
    }

    /// The contiguous space from byte `at` (pointer and length), if `at` is
    /// inside the buffer.
    pub fn span_at(&self, mut at: usize) -> Option<(*mut u8, usize)> {
        for v in self.pieces() {
            if at < v.len {
                return Some((v.addr.wrapping_add(at), v.len - at));
            }
            at -= v.len;
        }
        None
    }

    /// Copies `data` into the buffer from byte `at`; what does not fit is
    /// dropped (truncation). Returns the bytes written.
    ///
    /// # Safety
    ///
    /// The pieces are valid for writes and not aliased (the receive
    /// contract).
    pub unsafe fn write_at(&self, mut at: usize, mut data: &[u8]) -> usize {
        let mut written = 0;
        for v in self.pieces() {
            if data.is_empty() {
                break;
            }
            if at >= v.len {
                at -= v.len;
                continue;
            }
            let k = (v.len - at).min(data.len());
            // SAFETY: `at + k <= v.len`; valid for writes per the contract.
            unsafe { crate::kit::copy::copy_bytes(data.as_ptr(), v.addr.add(at), k) };
            written += k;
            data = data.get(k..).unwrap_or_default();
            at = 0;
        }
        written
    }

    /// Copies the buffer's bytes from `at` into `out`; returns how many.
    ///
    /// # Safety
    ///
    /// The pieces are valid for reads (the send contract).
    pub unsafe fn read_at(&self, mut at: usize, out: &mut [u8]) -> usize {
        let mut done = 0;
        for v in self.pieces() {
            if done == out.len() {
                break;
            }
            if at >= v.len {
                at -= v.len;
                continue;
            }
            let k = (v.len - at).min(out.len() - done);
            if let Some(dst) = out.get_mut(done..done + k) {
                // SAFETY: `at + k <= v.len`, readable per the contract;
                // `dst` is a distinct Rust buffer.
                unsafe { crate::kit::copy::copy_bytes(v.addr.add(at), dst.as_mut_ptr(), k) };
            }
            done += k;
            at = 0;
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_write_and_read_cross_pieces() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 5];
        let iov = [
            IoVec {
                addr: a.as_mut_ptr(),
                len: a.len(),
            },
            IoVec {
                addr: b.as_mut_ptr(),
                len: b.len(),
            },
        ];
        let p = Pieces::<4>::new(&iov).unwrap();
        assert_eq!(p.len(), 8);
        assert!(Pieces::<1>::new(&iov).is_err());
        let s = p.sub(2, 3);
        assert_eq!(s.len(), 3);
        assert_eq!(s.pieces().len(), 2);
        // SAFETY: `a` and `b` are live and only reached through `p`.
        let n = unsafe { s.write_at(0, b"xyzw") };
        assert_eq!(n, 3);
        let mut out = [0u8; 8];
        // SAFETY: as above.
        assert_eq!(unsafe { p.read_at(0, &mut out) }, 8);
        assert_eq!(&out, b"\0\0xyz\0\0\0");
        assert_eq!(p.span_at(4).map(|s| s.1), Some(4));
        assert!(p.span_at(8).is_none());
    }
}
