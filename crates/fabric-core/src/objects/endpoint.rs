//! Endpoints and their operation groups: messages, tagged messages, RMA,
//! atomics, connection management.

use crate::addr::Address;
use crate::error::{Error, ErrorKind, Result};
use crate::flags::OpFlags;
use crate::info::Info;
use crate::names::fi_enum;

use super::{AddressVector, AsAny, CompletionQueue, Counter, EventQueue};

/// An address in an address vector (`fi_addr_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiAddr(pub u64);

impl FiAddr {
    /// `FI_ADDR_UNSPEC`: no address (connected endpoints, or "any source"
    /// for receives).
    pub const UNSPEC: FiAddr = FiAddr(u64::MAX);
    /// `FI_ADDR_NOTAVAIL`: the source of a completion is not in the AV.
    pub const NOTAVAIL: FiAddr = FiAddr(u64::MAX);
}

/// One piece of a buffer of a zero-copy operation (`struct iovec`).
///
/// A raw pointer, because the buffer outlives the call that names it; see
/// the `# Safety` section of the operations taking it.
#[derive(Debug, Clone, Copy)]
pub struct IoVec {
    /// Start of the piece.
    pub addr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

/// The local descriptor of registered memory (`fi_mr_desc`), or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MrDesc(pub u64);

/// A remote memory range (`struct fi_rma_iov`): address (or offset, without
/// FI_MR_VIRT_ADDR), length and key.
///
/// # Addressing
///
/// How `addr` is read depends on the target domain's `mr_mode`:
///
/// - with `FI_MR_VIRT_ADDR` (or `FI_MR_BASIC`), `addr` is a virtual
///   address in the target process: the region's start is the address of
///   the buffer it registered, so the target sends that address (with the
///   key) to its peers;
/// - without it, `addr` is an offset: the region's first byte is at the
///   `offset` it was registered with (`MrAttr::offset`, usually 0), so
///   `addr - offset` is the byte within the region, and the target sends
///   only the key.
///
/// The range must lie inside the region and the region must grant the
/// access (FI_REMOTE_READ / FI_REMOTE_WRITE); otherwise the target refuses
/// the operation, nothing is read or written, and the initiator gets an
/// error completion saying why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmaIov {
    /// Remote address (FI_MR_VIRT_ADDR) or offset into the region.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Remote key of the region.
    pub key: u64,
}

/// A message operation (`struct fi_msg`, with the tag fields of
/// `fi_msg_tagged`).
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    /// The buffer pieces.
    pub iov: &'a [IoVec],
    /// One descriptor per piece, or empty.
    pub desc: &'a [MrDesc],
    /// Peer (RDM, DGRAM; `UNSPEC` on connected endpoints, or for any source
    /// on receives).
    pub addr: FiAddr,
    /// Tag (tagged operations).
    pub tag: u64,
    /// Bits of the tag to ignore when matching (tagged receives).
    pub ignore: u64,
    /// The application's context, returned in the completion.
    pub context: u64,
    /// Remote CQ data (with FI_REMOTE_CQ_DATA).
    pub data: u64,
}

impl<'a> Msg<'a> {
    /// A message of one piece (`desc` 0: no descriptor) and no remote CQ
    /// data, as `fi_recv` and `fi_trecv` give one.
    pub fn one(
        iov: &'a [IoVec; 1],
        desc: &'a [MrDesc; 1],
        addr: FiAddr,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> Msg<'a> {
        Msg {
            iov,
            desc: if desc[0].0 == 0 { &[] } else { desc },
            addr,
            tag,
            ignore,
            context,
            data: 0,
        }
    }
}

/// An RMA operation (`struct fi_msg_rma`).
#[derive(Debug, Clone, Copy)]
pub struct RmaMsg<'a> {
    /// Local buffer pieces.
    pub iov: &'a [IoVec],
    /// One descriptor per piece, or empty.
    pub desc: &'a [MrDesc],
    /// Peer.
    pub addr: FiAddr,
    /// Remote ranges.
    pub rma_iov: &'a [RmaIov],
    /// The application's context.
    pub context: u64,
    /// Remote CQ data (with FI_REMOTE_CQ_DATA).
    pub data: u64,
}

fi_enum! {
    /// Atomic operation (`enum fi_op`).
    pub enum AtomicOp {
        /// Minimum.
        #[default]
        Min = 0 => "FI_MIN",
        /// Maximum.
        Max = 1 => "FI_MAX",
        /// Sum.
        Sum = 2 => "FI_SUM",
        /// Product.
        Prod = 3 => "FI_PROD",
        /// Logical or.
        Lor = 4 => "FI_LOR",
        /// Logical and.
        Land = 5 => "FI_LAND",
        /// Bitwise or.
        Bor = 6 => "FI_BOR",
        /// Bitwise and.
        Band = 7 => "FI_BAND",
        /// Logical xor.
        Lxor = 8 => "FI_LXOR",
        /// Bitwise xor.
        Bxor = 9 => "FI_BXOR",
        /// Read (fetch only).
        AtomicRead = 10 => "FI_ATOMIC_READ",
        /// Write.
        AtomicWrite = 11 => "FI_ATOMIC_WRITE",
        /// Compare and swap if equal.
        Cswap = 12 => "FI_CSWAP",
        /// Swap if not equal.
        CswapNe = 13 => "FI_CSWAP_NE",
        /// Swap if less or equal.
        CswapLe = 14 => "FI_CSWAP_LE",
        /// Swap if less.
        CswapLt = 15 => "FI_CSWAP_LT",
        /// Swap if greater or equal.
        CswapGe = 16 => "FI_CSWAP_GE",
        /// Swap if greater.
        CswapGt = 17 => "FI_CSWAP_GT",
        /// Masked swap.
        Mswap = 18 => "FI_MSWAP",
    }
}

fi_enum! {
    /// Atomic datatype (`enum fi_datatype`).
    pub enum Datatype {
        /// i8.
        #[default]
        Int8 = 0 => "FI_INT8",
        /// u8.
        Uint8 = 1 => "FI_UINT8",
        /// i16.
        Int16 = 2 => "FI_INT16",
        /// u16.
        Uint16 = 3 => "FI_UINT16",
        /// i32.
        Int32 = 4 => "FI_INT32",
        /// u32.
        Uint32 = 5 => "FI_UINT32",
        /// i64.
        Int64 = 6 => "FI_INT64",
        /// u64.
        Uint64 = 7 => "FI_UINT64",
        /// f32.
        Float = 8 => "FI_FLOAT",
        /// f64.
        Double = 9 => "FI_DOUBLE",
        /// Complex f32.
        FloatComplex = 10 => "FI_FLOAT_COMPLEX",
        /// Complex f64.
        DoubleComplex = 11 => "FI_DOUBLE_COMPLEX",
        /// long double.
        LongDouble = 12 => "FI_LONG_DOUBLE",
        /// Complex long double.
        LongDoubleComplex = 13 => "FI_LONG_DOUBLE_COMPLEX",
    }
}

impl Datatype {
    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            Datatype::Int8 | Datatype::Uint8 => 1,
            Datatype::Int16 | Datatype::Uint16 => 2,
            Datatype::Int32 | Datatype::Uint32 | Datatype::Float => 4,
            Datatype::Int64 | Datatype::Uint64 | Datatype::Double | Datatype::FloatComplex => 8,
            Datatype::DoubleComplex | Datatype::LongDouble => 16,
            Datatype::LongDoubleComplex => 32,
        }
    }
}

/// An atomic operation (`struct fi_msg_atomic` plus the fetch and compare
/// buffers of `fi_fetch_atomicmsg` / `fi_compare_atomicmsg`).
#[derive(Debug, Clone, Copy)]
pub struct AtomicMsg<'a> {
    /// Operand buffer pieces (elements of `datatype`).
    pub iov: &'a [IoVec],
    /// Descriptors of the operand buffers.
    pub desc: &'a [MrDesc],
    /// Peer.
    pub addr: FiAddr,
    /// Remote ranges (lengths in elements).
    pub rma_iov: &'a [RmaIov],
    /// Element type.
    pub datatype: Datatype,
    /// Operation.
    pub op: AtomicOp,
    /// Where the old values are returned (fetch and compare variants).
    pub result: &'a [IoVec],
    /// Compare operands (compare variants).
    pub compare: &'a [IoVec],
    /// The application's context.
    pub context: u64,
    /// Remote CQ data.
    pub data: u64,
}

const NOT_SUPPORTED: Error = Error::from_kind(ErrorKind::OpNotSupp);

/// Message operations (`fi_msg(3)`).
pub trait MsgOps {
    /// Sends `buf` without a completion; the buffer may be reused when the
    /// call returns (`fi_inject`, or `fi_injectdata` with `data`). At most
    /// `tx_attr.inject_size` bytes.
    fn inject(&self, buf: &[u8], dest: FiAddr, data: Option<u64>) -> Result<()> {
        let _ = (buf, dest, data);
        Err(NOT_SUPPORTED)
    }

    /// Sends a message (`fi_sendmsg`; `fi_send`, `fi_sendv`, `fi_senddata`
    /// are this with one piece, several pieces, FI_REMOTE_CQ_DATA).
    ///
    /// # Safety
    ///
    /// Unless `flags` has FI_INJECT, the memory of `msg.iov` must stay valid
    /// and unchanged until the operation's completion has been read.
    unsafe fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let _ = (msg, flags);
        Err(NOT_SUPPORTED)
    }

    /// Posts a receive buffer (`fi_recvmsg`; `fi_recv` / `fi_recvv` are
    /// this). With FI_MULTI_RECV the buffer takes several messages.
    ///
    /// # Safety
    ///
    /// The memory of `msg.iov` must stay valid, and must not be read or
    /// written by anyone else, until the buffer's (last) completion has been
    /// read or the receive was cancelled.
    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let _ = (msg, flags);
        Err(NOT_SUPPORTED)
    }

    /// Posts one receive buffer (`fi_recv`): [`recvmsg`](Self::recvmsg)
    /// with one piece (`desc` 0: none), which a provider may take by a
    /// shorter path. Programs such as `fi_pingpong` post each receive
    /// between a completion and their answer, on the round trip's path.
    ///
    /// # Safety
    ///
    /// As [`recvmsg`](Self::recvmsg).
    unsafe fn recv_one(
        &self,
        buf: IoVec,
        desc: MrDesc,
        src: FiAddr,
        context: u64,
        flags: OpFlags,
    ) -> Result<()> {
        let (iov, d) = ([buf], [desc]);
        let msg = Msg::one(&iov, &d, src, 0, 0, context);
        // SAFETY: the caller's contract, which is recvmsg's.
        unsafe { self.recvmsg(&msg, flags) }
    }
}

/// Tagged message operations (`fi_tagged(3)`).
pub trait TaggedOps {
    /// Tagged inject (`fi_tinject`, `fi_tinjectdata`).
    fn tinject(&self, buf: &[u8], dest: FiAddr, tag: u64, data: Option<u64>) -> Result<()> {
        let _ = (buf, dest, tag, data);
        Err(NOT_SUPPORTED)
    }

    /// Tagged send (`fi_tsendmsg` and its short forms).
    ///
    /// # Safety
    ///
    /// As [`MsgOps::sendmsg`].
    unsafe fn tsendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let _ = (msg, flags);
        Err(NOT_SUPPORTED)
    }

    /// Tagged receive (`fi_trecvmsg`), with FI_PEEK, FI_CLAIM and FI_DISCARD.
    ///
    /// # Safety
    ///
    /// As [`MsgOps::recvmsg`].
    unsafe fn trecvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let _ = (msg, flags);
        Err(NOT_SUPPORTED)
    }

    /// Posts one tagged receive buffer (`fi_trecv`): as
    /// [`MsgOps::recv_one`], for [`trecvmsg`](Self::trecvmsg).
    ///
    /// # Safety
    ///
    /// As [`MsgOps::recvmsg`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn trecv_one(
        &self,
        buf: IoVec,
        desc: MrDesc,
        src: FiAddr,
        tag: u64,
        ignore: u64,
        context: u64,
        flags: OpFlags,
    ) -> Result<()> {
        let (iov, d) = ([buf], [desc]);
        let msg = Msg::one(&iov, &d, src, tag, ignore, context);
        // SAFETY: the caller's contract, which is trecvmsg's.
        unsafe { self.trecvmsg(&msg, flags) }
    }
}

/// RMA operations (`fi_rma(3)`), checked at the target against the key,
/// bounds and access rights of its memory region.
pub trait RmaOps {
    /// RMA write without completion (`fi_inject_write`,
    /// `fi_inject_writedata`).
    fn inject_write(
        &self,
        buf: &[u8],
        dest: FiAddr,
        remote: RmaIov,
        data: Option<u64>,
    ) -> Result<()> {
        let _ = (buf, dest, remote, data);
        Err(NOT_SUPPORTED)
    }

    /// RMA read into local memory (`fi_readmsg`).
    ///
    /// # Safety
    ///
    /// As [`MsgOps::recvmsg`] for `msg.iov`.
    unsafe fn readmsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        let _ = (msg, flags);
        Err(NOT_SUPPORTED)
    }

    /// RMA write from local memory (`fi_writemsg`, `fi_writedata`).
    ///
    /// # Safety
    ///
    /// As [`MsgOps::sendmsg`] for `msg.iov`.
    unsafe fn writemsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        let _ = (msg, flags);
        Err(NOT_SUPPORTED)
    }
}

/// Atomic operations (`fi_atomic(3)`), executed at the target.
pub trait AtomicOps {
    /// Whether `op` on `datatype` is supported, and how many elements one
    /// operation may carry (`fi_atomicvalid` and its fetch / compare forms).
    fn atomic_valid(
        &self,
        datatype: Datatype,
        op: AtomicOp,
        fetch: bool,
        compare: bool,
    ) -> Result<usize> {
        let _ = (datatype, op, fetch, compare);
        Err(NOT_SUPPORTED)
    }

    /// An atomic operation: plain (`fi_atomicmsg`), fetching
    /// (`fi_fetch_atomicmsg`, `msg.result` set) or comparing
    /// (`fi_compare_atomicmsg`, `msg.compare` set too).
    ///
    /// # Safety
    ///
    /// The operand and compare buffers as [`MsgOps::sendmsg`], the result
    /// buffers as [`MsgOps::recvmsg`].
    unsafe fn atomicmsg(&self, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        let _ = (msg, flags);
        Err(NOT_SUPPORTED)
    }
}

/// Connection management of MSG endpoints (`fi_cm(3)`).
pub trait CmOps {
    /// The local address (`fi_getname`).
    fn getname(&self) -> Result<Address> {
        Err(NOT_SUPPORTED)
    }

    /// The peer's address (`fi_getpeer`).
    fn getpeer(&self) -> Result<Address> {
        Err(NOT_SUPPORTED)
    }

    /// Starts connecting; completion is an EQ `Connected` event or an EQ
    /// error (`fi_connect`). `param` is private data for the peer.
    fn connect(&self, dest: &Address, param: &[u8]) -> Result<()> {
        let _ = (dest, param);
        Err(NOT_SUPPORTED)
    }

    /// Accepts the connection request this endpoint was opened for
    /// (`fi_accept`).
    fn accept(&self, param: &[u8]) -> Result<()> {
        let _ = param;
        Err(NOT_SUPPORTED)
    }

    /// Closes the connection; both sides get a `Shutdown` event
    /// (`fi_shutdown`).
    fn shutdown(&self) -> Result<()> {
        Err(NOT_SUPPORTED)
    }
}

/// What an endpoint is bound to (`fi_ep_bind`).
pub enum Bind<'a> {
    /// A CQ for transmit and / or receive completions; `selective`: only
    /// operations with FI_COMPLETION report successes
    /// (FI_SELECTIVE_COMPLETION).
    Cq {
        /// The queue.
        cq: &'a dyn CompletionQueue,
        /// Transmit completions go here.
        transmit: bool,
        /// Receive completions go here.
        recv: bool,
        /// FI_SELECTIVE_COMPLETION.
        selective: bool,
    },
    /// An event queue for connection events.
    Eq(&'a dyn EventQueue),
    /// An address vector (RDM, DGRAM).
    Av(&'a dyn AddressVector),
    /// A counter, counting the events named by `flags` (FI_SEND, FI_RECV,
    /// FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE).
    Cntr(&'a dyn Counter, crate::flags::Caps),
}

/// An active endpoint (`fi_endpoint(3)`): every operation group in one
/// vtable.
pub trait Endpoint: AsAny + MsgOps + TaggedOps + RmaOps + AtomicOps + CmOps + Send + Sync {
    /// The entry the endpoint was opened with, as altered by the provider.
    /// Its `tx_attr.op_flags` and `rx_attr.op_flags` are the endpoint's
    /// default flags: those of the short forms (`fi_send`, `fi_recv`,
    /// `fi_write`, ...), which are the `*msg` operations called with them
    /// (fi_endpoint(3)); opening fails with `BadFlags` when the provider
    /// does not accept them as defaults.
    fn info(&self) -> &Info;

    /// Binds a CQ, EQ, AV or counter (`fi_ep_bind`); before [`enable`].
    ///
    /// [`enable`]: Endpoint::enable
    fn bind(&self, what: Bind<'_>) -> Result<()>;

    /// Enables the endpoint once bound (`fi_enable`); data operations fail
    /// with `OpBadState` before.
    fn enable(&self) -> Result<()>;

    /// Cancels a posted receive by context (`fi_cancel`); its completion is
    /// an error completion with `Canceled`.
    fn cancel(&self, context: u64) -> Result<()> {
        let _ = context;
        Err(NOT_SUPPORTED)
    }

    /// The smallest room a multi-receive buffer keeps taking messages with
    /// (`fi_getopt(FI_OPT_MIN_MULTI_RECV)`): once less is left after a
    /// message, the buffer is released and that message's completion
    /// carries FI_MULTI_RECV.
    fn min_multi_recv(&self) -> Result<usize> {
        Err(NOT_SUPPORTED)
    }

    /// Sets [`min_multi_recv`](Endpoint::min_multi_recv)
    /// (`fi_setopt(FI_OPT_MIN_MULTI_RECV)`); it applies to messages placed
    /// from then on.
    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        let _ = bytes;
        Err(NOT_SUPPORTED)
    }

    /// The most connection private data (`fi_connect`, `fi_accept`,
    /// `fi_reject`) the provider carries
    /// (`fi_getopt(FI_OPT_CM_DATA_SIZE)`).
    fn cm_data_size(&self) -> Result<usize> {
        Err(NOT_SUPPORTED)
    }

    /// The id this endpoint's EQ events carry in their `fid` (connected
    /// endpoints), so that a caller can tell which endpoint an event
    /// concerns; `None` when the provider reports no events for it.
    fn event_id(&self) -> Option<u64> {
        None
    }

    /// Binds a shared receive context (`fi_ep_bind` of an srx); before
    /// [`enable`](Endpoint::enable), on an endpoint opened with
    /// `ep_attr.rx_ctx_cnt` = [`SHARED_CONTEXT`](crate::attr::SHARED_CONTEXT).
    /// From then on the messages arriving at this endpoint match the
    /// receives posted on `srx`; their completions still go to this
    /// endpoint's receive CQ and counter, and this endpoint's own receive
    /// calls are refused. `NoSys` from providers without shared receive
    /// contexts.
    fn bind_srx(&self, srx: &dyn SharedRx) -> Result<()> {
        let _ = srx;
        Err(Error::new(
            ErrorKind::NoSys,
            "this provider has no shared receive contexts",
        ))
    }
}

/// A shared receive context (`fi_srx_context(3)`): one set of posted
/// receives that the messages arriving at every endpoint bound to it
/// ([`Endpoint::bind_srx`]) match, in the order they were posted.
///
/// Receives go through [`MsgOps::recvmsg`] and [`TaggedOps::trecvmsg`]
/// (with FI_MULTI_RECV, and FI_PEEK / FI_CLAIM / FI_DISCARD on tagged
/// receives), one call through this trait object as on an endpoint. The
/// sends of [`MsgOps`] and [`TaggedOps`] are refused (`OpNotSupp`).
///
/// A receive completes on the receive CQ (and counter) of the endpoint
/// the message arrived at, with that endpoint's source address; what
/// concerns no message (a cancelled receive, a peek that found nothing,
/// the receives failed when the context closes) goes to the endpoint bound
/// first that is still open. Receives may be posted before any endpoint is
/// bound or enabled: they are kept. Dropping the context while endpoints
/// use it keeps it alive until the last of them closes (the C layer
/// answers `fi_close` with `FI_EBUSY` then).
pub trait SharedRx: AsAny + MsgOps + TaggedOps + Send + Sync {
    /// The receive attributes the context was opened with.
    fn attr(&self) -> &crate::attr::RxAttr;

    /// Cancels a receive posted on the context (`fi_cancel`); it completes
    /// with `Canceled`. `NoEnt` when none is posted with this context.
    fn cancel(&self, context: u64) -> Result<()>;

    /// `fi_getopt(FI_OPT_MIN_MULTI_RECV)` of the context's multi-receive
    /// buffers.
    fn min_multi_recv(&self) -> Result<usize>;

    /// `fi_setopt(FI_OPT_MIN_MULTI_RECV)`.
    fn set_min_multi_recv(&self, bytes: usize) -> Result<()>;

    /// Endpoints bound to the context and still open.
    fn bound_endpoints(&self) -> usize;
}

/// A passive (listening) endpoint of MSG endpoints (`fi_passive_ep`).
pub trait PassiveEndpoint: AsAny + Send + Sync {
    /// Binds the EQ that receives connection requests.
    fn bind_eq(&self, eq: &dyn EventQueue) -> Result<()>;

    /// Starts listening (`fi_listen`); requests arrive as `ConnReq` events.
    fn listen(&self) -> Result<()>;

    /// The address peers connect to (`fi_getname`).
    fn getname(&self) -> Result<Address>;

    /// Rejects a connection request, with private data (`fi_reject`).
    fn reject(&self, handle: crate::attr::Handle, param: &[u8]) -> Result<()>;

    /// The most connection private data the provider carries
    /// (`fi_getopt(FI_OPT_CM_DATA_SIZE)` on a passive endpoint).
    fn cm_data_size(&self) -> Result<usize> {
        Err(NOT_SUPPORTED)
    }

    /// The id its connection requests carry in their `fid`.
    fn event_id(&self) -> Option<u64> {
        None
    }
}
