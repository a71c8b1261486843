//! docs/architecture.md draws the crates and their arrows as they are: its diagram of the
//! published crates and its table of the others hold exactly the dependencies `cargo metadata`
//! reports between the workspace's crates (normal and build ones; a dev-dependency is no arrow),
//! and an optional one is drawn dotted.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Command,
};

/// A crate's arrows: each crate it depends on, and whether only through a feature.
type Arrows = BTreeMap<String, BTreeMap<String, bool>>;

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The arrows between the crates under `crates/`, from `cargo metadata`.
fn metadata() -> Arrows {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .unwrap();
    assert!(output.status.success(), "cargo metadata: {output:?}");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let crates: BTreeSet<&str> = packages
        .iter()
        .filter(|package| {
            package["manifest_path"]
                .as_str()
                .unwrap()
                .contains("/crates/")
        })
        .map(|package| package["name"].as_str().unwrap())
        .collect();
    let mut arrows = Arrows::new();
    for package in packages {
        let name = package["name"].as_str().unwrap();
        if !crates.contains(name) {
            continue;
        }
        let to = arrows.entry(name.to_owned()).or_default();
        for dependency in package["dependencies"].as_array().unwrap() {
            let target = dependency["name"].as_str().unwrap();
            if crates.contains(target) && dependency["kind"].as_str() != Some("dev") {
                let optional = dependency["optional"].as_bool().unwrap();
                // Optional in one place and not in another: the arrow is there regardless.
                let entry = to.entry(target.to_owned()).or_insert(optional);
                *entry &= optional;
            }
        }
    }
    arrows
}

/// The arrows of the document's Mermaid diagram: `id["crate …"]` nodes, `a --> b` arrows and
/// `a -.->|why| b` dotted ones.
fn diagram(doc: &str) -> Arrows {
    let block = doc
        .split("```mermaid\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/architecture.md has a mermaid diagram");
    let mut labels = BTreeMap::new();
    let mut edges = Vec::new();
    for line in block.lines().map(str::trim) {
        if let Some((id, label)) = line.split_once("[\"") {
            let name = label.split([' ', '"']).next().unwrap();
            labels.insert(id.trim().to_owned(), name.to_owned());
        } else if let Some((from, to)) = line.split_once(" --> ") {
            edges.push((from.trim().to_owned(), to.trim().to_owned(), false));
        } else if let Some((from, rest)) = line.split_once(" -.->") {
            let to = rest.rsplit(['|', ' ']).next().unwrap();
            edges.push((from.trim().to_owned(), to.trim().to_owned(), true));
        }
    }
    let mut arrows = Arrows::new();
    for name in labels.values() {
        arrows.entry(name.clone()).or_default();
    }
    for (from, to, dotted) in edges {
        let name = |id: &str| {
            labels
                .get(id)
                .unwrap_or_else(|| panic!("no node {id}"))
                .clone()
        };
        arrows
            .get_mut(&name(&from))
            .unwrap()
            .insert(name(&to), dotted);
    }
    arrows
}

/// The rows of the table of crates that are not published: `| crate | depends on | … |`.
fn table(doc: &str) -> Arrows {
    let mut arrows = Arrows::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].starts_with("`idem-") {
            continue;
        }
        let depends: BTreeMap<String, bool> = cells[2]
            .split(',')
            .map(|name| name.trim().trim_matches('`'))
            .filter(|name| !name.is_empty())
            .map(|name| (name.to_owned(), false))
            .collect();
        arrows.insert(cells[1].trim_matches('`').to_owned(), depends);
    }
    arrows
}

#[test]
fn the_architecture_page_draws_every_crate_with_its_arrows() {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let mut drawn = diagram(&doc);
    let tabled = table(&doc);
    for name in tabled.keys() {
        assert!(
            !drawn.contains_key(name),
            "{name} is both drawn and in the table"
        );
    }
    drawn.extend(tabled);
    let actual = metadata();
    let mut wrong = Vec::new();
    for name in drawn.keys().chain(actual.keys()).collect::<BTreeSet<_>>() {
        let (page, cargo) = (drawn.get(name), actual.get(name));
        if page != cargo {
            wrong.push(format!(
                "{name}: the page has {page:?}, cargo metadata {cargo:?}"
            ));
        }
    }
    assert_eq!(wrong, Vec::<String>::new(), "arrows drawn wrong");
}

#[test]
fn the_check_reads_nodes_arrows_and_dotted_arrows() {
    let doc = "```mermaid\nflowchart TD\n    a[\"idem-a (the a)\"]\n    b[\"idem-b\"]\n    \
               c[\"idem-c\"]\n    a --> b\n    b -.->|feature: why| c\n```\n\n\
               | crate | depends on | what |\n| --- | --- | --- |\n\
               | `idem-d` | `idem-a`, `idem-c` | the d |\n| `idem-e` | | the e |\n";
    let strings = |pairs: &[(&str, bool)]| -> BTreeMap<String, bool> {
        pairs.iter().map(|(n, d)| ((*n).to_owned(), *d)).collect()
    };
    assert_eq!(
        diagram(doc),
        Arrows::from([
            ("idem-a".into(), strings(&[("idem-b", false)])),
            ("idem-b".into(), strings(&[("idem-c", true)])),
            ("idem-c".into(), strings(&[])),
        ])
    );
    assert_eq!(
        table(doc),
        Arrows::from([
            (
                "idem-d".into(),
                strings(&[("idem-a", false), ("idem-c", false)])
            ),
            ("idem-e".into(), strings(&[])),
        ])
    );
}
