//! Passive (listening) endpoints: an rdma_cm id listening on the entry's
//! source address. A connection request becomes an `FI_CONNREQ` event
//! whose `info.handle` names the request's id, parked in a process-wide
//! table until an endpoint is opened with it (then accepted) or it is
//! rejected with private data.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, OnceLock};

use fabric_core::kit::objects::{Eq, EqCore, Progress};
use fabric_core::objects::{EqEvent, EventQueue, PassiveEndpoint};
use fabric_core::{Address, Error, ErrorKind, Handle, Info, Result};

use super::{lock, next_fid};
use crate::raw::cm::{CmEventKind, CmId, EventChannel};

/// A parked connection request.
struct Parked {
    id: CmId,
    pep: u64,
}

fn table() -> &'static Mutex<HashMap<u64, Parked>> {
    static T: OnceLock<Mutex<HashMap<u64, Parked>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Takes the connection request a handle names.
pub(crate) fn take(h: Handle) -> Result<CmId> {
    lock(table()).remove(&h.0).map(|p| p.id).ok_or_else(|| {
        Error::new(
            ErrorKind::NoEnt,
            format!("verbs: no pending connection request has handle {}", h.0),
        )
    })
}

struct PepInner {
    fid: u64,
    info: Info,
    channel: Arc<EventChannel>,
    id: Mutex<CmId>,
    eq: OnceLock<Arc<EqCore>>,
}

/// A passive endpoint of the verbs provider.
pub struct VerbsPassiveEndpoint {
    inner: Arc<PepInner>,
}

impl std::fmt::Debug for VerbsPassiveEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsPassiveEndpoint")
            .field("fid", &self.inner.fid)
            .finish_non_exhaustive()
    }
}

impl VerbsPassiveEndpoint {
    /// Binds an id to the entry's source address (its port, or any).
    pub(crate) fn open(info: &Info) -> Result<Self> {
        let src: SocketAddr = info
            .src_addr
            .as_ref()
            .and_then(Address::socket_addr)
            .ok_or_else(|| {
                Error::inval("verbs: a passive endpoint needs an IP source address (src_addr)")
            })?;
        let channel = EventChannel::new()?;
        let id = CmId::new(&channel)?;
        id.bind(&src)
            .map_err(|e| Error::new(e.kind(), format!("{} (binding {src})", e.detail())))?;
        Ok(VerbsPassiveEndpoint {
            inner: Arc::new(PepInner {
                fid: next_fid(),
                info: info.clone(),
                channel,
                id: Mutex::new(id),
                eq: OnceLock::new(),
            }),
        })
    }

    /// The object id `ConnReq` events carry in `fid`.
    pub fn fid(&self) -> u64 {
        self.inner.fid
    }
}

impl PepInner {
    fn request(&self, mut e: crate::raw::cm::CmEvent) {
        // Its events arrive on this channel until an endpoint migrates it.
        let Some(id) = e.take_request(&self.channel) else {
            return;
        };
        let mut info = self.info.clone();
        info.src_addr = id.local_addr().or(info.src_addr);
        info.dest_addr = id.peer_addr();
        let handle = next_fid();
        info.handle = Some(Handle(handle));
        lock(table()).insert(handle, Parked { id, pep: self.fid });
        match self.eq.get() {
            Some(eq) => eq.push(EqEvent::ConnReq {
                fid: self.fid,
                info: Box::new(info),
                data: e.data,
            }),
            None => {
                // Nobody can hear it: refuse at once.
                if let Ok(id) = take(Handle(handle)) {
                    let _ = id.reject(&[]);
                }
            }
        }
    }
}

impl Progress for PepInner {
    fn progress(&self) -> Result<()> {
        while let Some(e) = self.channel.next()? {
            match e.kind {
                CmEventKind::ConnectRequest => self.request(e),
                _ => tracing::debug!(
                    event = %e.name(),
                    "verbs: passive endpoint ignores an rdma_cm event (a request that went away)"
                ),
            }
        }
        Ok(())
    }

    fn wait_fds<'a>(&'a self, f: &mut dyn FnMut(BorrowedFd<'a>)) {
        f(self.channel.fd());
    }
}

impl PassiveEndpoint for VerbsPassiveEndpoint {
    fn event_id(&self) -> Option<u64> {
        Some(self.fid())
    }

    fn bind_eq(&self, eq: &dyn EventQueue) -> Result<()> {
        let eq = eq
            .as_any()
            .downcast_ref::<Eq>()
            .ok_or_else(|| Error::inval("bind: the EQ belongs to another provider"))?;
        if self.inner.eq.set(eq.core().clone()).is_err() {
            return Err(Error::new(
                ErrorKind::OpBadState,
                "verbs: the passive endpoint already has an EQ",
            ));
        }
        let me: Arc<dyn Progress> = self.inner.clone();
        eq.core().add_progress(Arc::downgrade(&me));
        Ok(())
    }

    fn listen(&self) -> Result<()> {
        if self.inner.eq.get().is_none() {
            return Err(Error::new(
                ErrorKind::NoEq,
                "verbs: bind an EQ to the passive endpoint before listening",
            ));
        }
        lock(&self.inner.id).listen(128)
    }

    fn getname(&self) -> Result<Address> {
        lock(&self.inner.id).local_addr().ok_or_else(|| {
            Error::new(
                ErrorKind::NotConn,
                "verbs: the passive endpoint has no address",
            )
        })
    }

    fn reject(&self, handle: Handle, param: &[u8]) -> Result<()> {
        let id = take(handle)?;
        id.reject(param)
    }
}

impl Drop for VerbsPassiveEndpoint {
    fn drop(&mut self) {
        let fid = self.inner.fid;
        // Requests nobody took are refused and destroyed with the listener.
        let stale: Vec<Parked> = {
            let mut t = lock(table());
            let keys: Vec<u64> = t
                .iter()
                .filter(|(_, p)| p.pep == fid)
                .map(|(k, _)| *k)
                .collect();
            keys.into_iter().filter_map(|k| t.remove(&k)).collect()
        };
        for p in stale {
            let _ = p.id.reject(&[]);
        }
    }
}
