//! `fi_tostr` and `fi_tostr_r`: libfabric 1.17's text for C values.
//!
//! Every `enum fi_type` value of 1.17's `<rdma/fabric.h>` is printed, in the
//! text of libfabric 1.17 for the same input (checked byte for byte against
//! Debian's `libfabric.so.1` by `tests/tostr.rs`, on every flag bit, every
//! enumeration value and its neighbours, and filled-in structures):
//!
//! - flag sets (`FI_TYPE_CAPS`, `_OP_FLAGS`, `_MODE`, `_MSG_ORDER`,
//!   `_CQ_EVENT_FLAGS`, `_MR_MODE`): the names of the known bits, in
//!   libfabric's order, separated by `", "`; other bits are not shown, and
//!   the empty set is the empty string;
//! - enumerations: the FI_ name; `Unknown` for other values, `Provider
//!   specific` for address formats and protocols with `FI_PROV_SPECIFIC`;
//!   log levels and subsystems in libfabric's lower-case words (`warn`,
//!   `ep_ctrl`);
//! - structures (`FI_TYPE_INFO` and the `_ATTR` types): a `name:` line and
//!   one indented `field: value` line per field, as `fi_info -v` shows them;
//!   a NULL sub-structure of `fi_info` is `(null)`, addresses are decoded by
//!   `addr_format` (libfabric's `fi_sockaddr_in://...` forms), `handle` and
//!   `nic` are pointers (`%p`) unless their `fid` has a `tostr` operation,
//!   whose text is used instead;
//! - `FI_TYPE_FID`: the object's own `tostr` text when its operations have
//!   one (called with the room left, 8192 bytes for `fi_tostr`), else
//!   `fid: <pointer>`;
//! - NULL `data` gives NULL, and a type beyond `FI_TYPE_LOG_SUBSYS` (such
//!   as the types later releases added) the text `Unknown type`.
//!
//! Where libfabric's text is wrong, this library follows the man pages
//! instead (each difference is asserted by `tests/tostr.rs`):
//!
//! - `FI_TYPE_VERSION` names this library (`fabric-rs <version> (libfabric
//!   API 1.17)`, so that programs such as `fi_info --version` tell which
//!   library they run on) and ignores `data` even when it is NULL, as
//!   fi_fabric(3) says; libfabric answers `1.17.0`, and NULL for NULL data.
//! - Documented names that libfabric leaves out are printed: the capability
//!   `FI_AV_USER_ID` (fi_getinfo(3); after the others), the operation flag
//!   `FI_COMMIT_COMPLETE` (fi_endpoint(3); after `FI_DELIVERY_COMPLETE`),
//!   the completion flag `FI_MULTICAST` (fi_cq(3); after `FI_TAGGED`), and
//!   the collective datatype `FI_VOID` and operation `FI_NOOP`
//!   (fi_collective(3)), which libfabric calls `Unknown`.
//! - `fi_domain_attr.domain` is printed whole; libfabric prints it with
//!   `%x`, which keeps only its low 32 bits.
//! - Addresses are read within `src_addrlen` / `dest_addrlen` bytes: an
//!   `FI_ADDR_STR` address ends at its NUL or at that length, and an address
//!   shorter than the bytes its format prints shows as nothing. libfabric
//!   reads the bytes it prints whatever the length says.
//! - In `FI_TYPE_INFO`, the `tostr` text of `handle` or `nic` takes the place
//!   of its line; libfabric writes it over the start of the buffer, losing
//!   the lines before it.
//! - `fi_tostr_r` keeps the first `len - 1` bytes of a text that does not
//!   fit; libfabric keeps `len - 2` bytes and then drops a `", "` left at
//!   the end of a truncated flag list.
//!
//! The text has no length limit (libfabric's `fi_tostr` stops at its 8 KiB
//! buffer).

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::fmt::{self, Write as _};
use std::mem::offset_of;
use std::ptr;

use crate::guard;
use crate::symver::symver;
use crate::types::fi_type::*;
use crate::types::{FiDomainAttr, FiEpAttr, FiFabricAttr, FiInfo, FiRxAttr, FiTxAttr};

/// What `fi_tostr(..., FI_TYPE_VERSION)` says: this library, and the
/// libfabric API it implements.
pub(crate) const VERSION_TEXT: &str = concat!(
    "fabric-rs ",
    env!("CARGO_PKG_VERSION"),
    " (libfabric API 1.17)"
);

/// The size of libfabric's `fi_tostr` buffer: the room a `tostr` operation
/// is offered by `fi_tostr` (less what is already written).
const LIBFABRIC_BUFFER: usize = 8192;

/// The most room a `tostr` operation is offered (the scratch buffer it
/// writes to is allocated): far more than an object's description needs.
const MAX_OBJECT_TEXT: usize = 1 << 16;

/// `FI_PROV_SPECIFIC`: the bit of provider-defined enumeration values.
const FI_PROV_SPECIFIC: u32 = 1 << 31;

/// `FI_SHARED_CONTEXT`, as context counts hold it.
const FI_SHARED_CONTEXT: usize = usize::MAX;

// ------------------------------------------------------------------ names

/// A flag set's names in the order libfabric prints them.
type Flags = &'static [(u64, &'static str)];

/// An enumeration's names by value.
type Names = &'static [(u32, &'static str)];

/// `FI_TYPE_CAPS` and the `caps` fields. libfabric 1.17 prints `FI_HMEM`
/// last and leaves out `FI_AV_USER_ID` (1 << 41), a capability of
/// fi_getinfo(3): it is printed here, at the end.
const CAPS: Flags = &[
    (1 << 1, "FI_MSG"),
    (1 << 2, "FI_RMA"),
    (1 << 3, "FI_TAGGED"),
    (1 << 4, "FI_ATOMIC"),
    (1 << 5, "FI_MULTICAST"),
    (1 << 6, "FI_COLLECTIVE"),
    (1 << 8, "FI_READ"),
    (1 << 9, "FI_WRITE"),
    (1 << 10, "FI_RECV"),
    (1 << 11, "FI_SEND"),
    (1 << 12, "FI_REMOTE_READ"),
    (1 << 13, "FI_REMOTE_WRITE"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 20, "FI_TRIGGER"),
    (1 << 21, "FI_FENCE"),
    (1 << 48, "FI_VARIABLE_MSG"),
    (1 << 49, "FI_RMA_PMEM"),
    (1 << 50, "FI_SOURCE_ERR"),
    (1 << 51, "FI_LOCAL_COMM"),
    (1 << 52, "FI_REMOTE_COMM"),
    (1 << 53, "FI_SHARED_AV"),
    (1 << 56, "FI_RMA_EVENT"),
    (1 << 57, "FI_SOURCE"),
    (1 << 58, "FI_NAMED_RX_CTX"),
    (1 << 59, "FI_DIRECTED_RECV"),
    (1 << 47, "FI_HMEM"),
    (1 << 41, "FI_AV_USER_ID"),
];

/// `FI_TYPE_MODE` and the `mode` fields, from the highest bit down.
const MODE: Flags = &[
    (1 << 59, "FI_CONTEXT"),
    (1 << 58, "FI_MSG_PREFIX"),
    (1 << 57, "FI_ASYNC_IOV"),
    (1 << 56, "FI_RX_CQ_DATA"),
    (1 << 55, "FI_LOCAL_MR"),
    (1 << 54, "FI_NOTIFY_FLAGS_ONLY"),
    (1 << 53, "FI_RESTRICTED_COMP"),
    (1 << 52, "FI_CONTEXT2"),
    (1 << 51, "FI_BUFFERED_RECV"),
];

/// `FI_TYPE_OP_FLAGS` and the `op_flags` fields. libfabric 1.17 leaves out
/// `FI_COMMIT_COMPLETE` (1 << 30), an operation flag of fi_endpoint(3):
/// it is printed here, after `FI_DELIVERY_COMPLETE`.
const OP_FLAGS: Flags = &[
    (1 << 5, "FI_MULTICAST"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 18, "FI_MORE"),
    (1 << 19, "FI_PEEK"),
    (1 << 20, "FI_TRIGGER"),
    (1 << 21, "FI_FENCE"),
    (1 << 24, "FI_COMPLETION"),
    (1 << 25, "FI_INJECT"),
    (1 << 26, "FI_INJECT_COMPLETE"),
    (1 << 27, "FI_TRANSMIT_COMPLETE"),
    (1 << 28, "FI_DELIVERY_COMPLETE"),
    (1 << 30, "FI_COMMIT_COMPLETE"),
    (1 << 31, "FI_MATCH_COMPLETE"),
    (1 << 29, "FI_AFFINITY"),
    (1 << 59, "FI_CLAIM"),
    (1 << 58, "FI_DISCARD"),
];

/// `FI_TYPE_MSG_ORDER` and the `msg_order` fields (`FI_ORDER_DATA` is a
/// completion order, not shown here).
const MSG_ORDER: Flags = &[
    (1 << 0, "FI_ORDER_RAR"),
    (1 << 1, "FI_ORDER_RAW"),
    (1 << 2, "FI_ORDER_RAS"),
    (1 << 3, "FI_ORDER_WAR"),
    (1 << 4, "FI_ORDER_WAW"),
    (1 << 5, "FI_ORDER_WAS"),
    (1 << 6, "FI_ORDER_SAR"),
    (1 << 7, "FI_ORDER_SAW"),
    (1 << 8, "FI_ORDER_SAS"),
    (1 << 32, "FI_ORDER_RMA_RAR"),
    (1 << 33, "FI_ORDER_RMA_RAW"),
    (1 << 34, "FI_ORDER_RMA_WAR"),
    (1 << 35, "FI_ORDER_RMA_WAW"),
    (1 << 36, "FI_ORDER_ATOMIC_RAR"),
    (1 << 37, "FI_ORDER_ATOMIC_RAW"),
    (1 << 38, "FI_ORDER_ATOMIC_WAR"),
    (1 << 39, "FI_ORDER_ATOMIC_WAW"),
];

/// `FI_ORDER_STRICT`: the nine send/receive orders.
const FI_ORDER_STRICT: u64 = 0x1ff;
/// `FI_ORDER_DATA`.
const FI_ORDER_DATA: u64 = 1 << 16;

/// `FI_TYPE_CQ_EVENT_FLAGS`: the completion flags of fi_cq(3), in its
/// order. libfabric 1.17 leaves out `FI_MULTICAST`: it is printed here.
const CQ_FLAGS: Flags = &[
    (1 << 11, "FI_SEND"),
    (1 << 10, "FI_RECV"),
    (1 << 2, "FI_RMA"),
    (1 << 4, "FI_ATOMIC"),
    (1 << 1, "FI_MSG"),
    (1 << 3, "FI_TAGGED"),
    (1 << 5, "FI_MULTICAST"),
    (1 << 8, "FI_READ"),
    (1 << 9, "FI_WRITE"),
    (1 << 12, "FI_REMOTE_READ"),
    (1 << 13, "FI_REMOTE_WRITE"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 18, "FI_MORE"),
    (1 << 59, "FI_CLAIM"),
];

/// `FI_TYPE_MR_MODE` and `fi_domain_attr.mr_mode` (an `int`).
const MR_MODE: Flags = &[
    (1 << 0, "FI_MR_BASIC"),
    (1 << 1, "FI_MR_SCALABLE"),
    (1 << 2, "FI_MR_LOCAL"),
    (1 << 3, "FI_MR_RAW"),
    (1 << 4, "FI_MR_VIRT_ADDR"),
    (1 << 5, "FI_MR_ALLOCATED"),
    (1 << 6, "FI_MR_PROV_KEY"),
    (1 << 7, "FI_MR_MMU_NOTIFY"),
    (1 << 8, "FI_MR_RMA_EVENT"),
    (1 << 9, "FI_MR_ENDPOINT"),
    (1 << 10, "FI_MR_HMEM"),
    (1 << 11, "FI_MR_COLLECTIVE"),
];

/// `enum fi_ep_type`.
const EP_TYPE: Names = &[
    (0, "FI_EP_UNSPEC"),
    (1, "FI_EP_MSG"),
    (2, "FI_EP_DGRAM"),
    (3, "FI_EP_RDM"),
    (4, "FI_EP_SOCK_STREAM"),
    (5, "FI_EP_SOCK_DGRAM"),
];

/// The address formats (`FI_FORMAT_UNSPEC`, ...).
const ADDR_FORMAT: Names = &[
    (0, "FI_FORMAT_UNSPEC"),
    (1, "FI_SOCKADDR"),
    (2, "FI_SOCKADDR_IN"),
    (3, "FI_SOCKADDR_IN6"),
    (4, "FI_SOCKADDR_IB"),
    (5, "FI_ADDR_PSMX"),
    (6, "FI_ADDR_GNI"),
    (7, "FI_ADDR_BGQ"),
    (8, "FI_ADDR_MLX"),
    (9, "FI_ADDR_STR"),
    (10, "FI_ADDR_PSMX2"),
    (11, "FI_ADDR_IB_UD"),
    (12, "FI_ADDR_EFA"),
    (13, "FI_ADDR_PSMX3"),
    (14, "FI_ADDR_OPX"),
    (15, "FI_ADDR_CXI"),
];

/// `enum fi_threading`.
const THREADING: Names = &[
    (0, "FI_THREAD_UNSPEC"),
    (1, "FI_THREAD_SAFE"),
    (2, "FI_THREAD_FID"),
    (3, "FI_THREAD_DOMAIN"),
    (4, "FI_THREAD_COMPLETION"),
    (5, "FI_THREAD_ENDPOINT"),
];

/// `enum fi_progress`.
const PROGRESS: Names = &[
    (0, "FI_PROGRESS_UNSPEC"),
    (1, "FI_PROGRESS_AUTO"),
    (2, "FI_PROGRESS_MANUAL"),
];

/// `enum fi_resource_mgmt`.
const RESOURCE_MGMT: Names = &[
    (0, "FI_RM_UNSPEC"),
    (1, "FI_RM_DISABLED"),
    (2, "FI_RM_ENABLED"),
];

/// `enum fi_av_type`.
const AV_TYPE: Names = &[(0, "FI_AV_UNSPEC"), (1, "FI_AV_MAP"), (2, "FI_AV_TABLE")];

/// The endpoint protocols. As in libfabric 1.17, the deprecated
/// `FI_PROTO_MXM` (7) and `FI_PROTO_MRAIL` (17), which fi_endpoint(3) does
/// not list, are `Unknown`.
const PROTOCOL: Names = &[
    (0, "FI_PROTO_UNSPEC"),
    (1, "FI_PROTO_RDMA_CM_IB_RC"),
    (2, "FI_PROTO_IWARP"),
    (3, "FI_PROTO_IB_UD"),
    (4, "FI_PROTO_PSMX"),
    (5, "FI_PROTO_UDP"),
    (6, "FI_PROTO_SOCK_TCP"),
    (8, "FI_PROTO_IWARP_RDM"),
    (9, "FI_PROTO_IB_RDM"),
    (10, "FI_PROTO_GNI"),
    (11, "FI_PROTO_RXM"),
    (12, "FI_PROTO_RXD"),
    (13, "FI_PROTO_MLX"),
    (14, "FI_PROTO_NETWORKDIRECT"),
    (15, "FI_PROTO_PSMX2"),
    (16, "FI_PROTO_SHM"),
    (18, "FI_PROTO_RSTREAM"),
    (19, "FI_PROTO_RDMA_CM_IB_XRC"),
    (20, "FI_PROTO_EFA"),
    (21, "FI_PROTO_PSMX3"),
    (22, "FI_PROTO_RXM_TCP"),
    (23, "FI_PROTO_OPX"),
    (24, "FI_PROTO_CXI"),
    (25, "FI_PROTO_XNET"),
];

/// `enum fi_datatype`, with the collective `FI_VOID` (256) that libfabric
/// 1.17 calls `Unknown`.
const ATOMIC_TYPE: Names = &[
    (0, "FI_INT8"),
    (1, "FI_UINT8"),
    (2, "FI_INT16"),
    (3, "FI_UINT16"),
    (4, "FI_INT32"),
    (5, "FI_UINT32"),
    (6, "FI_INT64"),
    (7, "FI_UINT64"),
    (8, "FI_FLOAT"),
    (9, "FI_DOUBLE"),
    (10, "FI_FLOAT_COMPLEX"),
    (11, "FI_DOUBLE_COMPLEX"),
    (12, "FI_LONG_DOUBLE"),
    (13, "FI_LONG_DOUBLE_COMPLEX"),
    (14, "FI_INT128"),
    (15, "FI_UINT128"),
    (256, "FI_VOID"),
];

/// `enum fi_op`, with the collective `FI_NOOP` (256) that libfabric 1.17
/// calls `Unknown`.
const ATOMIC_OP: Names = &[
    (0, "FI_MIN"),
    (1, "FI_MAX"),
    (2, "FI_SUM"),
    (3, "FI_PROD"),
    (4, "FI_LOR"),
    (5, "FI_LAND"),
    (6, "FI_BOR"),
    (7, "FI_BAND"),
    (8, "FI_LXOR"),
    (9, "FI_BXOR"),
    (10, "FI_ATOMIC_READ"),
    (11, "FI_ATOMIC_WRITE"),
    (12, "FI_CSWAP"),
    (13, "FI_CSWAP_NE"),
    (14, "FI_CSWAP_LE"),
    (15, "FI_CSWAP_LT"),
    (16, "FI_CSWAP_GE"),
    (17, "FI_CSWAP_GT"),
    (18, "FI_MSWAP"),
    (256, "FI_NOOP"),
];

/// The event queue events of `<rdma/fi_eq.h>`.
const EQ_EVENT: Names = &[
    (0, "FI_NOTIFY"),
    (1, "FI_CONNREQ"),
    (2, "FI_CONNECTED"),
    (3, "FI_SHUTDOWN"),
    (4, "FI_MR_COMPLETE"),
    (5, "FI_AV_COMPLETE"),
    (6, "FI_JOIN_COMPLETE"),
];

/// `enum fi_op_type` (`<rdma/fi_trigger.h>`).
const OP_TYPE: Names = &[
    (0, "FI_OP_RECV"),
    (1, "FI_OP_SEND"),
    (2, "FI_OP_TRECV"),
    (3, "FI_OP_TSEND"),
    (4, "FI_OP_READ"),
    (5, "FI_OP_WRITE"),
    (6, "FI_OP_ATOMIC"),
    (7, "FI_OP_FETCH_ATOMIC"),
    (8, "FI_OP_COMPARE_ATOMIC"),
    (9, "FI_OP_CNTR_SET"),
    (10, "FI_OP_CNTR_ADD"),
];

/// `enum fi_collective_op`.
const COLLECTIVE_OP: Names = &[
    (0, "FI_BARRIER"),
    (1, "FI_BROADCAST"),
    (2, "FI_ALLTOALL"),
    (3, "FI_ALLREDUCE"),
    (4, "FI_ALLGATHER"),
    (5, "FI_REDUCE_SCATTER"),
    (6, "FI_REDUCE"),
    (7, "FI_SCATTER"),
    (8, "FI_GATHER"),
];

/// `enum fi_hmem_iface`.
const HMEM_IFACE: Names = &[
    (0, "FI_HMEM_SYSTEM"),
    (1, "FI_HMEM_CUDA"),
    (2, "FI_HMEM_ROCR"),
    (3, "FI_HMEM_ZE"),
    (4, "FI_HMEM_NEURON"),
    (5, "FI_HMEM_SYNAPSEAI"),
];

/// `enum fi_cq_format`.
const CQ_FORMAT: Names = &[
    (0, "FI_CQ_FORMAT_UNSPEC"),
    (1, "FI_CQ_FORMAT_CONTEXT"),
    (2, "FI_CQ_FORMAT_MSG"),
    (3, "FI_CQ_FORMAT_DATA"),
    (4, "FI_CQ_FORMAT_TAGGED"),
];

/// `enum fi_log_level`, in the words of `FI_LOG_LEVEL` (`FI_LOG_MAX` is
/// not a level).
const LOG_LEVEL: Names = &[(0, "warn"), (1, "trace"), (2, "info"), (3, "debug")];

/// `enum fi_log_subsys`, in the words of `FI_LOG_SUBSYS`.
const LOG_SUBSYS: Names = &[
    (0, "core"),
    (1, "fabric"),
    (2, "domain"),
    (3, "ep_ctrl"),
    (4, "ep_data"),
    (5, "av"),
    (6, "cq"),
    (7, "eq"),
    (8, "mr"),
    (9, "cntr"),
];

/// The name of `v` in `names`, or `Unknown`.
fn name(names: Names, v: u32) -> &'static str {
    names
        .iter()
        .find(|(value, _)| *value == v)
        .map_or("Unknown", |(_, n)| n)
}

/// As [`name`], with `Provider specific` for values with
/// `FI_PROV_SPECIFIC` (address formats, protocols).
fn name_or_prov(names: Names, v: u32) -> &'static str {
    if v & FI_PROV_SPECIFIC != 0 {
        "Provider specific"
    } else {
        name(names, v)
    }
}

// ------------------------------------------------------------------ text

/// A text being built, and the room libfabric would have for it (what a
/// `tostr` operation is offered).
struct Text {
    /// The bytes so far (names from C are not necessarily UTF-8).
    bytes: Vec<u8>,
    /// `len` of `fi_tostr_r`, or the size of libfabric's buffer.
    room: usize,
}

impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// `write!` into a [`Text`], which cannot fail.
macro_rules! put {
    ($t:expr, $($arg:tt)*) => {{
        // Writing to a Text always succeeds.
        let _ = write!($t, $($arg)*);
    }};
}

impl Text {
    /// Appends bytes as they are.
    fn raw(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// The names of the bits of `v` in `flags`, separated by `", "`.
    fn flags(&mut self, flags: Flags, v: u64) {
        let mut first = true;
        for (bit, n) in flags {
            if v & bit != 0 {
                if !first {
                    self.raw(b", ");
                }
                self.raw(n.as_bytes());
                first = false;
            }
        }
    }

    /// A flag-set field: `<indent><field>: [ names ]`.
    fn flag_line(&mut self, indent: &str, field: &str, flags: Flags, v: u64) {
        put!(self, "{indent}{field}: [ ");
        self.flags(flags, v);
        self.raw(b" ]\n");
    }

    /// `comp_order`: `FI_ORDER_NONE` when no send/receive order is set,
    /// `FI_ORDER_STRICT` when all are (partial sets show neither), then
    /// `FI_ORDER_DATA`.
    fn comp_order_line(&mut self, indent: &str, v: u64) {
        let mut names = Vec::new();
        if v & FI_ORDER_STRICT == 0 {
            names.push("FI_ORDER_NONE");
        } else if v & FI_ORDER_STRICT == FI_ORDER_STRICT {
            names.push("FI_ORDER_STRICT");
        }
        if v & FI_ORDER_DATA != 0 {
            names.push("FI_ORDER_DATA");
        }
        put!(self, "{indent}comp_order: [ {} ]\n", names.join(", "));
    }

    /// A string field: its bytes, or `(null)`.
    ///
    /// # Safety
    ///
    /// `s` is null or a NUL-terminated string.
    unsafe fn str_line(&mut self, indent: &str, field: &str, s: *const c_char) {
        put!(self, "{indent}{field}: ");
        if s.is_null() {
            self.raw(b"(null)");
        } else {
            // SAFETY: a NUL-terminated string, per the contract.
            self.raw(unsafe { CStr::from_ptr(s) }.to_bytes());
        }
        self.raw(b"\n");
    }

    /// A context count: `FI_SHARED_CONTEXT` or the number.
    fn ctx_line(&mut self, indent: &str, field: &str, v: usize) {
        if v == FI_SHARED_CONTEXT {
            put!(self, "{indent}{field}: FI_SHARED_CONTEXT\n");
        } else {
            put!(self, "{indent}{field}: {v}\n");
        }
    }
}

/// A pointer as C's `%p` prints it: `(nil)` or `0x` and lower-case hex.
fn pointer<T>(p: *const T) -> String {
    if p.is_null() {
        "(nil)".to_string()
    } else {
        format!("{:#x}", p.addr())
    }
}

// ------------------------------------------------------------------ fid

/// `struct fid`: the head of every libfabric object (`fclass`, `context`,
/// `ops`). Only read here, to find the object's `tostr` operation.
#[repr(C)]
#[allow(dead_code)] // laid out as in C; only `ops` is read
struct FidHead {
    fclass: usize,
    context: *mut c_void,
    ops: *const FiOps,
}

/// A `tostr` operation: `int (*tostr)(const struct fid *, char *buf,
/// size_t len)`.
type TostrFn = unsafe extern "C" fn(*const FidHead, *mut c_char, usize) -> c_int;

/// `struct fi_ops` of 1.17: `size` (the bytes the table really has), then
/// the operations. The ones not called here are opaque pointers.
#[repr(C)]
#[allow(dead_code)] // laid out as in C; only `size` and `tostr` are read
struct FiOps {
    size: usize,
    close: *const c_void,
    bind: *const c_void,
    control: *const c_void,
    ops_open: *const c_void,
    tostr: Option<TostrFn>,
    ops_set: *const c_void,
}

/// The `tostr` operation of `fid`, if its table has one.
///
/// # Safety
///
/// `fid` points to a valid `struct fid` whose `ops` is null or a valid
/// table of at least `ops->size` bytes.
unsafe fn tostr_op(fid: *const FidHead) -> Option<TostrFn> {
    // SAFETY: per the contract.
    unsafe {
        let ops = (*fid).ops;
        if ops.is_null() || (*ops).size <= offset_of!(FiOps, tostr) {
            return None;
        }
        ptr::read(&raw const (*ops).tostr)
    }
}

/// An object: its `tostr` text, written with the room left (at most
/// 64 KiB), or `<label><pointer>` and a newline. A NULL `fid` is `(nil)`.
///
/// # Safety
///
/// `fid` is null, or a valid `struct fid` (see [`tostr_op`]) whose
/// `tostr` operation, if any, writes at most `len` bytes to `buf`; when
/// `look` is false, `fid` is only printed, never read.
unsafe fn fid_text(t: &mut Text, label: &str, fid: *const FidHead, look: bool) {
    let op = if fid.is_null() || !look {
        None
    } else {
        // SAFETY: a valid fid, per the contract.
        unsafe { tostr_op(fid) }
    };
    let Some(op) = op else {
        put!(t, "{label}{}\n", pointer(fid));
        return;
    };
    let room = t.room.saturating_sub(t.bytes.len()).min(MAX_OBJECT_TEXT);
    if room == 0 {
        return;
    }
    let mut buf = vec![0u8; room];
    // SAFETY: `buf` is writable for `room` bytes, which is what the
    // operation is told; `fid` is the object it belongs to. Its result is
    // not used, as in libfabric: the text is what it wrote.
    unsafe { op(fid, buf.as_mut_ptr().cast(), room) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(room);
    t.raw(&buf[..end]);
}

// ------------------------------------------------------------------ addresses

/// `AF_INET`, `AF_INET6` as `sa_family_t` holds them.
const AF_INET: u16 = libc::AF_INET as u16;
const AF_INET6: u16 = libc::AF_INET6 as u16;

/// An IPv4 address: four decimal bytes.
fn ipv4(b: &[u8]) -> String {
    match b {
        [a, b, c, d, ..] => format!("{a}.{b}.{c}.{d}"),
        _ => String::new(),
    }
}

/// An IPv6 address as the C library's `inet_ntop` writes it: eight
/// lower-case hex groups; the longest run of at least two zero groups
/// (the first of equally long ones) as `::`; and the last four bytes in
/// dotted decimal after `::` (IPv4-compatible) or `::ffff:` (IPv4-mapped).
fn ipv6(b: &[u8]) -> String {
    let mut groups = [0u16; 8];
    for (g, pair) in groups.iter_mut().zip(b.chunks_exact(2)) {
        *g = u16::from_be_bytes([pair[0], pair[1]]);
    }
    // The longest run of zero groups: (start, length).
    let mut best = (0usize, 0usize);
    let mut i = 0;
    while i < 8 {
        if groups[i] == 0 {
            let start = i;
            while i < 8 && groups[i] == 0 {
                i += 1;
            }
            if i - start > best.1 {
                best = (start, i - start);
            }
        } else {
            i += 1;
        }
    }
    let run = if best.1 >= 2 { Some(best) } else { None };
    let mut s = String::new();
    let mut i = 0;
    while i < 8 {
        if let Some((start, len)) = run {
            if i == start {
                s.push(':');
                i += len;
                if i == 8 {
                    s.push(':');
                }
                continue;
            }
        }
        if i > 0 {
            s.push(':');
        }
        let embedded = matches!(run, Some((0, 6))) || (run == Some((0, 5)) && groups[5] == 0xffff);
        if i == 6 && embedded {
            s.push_str(&ipv4(&b[12..]));
            break;
        }
        let _ = write!(s, "{:x}", groups[i]);
        i += 1;
    }
    s
}

/// `n` native-endian bytes of `b` from `at` as an integer.
fn ne(b: &[u8], at: usize, n: usize) -> u64 {
    let mut v = [0u8; 8];
    let src = &b[at..at + n];
    if cfg!(target_endian = "little") {
        v[..n].copy_from_slice(src);
        u64::from_le_bytes(v)
    } else {
        v[8 - n..].copy_from_slice(src);
        u64::from_be_bytes(v)
    }
}

/// A socket address: `fi_sockaddr_in://a.b.c.d:port` or
/// `fi_sockaddr_in6://[v6]:port`. `format` is `FI_SOCKADDR` (by family),
/// `FI_SOCKADDR_IN` or `FI_SOCKADDR_IN6`; as in libfabric, the latter two
/// take the address at their own structure's offset but decode it by the
/// family field. Empty for other families or too few bytes.
fn sockaddr(format: u32, b: &[u8]) -> String {
    let Some(family) = b.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]])) else {
        return String::new();
    };
    // (scheme, brackets, offset of the address).
    let (scheme, v6_shape, at) = match (format, family) {
        (1, AF_INET) | (2, _) => ("fi_sockaddr_in", false, 4),
        (1, AF_INET6) | (3, _) => ("fi_sockaddr_in6", true, 8),
        _ => return String::new(),
    };
    let (n, ip): (usize, fn(&[u8]) -> String) = match family {
        AF_INET => (4, ipv4),
        AF_INET6 => (16, ipv6),
        _ => return String::new(),
    };
    let Some(addr) = b.get(at..at + n) else {
        return String::new();
    };
    let port = u16::from_be_bytes([b[2], b[3]]);
    if v6_shape {
        format!("{scheme}://[{}]:{port}", ip(addr))
    } else {
        format!("{scheme}://{}:{port}", ip(addr))
    }
}

/// The text of an address in `format`, from `len` bytes at `p`.
///
/// # Safety
///
/// `p` is null or readable for `len` bytes.
unsafe fn address(t: &mut Text, format: u32, p: *const c_void, len: usize) {
    if p.is_null() {
        t.raw(b"(null)");
        return;
    }
    if format == 9 {
        // FI_ADDR_STR: a string, up to its NUL or the length.
        for i in 0..len {
            // SAFETY: `i < len` readable bytes, per the contract.
            let c = unsafe { p.cast::<u8>().add(i).read() };
            if c == 0 {
                break;
            }
            t.bytes.push(c);
        }
        return;
    }
    if format == 7 || format == 8 {
        // FI_ADDR_BGQ, FI_ADDR_MLX: libfabric shows where the address is.
        let scheme = if format == 7 { "bgq" } else { "mlx" };
        put!(t, "fi_addr_{scheme}://{}", pointer(p));
        return;
    }
    // The bytes each format reads.
    let need = match format {
        1..=3 => 24,
        4 => 48,
        5 | 6 | 14 => 8,
        10 => 16,
        11 => 27,
        12 => 24,
        13 => 32,
        15 => 4,
        _ => return,
    };
    // Socket addresses print from fewer bytes (IPv4: 8 or 12).
    let n = if (1..=3).contains(&format) {
        len.min(need)
    } else if len < need {
        return;
    } else {
        need
    };
    // SAFETY: `n <= len` readable bytes, per the contract.
    let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
    let text = match format {
        1..=3 => sockaddr(format, b),
        4 => {
            let pkey = u16::from_be_bytes([b[2], b[3]]);
            let mut sid = [0u8; 8];
            sid.copy_from_slice(&b[24..32]);
            let port_space = (u64::from_be_bytes(sid) >> 16) & 0xfff;
            format!(
                "fi_sockaddr_ib://[{}]:{pkey:#x}:{port_space:#x}:{:#x}",
                ipv6(&b[8..24]),
                b[47]
            )
        }
        5 => format!("fi_addr_psmx://{:x}", ne(b, 0, 8)),
        6 => format!("fi_addr_gni://{:x}", ne(b, 0, 8)),
        10 => format!("fi_addr_psmx2://{:x}:{:x}", ne(b, 0, 8), ne(b, 8, 8)),
        11 => format!(
            "fi_addr_ib_ud://{}:{:x}/{:x}/{:x}/{:x}",
            ipv6(&b[..16]),
            ne(b, 16, 4),
            ne(b, 20, 2),
            ne(b, 22, 2),
            b[26]
        ),
        12 => format!(
            "fi_addr_efa://[{}]:{}:{}",
            ipv6(&b[..16]),
            ne(b, 16, 2),
            ne(b, 20, 4)
        ),
        13 => format!(
            "fi_addr_psmx3://{:x}:{:x}:{:x}:{:x}",
            ne(b, 0, 8),
            ne(b, 8, 8),
            ne(b, 16, 8),
            ne(b, 24, 8)
        ),
        14 => format!("fi_addr_opx://{:016x}", ne(b, 0, 8)),
        15 => format!("fi_addr_cxi://{:#010x}", ne(b, 0, 4)),
        _ => String::new(),
    };
    t.raw(text.as_bytes());
}

// ------------------------------------------------------------------ structures

/// `struct fi_tx_attr` under `prefix`.
fn tx_attr(t: &mut Text, prefix: &str, a: &FiTxAttr) {
    let i = format!("{prefix}    ");
    put!(t, "{prefix}fi_tx_attr:\n");
    t.flag_line(&i, "caps", CAPS, a.caps);
    t.flag_line(&i, "mode", MODE, a.mode);
    t.flag_line(&i, "op_flags", OP_FLAGS, a.op_flags);
    t.flag_line(&i, "msg_order", MSG_ORDER, a.msg_order);
    t.comp_order_line(&i, a.comp_order);
    put!(t, "{i}inject_size: {}\n", a.inject_size);
    put!(t, "{i}size: {}\n", a.size);
    put!(t, "{i}iov_limit: {}\n", a.iov_limit);
    put!(t, "{i}rma_iov_limit: {}\n", a.rma_iov_limit);
    put!(t, "{i}tclass: {:#x}\n", a.tclass);
}

/// `struct fi_rx_attr` under `prefix`.
fn rx_attr(t: &mut Text, prefix: &str, a: &FiRxAttr) {
    let i = format!("{prefix}    ");
    put!(t, "{prefix}fi_rx_attr:\n");
    t.flag_line(&i, "caps", CAPS, a.caps);
    t.flag_line(&i, "mode", MODE, a.mode);
    t.flag_line(&i, "op_flags", OP_FLAGS, a.op_flags);
    t.flag_line(&i, "msg_order", MSG_ORDER, a.msg_order);
    t.comp_order_line(&i, a.comp_order);
    put!(t, "{i}total_buffered_recv: {}\n", a.total_buffered_recv);
    put!(t, "{i}size: {}\n", a.size);
    put!(t, "{i}iov_limit: {}\n", a.iov_limit);
}

/// `struct fi_ep_attr` under `prefix`. `protocol_version` is signed, as
/// libfabric prints it; the key itself is not shown.
fn ep_attr(t: &mut Text, prefix: &str, a: &FiEpAttr) {
    let i = format!("{prefix}    ");
    put!(t, "{prefix}fi_ep_attr:\n");
    put!(t, "{i}type: {}\n", name(EP_TYPE, a.r#type));
    put!(t, "{i}protocol: {}\n", name_or_prov(PROTOCOL, a.protocol));
    put!(t, "{i}protocol_version: {}\n", a.protocol_version as i32);
    put!(t, "{i}max_msg_size: {}\n", a.max_msg_size);
    put!(t, "{i}msg_prefix_size: {}\n", a.msg_prefix_size);
    put!(t, "{i}max_order_raw_size: {}\n", a.max_order_raw_size);
    put!(t, "{i}max_order_war_size: {}\n", a.max_order_war_size);
    put!(t, "{i}max_order_waw_size: {}\n", a.max_order_waw_size);
    put!(t, "{i}mem_tag_format: {:#018x}\n", a.mem_tag_format);
    t.ctx_line(&i, "tx_ctx_cnt", a.tx_ctx_cnt);
    t.ctx_line(&i, "rx_ctx_cnt", a.rx_ctx_cnt);
    put!(t, "{i}auth_key_size: {}\n", a.auth_key_size);
}

/// `struct fi_domain_attr` under `prefix`. `domain` is printed whole
/// (libfabric: its low 32 bits), `0x0` when NULL.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
unsafe fn domain_attr(t: &mut Text, prefix: &str, a: &FiDomainAttr) {
    let i = format!("{prefix}    ");
    put!(t, "{prefix}fi_domain_attr:\n");
    put!(t, "{i}domain: {:#x}\n", a.domain.addr());
    // SAFETY: per the contract.
    unsafe { t.str_line(&i, "name", a.name) };
    put!(t, "{i}threading: {}\n", name(THREADING, a.threading));
    put!(
        t,
        "{i}control_progress: {}\n",
        name(PROGRESS, a.control_progress)
    );
    put!(t, "{i}data_progress: {}\n", name(PROGRESS, a.data_progress));
    put!(
        t,
        "{i}resource_mgmt: {}\n",
        name(RESOURCE_MGMT, a.resource_mgmt)
    );
    put!(t, "{i}av_type: {}\n", name(AV_TYPE, a.av_type));
    t.flag_line(&i, "mr_mode", MR_MODE, u64::from(a.mr_mode as u32));
    put!(t, "{i}mr_key_size: {}\n", a.mr_key_size);
    put!(t, "{i}cq_data_size: {}\n", a.cq_data_size);
    put!(t, "{i}cq_cnt: {}\n", a.cq_cnt);
    put!(t, "{i}ep_cnt: {}\n", a.ep_cnt);
    put!(t, "{i}tx_ctx_cnt: {}\n", a.tx_ctx_cnt);
    put!(t, "{i}rx_ctx_cnt: {}\n", a.rx_ctx_cnt);
    put!(t, "{i}max_ep_tx_ctx: {}\n", a.max_ep_tx_ctx);
    put!(t, "{i}max_ep_rx_ctx: {}\n", a.max_ep_rx_ctx);
    put!(t, "{i}max_ep_stx_ctx: {}\n", a.max_ep_stx_ctx);
    put!(t, "{i}max_ep_srx_ctx: {}\n", a.max_ep_srx_ctx);
    put!(t, "{i}cntr_cnt: {}\n", a.cntr_cnt);
    put!(t, "{i}mr_iov_limit: {}\n", a.mr_iov_limit);
    t.flag_line(&i, "caps", CAPS, a.caps);
    t.flag_line(&i, "mode", MODE, a.mode);
    put!(t, "{i}auth_key_size: {}\n", a.auth_key_size);
    put!(t, "{i}max_err_data: {}\n", a.max_err_data);
    put!(t, "{i}mr_cnt: {}\n", a.mr_cnt);
    put!(t, "{i}tclass: {:#x}\n", a.tclass);
}

/// `struct fi_fabric_attr` under `prefix`; versions as `major.minor`.
///
/// # Safety
///
/// `name` and `prov_name` are null or NUL-terminated strings.
unsafe fn fabric_attr(t: &mut Text, prefix: &str, a: &FiFabricAttr) {
    let i = format!("{prefix}    ");
    put!(t, "{prefix}fi_fabric_attr:\n");
    // SAFETY: per the contract.
    unsafe {
        t.str_line(&i, "name", a.name);
        t.str_line(&i, "prov_name", a.prov_name);
    }
    let version = |v: u32| format!("{}.{}", v >> 16, v & 0xffff);
    put!(t, "{i}prov_version: {}\n", version(a.prov_version));
    put!(t, "{i}api_version: {}\n", version(a.api_version));
}

/// Reads a `T` from `p`.
///
/// # Safety
///
/// `p` points to a valid `T` (any alignment).
unsafe fn read<T: Copy>(p: *const T) -> T {
    // SAFETY: per the contract; read_unaligned accepts any alignment.
    unsafe { ptr::read_unaligned(p) }
}

/// One `struct fi_info` (not its `next` list). With `look_into_fids`,
/// `handle` and `nic` are asked for their `tostr` text.
///
/// # Safety
///
/// `info` is valid as `<rdma/fabric.h>` says: its addresses readable for
/// their lengths, its sub-structures null or valid (with their strings),
/// and, with `look_into_fids`, `handle` and `nic` null or valid objects
/// (see [`fid_text`]).
unsafe fn info(t: &mut Text, info: &FiInfo, look_into_fids: bool) {
    const I: &str = "    ";
    t.raw(b"fi_info:\n");
    t.flag_line(I, "caps", CAPS, info.caps);
    t.flag_line(I, "mode", MODE, info.mode);
    put!(
        t,
        "{I}addr_format: {}\n",
        name_or_prov(ADDR_FORMAT, info.addr_format)
    );
    put!(t, "{I}src_addrlen: {}\n", info.src_addrlen);
    put!(t, "{I}dest_addrlen: {}\n", info.dest_addrlen);
    // SAFETY: in this block, every pointer is null or valid, per the
    // contract.
    unsafe {
        put!(t, "{I}src_addr: ");
        address(t, info.addr_format, info.src_addr, info.src_addrlen);
        put!(t, "\n{I}dest_addr: ");
        address(t, info.addr_format, info.dest_addr, info.dest_addrlen);
        t.raw(b"\n");
        fid_text(
            t,
            "    handle: ",
            info.handle.cast::<FidHead>(),
            look_into_fids,
        );
        if info.tx_attr.is_null() {
            put!(t, "{I}fi_tx_attr: (null)\n");
        } else {
            tx_attr(t, I, &read(info.tx_attr));
        }
        if info.rx_attr.is_null() {
            put!(t, "{I}fi_rx_attr: (null)\n");
        } else {
            rx_attr(t, I, &read(info.rx_attr));
        }
        if info.ep_attr.is_null() {
            put!(t, "{I}fi_ep_attr: (null)\n");
        } else {
            ep_attr(t, I, &read(info.ep_attr));
        }
        if info.domain_attr.is_null() {
            put!(t, "{I}fi_domain_attr: (null)\n");
        } else {
            domain_attr(t, I, &read(info.domain_attr));
        }
        if info.fabric_attr.is_null() {
            put!(t, "{I}fi_fabric_attr: (null)\n");
        } else {
            fabric_attr(t, I, &read(info.fabric_attr));
        }
        // `struct fid_nic` begins with its `struct fid`.
        fid_text(t, "    nic: ", info.nic.cast::<FidHead>(), look_into_fids);
    }
}

/// The text for `data` of type `ty`, for a buffer of `room` bytes; `None`
/// (a NULL result) for NULL `data`, except for `FI_TYPE_VERSION`, which
/// does not read it.
///
/// # Safety
///
/// `data` is null or points to the C type `ty` names, valid as
/// `<rdma/fabric.h>` says (for structures, their pointers too; for
/// `FI_TYPE_FID`, `data` is the `struct fid *`).
unsafe fn render(data: *const c_void, ty: u32, room: usize) -> Option<Vec<u8>> {
    let mut t = Text {
        bytes: Vec::new(),
        room,
    };
    if ty == FI_TYPE_VERSION {
        t.raw(VERSION_TEXT.as_bytes());
        return Some(t.bytes);
    }
    if data.is_null() {
        return None;
    }
    // SAFETY: in every arm, `data` points to the type `ty` names, per the
    // contract.
    unsafe {
        let u32_at = || read(data.cast::<u32>());
        let u64_at = || read(data.cast::<u64>());
        match ty {
            FI_TYPE_INFO => info(&mut t, &read(data.cast::<FiInfo>()), true),
            FI_TYPE_EP_TYPE => t.raw(name(EP_TYPE, u32_at()).as_bytes()),
            FI_TYPE_CAPS => t.flags(CAPS, u64_at()),
            FI_TYPE_OP_FLAGS => t.flags(OP_FLAGS, u64_at()),
            FI_TYPE_ADDR_FORMAT => t.raw(name_or_prov(ADDR_FORMAT, u32_at()).as_bytes()),
            FI_TYPE_TX_ATTR => tx_attr(&mut t, "", &read(data.cast())),
            FI_TYPE_RX_ATTR => rx_attr(&mut t, "", &read(data.cast())),
            FI_TYPE_EP_ATTR => ep_attr(&mut t, "", &read(data.cast())),
            FI_TYPE_DOMAIN_ATTR => domain_attr(&mut t, "", &read(data.cast())),
            FI_TYPE_FABRIC_ATTR => fabric_attr(&mut t, "", &read(data.cast())),
            FI_TYPE_THREADING => t.raw(name(THREADING, u32_at()).as_bytes()),
            FI_TYPE_PROGRESS => t.raw(name(PROGRESS, u32_at()).as_bytes()),
            FI_TYPE_PROTOCOL => t.raw(name_or_prov(PROTOCOL, u32_at()).as_bytes()),
            FI_TYPE_MSG_ORDER => t.flags(MSG_ORDER, u64_at()),
            FI_TYPE_MODE => t.flags(MODE, u64_at()),
            FI_TYPE_AV_TYPE => t.raw(name(AV_TYPE, u32_at()).as_bytes()),
            FI_TYPE_ATOMIC_TYPE => t.raw(name(ATOMIC_TYPE, u32_at()).as_bytes()),
            FI_TYPE_ATOMIC_OP => t.raw(name(ATOMIC_OP, u32_at()).as_bytes()),
            FI_TYPE_EQ_EVENT => t.raw(name(EQ_EVENT, u32_at()).as_bytes()),
            FI_TYPE_CQ_EVENT_FLAGS => t.flags(CQ_FLAGS, u64_at()),
            FI_TYPE_MR_MODE => t.flags(MR_MODE, u64::from(u32_at())),
            FI_TYPE_OP_TYPE => t.raw(name(OP_TYPE, u32_at()).as_bytes()),
            FI_TYPE_FID => fid_text(&mut t, "fid: ", data.cast(), true),
            FI_TYPE_COLLECTIVE_OP => t.raw(name(COLLECTIVE_OP, u32_at()).as_bytes()),
            FI_TYPE_HMEM_IFACE => t.raw(name(HMEM_IFACE, u32_at()).as_bytes()),
            FI_TYPE_CQ_FORMAT => t.raw(name(CQ_FORMAT, u32_at()).as_bytes()),
            FI_TYPE_LOG_LEVEL => t.raw(name(LOG_LEVEL, u32_at()).as_bytes()),
            FI_TYPE_LOG_SUBSYS => t.raw(name(LOG_SUBSYS, u32_at()).as_bytes()),
            _ => t.raw(b"Unknown type"),
        }
    }
    Some(t.bytes)
}

/// What `fi_tostr(info, FI_TYPE_INFO)` prints for the C form of `info`
/// (every sub-structure present, `nic` NULL), for comparing a C program's
/// output with the Rust model. `handle` is shown as a pointer (it is not
/// read). Empty if the C form cannot be allocated.
pub fn info_text(info: &fabric::Info) -> String {
    let Ok(c) = crate::convert::info_to_c(info) else {
        return String::new();
    };
    let mut t = Text {
        bytes: Vec::new(),
        room: LIBFABRIC_BUFFER,
    };
    // SAFETY: `c` is a valid, fully allocated fi_info built just now; its
    // handle is not read (look_into_fids is false); it is freed once.
    unsafe {
        self::info(&mut t, &*c, false);
        crate::convert::free_info(c);
    }
    String::from_utf8_lossy(&t.bytes).into_owned()
}

thread_local! {
    /// The buffer `fi_tostr` returns, one per thread.
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `char *fi_tostr(const void *data, enum fi_type datatype)`
/// (`fi_tostr@@FABRIC_1.0`).
///
/// The text for `data`, as libfabric 1.17 prints it for every `enum
/// fi_type` (flag names joined by `", "`, enumeration names or `Unknown`,
/// structures in the `fi_info -v` form, `Unknown type` for other types).
/// NULL for NULL `data`, but `FI_TYPE_VERSION` ignores `data` and names
/// this library. The other deliberate differences from libfabric's text
/// (`src/tostr.rs` lists them): names libfabric leaves out although its
/// man pages define them are printed (`FI_AV_USER_ID`, `FI_COMMIT_COMPLETE`,
/// the completion flag `FI_MULTICAST`, `FI_VOID`, `FI_NOOP`), pointers are
/// not cut to 32 bits, addresses are not read past their length, and the
/// `tostr` text of `fi_info.handle` / `.nic` does not overwrite the rest.
///
/// The string lives in a buffer of the calling thread, overwritten by the
/// thread's next call, as in libfabric (the buffer only moves for texts
/// longer than 8 KiB). Also NULL if the thread is exiting or on an internal
/// error.
///
/// # Safety
///
/// `data` is null or points to the C type `datatype` names, valid as
/// `<rdma/fabric.h>` says: for structures, every pointer in them too
/// (`fi_info.handle` and `.nic` are objects whose operations may be
/// called); for `FI_TYPE_FID`, `data` is the `struct fid *` itself.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_tostr"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_tostr(data: *const c_void, datatype: u32) -> *mut c_char {
    symver!("fi_tostr", "FABRIC_1.0");
    guard(ptr::null_mut(), || {
        // SAFETY: per the contract.
        let Some(text) = (unsafe { render(data, datatype, LIBFABRIC_BUFFER) }) else {
            return ptr::null_mut();
        };
        BUFFER
            .try_with(|buf| {
                let mut buf = buf.borrow_mut();
                buf.clear();
                buf.reserve(LIBFABRIC_BUFFER.max(text.len() + 1));
                buf.extend(text.iter().map(|&b| if b == 0 { b' ' } else { b }));
                buf.push(0);
                // The vector stays in the thread-local until the next call.
                buf.as_mut_ptr().cast::<c_char>()
            })
            .unwrap_or(ptr::null_mut())
    })
}

/// `char *fi_tostr_r(char *buf, size_t len, const void *data, enum fi_type
/// datatype)` (`fi_tostr_r@@FABRIC_1.4`).
///
/// As [`fi_tostr`], into `buf`: at most `len - 1` bytes of the text and a
/// terminating NUL (a `tostr` operation of an object is offered the room
/// left of `len`). Returns `buf`; NULL, with `buf` untouched, when `buf` or
/// `data` is NULL (but for `FI_TYPE_VERSION`) or `len` is 0.
///
/// # Safety
///
/// `buf` is null or writable for `len` bytes; `data` as for [`fi_tostr`].
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_tostr_r"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_tostr_r(
    buf: *mut c_char,
    len: usize,
    data: *const c_void,
    datatype: u32,
) -> *mut c_char {
    symver!("fi_tostr_r", "FABRIC_1.4");
    guard(ptr::null_mut(), || {
        if buf.is_null() || len == 0 {
            return ptr::null_mut();
        }
        // SAFETY: per the contract.
        let Some(text) = (unsafe { render(data, datatype, len) }) else {
            return ptr::null_mut();
        };
        let n = text.len().min(len - 1);
        // SAFETY: `buf` is writable for `len > n` bytes, per the contract,
        // and cannot overlap the fresh `text`.
        unsafe {
            ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        buf
    })
}
