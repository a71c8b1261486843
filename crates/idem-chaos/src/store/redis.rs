//! [`RedisServer`]: a `redis-server` of the run's own, SIGKILLed and restarted on schedule.
//!
//! By default it appends every write to its append-only file and fsyncs it before answering
//! (`--appendonly yes --appendfsync always`), so what it acknowledged survives the kill. A
//! Redis without that loses completed keys on a restart, by design: their retries execute
//! again (docs/stores.md); [`RedisPersistence::None`] shows it, the run reporting them as
//! forgotten.
//!
//! The nodes of [`RedisCluster`](super::RedisCluster) are such servers too, in cluster mode.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    process::Child,
};

use crate::{
    Error,
    options::RedisPersistence,
    process::{self, supervised},
};

/// A `redis-server` on a free loopback port, its files in the run's directory, killed when
/// dropped.
#[derive(Debug)]
pub struct RedisServer {
    addr: SocketAddr,
    persistence: RedisPersistence,
    dir: PathBuf,
    log: PathBuf,
    /// In cluster mode, the cluster's node timeout.
    cluster: Option<Duration>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts the server with its files in `dir`.
    pub async fn start(dir: &Path, persistence: RedisPersistence) -> Result<Self, Error> {
        Self::start_named(dir, "redis", persistence, None).await
    }

    /// Starts a cluster node with `node_timeout`, its files in `dir/NAME` and its log in
    /// `dir/NAME.log`.
    pub(crate) async fn start_cluster_node(
        dir: &Path,
        name: &str,
        persistence: RedisPersistence,
        node_timeout: Duration,
    ) -> Result<Self, Error> {
        Self::start_named(dir, name, persistence, Some(node_timeout)).await
    }

    async fn start_named(
        dir: &Path,
        name: &str,
        persistence: RedisPersistence,
        cluster: Option<Duration>,
    ) -> Result<Self, Error> {
        let data = dir.join(name);
        std::fs::create_dir(&data).map_err(Error::io("create the Redis directory"))?;
        let mut server = Self {
            addr: process::free_port()?,
            persistence,
            dir: data,
            log: dir.join(format!("{name}.log")),
            cluster,
            child: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        Self::url_at(self.addr)
    }

    /// The server's URL as reached at `addr`.
    pub fn url_at(addr: SocketAddr) -> String {
        format!("redis://{addr}")
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its files' directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether it was started and not stopped since.
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Its log file.
    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// Starts the server again on its files, after [`stop`](Self::stop).
    pub(crate) async fn start_again(&mut self) -> Result<(), Error> {
        self.spawn().await
    }

    /// SIGKILLs the server and starts it again on its files.
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.stop().await;
        self.spawn().await
    }

    /// SIGKILLs the server.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    async fn spawn(&mut self) -> Result<(), Error> {
        let mut command = supervised("redis-server", None, &self.log)?;
        command
            .args([
                "--port",
                &self.addr.port().to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--daemonize", "no", "--loglevel", "warning"]);
        match self.persistence {
            RedisPersistence::Aof => {
                command.args(["--appendonly", "yes", "--appendfsync", "always"])
            }
            RedisPersistence::None => command.args(["--appendonly", "no"]),
        };
        if let Some(node_timeout) = self.cluster {
            // nodes.conf, in the node's directory, keeps its identity across a restart.
            command.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &node_timeout.as_millis().to_string(),
                // A node that rejoins gets its master's data at once, not 5 s later.
                "--repl-diskless-sync-delay",
                "0",
            ]);
        }
        let mut child = command
            .spawn()
            .map_err(Error::io("start redis-server (setpriv, from util-linux)"))?;
        let addr = self.addr;
        let ready = process::wait_ready(&mut child, "redis-server", &self.log, || pong(addr)).await;
        self.child = Some(child);
        ready
    }
}

/// Whether the server at `addr` answers `PING` with `PONG` (not `LOADING` while it reads its
/// append-only file).
async fn pong(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    if stream.write_all(b"PING\r\n").await.is_err() {
        return false;
    }
    let mut answer = [0; 7];
    stream.read_exact(&mut answer).await.is_ok() && &answer == b"+PONG\r\n"
}
