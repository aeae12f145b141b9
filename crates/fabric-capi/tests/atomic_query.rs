//! `c/atomic_query.c` on Debian's libfabric and on this library: which
//! atomic operations a provider serves, asked with `fi_atomicvalid`,
//! `fi_fetch_atomicvalid`, `fi_compare_atomicvalid` and `fi_query_atomic`
//! for every operation on the integer and real datatypes (630 answers),
//! and the refusals (unknown datatype or operation: `-FI_EOPNOTSUPP`; both
//! query flags: `-FI_EBADFLAGS`). The program is built once against
//! libfabric-dev's headers; this library's shm and tcp must print the
//! lines Debian's shm prints. (Debian's tcp, `tcp;ofi_rxm`, answers the
//! same questions but crashes closing the unbound endpoint at the end.)

mod common;

use common::Stage;

const TEST: &str = "atomic_query";
const SOURCE: &str = include_str!("c/atomic_query.c");

#[test]
fn atomic_validity_answers_as_debian_libfabric() {
    let Some(stage) = Stage::for_both(TEST) else {
        return;
    };
    let exe = stage.compile_system("atomic_query", SOURCE);
    let debian = stage.run_on(&exe, &["shm"], false);
    common::assert_ok("atomic_query shm on Debian's libfabric", &debian);
    let expected = common::text(&debian.stdout);
    assert_eq!(expected.lines().count(), 11 * 19 * 3 + 3, "{expected}");
    for prov in ["shm", "tcp"] {
        let ours = stage.run_on(&exe, &[prov], true);
        common::assert_ok(&format!("atomic_query {prov} on this library"), &ours);
        let got = common::text(&ours.stdout);
        let differ: Vec<_> = expected
            .lines()
            .zip(got.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("  Debian's shm: {a}\n  our {prov}:    {b}"))
            .collect();
        assert!(
            differ.is_empty() && got.lines().count() == expected.lines().count(),
            "our {prov} answers differently:\n{}",
            differ.join("\n")
        );
    }
}
