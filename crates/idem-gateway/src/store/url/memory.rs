//! [`MemoryUrl`]: `memory://[?max_keys=N&max_bytes=SIZE&max_keys_per_scope=N]`, a
//! [`MemoryStore`] and its limits.

use std::fmt;

use idem_core::{MemoryStore, store_url::UrlParts};

use crate::{ByteSize, Error};

/// What an unknown parameter's error says is known.
const KNOWN: &str = "idem takes max_keys, max_bytes and max_keys_per_scope";

/// `memory://[?max_keys=N&max_bytes=SIZE]`: records in this process only, lost on exit, at most
/// `max_keys` of them (default 1000000) and about `max_bytes` (default `1GiB`; a size as
/// `--max-body` takes it), and at most `max_keys_per_scope` of one scope (default none), so that
/// one caller cannot fill the store for the others. When full, a new key is refused (503
/// `store-full`); see [`MemoryStore`]'s limits for what counts.
///
/// # Examples
///
/// ```
/// use idem_gateway::StoreUrl;
///
/// let StoreUrl::Memory(url) = "memory://?max_keys=1000&max_bytes=64MiB".parse()? else {
///     unreachable!()
/// };
/// assert_eq!((url.max_keys(), url.max_bytes()), (1000, 64 << 20));
/// assert_eq!(url.to_string(), "memory://?max_keys=1000&max_bytes=64MiB");
/// assert_eq!("memory://".parse::<StoreUrl>()?.to_string(), "memory://");
/// # Ok::<(), idem_gateway::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUrl {
    max_keys: usize,
    max_bytes: u64,
    max_keys_per_scope: Option<usize>,
}

impl Default for MemoryUrl {
    /// `memory://`: the store's default limits.
    fn default() -> Self {
        Self {
            max_keys: MemoryStore::DEFAULT_MAX_KEYS,
            max_bytes: MemoryStore::DEFAULT_MAX_BYTES,
            max_keys_per_scope: None,
        }
    }
}

impl MemoryUrl {
    pub(super) fn parse(url: &str) -> Result<Self, Error> {
        let mut parts = UrlParts::split(url)?;
        if !parts.hosts().is_empty() || !parts.path().is_empty() || parts.userinfo().is_some() {
            return Err(parts
                .error("memory:// takes no host or path, only ?max_keys=N&max_bytes=SIZE&max_keys_per_scope=N")
                .into());
        }
        let max_keys = parts.take("max_keys", str::parse::<usize>)?;
        let max_bytes = parts.take("max_bytes", str::parse::<ByteSize>)?;
        let max_keys_per_scope = parts.take("max_keys_per_scope", str::parse::<usize>)?;
        parts.refuse_unknown(|_| false, KNOWN)?;
        let default = Self::default();
        Ok(Self {
            max_keys: max_keys.unwrap_or(default.max_keys),
            max_bytes: max_bytes.map_or(default.max_bytes, |size| size.0 as u64),
            max_keys_per_scope,
        })
    }

    /// The most records the store holds.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The bytes beyond which the store takes no new key.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The most records of one scope, if bounded.
    pub fn max_keys_per_scope(&self) -> Option<usize> {
        self.max_keys_per_scope
    }

    /// An empty store with these limits.
    pub fn open(&self) -> MemoryStore {
        let store = MemoryStore::new()
            .max_keys(self.max_keys)
            .max_bytes(self.max_bytes);
        match self.max_keys_per_scope {
            Some(max) => store.max_keys_per_scope(max),
            None => store,
        }
    }
}

impl fmt::Display for MemoryUrl {
    /// Only the limits that are not the defaults, so that `memory://` stays `memory://`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let default = Self::default();
        let mut query = Vec::new();
        if self.max_keys != default.max_keys {
            query.push(format!("max_keys={}", self.max_keys));
        }
        if self.max_bytes != default.max_bytes {
            let bytes = usize::try_from(self.max_bytes).map_or_else(
                |_| self.max_bytes.to_string(),
                |bytes| ByteSize(bytes).to_string(),
            );
            query.push(format!("max_bytes={bytes}"));
        }
        if let Some(max) = self.max_keys_per_scope {
            query.push(format!("max_keys_per_scope={max}"));
        }
        f.write_str("memory://")?;
        if !query.is_empty() {
            write!(f, "?{}", query.join("&"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use idem_core::{Acquisition, Address, Fingerprint, Policy, Store, StoreError};

    use crate::StoreUrl;

    fn message(url: &str) -> String {
        url.parse::<StoreUrl>().unwrap_err().to_string()
    }

    #[tokio::test]
    async fn the_store_opened_has_the_limits_of_the_query() {
        let StoreUrl::Memory(url) = "memory://?max_keys=2".parse().unwrap() else {
            panic!("memory");
        };
        assert_eq!((url.max_keys(), url.max_bytes()), (2, 1 << 30));
        let store = url.open();
        let terms = (&Policy::default()).into();
        let fingerprint = Fingerprint::from_bytes([1; 32]);
        for key in ["a", "b"] {
            let address = Address::anonymous(key.parse().unwrap());
            let acquired = store.acquire(&address, &fingerprint, terms).await;
            assert!(
                matches!(acquired, Ok(Acquisition::Acquired(_))),
                "{acquired:?}"
            );
        }
        let address = Address::anonymous("c".parse().unwrap());
        let refused = store.acquire(&address, &fingerprint, terms).await;
        assert!(
            matches!(refused, Err(StoreError::Full { ref limit }) if limit == "max_keys = 2"),
            "{refused:?}"
        );
    }

    #[test]
    fn bad_limits_are_explained_in_one_line() {
        assert_eq!(
            message("memory://?max_keys=many"),
            "invalid store URL `memory://?max_keys=many`: `max_keys=many`: invalid digit found \
             in string"
        );
        assert_eq!(
            message("memory://?max_bytes=1GB"),
            "invalid store URL `memory://?max_bytes=1GB`: `max_bytes=1GB`: invalid size `1GB`: \
             expected a whole number of bytes, optionally with a unit (KiB, MiB or GiB), e.g. \
             1024, 64KiB, 10MiB"
        );
        assert_eq!(
            message("memory://?size=1"),
            "invalid store URL `memory://?size=1`: unknown parameter `size` (idem takes \
             max_keys, max_bytes and max_keys_per_scope)"
        );
        assert_eq!(
            message("memory://host"),
            "invalid store URL `memory://host`: memory:// takes no host or path, only \
             ?max_keys=N&max_bytes=SIZE&max_keys_per_scope=N"
        );
        assert_eq!(
            message("memory://?max_keys_per_scope=many"),
            "invalid store URL `memory://?max_keys_per_scope=many`: `max_keys_per_scope=many`: \
             invalid digit found in string"
        );
    }
}
