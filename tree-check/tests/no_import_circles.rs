//! No file of a workspace crate imports, around a loop, from a file that
//! imports from it (see the crate documentation for what counts).

use std::path::Path;

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("workspace manifest");
    let members: Vec<&str> = manifest
        .split("members = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("members")
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .collect();
    assert!(members.len() > 5, "{members:?}");
    let mut report = Vec::new();
    for member in members {
        let src = root.join(member).join("src");
        for group in tree_check::circles(&src).expect("reading the sources") {
            let files: Vec<String> = group
                .iter()
                .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
                .collect();
            report.push(format!("{member}: {}", files.join(" <-> ")));
        }
    }
    assert!(
        report.is_empty(),
        "files that import from each other (move the shared type down):\n{}",
        report.join("\n")
    );
}
