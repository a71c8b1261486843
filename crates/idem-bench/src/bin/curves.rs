//! The report of the load harness's cost curves: reads the results file that `scripts/load
//! curves` (or `counts`) wrote, prints one markdown table per curve, and writes one SVG chart
//! per curve into `--charts DIR`.
//!
//! `idem-bench-curves target/curves.txt --charts docs/benchmarks`

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;

/// The cost curves' tables and charts from a results file.
#[derive(Debug, Parser)]
struct Args {
    /// The results file: one `CURVE SERIES X METRIC VALUE` line per measurement.
    results: PathBuf,
    /// Where the SVG charts are written (created if missing); none without it.
    #[arg(long, value_name = "DIR")]
    charts: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.results)
        .with_context(|| format!("reading {}", args.results.display()))?;
    let results: idem_bench::Results = text
        .parse()
        .with_context(|| format!("parsing {}", args.results.display()))?;
    print!("{}", idem_bench::report(&results));
    if let Some(dir) = args.charts {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for path in idem_bench::write_charts(&results, &dir)? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
