//! The PostgreSQL, MySQL and Redis servers of the store tests: a schema, database or key prefix
//! of each test's own on the servers CI runs (`IDEM_TEST_POSTGRES_URL`, `IDEM_TEST_MYSQL_URL`,
//! `IDEM_TEST_REDIS_URL`), and a
//! `redis-server` a test starts, kills and restarts itself.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use idem_test_support::Server;
use sqlx::{Connection, PgConnection};

pub(crate) use idem_test_support::free_port;

/// `url` with `parameters` added to its query.
fn with_query(url: &str, parameters: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{parameters}")
}

/// A schema of the test's own on the test server, with a random name, dropped at the end.
pub(crate) struct PgSchema {
    schema: idem_test_support::PgSchema,
    /// The schema's name, also the `application_name` of the gateways' connections.
    pub(crate) name: String,
}

impl PgSchema {
    /// A new schema name, or `None` when no server is configured (the test is skipped).
    pub(crate) fn new() -> Option<Self> {
        let schema = idem_test_support::PgSchema::new(&Server::Postgres.url()?);
        Some(Self {
            name: schema.name().to_owned(),
            schema,
        })
    }

    fn server(&self) -> &str {
        self.schema.server()
    }

    /// The gateway's `--store`: the schema, and the schema's name as the connections'
    /// `application_name` so that the test can find them.
    pub(crate) fn store_url(&self) -> String {
        with_query(
            self.server(),
            &format!("schema={0}&application_name={0}", self.name),
        )
    }

    /// Runs `sql` on the server.
    pub(crate) async fn execute(&self, sql: &str) -> u64 {
        let mut connection = PgConnection::connect(self.server()).await.unwrap();
        let done = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut connection)
            .await
            .unwrap();
        done.rows_affected()
    }

    /// Terminates every connection of the gateways on this schema: their pools' (by
    /// `application_name`) and their listeners' (by the `LISTEN` of the schema's channel).
    /// Returns how many there were.
    pub(crate) async fn terminate_connections(&self, channel: &str) -> i64 {
        let mut connection = PgConnection::connect(self.server()).await.unwrap();
        sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() \
               AND (application_name = $1 \
                    OR (application_name = 'idem-listener' AND query LIKE '%' || $2 || '%'))",
        )
        .bind(&self.name)
        .bind(channel)
        .fetch_one(&mut connection)
        .await
        .unwrap()
    }

    /// The schema's `LISTEN`/`NOTIFY` channel, as the store computes it.
    pub(crate) async fn channel(&self) -> String {
        let pool = sqlx::PgPool::connect(self.server()).await.unwrap();
        let options = idem_postgres::PostgresOptions::new().schema(self.name.parse().unwrap());
        let store = idem_postgres::PostgresStore::open(pool, options)
            .await
            .expect("the schema is migrated");
        let channel = store.channel().to_owned();
        store.close().await;
        channel
    }
}

/// A MySQL or MariaDB database of the test's own on the test server (`IDEM_TEST_MYSQL_URL`),
/// dropped at the end.
pub(crate) struct MysqlDb {
    database: idem_test_support::MysqlDatabase,
}

impl MysqlDb {
    /// A new database, or `None` when no server is configured (the test is skipped).
    pub(crate) async fn new() -> Option<Self> {
        let server = Server::Mysql.url()?;
        Some(Self {
            database: idem_test_support::MysqlDatabase::create(&server).await,
        })
    }

    /// The database's name.
    pub(crate) fn name(&self) -> &str {
        self.database.name()
    }

    /// The gateway's `--store`.
    pub(crate) fn store_url(&self) -> String {
        self.database.url()
    }

    /// Kills every connection to this database but the caller's (the gateways' pools and store
    /// connections); returns how many there were.
    pub(crate) async fn kill_connections(&self) -> usize {
        let mut connection = self.database.connect().await;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT ID FROM information_schema.PROCESSLIST \
             WHERE DB = ? AND ID <> CONNECTION_ID()",
        )
        .bind(self.name())
        .fetch_all(&mut connection)
        .await
        .unwrap();
        for id in &ids {
            // A connection that ended meanwhile is no longer there to kill.
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
                .execute(&mut connection)
                .await;
        }
        ids.len()
    }

    /// Rows of `sql`, each as its first column's bytes.
    pub(crate) async fn bytes(&self, sql: &str) -> Vec<Vec<u8>> {
        let mut connection = self.database.connect().await;
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_all(&mut connection)
            .await
            .unwrap()
    }

    /// Runs `sql` in the database.
    pub(crate) async fn execute(&self, sql: &str) -> u64 {
        let mut connection = self.database.connect().await;
        let done = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut connection)
            .await
            .unwrap();
        done.rows_affected()
    }
}

/// A key prefix of the test's own on the test Redis server; its keys are deleted at the end.
pub(crate) struct RedisPrefix {
    prefix: idem_test_support::RedisPrefix,
}

impl RedisPrefix {
    /// A new prefix on the test server, or `None` when no server is configured (the test is
    /// skipped).
    pub(crate) fn new() -> Option<Self> {
        Some(Self::on(&Server::Redis.url()?))
    }

    /// A new prefix on the server at `server`.
    pub(crate) fn on(server: &str) -> Self {
        Self {
            prefix: idem_test_support::RedisPrefix::new(server),
        }
    }

    /// The prefix.
    pub(crate) fn prefix(&self) -> &str {
        self.prefix.prefix()
    }

    /// The gateway's `--store`.
    pub(crate) fn store_url(&self) -> String {
        with_query(self.prefix.server(), &format!("prefix={}", self.prefix()))
    }
}

/// A `redis-server` of the test's own, on a free port, killed when dropped.
pub(crate) struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
}

impl RedisServer {
    /// A server with its files in `dir` and an append-only file fsynced on every write
    /// (`--appendfsync always`), so that what it acknowledged survives a `SIGKILL`; or `None`
    /// when no Redis is configured for the tests (they are skipped).
    pub(crate) fn durable(dir: &Path) -> Option<Self> {
        Server::Redis.url()?;
        Some(Self::start(
            dir,
            free_port(),
            &["--appendonly", "yes", "--appendfsync", "always"],
        ))
    }

    /// Starts `redis-server` on `port` with its files in `dir`, no snapshots, and `args`.
    fn start(dir: &Path, port: u16, args: &[&str]) -> Self {
        let mut server = Self {
            child: None,
            port,
            dir: dir.to_owned(),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        };
        server.restart();
        server
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server as a crash would (`SIGKILL`: nothing is saved on the way out).
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server on its port and files (again, after [`kill`](Self::kill)), and waits
    /// until it answers.
    pub(crate) fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        // setpriv: the kernel kills the server if the test process dies without dropping it.
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "redis-server"])
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--daemonize", "no", "--loglevel", "warning"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (setpriv from util-linux, and redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pong = redis::Client::open(self.url())
                .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
                .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
            match pong {
                Ok(_) => return,
                Err(error) if Instant::now() > deadline => panic!("redis-server: {error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// A Redis Cluster of three masters on loopback, without persistence, killed when dropped.
pub(crate) struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes with their files in `dir` and joins them, or returns `None` when no
    /// Redis is configured for the tests (they are skipped).
    pub(crate) fn start(dir: &Path) -> Option<Self> {
        Server::Redis.url()?;
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                let port = free_cluster_port();
                let config = format!("nodes-{port}.conf");
                let args = ["--cluster-enabled", "yes", "--cluster-config-file", &config];
                RedisServer::start(dir, port, &[&args[..], &["--appendonly", "no"]].concat())
            })
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("run redis-cli");
        assert!(status.success(), "redis-cli --cluster create failed");
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            let mut connection = redis::Client::open(node.url())
                .and_then(|client| client.get_connection())
                .unwrap();
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut connection)
                    .unwrap();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the cluster did not become ready"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some(Self { nodes })
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3?prefix=P`, with a prefix of
    /// the caller's own.
    pub(crate) fn store_url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        format!(
            "redis+cluster://{}?prefix={}",
            nodes.join(","),
            idem_test_support::unique_name("idem-test:")
        )
    }
}

/// A free loopback port whose cluster bus port (+10,000) is free too.
pub(crate) fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
