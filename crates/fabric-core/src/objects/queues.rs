//! Completion queues, event queues and counters.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::attr::Handle;
use crate::error::{ErrorKind, Result};
use crate::info::Info;
use crate::names::{fi_enum, fi_flags};

use super::{AsAny, FiAddr};

fi_enum! {
    /// Which fields a CQ fills in (`enum fi_cq_format`).
    pub enum CqFormat {
        /// The provider's choice.
        #[default]
        Unspec = 0 => "FI_CQ_FORMAT_UNSPEC",
        /// Context only.
        Context = 1 => "FI_CQ_FORMAT_CONTEXT",
        /// Context, flags, length.
        Msg = 2 => "FI_CQ_FORMAT_MSG",
        /// Context, flags, length, buffer, remote CQ data.
        Data = 3 => "FI_CQ_FORMAT_DATA",
        /// Everything of `Data`, plus the tag.
        Tagged = 4 => "FI_CQ_FORMAT_TAGGED",
    }
}

fi_enum! {
    /// How a CQ, EQ or counter can be waited on (`enum fi_wait_obj`).
    pub enum WaitObj {
        /// No blocking wait (polling only).
        #[default]
        None = 0 => "FI_WAIT_NONE",
        /// The provider's choice (sread works).
        Unspec = 1 => "FI_WAIT_UNSPEC",
        /// A wait set.
        Set = 2 => "FI_WAIT_SET",
        /// A file descriptor, exposed by `wait_fd` (poll / epoll / AsyncFd).
        Fd = 3 => "FI_WAIT_FD",
        /// A mutex and condition variable.
        MutexCond = 4 => "FI_WAIT_MUTEX_COND",
        /// Spinning / yielding.
        Yield = 5 => "FI_WAIT_YIELD",
        /// A pollable fd (`FI_WAIT_POLLFD`).
        PollFd = 6 => "FI_WAIT_POLLFD",
    }
}

fi_flags! {
    /// What a completion reports (`fi_cq_*_entry.flags`).
    pub struct CompletionFlags: u64, prefix "FI_" {
        /// A message operation.
        const MSG = 1 << 1;
        /// An RMA operation.
        const RMA = 1 << 2;
        /// A tagged operation.
        const TAGGED = 1 << 3;
        /// An atomic operation.
        const ATOMIC = 1 << 4;
        /// A multicast operation.
        const MULTICAST = 1 << 5;
        /// An RMA / atomic read.
        const READ = 1 << 8;
        /// An RMA / atomic write.
        const WRITE = 1 << 9;
        /// A receive.
        const RECV = 1 << 10;
        /// A send.
        const SEND = 1 << 11;
        /// A remote read of local memory (FI_RMA_EVENT).
        const REMOTE_READ = 1 << 12;
        /// A remote write of local memory (FI_RMA_EVENT).
        const REMOTE_WRITE = 1 << 13;
        /// The multi-receive buffer is released (no more messages go in).
        const MULTI_RECV = 1 << 16;
        /// `data` holds remote CQ data.
        const REMOTE_CQ_DATA = 1 << 17;
        /// A message found by FI_PEEK is available.
        const MORE = 1 << 18;
    }
}

/// Attributes of a completion queue (`struct fi_cq_attr`).
///
/// The default is block-capable: `wait_obj` is [`WaitObj::Unspec`] (so
/// `sread`, `wait_fd` and `trywait` work), unlike C's zeroed struct,
/// whose FI_WAIT_NONE asks for a CQ that can only be polled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CqAttr {
    /// Minimum number of entries (0: the provider's default).
    pub size: usize,
    /// Which fields the entries carry.
    pub format: CqFormat,
    /// How to wait for completions.
    pub wait_obj: WaitObj,
    /// Wake a waiter only after this many completions (with
    /// FI_WAIT_COND threshold semantics); 0 for every completion.
    pub wait_threshold: usize,
}

impl Default for CqAttr {
    /// The provider's size and format, a wait object of the provider's
    /// choice ([`WaitObj::Unspec`]), no threshold.
    fn default() -> Self {
        CqAttr {
            size: 0,
            format: CqFormat::Unspec,
            wait_obj: WaitObj::Unspec,
            wait_threshold: 0,
        }
    }
}

/// One completion (`fi_cq_tagged_entry`: the largest format; fields that
/// the CQ's format does not carry are zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqEntry {
    /// The operation's context.
    pub context: u64,
    /// What completed.
    pub flags: CompletionFlags,
    /// Bytes transferred (received bytes for receives).
    pub len: usize,
    /// Where the data was placed (multi-receive), as an address.
    pub buf: u64,
    /// Remote CQ data, with FI_REMOTE_CQ_DATA.
    pub data: u64,
    /// The tag of a tagged receive.
    pub tag: u64,
}

/// An error completion (`struct fi_cq_err_entry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CqErrEntry {
    /// The completion fields, as far as known.
    pub entry: CqEntry,
    /// Bytes that did not fit (truncation).
    pub olen: usize,
    /// The error.
    pub err: ErrorKind,
    /// Provider-specific error number.
    pub prov_errno: i32,
    /// Provider-specific text (`fi_cq_strerror`).
    pub err_text: String,
    /// Source of the failed receive, when known (with FI_SOURCE_ERR).
    pub src_addr: Option<crate::addr::Address>,
}

/// A completion queue (`fi_cq(3)`). Reading drives progress for
/// FI_PROGRESS_MANUAL domains.
pub trait CompletionQueue: AsAny + Send + Sync {
    /// Moves up to `out.len()` completions into `out` (`fi_cq_read`);
    /// returns how many, `Again` when there are none, `Avail` when an error
    /// completion is next (read it with [`readerr`]).
    ///
    /// [`readerr`]: CompletionQueue::readerr
    fn read(&self, out: &mut [CqEntry]) -> Result<usize>;

    /// As [`read`](CompletionQueue::read), also filling the source address
    /// of each completion (`fi_cq_readfrom`; `FiAddr::NOTAVAIL` when the
    /// source is not in the AV).
    fn readfrom(&self, out: &mut [CqEntry], src: &mut [FiAddr]) -> Result<usize>;

    /// Takes the next error completion (`fi_cq_readerr`); `Again` if none.
    fn readerr(&self) -> Result<CqErrEntry>;

    /// Blocks until at least one completion or the timeout (`None`:
    /// forever), then reads (`fi_cq_sread`); `Again` on timeout.
    fn sread(&self, out: &mut [CqEntry], timeout: Option<Duration>) -> Result<usize>;

    /// As [`sread`](CompletionQueue::sread) with source addresses
    /// (`fi_cq_sreadfrom`).
    fn sreadfrom(
        &self,
        out: &mut [CqEntry],
        src: &mut [FiAddr],
        timeout: Option<Duration>,
    ) -> Result<usize>;

    /// Wakes a thread blocked in `sread` (`fi_cq_signal`).
    fn signal(&self) -> Result<()>;

    /// The fd that becomes readable when completions may be ready
    /// (`FI_GETWAIT`), for poll / epoll / tokio's `AsyncFd`; `None` without
    /// an fd wait object.
    fn wait_fd(&self) -> Option<BorrowedFd<'_>>;

    /// Tells whether it is safe to sleep on [`wait_fd`](CompletionQueue::wait_fd)
    /// outside any call (`fi_trywait`): drives progress, and returns `Ok`
    /// once nothing is waiting to be read and the fd will turn readable
    /// when a completion arrives or progress is needed; `Again` when there is
    /// something to read first (read it, then call `trywait` again). Call
    /// it before every sleep on the fd. `NoSys` without a wait fd.
    ///
    /// The default suits providers whose fd is always accurate (readable
    /// exactly while something is there): `Ok` whenever there is an fd.
    fn trywait(&self) -> Result<()> {
        match self.wait_fd() {
            Some(_) => Ok(()),
            None => Err(crate::error::Error::new(
                ErrorKind::NoSys,
                "trywait on an object without a wait fd (FI_WAIT_NONE)",
            )),
        }
    }
}

/// Attributes of an event queue (`struct fi_eq_attr`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EqAttr {
    /// Minimum number of entries.
    pub size: usize,
    /// How to wait for events.
    pub wait_obj: WaitObj,
}

/// A connection-management or asynchronous-completion event
/// (`fi_eq_read`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EqEvent {
    /// A peer asks to connect (`FI_CONNREQ`): open an endpoint with this
    /// `info` (its `handle` names the request) and accept, or reject.
    ConnReq {
        /// The passive endpoint's context.
        fid: u64,
        /// Entry to open the accepting endpoint with.
        info: Box<Info>,
        /// The peer's private data.
        data: Vec<u8>,
    },
    /// A connection is established (`FI_CONNECTED`).
    Connected {
        /// The endpoint's context.
        fid: u64,
        /// The peer's private data.
        data: Vec<u8>,
    },
    /// The connection is closed (`FI_SHUTDOWN`).
    Shutdown {
        /// The endpoint's context.
        fid: u64,
    },
    /// An asynchronous MR registration finished (`FI_MR_COMPLETE`).
    MrComplete {
        /// The region's context.
        fid: u64,
        /// Its context.
        context: u64,
    },
    /// An asynchronous AV insert finished (`FI_AV_COMPLETE`).
    AvComplete {
        /// The AV's context.
        fid: u64,
        /// The insert's context.
        context: u64,
        /// Addresses inserted.
        count: usize,
    },
    /// An event the application queued itself (`fi_eq_write`): its event
    /// number and its bytes, read back unchanged.
    Written {
        /// The event number (`FI_CONNREQ`, ..., or the application's own).
        event: u32,
        /// The entry's bytes.
        data: Vec<u8>,
    },
}

/// An error event (`struct fi_eq_err_entry`): for example a refused
/// connection, with the peer's rejection data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EqErrEntry {
    /// The object the error concerns.
    pub fid: u64,
    /// The operation's context.
    pub context: u64,
    /// The error (`ConnRefused`, `TimedOut`, ...).
    pub err: ErrorKind,
    /// Provider-specific error number.
    pub prov_errno: i32,
    /// Private data from the peer (a rejection's).
    pub data: Vec<u8>,
    /// Provider-specific text.
    pub err_text: String,
}

/// An event queue (`fi_eq(3)`).
pub trait EventQueue: AsAny + Send + Sync {
    /// Takes the next event (`fi_eq_read`); `Again` if none, `Avail` if an
    /// error event is next.
    fn read(&self) -> Result<EqEvent>;

    /// Takes the next error event (`fi_eq_readerr`).
    fn readerr(&self) -> Result<EqErrEntry>;

    /// Blocks for the next event up to the timeout (`fi_eq_sread`).
    fn sread(&self, timeout: Option<Duration>) -> Result<EqEvent>;

    /// Queues an application event (`fi_eq_write`).
    fn write(&self, event: EqEvent) -> Result<()>;

    /// The fd readable when events may be ready (`FI_GETWAIT`); `None`
    /// without an fd wait object.
    fn wait_fd(&self) -> Option<BorrowedFd<'_>>;

    /// Tells whether it is safe to sleep on [`wait_fd`](EventQueue::wait_fd)
    /// outside any call (`fi_trywait`): drives progress, and returns `Ok`
    /// once nothing is waiting to be read and the fd will turn readable
    /// when an event arrives or progress is needed; `Again` when there is
    /// something to read first (read it, then call `trywait` again). Call
    /// it before every sleep on the fd. `NoSys` without a wait fd.
    ///
    /// The default suits providers whose fd is always accurate (readable
    /// exactly while something is there): `Ok` whenever there is an fd.
    fn trywait(&self) -> Result<()> {
        match self.wait_fd() {
            Some(_) => Ok(()),
            None => Err(crate::error::Error::new(
                ErrorKind::NoSys,
                "trywait on an object without a wait fd (FI_WAIT_NONE)",
            )),
        }
    }
}

/// Attributes of a counter (`struct fi_cntr_attr`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CntrAttr {
    /// How to wait on the counter.
    pub wait_obj: WaitObj,
}

/// A counter of completed operations (`fi_cntr(3)`).
pub trait Counter: AsAny + Send + Sync {
    /// Successful completions (`fi_cntr_read`).
    fn read(&self) -> u64;
    /// Failed completions (`fi_cntr_readerr`).
    fn readerr(&self) -> u64;
    /// Adds to the success count (`fi_cntr_add`).
    fn add(&self, value: u64) -> Result<()>;
    /// Sets the success count (`fi_cntr_set`).
    fn set(&self, value: u64) -> Result<()>;
    /// Adds to the error count (`fi_cntr_adderr`).
    fn adderr(&self, value: u64) -> Result<()>;
    /// Sets the error count (`fi_cntr_seterr`).
    fn seterr(&self, value: u64) -> Result<()>;
    /// Blocks until the count reaches `threshold` or the timeout
    /// (`fi_cntr_wait`); `TimedOut` on timeout, `Avail` if errors rose.
    fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()>;

    /// The fd that becomes readable when the counter may have changed
    /// (`FI_GETWAIT`), for poll / epoll / tokio's `AsyncFd`; `None` (the
    /// default) without an fd wait object.
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Tells whether it is safe to sleep on [`wait_fd`](Counter::wait_fd)
    /// outside any call (`fi_trywait`): drives progress, and returns `Ok`
    /// once nothing is waiting to be read and the fd will turn readable
    /// when a change of the counter arrives or progress is needed; `Again` when there is
    /// something to read first (read it, then call `trywait` again). Call
    /// it before every sleep on the fd. `NoSys` without a wait fd.
    ///
    /// The default suits providers whose fd is always accurate (readable
    /// exactly while something is there): `Ok` whenever there is an fd.
    fn trywait(&self) -> Result<()> {
        match self.wait_fd() {
            Some(_) => Ok(()),
            None => Err(crate::error::Error::new(
                ErrorKind::NoSys,
                "trywait on an object without a wait fd (FI_WAIT_NONE)",
            )),
        }
    }
}

/// An opaque handle to a connection request, as carried in `Info::handle`.
pub type ConnReqHandle = Handle;
