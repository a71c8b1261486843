//! The store's own limit: its script sent with `EVALSHA` straight through a
//! `ConnectionManager`, one key per call, without the store's Rust code (hashing the address
//! into keys, building the arguments, the queue, decoding the reply, encoding the response).

use std::sync::atomic::{AtomicU64, Ordering};

use redis::{Script, Value, aio::ConnectionManager};

use super::{TERMS, response};

/// The store's script, built as `src/scripts.rs` builds it.
fn script() -> Script {
    Script::new(concat!(
        include_str!("../../lua/record.lua"),
        include_str!("../../lua/common.lua"),
        include_str!("../../lua/acquire.lua"),
        include_str!("../../lua/complete.lua"),
        include_str!("../../lua/release.lua"),
        include_str!("../../lua/renew.lua"),
        include_str!("../../lua/parts.lua"),
        include_str!("../../lua/get.lua"),
        include_str!("../../lua/forget.lua"),
        include_str!("../../lua/purge.lua"),
        include_str!("../../lua/batch.lua"),
    ))
}

/// What the baseline sends for a new key: an acquire, then a complete, each an `EVALSHA` of
/// its own, with the same terms and response as the store's keys.
pub(crate) struct Baseline {
    connection: ConnectionManager,
    script: Script,
    encoded: Vec<u8>,
    prefix: String,
}

impl Baseline {
    /// Keys under `prefix` on a connection of its own to the server at `url`.
    pub(crate) async fn connect(url: &str, prefix: &str) -> Self {
        let client = redis::Client::open(url).expect("client");
        Self {
            connection: ConnectionManager::new(client).await.expect("connection"),
            script: script(),
            encoded: response().encode(),
            prefix: prefix.to_owned(),
        }
    }

    /// Acquires and completes a new key.
    pub(crate) async fn new_key(&self) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut connection = self.connection.clone();
        let record = format!(
            "{{{}:{:064x}}}",
            self.prefix,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let reply: Vec<Value> = self
            .script
            .key(&record)
            .key(format!("{record}:fence"))
            .arg("PUBLISH")
            .arg("a")
            .arg("")
            .arg([7u8; 32].as_slice())
            .arg(TERMS.lease.as_millis() as u64)
            .arg(TERMS.ttl.as_millis() as u64)
            .arg([0u8; 32].as_slice())
            .arg([9u8; 32].as_slice())
            .invoke_async(&mut connection)
            .await
            .expect("acquire");
        let [Value::Array(items)] = reply.as_slice() else {
            panic!("unexpected acquire reply {reply:?}");
        };
        let [Value::Int(1), Value::Int(token), ..] = items.as_slice() else {
            panic!("a new key is acquired: {items:?}");
        };
        let done: Vec<i64> = self
            .script
            .key(&record)
            .arg("PUBLISH")
            .arg("c")
            .arg("")
            .arg(*token)
            .arg(TERMS.ttl.as_millis() as u64)
            .arg(&self.encoded)
            .arg(format!("{record}:changed"))
            .invoke_async(&mut connection)
            .await
            .expect("complete");
        assert_eq!(done, [1]);
    }
}
