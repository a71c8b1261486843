//! Servers that speak TLS only, with certificates made for the test: a PostgreSQL cluster of the
//! test's own (`ssl=on`) and a `redis-server --tls-port`, both on free loopback ports.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::servers::{free_cluster_port, free_port};

/// A CA, a server certificate it signed, and another CA that signed nothing here: the wrong one.
pub(crate) struct Certificates {
    /// The CA that signed the server's certificate (PEM).
    pub(crate) ca: PathBuf,
    /// A CA that did not.
    pub(crate) wrong_ca: PathBuf,
    /// The server's certificate and key (PEM).
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

impl Certificates {
    /// Makes them in `dir`, the server's certificate for `names` (host names or IP addresses).
    pub(crate) fn make(dir: &Path, names: &[&str]) -> Self {
        let ca = authority("idem test CA");
        let wrong = authority("idem wrong CA");
        let server_key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "idem test server");
        let cert = params.signed_by(&server_key, &ca).unwrap();
        let write = |name: &str, pem: String| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        Self {
            ca: write("ca.pem", ca.pem()),
            wrong_ca: write("wrong-ca.pem", wrong.pem()),
            cert: write("server.pem", cert.pem()),
            key: write("server.key", server_key.serialize_pem()),
        }
    }
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A child process killed (and waited for) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The user PostgreSQL runs as when the tests run as root (it refuses to run as root).
const POSTGRES_USER: &str = "postgres";

/// A PostgreSQL cluster of the test's own in `dir`, `ssl=on` with the test's certificate,
/// trusting every loopback login, stopped when dropped.
pub(crate) struct TlsPostgres {
    _server: Killed,
    port: u16,
}

impl TlsPostgres {
    /// `initdb`, then `postgres` on a free port.
    pub(crate) fn start(dir: &Path, certificates: &Certificates) -> Self {
        let bin = postgres_bin();
        let root = is_root();
        let home = dir.join("postgres");
        std::fs::create_dir(&home).unwrap();
        // The server's key must be its own and private, or it refuses to start.
        let (cert, key) = (home.join("server.pem"), home.join("server.key"));
        std::fs::copy(&certificates.cert, &cert).unwrap();
        std::fs::copy(&certificates.key, &key).unwrap();
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
            if root {
                // The postgres user must reach its directory inside the test's private one.
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
                run(Command::new("chown")
                    .args(["-R", &format!("{POSTGRES_USER}:")])
                    .arg(&home));
            }
        }
        let data = home.join("data");
        run(as_postgres(&bin.join("initdb"), root)
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-N", "-E", "UTF8"])
            .args(["--locale=C"]));
        let port = free_port();
        let log = std::fs::File::create(home.join("postgres.log")).unwrap();
        let mut command = Command::new("setpriv");
        if root {
            command.args([
                "--reuid",
                POSTGRES_USER,
                "--regid",
                POSTGRES_USER,
                "--init-groups",
            ]);
        }
        let child = command
            .args(["--pdeathsig", "KILL", "--"])
            .arg(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string()])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .args(["-c", "ssl=on", "-c"])
            .arg(format!("ssl_cert_file={}", cert.display()))
            .arg("-c")
            .arg(format!("ssl_key_file={}", key.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start postgres (setpriv, from util-linux)");
        let server = Killed(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args([
                    "-q",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-U",
                    "postgres",
                ])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not start: {}",
                std::fs::read_to_string(home.join("postgres.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            _server: server,
            port,
        }
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres?PARAMETERS`.
    pub(crate) fn url(&self, parameters: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?{parameters}",
            self.port
        )
    }
}

/// `pg_config --bindir`, or Debian's directory of the newest PostgreSQL.
fn postgres_bin() -> PathBuf {
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's binaries (pg_config --bindir or /usr/lib/postgresql/*/bin)")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().expect("PostgreSQL's binaries").1
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|metadata| metadata.uid() == 0)
}

fn as_postgres(program: &Path, root: bool) -> Command {
    if !root {
        return Command::new(program);
    }
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid",
            POSTGRES_USER,
            "--regid",
            POSTGRES_USER,
            "--init-groups",
            "--",
        ])
        .arg(program);
    command
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A `redis-server` that speaks TLS only (`--port 0 --tls-port P`), with the test's
/// certificate, not asking clients for theirs; killed when dropped.
pub(crate) struct TlsRedis {
    _server: Killed,
    port: u16,
}

impl TlsRedis {
    /// Starts it with its files in `dir`, and waits until it answers over TLS.
    pub(crate) fn start(dir: &Path, certificates: &Certificates) -> Self {
        Self::spawn(dir, certificates, free_port(), &[])
    }

    /// A Redis Cluster of one node that holds every slot, its cluster bus over TLS too.
    pub(crate) fn start_cluster(dir: &Path, certificates: &Certificates) -> Self {
        let config = dir.join("nodes.conf");
        let config = config.to_str().unwrap();
        let args = ["--cluster-enabled", "yes", "--cluster-config-file", config];
        let server = Self::spawn(
            dir,
            certificates,
            free_cluster_port(),
            &[&args[..], &["--tls-cluster", "yes"]].concat(),
        );
        let mut connection = server.connection(certificates);
        let _: () = redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(0)
            .arg(16383)
            .query(&mut connection)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut connection)
                .unwrap();
            if info.contains("cluster_state:ok") {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn spawn(dir: &Path, certificates: &Certificates, port: u16, args: &[&str]) -> Self {
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "redis-server"])
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--tls-cert-file")
            .arg(&certificates.cert)
            .arg("--tls-key-file")
            .arg(&certificates.key)
            .arg("--tls-ca-cert-file")
            .arg(&certificates.ca)
            .args(["--tls-auth-clients", "no"])
            .arg("--dir")
            .arg(dir)
            .args(["--save", "", "--daemonize", "no", "--loglevel", "warning"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (setpriv from util-linux, and redis-server)");
        let server = Self {
            _server: Killed(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pong = server
                .try_connect(certificates)
                .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
            match pong {
                Ok(_) => return server,
                Err(error) if Instant::now() > deadline => panic!("redis-server: {error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn try_connect(&self, certificates: &Certificates) -> redis::RedisResult<redis::Connection> {
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(&certificates.ca).unwrap()),
        };
        let url = format!("rediss://127.0.0.1:{}", self.port);
        redis::Client::build_with_tls(url.as_str(), certificates)
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
    }

    fn connection(&self, certificates: &Certificates) -> redis::Connection {
        self.try_connect(certificates).unwrap()
    }

    /// `rediss://127.0.0.1:PORT?PARAMETERS`.
    pub(crate) fn url(&self, parameters: &str) -> String {
        format!("rediss://127.0.0.1:{}?{parameters}", self.port)
    }

    /// `rediss+cluster://127.0.0.1:PORT?PARAMETERS`.
    pub(crate) fn cluster_url(&self, parameters: &str) -> String {
        format!("rediss+cluster://127.0.0.1:{}?{parameters}", self.port)
    }
}

/// A `nats-server -js` that speaks TLS only, with the test's certificate, not asking clients for
/// theirs; killed when dropped.
pub(crate) struct TlsNats {
    _server: Killed,
    port: u16,
}

impl TlsNats {
    /// Starts it with its store in `dir`, and waits until it accepts connections.
    pub(crate) fn start(dir: &Path, certificates: &Certificates) -> Self {
        let port = free_port();
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "nats-server", "-js"])
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.join("jetstream"))
            .arg("--tls")
            .arg("--tlscert")
            .arg(&certificates.cert)
            .arg("--tlskey")
            .arg(&certificates.key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server (setpriv from util-linux, and nats-server)");
        let server = Self {
            _server: Killed(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// `tls://127.0.0.1:PORT?PARAMETERS`.
    pub(crate) fn url(&self, parameters: &str) -> String {
        format!("tls://127.0.0.1:{}?{parameters}", self.port)
    }
}

/// A TLS endpoint of the test's own on a free loopback port, with the server certificate of a
/// [`Certificates`], in front of a plain TCP server (moto's SQS): each connection's TLS is
/// ended here and its bytes passed on. Stopped when dropped.
#[cfg(feature = "sqs")]
pub(crate) struct TlsFront {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

#[cfg(feature = "sqs")]
impl TlsFront {
    /// A front to `upstream` (`host:port`).
    pub(crate) async fn start(certificates: &Certificates, upstream: &str) -> Self {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

        let chain = CertificateDer::pem_file_iter(&certificates.cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&certificates.key).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = upstream.to_owned();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake: nothing to pass.
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Self { port, task }
    }

    /// `https://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

#[cfg(feature = "sqs")]
impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
