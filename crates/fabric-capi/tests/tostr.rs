//! `fi_tostr` against Debian's libfabric 1.17, differentially.
//!
//! `c/tostr.c` prints `fi_tostr` for every `enum fi_type` of libfabric 1.17
//! (every flag bit, every enumeration value with neighbours and
//! out-of-range values, zeroed / filled-in / odd structures, addresses of
//! every format, objects with and without a `tostr` operation, NULL data,
//! unknown types, short `fi_tostr_r` buffers). It is compiled once against
//! the installed headers and library and run twice: on Debian's
//! `libfabric.so.1` and, through `LD_LIBRARY_PATH`, on this crate's. The
//! two outputs must be identical case by case and line by line, except for
//! the deliberate differences listed in [`deviations`] (documented in
//! `src/tostr.rs`), which must show up exactly as listed.

mod common;

use std::fmt::Write as _;

use common::Stage;

const TEST: &str = "tostr_matches_debian_libfabric";
const SOURCE: &str = include_str!("c/tostr.c");

/// What this library prints for `FI_TYPE_VERSION`.
fn version_text() -> String {
    format!(
        "fabric-rs {} (libfabric API 1.17)",
        env!("CARGO_PKG_VERSION")
    )
}

/// One case of the C program: its label and text (`None`: fi_tostr
/// returned NULL).
#[derive(Debug)]
struct Case {
    label: String,
    body: Option<Vec<u8>>,
}

/// Splits the program's output into cases (`@@ label` lines, then the
/// text; `@@ label (NULL)` for a NULL result).
fn parse(out: &[u8]) -> Vec<Case> {
    let out = out.strip_suffix(b"\n").unwrap_or(out);
    let mut cases: Vec<Case> = Vec::new();
    let mut body: Vec<&[u8]> = Vec::new();
    let finish = |cases: &mut Vec<Case>, body: &mut Vec<&[u8]>| {
        if let Some(last) = cases.last_mut() {
            if last.body.is_some() {
                last.body = Some(body.join(&b"\n"[..]));
            } else {
                assert!(body.is_empty(), "{}: NULL case with text", last.label);
            }
        }
        body.clear();
    };
    for line in out.split(|&b| b == b'\n') {
        if let Some(head) = line.strip_prefix(b"@@ ") {
            finish(&mut cases, &mut body);
            let head = String::from_utf8_lossy(head).into_owned();
            cases.push(match head.strip_suffix(" (NULL)") {
                Some(label) => Case {
                    label: label.to_string(),
                    body: None,
                },
                None => Case {
                    label: head,
                    body: Some(Vec::new()),
                },
            });
        } else {
            assert!(!cases.is_empty(), "text before the first case");
            body.push(line);
        }
    }
    finish(&mut cases, &mut body);
    cases
}

/// A case's text for messages.
fn shown(body: &Option<Vec<u8>>) -> String {
    body.as_ref().map_or_else(
        || "(NULL)".to_string(),
        |b| String::from_utf8_lossy(b).into_owned(),
    )
}

/// How a case deliberately differs from Debian's text.
enum Expect {
    /// The texts have the same lines, but where Debian's line is the first
    /// of a pair and ours the second (each pair occurs).
    Lines(Vec<(String, String)>),
    /// The whole texts (`None`: NULL).
    Whole(Option<String>, Option<String>),
}

/// A deliberate difference from Debian's libfabric (see `src/tostr.rs`).
struct Deviation {
    label: &'static str,
    why: &'static str,
    expect: Expect,
}

fn lines(debian: &str, ours: &str) -> Expect {
    Expect::Lines(vec![(debian.to_string(), ours.to_string())])
}

/// Every deliberate difference, with the case that shows it.
fn deviations() -> Vec<Deviation> {
    const ALL_CAPS: &str = "FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_MULTICAST, \
        FI_COLLECTIVE, FI_READ, FI_WRITE, FI_RECV, FI_SEND, FI_REMOTE_READ, FI_REMOTE_WRITE, \
        FI_MULTI_RECV, FI_REMOTE_CQ_DATA, FI_TRIGGER, FI_FENCE, FI_VARIABLE_MSG, FI_RMA_PMEM, \
        FI_SOURCE_ERR, FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SHARED_AV, FI_RMA_EVENT, FI_SOURCE, \
        FI_NAMED_RX_CTX, FI_DIRECTED_RECV, FI_HMEM";
    const ALL_OP_FLAGS: &str = "FI_MULTICAST, FI_MULTI_RECV, FI_REMOTE_CQ_DATA, FI_MORE, \
        FI_PEEK, FI_TRIGGER, FI_FENCE, FI_COMPLETION, FI_INJECT, FI_INJECT_COMPLETE, \
        FI_TRANSMIT_COMPLETE, FI_DELIVERY_COMPLETE, FI_MATCH_COMPLETE, FI_AFFINITY, FI_CLAIM, \
        FI_DISCARD";
    const ALL_CQ_FLAGS: &str = "FI_SEND, FI_RECV, FI_RMA, FI_ATOMIC, FI_MSG, FI_TAGGED, \
        FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE, FI_REMOTE_CQ_DATA, FI_MULTI_RECV, \
        FI_MORE, FI_CLAIM";
    const BARE_INFO: &str = "fi_info:\n    caps: [  ]\n    mode: [  ]\n    \
        addr_format: FI_FORMAT_UNSPEC\n    src_addrlen: 0\n    dest_addrlen: 0\n    \
        src_addr: (null)\n    dest_addr: (null)\n    handle: (nil)\n    \
        fi_tx_attr: (null)\n    fi_rx_attr: (null)\n    fi_ep_attr: (null)\n    \
        fi_domain_attr: (null)\n    fi_fabric_attr: (null)\n";
    // The nic's tostr text: the room left is 8192 less the lines before.
    let nic = format!("nic tostr: class 20, room {}\n", 8192 - BARE_INFO.len());
    vec![
        Deviation {
            label: "FI_TYPE_VERSION",
            why: "this library names itself (fi_info --version tells which library runs)",
            expect: lines("1.17.0", &version_text()),
        },
        Deviation {
            label: "FI_TYPE_VERSION NULL data",
            why: "fi_fabric(3): the data parameter is ignored; libfabric returns NULL",
            expect: Expect::Whole(None, Some(version_text())),
        },
        Deviation {
            label: "FI_TYPE_CAPS bit 41",
            why: "FI_AV_USER_ID is a capability of fi_getinfo(3); libfabric leaves it out",
            expect: lines("", "FI_AV_USER_ID"),
        },
        Deviation {
            label: "FI_TYPE_CAPS all",
            why: "FI_AV_USER_ID, printed last",
            expect: lines(ALL_CAPS, &format!("{ALL_CAPS}, FI_AV_USER_ID")),
        },
        Deviation {
            label: "FI_TYPE_OP_FLAGS bit 30",
            why: "FI_COMMIT_COMPLETE is an operation flag of fi_endpoint(3); libfabric leaves it out",
            expect: lines("", "FI_COMMIT_COMPLETE"),
        },
        Deviation {
            label: "FI_TYPE_OP_FLAGS all",
            why: "FI_COMMIT_COMPLETE, after FI_DELIVERY_COMPLETE",
            expect: lines(
                ALL_OP_FLAGS,
                &ALL_OP_FLAGS.replace(
                    "FI_DELIVERY_COMPLETE, ",
                    "FI_DELIVERY_COMPLETE, FI_COMMIT_COMPLETE, ",
                ),
            ),
        },
        Deviation {
            label: "FI_TYPE_CQ_EVENT_FLAGS bit 5",
            why: "FI_MULTICAST is a completion flag of fi_cq(3); libfabric leaves it out",
            expect: lines("", "FI_MULTICAST"),
        },
        Deviation {
            label: "FI_TYPE_CQ_EVENT_FLAGS all",
            why: "FI_MULTICAST, after FI_TAGGED as in fi_cq(3)",
            expect: lines(
                ALL_CQ_FLAGS,
                &ALL_CQ_FLAGS.replace("FI_TAGGED, ", "FI_TAGGED, FI_MULTICAST, "),
            ),
        },
        Deviation {
            label: "FI_TYPE_ATOMIC_TYPE 0x100",
            why: "FI_VOID is an enum fi_datatype value (fi_collective(3)); libfabric says Unknown",
            expect: lines("Unknown", "FI_VOID"),
        },
        Deviation {
            label: "FI_TYPE_ATOMIC_OP 0x100",
            why: "FI_NOOP is an enum fi_op value (fi_collective(3)); libfabric says Unknown",
            expect: lines("Unknown", "FI_NOOP"),
        },
        Deviation {
            label: "FI_TYPE_DOMAIN_ATTR 48-bit domain",
            why: "libfabric prints the pointer with %x, keeping its low 32 bits",
            expect: lines("    domain: 0x56789abc", "    domain: 0x123456789abc"),
        },
        Deviation {
            label: "FI_TYPE_INFO nic with tostr",
            why: "libfabric writes the nic's text over the start of the buffer",
            expect: Expect::Whole(Some(nic.clone()), Some(format!("{BARE_INFO}{nic}"))),
        },
        Deviation {
            label: "FI_TYPE_INFO address FI_ADDR_STR cut by its length",
            why: "the address ends at src_addrlen; libfabric reads on to the NUL",
            expect: lines("    src_addr: fi_addr_str://hello", "    src_addr: fi_ad"),
        },
        Deviation {
            label: "FI_TYPE_INFO address FI_SOCKADDR_IN6 cut by its length",
            why: "16 bytes cannot hold the IPv6 address; libfabric reads past them",
            expect: lines(
                "    src_addr: fi_sockaddr_in6://[2001:db8::1]:80",
                "    src_addr: ",
            ),
        },
        Deviation {
            label: "fi_tostr_r FI_TYPE_CAPS into 3 bytes",
            why: "len - 1 bytes are kept; libfabric keeps len - 2",
            expect: lines("F", "FI"),
        },
        Deviation {
            label: "fi_tostr_r FI_TYPE_CAPS into 10 bytes",
            why: "len - 1 bytes are kept; libfabric keeps len - 2, then drops the \", \" left",
            expect: lines("FI_MSG", "FI_MSG, F"),
        },
    ]
}

/// Why `debian` and `ours` (texts of one case) do not match `expect`, if
/// they do not.
fn check_deviation(
    expect: &Expect,
    debian: &Option<Vec<u8>>,
    ours: &Option<Vec<u8>>,
) -> Option<String> {
    match expect {
        Expect::Whole(d, o) => {
            let d = d.as_ref().map(|s| s.as_bytes().to_vec());
            let o = o.as_ref().map(|s| s.as_bytes().to_vec());
            (&d != debian || &o != ours).then(|| {
                format!(
                    "expected Debian {:?} and ours {:?}, got Debian {:?} and ours {:?}",
                    shown(&d),
                    shown(&o),
                    shown(debian),
                    shown(ours)
                )
            })
        }
        Expect::Lines(pairs) => {
            let (Some(d), Some(o)) = (debian, ours) else {
                return Some(format!(
                    "expected texts, got Debian {:?} and ours {:?}",
                    shown(debian),
                    shown(ours)
                ));
            };
            let d: Vec<_> = d.split(|&b| b == b'\n').collect();
            let o: Vec<_> = o.split(|&b| b == b'\n').collect();
            if d.len() != o.len() {
                return Some(format!("{} lines against {}", d.len(), o.len()));
            }
            let mut used = vec![false; pairs.len()];
            for (n, (dl, ol)) in d.iter().zip(&o).enumerate() {
                if dl == ol {
                    continue;
                }
                let hit = pairs
                    .iter()
                    .position(|(pd, po)| pd.as_bytes() == *dl && po.as_bytes() == *ol);
                match hit {
                    Some(k) => used[k] = true,
                    None => {
                        return Some(format!(
                            "line {}: Debian {:?}, ours {:?}",
                            n + 1,
                            String::from_utf8_lossy(dl),
                            String::from_utf8_lossy(ol)
                        ));
                    }
                }
            }
            used.iter().position(|u| !u).map(|k| {
                format!(
                    "the expected difference {:?} -> {:?} did not occur",
                    pairs[k].0, pairs[k].1
                )
            })
        }
    }
}

/// The first differing lines of two texts, with a little context.
fn diff(debian: &Option<Vec<u8>>, ours: &Option<Vec<u8>>) -> String {
    let (Some(d), Some(o)) = (debian, ours) else {
        return format!(
            "    Debian: {}\n    ours:   {}\n",
            shown(debian),
            shown(ours)
        );
    };
    let d: Vec<String> = d
        .split(|&b| b == b'\n')
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    let o: Vec<String> = o
        .split(|&b| b == b'\n')
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    let first = d
        .iter()
        .zip(&o)
        .position(|(a, b)| a != b)
        .unwrap_or(d.len().min(o.len()));
    let mut s = String::new();
    let from = first.saturating_sub(2);
    for (n, line) in d.iter().enumerate().take(first).skip(from) {
        let _ = writeln!(s, "    {:>4}   {:?}", n + 1, line);
    }
    for n in first..(first + 3) {
        let (a, b) = (d.get(n), o.get(n));
        if a.is_none() && b.is_none() {
            break;
        }
        if a == b {
            let _ = writeln!(s, "    {:>4}   {:?}", n + 1, d[n]);
            continue;
        }
        let none = "<no line>".to_string();
        let _ = writeln!(s, "    {:>4} - {:?}   (Debian)", n + 1, a.unwrap_or(&none));
        let _ = writeln!(s, "    {:>4} + {:?}   (ours)", n + 1, b.unwrap_or(&none));
    }
    s
}

#[test]
fn tostr_matches_debian_libfabric() {
    let Some(stage) = Stage::for_both(TEST) else {
        return;
    };
    let exe = stage.compile_system("tostr", SOURCE);
    let debian_run = stage.run_on(&exe, &[], false);
    common::assert_ok("tostr on Debian's libfabric", &debian_run);
    let ours_run = stage.run_on(&exe, &[], true);
    common::assert_ok("tostr on this library", &ours_run);
    let debian = parse(&debian_run.stdout);
    let ours = parse(&ours_run.stdout);

    // The same cases in the same order (a case prints a second header if
    // fi_tostr_r disagreed with fi_tostr).
    for (n, (d, o)) in debian.iter().zip(&ours).enumerate() {
        assert_eq!(
            d.label,
            o.label,
            "case {n}: the two runs print different cases (after {:?})",
            n.checked_sub(1).map(|p| &debian[p].label)
        );
    }
    assert_eq!(
        debian.len(),
        ours.len(),
        "the two runs print different cases"
    );
    assert!(debian.len() > 800, "only {} cases", debian.len());

    let deviations = deviations();
    let mut failures = Vec::new();
    let mut deviated = 0;
    for (d, o) in debian.iter().zip(&ours) {
        if let Some(dev) = deviations.iter().find(|dev| dev.label == d.label) {
            deviated += 1;
            if let Some(why_not) = check_deviation(&dev.expect, &d.body, &o.body) {
                failures.push(format!(
                    "{}: the deliberate difference ({}) is not as expected: {why_not}\n",
                    d.label, dev.why
                ));
            }
        } else if d.body != o.body {
            failures.push(format!(
                "{}: differs from Debian's libfabric\n{}",
                d.label,
                diff(&d.body, &o.body)
            ));
        }
    }
    for dev in &deviations {
        assert!(
            debian.iter().any(|c| c.label == dev.label),
            "no case {:?} for a listed difference",
            dev.label
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from Debian's libfabric 1.17 (first ones shown):\n{}",
        failures.len(),
        debian.len(),
        failures
            .iter()
            .take(12)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(deviated, deviations.len());
}
