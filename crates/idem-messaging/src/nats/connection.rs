//! [`connect`]: a connection to NATS, as the publisher and the subscription open it.

use async_nats::{Client, ConnectOptions};

use crate::{BoxError, broker::TlsFiles};

/// Connects to the server at `url` (several, comma-separated), as `name` in the server's
/// monitoring. Any of `tls`'s files makes TLS required; they are read first, so that one that
/// cannot be read is named. Once connected, the client reconnects by itself.
pub(super) async fn connect(url: &str, tls: &TlsFiles, name: &str) -> Result<Client, BoxError> {
    let mut options = ConnectOptions::new().name(name);
    if tls.any() {
        // Read here only to name a file that cannot be read: async-nats's own error would not
        // say which.
        tls.read().await?;
        options = options.require_tls(true);
        if let Some(ca) = &tls.ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &tls.client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    Ok(options.connect(url).await?)
}
