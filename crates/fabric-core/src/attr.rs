//! The attribute structures of an [`Info`](crate::Info), field for field as
//! fi_endpoint(3), fi_domain(3) and fi_fabric(3) of libfabric 1.17 define
//! them. In hints a zero field means "any"; on output it holds what the
//! provider offers.

use serde::{Deserialize, Serialize};

use crate::enums::{AvType, EpType, Progress, Protocol, ResourceMgmt, Threading};
use crate::flags::{Caps, CompOrder, Mode, MrMode, MsgOrder, OpFlags};
use crate::version::Version;

/// `FI_SHARED_CONTEXT`: the context count that asks for shared contexts.
pub const SHARED_CONTEXT: usize = usize::MAX;

/// An opaque handle to an object that is already open (a fabric, a domain,
/// a connection request), as libfabric's `fid` pointers in `fi_info`.
///
/// Only meaningful inside the process that opened the object, so it is not
/// serialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(pub u64);

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// Transmit context attributes (`struct fi_tx_attr`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TxAttr {
    /// Transmit capabilities (a subset of the endpoint's).
    pub caps: Caps,
    /// Modes the transmit side needs.
    pub mode: Mode,
    /// Default flags of transmit operations.
    pub op_flags: OpFlags,
    /// Message ordering the transmit side keeps.
    pub msg_order: MsgOrder,
    /// Completion ordering.
    pub comp_order: CompOrder,
    /// Largest message that may be sent with inject.
    pub inject_size: usize,
    /// Number of transmit operations that may be outstanding.
    pub size: usize,
    /// Largest IO vector of one transmit operation.
    pub iov_limit: usize,
    /// Largest RMA IO vector of one operation.
    pub rma_iov_limit: usize,
    /// Traffic class (`FI_TC_*`, 0 = unspecified).
    pub tclass: u32,
}

/// Receive context attributes (`struct fi_rx_attr`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RxAttr {
    /// Receive capabilities (a subset of the endpoint's).
    pub caps: Caps,
    /// Modes the receive side needs.
    pub mode: Mode,
    /// Default flags of receive operations.
    pub op_flags: OpFlags,
    /// Message ordering the receive side keeps.
    pub msg_order: MsgOrder,
    /// Completion ordering.
    pub comp_order: CompOrder,
    /// Bytes the provider buffers for messages that arrive before a
    /// matching receive is posted.
    pub total_buffered_recv: usize,
    /// Number of receive operations that may be outstanding.
    pub size: usize,
    /// Largest IO vector of one receive operation.
    pub iov_limit: usize,
}

/// Endpoint attributes (`struct fi_ep_attr`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EpAttr {
    /// Endpoint type (`type` in C).
    #[serde(rename = "type")]
    pub ep_type: EpType,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Version of the wire protocol.
    pub protocol_version: u32,
    /// Largest message size.
    pub max_msg_size: usize,
    /// Bytes of prefix space with FI_MSG_PREFIX.
    pub msg_prefix_size: usize,
    /// Largest read-after-write ordered transfer.
    pub max_order_raw_size: usize,
    /// Largest write-after-read ordered transfer.
    pub max_order_war_size: usize,
    /// Largest write-after-write ordered transfer.
    pub max_order_waw_size: usize,
    /// Tag bits: set bits are tag bits; the width says how wide tags are.
    pub mem_tag_format: u64,
    /// Transmit contexts per endpoint ([`SHARED_CONTEXT`] for shared).
    pub tx_ctx_cnt: usize,
    /// Receive contexts per endpoint ([`SHARED_CONTEXT`] for shared).
    pub rx_ctx_cnt: usize,
    /// Size of the authorization key.
    pub auth_key_size: usize,
    /// Authorization key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_key: Option<Vec<u8>>,
}

/// Domain attributes (`struct fi_domain_attr`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DomainAttr {
    /// An open domain these attributes refer to.
    #[serde(skip)]
    pub domain: Option<Handle>,
    /// Domain name (for IP providers the interface, e.g. `eth0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Threading model.
    pub threading: Threading,
    /// Progress model of control operations.
    pub control_progress: Progress,
    /// Progress model of data transfers.
    pub data_progress: Progress,
    /// Resource management.
    pub resource_mgmt: ResourceMgmt,
    /// Address vector type.
    pub av_type: AvType,
    /// Memory-registration modes.
    pub mr_mode: MrMode,
    /// Size of a memory key in bytes.
    pub mr_key_size: usize,
    /// Bytes of remote CQ data a transfer can carry.
    pub cq_data_size: usize,
    /// Number of CQs the domain supports.
    pub cq_cnt: usize,
    /// Number of endpoints the domain supports.
    pub ep_cnt: usize,
    /// Number of transmit contexts.
    pub tx_ctx_cnt: usize,
    /// Number of receive contexts.
    pub rx_ctx_cnt: usize,
    /// Transmit contexts per endpoint.
    pub max_ep_tx_ctx: usize,
    /// Receive contexts per endpoint.
    pub max_ep_rx_ctx: usize,
    /// Shared transmit contexts per endpoint.
    pub max_ep_stx_ctx: usize,
    /// Shared receive contexts per endpoint.
    pub max_ep_srx_ctx: usize,
    /// Number of counters.
    pub cntr_cnt: usize,
    /// Largest IO vector of one registration.
    pub mr_iov_limit: usize,
    /// Domain capabilities.
    pub caps: Caps,
    /// Domain modes.
    pub mode: Mode,
    /// Authorization key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_key: Option<Vec<u8>>,
    /// Size of the authorization key.
    pub auth_key_size: usize,
    /// Largest provider error data of a CQ / EQ error entry.
    pub max_err_data: usize,
    /// Number of memory regions.
    pub mr_cnt: usize,
    /// Traffic class.
    pub tclass: u32,
}

/// Fabric attributes (`struct fi_fabric_attr`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FabricAttr {
    /// An open fabric these attributes refer to.
    #[serde(skip)]
    pub fabric: Option<Handle>,
    /// Fabric name (for IP providers the subnet, e.g. `192.0.2.0/24`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Provider name (`tcp`, `shm`, `verbs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prov_name: Option<String>,
    /// Provider version.
    #[serde(skip_serializing_if = "is_default")]
    pub prov_version: Version,
    /// API version the entry was made for.
    #[serde(skip_serializing_if = "is_default")]
    pub api_version: Version,
}
