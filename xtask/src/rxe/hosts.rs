//! `--hosts 2`: two guests joined by a virtual Ethernet link.
//!
//! Each QEMU gets a virtio NIC whose other end is one Unix stream socket
//! between the two QEMUs (`-netdev stream`): guest a's QEMU listens on
//! `target/rxe-hosts/link.sock`, guest b's connects to it, and the frames
//! go through it in order. The link is private to the two processes and
//! needs no bridge, tap device or root. It loses no frame: a QEMU whose
//! guest does not take frames fast enough stops reading the socket, which
//! stops the other guest's NIC from sending, as pause frames (PFC) stop a
//! sender on the lossless Ethernet that RoCE is deployed on. The link was
//! first UDP datagrams between the QEMUs (`-netdev socket,udp=`), and that
//! lost hundreds of frames a second (the host's `RcvbufErrors`: the
//! receiving QEMU's socket buffer overflowed while its guest was busy).
//! RoCE has no way to recover but retransmitting from the lost packet
//! after an ACK timeout, so the loss alone made RDM at 1 MiB (one RDMA
//! read of 1024 packets per message) take 12 to 18 s per message and the
//! small round trips several times slower and noisier than now. When b's
//! QEMU is killed, a's sees the connection end, drops what a sends (a
//! dead host), and listens again: the restarted b connects to it (a's
//! QEMU is never restarted).
//!
//! Both guests boot the same initramfs; the kernel command line says which
//! one a guest is (`xtask.host=a` or `b`), and its `/init` sets up
//! `10.99.0.N/24` and `fd99::N/64` on the NIC and `rxe0` over it.
//!
//! Guest A is the server side of every run, guest B the client. They keep
//! in step through the host: a guest prints `<marker> sync NAME` and reads
//! a line from its console; once both wait at the same NAME the host writes
//! `go NAME` to both. The host fails the run when the two wait at different
//! names, or one ends while the other waits.
//!
//! The fault step: guest A asks the host (`<marker> power-off b`) to power
//! off guest B in the middle of a transfer; the host kills B's QEMU (the
//! power going away: no shutdown, no goodbye on the wire). Once A has seen
//! what it waits for, it asks for `<marker> power-on b`: the host starts B
//! again with `xtask.phase=restarted`, and the restarted B connects to A.
//! Before that start the host waits until A's QEMU has dropped the dead
//! connection; the restarted B boots with the kernel's messages on its
//! console. A guest whose init prints nothing within [`BOOT_SILENCE`] of
//! its start fails the run, except the restarted B, which is booted again
//! (said on the host's output; [`RESTART_BOOTS`] boots at most): a CI run
//! once saw a restarted B stay silent until the timeout.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::guest::{self, quote};

/// The two guests: name, IPv4 and IPv6 address on the link, MAC.
pub(super) const HOSTS: [(&str, &str, &str, &str); 2] = [
    ("a", "10.99.0.1", "fd99::1", "52:54:00:99:00:01"),
    ("b", "10.99.0.2", "fd99::2", "52:54:00:99:00:02"),
];

/// Starts the lines with figures (`<prefix> <run> <size> <usec> <MB/s>`).
pub(super) const FIGURE_PREFIX: &str = "rxe-xhost:";

/// The `fabric` runs across the guests: a name, then the arguments both
/// sides get (the server adds `-B PORT`, the client `-P PORT ADDRESS`),
/// and whether the client reaches the server over IPv6 (the server's
/// control port takes both; verbs MSG and RDM tagged and tcp RDM go over
/// IPv6, the rest over IPv4). Sizes and counts keep each run to seconds
/// under TCG.
pub(super) const PERF_RUNS: &[(&str, &str, bool)] = &[
    (
        "verbs-msg",
        "pingpong -p verbs -e msg -S 1:65536 -I 20 -v --json",
        true,
    ),
    (
        "verbs-rdm",
        "pingpong -p verbs -e rdm -S 1:65536 -I 20 -v --json",
        false,
    ),
    (
        "verbs-rdm-tagged",
        "pingpong -p verbs -e rdm -m tagged -S 1:4096 -I 20 -v --json",
        true,
    ),
    (
        "verbs-dgram",
        "pingpong -p verbs -e dgram -S 1:1024 -I 20 -v --json",
        false,
    ),
    (
        "tcp-msg",
        "pingpong -p tcp -e msg -S 1:65536 -I 20 -v --json",
        false,
    ),
    (
        "tcp-rdm",
        "pingpong -p tcp -e rdm -S 1:65536 -I 20 -v --json",
        true,
    ),
    (
        "verbs-msg-bw",
        "bw -p verbs -e msg -S 4096,65536,1048576 -I 4 -W 16 -v --json",
        false,
    ),
    (
        "verbs-rdm-bw",
        "bw -p verbs -e rdm -S 4096,65536 -I 4 -W 16 -v --json",
        false,
    ),
];

/// Runs of [`Plan::large`], as [`PERF_RUNS`]: RDM at 1 MiB (each message
/// one RDMA read of 1024 packets by the receiver), one message at a time,
/// then sixteen. They stalled across the lossy link the guests first had
/// (see the module docs).
pub(super) const LARGE_RUNS: &[(&str, &str, bool)] = &[
    (
        "verbs-rdm-bw-1m-w1",
        "bw -p verbs -e rdm -S 1048576 -I 4 -W 1 -v --json",
        false,
    ),
    (
        "verbs-rdm-bw-1m",
        "bw -p verbs -e rdm -S 1048576 -I 4 -W 16 -v --json",
        false,
    ),
];

/// Sizes `ibv_rc_pingpong` runs across the guests, the anchor of the
/// `verbs-msg` figures.
pub(super) const IBV_SIZES: [usize; 3] = [1, 4096, 65536];

/// What the two guests' script does.
pub(super) struct Plan<'a> {
    pub(super) marker: &'a str,
    pub(super) modules: Vec<String>,
    pub(super) fabric: &'a str,
    /// The cross-host test binary (`prov-verbs/tests/cross_host.rs`).
    pub(super) cross_host: Option<&'a str>,
    pub(super) test_args: &'a [String],
    /// Power guest B off mid-transfer and start it again.
    pub(super) fault: bool,
    /// Also the [`LARGE_RUNS`].
    pub(super) large: bool,
}

const TWO_HOSTS: &str = r#"
# The guest's console is fd 3; everything else reads /dev/null, so that no
# program takes the host's `go` lines.
exec 3<&0 0</dev/null
stty -echo <&3 2>/dev/null
# Waits until the other guest reaches the same point (the host says go).
rendezvous() {
    echo "$MARK sync $1"
    read -r reply <&3 || { say "the console closed at $1"; finish FAIL; }
    reply=$(echo "$reply" | tr -d '\r')
    [ "$reply" = "go $1" ] || { say "at $1 the host said '$reply'"; finish FAIL; }
}
# Waits up to $2 seconds for process $1, then kills it; its status.
reap() {
    n=0
    while kill -0 "$1" 2>/dev/null; do
        n=$((n + 1))
        if [ $n -gt $(($2 * 10)) ]; then
            say "pid $1 still runs $2 s after its peer ended: killed"
            kill "$1" 2>/dev/null
            break
        fi
        sleep 0.1
    done
    wait "$1"
}
# The soft-RoCE device's counters (packets, retries, sequence errors), for
# a run that failed or hung: whether packets were lost or retries stopped.
rxe_counters() {
    for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
        [ -r "$f" ] && echo "rxe0 counter ${f##*/} $(cat "$f")"
    done
}
# Checks a fabric run's output: exit status $2, files /tmp/$1.out, .err.
# Counts a failure unless it succeeded and every line says verified.
perf_verdict() {
    count=$((count + 1))
    cat "/tmp/$1.out" "/tmp/$1.err"
    lines=$(grep -c . "/tmp/$1.out")
    good=$(grep -c '"verified":true' "/tmp/$1.out")
    if [ "$2" -eq 0 ] && [ "$lines" -gt 0 ] && [ "$good" -eq "$lines" ]; then
        say "<== $1: ok ($lines results, all verified)"
    else
        say "<== $1: FAILED (exit $2, $good of $lines results verified)"
        failed=$((failed + 1))
    fi
}
# The client's figures of run $1 as FIGURE lines.
figures() {
    awk -v run="$1" -v p="$FIGURE" '{
        s = ""; u = ""; m = ""
        n = split($0, f, /[,{}]/)
        for (i = 1; i <= n; i++) {
            split(f[i], kv, ":"); k = kv[1]; gsub(/"/, "", k)
            if (k == "size") s = kv[2]
            if (k == "usec_per_xfer") u = kv[2]
            if (k == "mb_per_sec") m = kv[2]
        }
        if (s != "" && u != "") print p, run, s, u, m
    }' "/tmp/$1.out"
}
# A counted check: runs the command, counts a failure.
check() {
    count=$((count + 1))
    say "==> $*"
    if "$@"; then say "<== ok"; else say "<== FAILED: $*"; failed=$((failed + 1)); fi
}
"#;

/// The script both guests run; `/proc/cmdline` says which one it is.
pub(super) fn init_script(plan: &Plan<'_>) -> String {
    let mut s = String::from(guest::PRELUDE);
    let _ = writeln!(s, "MARK={}", quote(plan.marker));
    let _ = writeln!(s, "FIGURE={}", quote(FIGURE_PREFIX));
    let _ = writeln!(s, "FABRIC={}", quote(plan.fabric));
    s.push_str(TWO_HOSTS);
    for m in &plan.modules {
        let _ = writeln!(s, "must insmod {}", quote(m));
    }
    // Who am I: `xtask.host=` on the kernel command line.
    s.push_str(
        "HOST=$(sed -n 's/.*xtask\\.host=\\([a-z]*\\).*/\\1/p' /proc/cmdline)\n\
         PHASE=$(sed -n 's/.*xtask\\.phase=\\([a-z]*\\).*/\\1/p' /proc/cmdline)\n\
         case \"$HOST\" in\n",
    );
    for (i, (name, v4, v6, _)) in HOSTS.iter().enumerate() {
        let (_, peer4, peer6, _) = HOSTS[1 - i];
        let _ = writeln!(
            s,
            "{name}) ME={v4}; ME6={v6}; PEER={peer4}; PEER6={peer6} ;;"
        );
    }
    s.push_str(
        "*) say \"no xtask.host= on the kernel command line\"; finish FAIL ;;\nesac\n\
         say \"guest $HOST${PHASE:+ ($PHASE)}: $ME, $ME6; peer $PEER, $PEER6\"\n",
    );
    // The link: the one interface that is not `lo`.
    s.push_str(
        r#"must ip link set lo up
IF=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
[ -n "$IF" ] || { say "no network interface (virtio_net?)"; finish FAIL; }
# No duplicate address detection: the address is usable at once.
echo 0 >"/proc/sys/net/ipv6/conf/$IF/accept_dad"
must ip link set "$IF" up
must ip addr add "$ME/24" dev "$IF"
must ip -6 addr add "$ME6/64" dev "$IF"
must rdma link add rxe0 type rxe netdev "$IF"
must port_active rxe0
ibv_devinfo -v -d rxe0 | grep -E 'state|active_mtu|GID'
GID=$(gid rxe0 "$ME")
count=0
failed=0
"#,
    );
    if plan.fault {
        // The restarted guest B only connects again; see `fault`.
        s.push_str("[ \"$PHASE\" = restarted ] && {\n");
        fault_restarted(&mut s, plan);
        s.push_str("}\n");
    }
    s.push_str("rendezvous up\n");
    reachability(&mut s);
    ibv_pingpong(&mut s);
    fi_pingpong(&mut s);
    let large = if plan.large { LARGE_RUNS } else { &[] };
    for (port, (name, args, v6)) in (47600..).zip(PERF_RUNS.iter().chain(large)) {
        perf_run(&mut s, name, args, *v6, port);
    }
    if let Some(t) = plan.cross_host {
        cross_host_tests(&mut s, t, plan.test_args);
    }
    if plan.fault {
        fault(&mut s, plan);
    }
    // rxe's counters: retransmissions, timeouts and sequence errors show
    // lost frames or a peer that stopped answering (the fault step's).
    s.push_str("rdma statistic show link rxe0/1\n");
    s.push_str(
        "say \"guest $HOST: $((count - failed)) of $count checks passed\"\n\
         rendezvous end\n\
         [ $failed -eq 0 ] && finish PASS\n\
         finish FAIL\n",
    );
    s
}

/// Ping both ways over IPv4 and IPv6, and the verbs provider resolving
/// the peer's address (rdma_cm: `fabric info -n`).
fn reachability(s: &mut String) {
    s.push_str(
        r#"check ping -c 3 -W 10 "$PEER"
check ping6 -c 3 -W 10 "$PEER6"
check "$FABRIC" info -p verbs -t FI_EP_MSG -n "$PEER" -P 7471
check "$FABRIC" info -p verbs -t FI_EP_MSG -n "$PEER6" -P 7471
ip neigh show
rendezvous reached
"#,
    );
}

/// libfabric's `fi_pingpong -p verbs` (msg; rdm, which is `ofi_rxm` over
/// verbs) from B to A at [`IBV_SIZES`], the other anchor. Its failures are
/// reported but not counted: it is the yardstick, not what is tested.
/// Its passive side takes its address from the name `localhost` (it has
/// no source address option), so both guests name their link address so.
fn fi_pingpong(s: &mut String) {
    s.push_str(
        "echo 'hosts: files' >/etc/nsswitch.conf\n\
         echo \"$ME localhost\" >/etc/hosts\n",
    );
    for (port, (ep, size)) in (47700..).zip(
        ["msg", "rdm"]
            .into_iter()
            .flat_map(|ep| IBV_SIZES.map(|n| (ep, n))),
    ) {
        let name = format!("fi-pingpong-{ep}");
        let _ = write!(
            s,
            r#"case "$HOST" in
a)
    FI_UNIVERSE_SIZE=16 timeout 120 fi_pingpong -p verbs -e {ep} -S {size} -I 200 -B {port} >/tmp/fi.out 2>&1 &
    srv=$!
    listening {port} || say "fi_pingpong is not listening"
    rendezvous {name}-{size}
    rendezvous {name}-{size}-done
    reap $srv 30
    rc=$?
    ;;
b)
    rendezvous {name}-{size}
    FI_UNIVERSE_SIZE=16 timeout 120 fi_pingpong -p verbs -e {ep} -S {size} -I 200 -P {port} "$PEER" >/tmp/fi.out 2>&1
    rc=$?
    rendezvous {name}-{size}-done
    us=$(awk 'NF == 8 && $1 ~ /^[0-9]/ {{ print $7 }}' /tmp/fi.out | tail -n 1)
    [ -n "$us" ] && echo "$FIGURE {name} {size} $us -"
    ;;
esac
if [ $rc -ne 0 ]; then
    tail -n 20 /tmp/fi.out
    say "{name} {size}: failed (exit $rc; an anchor, not counted)"
fi
"#
        );
    }
}

/// `ibv_rc_pingpong` from B to A at [`IBV_SIZES`]: rdma-core's own test
/// across the link, and the anchor of the figures.
///
/// Each size runs twice, on both guests whatever the first run gave (they
/// cannot tell each other how it went; the host only pairs their steps),
/// and a guest counts the size as a failure only when both runs failed.
/// The figure is the first good run's. In 2 of 4 clean-clone CI runs of
/// 2026-11-29 the 64 KiB run hung until its timeout on both guests while
/// rxe counted completer retries and duplicate requests (6-10 and
/// 157-169): `ibv_rc_pingpong`'s fixed ACK timeout (14: 67 ms) expires in
/// a guest that the host has not scheduled for that long, and soft-RoCE
/// then stalls in its retransmission now and then. Our runs on the same
/// link, whose connections wait longer, passed in both. A lone failure is
/// said on the console with rxe's counters; two fail the run.
fn ibv_pingpong(s: &mut String) {
    for (port, size) in (18515..).zip(IBV_SIZES) {
        let name = format!("ibv-rc-pingpong-{size}");
        s.push_str("ibv_ok=\n");
        for (attempt, port) in [(1, port), (2, port + 10)] {
            let _ = write!(
                s,
                r#"case "$HOST" in
a)
    say "==> {name} (server, gid $GID, run {attempt} of 2)"
    timeout 60 ibv_rc_pingpong -d rxe0 -g "$GID" -p {port} -s {size} -n 200 >/tmp/ibv.out 2>&1 &
    srv=$!
    listening {port} || say "ibv_rc_pingpong is not listening"
    rendezvous {name}-{attempt}
    rendezvous {name}-{attempt}-done
    reap $srv 30
    rc=$?
    ;;
b)
    rendezvous {name}-{attempt}
    say "==> {name} (client, gid $GID, run {attempt} of 2)"
    timeout 60 ibv_rc_pingpong -d rxe0 -g "$GID" -p {port} -s {size} -n 200 "$PEER" >/tmp/ibv.out 2>&1
    rc=$?
    rendezvous {name}-{attempt}-done
    us=$(awk '/usec\/iter/ {{ print $(NF - 1) / 2 }}' /tmp/ibv.out)
    [ -z "$ibv_ok" ] && [ $rc -eq 0 ] && [ -n "$us" ] && echo "$FIGURE ibv-rc-pingpong {size} $us -"
    ;;
esac
cat /tmp/ibv.out
if [ $rc -eq 0 ]; then
    [ -n "$ibv_ok" ] || say "<== {name}: ok (run {attempt})"
    ibv_ok=yes
else
    say "<== {name}: run {attempt} failed (exit $rc)"
    rxe_counters
fi
"#
            );
        }
        let _ = write!(
            s,
            r#"count=$((count + 1))
[ -n "$ibv_ok" ] || {{ say "<== {name}: FAILED (both runs)"; failed=$((failed + 1)); }}
"#
        );
    }
}

/// One `fabric` run: the server on A, the client on B.
fn perf_run(s: &mut String, name: &str, args: &str, v6: bool, port: u16) {
    let peer = if v6 { "$PEER6" } else { "$PEER" };
    let _ = write!(
        s,
        r#"case "$HOST" in
a)
    say "==> {name}: fabric {args} -B {port} (server)"
    timeout 300 "$FABRIC" {args} -B {port} >/tmp/{name}.out 2>/tmp/{name}.err &
    srv=$!
    listening {port} || say "the server is not listening"
    rendezvous {name}
    rendezvous {name}-done
    reap $srv 30
    perf_verdict {name} $?
    ;;
b)
    rendezvous {name}
    say "==> {name}: fabric {args} -P {port} {peer} (client)"
    timeout 300 "$FABRIC" {args} -P {port} "{peer}" >/tmp/{name}.out 2>/tmp/{name}.err
    rc=$?
    rendezvous {name}-done
    perf_verdict {name} $rc
    figures {name}
    ;;
esac
"#
    );
}

/// The cross-host tests: the same binary on both guests at once, the
/// server side on A, the client side on B; they meet over their own TCP
/// connections.
fn cross_host_tests(s: &mut String, test: &str, args: &[String]) {
    let args: Vec<String> = args.iter().map(|a| quote(a)).collect();
    let _ = write!(
        s,
        r#"case "$HOST" in a) ROLE=server ;; *) ROLE=client ;; esac
rendezvous cross-host
count=$((count + 1))
say "==> cross_host tests ($ROLE)"
XHOST_ROLE=$ROLE XHOST_PEER=$PEER XHOST_PEER6=$PEER6 XHOST_SELF=$ME XHOST_SELF6=$ME6 \
    timeout 600 {} --test-threads=1 {}
rc=$?
if [ $rc -eq 0 ]; then say "<== cross_host: ok"; else say "<== cross_host: FAILED (exit $rc)"; failed=$((failed + 1)); fi
rendezvous cross-host-done
"#,
        quote(test),
        args.join(" ")
    );
}

/// The fault step, first boot: A runs a transfer that B's power-off cuts
/// (the host kills B when A asks), then waits for the restarted B.
fn fault(s: &mut String, plan: &Plan<'_>) {
    let Some(t) = plan.cross_host else { return };
    let _ = write!(
        s,
        r#"rendezvous fault
count=$((count + 1))
case "$HOST" in
a)
    say "==> fault: survivor (guest b is powered off mid-transfer)"
    XHOST_ROLE=survivor XHOST_PEER=$PEER XHOST_SELF=$ME XHOST_CUT="$MARK power-off b" XHOST_RESTORE="$MARK power-on b" \
        timeout 600 {t} --test-threads=1 --exact fault_power_off --nocapture
    rc=$?
    if [ $rc -eq 0 ]; then say "<== fault: ok"; else say "<== fault: FAILED (exit $rc)"; failed=$((failed + 1)); fi
    ;;
b)
    say "==> fault: victim (this guest is powered off mid-transfer)"
    XHOST_ROLE=victim XHOST_PEER=$PEER XHOST_SELF=$ME \
        timeout 600 {t} --test-threads=1 --exact fault_power_off --nocapture
    say "<== fault: the victim's transfer ended (exit $?) but this guest still runs"
    finish FAIL
    ;;
esac
"#,
        t = quote(t)
    );
}

/// The fault step, restarted guest B: connects to A's survivor again.
fn fault_restarted(s: &mut String, plan: &Plan<'_>) {
    let Some(t) = plan.cross_host else { return };
    let _ = write!(
        s,
        r#"    say "==> fault: the restarted peer connects again"
    XHOST_ROLE=restarted XHOST_PEER=$PEER XHOST_SELF=$ME \
        timeout 600 {t} --test-threads=1 --exact fault_power_off --nocapture
    rc=$?
    [ $rc -eq 0 ] || say "<== fault (restarted): FAILED (exit $rc)"
    rendezvous end
    [ $rc -eq 0 ] && finish PASS
    finish FAIL
"#,
        t = quote(t)
    );
}

// ---------------------------------------------------------------------------
// The host side

/// How a two-guest run ended.
pub(super) enum Outcome {
    Pass,
    /// A guest failed, or they fell out of step: the reason.
    Fail(String),
    TimedOut,
}

/// Console events of a guest.
enum Event {
    Sync(String),
    PowerOff(String),
    PowerOn(String),
    Verdict(bool),
    /// The first line of the guest's init: it booted.
    Heard,
    /// The console closed: QEMU ended.
    Ended,
}

/// One running guest.
struct Guest {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    reader: Option<std::thread::JoinHandle<()>>,
    verdict: Option<bool>,
    ended: bool,
    waits_at: Option<String>,
    /// When its QEMU started, until its init's first line.
    silent_since: Option<Instant>,
}

/// The link between the two QEMUs: a Unix stream socket that guest a's
/// QEMU listens on and guest b's connects to.
struct Link {
    path: PathBuf,
}

/// How long guest a's QEMU may take to listen on the link.
const LISTEN_WAIT: Duration = Duration::from_secs(30);

/// How long a guest's init may take to print its first line after its
/// QEMU started (2 to 3 s under TCG on 2 cores).
const BOOT_SILENCE: Duration = Duration::from_secs(45);

/// How many times the restarted guest b may be booted before the run
/// fails: a restarted guest whose init stays silent is booted again. Three
/// silent boots fit in the survivor's wait for it (180 s).
const RESTART_BOOTS: usize = 3;

/// How long guest a's QEMU may take to drop the connection of a killed
/// guest b (it notices the end of the stream when it next reads it).
const DROP_WAIT: Duration = Duration::from_secs(20);

impl Link {
    /// The socket's path: in the rig's folder, or in the temporary folder
    /// when that path would not fit in a Unix socket address (108 bytes).
    fn new(dir: &Path) -> Result<Self, String> {
        let mut path = dir.join("link.sock");
        if path.as_os_str().len() > 100 {
            path = std::env::temp_dir().join(format!("xtask-rxe-link-{}.sock", std::process::id()));
        }
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot remove {}: {e}", path.display())),
        }
        Ok(Link { path })
    }

    /// The `-netdev` and `-device` arguments of guest `i`.
    fn args(&self, i: usize) -> [String; 4] {
        let server = if i == 0 { "on" } else { "off" };
        [
            "-netdev".into(),
            format!(
                "stream,id=link,server={server},addr.type=unix,addr.path={}",
                self.path.display()
            ),
            "-device".into(),
            // The largest receive ring: rxe sends a burst of packets per
            // message (an RDMA read's whole answer at once).
            format!(
                "virtio-net-pci,netdev=link,mac={},rx_queue_size=1024",
                HOSTS[i].3
            ),
        ]
    }

    /// Whether guest a's QEMU listens on the link (`/proc/net/unix`: the
    /// path with the listening flag, `__SO_ACCEPTCON`).
    fn listening(&self) -> bool {
        let Ok(table) = fs::read_to_string("/proc/net/unix") else {
            return false;
        };
        let path = self.path.to_string_lossy();
        table.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 8 && f[3] == "00010000" && f[7] == path
        })
    }

    /// How many connected sockets are bound to the link's path: the one
    /// guest a's QEMU accepted, while it holds it (b's end is unnamed).
    fn accepted(&self) -> usize {
        let Ok(table) = fs::read_to_string("/proc/net/unix") else {
            return 0;
        };
        let path = self.path.to_string_lossy();
        table
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() >= 8 && f[3] != "00010000" && f[7] == path
            })
            .count()
    }

    /// After guest b's QEMU was killed: waits until guest a's QEMU has
    /// dropped the old connection, so that the next b is accepted as a new
    /// peer rather than queued behind a dead one. Says how long it took.
    fn wait_dropped(&self) {
        let start = Instant::now();
        while self.accepted() > 0 {
            if start.elapsed() >= DROP_WAIT {
                println!(
                    "rxe: guest a's QEMU still holds the old link connection after {} s; \
                     starting b anyway",
                    DROP_WAIT.as_secs()
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        println!(
            "rxe: guest a's QEMU dropped the old link connection after {:.2} s",
            start.elapsed().as_secs_f64()
        );
    }

    /// Waits until guest a's QEMU listens (b's QEMU connects once, at
    /// start: QEMU 7.2 does not try again).
    fn wait_listening(&self, a: &mut Guest) -> Result<(), String> {
        let deadline = Instant::now() + LISTEN_WAIT;
        while !self.listening() {
            if let Ok(Some(status)) = a.child.try_wait() {
                return Err(format!(
                    "guest a's QEMU ended before it listened on the link ({status})"
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "guest a's QEMU does not listen on {} after {} s",
                    self.path.display(),
                    LISTEN_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// The inputs of a two-guest run.
pub(super) struct Boot<'a> {
    /// QEMU's command without the network and the kernel command line.
    pub(super) qemu: &'a dyn Fn() -> Result<Command, String>,
    pub(super) append: &'a str,
    pub(super) dir: &'a Path,
    pub(super) marker: &'a str,
    pub(super) timeout: Duration,
}

fn log_path(dir: &Path, name: &str, restarts: usize) -> PathBuf {
    if restarts == 0 {
        dir.join(format!("console-{name}.log"))
    } else {
        dir.join(format!("console-{name}-restarted.log"))
    }
}

fn start(
    b: &Boot<'_>,
    link: &Link,
    i: usize,
    phase: Option<&str>,
    tx: &mpsc::Sender<(usize, Event)>,
) -> Result<Guest, String> {
    let name = HOSTS[i].0;
    let mut cmd = (b.qemu)()?;
    let mut append = format!("{} xtask.host={name}", b.append);
    if let Some(p) = phase {
        // A restarted guest boots with the kernel's messages on the
        // console: if it stalls, the log shows where.
        append = append.replace(" quiet", "");
        let _ = write!(append, " xtask.phase={p}");
    }
    cmd.args(link.args(i))
        .args(["-append", &append])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start QEMU for guest {name}: {e}"))?;
    let stdout = child.stdout.take().ok_or("QEMU has no stdout")?;
    let stdin = child.stdin.take();
    let log = log_path(b.dir, name, usize::from(phase.is_some()));
    let file =
        fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let tx = tx.clone();
    let marker = b.marker.to_string();
    let reader = std::thread::spawn(move || relay(i, stdout, file, &marker, &tx));
    Ok(Guest {
        name,
        child,
        stdin,
        reader: Some(reader),
        verdict: None,
        ended: false,
        waits_at: None,
        silent_since: Some(Instant::now()),
    })
}

/// Copies a guest's console to our stdout (each line after `[a] `) and its
/// log, and sends its events.
fn relay(
    i: usize,
    console: impl std::io::Read,
    log: fs::File,
    marker: &str,
    tx: &mpsc::Sender<(usize, Event)>,
) {
    let mut console = BufReader::new(console);
    let mut log = BufWriter::new(log);
    let stdout = std::io::stdout();
    let mut line = Vec::new();
    let mut heard = false;
    loop {
        line.clear();
        match console.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if !heard && text.contains(guest::SAY_PREFIX) {
            heard = true;
            let _ = tx.send((i, Event::Heard));
        }
        let _ = writeln!(log, "{text}");
        let _ = log.flush();
        let _ = writeln!(stdout.lock(), "[{}] {text}", HOSTS[i].0);
        if let Some(e) = parse_event(text, marker) {
            let _ = tx.send((i, e));
        }
    }
    let _ = log.flush();
    let _ = tx.send((i, Event::Ended));
}

fn parse_event(line: &str, marker: &str) -> Option<Event> {
    let at = line.find(marker)?;
    let rest = &line[at + marker.len()..];
    if let Some(name) = rest.strip_prefix(" sync ") {
        return Some(Event::Sync(name.trim().to_string()));
    }
    if let Some(host) = rest.strip_prefix(" power-off ") {
        return Some(Event::PowerOff(host.trim().to_string()));
    }
    if let Some(host) = rest.strip_prefix(" power-on ") {
        return Some(Event::PowerOn(host.trim().to_string()));
    }
    match rest.trim() {
        ": PASS" => Some(Event::Verdict(true)),
        ": FAIL" => Some(Event::Verdict(false)),
        _ => None,
    }
}

impl Guest {
    fn say(&mut self, line: &str) -> Result<(), String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("guest {}: no console input", self.name))?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("guest {}: cannot write to its console: {e}", self.name))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stdin = None;
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Boots both guests, keeps them in step, and waits for both results.
pub(super) fn run(b: &Boot<'_>) -> Result<Outcome, String> {
    let link = Link::new(b.dir)?;
    println!(
        "rxe: booting guests a and b, linked through {} (timeout {} s)",
        link.path.display(),
        b.timeout.as_secs()
    );
    let (tx, rx) = mpsc::channel();
    let mut guests = Vec::new();
    for i in 0..2 {
        let started = if i == 0 {
            start(b, &link, i, None, &tx)
        } else {
            link.wait_listening(&mut guests[0])
                .and_then(|()| start(b, &link, i, None, &tx))
        };
        match started {
            Ok(g) => guests.push(g),
            Err(e) => {
                guests.iter_mut().for_each(Guest::kill);
                return Err(e);
            }
        }
    }
    let outcome = drive(b, &link, &mut guests, &rx, &tx);
    for g in &mut guests {
        g.kill();
    }
    outcome
}

fn drive(
    b: &Boot<'_>,
    link: &Link,
    guests: &mut [Guest],
    rx: &mpsc::Receiver<(usize, Event)>,
    tx: &mpsc::Sender<(usize, Event)>,
) -> Result<Outcome, String> {
    let deadline = Instant::now() + b.timeout;
    // Ended events of killed QEMUs that are expected (a power-off, or a
    // silent restarted guest booted again): one count per kill.
    let mut expected_ends = [0usize; 2];
    // How many times guest b was booted again after its power-off.
    let mut restart_boots = 0usize;
    loop {
        if guests.iter().all(|g| g.ended) {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let running: Vec<&str> = guests.iter().filter(|g| !g.ended).map(|g| g.name).collect();
            println!(
                "rxe: still running at the timeout: guest {}",
                running.join(", guest ")
            );
            return Ok(Outcome::TimedOut);
        }
        for t in 0..guests.len() {
            let Some(since) = guests[t].silent_since else {
                continue;
            };
            if guests[t].ended || since.elapsed() < BOOT_SILENCE {
                continue;
            }
            let name = guests[t].name;
            if restart_boots == 0 || t != 1 {
                return Ok(Outcome::Fail(format!(
                    "guest {name}'s init printed nothing within {} s of its QEMU's start",
                    BOOT_SILENCE.as_secs()
                )));
            }
            if restart_boots >= RESTART_BOOTS {
                return Ok(Outcome::Fail(format!(
                    "the restarted guest {name}'s init printed nothing within {} s of its \
                     QEMU's start, {restart_boots} boots in a row",
                    BOOT_SILENCE.as_secs()
                )));
            }
            println!(
                "rxe: the restarted guest {name}'s init printed nothing within {} s of its \
                 QEMU's start (boot {restart_boots}); killing it and booting it again",
                BOOT_SILENCE.as_secs()
            );
            expected_ends[t] += 1;
            guests[t].kill();
            link.wait_dropped();
            link.wait_listening(&mut guests[0])?;
            guests[t] = start(b, link, t, Some("restarted"), tx)?;
            restart_boots += 1;
        }
        let (i, event) = match rx.recv_timeout(left.min(Duration::from_secs(1))) {
            Ok(x) => x,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let other = 1 - i;
        match event {
            Event::Verdict(v) => guests[i].verdict = Some(v),
            Event::Heard => guests[i].silent_since = None,
            Event::Sync(name) => {
                guests[i].waits_at = Some(name);
                let (a, bb) = (&guests[0].waits_at, &guests[1].waits_at);
                if let (Some(x), Some(y)) = (a, bb) {
                    if x != y {
                        return Ok(Outcome::Fail(format!(
                            "the guests fell out of step: a waits at `{x}`, b at `{y}`"
                        )));
                    }
                    let go = format!("go {x}");
                    for g in guests.iter_mut() {
                        g.waits_at = None;
                        g.say(&go)?;
                    }
                } else if guests[other].ended {
                    return Ok(Outcome::Fail(format!(
                        "guest {} waits at `{}`, but guest {} has ended",
                        guests[i].name,
                        guests[i].waits_at.as_deref().unwrap_or("?"),
                        guests[other].name
                    )));
                }
            }
            Event::PowerOff(target) | Event::PowerOn(target) if target == guests[i].name => {
                return Ok(Outcome::Fail(format!(
                    "guest {target} asked to power itself off or on"
                )));
            }
            Event::PowerOff(target) => {
                // Only b: a's QEMU holds the link's listening end, and a
                // restarted b connects to it again.
                let Some(t) = HOSTS.iter().position(|h| h.0 == target).filter(|&t| t == 1) else {
                    return Ok(Outcome::Fail(format!(
                        "guest {} asked to power off guest `{target}` (only b can be)",
                        guests[i].name
                    )));
                };
                println!("rxe: powering off guest {target} (killing its QEMU)");
                // Its reader's Ended event is queued by now: expected.
                expected_ends[t] += 1;
                guests[t].kill();
                guests[t].waits_at = None;
                // Off counts as ended until it is powered on: the other
                // guest waiting for it, or ending, does not wait for the
                // timeout.
                guests[t].ended = true;
            }
            Event::PowerOn(target) => {
                let Some(t) = HOSTS.iter().position(|h| h.0 == target).filter(|&t| t == 1) else {
                    return Ok(Outcome::Fail(format!(
                        "guest {} asked to power on guest `{target}` (only b can be)",
                        guests[i].name
                    )));
                };
                if guests[t].reader.is_some() {
                    return Ok(Outcome::Fail(format!(
                        "guest {} asked to power on guest {target}, which runs",
                        guests[i].name
                    )));
                }
                println!("rxe: starting guest {target} again");
                link.wait_dropped();
                link.wait_listening(&mut guests[0])?;
                guests[t] = start(b, link, t, Some("restarted"), tx)?;
                restart_boots += 1;
            }
            Event::Ended => {
                if expected_ends[i] > 0 {
                    // A killed QEMU's reader; the new one goes on.
                    expected_ends[i] -= 1;
                    continue;
                }
                guests[i].ended = true;
                let _ = guests[i].child.wait();
                if let Some(at) = guests[other].waits_at.clone() {
                    return Ok(Outcome::Fail(format!(
                        "guest {} waits at `{at}`, but guest {} has ended",
                        guests[other].name, guests[i].name
                    )));
                }
            }
        }
    }
    let verdicts: Vec<(&str, Option<bool>)> = guests.iter().map(|g| (g.name, g.verdict)).collect();
    let mut why = Vec::new();
    for (name, v) in verdicts {
        match v {
            Some(true) => {}
            Some(false) => why.push(format!("guest {name} reported a failure")),
            None => why.push(format!("guest {name} stopped without a result line")),
        }
    }
    if why.is_empty() {
        Ok(Outcome::Pass)
    } else {
        Ok(Outcome::Fail(why.join("; ")))
    }
}

/// The ratios of the figures table: ours over the anchor's one-way
/// latency (below 1 is faster).
const RATIOS: [(&str, &str); 3] = [
    ("verbs-msg", "ibv-rc-pingpong"),
    ("verbs-msg", "fi-pingpong-msg"),
    ("verbs-rdm", "fi-pingpong-rdm"),
];

/// The table of the client's figures: one-way latency (pingpong) or
/// bandwidth (bw) per run and size, and fabric's verbs MSG latency over
/// `ibv_rc_pingpong`'s at the sizes both ran.
pub(super) fn figures_table(console_b: &str) -> String {
    let mut rows: Vec<(String, usize, f64, Option<f64>)> = Vec::new();
    for line in console_b.lines() {
        let Some(at) = line.find(FIGURE_PREFIX) else {
            continue;
        };
        let w: Vec<&str> = line[at + FIGURE_PREFIX.len()..]
            .split_whitespace()
            .collect();
        let [run, size, us, mbs] = w[..] else {
            continue;
        };
        let (Ok(size), Ok(us)) = (size.parse::<usize>(), us.parse::<f64>()) else {
            continue;
        };
        rows.push((run.to_string(), size, us, mbs.parse::<f64>().ok()));
    }
    let mut t = String::from(
        "across the two guests (client on b, server on a); one-way usec for pingpong, MB/s for bw\n",
    );
    let _ = writeln!(
        t,
        "{:<18} {:>8} {:>10} {:>10}",
        "run", "bytes", "usec", "MB/s"
    );
    for (run, size, us, mbs) in &rows {
        let mbs = mbs.map_or("-".to_string(), |m| format!("{m:.1}"));
        let _ = writeln!(t, "{run:<18} {size:>8} {us:>10.2} {mbs:>10}");
    }
    let get = |run: &str, size: usize| rows.iter().find(|r| r.0 == run && r.1 == size).map(|r| r.2);
    for (ours, theirs) in RATIOS {
        for size in IBV_SIZES {
            if let (Some(a), Some(b)) = (get(ours, size), get(theirs, size)) {
                if b > 0.0 {
                    let _ = writeln!(
                        t,
                        "{ours} / {theirs} at {size} B: {:.2} ({a:.2} / {b:.2} usec)",
                        a / b
                    );
                }
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(fault: bool) -> String {
        init_script(&Plan {
            marker: "m-1",
            modules: vec!["/lib/modules/virtio_net.ko".into()],
            fabric: "/usr/bin/fabric",
            cross_host: Some("/rxe/tests/cross_host"),
            test_args: &[],
            fault,
            large: false,
        })
    }

    #[test]
    fn the_script_runs_each_fabric_run_on_both_sides_in_step() {
        let s = plan(false);
        assert!(s.starts_with("#!/bin/busybox sh\n"));
        assert!(s.contains("a) ME=10.99.0.1; ME6=fd99::1; PEER=10.99.0.2; PEER6=fd99::2 ;;"));
        assert!(s.contains("must insmod '/lib/modules/virtio_net.ko'\n"));
        for (name, args, _) in PERF_RUNS {
            assert!(s.contains(&format!("rendezvous {name}\n")), "{name}");
            assert!(s.contains(&format!("\"$FABRIC\" {args} -B ")), "{name}");
        }
        assert!(s.contains("XHOST_ROLE=$ROLE"));
        // A failed or hung `ibv_rc_pingpong` leaves the device's counters;
        // each size runs twice on both guests, and fails when both did.
        for size in IBV_SIZES {
            let name = format!("ibv-rc-pingpong-{size}");
            for run in [1, 2] {
                assert!(
                    s.contains(&format!("rendezvous {name}-{run}-done\n")),
                    "{name}"
                );
                assert!(s.contains(&format!(
                    "say \"<== {name}: run {run} failed (exit $rc)\"\n    rxe_counters\n"
                )));
            }
            assert!(s.contains(&format!(
                "[ -n \"$ibv_ok\" ] || {{ say \"<== {name}: FAILED (both runs)\"; failed=$((failed + 1)); }}"
            )));
        }
        assert!(!s.contains("fault_power_off"));
        assert!(s.trim_end().ends_with("finish FAIL"));
    }

    #[test]
    fn the_fault_step_restarts_b_into_its_own_branch() {
        let s = plan(true);
        assert!(s.contains("[ \"$PHASE\" = restarted ] && {\n"));
        assert!(s.contains("XHOST_ROLE=restarted"));
        assert!(s.contains("XHOST_CUT=\"$MARK power-off b\""));
        assert!(s.contains("XHOST_RESTORE=\"$MARK power-on b\""));
    }

    #[test]
    fn the_link_is_a_stream_socket_that_a_serves_and_b_joins() -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("xtask-rxe-link-test-{}", std::process::id()));
        fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let link = Link::new(&dir)?;
        let [_, a, _, nic] = link.args(0);
        let [_, b, _, _] = link.args(1);
        let path = link.path.display().to_string();
        assert_eq!(
            a,
            format!("stream,id=link,server=on,addr.type=unix,addr.path={path}")
        );
        assert_eq!(
            b,
            format!("stream,id=link,server=off,addr.type=unix,addr.path={path}")
        );
        assert!(nic.contains(HOSTS[0].3), "{nic}");
        // Listening is what /proc/net/unix says of the path.
        assert!(!link.listening());
        let listener =
            std::os::unix::net::UnixListener::bind(&link.path).map_err(|e| e.to_string())?;
        assert!(link.listening());
        // The connection a accepted carries the path; b's end does not.
        assert_eq!(link.accepted(), 0);
        let b_end =
            std::os::unix::net::UnixStream::connect(&link.path).map_err(|e| e.to_string())?;
        let (a_end, _) = listener.accept().map_err(|e| e.to_string())?;
        assert_eq!(link.accepted(), 1);
        drop(b_end);
        assert_eq!(link.accepted(), 1, "a holds its end until it closes it");
        drop(a_end);
        assert_eq!(link.accepted(), 0);
        drop(listener);
        drop(link);
        assert!(
            !dir.join("link.sock").exists(),
            "the link removes its socket"
        );
        fs::remove_dir_all(&dir).map_err(|e| e.to_string())
    }

    #[test]
    fn console_events_need_the_marker() {
        assert!(matches!(
            parse_event("m-1 sync up", "m-1"),
            Some(Event::Sync(n)) if n == "up"
        ));
        assert!(matches!(
            parse_event("x m-1 power-off b", "m-1"),
            Some(Event::PowerOff(n)) if n == "b"
        ));
        assert!(matches!(
            parse_event("m-1 power-on b", "m-1"),
            Some(Event::PowerOn(n)) if n == "b"
        ));
        assert!(matches!(
            parse_event("m-1: PASS", "m-1"),
            Some(Event::Verdict(true))
        ));
        assert!(parse_event("sync up", "m-1").is_none());
        assert!(parse_event("m-1: maybe", "m-1").is_none());
    }

    #[test]
    fn the_figures_table_gives_the_ratio_to_ibv_rc_pingpong() {
        let console = "[b] rxe-xhost: verbs-msg 4096 300.0 13.6\n\
                       rxe-xhost: ibv-rc-pingpong 4096 200.0 -\n\
                       rxe-xhost: garbage\n\
                       rxe-xhost: verbs-msg x 1 1\n";
        let t = figures_table(console);
        assert!(
            t.contains("verbs-msg / ibv-rc-pingpong at 4096 B: 1.50"),
            "{t}"
        );
        assert_eq!(t.lines().count(), 5, "{t}");
    }
}
