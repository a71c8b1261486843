//! The Lua scripts: one per operation, each `lua/common.lua` followed by the operation's file.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/common.lua"),
                include_str!(concat!("../lua/", $file))
            ))
        })
    };
}

pub(crate) static ACQUIRE: LazyLock<Script> = script!("acquire.lua");
pub(crate) static COMPLETE: LazyLock<Script> = script!("complete.lua");
pub(crate) static RELEASE: LazyLock<Script> = script!("release.lua");
pub(crate) static RENEW: LazyLock<Script> = script!("renew.lua");
pub(crate) static GET: LazyLock<Script> = script!("get.lua");
pub(crate) static FORGET: LazyLock<Script> = script!("forget.lua");
pub(crate) static PURGE: LazyLock<Script> = script!("purge.lua");

/// Every script, loaded on open so that the first calls do not pay for `NOSCRIPT`.
pub(crate) fn all() -> [&'static Script; 7] {
    [&ACQUIRE, &COMPLETE, &RELEASE, &RENEW, &GET, &FORGET, &PURGE]
}
