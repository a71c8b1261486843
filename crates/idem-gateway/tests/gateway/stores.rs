//! The server stores from the command line: their URLs, the one-line errors of a bad
//! configuration, `idem migrate` and `idem keys` on PostgreSQL and Redis.

use crate::{
    cli::{fails, keys_show_forget_and_purge},
    servers::{MysqlDb, PgSchema, RedisPrefix, free_port},
    support::idem,
};

const SERVE: [&str; 3] = ["serve", "--upstream", "http://127.0.0.1:9"];

fn serve(store: &str) -> Vec<&str> {
    SERVE.iter().copied().chain(["--store", store]).collect()
}

#[test]
fn server_store_urls_that_cannot_be_used_fail_with_one_line() {
    assert_eq!(
        fails(&serve("postgres://db/pay?schema=Pay"), 2),
        "error: invalid value 'postgres://db/pay?schema=Pay' for '--store <URL>': invalid store \
         URL `postgres://db/pay?schema=Pay`: `schema=Pay`: a schema name has lower-case ASCII \
         letters, digits and `_` only, and does not start with a digit; 'P' at byte 0 is not \
         allowed"
    );
    assert_eq!(
        fails(&serve("postgresql://db/pay?shema=pay"), 2),
        "error: invalid value 'postgresql://db/pay?shema=pay' for '--store <URL>': invalid \
         store URL `postgresql://db/pay?shema=pay`: unknown parameter `shema` (idem takes \
         schema, table, pool_size, batch_size, batches_in_flight, queue_size; the others go to \
         PostgreSQL's driver: sslmode, sslrootcert, sslcert, sslkey, application_name, options, \
         …)"
    );
    assert_eq!(
        fails(&serve("postgres://db/pay?batch_size=0"), 2),
        "error: invalid value 'postgres://db/pay?batch_size=0' for '--store <URL>': invalid \
         store URL `postgres://db/pay?batch_size=0`: `batch_size=0`: expected 1 or more"
    );
    assert_eq!(
        fails(&serve("redis://cache?queue_size=many"), 2),
        "error: invalid value 'redis://cache?queue_size=many' for '--store <URL>': invalid store \
         URL `redis://cache?queue_size=many`: `queue_size=many`: expected a whole number"
    );
    assert_eq!(
        fails(&serve("redis://cache?prefix=a*"), 2),
        "error: invalid value 'redis://cache?prefix=a*' for '--store <URL>': invalid store URL \
         `redis://cache?prefix=a*`: `prefix=a*`: a key prefix is 1 to 64 ASCII letters, digits, \
         '-', '_', '.' or ':'"
    );
    assert_eq!(
        fails(&serve("redis+cluster://a:7000,,b:7000"), 2),
        "error: invalid value 'redis+cluster://a:7000,,b:7000' for '--store <URL>': invalid \
         store URL `redis+cluster://a:7000,,b:7000`: expected \
         redis+cluster://HOST:PORT[,HOST:PORT…], without empty nodes"
    );
    assert_eq!(
        fails(&serve("redis://cache:6380?cacert=/etc/ca.pem"), 2),
        "error: invalid value 'redis://cache:6380?cacert=/etc/ca.pem' for '--store <URL>': \
         invalid store URL `redis://cache:6380?cacert=/etc/ca.pem`: cacert, cert and key are TLS \
         settings: use rediss:// or rediss+cluster://"
    );
}

/// A one-shot command (`idem keys`, `idem migrate`) fails at once when its store cannot be
/// reached; `idem serve` starts without it (`outage.rs`).
#[test]
fn an_unreachable_server_fails_a_command_with_one_line() {
    let port = free_port();
    let postgres = format!("postgres://postgres@127.0.0.1:{port}/test");
    assert_eq!(
        fails(&["migrate", "--store", &postgres], 1),
        format!(
            "error: cannot open the store {postgres}: cannot connect to PostgreSQL: error \
             communicating with database: Connection refused (os error 111)"
        )
    );
    let redis = format!("redis://127.0.0.1:{port}");
    assert_eq!(
        fails(&["keys", "purge", "--store", &redis], 1),
        format!(
            "error: cannot open the store {redis}: cannot connect to Redis: Connection refused \
             (os error 111)"
        )
    );
    // The cluster client logs each node it cannot reach; `keys` does not log.
    let cluster = format!("redis+cluster://127.0.0.1:{port},127.0.0.1:{port}");
    assert_eq!(
        fails(&["keys", "purge", "--store", &cluster], 1),
        format!(
            "error: cannot open the store {cluster}: cannot connect to Redis: Failed to create \
             initial connections - Io: Connection refused (os error 111)"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_needs_idem_migrate_and_a_table_of_this_build() {
    let Some(schema) = PgSchema::new() else {
        return;
    };
    let store = schema.store_url();
    let table = format!(r#""{}"."idem_records""#, schema.name);

    assert_eq!(
        fails(&serve(&store), 1),
        format!(
            "error: cannot open the store {store}: the idem table {table} has not been created: \
             run `idem migrate --store {store}` or `PostgresStore::migrate` first"
        )
    );
    assert_eq!(
        fails(&["keys", "purge", "--store", &store], 1),
        format!(
            "error: cannot open the store {store}: the idem table {table} has not been created: \
             run `idem migrate --store {store}` or `PostgresStore::migrate` first"
        )
    );

    let migrated = idem(&["migrate", "--store", &store]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    assert_eq!(
        migrated.stdout,
        format!("created the idem table {table} in {store}\n")
    );
    let again = idem(&["migrate", "--store", &store]);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(
        again.stdout,
        format!("{store}: the idem table {table} is up to date\n")
    );

    // Another table in the same schema is another store, not migrated yet.
    let other = format!("{store}&table=payment_keys");
    assert_eq!(
        fails(&serve(&other), 1),
        format!(
            "error: cannot open the store {other}: the idem table \"{}\".\"payment_keys\" has \
             not been created: run `idem migrate --store {other}` or `PostgresStore::migrate` \
             first",
            schema.name
        )
    );

    // A table migrated by a newer build, or not what this build created: neither served nor
    // migrated over.
    let migrations = format!(r#""{}"."idem_records_migrations""#, schema.name);
    schema
        .execute(&format!(
            "INSERT INTO {migrations} (version, description, success, checksum, execution_time) \
             VALUES (99, 'from a newer idem', true, '\\x00', 0)"
        ))
        .await;
    let newer = format!(
        "error: cannot open the store {store}: the idem table {table} has migration 99, which \
         this build cannot use"
    );
    assert_eq!(fails(&serve(&store), 1), newer);
    assert_eq!(fails(&["migrate", "--store", &store], 1), newer);
    schema
        .execute(&format!("DELETE FROM {migrations} WHERE version = 99"))
        .await;
    schema
        .execute(&format!("ALTER TABLE {table} ALTER COLUMN token TYPE text"))
        .await;
    let wrong = format!(
        "error: cannot open the store {store}: the column token of the idem table {table} should \
         be bigint, found text"
    );
    assert_eq!(fails(&serve(&store), 1), wrong);
    assert_eq!(fails(&["migrate", "--store", &store], 1), wrong);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_work_on_postgres() {
    let Some(schema) = PgSchema::new() else {
        return;
    };
    let store = schema.store_url();
    assert_eq!(idem(&["migrate", "--store", &store]).code, Some(0));
    keys_show_forget_and_purge(&store, "purged 1 expired records\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_needs_idem_migrate_and_a_table_of_this_build() {
    let Some(database) = MysqlDb::new().await else {
        return;
    };
    let store = database.store_url();
    let table = "`idem_records`";
    let missing = format!(
        "error: cannot open the store {store}: the idem table {table} has not been created: run \
         `idem migrate --store {store}` or `MysqlStore::migrate` first"
    );
    assert_eq!(fails(&serve(&store), 1), missing);
    assert_eq!(fails(&["keys", "purge", "--store", &store], 1), missing);

    let migrated = idem(&["migrate", "--store", &store]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    assert_eq!(
        migrated.stdout,
        format!("created the idem table {table} in {store}\n")
    );
    let again = idem(&["migrate", "--store", &store]);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(
        again.stdout,
        format!("{store}: the idem table {table} is up to date\n")
    );

    // Another table in the same database is another store, not migrated yet.
    let other = format!("{store}?table=payment_keys");
    assert_eq!(
        fails(&serve(&other), 1),
        format!(
            "error: cannot open the store {other}: the idem table `payment_keys` has not been \
             created: run `idem migrate --store {other}` or `MysqlStore::migrate` first"
        )
    );

    // A table migrated by a newer build, or not what this build created: neither served nor
    // migrated over.
    database
        .execute(
            "INSERT INTO idem_records_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES (99, 'from a newer idem', true, X'00', 0)",
        )
        .await;
    let newer = format!(
        "error: cannot open the store {store}: the idem table {table} has migration 99, which \
         this build cannot use"
    );
    assert_eq!(fails(&serve(&store), 1), newer);
    assert_eq!(fails(&["migrate", "--store", &store], 1), newer);
    database
        .execute("DELETE FROM idem_records_migrations WHERE version = 99")
        .await;
    database
        .execute("ALTER TABLE idem_records MODIFY token VARCHAR(20) NOT NULL")
        .await;
    let wrong = format!(
        "error: cannot open the store {store}: the column token of the idem table {table} should \
         be bigint, found varchar"
    );
    assert_eq!(fails(&serve(&store), 1), wrong);
    assert_eq!(fails(&["migrate", "--store", &store], 1), wrong);
    drop(database);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_work_on_mysql() {
    let Some(database) = MysqlDb::new().await else {
        return;
    };
    let store = database.store_url();
    assert_eq!(idem(&["migrate", "--store", &store]).code, Some(0));
    keys_show_forget_and_purge(&store, "purged 1 expired records\n").await;
    assert!(database.name().starts_with("idem_test_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_and_keys_work_on_redis() {
    let Some(prefix) = RedisPrefix::new() else {
        return;
    };
    let store = prefix.store_url();
    let migrated = idem(&["migrate", "--store", &store]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    assert_eq!(
        migrated.stdout,
        format!(
            "{store}: Redis keeps no schema, there is nothing to migrate (the server answers and \
             accepts the idem scripts)\n"
        )
    );
    // Redis removes expired records itself: there is never anything to purge.
    keys_show_forget_and_purge(
        &store,
        "purged 0 expired records (Redis removes expired records by itself)\n",
    )
    .await;
}
