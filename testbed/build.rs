//! Compiles `bpf/link_chaos.bpf.c` (the tc program that damages frames on a
//! test link) into a BPF object with clang; `link_chaos.rs` embeds it with
//! `include_bytes!`. No object file is committed.
//!
//! Needs clang, the libbpf headers (`libbpf-dev`) and the kernel UAPI headers
//! (`linux-libc-dev`), as xdp-prog does. Set `CLANG` to use another clang.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "bpf/link_chaos.bpf.c";

fn fail(msg: &str) -> ! {
    eprintln!("\nerror: {msg}\n");
    std::process::exit(1);
}

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    match Command::new(&clang).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => fail(&format!(
            "testbed needs clang to compile its tc BPF program, and `{clang}` was not found or \
             does not run. Install it with `apt-get install clang llvm` (or set CLANG=/path/to/clang)."
        )),
    }
    if !["/usr/include", "/usr/local/include"]
        .iter()
        .any(|d| Path::new(d).join("bpf/bpf_helpers.h").exists())
    {
        fail(
            "testbed needs the libbpf headers (<bpf/bpf_helpers.h>): `apt-get install libbpf-dev`.",
        );
    }
    let arch_include = format!(
        "/usr/include/{}-linux-gnu",
        env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())
    );
    let object = out.join("link_chaos.bpf.o");
    let output = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I{arch_include}"))
        .args(["-c", SOURCE, "-o"])
        .arg(&object)
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run {clang}: {e}")));
    if !output.status.success() {
        fail(&format!(
            "clang failed to compile {SOURCE}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
}
