//! Every table of `docs/benchmarks.md` is a result file committed in `docs/benchmarks/results/`,
//! rendered here: between a line `<!-- generated from docs/benchmarks/results/NAME.json -->` and
//! the next `<!-- end of generated table -->` the page holds exactly what [`render`] makes of
//! NAME.json — its date, the machine, its command and its table — and every result file is shown
//! once. A figure edited by hand in the page, or a file without its table, fails the test.
//!
//! The load harness writes the files (`RESULTS_DIR=docs/benchmarks/results scripts/load`, see
//! `bench/load/results.py` for the format); then `IDEM_BLESS=1 cargo test -p idem-bench --test
//! benchmarks_doc` rewrites the page's tables from them: review its diff.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{ops::Range, path::Path};

use serde_json::Value;

/// The repository's root.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const DOC: &str = "docs/benchmarks.md";
const RESULTS: &str = "docs/benchmarks/results";

/// A table's markers: its first line names the file, its last ends it.
const BEGIN: &str = "<!-- generated from ";
const BEGIN_TAIL: &str = " -->";
const END: &str = "<!-- end of generated table -->";

/// A result file's fields; `notes` may be left out.
const FIELDS: [&str; 6] = ["date", "command", "machine", "columns", "rows", "notes"];

/// A generated table of the page: the file its first marker names, and the bytes between the
/// two markers' lines.
#[derive(Debug)]
struct Section {
    path: String,
    body: Range<usize>,
}

/// The generated tables of `doc`, in order, or why its markers do not pair up.
fn sections(doc: &str) -> Result<Vec<Section>, String> {
    let mut sections = Vec::new();
    let mut open: Option<(String, usize, usize)> = None;
    let mut offset = 0;
    for (index, line) in doc.split_inclusive('\n').enumerate() {
        let number = index + 1;
        let text = line.trim_end_matches('\n');
        if let Some(rest) = text.strip_prefix(BEGIN) {
            let Some(path) = rest.strip_suffix(BEGIN_TAIL) else {
                return Err(format!(
                    "line {number}: a marker must end with {BEGIN_TAIL:?}"
                ));
            };
            if let Some((previous, _, line)) = &open {
                return Err(format!(
                    "line {number}: the table of {previous} (line {line}) has no {END:?} before \
                     the next one"
                ));
            }
            open = Some((path.to_owned(), offset + line.len(), number));
        } else if text == END {
            let Some((path, start, _)) = open.take() else {
                return Err(format!("line {number}: {END:?} without a table before it"));
            };
            sections.push(Section {
                path,
                body: start..offset,
            });
        }
        offset += line.len();
    }
    if let Some((path, _, line)) = open {
        return Err(format!("the table of {path} (line {line}) has no {END:?}"));
    }
    Ok(sections)
}

/// The field `key` of a result file, a string.
fn text<'a>(file: &'a serde_json::Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match file.get(key) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text),
        Some(_) => Err(format!("`{key}` must be a string, not empty")),
        None => Err(format!("`{key}` is missing")),
    }
}

/// A list of strings, none of them holding a line break (nor, for `cell`, a `|` that would
/// end the cell).
fn strings(value: &Value, what: &str, cell: bool) -> Result<Vec<String>, String> {
    let Value::Array(items) = value else {
        return Err(format!("{what} must be a list of strings"));
    };
    items
        .iter()
        .map(|item| match item {
            Value::String(text) if text.contains('\n') => {
                Err(format!("{what}: {text:?} holds a line break"))
            }
            Value::String(text) if cell && text.replace("\\|", "").contains('|') => {
                Err(format!("{what}: {text:?} holds a `|`"))
            }
            Value::String(text) => Ok(text.clone()),
            other => Err(format!("{what}: {other} is not a string")),
        })
        .collect()
}

/// What the page shows for the result file `json`: the date and machine, the command in a shell
/// block, the table, and the notes under it, each a paragraph.
fn render(json: &str) -> Result<String, String> {
    let value: Value = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(file) = value else {
        return Err("not a JSON object".to_owned());
    };
    if let Some(key) = file.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(format!("unknown field `{key}` (the fields: {FIELDS:?})"));
    }
    let date = text(&file, "date")?;
    let is_date = date.len() == 10
        && date.char_indices().all(|(i, c)| match i {
            4 | 7 => c == '-',
            _ => c.is_ascii_digit(),
        });
    if !is_date {
        return Err(format!("`date` must be YYYY-MM-DD, not {date:?}"));
    }
    let command = text(&file, "command")?;
    if command.contains("```") {
        return Err("`command` must not hold ```".to_owned());
    }
    let machine = text(&file, "machine")?;
    if machine.contains('\n') {
        return Err("`machine` must be one line".to_owned());
    }
    let columns = strings(
        file.get("columns").ok_or("`columns` is missing")?,
        "columns",
        true,
    )?;
    if columns.is_empty() {
        return Err("`columns` is empty".to_owned());
    }
    let Some(Value::Array(rows)) = file.get("rows") else {
        return Err("`rows` must be a list of rows".to_owned());
    };
    if rows.is_empty() {
        return Err("`rows` is empty".to_owned());
    }
    let notes = match file.get("notes") {
        Some(notes) => strings(notes, "notes", false)?,
        None => Vec::new(),
    };

    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let mut out = format!(
        "{date}, on {machine}:\n\n```sh\n{}\n```\n\n",
        command.trim_end()
    );
    out.push_str(&line(&columns));
    out.push_str(&line(&vec!["---".to_owned(); columns.len()]));
    for (index, row) in rows.iter().enumerate() {
        let what = format!("row {}", index + 1);
        let cells = strings(row, &what, true)?;
        if cells.len() != columns.len() {
            return Err(format!(
                "{what} has {} cells under {} columns",
                cells.len(),
                columns.len()
            ));
        }
        out.push_str(&line(&cells));
    }
    for note in notes {
        out.push_str(&format!("\n{note}\n"));
    }
    Ok(out)
}

/// `doc` with each generated table rendered anew from the file it names (`read` gives a file's
/// text from its path in the repository), after checking that the tables name exactly the
/// result files `files`, each once.
fn regenerate(
    doc: &str,
    files: &[String],
    read: impl Fn(&str) -> Result<String, String>,
) -> Result<String, String> {
    let sections = sections(doc)?;
    for section in &sections {
        if !files.contains(&section.path) {
            return Err(format!(
                "{DOC} shows {}, which is not a result file in {RESULTS}",
                section.path
            ));
        }
    }
    for file in files {
        let shown = sections.iter().filter(|s| &s.path == file).count();
        if shown != 1 {
            return Err(format!(
                "{file} is shown {shown} times in {DOC}: each result file has one table, between \
                 a line `{BEGIN}{file}{BEGIN_TAIL}` and a line `{END}`"
            ));
        }
    }
    let mut out = String::with_capacity(doc.len());
    let mut from = 0;
    for section in &sections {
        let json = read(&section.path)?;
        let table = render(&json).map_err(|e| format!("{}: {e}", section.path))?;
        out.push_str(&doc[from..section.body.start]);
        out.push('\n');
        out.push_str(&table);
        out.push('\n');
        from = section.body.end;
    }
    out.push_str(&doc[from..]);
    Ok(out)
}

/// The first line where `doc` and `expected` differ: its number and both versions.
fn first_difference(doc: &str, expected: &str) -> Option<(usize, String, String)> {
    let (mut ours, mut theirs) = (doc.lines(), expected.lines());
    for number in 1.. {
        match (ours.next(), theirs.next()) {
            (None, None) => return None,
            (a, b) if a == b => {}
            (a, b) => {
                let show = |line: Option<&str>| line.map_or("(the end)".to_owned(), str::to_owned);
                return Some((number, show(a), show(b)));
            }
        }
    }
    None
}

/// The result files committed, as paths from the repository's root, sorted.
fn result_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(Path::new(ROOT).join(RESULTS))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .map(|name| format!("{RESULTS}/{name}"))
        .collect();
    files.sort();
    files
}

fn read_committed(path: &str) -> Result<String, String> {
    std::fs::read_to_string(Path::new(ROOT).join(path))
        .map_err(|e| format!("cannot read {path}: {e}"))
}

#[test]
fn the_page_shows_the_committed_results() {
    let files = result_files();
    assert!(!files.is_empty(), "no result file in {RESULTS}");
    let path = Path::new(ROOT).join(DOC);
    let doc = std::fs::read_to_string(&path).unwrap();
    let expected = regenerate(&doc, &files, read_committed).unwrap_or_else(|e| panic!("{e}"));
    if std::env::var_os("IDEM_BLESS").is_some_and(|bless| bless == "1") {
        if expected != doc {
            std::fs::write(&path, &expected).unwrap();
        }
        return;
    }
    if let Some((line, ours, theirs)) = first_difference(&doc, &expected) {
        panic!(
            "{DOC} does not show the result files in {RESULTS} (first difference at line {line}: \
             the page has {ours:?}, the files give {theirs:?}). A figure is changed in its result \
             file, never in the page: after new results, rewrite the page with `IDEM_BLESS=1 \
             cargo test -p idem-bench --test benchmarks_doc` and review the diff."
        );
    }
}

/// A small page and its one result file, for the tests of the checks themselves.
const FILE: &str = "docs/benchmarks/results/example.json";
const JSON: &str = r#"{
  "date": "2026-12-03",
  "command": "scripts/load",
  "machine": "a machine of 2 logical cores",
  "columns": ["configuration", "requests/s"],
  "rows": [["plain proxy", "20,650"], ["memory, new keys", "15,903"]],
  "notes": ["Medians of 5 rounds."]
}"#;

fn page(table: &str) -> String {
    format!("# Benchmarks\n\nBefore.\n\n{BEGIN}{FILE}{BEGIN_TAIL}\n{table}{END}\n\nAfter.\n")
}

fn example(path: &str) -> Result<String, String> {
    assert_eq!(path, FILE);
    Ok(JSON.to_owned())
}

#[test]
fn a_result_file_is_rendered_with_its_date_machine_and_command() {
    let rendered = "\n2026-12-03, on a machine of 2 logical cores:\n\n```sh\nscripts/load\n```\n\n\
                    | configuration | requests/s |\n| --- | --- |\n| plain proxy | 20,650 |\n\
                    | memory, new keys | 15,903 |\n\nMedians of 5 rounds.\n\n";
    let files = [FILE.to_owned()];
    assert_eq!(
        regenerate(&page("\n(stale)\n\n"), &files, example).unwrap(),
        page(rendered)
    );
    // Rendering is stable: the page it writes is the page it expects.
    assert_eq!(
        regenerate(&page(rendered), &files, example).unwrap(),
        page(rendered)
    );
}

#[test]
fn a_figure_edited_in_the_page_is_found() {
    let files = [FILE.to_owned()];
    let good = regenerate(&page("\n"), &files, example).unwrap();
    let edited = good.replacen("20,650", "20,651", 1);
    assert_ne!(edited, good);
    let expected = regenerate(&edited, &files, example).unwrap();
    let (line, ours, theirs) = first_difference(&edited, &expected).unwrap();
    assert_eq!(line, 15);
    assert_eq!(ours, "| plain proxy | 20,651 |");
    assert_eq!(theirs, "| plain proxy | 20,650 |");
}

#[test]
fn a_result_file_must_have_exactly_one_table_in_the_page() {
    let files = [FILE.to_owned(), format!("{RESULTS}/other.json")];
    let error = regenerate(&page("\n"), &files, example).unwrap_err();
    assert!(
        error.starts_with("docs/benchmarks/results/other.json is shown 0 times"),
        "{error}"
    );
    let twice = format!("{}{}", page("\n"), page("\n"));
    let error = regenerate(&twice, &files[..1], example).unwrap_err();
    assert!(error.contains("is shown 2 times"), "{error}");
    let error = regenerate(&page("\n"), &[], example).unwrap_err();
    assert!(error.contains("which is not a result file"), "{error}");
}

#[test]
fn markers_that_do_not_pair_up_are_refused() {
    let unclosed = format!("{BEGIN}{FILE}{BEGIN_TAIL}\n| a |\n");
    assert!(sections(&unclosed).unwrap_err().contains("has no"));
    let stray = format!("text\n{END}\n");
    assert!(sections(&stray).unwrap_err().contains("without a table"));
}

#[test]
fn a_file_that_is_not_a_table_is_refused_with_the_reason() {
    let refused = |json: &str| render(json).unwrap_err();
    assert_eq!(refused("[]"), "not a JSON object");
    assert!(refused(&JSON.replace("\"date\"", "\"day\"")).starts_with("unknown field `day`"));
    assert!(refused(&JSON.replace("2026-12-03", "3 Dec")).starts_with("`date` must be"));
    assert_eq!(
        refused(&JSON.replace(", \"15,903\"]", "]")),
        "row 2 has 1 cells under 2 columns"
    );
    assert!(refused(&JSON.replace("20,650", "20|650")).contains("holds a `|`"));
    assert!(refused(&JSON.replace("\"20,650\"", "20650")).contains("is not a string"));
    assert_eq!(
        refused(&JSON.replace("\"scripts/load\"", "\"\"")),
        "`command` must be a string, not empty"
    );
}
