//! The address-vector table: addresses to `FiAddr` handles and back.
//!
//! Handles are indices in insertion order (what FI_AV_TABLE requires, and a
//! valid choice for FI_AV_MAP). A removed handle is never reused, so a
//! stale handle fails instead of reaching another peer.

use std::collections::HashMap;
use std::sync::RwLock;

use crate::addr::Address;
use crate::error::{Error, ErrorKind, Result};
use crate::objects::FiAddr;

#[derive(Debug, Default)]
struct Inner {
    slots: Vec<Option<Address>>,
    index: HashMap<Address, u64>,
}

/// Addresses by handle, and handles by address.
#[derive(Debug, Default)]
pub struct AvTable {
    inner: RwLock<Inner>,
    changes: std::sync::atomic::AtomicU64,
    removals: std::sync::atomic::AtomicU64,
}

impl AvTable {
    /// An empty table.
    pub fn new() -> Self {
        AvTable::default()
    }

    /// Inserts one address; inserting an address already present returns
    /// its existing handle.
    pub fn insert(&self, addr: Address) -> FiAddr {
        let mut g = self
            .inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = g.index.get(&addr) {
            return FiAddr(*i);
        }
        let i = g.slots.len() as u64;
        g.slots.push(Some(addr.clone()));
        g.index.insert(addr, i);
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        FiAddr(i)
    }

    /// Removes a handle; `NoEnt` if it is not in the table.
    pub fn remove(&self, a: FiAddr) -> Result<()> {
        let mut g = self
            .inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = usize::try_from(a.0).ok().and_then(|i| g.slots.get_mut(i));
        match slot.and_then(Option::take) {
            Some(addr) => {
                g.index.remove(&addr);
                self.changes
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                self.removals
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                Ok(())
            }
            None => Err(Error::new(
                ErrorKind::NoEnt,
                format!("fi_addr {} is not in the address vector", a.0),
            )),
        }
    }

    /// The address of a handle; `NoEnt` if unknown.
    pub fn lookup(&self, a: FiAddr) -> Result<Address> {
        let g = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        usize::try_from(a.0)
            .ok()
            .and_then(|i| g.slots.get(i))
            .and_then(Clone::clone)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NoEnt,
                    format!("fi_addr {} is not in the address vector", a.0),
                )
            })
    }

    /// How many times the table changed (a new address inserted, a
    /// handle removed): what [`reverse`](Self::reverse) answered while this
    /// was `n` still holds while it is `n`; after a change, ask again (a
    /// removed peer is FI_ADDR_NOTAVAIL, an inserted one has a handle).
    #[inline]
    pub fn changes(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::Acquire)
    }

    /// How many handles were removed so far: a handle resolved while
    /// this was `n` is still valid while it is `n` (handles are never
    /// reused); after a change, look it up again (`NoEnt` once removed).
    #[inline]
    pub fn removals(&self) -> u64 {
        self.removals.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The handle of an address, or `FiAddr::NOTAVAIL`.
    pub fn reverse(&self, addr: &Address) -> FiAddr {
        let g = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.index.get(addr).map_or(FiAddr::NOTAVAIL, |i| FiAddr(*i))
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        let g = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.index.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_lookup_remove() {
        let t = AvTable::new();
        let a: Address = "fi_sockaddr_in://10.0.0.1:1".parse().unwrap();
        let b: Address = "fi_shm://peer".parse().unwrap();
        assert_eq!(t.insert(a.clone()), FiAddr(0));
        assert_eq!(t.insert(b.clone()), FiAddr(1));
        assert_eq!(t.insert(a.clone()), FiAddr(0));
        assert_eq!(t.lookup(FiAddr(1)).unwrap(), b);
        assert_eq!(t.reverse(&b), FiAddr(1));
        t.remove(FiAddr(0)).unwrap();
        assert_eq!(t.lookup(FiAddr(0)).unwrap_err().kind(), ErrorKind::NoEnt);
        assert_eq!(t.reverse(&a), FiAddr::NOTAVAIL);
        assert_eq!(t.insert(a), FiAddr(2));
        assert_eq!(t.remove(FiAddr(99)).unwrap_err().kind(), ErrorKind::NoEnt);
        assert_eq!(t.len(), 2);
    }
}
