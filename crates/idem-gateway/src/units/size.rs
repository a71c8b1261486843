//! Sizes in bytes as written in flags and config files: `1024`, `64KiB`, `10MiB`, `1GiB`.
//!
//! # Examples
//!
//! ```
//! use idem_gateway::ByteSize;
//!
//! let limit: ByteSize = "10MiB".parse()?;
//! assert_eq!(limit.0, 10 * 1024 * 1024);
//! assert_eq!(ByteSize(65_536).to_string(), "64KiB");
//! assert!("10MB".parse::<ByteSize>().is_err());
//! # Ok::<(), idem_gateway::Error>(())
//! ```

use std::{fmt, str::FromStr};

use crate::error::ConfigError;

/// A number of bytes, parsed from a whole number with an optional binary unit and shown in the
/// largest unit that divides it exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub usize);

/// The units, largest first.
const UNITS: [(&str, usize); 4] = [
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("", 1),
];

impl FromStr for ByteSize {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || ConfigError::InvalidSize(s.to_owned());
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (number, unit) = s.split_at(split);
        let number: usize = number.parse().map_err(|_| invalid())?;
        let (_, size) = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .ok_or_else(invalid)?;
        number.checked_mul(*size).map(Self).ok_or_else(invalid)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, size) = UNITS
            .iter()
            .find(|(_, size)| self.0.is_multiple_of(*size) && self.0 > 0)
            .unwrap_or(&("", 1));
        write!(f, "{}{name}", self.0 / size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Option<usize> {
        s.parse::<ByteSize>().ok().map(|size| size.0)
    }

    #[test]
    fn parses_bytes_and_binary_units() {
        assert_eq!(parse("1024"), Some(1024));
        assert_eq!(parse("0"), Some(0));
        assert_eq!(parse("64KiB"), Some(65_536));
        assert_eq!(parse("10MiB"), Some(10_485_760));
        assert_eq!(parse("1GiB"), Some(1_073_741_824));
    }

    #[test]
    fn refuses_anything_else() {
        for bad in [
            "",
            "KiB",
            "1.5MiB",
            "-1",
            "10MB",
            "10mib",
            "10 MiB",
            "1k",
            "99999999999999999999GiB",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            "10MB".parse::<ByteSize>().unwrap_err().to_string(),
            "invalid size `10MB`: expected a whole number of bytes, optionally with a unit (KiB, MiB or GiB), e.g. 1024, 64KiB, 10MiB"
        );
    }

    #[test]
    fn shows_the_largest_exact_unit() {
        assert_eq!(ByteSize(10 << 20).to_string(), "10MiB");
        assert_eq!(ByteSize(1 << 20).to_string(), "1MiB");
        assert_eq!(ByteSize(1536).to_string(), "1536");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!(ByteSize(0).to_string(), "0");
    }
}
