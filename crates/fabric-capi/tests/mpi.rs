//! Open MPI 4.1 (Debian's openmpi-bin, libopenmpi-dev) runs programs on
//! this library through its OFI MTL, under `mpirun -x
//! LD_LIBRARY_PATH=<stage> --mca pml cm --mca mtl ofi --mca
//! mtl_ofi_provider_include tcp`. With `pml cm` forced, a run fails unless
//! the MTL opened its tcp endpoints on a libfabric; rank 0 reads its own
//! `/proc/self/maps` to show whose libfabric carried the traffic.
//!
//! - `c/mpi_pingpong.c`: two ranks, a verified ping-pong from 1 B to
//!   4 MiB, a barrier, an allreduce.
//! - `c/mpi_stress.c`: four ranks (oversubscribed on two cores): messages
//!   in flight around a ring, unexpected messages taken with
//!   `MPI_ANY_SOURCE`, probes and matched probes (the MTL's `FI_PEEK` and
//!   `FI_CLAIM`), synchronous sends, a cancelled receive and collectives,
//!   each verified. It runs on Debian's libfabric first, which shows that
//!   the program's expectations are libfabric's, then on ours.
//!
//! Each run is bounded by a timeout (it is killed and the test fails).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(180);

/// Compiles MPI program `name` from `source` with `mpicc` in `stage`.
fn mpicc(stage: &common::Stage, name: &str, source: &str) -> PathBuf {
    let src = stage.dir.join(format!("{name}.c"));
    let exe = stage.dir.join(name);
    std::fs::write(&src, source).expect("write the MPI program");
    let cc = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run mpicc");
    common::assert_ok("mpicc", &cc);
    exe
}

/// Runs `exe` on `ranks` ranks over the OFI MTL's tcp provider, on the
/// library in `lib_dir` (`None`: the system's), within [`TIMEOUT`].
fn mpirun(exe: &Path, ranks: u32, lib_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(ranks.to_string());
    if let Some(dir) = lib_dir {
        cmd.arg("-x")
            .arg(format!("LD_LIBRARY_PATH={}", dir.display()));
    }
    let mut child = cmd
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", "tcp"])
        .args(["--mca", "btl", "self,vader"])
        .arg(exe)
        .env_remove("FI_PROVIDER")
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mpirun");
    let deadline = Instant::now() + TIMEOUT;
    while child.try_wait().expect("mpirun state").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("mpirun output");
            panic!(
                "mpirun timed out:\n{}{}",
                common::text(&out.stdout),
                common::text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("mpirun output");
    common::assert_ok("mpirun", &out);
    out
}

/// Whether Open MPI's compiler and launcher are installed; else the skip
/// (a failure in CI).
fn have_mpi(test: &str) -> bool {
    if common::have("mpicc") && common::have("mpirun") {
        return true;
    }
    common::skip(
        test,
        "no mpicc / mpirun (apt-get install openmpi-bin libopenmpi-dev)",
    );
    false
}

/// Asserts that `out`'s standard output has `line`.
fn assert_says(out: &Output, line: &str) {
    let stdout = common::text(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == line),
        "no line `{line}` in:\n{stdout}{}",
        common::text(&out.stderr)
    );
}

#[test]
fn open_mpi_runs_on_this_library() {
    const TEST: &str = "mpi";
    if !have_mpi(TEST) {
        return;
    }
    let Some(stage) = common::Stage::new(TEST, false) else {
        return;
    };
    let exe = mpicc(&stage, "mpi_pingpong", include_str!("c/mpi_pingpong.c"));
    let out = mpirun(&exe, 2, Some(&stage.dir));
    assert_says(
        &out,
        "pingpong 1 B .. 4 MiB ok, allreduce 3, libfabric ours",
    );
}

#[test]
fn open_mpi_stress_runs_on_debians_libfabric_and_on_this_library() {
    const TEST: &str = "mpi_stress";
    if !have_mpi(TEST) {
        return;
    }
    if common::system_libfabric().is_none() {
        common::skip(TEST, "no system libfabric (apt-get install libfabric-dev)");
        return;
    }
    let Some(stage) = common::Stage::new(TEST, false) else {
        return;
    };
    let exe = mpicc(&stage, "mpi_stress", include_str!("c/mpi_stress.c"));
    let phases = [
        "ring ok",
        "unexp ok",
        "probe ok",
        "mprobe ok",
        "ssend ok",
        "cancel ok",
        "coll ok",
    ];
    for (lib_dir, whose) in [(None, "debian"), (Some(stage.dir.as_path()), "ours")] {
        let out = mpirun(&exe, 4, lib_dir);
        for phase in phases {
            assert_says(&out, phase);
        }
        assert_says(&out, &format!("stress ok, 4 ranks, libfabric {whose}"));
    }
}
