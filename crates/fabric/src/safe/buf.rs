//! Buffers the safe layer's operations own: the [`IoBuf`] contract,
//! registered and exposed memory, and remote regions.

use std::fmt;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};
use std::sync::Arc;

use fabric_core::objects::{MemoryRegion, MrAccess, MrDesc, RmaIov};
use fabric_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};

use super::Shared;

/// A buffer an operation can own while a provider reads it.
///
/// # Safety
///
/// Implementations promise that [`stable_ptr`](IoBuf::stable_ptr) points to
/// [`bytes_len`](IoBuf::bytes_len) initialised bytes which stay allocated,
/// at the same address, for as long as the value lives and is not mutated,
/// including when the value itself is moved (a `Vec<u8>` keeps its bytes on
/// the heap, so moving it does not move them; an array would).
pub unsafe trait IoBuf: Send + 'static {
    /// The first byte.
    fn stable_ptr(&self) -> *const u8;

    /// The number of bytes.
    fn bytes_len(&self) -> usize;

    /// The local descriptor of the memory, when it is registered.
    fn mr_desc(&self) -> Option<MrDesc> {
        None
    }
}

/// A buffer an operation can own while a provider writes it.
///
/// # Safety
///
/// As [`IoBuf`], and [`stable_mut_ptr`](IoBufMut::stable_mut_ptr) points to
/// the same bytes as `stable_ptr`, writable.
pub unsafe trait IoBufMut: IoBuf {
    /// The first byte, writable.
    fn stable_mut_ptr(&mut self) -> *mut u8;
}

// SAFETY: a Vec's bytes live on the heap (or are a dangling pointer for an
// empty Vec, with length 0) and stay put while the Vec moves.
unsafe impl IoBuf for Vec<u8> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as for `IoBuf`.
unsafe impl IoBufMut for Vec<u8> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}

// SAFETY: a boxed slice's bytes live on the heap and stay put while the box
// moves.
unsafe impl IoBuf for Box<[u8]> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as for `IoBuf`.
unsafe impl IoBufMut for Box<[u8]> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}

/// A buffer registered with a domain for local use: the memory region and
/// the buffer in one value ([`Domain::register`](super::Domain::register)).
///
/// Operations take it by value like any buffer and pass its descriptor to
/// the provider, as domains with `FI_MR_LOCAL` require. While an operation
/// owns it, it can be neither dropped nor touched; between operations it
/// reads and writes as a byte slice. Dropping it deregisters the memory,
/// then frees it.
pub struct Registered<B> {
    // Declared first: dropped (deregistered) before the buffer.
    mr: Box<dyn MemoryRegion>,
    buf: B,
    _domain: Arc<Shared>,
}

impl<B> Registered<B> {
    pub(super) fn new(mr: Box<dyn MemoryRegion>, buf: B, domain: Arc<Shared>) -> Self {
        Registered {
            mr,
            buf,
            _domain: domain,
        }
    }

    /// The local descriptor of the region.
    pub fn desc(&self) -> MrDesc {
        self.mr.desc()
    }

    /// Deregisters the memory and returns the buffer.
    pub fn into_inner(self) -> B {
        let Registered { mr, buf, _domain } = self;
        drop(mr);
        buf
    }
}

impl<B: IoBuf> fmt::Debug for Registered<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registered")
            .field("len", &self.buf.bytes_len())
            .field("desc", &self.mr.desc())
            .finish()
    }
}

// SAFETY: the bytes are those of `B`, which keeps the `IoBuf` promise; a
// `Registered` hands out no way to resize or replace its buffer.
unsafe impl<B: IoBuf> IoBuf for Registered<B> {
    fn stable_ptr(&self) -> *const u8 {
        self.buf.stable_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.buf.bytes_len()
    }
    fn mr_desc(&self) -> Option<MrDesc> {
        Some(self.mr.desc())
    }
}

// SAFETY: as for `IoBuf`.
unsafe impl<B: IoBufMut> IoBufMut for Registered<B> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.buf.stable_mut_ptr()
    }
}

impl<B: AsRef<[u8]>> Deref for Registered<B> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_ref()
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> DerefMut for Registered<B> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Registered<B> {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref()
    }
}

impl<B: AsMut<[u8]>> AsMut<[u8]> for Registered<B> {
    fn as_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }
}

/// A buffer peers may read and / or write with RMA and atomics
/// ([`Domain::expose`](super::Domain::expose)).
///
/// While it is exposed a peer may change its bytes at any moment, so it
/// gives no `&mut` access, and `&` access ([`contents`](Exposed::contents))
/// only when peers may only read. [`revoke`](Exposed::revoke) ends remote
/// access and returns the buffer with whatever peers wrote. Dropping it
/// does the same and frees the buffer.
pub struct Exposed<B> {
    // Declared first: dropped (deregistered) before the buffer.
    mr: Box<dyn MemoryRegion>,
    buf: B,
    region: RemoteRegion,
    access: MrAccess,
    _domain: Arc<Shared>,
}

impl<B> Exposed<B> {
    pub(super) fn new(
        mr: Box<dyn MemoryRegion>,
        buf: B,
        region: RemoteRegion,
        access: MrAccess,
        domain: Arc<Shared>,
    ) -> Self {
        Exposed {
            mr,
            buf,
            region,
            access,
            _domain: domain,
        }
    }

    /// The whole buffer as peers name it: send this to them.
    pub fn region(&self) -> RemoteRegion {
        self.region
    }

    /// The remote access rights granted.
    pub fn access(&self) -> MrAccess {
        self.access
    }

    /// The local descriptor of the region.
    pub fn desc(&self) -> MrDesc {
        self.mr.desc()
    }

    /// The bytes, when peers may only read them (no `REMOTE_WRITE`);
    /// `None` otherwise.
    pub fn contents(&self) -> Option<&[u8]>
    where
        B: AsRef<[u8]>,
    {
        if self.access.contains(MrAccess::REMOTE_WRITE) {
            None
        } else {
            Some(self.buf.as_ref())
        }
    }

    /// Ends remote access (deregisters the memory: from now on peers using
    /// its key are refused) and returns the buffer with what peers wrote.
    pub fn revoke(self) -> B {
        let Exposed { mr, buf, .. } = self;
        drop(mr);
        buf
    }
}

impl<B> fmt::Debug for Exposed<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exposed")
            .field("region", &self.region)
            .field("access", &self.access)
            .finish()
    }
}

/// The key peers name a memory region with (`fi_mr_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteKey(pub u64);

/// A range of a peer's exposed memory: where it starts as the peer's
/// provider addresses it (a virtual address with `FI_MR_VIRT_ADDR`, an
/// offset from the start of the region otherwise), how long it is, and its
/// key.
///
/// It is plain data: a peer gets it from [`Exposed::region`] and sends it
/// over (it implements `serde`'s traits; [`to_bytes`](RemoteRegion::to_bytes)
/// gives a fixed 24-byte form without a serialisation format). Naming a
/// region wrongly is safe: the target checks key, bounds and rights and
/// refuses the operation.
///
/// ```
/// use fabric::safe::{RemoteKey, RemoteRegion};
///
/// let whole = RemoteRegion { addr: 0, len: 4096, key: RemoteKey(7) };
/// let page_tail = whole.slice(4000..)?;
/// assert_eq!((page_tail.addr, page_tail.len), (4000, 96));
/// assert!(whole.slice(4000..5000).is_err());
/// assert_eq!(RemoteRegion::from_bytes(&whole.to_bytes())?, whole);
/// # Ok::<(), fabric::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteRegion {
    /// The first byte: a virtual address or an offset, as the target's
    /// provider addresses its memory.
    pub addr: u64,
    /// The number of bytes.
    pub len: u64,
    /// The key of the memory region.
    pub key: RemoteKey,
}

impl RemoteRegion {
    /// The size of [`to_bytes`](RemoteRegion::to_bytes)'s form.
    pub const ENCODED_LEN: usize = 24;

    /// The sub-range `range` (in bytes from this region's start); `Inval`
    /// when it does not lie within the region.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<RemoteRegion> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s as u64,
            Bound::Excluded(&s) => s as u64 + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e as u64 + 1,
            Bound::Excluded(&e) => e as u64,
            Bound::Unbounded => self.len,
        };
        if start > end || end > self.len {
            return Err(Error::inval(format!(
                "range {start}..{end} is not within the remote region of {} bytes",
                self.len
            )));
        }
        Ok(RemoteRegion {
            addr: self.addr + start,
            len: end - start,
            key: self.key,
        })
    }

    /// The region as the zero-copy API names it (`len` in bytes for RMA).
    pub fn rma_iov(&self) -> RmaIov {
        RmaIov {
            addr: self.addr,
            len: usize::try_from(self.len).unwrap_or(usize::MAX),
            key: self.key.0,
        }
    }

    /// A fixed form: address, length and key as little-endian `u64`s.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[..8].copy_from_slice(&self.addr.to_le_bytes());
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..].copy_from_slice(&self.key.0.to_le_bytes());
        out
    }

    /// Reads the form [`to_bytes`](RemoteRegion::to_bytes) writes, from the
    /// first 24 bytes of `bytes`; `Inval` when there are fewer.
    pub fn from_bytes(bytes: &[u8]) -> Result<RemoteRegion> {
        let word = |i: usize| -> Result<u64> {
            bytes
                .get(i * 8..i * 8 + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_le_bytes)
                .ok_or_else(|| {
                    Error::inval(format!(
                        "a remote region takes {} bytes, got {}",
                        Self::ENCODED_LEN,
                        bytes.len()
                    ))
                })
        };
        Ok(RemoteRegion {
            addr: word(0)?,
            len: word(1)?,
            key: RemoteKey(word(2)?),
        })
    }
}

/// An operation or registration that was not accepted, with the buffer it
/// was given.
///
/// Converts into [`Error`] (dropping the buffer), so `?` works in functions
/// returning [`fabric::Result`](crate::Result).
pub struct Rejected<B> {
    /// Why.
    pub error: Error,
    /// The buffer, back to the caller (none for operations without one).
    pub buf: Option<B>,
}

impl<B> Rejected<B> {
    pub(crate) fn new(error: Error, buf: Option<B>) -> Self {
        Rejected { error, buf }
    }

    /// The error's kind; `Again` means a queue is full: drive progress
    /// (read completions) and post again.
    pub fn kind(&self) -> ErrorKind {
        self.error.kind()
    }

    /// The buffer, to post again.
    pub fn into_buf(self) -> Option<B> {
        self.buf
    }
}

impl<B> fmt::Debug for Rejected<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("error", &self.error)
            .field("buf", &self.buf.is_some())
            .finish()
    }
}

impl<B> fmt::Display for Rejected<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<B> std::error::Error for Rejected<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<B> From<Rejected<B>> for Error {
    fn from(r: Rejected<B>) -> Error {
        r.error
    }
}
