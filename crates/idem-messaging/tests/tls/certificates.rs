//! Certificates made for a test with rcgen: a CA, a server certificate it signed, a client
//! certificate it signed, and another CA that signed nothing here.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// PEM files in a directory of the test's.
pub(crate) struct Certificates {
    /// The CA that signed the server's and the client's certificates.
    pub(crate) ca: PathBuf,
    /// A CA that did not.
    pub(crate) wrong_ca: PathBuf,
    /// The server's certificate, for `localhost` and `127.0.0.1`, and its key.
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    /// A client certificate and its key.
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
}

impl Certificates {
    pub(crate) fn make(dir: &Path) -> Self {
        let ca = authority("idem test CA");
        let wrong = authority("idem wrong CA");
        let write = |name: &str, pem: String| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        let server_key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "idem test server");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = params.signed_by(&server_key, &ca).unwrap();
        let client_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "idem-relay");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client = params.signed_by(&client_key, &ca).unwrap();
        Self {
            ca: write("ca.pem", ca.pem()),
            wrong_ca: write("wrong-ca.pem", wrong.pem()),
            cert: write("server.pem", server.pem()),
            key: write("server.key", server_key.serialize_pem()),
            client_cert: write("client.pem", client.pem()),
            client_key: write("client.key", client_key.serialize_pem()),
        }
    }
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}
