//! Endpoints: RDM (reliable, unconnected, through an AV) and the binding
//! rules they share.

pub(crate) mod rdm;

use std::sync::Arc;

use fabric_core::kit::cntr::CntrCore;
use fabric_core::kit::cq::CqCore;
use fabric_core::kit::objects::{Av, Cntr, Cq};
use fabric_core::objects::{Bind, CompletionFlags, CqEntry, CqErrEntry, FiAddr};
use fabric_core::{Caps, Error, ErrorKind, Result};

/// What an endpoint is bound to.
#[derive(Debug, Default, Clone)]
pub(crate) struct Binds {
    pub tx_cq: Option<Arc<CqCore>>,
    pub tx_selective: bool,
    pub rx_cq: Option<Arc<CqCore>>,
    pub rx_selective: bool,
    pub av: Option<Arc<fabric_core::kit::av::AvTable>>,
    pub cntr_send: Option<Arc<CntrCore>>,
    pub cntr_recv: Option<Arc<CntrCore>>,
}

impl Binds {
    /// Applies one `fi_ep_bind`.
    pub(crate) fn bind(&mut self, what: Bind<'_>) -> Result<()> {
        match what {
            Bind::Cq {
                cq,
                transmit,
                recv,
                selective,
            } => {
                let cq = cq
                    .as_any()
                    .downcast_ref::<Cq>()
                    .ok_or_else(|| Error::inval("bind: the CQ belongs to another provider"))?;
                if !transmit && !recv {
                    return Err(Error::bad_flags(
                        "bind: a CQ needs FI_TRANSMIT and/or FI_RECV",
                    ));
                }
                if transmit {
                    self.tx_cq = Some(cq.core().clone());
                    self.tx_selective = selective;
                }
                if recv {
                    self.rx_cq = Some(cq.core().clone());
                    self.rx_selective = selective;
                }
            }
            Bind::Av(av) => {
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
                if events.intersects(Caps::SEND) {
                    self.cntr_send = Some(c.core().clone());
                }
                if events.intersects(Caps::RECV) {
                    self.cntr_recv = Some(c.core().clone());
                }
                if !events.intersects(Caps::SEND | Caps::RECV) {
                    return Err(Error::bad_flags(format!(
                        "bind: counter events {events} are not supported"
                    )));
                }
            }
            Bind::Eq(_) => {
                return Err(Error::new(
                    ErrorKind::OpNotSupp,
                    "bind: RDM endpoints take no event queue",
                ));
            }
        }
        Ok(())
    }

    /// Reports a finished transmit.
    pub(crate) fn tx_done(&self, entry: CqEntry, report: bool) {
        if let (Some(cq), true) = (&self.tx_cq, report) {
            cq.push(entry, FiAddr::NOTAVAIL);
        }
        if let Some(c) = &self.cntr_send {
            c.add(1);
        }
    }

    /// Reports a finished receive.
    pub(crate) fn rx_done(&self, entry: CqEntry, src: FiAddr, report: bool) {
        if let (Some(cq), true) = (&self.rx_cq, report) {
            cq.push(entry, src);
        }
        if let Some(c) = &self.cntr_recv {
            c.add(1);
        }
    }

    /// Reports a failed transmit or receive.
    pub(crate) fn failed(&self, rx: bool, entry: CqEntry, err: &Error, olen: usize) {
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
        let c = if rx { &self.cntr_recv } else { &self.cntr_send };
        if let Some(c) = c {
            c.add_err(1);
        }
    }
}

/// Completion flags of a message operation.
pub(crate) fn msg_flags(tagged: bool, rx: bool) -> CompletionFlags {
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
