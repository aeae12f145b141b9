//! Debian's own `fi_info` (libfabric-bin), unmodified, run on this library
//! through `LD_LIBRARY_PATH`: its output must be what the Rust registry
//! answers for the same request. With no provider compiled in, that is
//! fi_info's error line for `-FI_ENOSYS` (`fi_getinfo: -38`, exit status 38);
//! with providers, their list.

mod common;

use std::path::Path;
use std::process::Output;

use fabric::{Caps, EpType, GetinfoFlags, Info, Mode, MrMode, Registry, Request, Result, Version};

const FI_INFO: &str = "/usr/bin/fi_info";

fn stage(test: &str) -> Option<common::Stage> {
    if !Path::new(FI_INFO).exists() {
        common::skip(
            test,
            &format!("{FI_INFO} is missing (apt-get install libfabric-bin)"),
        );
        return None;
    }
    common::Stage::new(test, false)
}

fn getinfo(flags: GetinfoFlags, hints: Option<&Info>) -> Result<Vec<Info>> {
    Registry::global().getinfo(&Request {
        version: Version::CURRENT,
        node: None,
        service: None,
        flags,
        hints,
    })
}

/// Checks fi_info's output against an answer, `render` giving the
/// expected stdout of a list.
fn check(what: &str, out: &Output, answer: &Result<Vec<Info>>, render: impl Fn(&[Info]) -> String) {
    let stdout = common::text(&out.stdout);
    let stderr = common::text(&out.stderr);
    match answer {
        Ok(list) => {
            assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
            assert_eq!(
                common::mask_shm_names(&stdout),
                common::mask_shm_names(&render(list)),
                "{what}"
            );
        }
        Err(e) => {
            assert_eq!(stderr, format!("fi_getinfo: {}\n", e.code()), "{what}");
            assert_eq!(out.status.code(), Some(-e.code()), "{what}");
            assert_eq!(stdout, "", "{what}");
        }
    }
}

/// The hints `fi_info -p tcp -t FI_EP_RDM -c FI_MSG` builds.
fn fi_info_hints() -> Info {
    let mut h = Info {
        mode: Mode::from_bits_retain(u64::MAX),
        caps: Caps::MSG,
        ..Info::default()
    };
    h.domain_attr.mode = Mode::from_bits_retain(u64::MAX);
    h.domain_attr.mr_mode = MrMode::from_bits_retain(!3);
    h.ep_attr.ep_type = EpType::Rdm;
    h.fabric_attr.prov_name = Some("tcp".into());
    h
}

fn short(list: &[Info]) -> String {
    list.iter().map(|i| format!("{i}\n")).collect()
}

#[test]
fn debian_fi_info_runs_on_this_library() {
    let Some(stage) = stage("fi_info") else {
        return;
    };
    let fi_info = Path::new(FI_INFO);

    // Which library fi_info loaded: fi_tostr(FI_TYPE_VERSION) names it.
    let out = stage.run(fi_info, &["--version"], true);
    common::assert_ok("fi_info --version", &out);
    let version = common::text(&out.stdout);
    assert!(
        version.contains("\nlibfabric: fabric-rs ") && version.contains("libfabric api: 1.17"),
        "{version}"
    );

    let all = getinfo(GetinfoFlags::empty(), None);
    if let Err(e) = &all {
        assert!(
            Registry::global().providers().next().is_some() || e.code() == -38,
            "no provider compiled in must be FI_ENOSYS: {e:?}"
        );
    }
    check("fi_info", &stage.run(fi_info, &[], true), &all, short);
    check(
        "fi_info -v",
        &stage.run(fi_info, &["-v"], true),
        &all,
        |list| {
            list.iter()
                .map(|i| format!("---\n{}", fabric_capi::info_text(i)))
                .collect()
        },
    );
    check(
        "fi_info -l",
        &stage.run(fi_info, &["-l"], true),
        &getinfo(GetinfoFlags::PROV_ATTR_ONLY, None),
        |list| {
            list.iter()
                .map(|i| {
                    format!(
                        "{}:\n    version: {}\n",
                        i.prov_name().unwrap_or("(null)"),
                        i.fabric_attr.prov_version
                    )
                })
                .collect()
        },
    );
    let hints = fi_info_hints();
    check(
        "fi_info -p tcp -t FI_EP_RDM -c FI_MSG",
        &stage.run(
            fi_info,
            &["-p", "tcp", "-t", "FI_EP_RDM", "-c", "FI_MSG"],
            true,
        ),
        &getinfo(GetinfoFlags::empty(), Some(&hints)),
        short,
    );
}

#[test]
fn debian_fi_info_under_valgrind() {
    let test = "fi_info_valgrind";
    let Some(stage) = stage(test) else {
        return;
    };
    let hints = fi_info_hints();
    let answer = getinfo(GetinfoFlags::empty(), Some(&hints));
    let args = ["-p", "tcp", "-t", "FI_EP_RDM", "-c", "FI_MSG"];
    let Some(out) = stage.valgrind(test, Path::new(FI_INFO), &args, true) else {
        return;
    };
    // valgrind exits 1 on a leak or memory error; fi_info itself exits 0
    // or with the (positive) FI_E code.
    assert_ne!(
        out.status.code(),
        Some(1),
        "valgrind found errors:\n{}",
        common::text(&out.stderr)
    );
    check("fi_info under valgrind", &out, &answer, short);
}
