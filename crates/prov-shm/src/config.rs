//! What getinfo and the endpoints share: the address scheme and the
//! limits and thresholds (with the variables that tune them), so that
//! neither imports the other.

use fabric_core::{Address, Error, Result};

/// The scheme of shm addresses.
pub(crate) const SCHEME: &str = "fi_shm://";

/// The region name inside an `fi_shm://<name>` address, checked.
pub(crate) fn region_of(addr: &Address) -> Result<&str> {
    let Address::Str(s) = addr else {
        return Err(Error::inval(format!(
            "shm cannot reach `{addr}`: not an fi_shm:// address"
        )));
    };
    let name = s.strip_prefix(SCHEME).ok_or_else(|| {
        Error::inval(format!(
            "shm cannot reach `{addr}`: not an fi_shm:// address"
        ))
    })?;
    crate::region::check_name(name)?;
    Ok(name)
}

/// Largest inject (the data is copied before the call returns): the
/// inline payload of a default ring slot, so that an inject to a peer
/// with the default layout is one command without a bounce buffer (as
/// libfabric's shm, whose inject size is 4 KiB too).
pub const INJECT_SIZE: usize = 4096;

/// The variable that sets the eager limit (bytes).
pub const EAGER_MAX_VAR: &str = "FI_SHM_EAGER_MAX";

/// The variable that sets the smallest transfer copied by cross-memory
/// attach (bytes).
pub const CMA_MIN_VAR: &str = "FI_SHM_CMA_MIN";

/// The default eager limit: messages up to this size travel in the ring
/// (inline up to 4 KiB) or in one bounce buffer; larger ones by
/// rendezvous. Chosen by measurement: see the [crate docs](crate::docs#thresholds).
pub const EAGER_MAX: usize = 32 * 1024;

/// The eager limit in effect: [`EAGER_MAX_VAR`] when set to a number, else
/// [`EAGER_MAX`]; at most one bounce buffer, and at least the inject size
/// (an inject must copy its data during the call, so it cannot wait for a
/// rendezvous; a smaller limit made injects above it fail with `Again`
/// for ever).
pub fn eager_max() -> usize {
    let cap = crate::region::RegionConfig::default().bounce_size as usize;
    env_bytes(EAGER_MAX_VAR)
        .unwrap_or(EAGER_MAX)
        .clamp(INJECT_SIZE, cap)
}

/// Whether a message above the eager limit that fits one bounce buffer
/// goes eagerly when nothing else is in flight: yes unless
/// [`EAGER_MAX_VAR`] sets the limit. See the [crate docs](crate::docs#thresholds).
pub(crate) fn lone_eager() -> bool {
    env_bytes(EAGER_MAX_VAR).is_none()
}

/// A size in bytes from the variable `var`, when it is set to a number.
fn env_bytes(var: &str) -> Option<usize> {
    std::env::var(var).ok()?.trim().parse().ok()
}

/// The smallest RMA transfer copied by cross-memory attach: a larger one
/// below it is pushed through bounce buffers, two pipelined copies without
/// system calls, which measured faster. (Rendezvous messages choose by
/// measurement, per peer and size.) See the [crate docs](crate::docs#thresholds).
pub const CMA_MIN: usize = 256 * 1024;

/// [`CMA_MIN_VAR`] when set to a number: then it is the limit for RMA and
/// for messages alike, and messages no longer choose by measurement.
pub fn cma_min() -> Option<usize> {
    env_bytes(CMA_MIN_VAR)
}

/// The variable that sets the smallest split rendezvous (bytes).
pub const SPLIT_MIN_VAR: &str = "FI_SHM_SPLIT_MIN";

/// The default smallest split rendezvous: from this size on, a message
/// pulled with cross-memory attach is copied partly by the receiver and
/// partly by the sender, at once. See the [crate docs](crate::docs#thresholds).
pub const SPLIT_MIN: usize = 32 * 1024;

/// The split threshold in effect: [`SPLIT_MIN_VAR`] when set to a number,
/// else [`SPLIT_MIN`]; never below 8 KiB.
pub fn split_min() -> usize {
    env_bytes(SPLIT_MIN_VAR).unwrap_or(SPLIT_MIN).max(8192)
}

/// The variable that fixes which stores fill bounce buffers with big
/// payloads: `0` ordinary stores only, `1` non-temporal stores (where the
/// CPU has AVX2); unset or anything else, chosen by measurement (see the
/// [crate docs](crate::docs#thresholds)).
pub const STREAM_VAR: &str = "FI_SHM_STREAM";

/// [`STREAM_VAR`] read: `Some(false)` for `0`, `Some(true)` for `1`, `None`
/// (measure) otherwise.
pub(crate) fn stream_forced() -> Option<bool> {
    match std::env::var(STREAM_VAR).ok()?.trim() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}
