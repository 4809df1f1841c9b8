//! The committed C header `include/deck.h` must be what cbindgen makes of
//! `src/codes.rs` and `src/ffi.rs` now. `DECK_BLESS=1` rewrites it instead of failing.

#[test]
fn header_is_up_to_date() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Err(e) = tree_check::c_header::check(
        dir,
        &["src/codes.rs", "src/ffi.rs"],
        "include/deck.h",
        "DECK_BLESS",
    ) {
        panic!("{e}");
    }
}
