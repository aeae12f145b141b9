//! What an endpoint is bound to (`fi_ep_bind`) and how its finished
//! operations are reported to those CQs and counters, for providers whose
//! counters, AVs and EQs are the kit's ([`super::objects`]). The CQs are
//! the kit's too ([`Binds`] with its default parameter), or the
//! provider's own ([`Binds::bind_with`] names how to find them).

use std::sync::Arc;

use super::av::AvTable;
use super::cntr::CntrCore;
use super::cq::CqCore;
use super::objects::{Av, Cntr, Cq, Eq, EqCore};
use crate::objects::{Bind, CompletionFlags, CompletionQueue, CqEntry, CqErrEntry, FiAddr};
use crate::{Caps, Error, ErrorKind, Result};

/// The counter events of an endpoint's own operations.
const LOCAL_EVENTS: Caps = Caps::SEND
    .union(Caps::RECV)
    .union(Caps::READ)
    .union(Caps::WRITE);

/// Which optional objects an endpoint type takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    /// An address vector (unconnected endpoints).
    pub av: bool,
    /// An event queue (connected endpoints).
    pub eq: bool,
    /// Counters of peers' RMA into this endpoint (FI_REMOTE_READ,
    /// FI_REMOTE_WRITE): not where the NIC does RMA without the target.
    pub remote_cntr: bool,
    /// The endpoints, as error messages name them (`"RDM endpoints"`).
    pub name: &'static str,
}

/// The CQs, counters, AV and EQ of an endpoint; `C` is what the provider
/// keeps of a bound CQ.
#[derive(Debug)]
pub struct Binds<C = CqCore> {
    /// The CQ of transmit operations.
    pub tx_cq: Option<Arc<C>>,
    /// Transmits report only when asked (FI_SELECTIVE_COMPLETION).
    pub tx_selective: bool,
    /// The CQ of receives.
    pub rx_cq: Option<Arc<C>>,
    /// Receives report only when asked (FI_SELECTIVE_COMPLETION).
    pub rx_selective: bool,
    /// The address vector.
    pub av: Option<Arc<AvTable>>,
    /// The event queue.
    pub eq: Option<Arc<EqCore>>,
    /// Counts sends.
    pub cntr_send: Option<Arc<CntrCore>>,
    /// Counts receives.
    pub cntr_recv: Option<Arc<CntrCore>>,
    /// Counts RMA reads and fetching atomics issued.
    pub cntr_read: Option<Arc<CntrCore>>,
    /// Counts RMA writes and atomics issued.
    pub cntr_write: Option<Arc<CntrCore>>,
    /// Counts reads of this endpoint's memory by peers.
    pub cntr_remote_read: Option<Arc<CntrCore>>,
    /// Counts writes to this endpoint's memory by peers.
    pub cntr_remote_write: Option<Arc<CntrCore>>,
}

// By hand: derived impls would ask `C: Default` and `C: Clone`, which an
// `Arc<C>` does not need.
impl<C> Default for Binds<C> {
    fn default() -> Self {
        Binds {
            tx_cq: None,
            tx_selective: false,
            rx_cq: None,
            rx_selective: false,
            av: None,
            eq: None,
            cntr_send: None,
            cntr_recv: None,
            cntr_read: None,
            cntr_write: None,
            cntr_remote_read: None,
            cntr_remote_write: None,
        }
    }
}

impl<C> Clone for Binds<C> {
    fn clone(&self) -> Self {
        Binds {
            tx_cq: self.tx_cq.clone(),
            rx_cq: self.rx_cq.clone(),
            av: self.av.clone(),
            eq: self.eq.clone(),
            cntr_send: self.cntr_send.clone(),
            cntr_recv: self.cntr_recv.clone(),
            cntr_read: self.cntr_read.clone(),
            cntr_write: self.cntr_write.clone(),
            cntr_remote_read: self.cntr_remote_read.clone(),
            cntr_remote_write: self.cntr_remote_write.clone(),
            ..*self
        }
    }
}

impl Binds {
    /// Applies one `fi_ep_bind` of a kit CQ, counter, AV or EQ.
    pub fn bind(&mut self, what: Bind<'_>, accepts: Accepts) -> Result<()> {
        self.bind_with(what, accepts, |cq| {
            cq.as_any().downcast_ref::<Cq>().map(|c| c.core().clone())
        })
    }
}

impl<C> Binds<C> {
    /// Applies one `fi_ep_bind`; `cq_of` gives what to keep of a CQ of
    /// this provider (`None`: another provider's).
    pub fn bind_with(
        &mut self,
        what: Bind<'_>,
        accepts: Accepts,
        cq_of: impl FnOnce(&dyn CompletionQueue) -> Option<Arc<C>>,
    ) -> Result<()> {
        match what {
            Bind::Cq {
                cq,
                transmit,
                recv,
                selective,
            } => {
                let cq = cq_of(cq)
                    .ok_or_else(|| Error::inval("bind: the CQ belongs to another provider"))?;
                if !transmit && !recv {
                    return Err(Error::bad_flags(
                        "bind: a CQ needs FI_TRANSMIT and/or FI_RECV",
                    ));
                }
                if transmit {
                    self.tx_cq = Some(cq.clone());
                    self.tx_selective = selective;
                }
                if recv {
                    self.rx_cq = Some(cq);
                    self.rx_selective = selective;
                }
            }
            Bind::Av(av) => {
                if !accepts.av {
                    return Err(Error::new(
                        ErrorKind::OpNotSupp,
                        format!("bind: {} take no address vector", accepts.name),
                    ));
                }
                let av = av
                    .as_any()
                    .downcast_ref::<Av>()
                    .ok_or_else(|| Error::inval("bind: the AV belongs to another provider"))?;
                self.av = Some(av.table().clone());
            }
            Bind::Cntr(c, events) => {
                let c = c
                    .as_any()
                    .downcast_ref::<Cntr>()
                    .ok_or_else(|| Error::inval("bind: the counter belongs to another provider"))?;
                self.bind_cntr(c.core(), events, accepts)?;
            }
            Bind::Eq(eq) => {
                if !accepts.eq {
                    return Err(Error::new(
                        ErrorKind::OpNotSupp,
                        format!("bind: {} take no event queue", accepts.name),
                    ));
                }
                let eq = eq
                    .as_any()
                    .downcast_ref::<Eq>()
                    .ok_or_else(|| Error::inval("bind: the EQ belongs to another provider"))?;
                self.eq = Some(eq.core().clone());
            }
        }
        Ok(())
    }

    /// Binds a counter to `events` (FI_SEND, FI_RECV, FI_READ, FI_WRITE,
    /// and FI_REMOTE_READ, FI_REMOTE_WRITE where `accepts` says so).
    pub fn bind_cntr(
        &mut self,
        core: &Arc<CntrCore>,
        events: Caps,
        accepts: Accepts,
    ) -> Result<()> {
        let supported = if accepts.remote_cntr {
            LOCAL_EVENTS | Caps::REMOTE_READ | Caps::REMOTE_WRITE
        } else {
            LOCAL_EVENTS
        };
        if events.is_empty() || !supported.contains(events) {
            return Err(Error::bad_flags(format!(
                "bind: counter events {events} are not supported ({supported} are)"
            )));
        }
        for (ev, slot) in [
            (Caps::SEND, &mut self.cntr_send),
            (Caps::RECV, &mut self.cntr_recv),
            (Caps::READ, &mut self.cntr_read),
            (Caps::WRITE, &mut self.cntr_write),
            (Caps::REMOTE_READ, &mut self.cntr_remote_read),
            (Caps::REMOTE_WRITE, &mut self.cntr_remote_write),
        ] {
            if events.contains(ev) {
                *slot = Some(core.clone());
            }
        }
        Ok(())
    }

    /// The counter a transmit operation with these flags counts in.
    pub fn tx_counter(&self, flags: CompletionFlags) -> Option<&Arc<CntrCore>> {
        if flags.contains(CompletionFlags::READ) {
            self.cntr_read.as_ref()
        } else if flags.contains(CompletionFlags::WRITE) {
            self.cntr_write.as_ref()
        } else {
            self.cntr_send.as_ref()
        }
    }
}

/// Where a bound CQ takes completions: the kit's [`CqCore`], or a
/// provider's own CQ (verbs routes work completions itself).
pub trait CqSink {
    /// Adds a successful completion (never drops it).
    fn push(&self, entry: CqEntry, src: FiAddr);
    /// Adds an error completion.
    fn push_err(&self, err: CqErrEntry);
    /// Whether the CQ is full (see [`CqCore::is_full`]).
    fn is_full(&self) -> bool;
    /// Whether the CQ is at most half full.
    fn has_room(&self) -> bool;
}

impl CqSink for CqCore {
    #[inline]
    fn push(&self, entry: CqEntry, src: FiAddr) {
        CqCore::push(self, entry, src);
    }

    fn push_err(&self, err: CqErrEntry) {
        CqCore::push_err(self, err);
    }

    #[inline]
    fn is_full(&self) -> bool {
        CqCore::is_full(self)
    }

    fn has_room(&self) -> bool {
        CqCore::has_room(self)
    }
}

impl<C: CqSink> Binds<C> {
    /// A transmit operation finished well: counted, and reported when
    /// `report` (not an inject, not suppressed by selective completion).
    #[inline]
    pub fn tx_done(&self, entry: CqEntry, report: bool) {
        if let Some(c) = self.tx_counter(entry.flags) {
            c.add(1);
        }
        if let (Some(cq), true) = (&self.tx_cq, report) {
            cq.push(entry, FiAddr::NOTAVAIL);
        }
    }

    /// A receive (or remote CQ data) finished well.
    #[inline]
    pub fn rx_done(&self, entry: CqEntry, src: FiAddr, report: bool) {
        if entry.flags.contains(CompletionFlags::RECV) {
            if let Some(c) = &self.cntr_recv {
                c.add(1);
            }
        }
        if let (Some(cq), true) = (&self.rx_cq, report) {
            cq.push(entry, src);
        }
    }

    /// A transmit (`rx` false) or receive failed: an error count and an
    /// error completion; `olen` is the length that did not fit.
    pub fn failed(&self, rx: bool, entry: CqEntry, err: &Error, olen: usize) {
        let c = if rx {
            self.cntr_recv.as_ref()
        } else {
            self.tx_counter(entry.flags)
        };
        if let Some(c) = c {
            c.add_err(1);
        }
        let cq = if rx { &self.rx_cq } else { &self.tx_cq };
        if let Some(cq) = cq {
            cq.push_err(CqErrEntry {
                entry,
                olen,
                err: err.kind(),
                prov_errno: err.kind().errno(),
                err_text: err.detail().to_string(),
                src_addr: None,
            });
        }
    }

    /// As [`Binds::failed`], with an error completion the provider made
    /// (its own `prov_errno`, e.g. a verbs work completion status).
    pub fn failed_entry(&self, rx: bool, err: CqErrEntry) {
        let c = if rx {
            self.cntr_recv.as_ref()
        } else {
            self.tx_counter(err.entry.flags)
        };
        if let Some(c) = c {
            c.add_err(1);
        }
        let cq = if rx { &self.rx_cq } else { &self.tx_cq };
        if let Some(cq) = cq {
            cq.push_err(err);
        }
    }
}

/// Completion flags of a message operation.
pub fn msg_flags(tagged: bool, rx: bool) -> CompletionFlags {
    let kind = if tagged {
        CompletionFlags::TAGGED
    } else {
        CompletionFlags::MSG
    };
    kind | if rx {
        CompletionFlags::RECV
    } else {
        CompletionFlags::SEND
    }
}
