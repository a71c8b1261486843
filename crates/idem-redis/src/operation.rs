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
    AppendPart,
    ReadParts,
    DiscardParts,
    PurgeParts,
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
            Self::AppendPart => "pa",
            Self::ReadParts => "pr",
            Self::DiscardParts => "pd",
            Self::PurgeParts => "pp",
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
    /// `kind` on `keys`'s address (its record key, and its fence key for the kinds that take
    /// it), at `now` (empty for the server's clock).
    pub(crate) fn new(kind: Kind, keys: &Keys, now: &str) -> Self {
        let mut list = vec![keys.record().as_bytes().to_vec()];
        if kind.fenced() {
            list.push(keys.fence().into_bytes());
        }
        Self::on(kind, list, now)
    }

    /// `kind` on `keys`, all of one address (they share its hash tag), at `now`.
    pub(crate) fn on(kind: Kind, keys: Vec<Vec<u8>>, now: &str) -> Self {
        debug_assert!(!keys.is_empty(), "an operation has a key");
        let operation = Self {
            keys,
            args: Vec::with_capacity(7),
        };
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

    /// Which of `lanes` lanes the operation's address falls in on a single server: the last of
    /// its record key's hex digits (every key of an address starts with its record key,
    /// `{prefix:HEX}`, and a prefix has no `}`), so one address is always in one lane, and
    /// addresses spread evenly.
    pub(crate) fn lane(&self, lanes: usize) -> usize {
        let key = &self.keys[0];
        let end = key.iter().position(|&b| b == b'}').unwrap_or(key.len());
        let digit = end.checked_sub(1).map_or(0, |at| key[at]);
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

#[cfg(test)]
mod tests {
    use idem_core::{Address, FencingToken};

    use super::*;
    use crate::KeyPrefix;

    #[test]
    fn every_key_of_an_address_is_in_its_lane_and_slot() {
        for n in 0..64 {
            let address = Address::anonymous(format!("k-{n}").parse().unwrap());
            let keys = Keys::new(&KeyPrefix::default(), &address);
            let record = Operation::new(Kind::Get, &keys, "");
            let parts = keys.parts(FencingToken::new(1_234_567));
            let parts = Operation::on(Kind::ReadParts, vec![parts.into_bytes()], "");
            for lanes in 1..=16 {
                assert_eq!(
                    record.lane(lanes),
                    parts.lane(lanes),
                    "{n} in {lanes} lanes"
                );
            }
            assert_eq!(record.slot(), parts.slot(), "{n}");
        }
    }
}
