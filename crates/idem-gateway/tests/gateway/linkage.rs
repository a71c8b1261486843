//! What the `idem` binary links: every TLS stack in it is rustls, so no OpenSSL library.

use std::process::Command;

use crate::support::IDEM;

#[test]
fn the_binary_links_no_openssl() {
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
    assert_eq!(openssl, Vec::<&str>::new(), "every library: {names:?}");
}
