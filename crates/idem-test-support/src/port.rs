//! [`free_port`]: a loopback port for a server of the test's own.

use std::net::TcpListener;

/// A loopback port nothing listened on a moment ago, for a server the test starts itself.
///
/// # Examples
///
/// ```
/// let port = idem_test_support::free_port();
/// assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
/// ```
///
/// # Panics
///
/// When no loopback port can be bound.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a loopback port")
        .port()
}
