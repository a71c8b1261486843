//! Migrations, and the one clear error a store answers on open when the database does not hold
//! what it expects.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use idem_core::Store;
use idem_postgres::{Error, Migration, PostgresOptions, PostgresStore};
use idem_test_support::require;
use sqlx::{AssertSqlSafe, PgPool};

use common::{TestSchema, address};

async fn open(pool: &PgPool, options: PostgresOptions) -> Result<PostgresStore, Error> {
    PostgresStore::open(pool.clone(), options).await
}

async fn run(pool: &PgPool, sql: String) {
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(pool)
        .await
        .expect("test setup statement");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opening_before_migrating_says_to_migrate() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let pool = schema.pool().await;
    let table = format!(r#""{}"."idem_records""#, schema.name);

    // No schema at all.
    let error = open(&pool, schema.options()).await.unwrap_err();
    assert!(
        matches!(&error, Error::NotMigrated { table: t, url: None } if *t == table),
        "{error:?}"
    );
    assert!(error.to_string().contains("idem migrate"), "{error}");
    assert_eq!(
        error.to_string(),
        format!(
            "the idem table {table} has not been created: run `idem migrate` or \
             `PostgresStore::migrate` first"
        )
    );

    // The schema exists, the table does not.
    run(&pool, format!(r#"CREATE SCHEMA "{}""#, schema.name)).await;
    let error = open(&pool, schema.options()).await.unwrap_err();
    assert!(matches!(error, Error::NotMigrated { .. }), "{error:?}");

    assert_eq!(
        PostgresStore::migrate(&pool, &schema.options())
            .await
            .unwrap(),
        Migration::Created
    );
    assert_eq!(
        PostgresStore::migrate(&pool, &schema.options())
            .await
            .unwrap(),
        Migration::UpToDate
    );
    let store = open(&pool, schema.options()).await.unwrap();
    assert_eq!(store.get(&address("k")).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrating_is_idempotent_and_safe_from_several_processes_at_once() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let pools = [
        schema.pool().await,
        schema.pool().await,
        schema.pool().await,
    ];
    let options = schema.options();
    let runs: Vec<_> = pools
        .iter()
        .map(|pool| {
            let (pool, options) = (pool.clone(), options.clone());
            tokio::spawn(async move { PostgresStore::migrate(&pool, &options).await })
        })
        .collect();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    PostgresStore::migrate(&pools[0], &options).await.unwrap();
    let applied: Vec<(i64, bool)> = sqlx::query_as(AssertSqlSafe(format!(
        r#"SELECT version, success FROM "{}"."idem_records_migrations""#,
        schema.name
    )))
    .fetch_all(&pools[0])
    .await
    .unwrap();
    assert_eq!(
        applied,
        [(1, true), (2, true), (3, true), (4, true), (5, true)]
    );
    open(&pools[1], options).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_schema_or_table_is_not_migrated() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let pool = schema.pool().await;
    PostgresStore::migrate(&pool, &schema.options())
        .await
        .unwrap();

    let other_table = schema.options().table("payment_keys".parse().unwrap());
    let error = open(&pool, other_table).await.unwrap_err();
    assert!(
        matches!(&error, Error::NotMigrated { table, .. } if table.ends_with(r#"."payment_keys""#)),
        "{error:?}"
    );

    let other_schema = TestSchema::new(&url);
    let error = open(&pool, other_schema.options()).await.unwrap_err();
    assert!(matches!(error, Error::NotMigrated { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_tables_in_one_schema_migrate_independently() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let pool = schema.pool().await;
    let first = schema.options();
    let second = schema.options().table("other_keys".parse().unwrap());
    PostgresStore::migrate(&pool, &first).await.unwrap();
    PostgresStore::migrate(&pool, &second).await.unwrap();
    let (a, b) = (
        open(&pool, first).await.unwrap(),
        open(&pool, second).await.unwrap(),
    );
    assert_ne!(a.channel(), b.channel());
    common::acquired(&a, &address("k")).await;
    assert_eq!(b.get(&address("k")).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_changed_column_is_named() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let pool = schema.pool().await;
    PostgresStore::migrate(&pool, &schema.options())
        .await
        .unwrap();
    run(
        &pool,
        format!(
            r#"ALTER TABLE "{}".idem_records ALTER COLUMN token TYPE integer"#,
            schema.name
        ),
    )
    .await;
    let error = open(&pool, schema.options()).await.unwrap_err();
    match error {
        Error::UnexpectedColumn {
            column,
            expected,
            found,
            ..
        } => {
            assert_eq!(
                (column, expected, found.as_deref()),
                ("token", "bigint", Some("integer"))
            );
        }
        other => panic!("expected UnexpectedColumn, got {other:?}"),
    }

    run(
        &pool,
        format!(
            r#"ALTER TABLE "{}".idem_records DROP COLUMN response"#,
            schema.name
        ),
    )
    .await;
    run(
        &pool,
        format!(
            r#"ALTER TABLE "{}".idem_records ALTER COLUMN token TYPE bigint"#,
            schema.name
        ),
    )
    .await;
    let error = open(&pool, schema.options()).await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::UnexpectedColumn {
                column: "response",
                found: None,
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrations_from_a_newer_or_edited_build_are_refused() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let pool = schema.pool().await;
    let options = schema.options();
    PostgresStore::migrate(&pool, &options).await.unwrap();
    let migrations = format!(r#""{}"."idem_records_migrations""#, schema.name);

    run(
        &pool,
        format!(r#"UPDATE {migrations} SET checksum = '\x00' WHERE version = 1"#),
    )
    .await;
    let error = open(&pool, options.clone()).await.unwrap_err();
    assert!(
        matches!(error, Error::ChangedMigration { version: 1, .. }),
        "{error:?}"
    );
    let error = PostgresStore::migrate(&pool, &options).await.unwrap_err();
    assert!(matches!(error, Error::Migrate(_)), "{error:?}");

    run(
        &pool,
        format!(
            r#"INSERT INTO {migrations} (version, description, success, checksum, execution_time)
               VALUES (99, 'from a newer idem', true, '\x00', 0)"#
        ),
    )
    .await;
    let error = open(&pool, options).await.unwrap_err();
    // Version 1 is checked first.
    assert!(
        matches!(error, Error::ChangedMigration { version: 1, .. }),
        "{error:?}"
    );
    run(
        &pool,
        format!(r#"DELETE FROM {migrations} WHERE version = 1"#),
    )
    .await;
    let error = open(&pool, schema.options()).await.unwrap_err();
    assert!(
        matches!(error, Error::UnknownMigration { version: 99, .. }),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_of_the_first_schema_are_converted_to_key_digests_and_replay() {
    use idem_core::{Acquisition, Fingerprint, Outcome, Policy, StoredResponse};
    use sha2::{Digest, Sha256};
    use sqlx::{
        SqlSafeStr,
        migrate::{Migration, MigrationType, Migrator},
    };

    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let pool = schema.pool().await;
    // The first schema, as a build before migration 2 created it.
    let first = include_str!("../migrations/0001_idem_records.sql")
        .replace("{schema}", &schema.name)
        .replace("{table}", "idem_records");
    let mut migrator = Migrator::with_migrations(vec![Migration::new(
        1,
        "idem records".into(),
        MigrationType::Simple,
        AssertSqlSafe(first).into_sql_str(),
        false,
    )]);
    migrator.dangerous_set_table_name(format!(r#""{}"."idem_records_migrations""#, schema.name));
    migrator.create_schema(format!(r#""{}""#, schema.name));
    migrator.run(&pool).await.unwrap();
    let error = open(&pool, schema.options()).await.unwrap_err();
    assert!(
        matches!(error, Error::MigrationPending { version: 2, .. }),
        "{error:?}"
    );

    // A completed record as the first schema kept it: the key in clear.
    let response = Outcome::from(StoredResponse::new(201).body("converted"));
    let address = address("legacy-key");
    sqlx::query(AssertSqlSafe(format!(
        r#"INSERT INTO "{}".idem_records
               (scope, key, fingerprint, state, token, created_at, completed_at, expires_at, response)
           VALUES ($1, $2, $3, 'completed', 1, now(), now(), now() + interval '1 hour', $4)"#,
        schema.name
    )))
    .bind(address.scope.as_bytes().as_slice())
    .bind(address.key.as_str())
    .bind([7u8; 32].as_slice())
    .bind(response.encode())
    .execute(&pool)
    .await
    .unwrap();

    assert_eq!(
        PostgresStore::migrate(&pool, &schema.options())
            .await
            .unwrap(),
        idem_postgres::Migration::Applied { from: 2 }
    );
    let keys: Vec<(Vec<u8>,)> = sqlx::query_as(AssertSqlSafe(format!(
        r#"SELECT key FROM "{}".idem_records"#,
        schema.name
    )))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(keys, [(Sha256::digest(b"legacy-key").to_vec(),)]);

    let store = open(&pool, schema.options()).await.unwrap();
    let replay = store
        .acquire(
            &address,
            &Fingerprint::from_bytes([7; 32]),
            (&Policy::default()).into(),
        )
        .await
        .unwrap();
    assert_eq!(replay, Acquisition::Completed(response));
    assert!(store.forget(&address).await.unwrap());
}
