//! The run table of `docs/reliability.md` is what `idem-chaos report` prints for the reports
//! committed in `docs/reliability/`, and the command names a file it cannot use.
//!
//! After new reports, `IDEM_BLESS=1 cargo test -p idem-chaos --test report` rewrites the doc's
//! section from them; review its diff.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    path::Path,
    process::{Command, Output},
};

/// The repository's root: the test runs the command from there, as the doc's marker shows it.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The doc's section: what the command prints, between a blank line after the first marker and
/// one before the second.
const BEGIN: &str = "<!-- idem-chaos report docs/reliability/*.json -->\n";
const END: &str = "<!-- end of report -->\n";

/// `idem-chaos report ARGS…`, run from the repository's root.
fn report<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem-chaos"))
        .arg("report")
        .args(args)
        .current_dir(ROOT)
        .output()
        .unwrap()
}

#[test]
fn the_doc_shows_the_committed_reports() {
    let mut files: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs/reliability"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .map(|name| format!("docs/reliability/{name}"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no report in docs/reliability");
    let output = report(&files);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
    let expected = format!("\n{}\n", String::from_utf8(output.stdout).unwrap());

    let path = Path::new(ROOT).join("docs/reliability.md");
    let section = |doc: &str| -> (usize, String) {
        let (before, rest) = doc
            .split_once(BEGIN)
            .unwrap_or_else(|| panic!("docs/reliability.md has no line {BEGIN:?}"));
        let (section, _) = rest
            .split_once(END)
            .unwrap_or_else(|| panic!("docs/reliability.md has no line {END:?} after {BEGIN:?}"));
        (before.lines().count() + 2, section.to_owned())
    };
    if std::env::var_os("IDEM_BLESS").is_some_and(|bless| bless == "1") {
        let doc = std::fs::read_to_string(&path).unwrap();
        let (_, old) = section(&doc);
        let blessed = doc.replacen(
            &format!("{BEGIN}{old}{END}"),
            &format!("{BEGIN}{expected}{END}"),
            1,
        );
        std::fs::write(&path, blessed).unwrap();
    }
    let doc = std::fs::read_to_string(&path).unwrap();
    let (first_line, section) = section(&doc);
    if section != expected {
        let line = section
            .lines()
            .zip(expected.lines())
            .position(|(doc, report)| doc != report)
            .unwrap_or_else(|| section.lines().count().min(expected.lines().count()));
        panic!(
            "docs/reliability.md does not show `idem-chaos report docs/reliability/*.json` \
             (first difference at line {}: the doc has {:?}, the reports give {:?}). After new \
             reports, rewrite it with `IDEM_BLESS=1 cargo test -p idem-chaos --test report` and \
             review the diff.",
            first_line + line,
            section.lines().nth(line),
            expected.lines().nth(line),
        );
    }
}

#[test]
fn a_file_that_is_not_a_report_is_named_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-report.json");
    std::fs::write(&path, r#"{"store": "sqlite"}"#).unwrap();
    assert_refused(
        &[&path],
        &format!(
            "error: {} is not a chaos run's report: missing field `ambiguous` at line 1 column \
             19\n",
            path.display()
        ),
    );
}

#[test]
fn a_missing_file_is_named_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.json");
    assert_refused(
        &[&path],
        &format!(
            "error: cannot read {}: No such file or directory (os error 2)\n",
            path.display()
        ),
    );
}

/// `idem-chaos report FILES` exits 2, prints nothing, and says exactly `message`.
fn assert_refused<S: AsRef<std::ffi::OsStr>>(files: &[S], message: &str) {
    let output = report(files);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(output.stdout, b"");
    assert_eq!(String::from_utf8(output.stderr).unwrap(), message);
}

#[test]
fn without_a_file_the_command_is_refused_with_exit_2() {
    let output = report::<&str>(&[]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(output.stdout, b"");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with("error: the following required arguments were not provided:"),
        "{stderr}"
    );
}
