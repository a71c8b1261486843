//! Helpers for `scripts/pgbench-store.sh`: the database's own limit for the store's SQL.
//!
//! ```text
//! load script <schema>              migrates <schema> and prints a pgbench script running exactly
//!                                   the store's acquire and complete statements on a new key
//! load purge <schema> <rows> <batch>  fills <schema> with <rows> expired records, then times
//!                                   purging them `batch` at a time with the store's statement
//! ```
//!
//! Both read the server's URL from `IDEM_TEST_POSTGRES_URL`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use idem_core::{Policy, Store, StoredResponse, Terms};
use idem_postgres::{PostgresOptions, PostgresStore, Statement};
use sqlx::AssertSqlSafe;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("IDEM_TEST_POSTGRES_URL").context("IDEM_TEST_POSTGRES_URL")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, schema) = match args.as_slice() {
        [command, schema, ..] => (command.as_str(), schema.as_str()),
        _ => bail!("usage: load script <schema> | load purge <schema> <rows> <batch>"),
    };
    let options = PostgresOptions::new().schema(schema.parse()?);
    let pool = sqlx::PgPool::connect(&url).await?;
    PostgresStore::migrate(&pool, &options).await?;
    let store = PostgresStore::open(pool, options).await?;
    match (command, &args[2..]) {
        ("script", []) => print!("{}", pgbench_script(&store)),
        ("purge", [rows, batch]) => purge(&store, schema, rows.parse()?, batch.parse()?).await?,
        _ => bail!("usage: load script <schema> | load purge <schema> <rows> <batch>"),
    }
    Ok(())
}

/// A hex bytea literal.
fn bytea(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(r"'\x{hex}'::bytea")
}

/// pgbench's random key, as the store binds it: its SHA-256.
const KEY_DIGEST: &str = "sha256((:key)::text::bytea)";

/// The store's two statements for a new key, with their parameters as the store binds them for
/// a batch of one: `$1` (the test clock) NULL, then one-element arrays: one tenant's scope, the
/// SHA-256 of a random key (the store keeps key digests), the default policy's terms, and a small
/// JSON response. `\gset` carries the token from acquire to complete.
fn pgbench_script(store: &PostgresStore) -> String {
    let terms = Terms::from(&Policy::default());
    let scope =
        bytea(idem_core::Scope::from_identity([b"Bearer sk_test_bench".as_slice()]).as_bytes());
    let response = StoredResponse::new(201)
        .header("content-type", "application/json")
        .body(r#"{"id":"ch_1","amount":1000,"currency":"eur"}"#);
    // Replaced from the highest number down, so that `$1` does not match the start of `$10`.
    let fill = |sql: &str, values: &[&str]| {
        values
            .iter()
            .enumerate()
            .rev()
            .fold(sql.to_owned(), |sql, (i, value)| {
                sql.replace(&format!("${}", i + 1), value)
            })
    };
    let (lease, ttl) = (
        terms.lease.as_millis().to_string(),
        terms.ttl.as_millis().to_string(),
    );
    let one = |value: &str| format!("ARRAY[{value}]");
    let acquire = fill(
        store.sql(Statement::Acquire),
        &[
            "NULL",
            &one(&scope),
            &one(KEY_DIGEST),
            &one(&bytea(&[7; 32])),
            &one(&lease),
            &one(&ttl),
        ],
    );
    let complete = fill(
        store.sql(Statement::Complete),
        &[
            "NULL",
            &one(&scope),
            &one(KEY_DIGEST),
            &one(":token"),
            &one(&bytea(&response.encode())),
            &one(&ttl),
        ],
    );
    // pgbench takes one command per line unless it ends with `\gset` or `;`.
    let one_line = |sql: String| {
        sql.lines()
            .map(|line| line.split("--").next().unwrap_or_default().trim())
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "\\set key random(1, 9223372036854775806)\n{}\n\\gset\n{};\n",
        one_line(acquire),
        one_line(complete)
    )
}

/// Inserts `rows` records that expired a minute ago, then purges them `batch` at a time.
async fn purge(store: &PostgresStore, schema: &str, rows: i64, batch: usize) -> anyhow::Result<()> {
    let fill = Instant::now();
    sqlx::query(AssertSqlSafe(format!(
        r#"INSERT INTO "{schema}".idem_records
               (scope, key, fingerprint, state, token, created_at, completed_at, expires_at, response)
           SELECT '\x00'::bytea, sha256(('expired-' || n)::bytea), '\x00'::bytea, 'completed', n,
                  now() - interval '1 day', now() - interval '1 day', now() - interval '1 minute',
                  $2
           FROM generate_series(1, $1) AS n"#
    )))
    .bind(rows)
    .bind(StoredResponse::new(201).body(vec![b'x'; 200]).encode())
    .execute(store.pool())
    .await?;
    sqlx::query(AssertSqlSafe(format!(r#"ANALYZE "{schema}".idem_records"#)))
        .execute(store.pool())
        .await?;
    eprintln!("inserted {rows} expired records in {:?}", fill.elapsed());

    let start = Instant::now();
    let (mut purged, mut batches, mut slowest) = (0, 0, Duration::ZERO);
    loop {
        let one = Instant::now();
        let n = store.purge_expired(batch).await?;
        slowest = slowest.max(one.elapsed());
        purged += n;
        batches += 1;
        if n < batch {
            break;
        }
    }
    let elapsed = start.elapsed();
    println!(
        "purged {purged} rows in {batches} batches of {batch}: {elapsed:.2?}, {:.0} rows/s, \
         {:.2?} per batch on average, slowest {slowest:.2?}",
        purged as f64 / elapsed.as_secs_f64(),
        elapsed / batches,
    );
    Ok(())
}
