//! A writer for the "newc" cpio format, the one the kernel unpacks as an initramfs.
//!
//! Entries are written in order; a directory must come before what it contains. Device
//! nodes can be written without privileges (they are just headers), which is why the
//! harness builds the archive itself instead of calling `cpio` on a staging directory.

use std::io::{self, Write};

/// File type bits of `mode` (from `<sys/stat.h>`).
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFCHR: u32 = 0o020_000;

/// Magic of a newc header (no checksums).
const MAGIC: &[u8] = b"070701";
/// Name of the entry that ends an archive.
const TRAILER: &str = "TRAILER!!!";

/// Builds an archive in memory.
#[derive(Debug, Default)]
pub(crate) struct Archive {
    out: Vec<u8>,
    next_ino: u32,
}

impl Archive {
    pub(crate) fn new() -> Archive {
        Archive {
            out: Vec::new(),
            next_ino: 1,
        }
    }

    /// One entry: header, NUL-terminated name, padding, data, padding.
    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = name.trim_start_matches('/');
        let ino = self.next_ino;
        self.next_ino += 1;
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let fields = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so equal inputs give equal archives
            data.len() as u32,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.out.extend_from_slice(MAGIC);
        for f in fields {
            // Writing into a Vec cannot fail.
            let _ = write!(self.out, "{f:08X}");
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() & 3 != 0 {
            self.out.push(0);
        }
    }

    /// A directory (mode 0755).
    pub(crate) fn dir(&mut self, name: &str) {
        self.entry(name, S_IFDIR | 0o755, (0, 0), &[]);
    }

    /// A regular file with permission bits `perm`.
    pub(crate) fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, S_IFREG | (perm & 0o7777), (0, 0), data);
    }

    /// A character device node.
    pub(crate) fn char_dev(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, S_IFCHR | (perm & 0o7777), (major, minor), &[]);
    }

    /// Ends the archive and returns its bytes.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.entry(TRAILER, 0, (0, 0), &[]);
        self.out
    }
}

/// Writes `bytes` to `path` atomically (a temporary file renamed into place), so a
/// concurrent reader sees either nothing or the whole file.
pub(crate) fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_layout() {
        let mut a = Archive::new();
        a.file("/init", 0o755, b"hi");
        let bytes = a.finish();
        // Header: magic plus 13 eight-digit hex fields.
        assert_eq!(&bytes[..6], b"070701");
        let field = |i: usize| {
            let s = std::str::from_utf8(&bytes[6 + 8 * i..14 + 8 * i]).unwrap();
            u32::from_str_radix(s, 16).unwrap()
        };
        assert_eq!(field(1), 0o100_755); // mode
        assert_eq!(field(6), 2); // size
        assert_eq!(field(11), 5); // "init" + NUL
                                  // 110-byte header + 5-byte name, padded to 116; then the data, padded to 4.
        assert_eq!(&bytes[110..115], b"init\0");
        assert_eq!(&bytes[116..118], b"hi");
        assert_eq!(&bytes[120..126], b"070701");
        assert!(bytes.windows(10).any(|w| w == b"TRAILER!!!"));
        assert_eq!(bytes.len() & 3, 0);
    }

    #[test]
    fn device_nodes_carry_rdev() {
        let mut a = Archive::new();
        a.char_dev("dev/console", 0o600, 5, 1);
        let bytes = a.finish();
        let field = |i: usize| {
            let s = std::str::from_utf8(&bytes[6 + 8 * i..14 + 8 * i]).unwrap();
            u32::from_str_radix(s, 16).unwrap()
        };
        assert_eq!(field(1), 0o020_600);
        assert_eq!((field(9), field(10)), (5, 1));
    }
}
