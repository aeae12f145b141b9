//! Atomic operations: the checks and the executor shared by all providers
//! ([`fabric_core::kit::atomic`], which documents what is supported and
//! how elements are updated), with tcp's element limit.

use fabric_core::kit::atomic::{self as exec, AtomicKind};
use fabric_core::kit::mr::MrTable;
use fabric_core::objects::{AtomicOp, Datatype};
use fabric_core::{Error, ErrorKind, Result};

use crate::wire::{AtomicHeader, DEFAULT_MAX_ATOMIC_COUNT};

/// Most elements one atomic operation carries.
pub(crate) const MAX_COUNT: usize = DEFAULT_MAX_ATOMIC_COUNT as usize;

/// `fi_atomicvalid` and its fetch / compare forms: the element count one
/// operation may carry, or `OpNotSupp`.
pub(crate) fn valid(dt: Datatype, op: AtomicOp, kind: AtomicKind) -> Result<usize> {
    exec::valid(dt, op, kind).map_err(|e| Error::new(e.kind(), format!("tcp: {}", e.detail())))?;
    Ok(MAX_COUNT)
}

/// Executes an atomic request against registered memory: checks every
/// range (key, bounds, rights) first, then updates the elements, appending
/// the old values to `results` for fetching and compare requests. Returns
/// the refusal status, and then changes nothing.
pub(crate) fn execute(
    mr: &MrTable,
    kind: AtomicKind,
    a: &AtomicHeader,
    payload: &[u8],
    results: &mut Vec<u8>,
) -> std::result::Result<(), ErrorKind> {
    exec::execute(mr, kind, a.datatype(), a.op(), a.iov(), payload, results)
}
