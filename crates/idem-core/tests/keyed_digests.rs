//! With a digest key installed, log digests are keyed (a process of its own: the key is global).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use idem_core::{DigestKey, DigestKeyInstalled, IdempotencyKey, Scope};

#[test]
fn installed_digest_key_makes_key_and_scope_digests_keyed() {
    let key: IdempotencyKey = "pay-1".parse().unwrap();
    let scope = Scope::from_identity([b"Bearer alice".as_slice()]);
    let unkeyed = key.digest();
    assert_eq!(scope.digest(), scope.to_string());

    let secret = DigestKey::new([5; 32]);
    secret.install().unwrap();
    let keys = blake3::derive_key("idem 2026 keyed key digest for logs", &[5; 32]);
    let scopes = blake3::derive_key("idem 2026 keyed scope digest for logs", &[5; 32]);
    assert_eq!(
        key.digest(),
        blake3::keyed_hash(&keys, b"pay-1").to_hex()[..16]
    );
    assert_ne!(key.digest(), unkeyed);
    assert_eq!(
        scope.digest(),
        blake3::keyed_hash(&scopes, scope.as_bytes())
            .to_hex()
            .as_str()
    );
    assert_ne!(scope.digest(), scope.to_string());
    assert!(format!("{key:?}").contains(&key.digest()));

    // The same key again is harmless; another one is refused.
    assert_eq!(secret.install(), Ok(()));
    assert_eq!(DigestKey::new([6; 32]).install(), Err(DigestKeyInstalled));
    assert_eq!(format!("{secret:?}"), "DigestKey(..)");
}
