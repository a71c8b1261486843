//! The dependency arrows between the modules of each crate run one way: no two sibling modules
//! import each other, directly or through a longer loop, at the crate's root or inside any module
//! folder.
//!
//! A module's imports are read from its source, its submodules' included: every `crate::…`,
//! `super::…` and `self::…` path, resolved from the crate root, is an arrow from the module to
//! the sibling it reaches, where a name that their parent imports from one of its children
//! (`pub use a::X`, `use self::a::X`) counts as that child. Inline `#[cfg(test)]` modules and
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

/// Where a path starts: the crate root, `n` modules up from the file's (`super::` n times), or
/// the file's own module (`self::`, or a `use` of a name in scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Crate,
    Super(usize),
    Module,
}

/// Every `crate::…`, `super::…` and `self::…` path of `code`, each as its anchor and its
/// segments, with `{a, b::{c, self}}` groups expanded into one path per item (`self` standing
/// for the group's prefix).
fn paths(code: &str) -> Vec<(Anchor, Vec<String>)> {
    let mut found = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let before = code[..at].chars().next_back();
        let start = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|prefix| rest.starts_with(prefix));
        let Some(prefix) = start.filter(|_| !before.is_some_and(is_ident)) else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let mut tail = &rest[prefix.len()..];
        let anchor = match prefix {
            "crate::" => Anchor::Crate,
            "self::" => Anchor::Module,
            _ => {
                let mut up = 1;
                while let Some(more) = tail.strip_prefix("super::") {
                    up += 1;
                    tail = more;
                }
                Anchor::Super(up)
            }
        };
        let consumed = expand(tail, &mut Vec::new(), &mut |segments| {
            found.push((anchor, segments));
        });
        at = code.len() - tail.len() + consumed.max(1);
    }
    found
}

/// Reads one path tail (`a::b::C`, `a::{b, c::D}`) after `prefix`, calling `each` with every
/// full path; returns how many bytes it read.
fn expand(tail: &str, prefix: &mut Vec<String>, each: &mut dyn FnMut(Vec<String>)) -> usize {
    let depth = prefix.len();
    let mut at = 0;
    loop {
        let rest = &tail[at..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut read = 1;
            let mut inner = group;
            loop {
                let item = inner.trim_start();
                read += inner.len() - item.len();
                if item.starts_with('}') {
                    read += 1;
                    break;
                }
                if item.is_empty() {
                    break;
                }
                let used = expand(item, prefix, each);
                read += used;
                inner = &item[used..];
                let next = inner.trim_start();
                read += inner.len() - next.len();
                inner = next;
                if let Some(after) = inner.strip_prefix(',') {
                    read += 1;
                    inner = after;
                }
            }
            prefix.truncate(depth);
            return at + read;
        }
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if name.is_empty() {
            break;
        }
        at += name.len();
        if name != "self" {
            prefix.push(name);
        }
        match tail[at..].strip_prefix("::") {
            Some(_) => at += 2,
            None => break,
        }
    }
    each(prefix.clone());
    prefix.truncate(depth);
    // `X as Y`: the alias names nothing of the crate.
    let rest = &tail[at..];
    let trimmed = rest.trim_start();
    if let Some(alias) = trimmed.strip_prefix("as ") {
        let alias = alias.trim_start();
        let name = alias.chars().take_while(|&c| is_ident(c)).count();
        at += rest.len() - alias.len() + name;
    }
    at
}

/// A path of `anchor` and `segments`, used in the module `from`, as a path from the crate root.
fn absolute(from: &[String], anchor: Anchor, segments: &[String]) -> Option<Vec<String>> {
    let base = match anchor {
        Anchor::Crate => &[][..],
        Anchor::Module => from,
        Anchor::Super(up) => from.get(..from.len().checked_sub(up)?)?,
    };
    Some(base.iter().chain(segments).cloned().collect())
}

/// A crate's modules: each one's path from the root (the root is `[]`) and its source without
/// comments and tests.
struct Modules {
    code: BTreeMap<Vec<String>, String>,
}

impl Modules {
    fn read(krate: &Path) -> Self {
        let src = krate.join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut sources: BTreeMap<Vec<String>, String> = BTreeMap::new();
        for file in files {
            let relative = file.strip_prefix(&src).expect("under src");
            let mut parts: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.first().is_some_and(|p| p == "bin") {
                continue; // each binary is a crate of its own
            }
            if parts.last().is_some_and(|p| p == "mod")
                || parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main")
            {
                parts.pop();
            }
            let source = fs::read_to_string(&file).expect("a readable file");
            sources.entry(parts).or_default().push_str(&code(&source));
        }
        Self { code: sources }
    }

    fn children(&self, parent: &[String]) -> BTreeSet<String> {
        self.code
            .keys()
            .filter(|path| path.len() == parent.len() + 1 && path.starts_with(parent))
            .map(|path| path[parent.len()].clone())
            .collect()
    }

    /// The names a module's own file brings into scope from its children (`use self::a::X`,
    /// `pub use a::{X, Y}`): children reach them through the parent (`super::X`, `crate::X`).
    fn imported(&self, module: &[String]) -> BTreeMap<String, String> {
        let children = self.children(module);
        let mut names = BTreeMap::new();
        let Some(code) = self.code.get(module) else {
            return names;
        };
        for statement in code.split(';') {
            let Some(at) = statement.find("use ") else {
                continue;
            };
            // Only a `use` item of the module: after nothing but its visibility and attributes
            // (not `because ` in a string, not a `use` inside a body).
            let lead = statement[..at].trim();
            let item = lead.is_empty()
                || lead.ends_with("pub")
                || lead.ends_with(')') && lead.contains("pub(")
                || lead.ends_with(']');
            if !item || lead.contains(['{', '}']) {
                continue;
            }
            let tail = statement[at + 4..].trim();
            let (anchor, tail) = match tail.strip_prefix("crate::") {
                Some(rest) => (Anchor::Crate, rest),
                None => match tail.strip_prefix("super::") {
                    Some(_) => continue,
                    None => (Anchor::Module, tail.strip_prefix("self::").unwrap_or(tail)),
                },
            };
            expand(tail, &mut Vec::new(), &mut |segments| {
                let Some(path) = absolute(module, anchor, &segments) else {
                    return;
                };
                let Some(child) = path.get(module.len()).filter(|_| path.starts_with(module))
                else {
                    return;
                };
                if children.contains(child) && path.len() > module.len() + 1 {
                    let name = path.last().expect("a name").clone();
                    names.entry(name).or_insert_with(|| child.clone());
                }
            });
        }
        names
    }

    /// For every module that has children: each child and the siblings it imports, its
    /// descendants' imports included.
    fn graphs(&self) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
        let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for parent in self.code.keys() {
            let children = self.children(parent);
            if !children.is_empty() {
                let graph = graphs.entry(parent.clone()).or_default();
                for child in children {
                    graph.entry(child).or_default();
                }
            }
        }
        let imported: BTreeMap<Vec<String>, BTreeMap<String, String>> = graphs
            .keys()
            .map(|parent| (parent.clone(), self.imported(parent)))
            .collect();
        for (module, code) in &self.code {
            for (anchor, segments) in paths(code) {
                let Some(target) = absolute(module, anchor, &segments) else {
                    continue;
                };
                let common = module
                    .iter()
                    .zip(&target)
                    .take_while(|(a, b)| a == b)
                    .count();
                // A module's own descendants, and the module itself, are not arrows.
                let (Some(from), Some(name)) = (module.get(common), target.get(common)) else {
                    continue;
                };
                let parent = &module[..common];
                let Some(graph) = graphs.get_mut(parent) else {
                    continue;
                };
                let to = if graph.contains_key(name) {
                    name.clone()
                } else {
                    match imported[parent].get(name) {
                        Some(child) => child.clone(),
                        None => continue, // an item of the parent itself
                    }
                };
                if &to != from {
                    graph.get_mut(from).expect("a child").insert(to);
                }
            }
        }
        graphs
    }
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
        for (parent, graph) in Modules::read(&krate).graphs() {
            let within = if parent.is_empty() {
                name.clone()
            } else {
                format!("{name}::{}", parent.join("::"))
            };
            for cycle in cycles(&graph) {
                loops.push(format!("{within}: {} -> {}", cycle.join(" -> "), cycle[0]));
            }
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
}

#[test]
fn paths_are_read_with_their_anchor_and_groups_expanded() {
    let strings = |segments: &[&str]| segments.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(
        paths(
            "use crate::{Error, store::{Store, self}, a::b};\nlet x = crate::Clock::now(); \
             idem_crate::z; use super::super::model::{self, Address as A}; self::x::Y"
        ),
        vec![
            (Anchor::Crate, strings(&["Error"])),
            (Anchor::Crate, strings(&["store", "Store"])),
            (Anchor::Crate, strings(&["store"])),
            (Anchor::Crate, strings(&["a", "b"])),
            (Anchor::Crate, strings(&["Clock", "now"])),
            (Anchor::Super(2), strings(&["model"])),
            (Anchor::Super(2), strings(&["model", "Address"])),
            (Anchor::Module, strings(&["x", "Y"])),
        ]
    );
    assert_eq!(
        absolute(
            &strings(&["gateway", "input"]),
            Anchor::Super(1),
            &strings(&["model", "X"])
        ),
        Some(strings(&["gateway", "model", "X"]))
    );
    assert_eq!(absolute(&strings(&["a"]), Anchor::Super(2), &[]), None);
}

/// Two folders of a planted crate: a loop between the children of a nested module, through
/// `super::` and through a name its parent imports, is found; a child's use of its parent's
/// own items is not an arrow.
#[test]
fn the_check_finds_a_loop_between_nested_modules() {
    let dir = std::env::temp_dir().join(format!("module-arrows-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("gateway")).unwrap();
    fs::write(
        src.join("lib.rs"),
        "mod gateway;\npub use gateway::Thing;\n",
    )
    .unwrap();
    fs::write(
        src.join("gateway/mod.rs"),
        "mod input;\nmod model;\nmod check;\nuse self::model::Limit;\npub struct Thing;\n",
    )
    .unwrap();
    fs::write(src.join("gateway/input.rs"), "use super::Limit;\n").unwrap();
    fs::write(
        src.join("gateway/model.rs"),
        "use super::{input::Step, Thing};\n",
    )
    .unwrap();
    fs::write(src.join("gateway/check.rs"), "use crate::gateway::model;\n").unwrap();
    let graphs = Modules::read(&dir).graphs();
    fs::remove_dir_all(&dir).unwrap();
    let strings =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| (*s).to_owned()).collect() };
    let gateway = &graphs[&vec!["gateway".to_owned()]];
    assert_eq!(gateway["input"], strings(&["model"]));
    assert_eq!(gateway["model"], strings(&["input"]));
    assert_eq!(gateway["check"], strings(&["model"]));
    assert_eq!(
        cycles(gateway),
        vec![vec!["model".to_owned(), "input".to_owned()]]
    );
    assert_eq!(graphs[&Vec::new()]["gateway"], BTreeSet::new());
}

/// The leaves of the gateway that every module may use, left out of its drawing.
const GATEWAY_LEAVES: [&str; 3] = ["error", "tls", "units"];

/// The arrows of the Mermaid flowchart under `heading`: `a --> b` lines, each node with its set.
fn drawn_under(doc: &str, heading: &str) -> BTreeMap<String, BTreeSet<String>> {
    let section = doc
        .split_once(heading)
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let block = section
        .split_once("```mermaid\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .unwrap_or_else(|| panic!("no mermaid block under {heading:?}"));
    let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in block.lines().map(str::trim) {
        if let Some((from, to)) = line.split_once(" --> ") {
            arrows.entry(to.to_owned()).or_default();
            arrows
                .entry(from.to_owned())
                .or_default()
                .insert(to.to_owned());
        }
    }
    arrows
}

#[test]
fn the_architecture_page_draws_the_gateways_modules_with_their_arrows() {
    let doc = fs::read_to_string(workspace().join("docs/architecture.md")).expect("the page");
    let drawn = drawn_under(&doc, "### Inside the gateway");
    let mut actual =
        Modules::read(&workspace().join("crates/idem-gateway")).graphs()[&Vec::new()].clone();
    actual.retain(|module, _| !GATEWAY_LEAVES.contains(&module.as_str()));
    for arrows in actual.values_mut() {
        arrows.retain(|to| !GATEWAY_LEAVES.contains(&to.as_str()));
    }
    assert_eq!(
        drawn, actual,
        "docs/architecture.md draws the gateway's modules wrong"
    );
}

#[test]
fn the_drawing_is_read_under_its_heading_only() {
    let doc = "```mermaid\nflowchart TD\n    x --> y\n```\n### Here\n```mermaid\nflowchart TD\n    \
               a --> b\n    a --> c\n```\n```mermaid\n    c --> a\n```\n";
    assert_eq!(
        drawn_under(doc, "### Here"),
        BTreeMap::from([
            (
                "a".to_owned(),
                BTreeSet::from(["b".to_owned(), "c".to_owned()])
            ),
            ("b".to_owned(), BTreeSet::new()),
            ("c".to_owned(), BTreeSet::new()),
        ])
    );
}
