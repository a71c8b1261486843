//! The units flags and config files are written in: durations ([`HumanDuration`]: `500ms`,
//! `30s`, `24h`) and sizes ([`ByteSize`]: `64KiB`, `10MiB`), each parsed and shown the same way.

mod duration;
mod size;

pub use self::{duration::HumanDuration, size::ByteSize};
