//! The load harness's tools (`scripts/load`): the upstream it measures the gateway against
//! (`idem-bench-upstream`), a filler that writes records into a store through the store's own
//! API (`idem-bench-fill`), and the report and charts of the cost curves (`idem-bench-curves`),
//! which read the harness's results file.
//!
//! # Examples
//!
//! ```
//! use idem_bench::Results;
//!
//! let results: Results = "connections plain_proxy 32 rps 30000\n\
//!                         connections memory_new_keys 32 rps 27000\n"
//!     .parse()?;
//! let ratio = results.get("connections", "memory_new_keys", 32, "rps").unwrap()
//!     / results.get("connections", "plain_proxy", 32, "rps").unwrap();
//! assert_eq!(format!("{ratio:.2}"), "0.90");
//! # Ok::<(), idem_bench::ParseError>(())
//! ```

mod chart;
mod report;
mod results;

pub use chart::{ChartError, write_charts};
pub use report::report;
pub use results::{ParseError, Results};
