//! The getinfo rules of fi_getinfo(3) as pure functions.
//!
//! A `getinfo` call goes through these steps; the `fabric` crate's registry
//! strings them together and each provider runs [`select`] on its offers.
//!
//! 1. [`Request::validate`]: the version is not newer than
//!    [`Version::CURRENT`] (else `NoSys`); flags and caps carry only known
//!    bits (else `BadFlags`); caps that need a partner have it (READ, WRITE,
//!    REMOTE_READ, REMOTE_WRITE need RMA or ATOMIC; RMA_EVENT needs a remote
//!    direction; SOURCE_ERR needs SOURCE; MULTICAST needs a data transfer
//!    capability: `BadFlags`); FI_SOURCE needs a node or a service, an
//!    FI_ADDR_STR node needs no service, addresses agree with addr_format
//!    (else `Inval`).
//! 2. Provider selection: [`ProviderFilter`] (the `FI_PROVIDER` variable)
//!    and [`prov_name_selects`] (the `fabric_attr.prov_name` hint).
//! 3. Per offer, [`check`] then [`alter`]; [`select`] does both for a list
//!    of offers and explains the closest miss when none passes.
//! 4. [`names_match`]: the fabric and domain name hints, exact and
//!    case-insensitive, on the final answers.
//!
//! Zero means "any" for every hint field except `mode`, where zero means
//! "no mode is supported". Where libfabric and the man page disagree, these
//! functions follow the man page, and the item says so.
//!
//! The `Info` model has no NULL sub-structures (hints are always as after
//! `fi_allocinfo`), so libfabric's NULL-`domain_attr` special cases (skip
//! the MR checks; always trim RMA target caps) do not arise: a zeroed
//! domain_attr behaves as an allocated, zeroed one does in libfabric.

mod alter;
mod check;
mod filter;

pub use alter::{alter, report_caps};
pub use check::{Mismatch, check};
pub use filter::{ProviderFilter, names_match, prov_name_selects};

use crate::addr::Address;
use crate::enums::AddrFormat;
use crate::error::{Error, Result};
use crate::flags::{Caps, GetinfoFlags, MsgOrder, OpFlags};
use crate::info::Info;
use crate::version::Version;

/// The arguments of one `getinfo` call.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The API version the application is written for.
    pub version: Version,
    /// Node to resolve (a host name, a numeric address, or an FI_ADDR_STR
    /// address such as `fi_sockaddr_in://10.0.0.1:7471`).
    pub node: Option<&'a str>,
    /// Service (a port number or service name).
    pub service: Option<&'a str>,
    /// FI_NUMERICHOST, FI_SOURCE, FI_PROV_ATTR_ONLY.
    pub flags: GetinfoFlags,
    /// Hints; `None` is libfabric's NULL hints: everything, as offered.
    pub hints: Option<&'a Info>,
}

impl<'a> Request<'a> {
    /// A request for `version` with no node, service, flags or hints.
    pub fn new(version: Version) -> Self {
        Request {
            version,
            node: None,
            service: None,
            flags: GetinfoFlags::empty(),
            hints: None,
        }
    }

    /// Whether this request only lists providers: the flags are exactly
    /// FI_PROV_ATTR_ONLY (with any other flag a normal query runs, as in
    /// libfabric).
    pub fn prov_attr_only(&self) -> bool {
        self.flags == GetinfoFlags::PROV_ATTR_ONLY
    }

    /// Whether the node is given as an FI_ADDR_STR address (`scheme://...`).
    pub fn node_is_addr_str(&self) -> bool {
        self.node.is_some_and(|n| n.contains("://"))
    }

    /// Checks the request before any provider sees it (step 1 of the module
    /// doc). libfabric turns most of these into ENODATA or ignores them; we
    /// return the error that names the problem.
    pub fn validate(&self) -> Result<()> {
        if self.version > Version::CURRENT {
            return Err(Error::no_sys(format!(
                "API version {} is newer than this library's {}",
                self.version,
                Version::CURRENT
            )));
        }
        let unknown = self.flags.bits() & !GetinfoFlags::all().bits();
        if unknown != 0 {
            return Err(Error::bad_flags(format!(
                "unknown getinfo flag bits {unknown:#x}"
            )));
        }
        if self.prov_attr_only() {
            return Ok(());
        }
        if self.flags.contains(GetinfoFlags::SOURCE)
            && self.node.is_none()
            && self.service.is_none()
        {
            return Err(Error::inval(
                "FI_SOURCE needs a node or a service (the local address to use)",
            ));
        }
        if self.node_is_addr_str() && self.service.is_some() {
            return Err(Error::inval(format!(
                "node `{}` is an FI_ADDR_STR address, so the service must be absent",
                self.node.unwrap_or_default()
            )));
        }
        if self.node.is_some_and(str::is_empty) || self.service.is_some_and(str::is_empty) {
            return Err(Error::inval(
                "node and service must not be empty strings (leave them out)",
            ));
        }
        if let Some(h) = self.hints {
            validate_hints(h)?;
        }
        Ok(())
    }
}

/// Caps, op flags and address rules of hints (see [`Request::validate`]).
pub fn validate_hints(h: &Info) -> Result<()> {
    for (what, caps) in [
        ("caps", h.caps),
        ("tx_attr.caps", h.tx_attr.caps),
        ("rx_attr.caps", h.rx_attr.caps),
        ("domain_attr.caps", h.domain_attr.caps),
    ] {
        validate_caps(what, caps)?;
    }
    for (what, flags) in [
        ("tx_attr.op_flags", h.tx_attr.op_flags),
        ("rx_attr.op_flags", h.rx_attr.op_flags),
    ] {
        let unknown = flags.bits() & !OpFlags::all().bits();
        if unknown != 0 {
            return Err(Error::bad_flags(format!(
                "{what} has unknown bits {unknown:#x}"
            )));
        }
    }
    for (what, order) in [
        ("tx_attr.msg_order", h.tx_attr.msg_order),
        ("rx_attr.msg_order", h.rx_attr.msg_order),
    ] {
        let unknown = order.bits() & !MsgOrder::all().bits();
        if unknown != 0 {
            return Err(Error::bad_flags(format!(
                "{what} has unknown bits {unknown:#x}"
            )));
        }
    }
    for (what, addr) in [("src_addr", &h.src_addr), ("dest_addr", &h.dest_addr)] {
        if let Some(a) = addr {
            check_addr_format(what, a, h.addr_format)?;
        }
    }
    Ok(())
}

fn validate_caps(what: &str, caps: Caps) -> Result<()> {
    let unknown = caps.bits() & !Caps::all().bits();
    if unknown != 0 {
        return Err(Error::bad_flags(format!(
            "{what} has unknown bits {unknown:#x}"
        )));
    }
    let rma = caps.intersects(Caps::RMA | Caps::ATOMIC);
    if caps.intersects(Caps::RMA_DIRECTIONS) && !rma {
        let dirs = caps & Caps::RMA_DIRECTIONS;
        return Err(Error::bad_flags(format!(
            "{what}: {dirs} need FI_RMA or FI_ATOMIC"
        )));
    }
    let remote = caps.intersects(Caps::REMOTE_READ | Caps::REMOTE_WRITE)
        || (rma && !caps.intersects(Caps::RMA_DIRECTIONS));
    if caps.contains(Caps::RMA_EVENT) && !remote {
        return Err(Error::bad_flags(format!(
            "{what}: FI_RMA_EVENT needs FI_REMOTE_READ or FI_REMOTE_WRITE (or FI_RMA / FI_ATOMIC without directions)"
        )));
    }
    if caps.contains(Caps::SOURCE_ERR) && !caps.contains(Caps::SOURCE) {
        return Err(Error::bad_flags(format!(
            "{what}: FI_SOURCE_ERR needs FI_SOURCE"
        )));
    }
    let transfer = Caps::MSG | Caps::TAGGED | Caps::SEND | Caps::RECV | Caps::RMA | Caps::ATOMIC;
    if caps.contains(Caps::MULTICAST) && !caps.intersects(transfer) {
        return Err(Error::bad_flags(format!(
            "{what}: FI_MULTICAST needs another data transfer capability (FI_MSG, FI_SEND, FI_RECV, ...)"
        )));
    }
    Ok(())
}

fn check_addr_format(what: &str, a: &Address, format: AddrFormat) -> Result<()> {
    let af = a.format();
    let ok = match format {
        // FI_ADDR_STR names the form, not the kind: `fi_sockaddr_in://...`
        // is an FI_ADDR_STR that decodes to a socket address.
        AddrFormat::Unspec | AddrFormat::Str => true,
        AddrFormat::Sockaddr => {
            matches!(
                af,
                AddrFormat::SockaddrIn | AddrFormat::SockaddrIn6 | AddrFormat::SockaddrIb
            )
        }
        f => f == af,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::inval(format!(
            "hints {what} `{a}` is {af}, but hints addr_format is {format}"
        )))
    }
}

/// Runs [`check`] and [`alter`] over a provider's offers; returns the
/// answers in offer order, or `NoData` explaining the closest miss.
///
/// The answers carry the offers' addresses; when the hints carry addresses
/// and the offer has none, the hint's are used (fi_getinfo(3):
/// "src_addr ... dest_addr: if specified").
pub fn select(offers: &[Info], req: &Request<'_>) -> Result<Vec<Info>> {
    let mut out = Vec::new();
    let mut closest: Option<Mismatch> = None;
    for offer in offers {
        if let Some(h) = req.hints {
            if let Err(m) = check(offer, h, req.version) {
                if closest.as_ref().is_none_or(|c| m.step > c.step) {
                    closest = Some(m);
                }
                continue;
            }
        }
        let mut info = alter(offer, req.hints, req.version);
        if let Some(h) = req.hints {
            if info.src_addr.is_none() && !req.flags.contains(GetinfoFlags::SOURCE) {
                info.src_addr = h.src_addr.clone();
            }
            // fi_getinfo(3): the hint's dest_addr counts when node and
            // service are absent, or when they name the source (FI_SOURCE).
            let node_is_dest = !req.flags.contains(GetinfoFlags::SOURCE)
                && (req.node.is_some() || req.service.is_some());
            if info.dest_addr.is_none() && !node_is_dest {
                info.dest_addr = h.dest_addr.clone();
            }
        }
        out.push(info);
    }
    if out.is_empty() {
        return Err(Error::no_data(
            closest.map_or_else(|| "nothing is offered".to_string(), |m| m.reason),
        ));
    }
    Ok(out)
}
