//! libfabric's C interface over the `fabric` crate: a library that C and
//! C++ programs written against libfabric 1.17's `<rdma/fabric.h>` can use
//! in place of `libfabric.so.1`.
//!
//! # Using it in place of libfabric
//!
//! ```text
//! cargo build --release -p fabric-capi
//! mkdir -p /opt/fabric-rs/lib
//! cp target/release/libfabric_capi.so /opt/fabric-rs/lib/libfabric.so.1
//! ln -s libfabric.so.1 /opt/fabric-rs/lib/libfabric.so
//!
//! # an existing binary, e.g. Debian's fi_info:
//! LD_LIBRARY_PATH=/opt/fabric-rs/lib fi_info
//! # a new program, against Debian's libfabric-dev headers:
//! cc app.c -I/usr/include -L/opt/fabric-rs/lib -lfabric -Wl,-rpath,/opt/fabric-rs/lib
//! ```
//!
//! The cdylib's soname is `libfabric.so.1` and it exports the default
//! symbol versions of libfabric 1.17 (`objdump -T`):
//!
//! | symbol | version |
//! |---|---|
//! | [`fi_getparams`], [`fi_freeparams`], [`fi_strerror`], [`fi_tostr`], [`fi_version`] | `FABRIC_1.0` |
//! | [`fi_fabric`] | `FABRIC_1.1` |
//! | [`fi_getinfo`], [`fi_freeinfo`], [`fi_dupinfo`] | `FABRIC_1.3` |
//! | [`fi_tostr_r`] | `FABRIC_1.4` |
//! | [`fi_open`] (`-FI_ENOSYS` for now) | `FABRIC_1.5` |
//!
//! That covers everything Debian's `fi_info` imports; `fi_allocinfo` is
//! the header's inline `fi_dupinfo(NULL)`. Old versions (such as
//! `fi_getinfo@FABRIC_1.0`) are not exported: binaries built against
//! libfabric 1.3 or later use only the defaults. The staticlib
//! (`libfabric_capi.a`) has the same functions under their C names.
//!
//! The answers are those of `fabric::Registry::global()`, the registry of
//! the providers compiled in through this crate's features (`tcp`, `shm`,
//! `verbs`), filtered by `FI_PROVIDER` as in libfabric: a C program gets
//! the same answers as `fabric info` for the same hints. With no provider
//! compiled in, `fi_getinfo` returns `-FI_ENOSYS`.
//!
//! # Structures
//!
//! [`types`] declares `fi_info`, `fi_tx_attr`, `fi_rx_attr`, `fi_ep_attr`,
//! `fi_domain_attr`, `fi_fabric_attr` and `fi_param` field for field as
//! 1.17's header does (`tests/layout.rs` compares every size and offset with
//! the installed header). Values cross unchanged: flag bits and enumeration
//! values are libfabric's in the Rust model too.
//!
//! # Ownership
//!
//! - Every `fi_info` this library returns ([`fi_getinfo`], [`fi_dupinfo`],
//!   `fi_allocinfo`) is freed by [`fi_freeinfo`], which frees the whole
//!   `next` list and, for each element, its addresses, sub-structures,
//!   strings (`domain_attr->name`, `fabric_attr->name`, `prov_name`) and
//!   authorization keys. `handle`, `domain_attr->domain`,
//!   `fabric_attr->fabric` and `nic` are references, never freed.
//! - All of it comes from the C allocator (`calloc` / `malloc`), so an
//!   application may replace any of these pointers with its own `malloc`ed
//!   or `strdup`ed value before `fi_freeinfo`, as `fi_info` does with
//!   `hints->fabric_attr->prov_name`.
//! - `fi_dupinfo(info)` copies one element (its `next` is NULL) deeply;
//!   NULL sub-structures stay NULL. `fi_dupinfo(NULL)` is `fi_allocinfo`:
//!   every sub-structure allocated and zeroed.
//! - Results are always fully allocated; `nic` is always NULL.
//! - [`fi_tostr`] returns a per-thread buffer that the thread's next call
//!   overwrites; [`fi_getparams`] an array freed by [`fi_freeparams`].
//!
//! # Reading hints
//!
//! Hints are read into a [`fabric::Info`]: a NULL sub-structure counts as a
//! zeroed one; strings must be UTF-8; enumerations must hold values libfabric
//! 1.17 defines; addresses are read from exactly `src_addrlen` /
//! `dest_addrlen` bytes and decoded by `addr_format` (by their `sa_family`
//! field when it is `FI_FORMAT_UNSPEC`), never past the given length. An
//! address that fi_getinfo(3) says is ignored (`src_addr` with
//! `FI_SOURCE`; `dest_addr` when node or service is given without
//! `FI_SOURCE`) is not read at all. A hint that cannot be read makes
//! `fi_getinfo` return `-FI_EINVAL`; the rules of the call itself are the
//! `fabric` crate's (see the README: where libfabric answers `FI_ENODATA`
//! for invalid requests, this library names the problem with `FI_EINVAL` or
//! `FI_EBADFLAGS`).
//!
//! # Symbol versions
//!
//! Each function is defined under an internal name
//! (`fabric_capi_fi_getinfo`, also exported, unversioned) and a `.symver`
//! directive (`src/symver.rs`) adds its C name with its default version.
//! The version nodes, `FABRIC_1.0` to `FABRIC_1.6`, each inheriting the
//! previous one, come from `libfabric.map`, which `build.rs` passes to the
//! cdylib link only, with the soname. rustc links every cdylib with a
//! version script of its own, which GNU ld refuses to combine with named
//! nodes, so `build.rs` links the cdylib with lld (rustup's, the default of
//! rustc 1.90 and later on x86_64 Linux, or one on the `PATH`); without lld
//! it builds an unversioned library with plain C names and warns.
//!
//! # Panics
//!
//! No panic crosses into C: every exported function runs its body under
//! `catch_unwind` and returns `-FI_EOTHER` (or NULL) if it panics.
//!
//! # Opening objects from C
//!
//! The data path of libfabric programs is `static inline` functions of the
//! headers that call through each object's operation tables
//! (`ep->msg->send(...)`). [`fi_fabric`] opens the first object; every
//! other is created by an ops call of its parent, as in libfabric. Each is
//! a `#[repr(C)]` structure starting with libfabric 1.17's descriptor
//! (`struct fid_ep`, ...) followed by the Rust object it wraps; the tables
//! are statics of `extern "C"` trampolines that check the `fid`, call the
//! trait method under the panic guard and return `Error::code()`. See
//! [`obj`] for what is implemented: fabric, domain, MR, endpoint (msg and
//! tagged data path, RMA, atomics, CM, options), passive endpoint, CQ
//! (every format, readerr), AV, EQ (incl. `fi_eq_write`), counter; wait sets, poll sets, scalable and
//! shared contexts answer `-FI_ENOSYS`. Debian's `fi_pingpong` and Open MPI's
//! OFI MTL run on it (`tests/fi_pingpong.rs`, `tests/mpi.rs`).
//!
//! Data operations (`fi_send`, `fi_recv`, `fi_tsend`, `fi_cq_read`, ...)
//! make one call through the provider's trait object, allocate nothing and
//! take no lock; the short forms use the endpoint's default flags
//! (`tx_attr.op_flags` / `rx_attr.op_flags` of the opened endpoint).

mod convert;
mod getinfo;
mod mem;
mod misc;
pub mod obj;
mod params;
mod symver;
mod tostr;
pub mod types;

pub use getinfo::{fi_dupinfo, fi_freeinfo, fi_getinfo};
pub use misc::{fi_fabric, fi_open, fi_strerror, fi_version};
pub use params::{fi_freeparams, fi_getparams};
pub use symver::EXPORTS;
pub use tostr::{fi_tostr, fi_tostr_r, info_text};

/// Runs the body of an exported function, turning a panic into `on_panic`
/// so that no unwinding reaches C. Inlined into every trampoline: on the
/// path that does not panic it costs nothing, where a call would spill
/// the closure's captures to memory and read them back.
#[inline(always)]
fn guard<R>(on_panic: R, body: impl FnOnce() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(on_panic)
}

#[cfg(test)]
mod tests;
