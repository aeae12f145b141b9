//! `c/srx.c`: shared receive contexts (`fi_srx_context`) through the C
//! ABI, on this library's tcp and shm RDM endpoints: receives posted on
//! the context with every receive call (`fi_recv`, `fi_recvv`,
//! `fi_recvmsg` with `FI_MULTI_RECV`, `fi_trecv`, `fi_trecvmsg` directed),
//! completions on the CQ of the endpoint each message arrived at with its
//! source, `fi_cancel`, `fi_setopt` / `fi_getopt`, the refusals, and
//! `fi_close` refusing a context still bound (`-FI_EBUSY`).
//!
//! Debian's libfabric 1.17 has no shared receive context on RDM
//! endpoints of tcp (`tcp;ofi_rxm` answers `max_ep_srx_ctx: 0`; only its
//! MSG endpoints have them) nor of shm, so the checks run on this library
//! only; on Debian's the program must find FI_SHARED_CONTEXT refused and
//! `max_ep_srx_ctx` 0 (it prints `srx: not offered`).

mod common;

use common::Stage;

const TEST: &str = "srx";
const SOURCE: &str = include_str!("c/srx.c");

/// What a full run prints.
const LINES: &str = "srx: opened, bound to two endpoints, busy
srx: fi_recv, fi_recvv, fi_recvmsg
srx: multi-recv
srx: tagged, directed
srx: cancel
srx: refusals
srx: closed
";

#[test]
fn shared_receive_contexts_through_the_c_abi() {
    let Some(stage) = Stage::new(TEST, true) else {
        return;
    };
    let system = common::system_libfabric().is_some();
    let exe = if system {
        stage.compile_system("srx", SOURCE)
    } else {
        stage.compile("srx", SOURCE)
    };
    for prov in ["tcp", "shm"] {
        let ours = if system {
            stage.run_on(&exe, &[prov], true)
        } else {
            stage.run(&exe, &[prov], false)
        };
        common::assert_ok(&format!("srx on this library's {prov}"), &ours);
        assert_eq!(common::text(&ours.stdout), LINES, "{prov}");
    }
    if !system {
        common::skip(
            TEST,
            "Debian's libfabric.so / libfabric.so.1 are not installed: its refusal is not checked",
        );
        return;
    }
    for prov in ["tcp", "shm"] {
        let debian = stage.run_on(&exe, &[prov], false);
        common::assert_ok(&format!("srx on Debian's {prov}"), &debian);
        assert_eq!(
            common::text(&debian.stdout),
            "srx: not offered\n",
            "Debian's {prov} RDM endpoints offer FI_SHARED_CONTEXT now: compare the runs"
        );
    }
}
