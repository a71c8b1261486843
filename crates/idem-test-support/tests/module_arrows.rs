//! The dependency arrows between the modules of each crate run one way: no two sibling modules
//! of a crate import each other, directly or through a longer loop.
//!
//! A module's imports are read from its source: every `crate::NAME` path, where a name that the
//! crate root re-exports counts as the module it comes from. Inline `#[cfg(test)]` modules and
//! comments are left out: tests may reach anywhere.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// The workspace's root, two levels above this crate.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every crate with a `src/` folder under `crates/` and `examples/`.
fn crates() -> Vec<PathBuf> {
    let mut crates = Vec::new();
    for group in ["crates", "examples"] {
        let Ok(entries) = fs::read_dir(workspace().join(group)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a readable folder").path();
            if path.join("src").is_dir() {
                crates.push(path);
            }
        }
    }
    crates.sort();
    crates
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a readable folder") {
        let path = entry.expect("a readable entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The source without comments and without a trailing `#[cfg(test)] mod tests { … }`.
fn code(source: &str) -> String {
    let source = match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    };
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first segment of every `crate::…` path, expanding `crate::{a, b::c}` groups.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(is_ident) {
            continue; // `idem_crate::` and the like
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            // Split the group's top-level items and take each one's first segment.
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars().chain([',']) {
                match c {
                    '{' => {
                        depth += 1;
                        item.push(c);
                    }
                    '}' => {
                        depth -= 1;
                        item.push(c);
                    }
                    ',' if depth == 0 => {
                        let first: String =
                            item.trim().chars().take_while(|&c| is_ident(c)).collect();
                        if !first.is_empty() {
                            names.insert(first);
                        }
                        item.clear();
                    }
                    c => item.push(c),
                }
            }
        } else {
            let first: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if !first.is_empty() {
                names.insert(first);
            }
        }
    }
    names
}

/// What the crate root re-exports: a name to the module it comes from.
fn reexports(root: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for statement in code(root).split(';') {
        let statement = statement.trim();
        let Some(at) = statement.find("use ") else {
            continue;
        };
        if !statement[..at].trim_start().starts_with("pub") {
            continue;
        }
        let path = statement[at + 4..].trim().trim_start_matches("self::");
        let module: String = path.chars().take_while(|&c| is_ident(c)).collect();
        let rest = &path[module.len()..];
        for name in rest.split(|c: char| !is_ident(c)).filter(|n| !n.is_empty()) {
            if name != "self" && name != "as" {
                map.entry(name.to_owned()).or_insert_with(|| module.clone());
            }
        }
    }
    map
}

/// For one crate: each top-level module and the sibling modules it imports.
fn module_graph(krate: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = krate.join("src");
    let root = ["lib.rs", "main.rs"]
        .iter()
        .filter_map(|f| fs::read_to_string(src.join(f)).ok())
        .collect::<String>();
    let reexported = reexports(&root);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        let Some(module) = parts.first().cloned() else {
            continue;
        };
        if matches!(module.as_str(), "lib" | "main" | "bin") {
            continue;
        }
        let source = fs::read_to_string(&file).expect("a readable file");
        let imports = graph.entry(module.clone()).or_default();
        for name in crate_paths(&code(&source)) {
            let target = reexported.get(&name).cloned().unwrap_or(name);
            if target != module {
                imports.insert(target);
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for imports in graph.values_mut() {
        imports.retain(|m| modules.contains(m));
    }
    graph
}

/// Every cycle of the graph, each as the modules on it, found by depth-first search.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(at) = path.iter().position(|n| n == node) {
            found.push(path[at..].to_vec());
            return;
        }
        if done.contains(node) {
            return;
        }
        path.push(node.to_owned());
        for next in &graph[node] {
            visit(next, graph, path, done, found);
        }
        path.pop();
        done.insert(node.to_owned());
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, graph, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let mut loops = Vec::new();
    for krate in crates() {
        let name = krate
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        for cycle in cycles(&module_graph(&krate)) {
            loops.push(format!("{name}: {} -> {}", cycle.join(" -> "), cycle[0]));
        }
    }
    assert_eq!(
        loops,
        Vec::<String>::new(),
        "modules that import each other"
    );
}

#[test]
fn the_check_finds_a_loop_through_a_reexport() {
    let graph = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["c".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
        ("d".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert_eq!(
        cycles(&graph),
        vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]
    );
    let exported =
        reexports("pub use error::{Error, Kind};\npub use self::store::Store as S;\nuse x::Y;");
    assert_eq!(exported["Error"], "error");
    assert_eq!(exported["Kind"], "error");
    assert_eq!(exported["Store"], "store");
    assert!(!exported.contains_key("Y"));
    assert_eq!(
        crate_paths(
            "use crate::{Error, store::{Store, X}, a::b};\nlet x = crate::Clock::now(); idem_crate::z"
        ),
        BTreeSet::from(["Error".into(), "store".into(), "a".into(), "Clock".into()])
    );
}
