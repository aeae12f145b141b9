//! [`Hints`]: a builder for `getinfo` requests.

use fabric_core::{
    AddrFormat, Address, AvType, Caps, EpType, GetinfoFlags, Info, Mode, MrMode, Progress,
    Protocol, Request, Result, Threading, Version,
};

use crate::registry::Registry;

/// A `getinfo` request under construction: the hints (an [`Info`]) plus
/// node, service, flags and API version.
///
/// ```
/// use fabric::{Caps, EpType, ErrorKind, Hints};
///
/// let answers = Hints::new().caps(Caps::MSG | Caps::TAGGED).ep_type(EpType::Rdm).getinfo();
/// match answers {
///     Ok(list) => assert!(list.iter().all(|i| i.caps.contains(Caps::TAGGED))),
///     // No provider compiled in, or none offers RDM tagged messages here.
///     Err(e) => assert!(matches!(e.kind(), ErrorKind::NoSys | ErrorKind::NoData)),
/// }
/// ```
///
/// Every field left alone is zero, which means "any", except
/// [`mode`](Hints::mode): zero there means the application supports no
/// modes, as in fi_getinfo(3).
#[derive(Debug, Clone, Default)]
pub struct Hints {
    info: Info,
    version: Option<Version>,
    node: Option<String>,
    service: Option<String>,
    flags: GetinfoFlags,
}

impl Hints {
    /// Empty hints for the current API version.
    pub fn new() -> Self {
        Hints::default()
    }

    /// Starts from a whole `Info` (for example one read from JSON).
    pub fn from_info(info: Info) -> Self {
        Hints {
            info,
            ..Hints::default()
        }
    }

    /// Required capabilities.
    pub fn caps(mut self, caps: Caps) -> Self {
        self.info.caps = caps;
        self
    }

    /// Modes the application supports.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.info.mode = mode;
        self
    }

    /// Endpoint type.
    pub fn ep_type(mut self, t: EpType) -> Self {
        self.info.ep_attr.ep_type = t;
        self
    }

    /// Wire protocol.
    pub fn protocol(mut self, p: Protocol) -> Self {
        self.info.ep_attr.protocol = p;
        self
    }

    /// Address format.
    pub fn addr_format(mut self, f: AddrFormat) -> Self {
        self.info.addr_format = f;
        self
    }

    /// Provider name (`tcp`, `shm`, `verbs`).
    pub fn provider(mut self, name: impl Into<String>) -> Self {
        self.info.fabric_attr.prov_name = Some(name.into());
        self
    }

    /// Fabric name.
    pub fn fabric_name(mut self, name: impl Into<String>) -> Self {
        self.info.fabric_attr.name = Some(name.into());
        self
    }

    /// Domain name.
    pub fn domain_name(mut self, name: impl Into<String>) -> Self {
        self.info.domain_attr.name = Some(name.into());
        self
    }

    /// Threading model.
    pub fn threading(mut self, t: Threading) -> Self {
        self.info.domain_attr.threading = t;
        self
    }

    /// Progress model, for control and data.
    pub fn progress(mut self, p: Progress) -> Self {
        self.info.domain_attr.control_progress = p;
        self.info.domain_attr.data_progress = p;
        self
    }

    /// Address vector type.
    pub fn av_type(mut self, t: AvType) -> Self {
        self.info.domain_attr.av_type = t;
        self
    }

    /// Memory-registration modes the application supports.
    pub fn mr_mode(mut self, m: MrMode) -> Self {
        self.info.domain_attr.mr_mode = m;
        self
    }

    /// Minimum transmit queue size.
    pub fn tx_size(mut self, n: usize) -> Self {
        self.info.tx_attr.size = n;
        self
    }

    /// Minimum receive queue size.
    pub fn rx_size(mut self, n: usize) -> Self {
        self.info.rx_attr.size = n;
        self
    }

    /// Minimum inject size.
    pub fn inject_size(mut self, n: usize) -> Self {
        self.info.tx_attr.inject_size = n;
        self
    }

    /// Source address hint.
    pub fn src_addr(mut self, a: Address) -> Self {
        self.info.src_addr = Some(a);
        self
    }

    /// Destination address hint.
    pub fn dest_addr(mut self, a: Address) -> Self {
        self.info.dest_addr = Some(a);
        self
    }

    /// Node to resolve.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Service (port) to resolve.
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }

    /// Adds getinfo flags.
    pub fn flags(mut self, flags: GetinfoFlags) -> Self {
        self.flags |= flags;
        self
    }

    /// FI_SOURCE: node / service are the local address.
    pub fn source(self) -> Self {
        self.flags(GetinfoFlags::SOURCE)
    }

    /// FI_NUMERICHOST: the node is numeric, no name lookup.
    pub fn numeric_host(self) -> Self {
        self.flags(GetinfoFlags::NUMERICHOST)
    }

    /// The API version to ask for (default: [`Version::CURRENT`]).
    pub fn version(mut self, v: Version) -> Self {
        self.version = Some(v);
        self
    }

    /// The hints as they stand, for fields without a builder method.
    pub fn info_mut(&mut self) -> &mut Info {
        &mut self.info
    }

    /// The hints.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The request these hints describe.
    pub fn request(&self) -> Request<'_> {
        Request {
            version: self.version.unwrap_or(Version::CURRENT),
            node: self.node.as_deref(),
            service: self.service.as_deref(),
            flags: self.flags,
            hints: Some(&self.info),
        }
    }

    /// Runs `getinfo` on the global registry.
    pub fn getinfo(&self) -> Result<Vec<Info>> {
        Registry::global().getinfo(&self.request())
    }

    /// Runs `getinfo` on a given registry.
    pub fn getinfo_in(&self, registry: &Registry) -> Result<Vec<Info>> {
        registry.getinfo(&self.request())
    }
}
