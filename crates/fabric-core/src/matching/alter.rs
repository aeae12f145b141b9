//! Builds the answer for one offer that passed [`check`](super::check):
//! the offer, narrowed and filled in from the hints (libfabric
//! `ofi_alter_info`).

use super::check::{needed_mr_mode, rma_target_allowed};
use crate::flags::{Caps, Mode, MrMode, OpFlags};
use crate::info::Info;
use crate::version::Version;

/// Capabilities to report for one structure: with no hint, the primary
/// caps of both `base` and `offered` plus the offered secondary caps; with
/// a hint, the requested primary caps plus the offered secondary caps. The
/// directions (SEND/RECV, READ/WRITE/REMOTE_*) are filled in from `offered`
/// when the result names a class but no direction.
///
/// Capabilities that cost speed, need a partner or belong to another view
/// are reported only when valid: SOURCE and SOURCE_ERR only if requested,
/// the kfabric capabilities ([`Caps::KFI`]) only if requested, RMA_EVENT
/// only with a REMOTE_* direction. (libfabric reports SOURCE only if
/// requested since 2.0 and may report RMA_EVENT without a remote
/// direction.)
pub fn report_caps(base: Caps, hint: Caps, offered: Caps) -> Caps {
    let mut out = if hint.is_empty() {
        (base & offered & Caps::PRIMARY) | (offered & Caps::SECONDARY)
    } else {
        (hint & Caps::PRIMARY) | (offered & Caps::SECONDARY)
    };
    let on_request = Caps::SOURCE | Caps::SOURCE_ERR | Caps::KFI;
    out = (out - on_request) | (hint & on_request & offered);
    if out.intersects(Caps::MSG | Caps::TAGGED) && !out.intersects(Caps::MSG_DIRECTIONS) {
        out |= offered & Caps::MSG_DIRECTIONS;
    }
    if out.intersects(Caps::RMA | Caps::ATOMIC) && !out.intersects(Caps::RMA_DIRECTIONS) {
        out |= offered & Caps::RMA_DIRECTIONS;
    }
    if !out.intersects(Caps::REMOTE_READ | Caps::REMOTE_WRITE) {
        out.remove(Caps::RMA_EVENT);
    }
    out
}

/// The answer for `offer` given `hints` (`None`: no hints at all).
///
/// An offer is what the provider can do; an answer is what one endpoint
/// will be. Where the two differ, the field says so:
/// - op_flags: an offer lists the default flags the provider accepts; an
///   answer holds the endpoint's defaults, which are the hint's, copied as
///   they are (fi_getinfo(3); zero, or no hints: no default flags; the
///   short forms of the operations, `fi_send` and friends, use them);
/// - caps: the kfabric capabilities ([`Caps::KFI`]) only when the hints
///   ask for them; tx / rx / domain caps only the bits of their class
///   ([`Caps::TX`], [`Caps::RX`], [`Caps::DOMAIN`]) and within the
///   endpoint's caps;
/// - mr_mode: never the legacy FI_MR_BASIC / FI_MR_SCALABLE an offer lists
///   to say it serves them, unless the hints use them or the API is older
///   than 1.5.
///
/// With hints, each rule is a sentence of fi_getinfo(3) or libfabric's
/// behaviour:
/// - caps: [`report_caps`]; the endpoint cannot be an RMA target (REMOTE_*
///   removed) when the offer needs target-side MR modes (RAW, VIRT_ADDR,
///   PROV_KEY, RMA_EVENT) that the hints' mr_mode does not accept;
/// - tx / rx / domain caps: [`report_caps`] on their own hints, kept within
///   the endpoint's caps (libfabric lets an rx attribute refill RECV for a
///   send-only endpoint; we keep a send-only endpoint send-only);
/// - mode: what the offer needs, never the hint's bits;
/// - enumerations (threading, progress, resource management, av_type) and
///   sizes (tx/rx size, iov limits, inject size, ordered sizes, context
///   counts): the hint where it is non-zero, else the offer's;
/// - msg_order, comp_order: everything the offer keeps;
/// - mr_mode: the hint when it is a legacy mode; under API < 1.5 BASIC or
///   SCALABLE; otherwise the bits the offer needs for the reported caps
///   (within the hint's mr_mode when that is non-zero). libfabric returns 0
///   for a zero (wildcard) hint, which hides what the provider needs; we
///   report the needed bits.
pub fn alter(offer: &Info, hints: Option<&Info>, api: Version) -> Info {
    let mut out = offer.clone();
    let Some(h) = hints else {
        out.caps -= Caps::KFI;
        out.tx_attr.op_flags = OpFlags::empty();
        out.rx_attr.op_flags = OpFlags::empty();
        out.domain_attr.mr_mode =
            answer_mr_mode(out.caps, offer.domain_attr.mr_mode, MrMode::empty(), api);
        if offer.domain_attr.mr_mode.contains(MrMode::LOCAL) && api < Version::V1_5 {
            out.mode |= Mode::LOCAL_MR;
        }
        confine(&mut out);
        return out;
    };
    let hm = h.domain_attr.mr_mode;
    let pm = offer.domain_attr.mr_mode;

    // Capabilities.
    let mut caps = report_caps(offer.caps, h.caps, offer.caps);
    let target_bits = MrMode::RAW | MrMode::VIRT_ADDR | MrMode::PROV_KEY | MrMode::RMA_EVENT;
    let accepted = hm.contains(MrMode::BASIC)
        || (api < Version::V1_5 && hm.is_empty())
        || hm.contains(pm & target_bits);
    if rma_target_allowed(caps) && pm.intersects(target_bits) && !accepted {
        caps.remove(Caps::REMOTE_READ | Caps::REMOTE_WRITE | Caps::RMA_EVENT);
        // Initiator only: name the directions left, or RMA / ATOMIC alone
        // would mean "every direction" again.
        if !caps.intersects(Caps::RMA_DIRECTIONS) {
            caps |= offer.caps & (Caps::READ | Caps::WRITE);
        }
    }
    out.caps = caps;
    out.tx_attr.caps = report_caps(caps, h.tx_attr.caps, offer.tx_attr.caps);
    out.rx_attr.caps = report_caps(caps, h.rx_attr.caps, offer.rx_attr.caps);
    out.domain_attr.caps = report_caps(caps, h.domain_attr.caps, offer.domain_attr.caps);
    confine(&mut out);

    // Modes: what the offer needs.
    out.mode = offer.mode;
    if pm.contains(MrMode::LOCAL) && (api < Version::V1_5 || hm.intersects(MrMode::LEGACY)) {
        out.mode |= Mode::LOCAL_MR;
    }

    // Address format: a generic offer takes the hint's concrete format.
    use crate::enums::AddrFormat;
    if matches!(offer.addr_format, AddrFormat::Unspec | AddrFormat::Sockaddr)
        && h.addr_format != AddrFormat::Unspec
    {
        out.addr_format = h.addr_format;
    }
    out.handle = h.handle;

    alter_domain(&mut out, h, api);
    alter_ep(&mut out, h);
    let (ht, t) = (&h.tx_attr, &mut out.tx_attr);
    t.op_flags = ht.op_flags;
    nonzero(&mut t.size, ht.size);
    nonzero(&mut t.iov_limit, ht.iov_limit);
    nonzero(&mut t.inject_size, ht.inject_size);
    nonzero(&mut t.rma_iov_limit, ht.rma_iov_limit);
    if ht.tclass != 0 {
        t.tclass = ht.tclass;
    }
    let (hr, r) = (&h.rx_attr, &mut out.rx_attr);
    r.op_flags = hr.op_flags;
    nonzero(&mut r.size, hr.size);
    nonzero(&mut r.iov_limit, hr.iov_limit);
    out
}

/// Keeps the tx, rx and domain caps within the endpoint's caps and their
/// own class (libfabric 1.17's `OFI_TX_CAPS`, `OFI_RX_CAPS`, domain caps).
fn confine(out: &mut Info) {
    let caps = out.caps;
    out.tx_attr.caps &= caps & Caps::TX;
    out.rx_attr.caps &= caps & Caps::RX;
    out.domain_attr.caps &= caps & Caps::DOMAIN;
}

/// The mr_mode of an answer with caps `caps`, for an offer with mr_mode
/// `offered` and hints with mr_mode `hint` (see [`alter`]).
fn answer_mr_mode(caps: Caps, offered: MrMode, hint: MrMode, api: Version) -> MrMode {
    if hint.intersects(MrMode::LEGACY) {
        hint
    } else if api < Version::V1_5 {
        if !offered.is_empty() && offered != MrMode::SCALABLE {
            MrMode::BASIC
        } else {
            MrMode::SCALABLE
        }
    } else {
        let needed = needed_mr_mode(caps, offered)
            | (offered
                & (MrMode::ALLOCATED | MrMode::MMU_NOTIFY | MrMode::ENDPOINT | MrMode::COLLECTIVE));
        if hint.is_empty() {
            needed
        } else {
            needed & hint
        }
    }
}

fn nonzero(out: &mut usize, hint: usize) {
    if hint != 0 {
        *out = hint;
    }
}

fn alter_domain(out: &mut Info, h: &Info, api: Version) {
    use crate::enums::{AvType, Progress, ResourceMgmt, Threading};
    let hd = &h.domain_attr;
    let pm = out.domain_attr.mr_mode;
    let caps = out.caps;
    let d = &mut out.domain_attr;
    d.mr_mode = answer_mr_mode(caps, pm, hd.mr_mode, api);
    if hd.threading != Threading::Unspec {
        d.threading = hd.threading;
    }
    if hd.control_progress != Progress::Unspec {
        d.control_progress = hd.control_progress;
    }
    if hd.data_progress != Progress::Unspec {
        d.data_progress = hd.data_progress;
    }
    if hd.resource_mgmt != ResourceMgmt::Unspec {
        d.resource_mgmt = hd.resource_mgmt;
    }
    if hd.av_type != AvType::Unspec {
        d.av_type = hd.av_type;
    }
    if hd.tclass != 0 {
        d.tclass = hd.tclass;
    }
    if hd.auth_key.is_some() {
        d.auth_key = hd.auth_key.clone();
    }
    if hd.domain.is_some() {
        d.domain = hd.domain;
    }
}

fn alter_ep(out: &mut Info, h: &Info) {
    let he = &h.ep_attr;
    let rma = out.caps.intersects(Caps::RMA | Caps::ATOMIC);
    let e = &mut out.ep_attr;
    if rma {
        nonzero(&mut e.max_order_raw_size, he.max_order_raw_size);
        nonzero(&mut e.max_order_war_size, he.max_order_war_size);
        nonzero(&mut e.max_order_waw_size, he.max_order_waw_size);
    }
    nonzero(&mut e.tx_ctx_cnt, he.tx_ctx_cnt);
    nonzero(&mut e.rx_ctx_cnt, he.rx_ctx_cnt);
    if he.auth_key.is_some() {
        e.auth_key = he.auth_key.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP_MSG: Caps = Caps::MSG
        .union(Caps::RMA)
        .union(Caps::READ)
        .union(Caps::WRITE)
        .union(Caps::SEND)
        .union(Caps::RECV)
        .union(Caps::REMOTE_READ)
        .union(Caps::REMOTE_WRITE)
        .union(Caps::RMA_PMEM)
        .union(Caps::LOCAL_COMM)
        .union(Caps::REMOTE_COMM)
        .union(Caps::RMA_EVENT);

    #[test]
    fn caps_table_of_the_notes() {
        // hint 0: everything offered.
        assert_eq!(report_caps(TCP_MSG, Caps::empty(), TCP_MSG), TCP_MSG);
        // MSG: directions filled, secondaries added, RMA_EVENT dropped
        // because no REMOTE_* direction is reported.
        let sec = Caps::RMA_PMEM | Caps::LOCAL_COMM | Caps::REMOTE_COMM;
        assert_eq!(
            report_caps(TCP_MSG, Caps::MSG, TCP_MSG),
            Caps::MSG | Caps::SEND | Caps::RECV | sec
        );
        // MSG|SEND: send only.
        assert_eq!(
            report_caps(TCP_MSG, Caps::MSG | Caps::SEND, TCP_MSG),
            Caps::MSG | Caps::SEND | sec
        );
        // RMA|WRITE: write only, no RMA_EVENT without a remote direction.
        assert_eq!(
            report_caps(TCP_MSG, Caps::RMA | Caps::WRITE, TCP_MSG),
            Caps::RMA | Caps::WRITE | sec
        );
    }
}
