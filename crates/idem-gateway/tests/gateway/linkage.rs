//! What the `idem` binary links: every TLS stack in the default build is rustls, so no OpenSSL.
//! Kafka (the opt-in `kafka` feature) is the one exception: librdkafka's TLS and SASL link the
//! system's OpenSSL.

use std::process::Command;

use crate::support::IDEM;

/// The OpenSSL libraries this test build of `idem` may link: those of Kafka's, when it has it.
const OPENSSL: &[&str] = if cfg!(feature = "kafka") {
    &["libcrypto.so.3", "libssl.so.3"]
} else {
    &[]
};

#[test]
fn the_binary_links_openssl_only_for_kafka() {
    let output = Command::new("ldd")
        .arg(IDEM)
        .output()
        .expect("ldd runs (Debian's libc-bin)");
    assert!(output.status.success(), "ldd {IDEM} failed: {output:?}");
    let libraries = String::from_utf8(output.stdout).unwrap();
    // The dynamic libraries the binary needs, by name (`libc.so.6 => /lib/…`).
    let mut names: Vec<&str> = libraries
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| !name.starts_with("linux-vdso") && !name.starts_with('/'))
        .collect();
    names.sort_unstable();
    let openssl: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| name.starts_with("libssl") || name.starts_with("libcrypto"))
        .collect();
    assert_eq!(openssl, OPENSSL, "every library: {names:?}");
}

/// The binary `cargo install` builds, with the default features, has no OpenSSL crate in its
/// dependency graph, whatever features this test build has.
#[test]
fn the_default_build_depends_on_no_openssl_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--locked",
            "--offline",
            "--package",
            "idem-gateway",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "cargo tree failed: {output:?}");
    let tree = String::from_utf8(output.stdout).unwrap();
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    // The graph is read: the gateway's own crates and rustls are in it. (`openssl-probe`, which
    // finds the system's certificate files, is Rust and links nothing.)
    for expected in ["idem-gateway", "idem-messaging", "rustls"] {
        assert!(crates.contains(&expected), "{expected} in {crates:?}");
    }
    let openssl: Vec<&str> = crates
        .iter()
        .copied()
        .filter(|name| ["openssl", "openssl-sys", "native-tls", "rdkafka-sys"].contains(name))
        .collect();
    assert_eq!(openssl, Vec::<&str>::new());
}
