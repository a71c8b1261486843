//! `idem demo`: the newcomer's first command does what its table says.

use crate::support::idem;

/// The value of a row of the demo's table: (with idem, without idem).
fn row(stdout: &str, label: &str) -> (u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no `{label}` row in:\n{stdout}"));
    let numbers: Vec<u64> = line[label.len()..]
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 2, "{line}");
    (numbers[0], numbers[1])
}

#[test]
fn demo_charges_once_through_idem_and_twice_without() {
    let output = idem(&[
        "demo",
        "--payments",
        "300",
        "--clients",
        "8",
        "--loss",
        "0.3",
        "--seed",
        "7",
    ]);
    assert_eq!(output.code, Some(0), "{}", output.stderr);
    let out = &output.stdout;
    assert_eq!(row(out, "logical payments"), (300, 300));
    let (charges, unprotected_charges) = row(out, "charges executed");
    assert_eq!(charges, 300);
    let (duplicates, unprotected_duplicates) = row(out, "duplicate charges");
    assert_eq!(duplicates, 0);
    assert_eq!(unprotected_charges, 300 + unprotected_duplicates);
    // 30% of responses lost: the unprotected run charges some payments more than once.
    assert!(unprotected_duplicates > 0, "{out}");
    assert_eq!(row(out, "never charged"), (0, 0));
    let (attempts, _) = row(out, "attempts");
    assert!(attempts > 300, "retries happened: {out}");
    let (replays, unprotected_replays) = row(out, "replays");
    assert!(replays > 0, "{out}");
    assert_eq!(unprotected_replays, 0);
}

#[test]
fn demo_refuses_a_loss_rate_out_of_range() {
    let output = idem(&["demo", "--loss", "1.5"]);
    assert_eq!(output.code, Some(2));
    assert_eq!(output.stdout, "");
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output.stderr.contains("expected a number from 0 to 0.9"),
        "{}",
        output.stderr
    );
}
