//! The C structures of libfabric 1.17's `<rdma/fabric.h>`, field for field
//! and in the same order, so that they have the same size and offsets on
//! every ABI (checked against the installed header by `tests/layout.rs`).
//!
//! C enumerations (`enum fi_ep_type`, ...) are `u32`: every enumerator is
//! non-negative and fits in an `unsigned int`, which is how the C compilers
//! of the supported platforms represent them. `mr_mode` is an `int` in C.

use std::ffi::{c_char, c_int, c_void};
use std::marker::{PhantomData, PhantomPinned};

/// Declares an opaque C structure that is only ever used behind a pointer.
macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident;)*) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    )*};
}

opaque! {
    /// `struct fid`: the header of every libfabric object. Opaque until the
    /// library exports objects (see the crate documentation).
    Fid;
    /// `struct fid_fabric`.
    FidFabric;
    /// `struct fid_domain`.
    FidDomain;
    /// `struct fid_nic`. This library never sets `fi_info.nic`.
    FidNic;
}

/// `struct fi_tx_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FiTxAttr {
    /// `uint64_t caps`.
    pub caps: u64,
    /// `uint64_t mode`.
    pub mode: u64,
    /// `uint64_t op_flags`.
    pub op_flags: u64,
    /// `uint64_t msg_order`.
    pub msg_order: u64,
    /// `uint64_t comp_order`.
    pub comp_order: u64,
    /// `size_t inject_size`.
    pub inject_size: usize,
    /// `size_t size`.
    pub size: usize,
    /// `size_t iov_limit`.
    pub iov_limit: usize,
    /// `size_t rma_iov_limit`.
    pub rma_iov_limit: usize,
    /// `uint32_t tclass`.
    pub tclass: u32,
}

/// `struct fi_rx_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FiRxAttr {
    /// `uint64_t caps`.
    pub caps: u64,
    /// `uint64_t mode`.
    pub mode: u64,
    /// `uint64_t op_flags`.
    pub op_flags: u64,
    /// `uint64_t msg_order`.
    pub msg_order: u64,
    /// `uint64_t comp_order`.
    pub comp_order: u64,
    /// `size_t total_buffered_recv`.
    pub total_buffered_recv: usize,
    /// `size_t size`.
    pub size: usize,
    /// `size_t iov_limit`.
    pub iov_limit: usize,
}

/// `struct fi_ep_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiEpAttr {
    /// `enum fi_ep_type type`.
    pub r#type: u32,
    /// `uint32_t protocol`.
    pub protocol: u32,
    /// `uint32_t protocol_version`.
    pub protocol_version: u32,
    /// `size_t max_msg_size`.
    pub max_msg_size: usize,
    /// `size_t msg_prefix_size`.
    pub msg_prefix_size: usize,
    /// `size_t max_order_raw_size`.
    pub max_order_raw_size: usize,
    /// `size_t max_order_war_size`.
    pub max_order_war_size: usize,
    /// `size_t max_order_waw_size`.
    pub max_order_waw_size: usize,
    /// `uint64_t mem_tag_format`.
    pub mem_tag_format: u64,
    /// `size_t tx_ctx_cnt`.
    pub tx_ctx_cnt: usize,
    /// `size_t rx_ctx_cnt`.
    pub rx_ctx_cnt: usize,
    /// `size_t auth_key_size`.
    pub auth_key_size: usize,
    /// `uint8_t *auth_key`: `auth_key_size` bytes, owned by the structure.
    pub auth_key: *mut u8,
}

/// `struct fi_domain_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiDomainAttr {
    /// `struct fid_domain *domain` (not owned).
    pub domain: *mut FidDomain,
    /// `char *name` (owned, NUL-terminated).
    pub name: *mut c_char,
    /// `enum fi_threading threading`.
    pub threading: u32,
    /// `enum fi_progress control_progress`.
    pub control_progress: u32,
    /// `enum fi_progress data_progress`.
    pub data_progress: u32,
    /// `enum fi_resource_mgmt resource_mgmt`.
    pub resource_mgmt: u32,
    /// `enum fi_av_type av_type`.
    pub av_type: u32,
    /// `int mr_mode`.
    pub mr_mode: c_int,
    /// `size_t mr_key_size`.
    pub mr_key_size: usize,
    /// `size_t cq_data_size`.
    pub cq_data_size: usize,
    /// `size_t cq_cnt`.
    pub cq_cnt: usize,
    /// `size_t ep_cnt`.
    pub ep_cnt: usize,
    /// `size_t tx_ctx_cnt`.
    pub tx_ctx_cnt: usize,
    /// `size_t rx_ctx_cnt`.
    pub rx_ctx_cnt: usize,
    /// `size_t max_ep_tx_ctx`.
    pub max_ep_tx_ctx: usize,
    /// `size_t max_ep_rx_ctx`.
    pub max_ep_rx_ctx: usize,
    /// `size_t max_ep_stx_ctx`.
    pub max_ep_stx_ctx: usize,
    /// `size_t max_ep_srx_ctx`.
    pub max_ep_srx_ctx: usize,
    /// `size_t cntr_cnt`.
    pub cntr_cnt: usize,
    /// `size_t mr_iov_limit`.
    pub mr_iov_limit: usize,
    /// `uint64_t caps`.
    pub caps: u64,
    /// `uint64_t mode`.
    pub mode: u64,
    /// `uint8_t *auth_key`: `auth_key_size` bytes, owned by the structure.
    pub auth_key: *mut u8,
    /// `size_t auth_key_size`.
    pub auth_key_size: usize,
    /// `size_t max_err_data`.
    pub max_err_data: usize,
    /// `size_t mr_cnt`.
    pub mr_cnt: usize,
    /// `uint32_t tclass`.
    pub tclass: u32,
}

/// `struct fi_fabric_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiFabricAttr {
    /// `struct fid_fabric *fabric` (not owned).
    pub fabric: *mut FidFabric,
    /// `char *name` (owned).
    pub name: *mut c_char,
    /// `char *prov_name` (owned).
    pub prov_name: *mut c_char,
    /// `uint32_t prov_version`: `FI_VERSION(major, minor)`.
    pub prov_version: u32,
    /// `uint32_t api_version`: `FI_VERSION(major, minor)`.
    pub api_version: u32,
}

/// `struct fi_info`: one element of the list `fi_getinfo` returns.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiInfo {
    /// `struct fi_info *next`.
    pub next: *mut FiInfo,
    /// `uint64_t caps`.
    pub caps: u64,
    /// `uint64_t mode`.
    pub mode: u64,
    /// `uint32_t addr_format`: an `FI_` address format.
    pub addr_format: u32,
    /// `size_t src_addrlen`.
    pub src_addrlen: usize,
    /// `size_t dest_addrlen`.
    pub dest_addrlen: usize,
    /// `void *src_addr`: `src_addrlen` bytes (owned).
    pub src_addr: *mut c_void,
    /// `void *dest_addr`: `dest_addrlen` bytes (owned).
    pub dest_addr: *mut c_void,
    /// `fid_t handle` (not owned).
    pub handle: *mut Fid,
    /// `struct fi_tx_attr *tx_attr` (owned).
    pub tx_attr: *mut FiTxAttr,
    /// `struct fi_rx_attr *rx_attr` (owned).
    pub rx_attr: *mut FiRxAttr,
    /// `struct fi_ep_attr *ep_attr` (owned).
    pub ep_attr: *mut FiEpAttr,
    /// `struct fi_domain_attr *domain_attr` (owned).
    pub domain_attr: *mut FiDomainAttr,
    /// `struct fi_fabric_attr *fabric_attr` (owned).
    pub fabric_attr: *mut FiFabricAttr,
    /// `struct fid_nic *nic`: always NULL in what this library returns.
    pub nic: *mut FidNic,
}

/// `enum fi_param_type`: `FI_PARAM_STRING`.
pub const FI_PARAM_STRING: u32 = 0;
/// `enum fi_param_type`: `FI_PARAM_INT`.
pub const FI_PARAM_INT: u32 = 1;
/// `enum fi_param_type`: `FI_PARAM_BOOL`.
pub const FI_PARAM_BOOL: u32 = 2;
/// `enum fi_param_type`: `FI_PARAM_SIZE_T`.
pub const FI_PARAM_SIZE_T: u32 = 3;

/// `struct fi_param`: one environment variable, as `fi_getparams` lists it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiParam {
    /// `const char *name` (owned by the array).
    pub name: *const c_char,
    /// `enum fi_param_type type`.
    pub r#type: u32,
    /// `const char *help_string` (owned by the array).
    pub help_string: *const c_char,
    /// `const char *value`: the current value, NULL when unset (owned).
    pub value: *const c_char,
}

/// `enum fi_type`: the kinds of data `fi_tostr` prints.
#[allow(missing_docs)]
pub mod fi_type {
    pub const FI_TYPE_INFO: u32 = 0;
    pub const FI_TYPE_EP_TYPE: u32 = 1;
    pub const FI_TYPE_CAPS: u32 = 2;
    pub const FI_TYPE_OP_FLAGS: u32 = 3;
    pub const FI_TYPE_ADDR_FORMAT: u32 = 4;
    pub const FI_TYPE_TX_ATTR: u32 = 5;
    pub const FI_TYPE_RX_ATTR: u32 = 6;
    pub const FI_TYPE_EP_ATTR: u32 = 7;
    pub const FI_TYPE_DOMAIN_ATTR: u32 = 8;
    pub const FI_TYPE_FABRIC_ATTR: u32 = 9;
    pub const FI_TYPE_THREADING: u32 = 10;
    pub const FI_TYPE_PROGRESS: u32 = 11;
    pub const FI_TYPE_PROTOCOL: u32 = 12;
    pub const FI_TYPE_MSG_ORDER: u32 = 13;
    pub const FI_TYPE_MODE: u32 = 14;
    pub const FI_TYPE_AV_TYPE: u32 = 15;
    pub const FI_TYPE_ATOMIC_TYPE: u32 = 16;
    pub const FI_TYPE_ATOMIC_OP: u32 = 17;
    pub const FI_TYPE_VERSION: u32 = 18;
    pub const FI_TYPE_EQ_EVENT: u32 = 19;
    pub const FI_TYPE_CQ_EVENT_FLAGS: u32 = 20;
    pub const FI_TYPE_MR_MODE: u32 = 21;
    pub const FI_TYPE_OP_TYPE: u32 = 22;
    pub const FI_TYPE_FID: u32 = 23;
    pub const FI_TYPE_COLLECTIVE_OP: u32 = 24;
    pub const FI_TYPE_HMEM_IFACE: u32 = 25;
    pub const FI_TYPE_CQ_FORMAT: u32 = 26;
    pub const FI_TYPE_LOG_LEVEL: u32 = 27;
    pub const FI_TYPE_LOG_SUBSYS: u32 = 28;
}
