//! The Lua scripts: `lua/record.lua` (a record's encoding) first in each, then the store's
//! operations (`lua/common.lua`, one function per operation, those on streamed parts in
//! `lua/parts.lua`, and `lua/batch.lua`, which runs a batch of them), or one of the operators'
//! read-only scripts.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

/// The one script every store operation goes through, alone or in a batch.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/record.lua"),
        include_str!("../lua/common.lua"),
        include_str!("../lua/acquire.lua"),
        include_str!("../lua/complete.lua"),
        include_str!("../lua/release.lua"),
        include_str!("../lua/renew.lua"),
        include_str!("../lua/parts.lua"),
        include_str!("../lua/get.lua"),
        include_str!("../lua/forget.lua"),
        include_str!("../lua/purge.lua"),
        include_str!("../lua/batch.lua"),
    ))
});

/// Reads the records of one `SCAN` step that a listing admits.
pub(crate) static LIST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/read_only.lua"),
        include_str!("../lua/record.lua"),
        include_str!("../lua/list.lua"),
    ))
});

/// Counts the live records of one `SCAN` step.
pub(crate) static CENSUS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/read_only.lua"),
        include_str!("../lua/record.lua"),
        include_str!("../lua/census.lua"),
    ))
});

/// Claims the next census, or posts one, on a prefix's census board.
pub(crate) static CENSUS_BOARD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/record.lua"),
        include_str!("../lua/census_board.lua"),
    ))
});

/// The longest duration sent to Redis, about 1,000 years: times stay exact in Lua's doubles
/// (below 2^53) and valid for `PEXPIREAT`.
const MAX_MILLIS: u64 = 1_000 * 365 * 24 * 3_600 * 1_000;

/// `duration` in ms, at most [`MAX_MILLIS`].
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).map_or(MAX_MILLIS, |ms| ms.min(MAX_MILLIS))
}
