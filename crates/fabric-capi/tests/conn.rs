//! `c/conn.c` on Debian's libfabric and on this library: the EQ connection
//! flow of tcp MSG endpoints (a passive endpoint, `FI_CONNREQ` read with
//! `FI_PEEK` and then taken, with the same `fi_info`, used by
//! `fi_endpoint` / `fi_accept`; private data both ways; `FI_CONNECTED` on
//! both sides; `FI_SHUTDOWN`), messages, RMA write / `fi_writedata` (remote
//! CQ data at the target) / read over the connection, four threads sending
//! on one `FI_THREAD_SAFE` endpoint and reading its CQ at once (every
//! message received once, intact), and an RDM address vector (a C
//! `sockaddr_in` array, `fi_av_insertsvc`, `fi_av_lookup`,
//! `fi_av_straddr`, `fi_av_remove`). Built once against libfabric-dev's
//! headers; both runs pass its checks and print the same lines. Where
//! fi_eq(3) and fi_av(3) leave the outcome open and Debian's libfabric
//! loses or keeps something (a connection request read into a too small
//! buffer is truncated and consumed there; a removed address still looks
//! up), this library's stricter answer is checked with `ours` only.

mod common;

use common::Stage;

const TEST: &str = "conn";
const SOURCE: &str = include_str!("c/conn.c");

#[test]
fn connections_and_address_vectors_behave_as_on_debian_libfabric() {
    let Some(stage) = Stage::for_both(TEST) else {
        return;
    };
    let exe = stage.compile_system("conn", SOURCE);
    let debian = stage.run_on(&exe, &[], false);
    common::assert_ok("conn on Debian's libfabric", &debian);
    let ours = stage.run_on(&exe, &["ours"], true);
    common::assert_ok("conn on this library", &ours);
    assert_eq!(
        common::text(&ours.stdout),
        common::text(&debian.stdout),
        "the two runs print different results"
    );
    assert!(common::text(&ours.stdout).contains("0 failures"));
}
