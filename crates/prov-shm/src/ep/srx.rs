//! Shared receive contexts (`fi_srx_context`): one receive engine that
//! several endpoints of a domain feed.
//!
//! The context's engine lives in the domain's engine state, next to the
//! endpoints ([`super::engine`]): while the domain's engine works on a
//! bound endpoint it puts the context's engine in the place of the
//! endpoint's own, and the work the receive engine leaves about another
//! endpoint's senders (resume one, fetch its announced message into a
//! receive) is done on that endpoint the same way. Receives posted on the
//! context take the domain engine's lock and go straight in; their
//! completions go to the endpoint each message arrived at.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fabric_core::attr::{RxAttr, SHARED_CONTEXT};
use fabric_core::kit::rx::MIN_MULTI_RECV;
use fabric_core::objects::{Msg, MsgOps, SharedRx, TaggedOps};
use fabric_core::{Caps, Error, ErrorKind, OpFlags, Result};

use super::engine::Engine;
use super::shared::EpShared;

/// A shared receive context of the shm provider.
#[derive(Debug)]
pub struct ShmSrx {
    engine: Arc<Engine>,
    id: u32,
    attr: RxAttr,
    min_multi_recv: AtomicUsize,
}

impl ShmSrx {
    /// A context for the endpoints of the domain whose engine is
    /// `engine`, serving at most `limit` of them at once (0: no limit).
    pub(crate) fn new(attr: &RxAttr, engine: Arc<Engine>, limit: usize) -> ShmSrx {
        let limit = if limit == 0 { usize::MAX } else { limit };
        let id = engine.srx_open(attr.caps.contains(Caps::DIRECTED_RECV), limit);
        ShmSrx {
            engine,
            id,
            attr: attr.clone(),
            min_multi_recv: AtomicUsize::new(MIN_MULTI_RECV),
        }
    }

    /// Binds the endpoint `sh` of the domain whose engine is `engine`
    /// (before enable).
    pub(crate) fn attach(&self, sh: &EpShared, engine: &Arc<Engine>) -> Result<()> {
        if sh.info.ep_attr.rx_ctx_cnt != SHARED_CONTEXT {
            return Err(Error::inval(
                "shm: bind of a shared receive context to an endpoint opened without \
                 ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT",
            ));
        }
        if !Arc::ptr_eq(engine, &self.engine) {
            return Err(Error::inval(
                "shm: the shared receive context belongs to another domain",
            ));
        }
        if sh.srx.get().is_some() {
            return Err(Error::new(
                ErrorKind::OpBadState,
                "shm: the endpoint is already bound to a shared receive context",
            ));
        }
        self.engine.srx_attach(self.id, sh.id)?;
        sh.srx.set(self.id).map_err(|_| {
            Error::new(
                ErrorKind::OpBadState,
                "shm: the endpoint is already bound to a shared receive context",
            )
        })
    }

    fn post(&self, msg: &Msg<'_>, flags: OpFlags, tagged: bool) -> Result<()> {
        let min = self.min_multi_recv.load(Ordering::Relaxed);
        self.engine.srx_call(self.id, |e, r| {
            if flags.contains(OpFlags::MULTI_RECV) {
                e.set_min_multi_recv(min);
            }
            e.post(r, msg, flags, tagged)
        })?
    }
}

impl Drop for ShmSrx {
    fn drop(&mut self) {
        self.engine.srx_close(self.id);
    }
}

// The zero-copy operations are `unsafe fn`s of the trait (their buffer
// contract); the implementations themselves use no `unsafe`.
#[allow(unsafe_code)]
impl MsgOps for ShmSrx {
    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.post(msg, flags, false)
    }
}

#[allow(unsafe_code)]
impl TaggedOps for ShmSrx {
    unsafe fn trecvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        self.post(msg, flags, true)
    }
}

impl SharedRx for ShmSrx {
    fn attr(&self) -> &RxAttr {
        &self.attr
    }

    fn cancel(&self, context: u64) -> Result<()> {
        self.engine.srx_call(self.id, |e, r| e.cancel(r, context))?
    }

    fn min_multi_recv(&self) -> Result<usize> {
        Ok(self.min_multi_recv.load(Ordering::Relaxed))
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.min_multi_recv.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    fn bound_endpoints(&self) -> usize {
        self.engine.srx_bound(self.id)
    }
}
