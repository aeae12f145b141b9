//! Counters of the shm provider.

use std::sync::Arc;

use fabric_core::kit::objects::{Armed, Cntr, Progress};
use fabric_core::objects::{CntrAttr, Counter};
use fabric_core::{Error, ErrorKind, Result};

/// A counter: the kit's, with a blocking wait that also wakes when a peer
/// writes into one of the domain's regions (so `fi_cntr_wait` works
/// under manual progress).
pub struct ShmCntr {
    inner: Cntr,
    engine: Arc<dyn Progress>,
}

impl std::fmt::Debug for ShmCntr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmCntr")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl ShmCntr {
    /// A counter progressed (and waited on) through the domain's engine.
    pub(crate) fn new(attr: &CntrAttr, engine: Arc<dyn Progress>) -> Result<ShmCntr> {
        Ok(ShmCntr {
            inner: Cntr::with_attr(attr, engine.clone())?,
            engine,
        })
    }

    /// The counter's core, for endpoints to count into.
    pub(crate) fn core(&self) -> &Arc<fabric_core::kit::cntr::CntrCore> {
        self.inner.core()
    }
}

impl Counter for ShmCntr {
    fn read(&self) -> u64 {
        self.inner.read()
    }
    fn readerr(&self) -> u64 {
        self.inner.readerr()
    }
    fn add(&self, value: u64) -> Result<()> {
        self.inner.add(value)
    }
    fn set(&self, value: u64) -> Result<()> {
        self.inner.set(value)
    }
    fn adderr(&self, value: u64) -> Result<()> {
        self.inner.adderr(value)
    }
    fn seterr(&self, value: u64) -> Result<()> {
        self.inner.seterr(value)
    }
    fn wait(&self, threshold: u64, timeout: Option<std::time::Duration>) -> Result<()> {
        let core = self.inner.core();
        let errs = core.read_err();
        let mut fds = fabric_core::kit::wait::FdSet::new(core.signal().fd());
        self.engine.wait_fds(&mut |fd| fds.push(fd));
        // Armed while it may block: progress then reads off the wake-ups
        // on every pass (see `Engine::run`); disarmed on every way out.
        let _armed = Armed::new(&*self.engine);
        let r = core.signal().wait(fds.as_slice(), timeout, || {
            self.engine.progress()?;
            if core.read_err() != errs {
                return Err(Error::from_kind(ErrorKind::Avail));
            }
            Ok((core.read() >= threshold).then_some(()))
        })?;
        r.ok_or_else(|| fabric_core::kit::cntr::timed_out(threshold, core.read(), timeout))
    }
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.wait_fd()
    }
    fn trywait(&self) -> Result<()> {
        self.inner.trywait()
    }
}
