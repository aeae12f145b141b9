//! Fabric and domain objects of the tcp provider.

use std::sync::Arc;

use fabric_core::kit::atomic::AtomicKind;
use fabric_core::kit::mr::{MrTable, Region};
use fabric_core::kit::net::IpBook;
use fabric_core::kit::objects::{Av, Cntr, Cq, Eq};
use fabric_core::objects::{
    AddressVector, AtomicOp, AvAttr, CntrAttr, CompletionQueue, Counter, CqAttr, Datatype, Domain,
    Endpoint, EqAttr, EventQueue, Fabric, MemoryRegion, MrAttr, MrDesc, PassiveEndpoint, SharedRx,
};
use fabric_core::{DomainAttr, EpType, Error, ErrorKind, FabricAttr, Info, MrMode, Result, RxAttr};

use crate::ep::TcpEndpoint;
use crate::ep::passive::TcpPassiveEndpoint;
use crate::ep::srx::TcpSrx;
use crate::progress::{Poller, spawn_auto, wants_auto};

/// A tcp fabric (one IP subnet).
#[derive(Debug)]
pub struct TcpFabric {
    attr: FabricAttr,
}

impl TcpFabric {
    pub(crate) fn new(attr: &FabricAttr) -> Self {
        TcpFabric { attr: attr.clone() }
    }
}

impl Fabric for TcpFabric {
    fn attr(&self) -> &FabricAttr {
        &self.attr
    }

    fn domain(&self, info: &Info) -> Result<Box<dyn Domain>> {
        Ok(Box::new(TcpDomain::new(info)?))
    }

    fn passive_endpoint(&self, info: &Info) -> Result<Box<dyn PassiveEndpoint>> {
        if info.ep_attr.ep_type != EpType::Msg && info.ep_attr.ep_type != EpType::Unspec {
            return Err(Error::inval(format!(
                "tcp: passive endpoints are for FI_EP_MSG, not {}",
                info.ep_attr.ep_type
            )));
        }
        Ok(Box::new(TcpPassiveEndpoint::open(info)?))
    }

    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EventQueue>> {
        Ok(Box::new(Eq::new(attr)?))
    }
}

/// A tcp domain (one interface).
#[derive(Debug)]
pub struct TcpDomain {
    attr: DomainAttr,
    poller: Arc<Poller>,
    mr: Arc<MrTable>,
}

impl TcpDomain {
    /// A domain for `info`. Its `mr_mode` decides how remote addresses
    /// and keys work: FI_MR_VIRT_ADDR (or FI_MR_BASIC) makes RMA addresses
    /// virtual addresses, else offsets from the region's `offset`;
    /// FI_MR_PROV_KEY (or FI_MR_BASIC) lets the provider choose keys, else
    /// the application's requested key is used. With FI_PROGRESS_AUTO a
    /// thread progresses the domain's endpoints.
    pub(crate) fn new(info: &Info) -> Result<Self> {
        let m = info.domain_attr.mr_mode;
        let basic = m.contains(MrMode::BASIC);
        let poller = Arc::new(Poller::new()?);
        if wants_auto(&info.domain_attr) {
            spawn_auto(Arc::downgrade(&poller));
        }
        Ok(TcpDomain {
            attr: info.domain_attr.clone(),
            poller,
            mr: Arc::new(MrTable::new(
                basic || m.contains(MrMode::VIRT_ADDR),
                basic || m.contains(MrMode::PROV_KEY),
            )),
        })
    }
}

impl Domain for TcpDomain {
    fn attr(&self) -> &DomainAttr {
        &self.attr
    }

    fn query_atomic(
        &self,
        datatype: Datatype,
        op: AtomicOp,
        fetch: bool,
        compare: bool,
    ) -> Result<usize> {
        crate::atomic::valid(datatype, op, AtomicKind::of(compare, fetch))
    }

    fn endpoint(&self, info: &Info) -> Result<Box<dyn Endpoint>> {
        fabric_core::kit::defaults::check(
            info,
            "tcp",
            crate::getinfo::TX_OP_FLAGS,
            crate::getinfo::RX_OP_FLAGS,
        )?;
        match info.ep_attr.ep_type {
            EpType::Rdm => Ok(Box::new(TcpEndpoint::open_rdm(
                info,
                self.poller.clone(),
                self.mr.clone(),
            )?)),
            EpType::Msg => Ok(Box::new(TcpEndpoint::open_msg(
                info,
                self.poller.clone(),
                self.mr.clone(),
            )?)),
            t => Err(Error::new(
                ErrorKind::OpNotSupp,
                format!("tcp: {t} endpoints are not offered"),
            )),
        }
    }

    fn cq(&self, attr: &CqAttr) -> Result<Box<dyn CompletionQueue>> {
        Ok(Box::new(Cq::new(attr, self.poller.clone())?))
    }

    fn av(&self, _attr: &AvAttr) -> Result<Box<dyn AddressVector>> {
        Ok(Box::new(Av::new(Arc::new(IpBook::new("tcp")))))
    }

    fn cntr(&self, attr: &CntrAttr) -> Result<Box<dyn Counter>> {
        Ok(Box::new(Cntr::with_attr(attr, self.poller.clone())?))
    }

    fn srx_context(&self, attr: &RxAttr) -> Result<Box<dyn SharedRx>> {
        Ok(Box::new(TcpSrx::new(
            attr,
            self.poller.clone(),
            self.attr.max_ep_srx_ctx,
        )))
    }

    // An `unsafe fn` of the trait (the registration contract); the body
    // uses no `unsafe`.
    #[allow(unsafe_code)]
    unsafe fn mr_reg(&self, attr: &MrAttr) -> Result<Box<dyn MemoryRegion>> {
        let [piece] = attr.iov else {
            return Err(Error::inval(
                "tcp: a memory region is one contiguous piece (mr_iov_limit 1)",
            ));
        };
        let region = Region {
            base: piece.addr as usize,
            len: piece.len,
            access: attr.access,
            offset: attr.offset,
        };
        let key = self.mr.insert(attr.requested_key, region)?;
        Ok(Box::new(TcpMr {
            key,
            table: self.mr.clone(),
        }))
    }
}

/// A registered memory region; dropping it deregisters.
#[derive(Debug)]
pub struct TcpMr {
    key: u64,
    table: Arc<MrTable>,
}

impl MemoryRegion for TcpMr {
    fn key(&self) -> u64 {
        self.key
    }

    fn desc(&self) -> MrDesc {
        MrDesc(self.key)
    }
}

impl Drop for TcpMr {
    fn drop(&mut self) {
        let _ = self.table.remove(self.key);
    }
}
