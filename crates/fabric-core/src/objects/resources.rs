//! Address vectors and memory regions.

use crate::addr::Address;
use crate::enums::AvType;
use crate::error::Result;
use crate::names::fi_flags;

use super::{AsAny, FiAddr, IoVec, MrDesc};

/// Attributes of an address vector (`struct fi_av_attr`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AvAttr {
    /// Map or table (`Unspec`: the domain's).
    pub av_type: AvType,
    /// Expected number of addresses.
    pub count: usize,
    /// Receive-context bits of an fi_addr_t (scalable endpoints).
    pub rx_ctx_bits: u32,
    /// Name of a shared AV (FI_SHARED_AV).
    pub name: Option<String>,
}

/// An address vector (`fi_av(3)`): peer addresses to `FiAddr` handles.
pub trait AddressVector: AsAny + Send + Sync {
    /// Inserts addresses (`fi_av_insert`); `out[i]` gets the handle of
    /// `addrs[i]`, or `FiAddr::NOTAVAIL` for one that failed. Returns the
    /// number inserted.
    fn insert(&self, addrs: &[Address], out: &mut [FiAddr]) -> Result<usize>;

    /// Inserts one address and returns its handle, or why it could not be
    /// inserted (the per-address error `fi_av_insert` reports with
    /// FI_SYNC_ERR). The default calls [`insert`](AddressVector::insert),
    /// which keeps no reason: a refusal there is `AddrNotAvail`; providers
    /// that know more override it.
    fn insert_one(&self, addr: &Address) -> Result<FiAddr> {
        let mut out = [FiAddr::NOTAVAIL];
        self.insert(std::slice::from_ref(addr), &mut out)?;
        if out[0] == FiAddr::NOTAVAIL {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::AddrNotAvail,
                format!("av insert: the provider refused address {addr}"),
            ));
        }
        Ok(out[0])
    }

    /// Resolves node / service and inserts the result (`fi_av_insertsvc`).
    fn insertsvc(&self, node: &str, service: &str) -> Result<FiAddr>;

    /// Removes addresses (`fi_av_remove`); their handles become invalid.
    fn remove(&self, addrs: &[FiAddr]) -> Result<()>;

    /// The address behind a handle (`fi_av_lookup`); `NoEnt` if unknown.
    fn lookup(&self, addr: FiAddr) -> Result<Address>;

    /// The printable form of an address (`fi_av_straddr`).
    fn straddr(&self, addr: &Address) -> String {
        addr.to_string()
    }
}

fi_flags! {
    /// Access rights of a memory region (`fi_mr_reg` access).
    pub struct MrAccess: u64, prefix "FI_" {
        /// Local buffer of sends.
        const SEND = 1 << 11;
        /// Local buffer of receives.
        const RECV = 1 << 10;
        /// Local buffer of reads (where read data lands).
        const READ = 1 << 8;
        /// Local buffer of writes (the source).
        const WRITE = 1 << 9;
        /// Peers may read it.
        const REMOTE_READ = 1 << 12;
        /// Peers may write it.
        const REMOTE_WRITE = 1 << 13;
    }
}

/// A registration request (`struct fi_mr_attr`).
#[derive(Debug, Clone)]
pub struct MrAttr<'a> {
    /// The memory.
    pub iov: &'a [IoVec],
    /// Access rights.
    pub access: MrAccess,
    /// Offset of the first byte for offset-based RMA (without
    /// FI_MR_VIRT_ADDR).
    pub offset: u64,
    /// Key asked for (without FI_MR_PROV_KEY).
    pub requested_key: u64,
    /// The application's context.
    pub context: u64,
}

/// A registered memory region (`fi_mr(3)`); dropping it deregisters.
pub trait MemoryRegion: AsAny + Send + Sync {
    /// The key peers use (`fi_mr_key`).
    fn key(&self) -> u64;
    /// The local descriptor (`fi_mr_desc`).
    fn desc(&self) -> MrDesc;
}
