//! [`MethodList`]: the value of `--methods`.

use std::{fmt, str::FromStr};

use http::Method;

use crate::error::ConfigError;

/// A comma-separated list of HTTP methods, as `--methods` takes it (an empty list covers none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodList(pub Vec<Method>);

impl FromStr for MethodList {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| {
                Method::from_str(&m.to_ascii_uppercase()).map_err(|_| {
                    ConfigError::InvalidHttpToken {
                        what: "method",
                        value: m.to_owned(),
                    }
                })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

impl fmt::Display for MethodList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(Method::as_str).collect();
        f.write_str(&names.join(","))
    }
}
