//! DECK's part of the nodes' environment: which variables `-x` may give
//! (deckrun sets DECK's own), and the job's key.

use std::ffi::OsString;

use anyhow::{bail, Context, Result};
use deck::boot::{
    KeyMaterial, ENV_BOOT, ENV_JOB, ENV_LOCAL_RANK, ENV_NODE, ENV_NUMNODES, ENV_TRANSPORT, MAX_KEY,
};
use msg_layer::transport::llc::AUTH_KEY_ENV;

/// Variables deckrun sets itself; `-x` may not name them.
const RESERVED: [&str; 6] = [
    ENV_NODE,
    ENV_NUMNODES,
    ENV_BOOT,
    ENV_JOB,
    ENV_LOCAL_RANK,
    ENV_TRANSPORT,
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
    if !launcher::start::is_variable_name(name) {
        bail!("-x {spec}: {name:?} is not a variable name (letters, digits, '_')");
    }
    if RESERVED.contains(&name) {
        bail!("-x {spec}: deckrun sets {name} itself (see --transport)");
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

#[cfg(test)]
mod tests {
    use super::*;

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
