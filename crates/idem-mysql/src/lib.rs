//! The MySQL and MariaDB store of idem.

pub mod patterns;
