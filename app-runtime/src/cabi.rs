//! Helpers of the C entry points every API exports (libdeck, libbmi, the
//! BTL shim): a panic never unwinds into C (which aborts the process, and
//! an MPI job with it, without a word), and the words of the last error
//! stay readable by the caller of the thread that got it.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Run the body of the C entry point `name`: a panic (a bug in the API or
/// below it) is reported on stderr and becomes `on_panic`, a value the
/// caller handles as an error.
pub fn guard<T>(name: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(e) => {
            let what = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            eprintln!("{name}: internal error: {what}");
            set_last_error(&format!("internal error in {name} (a panic; see stderr)"));
            on_panic
        }
    }
}

/// An error a C entry point returns as a code.
pub trait Code: std::fmt::Display {
    /// The code the C caller sees.
    fn code(&self) -> i32;
}

/// Run the C entry point `name`: `Ok(v)` returns `v`; an error becomes its
/// code and the thread's last error; a panic becomes `on_panic` (see
/// [`guard`]).
pub fn call<E: Code>(name: &str, on_panic: i32, f: impl FnOnce() -> Result<i32, E>) -> i32 {
    guard(name, on_panic, || match f() {
        Ok(v) => v,
        Err(e) => {
            set_last_error(&e.to_string());
            e.code()
        }
    })
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Keep `msg` as this thread's last error (a NUL in it becomes a space).
pub fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// This thread's last error, valid until its next error.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// This thread's last error, as text.
pub fn last_error() -> String {
    LAST_ERROR.with(|l| l.borrow().to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bad;
    impl std::fmt::Display for Bad {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bad\0thing")
        }
    }
    impl Code for Bad {
        fn code(&self) -> i32 {
            -7
        }
    }

    #[test]
    fn errors_become_codes_and_panics_do_not_unwind() {
        assert_eq!(call::<Bad>("t", -1, || Ok(5)), 5);
        assert_eq!(call("t", -1, || Err(Bad)), -7);
        assert_eq!(last_error(), "bad thing");
        assert_eq!(call::<Bad>("t_panics", -1, || panic!("boom")), -1);
        assert!(last_error().contains("t_panics"), "{}", last_error());
        assert_eq!(guard("g", 9u8, || 3u8), 3);
    }
}
