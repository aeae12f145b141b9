//! fi_getinfo and its attributes as libfabric 1.17's own programs and MPI
//! expect them (issue #18), checked differentially: one C program,
//! `tests/c/getinfo_diff.c`, built once against libfabric-dev's headers and
//! linked to the system's libfabric without an rpath, runs on Debian's
//! libfabric 1.17 and on this library (`LD_LIBRARY_PATH` naming a
//! [`common::Stage`]). Providers: `tcp` (Debian answers FI_EP_RDM hints
//! with `tcp;ofi_rxm`) and `shm`, per endpoint type where it matters.
//!
//! The cases, as the program names them:
//!
//! 1. `caps/null`, `caps/PROV/EP/HINT`: every result's `caps` holds only
//!    libfabric 1.17's primary capabilities, primary modifiers and secondary
//!    capabilities (no operation flags such as `FI_REMOTE_CQ_DATA` or
//!    `FI_INJECT`), `tx_attr->caps` only transmit capabilities,
//!    `rx_attr->caps` only receive ones, and every requested capability is
//!    in `caps`. `subset/...`: the tx and rx caps are subsets of `caps`.
//! 2. `domcaps/PROV/EP/HINT`: requested `FI_LOCAL_COMM` / `FI_REMOTE_COMM`
//!    are kept in `caps` and `domain_attr->caps`; tcp answers each, shm
//!    refuses anything with `FI_REMOTE_COMM`.
//! 3. `opflags/PROV/EP/CAPS/tx=F/rx=F`: default operation flags in the hints
//!    still match and come back as given. `mpi-mtl/...`, `mpi-btl/...`: the
//!    exact hints of Open MPI 4.1.4's OFI MTL and OFI BTL (captured on this
//!    system with `/work/shared/tools/hintspy.c`); `mpi-rma/PROV/EP`: the
//!    hints issue #18 attributes to Open MPI's one-sided component (on this
//!    system they are `ofi_rxm`'s own query for core `FI_EP_MSG`
//!    endpoints, issued while serving the MTL).
//! 4. `order/PROV/EP/CAPS/DIR`: all 512 combinations of the nine basic
//!    `FI_ORDER_*` bits as `msg_order` hints (on both attributes, on tx
//!    only, on rx only); accepted results offer at least the requested
//!    ordering. `order1/shm/rdm/...`: `FI_ORDER_RAW`, `FI_ORDER_WAR` and
//!    `FI_ORDER_WAW` alone match on shm.
//! 5. `feedback/...`: every result of NULL hints (and of a few hint sets),
//!    duplicated with `fi_dupinfo` and passed back as hints, matches again.
//! 6. `shm-addr/...`: shm answers node "127.0.0.1" / service "9228", with
//!    and without `FI_SOURCE`, and every shm result has a source address
//!    (and a destination address when node/service name the peer).
//!
//! Every case must pass on both libraries. Where libfabric 1.17 and its man
//! pages disagree, the program follows the man pages, and Debian's library
//! is allowed to fail those cases only (see [`debian_deviation`]):
//!
//! - `subset/...` with hints that restrict a direction (`FI_MSG|FI_SEND`,
//!   `FI_RMA|FI_WRITE`, ...): fi_endpoint(3) says the tx and rx caps "must
//!   be a subset of those requested of the associated endpoint" and that a
//!   zero attribute hint takes "the applicable capability bits from the
//!   fi_info structure". libfabric 1.17 refills the direction modifiers of
//!   the other attribute (hints `FI_MSG|FI_SEND` give `rx_attr->caps`
//!   `FI_MSG|FI_RECV` under `caps` `FI_MSG|FI_SEND`).
//!
//! One more place follows the man page without failing Debian's library:
//! `domcaps/shm/rdm/FI_LOCAL_COMM` lets shm answer (keeping the bit), as
//! fi_getinfo(3) gives a shared-memory provider as the example of
//! `FI_LOCAL_COMM` without `FI_REMOTE_COMM`; Debian's 1.17 shm does not list
//! `FI_LOCAL_COMM` and says `FI_ENODATA`, which is allowed too.
//!
//! Beyond the verdicts the two runs are compared:
//!
//! - every query Debian answers, ours must answer (a hint set both refuse
//!   with `FI_ENODATA` is skipped); ours answering where Debian says
//!   `FI_ENODATA` is reported, and fails only for Open MPI's hints
//!   (`mpi-*`), whose outcome must be Debian's;
//! - every `msg_order` combination Debian's provider accepts, ours must
//!   accept; combinations only ours accepts are reported.
//!
//! The report (accepted orderings per library, differences) goes to
//! stderr: `cargo test --test getinfo_diff -- --nocapture` shows it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Output;

/// The C program.
const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/getinfo_diff.c");

/// `-FI_ENODATA`.
const ENODATA: i32 = -61;

/// The nine basic ordering bits, `FI_ORDER_RAR` (bit 0) to `FI_ORDER_SAS`
/// (bit 8).
const ORDER_BITS: [&str; 9] = [
    "RAR", "RAW", "RAS", "WAR", "WAW", "WAS", "SAR", "SAW", "SAS",
];

/// libfabric's primary modifiers: the direction of a capability.
const MODIFIERS: [&str; 6] = [
    "FI_READ",
    "FI_WRITE",
    "FI_RECV",
    "FI_SEND",
    "FI_REMOTE_READ",
    "FI_REMOTE_WRITE",
];

/// What one run of the program printed.
#[derive(Default)]
struct Run {
    /// The `lib` line: which library answered.
    lib: String,
    /// Case name to `None` (ok) or the failure reason.
    verdicts: BTreeMap<String, Option<String>>,
    /// Query key to fi_getinfo's return value.
    answers: BTreeMap<String, i32>,
    /// Ordering case to the accepted combinations (each a 9-bit value).
    orders: BTreeMap<String, BTreeSet<u32>>,
    /// `note` lines.
    notes: Vec<String>,
}

fn parse(what: &str, out: &Output) -> Run {
    common::assert_ok(what, out);
    let stdout = common::text(&out.stdout);
    let mut run = Run::default();
    let mut done = false;
    for line in stdout.lines() {
        let bad = || panic!("{what}: unexpected line {line:?}\n{stdout}");
        if let Some(lib) = line.strip_prefix("lib ") {
            run.lib = lib.to_string();
        } else if let Some(name) = line.strip_prefix("ok ") {
            let old = run.verdicts.insert(name.to_string(), None);
            assert!(old.is_none(), "{what}: case {name} twice");
        } else if let Some(rest) = line.strip_prefix("FAIL ") {
            let (name, why) = rest.split_once(": ").unwrap_or((rest, ""));
            let old = run.verdicts.insert(name.to_string(), Some(why.to_string()));
            assert!(old.is_none(), "{what}: case {name} twice");
        } else if let Some(rest) = line.strip_prefix("data answer ") {
            let f: Vec<&str> = rest.split(' ').collect();
            let [key, ret, _count] = f[..] else { bad() };
            let ret = ret.parse().unwrap_or_else(|_| bad());
            let old = run.answers.insert(key.to_string(), ret);
            assert!(old.is_none(), "{what}: query {key} twice");
        } else if let Some(rest) = line.strip_prefix("data order ") {
            let f: Vec<&str> = rest.split(' ').collect();
            let [key, count, hex] = f[..] else { bad() };
            let set = combos(hex).unwrap_or_else(|| bad());
            assert_eq!(
                count.parse::<usize>().ok(),
                Some(set.len()),
                "{what}: {line}"
            );
            run.orders.insert(key.to_string(), set);
        } else if let Some(note) = line.strip_prefix("note ") {
            run.notes.push(note.to_string());
        } else if line == "done" {
            done = true;
        } else {
            bad();
        }
    }
    assert!(done, "{what}: the program stopped early:\n{stdout}");
    run
}

/// The combinations a 512-bit bitmap (128 hex digits, most significant
/// byte first) holds.
fn combos(hex: &str) -> Option<BTreeSet<u32>> {
    if hex.len() != 128 {
        return None;
    }
    let mut set = BTreeSet::new();
    for i in 0..64 {
        let byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        let base = 8 * (63 - i as u32);
        for bit in 0..8 {
            if byte & (1 << bit) != 0 {
                set.insert(base + bit);
            }
        }
    }
    Some(set)
}

/// `RAR|SAS` for a combination, `none` for 0.
fn order_name(combo: u32) -> String {
    let names: Vec<&str> = (0..9)
        .filter(|b| combo & (1 << b) != 0)
        .map(|b| ORDER_BITS[b])
        .collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join("|")
    }
}

/// A set of accepted combinations in words.
fn describe(set: &BTreeSet<u32>) -> String {
    if set.is_empty() {
        return "none".to_string();
    }
    let union = set.iter().fold(0, |a, c| a | c);
    if set.len() == 1 << union.count_ones() {
        format!("{} = every subset of {}", set.len(), order_name(union))
    } else {
        let list: Vec<String> = set.iter().map(|&c| order_name(c)).collect();
        format!("{}: {}", set.len(), list.join(", "))
    }
}

/// A few combinations by name.
fn some(set: &[u32]) -> String {
    let mut s: Vec<String> = set.iter().take(6).map(|&c| order_name(c)).collect();
    if set.len() > 6 {
        s.push(format!("... ({} in all)", set.len()));
    }
    s.join(", ")
}

/// Why Debian's libfabric 1.17 may fail case `name`: the places where its
/// code and its man pages disagree and the program follows the man pages
/// (see the module documentation). `None` for every other case.
fn debian_deviation(name: &str) -> Option<&'static str> {
    let hint = name.strip_prefix("subset/")?.rsplit('/').next()?;
    hint.split('|')
        .any(|bit| MODIFIERS.contains(&bit))
        .then_some(
            "fi_endpoint(3): tx/rx caps are a subset of fi_info's caps; 1.17 refills the \
             direction modifiers of the attribute whose hint is zero",
        )
}

/// Whether `key` is one of Open MPI's hint sets, whose outcome must be
/// Debian's either way.
fn strict_outcome(key: &str) -> bool {
    key.starts_with("mpi-")
}

#[test]
fn getinfo_matches_libfabric_1_17() {
    let test = "getinfo_diff";
    let Some(stage) = common::Stage::new(test, true) else {
        return;
    };
    let exe = common::compile_against_system(&stage.dir, test, Path::new(SOURCE));
    let debian = parse("on Debian's libfabric", &common::run_on(&exe, None));
    let ours = parse("on this library", &common::run_on(&exe, Some(&stage.dir)));

    assert!(
        !debian.lib.starts_with("fabric-rs"),
        "the first run must use the system's libfabric: {}",
        debian.lib
    );
    assert!(
        ours.lib.starts_with("fabric-rs"),
        "the second run must use this library: {}",
        ours.lib
    );
    let names = |r: &Run| r.verdicts.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&debian),
        names(&ours),
        "both runs print the same cases"
    );
    let keys = |r: &Run| r.answers.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&debian),
        keys(&ours),
        "both runs print the same queries"
    );
    let orders = |r: &Run| r.orders.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        orders(&debian),
        orders(&ours),
        "both runs print the same orderings"
    );

    let mut problems = Vec::new();
    let mut report = String::new();
    let _ = writeln!(report, "Debian: {}\nours:   {}", debian.lib, ours.lib);

    // The verdicts.
    for (run, who) in [(&debian, "Debian"), (&ours, "ours")] {
        let failed = run.verdicts.values().filter(|v| v.is_some()).count();
        let _ = writeln!(
            report,
            "{who}: {} cases, {failed} failed",
            run.verdicts.len()
        );
        for note in &run.notes {
            let _ = writeln!(report, "  {who} note: {note}");
        }
    }
    let mut deviations: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, verdict) in &debian.verdicts {
        match (verdict, debian_deviation(name)) {
            (Some(why), None) => problems.push(format!(
                "Debian fails {name} (the case is wrong, or the system's libfabric is not \
                 1.17's): {why}"
            )),
            (Some(_), Some(man)) => deviations.entry(man).or_default().push(name),
            (None, _) => {}
        }
    }
    for (man, names) in deviations {
        let _ = writeln!(
            report,
            "  Debian fails, as expected ({man}):\n    {}",
            names.join("\n    ")
        );
    }
    for (name, verdict) in &ours.verdicts {
        if let Some(why) = verdict {
            problems.push(format!("ours fails {name}: {why}"));
        }
    }

    // The answers: what Debian answers, ours answers.
    for (key, &deb) in &debian.answers {
        let our = ours.answers[key];
        match (deb == 0, our == 0) {
            (true, false) => problems.push(format!("{key}: Debian answers, ours returns {our}")),
            (false, true) if strict_outcome(key) => problems.push(format!(
                "{key}: Debian returns {deb}, ours answers (Open MPI's hints must get \
                 Debian's outcome)"
            )),
            (false, true) => {
                let _ = writeln!(report, "  {key}: ours answers, Debian returns {deb}");
            }
            (false, false) if deb != our => {
                problems.push(format!("{key}: Debian returns {deb}, ours {our}"))
            }
            _ => {}
        }
        if deb != 0 && deb != ENODATA {
            let _ = writeln!(report, "  {key}: Debian returns {deb}, not -FI_ENODATA");
        }
    }

    // The orderings: what Debian accepts, ours accepts.
    for (key, deb) in &debian.orders {
        let our = &ours.orders[key];
        let _ = writeln!(
            report,
            "{key}:\n  Debian accepts {}\n  ours accepts   {}",
            describe(deb),
            describe(our)
        );
        let missing: Vec<u32> = deb.difference(our).copied().collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{key}: ours refuses {} of the {} msg_order hints Debian accepts: {}",
                missing.len(),
                deb.len(),
                some(&missing)
            ));
        }
        let extra: Vec<u32> = our.difference(deb).copied().collect();
        if !extra.is_empty() {
            let _ = writeln!(
                report,
                "  only ours accepts {} (it must really guarantee them): {}",
                extra.len(),
                some(&extra)
            );
        }
    }

    assert!(
        problems.is_empty(),
        "{} problems:\n{}\n\n{report}",
        problems.len(),
        problems.join("\n")
    );
    eprintln!("{report}");
}
