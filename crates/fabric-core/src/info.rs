//! [`Info`]: one way to reach a peer (libfabric's `struct fi_info`), used both
//! as the hints of `getinfo` and as each of its answers.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::addr::Address;
use crate::attr::{DomainAttr, EpAttr, FabricAttr, Handle, RxAttr, TxAttr};
use crate::enums::AddrFormat;
use crate::flags::{Caps, Mode};

/// A fabric interface description (`struct fi_info`).
///
/// - As **hints**, a zero / empty / `Unspec` field means "any", except
///   [`mode`](Info::mode), where zero means "the application supports no
///   modes". `Info::default()` is what `fi_allocinfo` returns: every field
///   zero.
/// - As a **result**, it describes one endpoint type of one domain of one
///   provider, with the values the provider will use.
///
/// `Clone` is `fi_dupinfo`; there is no `fi_freeinfo` (drop it). The
/// sub-structures are always present, as after `fi_allocinfo`: a zeroed
/// sub-structure means "no constraint", like a NULL pointer in C, with one
/// documented difference in [`crate::matching`] (the FI_MR_LOCAL rule).
///
/// The serde form uses the C field names (`ep_attr.type`,
/// `fabric_attr.prov_name`), flag sets as arrays of FI_ names and enums as
/// FI_ names; absent fields deserialize as zero. `handle` fields are process
/// local and not serialized.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Info {
    /// Capabilities.
    pub caps: Caps,
    /// Modes: supported by the application (hints) / needed (results).
    pub mode: Mode,
    /// Format of the addresses used with this entry.
    pub addr_format: AddrFormat,
    /// Source (local) address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_addr: Option<Address>,
    /// Destination (peer) address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dest_addr: Option<Address>,
    /// A connection request or endpoint to inherit from (process local).
    #[serde(skip)]
    pub handle: Option<Handle>,
    /// Transmit attributes.
    pub tx_attr: TxAttr,
    /// Receive attributes.
    pub rx_attr: RxAttr,
    /// Endpoint attributes.
    pub ep_attr: EpAttr,
    /// Domain attributes.
    pub domain_attr: DomainAttr,
    /// Fabric attributes.
    pub fabric_attr: FabricAttr,
}

impl Info {
    /// The provider name, if set.
    pub fn prov_name(&self) -> Option<&str> {
        self.fabric_attr.prov_name.as_deref()
    }

    /// Length of the source address in its C form (`src_addrlen`).
    pub fn src_addrlen(&self) -> usize {
        self.src_addr.as_ref().map_or(0, Address::c_len)
    }

    /// Length of the destination address in its C form (`dest_addrlen`).
    pub fn dest_addrlen(&self) -> usize {
        self.dest_addr.as_ref().map_or(0, Address::c_len)
    }

    /// A multi-line description in the style of `fi_info -v`.
    pub fn verbose(&self) -> Verbose<'_> {
        Verbose(self)
    }
}

/// The short `fi_info` block: provider, fabric, domain, version, type,
/// protocol.
impl fmt::Display for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or_null = |s: &Option<String>| s.clone().unwrap_or_else(|| "(null)".into());
        writeln!(f, "provider: {}", or_null(&self.fabric_attr.prov_name))?;
        writeln!(f, "    fabric: {}", or_null(&self.fabric_attr.name))?;
        writeln!(f, "    domain: {}", or_null(&self.domain_attr.name))?;
        writeln!(f, "    version: {}", self.fabric_attr.prov_version)?;
        writeln!(f, "    type: {}", self.ep_attr.ep_type)?;
        write!(f, "    protocol: {}", self.ep_attr.protocol)
    }
}

/// `fi_info -v` rendering of an [`Info`]; see [`Info::verbose`].
pub struct Verbose<'a>(&'a Info);

fn list<T: fmt::Display>(names: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = names.into_iter().map(|n| n.to_string()).collect();
    if items.is_empty() {
        "[  ]".to_string()
    } else {
        format!("[ {} ]", items.join(", "))
    }
}

fn opt_addr(a: &Option<Address>) -> String {
    a.as_ref()
        .map_or_else(|| "(null)".to_string(), Address::to_string)
}

fn opt_str(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("(null)")
}

fn handle(h: &Option<Handle>) -> String {
    h.map_or_else(|| "(nil)".to_string(), |h| format!("{:#x}", h.0))
}

impl fmt::Display for Verbose<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.0;
        writeln!(f, "fi_info:")?;
        writeln!(f, "    caps: {}", list(i.caps.to_names()))?;
        writeln!(f, "    mode: {}", list(i.mode.to_names()))?;
        writeln!(f, "    addr_format: {}", i.addr_format)?;
        writeln!(f, "    src_addrlen: {}", i.src_addrlen())?;
        writeln!(f, "    dest_addrlen: {}", i.dest_addrlen())?;
        writeln!(f, "    src_addr: {}", opt_addr(&i.src_addr))?;
        writeln!(f, "    dest_addr: {}", opt_addr(&i.dest_addr))?;
        writeln!(f, "    handle: {}", handle(&i.handle))?;
        let t = &i.tx_attr;
        writeln!(f, "    fi_tx_attr:")?;
        writeln!(f, "        caps: {}", list(t.caps.to_names()))?;
        writeln!(f, "        mode: {}", list(t.mode.to_names()))?;
        writeln!(f, "        op_flags: {}", list(t.op_flags.to_names()))?;
        writeln!(f, "        msg_order: {}", list(t.msg_order.to_names()))?;
        writeln!(f, "        comp_order: {}", list(t.comp_order.to_names()))?;
        writeln!(f, "        inject_size: {}", t.inject_size)?;
        writeln!(f, "        size: {}", t.size)?;
        writeln!(f, "        iov_limit: {}", t.iov_limit)?;
        writeln!(f, "        rma_iov_limit: {}", t.rma_iov_limit)?;
        writeln!(f, "        tclass: {:#x}", t.tclass)?;
        let r = &i.rx_attr;
        writeln!(f, "    fi_rx_attr:")?;
        writeln!(f, "        caps: {}", list(r.caps.to_names()))?;
        writeln!(f, "        mode: {}", list(r.mode.to_names()))?;
        writeln!(f, "        op_flags: {}", list(r.op_flags.to_names()))?;
        writeln!(f, "        msg_order: {}", list(r.msg_order.to_names()))?;
        writeln!(f, "        comp_order: {}", list(r.comp_order.to_names()))?;
        writeln!(f, "        total_buffered_recv: {}", r.total_buffered_recv)?;
        writeln!(f, "        size: {}", r.size)?;
        writeln!(f, "        iov_limit: {}", r.iov_limit)?;
        let e = &i.ep_attr;
        writeln!(f, "    fi_ep_attr:")?;
        writeln!(f, "        type: {}", e.ep_type)?;
        writeln!(f, "        protocol: {}", e.protocol)?;
        writeln!(f, "        protocol_version: {}", e.protocol_version)?;
        writeln!(f, "        max_msg_size: {}", e.max_msg_size)?;
        writeln!(f, "        msg_prefix_size: {}", e.msg_prefix_size)?;
        writeln!(f, "        max_order_raw_size: {}", e.max_order_raw_size)?;
        writeln!(f, "        max_order_war_size: {}", e.max_order_war_size)?;
        writeln!(f, "        max_order_waw_size: {}", e.max_order_waw_size)?;
        writeln!(f, "        mem_tag_format: {:#018x}", e.mem_tag_format)?;
        writeln!(f, "        tx_ctx_cnt: {}", e.tx_ctx_cnt)?;
        writeln!(f, "        rx_ctx_cnt: {}", e.rx_ctx_cnt)?;
        writeln!(f, "        auth_key_size: {}", e.auth_key_size)?;
        let d = &i.domain_attr;
        writeln!(f, "    fi_domain_attr:")?;
        writeln!(f, "        domain: {}", handle(&d.domain))?;
        writeln!(f, "        name: {}", opt_str(&d.name))?;
        writeln!(f, "        threading: {}", d.threading)?;
        writeln!(f, "        control_progress: {}", d.control_progress)?;
        writeln!(f, "        data_progress: {}", d.data_progress)?;
        writeln!(f, "        resource_mgmt: {}", d.resource_mgmt)?;
        writeln!(f, "        av_type: {}", d.av_type)?;
        writeln!(f, "        mr_mode: {}", list(d.mr_mode.to_names()))?;
        writeln!(f, "        mr_key_size: {}", d.mr_key_size)?;
        writeln!(f, "        cq_data_size: {}", d.cq_data_size)?;
        writeln!(f, "        cq_cnt: {}", d.cq_cnt)?;
        writeln!(f, "        ep_cnt: {}", d.ep_cnt)?;
        writeln!(f, "        tx_ctx_cnt: {}", d.tx_ctx_cnt)?;
        writeln!(f, "        rx_ctx_cnt: {}", d.rx_ctx_cnt)?;
        writeln!(f, "        max_ep_tx_ctx: {}", d.max_ep_tx_ctx)?;
        writeln!(f, "        max_ep_rx_ctx: {}", d.max_ep_rx_ctx)?;
        writeln!(f, "        max_ep_stx_ctx: {}", d.max_ep_stx_ctx)?;
        writeln!(f, "        max_ep_srx_ctx: {}", d.max_ep_srx_ctx)?;
        writeln!(f, "        cntr_cnt: {}", d.cntr_cnt)?;
        writeln!(f, "        mr_iov_limit: {}", d.mr_iov_limit)?;
        writeln!(f, "        caps: {}", list(d.caps.to_names()))?;
        writeln!(f, "        mode: {}", list(d.mode.to_names()))?;
        writeln!(f, "        auth_key_size: {}", d.auth_key_size)?;
        writeln!(f, "        max_err_data: {}", d.max_err_data)?;
        writeln!(f, "        mr_cnt: {}", d.mr_cnt)?;
        writeln!(f, "        tclass: {:#x}", d.tclass)?;
        let fa = &i.fabric_attr;
        writeln!(f, "    fi_fabric_attr:")?;
        writeln!(f, "        name: {}", opt_str(&fa.name))?;
        writeln!(f, "        prov_name: {}", opt_str(&fa.prov_name))?;
        writeln!(f, "        prov_version: {}", fa.prov_version)?;
        write!(f, "        api_version: {}", fa.api_version)
    }
}
