//! `fi_tostr` and `fi_tostr_r`: text for C values, in the form of
//! `fabric info -v` (`Info::verbose`).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use fabric::{
    AddrFormat, AvType, Caps, EpType, Info, Mode, MrMode, MsgOrder, OpFlags, Progress, Protocol,
    Threading, UnknownName,
};

use crate::convert::{self, AddrUse};
use crate::guard;
use crate::symver::symver;
use crate::types::fi_type::*;
use crate::types::{FiDomainAttr, FiEpAttr, FiFabricAttr, FiInfo, FiRxAttr, FiTxAttr};

/// What `fi_tostr(..., FI_TYPE_VERSION)` says: this library, and the
/// libfabric API it implements.
pub(crate) const VERSION_TEXT: &str = concat!(
    "fabric-rs ",
    env!("CARGO_PKG_VERSION"),
    " (libfabric API 1.17)"
);

/// The names of the C `enum fi_type` values this library does not print.
fn unsupported_name(ty: u32) -> Option<&'static str> {
    Some(match ty {
        FI_TYPE_ATOMIC_TYPE => "FI_TYPE_ATOMIC_TYPE",
        FI_TYPE_ATOMIC_OP => "FI_TYPE_ATOMIC_OP",
        FI_TYPE_EQ_EVENT => "FI_TYPE_EQ_EVENT",
        FI_TYPE_CQ_EVENT_FLAGS => "FI_TYPE_CQ_EVENT_FLAGS",
        FI_TYPE_OP_TYPE => "FI_TYPE_OP_TYPE",
        FI_TYPE_FID => "FI_TYPE_FID",
        FI_TYPE_COLLECTIVE_OP => "FI_TYPE_COLLECTIVE_OP",
        FI_TYPE_HMEM_IFACE => "FI_TYPE_HMEM_IFACE",
        FI_TYPE_CQ_FORMAT => "FI_TYPE_CQ_FORMAT",
        FI_TYPE_LOG_LEVEL => "FI_TYPE_LOG_LEVEL",
        FI_TYPE_LOG_SUBSYS => "FI_TYPE_LOG_SUBSYS",
        _ => return None,
    })
}

/// Flag names separated by `", "`, as inside the brackets of
/// `fi_tostr(FI_TYPE_INFO)`; `none` for the empty set.
fn names(list: Vec<String>, none: &str) -> String {
    if list.is_empty() {
        none.to_string()
    } else {
        list.join(", ")
    }
}

/// The FI_ name of an enumeration value, or `Unknown` for a value this
/// library does not know.
fn enum_name<T: TryFrom<u32, Error = UnknownName> + std::fmt::Display>(v: u32) -> String {
    T::try_from(v).map_or_else(|_| format!("Unknown ({v})"), |e| e.to_string())
}

/// One block of the verbose form of `info` (`fi_tx_attr:` and its lines),
/// moved to the left margin.
fn section(info: &Info, header: &str) -> String {
    let text = info.verbose().to_string();
    let head = format!("    {header}:");
    let mut out = String::new();
    let mut lines = text.lines().skip_while(|l| *l != head);
    if lines.next().is_some() {
        out.push_str(header);
        out.push_str(":\n");
        for line in lines.take_while(|l| l.starts_with("        ")) {
            out.push_str(&line[4..]);
            out.push('\n');
        }
    }
    out
}

/// Reads a `T` from `data`.
///
/// # Safety
///
/// `data` points to a valid `T` (any alignment).
unsafe fn read<T: Copy>(data: *const c_void) -> T {
    // SAFETY: per the contract; read_unaligned accepts any alignment.
    unsafe { ptr::read_unaligned(data.cast::<T>()) }
}

/// The text for `data` of type `ty`.
///
/// # Safety
///
/// `data` is null or points to the C type `ty` names, valid as
/// `<rdma/fabric.h>` says (for structures, their pointers too).
unsafe fn render(data: *const c_void, ty: u32) -> String {
    if ty == FI_TYPE_VERSION {
        return VERSION_TEXT.to_string();
    }
    if let Some(name) = unsupported_name(ty) {
        return format!("fi_tostr: {name} ({ty}) is not supported by this library");
    }
    if ty > FI_TYPE_LOG_SUBSYS {
        return format!("fi_tostr: unknown type {ty}");
    }
    if data.is_null() {
        return "(null)".to_string();
    }
    let broken =
        |what: &str, e: fabric::Error| format!("({what} that cannot be shown: {})", e.detail());
    // SAFETY: in every arm, `data` points to the type `ty` names, per the
    // contract.
    unsafe {
        match ty {
            FI_TYPE_INFO => match convert::info_from_c(&*data.cast::<FiInfo>(), AddrUse::ALL) {
                Ok(info) => format!("{}\n", info.verbose()),
                Err(e) => broken("fi_info", e) + "\n",
            },
            FI_TYPE_EP_TYPE => enum_name::<EpType>(read(data)),
            FI_TYPE_CAPS => names(Caps::from_bits_retain(read(data)).to_names(), ""),
            FI_TYPE_OP_FLAGS => names(OpFlags::from_bits_retain(read(data)).to_names(), ""),
            FI_TYPE_ADDR_FORMAT => enum_name::<AddrFormat>(read(data)),
            FI_TYPE_TX_ATTR => {
                let info = Info {
                    tx_attr: convert::tx_from_c(&read::<FiTxAttr>(data)),
                    ..Info::default()
                };
                section(&info, "fi_tx_attr")
            }
            FI_TYPE_RX_ATTR => {
                let info = Info {
                    rx_attr: convert::rx_from_c(&read::<FiRxAttr>(data)),
                    ..Info::default()
                };
                section(&info, "fi_rx_attr")
            }
            FI_TYPE_EP_ATTR => match convert::ep_from_c(&*data.cast::<FiEpAttr>()) {
                Ok(ep_attr) => section(
                    &Info {
                        ep_attr,
                        ..Info::default()
                    },
                    "fi_ep_attr",
                ),
                Err(e) => broken("fi_ep_attr", e),
            },
            FI_TYPE_DOMAIN_ATTR => match convert::domain_from_c(&*data.cast::<FiDomainAttr>()) {
                Ok(domain_attr) => section(
                    &Info {
                        domain_attr,
                        ..Info::default()
                    },
                    "fi_domain_attr",
                ),
                Err(e) => broken("fi_domain_attr", e),
            },
            FI_TYPE_FABRIC_ATTR => match convert::fabric_from_c(&*data.cast::<FiFabricAttr>()) {
                Ok(fabric_attr) => section(
                    &Info {
                        fabric_attr,
                        ..Info::default()
                    },
                    "fi_fabric_attr",
                ),
                Err(e) => broken("fi_fabric_attr", e),
            },
            FI_TYPE_THREADING => enum_name::<Threading>(read(data)),
            FI_TYPE_PROGRESS => enum_name::<Progress>(read(data)),
            FI_TYPE_PROTOCOL => enum_name::<Protocol>(read(data)),
            FI_TYPE_MSG_ORDER => names(
                MsgOrder::from_bits_retain(read(data)).to_names(),
                "FI_ORDER_NONE",
            ),
            FI_TYPE_MODE => names(Mode::from_bits_retain(read(data)).to_names(), ""),
            FI_TYPE_AV_TYPE => enum_name::<AvType>(read(data)),
            FI_TYPE_MR_MODE => names(
                MrMode::from_bits_retain(read::<c_int>(data) as u32).to_names(),
                "",
            ),
            _ => format!("fi_tostr: unknown type {ty}"),
        }
    }
}

/// The initial size of a thread's `fi_tostr` buffer: room for any text but
/// an unusually long one, so that the returned pointer stays the same from
/// call to call, as libfabric's fixed buffer does.
const BUFFER_SIZE: usize = 8192;

thread_local! {
    /// The buffer `fi_tostr` returns, one per thread.
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `char *fi_tostr(const void *data, enum fi_type datatype)`
/// (`fi_tostr@@FABRIC_1.0`).
///
/// The text for `data`: `FI_TYPE_INFO` is the `fabric info -v` form of one
/// `fi_info` (not its list); flag sets are their FI_ names separated by
/// `", "`; enumerations their FI_ name; `FI_TYPE_VERSION` (which ignores
/// `data`) names this library and its API version. A NULL `data` gives
/// `(null)`; types this library does not print give a sentence saying so.
///
/// The string lives in a buffer of the calling thread, overwritten by the
/// thread's next call, as in libfabric (the buffer only moves for texts
/// longer than 8 KiB). NULL only if the thread is exiting or on an
/// internal error.
///
/// # Safety
///
/// `data` is null or points to the C type `datatype` names, valid as
/// `<rdma/fabric.h>` says.
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_tostr"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_tostr(data: *const c_void, datatype: u32) -> *mut c_char {
    symver!("fi_tostr", "FABRIC_1.0");
    guard(ptr::null_mut(), || {
        // SAFETY: per the contract.
        let text = unsafe { render(data, datatype) };
        BUFFER
            .try_with(|buf| {
                let mut buf = buf.borrow_mut();
                buf.clear();
                buf.reserve(BUFFER_SIZE.max(text.len() + 1));
                buf.extend(text.bytes().map(|b| if b == 0 { b' ' } else { b }));
                buf.push(0);
                // The vector stays in the thread-local until the next call.
                buf.as_mut_ptr().cast::<c_char>()
            })
            .unwrap_or(ptr::null_mut())
    })
}

/// `char *fi_tostr_r(char *buf, size_t len, const void *data, enum fi_type
/// datatype)` (`fi_tostr_r@@FABRIC_1.4`).
///
/// As [`fi_tostr`], into `buf`: at most `len - 1` bytes of the text and a
/// terminating NUL. Returns `buf`, or NULL when `buf` is NULL or `len` is 0.
///
/// # Safety
///
/// `buf` is null or writable for `len` bytes; `data` as for [`fi_tostr`].
#[cfg_attr(fabric_symver, unsafe(export_name = "fabric_capi_fi_tostr_r"))]
#[cfg_attr(not(fabric_symver), unsafe(no_mangle))]
#[inline(never)]
pub unsafe extern "C" fn fi_tostr_r(
    buf: *mut c_char,
    len: usize,
    data: *const c_void,
    datatype: u32,
) -> *mut c_char {
    symver!("fi_tostr_r", "FABRIC_1.4");
    guard(ptr::null_mut(), || {
        if buf.is_null() || len == 0 {
            return ptr::null_mut();
        }
        // SAFETY: per the contract.
        let text = unsafe { render(data, datatype) };
        let bytes = text.as_bytes();
        let n = bytes.len().min(len - 1);
        // SAFETY: `buf` is writable for `len > n` bytes, per the contract,
        // and cannot overlap the fresh `text`.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        buf
    })
}
