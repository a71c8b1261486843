//! [`StatusList`]: the value of `--release-statuses`.

use std::{fmt, str::FromStr};

use http::StatusCode;

use crate::error::ConfigError;

/// A comma-separated list of 4xx statuses, as `--release-statuses` takes it (`none`, or an
/// empty list, releases on none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusList(pub Vec<StatusCode>);

impl FromStr for StatusList {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().eq_ignore_ascii_case("none") {
            return Ok(Self(Vec::new()));
        }
        s.split(',')
            .map(str::trim)
            .filter(|code| !code.is_empty())
            .map(|code| {
                code.parse::<u16>()
                    .ok()
                    .filter(|code| (400..500).contains(code))
                    .and_then(|code| StatusCode::from_u16(code).ok())
                    .ok_or_else(|| ConfigError::InvalidReleaseStatus(code.to_owned()))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

impl fmt::Display for StatusList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let codes: Vec<&str> = self.0.iter().map(StatusCode::as_str).collect();
        f.write_str(&codes.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_4xx_statuses_are_taken() {
        let list: StatusList = "401, 403,409".parse().unwrap();
        assert_eq!(list.to_string(), "401,403,409");
        assert_eq!(
            "none".parse::<StatusList>().unwrap(),
            StatusList(Vec::new())
        );
        assert_eq!("".parse::<StatusList>().unwrap().to_string(), "none");
        for bad in ["200", "500", "4O1", "99999"] {
            assert_eq!(
                bad.parse::<StatusList>().unwrap_err().to_string(),
                format!(
                    "invalid release status `{bad}`: expected a 4xx status that your service \
                     answers before it acts, such as 401"
                )
            );
        }
    }
}
