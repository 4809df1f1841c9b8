//! Who may depend on the VM harness: only the `bench` crate (and the
//! harness itself). Libraries and tools build their test hosts with
//! `testbed`; a library or tool that reaches `vm-tests`, even for its
//! tests, drags QEMU's harness into its build and blurs what is measured
//! from what is shipped (issue 44).

use serde_json::Value;

/// The VM harness's package name.
pub const HARNESS: &str = "vm-tests";

/// The packages that may list [`HARNESS`] among their dependencies.
pub const ALLOWED: &[&str] = &["bench", HARNESS];

/// Every workspace package of `metadata` (the JSON of `cargo metadata
/// --format-version 1 --no-deps`) outside [`ALLOWED`] that lists
/// [`HARNESS`] in any dependency table, as `package (kind)`, kind being
/// `dependencies`, `dev-dependencies` or `build-dependencies`. Renamed
/// dependencies count under their package name. An error says what is
/// missing from the JSON.
pub fn dependents(metadata: &str) -> Result<Vec<String>, String> {
    let json: Value =
        serde_json::from_str(metadata).map_err(|e| format!("metadata is not JSON: {e}"))?;
    let packages = json["packages"]
        .as_array()
        .ok_or("metadata has no `packages` list")?;
    let mut found = Vec::new();
    for package in packages {
        let name = package["name"].as_str().ok_or("a package without a name")?;
        if ALLOWED.contains(&name) {
            continue;
        }
        let deps = package["dependencies"]
            .as_array()
            .ok_or_else(|| format!("{name} has no `dependencies` list"))?;
        for dep in deps {
            if dep["name"].as_str() != Some(HARNESS) {
                continue;
            }
            let kind = match dep["kind"].as_str() {
                None => "dependencies",
                Some("dev") => "dev-dependencies",
                Some("build") => "build-dependencies",
                Some(other) => other,
            };
            found.push(format!("{name} ({kind})"));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up workspace: `bench` may use the harness, `lib-a` may not
    /// (as a dev-dependency, renamed), `tool-b` may not (at run time), and
    /// `lib-c` uses only testbed.
    const METADATA: &str = r#"{"packages": [
        {"name": "bench", "dependencies": [{"name": "vm-tests", "kind": null}]},
        {"name": "lib-a", "dependencies": [
            {"name": "testbed", "kind": "dev"},
            {"name": "vm-tests", "kind": "dev", "rename": "harness"}]},
        {"name": "tool-b", "dependencies": [{"name": "vm-tests", "kind": null}]},
        {"name": "lib-c", "dependencies": [{"name": "testbed", "kind": "build"}]},
        {"name": "vm-tests", "dependencies": [{"name": "testbed", "kind": null}]}
    ]}"#;

    #[test]
    fn finds_every_other_crate_that_lists_the_harness() {
        assert_eq!(
            dependents(METADATA).unwrap(),
            ["lib-a (dev-dependencies)", "tool-b (dependencies)"]
        );
    }

    #[test]
    fn a_clean_workspace_passes_and_bad_json_is_an_error() {
        let clean = r#"{"packages": [{"name": "lib-c", "dependencies": []}]}"#;
        assert!(dependents(clean).unwrap().is_empty());
        assert!(dependents("{}").is_err());
        assert!(dependents("not json").is_err());
    }
}
