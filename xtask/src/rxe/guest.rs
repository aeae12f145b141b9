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
    /// Guest paths of the test binaries.
    pub(super) tests: Vec<String>,
    /// Arguments given to every test binary.
    pub(super) test_args: &'a [String],
}

/// Quotes a word for the shell: `it's` -> `'it'\''s'`.
pub(super) fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

const PRELUDE: &str = r#"#!/bin/busybox sh
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
# ibv_rc_pingpong, server and client on device $1 with GID $2, TCP port $3.
pingpong() {
    say "ibv_rc_pingpong on $1, gid $2"
    timeout 120 ibv_rc_pingpong -d "$1" -g "$2" -p "$3" -n 200 >/tmp/pp-server.log 2>&1 &
    server=$!
    # Wait until the server listens (state 0A in /proc/net/tcp*).
    port=$(printf '%04X' "$3")
    n=0
    until grep -Eq ":$port [0-9A-F]+:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
        n=$((n + 1))
        if [ $n -gt 300 ]; then
            cat /tmp/pp-server.log
            say "the pingpong server did not start listening"
            return 1
        fi
        sleep 0.1
    done
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
    let args: Vec<String> = plan.test_args.iter().map(|a| quote(a)).collect();
    for t in &plan.tests {
        let _ = writeln!(s, "run_test {} {}", quote(t), args.join(" "));
    }
    s.push_str(
        "say \"test binaries: $((count - failed)) passed, $failed failed\"\n\
         [ $failed -eq 0 ] && finish PASS\n\
         finish FAIL\n",
    );
    s
}

#[cfg(test)]
mod tests {
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
        };
        let s = init_script(&plan);
        assert!(s.starts_with("#!/bin/busybox sh\n"));
        assert!(s.contains("MARK='m-1'\n"));
        assert!(s.contains("must insmod '/lib/modules/dummy.ko'\n"));
        assert!(s.contains("must rdma link add rxe1 type rxe netdev d1\n"));
        assert!(s.contains("run_test '/rxe/tests/one' '--test-threads=1' 'a b'\n"));
        assert!(s.contains("run_test '/rxe/tests/two' '--test-threads=1' 'a b'\n"));
        assert!(s.trim_end().ends_with("finish FAIL"));
    }
}
