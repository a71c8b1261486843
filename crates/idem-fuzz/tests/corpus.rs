//! Replays the committed fuzz corpus and every crash reproducer through the targets, on stable
//! Rust: `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` of the repository.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    fs,
    path::{Path, PathBuf},
};

/// The files of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`, in a stable order.
fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = fs::read_dir(fuzz.join(kind).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a readable directory entry").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Runs every input of `target` through `body`; a panic fails the test, naming the input.
fn replay(target: &str, body: fn(&[u8])) {
    let inputs = inputs(target);
    eprintln!("{target}: replaying {} inputs", inputs.len());
    assert!(!inputs.is_empty(), "no corpus for the {target} target");
    for path in &inputs {
        eprintln!("{}", path.display());
        body(&fs::read(path).expect("a readable input"));
    }
}

#[test]
fn key_corpus_and_regressions_pass() {
    replay("key", idem_fuzz::key);
}

#[test]
fn fingerprint_corpus_and_regressions_pass() {
    replay("fingerprint", idem_fuzz::fingerprint);
}

#[test]
fn stored_response_corpus_and_regressions_pass() {
    replay("stored_response", idem_fuzz::stored_response);
}

#[test]
fn gateway_request_corpus_and_regressions_pass() {
    replay("gateway_request", idem_fuzz::gateway_request);
}
