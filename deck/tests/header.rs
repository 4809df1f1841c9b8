//! The committed C header `include/deck.h` must be what cbindgen makes of
//! `src/codes.rs` and `src/ffi.rs` now. `DECK_BLESS=1` rewrites it instead of failing.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/codes.rs"))
        .with_src(dir.join("src/ffi.rs"))
        .generate()
        .expect("cbindgen parses src/codes.rs and src/ffi.rs")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/deck.h");
    if std::env::var_os("DECK_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("writing the header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is out of date: run DECK_BLESS=1 cargo test -p deck --test header",
        path.display()
    );
}
