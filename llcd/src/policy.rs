//! The administrator's policy: one TOML file (default
//! `/etc/llc/llcd.toml`) saying which interfaces ordinary users may open
//! endpoints on, who may, and how many each user may hold. A missing file
//! means the defaults: every interface, every user, the default limits.

use std::path::Path;

use serde::Deserialize;

/// Where the policy is read from unless `--config` says otherwise.
pub const DEFAULT_PATH: &str = "/etc/llc/llcd.toml";

/// Endpoints one user may hold at once unless the policy says otherwise:
/// enough for the ranks of a large node (several per core) and the DECK
/// or BMI processes beside them.
pub const DEFAULT_MAX_ENDPOINTS: usize = 256;

/// Locked memory (MiB) one user's AF_XDP endpoints may pin at once unless
/// the policy says otherwise: each RX queue's buffer pool a user's
/// endpoints share takes 32 MiB at MTU 1500, 64 MiB at 9000 and 272 MiB at
/// 65000 with the default sizes.
pub const DEFAULT_MAX_LOCKED_MIB: u64 = 1024;

/// Problems in the policy file, each saying where.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's explanation (line, column, what was expected).
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    interfaces: Option<Vec<String>>,
    allow: Option<Vec<String>>,
    max_endpoints_per_user: Option<usize>,
    max_locked_mib_per_user: Option<u64>,
}

/// Who a policy entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// A user by name.
    User(String),
    /// Members of a group (`@name`), primary or supplementary.
    Group(String),
    /// A numeric user id (`uid:N`), for accounts without a name.
    Uid(u32),
}

impl Principal {
    fn parse(entry: &str) -> Result<Principal, String> {
        if let Some(g) = entry.strip_prefix('@') {
            return valid_name(g)
                .then(|| Principal::Group(g.to_owned()))
                .ok_or_else(|| bad(entry));
        }
        if let Some(n) = entry.strip_prefix("uid:") {
            return n.parse().map(Principal::Uid).map_err(|_| bad(entry));
        }
        valid_name(entry)
            .then(|| Principal::User(entry.to_owned()))
            .ok_or_else(|| bad(entry))
    }
}

fn bad(entry: &str) -> String {
    format!("allow: {entry:?} is neither a user name, @group nor uid:N")
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.$".contains(&b))
}

/// A user as the service sees it: from the kernel's credentials, with the
/// name and groups the system's user database gives (none for a uid it
/// does not know).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Asker {
    /// User id.
    pub uid: u32,
    /// Login name, if the user database knows the uid.
    pub name: Option<String>,
    /// Names of the user's groups (primary and supplementary).
    pub groups: Vec<String>,
}

/// The policy in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Interfaces endpoints may be opened on (`None`: any).
    pub interfaces: Option<Vec<String>>,
    /// Who may ask (`None`: everyone).
    pub allow: Option<Vec<Principal>>,
    /// Endpoints one user may hold at once.
    pub max_endpoints_per_user: usize,
    /// Locked memory one user's AF_XDP buffer pools may pin at once, MiB
    /// (0: AF_XDP is not served; users get AF_PACKET).
    pub max_locked_mib_per_user: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            interfaces: None,
            allow: None,
            max_endpoints_per_user: DEFAULT_MAX_ENDPOINTS,
            max_locked_mib_per_user: DEFAULT_MAX_LOCKED_MIB,
        }
    }
}

impl Policy {
    /// Read the policy at `path`; the defaults when the file does not
    /// exist and `must_exist` is false.
    pub fn load(path: &Path, must_exist: bool) -> Result<Policy, PolicyError> {
        let shown = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Policy::parse(&text, &shown),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
                Ok(Policy::default())
            }
            Err(source) => Err(PolicyError::Read {
                path: shown,
                source,
            }),
        }
    }

    /// Parse the text of a policy file (`path` names it in errors).
    pub fn parse(text: &str, path: &str) -> Result<Policy, PolicyError> {
        let file: File = toml::from_str(text).map_err(|e| PolicyError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let invalid = |message: String| PolicyError::Invalid {
            path: path.to_owned(),
            message,
        };
        let allow = match file.allow {
            Some(list) => Some(
                list.iter()
                    .map(|e| Principal::parse(e))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(invalid)?,
            ),
            None => None,
        };
        if let Some(names) = &file.interfaces {
            if let Some(bad) = names.iter().find(|n| n.is_empty() || n.len() > 15) {
                return Err(invalid(format!(
                    "interfaces: {bad:?} is not an interface name"
                )));
            }
        }
        let max = file.max_endpoints_per_user.unwrap_or(DEFAULT_MAX_ENDPOINTS);
        if max == 0 {
            return Err(invalid(
                "max_endpoints_per_user must be at least 1 (remove users from `allow` instead)"
                    .into(),
            ));
        }
        Ok(Policy {
            interfaces: file.interfaces,
            allow,
            max_endpoints_per_user: max,
            max_locked_mib_per_user: file
                .max_locked_mib_per_user
                .unwrap_or(DEFAULT_MAX_LOCKED_MIB),
        })
    }

    /// Whether `asker` may ask at all; the refusal says why.
    pub fn admits(&self, asker: &Asker) -> Result<(), String> {
        let Some(allow) = &self.allow else {
            return Ok(());
        };
        let hit = allow.iter().any(|p| match p {
            Principal::Uid(u) => *u == asker.uid,
            Principal::User(n) => asker.name.as_deref() == Some(n.as_str()),
            Principal::Group(g) => asker.groups.iter().any(|m| m == g),
        });
        if hit {
            Ok(())
        } else {
            Err(format!(
                "user {} is not allowed to open endpoints on this host (the administrator's `allow` list in {DEFAULT_PATH})",
                asker.describe()
            ))
        }
    }

    /// Whether endpoints may be opened on `ifname`.
    pub fn opens(&self, ifname: &str) -> Result<(), String> {
        match &self.interfaces {
            Some(list) if !list.iter().any(|n| n == ifname) => Err(format!(
                "interface {ifname} is not open to users on this host (allowed: {})",
                list.join(", ")
            )),
            _ => Ok(()),
        }
    }

    /// Whether a user holding `held` endpoints may open one more.
    pub fn within_limit(&self, asker: &Asker, held: usize) -> Result<(), String> {
        if held < self.max_endpoints_per_user {
            Ok(())
        } else {
            Err(format!(
                "user {} already holds {held} endpoints on this host, the most allowed \
                 (max_endpoints_per_user in {DEFAULT_PATH}): close some first",
                asker.describe()
            ))
        }
    }
}

impl Policy {
    /// Whether a user whose buffer pools pin `held` bytes may pin `more`.
    pub fn within_locked(&self, asker: &Asker, held: u64, more: u64) -> Result<(), String> {
        let limit = self.max_locked_mib_per_user << 20;
        if held + more <= limit {
            Ok(())
        } else {
            Err(format!(
                "user {}'s AF_XDP buffers would pin {} MiB on this host, more than the {} MiB                  allowed (max_locked_mib_per_user in {DEFAULT_PATH}); fewer endpoints per                  interface queue or AF_PACKET (backend packet) need less",
                asker.describe(),
                (held + more) >> 20,
                self.max_locked_mib_per_user
            ))
        }
    }
}

impl Asker {
    /// `name (uid N)`, or `uid N`.
    pub fn describe(&self) -> String {
        match &self.name {
            Some(n) => format!("{n} (uid {})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asker(uid: u32, name: &str, groups: &[&str]) -> Asker {
        Asker {
            uid,
            name: Some(name.into()),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(Policy::parse("", "p").unwrap(), Policy::default());
        let p = Policy::default();
        assert!(p.admits(&asker(1000, "alice", &[])).is_ok());
        assert!(p.opens("eth7").is_ok());
    }

    #[test]
    fn the_installed_example_is_the_defaults() {
        let text = include_str!("../llcd.toml.example");
        assert_eq!(Policy::parse(text, "example").unwrap(), Policy::default());
        // Each commented key, uncommented, is a valid policy.
        for line in text.lines().filter_map(|l| l.strip_prefix("# ")) {
            if line.contains(" = ") {
                Policy::parse(line, "example").unwrap_or_else(|e| panic!("{line}: {e}"));
            }
        }
    }

    #[test]
    fn allow_names_users_groups_and_uids() {
        let p = Policy::parse(
            "allow = [\"alice\", \"@hpc\", \"uid:4242\"]\ninterfaces = [\"eth0\"]\nmax_endpoints_per_user = 2\n",
            "p",
        )
        .unwrap();
        assert!(p.admits(&asker(1000, "alice", &[])).is_ok());
        assert!(p.admits(&asker(1001, "bob", &["users", "hpc"])).is_ok());
        assert!(p
            .admits(&Asker {
                uid: 4242,
                ..Default::default()
            })
            .is_ok());
        let err = p.admits(&asker(1002, "mallory", &["users"])).unwrap_err();
        assert!(err.contains("mallory (uid 1002) is not allowed"), "{err}");
        assert!(p.opens("eth0").is_ok());
        assert!(p.opens("eth1").unwrap_err().contains("allowed: eth0"));
        let a = asker(1000, "alice", &[]);
        assert!(p.within_limit(&a, 1).is_ok());
        assert!(p
            .within_limit(&a, 2)
            .unwrap_err()
            .contains("already holds 2 endpoints"));
        assert!(p.within_locked(&a, 1000 << 20, 24 << 20).is_ok());
        assert!(p
            .within_locked(&a, 1000 << 20, 25 << 20)
            .unwrap_err()
            .contains("1025 MiB"));
    }

    #[test]
    fn mistakes_are_reported_with_the_file() {
        for (text, says) in [
            ("allow = [\"\"]", "neither a user name"),
            ("allow = [\"uid:x\"]", "neither a user name"),
            ("max_endpoints_per_user = 0", "at least 1"),
            ("interfaces = [\"\"]", "not an interface name"),
            ("allwo = []", "unknown field"),
            ("allow = \"alice\"", "invalid type"),
        ] {
            let err = Policy::parse(text, "/etc/llc/llcd.toml")
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("/etc/llc/llcd.toml: "), "{err}");
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
