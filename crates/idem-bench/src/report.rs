//! [`report`]: the cost curves and counts of a [`Results`] as markdown tables.

use std::fmt::Write as _;

use crate::Results;

/// The connections at which "no collapse" is measured against.
const REFERENCE_CONNECTIONS: u64 = 32;

/// The markdown report of every curve in `results` (those not measured are left out): one table
/// per curve, each ratio against the plain proxy (or the empty store) of the same run.
pub fn report(results: &Results) -> String {
    let mut out = String::new();
    connections(results, &mut out);
    body(results, &mut out);
    keys(results, &mut out);
    purge(results, &mut out);
    census(results, &mut out);
    counts(results, &mut out);
    out
}

fn connections(results: &Results, out: &mut String) {
    let xs = results.xs("connections");
    if xs.is_empty() {
        return;
    }
    let get = |series, x, metric| results.get("connections", series, x, metric);
    // Each series against itself at 32 connections: the upstream direct shows what the machine
    // (wrk, the kernel, the upstream) loses with more connections, the gateway's on top of it.
    let at_reference = |series| get(series, REFERENCE_CONNECTIONS, "rps");
    heading(out, "Connections", results.rounds("connections"));
    out.push_str(
        "| connections | upstream direct, req/s | plain proxy, req/s | p99          | memory, new keys, req/s | p99 | new keys / plain proxy          | at N / at 32 connections: upstream direct | plain proxy | new keys |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for x in xs {
        let direct = get("direct", x, "rps");
        let plain = get("plain_proxy", x, "rps");
        let memory = get("memory_new_keys", x, "rps");
        let _ = writeln!(
            out,
            "| {x} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            rate(direct),
            rate(plain),
            ms(get("plain_proxy", x, "p99_ms")),
            rate(memory),
            ms(get("memory_new_keys", x, "p99_ms")),
            ratio(memory, plain),
            ratio(direct, at_reference("direct")),
            ratio(plain, at_reference("plain_proxy")),
            ratio(memory, at_reference("memory_new_keys")),
        );
    }
    out.push('\n');
}

fn body(results: &Results, out: &mut String) {
    let xs = results.xs("body");
    if xs.is_empty() {
        return;
    }
    let get = |series, x, metric| results.get("body", series, x, metric);
    heading(out, "Body size", results.rounds("body"));
    out.push_str(
        "| request body (JSON) | plain proxy, req/s | p99 | memory, new keys, req/s | p99 \
         | new keys / plain proxy |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for x in xs {
        let plain = get("plain_proxy", x, "rps");
        let memory = get("memory_new_keys", x, "rps");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            bytes_label(x),
            rate(plain),
            ms(get("plain_proxy", x, "p99_ms")),
            rate(memory),
            ms(get("memory_new_keys", x, "p99_ms")),
            ratio(memory, plain),
        );
    }
    out.push('\n');
}

fn keys(results: &Results, out: &mut String) {
    let xs = results.xs("keys");
    if xs.is_empty() {
        return;
    }
    let get = |series: &str, x, metric| results.get("keys", series, x, metric);
    let plain = get("plain_proxy", 0, "rps");
    heading(out, "Stored keys", results.rounds("keys"));
    let _ = writeln!(
        out,
        "The plain proxy in the same run: {} req/s.\n",
        rate(plain)
    );
    out.push_str(
        "| store | stored keys | bytes per key | new keys/s | p99 | vs. the empty store \
         | vs. plain proxy |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for store in results
        .series("keys")
        .iter()
        .filter(|s| *s != "plain_proxy")
    {
        let empty = get(store, 0, "rps");
        for &x in &xs {
            let Some(rps) = get(store, x, "rps") else {
                continue;
            };
            let stored = get(store, x, "stored").map_or(x, |k| k as u64);
            let per_key = get(store, x, "bytes_per_key")
                .map_or_else(|| "—".to_owned(), |b| format!("{b:.0}"));
            let _ = writeln!(
                out,
                "| {} | {} | {per_key} | {} | {} | {} | {} |",
                store_label(store),
                count(stored),
                rate(Some(rps)),
                ms(get(store, x, "p99_ms")),
                ratio(Some(rps), empty),
                ratio(Some(rps), plain),
            );
        }
    }
    out.push('\n');
}

fn purge(results: &Results, out: &mut String) {
    let xs = results.xs("purge");
    if xs.is_empty() {
        return;
    }
    heading(out, "Purging expired keys", results.rounds("purge"));
    out.push_str(
        "| store | expired keys | purge duration | new keys/s while it runs | without | ratio |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for store in results.series("purge") {
        for &x in &xs {
            let get = |metric| results.get("purge", store, x, metric);
            let Some(duration) = get("duration_s") else {
                continue;
            };
            let (during, without) = (get("rps_during"), get("rps_without"));
            let _ = writeln!(
                out,
                "| {} | {} | {duration:.2} s | {} | {} | {} |",
                store_label(store),
                count(x),
                rate(during),
                rate(without),
                ratio(during, without),
            );
        }
    }
    out.push('\n');
}

fn census(results: &Results, out: &mut String) {
    let xs = results.xs("census");
    if xs.is_empty() {
        return;
    }
    heading(
        out,
        "Counting and listing records",
        results.rounds("census"),
    );
    out.push_str(
        "| store | live records | census duration | new keys/s during a census | outside one | \
         ratio | new keys/s while listing | listing pages/s | ratio |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for store in results.series("census") {
        for &x in &xs {
            let get = |metric| results.get("census", store, x, metric);
            let Some(duration) = get("census_s") else {
                continue;
            };
            let (during, outside) = (get("rps_during"), get("rps_outside"));
            // No page listed: the listing was not measured.
            let pages = get("listing_pages_per_s").filter(|&pages| pages > 0.0);
            let listing = pages.and(get("rps_listing"));
            let pages = pages.map_or_else(|| "—".to_owned(), |pages| format!("{pages:.0}"));
            let _ = writeln!(
                out,
                "| {} | {} | {duration:.1} s | {} | {} | {} | {} | {pages} | {} |",
                store_label(store),
                count(x),
                rate(during),
                rate(outside),
                ratio(during, outside),
                rate(listing),
                ratio(listing, outside),
            );
        }
    }
    out.push('\n');
}

/// What each counter of the counts mode is, per new key.
const COUNTERS: &[(&str, &str)] = &[
    ("fsyncs", "fsync + fdatasync (perf stat, the gateway)"),
    ("commits", "commits (pg_stat_database xact_commit)"),
    ("round_trips", "round trips (SHOW GLOBAL STATUS)"),
    ("transactions", "commits (Com_commit)"),
    ("statements", "statements (Questions)"),
    ("scripts", "script calls (EVALSHA, EVAL, FCALL)"),
    (
        "commands",
        "commands (INFO commandstats, scripts' own included)",
    ),
    (
        "reads",
        "read events in redis-server (INFO stats): round trips",
    ),
];

fn counts(results: &Results, out: &mut String) {
    let xs = results.xs("counts");
    if xs.is_empty() {
        return;
    }
    heading(out, "Counted per new key", results.rounds("counts"));
    out.push_str("| store | per new key |");
    for x in &xs {
        let clients = if *x == 1 { "client" } else { "clients" };
        let _ = write!(out, " {x} {clients} |");
    }
    out.push_str("\n| --- | --- |");
    for _ in &xs {
        out.push_str(" --- |");
    }
    out.push('\n');
    for store in results.series("counts") {
        let metrics = results.metrics("counts", store);
        let rows = std::iter::once(("rps", "(new keys/s)"))
            .chain(COUNTERS.iter().copied())
            .filter(|(metric, _)| metrics.iter().any(|m| m == metric));
        for (metric, label) in rows {
            let _ = write!(out, "| {} | {label} |", store_label(store));
            for &x in &xs {
                let value = results.get("counts", store, x, metric);
                let cell = if metric == "rps" {
                    rate(value)
                } else {
                    per_key(value, results.get("counts", store, x, "requests"))
                };
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
    }
    out.push('\n');
}

fn heading(out: &mut String, title: &str, rounds: usize) {
    let rounds = if rounds > 1 {
        format!(" (medians of {rounds} rounds)")
    } else {
        String::new()
    };
    let _ = writeln!(out, "#### {title}{rounds}\n");
}

fn rate(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| thousands(v.round() as u64))
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{v:.2} ms"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "—".to_owned(),
    }
}

fn per_key(counted: Option<f64>, requests: Option<f64>) -> String {
    match (counted, requests) {
        (Some(c), Some(r)) if r > 0.0 => format!("{:.3}", c / r),
        _ => "—".to_owned(),
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A key count as the curves name it: `0`, `100 k`, `10 M`, or with its digits when not round.
pub(crate) fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n.is_multiple_of(1_000_000) => format!("{} M", n / 1_000_000),
        n if n >= 1_000 && n.is_multiple_of(1_000) => format!("{} k", n / 1_000),
        n => thousands(n),
    }
}

/// A body size: `100 B`, `16 KiB`, `1 MiB`.
pub(crate) fn bytes_label(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n.is_multiple_of(1 << 20) => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n.is_multiple_of(1 << 10) => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

pub(crate) fn store_label(store: &str) -> &str {
    match store {
        "memory" => "memory",
        "sqlite" => "SQLite",
        "postgres" => "PostgreSQL",
        "mysql" => "MySQL",
        "redis" => "Redis",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report of `results`, given as lines of `CURVE SERIES X METRIC VALUE`.
    fn report_of(results: &str) -> String {
        report(&results.parse().unwrap())
    }

    /// Checks that `report` has `line`, showing the report otherwise.
    #[track_caller]
    fn assert_has(report: &str, line: &str) {
        assert!(report.contains(line), "{report}");
    }

    #[test]
    fn the_connections_table_gives_both_ratios() {
        let report = report_of(
            "connections direct 32 rps 60000\n\
             connections plain_proxy 32 rps 40000\n\
             connections plain_proxy 32 p99_ms 4.5\n\
             connections memory_new_keys 32 rps 30000\n\
             connections memory_new_keys 32 p99_ms 5.25\n\
             connections direct 1024 rps 30000\n\
             connections plain_proxy 1024 rps 20000\n\
             connections memory_new_keys 1024 rps 24000\n",
        );
        assert_has(
            &report,
            "| 32 | 60,000 | 40,000 | 4.50 ms | 30,000 | 5.25 ms | 0.75× | 1.00× | 1.00× | 1.00× |",
        );
        assert_has(
            &report,
            "| 1024 | 30,000 | 20,000 | — | 24,000 | — | 1.20× | 0.50× | 0.50× | 0.80× |",
        );
        assert!(!report.contains("Body size"), "{report}");
    }

    #[test]
    fn stored_keys_are_compared_with_the_empty_store_and_the_plain_proxy() {
        let report = report_of(
            "keys plain_proxy 0 rps 10000\n\
             keys sqlite 0 rps 2000\n\
             keys sqlite 0 stored 0\n\
             keys sqlite 100000 rps 1800\n\
             keys sqlite 100000 stored 104000\n\
             keys sqlite 100000 bytes_per_key 412.4\n",
        );
        assert_has(&report, "| SQLite | 0 | — | 2,000 | — | 1.00× | 0.20× |");
        assert_has(
            &report,
            "| SQLite | 104 k | 412 | 1,800 | — | 0.90× | 0.18× |",
        );
    }

    #[test]
    fn counts_are_divided_by_the_requests_made() {
        let report = report_of(
            "counts sqlite 1 requests 1000\n\
             counts sqlite 1 fsyncs 2000\n\
             counts sqlite 32 requests 4000\n\
             counts sqlite 32 fsyncs 1000\n",
        );
        assert_has(&report, "| store | per new key | 1 client | 32 clients |");
        assert_has(
            &report,
            "| SQLite | fsync + fdatasync (perf stat, the gateway) | 2.000 | 0.250 |",
        );
    }

    #[test]
    fn sizes_and_counts_are_named_as_the_curves_name_them() {
        assert_eq!(
            [100, 16 << 10, 256 << 10, 1 << 20].map(bytes_label),
            ["100 B", "16 KiB", "256 KiB", "1 MiB"]
        );
        assert_eq!(
            [0, 1_000, 100_000, 10_000_000, 104_213].map(count),
            ["0", "1 k", "100 k", "10 M", "104,213"]
        );
    }
}
