//! Open MPI 4.1 (Debian's openmpi-bin, libopenmpi-dev) runs a two-rank
//! program on this library through its OFI MTL: `c/mpi_pingpong.c`
//! (a verified ping-pong from 1 B to 4 MiB, a barrier, an allreduce)
//! under `mpirun -np 2 -x LD_LIBRARY_PATH=<stage> --mca pml cm --mca mtl
//! ofi --mca mtl_ofi_provider_include tcp`. With `pml cm` forced, the run
//! fails unless the MTL opened its tcp endpoints on a libfabric; rank 0
//! reads its own `/proc/self/maps` to show that the libfabric is ours.
//! Bounded by a timeout (the run is killed and the test fails).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TEST: &str = "mpi";
const SOURCE: &str = include_str!("c/mpi_pingpong.c");
const TIMEOUT: Duration = Duration::from_secs(180);

#[test]
fn open_mpi_runs_on_this_library() {
    if !common::have("mpicc") || !common::have("mpirun") {
        common::skip(
            TEST,
            "no mpicc / mpirun (apt-get install openmpi-bin libopenmpi-dev)",
        );
        return;
    }
    let Some(stage) = common::Stage::new(TEST, false) else {
        return;
    };
    let src = stage.dir.join("mpi_pingpong.c");
    let exe = stage.dir.join("mpi_pingpong");
    std::fs::write(&src, SOURCE).expect("write the MPI program");
    let cc = Command::new("mpicc")
        .arg("-O2")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run mpicc");
    common::assert_ok("mpicc", &cc);

    let mut child = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2", "-x"])
        .arg(format!("LD_LIBRARY_PATH={}", stage.dir.display()))
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", "tcp"])
        .args(["--mca", "btl", "self,vader"])
        .arg(&exe)
        .env_remove("FI_PROVIDER")
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
    let stdout = common::text(&out.stdout);
    assert!(
        stdout.contains("pingpong 1 B .. 4 MiB ok, allreduce 3, libfabric ours"),
        "{stdout}{}",
        common::text(&out.stderr)
    );
}
