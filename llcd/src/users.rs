//! The system's user database (NSS): a uid's name and groups, for the
//! policy's `allow` list.

use std::ffi::{CStr, CString};

use crate::policy::Asker;

/// Buffer for the strings `getpw*_r`/`getgr*_r` return: grown on ERANGE up
/// to this size.
const MAX_BUF: usize = 1 << 20;

/// What the user database says of `uid` (name, primary and supplementary
/// groups' names); only the uid for a uid it does not know.
pub fn lookup(uid: u32) -> Asker {
    let Some((name, gid)) = user(uid) else {
        return Asker {
            uid,
            ..Asker::default()
        };
    };
    let groups = group_ids(&name, gid)
        .into_iter()
        .filter_map(group_name)
        .collect();
    Asker {
        uid,
        name: Some(name),
        groups,
    }
}

fn user(uid: u32) -> Option<(String, u32)> {
    let mut buf = vec![0 as libc::c_char; 1024];
    loop {
        // SAFETY: passwd is plain data; all zeros is a valid value.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; buf is writable for
        // its length; on success pwd's strings point into buf, which
        // outlives their use below.
        let rc =
            unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
        if rc == libc::ERANGE && buf.len() < MAX_BUF {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        // SAFETY: pw_name is a NUL-terminated string inside buf.
        let name = unsafe { CStr::from_ptr(pwd.pw_name) }
            .to_string_lossy()
            .into_owned();
        return Some((name, pwd.pw_gid));
    }
}

fn group_ids(name: &str, gid: u32) -> Vec<u32> {
    let Ok(cname) = CString::new(name) else {
        return vec![gid];
    };
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: cname is NUL-terminated; groups is writable for n entries,
        // and n is updated to the number found.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc == -1 && (n as usize) > groups.len() && groups.len() < 65536 {
            groups.resize(n as usize, 0);
            continue;
        }
        if rc == -1 {
            return vec![gid];
        }
        groups.truncate(n.max(0) as usize);
        return groups;
    }
}

fn group_name(gid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 1024];
    loop {
        // SAFETY: group is plain data; all zeros is a valid value.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as in `user`: valid pointers, buf writable for its length.
        let rc =
            unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut result) };
        if rc == libc::ERANGE && buf.len() < MAX_BUF {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        // SAFETY: gr_name is a NUL-terminated string inside buf.
        return Some(
            unsafe { CStr::from_ptr(grp.gr_name) }
                .to_string_lossy()
                .into_owned(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_known_with_its_group() {
        let root = lookup(0);
        assert_eq!(root.name.as_deref(), Some("root"));
        assert!(root.groups.iter().any(|g| g == "root"), "{root:?}");
    }

    #[test]
    fn an_unknown_uid_has_no_name() {
        let a = lookup(3_999_999_999);
        assert_eq!((a.uid, a.name, a.groups.len()), (3_999_999_999, None, 0));
    }
}
