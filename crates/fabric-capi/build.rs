//! Makes the cdylib a stand-in for `libfabric.so.1`: its soname, and the
//! symbol versions of libfabric 1.17 (`fi_getinfo@@FABRIC_1.3`, ...).
//!
//! Symbol versions need two things. The `.symver` directives of
//! `src/symver.rs` (compiled when this script sets `cfg(fabric_symver)`)
//! bind each exported function to its version node, and `libfabric.map`,
//! a linker version script passed to the cdylib link only, defines the
//! nodes. rustc passes a version script of its own (an anonymous one) to
//! every cdylib link; GNU ld refuses to combine it with named nodes, lld
//! accepts both. So the cdylib is linked with lld: the one rustup ships
//! (`gcc-ld/ld.lld` in the sysroot, what rustc >= 1.90 uses by default on
//! x86_64 Linux) or an `ld.lld` on the PATH. Without either (or with
//! `FABRIC_CAPI_NO_SYMVER=1` in the environment), the library is built
//! without versions, with plain C names, and this script says so with a
//! warning.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fabric_symver)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=libfabric.map");
    println!("cargo::rerun-if-env-changed=FABRIC_CAPI_NO_SYMVER");

    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os != "linux" {
        // Not ELF: plain symbol names, no soname.
        return;
    }
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libfabric.so.1");

    // Architectures where `global_asm!` is stable since the MSRV.
    let asm_ok = matches!(
        arch.as_str(),
        "x86_64" | "x86" | "aarch64" | "arm" | "riscv64" | "riscv32"
    );
    if !asm_ok {
        println!(
            "cargo::warning=fabric-capi: no symbol versions on {arch} (global_asm! is not stable there)"
        );
        return;
    }
    if env::var_os("FABRIC_CAPI_NO_SYMVER").is_some_and(|v| !v.is_empty() && v != "0") {
        println!("cargo::warning=fabric-capi: FABRIC_CAPI_NO_SYMVER is set: no symbol versions");
        return;
    }
    let Some(lld) = find_lld() else {
        println!(
            "cargo::warning=fabric-capi: no lld found (neither rustup's gcc-ld nor ld.lld on PATH): \
             libfabric_capi.so is built without symbol versions; programs linked against \
             libfabric will print `no version information available`"
        );
        return;
    };
    let map = Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("libfabric.map");
    println!("cargo::rustc-cfg=fabric_symver");
    println!(
        "cargo::rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    if let Lld::Bundled(dir) = lld {
        println!("cargo::rustc-cdylib-link-arg=-B{}", dir.display());
    }
    println!("cargo::rustc-cdylib-link-arg=-fuse-ld=lld");
}

enum Lld {
    /// rustup's `gcc-ld` directory, holding an `ld.lld` wrapper.
    Bundled(PathBuf),
    /// An `ld.lld` on the PATH.
    System,
}

fn find_lld() -> Option<Lld> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let host = env::var("HOST").unwrap_or_default();
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(sysroot) = sysroot {
        let dir = Path::new(&sysroot)
            .join("lib/rustlib")
            .join(&host)
            .join("bin/gcc-ld");
        if dir.join("ld.lld").exists() {
            return Some(Lld::Bundled(dir));
        }
    }
    let system = Command::new("ld.lld")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    system.then_some(Lld::System)
}
