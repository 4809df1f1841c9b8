//! Debian's libfabric (1.17) loads the provider and lists it: `fi_info`
//! from libfabric-bin, with the provider found through FI_PROVIDER_PATH as
//! the PyPI MPIs' libfabric finds it (the system install, which needs
//! nothing set, is tested with scripts/install.sh). In a network namespace
//! of its own with a veth pair, so the interfaces offered are known.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use testbed::netns::{add_veth_loop, Netns};

/// A directory holding the provider under its installed name.
struct ProviderDir(PathBuf);

impl ProviderDir {
    fn new() -> ProviderDir {
        let lib = testbed::cdylib::cdylib_dir("libllc_fi.so").join("libllc_fi.so");
        let dir = std::env::temp_dir().join(format!(
            "llc-fi-prov-{}-{:x}",
            std::process::id(),
            rand_tag()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&lib, dir.join("libllc-fi.so")).unwrap();
        ProviderDir(dir)
    }
}

impl Drop for ProviderDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_tag() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn fi_info(ns: &Netns, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = ns.command("fi_info");
    cmd.args(args).env("FI_PROVIDER_PATH", dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .expect("fi_info runs (libfabric-bin, scripts/install-deps.sh)")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn fi_info_lists_the_provider_its_attributes_and_parameters() {
    testbed::require_root!();
    let ns = Netns::new("fiinfo").unwrap();
    add_veth_loop(&ns, "fa0", "fb0", 1).unwrap();
    let dir = ProviderDir::new();

    let o = fi_info(&ns, &dir.0, &["-l"], &[]);
    assert!(
        text(&o).contains("llc:"),
        "fi_info -l does not list llc:\n{}",
        text(&o)
    );

    // One info per interface that can carry LLC: the pair's two ends.
    let o = fi_info(&ns, &dir.0, &["-p", "llc"], &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches("provider: llc").count(), 2, "{t}");
    assert!(t.contains("fabric: llc") && t.contains("FI_EP_RDM"), "{t}");

    // Verbose: every attribute through fi_tostr.
    let o = fi_info(&ns, &dir.0, &["-p", "llc", "-v"], &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in [
        "FI_MSG",
        "FI_TAGGED",
        "FI_DIRECTED_RECV",
        "FI_THREAD_SAFE",
        "mem_tag_format: 0xaaaaaaaaaaaaaaaa",
        "cq_data_size: 8",
    ] {
        assert!(t.contains(want), "fi_info -v lacks {want}:\n{t}");
    }

    // A capability the provider does not serve: no answer from llc.
    let o = fi_info(&ns, &dir.0, &["-p", "llc", "-c", "FI_ATOMIC"], &[]);
    assert!(!text(&o).contains("provider: llc"), "{}", text(&o));

    // FI_LLC_IFACE restricts the offer, and a wrong name says why (FI_LOG_LEVEL=warn).
    let first = "fa0".to_string();
    let o = fi_info(&ns, &dir.0, &["-p", "llc"], &[("FI_LLC_IFACE", &first)]);
    let t = text(&o);
    assert_eq!(t.matches("provider: llc").count(), 1, "{t}");
    assert!(t.contains(&format!("domain: {first}")), "{t}");
    let o = fi_info(
        &ns,
        &dir.0,
        &["-p", "llc"],
        &[("FI_LLC_IFACE", "nosuch0"), ("FI_LOG_LEVEL", "warn")],
    );
    let t = text(&o);
    assert!(!t.contains("provider: llc") && t.contains("nosuch0"), "{t}");

    // Parameters are listed under libfabric's names.
    let o = fi_info(&ns, &dir.0, &["-e"], &[]);
    let t = text(&o);
    for p in ["FI_LLC_IFACE", "FI_LLC_BACKEND", "FI_LLC_AUTH"] {
        assert!(t.contains(p), "fi_info -e lacks {p}");
    }
}

#[test]
fn the_object_exports_only_the_providers_entry_point() {
    let lib = testbed::cdylib::cdylib_dir("libllc_fi.so").join("libllc_fi.so");
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils)");
    let t = String::from_utf8_lossy(&o.stdout);
    let exported: Vec<&str> = t
        .lines()
        .filter(|l| l.contains(" T "))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(exported, vec!["fi_prov_ini"], "{t}");
}
