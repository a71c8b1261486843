//! [`connect`]: a connection to RabbitMQ, as the publisher and the subscription open it.

use lapin::{
    Connection, ConnectionProperties,
    tcp::{OwnedIdentity, OwnedTLSConfig},
};

use crate::{BoxError, broker::TlsFiles};

/// Connects to the broker at `uri`, over TLS with `tls`'s files (read now) for `amqps://`.
/// lapin's parameters of the URI (`connection_timeout`, `heartbeat`, …) apply.
pub(super) async fn connect(uri: &str, tls: &TlsFiles) -> Result<Connection, BoxError> {
    let runtime = lapin::runtime::default_runtime()?;
    let connection = Connection::connect_with_config(
        uri,
        ConnectionProperties::default(),
        tls_config(tls).await?,
        runtime,
    )
    .await?;
    Ok(connection)
}

/// lapin's TLS settings: the files, read now.
async fn tls_config(tls: &TlsFiles) -> Result<OwnedTLSConfig, BoxError> {
    let files = tls.read().await?;
    let cert_chain = match (files.ca, &tls.ca) {
        (Some(pem), Some(path)) => Some(
            String::from_utf8(pem).map_err(|_| format!("{} is not PEM text", path.display()))?,
        ),
        _ => None,
    };
    Ok(OwnedTLSConfig {
        identity: files
            .client
            .map(|(pem, key)| OwnedIdentity::PKCS8 { pem, key }),
        cert_chain,
    })
}
