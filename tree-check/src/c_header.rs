//! The C headers the libraries commit (`include/*.h`) must be what cbindgen
//! makes of their sources now: one check, called by each library's
//! `tests/header.rs`.

use std::path::Path;

/// Compare `header` (relative to the crate directory `dir`) with what
/// cbindgen, configured by `dir/cbindgen.toml`, makes of `sources`
/// (relative to `dir`). With the environment variable `bless` set, write
/// the header instead. The error says which command rewrites it.
pub fn check(dir: &Path, sources: &[&str], header: &str, bless: &str) -> Result<(), String> {
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .map_err(|e| format!("{}/cbindgen.toml: {e}", dir.display()))?;
    let mut builder = cbindgen::Builder::new().with_config(config);
    for s in sources {
        builder = builder.with_src(dir.join(s));
    }
    let mut generated = Vec::new();
    builder
        .generate()
        .map_err(|e| format!("cbindgen cannot parse {sources:?}: {e}"))?
        .write(&mut generated);
    let generated = String::from_utf8(generated).map_err(|e| e.to_string())?;
    let path = dir.join(header);
    if std::env::var_os(bless).is_some() {
        return std::fs::write(&path, &generated)
            .map_err(|e| format!("writing {}: {e}", path.display()));
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        Ok(())
    } else {
        let krate = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Err(format!(
            "{} is out of date: run {bless}=1 cargo test -p {krate} --test header",
            path.display()
        ))
    }
}
