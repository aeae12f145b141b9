//! A user buffer in pieces (`struct iovec` lists) as operations carry it
//! until they complete, and the copies in and out of it.

use fabric_core::objects::IoVec;
use fabric_core::{Error, Result};

use crate::ring::Payload;

/// Most pieces of one operation's buffer (`iov_limit`).
pub(crate) const IOV_LIMIT: usize = 4;

/// A receive's buffer as the kit's receive engine keeps it.
pub(crate) type RxPieces = fabric_core::kit::rx::Pieces<IOV_LIMIT>;

/// Up to [`IOV_LIMIT`] pieces of a user buffer, by value (no allocation).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces {
    iov: [(usize, usize); IOV_LIMIT],
    n: usize,
}

impl Pieces {
    /// No buffer.
    pub(crate) const EMPTY: Pieces = Pieces {
        iov: [(0, 0); IOV_LIMIT],
        n: 0,
    };

    /// Copies the piece list; `Inval` for more than [`IOV_LIMIT`] pieces
    /// or pieces whose end overflows the address space.
    pub(crate) fn new(iov: &[IoVec]) -> Result<Pieces> {
        let mut p = Pieces::EMPTY;
        p.extend(iov)?;
        Ok(p)
    }

    /// The pieces of a receive the engine holds (empty pieces left out).
    #[inline]
    pub(crate) fn of(rx: &RxPieces) -> Pieces {
        let mut p = Pieces::EMPTY;
        for v in rx.pieces() {
            if v.len == 0 {
                continue;
            }
            if let Some(slot) = p.iov.get_mut(p.n) {
                *slot = (v.addr as usize, v.len);
                p.n += 1;
            }
        }
        p
    }

    /// Appends pieces (atomic operands, then compare values).
    pub(crate) fn extend(&mut self, iov: &[IoVec]) -> Result<()> {
        for v in iov {
            if v.len == 0 {
                continue;
            }
            let addr = v.addr as usize;
            if addr.checked_add(v.len).is_none() {
                return Err(Error::inval("an iov piece wraps around the address space"));
            }
            let Some(slot) = self.iov.get_mut(self.n) else {
                return Err(Error::inval(format!(
                    "more than {IOV_LIMIT} iov pieces (iov_limit)"
                )));
            };
            *slot = (addr, v.len);
            self.n += 1;
        }
        Ok(())
    }

    /// The pieces as (address, length).
    pub(crate) fn pieces(&self) -> &[(usize, usize)] {
        self.iov.get(..self.n).unwrap_or_default()
    }

    /// Total bytes.
    pub(crate) fn len(&self) -> usize {
        self.pieces().iter().map(|p| p.1).sum()
    }

    /// The bytes `off..off + len`, clamped to the buffer.
    pub(crate) fn sub(&self, mut off: usize, mut len: usize) -> Pieces {
        let mut out = Pieces::EMPTY;
        for &(a, l) in self.pieces() {
            if len == 0 {
                break;
            }
            if off >= l {
                off -= l;
                continue;
            }
            let k = (l - off).min(len);
            if let Some(slot) = out.iov.get_mut(out.n) {
                *slot = (a + off, k);
                out.n += 1;
            }
            len -= k;
            off = 0;
        }
        out
    }

    /// The buffer as byte slices, for a gathering send.
    ///
    /// # Safety
    ///
    /// The pieces must be readable for as long as the slices are used
    /// (the send contract of the operation that named them).
    pub(crate) unsafe fn slices(&self) -> ([&[u8]; IOV_LIMIT], usize) {
        let mut out: [&[u8]; IOV_LIMIT] = [&[]; IOV_LIMIT];
        for (o, &(a, l)) in out.iter_mut().zip(self.pieces()) {
            // SAFETY: the caller's contract: `a..a + l` is readable.
            *o = unsafe { std::slice::from_raw_parts(a as *const u8, l) };
        }
        (out, self.n)
    }

    /// Copies `src` into the buffer from byte `off` on (clamped to the
    /// buffer); returns the bytes copied.
    ///
    /// # Safety
    ///
    /// The pieces must be writable and not otherwise accessed (the
    /// receive contract).
    #[cfg(test)]
    pub(crate) unsafe fn write_at(&self, mut off: usize, mut src: &[u8]) -> usize {
        let mut done = 0;
        for &(a, l) in self.pieces() {
            if src.is_empty() {
                break;
            }
            if off >= l {
                off -= l;
                continue;
            }
            let k = (l - off).min(src.len());
            // SAFETY: `a + off .. a + off + k` lies in the piece, which the
            // caller's contract lets us write; `src` is other memory.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (a + off) as *mut u8, k) };
            src = src.get(k..).unwrap_or_default();
            done += k;
            off = 0;
        }
        done
    }

    /// Copies bytes `off..` of the buffer into `dst` (as many as fit or
    /// remain); returns the count.
    ///
    /// # Safety
    ///
    /// The pieces must be readable (the send contract).
    pub(crate) unsafe fn read_at(&self, mut off: usize, dst: &mut [u8]) -> usize {
        let mut done = 0;
        for &(a, l) in self.pieces() {
            if done == dst.len() {
                break;
            }
            if off >= l {
                off -= l;
                continue;
            }
            let k = (l - off).min(dst.len() - done);
            if let Some(d) = dst.get_mut(done..done + k) {
                // SAFETY: `a + off .. + k` lies in the readable piece; `d`
                // is local memory of that length.
                unsafe { std::ptr::copy_nonoverlapping((a + off) as *const u8, d.as_mut_ptr(), k) };
            }
            done += k;
            off = 0;
        }
        done
    }

    /// Copies payload bytes `from..from + len` (clamped to the payload)
    /// into the buffer at `off` (clamped to the buffer); returns the bytes
    /// copied.
    ///
    /// # Safety
    ///
    /// As [`write_at`](Self::write_at).
    pub(crate) unsafe fn fill_from(
        &self,
        mut off: usize,
        p: &Payload<'_>,
        mut from: usize,
        len: usize,
    ) -> usize {
        let mut left = len.min(p.len().saturating_sub(from));
        let mut done = 0;
        for &(a, l) in self.pieces() {
            if left == 0 {
                break;
            }
            if off >= l {
                off -= l;
                continue;
            }
            let k = (l - off).min(left);
            // SAFETY: the piece range is writable and unaliased (the
            // caller's contract), and lies inside the piece.
            let dst = unsafe { std::slice::from_raw_parts_mut((a + off) as *mut u8, k) };
            let n = p.copy_range_to(from, dst);
            done += n;
            from += n;
            left -= k;
            off = 0;
            if n < k {
                break;
            }
        }
        done
    }
}

// SAFETY: a `Pieces` is a list of addresses and lengths; it is only
// dereferenced by the operation it describes, whose unsafe contract keeps
// the memory valid until completion, whichever thread completes it.
unsafe impl Send for Pieces {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_and_copies_cross_pieces() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 5];
        let iov = [
            IoVec {
                addr: a.as_mut_ptr(),
                len: 3,
            },
            IoVec {
                addr: b.as_mut_ptr(),
                len: 5,
            },
        ];
        let p = Pieces::new(&iov).expect("pieces");
        assert_eq!(p.len(), 8);
        // SAFETY: `a` and `b` are live and only reached through `p` here.
        let n = unsafe { p.write_at(2, &[1, 2, 3, 4]) };
        assert_eq!(n, 4);
        assert_eq!(a, [0, 0, 1]);
        assert_eq!(b, [2, 3, 4, 0, 0]);
        let s = p.sub(2, 3);
        assert_eq!(s.len(), 3);
        assert_eq!(s.pieces().len(), 2);
        let mut out = [0u8; 4];
        // SAFETY: as above.
        assert_eq!(unsafe { s.read_at(0, &mut out) }, 3);
        assert_eq!(out, [1, 2, 3, 0]);
        let too_many = [IoVec {
            addr: a.as_mut_ptr(),
            len: 1,
        }; 9];
        assert!(Pieces::new(&too_many).is_err());
    }
}
