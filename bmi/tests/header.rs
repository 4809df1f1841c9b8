//! The committed C header `include/bmi.h` must be what cbindgen makes of
//! `src/ffi.rs` now. `BMI_BLESS=1` rewrites it instead of failing.

#[test]
fn header_is_up_to_date() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Err(e) = tree_check::c_header::check(dir, &["src/ffi.rs"], "include/bmi.h", "BMI_BLESS")
    {
        panic!("{e}");
    }
}
