//! Store URLs: the grammar idem's server stores share, split into parts, and their errors.
//!
//! `scheme://[userinfo@]hosts[/path][?name=value&…]`. Each store crate reads its own scheme
//! and parameters from the [`UrlParts`] (`PostgresOptions::from_url`, `RedisOptions::from_url`,
//! …) and reports a bad URL as an [`InvalidStoreUrl`], which names the URL with its password
//! hidden ([`redact`]).
//!
//! # Examples
//!
//! ```
//! use idem_core::store_url::UrlParts;
//!
//! let mut parts = UrlParts::split("redis://app:secret@cache:6379/2?prefix=pay")?;
//! assert_eq!(parts.scheme(), "redis");
//! assert_eq!(parts.hosts(), "cache:6379");
//! assert_eq!(parts.take("prefix", str::parse::<String>)?, Some("pay".to_owned()));
//! parts.refuse_unknown(|_| false, "the store takes prefix")?;
//! assert_eq!(parts.shown(), "redis://app:***@cache:6379/2?prefix=pay");
//! # Ok::<(), idem_core::store_url::InvalidStoreUrl>(())
//! ```

use std::borrow::Cow;

/// A store URL that cannot be used: its shape, or one of its parameters.
///
/// The whole explanation is in the message, one line: command lines show only that.
#[derive(Debug, thiserror::Error)]
#[error("invalid store URL `{url}`: {problem}")]
pub struct InvalidStoreUrl {
    url: String,
    problem: UrlProblem,
}

impl InvalidStoreUrl {
    /// `url` (its password is hidden here) has the wrong shape, as `reason` says.
    pub fn new(url: &str, reason: &'static str) -> Self {
        Self::with_problem(url, UrlProblem::Malformed(reason))
    }

    /// `url` (its password is hidden here) cannot be used, as `problem` says.
    pub fn with_problem(url: &str, problem: UrlProblem) -> Self {
        Self {
            url: redact(url).into_owned(),
            problem,
        }
    }

    /// The URL, password hidden.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &UrlProblem {
        &self.problem
    }
}

/// What is wrong with a store URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UrlProblem {
    /// The URL's shape: its scheme, hosts or path.
    #[error("{0}")]
    Malformed(&'static str),
    /// A parameter that neither the store nor its driver reads.
    #[error("unknown parameter `{name}` ({known})")]
    Unknown {
        /// The parameter.
        name: String,
        /// The parameters that are known.
        known: &'static str,
    },
    /// A parameter given twice.
    #[error("the parameter `{0}` is given twice")]
    Repeated(&'static str),
    /// A parameter given under its name and under the old name it is still read under.
    #[error("`{name}` and its old spelling `{old}` are both given: keep `{name}`")]
    Respelled {
        /// The parameter's name.
        name: &'static str,
        /// Its old name.
        old: &'static str,
    },
    /// A value the store cannot use.
    #[error("`{name}={value}`: {reason}")]
    Value {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: String,
        /// Why it cannot be used.
        reason: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The store's driver refuses the URL.
    #[error("{0}")]
    Driver(Box<dyn std::error::Error + Send + Sync>),
}

/// `scheme://[userinfo@]hosts[/path][?query]`, split without decoding anything; the store takes
/// its parameters out one by one, then refuses the ones left that it does not know.
#[derive(Debug)]
pub struct UrlParts<'a> {
    url: &'a str,
    shown: String,
    scheme: &'a str,
    userinfo: Option<&'a str>,
    hosts: &'a str,
    path: &'a str,
    query: Vec<(&'a str, &'a str)>,
}

impl<'a> UrlParts<'a> {
    /// Splits `url`. A URL without `://`, or with a fragment, is refused.
    pub fn split(url: &'a str) -> Result<Self, InvalidStoreUrl> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(InvalidStoreUrl::new(url, "expected SCHEME://…"));
        };
        if rest.contains('#') {
            return Err(InvalidStoreUrl::new(
                url,
                "a store URL has no fragment (`#…`)",
            ));
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
            url,
            shown: redact(url).into_owned(),
            scheme,
            userinfo,
            hosts,
            path,
            query,
        })
    }

    /// The URL as given, password hidden: for messages and logs.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The scheme, before `://`.
    pub fn scheme(&self) -> &'a str {
        self.scheme
    }

    /// `user[:password]`, before `@`, as given.
    pub fn userinfo(&self) -> Option<&'a str> {
        self.userinfo
    }

    /// `host[:port][,host[:port]…]`, as given.
    pub fn hosts(&self) -> &'a str {
        self.hosts
    }

    /// `/…` up to the query, or nothing.
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// Whether the query still has the parameter `name`.
    pub fn has(&self, name: &str) -> bool {
        self.query.iter().any(|(n, _)| *n == name)
    }

    /// Removes the parameter `name` from the query and parses its value (not percent-decoded).
    pub fn take<T, E>(
        &mut self,
        name: &'static str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<Option<T>, InvalidStoreUrl>
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
            return Err(self.invalid(UrlProblem::Repeated(name)));
        }
        self.query.retain(|(n, _)| *n != name);
        let Some(value) = value else {
            return Ok(None);
        };
        parse(value).map(Some).map_err(|reason| {
            self.invalid(UrlProblem::Value {
                name,
                value: value.to_owned(),
                reason: Box::new(reason),
            })
        })
    }

    /// [`take`](Self::take)s the parameter `name` or, where the URL still uses its old name
    /// `old`, takes that with a warning naming the new one. Both given: refused.
    pub fn take_renamed<T, E>(
        &mut self,
        name: &'static str,
        old: &'static str,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Result<Option<T>, InvalidStoreUrl>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        if self.has(name) && self.has(old) {
            return Err(self.invalid(UrlProblem::Respelled { name, old }));
        }
        if let Some(value) = self.take(name, &parse)? {
            return Ok(Some(value));
        }
        let value = self.take(old, parse)?;
        if value.is_some() {
            tracing::warn!(
                url = self.shown(),
                "the store URL parameter `{old}` is now `{name}`; the old spelling is still \
                 accepted"
            );
        }
        Ok(value)
    }

    /// Refuses the first parameter left that `known` does not accept; `takes` says which are.
    pub fn refuse_unknown(
        &self,
        known: impl Fn(&str) -> bool,
        takes: &'static str,
    ) -> Result<(), InvalidStoreUrl> {
        match self.query.iter().find(|(name, _)| !known(name)) {
            Some((name, _)) => Err(self.invalid(UrlProblem::Unknown {
                name: (*name).to_owned(),
                known: takes,
            })),
            None => Ok(()),
        }
    }

    /// `userinfo@` if there is one, else nothing.
    pub fn credentials(&self) -> String {
        self.userinfo
            .map(|userinfo| format!("{userinfo}@"))
            .unwrap_or_default()
    }

    /// The parameters left, `?a=b&c=d`, or nothing.
    pub fn remaining_query(&self) -> String {
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

    /// The URL has the wrong shape, as `reason` says.
    pub fn error(&self, reason: &'static str) -> InvalidStoreUrl {
        self.invalid(UrlProblem::Malformed(reason))
    }

    /// The URL cannot be used, as `problem` says.
    pub fn invalid(&self, problem: UrlProblem) -> InvalidStoreUrl {
        InvalidStoreUrl::with_problem(self.url, problem)
    }
}

/// Reads a parameter that counts something (connections, operations in a batch): a whole
/// number, at least 1. For [`UrlParts::take`].
///
/// # Examples
///
/// ```
/// use idem_core::store_url::{UrlParts, count};
///
/// let mut parts = UrlParts::split("redis://cache?batch_size=16&queue=0")?;
/// assert_eq!(parts.take("batch_size", count::<usize>)?, Some(16));
/// assert_eq!(
///     parts.take("queue", count::<usize>).unwrap_err().to_string(),
///     "invalid store URL `redis://cache?batch_size=16&queue=0`: `queue=0`: expected 1 or more"
/// );
/// # Ok::<(), idem_core::store_url::InvalidStoreUrl>(())
/// ```
pub fn count<T>(value: &str) -> Result<T, CountError>
where
    T: std::str::FromStr<Err = std::num::ParseIntError> + Default + PartialEq,
{
    match value.parse::<T>() {
        Ok(n) if n == T::default() => Err(CountError::Zero),
        Ok(n) => Ok(n),
        Err(error) => Err(CountError::NotANumber(error)),
    }
}

/// A parameter that should count something and does not: see [`count`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CountError {
    /// 0, where at least one is needed.
    #[error("expected 1 or more")]
    Zero,
    /// Not a whole number (or too large).
    #[error("expected a whole number")]
    NotANumber(#[source] std::num::ParseIntError),
}

/// `url` with the password of its user info, and the value of every parameter whose name says
/// it is a secret (`password`, `sslpassword`, `auth_token`, …), replaced by `***`:
/// URLs end up in logs and error messages.
pub fn redact(url: &str) -> Cow<'_, str> {
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
        Some((path, query)) => match redact_query(query) {
            Cow::Owned(query) => Cow::Owned(format!("{path}?{query}")),
            Cow::Borrowed(_) => Cow::Borrowed(tail),
        },
        None => Cow::Borrowed(tail),
    };
    if matches!((&authority, &tail), (Cow::Borrowed(_), Cow::Borrowed(_))) {
        return Cow::Borrowed(url);
    }
    Cow::Owned(format!("{scheme}://{authority}{tail}"))
}

/// Whether a URL parameter named `name` holds a secret: its name has `password`, `passwd`,
/// `secret` or `token` in it, in any case (`password`, `sslpassword`, `auth_token`, …).
fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "passwd", "secret", "token"]
        .iter()
        .any(|secret| name.contains(secret))
}

/// `query` (`a=1&b=2`) with the value of every secret parameter replaced by `***`.
fn redact_query(query: &str) -> Cow<'_, str> {
    let secret = |pair: &str| is_secret_parameter(pair.split_once('=').map_or(pair, |(n, _)| n));
    if !query
        .split('&')
        .any(|pair| pair.contains('=') && secret(pair))
    {
        return Cow::Borrowed(query);
    }
    let pairs: Vec<Cow<'_, str>> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if secret(pair) => Cow::Owned(format!("{name}=***")),
            _ => Cow::Borrowed(pair),
        })
        .collect();
    Cow::Owned(pairs.join("&"))
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
        assert_eq!(
            redact("postgres://db/pay?sslpassword=k3y&Auth_Token=t&schema=x"),
            "postgres://db/pay?sslpassword=***&Auth_Token=***&schema=x"
        );
        for unchanged in [
            "redis://app@h:6379",
            "redis://h",
            "memory://",
            "postgres://h/d?x=1",
            "postgres://h/d?sslkey=/etc/key.pem&tokenless",
        ] {
            assert!(matches!(redact(unchanged), Cow::Borrowed(u) if u == unchanged));
        }
    }

    #[test]
    fn splits_without_decoding() {
        let mut parts = UrlParts::split("postgres://u:p%40w@h:1,g:2/db?schema=s&a=b").unwrap();
        assert_eq!(parts.scheme(), "postgres");
        assert_eq!(parts.userinfo(), Some("u:p%40w"));
        assert_eq!(parts.hosts(), "h:1,g:2");
        assert_eq!(parts.path(), "/db");
        assert!(parts.has("a"));
        assert_eq!(
            parts.take("schema", str::parse::<String>).unwrap(),
            Some("s".to_owned())
        );
        assert_eq!(parts.remaining_query(), "?a=b");
        assert_eq!(parts.credentials(), "u:p%40w@");
    }

    #[test]
    fn counts_are_whole_numbers_from_1() {
        assert_eq!(count::<usize>("64").unwrap(), 64);
        assert_eq!(count::<u32>("1").unwrap(), 1);
        assert!(matches!(count::<usize>("0"), Err(CountError::Zero)));
        for bad in ["", "-1", "1.5", "many", "99999999999"] {
            let error = count::<u32>(bad).unwrap_err();
            assert!(
                matches!(error, CountError::NotANumber(_)),
                "{bad}: {error:?}"
            );
            assert_eq!(error.to_string(), "expected a whole number");
        }
        assert_eq!(CountError::Zero.to_string(), "expected 1 or more");
    }

    #[test]
    fn problems_are_one_line_with_the_password_hidden() {
        let mut parts = UrlParts::split("redis://:pw@h?prefix=a&prefix=b").unwrap();
        let repeated = parts.take("prefix", str::parse::<String>).unwrap_err();
        assert_eq!(
            repeated.to_string(),
            "invalid store URL `redis://:***@h?prefix=a&prefix=b`: the parameter `prefix` is \
             given twice"
        );
        assert!(matches!(repeated.problem(), UrlProblem::Repeated("prefix")));
        assert_eq!(
            UrlParts::split("redis://h#x").unwrap_err().to_string(),
            "invalid store URL `redis://h#x`: a store URL has no fragment (`#…`)"
        );
    }
}
