//! The few functions and types of libpmix (4.2, `pmix.h`) this crate uses, mirrored by
//! hand: `pmix_proc_t`, `pmix_value_t` for strings and unsigned integers, and the calls of
//! a client that puts, commits, fences and gets. The test at the bottom checks the
//! mirrors' sizes and offsets against the installed header with a C program.
#![allow(unsafe_code)]
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void, CStr};

/// `PMIX_MAX_NSLEN`: a namespace's longest name.
pub const PMIX_MAX_NSLEN: usize = 255;
/// `PMIX_MAX_KEYLEN`: a key's longest name.
pub const PMIX_MAX_KEYLEN: usize = 511;
/// `PMIX_SUCCESS`.
pub const PMIX_SUCCESS: c_int = 0;
/// `PMIX_RANK_WILDCARD`: the job as a whole (for job-level keys).
pub const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
/// `PMIX_GLOBAL`: a put value is shared with every process of the job.
pub const PMIX_GLOBAL: u8 = 3;
/// `PMIX_STRING`: `data.string`, NUL-terminated.
pub const PMIX_STRING: u16 = 3;
/// `PMIX_UINT16`.
pub const PMIX_UINT16: u16 = 13;
/// `PMIX_UINT32`.
pub const PMIX_UINT32: u16 = 14;

/// `pmix_proc_t`: a namespace (the job) and a rank in it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_proc_t {
    pub nspace: [c_char; PMIX_MAX_NSLEN + 1],
    pub rank: u32,
}

/// The part of `pmix_value_t`'s `data` union this crate reads or writes; the padding
/// member gives the union its C size (24 bytes: its largest members are three words).
#[repr(C)]
#[derive(Clone, Copy)]
pub union pmix_value_data {
    pub flag: bool,
    pub string: *mut c_char,
    pub uint16: u16,
    pub uint32: u32,
    pub _size: [u64; 3],
}

/// `pmix_value_t`: a type tag and the data union.
#[repr(C)]
pub struct pmix_value_t {
    pub type_: u16,
    pub data: pmix_value_data,
}

/// `pmix_info_t`: a directive (key and value) passed to a call.
#[repr(C)]
pub struct pmix_info_t {
    pub key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub flags: u32,
    pub value: pmix_value_t,
}

/// `PMIX_BOOL`: `data.flag`.
pub const PMIX_BOOL: u16 = 1;
/// `PMIX_COLLECT_DATA`: a fence collects what every process committed and hands it to
/// every server (without it, a get fetches it on demand, and a server that already fetched
/// a process's data for one key answers NOT-FOUND for a key put later).
pub const PMIX_COLLECT_DATA: &[u8] = b"pmix.collect";

#[link(name = "pmix")]
extern "C" {
    pub fn PMIx_Init(proc_: *mut pmix_proc_t, info: *mut c_void, ninfo: usize) -> c_int;
    pub fn PMIx_Finalize(info: *const c_void, ninfo: usize) -> c_int;
    pub fn PMIx_Put(scope: u8, key: *const c_char, val: *mut pmix_value_t) -> c_int;
    pub fn PMIx_Commit() -> c_int;
    pub fn PMIx_Fence(
        procs: *const pmix_proc_t,
        nprocs: usize,
        info: *const c_void,
        ninfo: usize,
    ) -> c_int;
    pub fn PMIx_Get(
        proc_: *const pmix_proc_t,
        key: *const c_char,
        info: *const c_void,
        ninfo: usize,
        val: *mut *mut pmix_value_t,
    ) -> c_int;
    pub fn PMIx_Value_destruct(val: *mut pmix_value_t);
    pub fn PMIx_Error_string(status: c_int) -> *const c_char;
    pub fn PMIx_Abort(
        status: c_int,
        msg: *const c_char,
        procs: *mut pmix_proc_t,
        nprocs: usize,
    ) -> c_int;
}

/// Status of a failed call: the PMIx status code.
pub type Status = c_int;

fn ok(status: c_int) -> Result<(), Status> {
    if status == PMIX_SUCCESS {
        Ok(())
    } else {
        Err(status)
    }
}

/// `PMIx_Error_string`.
pub fn error_string(status: Status) -> String {
    // SAFETY: PMIx_Error_string takes any status and returns a static string (or NULL).
    let text = unsafe { PMIx_Error_string(status) };
    if text.is_null() {
        return "unknown error".to_string();
    }
    // SAFETY: a non-NULL result is a NUL-terminated string owned by libpmix.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// `PMIx_Init`: this process's namespace and rank.
pub fn init() -> Result<(String, u32), Status> {
    let mut me = pmix_proc_t {
        nspace: [0; PMIX_MAX_NSLEN + 1],
        rank: 0,
    };
    // SAFETY: `me` is a writable pmix_proc_t; no info array.
    ok(unsafe { PMIx_Init(&mut me, std::ptr::null_mut(), 0) })?;
    // The array is one longer than the longest name and was zeroed: a NUL ends it.
    let len = me
        .nspace
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(PMIX_MAX_NSLEN);
    let name: Vec<u8> = me.nspace[..len].iter().map(|&c| c as u8).collect();
    Ok((String::from_utf8_lossy(&name).into_owned(), me.rank))
}

/// `PMIx_Finalize`.
pub fn finalize() {
    // SAFETY: no info array; called once per successful init.
    let _ = unsafe { PMIx_Finalize(std::ptr::null(), 0) };
}

/// `PMIx_Put` of a string in `PMIX_GLOBAL` scope.
pub fn put_string(key: &CStr, value: &CStr) -> Result<(), Status> {
    let mut val = pmix_value_t {
        type_: PMIX_STRING,
        data: pmix_value_data {
            string: value.as_ptr().cast_mut(),
        },
    };
    // SAFETY: a NUL-terminated key and a string value that live through the call;
    // PMIx_Put copies the value and does not write through the pointer.
    ok(unsafe { PMIx_Put(PMIX_GLOBAL, key.as_ptr(), &mut val) })
}

/// `PMIx_Commit`.
pub fn commit() -> Result<(), Status> {
    // SAFETY: no arguments.
    ok(unsafe { PMIx_Commit() })
}

/// `PMIx_Fence` over every process of the caller's namespace, collecting the data
/// (`PMIX_COLLECT_DATA`).
pub fn fence() -> Result<(), Status> {
    let mut info = pmix_info_t {
        key: [0; PMIX_MAX_KEYLEN + 1],
        flags: 0,
        value: pmix_value_t {
            type_: PMIX_BOOL,
            data: pmix_value_data { _size: [0; 3] },
        },
    };
    info.value.data.flag = true;
    for (d, s) in info.key.iter_mut().zip(PMIX_COLLECT_DATA) {
        *d = *s as c_char;
    }
    // SAFETY: NULL/0 procs means every process of this namespace; one valid info that
    // lives through the call.
    ok(unsafe { PMIx_Fence(std::ptr::null(), 0, (&info as *const pmix_info_t).cast(), 1) })
}

/// `PMIx_Abort` of the whole namespace.
pub fn abort(status: c_int, msg: &CStr) -> Result<(), Status> {
    // SAFETY: a NUL-terminated message; NULL/0 procs means the whole namespace.
    ok(unsafe { PMIx_Abort(status, msg.as_ptr(), std::ptr::null_mut(), 0) })
}

/// What [`get`] returned: the value's data as this crate reads it.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    /// `PMIX_STRING` (NULL reads as empty), as bytes.
    String(Vec<u8>),
    /// `PMIX_UINT16` or `PMIX_UINT32`.
    Unsigned(u32),
    /// Another type: its code.
    Other(u16),
}

/// `PMIx_Get` of `key` of process `rank` of namespace `nspace`; the value is copied out
/// and released.
pub fn get(nspace: &str, rank: u32, key: &CStr) -> Result<Got, Status> {
    let mut who = pmix_proc_t {
        nspace: [0; PMIX_MAX_NSLEN + 1],
        rank,
    };
    for (d, s) in who
        .nspace
        .iter_mut()
        .zip(nspace.bytes().take(PMIX_MAX_NSLEN))
    {
        *d = s as c_char;
    }
    let mut out: *mut pmix_value_t = std::ptr::null_mut();
    // SAFETY: a valid proc and key; `out` receives a value we own afterwards.
    ok(unsafe { PMIx_Get(&who, key.as_ptr(), std::ptr::null(), 0, &mut out) })?;
    if out.is_null() {
        return Ok(Got::Other(0));
    }
    // SAFETY: PMIx_Get returned a valid value, ours until released below.
    let val = unsafe { &*out };
    let got = match val.type_ {
        PMIX_STRING => {
            // SAFETY: the type tag says `string` is the union's member.
            let s = unsafe { val.data.string };
            if s.is_null() {
                Got::String(Vec::new())
            } else {
                // SAFETY: a PMIX_STRING value holds a NUL-terminated string it owns.
                Got::String(unsafe { CStr::from_ptr(s) }.to_bytes().to_vec())
            }
        }
        // SAFETY: the type tag names the member.
        PMIX_UINT32 => Got::Unsigned(unsafe { val.data.uint32 }),
        // SAFETY: the type tag names the member.
        PMIX_UINT16 => Got::Unsigned(u32::from(unsafe { val.data.uint16 })),
        t => Got::Other(t),
    };
    // SAFETY: the value was malloc'ed by PMIx_Get and is released once, here, after its
    // data was copied out.
    unsafe {
        PMIx_Value_destruct(out);
        libc::free(out.cast());
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    /// The mirrors have the header's sizes and offsets, and the constants its values: a C
    /// program compiled against the installed pmix.h prints them.
    #[test]
    fn mirrors_match_the_installed_header() {
        let dir = std::env::temp_dir().join(format!("pmix-boot-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        struct Remove(std::path::PathBuf);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let _remove = Remove(dir.clone());
        let src = dir.join("layout.c");
        std::fs::write(
            &src,
            r#"#include <pmix.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %d %u %d %d %d %d %d %d %zu %zu %zu %d %s\n",
           sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank),
           sizeof(pmix_value_t), offsetof(pmix_value_t, data),
           (size_t) PMIX_MAX_NSLEN, (size_t) PMIX_MAX_KEYLEN, PMIX_SUCCESS,
           (unsigned) PMIX_RANK_WILDCARD, PMIX_GLOBAL, PMIX_STRING, PMIX_UINT16,
           PMIX_UINT32, (int) sizeof(pmix_rank_t), (int) sizeof(pmix_data_type_t),
           sizeof(pmix_info_t), offsetof(pmix_info_t, flags), offsetof(pmix_info_t, value),
           PMIX_BOOL, PMIX_COLLECT_DATA);
    return 0;
}
"#,
        )
        .unwrap();
        let cflags = Command::new("pkg-config")
            .args(["--cflags", "pmix"])
            .output()
            .expect("pkg-config (scripts/install-deps.sh installs it)");
        assert!(cflags.status.success(), "pkg-config --cflags pmix failed");
        let cflags = String::from_utf8(cflags.stdout).unwrap();
        let exe = dir.join("layout");
        let cc = Command::new("cc")
            .args(cflags.split_whitespace())
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("cc (scripts/install-deps.sh installs gcc)");
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = Command::new(&exe).output().unwrap();
        let c = String::from_utf8(out.stdout).unwrap();
        let rust = format!(
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            size_of::<pmix_proc_t>(),
            offset_of!(pmix_proc_t, rank),
            size_of::<pmix_value_t>(),
            offset_of!(pmix_value_t, data),
            PMIX_MAX_NSLEN,
            PMIX_MAX_KEYLEN,
            PMIX_SUCCESS,
            PMIX_RANK_WILDCARD,
            PMIX_GLOBAL,
            PMIX_STRING,
            PMIX_UINT16,
            PMIX_UINT32,
            size_of::<u32>(),
            size_of::<u16>(),
            size_of::<pmix_info_t>(),
            offset_of!(pmix_info_t, flags),
            offset_of!(pmix_info_t, value),
            PMIX_BOOL,
            std::str::from_utf8(PMIX_COLLECT_DATA).unwrap(),
        );
        assert_eq!(
            c.trim(),
            rust,
            "C (left) and the Rust mirrors (right) differ"
        );
    }
}
