//! The `static inline` functions of rdma-core's headers that the verbs
//! provider uses, in Rust.
//!
//! In C these are inlined into the caller; a loaded library has no symbol
//! for them. The data-path ones ([`ibv_post_send`], [`ibv_post_recv`],
//! [`ibv_poll_cq`], [`ibv_req_notify_cq`], [`ibv_post_srq_recv`]) are a load
//! of a function pointer from the context's ops table (`ibv_context.ops`,
//! filled by the hardware driver) and one indirect call: no C wrapper, no
//! lookup. The others reach the extended context (`struct verbs_context`)
//! the way the headers do.
//!
//! Each function has the C one's contract: the pointers must be valid
//! objects of the same open device context, used as the verbs man pages
//! say (ibv_post_send(3), ibv_poll_cq(3), ...). Return values are the C
//! ones: 0 or a positive errno for the posting calls, the number of
//! completions or a negative value for [`ibv_poll_cq`].

use std::os::raw::{c_int, c_void};

use crate::ffi::{
    _compat_ibv_port_attr, RdmaCore, ibv_context, ibv_cq, ibv_gid_entry, ibv_port_attr, ibv_qp,
    ibv_recv_wr, ibv_send_wr, ibv_srq, ibv_wc, rdma_cm_id, verbs_context,
};

/// Posts a list of send work requests to a QP's send queue
/// (ibv_post_send(3)); 0, or an errno with `*bad_wr` naming the first
/// request that was not posted (`ENOMEM`: the send queue is full).
///
/// # Safety
///
/// `qp` is a live QP; `wr` a valid, `next`-linked list whose scatter lists
/// stay valid for the call; `bad_wr` a valid out-pointer.
#[inline]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller guarantees `qp` is live, so its context is too,
    // and the driver's op takes exactly these arguments.
    unsafe {
        match (*(*qp).context).ops.post_send {
            Some(f) => f(qp, wr, bad_wr),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// Posts a list of receive work requests to a QP's receive queue
/// (ibv_post_recv(3)); 0 or an errno (`ENOMEM`: the queue is full).
///
/// # Safety
///
/// As [`ibv_post_send`].
#[inline]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as in `ibv_post_send`.
    unsafe {
        match (*(*qp).context).ops.post_recv {
            Some(f) => f(qp, wr, bad_wr),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// Posts receive work requests to a shared receive queue
/// (ibv_post_srq_recv(3)).
///
/// # Safety
///
/// As [`ibv_post_send`], with `srq` a live SRQ.
#[inline]
pub unsafe fn ibv_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as in `ibv_post_send`.
    unsafe {
        match (*(*srq).context).ops.post_srq_recv {
            Some(f) => f(srq, wr, bad_wr),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// Polls up to `num_entries` completions into `wc` (ibv_poll_cq(3));
/// returns how many, or a negative value on error.
///
/// # Safety
///
/// `cq` is a live CQ; `wc` points to at least `num_entries` writable
/// entries.
#[inline]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller guarantees `cq` is live and `wc` large enough.
    unsafe {
        match (*(*cq).context).ops.poll_cq {
            Some(f) => f(cq, num_entries, wc),
            None => -libc::EOPNOTSUPP,
        }
    }
}

/// Asks for a completion event on the CQ's channel at the next completion
/// (`solicited_only` != 0: the next solicited one) (ibv_req_notify_cq(3)).
///
/// # Safety
///
/// `cq` is a live CQ created with a completion channel.
#[inline]
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the caller guarantees `cq` is live.
    unsafe {
        match (*(*cq).context).ops.req_notify_cq {
            Some(f) => f(cq, solicited_only),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// The value of `ibv_context.abi_compat` that marks an extended context
/// (`__VERBS_ABI_IS_EXTENDED`: all bits set).
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// The extended context around `ctx`, or null for a legacy driver
/// (`verbs_get_ctx`).
///
/// # Safety
///
/// `ctx` is a live device context.
#[inline]
pub unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: `ctx` is live; an extended context embeds the ibv_context
    // as its last member, so stepping back by that member's offset stays
    // inside the same allocation.
    unsafe {
        if (*ctx).abi_compat != VERBS_ABI_IS_EXTENDED {
            return std::ptr::null_mut();
        }
        ctx.cast::<u8>()
            .sub(std::mem::offset_of!(verbs_context, context))
            .cast::<verbs_context>()
    }
}

/// Queries a port's attributes (the `ibv_query_port` macro of
/// `<infiniband/verbs.h>`): through the extended context with the full
/// structure size when the driver supports it, else through the exported
/// compat function, which fills the older, shorter layout.
///
/// # Safety
///
/// `ctx` is a live device context; `attr` is writable.
pub unsafe fn ibv_query_port(
    lib: &RdmaCore,
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: `ctx` is live; the extended context is only used when its
    // recorded size covers the `query_port` member (the headers'
    // `verbs_get_ctx_op` check).
    unsafe {
        let vctx = verbs_get_ctx(ctx);
        if !vctx.is_null() {
            let needed =
                size_of::<verbs_context>() - std::mem::offset_of!(verbs_context, query_port);
            if (*vctx).sz >= needed {
                if let Some(f) = (*vctx).query_port {
                    return f(ctx, port_num, attr, size_of::<ibv_port_attr>());
                }
            }
        }
        attr.write_bytes(0, 1);
        lib.ibv_query_port(ctx, port_num, attr.cast::<_compat_ibv_port_attr>())
    }
}

/// Reads one GID table entry with its type (RoCE v1 / v2, IB) and netdev
/// (`ibv_query_gid_ex`); 0 or an errno.
///
/// # Safety
///
/// `ctx` is a live device context; `entry` is writable.
pub unsafe fn ibv_query_gid_ex(
    lib: &RdmaCore,
    ctx: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
) -> c_int {
    // SAFETY: forwarded under the caller's guarantees, with the entry size
    // of these bindings (the library accepts sizes it knows).
    unsafe {
        lib._ibv_query_gid_ex(
            ctx,
            port_num,
            gid_index,
            entry,
            0,
            size_of::<ibv_gid_entry>(),
        )
    }
}

/// The local address of an rdma_cm id (`rdma_get_local_addr`).
///
/// # Safety
///
/// `id` is a live rdma_cm id.
#[inline]
pub unsafe fn rdma_get_local_addr(id: *mut rdma_cm_id) -> *mut libc::sockaddr {
    // SAFETY: `id` is live; taking the address of a union member reads
    // nothing.
    unsafe { std::ptr::addr_of_mut!((*id).route.addr.__bindgen_anon_1.src_addr).cast() }
}

/// The peer address of an rdma_cm id (`rdma_get_peer_addr`).
///
/// # Safety
///
/// `id` is a live rdma_cm id.
#[inline]
pub unsafe fn rdma_get_peer_addr(id: *mut rdma_cm_id) -> *mut libc::sockaddr {
    // SAFETY: as in `rdma_get_local_addr`.
    unsafe { std::ptr::addr_of_mut!((*id).route.addr.__bindgen_anon_2.dst_addr).cast() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extended_context_ends_with_the_plain_one() {
        // verbs_get_ctx relies on `context` being the last member.
        assert_eq!(
            std::mem::offset_of!(verbs_context, context) + size_of::<ibv_context>(),
            size_of::<verbs_context>()
        );
    }

    #[test]
    fn a_legacy_context_has_no_extension() {
        // SAFETY: an all-zero ibv_context is a valid value of the struct
        // (pointers null, ops absent); only `abi_compat` is read.
        let mut ctx: ibv_context = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is a live value for the call.
        assert!(unsafe { verbs_get_ctx(&mut ctx) }.is_null());
    }
}

/// The Rust inlines against the C ones of the headers (compiled from
/// `csrc/inline_shim.c` with the `bindgen` feature): both must call the
/// same driver op with the same arguments and return its result. Runs
/// without a device, on a fake context whose ops record their calls.
#[cfg(all(test, feature = "bindgen"))]
#[allow(clippy::undocumented_unsafe_blocks)]
mod c_equivalence {
    use std::sync::Mutex;

    use super::*;
    use crate::ffi::ibv_srq;

    unsafe extern "C" {
        fn fabric_sys_c_post_send(
            qp: *mut ibv_qp,
            wr: *mut ibv_send_wr,
            bad: *mut *mut ibv_send_wr,
        ) -> c_int;
        fn fabric_sys_c_post_recv(
            qp: *mut ibv_qp,
            wr: *mut ibv_recv_wr,
            bad: *mut *mut ibv_recv_wr,
        ) -> c_int;
        fn fabric_sys_c_post_srq_recv(
            srq: *mut ibv_srq,
            wr: *mut ibv_recv_wr,
            bad: *mut *mut ibv_recv_wr,
        ) -> c_int;
        fn fabric_sys_c_poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int;
        fn fabric_sys_c_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
        fn fabric_sys_c_verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context;
    }

    /// (op, first, second, third argument) of the last fake call.
    static LAST: Mutex<Option<(&'static str, usize, usize, usize)>> = Mutex::new(None);

    fn record(op: &'static str, a: usize, b: usize, c: usize) {
        *LAST
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((op, a, b, c));
    }

    fn take() -> Option<(&'static str, usize, usize, usize)> {
        LAST.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    unsafe extern "C" fn fake_post_send(
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad: *mut *mut ibv_send_wr,
    ) -> c_int {
        record("post_send", qp as usize, wr as usize, bad as usize);
        11
    }
    unsafe extern "C" fn fake_post_recv(
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        record("post_recv", qp as usize, wr as usize, bad as usize);
        12
    }
    unsafe extern "C" fn fake_post_srq_recv(
        srq: *mut ibv_srq,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        record("post_srq_recv", srq as usize, wr as usize, bad as usize);
        13
    }
    unsafe extern "C" fn fake_poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
        record("poll_cq", cq as usize, n as usize, wc as usize);
        3
    }
    unsafe extern "C" fn fake_req_notify_cq(cq: *mut ibv_cq, solicited: c_int) -> c_int {
        record("req_notify_cq", cq as usize, solicited as usize, 0);
        14
    }

    #[test]
    fn rust_and_c_inlines_call_the_same_ops() {
        // All-zero structures are valid values of these plain C structs.
        let mut ctx: ibv_context = unsafe { std::mem::zeroed() };
        ctx.ops.post_send = Some(fake_post_send);
        ctx.ops.post_recv = Some(fake_post_recv);
        ctx.ops.post_srq_recv = Some(fake_post_srq_recv);
        ctx.ops.poll_cq = Some(fake_poll_cq);
        ctx.ops.req_notify_cq = Some(fake_req_notify_cq);
        let mut qp: ibv_qp = unsafe { std::mem::zeroed() };
        qp.context = &mut ctx;
        let mut cq: ibv_cq = unsafe { std::mem::zeroed() };
        cq.context = &mut ctx;
        let mut srq: ibv_srq = unsafe { std::mem::zeroed() };
        srq.context = &mut ctx;
        let mut swr = ibv_send_wr::default();
        let mut rwr: ibv_recv_wr = unsafe { std::mem::zeroed() };
        let mut sbad = std::ptr::null_mut();
        let mut rbad = std::ptr::null_mut();
        let mut wcs = [ibv_wc::default(); 4];

        // The fakes only record their arguments; every pointer is valid.
        let pairs: [(c_int, c_int); 6] = unsafe {
            [
                (
                    ibv_post_send(&mut qp, &mut swr, &mut sbad),
                    fabric_sys_c_post_send(&mut qp, &mut swr, &mut sbad),
                ),
                (
                    ibv_post_recv(&mut qp, &mut rwr, &mut rbad),
                    fabric_sys_c_post_recv(&mut qp, &mut rwr, &mut rbad),
                ),
                (
                    ibv_post_srq_recv(&mut srq, &mut rwr, &mut rbad),
                    fabric_sys_c_post_srq_recv(&mut srq, &mut rwr, &mut rbad),
                ),
                (
                    ibv_poll_cq(&mut cq, 4, wcs.as_mut_ptr()),
                    fabric_sys_c_poll_cq(&mut cq, 4, wcs.as_mut_ptr()),
                ),
                (
                    ibv_req_notify_cq(&mut cq, 1),
                    fabric_sys_c_req_notify_cq(&mut cq, 1),
                ),
                (
                    ibv_req_notify_cq(&mut cq, 0),
                    fabric_sys_c_req_notify_cq(&mut cq, 0),
                ),
            ]
        };
        for (rust, c) in pairs {
            assert_eq!(rust, c);
        }
        // Each call again, comparing the recorded arguments.
        macro_rules! same {
            ($rust:expr, $c:expr) => {{
                let r = unsafe { $rust };
                let rl = take();
                let c = unsafe { $c };
                let cl = take();
                assert_eq!(r, c);
                assert!(rl.is_some());
                assert_eq!(rl, cl);
            }};
        }
        same!(
            ibv_post_send(&mut qp, &mut swr, &mut sbad),
            fabric_sys_c_post_send(&mut qp, &mut swr, &mut sbad)
        );
        same!(
            ibv_post_recv(&mut qp, &mut rwr, &mut rbad),
            fabric_sys_c_post_recv(&mut qp, &mut rwr, &mut rbad)
        );
        same!(
            ibv_post_srq_recv(&mut srq, &mut rwr, &mut rbad),
            fabric_sys_c_post_srq_recv(&mut srq, &mut rwr, &mut rbad)
        );
        same!(
            ibv_poll_cq(&mut cq, 4, wcs.as_mut_ptr()),
            fabric_sys_c_poll_cq(&mut cq, 4, wcs.as_mut_ptr())
        );
        same!(
            ibv_req_notify_cq(&mut cq, 1),
            fabric_sys_c_req_notify_cq(&mut cq, 1)
        );
    }

    #[test]
    fn rust_and_c_find_the_same_extended_context() {
        let mut v: verbs_context = unsafe { std::mem::zeroed() };
        v.context.abi_compat = VERBS_ABI_IS_EXTENDED;
        let ctx: *mut ibv_context = &mut v.context;
        let (r, c) = unsafe { (verbs_get_ctx(ctx), fabric_sys_c_verbs_get_ctx(ctx)) };
        assert_eq!(r, c);
        assert_eq!(r, &raw mut v);
        unsafe { (*ctx).abi_compat = std::ptr::null_mut() };
        let (r, c) = unsafe { (verbs_get_ctx(ctx), fabric_sys_c_verbs_get_ctx(ctx)) };
        assert!(r.is_null() && c.is_null());
    }
}
