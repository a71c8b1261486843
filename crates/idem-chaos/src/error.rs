//! Why a run could not be carried out (a run that found problems is not an error: its
//! [`Report`](crate::Report) says what failed).

use std::{path::PathBuf, process::ExitStatus, time::Duration};

/// A failure of the harness itself: a server, a gateway or a listener that would not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation of the harness failed.
    #[error("cannot {what}")]
    Io {
        /// What the harness was doing.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A helper program (`initdb`, `pg_ctl`, `pg_config`) failed.
    #[error("{program} failed ({status}): {stderr}")]
    Command {
        /// The program.
        program: String,
        /// How it exited.
        status: ExitStatus,
        /// What it said on stderr.
        stderr: String,
    },
    /// A process of the run exited while it should have been running.
    #[error("{what} exited ({status}); see {}", log.display())]
    Exited {
        /// Which process.
        what: String,
        /// How it exited.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
    },
    /// A process of the run did not become ready in time.
    #[error("{what} was not ready after {timeout:?}; see {}", log.display())]
    NotReady {
        /// Which process.
        what: String,
        /// How long the harness waited.
        timeout: Duration,
        /// Its log file.
        log: PathBuf,
    },
    /// The run's Redis Cluster is not as a failover needs it.
    #[error("Redis Cluster: {0}")]
    Cluster(&'static str),
    /// Options that cannot give a meaningful run.
    #[error("{0}")]
    Options(&'static str),
    /// No PostgreSQL server binaries were found.
    #[error(
        "no PostgreSQL binaries: neither `pg_config --bindir` nor /usr/lib/postgresql/*/bin has \
         initdb (install the postgresql package)"
    )]
    NoPostgres,
    /// No MariaDB server binaries were found.
    #[error(
        "no MariaDB binaries: mariadbd (or mysqld) and mariadb-install-db (or mysql_install_db) \
         are needed, on PATH or in /usr/sbin (install the mariadb-server package)"
    )]
    NoMysql,
    /// The gateway library refused its configuration or could not start.
    #[error(transparent)]
    Gateway(#[from] idem_gateway::Error),
    /// A gateway's admin API did not answer as documented.
    #[error("the admin API answered {status} for {url}")]
    Admin {
        /// What was asked.
        url: String,
        /// What it answered.
        status: http::StatusCode,
    },
    /// A request of the harness itself (to an admin API) failed.
    #[error("the request to {url} failed")]
    Http {
        /// What was asked.
        url: String,
        /// Why it failed.
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    /// A request of the harness itself got no whole answer in time.
    #[error("the request to {url} got no answer within {timeout:?}")]
    TimedOut {
        /// What was asked.
        url: String,
        /// How long the harness waited.
        timeout: std::time::Duration,
    },
    /// A response of the harness's own requests could not be read or parsed.
    #[error("the answer of {url} could not be read")]
    Body {
        /// What was asked.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A caller could not send its request at all (an invalid key or URL: a harness bug).
    #[error("a caller could not send its request")]
    Client(#[source] Box<idem_client::Error>),
    /// A file given as a run's report is not one.
    #[error("{} is not a chaos run's report", path.display())]
    NotAReport {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The report or history could not be serialized.
    #[error("cannot serialize the {what}")]
    Json {
        /// The report or the history.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// An [`Error::Io`] for `what`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}
