//! The stack on a real NIC driver: QEMU VMs with virtio-net, joined by a virtual Ethernet
//! link, running llc-ping (see `vm_tests::qemu`). No root needed for the rootless links.
//!
//! Skipped (with `SKIPPED <test>: <reason>`) when QEMU, busybox-static or the guest kernel
//! is missing, unless `LLC_VM_REQUIRE=1` (CI), where that is a failure. The VMs usually run
//! under TCG: nothing here measures performance, and the tests print no timings.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use vm_tests::qemu::{
    cargo_release_binary, cargo_release_lib, max_vms, print_skipped, Cluster, Guest, GuestImage,
    Link, Report, VmError,
};
use vm_tests::vm_or_skip;

/// The responder every test runs in the second VM.
const RESPONDER: &str = "exec llc-ping --respond -I $IFACE --backend packet\n";
/// What it prints once it serves.
const RESPONDING: &str = "responding on";

/// One image per test process: llc-ping and llc-xfer (release builds) and their libraries.
fn image() -> Result<&'static GuestImage, VmError> {
    static IMAGE: OnceLock<Result<GuestImage, String>> = OnceLock::new();
    let built = IMAGE.get_or_init(|| {
        let build = || -> Result<GuestImage, VmError> {
            // Check the cheap prerequisites before building anything.
            vm_tests::qemu::qemu_binary()?;
            // LLC_VM_LLC_PING runs the tests with another build (e.g. of another branch).
            let llc_ping: PathBuf = match std::env::var_os("LLC_VM_LLC_PING") {
                Some(path) => path.into(),
                None => cargo_release_binary("llc-ping", "llc-ping")?,
            };
            let llc_xfer: PathBuf = cargo_release_binary("llc-xfer", "llc-xfer")?;
            GuestImage::build(&[llc_ping, llc_xfer])
        };
        build().map_err(|e| match e {
            VmError::Unavailable(why) => format!("unavailable: {why}"),
            e => e.to_string(),
        })
    });
    match built {
        Ok(image) => Ok(image),
        Err(e) => match e.strip_prefix("unavailable: ") {
            Some(why) => Err(VmError::Unavailable(why.to_owned())),
            None => panic!("building the guest image: {e}"),
        },
    }
}

/// One image per test process without project binaries, for guests that run host
/// programs through [`Cluster::host_root`] (busybox, the modules and `/init` only).
fn bare_image() -> Result<&'static GuestImage, VmError> {
    static IMAGE: OnceLock<Result<GuestImage, String>> = OnceLock::new();
    let built = IMAGE.get_or_init(|| {
        GuestImage::build(&[]).map_err(|e| match e {
            VmError::Unavailable(why) => format!("unavailable: {why}"),
            e => e.to_string(),
        })
    });
    match built {
        Ok(image) => Ok(image),
        Err(e) => match e.strip_prefix("unavailable: ") {
            Some(why) => Err(VmError::Unavailable(why.to_owned())),
            None => panic!("building the guest image: {e}"),
        },
    }
}

/// Runs a cluster and prints a one-line summary with how long the run took, from the
/// first boot to the last exit: a test duration, never a performance figure.
fn run(name: &str, cluster: Cluster<'_>) -> Report {
    let report = cluster.run().unwrap_or_else(|e| panic!("{name}: {e}"));
    eprintln!(
        "{name}: {} guests under {} passed in {} s (boot included; not a performance figure)",
        report.outcomes.len(),
        report.accel,
        report.elapsed.as_secs()
    );
    report
}

/// The value of `"key": number` in llc-ping's JSON output line.
fn json_number(console: &str, key: &str) -> f64 {
    let pat = format!("\"{key}\":");
    let line = console
        .lines()
        .rfind(|l| l.contains(&pat))
        .unwrap_or_else(|| panic!("no {key} in console:\n{console}"));
    let rest = &line[line.find(&pat).unwrap() + pat.len()..];
    let num: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-')
        .collect();
    num.parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {line:?}"))
}

/// Link-level TEST round trips, then echo through the reliable transport, between two VMs
/// over AF_PACKET on virtio-net.
#[test]
fn llc_ping_link_and_reliable_over_af_packet() {
    let image = vm_or_skip!(image());
    let script = "\
        llc-ping -I $IFACE --backend packet -c 20 -i 0.05 -W 2 --json $PEER_MAC\n\
        llc-ping -I $IFACE --backend packet --reliable -c 50 -i 0.02 -W 5 --json $PEER_MAC\n";
    let report = run(
        "link+reliable",
        Cluster::new(image)
            .guest(Guest::task(script).name("pinger"))
            .guest(Guest::service(RESPONDER, RESPONDING).name("responder")),
    );
    let console = report.console("pinger").unwrap();
    let results: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("\"received\""))
        .collect();
    assert_eq!(results.len(), 2, "two JSON results expected:\n{console}");
    for line in results {
        assert_eq!(
            json_number(line, "received"),
            json_number(line, "transmitted"),
            "{line}"
        );
        assert!(line.contains("\"backend\""), "{line}");
    }
}

/// Large messages through the reliable transport at MTU 9000 (over the datagram link):
/// llc-ping compares every echoed message byte for byte with what it sent (each carries
/// its sequence number), so `received == transmitted` means every byte came back intact.
#[test]
fn reliable_transfer_is_verified_at_mtu_9000() {
    let image = vm_or_skip!(image());
    let script = "\
        ip link show $IFACE | grep -q 'mtu 9000'\n\
        llc-ping -I $IFACE --backend packet --reliable -s 60000 -c 30 -i 0 -W 20 --json $PEER_MAC\n";
    let report = run(
        "reliable 60000 B at MTU 9000",
        Cluster::new(image)
            .link(Link::Dgram)
            .mtu(9000)
            .guest(Guest::task(script).name("sender"))
            .guest(Guest::service(RESPONDER, RESPONDING).name("echo")),
    );
    let console = report.console("sender").unwrap();
    assert_eq!(json_number(console, "transmitted"), 30.0, "{console}");
    assert_eq!(json_number(console, "received"), 30.0, "{console}");
    assert_eq!(json_number(console, "size"), 60000.0, "{console}");
}

/// 16 MiB of seeded pseudo-random data from one VM to the other through the reliable
/// transport (llc-xfer, MTU 1500, stream link); the SHA-256 the receiver computed must
/// equal the sender's.
#[test]
fn bulk_transfer_sha256_matches_across_vms() {
    let image = vm_or_skip!(image());
    const BYTES: &str = "16777216";
    let receiver = format!("exec llc-xfer --receive -I $IFACE --bytes {BYTES}\n");
    let sender = format!("llc-xfer -I $IFACE --bytes {BYTES} $PEER_MAC\n");
    let report = run(
        "16 MiB transfer",
        Cluster::new(image)
            .guest(Guest::task(sender).name("sender"))
            .guest(Guest::service(receiver, "receiving on").name("receiver")),
    );
    let digest = |name: &str, verb: &str| -> String {
        let console = report.console(name).unwrap();
        let line = console
            .lines()
            .find(|l| l.contains(&format!("llc-xfer: {verb} {BYTES} bytes")))
            .unwrap_or_else(|| panic!("no '{verb}' line from {name}:\n{console}"));
        line.rsplit(' ').next().unwrap().to_owned()
    };
    let (sent, received) = (digest("sender", "sent"), digest("receiver", "received"));
    assert_eq!(sent.len(), 64, "{sent}");
    assert_eq!(
        sent, received,
        "the receiver's SHA-256 differs from the sender's"
    );
}

/// IPv4 on the same NIC keeps working while the stack's frames flow: busybox ping between
/// the VMs runs during link-level and reliable llc-ping, with no loss (multicast link).
#[test]
fn ipv4_is_undisturbed_by_llc_traffic() {
    let image = vm_or_skip!(image());
    let script = "\
        ping -c 1 -W 5 $PEER_IP >/dev/null\n\
        ping -c 40 -i 0.1 -W 5 $PEER_IP > /tmp/ping.txt &\n\
        pid=$!\n\
        llc-ping -I $IFACE --backend packet -c 100 -i 0.02 -W 2 --json $PEER_MAC\n\
        llc-ping -I $IFACE --backend packet --reliable -s 4000 -c 100 -i 0.02 -W 5 --json $PEER_MAC\n\
        wait $pid\n\
        cat /tmp/ping.txt\n";
    let report = run(
        "IPv4 beside LLC",
        Cluster::new(image)
            .link(Link::Multicast)
            .guest(Guest::task(script).name("pinger"))
            .guest(Guest::service(RESPONDER, RESPONDING).name("responder")),
    );
    let console = report.console("pinger").unwrap();
    assert!(
        console.contains("40 packets transmitted, 40 packets received, 0% packet loss"),
        "IPv4 ping lost packets while LLC traffic ran:\n{console}"
    );
    let results: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("\"received\""))
        .collect();
    assert_eq!(results.len(), 2, "{console}");
    for line in results {
        assert_eq!(
            json_number(line, "received"),
            json_number(line, "transmitted"),
            "{line}"
        );
    }
}

/// A wrong peer MAC: llc-ping gets no answer and exits 1; the harness reports the guest's
/// status and console tail promptly instead of hanging.
#[test]
fn wrong_peer_mac_fails_with_the_console_tail() {
    let image = vm_or_skip!(image());
    let err = Cluster::new(image)
        .timeout(Duration::from_secs(120))
        .guest(
            Guest::task("llc-ping -I $IFACE --backend packet -c 3 -W 1 02:4c:4c:00:00:99\n")
                .name("pinger"),
        )
        .guest(Guest::service(RESPONDER, RESPONDING).name("responder"))
        .run()
        .expect_err("pinging a MAC nobody has must fail");
    // A GuestFailed error (not a Timeout) shows it ended when llc-ping gave up.
    let msg = err.to_string();
    eprintln!("the expected error reads:\n{msg}");
    assert!(matches!(err, VmError::GuestFailed { rc: 1, .. }), "{msg}");
    assert!(msg.contains("guest pinger failed with status 1"), "{msg}");
    assert!(msg.contains("--- console of pinger"), "{msg}");
    assert!(msg.contains("no answer from 02:4c:4c:00:00:99"), "{msg}");
    assert!(
        msg.contains("responding on"),
        "the responder's console is quoted too:\n{msg}"
    );
}

/// A binary missing from the guest: status 127 with a hint and the shell's message.
#[test]
fn missing_binary_fails_with_a_hint() {
    let image = vm_or_skip!(image());
    let err = Cluster::new(image)
        .link(Link::Isolated)
        .timeout(Duration::from_secs(60))
        .guest(Guest::task("llc-nonexistent -I $IFACE\n").name("lonely"))
        .run()
        .expect_err("a missing binary must fail");
    let msg = err.to_string();
    eprintln!("the expected error reads:\n{msg}");
    assert!(matches!(err, VmError::GuestFailed { rc: 127, .. }), "{msg}");
    assert!(msg.contains("not found in the guest"), "{msg}");
    assert!(msg.contains("llc-nonexistent: not found"), "{msg}");
}

/// A guest that never finishes is killed at the cluster's hard timeout, with its console.
#[test]
fn hanging_guest_is_killed_at_the_timeout() {
    let image = vm_or_skip!(image());
    let err = Cluster::new(image)
        .link(Link::Isolated)
        .timeout(Duration::from_secs(20))
        .guest(Guest::task("echo about to hang\nsleep 1000\n").name("stuck"))
        .run()
        .expect_err("a hanging guest must time out");
    // Returning at all is the point (wall time would include waiting for a VM slot).
    let msg = err.to_string();
    assert!(
        matches!(&err, VmError::Timeout { stage, .. } if stage == "running the tasks"),
        "{msg}"
    );
    assert!(msg.contains("about to hang"), "{msg}");
}

/// Tap devices on a bridge in a namespace (root), multi-queue virtio-net with 2 vCPUs:
/// link-level and reliable llc-ping.
#[test]
fn llc_ping_over_a_multiqueue_tap_bridge() {
    testbed::require_root!();
    let image = vm_or_skip!(image());
    let script = "\
        ls /sys/class/net/$IFACE/queues | grep -q rx-1\n\
        llc-ping -I $IFACE --backend packet -c 10 -i 0.05 -W 2 --json $PEER_MAC\n\
        llc-ping -I $IFACE --backend packet --reliable -c 20 -i 0.02 -W 5 --json $PEER_MAC\n";
    let report = run(
        "tap bridge, 2 queues",
        Cluster::new(image)
            .link(Link::Bridge { queues: 2 })
            .cpus(2)
            .guest(Guest::task(script).name("pinger"))
            .guest(Guest::service(RESPONDER, RESPONDING).name("responder")),
    );
    let console = report.console("pinger").unwrap();
    for line in console.lines().filter(|l| l.contains("\"received\"")) {
        assert_eq!(
            json_number(line, "received"),
            json_number(line, "transmitted"),
            "{line}"
        );
    }
}

/// Three VMs on one multicast link: the first pings both others, which respond.
/// Runs three TCG guests at once, so only with `LLC_VM_MAX=3` or more.
#[test]
fn three_vms_on_a_multicast_link() {
    if max_vms() < 3 {
        print_skipped(
            "three_vms_on_a_multicast_link",
            &format!(
                "needs 3 VMs at once, LLC_VM_MAX allows {} (TCG guests are CPU-heavy; set \
                 LLC_VM_MAX=3 to run it)",
                max_vms()
            ),
        );
        return;
    }
    let image = vm_or_skip!(image());
    let script = "\
        llc-ping -I $IFACE --backend packet -c 5 -i 0.1 -W 2 $MAC_1\n\
        llc-ping -I $IFACE --backend packet -c 5 -i 0.1 -W 2 $MAC_2\n\
        llc-ping -I $IFACE --backend packet --reliable -c 5 -W 5 $MAC_2\n";
    run(
        "three VMs",
        Cluster::new(image)
            .link(Link::Multicast)
            .guest(Guest::task(script))
            .guest(Guest::service(RESPONDER, RESPONDING))
            .guest(Guest::service(RESPONDER, RESPONDING)),
    );
}

/// AF_XDP with XDP attached natively to virtio-net, link level and reliable. Each guest
/// first checks that `llc-ping --backend xdp` can run there; when it cannot, the test
/// prints SKIPPED with the guest's reason instead of passing silently.
#[test]
fn llc_ping_over_af_xdp_native_on_virtio_net() {
    let image = vm_or_skip!(image());
    // Exit status 2 is llc-ping's "cannot run" (1 only means nobody answered the probe).
    let check = "\
        rc=0\n\
        out=$(llc-ping -I $IFACE --backend xdp -c 1 -W 0.5 02:4c:4c:ff:ff:ff 2>&1) || rc=$?\n\
        if [ $rc -ge 2 ]; then\n\
            echo \"LLC-VM-SKIP llc-ping --backend xdp does not work in the guest: $(echo \"$out\" | tail -n 1)\"\n\
            exit 0\n\
        fi\n";
    // An AF_XDP queue can stay busy for about a second after the check's socket closed.
    let check = format!("{check}sleep 1\n");
    let responder = format!("{check}exec llc-ping --respond -I $IFACE --backend xdp\n");
    let pinger = format!(
        "{check}\
         llc-ping -I $IFACE --backend xdp -c 20 -i 0.05 -W 2 --json $PEER_MAC\n\
         llc-ping -I $IFACE --backend xdp --reliable -c 50 -i 0.02 -W 5 --json $PEER_MAC\n"
    );
    // Native XDP on virtio-net wants a spare queue pair per vCPU for its transmit path:
    // multi-queue taps (2 pairs, 1 vCPU) when root.
    let link = if testbed::check_privileges().is_ok() {
        Link::Bridge { queues: 2 }
    } else {
        Link::Stream
    };
    // Each AF_XDP socket registers (and the kernel pins) a UMEM of 32 MiB
    // with the stack's defaults, one per queue: 64 MiB per guest with 2
    // queues, more than the default 128 MiB guest can spare beside its
    // kernel and root file system (the pinger was OOM-killed there).
    let report = run(
        "AF_XDP",
        Cluster::new(image)
            .link(link)
            .memory_mib(256)
            .guest(Guest::task(pinger).name("pinger"))
            .guest(Guest::service(responder, RESPONDING).name("responder")),
    );
    if let Some(reason) = report.skipped() {
        print_skipped("llc_ping_over_af_xdp_native_on_virtio_net", &reason);
        return;
    }
    let console = report.console("pinger").unwrap();
    let results: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("\"received\""))
        .collect();
    assert_eq!(results.len(), 2, "{console}");
    for line in results {
        assert_eq!(
            json_number(line, "received"),
            json_number(line, "transmitted"),
            "{line}"
        );
        // "af_xdp/<copy|zerocopy>/<native|generic>".
        assert!(
            line.contains("\"backend\":\"af_xdp/"),
            "not the AF_XDP backend: {line}"
        );
        assert!(
            line.contains("/native\""),
            "XDP not attached in native mode on virtio-net: {line}"
        );
    }
}

/// Where Debian's Open MPI keeps its components.
const OPENMPI_COMPONENTS: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";

/// btl/llc built for the VM tests: the release `libmpi_btl_shim.so`, and the component and
/// mpi_check built from it as mpi-btl-shim/tests/mpi.rs builds them.
struct MpiBuild {
    /// `target/release`, holding `libmpi_btl_shim.so` (the component's RUNPATH).
    shim_dir: PathBuf,
    /// `target/release/vm-mpi`, holding `mca_btl_llc.so` and `mpi_check`.
    dir: PathBuf,
}

/// Builds btl/llc and mpi_check (once per process). Missing Open MPI or build tools is a
/// failure that says to run scripts/install-deps.sh.
fn mpi_build() -> &'static MpiBuild {
    static BUILT: OnceLock<MpiBuild> = OnceLock::new();
    BUILT.get_or_init(|| {
        for tool in ["mpirun", "mpicc", "make", "cc"] {
            assert!(
                vm_tests::qemu::find_program(tool).is_some(),
                "{tool} not found: run scripts/install-deps.sh (it installs Open MPI: \
                 openmpi-bin, libopenmpi-dev, and make)"
            );
        }
        assert!(
            Path::new(OPENMPI_COMPONENTS).is_dir(),
            "{OPENMPI_COMPONENTS} missing: run scripts/install-deps.sh (openmpi-bin)"
        );
        let shim_dir = cargo_release_lib("mpi-btl-shim")
            .unwrap_or_else(|e| panic!("{e}"))
            .canonicalize()
            .expect("target/release");
        assert!(
            shim_dir.join("libmpi_btl_shim.so").is_file(),
            "libmpi_btl_shim.so missing in {} after cargo build --release -p mpi-btl-shim",
            shim_dir.display()
        );
        let dir = shim_dir.join("vm-mpi");
        std::fs::create_dir_all(&dir).expect("creating target/release/vm-mpi");
        let shim_crate = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mpi-btl-shim");
        let run = |cmd: &mut Command, what: &str| {
            let out = cmd
                .output()
                .unwrap_or_else(|e| panic!("{what}: {e} (run scripts/install-deps.sh)"));
            assert!(
                out.status.success(),
                "{what} failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(
            Command::new("make")
                .arg("-C")
                .arg(shim_crate.join("component"))
                .arg(format!("SHIM_DIR={}", shim_dir.display()))
                .arg(format!("OUT={}", dir.display())),
            "building mca_btl_llc.so",
        );
        run(
            Command::new("mpicc")
                .args(["-O2", "-Wall", "-pthread", "-o"])
                .arg(dir.join("mpi_check"))
                .arg(shim_crate.join("mpi-tests/mpi_check.c")),
            "building mpi_check",
        );
        MpiBuild { shim_dir, dir }
    })
}

/// The rsh agent Open MPI starts its daemon in the other VM with (built with this test).
fn vm_agent() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_llc-vm-agent"))
        .canonicalize()
        .expect("llc-vm-agent")
}

/// The port the agent serves on in VM 1 (its default).
const AGENT_PORT: u16 = 7727;

/// The number after `key` in a `btl/llc stats:` line (`sent 12 msgs`: key `sent `; the
/// rank in `rank [[27914,1],2]`: key `],`).
fn stat(line: &str, key: &str) -> u64 {
    line.split(key)
        .nth(1)
        .and_then(|rest| rest.split([' ', ',', ']']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {line}"))
}

/// What [`mpi_job_across_two_vms`] saw.
struct MpiJob {
    /// The `btl/llc stats:` lines, one per rank.
    stats: Vec<String>,
}

/// `mpirun` in VM 0 with 2 ranks there and 2 in VM 1 (a daemon started through the rsh
/// agent), running mpi_check with `--mca btl self,vader,llc`, the counters at finalize
/// and, of the btl_llc parameters, only `btl_llc_backend`. Checks that mpi_check passed,
/// that mpirun saw two nodes with local ranks 0 and 1 on each, and that every rank's
/// btl/llc counters show traffic both ways on the guest's eth0.
fn mpi_job_across_two_vms(name: &str, backend: &str, link: Link) -> MpiJob {
    let image = bare_image().expect("checked by the caller");
    let built = mpi_build();
    let agent = vm_agent();
    let agent_dir = agent.parent().expect("the agent's directory").to_owned();
    let mpirun = format!(
        "timeout -k 5 {MPIRUN_TIMEOUT_S} mpirun --allow-run-as-root --oversubscribe \
         --bind-to none --host vm0:2,vm1:2 -np 4 --display-map \
         --mca plm rsh --mca plm_rsh_agent {agent} --mca plm_rsh_no_tree_spawn 1 \
         --mca oob_tcp_if_include ${{IP_0%.*}}.0/24 \
         --mca mca_component_path {OPENMPI_COMPONENTS}:{dir} \
         --mca pml ob1 --mca btl self,vader,llc --mca btl_llc_print_stats 1 \
         --mca btl_llc_backend {backend} \
         ./mpi_check",
        agent = agent.display(),
        dir = built.dir.display(),
    );
    // IPv6 off: Open MPI then sees one address per VM, as on the simulated cluster.
    let no_ipv6 =
        "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1\n";
    let server = format!(
        "{no_ipv6}LLC_VM_AGENT_PORT={AGENT_PORT} exec {} serve $IP_1:{AGENT_PORT}\n",
        agent.display()
    );
    let task = format!(
        "{no_ipv6}cd {dir}\n\
         echo \"llc-vm-mpi: $(cat /proc/sys/kernel/hostname) runs mpirun; vm1 is $(getent hosts vm1)\"\n\
         rc=0\n\
         LLC_VM_AGENT_PORT={AGENT_PORT} {mpirun} || rc=$?\n\
         echo \"llc-vm-mpi: mpirun exited with status $rc\"\n\
         exit $rc\n",
        dir = built.dir.display(),
    );
    let report = run(
        name,
        Cluster::new(image)
            .link(link)
            .host_root([built.shim_dir.clone(), agent_dir])
            .memory_mib(1024)
            .timeout(MPI_CLUSTER_TIMEOUT)
            .guest(Guest::task(task).name("vm0"))
            .guest(Guest::service(server, "serving on").name("vm1")),
    );
    let console = report.console("vm0").unwrap().to_owned();
    let ok = console
        .lines()
        .find_map(|l| l.find("mpi_check: OK ranks=4").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no 'mpi_check: OK ranks=4' from mpi_check:\n{console}"));
    // mpi_check's own time (after "ranks=4") is a TCG timing: not printed.
    eprintln!("{}", ok.split(" time=").next().unwrap_or(ok));
    for node in ["vm0", "vm1"] {
        assert!(
            console.contains(&format!("Data for node: {node}")),
            "mpirun's map has no node {node}:\n{console}"
        );
    }
    let stats: Vec<String> = console
        .lines()
        .filter_map(|l| l.find("btl/llc stats:").map(|i| l[i..].to_owned()))
        .collect();
    assert_eq!(
        stats.len(),
        4,
        "one btl/llc stats line per rank:\n{console}"
    );
    let mut local_ranks = Vec::new();
    for l in &stats {
        eprintln!("{l}");
        assert!(
            stat(l, ": sent ") > 0 && stat(l, "received ") > 0,
            "a rank without btl/llc traffic between the VMs: {l}"
        );
        assert!(l.contains(" if eth0 "), "not on the guest's eth0: {l}");
        local_ranks.push(stat(l, " local "));
    }
    local_ranks.sort_unstable();
    assert_eq!(
        local_ranks,
        [0, 0, 1, 1],
        "local ranks 0 and 1 in each VM:\n{}",
        stats.join("\n")
    );
    MpiJob { stats }
}

/// Bound of mpirun inside VM 0 (its start-up, mpi_check and teardown under TCG).
const MPIRUN_TIMEOUT_S: u32 = 200;
/// Bound of a whole MPI run: both boots, mpirun, stopping the agent.
const MPI_CLUSTER_TIMEOUT: Duration = Duration::from_secs(260);

/// Open MPI across two VMs over real virtio-net NICs, AF_PACKET: `mpirun` in VM 0 starts 2
/// ranks there and, through the rsh agent, a daemon with 2 ranks in VM 1; mpi_check (data
/// checked byte for byte: point-to-point 0 B..16 MiB, ANY_SOURCE, non-blocking, probe,
/// collectives) runs with `--mca btl self,vader,llc` and no btl_llc parameter but the
/// backend and the counters: both ranks of a VM share its eth0, each on a port of its own,
/// and btl/vader carries what stays in a VM, so btl/llc's traffic is between the VMs'
/// kernels (stream link).
///
/// The guests run the host's Open MPI and this build's component from host directories
/// shared read-only over virtio-9p ([`Cluster::host_root`]), with 1 GiB each.
#[test]
fn mpi_job_over_btl_llc_across_two_vms() {
    vm_or_skip!(bare_image());
    let job = mpi_job_across_two_vms(
        "MPI job over btl/llc (AF_PACKET), 2 VMs x 2 ranks",
        "packet",
        Link::Stream,
    );
    for l in &job.stats {
        assert!(l.contains(" transport llc/af_packet"), "not AF_PACKET: {l}");
    }
}

/// The same job with btl/llc's default backend (`auto`): in each VM one rank takes AF_XDP
/// on the virtio-net NIC (XDP attached natively) and joins the interface's shared XDP
/// program, the other opens AF_PACKET beside it (one AF_XDP socket per queue). With root
/// the NICs are multi-queue taps, which virtio-net's native XDP wants (a spare queue pair
/// per vCPU), and each VM must have one AF_XDP rank; without root (stream link) `auto` may
/// fall back to AF_PACKET everywhere, which the test then reports.
#[test]
fn mpi_job_over_btl_llc_auto_across_two_vms() {
    vm_or_skip!(bare_image());
    let root = testbed::check_privileges().is_ok();
    let link = if root {
        Link::Bridge { queues: 2 }
    } else {
        Link::Stream
    };
    let job = mpi_job_across_two_vms("MPI job over btl/llc (auto), 2 VMs x 2 ranks", "auto", link);
    // Ranks 0 and 1 run in vm0, 2 and 3 in vm1.
    let xdp_ranks: Vec<u64> = job
        .stats
        .iter()
        .filter(|l| l.contains(" transport llc/af_xdp/"))
        .map(|l| stat(l, "],"))
        .collect();
    if root {
        assert!(
            xdp_ranks.iter().any(|&r| r < 2) && xdp_ranks.iter().any(|&r| r >= 2),
            "no AF_XDP rank in each VM:\n{}",
            job.stats.join("\n")
        );
    } else if xdp_ranks.is_empty() {
        print_skipped(
            "mpi_job_over_btl_llc_auto_across_two_vms (AF_XDP part)",
            "without root the NICs are single-queue and every rank fell back to AF_PACKET",
        );
    }
}
