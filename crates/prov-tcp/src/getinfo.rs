//! What the tcp provider offers, and how it turns node / service into
//! addresses: one answer per usable IP interface and endpoint type, as
//! libfabric's tcp provider does (fabric name = the subnet, domain name =
//! the interface), loopback last and local-only.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use fabric_core::kit::net::{route_source, subnet_name};
use fabric_core::matching::{Request, select};
use fabric_core::objects::EnvVar;

pub use crate::limits::{CM_DATA_SIZE, INJECT_SIZE, IOV_LIMIT};
use crate::wire;
use fabric_core::resolve::{Family, Query, resolve};
use fabric_core::{
    AddrFormat, Address, Caps, EpType, Error, GetinfoFlags, Info, MrMode, MsgOrder, OpFlags,
    Progress, Protocol, ResourceMgmt, Result, Threading, Version,
};

/// The provider's name.
pub const NAME: &str = "tcp";
/// The provider's version.
pub const VERSION: Version = Version::new(0, 1);
/// Version of the wire protocol (`ep_attr.protocol_version`).
///
/// Version 2 carries a refused RMA or atomic request's reason back to the
/// initiator; an endpoint opened with `ep_attr.protocol_version = 1` speaks
/// version 1 only (what a peer built before version 2 speaks).
pub const PROTOCOL_VERSION: u32 = wire::VERSION as u32;

/// The variables the provider reads.
pub const ENV_VARS: &[EnvVar] = &[EnvVar {
    name: "FI_TCP_IFACE",
    kind: "String",
    help: "Only offer this network interface (exact name, e.g. eth0); loopback is offered only when unset or `lo`.",
}];

/// Capabilities both endpoint types implement.
const COMMON_CAPS: Caps = Caps::MSG
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
    .union(Caps::REMOTE_COMM)
    .union(Caps::RMA_EVENT);

/// The message orderings of an endpoint (`msg_order`, fi_endpoint(3): the
/// order in which the transport headers of one peer's operations are
/// processed): all of them. An endpoint has one connection per peer, every
/// request frame goes on it in the order posted, and the target handles a
/// connection's frames one after the other. Data ordering is
/// `max_order_*_size`'s: an RMA write is stored, an atomic executed and a
/// message matched before the next frame is read (raw, waw: any size); a
/// read's data leaves the target's memory only when the socket takes it,
/// after later frames may have been applied (war: 0).
pub const MSG_ORDER: MsgOrder = MsgOrder::STRICT
    .union(MsgOrder::RMA_RAR)
    .union(MsgOrder::RMA_RAW)
    .union(MsgOrder::RMA_WAR)
    .union(MsgOrder::RMA_WAW)
    .union(MsgOrder::ATOMIC_RAR)
    .union(MsgOrder::ATOMIC_RAW)
    .union(MsgOrder::ATOMIC_WAR)
    .union(MsgOrder::ATOMIC_WAW);

/// Capabilities the provider implements on RDM endpoints.
pub const RDM_CAPS: Caps = COMMON_CAPS.union(Caps::DIRECTED_RECV).union(Caps::SOURCE);

/// Capabilities the provider implements on MSG endpoints.
pub const MSG_CAPS: Caps = COMMON_CAPS;

/// The default transmit flags an endpoint accepts (`tx_attr.op_flags`):
/// completions (for selective completion), inject, and every completion
/// level up to delivery (each send completes once the peer acknowledged
/// it, which covers them all).
pub const TX_OP_FLAGS: OpFlags = OpFlags::COMPLETION
    .union(OpFlags::INJECT)
    .union(OpFlags::INJECT_COMPLETE)
    .union(OpFlags::TRANSMIT_COMPLETE)
    .union(OpFlags::DELIVERY_COMPLETE);

/// The default receive flags an endpoint accepts (`rx_attr.op_flags`).
pub const RX_OP_FLAGS: OpFlags = OpFlags::COMPLETION.union(OpFlags::MULTI_RECV);

/// Largest message.
pub const MAX_MSG_SIZE: usize = 1 << 30;
/// Queue depths.
pub const QUEUE_SIZE: usize = 1024;

/// The memory registration modes offered: the provider needs no mode bit
/// (no FI_MR_LOCAL: local buffers need no registration). The legacy modes
/// are served too: FI_MR_BASIC (virtual addresses, provider keys) and
/// FI_MR_SCALABLE (offsets, application keys).
pub const MR_MODE: MrMode = MrMode::BASIC.union(MrMode::SCALABLE);

/// One base offer per endpoint type, before addresses are filled in.
/// Progress is manual unless the hints ask for FI_PROGRESS_AUTO (then a
/// thread per domain progresses it).
pub fn offers() -> Vec<Info> {
    offers_with(false)
}

fn offers_with(auto: bool) -> Vec<Info> {
    let progress = if auto {
        Progress::Auto
    } else {
        Progress::Manual
    };
    [(EpType::Msg, MSG_CAPS), (EpType::Rdm, RDM_CAPS)]
        .into_iter()
        .map(|(ep, caps)| {
            let mut i = Info {
                caps,
                addr_format: AddrFormat::Sockaddr,
                ..Info::default()
            };
            i.tx_attr.caps = caps & Caps::TX;
            i.tx_attr.op_flags = TX_OP_FLAGS;
            i.tx_attr.msg_order = MSG_ORDER;
            i.tx_attr.inject_size = INJECT_SIZE;
            i.tx_attr.size = QUEUE_SIZE;
            i.tx_attr.iov_limit = IOV_LIMIT;
            i.tx_attr.rma_iov_limit = wire::MAX_RMA_IOV;
            i.rx_attr.caps = caps & Caps::RX;
            i.rx_attr.op_flags = RX_OP_FLAGS;
            i.rx_attr.msg_order = MSG_ORDER;
            i.rx_attr.size = QUEUE_SIZE;
            i.rx_attr.iov_limit = IOV_LIMIT;
            i.ep_attr.ep_type = ep;
            i.ep_attr.protocol = Protocol::SockTcp;
            i.ep_attr.protocol_version = PROTOCOL_VERSION;
            i.ep_attr.max_msg_size = MAX_MSG_SIZE;
            i.ep_attr.max_order_raw_size = usize::MAX;
            i.ep_attr.max_order_waw_size = usize::MAX;
            i.ep_attr.mem_tag_format = 0xaaaa_aaaa_aaaa_aaaa;
            i.ep_attr.tx_ctx_cnt = 1;
            i.ep_attr.rx_ctx_cnt = 1;
            let d = &mut i.domain_attr;
            d.threading = Threading::Safe;
            d.control_progress = progress;
            d.data_progress = progress;
            d.resource_mgmt = ResourceMgmt::Enabled;
            d.mr_mode = MR_MODE;
            d.mr_key_size = 8;
            d.cq_data_size = 8;
            d.cq_cnt = 1024;
            d.ep_cnt = 65536;
            d.tx_ctx_cnt = 1024;
            d.rx_ctx_cnt = 1024;
            d.max_ep_tx_ctx = 1;
            d.max_ep_rx_ctx = 1;
            // Endpoints one shared receive context (`fi_srx_context`) may
            // serve: any of the domain's.
            d.max_ep_srx_ctx = d.ep_cnt;
            d.cntr_cnt = 1024;
            d.mr_iov_limit = 1;
            d.caps = Caps::LOCAL_COMM | Caps::REMOTE_COMM;
            d.max_err_data = 256;
            d.mr_cnt = 65536;
            i
        })
        .collect()
}

/// One local IP address the provider can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// Interface name (the domain name).
    pub name: String,
    /// Its address.
    pub ip: IpAddr,
    /// Prefix length of its subnet.
    pub prefix: u8,
}

impl Iface {
    /// The fabric name: the subnet, `192.0.2.0/24`.
    pub fn fabric_name(&self) -> String {
        subnet_name(self.ip, self.prefix)
    }

    fn is_loopback(&self) -> bool {
        self.ip.is_loopback()
    }
}

/// The interfaces the provider offers: up, not link-local IPv6, filtered
/// by `FI_TCP_IFACE`; loopback (127.0.0.1 and ::1, local only) last.
pub fn interfaces(only: Option<&str>) -> Vec<Iface> {
    let mut out: Vec<Iface> = Vec::new();
    match if_addrs::get_if_addrs() {
        Ok(list) => {
            for i in list {
                if i.is_loopback()
                    || !i.is_oper_up() && i.oper_status != if_addrs::IfOperStatus::Unknown
                {
                    continue;
                }
                let (ip, prefix) = match &i.addr {
                    if_addrs::IfAddr::V4(a) => (IpAddr::V4(a.ip), a.prefixlen),
                    if_addrs::IfAddr::V6(a) => (IpAddr::V6(a.ip), a.prefixlen),
                };
                if let IpAddr::V6(v6) = ip {
                    // Link-local addresses need a scope id to be used.
                    if v6.segments()[0] & 0xffc0 == 0xfe80 {
                        continue;
                    }
                }
                if only.is_some_and(|o| o != i.name) {
                    continue;
                }
                out.push(Iface {
                    name: i.name,
                    ip,
                    prefix,
                });
            }
        }
        Err(e) => tracing::debug!(error = %e, "tcp: cannot list network interfaces"),
    }
    out.sort_by_key(|i| (i.ip.is_ipv6(), i.ip));
    out.dedup();
    if only.is_none_or(|o| o == "lo" || o == "loopback") {
        out.push(Iface {
            name: "lo".into(),
            ip: Ipv4Addr::LOCALHOST.into(),
            prefix: 32,
        });
        out.push(Iface {
            name: "lo".into(),
            ip: Ipv6Addr::LOCALHOST.into(),
            prefix: 128,
        });
    }
    out
}

fn family(format: AddrFormat) -> Family {
    match format {
        AddrFormat::SockaddrIn => Family::V4,
        AddrFormat::SockaddrIn6 => Family::V6,
        _ => Family::Any,
    }
}

fn place(info: &Info, iface: &Iface, port: u16, dest: Option<SocketAddr>) -> Info {
    let mut i = info.clone();
    i.src_addr = Some(Address::from(SocketAddr::new(iface.ip, port)));
    i.dest_addr = dest.map(Address::from);
    i.addr_format = if iface.ip.is_ipv4() {
        AddrFormat::SockaddrIn
    } else {
        AddrFormat::SockaddrIn6
    };
    let comm = if iface.is_loopback() {
        Caps::LOCAL_COMM
    } else {
        Caps::LOCAL_COMM | Caps::REMOTE_COMM
    };
    let all = Caps::LOCAL_COMM | Caps::REMOTE_COMM;
    i.caps = (i.caps - all) | (i.caps & comm);
    i.domain_attr.caps = (i.domain_attr.caps - all) | (i.domain_attr.caps & comm);
    i.fabric_attr.name = Some(iface.fabric_name());
    i.domain_attr.name = Some(iface.name.clone());
    i
}

/// The provider's getinfo: the matching rules on the base offers, then one
/// answer per interface (or per resolved address).
pub fn getinfo(req: &Request<'_>, ifaces: &[Iface]) -> Result<Vec<Info>> {
    if req.node_is_addr_str() {
        let a: Address = req.node.unwrap_or_default().parse()?;
        if a.socket_addr().is_none() {
            return Err(Error::no_data(format!(
                "tcp: node address `{a}` is not an IP socket address"
            )));
        }
    }
    let auto = req.hints.is_some_and(|h| {
        h.domain_attr.data_progress == Progress::Auto
            || h.domain_attr.control_progress == Progress::Auto
    });
    let base = select(&offers_with(auto), req)?;
    let hint_format = req.hints.map_or(AddrFormat::Unspec, |h| h.addr_format);
    let want_comm = req.hints.map_or(Caps::empty(), |h| {
        h.caps & (Caps::LOCAL_COMM | Caps::REMOTE_COMM)
    });
    let usable = |f: &Iface| {
        let comm = if f.is_loopback() {
            Caps::LOCAL_COMM
        } else {
            Caps::LOCAL_COMM | Caps::REMOTE_COMM
        };
        let fmt = if f.ip.is_ipv4() {
            AddrFormat::SockaddrIn
        } else {
            AddrFormat::SockaddrIn6
        };
        comm.contains(want_comm) && fmt.serves(hint_format) && hint_format.serves(fmt)
    };
    let source = req.flags.contains(GetinfoFlags::SOURCE);
    let mut out = Vec::new();
    let query = Query {
        node: req.node,
        service: req.service,
        numeric_host: req.flags.contains(GetinfoFlags::NUMERICHOST),
        passive: source,
        family: family(hint_format),
    };
    if source {
        let addrs = resolve(&query)?;
        for info in &base {
            for a in &addrs {
                if a.ip().is_unspecified() {
                    // A wildcard source: every interface of that family.
                    for f in ifaces
                        .iter()
                        .filter(|f| f.ip.is_ipv4() == a.is_ipv4() && usable(f))
                    {
                        out.push(place(
                            info,
                            f,
                            a.port(),
                            info.dest_addr.as_ref().and_then(Address::socket_addr),
                        ));
                    }
                } else if let Some(f) = ifaces.iter().find(|f| f.ip == a.ip()) {
                    if usable(f) {
                        out.push(place(
                            info,
                            f,
                            a.port(),
                            info.dest_addr.as_ref().and_then(Address::socket_addr),
                        ));
                    }
                }
            }
        }
    } else if req.node.is_some() || req.service.is_some() {
        let dests = resolve(&query)?;
        for info in &base {
            for d in &dests {
                let Some(src_ip) = route_source(d) else {
                    continue;
                };
                if let Some(f) = ifaces.iter().find(|f| f.ip == src_ip).filter(|f| usable(f)) {
                    out.push(place(info, f, 0, Some(*d)));
                }
            }
        }
    } else {
        for info in &base {
            let src = info.src_addr.as_ref().and_then(Address::socket_addr);
            let dest = info.dest_addr.as_ref().and_then(Address::socket_addr);
            match src {
                // Hints named a source address: keep it, with its interface.
                Some(s) => {
                    if let Some(f) = ifaces
                        .iter()
                        .find(|f| f.ip == s.ip() || s.ip().is_unspecified())
                    {
                        out.push(place(info, f, s.port(), dest));
                    }
                }
                None => {
                    for f in ifaces.iter().filter(|f| usable(f)) {
                        out.push(place(info, f, 0, dest));
                    }
                }
            }
        }
    }
    if out.is_empty() {
        return Err(Error::no_data(match req.node {
            Some(n) => format!("no usable interface reaches `{n}`"),
            None => "no usable interface matches the hints".to_string(),
        }));
    }
    Ok(out)
}
