//! TLS to MySQL, under MySQL's own parameter names: a MariaDB server of the test's own that
//! accepts TLS connections only (`require_secure_transport`), with a certificate made for the test
//! on a free loopback port. The wrong CA is refused, the right one served; plain text is refused
//! by the server.
//!
//! It needs `mariadbd` and `mariadb-install-db` (Debian's `mariadb-server`, which `scripts/test`
//! installs); without them it says so and returns, unless `CI` is set: then it fails.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use idem_core::{Acquisition, Address, Fingerprint, Outcome, Policy, Store, StoredResponse, Terms};
use idem_mysql::{Error, MysqlOptions, MysqlStore};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// The first of `names` on `PATH` or in `/usr/sbin`.
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

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A CA and the server's certificate it signed (for 127.0.0.1), and a CA that signed nothing.
struct Certificates {
    ca: PathBuf,
    wrong_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Certificates {
    fn make(dir: &Path) -> Self {
        let ca = authority("idem test CA");
        let wrong = authority("idem wrong CA");
        let server_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
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

/// `mariadbd`, killed and waited for when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A MariaDB server in `dir` that takes TLS connections only, with `certificates`, or `None`
/// when MariaDB is not installed.
fn start(dir: &Path, certificates: &Certificates) -> Option<Server> {
    let (Some(server), Some(install_db)) = (
        find(&["mariadbd", "mysqld"]),
        find(&["mariadb-install-db", "mysql_install_db"]),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "mariadbd and mariadb-install-db are needed (Debian's mariadb-server)"
        );
        eprintln!("skipped: mariadbd is not installed");
        return None;
    };
    // MariaDB runs as root only when told so.
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0");
    let user: &[&str] = if root { &["--user=root"] } else { &[] };
    let data = dir.join("data");
    let installed = Command::new(install_db)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
        .args(user)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(installed.success(), "mariadb-install-db failed");
    let init = dir.join("init.sql");
    std::fs::write(&init, "CREATE DATABASE idem;\n").unwrap();
    let port = idem_test_support::free_port();
    let log = std::fs::File::create(dir.join("mariadb.log")).unwrap();
    let child = Command::new(server)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
        .arg(format!("--port={port}"))
        .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
        .args(["--innodb-buffer-pool-size=16M", "--performance-schema=OFF"])
        .arg(format!("--init-file={}", init.display()))
        .arg(format!("--ssl-ca={}", certificates.ca.display()))
        .arg(format!("--ssl-cert={}", certificates.cert.display()))
        .arg(format!("--ssl-key={}", certificates.key.display()))
        .arg("--require-secure-transport=ON")
        .args(user)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "mariadbd did not listen: {}",
            std::fs::read_to_string(dir.join("mariadb.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_over_tls_checks_the_ca_and_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    let Some(server) = start(dir.path(), &certificates) else {
        return;
    };
    let base = format!("mysql://root@127.0.0.1:{}/idem", server.port);
    let connect = |url: String| async move {
        let options = MysqlOptions::from_url(&url)
            .unwrap()
            .pool_timeout(Duration::from_secs(10));
        options.connect_pool().await
    };

    // The wrong CA: the server's certificate is refused.
    let wrong = format!(
        "{base}?ssl-mode=VERIFY_CA&ssl-ca={}",
        certificates.wrong_ca.display()
    );
    let refused = connect(wrong).await.unwrap_err();
    assert!(matches!(refused, Error::Connect(_)), "{refused:?}");
    let reason = format!("{refused:?}");
    assert!(
        reason.contains("InvalidCertificate(UnknownIssuer)"),
        "{reason}"
    );

    // Plain text: the server refuses it.
    let plain = connect(format!("{base}?ssl-mode=DISABLED"))
        .await
        .unwrap_err();
    assert!(matches!(plain, Error::Connect(_)), "{plain:?}");

    // The right CA, and the host checked against the certificate: served.
    let right = format!(
        "{base}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        certificates.ca.display()
    );
    let options = MysqlOptions::from_url(&right).unwrap();
    let pool = connect(right).await.unwrap();
    let cipher: Option<(String, String)> = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_optional(&pool)
        .await
        .unwrap();
    let cipher = cipher.map(|(_, cipher)| cipher).unwrap_or_default();
    assert!(!cipher.is_empty(), "the session is not encrypted");
    MysqlStore::migrate(&pool, &options).await.unwrap();
    let store = MysqlStore::open(pool, options).await.unwrap();
    let address = Address::anonymous("over-tls".parse().unwrap());
    let fingerprint = Fingerprint::from_bytes([9; 32]);
    let terms = Terms::from(&Policy::default());
    let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    let response = Outcome::from(StoredResponse::new(201).body("sealed in transit"));
    store
        .complete(&address, lease.token, &response, terms.ttl)
        .await
        .unwrap();
    assert_eq!(
        store.acquire(&address, &fingerprint, terms).await.unwrap(),
        Acquisition::Completed(response)
    );
    store.close().await;
    drop(server);
}
