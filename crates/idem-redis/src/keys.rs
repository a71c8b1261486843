//! The Redis names of an address's keys and channel.

use std::sync::LazyLock;

use blake3::hazmat::{ContextKey, HasherExt, hash_derive_key_context};
use idem_core::{Address, FencingToken};

use crate::KeyPrefix;

/// The length of the hex digest in a record key.
const DIGEST_HEX_LEN: usize = 64;

/// An address's record key, `{prefix:hex}`: the hex of a keyed hash of the scope and key, never
/// the key in clear. The fence key, the parts lists and the channel add a suffix after the
/// braces, so they all share the hash tag and live in one Cluster slot, as Lua scripts require.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    record: String,
}

impl Keys {
    pub(crate) fn new(prefix: &KeyPrefix, address: &Address) -> Self {
        // `blake3::derive_key` with the context hashed once, not for every call.
        static CONTEXT: LazyLock<ContextKey> =
            LazyLock::new(|| hash_derive_key_context("idem 2026-11 redis address v1"));
        let mut hasher = blake3::Hasher::new_from_context_key(&CONTEXT);
        // The scope has a fixed length, so scope and key cannot run into each other.
        hasher.update(address.scope.as_bytes());
        hasher.update(address.key.as_str().as_bytes());
        let digest = hasher.finalize().to_hex();
        debug_assert_eq!(digest.len(), DIGEST_HEX_LEN);
        let prefix = prefix.as_str();
        let mut record = String::with_capacity(prefix.len() + DIGEST_HEX_LEN + 3);
        for part in ["{", prefix, ":", digest.as_str(), "}"] {
            record.push_str(part);
        }
        Self { record }
    }

    /// The hash that holds the record.
    pub(crate) fn record(&self) -> &str {
        &self.record
    }

    /// The record key, owned.
    pub(crate) fn into_record(self) -> String {
        self.record
    }

    /// The key that keeps the last token of a record removed before it expired.
    pub(crate) fn fence(&self) -> String {
        format!("{}:fence", self.record)
    }

    /// The list that holds the streamed parts of the execution `token` (`lua/parts.lua`, which
    /// names it the same way from a token it reads).
    pub(crate) fn parts(&self, token: FencingToken) -> String {
        format!("{}:parts:{}", self.record, token.get())
    }

    /// The channel that completions, releases, forgets and appended parts are announced on.
    pub(crate) fn channel(&self) -> String {
        format!("{}:changed", self.record)
    }

    /// The record key that a fence key belongs to (for keys found by `SCAN`).
    pub(crate) fn from_record(record: String) -> Self {
        Self { record }
    }
}

/// The `SCAN` pattern matching every record key of `prefix`: no fence key, and no record key of
/// a longer prefix that starts with this one and a colon (`idem:payments` for `idem`).
pub(crate) fn record_pattern(prefix: &KeyPrefix) -> String {
    format!("{{{prefix}:{}}}", "?".repeat(DIGEST_HEX_LEN))
}

/// The `SCAN` pattern matching every parts list of `prefix`, and no other key.
pub(crate) fn parts_pattern(prefix: &KeyPrefix) -> String {
    format!("{}:parts:*", record_pattern(prefix))
}

/// The census board of `prefix`, `{prefix}:census`: a hash, outside [`record_pattern`] and the
/// record keys' own `{prefix:` names.
pub(crate) fn census_board_key(prefix: &KeyPrefix) -> String {
    format!("{{{prefix}}}:census")
}

#[cfg(test)]
mod tests {
    use idem_core::Scope;

    use super::*;

    #[test]
    fn keys_share_one_hash_tag_and_hide_the_key() {
        let address = Address::anonymous("order-42".parse().unwrap());
        let keys = Keys::new(&KeyPrefix::default(), &address);
        assert_eq!(keys.record().len(), "{idem:}".len() + 64);
        assert!(keys.record().starts_with("{idem:") && keys.record().ends_with('}'));
        assert!(!keys.record().contains("order-42"));
        assert_eq!(keys.fence(), format!("{}:fence", keys.record()));
        assert_eq!(keys.channel(), format!("{}:changed", keys.record()));
        assert_eq!(
            keys.parts(FencingToken::new(1_234)),
            format!("{}:parts:1234", keys.record())
        );
    }

    #[test]
    fn the_record_key_is_the_derived_key_of_scope_and_key() {
        // Records written by every version are found by this name: it must never change.
        let address = Address::anonymous("order-42".parse().unwrap());
        let mut derived = blake3::Hasher::new_derive_key("idem 2026-11 redis address v1");
        derived.update(address.scope.as_bytes());
        derived.update(b"order-42");
        let expected = format!("{{idem:{}}}", derived.finalize().to_hex());
        assert_eq!(
            Keys::new(&KeyPrefix::default(), &address).record(),
            expected
        );
    }

    #[test]
    fn scope_key_and_prefix_all_matter() {
        let key: idem_core::IdempotencyKey = "k".parse().unwrap();
        let alice = Address::new(Scope::from_identity([b"alice".as_slice()]), key.clone());
        let anonymous = Address::anonymous(key);
        let other: KeyPrefix = "other".parse().unwrap();
        let idem = KeyPrefix::default();
        assert_ne!(Keys::new(&idem, &alice), Keys::new(&idem, &anonymous));
        assert_ne!(Keys::new(&idem, &alice), Keys::new(&other, &alice));
        assert_eq!(Keys::new(&idem, &alice), Keys::new(&idem, &alice));
    }

    #[test]
    fn the_pattern_matches_record_keys_only() {
        let pattern = record_pattern(&KeyPrefix::default());
        assert_eq!(pattern, format!("{{idem:{}}}", "?".repeat(64)));
        let record = Keys::new(
            &KeyPrefix::default(),
            &Address::anonymous("k".parse().unwrap()),
        );
        assert_eq!(
            record.record().len(),
            pattern.len(),
            "one `?` per character"
        );
        assert_eq!(
            parts_pattern(&KeyPrefix::default()),
            format!("{pattern}:parts:*")
        );
    }
}
