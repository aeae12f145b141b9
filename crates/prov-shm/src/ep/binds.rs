//! What an endpoint is bound to (`fi_ep_bind`): the kit's [`Binds`], plus
//! shm's own counters and how a finished transmit is described.

use fabric_core::kit::binds::Accepts;
pub(crate) use fabric_core::kit::binds::{Binds, msg_flags};
use fabric_core::objects::{Bind, CompletionFlags, CqEntry};
use fabric_core::{Error, Result};

/// shm endpoints are RDM: an AV, no EQ.
const ACCEPTS: Accepts = Accepts {
    av: true,
    eq: false,
    remote_cntr: true,
    name: "shm RDM endpoints",
};

/// Applies one `fi_ep_bind`: shm's counters ([`crate::ShmCntr`]) or the
/// kit's objects.
pub(crate) fn bind(b: &mut Binds, what: Bind<'_>) -> Result<()> {
    if let Bind::Cntr(c, events) = what {
        if let Some(c) = c.as_any().downcast_ref::<crate::cntr::ShmCntr>() {
            return b.bind_cntr(c.core(), events, ACCEPTS);
        }
    }
    b.bind(what, ACCEPTS)
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

/// Reporting a [`TxDone`] through the endpoint's [`Binds`].
pub(crate) trait TxReport {
    /// The operation finished well.
    fn tx_op_done(&self, d: &TxDone);
    /// The operation failed.
    fn tx_failed(&self, d: &TxDone, err: &Error);
}

impl TxReport for Binds {
    #[inline]
    fn tx_op_done(&self, d: &TxDone) {
        let e = CqEntry {
            context: d.context,
            flags: d.flags,
            len: d.len,
            ..CqEntry::default()
        };
        self.tx_done(e, d.report);
    }

    fn tx_failed(&self, d: &TxDone, err: &Error) {
        // The operation's length, as in its successful completion (and as
        // the tcp provider reports it).
        let e = CqEntry {
            context: d.context,
            flags: d.flags,
            len: d.len,
            ..CqEntry::default()
        };
        self.failed(false, e, err, 0);
    }
}
