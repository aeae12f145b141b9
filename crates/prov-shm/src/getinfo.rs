//! What the shm provider offers: RDM endpoints between processes of this
//! node (FI_LOCAL_COMM only), addressed by `fi_shm://<region name>`
//! strings (FI_ADDR_STR), a service's well-known name among them (see
//! [`getinfo`]); every hint rule is fabric-core's
//! ([`fabric_core::matching::select`]).
//!
//! `ep_attr.protocol` is `FI_PROTO_SHM`; `ep_attr.protocol_version` says
//! how large messages and RMA move in this process: [`PROTOCOL_CMA`]
//! (single copy by cross-memory attach) or [`PROTOCOL_BOUNCE`] (two copies
//! through the peer's bounce buffers, because cross-memory attach is not
//! permitted here; [`crate::cma::detect`] says why, in a log line too).
//! The commands on the ring are the same either way, and peers of either
//! kind talk to each other.

use fabric_core::matching::{Request, select};
use fabric_core::objects::EnvVar;
use fabric_core::{
    AddrFormat, Address, Caps, EpType, Error, GetinfoFlags, Info, MrMode, MsgOrder, OpFlags,
    Progress, Protocol, ResourceMgmt, Result, Threading, Version,
};

use std::net::{SocketAddr, UdpSocket};

use fabric_core::resolve::{Family, Query, resolve};

pub use crate::config::{
    CMA_MIN, CMA_MIN_VAR, EAGER_MAX, EAGER_MAX_VAR, INJECT_SIZE, SPLIT_MIN, SPLIT_MIN_VAR,
    STREAM_VAR, cma_min, eager_max, split_min,
};
use crate::config::{SCHEME, region_of};
use crate::pieces::IOV_LIMIT;
use crate::wire::RMA_IOV_LIMIT;

/// The provider's name.
pub const NAME: &str = "shm";
/// The provider's version.
pub const VERSION: Version = Version::new(0, 1);
/// `protocol_version` when large transfers go through bounce buffers.
pub const PROTOCOL_BOUNCE: u32 = 1;
/// `protocol_version` when large transfers use cross-memory attach.
pub const PROTOCOL_CMA: u32 = 2;

/// The variable that turns cross-memory attach off.
pub const DISABLE_CMA_VAR: &str = crate::cma::DISABLE_VAR;

/// The variables the provider reads.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: DISABLE_CMA_VAR,
        kind: "Boolean",
        help: "Do not use cross-memory attach (process_vm_readv/writev); large messages and RMA then go through bounce buffers.",
    },
    EnvVar {
        name: SPLIT_MIN_VAR,
        kind: "Integer",
        help: "Smallest rendezvous message whose copy is split between receiver and sender (default 32768).",
    },
    EnvVar {
        name: EAGER_MAX_VAR,
        kind: "Integer",
        help: "Largest message (and inline RMA) sent eagerly through the ring and its bounce buffers; larger ones use rendezvous (default 32768; at least the inject size, at most one bounce buffer).",
    },
    EnvVar {
        name: CMA_MIN_VAR,
        kind: "Integer",
        help: "Smallest rendezvous message or RMA transfer copied with cross-memory attach; smaller ones are pushed through bounce buffers. Unset: RMA from 262144 on, and messages choose per peer and size by measured speed.",
    },
    EnvVar {
        name: STREAM_VAR,
        kind: "Integer",
        help: "Stores that fill bounce buffers with payloads from 32768 bytes on: 0 ordinary, 1 non-temporal (with AVX2). Unset: chosen by measured speed.",
    },
];

/// Capabilities of RDM endpoints.
pub const RDM_CAPS: Caps = Caps::MSG
    .union(Caps::TAGGED)
    .union(Caps::SEND)
    .union(Caps::RECV)
    .union(Caps::RMA)
    .union(Caps::READ)
    .union(Caps::WRITE)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE)
    .union(Caps::ATOMIC)
    .union(Caps::MULTI_RECV)
    .union(Caps::FENCE)
    .union(Caps::INJECT)
    .union(Caps::REMOTE_CQ_DATA)
    .union(Caps::LOCAL_COMM)
    .union(Caps::DIRECTED_RECV)
    .union(Caps::SOURCE)
    .union(Caps::RMA_EVENT);

/// The message orderings of an endpoint (`msg_order`, fi_endpoint(3): the
/// order in which the transport headers of one peer's operations are
/// processed): all of them. A sender's commands go through its peer's
/// ring in the order posted (queued operations start in order, and the
/// direct paths are taken only with nothing queued), and the peer handles
/// them one after the other. Where the data lands in that order as well is
/// the ordered sizes' business ([`max_order_raw_size`] and friends).
pub const MSG_ORDER: MsgOrder = MsgOrder::STRICT
    .union(MsgOrder::RMA_RAR)
    .union(MsgOrder::RMA_RAW)
    .union(MsgOrder::RMA_WAR)
    .union(MsgOrder::RMA_WAW)
    .union(MsgOrder::ATOMIC_RAR)
    .union(MsgOrder::ATOMIC_RAW)
    .union(MsgOrder::ATOMIC_WAR)
    .union(MsgOrder::ATOMIC_WAW);

/// `max_order_raw_size` and `max_order_waw_size`: an RMA write up to this
/// size travels inline in its command and is stored when the command is
/// handled, before any later command; a larger one moves its data after
/// later commands may have been handled. The eager limit, bounded by one
/// bounce buffer less the RMA descriptor. (Atomics are always executed
/// when their command is handled.)
pub fn max_order_raw_size() -> usize {
    let bounce = crate::region::RegionConfig::default().bounce_size as usize;
    eager_max().min(bounce.saturating_sub(crate::wire::DESC_MAX))
}

/// `max_order_war_size`: an RMA read up to this size (one ring slot's
/// inline payload) is answered with its data when its command is handled;
/// a larger one is copied later, after later commands may have been
/// handled.
pub fn max_order_war_size() -> usize {
    crate::region::RegionConfig::default().slot_size as usize - crate::ring::SLOT_HEADER
}

/// The default transmit flags an endpoint accepts (`tx_attr.op_flags`):
/// completions (for selective completion), inject, and every completion
/// level up to delivery (a send completes once the peer took it).
pub const TX_OP_FLAGS: OpFlags = OpFlags::COMPLETION
    .union(OpFlags::INJECT)
    .union(OpFlags::INJECT_COMPLETE)
    .union(OpFlags::TRANSMIT_COMPLETE)
    .union(OpFlags::DELIVERY_COMPLETE);

/// The default receive flags an endpoint accepts (`rx_attr.op_flags`).
pub const RX_OP_FLAGS: OpFlags = OpFlags::COMPLETION.union(OpFlags::MULTI_RECV);

/// Largest message.
pub const MAX_MSG_SIZE: usize = 1 << 30;
/// Transmit operations outstanding at most.
pub const TX_SIZE: usize = 256;
/// Receives posted at most.
pub const RX_SIZE: usize = 1024;

/// The memory registration modes offered: no mode bit is needed (local
/// buffers need no registration); the legacy FI_MR_BASIC (virtual
/// addresses, provider keys) and FI_MR_SCALABLE (offsets, application
/// keys) are served too.
pub const MR_MODE: MrMode = MrMode::BASIC.union(MrMode::SCALABLE);

/// The base offer, before the hints: progress manual unless `auto`.
pub fn offer(auto: bool) -> Info {
    let progress = if auto {
        Progress::Auto
    } else {
        Progress::Manual
    };
    let mut i = Info {
        caps: RDM_CAPS,
        addr_format: AddrFormat::Str,
        ..Info::default()
    };
    i.tx_attr.caps = RDM_CAPS & Caps::TX;
    i.tx_attr.op_flags = TX_OP_FLAGS;
    i.tx_attr.msg_order = MSG_ORDER;
    i.tx_attr.inject_size = INJECT_SIZE;
    i.tx_attr.size = TX_SIZE;
    i.tx_attr.iov_limit = IOV_LIMIT;
    i.tx_attr.rma_iov_limit = RMA_IOV_LIMIT;
    i.rx_attr.caps = RDM_CAPS & Caps::RX;
    i.rx_attr.op_flags = RX_OP_FLAGS;
    i.rx_attr.msg_order = MSG_ORDER;
    i.rx_attr.size = RX_SIZE;
    i.rx_attr.iov_limit = IOV_LIMIT;
    i.ep_attr.ep_type = EpType::Rdm;
    i.ep_attr.protocol = Protocol::Shm;
    i.ep_attr.protocol_version = if crate::cma::detect().enabled {
        PROTOCOL_CMA
    } else {
        PROTOCOL_BOUNCE
    };
    i.ep_attr.max_msg_size = MAX_MSG_SIZE;
    i.ep_attr.max_order_raw_size = max_order_raw_size();
    i.ep_attr.max_order_waw_size = max_order_raw_size();
    i.ep_attr.max_order_war_size = max_order_war_size();
    i.ep_attr.mem_tag_format = 0xaaaa_aaaa_aaaa_aaaa;
    i.ep_attr.tx_ctx_cnt = 1;
    i.ep_attr.rx_ctx_cnt = 1;
    i.fabric_attr.name = Some(NAME.to_string());
    let d = &mut i.domain_attr;
    d.name = Some(NAME.to_string());
    d.threading = Threading::Safe;
    d.control_progress = progress;
    d.data_progress = progress;
    d.resource_mgmt = ResourceMgmt::Enabled;
    d.mr_mode = MR_MODE;
    d.mr_key_size = 8;
    d.cq_data_size = 8;
    d.cq_cnt = 1024;
    d.ep_cnt = 1024;
    d.tx_ctx_cnt = 1024;
    d.rx_ctx_cnt = 1024;
    d.max_ep_tx_ctx = 1;
    d.max_ep_rx_ctx = 1;
    // Endpoints one shared receive context (`fi_srx_context`) may serve:
    // any of the domain's.
    d.max_ep_srx_ctx = d.ep_cnt;
    d.cntr_cnt = 1024;
    d.mr_iov_limit = 1;
    d.caps = Caps::LOCAL_COMM;
    d.max_err_data = 256;
    d.mr_cnt = 65536;
    i
}

/// The provider's getinfo: the matching rules on the offer, then the
/// addresses. Every answer has a `src_addr`: the name of the region its
/// endpoint will create.
///
/// Node and service, as libfabric's shm takes them, name endpoints of this
/// host:
/// - a service names the well-known address of an endpoint opened for it
///   ([`region::service_name`](crate::region::service_name)): with
///   FI_SOURCE it is the answer's `src_addr` (the endpoint takes that
///   name), without it the `dest_addr` (a peer's);
/// - an `fi_shm://` node is a region address: `src_addr` with FI_SOURCE
///   (a name this process may create), else `dest_addr`;
/// - any other node must name this host (`localhost`, a loopback or local
///   address, or a name resolving to one), since shm reaches nothing else;
///   without a service and without FI_SOURCE it names no endpoint, which is
///   declined.
///
/// Hints' addresses must be `fi_shm://` addresses. Without a source name
/// the answer gets a fresh one of this process
/// ([`region::fresh_name`](crate::region::fresh_name)).
pub fn getinfo(req: &Request<'_>) -> Result<Vec<Info>> {
    let source = req.flags.contains(GetinfoFlags::SOURCE);
    let named = named_address(req)?;
    if named.is_none() && req.node.is_some() && !source {
        return Err(Error::no_data(
            "shm: a node names this host, not an endpoint: give a service or an fi_shm:// node",
        ));
    }
    let auto = req.hints.is_some_and(|h| {
        h.domain_attr.data_progress == Progress::Auto
            || h.domain_attr.control_progress == Progress::Auto
    });
    let mut out = select(&[offer(auto)], req)?;
    for i in &mut out {
        match (&named, source) {
            (Some(a), true) => i.src_addr = Some(a.clone()),
            (Some(a), false) => i.dest_addr = Some(a.clone()),
            (None, _) => {}
        }
        for a in [&i.src_addr, &i.dest_addr].into_iter().flatten() {
            region_of(a).map_err(|e| Error::no_data(e.detail().to_string()))?;
        }
        if i.src_addr.is_none() {
            i.src_addr = Some(Address::Str(format!(
                "{SCHEME}{}",
                crate::region::fresh_name()
            )));
        }
    }
    Ok(out)
}

/// The endpoint address that node and service name, if any (see
/// [`getinfo`]); `NoData` with the reason when they name nothing shm
/// reaches.
fn named_address(req: &Request<'_>) -> Result<Option<Address>> {
    let decline = |e: Error| Error::no_data(format!("shm: {}", e.detail()));
    if req.node_is_addr_str() {
        let a: Address = req.node.unwrap_or_default().parse()?;
        region_of(&a).map_err(decline)?;
        return Ok(Some(a));
    }
    if let Some(node) = req.node {
        if !names_this_host(node, req.flags.contains(GetinfoFlags::NUMERICHOST)) {
            return Err(Error::no_data(format!(
                "shm reaches endpoints of this host only, and `{node}` is not this host"
            )));
        }
    }
    match req.service {
        Some(svc) => {
            let name = crate::region::service_name(svc).map_err(decline)?;
            Ok(Some(Address::Str(format!("{SCHEME}{name}"))))
        }
        None => Ok(None),
    }
}

/// Whether `node` names this host: `localhost`, this host's name, or an
/// address (given, or resolved) that is a loopback or local one (one a
/// socket can be bound to).
fn names_this_host(node: &str, numeric: bool) -> bool {
    if node.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let query = Query {
        node: Some(node),
        service: None,
        numeric_host: numeric,
        passive: false,
        family: Family::Any,
    };
    resolve(&query).is_ok_and(|addrs| {
        addrs
            .iter()
            .any(|a| a.ip().is_loopback() || UdpSocket::bind(SocketAddr::new(a.ip(), 0)).is_ok())
    })
}
