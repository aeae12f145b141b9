//! Does an offer serve the hints? (libfabric `ofi_check_info`, field by
//! field.) Every rule returns a [`Mismatch`] naming the field and the
//! requested value, so that "no match" can be explained to a person.

use std::fmt;

use crate::enums::EpType;
use crate::flags::{Caps, CompOrder, Mode, MrMode, MsgOrder, OpFlags};
use crate::info::Info;
use crate::version::Version;

/// Why an offer does not serve the hints: the hint field and a sentence
/// with the requested value (no provider values, so that the same reason
/// from several providers reads the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// How far the check got (the number of the failed step, in check
    /// order); a larger value means a closer offer.
    pub step: u8,
    /// The hint field, e.g. `ep_attr.type`.
    pub field: &'static str,
    /// What was asked and is not offered, e.g.
    /// `ep_type FI_EP_DGRAM is not offered`.
    pub reason: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

fn miss(step: u8, field: &'static str, reason: String) -> Result<(), Mismatch> {
    Err(Mismatch {
        step,
        field,
        reason,
    })
}

/// `hint > offer` is a mismatch for counts and sizes (zero is "any").
fn limit(step: u8, field: &'static str, hint: usize, offer: usize) -> Result<(), Mismatch> {
    if hint > offer {
        return miss(step, field, format!("{field} {hint} is more than offered"));
    }
    Ok(())
}

/// All-ones up to the most significant set bit: the tag width that
/// `mem_tag_format` describes.
fn max_tag(format: u64) -> u64 {
    if format == 0 {
        0
    } else {
        u64::MAX >> format.leading_zeros()
    }
}

/// Whether `caps` let the endpoint be the target of RMA or atomics
/// (libfabric `ofi_rma_target_allowed`): RMA or ATOMIC, and either a
/// REMOTE_* bit or no direction bit at all.
pub(crate) fn rma_target_allowed(caps: Caps) -> bool {
    if !caps.intersects(Caps::RMA | Caps::ATOMIC) {
        return false;
    }
    caps.intersects(Caps::REMOTE_READ | Caps::REMOTE_WRITE)
        || !caps.intersects(Caps::READ | Caps::WRITE)
}

/// The memory-registration modes an offer really needs for `caps`
/// (libfabric `ofi_cap_mr_mode`): FI_MR_HMEM only with FI_HMEM; the
/// target-side bits (RAW, VIRT_ADDR, PROV_KEY, RMA_EVENT) only when the
/// endpoint can be an RMA target; the legacy bits never.
pub(crate) fn needed_mr_mode(caps: Caps, offer: MrMode) -> MrMode {
    let mut m = offer;
    if !caps.contains(Caps::HMEM) {
        m.remove(MrMode::HMEM);
    }
    if !rma_target_allowed(caps) {
        if !offer.intersects(MrMode::LOCAL | MrMode::HMEM) {
            m = MrMode::empty();
        }
        m.remove(MrMode::RAW | MrMode::VIRT_ADDR | MrMode::PROV_KEY | MrMode::RMA_EVENT);
    }
    m - MrMode::LEGACY
}

/// Checks one offer against the hints. The order of the steps is
/// libfabric's: ep type, caps, mode, addr_format, fabric, domain, ep, rx,
/// tx attributes.
pub fn check(offer: &Info, hints: &Info, api: Version) -> Result<(), Mismatch> {
    // 1. Endpoint type: Unspec on either side matches.
    let (he, pe) = (hints.ep_attr.ep_type, offer.ep_attr.ep_type);
    if he != EpType::Unspec && pe != EpType::Unspec && he != pe {
        return miss(1, "ep_attr.type", format!("ep_type {he} is not offered"));
    }
    // 2. Capabilities: every requested bit, primary or secondary.
    let missing = hints.caps - offer.caps;
    if !missing.is_empty() {
        return miss(2, "caps", format!("caps {missing} are not supported"));
    }
    // 3. Mode: the application must accept every mode the offer needs.
    let needed = needed_mode(offer, hints, api);
    if !hints.mode.contains(needed) {
        let lacking = needed - hints.mode;
        return miss(
            3,
            "mode",
            format!("mode {lacking} is required but the hints do not accept it"),
        );
    }
    // 4. Address format.
    if !offer.addr_format.serves(hints.addr_format) {
        return miss(
            4,
            "addr_format",
            format!("addr_format {} is not offered", hints.addr_format),
        );
    }
    check_fabric(offer, hints)?;
    check_domain(offer, hints, api)?;
    check_ep(offer, hints)?;
    check_rx(offer, hints)?;
    check_tx(offer, hints)
}

/// The modes the application must accept: the offer's, plus FI_LOCAL_MR
/// for a FI_MR_LOCAL domain under API < 1.5.
pub(crate) fn needed_mode(offer: &Info, _hints: &Info, api: Version) -> Mode {
    let mut m = offer.mode;
    if api < Version::V1_5 && offer.domain_attr.mr_mode.contains(MrMode::LOCAL) {
        m |= Mode::LOCAL_MR;
    }
    m
}

fn check_fabric(offer: &Info, hints: &Info) -> Result<(), Mismatch> {
    let (h, p) = (&hints.fabric_attr, &offer.fabric_attr);
    // Offers that leave prov_version zero are stamped by the registry,
    // which checks the hint against the provider's version itself.
    if !h.prov_version.is_zero() && !p.prov_version.is_zero() && h.prov_version > p.prov_version {
        return miss(
            5,
            "fabric_attr.prov_version",
            format!(
                "fabric_attr.prov_version {} is newer than offered",
                h.prov_version
            ),
        );
    }
    Ok(())
}

fn check_domain(offer: &Info, hints: &Info, api: Version) -> Result<(), Mismatch> {
    let (h, p) = (&hints.domain_attr, &offer.domain_attr);
    const S: u8 = 6;
    if h.threading.rank() < p.threading.rank() {
        return miss(
            S,
            "domain_attr.threading",
            format!("threading {} is not offered", h.threading),
        );
    }
    if h.control_progress.rank() < p.control_progress.rank() {
        return miss(
            S,
            "domain_attr.control_progress",
            format!("control_progress {} is not offered", h.control_progress),
        );
    }
    if h.data_progress.rank() < p.data_progress.rank() {
        return miss(
            S,
            "domain_attr.data_progress",
            format!("data_progress {} is not offered", h.data_progress),
        );
    }
    if h.resource_mgmt.rank() < p.resource_mgmt.rank() {
        return miss(
            S,
            "domain_attr.resource_mgmt",
            format!("resource_mgmt {} is not offered", h.resource_mgmt),
        );
    }
    use crate::enums::AvType;
    if h.av_type != AvType::Unspec && p.av_type != AvType::Unspec && h.av_type != p.av_type {
        return miss(
            S,
            "domain_attr.av_type",
            format!("av_type {} is not offered", h.av_type),
        );
    }
    limit(
        S,
        "domain_attr.cq_data_size",
        h.cq_data_size,
        p.cq_data_size,
    )?;
    check_mr_mode(offer, hints, api)?;
    // Counts: the man page promises output >= requested for every one of
    // them (libfabric checks only some; we check all).
    limit(S, "domain_attr.mr_key_size", h.mr_key_size, p.mr_key_size)?;
    limit(S, "domain_attr.cq_cnt", h.cq_cnt, p.cq_cnt)?;
    limit(S, "domain_attr.ep_cnt", h.ep_cnt, p.ep_cnt)?;
    limit(S, "domain_attr.tx_ctx_cnt", h.tx_ctx_cnt, p.tx_ctx_cnt)?;
    limit(S, "domain_attr.rx_ctx_cnt", h.rx_ctx_cnt, p.rx_ctx_cnt)?;
    limit(
        S,
        "domain_attr.max_ep_tx_ctx",
        h.max_ep_tx_ctx,
        p.max_ep_tx_ctx,
    )?;
    limit(
        S,
        "domain_attr.max_ep_rx_ctx",
        h.max_ep_rx_ctx,
        p.max_ep_rx_ctx,
    )?;
    limit(
        S,
        "domain_attr.max_ep_stx_ctx",
        h.max_ep_stx_ctx,
        p.max_ep_stx_ctx,
    )?;
    limit(
        S,
        "domain_attr.max_ep_srx_ctx",
        h.max_ep_srx_ctx,
        p.max_ep_srx_ctx,
    )?;
    if api < Version::V1_5 {
        // Before 1.5 libfabric stops here.
        return Ok(());
    }
    limit(S, "domain_attr.cntr_cnt", h.cntr_cnt, p.cntr_cnt)?;
    limit(
        S,
        "domain_attr.mr_iov_limit",
        h.mr_iov_limit,
        p.mr_iov_limit,
    )?;
    let missing = h.caps - p.caps;
    if !missing.is_empty() {
        return miss(
            S,
            "domain_attr.caps",
            format!("domain_attr.caps {missing} are not supported"),
        );
    }
    if !h.mode.contains(p.mode) {
        let lacking = p.mode - h.mode;
        return miss(
            S,
            "domain_attr.mode",
            format!("domain_attr.mode {lacking} is required but the hints do not accept it"),
        );
    }
    limit(
        S,
        "domain_attr.max_err_data",
        h.max_err_data,
        p.max_err_data,
    )?;
    limit(S, "domain_attr.mr_cnt", h.mr_cnt, p.mr_cnt)?;
    if h.auth_key_size != 0 && h.auth_key_size != p.auth_key_size {
        return miss(
            S,
            "domain_attr.auth_key_size",
            format!(
                "domain_attr.auth_key_size {} is not offered",
                h.auth_key_size
            ),
        );
    }
    Ok(())
}

/// Memory-registration mode rules (libfabric `ofi_check_mr_mode`).
fn check_mr_mode(offer: &Info, hints: &Info, api: Version) -> Result<(), Mismatch> {
    const S: u8 = 6;
    const F: &str = "domain_attr.mr_mode";
    let p = offer.domain_attr.mr_mode;
    let u = hints.domain_attr.mr_mode;
    if p.contains(MrMode::LOCAL)
        && !u.contains(MrMode::LOCAL)
        && !hints.mode.contains(Mode::LOCAL_MR)
    {
        return miss(
            S,
            F,
            "mr_mode: FI_MR_LOCAL is required but neither mr_mode FI_MR_LOCAL nor mode FI_LOCAL_MR is set"
                .into(),
        );
    }
    if api < Version::V1_5 {
        let ok = if u.is_empty() {
            p.intersects(MrMode::LEGACY)
        } else if u == MrMode::BASIC || u == MrMode::SCALABLE {
            p.contains(u)
        } else {
            false
        };
        if !ok {
            return miss(S, F, format!("mr_mode {u} is not offered under API < 1.5"));
        }
        return Ok(());
    }
    for legacy in [MrMode::BASIC, MrMode::SCALABLE] {
        if u.contains(legacy) {
            if u != legacy {
                return miss(
                    S,
                    F,
                    format!("mr_mode {u}: {legacy} cannot be combined with other bits"),
                );
            }
            if !p.contains(legacy) {
                return miss(S, F, format!("mr_mode {u} is not offered"));
            }
            return Ok(());
        }
    }
    let needed = needed_mr_mode(hints.caps, p);
    if !u.is_empty() && !u.contains(needed) {
        let lacking = needed - u;
        return miss(
            S,
            F,
            format!("mr_mode {lacking} is required but the hints do not accept it"),
        );
    }
    Ok(())
}

fn ctx_cnt(
    field: &'static str,
    hint: usize,
    offer_ep: usize,
    offer_max: usize,
    offer_shared_max: usize,
) -> Result<(), Mismatch> {
    use crate::attr::SHARED_CONTEXT;
    const S: u8 = 7;
    if hint == 0 {
        if offer_ep == SHARED_CONTEXT {
            return miss(
                S,
                field,
                format!("{field} must be FI_SHARED_CONTEXT for this provider"),
            );
        }
        return Ok(());
    }
    if hint > offer_max {
        if hint == SHARED_CONTEXT && offer_shared_max != 0 {
            return Ok(());
        }
        let shown = if hint == SHARED_CONTEXT {
            "FI_SHARED_CONTEXT".to_string()
        } else {
            hint.to_string()
        };
        return miss(S, field, format!("{field} {shown} is more than offered"));
    }
    Ok(())
}

fn check_ep(offer: &Info, hints: &Info) -> Result<(), Mismatch> {
    use crate::enums::Protocol;
    const S: u8 = 7;
    let (h, p) = (&hints.ep_attr, &offer.ep_attr);
    if h.protocol != Protocol::Unspec && h.protocol != p.protocol {
        return miss(
            S,
            "ep_attr.protocol",
            format!("protocol {} is not offered", h.protocol),
        );
    }
    if h.protocol_version > p.protocol_version {
        return miss(
            S,
            "ep_attr.protocol_version",
            format!(
                "protocol_version {} is newer than offered",
                h.protocol_version
            ),
        );
    }
    limit(S, "ep_attr.max_msg_size", h.max_msg_size, p.max_msg_size)?;
    let d = &offer.domain_attr;
    ctx_cnt(
        "ep_attr.tx_ctx_cnt",
        h.tx_ctx_cnt,
        p.tx_ctx_cnt,
        d.max_ep_tx_ctx,
        d.max_ep_stx_ctx,
    )?;
    ctx_cnt(
        "ep_attr.rx_ctx_cnt",
        h.rx_ctx_cnt,
        p.rx_ctx_cnt,
        d.max_ep_rx_ctx,
        d.max_ep_srx_ctx,
    )?;
    if hints.caps.intersects(Caps::RMA | Caps::ATOMIC) {
        limit(
            S,
            "ep_attr.max_order_raw_size",
            h.max_order_raw_size,
            p.max_order_raw_size,
        )?;
        limit(
            S,
            "ep_attr.max_order_war_size",
            h.max_order_war_size,
            p.max_order_war_size,
        )?;
        limit(
            S,
            "ep_attr.max_order_waw_size",
            h.max_order_waw_size,
            p.max_order_waw_size,
        )?;
    }
    if h.auth_key_size != 0 && h.auth_key_size != p.auth_key_size {
        return miss(
            S,
            "ep_attr.auth_key_size",
            format!("ep_attr.auth_key_size {} is not offered", h.auth_key_size),
        );
    }
    if hints.caps.contains(Caps::TAGGED)
        && h.mem_tag_format != 0
        && max_tag(h.mem_tag_format) > max_tag(p.mem_tag_format)
    {
        return miss(
            S,
            "ep_attr.mem_tag_format",
            format!(
                "mem_tag_format {:#x} is wider than offered",
                h.mem_tag_format
            ),
        );
    }
    Ok(())
}

/// The fields transmit and receive attributes share, for one side.
struct Queue {
    caps: Caps,
    mode: Mode,
    op_flags: OpFlags,
    msg_order: MsgOrder,
    comp_order: CompOrder,
}

/// The names of those fields on one side.
struct QueueNames {
    caps: &'static str,
    mode: &'static str,
    op_flags: &'static str,
    msg_order: &'static str,
    comp_order: &'static str,
}

const RX: QueueNames = QueueNames {
    caps: "rx_attr.caps",
    mode: "rx_attr.mode",
    op_flags: "rx_attr.op_flags",
    msg_order: "rx_attr.msg_order",
    comp_order: "rx_attr.comp_order",
};

const TX: QueueNames = QueueNames {
    caps: "tx_attr.caps",
    mode: "tx_attr.mode",
    op_flags: "tx_attr.op_flags",
    msg_order: "tx_attr.msg_order",
    comp_order: "tx_attr.comp_order",
};

/// Rules common to both sides: caps (ignoring the bits that do not belong
/// to the side: libfabric ignores the other side's and rejects the
/// domain's, which its answers never hold there) and op_flags offered, every mode accepted (the side's mode hint, or the
/// info's when it is zero), each requested ordering kept (1.17's subset
/// rule for comp_order too).
fn check_queue(
    step: u8,
    n: &QueueNames,
    other_side: Caps,
    info_mode: Mode,
    h: Queue,
    p: Queue,
) -> Result<(), Mismatch> {
    let missing = (h.caps - other_side) - p.caps;
    if !missing.is_empty() {
        return miss(
            step,
            n.caps,
            format!("{} {missing} are not supported", n.caps),
        );
    }
    let mode = if h.mode.is_empty() { info_mode } else { h.mode };
    if !mode.contains(p.mode) {
        let lacking = p.mode - mode;
        return miss(
            step,
            n.mode,
            format!(
                "{} {lacking} is required but the hints do not accept it",
                n.mode
            ),
        );
    }
    let flags = h.op_flags - p.op_flags;
    if !flags.is_empty() {
        return miss(
            step,
            n.op_flags,
            format!("{} {flags} are not supported", n.op_flags),
        );
    }
    let order = h.msg_order - p.msg_order;
    if !order.is_empty() {
        return miss(
            step,
            n.msg_order,
            format!("{} {order} is not offered", n.msg_order),
        );
    }
    let order = h.comp_order - p.comp_order;
    if !order.is_empty() {
        return miss(
            step,
            n.comp_order,
            format!("{} {order} is not offered", n.comp_order),
        );
    }
    Ok(())
}

fn check_rx(offer: &Info, hints: &Info) -> Result<(), Mismatch> {
    const S: u8 = 8;
    let (h, p) = (&hints.rx_attr, &offer.rx_attr);
    let view = |a: &crate::attr::RxAttr| Queue {
        caps: a.caps,
        mode: a.mode,
        op_flags: a.op_flags,
        msg_order: a.msg_order,
        comp_order: a.comp_order,
    };
    check_queue(S, &RX, Caps::all() - Caps::RX, hints.mode, view(h), view(p))?;
    limit(
        S,
        "rx_attr.total_buffered_recv",
        h.total_buffered_recv,
        p.total_buffered_recv,
    )?;
    limit(S, "rx_attr.size", h.size, p.size)?;
    limit(S, "rx_attr.iov_limit", h.iov_limit, p.iov_limit)
}

fn check_tx(offer: &Info, hints: &Info) -> Result<(), Mismatch> {
    const S: u8 = 9;
    let (h, p) = (&hints.tx_attr, &offer.tx_attr);
    let view = |a: &crate::attr::TxAttr| Queue {
        caps: a.caps,
        mode: a.mode,
        op_flags: a.op_flags,
        msg_order: a.msg_order,
        comp_order: a.comp_order,
    };
    check_queue(S, &TX, Caps::all() - Caps::TX, hints.mode, view(h), view(p))?;
    limit(S, "tx_attr.inject_size", h.inject_size, p.inject_size)?;
    limit(S, "tx_attr.size", h.size, p.size)?;
    limit(S, "tx_attr.iov_limit", h.iov_limit, p.iov_limit)?;
    limit(S, "tx_attr.rma_iov_limit", h.rma_iov_limit, p.rma_iov_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_width() {
        assert_eq!(max_tag(0), 0);
        assert_eq!(max_tag(1), 1);
        assert_eq!(max_tag(0x8000_0000_0000_0000), u64::MAX);
        assert_eq!(max_tag(0x0000_1000_0000_0000), 0x0000_1fff_ffff_ffff);
    }

    #[test]
    fn rma_target() {
        assert!(!rma_target_allowed(Caps::empty()));
        assert!(!rma_target_allowed(Caps::MSG));
        assert!(rma_target_allowed(Caps::RMA));
        assert!(!rma_target_allowed(Caps::RMA | Caps::READ));
        assert!(rma_target_allowed(
            Caps::RMA | Caps::READ | Caps::REMOTE_WRITE
        ));
    }
}
