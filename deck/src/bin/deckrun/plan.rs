//! What deckrun decides before it starts anything: where each node runs,
//! what program, with what environment, and how a remote host is reached.
//! Everything that can be wrong with the command line fails here, so a bad
//! job starts no process.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use deck::boot::{
    KeyMaterial, ENV_BACKEND, ENV_BOOT, ENV_IFACE, ENV_JOB, ENV_NODE, ENV_NUMNODES, MAX_KEY,
};
use msg_layer::transport::llc::AUTH_KEY_ENV;

/// One `--host` entry: `NAME[:SLOTS]` (`[v6addr][:SLOTS]` for an IPv6
/// literal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    pub name: String,
    pub slots: Option<u32>,
}

impl FromStr for HostSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<HostSpec, String> {
        let s = s.trim();
        let (name, slots) = if let Some(rest) = s.strip_prefix('[') {
            let (addr, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("{s:?}: no ']' after the IPv6 address"))?;
            match after {
                "" => (addr, None),
                _ => match after.strip_prefix(':') {
                    Some(n) => (addr, Some(n)),
                    None => return Err(format!("{s:?}: expected ':SLOTS' after ']'")),
                },
            }
        } else {
            match s.rsplit_once(':') {
                Some((h, n)) if !h.contains(':') => (h, Some(n)),
                Some(_) => return Err(format!("{s:?}: write IPv6 addresses as [ADDR]:SLOTS")),
                None => (s, None),
            }
        };
        if name.is_empty() {
            return Err(format!("{s:?}: empty host name"));
        }
        let slots = match slots {
            None => None,
            Some(n) => Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("{s:?}: SLOTS must be a number above 0"))?,
            ),
        };
        Ok(HostSpec {
            name: name.to_owned(),
            slots,
        })
    }
}

impl fmt::Display for HostSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.slots {
            Some(n) => write!(f, "{}:{n}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Block placement: node `i` runs on `hosts[place(..)[i]]`. Each host's
/// slots fill before the next host's; a host without `:SLOTS` has
/// ceil(n / hosts) of them.
pub fn place(n: u32, hosts: &[HostSpec]) -> Result<Vec<usize>> {
    if hosts.is_empty() {
        return Ok(vec![0; n as usize]);
    }
    let default = n.div_ceil(hosts.len() as u32).max(1);
    let slots: Vec<u32> = hosts.iter().map(|h| h.slots.unwrap_or(default)).collect();
    let total: u64 = slots.iter().map(|&s| u64::from(s)).sum();
    if total < u64::from(n) {
        let list: Vec<String> = hosts
            .iter()
            .zip(&slots)
            .map(|(h, s)| format!("{}:{s}", h.name))
            .collect();
        bail!(
            "{n} nodes but only {total} slots on the hosts ({}); give more hosts or slots",
            list.join(",")
        );
    }
    let mut placement = Vec::with_capacity(n as usize);
    for (i, &s) in slots.iter().enumerate() {
        let left = n as usize - placement.len();
        placement.resize(placement.len() + left.min(s as usize), i);
    }
    Ok(placement)
}

/// This machine's hostname, as the kernel has it.
pub fn own_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// A host whose nodes deckrun starts itself rather than through the agent.
pub fn is_local(host: &str, hostname: &str) -> bool {
    host == "localhost" || host == "127.0.0.1" || (!hostname.is_empty() && host == hostname)
}

/// The address `host` is reached at (IPv4: the bootstrap server listens
/// on IPv4 only).
pub fn resolve(host: &str) -> Result<Ipv4Addr> {
    let addrs: Vec<SocketAddr> = (host, 0)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve host {host}"))?
        .collect();
    addrs
        .iter()
        .find_map(|a| match a.ip() {
            IpAddr::V4(ip) => Some(ip),
            IpAddr::V6(_) => None,
        })
        .with_context(|| {
            format!("host {host} has no IPv4 address (deckrun's bootstrap server uses IPv4)")
        })
}

/// The local address the route to `dest` leaves from: connecting a UDP
/// socket only picks the route, no packet is sent.
pub fn route_source(dest: Ipv4Addr) -> io::Result<IpAddr> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    socket.connect((dest, 9))?;
    Ok(socket.local_addr()?.ip())
}

/// `word` quoted for a POSIX shell: the remote shell gets it back as it is.
pub fn shell_quote(word: &OsStr) -> OsString {
    let bytes = word.as_bytes();
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(b);
    if !bytes.is_empty() && bytes.iter().all(plain) {
        return word.to_owned();
    }
    let mut out = Vec::with_capacity(bytes.len() + 2);
    out.push(b'\'');
    for &b in bytes {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    OsString::from_vec(out)
}

/// The program's absolute path, as mpirun does: a name without `/` is
/// looked up in `path` (PATH), a relative path is taken from `cwd`. The
/// same path is used on every host.
pub fn resolve_program(program: &OsStr, path: Option<&OsStr>, cwd: &Path) -> Result<PathBuf> {
    let shown = Path::new(program).display();
    if program.is_empty() {
        bail!("PROGRAM is empty");
    }
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.as_bytes().contains(&b'/') {
        let p = cwd.join(program);
        if !p.exists() {
            bail!("program {shown}: no such file");
        }
        if !executable(&p) {
            bail!("program {shown}: not an executable file");
        }
        return Ok(p);
    }
    let dirs = path.map(|p| std::env::split_paths(p).collect::<Vec<_>>());
    let found = dirs
        .iter()
        .flatten()
        .map(|d| cwd.join(d).join(program))
        .find(|p| executable(p));
    found.with_context(|| format!("program {shown}: not found in PATH"))
}

/// Variables deckrun sets itself; `-x` may not name them.
const RESERVED: [&str; 6] = [
    ENV_NODE,
    ENV_NUMNODES,
    ENV_BOOT,
    ENV_JOB,
    ENV_BACKEND,
    ENV_IFACE,
];

/// A `-x NAME[=VALUE]`: NAME alone forwards deckrun's own value.
pub fn parse_export(
    spec: &str,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<(String, OsString)> {
    let (name, value) = match spec.split_once('=') {
        Some((n, v)) => (n, Some(OsString::from(v))),
        None => (spec, None),
    };
    let valid = name
        .bytes()
        .enumerate()
        .all(|(i, b)| b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit()));
    if name.is_empty() || !valid {
        bail!("-x {spec}: {name:?} is not a variable name (letters, digits, '_')");
    }
    if RESERVED.contains(&name) {
        bail!("-x {spec}: deckrun sets {name} itself (see --iface, --backend)");
    }
    if name == AUTH_KEY_ENV {
        bail!(
            "-x {name}: deckrun hands the job's key to every node itself, taking \
             {AUTH_KEY_ENV} from its own environment when set (-x would show it on the \
             command line of remote nodes)"
        );
    }
    let value = match value {
        Some(v) => v,
        None => lookup(name).with_context(|| {
            format!("-x {name}: {name} is not set in deckrun's environment (write -x {name}=VALUE)")
        })?,
    };
    Ok((name.to_owned(), value))
}

/// The job's key material: `from_env` (deckrun's `LLC_AUTH_KEY`) when
/// set, else 32 random bytes in hex.
pub fn job_key(from_env: Option<OsString>) -> Result<KeyMaterial> {
    let material = match from_env {
        Some(v) => v.into_string().map_err(|_| {
            anyhow::anyhow!("{AUTH_KEY_ENV} is not valid UTF-8: give the key material as text")
        })?,
        None => {
            msg_layer::transport::llc::random_key_material().context("cannot draw the job's key")?
        }
    };
    KeyMaterial::new(material).with_context(|| {
        format!("{AUTH_KEY_ENV} must hold 1 to {MAX_KEY} bytes of key material (or be unset)")
    })
}

/// A random 64-bit job id: tells this run's nodes from stray processes of
/// another.
pub fn random_job_id() -> Result<u64> {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the job id")?;
    Ok(u64::from_ne_bytes(bytes))
}

/// The remote command line: `env NAME=VALUE... PROGRAM ARGS...`, each word
/// quoted for the remote shell (the agent joins them with spaces and runs
/// them with `sh -c`).
pub fn remote_words(
    env: &[(String, OsString)],
    program: &Path,
    args: &[OsString],
) -> Vec<OsString> {
    let mut words = vec![OsString::from("env")];
    for (name, value) in env {
        let mut kv = OsString::from(format!("{name}="));
        kv.push(value);
        words.push(shell_quote(&kv));
    }
    words.push(shell_quote(program.as_os_str()));
    words.extend(args.iter().map(|a| shell_quote(a)));
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn hosts(list: &str) -> Vec<HostSpec> {
        list.split(',').map(|h| h.parse().unwrap()).collect()
    }

    #[test]
    fn host_specs_parse() {
        assert_eq!(
            "h1:3".parse(),
            Ok(HostSpec {
                name: "h1".into(),
                slots: Some(3)
            })
        );
        assert_eq!(
            "h1".parse(),
            Ok(HostSpec {
                name: "h1".into(),
                slots: None
            })
        );
        assert_eq!(
            "[fe80::1]:2".parse(),
            Ok(HostSpec {
                name: "fe80::1".into(),
                slots: Some(2)
            })
        );
        for bad in ["h1:0", "h1:x", ":2", "fe80::1", "[::1", "[::1]2"] {
            assert!(bad.parse::<HostSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn block_placement_fills_hosts_in_order() {
        assert_eq!(place(3, &[]).unwrap(), [0, 0, 0]);
        assert_eq!(place(4, &hosts("a:2,b:2")).unwrap(), [0, 0, 1, 1]);
        assert_eq!(place(3, &hosts("a:2,b:2")).unwrap(), [0, 0, 1]);
        // Default slots: ceil(5 / 2) = 3 each.
        assert_eq!(place(5, &hosts("a,b")).unwrap(), [0, 0, 0, 1, 1]);
        assert_eq!(place(4, &hosts("a:1,b,c")).unwrap(), [0, 1, 1, 2]);
        let e = place(5, &hosts("a:2,b:2")).unwrap_err().to_string();
        assert!(
            e.contains("5 nodes but only 4 slots") && e.contains("a:2,b:2"),
            "{e}"
        );
    }

    #[test]
    fn local_hosts() {
        assert!(is_local("localhost", "n1"));
        assert!(is_local("127.0.0.1", "n1"));
        assert!(is_local("n1", "n1"));
        assert!(!is_local("n2", "n1"));
        assert!(!is_local("", ""));
    }

    #[test]
    fn quoted_words_survive_a_shell() {
        let words = [
            "plain",
            "with space",
            "it's",
            "$HOME",
            "`x`",
            "a\"b",
            "",
            "*",
            "x;y",
        ];
        let quoted: Vec<String> = words
            .iter()
            .map(|w| shell_quote(OsStr::new(w)).into_string().unwrap())
            .collect();
        assert_eq!(quoted[0], "plain");
        assert_eq!(quoted[2], r"'it'\''s'");
        // The shell splits the joined line back into the same words.
        let script = format!(
            "for w in {}; do printf '%s\\n' \"$w\"; done",
            quoted.join(" ")
        );
        let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
        let back: Vec<&str> = std::str::from_utf8(&out.stdout)
            .unwrap()
            .split_terminator('\n')
            .collect();
        assert_eq!(back, words);
    }

    #[test]
    fn remote_command_line() {
        let env = [
            ("DECK_NODE".to_string(), OsString::from("2")),
            ("MSG".to_string(), OsString::from("a b")),
        ];
        let words = remote_words(&env, Path::new("/bin/prog"), &["x y".into()]);
        assert_eq!(
            words,
            ["env", "DECK_NODE=2", "'MSG=a b'", "/bin/prog", "'x y'"].map(OsString::from)
        );
    }

    #[test]
    fn programs_resolve_to_absolute_paths() {
        let cwd = std::env::temp_dir();
        let path = OsString::from("/nonexistent:/bin:/usr/bin");
        let sh = resolve_program(OsStr::new("sh"), Some(&path), &cwd).unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        let e = resolve_program(OsStr::new("no-such-prog-x"), Some(&path), &cwd).unwrap_err();
        assert!(e.to_string().contains("not found in PATH"), "{e}");
        let e = resolve_program(OsStr::new("./no-such-prog-x"), Some(&path), &cwd).unwrap_err();
        assert!(e.to_string().contains("no such file"), "{e}");
        // A plain file, removed again even if an assertion fails.
        struct Removed(PathBuf);
        impl Drop for Removed {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let file = Removed(cwd.join(format!("deckrun-test-{}", std::process::id())));
        std::fs::write(&file.0, "not a program").unwrap();
        let e = resolve_program(file.0.as_os_str(), None, &cwd).unwrap_err();
        assert!(e.to_string().contains("not an executable"), "{e}");
    }

    #[test]
    fn exports() {
        let lookup = |n: &str| (n == "HOME").then(|| OsString::from("/root"));
        assert_eq!(
            parse_export("A=1=2", lookup).unwrap(),
            ("A".into(), "1=2".into())
        );
        assert_eq!(
            parse_export("HOME", lookup).unwrap(),
            ("HOME".into(), "/root".into())
        );
        for (bad, why) in [
            ("UNSET_X", "not set"),
            ("1A=2", "not a variable name"),
            ("=x", "not a variable name"),
            ("DECK_NODE=3", "deckrun sets DECK_NODE"),
            (
                "LLC_AUTH_KEY=s3cret",
                "hands the job's key to every node itself",
            ),
        ] {
            let e = parse_export(bad, lookup).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(!e.contains("s3cret"), "the key shows in the error: {e}");
        }
    }

    #[test]
    fn the_job_key_is_the_environments_or_a_random_one() {
        let given = job_key(Some("material".into())).unwrap();
        assert_eq!(given.as_bytes(), b"material");
        let (a, b) = (job_key(None).unwrap(), job_key(None).unwrap());
        assert_eq!(a.as_bytes().len(), 64, "32 random bytes in hex");
        assert!(a.as_bytes().iter().all(u8::is_ascii_hexdigit));
        assert_ne!(a, b);
        let e = job_key(Some("".into())).unwrap_err().to_string();
        assert!(e.contains("1 to 1024 bytes"), "{e}");
    }
}
