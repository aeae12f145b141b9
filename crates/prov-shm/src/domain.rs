//! Fabric, domain and memory-region objects of the shm provider.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fabric_core::kit::lock;
use fabric_core::kit::mr::{MrTable, Region as MrRegion};
use fabric_core::kit::objects::{AddressBook, Av, Cq, Eq};
use fabric_core::objects::{
    AddressVector, AtomicOp, AvAttr, CntrAttr, CompletionQueue, Counter, CqAttr, Datatype, Domain,
    Endpoint, EqAttr, EventQueue, Fabric, MemoryRegion, MrAttr, MrDesc, PassiveEndpoint, SharedRx,
};
use fabric_core::{
    Address, DomainAttr, EpType, Error, ErrorKind, FabricAttr, Info, MrMode, Progress, Result,
    RxAttr,
};

pub use crate::cntr::ShmCntr;
use crate::config::{SCHEME, region_of};
use crate::ep::ShmEndpoint;
use crate::ep::engine::Engine;
use crate::ep::srx::ShmSrx;
use crate::region::PeerRegion;

/// The shm fabric (this node's shared memory).
#[derive(Debug)]
pub struct ShmFabric {
    attr: FabricAttr,
}

impl ShmFabric {
    pub(crate) fn new(attr: &FabricAttr) -> Self {
        // Regions of processes that died without closing them (SIGKILL)
        // are removed whenever a fabric is opened.
        if let Ok(v) = crate::region::reclaim_stale() {
            if !v.is_empty() {
                tracing::debug!(removed = ?v, "shm: removed regions of exited processes");
            }
        }
        ShmFabric { attr: attr.clone() }
    }
}

impl Fabric for ShmFabric {
    fn attr(&self) -> &FabricAttr {
        &self.attr
    }

    fn domain(&self, info: &Info) -> Result<Box<dyn Domain>> {
        Ok(Box::new(ShmDomain::new(info)?))
    }

    fn passive_endpoint(&self, _info: &Info) -> Result<Box<dyn PassiveEndpoint>> {
        Err(Error::new(
            ErrorKind::OpNotSupp,
            "shm: only RDM endpoints are offered (no passive endpoints)",
        ))
    }

    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EventQueue>> {
        Ok(Box::new(Eq::new(attr)?))
    }
}

/// How shm addresses are read for an AV: `fi_shm://<region name>`.
///
/// An address inserted into the AV also has its region mapped there and
/// then (when it exists and passes [`PeerRegion::attach`]'s checks),
/// and kept mapped while the AV lives: mapping a region populates its page
/// tables (about 0.4-0.6 ms for a 5 MiB region, 1.4 times that for the
/// default 9 MiB), which
/// otherwise fell on the first message to a peer, and on the peer's
/// answer to its `HELLO` (it maps ours), about 1.1 ms in all. Sends and
/// `HELLO`s then find the mapping in this process's cache
/// ([`crate::ep::shared::attach`]). A region that cannot be mapped yet is
/// left alone: the address is still accepted, and the first operation
/// maps it (or reports why it cannot).
#[derive(Debug, Default)]
struct ShmBook {
    /// Regions mapped at insert, by name (closed ones are let go at the
    /// next insert); at most [`HELD_MAX`].
    held: Mutex<HashMap<String, Arc<PeerRegion>>>,
}

/// Most regions an AV keeps mapped ahead of use (9 MiB of address space
/// each); addresses past it are mapped by their first operation.
const HELD_MAX: usize = 1024;

impl ShmBook {
    /// Maps the region of `name` ahead of its first use (best effort).
    fn premap(&self, name: &str) {
        let mut held = lock(&self.held);
        if held.get(name).is_some_and(|r| r.is_open()) {
            return;
        }
        held.retain(|_, r| r.is_open());
        if held.len() >= HELD_MAX {
            return;
        }
        match crate::ep::shared::attach(name) {
            Ok(r) => {
                held.insert(name.to_owned(), r);
            }
            Err(e) => tracing::debug!(name, error = %e, "shm: region not mapped at AV insert"),
        }
    }
}

impl AddressBook for ShmBook {
    fn resolve(&self, node: &str, service: &str) -> Result<Address> {
        if !service.is_empty() {
            return Err(Error::inval(
                "shm: addresses have no service; give the fi_shm:// name as node",
            ));
        }
        let s = if node.starts_with(SCHEME) {
            node.to_owned()
        } else {
            format!("{SCHEME}{node}")
        };
        let a = Address::Str(s);
        region_of(&a)?;
        Ok(a)
    }

    fn accept(&self, addr: &Address) -> Result<()> {
        let name = region_of(addr)?;
        self.premap(name);
        Ok(())
    }
}

/// The shm domain: one engine progressing its endpoints, one memory
/// registration table.
#[derive(Debug)]
pub struct ShmDomain {
    attr: DomainAttr,
    engine: Arc<Engine>,
    mr: Arc<MrTable>,
    cma: bool,
    eager_max: usize,
}

impl ShmDomain {
    /// A domain for `info`. Its `mr_mode` decides how remote addresses and
    /// keys work (FI_MR_VIRT_ADDR / FI_MR_BASIC: virtual addresses, else
    /// offsets; FI_MR_PROV_KEY / FI_MR_BASIC: the provider picks keys);
    /// FI_PROGRESS_AUTO starts a progress thread.
    pub(crate) fn new(info: &Info) -> Result<Self> {
        let m = info.domain_attr.mr_mode;
        let basic = m.contains(MrMode::BASIC);
        let d = &info.domain_attr;
        let auto = d.data_progress == Progress::Auto || d.control_progress == Progress::Auto;
        Ok(ShmDomain {
            attr: info.domain_attr.clone(),
            engine: crate::progress::engine(auto)?,
            mr: Arc::new(MrTable::new(
                basic || m.contains(MrMode::VIRT_ADDR),
                basic || m.contains(MrMode::PROV_KEY),
            )),
            cma: crate::cma::detect().enabled,
            eager_max: crate::config::eager_max(),
        })
    }
}

impl Domain for ShmDomain {
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
        crate::ep::atomic_count(datatype, op, fetch, compare)
    }

    fn endpoint(&self, info: &Info) -> Result<Box<dyn Endpoint>> {
        fabric_core::kit::defaults::check(
            info,
            "shm",
            crate::getinfo::TX_OP_FLAGS,
            crate::getinfo::RX_OP_FLAGS,
        )?;
        match info.ep_attr.ep_type {
            EpType::Rdm | EpType::Unspec => Ok(Box::new(ShmEndpoint::open(
                info,
                self.engine.clone(),
                self.mr.clone(),
                self.cma,
                self.eager_max,
            )?)),
            t => Err(Error::new(
                ErrorKind::OpNotSupp,
                format!("shm: {t} endpoints are not offered"),
            )),
        }
    }

    fn cq(&self, attr: &CqAttr) -> Result<Box<dyn CompletionQueue>> {
        Ok(Box::new(Cq::new(attr, self.engine.clone())?))
    }

    fn av(&self, _attr: &AvAttr) -> Result<Box<dyn AddressVector>> {
        Ok(Box::new(Av::new(Arc::new(ShmBook::default()))))
    }

    fn cntr(&self, attr: &CntrAttr) -> Result<Box<dyn Counter>> {
        Ok(Box::new(ShmCntr::new(attr, self.engine.clone())?))
    }

    fn srx_context(&self, attr: &RxAttr) -> Result<Box<dyn SharedRx>> {
        Ok(Box::new(ShmSrx::new(
            attr,
            self.engine.clone(),
            self.attr.max_ep_srx_ctx,
        )))
    }

    unsafe fn mr_reg(&self, attr: &MrAttr) -> Result<Box<dyn MemoryRegion>> {
        let [piece] = attr.iov else {
            return Err(Error::inval(
                "shm: a memory region is one contiguous piece (mr_iov_limit 1)",
            ));
        };
        let region = MrRegion {
            base: piece.addr as usize,
            len: piece.len,
            access: attr.access,
            offset: attr.offset,
        };
        let key = self.mr.insert(attr.requested_key, region)?;
        Ok(Box::new(ShmMr {
            key,
            table: self.mr.clone(),
        }))
    }
}

/// A registered memory region; dropping it deregisters (waiting for a
/// transfer into or out of it that is in progress).
#[derive(Debug)]
pub struct ShmMr {
    key: u64,
    table: Arc<MrTable>,
}

impl MemoryRegion for ShmMr {
    fn key(&self) -> u64 {
        self.key
    }

    fn desc(&self) -> MrDesc {
        MrDesc(self.key)
    }
}

impl Drop for ShmMr {
    fn drop(&mut self) {
        let _ = self.table.remove(self.key);
    }
}
