//! [`PostgresServer`]: a PostgreSQL cluster of the run's own, crashed and restarted on
//! schedule.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use tokio::process::Child;

use crate::{
    Error,
    process::{self, as_user, supervised},
};

/// The user PostgreSQL runs as when the harness is root (it refuses to run as root).
const POSTGRES_USER: &str = "postgres";

/// A PostgreSQL server on a free loopback port, its cluster in the run's directory, trusting
/// local connections, stopped when dropped.
#[derive(Debug)]
pub struct PostgresServer {
    bin: PathBuf,
    data: PathBuf,
    addr: SocketAddr,
    user: Option<&'static str>,
    log: PathBuf,
    version: u32,
    child: Option<Child>,
}

impl PostgresServer {
    /// Its files' directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Creates a cluster in `dir` (`initdb`) and starts its server.
    pub async fn start(dir: &Path) -> Result<Self, Error> {
        let bin = bin_dir().await?;
        let user = process::is_root().then_some(POSTGRES_USER);
        let data = process::server_home(dir, "postgres", user)
            .await?
            .join("data");
        let mut initdb = as_user(bin.join("initdb"), user);
        initdb.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-N",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        process::run(initdb, "initdb").await?;
        let version = std::fs::read_to_string(data.join("PG_VERSION"))
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mut server = Self {
            bin,
            data,
            addr: process::free_port()?,
            user,
            log: dir.join("postgres.log"),
            version,
            child: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        Self::url_at(self.addr)
    }

    /// The server's URL as reached at `addr`.
    pub fn url_at(addr: SocketAddr) -> String {
        format!("postgres://postgres@{addr}/postgres")
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Crashes the server (`pg_ctl stop -m immediate`: no checkpoint, crash recovery at the
    /// next start) and starts it again.
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.stop().await;
        self.spawn().await
    }

    /// Stops the server as a crash would.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let mut pg_ctl = as_user(self.bin.join("pg_ctl"), self.user);
        pg_ctl
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(&self.data);
        if process::run(pg_ctl, "pg_ctl stop").await.is_err() {
            let _ = child.kill().await;
        }
        let _ = child.wait().await;
    }

    async fn spawn(&mut self) -> Result<(), Error> {
        let mut command = supervised(self.bin.join("postgres"), self.user, &self.log)?;
        command
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &self.addr.port().to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "max_connections=200"]);
        if self.version >= 14 {
            // Crash recovery syncs the data directory first: one syncfs() instead of an fsync()
            // per file takes the restart from seconds to a few hundred milliseconds.
            command.args(["-c", "recovery_init_sync_method=syncfs"]);
        }
        let mut child = command
            .spawn()
            .map_err(Error::io("start postgres (setpriv, from util-linux)"))?;
        let port = self.addr.port().to_string();
        let (bin, port) = (&self.bin, &port);
        let ready = process::wait_ready(&mut child, "postgres", &self.log, || async move {
            let mut isready = tokio::process::Command::new(bin.join("pg_isready"));
            isready.args([
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                port,
                "-U",
                "postgres",
                "-d",
                "postgres",
            ]);
            process::run(isready, "pg_isready").await.is_ok()
        })
        .await;
        self.child = Some(child);
        ready
    }
}

/// Where `initdb`, `postgres` and `pg_ctl` are: `pg_config --bindir`, or the newest
/// `/usr/lib/postgresql/*/bin` (Debian's layout).
async fn bin_dir() -> Result<PathBuf, Error> {
    let pg_config = tokio::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .await;
    if let Ok(output) = pg_config
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or(Error::NoPostgres)
}
