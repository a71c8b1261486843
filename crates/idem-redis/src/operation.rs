//! [`Operation`]: one store call as the script takes it, its keys and its arguments.

use redis::{ToRedisArgs, cluster_routing::Slot};

use crate::keys::Keys;

/// Which operation, by its code in `lua/batch.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Acquire,
    Complete,
    Release,
    Renew,
    Get,
    Forget,
    Purge,
}

impl Kind {
    fn code(self) -> &'static str {
        match self {
            Self::Acquire => "a",
            Self::Complete => "c",
            Self::Release => "r",
            Self::Renew => "n",
            Self::Get => "g",
            Self::Forget => "f",
            Self::Purge => "p",
        }
    }

    /// Whether the operation takes the fence key after the record key.
    fn fenced(self) -> bool {
        matches!(
            self,
            Self::Acquire | Self::Release | Self::Forget | Self::Purge
        )
    }
}

/// One operation on one address: its keys (`KEYS`) and its code, time override and arguments
/// (`ARGV`), in the order `lua/batch.lua` reads them.
#[derive(Debug)]
pub(crate) struct Operation {
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Operation {
    /// `kind` on `keys`'s address, at `now` (empty for the server's clock).
    pub(crate) fn new(kind: Kind, keys: &Keys, now: &str) -> Self {
        let mut operation = Self {
            keys: vec![keys.record().as_bytes().to_vec()],
            args: Vec::with_capacity(7),
        };
        if kind.fenced() {
            operation.keys.push(keys.fence().into_bytes());
        }
        operation.arg(kind.code()).arg(now)
    }

    /// Adds the next argument.
    pub(crate) fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// The Cluster slot of the operation's keys (one: they share their hash tag).
    pub(crate) fn slot(&self) -> Slot {
        Slot::for_key(&self.keys[0])
    }

    /// Which of `lanes` lanes the operation's address falls in on a single server: one of its
    /// record key's hex digits (the key is `{prefix:HEX}`), so one address is always in one
    /// lane, and addresses spread evenly.
    pub(crate) fn lane(&self, lanes: usize) -> usize {
        let record = &self.keys[0];
        let digit = record.len().checked_sub(2).map_or(0, |at| record[at]);
        usize::from(digit) % lanes
    }

    /// The bytes of its keys and arguments.
    pub(crate) fn size(&self) -> usize {
        self.keys.iter().chain(&self.args).map(Vec::len).sum()
    }

    pub(crate) fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    pub(crate) fn args(&self) -> &[Vec<u8>] {
        &self.args
    }
}
