//! Durations as written in flags and config files: `500ms`, `2s`, `30m`, `24h`, `7d`.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use idem_gateway::HumanDuration;
//!
//! let ttl: HumanDuration = "24h".parse()?;
//! assert_eq!(ttl.0, Duration::from_secs(24 * 60 * 60));
//! assert_eq!(HumanDuration(Duration::from_millis(1500)).to_string(), "1500ms");
//! assert!("1h30m".parse::<HumanDuration>().is_err());
//! # Ok::<(), idem_gateway::Error>(())
//! ```

use std::{fmt, str::FromStr, time::Duration};

use crate::error::ConfigError;

/// A duration parsed from a whole number and one unit, and shown the same way (in the largest
/// unit up to hours that divides it exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

/// The units, largest first, in milliseconds.
const UNITS: [(&str, u64); 5] = [
    ("d", 24 * 60 * 60 * 1000),
    ("h", 60 * 60 * 1000),
    ("m", 60 * 1000),
    ("s", 1000),
    ("ms", 1),
];

impl FromStr for HumanDuration {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || ConfigError::InvalidDuration(s.to_owned());
        let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(invalid)?;
        let (number, unit) = s.split_at(split);
        let number: u64 = number.parse().map_err(|_| invalid())?;
        let (_, millis) = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .ok_or_else(invalid)?;
        let millis = number.checked_mul(*millis).ok_or_else(invalid)?;
        Ok(Self(Duration::from_millis(millis)))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX);
        // Days are accepted but not shown: `24h` reads better than `1d` for the default TTL.
        let (name, size) = UNITS[1..]
            .iter()
            .find(|(_, size)| millis.is_multiple_of(*size) && millis > 0)
            .unwrap_or(&("s", 1000));
        write!(f, "{}{name}", millis / size)
    }
}

impl From<HumanDuration> for Duration {
    fn from(value: HumanDuration) -> Self {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Option<Duration> {
        s.parse::<HumanDuration>().ok().map(Duration::from)
    }

    #[test]
    fn parses_each_unit() {
        assert_eq!(parse("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse("30m"), Some(Duration::from_secs(30 * 60)));
        assert_eq!(parse("24h"), Some(Duration::from_secs(24 * 3600)));
        assert_eq!(parse("7d"), Some(Duration::from_secs(7 * 24 * 3600)));
        assert_eq!(parse("0s"), Some(Duration::ZERO));
    }

    #[test]
    fn refuses_anything_else() {
        for bad in [
            "",
            "10",
            "s",
            "1.5s",
            "-1s",
            "1 s",
            " 1s",
            "1S",
            "1h30m",
            "2sec",
            "1us",
            "99999999999999999999d",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            "10x".parse::<HumanDuration>().unwrap_err().to_string(),
            "invalid duration `10x`: expected a whole number and a unit (ms, s, m, h or d), e.g. 500ms, 2s, 30m, 24h"
        );
    }

    #[test]
    fn shows_the_largest_exact_unit() {
        let show = |millis| HumanDuration(Duration::from_millis(millis)).to_string();
        assert_eq!(show(24 * 3600 * 1000), "24h");
        assert_eq!(show(3 * 3600 * 1000), "3h");
        assert_eq!(show(30_000), "30s");
        assert_eq!(show(90_000), "90s");
        assert_eq!(show(1500), "1500ms");
        assert_eq!(show(0), "0s");
    }
}
