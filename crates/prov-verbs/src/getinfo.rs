//! What the verbs provider offers, and how it resolves node / service.
//!
//! One answer per active RDMA port address and endpoint type: the ports
//! come from the device list (`rdma_get_devices`, `ibv_query_device`,
//! `ibv_query_port`), their IP addresses from the interfaces whose
//! addresses rdma_cm binds to that device and port (so RoCE, iWARP and
//! IPoIB ports are found the same way); the fabric name is the IP subnet,
//! the domain name the device (`rxe0`). Attributes come from the device's
//! limits. Node and service go through `rdma_getaddrinfo` (the seed page
//! rdma_getaddrinfo(3)): with FI_SOURCE they name the local address
//! (`RAI_PASSIVE`), otherwise the destination, and the answer's source is
//! the device address librdmacm routes from.
//!
//! No rdma-core, no device or no active port: getinfo lists nothing, and
//! says why in a `tracing` debug line.

use std::net::{IpAddr, SocketAddr};

use fabric_core::kit::net::route_source;
use fabric_core::matching::{Request, select};
use fabric_core::objects::EnvVar;
use fabric_core::{
    AddrFormat, Address, Caps, CompOrder, EpType, Error, GetinfoFlags, Info, Mode, MrMode,
    MsgOrder, OpFlags, Progress, Protocol, ResourceMgmt, Result, Threading, Version,
};

use crate::raw::{self, cm, device};

/// The provider's name.
pub const NAME: &str = "verbs";
/// The provider's version.
pub const VERSION: Version = Version::new(0, 1);
/// Version of the RDM protocol (`ep_attr.protocol_version` of RDM).
pub const RDM_PROTOCOL_VERSION: u32 = 1;

/// The variables the provider reads.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "FI_VERBS_DEVICE_NAME",
        kind: "String",
        help: "Only offer this RDMA device (exact name, e.g. rxe0 or mlx5_0).",
    },
    EnvVar {
        name: "FI_VERBS_IFACE",
        kind: "String",
        help: "Only offer addresses of network interfaces whose name starts with this.",
    },
];

/// The default transmit flags an endpoint accepts (`tx_attr.op_flags`):
/// completions (for selective completion), inject, and completion levels
/// up to transmit complete (a work completion says the peer's NIC
/// acknowledged the data; on RDM that may be a bounce buffer, so delivery
/// complete is not offered).
pub const TX_OP_FLAGS: OpFlags = OpFlags::COMPLETION
    .union(OpFlags::INJECT)
    .union(OpFlags::INJECT_COMPLETE)
    .union(OpFlags::TRANSMIT_COMPLETE);

/// The default receive flags an endpoint accepts (`rx_attr.op_flags`);
/// FI_MULTI_RECV on MSG and RDM ([`MSG_RX_OP_FLAGS`], [`RDM_RX_OP_FLAGS`]),
/// not DGRAM.
pub const RX_OP_FLAGS: OpFlags = OpFlags::COMPLETION;
/// The receive flags of RDM endpoints: FI_MULTI_RECV too (the kit's
/// receive engine carves the buffers).
pub const RDM_RX_OP_FLAGS: OpFlags = RX_OP_FLAGS.union(OpFlags::MULTI_RECV);
/// The receive flags of MSG endpoints: FI_MULTI_RECV too (a registered
/// buffer whose rest is posted as one receive after each message).
pub const MSG_RX_OP_FLAGS: OpFlags = RX_OP_FLAGS.union(OpFlags::MULTI_RECV);

/// Largest inject of MSG endpoints (sent inline, or copied to a registered
/// staging slot when the QP takes less inline).
pub const MSG_INJECT_SIZE: usize = 64;
/// Largest inject of RDM endpoints (copied into an eager buffer).
pub const RDM_INJECT_SIZE: usize = 4096;
/// Queue depth offered (bounded by the device's `max_qp_wr`).
pub const QUEUE_SIZE: usize = 1024;
/// IO vector pieces per operation (bounded by the device's `max_sge`).
pub const IOV_LIMIT: usize = 4;
/// Bytes of remote CQ data: the 32-bit immediate of verbs.
pub const CQ_DATA_SIZE: usize = 4;

/// Memory registration of MSG endpoints: local buffers must be registered
/// (descriptors carry the local key), remote addresses are virtual
/// addresses, keys are the device's.
pub const MSG_MR_MODE: MrMode = MrMode::LOCAL
    .union(MrMode::VIRT_ADDR)
    .union(MrMode::ALLOCATED)
    .union(MrMode::PROV_KEY);
/// Memory registration of RDM endpoints: as MSG without FI_MR_LOCAL
/// (unregistered local buffers go through the provider's registered
/// buffers), so applications written for tcp / shm run unchanged.
pub const RDM_MR_MODE: MrMode = MrMode::VIRT_ADDR
    .union(MrMode::ALLOCATED)
    .union(MrMode::PROV_KEY);

/// Message ordering of RC queue pairs (fi_verbs(7)).
pub const ORDER: MsgOrder = MsgOrder::RAR
    .union(MsgOrder::RAW)
    .union(MsgOrder::RAS)
    .union(MsgOrder::WAW)
    .union(MsgOrder::WAS)
    .union(MsgOrder::SAW)
    .union(MsgOrder::SAS);

/// The device limits the offers are built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `max_qp_wr`.
    pub max_qp_wr: usize,
    /// `max_sge`.
    pub max_sge: usize,
    /// `max_qp`.
    pub max_qp: usize,
    /// `max_cq`.
    pub max_cq: usize,
    /// `max_mr`.
    pub max_mr: usize,
    /// `max_msg_sz` of the port.
    pub max_msg_size: usize,
    /// The port's active MTU in bytes.
    pub mtu: usize,
    /// `max_qp_rd_atom` (outstanding reads / atomics as a target).
    pub max_rd_atom: u8,
    /// `max_qp_init_rd_atom` (outstanding reads / atomics issued).
    pub max_init_rd_atom: u8,
    /// 64-bit atomics (fetch-add, compare-swap) are supported.
    pub atomics: bool,
}

impl Limits {
    /// Limits of a software device of the usual size (for tests).
    pub fn typical() -> Limits {
        Limits {
            max_qp_wr: 16384,
            max_sge: 32,
            max_qp: 65536,
            max_cq: 16384,
            max_mr: 65536,
            max_msg_size: 1 << 31,
            mtu: 1024,
            max_rd_atom: 128,
            max_init_rd_atom: 128,
            atomics: true,
        }
    }
}

/// One active port address: the unit of getinfo's answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAddr {
    /// Device name (the domain name).
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Network interface of the address.
    pub iface: String,
    /// The address.
    pub ip: IpAddr,
    /// Prefix length of its subnet.
    pub prefix: u8,
    /// The device's limits.
    pub limits: Limits,
}

impl PortAddr {
    /// The fabric name: the subnet, `10.99.0.0/24`.
    pub fn fabric_name(&self) -> String {
        fabric_core::kit::net::subnet_name(self.ip, self.prefix)
    }

    fn format(&self) -> AddrFormat {
        if self.ip.is_ipv4() {
            AddrFormat::SockaddrIn
        } else {
            AddrFormat::SockaddrIn6
        }
    }
}

fn clamp_u8(v: i32) -> u8 {
    u8::try_from(v.max(0)).unwrap_or(u8::MAX)
}

fn usize_of(v: i32) -> usize {
    usize::try_from(v).unwrap_or(0)
}

/// The active port addresses of this machine, filtered by
/// `FI_VERBS_DEVICE_NAME` and `FI_VERBS_IFACE`; empty (with a debug line)
/// without rdma-core or devices.
pub fn discover(device_filter: Option<&str>, iface_filter: Option<&str>) -> Vec<PortAddr> {
    let ctxs = device::contexts();
    if ctxs.is_empty() {
        return Vec::new();
    }
    let ifaces = match if_addrs::get_if_addrs() {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(error = %e, "verbs: cannot list network interfaces");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for i in ifaces {
        if i.is_loopback() || iface_filter.is_some_and(|f| !i.name.starts_with(f)) {
            continue;
        }
        let (ip, prefix) = match &i.addr {
            if_addrs::IfAddr::V4(a) => (IpAddr::V4(a.ip), a.prefixlen),
            if_addrs::IfAddr::V6(a) => (IpAddr::V6(a.ip), a.prefixlen),
        };
        if let IpAddr::V6(v6) = ip {
            if v6.segments()[0] & 0xffc0 == 0xfe80 {
                continue; // link-local: needs a scope id
            }
        }
        let Some((ctx, port)) = cm::device_of(ip) else {
            continue;
        };
        let name = ctx.name();
        if device_filter.is_some_and(|d| d != name) {
            continue;
        }
        let dev = match ctx.query_device() {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(device = %name, error = %e, "verbs: skipping device");
                continue;
            }
        };
        let pa = match ctx.query_port(port) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(device = %name, port, error = %e, "verbs: skipping port");
                continue;
            }
        };
        if !pa.active() {
            tracing::debug!(device = %name, port, state = pa.attr.state, "verbs: port is not active");
            continue;
        }
        let limits = Limits {
            max_qp_wr: usize_of(dev.max_qp_wr),
            max_sge: usize_of(dev.max_sge),
            max_qp: usize_of(dev.max_qp),
            max_cq: usize_of(dev.max_cq),
            max_mr: usize_of(dev.max_mr),
            max_msg_size: pa.attr.max_msg_sz as usize,
            mtu: 128usize << pa.attr.active_mtu.clamp(1, 5),
            max_rd_atom: clamp_u8(dev.max_qp_rd_atom),
            max_init_rd_atom: clamp_u8(dev.max_qp_init_rd_atom),
            atomics: device::has_atomics(&dev),
        };
        out.push(PortAddr {
            device: name,
            port,
            iface: i.name,
            ip,
            prefix,
            limits,
        });
    }
    out.sort_by(|a, b| {
        (&a.device, a.port, a.ip.is_ipv6(), a.ip).cmp(&(&b.device, b.port, b.ip.is_ipv6(), b.ip))
    });
    out.dedup();
    if out.is_empty() {
        tracing::debug!(
            devices = ctxs.len(),
            "verbs: RDMA devices exist but no active port has an IP address"
        );
    }
    out
}

/// Whether the hints accept FI_RX_CQ_DATA (then RMA writes with remote CQ
/// data consume a posted receive on MSG endpoints).
fn accepts_rx_cq_data(req: &Request<'_>) -> bool {
    req.hints.is_some_and(|h| {
        h.mode.contains(Mode::RX_CQ_DATA) || h.rx_attr.mode.contains(Mode::RX_CQ_DATA)
    })
}

/// The offers of one port address, before node / service placement.
pub fn offers(p: &PortAddr, rx_cq_data: bool) -> Vec<Info> {
    let l = &p.limits;
    let mut out = Vec::new();
    let rma = Caps::RMA | Caps::READ | Caps::WRITE | Caps::REMOTE_READ | Caps::REMOTE_WRITE;
    let atomic = if l.atomics {
        Caps::ATOMIC
    } else {
        Caps::empty()
    };
    let common = Caps::MSG
        | Caps::SEND
        | Caps::RECV
        | rma
        | atomic
        | Caps::REMOTE_CQ_DATA
        | Caps::FENCE
        | Caps::INJECT
        | Caps::LOCAL_COMM
        | Caps::REMOTE_COMM;
    let msg_caps = common | Caps::MULTI_RECV;
    let rdm_caps = common | Caps::TAGGED | Caps::DIRECTED_RECV | Caps::SOURCE | Caps::MULTI_RECV;
    let size = l.max_qp_wr.clamp(1, QUEUE_SIZE);
    let iov = l.max_sge.clamp(1, IOV_LIMIT);
    for (ep, caps) in [(EpType::Msg, msg_caps), (EpType::Rdm, rdm_caps)] {
        let mut i = Info {
            caps,
            addr_format: p.format(),
            ..Info::default()
        };
        let msg = ep == EpType::Msg;
        if msg && rx_cq_data {
            i.mode = Mode::RX_CQ_DATA;
            i.rx_attr.mode = Mode::RX_CQ_DATA;
        }
        i.tx_attr.caps = caps & Caps::TX;
        i.tx_attr.op_flags = TX_OP_FLAGS;
        i.tx_attr.msg_order = ORDER;
        i.tx_attr.comp_order = CompOrder::STRICT;
        i.tx_attr.inject_size = if msg {
            MSG_INJECT_SIZE
        } else {
            RDM_INJECT_SIZE
        };
        i.tx_attr.size = size;
        i.tx_attr.iov_limit = iov;
        i.tx_attr.rma_iov_limit = 1;
        i.rx_attr.caps = caps & Caps::RX;
        i.rx_attr.op_flags = if msg {
            MSG_RX_OP_FLAGS
        } else {
            RDM_RX_OP_FLAGS
        };
        i.rx_attr.msg_order = ORDER;
        i.rx_attr.comp_order = CompOrder::DATA;
        i.rx_attr.size = size;
        i.rx_attr.iov_limit = iov;
        if !msg {
            i.rx_attr.total_buffered_recv = crate::ep::rdm::UNEXPECTED_BUDGET;
        }
        i.ep_attr.ep_type = ep;
        i.ep_attr.protocol = if msg {
            Protocol::RdmaCmIbRc
        } else {
            Protocol::IbRdm
        };
        i.ep_attr.protocol_version = if msg { 1 } else { RDM_PROTOCOL_VERSION };
        i.ep_attr.max_msg_size = if msg {
            l.max_msg_size
        } else {
            l.max_msg_size.min(crate::ep::rdm::MAX_MSG_SIZE)
        };
        if !msg {
            i.ep_attr.mem_tag_format = 0xaaaa_aaaa_aaaa_aaaa;
        }
        i.ep_attr.tx_ctx_cnt = 1;
        i.ep_attr.rx_ctx_cnt = 1;
        let d = &mut i.domain_attr;
        d.name = Some(p.device.clone());
        d.threading = Threading::Safe;
        d.control_progress = Progress::Manual;
        d.data_progress = if msg {
            Progress::Auto
        } else {
            Progress::Manual
        };
        d.resource_mgmt = ResourceMgmt::Enabled;
        d.av_type = if msg {
            fabric_core::AvType::Unspec
        } else {
            fabric_core::AvType::Table
        };
        d.mr_mode = if msg { MSG_MR_MODE } else { RDM_MR_MODE };
        d.mr_key_size = 4;
        d.cq_data_size = CQ_DATA_SIZE;
        d.cq_cnt = l.max_cq;
        d.ep_cnt = l.max_qp;
        d.tx_ctx_cnt = l.max_qp;
        d.rx_ctx_cnt = l.max_qp;
        d.max_ep_tx_ctx = 1;
        d.max_ep_rx_ctx = 1;
        // RDM: endpoints one shared receive context (`fi_srx_context`)
        // may serve, any of the domain's; MSG endpoints take none.
        d.max_ep_srx_ctx = if msg { 0 } else { d.ep_cnt };
        d.cntr_cnt = 1024;
        d.mr_iov_limit = 1;
        d.caps = Caps::LOCAL_COMM | Caps::REMOTE_COMM;
        d.max_err_data = 256;
        d.mr_cnt = l.max_mr;
        i.fabric_attr.name = Some(p.fabric_name());
        i.src_addr = Some(Address::from(SocketAddr::new(p.ip, 0)));
        out.push(i);
    }
    out.push(dgram_offer(p));
    out
}

/// The DGRAM offer of a port address: datagrams on a UD QP, addressed by
/// `FI_ADDR_IB_UD` names; its source address is the port's name with QP
/// number 0 (the endpoint gets its own).
fn dgram_offer(p: &PortAddr) -> Info {
    let l = &p.limits;
    let caps = Caps::MSG
        | Caps::SEND
        | Caps::RECV
        | Caps::SOURCE
        | Caps::REMOTE_CQ_DATA
        | Caps::INJECT
        | Caps::LOCAL_COMM
        | Caps::REMOTE_COMM;
    let max = crate::ep::dgram::max_msg(l.mtu);
    let mut i = Info {
        caps,
        addr_format: AddrFormat::IbUd,
        ..Info::default()
    };
    i.tx_attr.caps = caps & Caps::TX;
    i.tx_attr.op_flags = TX_OP_FLAGS;
    i.tx_attr.inject_size = max;
    i.tx_attr.size = 256;
    i.tx_attr.iov_limit = IOV_LIMIT;
    i.rx_attr.caps = caps & Caps::RX;
    i.rx_attr.op_flags = RX_OP_FLAGS;
    i.rx_attr.size = 256;
    i.rx_attr.iov_limit = IOV_LIMIT;
    i.ep_attr.ep_type = EpType::Dgram;
    i.ep_attr.protocol = Protocol::IbUd;
    i.ep_attr.protocol_version = 1;
    i.ep_attr.max_msg_size = max;
    i.ep_attr.tx_ctx_cnt = 1;
    i.ep_attr.rx_ctx_cnt = 1;
    let d = &mut i.domain_attr;
    d.name = Some(p.device.clone());
    d.threading = Threading::Safe;
    d.control_progress = Progress::Manual;
    d.data_progress = Progress::Manual;
    d.resource_mgmt = ResourceMgmt::Enabled;
    d.av_type = fabric_core::AvType::Table;
    d.mr_key_size = 4;
    d.cq_data_size = CQ_DATA_SIZE;
    d.cq_cnt = l.max_cq;
    d.ep_cnt = l.max_qp;
    d.tx_ctx_cnt = l.max_qp;
    d.rx_ctx_cnt = l.max_qp;
    d.max_ep_tx_ctx = 1;
    d.max_ep_rx_ctx = 1;
    d.cntr_cnt = 1024;
    d.mr_iov_limit = 1;
    d.caps = Caps::LOCAL_COMM | Caps::REMOTE_COMM;
    d.max_err_data = 256;
    d.mr_cnt = l.max_mr;
    i.fabric_attr.name = Some(p.fabric_name());
    let gid = match p.ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    i.src_addr = Some(
        crate::ep::dgram::UdName {
            gid,
            qpn: 0,
            qkey: raw::UDP_QKEY,
            lid: 0,
            pkey: 0xffff,
        }
        .address(),
    );
    i
}

/// What node / service resolve to: the local address to use (a specific
/// IP or the wildcard, with a port) and the destination, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Local address (`0.0.0.0` / `::` for any port address of the family).
    pub src: Option<SocketAddr>,
    /// Destination.
    pub dest: Option<SocketAddr>,
}

fn resolve(req: &Request<'_>) -> Result<Vec<Placement>> {
    let source = req.flags.contains(GetinfoFlags::SOURCE);
    if req.node_is_addr_str() {
        let a: Address = req.node.unwrap_or_default().parse()?;
        let sa = a.socket_addr().ok_or_else(|| {
            Error::no_data(format!(
                "verbs: node address `{a}` is not an IP socket address"
            ))
        })?;
        return Ok(vec![if source {
            Placement {
                src: Some(sa),
                dest: None,
            }
        } else {
            Placement {
                src: route_source(&sa).map(|ip| SocketAddr::new(ip, 0)),
                dest: Some(sa),
            }
        }]);
    }
    if !source && req.node.is_none() {
        return Err(Error::no_data(
            "verbs: a service without a node names the loopback address, which no RDMA device has (use FI_SOURCE for a local service)",
        ));
    }
    let list = raw::addrinfo::resolve(&raw::addrinfo::Query {
        node: req.node,
        service: req.service,
        passive: source,
        numeric: req.flags.contains(GetinfoFlags::NUMERICHOST),
        family: req.hints.map_or(AddrFormat::Unspec, |h| h.addr_format),
    })?;
    let mut out = Vec::new();
    for ai in list {
        let (src, dest) = (ai.src, ai.dest);
        let p = if source {
            Placement { src, dest: None }
        } else {
            let Some(d) = dest else { continue };
            let src = src
                .filter(|s| !s.ip().is_unspecified())
                .map(|s| SocketAddr::new(s.ip(), 0))
                .or_else(|| route_source(&d).map(|ip| SocketAddr::new(ip, 0)));
            Placement { src, dest: Some(d) }
        };
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

fn place(info: &Info, src: SocketAddr, dest: Option<SocketAddr>) -> Info {
    let mut i = info.clone();
    i.src_addr = Some(Address::from(src));
    if let Some(d) = dest {
        i.dest_addr = Some(Address::from(d));
    }
    i
}

/// The provider's getinfo over the given port addresses.
pub fn getinfo(req: &Request<'_>, ports: &[PortAddr]) -> Result<Vec<Info>> {
    if ports.is_empty() {
        tracing::debug!("verbs: no active RDMA port address; offering nothing");
        return Ok(Vec::new());
    }
    let rx_cq_data = accepts_rx_cq_data(req);
    let placements = if req.node.is_some() || req.service.is_some() {
        Some(resolve(req)?)
    } else {
        None
    };
    let mut out = Vec::new();
    let mut why: Option<Error> = None;
    for p in ports {
        let base = match select(&offers(p, rx_cq_data), req) {
            Ok(b) => b,
            Err(e) => {
                why = Some(e);
                continue;
            }
        };
        for info in &base {
            if info.ep_attr.ep_type == EpType::Dgram {
                // Datagram names are not IP addresses: node / service only
                // choose the port address.
                let here = placements.as_ref().is_none_or(|list| {
                    list.iter().filter_map(|pl| pl.src).any(|s| {
                        s.ip() == p.ip || (s.ip().is_unspecified() && s.is_ipv4() == p.ip.is_ipv4())
                    })
                });
                if here {
                    out.push(info.clone());
                }
                continue;
            }
            match &placements {
                None => {
                    // Hints may name a source address: keep only the port
                    // address it names.
                    let hint_src = req
                        .hints
                        .and_then(|h| h.src_addr.as_ref())
                        .and_then(Address::socket_addr);
                    match hint_src {
                        Some(s) if s.ip() == p.ip || s.ip().is_unspecified() => {
                            out.push(place(info, SocketAddr::new(p.ip, s.port()), None));
                        }
                        Some(_) => {}
                        None => out.push(info.clone()),
                    }
                }
                Some(list) => {
                    for pl in list {
                        let Some(src) = pl.src else { continue };
                        let same_family = src.is_ipv4() == p.ip.is_ipv4();
                        if src.ip() == p.ip || (src.ip().is_unspecified() && same_family) {
                            out.push(place(info, SocketAddr::new(p.ip, src.port()), pl.dest));
                        }
                    }
                }
            }
        }
    }
    if out.is_empty() {
        if let Some(e) = why.filter(|_| placements.is_none()) {
            return Err(e);
        }
        return Err(Error::no_data(match req.node {
            Some(n) => format!("verbs: no active RDMA port reaches `{n}`"),
            None => "verbs: no active RDMA port address matches".to_string(),
        }));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default, clippy::unwrap_used)]
mod tests {
    use super::*;

    fn port(ip: &str) -> PortAddr {
        PortAddr {
            device: "rxe0".into(),
            port: 1,
            iface: "d0".into(),
            ip: ip.parse().unwrap(),
            prefix: 24,
            limits: Limits::typical(),
        }
    }

    #[test]
    fn offers_follow_the_device_limits() {
        let mut p = port("10.99.0.1");
        p.limits.max_qp_wr = 100;
        p.limits.max_sge = 2;
        p.limits.atomics = false;
        let o = offers(&p, false);
        assert_eq!(o.len(), 3);
        let msg = &o[0];
        assert_eq!(msg.ep_attr.ep_type, EpType::Msg);
        assert_eq!(msg.tx_attr.size, 100);
        assert_eq!(msg.rx_attr.iov_limit, 2);
        assert!(!msg.caps.contains(Caps::ATOMIC));
        assert_eq!(msg.domain_attr.name.as_deref(), Some("rxe0"));
        assert_eq!(msg.fabric_attr.name.as_deref(), Some("10.99.0.0/24"));
        assert_eq!(msg.domain_attr.mr_mode, MSG_MR_MODE);
        assert!(msg.mode.is_empty());
        let rdm = &o[1];
        assert!(rdm.caps.contains(Caps::TAGGED));
        assert!(!rdm.domain_attr.mr_mode.contains(MrMode::LOCAL));
        assert_eq!(offers(&p, true)[0].mode, Mode::RX_CQ_DATA);
        let dg = &o[2];
        assert_eq!(dg.ep_attr.ep_type, EpType::Dgram);
        assert_eq!(dg.addr_format, AddrFormat::IbUd);
        assert_eq!(dg.ep_attr.max_msg_size, 1024 - 28);
        assert!(dg.domain_attr.mr_mode.is_empty());
    }

    #[test]
    fn no_port_is_an_empty_answer() {
        let req = Request::new(Version::CURRENT);
        assert!(getinfo(&req, &[]).unwrap().is_empty());
    }

    #[test]
    fn hints_select_and_explain() {
        let ports = [port("10.99.0.1")];
        let mut h = Info::default();
        h.ep_attr.ep_type = EpType::Rdm;
        h.caps = Caps::TAGGED;
        let req = Request {
            hints: Some(&h),
            ..Request::new(Version::CURRENT)
        };
        let list = getinfo(&req, &ports).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].ep_attr.ep_type, EpType::Rdm);
        // MSG needs FI_MR_LOCAL: hints without it get RDM and DGRAM.
        let mut h = Info::default();
        h.caps = Caps::MSG;
        let req = Request {
            hints: Some(&h),
            ..Request::new(Version::CURRENT)
        };
        let list = getinfo(&req, &ports).unwrap();
        assert!(list.iter().all(|i| i.ep_attr.ep_type != EpType::Msg));
        assert_eq!(list.len(), 2);
        h.domain_attr.mr_mode = MSG_MR_MODE;
        let req = Request {
            hints: Some(&h),
            ..Request::new(Version::CURRENT)
        };
        assert_eq!(getinfo(&req, &ports).unwrap().len(), 3);
        // Datagrams carry no tags.
        h.caps = Caps::TAGGED;
        h.ep_attr.ep_type = EpType::Dgram;
        let req = Request {
            hints: Some(&h),
            ..Request::new(Version::CURRENT)
        };
        let e = getinfo(&req, &ports).unwrap_err();
        assert!(e.to_string().contains("FI_TAGGED"), "{e}");
    }

    #[test]
    fn addr_str_nodes_are_parsed_not_looked_up() {
        let ports = [port("10.99.0.1")];
        let req = Request {
            node: Some("fi_sockaddr_in://10.99.0.1:7000"),
            flags: GetinfoFlags::SOURCE,
            ..Request::new(Version::CURRENT)
        };
        let list = getinfo(&req, &ports).unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(
            list[0].src_addr,
            Some("fi_sockaddr_in://10.99.0.1:7000".parse().unwrap())
        );
        let req = Request {
            node: Some("fi_sockaddr_in://10.98.0.1:7000"),
            flags: GetinfoFlags::SOURCE,
            ..Request::new(Version::CURRENT)
        };
        assert_eq!(
            getinfo(&req, &ports).unwrap_err().kind(),
            fabric_core::ErrorKind::NoData
        );
    }
}
