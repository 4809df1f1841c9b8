//! scripts/install.sh end to end: install, run MPI jobs from the
//! installation with nothing set but what a user sets, watch a running rank
//! with the installed llc-stat, uninstall, and check nothing is left.
//!
//! - `user_install_...`: `--prefix` in a scratch directory and
//!   `--user-component`, so mca_btl_llc.so lands in `$HOME/.openmpi/components`,
//!   which Open MPI searches by default: the job sets only HOME (pointing at
//!   the scratch home), as a user's login does.
//! - `system_install_...`: the component in Open MPI's own directory (from
//!   ompi_info), the rest in a scratch prefix; the job sets nothing at all.
//!   Uninstalled by a guard, also when the test fails; skipped when that
//!   directory already holds a mca_btl_llc.so (a real installation this
//!   test must not touch).
//! - `destdir_...`: a staged tree for packagers: layout, manifest, the
//!   component's run-time path naming the final prefix, and uninstall.
//!
//! Needs root (namespaces, raw sockets, Open MPI's directory) and Open MPI
//! (scripts/install-deps.sh); prints SKIPPED when not root. The install
//! builds with this test's cargo profile and target directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use testbed::netns::MultiPort;
use testbed::{require_root, run_bounded, JobOutput};

/// One test at a time: a component in Open MPI's directory would shadow
/// the one in the scratch home, and mpirun jobs fight over 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// Bound on an install (it may build the workspace's tools).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(1200);
const JOB_TIMEOUT: Duration = Duration::from_secs(120);
const SHOW_TIMEOUT: Duration = Duration::from_secs(30);

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install.sh")
}

/// (cargo profile, target directory) of this test executable
/// (target/<profile>/deps/install-*).
fn build_profile() -> (String, PathBuf) {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let name = profile_dir.file_name().and_then(|n| n.to_str()).unwrap();
    let profile = if name == "debug" { "dev" } else { name };
    (
        profile.to_owned(),
        profile_dir.parent().expect("target").to_owned(),
    )
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("llc-install-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A user's environment: nothing of cargo's library path or Open MPI
/// parameters inherited from the test runner.
fn user_env(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("LD_LIBRARY_PATH");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OMPI_MCA_") {
            cmd.env_remove(&k);
        }
    }
    cmd
}

/// libfabric's provider directory, as pkg-config's libfabric gives it.
fn libfabric_provider_dir() -> PathBuf {
    let out = Command::new("pkg-config")
        .args(["--variable=libdir", "libfabric"])
        .output()
        .expect("pkg-config");
    let libdir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !libdir.is_empty(),
        "pkg-config knows no libfabric: install libfabric-dev (scripts/install-deps.sh)"
    );
    PathBuf::from(libdir).join("libfabric")
}

/// `scripts/install.sh ARGS` with this build's profile; must succeed.
fn install(args: &[&str], home: Option<&Path>) -> JobOutput {
    let out = run_install(args, home);
    assert!(out.success(), "install.sh {args:?} failed:\n{out}");
    out
}

/// `scripts/install.sh ARGS` with this build's profile, as it ends.
fn run_install(args: &[&str], home: Option<&Path>) -> JobOutput {
    let (profile, target) = build_profile();
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .args(args)
        .args(["--profile", &profile])
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO", env!("CARGO"));
    if let Some(h) = home {
        cmd.env("HOME", h);
    }
    run_bounded(&mut cmd, INSTALL_TIMEOUT).expect("running install.sh")
}

/// Open MPI's component directory, as the script finds it.
fn ompi_pkglibdir() -> PathBuf {
    let out = Command::new("ompi_info")
        .args(["--parsable", "--path", "pkglibdir"])
        .output()
        .expect("ompi_info (scripts/install-deps.sh installs openmpi-bin)");
    let s = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(
        s.lines()
            .find_map(|l| l.strip_prefix("path:pkglibdir:"))
            .unwrap_or_else(|| panic!("no pkglibdir in {s}"))
            .trim(),
    )
}

/// Every file (not directory) under `dir`, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The MPI test program, built with mpicc into `dir`.
fn build_program(dir: &Path) -> PathBuf {
    let exe = dir.join("pingpong_until");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-tests/pingpong_until.c");
    let out = user_env(&mut Command::new("mpicc"))
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("mpicc");
    assert!(
        out.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `ompi_info`'s component list with the user's environment.
fn ompi_info_lists_llc(home: Option<&Path>) -> bool {
    let mut cmd = Command::new("ompi_info");
    user_env(&mut cmd);
    if let Some(h) = home {
        cmd.env("HOME", h);
    }
    let out = run_bounded(&mut cmd, Duration::from_secs(60)).expect("ompi_info");
    out.stdout.lines().any(|l| l.contains("MCA btl: llc"))
}

/// `mpirun -np 2 --mca pml ob1 --mca btl BTLS pingpong_until STOP` in the
/// bed's namespace with the user's environment, as its own process group
/// (so every rank can be killed if the test fails).
struct Job {
    child: Child,
    stop: PathBuf,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
}

impl Job {
    fn start(bed: &MultiPort, btls: &str, program: &Path, stop: &Path, home: Option<&Path>) -> Job {
        use std::os::unix::process::CommandExt;
        let mut cmd = bed.ns.command("mpirun");
        user_env(&mut cmd)
            .args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
            ])
            .args(["-np", "2", "--mca", "pml", "ob1", "--mca", "btl", btls])
            .arg(program)
            .arg(stop)
            .arg(JOB_TIMEOUT.as_secs().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        if let Some(h) = home {
            cmd.env("HOME", h);
        }
        let mut child = cmd.spawn().expect("mpirun");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                println!("job: {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Job {
            child,
            stop: stop.to_owned(),
            lines,
            stdout: Vec::new(),
        }
    }

    /// Wait (bounded) for a line of the job's stdout containing `marker`.
    fn wait_line(&mut self, marker: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.stdout.iter().any(|l| l.contains(marker)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.stdout.push(l),
                Err(_) => panic!("no '{marker}' within {timeout:?}: {:?}", self.stdout),
            }
        }
    }

    /// Tell the job to stop and wait (bounded) for mpirun's exit status.
    fn stop(&mut self) -> bool {
        std::fs::write(&self.stop, b"").unwrap();
        let deadline = Instant::now() + JOB_TIMEOUT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.stdout.push(l);
                }
                return st.success();
            }
            assert!(
                Instant::now() < deadline,
                "mpirun did not end after the stop file"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .status();
            let _ = self.child.wait();
        }
    }
}

/// Run a job that stops at once (the stop file exists): must succeed.
fn short_job(bed: &MultiPort, btls: &str, program: &Path, dir: &Path, home: Option<&Path>) {
    let stop = dir.join(format!("stop-now-{}", btls.replace(',', "-")));
    std::fs::write(&stop, b"").unwrap();
    let mut job = Job::start(bed, btls, program, &stop, home);
    assert!(
        job.stop(),
        "mpirun --mca btl {btls} failed: {:?}",
        job.stdout
    );
    assert!(
        job.stdout.iter().any(|l| l.contains("pingpong_until: OK")),
        "{:?}",
        job.stdout
    );
}

/// `llc-stat --json` (the installed one): the endpoints of processes named `comm`.
fn endpoints_of(llc_stat: &Path, comm: &str) -> Vec<Value> {
    let mut cmd = Command::new(llc_stat);
    cmd.arg("--json");
    let out = run_bounded(user_env(&mut cmd), Duration::from_secs(20)).unwrap();
    assert!(out.success(), "{out}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["process"] == comm)
        .cloned()
        .collect()
}

/// Poll the installed llc-stat until `want` accepts the job's endpoints.
fn wait_endpoints<T>(
    llc_stat: &Path,
    what: &str,
    mut want: impl FnMut(&[Value]) -> Option<T>,
) -> T {
    let start = Instant::now();
    let mut last = Vec::new();
    while start.elapsed() < SHOW_TIMEOUT {
        last = endpoints_of(llc_stat, "pingpong_until");
        if let Some(t) = want(&last) {
            return t;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("llc-stat never showed {what} within {SHOW_TIMEOUT:?}: {last:#?}");
}

/// Rank `r`'s endpoint with its first connection's messages_sent, when
/// both ranks show an established connection.
fn rank_sent(eps: &[Value], r: u64) -> Option<(Value, u64)> {
    let ep = eps.iter().find(|e| e["mpi_rank"] == r)?;
    let c = ep["connections"].get(0)?;
    (c["state"] == "established").then(|| (ep.clone(), c["messages_sent"].as_u64().unwrap()))
}

#[test]
fn user_install_runs_mpi_jobs_llc_stat_watches_a_rank_and_uninstall_leaves_nothing() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("user");
    let (prefix, home, work) = (
        scratch.0.join("prefix"),
        scratch.0.join("home"),
        scratch.0.join("work"),
    );
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let p = prefix.to_str().unwrap();
    let out = install(&["--prefix", p, "--user-component"], Some(&home));
    println!("{}", out.stdout);

    let component = home.join(".openmpi/components/mca_btl_llc.so");
    for f in [
        component.clone(),
        prefix.join("lib/libmpi_btl_shim.so"),
        prefix.join("lib/libdeck.so"),
        prefix.join("include/llc_shim.h"),
        prefix.join("include/deck.h"),
        prefix.join("lib/pkgconfig/llc-shim.pc"),
        prefix.join("lib/pkgconfig/deck.pc"),
        prefix.join("bin/llc-stat"),
        prefix.join("bin/llc-ping"),
        prefix.join("bin/llc-perf"),
        prefix.join("bin/deckrun"),
    ] {
        assert!(f.is_file(), "{} not installed", f.display());
    }
    // BMI's C library joins when the crate is in the workspace.
    if Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../bmi/include/bmi.h")
        .is_file()
    {
        for f in ["lib/libbmi.so", "include/bmi.h", "lib/pkgconfig/bmi.pc"] {
            assert!(prefix.join(f).is_file(), "{f} not installed");
        }
    }

    // A C program built with pkg-config's flags links and runs.
    let c = work.join("deck_errors.c");
    std::fs::write(
        &c,
        "#include <deck.h>\n#include <stdio.h>\nint main(void) { puts(deck_strerror(0)); return 0; }\n",
    )
    .unwrap();
    let cmd = format!(
        "cc -o {work}/deck_errors {c} $(pkg-config --cflags --libs deck llc-shim) && {work}/deck_errors",
        work = work.display(),
        c = c.display()
    );
    let mut sh = Command::new("sh");
    sh.args(["-c", &cmd])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"));
    let built = run_bounded(user_env(&mut sh), Duration::from_secs(60)).unwrap();
    assert!(
        built.success() && !built.stdout.trim().is_empty(),
        "{built}"
    );

    // Open MPI finds the component with only HOME set.
    assert!(
        ompi_info_lists_llc(Some(&home)),
        "ompi_info does not list btl llc"
    );

    let program = build_program(&work);
    let bed = MultiPort::new(2, 1500).expect("testbed");
    // The command line: shared memory between the two ranks, llc
    // loaded beside it.
    short_job(&bed, "self,vader,llc", &program, &work, Some(&home));

    // A job whose traffic only btl/llc carries, watched while it runs.
    let llc_stat = prefix.join("bin/llc-stat");
    let mut job = Job::start(&bed, "self,llc", &program, &work.join("stop"), Some(&home));
    job.wait_line("pingpong_until: running", JOB_TIMEOUT);
    let (ep0, sent0) = wait_endpoints(&llc_stat, "both ranks connected", |eps| {
        rank_sent(eps, 1)?;
        rank_sent(eps, 0)
    });
    let eps = endpoints_of(&llc_stat, "pingpong_until");
    assert_eq!(eps.len(), 2, "one endpoint per rank: {eps:#?}");
    let ifaces: Vec<&str> = eps
        .iter()
        .map(|e| e["interface"].as_str().unwrap())
        .collect();
    assert!(
        ifaces.contains(&"llc0") && ifaces.contains(&"llc1"),
        "ranks spread over the ports by default: {ifaces:?}"
    );
    assert_eq!(ep0["label"], "msg-layer");
    let ep1 = eps.iter().find(|e| e["mpi_rank"] == 1).unwrap();
    assert_eq!(
        ep0["connections"][0]["peer"], ep1["mac"],
        "rank 0's connection goes to rank 1"
    );
    // The installed shim is the one the rank runs.
    let pid = ep0["pid"].as_u64().unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let shim = prefix.join("lib/libmpi_btl_shim.so");
    assert!(
        maps.contains(shim.to_str().unwrap()),
        "rank 0 did not map {}",
        shim.display()
    );
    // Counters that move between two reads.
    let (_, sent1) = wait_endpoints(&llc_stat, "rank 0's messages moving", |eps| {
        rank_sent(eps, 0).filter(|(_, s)| *s > sent0)
    });
    assert!(sent1 > sent0);
    let mut table = Command::new(&llc_stat);
    table.args(["-p", &pid.to_string()]);
    let t = run_bounded(user_env(&mut table), Duration::from_secs(20)).unwrap();
    assert!(t.success(), "{t}");
    assert!(
        t.stdout
            .contains("pingpong_until (MPI rank 0, msg-layer): llc"),
        "{}",
        t.stdout
    );
    println!("{}", t.stdout);

    assert!(job.stop(), "the watched job failed: {:?}", job.stdout);
    // Finalize closed the endpoints: their pages went with them.
    assert_eq!(
        endpoints_of(&llc_stat, "pingpong_until"),
        Vec::<Value>::new()
    );
    drop(job);
    drop(bed);

    let out = install(
        &["--prefix", p, "--user-component", "--uninstall"],
        Some(&home),
    );
    println!("{}", out.stdout);
    assert!(
        !prefix.exists(),
        "left in the prefix: {:?}",
        files_under(&prefix)
    );
    assert!(
        !home.join(".openmpi").exists(),
        "left in the home: {:?}",
        files_under(&home)
    );
}

/// Uninstalls on drop, so a failing test leaves Open MPI's directory as it was.
struct Installed<'a> {
    prefix: &'a str,
    component: PathBuf,
    done: bool,
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = Command::new("bash")
                .arg(script())
                .args(["--prefix", self.prefix, "--uninstall"])
                .status();
            let _ = std::fs::remove_file(&self.component);
        }
    }
}

#[test]
fn system_install_into_open_mpis_directory_needs_nothing_set() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pkglibdir = ompi_pkglibdir();
    let component = pkglibdir.join("mca_btl_llc.so");
    if component.exists() {
        eprintln!(
            "SKIPPED system_install: {} exists (an installation this test must not replace)",
            component.display()
        );
        return;
    }
    let scratch = Scratch::new("system");
    let prefix = scratch.0.join("prefix");
    let p = prefix.to_str().unwrap().to_owned();
    let mut guard = Installed {
        prefix: &p,
        component: component.clone(),
        done: false,
    };
    let provider = libfabric_provider_dir().join("libllc-fi.so");
    if provider.exists() {
        eprintln!(
            "SKIPPED system_install: {} exists (an installation this test must not replace)",
            provider.display()
        );
        return;
    }
    install(&["--prefix", &p], None);
    assert!(component.is_file(), "not in {}", pkglibdir.display());
    assert!(ompi_info_lists_llc(None), "ompi_info does not list btl llc");
    // libfabric finds the provider with nothing set.
    let fi = Command::new("fi_info")
        .arg("-l")
        .env_remove("FI_PROVIDER_PATH")
        .output()
        .expect("fi_info (libfabric-bin)");
    assert!(
        String::from_utf8_lossy(&fi.stdout).contains("llc:"),
        "fi_info -l: {}",
        String::from_utf8_lossy(&fi.stdout)
    );

    let work = scratch.0.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let program = build_program(&work);
    let bed = MultiPort::new(2, 1500).expect("testbed");
    short_job(&bed, "self,vader,llc", &program, &work, None);
    short_job(&bed, "self,llc", &program, &work, None);
    drop(bed);

    install(&["--prefix", &p, "--uninstall"], None);
    guard.done = true;
    assert!(!component.exists(), "{} left", component.display());
    assert!(!provider.exists(), "{} left", provider.display());
    assert!(!prefix.exists(), "left: {:?}", files_under(&prefix));
    assert!(
        pkglibdir.join("mca_btl_self.so").exists(),
        "Open MPI's own files stay"
    );
}

#[test]
fn destdir_stages_the_final_layout_and_uninstall_empties_it() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("destdir");
    let d = scratch.0.join("stage");
    let ds = d.to_str().unwrap();
    // A file of someone else's where a tool would go: refused, nothing written.
    let foreign = d.join("usr/local/bin/llc-stat");
    std::fs::create_dir_all(foreign.parent().unwrap()).unwrap();
    std::fs::write(&foreign, b"not ours").unwrap();
    let refused = run_install(&["--destdir", ds], None);
    assert!(!refused.success(), "{refused}");
    assert!(
        refused
            .stderr
            .contains("exists and no manifest of ours lists it"),
        "{refused}"
    );
    assert_eq!(files_under(&d), vec![foreign.clone()], "wrote something");
    assert_eq!(std::fs::read(&foreign).unwrap(), b"not ours");
    std::fs::remove_dir_all(&d).unwrap();

    install(&["--destdir", ds], None);
    let pkglibdir = ompi_pkglibdir();
    let staged = |p: &Path| d.join(p.strip_prefix("/").unwrap());
    let component = staged(&pkglibdir.join("mca_btl_llc.so"));
    assert!(component.is_file(), "{} missing", component.display());
    let readelf = Command::new("readelf")
        .arg("-d")
        .arg(&component)
        .output()
        .expect("readelf (binutils)");
    let dynamic = String::from_utf8_lossy(&readelf.stdout);
    assert!(
        dynamic.contains("[/usr/local/lib]") && !dynamic.contains(ds),
        "the run-time path must name the final prefix:\n{dynamic}"
    );
    // The manifest lists exactly the files staged (and itself is the one
    // file it does not list).
    let manifest = staged(Path::new("/usr/local/share/llc-stack/install-manifest"));
    let listed: Vec<PathBuf> = std::fs::read_to_string(&manifest)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("f "))
        .map(|p| staged(Path::new(p)))
        .collect();
    let mut listed_sorted = listed.clone();
    listed_sorted.push(manifest.clone());
    listed_sorted.sort();
    assert_eq!(files_under(&d), listed_sorted);
    // The endpoint service for ordinary users: its unit names the final path.
    let unit = staged(Path::new("/usr/local/lib/systemd/system/llcd.service"));
    let unit_text = std::fs::read_to_string(&unit).expect("llcd.service staged");
    assert!(
        unit_text.contains("ExecStart=/usr/local/sbin/llcd --foreground"),
        "{unit_text}"
    );
    let provider = staged(&libfabric_provider_dir().join("libllc-fi.so"));
    assert!(
        listed.contains(&provider),
        "{} not staged",
        provider.display()
    );
    for f in [
        "lib/libmpi_btl_shim.so",
        "include/llc_shim.h",
        "bin/llc-stat",
        "sbin/llcd",
        "share/llc-stack/llcd.toml.example",
    ] {
        assert!(
            listed.contains(&staged(&Path::new("/usr/local").join(f))),
            "{f} not staged"
        );
    }
    install(&["--destdir", ds, "--uninstall"], None);
    assert_eq!(files_under(&d), Vec::<PathBuf>::new());
    assert_eq!(
        std::fs::read_dir(&d).unwrap().count(),
        0,
        "directories left"
    );
}

/// `--deb`: a Debian package with the component in Open MPI's directory,
/// everything else under /usr, and no manifest (dpkg keeps the list).
/// Installing it with dpkg is what the system install above does by hand.
#[test]
fn deb_package_holds_the_component_libraries_headers_and_tools() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("deb");
    let deb = scratch.0.join("llc-stack.deb");
    install(&["--deb", deb.to_str().unwrap()], None);
    let list = Command::new("dpkg-deb")
        .arg("-c")
        .arg(&deb)
        .output()
        .unwrap();
    assert!(list.status.success());
    let list = String::from_utf8_lossy(&list.stdout);
    let files: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|p| !p.ends_with('/'))
        .collect();
    let component = format!(".{}/mca_btl_llc.so", ompi_pkglibdir().display());
    let provider = format!(".{}/libllc-fi.so", libfabric_provider_dir().display());
    for f in [
        component.as_str(),
        provider.as_str(),
        "./usr/lib/libmpi_btl_shim.so",
        "./usr/lib/libdeck.so",
        "./usr/include/llc_shim.h",
        "./usr/lib/pkgconfig/llc-shim.pc",
        "./usr/bin/llc-stat",
        "./usr/bin/deckrun",
    ] {
        assert!(files.contains(&f), "{f} not in the package: {files:?}");
    }
    assert!(
        !files.iter().any(|f| f.contains("install-manifest")),
        "{files:?}"
    );
    let info = Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("Package: llc-stack"), "{info}");
    assert!(info.contains("Depends: openmpi-bin, libopenmpi3"), "{info}");
}
