//! The guest's `/init`: a busybox shell script that loads the modules,
//! creates the soft-RoCE devices, checks them with rdma-core's tools, runs
//! the test binaries and prints one result line before it powers off.

use std::fmt::Write as _;

/// The guest's netdevs and their rxe devices: `(netdev, address, device)`.
pub(super) const DEVICES: [(&str, &str, &str); 2] =
    [("d0", "10.99.0.1", "rxe0"), ("d1", "10.99.1.1", "rxe1")];

/// What the script does.
pub(super) struct Plan<'a> {
    /// Starts the result line: `<marker>: PASS` or `<marker>: FAIL`.
    pub(super) marker: &'a str,
    /// Guest paths of the modules, in load order.
    pub(super) modules: Vec<String>,
    /// Guest path of the `fabric` CLI.
    pub(super) fabric: &'a str,
    /// Guest paths of the test binaries (with `bench`: of the hot-path
    /// probe, run once with `--ignored`).
    pub(super) tests: Vec<String>,
    /// Arguments given to every test binary.
    pub(super) test_args: &'a [String],
    /// Instead of the tests, compare latencies (`--bench`).
    pub(super) bench: bool,
    /// Instead of the tests, this shell script (`--script`).
    pub(super) script: Option<&'a str>,
}

/// Sizes of the latency comparison (`--bench`), 1 B to 4 KiB.
pub(super) const BENCH_SIZES: [usize; 7] = [1, 4, 16, 64, 256, 1024, 4096];
/// Round trips per size of the latency comparison.
pub(super) const BENCH_ITERS: usize = 1000;
/// Times the latency comparison runs every tool, one tool after the other
/// each time: the host's other load comes and goes, so one pass can catch
/// one tool in a slow spell; the table takes each cell's median.
pub(super) const BENCH_ROUNDS: usize = 3;
/// Starts the lines of the hot-path probe (`tests/cost.rs` of prov-verbs):
/// `<prefix> <what> <value> <unit>`.
pub(super) const COST_PREFIX: &str = "rxe-cost:";
/// Starts the lines the latency comparison prints:
/// `<prefix> <tool> <size> <one-way usec or "-">`.
pub(super) const BENCH_PREFIX: &str = "rxe-bench:";

/// Quotes a word for the shell: `it's` -> `'it'\''s'`.
pub(super) fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// What the init's `say` puts before each of its lines (the host knows
/// the init runs when it sees it).
pub(super) const SAY_PREFIX: &str = "rxe-guest: ";

/// The start of every guest's init: mounts, PATH, and the shell helpers.
pub(super) const PRELUDE: &str = r#"#!/bin/busybox sh
# The init of the soft-RoCE guest, written by `cargo xtask rxe`.
/bin/busybox mkdir -p /proc /sys /dev /tmp
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s /bin
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
export PATH=/usr/bin:/bin HOME=/tmp RUST_BACKTRACE=1
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
export FABRIC_VERBS_REQUIRE_DEVICE=1

say() { echo "rxe-guest: $*"; }
finish() { echo "$MARK: $1"; poweroff -f; sleep 60; }
# Runs a command; a failure ends the run.
must() { "$@" || { rc=$?; say "FAILED (exit $rc): $*"; finish FAIL; }; }
# Waits up to 10 s for the port of device $1 to be active.
port_active() {
    n=0
    until ibv_devinfo -d "$1" | grep -q PORT_ACTIVE; do
        n=$((n + 1))
        [ $n -gt 100 ] && { ibv_devinfo -d "$1"; return 1; }
        sleep 0.1
    done
}
# The index of the RoCE v2 GID of an IPv4 address (1 when not listed).
gid() {
    i=$(ibv_devinfo -v -d "$1" | sed -n "s/.*GID\[ *\([0-9]*\)\]:.*::ffff:$2, RoCE v2.*/\1/p" | head -n 1)
    echo "${i:-1}"
}
# Waits up to 30 s until TCP port $1 listens (state 0A in /proc/net/tcp*).
listening() {
    port=$(printf '%04X' "$1")
    n=0
    until grep -Eq ":$port [0-9A-F]+:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
        n=$((n + 1))
        [ $n -gt 300 ] && return 1
        sleep 0.1
    done
}
# ibv_rc_pingpong, server and client on device $1 with GID $2, TCP port $3.
pingpong() {
    say "ibv_rc_pingpong on $1, gid $2"
    timeout 120 ibv_rc_pingpong -d "$1" -g "$2" -p "$3" -n 200 >/tmp/pp-server.log 2>&1 &
    server=$!
    if ! listening "$3"; then
        cat /tmp/pp-server.log
        say "the pingpong server did not start listening"
        return 1
    fi
    timeout 120 ibv_rc_pingpong -d "$1" -g "$2" -p "$3" -n 200 127.0.0.1
    rc=$?
    [ $rc -eq 0 ] || kill $server 2>/dev/null
    wait $server
    src=$?
    sed 's/^/server: /' /tmp/pp-server.log
    [ $rc -eq 0 ] && [ $src -eq 0 ]
}
count=0
failed=0
# Runs one test binary with the test arguments; counts a failure.
run_test() {
    count=$((count + 1))
    say "==> $*"
    "$@"
    rc=$?
    if [ $rc -eq 0 ]; then
        say "<== $1: ok"
    else
        say "<== $1: FAILED (exit $rc)"
        failed=$((failed + 1))
    fi
}
# Runs `fabric` with --json (pingpong, bw); counts a failure unless it
# succeeds and every line it prints says "verified":true.
run_perf() {
    count=$((count + 1))
    say "==> fabric $*"
    timeout 300 "$FABRIC" "$@" >/tmp/perf.out 2>/tmp/perf.err
    rc=$?
    cat /tmp/perf.out /tmp/perf.err
    lines=$(grep -c . /tmp/perf.out)
    good=$(grep -c '"verified":true' /tmp/perf.out)
    if [ $rc -eq 0 ] && [ "$lines" -gt 0 ] && [ "$good" -eq "$lines" ]; then
        say "<== fabric $1: ok ($lines results, all verified)"
    else
        say "<== fabric $1: FAILED (exit $rc, $good of $lines results verified)"
        failed=$((failed + 1))
    fi
}

say "kernel $(uname -r), $(nproc) cpus"
"#;

/// Checks of the `fabric` CLI (in `$FABRIC`).
const FABRIC_INFO: &str = r#"must "$FABRIC" info -l
if "$FABRIC" info -l | grep -q '^verbs:'; then
    must "$FABRIC" info -p verbs
    lists_rxe() { "$FABRIC" info -p verbs | grep -q rxe0; }
    must lists_rxe
else
    say "fabric info: the verbs provider is not registered yet"
fi
"#;

/// `fabric pingpong` and `fabric bw` on the verbs provider, both
/// processes in the guest (`--self`), every byte checked (`-v`). Sizes and
/// counts keep this part to seconds under TCG.
const FABRIC_PERF: &[&str] = &[
    "pingpong --self -p verbs -e msg -S 1:1048576 -I 10 -v --json",
    "pingpong --self -p verbs -e rdm -S 1:1048576 -I 10 -v --json",
    "pingpong --self -p verbs -e rdm -m tagged -S 1:65536 -I 10 -v --json",
    "bw --self -p verbs -e msg -S 1:1048576 -I 4 -W 16 -v --json",
    "bw --self -p verbs -e msg -o write -S 1:1048576 -I 4 -W 16 -v --json",
    "bw --self -p verbs -e msg -o read -S 1:1048576 -I 4 -W 16 -v --json",
    "bw --self -p verbs -e rdm -S 1:1048576 -I 4 -W 16 -v --json",
];

/// The latency comparison's functions: each prints one [`BENCH_PREFIX`]
/// line per size. Arguments: the size (and for `fi_bench` the endpoint
/// type first); `$GID`, `$ITERS` and `$FABRIC` are set.
const BENCH_FNS: &str = r#"# ibv_rc_pingpong prints the round trip per iteration: half is one way.
ibv_bench() {
    timeout 120 ibv_rc_pingpong -d rxe0 -g "$GID" -p 18600 -s "$1" -n "$ITERS" >/tmp/b-server.log 2>&1 &
    server=$!
    listening 18600 || cat /tmp/b-server.log
    timeout 120 ibv_rc_pingpong -d rxe0 -g "$GID" -p 18600 -s "$1" -n "$ITERS" 127.0.0.1 >/tmp/b-client.log 2>&1
    wait $server
    us=$(awk '/usec\/iter/ { print $(NF - 1) / 2 }' /tmp/b-client.log)
    [ -n "$us" ] || cat /tmp/b-server.log /tmp/b-client.log
    echo "$BENCH ibv_rc_pingpong $1 ${us:--}"
}
# ib_send_lat prints one-way latencies; t_avg is the sixth column.
lat_bench() {
    timeout 120 ib_send_lat -d rxe0 -x "$GID" -p 18700 -s "$1" -n "$ITERS" -F >/tmp/b-server.log 2>&1 &
    server=$!
    listening 18700 || cat /tmp/b-server.log
    timeout 120 ib_send_lat -d rxe0 -x "$GID" -p 18700 -s "$1" -n "$ITERS" -F 127.0.0.1 >/tmp/b-client.log 2>&1
    wait $server
    us=$(awk -v s="$1" '$1 == s && NF >= 6 { print $6 }' /tmp/b-client.log)
    [ -n "$us" ] || cat /tmp/b-server.log /tmp/b-client.log
    echo "$BENCH ib_send_lat $1 ${us:--}"
}
# fi_pingpong (libfabric's verbs provider; rdm is verbs;ofi_rxm): the
# client reaches the server's control port at rxe0's address.
fi_bench() {
    timeout 120 fi_pingpong -p verbs -e "$1" -S "$2" -I "$ITERS" -B 47600 >/tmp/b-server.log 2>&1 &
    server=$!
    listening 47600 || cat /tmp/b-server.log
    timeout 120 fi_pingpong -p verbs -e "$1" -S "$2" -I "$ITERS" -P 47600 10.99.0.1 >/tmp/b-client.log 2>&1
    wait $server
    us=$(awk 'NF == 8 && $1 ~ /^[0-9]/ { print $7 }' /tmp/b-client.log | tail -n 1)
    [ -n "$us" ] || sed "s/^/fi_pingpong: /" /tmp/b-server.log /tmp/b-client.log | tail -n 40
    echo "$BENCH fi_pingpong_$1 $2 ${us:--}"
}
# fabric pingpong over all sizes at once: one JSON line per size.
fabric_bench() {
    timeout 300 "$FABRIC" pingpong --self -p verbs -e "$1" -S "$2" -I "$ITERS" --json >/tmp/b-fabric.log 2>/tmp/b-fabric.err
    rc=$?
    # The client's rows come first, then the server's (the `--self`
    # child's, printed after the client's): keep the client's, which end
    # where the sizes stop growing.
    sed -n 's/.*"size":\([0-9]*\).*"usec_per_xfer":\([0-9.e+-]*\).*/\1 \2/p' /tmp/b-fabric.log |
        awk -v n="$3" 'NR > n || $1 + 0 <= last { exit } { last = $1 + 0; print }' |
        while read -r size us; do echo "$BENCH fabric_$1 $size $us"; done
    # Anything else it printed (an error that ended the sweep early).
    [ $rc -eq 0 ] || say "fabric pingpong -e $1 exited with $rc"
    grep -v usec_per_xfer /tmp/b-fabric.log /tmp/b-fabric.err
    [ $rc -eq 0 ] && grep -q usec_per_xfer /tmp/b-fabric.log && fabric_ok=1
}
"#;

/// The script's text.
pub(super) fn init_script(plan: &Plan<'_>) -> String {
    let mut s = String::from(PRELUDE);
    let _ = writeln!(s, "MARK={}", quote(plan.marker));
    for m in &plan.modules {
        let _ = writeln!(s, "must insmod {}", quote(m));
    }
    s.push_str("must ip link set lo up\n");
    for (netdev, addr, dev) in DEVICES {
        let _ = writeln!(s, "must ip link add {netdev} type dummy");
        let _ = writeln!(s, "must ip link set {netdev} up");
        let _ = writeln!(s, "must ip addr add {addr}/24 dev {netdev}");
        let _ = writeln!(s, "must rdma link add {dev} type rxe netdev {netdev}");
    }
    s.push_str("must rdma link show\nmust ibv_devices\n");
    // Each device talks to itself (rxe loops traffic to its own address
    // back); between rxe0 and rxe1 the kernel routes through `lo`, which
    // rxe drops, so two devices need two guests to talk to each other.
    for (port, (_, addr, dev)) in (18515..).zip(DEVICES) {
        let _ = writeln!(s, "must port_active {dev}");
        let _ = writeln!(s, "ibv_devinfo -v -d {dev} | grep -E 'state|GID'");
        let _ = writeln!(s, "must pingpong {dev} $(gid {dev} {addr}) {port}");
    }
    // `fabric info` must list the verbs provider's rxe devices once the
    // `fabric` crate registers it (`info -l` names the providers).
    let _ = writeln!(s, "FABRIC={}", quote(plan.fabric));
    s.push_str(FABRIC_INFO);
    if plan.bench {
        bench(&mut s, &plan.tests);
        return s;
    }
    if let Some(script) = plan.script {
        s.push_str("say \"running the --script\"\n(\n");
        s.push_str(script);
        s.push_str("\n) && finish PASS\nfinish FAIL\n");
        return s;
    }
    let args: Vec<String> = plan.test_args.iter().map(|a| quote(a)).collect();
    for t in &plan.tests {
        let _ = writeln!(s, "run_test {} {}", quote(t), args.join(" "));
    }
    for p in FABRIC_PERF {
        let _ = writeln!(s, "run_perf {p}");
    }
    s.push_str(
        "say \"test binaries: $((count - failed)) passed, $failed failed\"\n\
         [ $failed -eq 0 ] && finish PASS\n\
         finish FAIL\n",
    );
    s
}

/// The latency comparison on rxe0: the hot-path probe, then
/// [`BENCH_ROUNDS`] passes of each tool at each size, then the result line
/// (PASS when our numbers came out in every pass).
fn bench(s: &mut String, probes: &[String]) {
    let sizes: Vec<String> = BENCH_SIZES.iter().map(usize::to_string).collect();
    let list = sizes.join(" ");
    let _ = writeln!(s, "BENCH={}", quote(BENCH_PREFIX));
    let _ = writeln!(s, "ITERS={BENCH_ITERS}");
    s.push_str(
        "GID=$(gid rxe0 10.99.0.1)
",
    );
    s.push_str(BENCH_FNS);
    // Where the guest's clock comes from: without a clocksource readable
    // from user space (tsc), every clock reading is a system call and an
    // emulated device access, which a loop that reads the clock pays for.
    s.push_str(
        "cs=/sys/devices/system/clocksource/clocksource0\n\
         say \"clocksource $(cat $cs/current_clocksource) (available: $(cat $cs/available_clocksource))\"\n",
    );
    for p in probes {
        let _ = writeln!(
            s,
            "say \"hot-path probe:\"\n{} --ignored --nocapture --test-threads=1 2>&1 | grep -E {} ",
            quote(p),
            quote(&format!("^({COST_PREFIX}|test |thread |panicked)"))
        );
    }
    s.push_str("say \"latency comparison on rxe0 (gid $GID), $ITERS round trips per size\"\n");
    // libfabric's verbs provider resolves the passive side's address from
    // the name `localhost` (fi_pingpong has no source address option);
    // 127.0.0.1 has no RDMA device, so its getinfo finds nothing
    // (ENODATA). Try that once as it is, then name rxe0's address so.
    s.push_str("say \"fi_pingpong with localhost at 127.0.0.1:\"\nfi_bench msg 1\n");
    s.push_str(
        "echo 'hosts: files' >/etc/nsswitch.conf\n\
         echo '10.99.0.1 localhost' >/etc/hosts\n",
    );
    s.push_str("fabric_ok=0\nfabric_runs=0\n");
    let _ = writeln!(s, "for round in $(seq {BENCH_ROUNDS}); do");
    s.push_str("say \"pass $round\"\n");
    let _ = writeln!(s, "fabric_bench msg {} {}", sizes.join(","), sizes.len());
    s.push_str("fabric_runs=$((fabric_runs + fabric_ok)); fabric_ok=0\n");
    let _ = writeln!(s, "for n in {list}; do ibv_bench $n; done");
    let _ = writeln!(s, "for n in {list}; do lat_bench $n; done");
    let _ = writeln!(s, "for n in {list}; do fi_bench msg $n; done");
    let _ = writeln!(s, "fabric_bench rdm {} {}", sizes.join(","), sizes.len());
    s.push_str("fabric_runs=$((fabric_runs + fabric_ok)); fabric_ok=0\n");
    // rdm is ofi_rxm over verbs. rxm sizes its verbs CQ for
    // FI_UNIVERSE_SIZE (256) peers, beyond rxe's 32767 entries ("Unable to
    // create verbs CQ", then fi_enable fails with EINVAL): two peers here.
    let _ = writeln!(
        s,
        "(export FI_UNIVERSE_SIZE=16; for n in {list}; do fi_bench rdm $n; done)"
    );
    s.push_str("done\n");
    // rxe's counters: receiver-not-ready NAKs and retries cost a timer
    // tick (4 ms) each.
    s.push_str("rdma statistic show\n");
    s.push_str("dmesg | grep -i -E 'clocksource|tsc' | tail -n 5\n");
    let _ = writeln!(
        s,
        "[ $fabric_runs -eq {} ] && finish PASS\nsay \"fabric pingpong succeeded in $fabric_runs of {} runs\"\nfinish FAIL",
        2 * BENCH_ROUNDS,
        2 * BENCH_ROUNDS
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn say_prints_the_prefix_the_host_waits_for() {
        assert!(
            super::PRELUDE.contains(&format!("say() {{ echo \"{}$*\"; }}", super::SAY_PREFIX)),
            "PRELUDE's say() and SAY_PREFIX differ"
        );
    }

    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("plain"), "'plain'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn the_script_runs_each_test_with_the_arguments() {
        let args = ["--test-threads=1".to_string(), "a b".to_string()];
        let plan = Plan {
            marker: "m-1",
            modules: vec!["/lib/modules/dummy.ko".into()],
            fabric: "/usr/bin/fabric",
            tests: vec!["/rxe/tests/one".into(), "/rxe/tests/two".into()],
            test_args: &args,
            bench: false,
            script: None,
        };
        let s = init_script(&plan);
        assert!(s.starts_with("#!/bin/busybox sh\n"));
        assert!(s.contains("MARK='m-1'\n"));
        assert!(s.contains("must insmod '/lib/modules/dummy.ko'\n"));
        assert!(s.contains("must rdma link add rxe1 type rxe netdev d1\n"));
        assert!(s.contains("run_test '/rxe/tests/one' '--test-threads=1' 'a b'\n"));
        assert!(s.contains("run_test '/rxe/tests/two' '--test-threads=1' 'a b'\n"));
        assert!(s.contains("run_perf pingpong --self -p verbs -e msg "));
        assert!(s.trim_end().ends_with("finish FAIL"));
    }

    #[test]
    fn a_script_of_ones_own_replaces_the_tests() {
        let plan = Plan {
            marker: "m-1",
            modules: vec![],
            fabric: "/usr/bin/fabric",
            tests: vec!["/rxe/tests/one".into()],
            test_args: &[],
            bench: false,
            script: Some("\"$FABRIC\" pingpong --self -p verbs"),
        };
        let s = init_script(&plan);
        assert!(!s.contains("run_test '/rxe/tests/one'"));
        assert!(!s.contains("run_perf "));
        assert!(s.contains("(\n\"$FABRIC\" pingpong --self -p verbs\n) && finish PASS\n"));
        assert!(s.trim_end().ends_with("finish FAIL"));
    }

    #[test]
    fn the_bench_script_runs_every_tool_and_no_test() {
        let plan = Plan {
            marker: "m-1",
            modules: vec![],
            fabric: "/usr/bin/fabric",
            tests: vec!["/rxe/tests/one".into()],
            test_args: &[],
            bench: true,
            script: None,
        };
        let s = init_script(&plan);
        assert!(!s.contains("run_test '/rxe/tests/one'"));
        assert!(s.contains("'/rxe/tests/one' --ignored --nocapture"));
        for f in ["ibv_bench", "lat_bench", "fi_bench msg", "fi_bench rdm"] {
            assert!(s.contains(&format!("do {f} $n; done")), "{f}");
        }
        assert!(s.contains("fabric_bench msg 1,4,16,64,256,1024,4096 7\n"));
        assert!(s.contains(&format!("for round in $(seq {BENCH_ROUNDS}); do\n")));
        assert!(s.trim_end().ends_with("finish FAIL"));
    }
}
