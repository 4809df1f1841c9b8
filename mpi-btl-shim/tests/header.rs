//! The committed C header `include/llc_shim.h` must be what cbindgen makes
//! of the crate (`src/lib.rs` and the modules it declares) now. `LLC_SHIM_BLESS=1` rewrites it instead of failing.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses src/lib.rs")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/llc_shim.h");
    if std::env::var_os("LLC_SHIM_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("writing the header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is out of date: run LLC_SHIM_BLESS=1 cargo test -p mpi-btl-shim --test header",
        path.display()
    );
}
