//! [`RedisPrefix`]: a key prefix of the test's own on a Redis server.

/// A key prefix of the test's own on a Redis server (`idem-test:` and 16 hex digits): every key
/// that holds it is deleted when this is dropped.
#[derive(Debug)]
pub struct RedisPrefix {
    server: String,
    prefix: String,
}

impl RedisPrefix {
    /// A new prefix on the server at `server`.
    pub fn new(server: &str) -> Self {
        Self {
            server: server.to_owned(),
            prefix: crate::unique_name("idem-test:"),
        }
    }

    /// The server's URL, as given.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        let Ok(mut connection) =
            redis::Client::open(self.server.as_str()).and_then(|client| client.get_connection())
        else {
            return;
        };
        // Wherever a store puts the prefix in its keys (`{prefix:…}…`, a hash tag).
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{}*", self.prefix))
            .query(&mut connection)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query(&mut connection);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Server;

    #[test]
    fn the_prefixed_keys_are_deleted_at_the_end() {
        let Some(server) = Server::Redis.url() else {
            return;
        };
        let mut connection = redis::Client::open(server.as_str())
            .and_then(|client| client.get_connection())
            .unwrap();
        let prefix = RedisPrefix::new(&server);
        let (key, other) = (
            format!("{{{}:a}}b", prefix.prefix()),
            crate::unique_name("k"),
        );
        let () = redis::cmd("SET")
            .arg(&key)
            .arg("1")
            .query(&mut connection)
            .unwrap();
        let () = redis::cmd("SET")
            .arg(&other)
            .arg("1")
            .query(&mut connection)
            .unwrap();
        drop(prefix);
        let left: (u32, u32) = (
            redis::cmd("EXISTS")
                .arg(&key)
                .query(&mut connection)
                .unwrap(),
            redis::cmd("EXISTS")
                .arg(&other)
                .query(&mut connection)
                .unwrap(),
        );
        let () = redis::cmd("DEL")
            .arg(&other)
            .query(&mut connection)
            .unwrap();
        assert_eq!(left, (0, 1));
    }
}
