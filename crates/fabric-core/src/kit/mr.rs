//! The memory-region key table: what a target checks before letting a
//! peer read or write its memory.
//!
//! A remote access names a key, an address (a virtual address with
//! FI_MR_VIRT_ADDR, else an offset from the region's start offset) and a
//! length. It is allowed only if the key names a region, the whole range
//! lies inside it, and the region grants the access. Otherwise nothing is
//! touched and the error says which check failed.

use std::collections::HashMap;
use std::sync::RwLock;

use crate::error::{Error, ErrorKind, Result};
use crate::objects::MrAccess;

/// A registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Local address of the first byte.
    pub base: usize,
    /// Length in bytes.
    pub len: usize,
    /// Access rights.
    pub access: MrAccess,
    /// Offset that names the first byte in offset-based RMA.
    pub offset: u64,
}

/// Keys to regions.
#[derive(Debug)]
pub struct MrTable {
    map: RwLock<HashMap<u64, Region>>,
    virt_addr: bool,
    prov_key: bool,
}

impl MrTable {
    /// An empty table. `virt_addr`: RMA addresses are virtual addresses
    /// (FI_MR_VIRT_ADDR); `prov_key`: the table chooses keys
    /// (FI_MR_PROV_KEY), else the application's requested key is used.
    pub fn new(virt_addr: bool, prov_key: bool) -> Self {
        MrTable {
            map: RwLock::new(HashMap::new()),
            virt_addr,
            prov_key,
        }
    }

    /// Registers a region under `requested` (or, with FI_MR_PROV_KEY, a
    /// fresh unpredictable key); `NoKey` if the requested key is taken.
    pub fn insert(&self, requested: u64, region: Region) -> Result<u64> {
        if region.base.checked_add(region.len).is_none() {
            return Err(Error::inval("memory region wraps around the address space"));
        }
        let mut map = self
            .map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if self.prov_key {
            loop {
                // Provider keys are the only protection of registered memory from
                // a peer that may talk to the endpoint: not sequential.
                let k = super::random_u64();
                if k != 0 && !map.contains_key(&k) {
                    break k;
                }
            }
        } else {
            if map.contains_key(&requested) {
                return Err(Error::new(
                    ErrorKind::NoKey,
                    format!("memory key {requested:#x} is already in use"),
                ));
            }
            requested
        };
        map.insert(key, region);
        Ok(key)
    }

    /// Deregisters a key; `NoKey` if unknown.
    pub fn remove(&self, key: u64) -> Result<Region> {
        let mut map = self
            .map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.remove(&key).ok_or_else(|| {
            Error::new(
                ErrorKind::NoKey,
                format!("no memory region with key {key:#x}"),
            )
        })
    }

    /// Checks a remote access of `len` bytes at `addr` with key `key`
    /// needing `need`; returns the local address of the first byte.
    pub fn check(&self, key: u64, addr: u64, len: usize, need: MrAccess) -> Result<usize> {
        self.with_access(key, addr, len, need, |a| a)
    }

    /// As [`check`](MrTable::check), then calls `f` with the local address
    /// of the first byte while the region stays registered: a concurrent
    /// [`remove`](MrTable::remove) waits until `f` returns, so `f` may move
    /// data into or out of the range (keep it short: one non-blocking
    /// system call or one copy).
    pub fn with_access<R>(
        &self,
        key: u64,
        addr: u64,
        len: usize,
        need: MrAccess,
        f: impl FnOnce(usize) -> R,
    ) -> Result<R> {
        let map = self
            .map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let r = map.get(&key).ok_or_else(|| {
            Error::new(
                ErrorKind::NoKey,
                format!("no memory region with key {key:#x}"),
            )
        })?;
        if !r.access.contains(need) {
            let missing = need - r.access;
            return Err(Error::new(
                ErrorKind::Access,
                format!("memory key {key:#x} does not grant {missing}"),
            ));
        }
        let start = if self.virt_addr {
            r.base as u64
        } else {
            r.offset
        };
        let out_of_bounds = || {
            Error::new(
                ErrorKind::Access,
                format!(
                    "range {addr:#x}+{len} is outside the region of key {key:#x} ({start:#x}+{})",
                    r.len
                ),
            )
        };
        let delta = addr.checked_sub(start).ok_or_else(out_of_bounds)?;
        let delta = usize::try_from(delta).map_err(|_| out_of_bounds())?;
        let end = delta.checked_add(len).ok_or_else(out_of_bounds)?;
        if end > r.len {
            return Err(out_of_bounds());
        }
        Ok(f(r.base + delta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(access: MrAccess) -> Region {
        Region {
            base: 0x1000,
            len: 100,
            access,
            offset: 0,
        }
    }

    #[test]
    fn provider_keys_are_not_guessable_from_earlier_ones() {
        let t = MrTable::new(true, true);
        let keys: Vec<u64> = (0..64)
            .map(|_| t.insert(0, region(MrAccess::REMOTE_READ)).unwrap())
            .collect();
        // Distinct, non-zero, and not a sequence (a run of 64 keys with
        // a constant step has probability about 2^-64 for random keys).
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len());
        assert!(!keys.contains(&0));
        let step = keys[1].wrapping_sub(keys[0]);
        assert!(keys.windows(2).any(|w| w[1].wrapping_sub(w[0]) != step));
        assert!(keys.iter().all(|&k| k > 64), "{keys:?}");
    }

    #[test]
    fn key_bounds_and_rights_are_checked() {
        let t = MrTable::new(false, false);
        let k = t.insert(7, region(MrAccess::REMOTE_WRITE)).unwrap();
        assert_eq!(k, 7);
        assert_eq!(
            t.insert(7, region(MrAccess::REMOTE_READ))
                .unwrap_err()
                .kind(),
            ErrorKind::NoKey
        );
        assert_eq!(
            t.check(7, 10, 90, MrAccess::REMOTE_WRITE).unwrap(),
            0x1000 + 10
        );
        assert_eq!(
            t.check(8, 0, 1, MrAccess::REMOTE_WRITE).unwrap_err().kind(),
            ErrorKind::NoKey
        );
        assert_eq!(
            t.check(7, 10, 91, MrAccess::REMOTE_WRITE)
                .unwrap_err()
                .kind(),
            ErrorKind::Access
        );
        assert_eq!(
            t.check(7, u64::MAX, 2, MrAccess::REMOTE_WRITE)
                .unwrap_err()
                .kind(),
            ErrorKind::Access
        );
        assert_eq!(
            t.check(7, 0, 1, MrAccess::REMOTE_READ).unwrap_err().kind(),
            ErrorKind::Access
        );
        t.remove(7).unwrap();
        assert_eq!(
            t.check(7, 0, 1, MrAccess::REMOTE_WRITE).unwrap_err().kind(),
            ErrorKind::NoKey
        );
    }

    #[test]
    fn virtual_addresses_and_provider_keys() {
        let t = MrTable::new(true, true);
        let k1 = t.insert(0, region(MrAccess::REMOTE_READ)).unwrap();
        let k2 = t.insert(0, region(MrAccess::REMOTE_READ)).unwrap();
        assert_ne!(k1, k2);
        assert_eq!(
            t.check(k1, 0x1000 + 99, 1, MrAccess::REMOTE_READ).unwrap(),
            0x1000 + 99
        );
        assert_eq!(
            t.check(k1, 0x0fff, 1, MrAccess::REMOTE_READ)
                .unwrap_err()
                .kind(),
            ErrorKind::Access
        );
    }
}
