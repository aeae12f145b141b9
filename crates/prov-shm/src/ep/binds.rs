//! What an endpoint is bound to (`fi_ep_bind`) and how finished
//! operations are reported to those CQs and counters.

use std::sync::Arc;

use fabric_core::kit::av::AvTable;
use fabric_core::kit::cntr::CntrCore;
use fabric_core::kit::cq::CqCore;
use fabric_core::kit::objects::{Av, Cntr, Cq};
use fabric_core::objects::{Bind, CompletionFlags, CqEntry, CqErrEntry, FiAddr};
use fabric_core::{Caps, Error, ErrorKind, Result};

/// The CQs, counters and AV of an endpoint.
#[derive(Debug, Default, Clone)]
pub(crate) struct Binds {
    pub tx_cq: Option<Arc<CqCore>>,
    pub tx_selective: bool,
    pub rx_cq: Option<Arc<CqCore>>,
    pub rx_selective: bool,
    pub av: Option<Arc<AvTable>>,
    pub cntr_send: Option<Arc<CntrCore>>,
    pub cntr_recv: Option<Arc<CntrCore>>,
    pub cntr_read: Option<Arc<CntrCore>>,
    pub cntr_write: Option<Arc<CntrCore>>,
    pub cntr_remote_read: Option<Arc<CntrCore>>,
    pub cntr_remote_write: Option<Arc<CntrCore>>,
}

/// What a finished transmit operation reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxDone {
    pub context: u64,
    pub flags: CompletionFlags,
    pub len: usize,
    /// Report a success completion (not an inject, not suppressed by
    /// selective completion).
    pub report: bool,
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
                let any = c.as_any();
                let core = match any.downcast_ref::<crate::domain::ShmCntr>() {
                    Some(c) => c.core().clone(),
                    None => any
                        .downcast_ref::<Cntr>()
                        .map(|c| c.core().clone())
                        .ok_or_else(|| {
                            Error::inval("bind: the counter belongs to another provider")
                        })?,
                };
                let all = Caps::SEND
                    | Caps::RECV
                    | Caps::READ
                    | Caps::WRITE
                    | Caps::REMOTE_READ
                    | Caps::REMOTE_WRITE;
                if events.is_empty() || !all.contains(events) {
                    return Err(Error::bad_flags(format!(
                        "bind: counter events {events} are not supported"
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
            }
            Bind::Eq(_) => {
                return Err(Error::new(
                    ErrorKind::OpNotSupp,
                    "bind: shm RDM endpoints take no event queue",
                ));
            }
        }
        Ok(())
    }

    fn tx_counter(&self, flags: CompletionFlags) -> Option<&Arc<CntrCore>> {
        if flags.contains(CompletionFlags::READ) {
            self.cntr_read.as_ref()
        } else if flags.contains(CompletionFlags::WRITE) {
            self.cntr_write.as_ref()
        } else {
            self.cntr_send.as_ref()
        }
    }

    /// A transmit operation finished well.
    #[inline]
    pub(crate) fn tx_done(&self, d: &TxDone) {
        if let Some(c) = self.tx_counter(d.flags) {
            c.add(1);
        }
        if let (Some(cq), true) = (&self.tx_cq, d.report) {
            cq.push(
                CqEntry {
                    context: d.context,
                    flags: d.flags,
                    len: d.len,
                    ..CqEntry::default()
                },
                FiAddr::NOTAVAIL,
            );
        }
    }

    /// A transmit operation failed.
    pub(crate) fn tx_failed(&self, d: &TxDone, err: &Error) {
        let e = CqEntry {
            context: d.context,
            flags: d.flags,
            len: 0,
            ..CqEntry::default()
        };
        self.failed(false, e, err, 0);
    }

    /// A receive (or remote CQ data) finished well.
    #[inline]
    pub(crate) fn rx_done(&self, entry: CqEntry, src: FiAddr, report: bool) {
        if entry.flags.contains(CompletionFlags::RECV) {
            if let Some(c) = &self.cntr_recv {
                c.add(1);
            }
        }
        if let (Some(cq), true) = (&self.rx_cq, report) {
            cq.push(entry, src);
        }
    }

    /// Reports a failed transmit (`rx` false) or receive.
    pub(crate) fn failed(&self, rx: bool, entry: CqEntry, err: &Error, olen: usize) {
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
