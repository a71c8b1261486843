//! The Lua script: `lua/common.lua`, one function per operation, and `lua/batch.lua`, which runs a
//! batch of operations and returns each one's reply.

use std::sync::LazyLock;

use redis::Script;

/// The one script every store operation goes through, alone or in a batch.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/common.lua"),
        include_str!("../lua/acquire.lua"),
        include_str!("../lua/complete.lua"),
        include_str!("../lua/release.lua"),
        include_str!("../lua/renew.lua"),
        include_str!("../lua/get.lua"),
        include_str!("../lua/forget.lua"),
        include_str!("../lua/purge.lua"),
        include_str!("../lua/batch.lua"),
    ))
});
