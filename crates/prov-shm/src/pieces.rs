//! A user buffer in pieces (`struct iovec` lists) as operations carry it
//! until they complete: the kit's [`Pieces`] (what the receive engine
//! keeps of a receive), with shm's checks and its copies out of ring
//! payloads ([`PiecesExt`]).

use fabric_core::objects::IoVec;
use fabric_core::{Error, Result};

use crate::ring::Payload;

/// Most pieces of one operation's buffer (`iov_limit`).
pub(crate) const IOV_LIMIT: usize = 4;

/// Up to [`IOV_LIMIT`] pieces of a user buffer, by value (no allocation).
pub(crate) type Pieces = fabric_core::kit::rx::Pieces<IOV_LIMIT>;

/// A buffer's pieces as (address, length) pairs, as cross-memory attach
/// and the wire take them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pairs {
    v: [(usize, usize); IOV_LIMIT],
    n: usize,
}

impl std::ops::Deref for Pairs {
    type Target = [(usize, usize)];
    fn deref(&self) -> &[(usize, usize)] {
        self.v.get(..self.n).unwrap_or_default()
    }
}

/// What shm does with a [`Pieces`] besides what the kit does.
pub(crate) trait PiecesExt: Sized {
    /// Copies the piece list, leaving out empty pieces; `Inval` for more
    /// than [`IOV_LIMIT`] pieces or pieces whose end overflows the
    /// address space.
    fn checked(iov: &[IoVec]) -> Result<Self>;

    /// Appends pieces (atomic operands, then compare values), as
    /// [`checked`](Self::checked).
    fn extend_checked(&mut self, iov: &[IoVec]) -> Result<()>;

    /// The pieces as (address, length).
    fn pairs(&self) -> Pairs;

    /// The buffer as byte slices, for a gathering send.
    ///
    /// # Safety
    ///
    /// The pieces must be readable for as long as the slices are used
    /// (the send contract of the operation that named them).
    unsafe fn slices(&self) -> ([&[u8]; IOV_LIMIT], usize);

    /// Copies payload bytes `from..from + len` (clamped to the payload)
    /// into the buffer at `off` (clamped to the buffer); returns the bytes
    /// copied.
    ///
    /// # Safety
    ///
    /// The pieces must be writable and not otherwise accessed (the
    /// receive contract).
    unsafe fn fill_from(&self, off: usize, p: &Payload<'_>, from: usize, len: usize) -> usize;
}

impl PiecesExt for Pieces {
    fn checked(iov: &[IoVec]) -> Result<Pieces> {
        let mut p = Pieces::EMPTY;
        p.extend_checked(iov)?;
        Ok(p)
    }

    fn extend_checked(&mut self, iov: &[IoVec]) -> Result<()> {
        for v in iov {
            if v.len == 0 {
                continue;
            }
            if (v.addr as usize).checked_add(v.len).is_none() {
                return Err(Error::inval("an iov piece wraps around the address space"));
            }
            self.extend(std::slice::from_ref(v))?;
        }
        Ok(())
    }

    #[inline]
    fn pairs(&self) -> Pairs {
        let mut out = Pairs {
            v: [(0, 0); IOV_LIMIT],
            n: 0,
        };
        for (o, v) in out.v.iter_mut().zip(self.pieces()) {
            *o = (v.addr as usize, v.len);
            out.n += 1;
        }
        out
    }

    unsafe fn slices(&self) -> ([&[u8]; IOV_LIMIT], usize) {
        let mut out: [&[u8]; IOV_LIMIT] = [&[]; IOV_LIMIT];
        let mut n = 0;
        for (o, v) in out.iter_mut().zip(self.pieces()) {
            // SAFETY: the caller's contract: the piece is readable.
            *o = unsafe { std::slice::from_raw_parts(v.addr.cast_const(), v.len) };
            n += 1;
        }
        (out, n)
    }

    #[inline]
    unsafe fn fill_from(
        &self,
        mut off: usize,
        p: &Payload<'_>,
        mut from: usize,
        len: usize,
    ) -> usize {
        let mut left = len.min(p.len().saturating_sub(from));
        let mut done = 0;
        for v in self.pieces() {
            if left == 0 {
                break;
            }
            if off >= v.len {
                off -= v.len;
                continue;
            }
            let k = (v.len - off).min(left);
            // SAFETY: the piece range is writable and unaliased (the
            // caller's contract), and lies inside the piece.
            let dst = unsafe { std::slice::from_raw_parts_mut(v.addr.wrapping_add(off), k) };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_pairs_and_slices() {
        let mut a = [1u8, 2, 3];
        let mut b = [4u8, 5, 6, 7, 8];
        let iov = [
            IoVec {
                addr: a.as_mut_ptr(),
                len: 3,
            },
            IoVec {
                addr: std::ptr::null_mut(),
                len: 0,
            },
            IoVec {
                addr: b.as_mut_ptr(),
                len: 5,
            },
        ];
        let p = Pieces::checked(&iov).expect("pieces");
        assert_eq!(p.len(), 8);
        assert_eq!(p.pieces().len(), 2, "empty pieces are left out");
        let pairs = p.pairs();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[1], (b.as_ptr() as usize, 5));
        // SAFETY: `a` and `b` are live and only read here.
        let (s, n) = unsafe { p.slices() };
        assert_eq!(
            (n, s[0], s[1]),
            (2, &[1u8, 2, 3][..], &[4u8, 5, 6, 7, 8][..])
        );
        let too_many = [IoVec {
            addr: a.as_mut_ptr(),
            len: 1,
        }; 9];
        assert!(Pieces::checked(&too_many).is_err());
        let wraps = [IoVec {
            addr: usize::MAX as *mut u8,
            len: 2,
        }];
        assert!(Pieces::checked(&wraps).is_err());
    }
}
