//! [`Results`]: the measurements of one harness run, one line each.

use std::{collections::BTreeMap, str::FromStr};

/// The measurements of one run of the cost curves, read from the harness's results file.
///
/// Each line is `CURVE SERIES X METRIC VALUE`, separated by whitespace: `keys sqlite 100000 rps
/// 1834.5` is the SQLite store's new keys per second with 100,000 keys stored. A point measured
/// more than once (in several rounds) is the median of its values. Blank lines and lines
/// starting with `#` are skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Results {
    values: BTreeMap<(String, String, u64, String), Vec<f64>>,
    // The series of each curve in the order the harness measured them first.
    series: BTreeMap<String, Vec<String>>,
}

/// A line of a results file that is not `CURVE SERIES X METRIC VALUE`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The line has more or fewer than five fields.
    #[error("line {line}: expected `CURVE SERIES X METRIC VALUE`, found {fields} fields")]
    Fields {
        /// The line's number, from 1.
        line: usize,
        /// How many fields it has.
        fields: usize,
    },
    /// X is not a whole number.
    #[error("line {line}: X must be a whole number")]
    X {
        /// The line's number, from 1.
        line: usize,
        /// Why it does not parse.
        #[source]
        source: std::num::ParseIntError,
    },
    /// VALUE is not a number.
    #[error("line {line}: VALUE must be a number")]
    Value {
        /// The line's number, from 1.
        line: usize,
        /// Why it does not parse.
        #[source]
        source: std::num::ParseFloatError,
    },
}

impl FromStr for Results {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut results = Results::default();
        for (index, line) in text.lines().enumerate() {
            let line_number = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [curve, series, x, metric, value] = fields[..] else {
                return Err(ParseError::Fields {
                    line: line_number,
                    fields: fields.len(),
                });
            };
            let x = x.parse().map_err(|source| ParseError::X {
                line: line_number,
                source,
            })?;
            let value = value.parse().map_err(|source| ParseError::Value {
                line: line_number,
                source,
            })?;
            results.push(curve, series, x, metric, value);
        }
        Ok(results)
    }
}

impl Results {
    /// Adds one measurement.
    pub fn push(&mut self, curve: &str, series: &str, x: u64, metric: &str, value: f64) {
        let known = self.series.entry(curve.to_owned()).or_default();
        if !known.iter().any(|s| s == series) {
            known.push(series.to_owned());
        }
        self.values
            .entry((curve.to_owned(), series.to_owned(), x, metric.to_owned()))
            .or_default()
            .push(value);
    }

    /// The median of a point's measurements, if it was measured.
    pub fn get(&self, curve: &str, series: &str, x: u64, metric: &str) -> Option<f64> {
        let key = (curve.to_owned(), series.to_owned(), x, metric.to_owned());
        self.values.get(&key).map(|values| median(values))
    }

    /// The series of `curve`, in the order they were first measured.
    pub fn series(&self, curve: &str) -> &[String] {
        self.series.get(curve).map_or(&[], Vec::as_slice)
    }

    /// Every X measured on `curve` (by any series), in increasing order.
    pub fn xs(&self, curve: &str) -> Vec<u64> {
        let mut xs: Vec<u64> = self
            .values
            .keys()
            .filter(|(c, ..)| c == curve)
            .map(|(_, _, x, _)| *x)
            .collect();
        xs.sort_unstable();
        xs.dedup();
        xs
    }

    /// The metrics measured on `curve` by `series`, in name order.
    pub fn metrics(&self, curve: &str, series: &str) -> Vec<String> {
        let mut metrics: Vec<String> = self
            .values
            .keys()
            .filter(|(c, s, ..)| c == curve && s == series)
            .map(|(.., m)| m.clone())
            .collect();
        metrics.sort_unstable();
        metrics.dedup();
        metrics
    }

    /// How many rounds measured a point (the most values of any point of `curve`).
    pub fn rounds(&self, curve: &str) -> usize {
        self.values
            .iter()
            .filter(|((c, ..), _)| c == curve)
            .map(|(_, values)| values.len())
            .max()
            .unwrap_or(0)
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_measured_in_several_rounds_is_their_median() {
        let results: Results = "body plain_proxy 100 rps 10\n\
                                body plain_proxy 100 rps 30\n\
                                body plain_proxy 100 rps 20\n\
                                body plain_proxy 16384 rps 7\n\
                                body plain_proxy 16384 rps 8\n"
            .parse()
            .unwrap();
        assert_eq!(results.get("body", "plain_proxy", 100, "rps"), Some(20.0));
        assert_eq!(results.get("body", "plain_proxy", 16384, "rps"), Some(7.5));
        assert_eq!(results.get("body", "plain_proxy", 100, "p99_ms"), None);
        assert_eq!(results.rounds("body"), 3);
    }

    #[test]
    fn series_keep_the_order_they_were_measured_in_and_xs_are_sorted() {
        let results: Results = "# a comment\n\n\
                                keys sqlite 100000 rps 1\n\
                                keys memory 0 rps 2\n\
                                keys sqlite 0 rps 3\n\
                                keys sqlite 0 bytes_per_key 4\n\
                                purge sqlite 1000 duration_s 5\n"
            .parse()
            .unwrap();
        assert_eq!(results.series("keys"), ["sqlite", "memory"]);
        assert_eq!(results.xs("keys"), [0, 100000]);
        assert_eq!(results.metrics("keys", "sqlite"), ["bytes_per_key", "rps"]);
        assert_eq!(results.series("connections"), [] as [String; 0]);
    }

    #[test]
    fn a_malformed_line_is_refused_with_its_number() {
        let error = "keys sqlite 0 rps 1\nkeys sqlite 0 rps\n"
            .parse::<Results>()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "line 2: expected `CURVE SERIES X METRIC VALUE`, found 4 fields"
        );
        let error = "keys sqlite 1.5 rps 1\n".parse::<Results>().unwrap_err();
        assert_eq!(error.to_string(), "line 1: X must be a whole number");
        let error = "keys sqlite 1 rps fast\n".parse::<Results>().unwrap_err();
        assert_eq!(error.to_string(), "line 1: VALUE must be a number");
    }
}
