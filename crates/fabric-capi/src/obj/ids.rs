//! From the object ids a provider's EQ events carry (`EqEvent`'s `fid`)
//! to the C objects the application holds.
//!
//! The Rust model names the endpoint of a connection event by a `u64` the
//! provider chooses and tells (`Endpoint::event_id`,
//! `PassiveEndpoint::event_id`); a C application compares
//! `fi_eq_cm_entry.fid` with its own `&ep->fid`. Endpoints and passive endpoints register their provider id
//! here when opened and leave when closed; event delivery translates.
//! Events of objects not registered (or of a provider that does not tell
//! its ids) carry a NULL `fid`.

use std::sync::{Mutex, OnceLock};

use fabric::objects::{Endpoint, PassiveEndpoint};

use super::Fid;

/// `(provider id, C object address)` of the open endpoints and passive
/// endpoints: a vector (a connection event is rare, endpoints are few), which
/// a leak checker sees as reachable, unlike a hash table's buckets.
fn table() -> &'static Mutex<Vec<(u64, usize)>> {
    static T: OnceLock<Mutex<Vec<(u64, usize)>>> = OnceLock::new();
    T.get_or_init(Mutex::default)
}

/// The id the provider gives `ep` in its events, if it tells.
pub(crate) fn of_ep(ep: &dyn Endpoint) -> Option<u64> {
    ep.event_id()
}

/// The id the provider gives `pep` in its events, if it tells.
pub(crate) fn of_pep(pep: &dyn PassiveEndpoint) -> Option<u64> {
    pep.event_id()
}

/// Records that events naming `id` concern the C object at `fid`.
pub(crate) fn register(id: Option<u64>, fid: *const Fid) {
    if let Some(id) = id {
        let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
        t.retain(|&(i, _)| i != id);
        t.push((id, fid.expose_provenance()));
    }
}

/// Forgets `id` (its object is closing).
pub(crate) fn unregister(id: Option<u64>) {
    if let Some(id) = id {
        let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
        t.retain(|&(i, _)| i != id);
    }
}

/// The C object of an event's `id`, or NULL.
pub(crate) fn lookup(id: u64) -> *mut Fid {
    let t = table().lock().unwrap_or_else(|p| p.into_inner());
    t.iter()
        .find(|&&(i, _)| i == id)
        .map_or(std::ptr::null_mut(), |&(_, a)| {
            std::ptr::with_exposed_provenance_mut(a)
        })
}
