//! [`MysqlServer`]: a MariaDB server of the run's own, SIGKILLed and restarted on schedule.
//!
//! InnoDB writes and flushes its redo log at every commit (`--innodb-flush-log-at-trx-commit=1`),
//! so what the server acknowledged survives the kill: the next start replays the log (crash
//! recovery) before it accepts connections.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::{io::AsyncReadExt as _, net::TcpStream, process::Child};

use crate::{
    Error,
    process::{self, as_user, supervised},
};

/// The user MariaDB runs as when the harness is root (it refuses to run as root).
const MYSQL_USER: &str = "mysql";

/// The database the store's table is in, created at the first start.
const DATABASE: &str = "idem";

/// The server's programs, by the names MariaDB and its packages give them.
const SERVERS: &[&str] = &["mariadbd", "mysqld"];
const INSTALL_DBS: &[&str] = &["mariadb-install-db", "mysql_install_db"];

/// InnoDB's sizes, for the data directory made by the install script and for the server: a
/// small buffer pool and redo log keep a start, and a crash recovery, well under a second.
const INNODB: &[&str] = &[
    "--innodb-buffer-pool-size=16M",
    "--innodb-log-file-size=16M",
];

/// A MariaDB server on a free loopback port, its data directory in the run's directory, root
/// without a password over TCP, stopped when dropped.
#[derive(Debug)]
pub struct MysqlServer {
    server: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    addr: SocketAddr,
    user: Option<&'static str>,
    log: PathBuf,
    child: Option<Child>,
}

impl MysqlServer {
    /// Whether a MariaDB server and its install script are installed: `mariadbd` (or `mysqld`)
    /// and `mariadb-install-db` (or `mysql_install_db`), on `PATH` or in `/usr/sbin`.
    pub fn installed() -> bool {
        find(SERVERS).is_some() && find(INSTALL_DBS).is_some()
    }

    /// Creates a data directory in `dir` (`mariadb-install-db`), starts the server on it, and
    /// creates the store's database.
    pub async fn start(dir: &Path) -> Result<Self, Error> {
        let (Some(server), Some(install_db)) = (find(SERVERS), find(INSTALL_DBS)) else {
            return Err(Error::NoMysql);
        };
        let user = process::is_root().then_some(MYSQL_USER);
        let home = process::server_home(dir, "mysql", user).await?;
        let data = home.join("data");
        let mut install = as_user(install_db, user);
        // --no-defaults first: the machine's my.cnf describes the machine's server.
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            // root@127.0.0.1 without a password (a unix socket login for root otherwise).
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(INNODB);
        process::run(install, "mariadb-install-db").await?;
        let init = home.join("init.sql");
        std::fs::write(&init, format!("CREATE DATABASE {DATABASE};\n"))
            .map_err(Error::io("write MariaDB's init file"))?;
        let mut server = Self {
            server,
            data,
            socket: home.join("mysqld.sock"),
            addr: process::free_port()?,
            user,
            log: dir.join("mysql.log"),
            child: None,
        };
        server.spawn(Some(&init)).await?;
        Ok(server)
    }

    /// `mysql://root@127.0.0.1:PORT/idem`.
    pub fn url(&self) -> String {
        Self::url_at(self.addr)
    }

    /// The server's URL as reached at `addr`.
    pub fn url_at(addr: SocketAddr) -> String {
        format!("mysql://root@{addr}/{DATABASE}")
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The store's database directory: its tables' files.
    pub fn database_dir(&self) -> PathBuf {
        self.data.join(DATABASE)
    }

    /// SIGKILLs the server and starts it again on its data directory (InnoDB's crash recovery).
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.stop().await;
        self.spawn(None).await
    }

    /// SIGKILLs the server.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the server, running `init`'s statements before it accepts connections.
    async fn spawn(&mut self, init: Option<&Path>) -> Result<(), Error> {
        let mut command = supervised(&self.server, self.user, &self.log)?;
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data.display()))
            .arg(format!("--socket={}", self.socket.display()))
            .arg(format!("--port={}", self.addr.port()))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .args(INNODB)
            .args([
                // Durability is the point: the redo log is flushed at every commit (the default,
                // made explicit).
                "--innodb-flush-log-at-trx-commit=1",
                "--performance-schema=OFF",
                "--max-connections=200",
                // Every gateway connects from 127.0.0.1, through the partitions' proxies too:
                // handshakes they cut must not get the address blocked.
                "--max-connect-errors=1000000000",
                // As Debian's package configures its server.
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci",
            ]);
        if let Some(init) = init {
            command.arg(format!("--init-file={}", init.display()));
        }
        let mut child = command
            .spawn()
            .map_err(Error::io("start mariadbd (setpriv, from util-linux)"))?;
        let addr = self.addr;
        let ready = process::wait_ready(&mut child, "mariadbd", &self.log, || greets(addr)).await;
        self.child = Some(child);
        ready
    }
}

/// Whether the server at `addr` greets a new connection with its handshake (protocol 10): it
/// does once its crash recovery and init file are done, not while it refuses connections.
async fn greets(addr: SocketAddr) -> bool {
    let greeting = async {
        let mut stream = TcpStream::connect(addr).await?;
        // A packet: 3 bytes of length, a sequence number, then the payload.
        let mut start = [0; 5];
        stream.read_exact(&mut start).await?;
        Ok::<_, std::io::Error>(start[4])
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), greeting).await,
        Ok(Ok(10))
    )
}

/// The first of `names` on `PATH` or in `/usr/sbin` (which a user's `PATH` often lacks).
fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .collect();
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}
