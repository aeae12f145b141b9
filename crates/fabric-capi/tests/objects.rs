//! `c/objects.c` on Debian's libfabric and on this library: what
//! `fi_pingpong` does not exercise (two tcp RDM endpoints of one process,
//! contexts and fields of `FI_CQ_FORMAT_TAGGED` entries, a counter of
//! sends, the wait fds of an EQ and a CQ (`FI_GETWAIT`), a cancelled and a
//! truncated receive read with `fi_cq_readerr`, `fi_close` refusing objects
//! in use with `-FI_EBUSY`, then closing in order; `fi_setopt` /
//! `fi_getopt` (`FI_OPT_MIN_MULTI_RECV`, `FI_OPT_CM_DATA_SIZE` of a MSG
//! endpoint and a passive endpoint, unknown options); `fi_eq_write` read
//! back by `fi_eq_read` and `fi_eq_sread`; tagged `FI_PEEK` / `FI_CLAIM` /
//! `FI_DISCARD`; a `FI_MULTI_RECV` buffer taking three messages with
//! remote CQ data at a minimum set by `fi_setopt`; every CQ format, two
//! entries read at once, with `fi_senddata`'s data). The
//! program is built once against libfabric-dev's headers; both runs must
//! pass its checks and print the same lines. Refusals Debian's libfabric
//! mishandles (closing a domain with endpoints or a bound CQ frees part of
//! it there) are checked on this library only (`ours`), as are RMA write and read and atomics (sum,
//! fetch, compare-swap; Debian's tcp RDM fails RMA between two endpoints
//! of one process), NULL arguments, most of which
//! Debian's libfabric dereferences, a too small `fi_getopt` length (Debian's
//! answers 0) and setting `FI_OPT_CM_DATA_SIZE` (Debian's tcp refuses the
//! option; here up to 256 bytes, `-FI_EINVAL` above), and closed objects
//! used again (`-FI_EINVAL`, no use of freed memory: that run is repeated
//! under valgrind).

mod common;

use common::Stage;

const TEST: &str = "objects";
const SOURCE: &str = include_str!("c/objects.c");

#[test]
fn objects_behave_as_on_debian_libfabric() {
    let Some(stage) = Stage::for_both(TEST) else {
        return;
    };
    let exe = stage.compile_system("objects", SOURCE);
    let debian = stage.run_on(&exe, &[], false);
    common::assert_ok("objects on Debian's libfabric", &debian);
    let ours = stage.run_on(&exe, &[], true);
    common::assert_ok("objects on this library", &ours);
    assert_eq!(
        common::text(&ours.stdout),
        common::text(&debian.stdout),
        "the two runs print different results"
    );
    let more = stage.run_on(&exe, &["ours"], true);
    common::assert_ok("objects ours on this library", &more);
    let text = common::text(&more.stdout);
    assert!(text.contains("null arguments refused"));
    assert!(text.contains("closed objects refused"));
    // The same under valgrind: no read or write of freed memory, closed
    // objects used again included, and no leak.
    let Some(checked) = stage.valgrind(TEST, &exe, &["ours"], true) else {
        return;
    };
    common::assert_ok("objects ours on this library under valgrind", &checked);
}
