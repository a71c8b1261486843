//! [`Report`]: a run's settings, figures and verdict, as the table `idem-chaos run` prints and
//! as JSON (`--json FILE`).
//!
//! # Examples
//!
//! ```
//! use idem_chaos::{Ambiguous, Report, StoreKind, Verdict, check::{FaultCounts, Figures}};
//!
//! let report = Report {
//!     store: StoreKind::Sqlite,
//!     ambiguous: Ambiguous::Reject,
//!     gateways: 2,
//!     callers: 32,
//!     duration_ms: 60_000,
//!     lease_ms: 2_000,
//!     ttl_ms: 60_000,
//!     seed: 7,
//!     statuses: [(201, 100)].into(),
//!     verdict: Verdict {
//!         figures: Figures { operations: 100, executions: 100, succeeded: 100, ..Figures::default() },
//!         faults: FaultCounts::default(),
//!         failures: vec![],
//!     },
//! };
//! assert!(report.table().contains("PASS"));
//! let json = serde_json::to_string(&report)?;
//! assert_eq!(serde_json::from_str::<Report>(&json)?, report);
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

use crate::{Ambiguous, StoreKind, Verdict};

/// What a run did and found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The store.
    pub store: StoreKind,
    /// The gateways' `--ambiguous` mode.
    pub ambiguous: Ambiguous,
    /// How many gateways shared the store.
    pub gateways: u8,
    /// How many callers sent operations at once.
    pub callers: u32,
    /// How long operations were started and faults injected, in milliseconds.
    pub duration_ms: u64,
    /// The gateways' lease, in milliseconds.
    pub lease_ms: u64,
    /// The gateways' TTL, in milliseconds.
    pub ttl_ms: u64,
    /// The seed of the run's random choices.
    pub seed: u64,
    /// How many operations got each definite status.
    pub statuses: BTreeMap<u16, u64>,
    /// The figures and what failed.
    #[serde(flatten)]
    pub verdict: Verdict,
}

impl Report {
    /// Whether every expectation was met.
    pub fn passed(&self) -> bool {
        self.verdict.passed()
    }

    /// The table printed at the end of a run, then `PASS` or `FAIL` with what failed.
    pub fn table(&self) -> String {
        let f = &self.verdict.figures;
        let faults = &self.verdict.faults;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "idem-chaos: {} store, --ambiguous {}, {} gateway(s), {} callers, {:.0}s, lease {}ms, \
             seed {}",
            self.store,
            self.ambiguous,
            self.gateways,
            self.callers,
            self.duration_ms as f64 / 1000.0,
            self.lease_ms,
            self.seed,
        );
        let _ = writeln!(
            out,
            "faults: {} gateway kills, {} store restarts (the longest {} ms), {} dropped answers, \
             {} slow windows, {} 503 windows\n",
            faults.gateway_kills,
            faults.store_restarts,
            faults.longest_store_outage_ms,
            faults.dropped_answers,
            faults.slow_windows,
            faults.error_windows,
        );
        let rows = [
            ("logical operations", f.operations),
            ("attempts", f.attempts),
            ("upstream executions", f.executions),
            ("executions interrupted by a gateway kill", f.interrupted),
            ("duplicates (executed more than once)", f.duplicates),
            (
                "  explained by a kill during the call",
                f.explained_duplicates,
            ),
            ("answered 2xx", f.succeeded),
            ("answered with a stored 503", f.refused),
            ("outcome unknown", f.outcome_unknown),
            ("lost (no definite answer)", f.lost),
            ("stuck (processing after the end + a lease)", f.stuck),
            ("forgotten (answered, no record at the end)", f.forgotten),
            ("wrong answers", f.wrong_answers),
            ("unexpected answers", f.unexpected_answers),
        ];
        for (label, value) in rows {
            let _ = writeln!(out, "  {label:<44} {value:>9}");
        }
        out.push('\n');
        if self.passed() {
            let expectation = match self.ambiguous {
                Ambiguous::Reject => "no operation executed twice",
                Ambiguous::Retry => {
                    "every duplicate follows a gateway kill during the upstream call"
                }
            };
            let _ = writeln!(out, "PASS: {expectation}; nothing lost, stuck or forgotten");
        } else {
            for failure in &self.verdict.failures {
                let _ = writeln!(out, "FAIL: {failure}");
            }
        }
        out
    }
}
