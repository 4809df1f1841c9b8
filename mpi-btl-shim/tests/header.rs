//! The committed C header `include/llc_shim.h` must be what cbindgen makes of
//! the crate (`src/lib.rs` and the modules it declares) now. `LLC_SHIM_BLESS=1` rewrites it instead of failing.

#[test]
fn header_is_up_to_date() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Err(e) =
        tree_check::c_header::check(dir, &["src/lib.rs"], "include/llc_shim.h", "LLC_SHIM_BLESS")
    {
        panic!("{e}");
    }
}
