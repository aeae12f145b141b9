//! Enumerations of fi_info and its attributes, with libfabric 1.17's values.
//! Each has `Unspec` (value 0) as its default, which in hints means "any".

use crate::names::fi_enum;

fi_enum! {
    /// Endpoint type (`ep_attr.type`).
    pub enum EpType {
        /// Any type (hints) / not specified.
        #[default]
        Unspec = 0 => "FI_EP_UNSPEC",
        /// Connected, reliable messages.
        Msg = 1 => "FI_EP_MSG",
        /// Unreliable, unconnected datagrams.
        Dgram = 2 => "FI_EP_DGRAM",
        /// Reliable, unconnected messages addressed through an AV.
        Rdm = 3 => "FI_EP_RDM",
        /// Connected byte stream (sockets-like).
        SockStream = 4 => "FI_EP_SOCK_STREAM",
        /// Unconnected datagrams (sockets-like).
        SockDgram = 5 => "FI_EP_SOCK_DGRAM",
    }
}

fi_enum! {
    /// Wire protocol of an endpoint (`ep_attr.protocol`).
    pub enum Protocol {
        /// Any protocol (hints) / not specified.
        #[default]
        Unspec = 0 => "FI_PROTO_UNSPEC",
        /// InfiniBand RC through rdma_cm.
        RdmaCmIbRc = 1 => "FI_PROTO_RDMA_CM_IB_RC",
        /// iWARP.
        Iwarp = 2 => "FI_PROTO_IWARP",
        /// InfiniBand UD.
        IbUd = 3 => "FI_PROTO_IB_UD",
        /// PSM.
        Psmx = 4 => "FI_PROTO_PSMX",
        /// UDP.
        Udp = 5 => "FI_PROTO_UDP",
        /// TCP sockets.
        SockTcp = 6 => "FI_PROTO_SOCK_TCP",
        /// MXM.
        Mxm = 7 => "FI_PROTO_MXM",
        /// iWARP RDM.
        IwarpRdm = 8 => "FI_PROTO_IWARP_RDM",
        /// InfiniBand RDM.
        IbRdm = 9 => "FI_PROTO_IB_RDM",
        /// Cray GNI.
        Gni = 10 => "FI_PROTO_GNI",
        /// RDM over MSG (ofi_rxm).
        Rxm = 11 => "FI_PROTO_RXM",
        /// RDM over DGRAM (ofi_rxd).
        Rxd = 12 => "FI_PROTO_RXD",
        /// Mellanox MXM / UCX.
        Mlx = 13 => "FI_PROTO_MLX",
        /// Windows NetworkDirect.
        NetworkDirect = 14 => "FI_PROTO_NETWORKDIRECT",
        /// PSM2.
        Psmx2 = 15 => "FI_PROTO_PSMX2",
        /// Shared memory.
        Shm = 16 => "FI_PROTO_SHM",
        /// Multi-rail.
        Mrail = 17 => "FI_PROTO_MRAIL",
        /// Stream over RDM.
        Rstream = 18 => "FI_PROTO_RSTREAM",
        /// InfiniBand XRC through rdma_cm.
        RdmaCmIbXrc = 19 => "FI_PROTO_RDMA_CM_IB_XRC",
        /// AWS EFA.
        Efa = 20 => "FI_PROTO_EFA",
        /// PSM3.
        Psmx3 = 21 => "FI_PROTO_PSMX3",
        /// RXM over TCP.
        RxmTcp = 22 => "FI_PROTO_RXM_TCP",
        /// Omni-Path Express.
        Opx = 23 => "FI_PROTO_OPX",
        /// HPE Cassini.
        Cxi = 24 => "FI_PROTO_CXI",
        /// libfabric's native tcp protocol (xnet).
        Xnet = 25 => "FI_PROTO_XNET",
    }
}

fi_enum! {
    /// Threading model of a domain (`domain_attr.threading`).
    pub enum Threading {
        /// Any model (hints) / not specified.
        #[default]
        Unspec = 0 => "FI_THREAD_UNSPEC",
        /// Every object may be used from any thread at once.
        Safe = 1 => "FI_THREAD_SAFE",
        /// Each object serialised by the application.
        Fid = 2 => "FI_THREAD_FID",
        /// The whole domain serialised by the application.
        Domain = 3 => "FI_THREAD_DOMAIN",
        /// Each completion queue and its endpoints serialised.
        Completion = 4 => "FI_THREAD_COMPLETION",
        /// Each endpoint serialised.
        Endpoint = 5 => "FI_THREAD_ENDPOINT",
    }
}

impl Threading {
    /// Rank used by hint matching: lower is more capable, `Unspec` is the
    /// least demanding (libfabric 1.17's order: SAFE, FID, ENDPOINT,
    /// COMPLETION, DOMAIN). A provider serves a hint whose rank is at least
    /// its own.
    pub const fn rank(self) -> u8 {
        match self {
            Threading::Safe => 1,
            Threading::Fid => 2,
            Threading::Endpoint => 3,
            Threading::Completion => 4,
            Threading::Domain => 5,
            Threading::Unspec => 6,
        }
    }
}

fi_enum! {
    /// Progress model (`domain_attr.control_progress` / `data_progress`).
    pub enum Progress {
        /// Any model (hints) / not specified.
        #[default]
        Unspec = 0 => "FI_PROGRESS_UNSPEC",
        /// The provider makes progress on its own.
        Auto = 1 => "FI_PROGRESS_AUTO",
        /// The application drives progress by calling into the provider.
        Manual = 2 => "FI_PROGRESS_MANUAL",
    }
}

impl Progress {
    /// Rank used by hint matching: AUTO 1, MANUAL 2, UNSPEC 3.
    pub const fn rank(self) -> u8 {
        match self {
            Progress::Auto => 1,
            Progress::Manual => 2,
            Progress::Unspec => 3,
        }
    }
}

fi_enum! {
    /// Resource management (`domain_attr.resource_mgmt`).
    pub enum ResourceMgmt {
        /// Any (hints) / not specified.
        #[default]
        Unspec = 0 => "FI_RM_UNSPEC",
        /// The application must not overrun queues.
        Disabled = 1 => "FI_RM_DISABLED",
        /// The provider protects against queue overruns.
        Enabled = 2 => "FI_RM_ENABLED",
    }
}

impl ResourceMgmt {
    /// Rank used by hint matching: ENABLED 1, DISABLED 2, UNSPEC 3.
    pub const fn rank(self) -> u8 {
        match self {
            ResourceMgmt::Enabled => 1,
            ResourceMgmt::Disabled => 2,
            ResourceMgmt::Unspec => 3,
        }
    }
}

fi_enum! {
    /// Address vector type (`domain_attr.av_type`).
    pub enum AvType {
        /// Any (hints) / not specified.
        #[default]
        Unspec = 0 => "FI_AV_UNSPEC",
        /// fi_addr_t values are provider-chosen handles.
        Map = 1 => "FI_AV_MAP",
        /// fi_addr_t values are indices 0, 1, 2, ...
        Table = 2 => "FI_AV_TABLE",
    }
}

fi_enum! {
    /// Address format (`fi_info.addr_format`).
    pub enum AddrFormat {
        /// Provider-specific / any (hints).
        #[default]
        Unspec = 0 => "FI_FORMAT_UNSPEC",
        /// A `struct sockaddr` of any family.
        Sockaddr = 1 => "FI_SOCKADDR",
        /// `struct sockaddr_in` (IPv4).
        SockaddrIn = 2 => "FI_SOCKADDR_IN",
        /// `struct sockaddr_in6` (IPv6).
        SockaddrIn6 = 3 => "FI_SOCKADDR_IN6",
        /// `struct sockaddr_ib` (InfiniBand).
        SockaddrIb = 4 => "FI_SOCKADDR_IB",
        /// Intel PSM.
        Psmx = 5 => "FI_ADDR_PSMX",
        /// Cray GNI.
        Gni = 6 => "FI_ADDR_GNI",
        /// IBM BG/Q.
        Bgq = 7 => "FI_ADDR_BGQ",
        /// Mellanox MXM.
        Mlx = 8 => "FI_ADDR_MLX",
        /// A formatted string (`fi_sockaddr_in://...`, `fi_shm://...`).
        Str = 9 => "FI_ADDR_STR",
        /// Intel PSM2.
        Psmx2 = 10 => "FI_ADDR_PSMX2",
        /// InfiniBand UD.
        IbUd = 11 => "FI_ADDR_IB_UD",
        /// AWS EFA.
        Efa = 12 => "FI_ADDR_EFA",
        /// Intel PSM3.
        Psmx3 = 13 => "FI_ADDR_PSMX3",
        /// Omni-Path Express.
        Opx = 14 => "FI_ADDR_OPX",
        /// HPE Cassini.
        Cxi = 15 => "FI_ADDR_CXI",
    }
}

impl AddrFormat {
    /// Whether a provider whose format is `self` can serve an application
    /// asking for `hint` (libfabric 1.17 `ofi_valid_addr_format`; `Unspec`
    /// on either side matches).
    ///
    /// A generic `FI_SOCKADDR` provider serves IN, IN6 and IB hints; an IN or
    /// IN6 provider serves a generic `FI_SOCKADDR` hint; an IB provider serves
    /// FI_SOCKADDR and IB. Every other format matches only itself. (1.17
    /// compared the enum values numerically, which let an IB provider accept
    /// IN hints; we follow the explicit sets of later releases.)
    pub fn serves(self, hint: AddrFormat) -> bool {
        use AddrFormat::*;
        match (self, hint) {
            (Unspec, _) | (_, Unspec) => true,
            (Sockaddr, Sockaddr | SockaddrIn | SockaddrIn6 | SockaddrIb) => true,
            (SockaddrIn, Sockaddr | SockaddrIn) => true,
            (SockaddrIn6, Sockaddr | SockaddrIn6) => true,
            (SockaddrIb, Sockaddr | SockaddrIb) => true,
            (a, b) => a == b,
        }
    }
}
