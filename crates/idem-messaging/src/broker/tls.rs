//! [`TlsFiles`]: the certificate files of a TLS connection to a broker, read when the publisher
//! connects.

use std::path::PathBuf;

/// The PEM files a publisher's TLS connection uses: the CA certificates to trust, and a client
/// certificate with its key for brokers that ask for one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// The CA certificates (PEM) the broker's certificate must chain to.
    pub(crate) ca: Option<PathBuf>,
    /// A client certificate (PEM) and its key (PEM, PKCS#8, PKCS#1 or SEC1).
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// Whether any file is set: then the connection must be TLS.
    pub(crate) fn any(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    /// Every file set, each read once: a file that cannot be read is named in the error, rather
    /// than left to the broker's client, whose errors say only "No such file or directory".
    // librdkafka reads Kafka's files itself.
    #[cfg(any(feature = "amqp", feature = "nats"))]
    pub(crate) async fn read(&self) -> Result<ReadFiles, ReadCertificate> {
        let ca = match &self.ca {
            Some(path) => Some(read(path).await?),
            None => None,
        };
        let client = match &self.client {
            Some((cert, key)) => Some((read(cert).await?, read(key).await?)),
            None => None,
        };
        Ok(ReadFiles { ca, client })
    }
}

#[cfg(all(test, any(feature = "amqp", feature = "nats")))]
impl TlsFiles {
    /// The CA certificates at `ca` and the client certificate and key at `client`, if given.
    pub(crate) fn named(ca: Option<&str>, client: Option<(&str, &str)>) -> Self {
        Self {
            ca: ca.map(PathBuf::from),
            client: client.map(|(cert, key)| (cert.into(), key.into())),
        }
    }
}

/// The contents of [`TlsFiles`].
#[cfg(any(feature = "amqp", feature = "nats"))]
// The NATS publisher reads the files only to check them: async-nats reads them itself.
#[cfg_attr(not(feature = "amqp"), allow(dead_code))]
pub(crate) struct ReadFiles {
    pub(crate) ca: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

/// A certificate or key file that cannot be read.
#[cfg(any(feature = "amqp", feature = "nats"))]
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}", path.display())]
pub(crate) struct ReadCertificate {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

#[cfg(any(feature = "amqp", feature = "nats"))]
async fn read(path: &std::path::Path) -> Result<Vec<u8>, ReadCertificate> {
    let owned = path.to_owned();
    // Off the runtime's threads: the file may sit on a slow mount.
    let read = tokio::task::spawn_blocking(move || std::fs::read(owned))
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join)));
    read.map_err(|source| ReadCertificate {
        path: path.to_owned(),
        source,
    })
}
