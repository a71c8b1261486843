//! [`KafkaSecurity`]: TLS and SASL for a Kafka client, as managed clusters ask for them.

use std::{fmt, path::PathBuf, str::FromStr};

use rdkafka::ClientConfig;

use crate::broker::TlsFiles;

/// The environment variable a SASL password is read from when no file is named
/// ([`SaslPassword::default`]).
pub const SASL_PASSWORD_ENV: &str = "IDEM_KAFKA_SASL_PASSWORD";

/// How a Kafka client secures its connections: TLS, which verifies the brokers' certificates
/// (against the system's roots, or only the CA certificates of a file) and may present a client
/// certificate, and SASL authentication (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`).
///
/// TLS once asked for is required: librdkafka never falls back to plain text. Each broker's
/// certificate must name the host the client reaches it by (its bootstrap address, then the
/// address the cluster advertises). The files and the password are read when a client is made
/// with [`apply`](Self::apply): by [`KafkaPublisher`](super::KafkaPublisher) on its first batch
/// (and again for a producer that replaces a failed one), by a consumer when it is created.
///
/// Shown without the password (it holds only where to read it).
///
/// # Examples
///
/// A consumer on a cluster that takes SCRAM over TLS, its password in a file:
///
/// ```no_run
/// use idem_messaging::kafka::{KafkaSecurity, SaslMechanism, SaslPassword, consumer_config};
/// use rdkafka::consumer::StreamConsumer;
///
/// let security = KafkaSecurity::tls()
///     .ca_file("/etc/idem/kafka-ca.pem")
///     .sasl(SaslMechanism::ScramSha512, "ledger", SaslPassword::file("/run/secrets/kafka"));
/// let mut config = consumer_config("b-1.kafka.internal:9096", "ledger");
/// security.apply(&mut config)?;
/// let consumer: StreamConsumer = config.create()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaSecurity {
    /// `None`: plain text. The files: none for the system's roots and no client certificate.
    tls: Option<TlsFiles>,
    sasl: Option<Sasl>,
}

/// SASL's settings: the password is read when a client is made.
#[derive(Clone, PartialEq, Eq)]
struct Sasl {
    mechanism: SaslMechanism,
    username: String,
    password: SaslPassword,
}

impl KafkaSecurity {
    /// Plain text without authentication: librdkafka's default.
    pub fn new() -> Self {
        Self::default()
    }

    /// TLS, verifying the brokers' certificates against the system's trusted roots.
    pub fn tls() -> Self {
        Self {
            tls: Some(TlsFiles::default()),
            sasl: None,
        }
    }

    /// TLS, trusting only the CA certificates (PEM) at `path` instead of the system's roots.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.get_or_insert_default().ca = Some(path.into());
        self
    }

    /// TLS, presenting the client certificate (PEM) at `cert` with its key (PEM) at `key`, for
    /// a cluster that authenticates its clients by certificate (mutual TLS).
    #[must_use]
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.get_or_insert_default().client = Some((cert.into(), key.into()));
        self
    }

    /// SASL authentication as `username` with `mechanism`, the password read from `password`.
    /// Over TLS if TLS was asked for, in plain text otherwise (where `PLAIN` sends the password
    /// as it is).
    #[must_use]
    pub fn sasl(
        mut self,
        mechanism: SaslMechanism,
        username: impl Into<String>,
        password: SaslPassword,
    ) -> Self {
        self.sasl = Some(Sasl {
            mechanism,
            username: username.into(),
            password,
        });
        self
    }

    /// Sets librdkafka's `security.protocol` (`plaintext`, `ssl`, `sasl_plaintext` or
    /// `sasl_ssl`), `ssl.ca.location`, `ssl.certificate.location` and `ssl.key.location`, and
    /// `sasl.mechanism`, `sasl.username` and `sasl.password` on `config`, reading the password.
    ///
    /// # Errors
    ///
    /// When the password cannot be had: its file cannot be read or is empty, or its environment
    /// variable is not set. `config` is then left as it was.
    pub fn apply<'c>(
        &self,
        config: &'c mut ClientConfig,
    ) -> Result<&'c mut ClientConfig, PasswordError> {
        let password = match &self.sasl {
            Some(sasl) => Some(sasl.password.read()?),
            None => None,
        };
        let protocol = match (&self.tls, &self.sasl) {
            (None, None) => "plaintext",
            (Some(_), None) => "ssl",
            (None, Some(_)) => "sasl_plaintext",
            (Some(_), Some(_)) => "sasl_ssl",
        };
        config.set("security.protocol", protocol);
        if let Some(tls) = &self.tls {
            if let Some(ca) = &tls.ca {
                config.set("ssl.ca.location", ca.display().to_string());
            }
            if let Some((cert, key)) = &tls.client {
                config
                    .set("ssl.certificate.location", cert.display().to_string())
                    .set("ssl.key.location", key.display().to_string());
            }
        }
        if let (Some(sasl), Some(password)) = (&self.sasl, password) {
            config
                .set("sasl.mechanism", sasl.mechanism.as_str())
                .set("sasl.username", &sasl.username)
                .set("sasl.password", password);
        }
        Ok(config)
    }

    /// The TLS files, for a URL that gave them.
    pub(crate) fn with_tls(tls: Option<TlsFiles>) -> Self {
        Self { tls, sasl: None }
    }
}

impl fmt::Debug for KafkaSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("KafkaSecurity");
        debug.field("tls", &self.tls);
        match &self.sasl {
            Some(sasl) => debug
                .field("sasl", &sasl.mechanism)
                .field("username", &sasl.username)
                .field("password", &sasl.password),
            None => debug.field("sasl", &None::<SaslMechanism>),
        };
        debug.finish()
    }
}

/// A SASL mechanism librdkafka speaks without a library of the system's: `PLAIN` (Confluent
/// Cloud's API keys), `SCRAM-SHA-256` or `SCRAM-SHA-512` (Amazon MSK, Aiven, Redpanda).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN`: the password goes to the broker, which compares it. Use it over TLS only.
    Plain,
    /// `SCRAM-SHA-256`: the password proves itself without crossing the network.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism's name, as librdkafka's `sasl.mechanism` and the URL's take it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl FromStr for SaslMechanism {
    type Err = UnknownMechanism;

    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`, in any case.
    fn from_str(name: &str) -> Result<Self, UnknownMechanism> {
        [Self::Plain, Self::ScramSha256, Self::ScramSha512]
            .into_iter()
            .find(|mechanism| mechanism.as_str().eq_ignore_ascii_case(name))
            .ok_or(UnknownMechanism)
    }
}

/// A SASL mechanism other than `PLAIN`, `SCRAM-SHA-256` and `SCRAM-SHA-512`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the SASL mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")]
pub struct UnknownMechanism;

/// Where a SASL password is read from, when a client is made: never from a URL or a command
/// line, where the process list and logs would show it.
#[derive(Clone, PartialEq, Eq)]
pub enum SaslPassword {
    /// A file holding the password (a mounted secret); one line break at its end is not part of
    /// the password.
    File(PathBuf),
    /// An environment variable, by its name.
    Env(String),
}

impl SaslPassword {
    /// The file at `path`.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self::File(path.into())
    }

    /// The environment variable named `name`.
    pub fn env(name: impl Into<String>) -> Self {
        Self::Env(name.into())
    }

    fn read(&self) -> Result<String, PasswordError> {
        let password = match self {
            Self::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| PasswordError::File {
                    path: path.clone(),
                    source,
                })?;
                let text = text.strip_suffix('\n').unwrap_or(&text);
                text.strip_suffix('\r').unwrap_or(text).to_owned()
            }
            Self::Env(name) => {
                std::env::var(name).map_err(|_| PasswordError::Env { name: name.clone() })?
            }
        };
        if password.is_empty() {
            return Err(PasswordError::Empty {
                from: self.to_string(),
            });
        }
        Ok(password)
    }
}

/// The environment variable [`SASL_PASSWORD_ENV`].
impl Default for SaslPassword {
    fn default() -> Self {
        Self::env(SASL_PASSWORD_ENV)
    }
}

/// Where the password is: `the file PATH`, `the environment variable NAME`.
impl fmt::Display for SaslPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "the file {}", path.display()),
            Self::Env(name) => write!(f, "the environment variable {name}"),
        }
    }
}

impl fmt::Debug for SaslPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            Self::Env(name) => f.debug_tuple("Env").field(name).finish(),
        }
    }
}

/// Why a SASL password cannot be had. Names where it was looked for, never what was found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PasswordError {
    /// Its file cannot be read.
    #[error("cannot read the SASL password file {}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Its environment variable is not set (or not UTF-8).
    #[error("the environment variable {name} (the SASL password) is not set")]
    Env {
        /// The variable.
        name: String,
    },
    /// What holds it is empty.
    #[error("the SASL password is empty ({from})")]
    Empty {
        /// Where it was read: `the file PATH`, `the environment variable NAME`.
        from: String,
    },
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// `config`'s settings as (name, value) pairs, sorted by name.
    pub(in crate::kafka) fn settings(config: &ClientConfig) -> Vec<(String, String)> {
        // `config_map` hides the password: `get` does not. Sorted by name.
        config
            .config_map()
            .into_keys()
            .map(|name| (name.to_owned(), config.get(name).unwrap().to_owned()))
            .collect()
    }

    /// `expected` as [`settings`] gives them.
    pub(in crate::kafka) fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn tls_and_sasl_become_librdkafka_settings() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "s3cr3t-value\n").unwrap();

        let mut config = ClientConfig::new();
        KafkaSecurity::new().apply(&mut config).unwrap();
        assert_eq!(
            settings(&config),
            pairs(&[("security.protocol", "plaintext")])
        );

        let mut config = ClientConfig::new();
        KafkaSecurity::tls().apply(&mut config).unwrap();
        assert_eq!(settings(&config), pairs(&[("security.protocol", "ssl")]));

        let mut config = ClientConfig::new();
        KafkaSecurity::new()
            .client_cert("/c.pem", "/k.pem")
            .ca_file("/ca.pem")
            .sasl(
                SaslMechanism::ScramSha512,
                "relay",
                SaslPassword::file(&file),
            )
            .apply(&mut config)
            .unwrap();
        assert_eq!(
            settings(&config),
            pairs(&[
                ("sasl.mechanism", "SCRAM-SHA-512"),
                ("sasl.password", "s3cr3t-value"),
                ("sasl.username", "relay"),
                ("security.protocol", "sasl_ssl"),
                ("ssl.ca.location", "/ca.pem"),
                ("ssl.certificate.location", "/c.pem"),
                ("ssl.key.location", "/k.pem"),
            ])
        );
        // rdkafka's own Debug leaves the password out.
        assert!(!format!("{config:?}").contains("s3cr3t"), "{config:?}");

        let mut config = ClientConfig::new();
        KafkaSecurity::new()
            .sasl(SaslMechanism::Plain, "key", SaslPassword::file(&file))
            .apply(&mut config)
            .unwrap();
        assert_eq!(config.get("security.protocol"), Some("sasl_plaintext"));
        assert_eq!(config.get("sasl.mechanism"), Some("PLAIN"));
    }

    #[test]
    fn the_password_is_read_from_its_file_or_variable_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "pa55word\r\n").unwrap();
        let security = KafkaSecurity::tls().sasl(
            SaslMechanism::ScramSha256,
            "relay",
            SaslPassword::file(&file),
        );
        let mut config = ClientConfig::new();
        security.apply(&mut config).unwrap();
        assert_eq!(config.get("sasl.password"), Some("pa55word"));
        assert_eq!(
            format!("{security:?}"),
            format!(
                "KafkaSecurity {{ tls: Some(TlsFiles {{ ca: None, client: None }}), sasl: \
                 ScramSha256, username: \"relay\", password: File({file:?}) }}"
            )
        );

        // A variable no test sets (tests run in parallel, and setting one is unsafe), then one
        // every test process has.
        let unset = "IDEM_TEST_KAFKA_SASL_PASSWORD_NOBODY_SETS";
        let from_env =
            KafkaSecurity::tls().sasl(SaslMechanism::Plain, "key", SaslPassword::env(unset));
        let mut config = ClientConfig::new();
        assert_eq!(
            from_env.apply(&mut config).unwrap_err().to_string(),
            "the environment variable IDEM_TEST_KAFKA_SASL_PASSWORD_NOBODY_SETS (the SASL \
             password) is not set"
        );
        assert_eq!(config.get("security.protocol"), None, "left as it was");
        let path = std::env::var("PATH").unwrap();
        let from_env =
            KafkaSecurity::tls().sasl(SaslMechanism::Plain, "key", SaslPassword::env("PATH"));
        from_env.apply(&mut config).unwrap();
        assert_eq!(config.get("sasl.password"), Some(path.as_str()));
        assert!(!format!("{from_env:?}").contains(&path));

        let missing = dir.path().join("missing");
        let error = KafkaSecurity::new()
            .sasl(SaslMechanism::Plain, "key", SaslPassword::file(&missing))
            .apply(&mut ClientConfig::new())
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("cannot read the SASL password file {}", missing.display())
        );
        std::fs::write(&file, "\n").unwrap();
        let error = security.apply(&mut ClientConfig::new()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("the SASL password is empty (the file {})", file.display())
        );
        assert_eq!(
            SaslPassword::default(),
            SaslPassword::Env("IDEM_KAFKA_SASL_PASSWORD".into())
        );
    }

    #[test]
    fn mechanisms_are_read_in_any_case() {
        assert_eq!("plain".parse(), Ok(SaslMechanism::Plain));
        assert_eq!("SCRAM-SHA-256".parse(), Ok(SaslMechanism::ScramSha256));
        assert_eq!("scram-sha-512".parse(), Ok(SaslMechanism::ScramSha512));
        assert_eq!("GSSAPI".parse::<SaslMechanism>(), Err(UnknownMechanism));
        assert_eq!(
            "OAUTHBEARER".parse::<SaslMechanism>(),
            Err(UnknownMechanism)
        );
    }
}
