//! This workspace's C libraries as a test finds them, and C programs compiled
//! against them: the C APIs are tested the way C users build (`cc -I include
//! -L dir -lNAME`), against the `.so` cargo built for the same profile.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>` of the running test executable (two levels above it).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The binary `name` of this workspace built for the running test's profile
/// (`target/<profile>/NAME`), or an error that says how to build it.
pub fn binary(name: &str, package: &str) -> Result<PathBuf, String> {
    let path = profile_dir().join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: build it with `cargo build -p {package}` (cargo test --workspace does)",
            path.display()
        ))
    }
}

/// The example `name` of `package` built for the running test's profile
/// (`target/<profile>/examples/NAME`), built with cargo first if it is not
/// there (a test of one crate may run another crate's example).
///
/// # Panics
/// If the build fails (with cargo's messages).
pub fn example(package: &str, name: &str) -> PathBuf {
    let path = profile_dir().join("examples").join(name);
    if !path.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .args(["build", "-q", "-p", package, "--example", name])
            .output()
            .expect("running cargo build");
        assert!(
            out.status.success(),
            "building example {name} of {package}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    path
}

/// The directory holding `file` (e.g. `libbmi.so`): cargo builds a cdylib in
/// `deps/` and `cargo build` copies it up to the profile directory, so take
/// the newer of the two (a copy left by an earlier build may be stale).
///
/// # Panics
/// If neither has it.
pub fn cdylib_dir(file: &str) -> PathBuf {
    let profile = profile_dir();
    let modified = |d: &PathBuf| {
        std::fs::metadata(d.join(file))
            .and_then(|m| m.modified())
            .ok()
    };
    [profile.clone(), profile.join("deps")]
        .into_iter()
        .filter(|d| modified(d).is_some())
        .max_by_key(|d| modified(d))
        .unwrap_or_else(|| {
            panic!(
                "{file} missing in {}: cargo builds the cdylib with the crate's tests",
                profile.display()
            )
        })
}

/// Compile `src` with `cc` into `out`, with `-I include`, `flags`, and linked
/// to the workspace's `lib<lib>.so` (found by [`cdylib_dir`], with an rpath)
/// and `libs` after it.
///
/// # Panics
/// If `cc` is missing or the program does not compile (with the compiler's
/// messages).
pub fn compile_c(
    src: &Path,
    include: &Path,
    lib: &str,
    out: &Path,
    flags: &[&str],
    libs: &[&str],
) -> PathBuf {
    let lib_dir = cdylib_dir(&format!("lib{lib}.so"));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).expect("output directory");
    }
    let res = Command::new("cc")
        .args(flags)
        .arg("-I")
        .arg(include)
        .arg(src)
        .arg("-o")
        .arg(out)
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg(format!("-l{lib}"))
        .args(libs)
        .output()
        .expect("running cc (scripts/install-deps.sh installs gcc and libc6-dev)");
    assert!(
        res.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&res.stderr)
    );
    out.to_path_buf()
}
