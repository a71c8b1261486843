//! A server store URL split into the parts idem reads, and the URL with its password hidden.

use std::borrow::Cow;

use crate::{Error, InvalidParameter};

/// `scheme://[userinfo@]hosts[/path][?query]`, split without decoding anything.
pub(super) struct Parts<'a> {
    /// The URL as given, with its password hidden: for error messages.
    pub(super) shown: String,
    pub(super) scheme: &'a str,
    pub(super) userinfo: Option<&'a str>,
    pub(super) hosts: &'a str,
    pub(super) path: &'a str,
    pub(super) query: Vec<(&'a str, &'a str)>,
}

impl<'a> Parts<'a> {
    /// Splits `url`, which has a `://`.
    pub(super) fn split(url: &'a str) -> Result<Self, Error> {
        let shown = redact(url).into_owned();
        let Some((scheme, rest)) = url.split_once("://") else {
            unreachable!("the caller found the scheme");
        };
        if rest.contains('#') {
            return Err(Error::InvalidStoreUrl {
                url: shown,
                reason: "a store URL has no fragment (`#…`)",
            });
        }
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) =
            before_query.split_at(before_query.find('/').unwrap_or(before_query.len()));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let query = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
            .collect();
        Ok(Self {
            shown,
            scheme,
            userinfo,
            hosts,
            path,
            query,
        })
    }

    /// Removes the parameter `name` from the query and parses its value.
    pub(super) fn take<T, E>(
        &mut self,
        name: &'static str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<Option<T>, Error>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let mut values = self
            .query
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| *v);
        let (value, again) = (values.next(), values.next());
        if again.is_some() {
            return Err(self.invalid(InvalidParameter::Repeated(name)));
        }
        self.query.retain(|(n, _)| *n != name);
        let Some(value) = value else {
            return Ok(None);
        };
        parse(value).map(Some).map_err(|reason| {
            self.invalid(InvalidParameter::Value {
                name,
                value: value.to_owned(),
                reason: Box::new(reason),
            })
        })
    }

    /// Refuses the first parameter left that `known` does not accept.
    pub(super) fn refuse_unknown(
        &self,
        known: impl Fn(&str) -> bool,
        takes: &'static str,
    ) -> Result<(), Error> {
        match self.query.iter().find(|(name, _)| !known(name)) {
            Some((name, _)) => Err(self.invalid(InvalidParameter::Unknown {
                name: (*name).to_owned(),
                known: takes,
            })),
            None => Ok(()),
        }
    }

    /// `userinfo@` if there is one, else nothing.
    pub(super) fn credentials(&self) -> String {
        self.userinfo
            .map(|userinfo| format!("{userinfo}@"))
            .unwrap_or_default()
    }

    /// The query that is left, `?a=b&c=d`, or nothing.
    pub(super) fn remaining_query(&self) -> String {
        if self.query.is_empty() {
            return String::new();
        }
        let pairs: Vec<String> = self
            .query
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        format!("?{}", pairs.join("&"))
    }

    pub(super) fn error(&self, reason: &'static str) -> Error {
        Error::InvalidStoreUrl {
            url: self.shown.clone(),
            reason,
        }
    }

    fn invalid(&self, problem: InvalidParameter) -> Error {
        Error::InvalidStoreParameter {
            url: self.shown.clone(),
            problem,
        }
    }
}

/// `url` with the password of its user info, and the value of a `password` parameter, replaced
/// by `***`: URLs end up in logs and error messages.
pub(super) fn redact(url: &str) -> Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Cow::Borrowed(url);
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _password)) => Cow::Owned(format!("{user}:***@{hosts}")),
            None => Cow::Borrowed(authority),
        },
        None => Cow::Borrowed(authority),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) if query.split('&').any(|p| p.starts_with("password=")) => {
            let query: Vec<&str> = query
                .split('&')
                .map(|pair| {
                    if pair.starts_with("password=") {
                        "password=***"
                    } else {
                        pair
                    }
                })
                .collect();
            Cow::Owned(format!("{path}?{}", query.join("&")))
        }
        _ => Cow::Borrowed(tail),
    };
    if matches!((&authority, &tail), (Cow::Borrowed(_), Cow::Borrowed(_))) {
        return Cow::Borrowed(url);
    }
    Cow::Owned(format!("{scheme}://{authority}{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("postgres://app:s3cr3t@db:5432/pay?schema=x"),
            "postgres://app:***@db:5432/pay?schema=x"
        );
        assert_eq!(
            redact("postgres://db/pay?user=app&password=s3cr3t&schema=x"),
            "postgres://db/pay?user=app&password=***&schema=x"
        );
        assert_eq!(
            redact("redis+cluster://:pw@a:7000,b:7001"),
            "redis+cluster://:***@a:7000,b:7001"
        );
        for unchanged in [
            "redis://app@h:6379",
            "redis://h",
            "memory://",
            "postgres://h/d?x=1",
        ] {
            assert!(matches!(redact(unchanged), Cow::Borrowed(u) if u == unchanged));
        }
    }

    #[test]
    fn splits_without_decoding() {
        let mut parts = Parts::split("postgres://u:p%40w@h:1,g:2/db?schema=s&a=b").unwrap();
        assert_eq!(parts.scheme, "postgres");
        assert_eq!(parts.userinfo, Some("u:p%40w"));
        assert_eq!(parts.hosts, "h:1,g:2");
        assert_eq!(parts.path, "/db");
        assert_eq!(
            parts.take("schema", str::parse::<String>).unwrap(),
            Some("s".to_owned())
        );
        assert_eq!(parts.remaining_query(), "?a=b");
        assert_eq!(parts.credentials(), "u:p%40w@");
    }
}
