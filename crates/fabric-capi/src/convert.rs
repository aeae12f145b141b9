//! Conversion between the C structures and [`fabric::Info`].
//!
//! - C to Rust ([`info_from_c`]) reads hints: a NULL sub-structure is a
//!   zeroed one, strings must be UTF-8, enumerations must hold values this
//!   library knows, and an address is read from exactly `addrlen` bytes,
//!   decoded by `addr_format` (by the `sa_family` field when the format is
//!   `FI_FORMAT_UNSPEC`). Every failure is an `FI_EINVAL` error saying which
//!   field is wrong.
//! - Rust to C ([`info_to_c`]) builds one fully allocated `fi_info` (every
//!   sub-structure present, `next` and `nic` NULL) with the C allocator;
//!   [`free_info`] releases it.
//! - [`dup_info`] copies one C `fi_info` structure by structure, keeping
//!   what the Rust model cannot hold (NULL sub-structures, values of newer
//!   libfabric releases).

use std::ffi::{CStr, c_char, c_void};
use std::ptr;

use fabric::{
    AddrFormat, Address, AvType, Caps, CompOrder, DomainAttr, EpAttr, EpType, Error, FabricAttr,
    Handle, Info, Mode, MrMode, MsgOrder, OpFlags, Progress, Protocol, ResourceMgmt, RxAttr,
    Threading, TxAttr, UnknownName, Version,
};

use crate::mem::{self, NoMem};
use crate::types::{FiDomainAttr, FiEpAttr, FiFabricAttr, FiInfo, FiRxAttr, FiTxAttr};

/// The longest address accepted in hints: far above every address format
/// (the largest sockaddr is 128 bytes), so only a wrong length reaches it.
pub(crate) const MAX_ADDR_LEN: usize = 4096;
/// The longest authorization key accepted in hints.
pub(crate) const MAX_AUTH_KEY_LEN: usize = 1 << 16;

/// Which hint addresses to read. fi_getinfo(3) says when each is ignored;
/// an ignored address is not decoded at all, so its bytes cannot fail the
/// call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddrUse {
    /// Read `src_addr` (ignored with FI_SOURCE).
    pub(crate) src: bool,
    /// Read `dest_addr` (ignored when node or service is given, unless
    /// FI_SOURCE is set).
    pub(crate) dest: bool,
}

impl AddrUse {
    /// Both addresses (what the unit tests read back).
    #[cfg(test)]
    pub(crate) const ALL: AddrUse = AddrUse {
        src: true,
        dest: true,
    };
}

// ---------------------------------------------------------------- C to Rust

/// A hint string: NULL is `None`; the bytes must be UTF-8.
///
/// # Safety
///
/// `p` is null or points to a NUL-terminated string.
unsafe fn read_str(p: *const c_char, what: &str) -> Result<Option<String>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_string()))
        .map_err(|_| Error::inval(format!("{what} is not valid UTF-8")))
}

/// Borrows a C string argument (`node`, `service`) as `&str`.
///
/// # Safety
///
/// `p` is null or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn borrow_str<'a>(
    p: *const c_char,
    what: &str,
) -> Result<Option<&'a str>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller guarantees a NUL-terminated string living for 'a.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| Error::inval(format!("{what} is not valid UTF-8")))
}

/// A known value of a C enumeration.
fn read_enum<T: TryFrom<u32, Error = UnknownName>>(v: u32, what: &str) -> Result<T, Error> {
    T::try_from(v)
        .map_err(|_| Error::inval(format!("{what} {v} is not a value this library knows")))
}

/// Reads an address of `len` bytes at `p`, or `None` if `p` is null.
///
/// # Safety
///
/// `p` is null or points to `len` readable bytes.
unsafe fn read_addr(
    p: *const c_void,
    len: usize,
    format: AddrFormat,
    what: &str,
) -> Result<Option<Address>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    if len == 0 {
        return Err(Error::inval(format!(
            "{what} is set but its length is 0 (fi_getinfo(3): the length must be > 0)"
        )));
    }
    if len > MAX_ADDR_LEN {
        return Err(Error::inval(format!(
            "{what} length {len} is longer than any address ({MAX_ADDR_LEN} bytes at most)"
        )));
    }
    // SAFETY: the caller guarantees `len` readable bytes at `p`.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    // FI_FORMAT_UNSPEC: the bytes are a sockaddr of some family (the only
    // generic form); decoding checks the family field and the length.
    let format = if format == AddrFormat::Unspec {
        AddrFormat::Sockaddr
    } else {
        format
    };
    Address::from_bytes(format, bytes)
        .map(Some)
        .map_err(|e| Error::inval(format!("{what}: {}", e.detail())))
}

/// Reads an authorization key: `None` when the pointer is null or the size
/// is 0.
///
/// # Safety
///
/// `p` is null or points to `len` readable bytes.
unsafe fn read_key(p: *const u8, len: usize, what: &str) -> Result<Option<Vec<u8>>, Error> {
    if p.is_null() || len == 0 {
        return Ok(None);
    }
    if len > MAX_AUTH_KEY_LEN {
        return Err(Error::inval(format!(
            "{what}_size {len} is larger than {MAX_AUTH_KEY_LEN}"
        )));
    }
    // SAFETY: the caller guarantees `len` readable bytes at `p`.
    Ok(Some(unsafe { std::slice::from_raw_parts(p, len) }.to_vec()))
}

/// The handle an `fi_info`'s `handle` stands for: the provider's, for a
/// connection request of this library; else the pointer itself.
fn handle_of<T>(p: *mut T) -> Option<Handle> {
    (!p.is_null()).then(|| {
        crate::obj::connreq::handle_of(p.cast()).unwrap_or(Handle(p.expose_provenance() as u64))
    })
}

fn ptr_of<T>(h: Option<Handle>) -> *mut T {
    h.map_or(ptr::null_mut(), |h| {
        ptr::with_exposed_provenance_mut(h.0 as usize)
    })
}

/// `struct fi_tx_attr` to [`TxAttr`].
pub(crate) fn tx_from_c(t: &FiTxAttr) -> TxAttr {
    TxAttr {
        caps: Caps::from_bits_retain(t.caps),
        mode: Mode::from_bits_retain(t.mode),
        op_flags: OpFlags::from_bits_retain(t.op_flags),
        msg_order: MsgOrder::from_bits_retain(t.msg_order),
        comp_order: CompOrder::from_bits_retain(t.comp_order),
        inject_size: t.inject_size,
        size: t.size,
        iov_limit: t.iov_limit,
        rma_iov_limit: t.rma_iov_limit,
        tclass: t.tclass,
    }
}

/// `struct fi_rx_attr` to [`RxAttr`].
pub(crate) fn rx_from_c(r: &FiRxAttr) -> RxAttr {
    RxAttr {
        caps: Caps::from_bits_retain(r.caps),
        mode: Mode::from_bits_retain(r.mode),
        op_flags: OpFlags::from_bits_retain(r.op_flags),
        msg_order: MsgOrder::from_bits_retain(r.msg_order),
        comp_order: CompOrder::from_bits_retain(r.comp_order),
        total_buffered_recv: r.total_buffered_recv,
        size: r.size,
        iov_limit: r.iov_limit,
    }
}

/// `struct fi_ep_attr` to [`EpAttr`].
///
/// # Safety
///
/// `auth_key` is null or points to `auth_key_size` readable bytes.
pub(crate) unsafe fn ep_from_c(e: &FiEpAttr) -> Result<EpAttr, Error> {
    Ok(EpAttr {
        ep_type: read_enum::<EpType>(e.r#type, "ep_attr.type")?,
        protocol: read_enum::<Protocol>(e.protocol, "ep_attr.protocol")?,
        protocol_version: e.protocol_version,
        max_msg_size: e.max_msg_size,
        msg_prefix_size: e.msg_prefix_size,
        max_order_raw_size: e.max_order_raw_size,
        max_order_war_size: e.max_order_war_size,
        max_order_waw_size: e.max_order_waw_size,
        mem_tag_format: e.mem_tag_format,
        tx_ctx_cnt: e.tx_ctx_cnt,
        rx_ctx_cnt: e.rx_ctx_cnt,
        auth_key_size: e.auth_key_size,
        // SAFETY: per the contract, `auth_key_size` bytes are readable.
        auth_key: unsafe { read_key(e.auth_key, e.auth_key_size, "ep_attr.auth_key") }?,
    })
}

/// `struct fi_domain_attr` to [`DomainAttr`].
///
/// # Safety
///
/// `name` is null or a C string; `auth_key` is null or points to
/// `auth_key_size` readable bytes.
pub(crate) unsafe fn domain_from_c(d: &FiDomainAttr) -> Result<DomainAttr, Error> {
    Ok(DomainAttr {
        domain: handle_of(d.domain),
        // SAFETY: per the contract, `name` is null or a C string.
        name: unsafe { read_str(d.name, "domain_attr.name") }?,
        threading: read_enum::<Threading>(d.threading, "domain_attr.threading")?,
        control_progress: read_enum::<Progress>(
            d.control_progress,
            "domain_attr.control_progress",
        )?,
        data_progress: read_enum::<Progress>(d.data_progress, "domain_attr.data_progress")?,
        resource_mgmt: read_enum::<ResourceMgmt>(d.resource_mgmt, "domain_attr.resource_mgmt")?,
        av_type: read_enum::<AvType>(d.av_type, "domain_attr.av_type")?,
        // The C field is an int holding a bit set: reinterpret the bits.
        mr_mode: MrMode::from_bits_retain(d.mr_mode as u32),
        mr_key_size: d.mr_key_size,
        cq_data_size: d.cq_data_size,
        cq_cnt: d.cq_cnt,
        ep_cnt: d.ep_cnt,
        tx_ctx_cnt: d.tx_ctx_cnt,
        rx_ctx_cnt: d.rx_ctx_cnt,
        max_ep_tx_ctx: d.max_ep_tx_ctx,
        max_ep_rx_ctx: d.max_ep_rx_ctx,
        max_ep_stx_ctx: d.max_ep_stx_ctx,
        max_ep_srx_ctx: d.max_ep_srx_ctx,
        cntr_cnt: d.cntr_cnt,
        mr_iov_limit: d.mr_iov_limit,
        caps: Caps::from_bits_retain(d.caps),
        mode: Mode::from_bits_retain(d.mode),
        // SAFETY: per the contract, `auth_key_size` bytes are readable.
        auth_key: unsafe { read_key(d.auth_key, d.auth_key_size, "domain_attr.auth_key") }?,
        auth_key_size: d.auth_key_size,
        max_err_data: d.max_err_data,
        mr_cnt: d.mr_cnt,
        tclass: d.tclass,
    })
}

/// `struct fi_fabric_attr` to [`FabricAttr`].
///
/// # Safety
///
/// `name` and `prov_name` are null or C strings.
pub(crate) unsafe fn fabric_from_c(f: &FiFabricAttr) -> Result<FabricAttr, Error> {
    Ok(FabricAttr {
        fabric: handle_of(f.fabric),
        // SAFETY: per the contract, null or C strings.
        name: unsafe { read_str(f.name, "fabric_attr.name") }?,
        // SAFETY: as above.
        prov_name: unsafe { read_str(f.prov_name, "fabric_attr.prov_name") }?,
        prov_version: Version::from_u32(f.prov_version),
        api_version: Version::from_u32(f.api_version),
    })
}

/// Reads one `fi_info` (not its `next`) as an [`Info`]. NULL
/// sub-structures read as zeroed ones; `nic` is ignored.
///
/// # Safety
///
/// Every non-null pointer of `c` and of its sub-structures points to what
/// `<rdma/fabric.h>` says: valid structures, C strings, and addresses and
/// keys of the given lengths.
pub(crate) unsafe fn info_from_c(c: &FiInfo, addrs: AddrUse) -> Result<Info, Error> {
    let addr_format = read_enum::<AddrFormat>(c.addr_format, "addr_format")?;
    let src_addr = if addrs.src {
        // SAFETY: per the contract, `src_addrlen` bytes at `src_addr`.
        unsafe { read_addr(c.src_addr, c.src_addrlen, addr_format, "src_addr") }?
    } else {
        None
    };
    let dest_addr = if addrs.dest {
        // SAFETY: per the contract, `dest_addrlen` bytes at `dest_addr`.
        unsafe { read_addr(c.dest_addr, c.dest_addrlen, addr_format, "dest_addr") }?
    } else {
        None
    };
    // SAFETY: non-null sub-structure pointers point to valid structures
    // whose own pointers are valid, per the contract (here and below).
    let tx_attr = unsafe { c.tx_attr.as_ref() }.map(tx_from_c);
    // SAFETY: as above.
    let rx_attr = unsafe { c.rx_attr.as_ref() }.map(rx_from_c);
    // SAFETY: as above.
    let ep_attr = match unsafe { c.ep_attr.as_ref() } {
        // SAFETY: as above.
        Some(e) => unsafe { ep_from_c(e) }?,
        None => EpAttr::default(),
    };
    // SAFETY: as above.
    let domain_attr = match unsafe { c.domain_attr.as_ref() } {
        // SAFETY: as above.
        Some(d) => unsafe { domain_from_c(d) }?,
        None => DomainAttr::default(),
    };
    // SAFETY: as above.
    let fabric_attr = match unsafe { c.fabric_attr.as_ref() } {
        // SAFETY: as above.
        Some(f) => unsafe { fabric_from_c(f) }?,
        None => FabricAttr::default(),
    };
    Ok(Info {
        caps: Caps::from_bits_retain(c.caps),
        mode: Mode::from_bits_retain(c.mode),
        addr_format,
        src_addr,
        dest_addr,
        handle: handle_of(c.handle),
        tx_attr: tx_attr.unwrap_or_default(),
        rx_attr: rx_attr.unwrap_or_default(),
        ep_attr,
        domain_attr,
        fabric_attr,
    })
}

// ---------------------------------------------------------------- Rust to C

/// [`TxAttr`] to `struct fi_tx_attr`.
pub(crate) fn tx_to_c(t: &TxAttr) -> FiTxAttr {
    FiTxAttr {
        caps: t.caps.bits(),
        mode: t.mode.bits(),
        op_flags: t.op_flags.bits(),
        msg_order: t.msg_order.bits(),
        comp_order: t.comp_order.bits(),
        inject_size: t.inject_size,
        size: t.size,
        iov_limit: t.iov_limit,
        rma_iov_limit: t.rma_iov_limit,
        tclass: t.tclass,
    }
}

/// [`RxAttr`] to `struct fi_rx_attr`.
pub(crate) fn rx_to_c(r: &RxAttr) -> FiRxAttr {
    FiRxAttr {
        caps: r.caps.bits(),
        mode: r.mode.bits(),
        op_flags: r.op_flags.bits(),
        msg_order: r.msg_order.bits(),
        comp_order: r.comp_order.bits(),
        total_buffered_recv: r.total_buffered_recv,
        size: r.size,
        iov_limit: r.iov_limit,
    }
}

/// A `malloc`ed key and the size to report: at least the key's length, so
/// that a reader of `auth_key_size` bytes stays inside the allocation.
fn key_to_c(key: Option<&[u8]>, size: usize) -> Result<(*mut u8, usize), NoMem> {
    match key {
        Some(k) if !k.is_empty() => {
            let size = size.max(k.len());
            Ok((mem::dup_bytes(k, size)?, size))
        }
        _ => Ok((ptr::null_mut(), size)),
    }
}

/// [`EpAttr`] to `struct fi_ep_attr`, allocating its key.
fn ep_to_c(e: &EpAttr) -> Result<FiEpAttr, NoMem> {
    let (auth_key, auth_key_size) = key_to_c(e.auth_key.as_deref(), e.auth_key_size)?;
    Ok(FiEpAttr {
        r#type: e.ep_type.as_u32(),
        protocol: e.protocol.as_u32(),
        protocol_version: e.protocol_version,
        max_msg_size: e.max_msg_size,
        msg_prefix_size: e.msg_prefix_size,
        max_order_raw_size: e.max_order_raw_size,
        max_order_war_size: e.max_order_war_size,
        max_order_waw_size: e.max_order_waw_size,
        mem_tag_format: e.mem_tag_format,
        tx_ctx_cnt: e.tx_ctx_cnt,
        rx_ctx_cnt: e.rx_ctx_cnt,
        auth_key_size,
        auth_key,
    })
}

/// Fills a zeroed `struct fi_domain_attr` from [`DomainAttr`]. On failure,
/// what was allocated so far is in `out`, for [`free_domain_attr`].
fn domain_to_c(d: &DomainAttr, out: &mut FiDomainAttr) -> Result<(), NoMem> {
    out.domain = ptr_of(d.domain);
    out.name = mem::dup_opt_str(d.name.as_deref())?;
    out.threading = d.threading.as_u32();
    out.control_progress = d.control_progress.as_u32();
    out.data_progress = d.data_progress.as_u32();
    out.resource_mgmt = d.resource_mgmt.as_u32();
    out.av_type = d.av_type.as_u32();
    // The C field is an int holding a bit set: reinterpret the bits.
    out.mr_mode = d.mr_mode.bits() as i32;
    out.mr_key_size = d.mr_key_size;
    out.cq_data_size = d.cq_data_size;
    out.cq_cnt = d.cq_cnt;
    out.ep_cnt = d.ep_cnt;
    out.tx_ctx_cnt = d.tx_ctx_cnt;
    out.rx_ctx_cnt = d.rx_ctx_cnt;
    out.max_ep_tx_ctx = d.max_ep_tx_ctx;
    out.max_ep_rx_ctx = d.max_ep_rx_ctx;
    out.max_ep_stx_ctx = d.max_ep_stx_ctx;
    out.max_ep_srx_ctx = d.max_ep_srx_ctx;
    out.cntr_cnt = d.cntr_cnt;
    out.mr_iov_limit = d.mr_iov_limit;
    out.caps = d.caps.bits();
    out.mode = d.mode.bits();
    (out.auth_key, out.auth_key_size) = key_to_c(d.auth_key.as_deref(), d.auth_key_size)?;
    out.max_err_data = d.max_err_data;
    out.mr_cnt = d.mr_cnt;
    out.tclass = d.tclass;
    Ok(())
}

/// Fills a zeroed `struct fi_fabric_attr` from [`FabricAttr`].
fn fabric_to_c(f: &FabricAttr, out: &mut FiFabricAttr) -> Result<(), NoMem> {
    out.fabric = ptr_of(f.fabric);
    out.name = mem::dup_opt_str(f.name.as_deref())?;
    out.prov_name = mem::dup_opt_str(f.prov_name.as_deref())?;
    out.prov_version = f.prov_version.to_u32();
    out.api_version = f.api_version.to_u32();
    Ok(())
}

/// A `malloc`ed address and its length; null and 0 for `None`.
fn addr_to_c(a: Option<&Address>) -> Result<(*mut c_void, usize), NoMem> {
    match a {
        Some(a) => {
            let bytes = a.to_bytes();
            Ok((mem::dup_bytes(&bytes, bytes.len())?.cast(), bytes.len()))
        }
        None => Ok((ptr::null_mut(), 0)),
    }
}

/// A zeroed `fi_info` with every sub-structure allocated and zeroed:
/// `fi_allocinfo`.
pub(crate) fn alloc_info() -> Result<*mut FiInfo, NoMem> {
    let info = mem::calloc_one::<FiInfo>()?;
    // SAFETY: `info` is a fresh, zeroed, valid FiInfo; on failure the
    // sub-structures allocated so far are released with it.
    unsafe {
        let i = &mut *info;
        let filled = (|| {
            i.tx_attr = mem::calloc_one()?;
            i.rx_attr = mem::calloc_one()?;
            i.ep_attr = mem::calloc_one()?;
            i.domain_attr = mem::calloc_one()?;
            i.fabric_attr = mem::calloc_one()?;
            Ok(())
        })();
        if let Err(e) = filled {
            free_info(info);
            return Err(e);
        }
    }
    Ok(info)
}

/// One `fi_info` for `info`, fully allocated; `next` is NULL.
pub(crate) fn info_to_c(info: &Info) -> Result<*mut FiInfo, NoMem> {
    let c = alloc_info()?;
    // SAFETY: `c` comes from alloc_info: valid, with every sub-structure
    // allocated; on failure it is released with what was filled in.
    unsafe {
        if let Err(e) = fill(info, &mut *c) {
            free_info(c);
            return Err(e);
        }
    }
    Ok(c)
}

/// Fills an `fi_info` fresh from [`alloc_info`].
///
/// # Safety
///
/// The sub-structure pointers of `c` point to valid, zeroed structures.
unsafe fn fill(info: &Info, c: &mut FiInfo) -> Result<(), NoMem> {
    c.caps = info.caps.bits();
    c.mode = info.mode.bits();
    c.addr_format = info.addr_format.as_u32();
    (c.src_addr, c.src_addrlen) = addr_to_c(info.src_addr.as_ref())?;
    (c.dest_addr, c.dest_addrlen) = addr_to_c(info.dest_addr.as_ref())?;
    c.handle = ptr_of(info.handle);
    // SAFETY: the sub-structure pointers are valid, per the contract.
    unsafe {
        *c.tx_attr = tx_to_c(&info.tx_attr);
        *c.rx_attr = rx_to_c(&info.rx_attr);
        *c.ep_attr = ep_to_c(&info.ep_attr)?;
        domain_to_c(&info.domain_attr, &mut *c.domain_attr)?;
        fabric_to_c(&info.fabric_attr, &mut *c.fabric_attr)?;
    }
    Ok(())
}

/// A list of `fi_info`, in the order of `infos`; null for an empty slice.
pub(crate) fn list_to_c(infos: &[Info]) -> Result<*mut FiInfo, NoMem> {
    let mut head: *mut FiInfo = ptr::null_mut();
    // Built back to front, so that each element is linked once.
    for info in infos.iter().rev() {
        match info_to_c(info) {
            Ok(c) => {
                // SAFETY: `c` is a valid, fresh fi_info.
                unsafe { (*c).next = head };
                head = c;
            }
            Err(e) => {
                // SAFETY: `head` is a list built here.
                unsafe { free_list(head) };
                return Err(e);
            }
        }
    }
    Ok(head)
}

// --------------------------------------------------------- dup and free

/// Frees the owned pointers of an `fi_ep_attr` and the structure.
///
/// # Safety
///
/// `e` is null or a `malloc`ed structure whose `auth_key` is null or
/// `malloc`ed.
unsafe fn free_ep_attr(e: *mut FiEpAttr) {
    if e.is_null() {
        return;
    }
    // SAFETY: per the contract.
    unsafe {
        mem::free((*e).auth_key);
        mem::free(e);
    }
}

/// Frees the owned pointers of an `fi_domain_attr` and the structure.
///
/// # Safety
///
/// `d` is null or a `malloc`ed structure whose `name` and `auth_key` are
/// null or `malloc`ed.
unsafe fn free_domain_attr(d: *mut FiDomainAttr) {
    if d.is_null() {
        return;
    }
    // SAFETY: per the contract.
    unsafe {
        mem::free((*d).name);
        mem::free((*d).auth_key);
        mem::free(d);
    }
}

/// Frees the owned pointers of an `fi_fabric_attr` and the structure.
///
/// # Safety
///
/// `f` is null or a `malloc`ed structure whose strings are null or
/// `malloc`ed.
unsafe fn free_fabric_attr(f: *mut FiFabricAttr) {
    if f.is_null() {
        return;
    }
    // SAFETY: per the contract.
    unsafe {
        mem::free((*f).name);
        mem::free((*f).prov_name);
        mem::free(f);
    }
}

/// Frees one `fi_info` (not `next`) with everything it owns: addresses,
/// sub-structures, their strings and keys. `handle`, `domain`, `fabric`
/// and `nic` are not owned and are left alone.
///
/// # Safety
///
/// `info` is null or a `malloc`ed `fi_info` whose owned pointers are null
/// or `malloc`ed, none of them used afterwards.
pub(crate) unsafe fn free_info(info: *mut FiInfo) {
    if info.is_null() {
        return;
    }
    // SAFETY: per the contract, each owned pointer is null or malloc'ed.
    unsafe {
        let i = &*info;
        mem::free(i.src_addr);
        mem::free(i.dest_addr);
        mem::free(i.tx_attr);
        mem::free(i.rx_attr);
        free_ep_attr(i.ep_attr);
        free_domain_attr(i.domain_attr);
        free_fabric_attr(i.fabric_attr);
        mem::free(info);
    }
}

/// Frees a whole list, following `next`.
///
/// # Safety
///
/// As [`free_info`], for every element; the list has no cycle.
pub(crate) unsafe fn free_list(mut info: *mut FiInfo) {
    while !info.is_null() {
        // SAFETY: `info` is a valid element, per the contract; `next` is
        // read before the element is freed.
        unsafe {
            let next = (*info).next;
            free_info(info);
            info = next;
        }
    }
}

/// Copies one `fi_info` structure by structure (`fi_dupinfo`): addresses,
/// keys and strings are copied, NULL sub-structures stay NULL, `next` and
/// `nic` are NULL, and `handle`, `domain` and `fabric` are the same
/// (not owned) pointers.
///
/// # Safety
///
/// `src` and its non-null pointers are valid as `<rdma/fabric.h>` says
/// (addresses and keys of the given lengths, C strings).
pub(crate) unsafe fn dup_info(src: &FiInfo) -> Result<*mut FiInfo, NoMem> {
    let out = mem::calloc_one::<FiInfo>()?;
    // SAFETY: `out` is a fresh zeroed FiInfo; the source pointers are valid
    // per the contract. The scalar fields of `src` are copied with every
    // owned pointer reset to null, and each pointer is then set only once
    // its copy exists, so on failure `out` holds only allocations made
    // here, which free_info releases.
    unsafe {
        let o = &mut *out;
        let result = (|| {
            *o = FiInfo {
                next: ptr::null_mut(),
                src_addr: ptr::null_mut(),
                dest_addr: ptr::null_mut(),
                tx_attr: ptr::null_mut(),
                rx_attr: ptr::null_mut(),
                ep_attr: ptr::null_mut(),
                domain_attr: ptr::null_mut(),
                fabric_attr: ptr::null_mut(),
                nic: ptr::null_mut(),
                ..*src
            };
            o.src_addr = mem::dup_raw(src.src_addr.cast(), src.src_addrlen)?.cast();
            if o.src_addr.is_null() {
                o.src_addrlen = 0;
            }
            o.dest_addr = mem::dup_raw(src.dest_addr.cast(), src.dest_addrlen)?.cast();
            if o.dest_addr.is_null() {
                o.dest_addrlen = 0;
            }
            if let Some(t) = src.tx_attr.as_ref() {
                o.tx_attr = mem::calloc_one()?;
                *o.tx_attr = *t;
            }
            if let Some(r) = src.rx_attr.as_ref() {
                o.rx_attr = mem::calloc_one()?;
                *o.rx_attr = *r;
            }
            if let Some(e) = src.ep_attr.as_ref() {
                o.ep_attr = mem::calloc_one()?;
                let key = mem::dup_raw(e.auth_key, e.auth_key_size)?;
                *o.ep_attr = FiEpAttr {
                    auth_key: key,
                    ..*e
                };
            }
            if let Some(d) = src.domain_attr.as_ref() {
                o.domain_attr = mem::calloc_one()?;
                let od = &mut *o.domain_attr;
                od.name = mem::dup_c_str(d.name)?;
                od.auth_key = mem::dup_raw(d.auth_key, d.auth_key_size)?;
                *od = FiDomainAttr {
                    name: od.name,
                    auth_key: od.auth_key,
                    ..*d
                };
            }
            if let Some(f) = src.fabric_attr.as_ref() {
                o.fabric_attr = mem::calloc_one()?;
                let of = &mut *o.fabric_attr;
                of.name = mem::dup_c_str(f.name)?;
                of.prov_name = mem::dup_c_str(f.prov_name)?;
                *of = FiFabricAttr {
                    name: of.name,
                    prov_name: of.prov_name,
                    ..*f
                };
            }
            Ok(())
        })();
        if let Err(e) = result {
            free_info(out);
            return Err(e);
        }
    }
    Ok(out)
}
