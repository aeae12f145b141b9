//! The getinfo rules of fi_getinfo(3), one table row per rule.
//!
//! Offers are data (a tcp-like MSG offer, an RDM offer, a verbs-like offer
//! that needs FI_MR_LOCAL and provider keys); each row changes the hints
//! and says whether the offer must match, and what the answer must hold.

#![allow(clippy::field_reassign_with_default, clippy::unwrap_used)]

use fabric_core::matching::{self, Request, check};
use fabric_core::*;

fn base_caps() -> Caps {
    Caps::MSG
        | Caps::RMA
        | Caps::TAGGED
        | Caps::ATOMIC
        | Caps::READ
        | Caps::WRITE
        | Caps::SEND
        | Caps::RECV
        | Caps::REMOTE_READ
        | Caps::REMOTE_WRITE
        | Caps::MULTI_RECV
        | Caps::SOURCE
        | Caps::RMA_EVENT
        | Caps::FENCE
        | Caps::LOCAL_COMM
        | Caps::REMOTE_COMM
        | Caps::DIRECTED_RECV
        | Caps::INJECT
        | Caps::REMOTE_CQ_DATA
}

/// An RDM offer with every field set to something non-zero.
fn rdm() -> Info {
    let mut i = Info::default();
    i.caps = base_caps();
    i.addr_format = AddrFormat::SockaddrIn;
    i.tx_attr = TxAttr {
        caps: base_caps() - Caps::RX_ONLY,
        op_flags: OpFlags::COMPLETION
            | OpFlags::INJECT_COMPLETE
            | OpFlags::TRANSMIT_COMPLETE
            | OpFlags::DELIVERY_COMPLETE,
        msg_order: MsgOrder::SAS | MsgOrder::RAW | MsgOrder::WAW,
        comp_order: CompOrder::empty(),
        inject_size: 64,
        size: 1024,
        iov_limit: 4,
        rma_iov_limit: 4,
        ..Default::default()
    };
    i.rx_attr = RxAttr {
        caps: base_caps() - Caps::TX_ONLY,
        op_flags: OpFlags::COMPLETION | OpFlags::MULTI_RECV,
        msg_order: MsgOrder::SAS | MsgOrder::RAW | MsgOrder::WAW,
        total_buffered_recv: 65536,
        size: 1024,
        iov_limit: 4,
        ..Default::default()
    };
    i.ep_attr = EpAttr {
        ep_type: EpType::Rdm,
        protocol: Protocol::Xnet,
        protocol_version: 2,
        max_msg_size: 1 << 30,
        max_order_raw_size: 1 << 20,
        max_order_war_size: 1 << 20,
        max_order_waw_size: 1 << 20,
        mem_tag_format: 0xaaaa_aaaa_aaaa_aaaa,
        tx_ctx_cnt: 1,
        rx_ctx_cnt: 1,
        ..Default::default()
    };
    i.domain_attr = DomainAttr {
        threading: Threading::Safe,
        control_progress: Progress::Auto,
        data_progress: Progress::Manual,
        resource_mgmt: ResourceMgmt::Enabled,
        av_type: AvType::Unspec,
        mr_mode: MrMode::empty(),
        mr_key_size: 8,
        cq_data_size: 8,
        cq_cnt: 256,
        ep_cnt: 8192,
        tx_ctx_cnt: 256,
        rx_ctx_cnt: 256,
        max_ep_tx_ctx: 1,
        max_ep_rx_ctx: 1,
        max_ep_stx_ctx: 0,
        max_ep_srx_ctx: 1,
        cntr_cnt: 128,
        mr_iov_limit: 1,
        caps: Caps::LOCAL_COMM | Caps::REMOTE_COMM,
        max_err_data: 64,
        mr_cnt: 1 << 16,
        ..Default::default()
    };
    i.fabric_attr.prov_version = Version::new(1, 0);
    i
}

fn msg() -> Info {
    let mut i = rdm();
    i.ep_attr.ep_type = EpType::Msg;
    i.caps -= Caps::SOURCE | Caps::DIRECTED_RECV;
    i.rx_attr.caps -= Caps::SOURCE | Caps::DIRECTED_RECV;
    i
}

/// A verbs-like offer: needs FI_MR_LOCAL, provider keys and virtual
/// addresses, and FI_CONTEXT.
fn verbs() -> Info {
    let mut i = msg();
    i.mode = Mode::CONTEXT;
    i.rx_attr.mode = Mode::CONTEXT;
    i.tx_attr.mode = Mode::CONTEXT;
    i.domain_attr.mr_mode =
        MrMode::LOCAL | MrMode::VIRT_ADDR | MrMode::PROV_KEY | MrMode::ALLOCATED;
    i.ep_attr.protocol = Protocol::RdmaCmIbRc;
    i.addr_format = AddrFormat::SockaddrIb;
    i
}

/// Hints as fi_info builds them: all modes accepted, nothing else.
fn hints() -> Info {
    let mut h = Info::default();
    h.mode = Mode::all();
    h.domain_attr.mode = Mode::all();
    h
}

enum Expect {
    /// Must match; the closure checks the answer.
    Match(fn(&Info)),
    /// Must not match, failing on this hint field.
    Miss(&'static str),
}
use Expect::*;

struct Row {
    rule: &'static str,
    offer: fn() -> Info,
    hints: fn(&mut Info),
    api: Version,
    expect: Expect,
}

const V: Version = Version::CURRENT;
const OLD: Version = Version::new(1, 4);

fn ok(_: &Info) {}

#[rustfmt::skip]
fn rows() -> Vec<Row> {
    vec![
        // -- zero is a wildcard, except mode
        Row { rule: "zeroed hints (with modes) match and report the offer's values", offer: rdm, hints: |_| {}, api: V,
              expect: Match(|a| { assert_eq!(a.tx_attr.size, 1024); assert_eq!(a.ep_attr.ep_type, EpType::Rdm);
                                  assert_eq!(a.domain_attr.threading, Threading::Safe); }) },
        Row { rule: "mode 0 means no mode is supported", offer: verbs, hints: |h| { h.mode = Mode::empty(); h.domain_attr.mr_mode = MrMode::LOCAL; },
              api: V, expect: Miss("mode") },
        Row { rule: "required mode accepted", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT; h.domain_attr.mr_mode = MrMode::LOCAL | MrMode::VIRT_ADDR | MrMode::PROV_KEY | MrMode::ALLOCATED; },
              api: V, expect: Match(|a| assert_eq!(a.mode, Mode::CONTEXT)) },
        Row { rule: "output clears modes the provider does not need", offer: rdm, hints: |_| {}, api: V,
              expect: Match(|a| assert_eq!(a.mode, Mode::empty())) },
        Row { rule: "rx_attr.mode falls back to the info mode", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT; h.rx_attr.mode = Mode::MSG_PREFIX; h.domain_attr.mr_mode = MrMode::all() - MrMode::LEGACY; },
              api: V, expect: Miss("rx_attr.mode") },
        Row { rule: "tx_attr.mode must cover the offer's tx mode", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT; h.tx_attr.mode = Mode::MSG_PREFIX; h.domain_attr.mr_mode = MrMode::all() - MrMode::LEGACY; },
              api: V, expect: Miss("tx_attr.mode") },
        Row { rule: "domain mode 0 means none supported", offer: || { let mut o = rdm(); o.domain_attr.mode = Mode::CONTEXT; o }, hints: |h| h.domain_attr.mode = Mode::empty(),
              api: V, expect: Miss("domain_attr.mode") },
        // -- endpoint type
        Row { rule: "ep_type must be offered", offer: msg, hints: |h| h.ep_attr.ep_type = EpType::Dgram, api: V, expect: Miss("ep_attr.type") },
        Row { rule: "ep_type Unspec is any", offer: msg, hints: |h| h.ep_attr.ep_type = EpType::Unspec, api: V, expect: Match(ok) },
        Row { rule: "ep_type equal matches", offer: msg, hints: |h| h.ep_attr.ep_type = EpType::Msg, api: V, expect: Match(ok) },
        // -- capabilities
        Row { rule: "requested caps must all be offered", offer: msg, hints: |h| h.caps = Caps::MSG | Caps::COLLECTIVE, api: V, expect: Miss("caps") },
        Row { rule: "requested secondary caps must be offered", offer: msg, hints: |h| h.caps = Caps::MSG | Caps::SOURCE, api: V, expect: Miss("caps") },
        Row { rule: "primary caps only if requested; secondary may be reported", offer: rdm, hints: |h| h.caps = Caps::TAGGED, api: V,
              expect: Match(|a| { assert!(!a.caps.intersects(Caps::MSG | Caps::RMA | Caps::ATOMIC));
                                  assert!(a.caps.contains(Caps::TAGGED | Caps::SEND | Caps::RECV));
                                  assert!(a.caps.contains(Caps::MULTI_RECV | Caps::FENCE | Caps::LOCAL_COMM));
                                  assert!(!a.caps.contains(Caps::SOURCE), "SOURCE only when asked");
                                  assert!(!a.caps.contains(Caps::RMA_EVENT), "no RMA_EVENT without a remote direction"); }) },
        Row { rule: "zero caps report everything offered (libfabric view: no kfi caps)", offer: rdm, hints: |_| {}, api: V,
              expect: Match(|a| assert_eq!(a.caps, base_caps() - Caps::SOURCE - Caps::KFI)) },
        // -- capability hygiene: libfabric's view unless kfi caps are asked for
        Row { rule: "kfi caps are reported when asked for (kfabric view)", offer: rdm, hints: |h| h.caps = Caps::MSG | Caps::INJECT | Caps::REMOTE_CQ_DATA, api: V,
              expect: Match(|a| { assert!(a.caps.contains(Caps::INJECT | Caps::REMOTE_CQ_DATA));
                                  assert!(!a.tx_attr.caps.intersects(Caps::KFI) && !a.rx_attr.caps.intersects(Caps::KFI)); }) },
        Row { rule: "kfi caps must be offered", offer: rdm, hints: |h| h.caps = Caps::MSG | Caps::CANCEL, api: V, expect: Miss("caps") },
        Row { rule: "tx / rx / domain caps hold only their class", offer: rdm, hints: |h| h.caps = Caps::MSG | Caps::RMA | Caps::LOCAL_COMM | Caps::REMOTE_COMM, api: V,
              expect: Match(|a| { assert!(Caps::TX.contains(a.tx_attr.caps) && a.caps.contains(a.tx_attr.caps));
                                  assert!(Caps::RX.contains(a.rx_attr.caps) && a.caps.contains(a.rx_attr.caps));
                                  assert!(Caps::DOMAIN.contains(a.domain_attr.caps));
                                  assert!(a.domain_attr.caps.contains(Caps::LOCAL_COMM | Caps::REMOTE_COMM));
                                  assert!(a.caps.contains(Caps::LOCAL_COMM | Caps::REMOTE_COMM)); }) },
        Row { rule: "requested domain caps are kept", offer: rdm, hints: |h| h.caps = Caps::REMOTE_COMM, api: V,
              expect: Match(|a| { assert!(a.caps.contains(Caps::REMOTE_COMM)); assert!(a.domain_attr.caps.contains(Caps::REMOTE_COMM)); }) },
        Row { rule: "rx caps hint of another class is ignored, not echoed", offer: rdm, hints: |h| { h.caps = Caps::RMA; h.rx_attr.caps = Caps::MSG | Caps::LOCAL_COMM; }, api: V,
              expect: Match(|a| { assert!(!a.rx_attr.caps.intersects(Caps::MSG | Caps::LOCAL_COMM)); assert!(a.caps.contains(a.rx_attr.caps)); }) },
        Row { rule: "SOURCE reported when requested", offer: rdm, hints: |h| h.caps = Caps::MSG | Caps::SOURCE, api: V, expect: Match(|a| assert!(a.caps.contains(Caps::SOURCE))) },
        Row { rule: "direction restricts: MSG|SEND is send only", offer: rdm, hints: |h| h.caps = Caps::MSG | Caps::SEND, api: V,
              expect: Match(|a| { assert!(!a.caps.contains(Caps::RECV)); assert!(a.tx_attr.caps.contains(Caps::SEND));
                                  assert!(!a.rx_attr.caps.contains(Caps::RECV)); }) },
        Row { rule: "RMA without direction implies all four", offer: rdm, hints: |h| h.caps = Caps::RMA, api: V,
              expect: Match(|a| assert!(a.caps.contains(Caps::RMA_DIRECTIONS | Caps::RMA_EVENT))) },
        Row { rule: "RMA|READ is initiator read only", offer: rdm, hints: |h| h.caps = Caps::RMA | Caps::READ, api: V,
              expect: Match(|a| assert_eq!(a.caps & Caps::RMA_DIRECTIONS, Caps::READ)) },
        Row { rule: "tx/rx caps stay within the endpoint's", offer: rdm, hints: |h| h.caps = Caps::MSG, api: V,
              expect: Match(|a| { assert!(!a.tx_attr.caps.intersects(Caps::RMA | Caps::TAGGED));
                                  assert!(!a.rx_attr.caps.intersects(Caps::RMA | Caps::TAGGED | Caps::SOURCE)); }) },
        Row { rule: "rx caps ignore transmit-only bits", offer: rdm, hints: |h| { h.caps = Caps::MSG; h.rx_attr.caps = Caps::MSG | Caps::SEND | Caps::RECV; }, api: V, expect: Match(ok) },
        Row { rule: "rx caps must be offered", offer: msg, hints: |h| h.rx_attr.caps = Caps::MSG | Caps::DIRECTED_RECV, api: V, expect: Miss("rx_attr.caps") },
        Row { rule: "tx caps ignore receive-only bits", offer: rdm, hints: |h| h.tx_attr.caps = Caps::MSG | Caps::RECV | Caps::REMOTE_READ, api: V, expect: Match(ok) },
        Row { rule: "tx caps must be offered", offer: rdm, hints: |h| h.tx_attr.caps = Caps::MSG | Caps::COLLECTIVE, api: V, expect: Miss("tx_attr.caps") },
        Row { rule: "domain caps must be offered", offer: rdm, hints: |h| h.domain_attr.caps = Caps::SHARED_AV, api: V, expect: Miss("domain_attr.caps") },
        // -- address format
        Row { rule: "IN offer serves FI_SOCKADDR", offer: rdm, hints: |h| h.addr_format = AddrFormat::Sockaddr, api: V, expect: Match(|a| assert_eq!(a.addr_format, AddrFormat::SockaddrIn)) },
        Row { rule: "IN offer does not serve IN6", offer: rdm, hints: |h| h.addr_format = AddrFormat::SockaddrIn6, api: V, expect: Miss("addr_format") },
        Row { rule: "IN offer does not serve FI_ADDR_STR", offer: rdm, hints: |h| h.addr_format = AddrFormat::Str, api: V, expect: Miss("addr_format") },
        Row { rule: "generic offer takes the hint's format", offer: || { let mut o = rdm(); o.addr_format = AddrFormat::Sockaddr; o }, hints: |h| h.addr_format = AddrFormat::SockaddrIn6, api: V,
              expect: Match(|a| assert_eq!(a.addr_format, AddrFormat::SockaddrIn6)) },
        // -- fabric attributes
        Row { rule: "prov_version newer than offered", offer: rdm, hints: |h| h.fabric_attr.prov_version = Version::new(999, 0), api: V, expect: Miss("fabric_attr.prov_version") },
        Row { rule: "prov_version older is fine", offer: rdm, hints: |h| h.fabric_attr.prov_version = Version::new(0, 9), api: V, expect: Match(ok) },
        // -- domain attributes
        Row { rule: "threading: a SAFE offer serves DOMAIN, reports the hint", offer: rdm, hints: |h| h.domain_attr.threading = Threading::Domain, api: V,
              expect: Match(|a| assert_eq!(a.domain_attr.threading, Threading::Domain)) },
        Row { rule: "threading: a DOMAIN offer does not serve SAFE", offer: || { let mut o = rdm(); o.domain_attr.threading = Threading::Domain; o }, hints: |h| h.domain_attr.threading = Threading::Safe,
              api: V, expect: Miss("domain_attr.threading") },
        Row { rule: "threading: FID ranks above ENDPOINT (1.17 order)", offer: || { let mut o = rdm(); o.domain_attr.threading = Threading::Fid; o }, hints: |h| h.domain_attr.threading = Threading::Endpoint,
              api: V, expect: Match(ok) },
        Row { rule: "progress: a MANUAL offer does not serve AUTO data progress", offer: rdm, hints: |h| h.domain_attr.data_progress = Progress::Auto, api: V, expect: Miss("domain_attr.data_progress") },
        Row { rule: "progress: AUTO control progress served, reported", offer: rdm, hints: |h| h.domain_attr.control_progress = Progress::Manual, api: V,
              expect: Match(|a| assert_eq!(a.domain_attr.control_progress, Progress::Manual)) },
        Row { rule: "resource_mgmt ENABLED serves DISABLED", offer: rdm, hints: |h| h.domain_attr.resource_mgmt = ResourceMgmt::Disabled, api: V, expect: Match(ok) },
        Row { rule: "resource_mgmt DISABLED does not serve ENABLED", offer: || { let mut o = rdm(); o.domain_attr.resource_mgmt = ResourceMgmt::Disabled; o },
              hints: |h| h.domain_attr.resource_mgmt = ResourceMgmt::Enabled, api: V, expect: Miss("domain_attr.resource_mgmt") },
        Row { rule: "av_type Unspec offer serves any, reports the hint", offer: rdm, hints: |h| h.domain_attr.av_type = AvType::Table, api: V,
              expect: Match(|a| assert_eq!(a.domain_attr.av_type, AvType::Table)) },
        Row { rule: "av_type must agree when both set", offer: || { let mut o = rdm(); o.domain_attr.av_type = AvType::Map; o }, hints: |h| h.domain_attr.av_type = AvType::Table,
              api: V, expect: Miss("domain_attr.av_type") },
        Row { rule: "cq_data_size larger than offered", offer: rdm, hints: |h| h.domain_attr.cq_data_size = 16, api: V, expect: Miss("domain_attr.cq_data_size") },
        Row { rule: "domain counts: cq_cnt", offer: rdm, hints: |h| h.domain_attr.cq_cnt = 100_000, api: V, expect: Miss("domain_attr.cq_cnt") },
        Row { rule: "domain counts: ep_cnt", offer: rdm, hints: |h| h.domain_attr.ep_cnt = 1 << 20, api: V, expect: Miss("domain_attr.ep_cnt") },
        Row { rule: "domain counts: cntr_cnt", offer: rdm, hints: |h| h.domain_attr.cntr_cnt = 1000, api: V, expect: Miss("domain_attr.cntr_cnt") },
        Row { rule: "domain counts: mr_cnt", offer: rdm, hints: |h| h.domain_attr.mr_cnt = 1 << 30, api: V, expect: Miss("domain_attr.mr_cnt") },
        Row { rule: "domain counts: mr_iov_limit", offer: rdm, hints: |h| h.domain_attr.mr_iov_limit = 2, api: V, expect: Miss("domain_attr.mr_iov_limit") },
        Row { rule: "domain counts: max_err_data", offer: rdm, hints: |h| h.domain_attr.max_err_data = 65, api: V, expect: Miss("domain_attr.max_err_data") },
        Row { rule: "domain counts: mr_key_size", offer: rdm, hints: |h| h.domain_attr.mr_key_size = 16, api: V, expect: Miss("domain_attr.mr_key_size") },
        Row { rule: "domain counts within limits pass, output is the offer's", offer: rdm, hints: |h| { h.domain_attr.cq_cnt = 16; h.domain_attr.ep_cnt = 16; }, api: V,
              expect: Match(|a| assert_eq!(a.domain_attr.cq_cnt, 256)) },
        Row { rule: "API < 1.5 skips the later domain checks", offer: rdm, hints: |h| { h.domain_attr.cntr_cnt = 1000; h.domain_attr.mr_mode = MrMode::empty(); }, api: OLD,
              expect: Miss("domain_attr.mr_mode") },
        Row { rule: "auth_key_size must equal the offer's", offer: rdm, hints: |h| h.domain_attr.auth_key_size = 4, api: V, expect: Miss("domain_attr.auth_key_size") },
        // -- memory registration modes
        Row { rule: "FI_MR_LOCAL offer needs mr_mode LOCAL or mode LOCAL_MR", offer: verbs, hints: |h| h.domain_attr.mr_mode = MrMode::VIRT_ADDR | MrMode::PROV_KEY | MrMode::ALLOCATED,
              api: V, expect: Miss("domain_attr.mr_mode") },
        Row { rule: "mode FI_LOCAL_MR satisfies FI_MR_LOCAL", offer: verbs, hints: |h| h.domain_attr.mr_mode = MrMode::empty(), api: V, expect: Match(ok) },
        Row { rule: "zero mr_mode is a wildcard (API >= 1.5); the answer names the needed bits", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT | Mode::LOCAL_MR; h.caps = Caps::MSG; },
              api: V, expect: Match(|a| assert_eq!(a.domain_attr.mr_mode, MrMode::LOCAL | MrMode::ALLOCATED)) },
        Row { rule: "a non-zero mr_mode must hold every needed bit", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT; h.domain_attr.mr_mode = MrMode::LOCAL; }, api: V,
              expect: Miss("domain_attr.mr_mode") },
        Row { rule: "target-side MR bits needed only for RMA targets", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT; h.caps = Caps::MSG; h.domain_attr.mr_mode = MrMode::LOCAL | MrMode::ALLOCATED; },
              api: V, expect: Match(|a| assert_eq!(a.domain_attr.mr_mode, MrMode::LOCAL | MrMode::ALLOCATED)) },
        Row { rule: "an RMA target must accept PROV_KEY and VIRT_ADDR", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT; h.caps = Caps::RMA; h.domain_attr.mr_mode = MrMode::LOCAL | MrMode::ALLOCATED; },
              api: V, expect: Miss("domain_attr.mr_mode") },
        Row { rule: "RMA target accepted with the needed bits", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT; h.caps = Caps::RMA; h.domain_attr.mr_mode = MrMode::all() - MrMode::LEGACY; },
              api: V, expect: Match(|a| { assert!(a.caps.contains(Caps::REMOTE_WRITE));
                                           assert_eq!(a.domain_attr.mr_mode, MrMode::LOCAL | MrMode::VIRT_ADDR | MrMode::PROV_KEY | MrMode::ALLOCATED); }) },
        Row { rule: "trimming keeps the initiator directions", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT | Mode::LOCAL_MR; h.caps = Caps::ATOMIC; },
              api: V, expect: Match(|a| { assert_eq!(a.caps & (Caps::ATOMIC | Caps::RMA_DIRECTIONS), Caps::ATOMIC | Caps::READ | Caps::WRITE);
                                           assert!(!a.domain_attr.mr_mode.intersects(MrMode::PROV_KEY | MrMode::VIRT_ADDR)); }) },
        Row { rule: "wildcard caps with a non-accepting mr_mode drop RMA target caps", offer: verbs, hints: |h| { h.mode = Mode::CONTEXT; h.domain_attr.mr_mode = MrMode::LOCAL | MrMode::ALLOCATED; },
              api: V, expect: Match(|a| assert!(!a.caps.intersects(Caps::REMOTE_READ | Caps::REMOTE_WRITE))) },
        Row { rule: "legacy FI_MR_BASIC is echoed when offered", offer: || { let mut o = rdm(); o.domain_attr.mr_mode = MrMode::BASIC | MrMode::SCALABLE; o },
              hints: |h| h.domain_attr.mr_mode = MrMode::BASIC, api: V, expect: Match(|a| assert_eq!(a.domain_attr.mr_mode, MrMode::BASIC)) },
        Row { rule: "legacy mode not offered", offer: rdm, hints: |h| h.domain_attr.mr_mode = MrMode::SCALABLE, api: V, expect: Miss("domain_attr.mr_mode") },
        Row { rule: "legacy mode cannot be combined", offer: || { let mut o = rdm(); o.domain_attr.mr_mode = MrMode::BASIC; o }, hints: |h| h.domain_attr.mr_mode = MrMode::BASIC | MrMode::LOCAL,
              api: V, expect: Miss("domain_attr.mr_mode") },
        Row { rule: "API < 1.5: zero mr_mode needs a legacy offer", offer: || { let mut o = rdm(); o.domain_attr.mr_mode = MrMode::SCALABLE; o }, hints: |_| {}, api: OLD,
              expect: Match(|a| assert_eq!(a.domain_attr.mr_mode, MrMode::SCALABLE)) },
        Row { rule: "API < 1.5: FI_MR_LOCAL offer requires mode FI_LOCAL_MR and reports it", offer: || { let mut o = verbs(); o.domain_attr.mr_mode |= MrMode::BASIC; o },
              hints: |h| h.domain_attr.mr_mode = MrMode::BASIC, api: OLD, expect: Match(|a| { assert!(a.mode.contains(Mode::LOCAL_MR)); assert_eq!(a.domain_attr.mr_mode, MrMode::BASIC); }) },
        Row { rule: "API < 1.5: FI_LOCAL_MR mode missing", offer: || { let mut o = verbs(); o.domain_attr.mr_mode |= MrMode::BASIC; o },
              hints: |h| { h.mode = Mode::CONTEXT; h.domain_attr.mr_mode = MrMode::BASIC | MrMode::LOCAL; }, api: OLD, expect: Miss("mode") },
        // -- endpoint attributes
        Row { rule: "protocol must be the offer's exactly", offer: msg, hints: |h| h.ep_attr.protocol = Protocol::Iwarp, api: V, expect: Miss("ep_attr.protocol") },
        Row { rule: "protocol equal matches", offer: msg, hints: |h| h.ep_attr.protocol = Protocol::Xnet, api: V, expect: Match(ok) },
        Row { rule: "protocol_version newer than offered", offer: msg, hints: |h| h.ep_attr.protocol_version = 3, api: V, expect: Miss("ep_attr.protocol_version") },
        Row { rule: "max_msg_size larger than offered", offer: msg, hints: |h| h.ep_attr.max_msg_size = 1 << 31, api: V, expect: Miss("ep_attr.max_msg_size") },
        Row { rule: "tx_ctx_cnt above the limit", offer: msg, hints: |h| h.ep_attr.tx_ctx_cnt = 4, api: V, expect: Miss("ep_attr.tx_ctx_cnt") },
        Row { rule: "FI_SHARED_CONTEXT needs shared contexts", offer: msg, hints: |h| h.ep_attr.tx_ctx_cnt = SHARED_CONTEXT, api: V, expect: Miss("ep_attr.tx_ctx_cnt") },
        Row { rule: "FI_SHARED_CONTEXT served by shared receive contexts", offer: msg, hints: |h| h.ep_attr.rx_ctx_cnt = SHARED_CONTEXT, api: V,
              expect: Match(|a| assert_eq!(a.ep_attr.rx_ctx_cnt, SHARED_CONTEXT)) },
        Row { rule: "an offer that needs shared contexts refuses 0", offer: || { let mut o = msg(); o.ep_attr.rx_ctx_cnt = SHARED_CONTEXT; o }, hints: |_| {}, api: V, expect: Miss("ep_attr.rx_ctx_cnt") },
        Row { rule: "max_order sizes are checked with RMA", offer: rdm, hints: |h| { h.caps = Caps::RMA; h.ep_attr.max_order_raw_size = 1 << 21; }, api: V, expect: Miss("ep_attr.max_order_raw_size") },
        Row { rule: "max_order sizes are ignored without RMA / ATOMIC", offer: rdm, hints: |h| { h.caps = Caps::MSG; h.ep_attr.max_order_waw_size = 1 << 21; }, api: V, expect: Match(ok) },
        Row { rule: "max_order size from the hint with RMA", offer: rdm, hints: |h| { h.caps = Caps::RMA; h.ep_attr.max_order_war_size = 100; }, api: V,
              expect: Match(|a| assert_eq!(a.ep_attr.max_order_war_size, 100)) },
        Row { rule: "mem_tag_format: only the width counts", offer: rdm, hints: |h| { h.caps = Caps::TAGGED; h.ep_attr.mem_tag_format = 0x0fff_ffff_ffff_ffff; }, api: V,
              expect: Match(|a| assert_eq!(a.ep_attr.mem_tag_format, 0xaaaa_aaaa_aaaa_aaaa)) },
        Row { rule: "mem_tag_format wider than offered", offer: || { let mut o = rdm(); o.ep_attr.mem_tag_format = 0xffff_ffff; o }, hints: |h| { h.caps = Caps::TAGGED; h.ep_attr.mem_tag_format = 0x1_0000_0000; },
              api: V, expect: Miss("ep_attr.mem_tag_format") },
        Row { rule: "mem_tag_format ignored without TAGGED", offer: || { let mut o = rdm(); o.ep_attr.mem_tag_format = 0xffff; o }, hints: |h| { h.caps = Caps::MSG; h.ep_attr.mem_tag_format = u64::MAX; },
              api: V, expect: Match(ok) },
        Row { rule: "ep auth_key_size must equal the offer's", offer: rdm, hints: |h| h.ep_attr.auth_key_size = 8, api: V, expect: Miss("ep_attr.auth_key_size") },
        // -- rx / tx attributes
        Row { rule: "rx op_flags must be offered", offer: rdm, hints: |h| h.rx_attr.op_flags = OpFlags::PEEK, api: V, expect: Miss("rx_attr.op_flags") },
        Row { rule: "tx op_flags must be offered, and are copied verbatim", offer: rdm, hints: |h| h.tx_attr.op_flags = OpFlags::DELIVERY_COMPLETE, api: V,
              expect: Match(|a| assert_eq!(a.tx_attr.op_flags, OpFlags::DELIVERY_COMPLETE)) },
        Row { rule: "zero op_flags hint gives no default flags", offer: rdm, hints: |_| {}, api: V, expect: Match(|a| assert!(a.tx_attr.op_flags.is_empty() && a.rx_attr.op_flags.is_empty())) },
        Row { rule: "tx op_flags not offered", offer: rdm, hints: |h| h.tx_attr.op_flags = OpFlags::COMMIT_COMPLETE, api: V, expect: Miss("tx_attr.op_flags") },
        Row { rule: "msg_order must be kept", offer: rdm, hints: |h| h.tx_attr.msg_order = MsgOrder::SAS | MsgOrder::WAR, api: V, expect: Miss("tx_attr.msg_order") },
        Row { rule: "msg_order output is the offer's full set", offer: rdm, hints: |h| h.rx_attr.msg_order = MsgOrder::SAS, api: V,
              expect: Match(|a| assert_eq!(a.rx_attr.msg_order, MsgOrder::SAS | MsgOrder::RAW | MsgOrder::WAW)) },
        Row { rule: "comp_order must be offered (1.17 subset rule)", offer: rdm, hints: |h| h.tx_attr.comp_order = CompOrder::STRICT, api: V, expect: Miss("tx_attr.comp_order") },
        Row { rule: "rx comp_order", offer: rdm, hints: |h| h.rx_attr.comp_order = CompOrder::DATA, api: V, expect: Miss("rx_attr.comp_order") },
        Row { rule: "total_buffered_recv larger than offered", offer: rdm, hints: |h| h.rx_attr.total_buffered_recv = 1 << 20, api: V, expect: Miss("rx_attr.total_buffered_recv") },
        Row { rule: "tx size larger than offered", offer: rdm, hints: |h| h.tx_attr.size = 1 << 30, api: V, expect: Miss("tx_attr.size") },
        Row { rule: "inject_size larger than offered", offer: rdm, hints: |h| h.tx_attr.inject_size = 1 << 20, api: V, expect: Miss("tx_attr.inject_size") },
        Row { rule: "tx iov_limit larger than offered", offer: rdm, hints: |h| h.tx_attr.iov_limit = 5, api: V, expect: Miss("tx_attr.iov_limit") },
        Row { rule: "rma_iov_limit larger than offered", offer: rdm, hints: |h| h.tx_attr.rma_iov_limit = 5, api: V, expect: Miss("tx_attr.rma_iov_limit") },
        Row { rule: "rx size larger than offered", offer: rdm, hints: |h| h.rx_attr.size = 2048, api: V, expect: Miss("rx_attr.size") },
        Row { rule: "rx iov_limit larger than offered", offer: rdm, hints: |h| h.rx_attr.iov_limit = 8, api: V, expect: Miss("rx_attr.iov_limit") },
        Row { rule: "sizes come from the hints when non-zero", offer: rdm, hints: |h| { h.tx_attr.size = 16; h.tx_attr.inject_size = 8; h.rx_attr.size = 32; h.tx_attr.iov_limit = 2; }, api: V,
              expect: Match(|a| { assert_eq!((a.tx_attr.size, a.tx_attr.inject_size, a.rx_attr.size, a.tx_attr.iov_limit), (16, 8, 32, 2));
                                  assert_eq!(a.rx_attr.iov_limit, 4); }) },
    ]
}

#[test]
fn conformance_table() {
    let mut failures = Vec::new();
    for row in rows() {
        let offer = (row.offer)();
        let mut h = hints();
        (row.hints)(&mut h);
        let got = check(&offer, &h, row.api);
        match (&row.expect, got) {
            (Match(verify), Ok(())) => {
                let answer = matching::alter(&offer, Some(&h), row.api);
                if let Err(p) = std::panic::catch_unwind(|| verify(&answer)) {
                    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
                    failures.push(format!("{}: answer wrong: {msg}", row.rule));
                }
                // The answer serves the hints it came from.
                if let Err(m) = check(&offer, &answer, row.api) {
                    failures.push(format!(
                        "{}: the answer fed back as hints misses: {m}",
                        row.rule
                    ));
                }
            }
            (Match(_), Err(m)) => failures.push(format!(
                "{}: expected a match, got miss on {}: {m}",
                row.rule, m.field
            )),
            (Miss(field), Ok(())) => failures.push(format!(
                "{}: expected a miss on {field}, got a match",
                row.rule
            )),
            (Miss(field), Err(m)) => {
                if m.field != *field {
                    failures.push(format!(
                        "{}: expected a miss on {field}, got {}: {m}",
                        row.rule, m.field
                    ));
                }
                if m.reason.is_empty() {
                    failures.push(format!("{}: empty reason", row.rule));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} rule(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The offer in libfabric's view: no kfi caps, no default op_flags, tx /
/// rx / domain caps within their class, no legacy mr_mode bits.
fn libfabric_view(offer: &Info) -> Info {
    let mut a = offer.clone();
    a.caps -= Caps::KFI;
    a.tx_attr.caps &= a.caps & Caps::TX;
    a.rx_attr.caps &= a.caps & Caps::RX;
    a.domain_attr.caps &= a.caps & Caps::DOMAIN;
    a.tx_attr.op_flags = OpFlags::empty();
    a.rx_attr.op_flags = OpFlags::empty();
    a.domain_attr.mr_mode -= MrMode::LEGACY;
    a
}

#[test]
fn null_hints_return_the_offer_in_libfabrics_view() {
    let mut offer = rdm();
    offer.domain_attr.mr_mode = MrMode::BASIC | MrMode::SCALABLE;
    offer.domain_attr.caps = Caps::LOCAL_COMM | Caps::REMOTE_COMM;
    let answer = matching::alter(&offer, None, Version::CURRENT);
    assert_eq!(answer, libfabric_view(&offer));
    assert_eq!(answer.domain_attr.mr_mode, MrMode::empty());
    assert!(!answer.caps.intersects(Caps::KFI));
    let r = Request::new(Version::CURRENT);
    assert_eq!(
        matching::select(std::slice::from_ref(&offer), &r).unwrap(),
        vec![answer.clone()]
    );
    // Under API 1.4 the legacy mode is the answer's.
    let old = matching::alter(&offer, None, OLD);
    assert_eq!(old.domain_attr.mr_mode, MrMode::BASIC);
    // The answer fed back as hints matches the offer again.
    assert_eq!(check(&offer, &answer, Version::CURRENT), Ok(()));
}

#[test]
fn select_explains_the_closest_miss() {
    let mut h = hints();
    h.ep_attr.ep_type = EpType::Rdm;
    h.tx_attr.size = 1 << 30;
    let r = Request {
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    // The MSG offer fails at step 1 (type), the RDM one at step 9 (tx size):
    // the RDM reason is the one reported.
    let e = matching::select(&[msg(), rdm()], &r).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData);
    assert_eq!(e.detail(), "tx_attr.size 1073741824 is more than offered");
}

#[test]
fn select_uses_hint_addresses() {
    let mut h = hints();
    h.dest_addr = Some("fi_sockaddr_in://10.0.0.2:7471".parse().unwrap());
    h.src_addr = Some("fi_sockaddr_in://10.0.0.1:0".parse().unwrap());
    let r = Request {
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    let a = matching::select(&[rdm()], &r).unwrap();
    assert_eq!(a[0].dest_addr, h.dest_addr);
    assert_eq!(a[0].src_addr, h.src_addr);
}

#[test]
fn hint_dest_addr_counts_with_fi_source() {
    let mut h = hints();
    h.dest_addr = Some("fi_sockaddr_in://10.0.0.2:7471".parse().unwrap());
    let r = Request {
        node: Some("10.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    assert_eq!(
        matching::select(&[rdm()], &r).unwrap()[0].dest_addr,
        h.dest_addr
    );
    let r = Request {
        node: Some("10.0.0.3"),
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    assert_eq!(
        matching::select(&[rdm()], &r).unwrap()[0].dest_addr,
        None,
        "node names the destination"
    );
}

#[test]
fn handle_is_copied_from_the_hints() {
    let mut h = hints();
    h.handle = Some(Handle(42));
    assert_eq!(
        matching::alter(&rdm(), Some(&h), Version::CURRENT).handle,
        Some(Handle(42))
    );
}

// -- request validation -----------------------------------------------------

fn validate<'a>(f: impl FnOnce(&mut Request<'a>)) -> Result<()> {
    let mut r = Request::new(Version::CURRENT);
    f(&mut r);
    r.validate()
}

#[test]
fn version_newer_than_supported_is_nosys() {
    let e = validate(|r| r.version = Version::new(1, 18)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSys);
    assert_eq!(e.code(), -38);
    assert!(validate(|r| r.version = Version::new(1, 0)).is_ok());
}

#[test]
fn unknown_getinfo_flags_are_badflags() {
    let e = validate(|r| r.flags = GetinfoFlags::from_bits_retain(1 << 3)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadFlags);
}

#[test]
fn source_needs_node_or_service() {
    let e = validate(|r| r.flags = GetinfoFlags::SOURCE).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(
        validate(|r| {
            r.flags = GetinfoFlags::SOURCE;
            r.service = Some("7471");
        })
        .is_ok()
    );
}

#[test]
fn addr_str_node_takes_no_service() {
    let e = validate(|r| {
        r.node = Some("fi_sockaddr_in://10.0.0.1:7471");
        r.service = Some("7471");
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(validate(|r| r.node = Some("fi_sockaddr_in://10.0.0.1:7471")).is_ok());
}

#[test]
fn prov_attr_only_is_exact() {
    let r = Request {
        flags: GetinfoFlags::PROV_ATTR_ONLY,
        ..Request::new(Version::CURRENT)
    };
    assert!(r.prov_attr_only());
    let r = Request {
        flags: GetinfoFlags::PROV_ATTR_ONLY | GetinfoFlags::SOURCE,
        ..Request::new(Version::CURRENT)
    };
    assert!(!r.prov_attr_only());
}

#[test]
fn invalid_cap_combinations_are_badflags() {
    for caps in [
        Caps::READ,
        Caps::MSG | Caps::REMOTE_WRITE,
        Caps::MSG | Caps::SOURCE_ERR,
        Caps::MULTICAST,
        Caps::RMA | Caps::READ | Caps::RMA_EVENT,
        Caps::from_bits_retain(1 << 62),
    ] {
        let mut h = hints();
        h.caps = caps;
        let e = validate(|r| r.hints = Some(&h)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadFlags, "{caps}");
    }
    for caps in [
        Caps::RMA | Caps::RMA_EVENT,
        Caps::RMA | Caps::REMOTE_READ | Caps::RMA_EVENT,
        Caps::MULTICAST | Caps::SEND,
    ] {
        let mut h = hints();
        h.caps = caps;
        assert!(validate(|r| r.hints = Some(&h)).is_ok(), "{caps}");
    }
}

#[test]
fn unknown_op_flags_are_badflags() {
    let mut h = hints();
    h.tx_attr.op_flags = OpFlags::from_bits_retain(1 << 40);
    assert_eq!(
        validate(|r| r.hints = Some(&h)).unwrap_err().kind(),
        ErrorKind::BadFlags
    );
}

#[test]
fn hint_addresses_must_fit_addr_format() {
    let mut h = hints();
    h.addr_format = AddrFormat::SockaddrIn6;
    h.src_addr = Some("fi_sockaddr_in://10.0.0.1:1".parse().unwrap());
    assert_eq!(
        validate(|r| r.hints = Some(&h)).unwrap_err().kind(),
        ErrorKind::Inval
    );
    h.addr_format = AddrFormat::Sockaddr;
    assert!(validate(|r| r.hints = Some(&h)).is_ok());
    // An FI_ADDR_STR hint takes any address given as a string.
    h.addr_format = AddrFormat::Str;
    assert!(validate(|r| r.hints = Some(&h)).is_ok());
}

// -- names ------------------------------------------------------------------

#[test]
fn fabric_and_domain_names_are_exact_and_case_insensitive() {
    let mut info = rdm();
    info.fabric_attr.name = Some("127.0.0.1/32".into());
    info.domain_attr.name = Some("lo".into());
    let mut h = hints();
    h.domain_attr.name = Some("LO".into());
    assert!(matching::names_match(&info, &h).is_ok());
    h.domain_attr.name = Some("l".into());
    assert_eq!(
        matching::names_match(&info, &h).unwrap_err().field,
        "domain_attr.name"
    );
    h.domain_attr.name = None;
    h.fabric_attr.name = Some("127.0.0.1".into());
    let m = matching::names_match(&info, &h).unwrap_err();
    assert_eq!(m.reason, "fabric name `127.0.0.1` is not offered");
}

// -- fixed point ------------------------------------------------------------

mod fixed_point {
    use super::*;
    use proptest::prelude::*;

    fn bits<T: Copy + std::fmt::Debug + std::ops::BitOr<Output = T> + 'static>(
        all: Vec<T>,
        empty: T,
    ) -> impl Strategy<Value = T> {
        let n = all.len();
        prop::sample::subsequence(all, 0..=n)
            .prop_map(move |v| v.into_iter().fold(empty, |a, b| a | b))
    }

    fn arb_hints() -> impl Strategy<Value = (Info, Version)> {
        let caps = bits(
            vec![
                Caps::MSG,
                Caps::RMA,
                Caps::TAGGED,
                Caps::ATOMIC,
                Caps::READ,
                Caps::WRITE,
                Caps::SEND,
                Caps::RECV,
                Caps::REMOTE_READ,
                Caps::REMOTE_WRITE,
                Caps::MULTI_RECV,
                Caps::FENCE,
                Caps::LOCAL_COMM,
                Caps::RMA_EVENT,
                Caps::INJECT,
            ],
            Caps::empty(),
        );
        let mr = bits(
            vec![
                MrMode::LOCAL,
                MrMode::VIRT_ADDR,
                MrMode::PROV_KEY,
                MrMode::ALLOCATED,
                MrMode::RAW,
                MrMode::ENDPOINT,
            ],
            MrMode::empty(),
        );
        let mode = bits(
            vec![
                Mode::CONTEXT,
                Mode::LOCAL_MR,
                Mode::MSG_PREFIX,
                Mode::RX_CQ_DATA,
            ],
            Mode::empty(),
        );
        (
            caps,
            mr,
            mode,
            prop::sample::select(vec![
                Version::CURRENT,
                Version::new(1, 4),
                Version::new(1, 5),
            ]),
            prop::sample::select(vec![EpType::Unspec, EpType::Msg, EpType::Rdm]),
            prop::sample::select(vec![
                Threading::Unspec,
                Threading::Safe,
                Threading::Domain,
                Threading::Completion,
            ]),
            prop::sample::select(vec![0usize, 1, 16, 1024]),
            prop::sample::select(vec![0usize, 100, 1 << 20]),
            any::<bool>(),
        )
            .prop_map(|(caps, mr, mode, api, ep, thr, size, order, op)| {
                let mut h = Info::default();
                h.caps = caps;
                h.domain_attr.mr_mode = mr;
                h.mode = mode;
                h.ep_attr.ep_type = ep;
                h.domain_attr.threading = thr;
                h.tx_attr.size = size;
                h.rx_attr.size = size;
                h.ep_attr.max_order_raw_size = order;
                if op {
                    h.tx_attr.op_flags = OpFlags::COMPLETION;
                }
                (h, api)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// An answer, fed back as hints, matches and gives itself back.
        #[test]
        fn answers_are_fixed_points((h, api) in arb_hints(), which in 0usize..3) {
            let offer = [rdm, msg, verbs][which]();
            if check(&offer, &h, api).is_ok() {
                let a = matching::alter(&offer, Some(&h), api);
                let back = check(&offer, &a, api);
                prop_assert!(back.is_ok(), "answer fed back misses: {:?}\nhints {h:?}", back);
                prop_assert_eq!(matching::alter(&offer, Some(&a), api), a);
            }
        }
    }
}
