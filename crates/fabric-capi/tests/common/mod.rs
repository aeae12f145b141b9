//! Helpers of the tests that compile C programs against libfabric's
//! headers and run them (or Debian's `fi_info`) on this crate's cdylib.
//!
//! The cdylib is the `libfabric_capi.so` cargo built next to the test
//! executable (`target/<profile>/deps/`) in the same build. Each test gets a
//! directory under `CARGO_TARGET_TMPDIR` holding `libfabric.so.1` (a link
//! to it) and `libfabric.so`, so that `-lfabric` and the dynamic loader
//! find this library, never an installed libfabric.
//!
//! Missing tools (cc, libfabric-dev's headers, valgrind, fi_info) make a
//! test print `SKIPPED: ...` on stderr (not captured by the test harness)
//! and pass; in CI (`CI=true`) they make it fail, naming what is missing.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The header every C program includes.
pub(crate) const HEADER: &str = "/usr/include/rdma/fabric.h";

/// Prints a skip notice that `cargo test` shows even for passing tests;
/// in CI (`CI=true`) a test that cannot run fails instead.
pub(crate) fn skip(test: &str, why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run in CI: {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// Whether `program --version` runs.
pub(crate) fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The cdylib built for this test run.
pub(crate) fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    for dir in [deps, deps.parent().expect("profile directory")] {
        let lib = dir.join("libfabric_capi.so");
        if lib.exists() {
            return lib;
        }
    }
    panic!(
        "libfabric_capi.so not found next to {} (cargo builds it with the rlib)",
        exe.display()
    );
}

/// The staticlib built for this test run.
pub(crate) fn staticlib() -> PathBuf {
    cdylib().with_file_name("libfabric_capi.a")
}

/// A directory for one test, with the library staged as libfabric.
pub(crate) struct Stage {
    /// The directory.
    pub(crate) dir: PathBuf,
}

impl Stage {
    /// Stages the library for `test`; `None` (after printing why) when `cc`
    /// or the libfabric-dev headers are missing and `need_cc` is set.
    pub(crate) fn new(test: &str, need_cc: bool) -> Option<Stage> {
        if need_cc {
            if !Path::new(HEADER).exists() {
                skip(
                    test,
                    &format!("{HEADER} is missing (apt-get install libfabric-dev)"),
                );
                return None;
            }
            if !have("cc") {
                skip(test, "no C compiler `cc` (apt-get install gcc)");
                return None;
            }
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("fabric-capi")
            .join(test);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test directory");
        std::os::unix::fs::symlink(cdylib(), dir.join("libfabric.so.1")).expect("link .so.1");
        std::os::unix::fs::symlink("libfabric.so.1", dir.join("libfabric.so")).expect("link .so");
        Some(Stage { dir })
    }

    /// Compiles `source` as program `name`, linked to the staged library.
    pub(crate) fn compile(&self, name: &str, source: &str) -> PathBuf {
        let src = self.dir.join(format!("{name}.c"));
        let exe = self.dir.join(name);
        std::fs::write(&src, source).expect("write C source");
        let out = Command::new("cc")
            .args([
                "-std=gnu11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-g",
                "-pthread",
            ])
            .arg("-I/usr/include")
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{}", self.dir.display()))
            .arg("-lfabric")
            .arg(format!("-Wl,-rpath,{}", self.dir.display()))
            // DT_RPATH, searched before LD_LIBRARY_PATH: always this library.
            .arg("-Wl,--disable-new-dtags")
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "cc failed for {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    }

    /// Runs `exe` with `args`; with `LD_LIBRARY_PATH` set to the stage when
    /// `preload` (for binaries not built here).
    pub(crate) fn run(&self, exe: &Path, args: &[&str], preload: bool) -> Output {
        let mut cmd = Command::new(exe);
        cmd.args(args);
        if preload {
            cmd.env("LD_LIBRARY_PATH", &self.dir);
        }
        cmd.output().expect("run program")
    }

    /// Runs `exe` under valgrind's leak check; `None` (after printing why)
    /// when valgrind is missing.
    pub(crate) fn valgrind(
        &self,
        test: &str,
        exe: &Path,
        args: &[&str],
        preload: bool,
    ) -> Option<Output> {
        let mut cmd = valgrind(test, exe)?;
        cmd.args(args);
        if preload {
            cmd.env("LD_LIBRARY_PATH", &self.dir);
        }
        Some(cmd.output().expect("run valgrind"))
    }
}

/// `exe` under valgrind's leak check (any leak or memory error exits 1),
/// with this crate's suppressions (`tests/valgrind.supp`); `None` (after
/// printing why) when valgrind is missing.
pub(crate) fn valgrind(test: &str, exe: &Path) -> Option<Command> {
    if !have("valgrind") {
        skip(test, "valgrind is not installed (apt-get install valgrind)");
        return None;
    }
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,possible",
        "--error-exitcode=1",
        "--quiet",
    ])
    .arg(format!(
        "--suppressions={}/tests/valgrind.supp",
        env!("CARGO_MANIFEST_DIR")
    ))
    .arg(exe);
    Some(cmd)
}

/// The installed libfabric (Debian's `libfabric.so.1`), if the C compiler
/// finds both it and its link-time name `libfabric.so` (libfabric-dev).
pub(crate) fn system_libfabric() -> Option<PathBuf> {
    let find = |name: &str| {
        let out = Command::new("cc")
            .arg(format!("-print-file-name={name}"))
            .output()
            .ok()?;
        // cc prints the bare name when it does not find the file.
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        (path.is_absolute() && path.exists()).then_some(path)
    };
    find("libfabric.so")?;
    find("libfabric.so.1")
}

impl Stage {
    /// Stages the library for a C program built against Debian's libfabric
    /// and run on both libraries ([`Stage::compile_system`],
    /// [`Stage::run_on`]); `None` (after printing why) when `cc`, the
    /// libfabric-dev headers or Debian's libfabric are missing.
    pub(crate) fn for_both(test: &str) -> Option<Stage> {
        let stage = Stage::new(test, true)?;
        if system_libfabric().is_none() {
            skip(
                test,
                "Debian's libfabric.so / libfabric.so.1 are not installed (apt-get install libfabric-dev)",
            );
            return None;
        }
        Some(stage)
    }

    /// Compiles `source` as program `name` against the installed libfabric
    /// (`-lfabric` from the system paths, no rpath), so that
    /// [`Stage::run_on`] chooses the library at run time: build once, run
    /// on both. Check [`system_libfabric`] first.
    pub(crate) fn compile_system(&self, name: &str, source: &str) -> PathBuf {
        let src = self.dir.join(format!("{name}.c"));
        let exe = self.dir.join(name);
        std::fs::write(&src, source).expect("write C source");
        let out = Command::new("cc")
            .args([
                "-std=gnu11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-g",
                "-pthread",
            ])
            .arg("-I/usr/include")
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .arg("-lfabric")
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "cc failed for {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    }

    /// Runs `exe` (from [`Stage::compile_system`]) with `args` on this
    /// crate's library (`ours`: `LD_LIBRARY_PATH` set to the stage) or on
    /// the installed libfabric (`LD_LIBRARY_PATH` removed).
    pub(crate) fn run_on(&self, exe: &Path, args: &[&str], ours: bool) -> Output {
        let mut cmd = Command::new(exe);
        cmd.args(args);
        if ours {
            cmd.env("LD_LIBRARY_PATH", &self.dir);
        } else {
            cmd.env_remove("LD_LIBRARY_PATH");
        }
        cmd.output().expect("run program")
    }
}

/// The text of an output stream.
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts that a C test program succeeded, showing its output if not.
pub(crate) fn assert_ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A C string literal for `bytes`: printable ASCII as is, the rest (and
/// `"`, `\`, `?`) as octal escapes, which never run into the next
/// character.
pub(crate) fn c_literal(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b" ./:_-;[],%@^|+=".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\{b:03o}"));
        }
    }
    s.push('"');
    s
}

/// Compiles the C file `src` as program `name` in `dir`, linked with
/// `-lfabric` against the installed libfabric (libfabric-dev) and with no
/// rpath: the loader picks the library when the program runs, the
/// system's by default and this crate's when `LD_LIBRARY_PATH` names a
/// [`Stage`] directory. For differential tests that run one program on
/// both libraries (see [`run_on`]).
pub(crate) fn compile_against_system(dir: &Path, name: &str, src: &Path) -> PathBuf {
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g"])
        .arg("-I/usr/include")
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .arg("-lfabric")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed for {} (linked against the system's libfabric):\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `exe` on the system's libfabric (`lib_dir` `None`: no
/// `LD_LIBRARY_PATH` at all, not even cargo's) or on the library staged
/// in `lib_dir`. `FI_PROVIDER` is removed so that both runs see every
/// provider.
pub(crate) fn run_on(exe: &Path, lib_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.env_remove("LD_LIBRARY_PATH").env_remove("FI_PROVIDER");
    if let Some(dir) = lib_dir {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    cmd.output().expect("run program")
}

/// `text` with the fresh shm region names of this run
/// (`fabric-shm-<uid>-<pid>-<n>-<hex>`, chosen per getinfo call and so per
/// process) as `fabric-shm-*`, and the `src_addrlen` lines of the blocks
/// holding one as `src_addrlen: *`: everything else must match exactly.
pub(crate) fn mask_shm_names(text: &str) -> String {
    const PREFIX: &str = "fabric-shm-";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        let (head, tail) = rest.split_at(at + PREFIX.len());
        out.push_str(head);
        let name_len = tail
            .find(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
            .unwrap_or(tail.len());
        let name = &tail[..name_len];
        if name.split('-').count() == 4 {
            out.push('*');
        } else {
            out.push_str(name);
        }
        rest = &tail[name_len..];
    }
    out.push_str(rest);
    out.split_inclusive('\n')
        .map(|l| {
            if l.trim_start().starts_with("src_addrlen:") {
                let indent = &l[..l.len() - l.trim_start().len()];
                let nl = if l.ends_with('\n') { "\n" } else { "" };
                format!("{indent}src_addrlen: *{nl}")
            } else {
                l.to_string()
            }
        })
        .collect()
}
