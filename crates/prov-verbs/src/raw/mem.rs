//! Callers' buffers, vouched for once.
//!
//! The zero-copy operations (`sendmsg`, `recvmsg`, `readmsg`, ... of the
//! object traits) are `unsafe`: the application promises that its buffers
//! are valid, and stay so until the operation completes. Their impls turn
//! the buffers into a [`UserIov`] (or a [`UserMsg`]), whose constructor
//! restates that promise; everything below works with these types, and the
//! reads and writes of the memory are done here.
//!
//! Receives the kit's engine keeps ([`Pieces`]) come from [`UserMsg`]s
//! only (the RDM endpoint posts nothing else), and DGRAM receives are
//! made from a [`UserIov`]; so [`write_recv`] writes into memory vouched
//! for by a receive that has not completed yet.

use fabric_core::kit::rx::Pieces;
use fabric_core::objects::{AtomicMsg, IoVec, Msg};
use fabric_core::{Error, ErrorKind, Result};

/// Room for the one piece of [`UserIov::of_slice`].
pub(crate) const NO_IOV: [IoVec; 1] = [IoVec {
    addr: std::ptr::null_mut(),
    len: 0,
}];

/// A caller's buffers (an IO vector), vouched for by the operation that
/// handed them over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserIov<'a> {
    iov: &'a [IoVec],
}

impl<'a> UserIov<'a> {
    /// # Safety
    ///
    /// Every piece is valid for reads (a send, a write's source, an
    /// operand) or for writes (a receive, a read's or atomic's result),
    /// and not used by the caller otherwise, from now until the operation
    /// completes (for operations that copy at once, for the call).
    #[inline]
    pub(crate) unsafe fn new(iov: &'a [IoVec]) -> Self {
        UserIov { iov }
    }

    /// A buffer of `buf` (borrowed, so valid for the call); `one` (start
    /// with [`NO_IOV`]) holds its piece.
    #[inline]
    pub(crate) fn of_slice(buf: &'a [u8], one: &'a mut [IoVec; 1]) -> Self {
        one[0] = IoVec {
            addr: buf.as_ptr().cast_mut(),
            len: buf.len(),
        };
        UserIov { iov: &one[..] }
    }

    /// The pieces.
    #[inline]
    pub(crate) fn pieces(&self) -> &'a [IoVec] {
        self.iov
    }

    /// Total bytes, or `Inval` when the sum overflows.
    #[inline]
    pub(crate) fn len(&self) -> Result<usize> {
        self.iov
            .iter()
            .try_fold(0usize, |a, p| a.checked_add(p.len))
            .ok_or_else(|| Error::inval("the IO vector's total length overflows"))
    }

    /// The pieces as byte slices (for sends: readable while `'a`).
    #[inline]
    pub(crate) fn slices(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iov.iter().filter(|p| p.len > 0).map(|p| {
            // SAFETY: vouched readable by the constructor's contract.
            unsafe { std::slice::from_raw_parts(p.addr.cast_const(), p.len) }
        })
    }

    /// The pieces copied into one vector.
    pub(crate) fn to_vec(self) -> Result<Vec<u8>> {
        let mut v = Vec::with_capacity(self.len()?);
        for s in self.slices() {
            v.extend_from_slice(s);
        }
        Ok(v)
    }

    /// The one 8-byte element of an operand vector; `Inval` naming `what`
    /// otherwise.
    #[inline]
    pub(crate) fn read_u64(&self, what: &str) -> Result<u64> {
        match self.iov {
            [p] if p.len == 8 => {
                // SAFETY: vouched readable; 8 bytes, unaligned read.
                Ok(unsafe { std::ptr::read_unaligned(p.addr.cast::<u64>()) })
            }
            _ => Err(Error::inval(format!(
                "verbs: the {what} of a verbs atomic is one 8-byte element"
            ))),
        }
    }

    /// The first `len` bytes of a one-piece buffer as a destination that
    /// may be written until the operation completes; `None` for another
    /// layout or when the piece is shorter.
    #[inline]
    pub(crate) fn dst(&self, len: usize) -> Option<UserDst> {
        match self.iov {
            [p] if p.len >= len => Some(UserDst { addr: p.addr, len }),
            _ => None,
        }
    }

    /// The pieces, kept for a receive that completes later.
    #[inline]
    pub(crate) fn to_pieces<const N: usize>(self) -> Result<Pieces<N>> {
        Pieces::new(self.iov)
    }
}

/// A caller's message (`fi_msg`), vouched for as [`UserIov`] is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserMsg<'a> {
    msg: &'a Msg<'a>,
}

impl<'a> UserMsg<'a> {
    /// # Safety
    ///
    /// As [`UserIov::new`] for `msg.iov`.
    #[inline]
    pub(crate) unsafe fn new(msg: &'a Msg<'a>) -> Self {
        UserMsg { msg }
    }

    /// The message.
    #[inline]
    pub(crate) fn msg(&self) -> &'a Msg<'a> {
        self.msg
    }
}

/// The caller's buffers of an atomic: operand, compare value, result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AtomicBufs<'a> {
    /// The operand.
    pub operand: UserIov<'a>,
    /// The compare value.
    pub compare: UserIov<'a>,
    /// Where the old value goes.
    pub result: UserIov<'a>,
}

impl<'a> AtomicBufs<'a> {
    /// # Safety
    ///
    /// As [`UserIov::new`] for `msg`'s three vectors.
    #[inline]
    pub(crate) unsafe fn of(msg: &'a AtomicMsg<'a>) -> Self {
        AtomicBufs {
            operand: UserIov { iov: msg.iov },
            compare: UserIov { iov: msg.compare },
            result: UserIov { iov: msg.result },
        }
    }
}

/// Contiguous bytes of a caller's buffer that an operation writes at its
/// completion (a read or atomic result staged in registered memory).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserDst {
    addr: *mut u8,
    len: usize,
}

// SAFETY: the memory is the caller's, handed over until the operation
// completes (the vouching of `UserIov`); the descriptor may be kept and
// written from any thread meanwhile.
unsafe impl Send for UserDst {}

impl UserDst {
    /// Its length.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Writes the first `len` bytes of `src` (the operation completed;
    /// called once).
    #[inline]
    pub(crate) fn write(&self, src: &[u8]) {
        let n = self.len.min(src.len());
        // SAFETY: vouched writable until the completion, which this is.
        unsafe { fabric_core::kit::copy::copy_bytes(src.as_ptr(), self.addr, n) };
    }
}

/// Copies `data` into a posted receive's buffer from byte `at` (what does
/// not fit is dropped); the bytes written. The pieces come from vouched
/// receives (see the module docs).
#[inline]
pub(crate) fn write_recv<const N: usize>(buf: &Pieces<N>, at: usize, data: &[u8]) -> usize {
    // SAFETY: the receive's buffer is writable until its completion (the
    // contract of the receive that posted it, see the module docs).
    unsafe { buf.write_at(at, data) }
}

/// `MsgSize` for a piece of 4 GiB or more (a scatter entry's limit).
pub(crate) fn sge_len(len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| {
        Error::new(
            ErrorKind::MsgSize,
            "verbs: an IO vector piece is 4 GiB or more",
        )
    })
}
