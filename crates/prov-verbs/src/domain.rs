//! Fabric, domain and memory-region objects of the verbs provider.

use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use fabric_core::kit::objects::{Cntr, Eq, Progress};
use fabric_core::kit::wait::PollSet;
use fabric_core::objects::{
    AddressVector, AtomicOp, AvAttr, CntrAttr, CompletionQueue, Counter, CqAttr, Datatype, Domain,
    Endpoint, EqAttr, EventQueue, Fabric, MemoryRegion, MrAccess, MrAttr, MrDesc, PassiveEndpoint,
    SharedRx,
};
use fabric_core::{DomainAttr, EpType, Error, ErrorKind, FabricAttr, Info, Result, RxAttr};

use crate::cq::{CqShared, VerbsCq};
use crate::ep::dgram::DgramEndpoint;
use crate::ep::msg::MsgEndpoint;
use crate::ep::passive::VerbsPassiveEndpoint;
use crate::ep::rdm::{RdmEndpoint, VerbsSrx};
use crate::getinfo::Limits;
use crate::raw::device::{self, Context, Pd};
use crate::raw::verbs::{Access, Mr};

/// A verbs fabric (one IP subnet of RDMA ports).
#[derive(Debug)]
pub struct VerbsFabric {
    attr: FabricAttr,
}

impl VerbsFabric {
    pub(crate) fn new(attr: &FabricAttr) -> Self {
        VerbsFabric { attr: attr.clone() }
    }
}

impl Fabric for VerbsFabric {
    fn attr(&self) -> &FabricAttr {
        &self.attr
    }

    fn domain(&self, info: &Info) -> Result<Box<dyn Domain>> {
        Ok(Box::new(VerbsDomain::open(info)?))
    }

    fn passive_endpoint(&self, info: &Info) -> Result<Box<dyn PassiveEndpoint>> {
        if !matches!(info.ep_attr.ep_type, EpType::Msg | EpType::Unspec) {
            return Err(Error::inval(format!(
                "verbs: passive endpoints are for FI_EP_MSG, not {}",
                info.ep_attr.ep_type
            )));
        }
        Ok(Box::new(VerbsPassiveEndpoint::open(info)?))
    }

    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EventQueue>> {
        Ok(Box::new(Eq::new(attr)?))
    }
}

/// What the domain's objects share: the device, its protection domain,
/// its limits, and the CQs its counters progress.
pub(crate) struct DomainCore {
    pub ctx: Context,
    pub pd: Arc<Pd>,
    pub limits: Limits,
    pub max_cqe: usize,
    cqs: Mutex<Vec<Weak<CqShared>>>,
    /// The fds whose readiness means some CQ of the domain needs
    /// progress (the channels of its CQs and their engines), made when a
    /// counter's wait fd first asks; the counters' wait fds nest it.
    progress_set: Arc<OnceLock<PollSet>>,
}

impl std::fmt::Debug for DomainCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainCore")
            .field("pd", &self.pd)
            .finish_non_exhaustive()
    }
}

impl DomainCore {
    /// A new CQ of this domain.
    pub(crate) fn new_cq(&self, size: usize) -> Result<Arc<CqShared>> {
        let cq = CqShared::new(self.ctx, size, self.max_cqe, self.progress_set.clone())?;
        let mut v = self
            .cqs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(&cq));
        // Under the list's lock, as the set is made under it.
        if let Some(set) = self.progress_set.get() {
            cq.join_domain_set(set)?;
        }
        Ok(cq)
    }

    /// The domain's progress set, made (with every CQ's fds) on first use.
    fn progress_set(&self) -> Result<&PollSet> {
        if let Some(s) = self.progress_set.get() {
            return Ok(s);
        }
        let v = self
            .cqs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = self.progress_set.get() {
            return Ok(s);
        }
        let made = PollSet::new()?;
        let set = self.progress_set.get_or_init(|| made);
        for cq in v.iter().filter_map(Weak::upgrade) {
            cq.join_domain_set(set)?;
        }
        Ok(set)
    }

    fn cqs(&self) -> Vec<Arc<CqShared>> {
        self.cqs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

impl Progress for DomainCore {
    fn progress(&self) -> Result<()> {
        for cq in self.cqs() {
            cq.progress()?;
        }
        Ok(())
    }

    fn wait_fds<'a>(&'a self, _f: &mut dyn FnMut(BorrowedFd<'a>)) {
        // No fds: the CQs' channels are armed and drained by their own
        // reads. A counter wait therefore sleeps in short slices
        // (`kit::cntr::POLL_SLICE`) and drives `progress` between them;
        // completions arrive through CQ progress.
    }

    /// The progress set: one fd, readable when a CQ of the domain (or an
    /// engine delivering to one) has a completion after
    /// [`Progress::trywait`] armed them.
    fn trywait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        match self.progress_set() {
            Ok(set) => f(set.fd()),
            Err(e) => tracing::warn!(error = %e, "verbs: cannot make the domain's progress set"),
        }
    }

    /// Takes every CQ's channel events, arms the channels again and polls
    /// once (what the CQs hold is counted now; later completions make
    /// the progress set readable).
    fn trywait(&self) -> Result<()> {
        self.progress_set()?;
        for cq in self.cqs() {
            cq.trywait_hw()?;
        }
        Ok(())
    }
}

/// A verbs domain: one RDMA device, with its protection domain.
#[derive(Debug)]
pub struct VerbsDomain {
    attr: DomainAttr,
    core: Arc<DomainCore>,
}

impl VerbsDomain {
    /// Opens the device `info.domain_attr.name` names.
    pub(crate) fn open(info: &Info) -> Result<Self> {
        let name =
            info.domain_attr.name.as_deref().ok_or_else(|| {
                Error::inval("verbs: the entry names no device (domain_attr.name)")
            })?;
        let ctx = device::contexts()
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| device::no_such_device(name))?;
        let dev = ctx.query_device()?;
        let pd = Arc::new(Pd::new(ctx)?);
        let port = ctx.query_port(1).ok();
        let limits = Limits {
            max_qp_wr: usize::try_from(dev.max_qp_wr).unwrap_or(0),
            max_sge: usize::try_from(dev.max_sge).unwrap_or(0),
            max_qp: usize::try_from(dev.max_qp).unwrap_or(0),
            max_cq: usize::try_from(dev.max_cq).unwrap_or(0),
            max_mr: usize::try_from(dev.max_mr).unwrap_or(0),
            max_msg_size: port
                .as_ref()
                .map_or(1 << 30, |p| p.attr.max_msg_sz as usize),
            mtu: port
                .as_ref()
                .map_or(1024, |p| 128usize << p.attr.active_mtu.clamp(1, 5)),
            max_rd_atom: u8::try_from(dev.max_qp_rd_atom.max(0)).unwrap_or(u8::MAX),
            max_init_rd_atom: u8::try_from(dev.max_qp_init_rd_atom.max(0)).unwrap_or(u8::MAX),
            atomics: crate::raw::device::has_atomics(&dev),
        };
        Ok(VerbsDomain {
            attr: info.domain_attr.clone(),
            core: Arc::new(DomainCore {
                ctx,
                pd,
                limits,
                max_cqe: usize::try_from(dev.max_cqe).unwrap_or(1),
                cqs: Mutex::new(Vec::new()),
                progress_set: Arc::new(OnceLock::new()),
            }),
        })
    }
}

/// The `IBV_ACCESS_*` flags of fabric access rights: local write always
/// (receives and read results land in registered memory, and remote
/// write needs it), remote read, and remote write with remote atomics.
pub(crate) fn ibv_access(a: MrAccess) -> Access {
    let a = if a.is_empty() { MrAccess::all() } else { a };
    let mut out = Access::LOCAL_WRITE;
    if a.contains(MrAccess::REMOTE_READ) {
        out |= Access::REMOTE_READ;
    }
    if a.contains(MrAccess::REMOTE_WRITE) {
        out |= Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    }
    out
}

/// The descriptor of a local key: bit 32 marks it as set, so that the
/// zero descriptor means "none".
pub(crate) fn desc_of(lkey: u32) -> MrDesc {
    MrDesc((1 << 32) | u64::from(lkey))
}

/// The local key of a descriptor, if it names one.
#[inline]
pub(crate) fn lkey_of(d: MrDesc) -> Option<u32> {
    (d.0 >> 32 == 1).then_some(d.0 as u32)
}

impl Domain for VerbsDomain {
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
        crate::ep::msg::atomic_count(&self.core.limits, datatype, op, fetch, compare)
    }

    fn endpoint(&self, info: &Info) -> Result<Box<dyn Endpoint>> {
        fabric_core::kit::defaults::check(
            info,
            "verbs",
            crate::getinfo::TX_OP_FLAGS,
            match info.ep_attr.ep_type {
                EpType::Rdm => crate::getinfo::RDM_RX_OP_FLAGS,
                EpType::Msg => crate::getinfo::MSG_RX_OP_FLAGS,
                _ => crate::getinfo::RX_OP_FLAGS,
            },
        )?;
        if info.ep_attr.rx_ctx_cnt == fabric_core::SHARED_CONTEXT
            && info.ep_attr.ep_type != EpType::Rdm
        {
            return Err(Error::inval(format!(
                "verbs: {} endpoints take no shared receive context (FI_SHARED_CONTEXT)",
                info.ep_attr.ep_type
            )));
        }
        match info.ep_attr.ep_type {
            EpType::Msg => Ok(Box::new(MsgEndpoint::open(info, self.core.clone())?)),
            EpType::Rdm => RdmEndpoint::open(info, self.core.clone()),
            EpType::Dgram => Ok(Box::new(DgramEndpoint::open(info, self.core.clone())?)),
            t => Err(Error::new(
                ErrorKind::OpNotSupp,
                format!("verbs: {t} endpoints are not offered"),
            )),
        }
    }

    /// A shared receive context for RDM endpoints (software: the
    /// endpoints share one receive engine, each with its own receive
    /// buffers and connections).
    fn srx_context(&self, attr: &RxAttr) -> Result<Box<dyn SharedRx>> {
        Ok(Box::new(VerbsSrx::new(
            attr,
            self.core.clone(),
            self.attr.max_ep_srx_ctx,
        )))
    }

    fn cq(&self, attr: &CqAttr) -> Result<Box<dyn CompletionQueue>> {
        let shared = self.core.new_cq(attr.size)?;
        Ok(Box::new(VerbsCq::new(attr, shared)))
    }

    fn av(&self, _attr: &AvAttr) -> Result<Box<dyn AddressVector>> {
        Ok(Box::new(crate::ep::rdm::new_av()))
    }

    fn cntr(&self, attr: &CntrAttr) -> Result<Box<dyn Counter>> {
        Ok(Box::new(Cntr::with_attr(attr, self.core.clone())?))
    }

    #[allow(unsafe_code)]
    unsafe fn mr_reg(&self, attr: &MrAttr) -> Result<Box<dyn MemoryRegion>> {
        let [piece] = attr.iov else {
            return Err(Error::inval(
                "verbs: a memory region is one contiguous piece (mr_iov_limit 1)",
            ));
        };
        if piece.len == 0 {
            return Err(Error::inval("verbs: cannot register an empty region"));
        }
        // SAFETY: the caller keeps the memory valid until the region is
        // dropped (the trait's contract).
        let mr = unsafe {
            Mr::register(
                &self.core.pd,
                piece.addr,
                piece.len,
                ibv_access(attr.access),
            )?
        };
        Ok(Box::new(VerbsMr { mr }))
    }
}

/// A registered memory region: its key is the device's remote key, its
/// descriptor carries the local key; dropping it deregisters.
#[derive(Debug)]
pub struct VerbsMr {
    mr: Mr,
}

impl MemoryRegion for VerbsMr {
    fn key(&self) -> u64 {
        u64::from(self.mr.rkey())
    }

    fn desc(&self) -> MrDesc {
        desc_of(self.mr.lkey())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_and_zero_is_none() {
        assert_eq!(lkey_of(desc_of(0)), Some(0));
        assert_eq!(lkey_of(desc_of(0xdead_beef)), Some(0xdead_beef));
        assert_eq!(lkey_of(MrDesc(0)), None);
        assert_eq!(lkey_of(MrDesc(7)), None);
    }

    #[test]
    fn access_flags() {
        assert_eq!(ibv_access(MrAccess::SEND), Access::LOCAL_WRITE);
        assert_eq!(ibv_access(MrAccess::empty()), Access::all());
    }
}
