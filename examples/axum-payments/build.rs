//! Rebuilds when a migration is added: `sqlx::migrate!()` embeds the files it found at build time.

fn main() {
    println!("cargo::rerun-if-changed=migrations");
}
