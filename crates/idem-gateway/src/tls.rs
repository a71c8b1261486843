//! The process's rustls provider, for its HTTPS clients: `idem deliver`'s and the trace
//! exporter's.

use rustls::crypto::{CryptoProvider, ring};

/// Installs ring as the process's rustls provider, unless one is installed already: reqwest,
/// built without aws-lc, needs one to build a client.
pub(crate) fn install_ring_provider() {
    if CryptoProvider::get_default().is_none() {
        // Another thread may install one first; either way, there is one.
        let _ = ring::default_provider().install_default();
    }
}
