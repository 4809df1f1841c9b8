//! Checks of the workspace's source tree, run by the suite (`tests/`, and
//! the libraries' `tests/header.rs` through [`c_header::check`]).
//!
//! **Import circles.** Inside a crate, file A importing from file B and B
//! from A (directly or around a longer loop) means a type lives in the
//! higher of the two files while the lower one needs it: the dependency
//! should run one way. [`circles`] reads every `crate::` and `super::`
//! path of a crate's files (outside comments and the `#[cfg(test)]` module
//! at a file's end), maps each to the file of the module it names, and
//! returns the strongly connected groups of more than one file. A module
//! naming its own ancestors (a child using its parent's items) is not an
//! edge: the parent declares the child, and that is the tree, not a circle.
//!
//! **The VM harness.** Only the `bench` crate may depend on `vm-tests`
//! ([`harness::dependents`], from `cargo metadata`).

#![deny(unsafe_code)]

pub mod c_header;
pub mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["proto", "connection"]`) and the file that holds it.
type Modules = BTreeMap<Vec<String>, PathBuf>;

/// The modules of the crate whose sources are in `src` (its `lib.rs` or
/// `main.rs` is the root), each with its file.
pub fn modules(src: &Path) -> std::io::Result<Modules> {
    let mut out = Modules::new();
    walk(src, src, &mut out)?;
    Ok(out)
}

fn walk(src: &Path, dir: &Path, out: &mut Modules) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            // `src/bin/*` are separate crates.
            if path != src.join("bin") {
                walk(src, &path, out)?;
            }
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let rel = path.strip_prefix(src).expect("under src");
        let mut segs: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let last = segs.pop().expect("a file name");
        let stem = last.trim_end_matches(".rs");
        match stem {
            "lib" | "main" if segs.is_empty() => {}
            "mod" => {}
            _ => segs.push(stem.to_owned()),
        }
        out.insert(segs, path);
    }
    Ok(())
}

/// The text of a file that imports count in: without comments and without
/// the test module that closes many files.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path written after `crate::`, `super::` or `self::` in `code`,
/// made absolute for the module `here` (groups `{a::b, c}` expanded).
fn paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let starts = |w: &str| code[i..].starts_with(w);
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if boundary && (starts("crate::") || starts("super::") || starts("self::")) {
            let (base, rest) = anchor(&code[i..], here);
            let consumed = code[i..].len() - rest.len();
            expand(rest, base, &mut out);
            i += consumed.max(1);
        } else {
            i += 1;
        }
    }
    out
}

/// Resolve the leading `crate::`, `super::`... of `s`; returns the base
/// module and the text after the anchor.
fn anchor<'a>(mut s: &'a str, here: &[String]) -> (Vec<String>, &'a str) {
    let mut base = here.to_vec();
    if let Some(r) = s.strip_prefix("crate::") {
        return (Vec::new(), r);
    }
    if let Some(r) = s.strip_prefix("self::") {
        return (base, r);
    }
    while let Some(r) = s.strip_prefix("super::") {
        base.pop();
        s = r;
    }
    (base, s)
}

/// Read `ident::ident::...` (and a final `{...}` group) from `s` onto
/// `base`, pushing each full path.
fn expand(s: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = base;
    let mut rest = s;
    loop {
        let n = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if n == 0 {
            if let Some(group) = rest.strip_prefix('{') {
                for part in split_group(group) {
                    expand(part.trim(), path.clone(), out);
                }
                return;
            }
            break;
        }
        path.push(rest[..n].to_owned());
        rest = &rest[n..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out.push(path);
}

/// The comma-separated items of a `{...}` group (up to its closing brace).
fn split_group(s: &str) -> Vec<&str> {
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                parts.push(&s[start..i]);
                return parts;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The files each file of the crate in `src` imports from (see the crate
/// documentation for what counts).
pub fn edges(src: &Path) -> std::io::Result<BTreeMap<PathBuf, BTreeSet<PathBuf>>> {
    let mods = modules(src)?;
    let mut out = BTreeMap::new();
    for (here, file) in &mods {
        let text = std::fs::read_to_string(file)?;
        let mut to = BTreeSet::new();
        for path in paths(&code(&text), here) {
            // The longest prefix that is a module of its own file.
            let target = (0..=path.len())
                .rev()
                .find_map(|n| mods.get_key_value(&path[..n]));
            let Some((module, target)) = target else {
                continue;
            };
            // Itself, or one of its ancestors: not an edge.
            if here.starts_with(module) {
                continue;
            }
            to.insert(target.clone());
        }
        out.insert(file.clone(), to);
    }
    Ok(out)
}

/// The groups of files of the crate in `src` that import from each other
/// around a loop (strongly connected, more than one file), sorted.
pub fn circles(src: &Path) -> std::io::Result<Vec<Vec<PathBuf>>> {
    let graph = edges(src)?;
    let nodes: Vec<&PathBuf> = graph.keys().collect();
    let index: BTreeMap<&PathBuf, usize> = nodes.iter().enumerate().map(|(i, p)| (*p, i)).collect();
    let adj: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            graph[*n]
                .iter()
                .filter_map(|t| index.get(t).copied())
                .collect()
        })
        .collect();
    let mut groups: Vec<Vec<PathBuf>> = strongly_connected(&adj)
        .into_iter()
        .filter(|g| g.len() > 1)
        .map(|g| {
            let mut files: Vec<PathBuf> = g.into_iter().map(|i| nodes[i].clone()).collect();
            files.sort();
            files
        })
        .collect();
    groups.sort();
    Ok(groups)
}

/// Tarjan's strongly connected components of `adj`.
fn strongly_connected(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adj: &'a [Vec<usize>],
        next: usize,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adj[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut group = Vec::new();
            loop {
                let w = s.stack.pop().expect("on the stack");
                s.on_stack[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(group);
        }
    }
    let n = adj.len();
    let mut s = State {
        adj,
        next: 0,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn paths_are_made_absolute_and_groups_expanded() {
        let here = seg(&["transport", "llc"]);
        let got = paths(
            "use super::spec::{AttachMode, Backend};\nuse crate::wire::{self, am::X};\nlet x = self::inner::f();\nuse super::super::y;",
            &here,
        );
        assert_eq!(
            got,
            vec![
                seg(&["transport", "spec", "AttachMode"]),
                seg(&["transport", "spec", "Backend"]),
                seg(&["wire", "self"]),
                seg(&["wire", "am", "X"]),
                seg(&["transport", "llc", "inner", "f"]),
                seg(&["y"]),
            ]
        );
        // Comments and the closing test module do not count.
        let c = code(
            "use a; // crate::x::Y\n/// [`crate::z`]\n#[cfg(test)]\nmod tests { use super::*; }",
        );
        assert!(paths(&c, &here).is_empty(), "{c:?}");
    }

    #[test]
    fn a_circle_between_two_files_is_found_and_a_child_using_its_parent_is_not() {
        let dir = std::env::temp_dir().join(format!("tree-check-{}", std::process::id()));
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("conn")).unwrap();
        let write = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
        write("lib.rs", "mod conn;\nmod wire;\nuse crate::conn::Conn;\n");
        write("wire.rs", "pub struct Frame;\n");
        write(
            "conn/mod.rs",
            "mod a;\nmod b;\npub struct Conn;\nuse a::A;\n",
        );
        write(
            "conn/a.rs",
            "use super::Conn;\nuse super::b::B;\npub struct A;\n",
        );
        write(
            "conn/b.rs",
            "use crate::wire::Frame;\nuse super::a::A;\npub struct B;\n",
        );
        let found = circles(&src).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            found,
            vec![vec![src.join("conn/a.rs"), src.join("conn/b.rs")]]
        );
    }
}
