//! What the built library exports: the soname, the symbol versions of
//! libfabric 1.17 (checked with `objdump`, as for Debian's libfabric1), and
//! a C program linked statically against the staticlib.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use fabric::{GetinfoFlags, Registry, Request, Version};
use fabric_capi::EXPORTS;

fn objdump(test: &str, args: &[&str]) -> Option<String> {
    if !common::have("objdump") {
        common::skip(test, "objdump is not installed (apt-get install binutils)");
        return None;
    }
    let out = Command::new("objdump")
        .args(args)
        .arg(common::cdylib())
        .output()
        .expect("run objdump");
    common::assert_ok("objdump", &out);
    Some(common::text(&out.stdout))
}

#[test]
fn soname_is_libfabric_so_1() {
    let Some(headers) = objdump("soname", &["-p"]) else {
        return;
    };
    let soname = headers
        .lines()
        .find_map(|l| l.trim().strip_prefix("SONAME"))
        .map(str::trim);
    assert_eq!(soname, Some("libfabric.so.1"));
}

#[test]
fn exports_have_libfabric_versions() {
    let test = "symbol_versions";
    if !cfg!(fabric_symver) {
        common::skip(
            test,
            "built without symbol versions (see the build script's warning)",
        );
        return;
    }
    let Some(table) = objdump(test, &["-T"]) else {
        return;
    };
    // `<addr> g DF .text <size> <version> <name>`; a version in
    // parentheses is a non-default one.
    let exported: BTreeMap<String, String> = table
        .lines()
        .filter(|l| l.contains(" g ") && !l.contains("*UND*"))
        .filter_map(|l| {
            let mut words = l.split_whitespace().rev();
            let name = words.next()?;
            let version = words.next()?;
            name.starts_with("fi_")
                .then(|| (name.to_string(), version.to_string()))
        })
        .collect();
    let expected: BTreeMap<String, String> = EXPORTS
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        exported, expected,
        "fi_* symbols and their default versions"
    );

    let Some(headers) = objdump(test, &["-p"]) else {
        return;
    };
    let defs = headers
        .split("Version definitions:")
        .nth(1)
        .expect("version definitions");
    for minor in 0..=6 {
        assert!(
            defs.contains(&format!("FABRIC_1.{minor}\n")),
            "node FABRIC_1.{minor} is defined:\n{defs}"
        );
    }
}

const STATIC: &str = r#"#include <stdio.h>
#include <string.h>
#include <rdma/fabric.h>

int main(void)
{
	struct fi_info *info = NULL;
	int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, &info);
	printf("%s\n%u\n%d\n", fi_tostr("", FI_TYPE_VERSION), fi_version(), ret);
	fi_freeinfo(info);
	return 0;
}
"#;

#[test]
fn staticlib_links_into_a_c_program() {
    let test = "staticlib";
    let Some(stage) = common::Stage::new(test, true) else {
        return;
    };
    let src = stage.dir.join("static.c");
    let exe = stage.dir.join("static");
    std::fs::write(&src, STATIC).expect("write C source");
    let out = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-I/usr/include"])
        .arg(&src)
        .arg(common::staticlib())
        .args([
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ])
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    common::assert_ok("static link", &out);
    let ldd = Command::new(&exe).output().expect("run static program");
    common::assert_ok("static program", &ldd);
    let expected = Registry::global()
        .getinfo(&Request {
            version: Version::CURRENT,
            node: None,
            service: None,
            flags: GetinfoFlags::empty(),
            hints: None,
        })
        .map_or_else(|e| e.code(), |_| 0);
    let text = common::text(&ldd.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("fabric-rs "), "{text}");
    assert_eq!(lines[1], ((1u32 << 16) | 17).to_string());
    assert_eq!(lines[2], expected.to_string());
}
