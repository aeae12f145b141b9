//! What operations are and what comes back: tickets, kinds and
//! completions.

use std::fmt;

use fabric_core::objects::FiAddr;
use fabric_core::{Error, Result};

use super::atomic::AtomicValue;

/// The ticket of an operation in flight: its context in the completion
/// queue (slot index and generation), handed back in its [`Completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpId(pub(super) u64);

impl OpId {
    pub(super) fn new(index: usize, generation: u32) -> OpId {
        OpId((u64::from(generation) << 32) | index as u64)
    }

    pub(super) fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }

    pub(super) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The context value the provider sees (and that a completion read
    /// through the object traits would carry).
    pub fn context(self) -> u64 {
        self.0
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "operation {}.{}", self.index(), self.generation())
    }
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    /// A message send.
    Send,
    /// A posted receive.
    Recv,
    /// A tagged send.
    TaggedSend,
    /// A tagged receive.
    TaggedRecv,
    /// An RMA read into a local buffer.
    Read,
    /// An RMA write from a local buffer.
    Write,
    /// An atomic operation.
    Atomic,
    /// An atomic operation returning the old value.
    FetchAtomic,
    /// A compare-and-operate atomic returning the old value.
    CompareAtomic,
}

impl OpKind {
    pub(super) fn is_receive(self) -> bool {
        matches!(self, OpKind::Recv | OpKind::TaggedRecv)
    }

    pub(super) fn fetches(self) -> bool {
        matches!(self, OpKind::FetchAtomic | OpKind::CompareAtomic)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Send => "send",
            OpKind::Recv => "receive",
            OpKind::TaggedSend => "tagged send",
            OpKind::TaggedRecv => "tagged receive",
            OpKind::Read => "RMA read",
            OpKind::Write => "RMA write",
            OpKind::Atomic => "atomic",
            OpKind::FetchAtomic => "fetching atomic",
            OpKind::CompareAtomic => "compare atomic",
        })
    }
}

/// A finished operation, with its buffer back.
///
/// Kept small (the rare parts boxed or packed), since completions are
/// moved from the queue to the waiter on every operation.
pub struct Completion<B> {
    pub(super) id: OpId,
    pub(super) len: usize,
    pub(super) tag: u64,
    /// Remote CQ data, when `has_data`.
    pub(super) data: u64,
    /// The sender; `FiAddr::NOTAVAIL` when not known.
    pub(super) source: FiAddr,
    /// The old value of a fetching atomic, when `has_fetched`.
    pub(super) fetched: u64,
    pub(super) error: Option<Box<Error>>,
    pub(super) buf: Option<B>,
    pub(super) kind: OpKind,
    pub(super) has_data: bool,
    pub(super) has_fetched: bool,
}

impl<B> Completion<B> {
    /// The operation's ticket, as its post returned it.
    pub fn id(&self) -> OpId {
        self.id
    }

    /// What the operation did.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// Whether it succeeded.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// Why it failed (an error completion), if it did.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_deref()
    }

    /// The completion if it succeeded, its error otherwise (the buffer is
    /// then dropped: use [`error`](Completion::error) and
    /// [`into_buf`](Completion::into_buf) to keep it).
    pub fn check(mut self) -> Result<Self> {
        match self.error.take() {
            None => Ok(self),
            Some(e) => Err(*e),
        }
    }

    /// Bytes moved: received bytes for receives and reads, sent or written
    /// bytes otherwise.
    pub fn transferred(&self) -> usize {
        self.len
    }

    /// The tag of the message a tagged receive matched.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Remote CQ data the sender attached, if any.
    pub fn data(&self) -> Option<u64> {
        self.has_data.then_some(self.data)
    }

    /// The sender of a received message, when the endpoint reports sources
    /// (`FI_SOURCE`) and the sender is in the address vector.
    pub fn source(&self) -> Option<FiAddr> {
        (self.source != FiAddr::NOTAVAIL).then_some(self.source)
    }

    /// The operation's buffer (none for atomics).
    pub fn buf(&self) -> Option<&B> {
        self.buf.as_ref()
    }

    /// Takes the buffer back, to reuse it.
    pub fn into_buf(self) -> Option<B> {
        self.buf
    }

    /// The bytes the operation moved: the start of its buffer, as long as
    /// [`transferred`](Completion::transferred).
    pub fn received(&self) -> Option<&[u8]>
    where
        B: AsRef<[u8]>,
    {
        let b = self.buf.as_ref()?.as_ref();
        Some(&b[..self.len.min(b.len())])
    }

    /// The old value a fetching or compare atomic returned.
    pub fn fetched<T: AtomicValue>(&self) -> Option<T> {
        self.has_fetched.then(|| T::from_word(self.fetched))
    }
}

impl<B> fmt::Debug for Completion<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("error", &self.error)
            .field("len", &self.len)
            .field("tag", &self.tag)
            .field("data", &self.data())
            .field("source", &self.source())
            .field("buf", &self.buf.is_some())
            .field("fetched", &self.has_fetched.then_some(self.fetched))
            .finish()
    }
}
