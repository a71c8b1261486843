//! A charge made idempotent in the service's own transaction: the account's debit and the key's
//! recorded response commit together, and a retry of the same key replays the response without
//! charging again.
//!
//! ```sh
//! cargo run -p idem-mysql --example charge -- 'mysql://root@127.0.0.1:3306/test'
//! ```
//!
//! It creates the idem tables and an `accounts` table in that database if they are missing.

use idem_core::{Acquisition, Address, Fingerprint, Outcome, Policy, StoredResponse, Terms};
use idem_mysql::{MysqlOptions, MysqlStore};

/// Charges `amount` to alice under `key`, once: the debit and the completion in one
/// transaction. Returns the response, executed or replayed.
async fn charge(
    store: &MysqlStore,
    key: &str,
    amount: i64,
) -> Result<String, Box<dyn std::error::Error>> {
    let address = Address::anonymous(key.parse()?);
    let fingerprint = Fingerprint::from_bytes([amount.to_le_bytes()[0]; 32]);
    let terms = Terms::from(&Policy::default());
    // READ COMMITTED: the completion locks its record and no gap beside it (see the crate's
    // documentation).
    let mut tx = store
        .pool()
        .begin_with(idem_mysql::BEGIN_READ_COMMITTED)
        .await?;
    Ok(
        match store
            .acquire_in(&mut tx, &address, &fingerprint, terms)
            .await?
        {
            Acquisition::Acquired(lease) => {
                sqlx::query("UPDATE accounts SET balance = balance - ? WHERE id = 'alice'")
                    .bind(amount)
                    .execute(&mut *tx)
                    .await?;
                let body = format!("charged {amount}");
                let response = Outcome::from(StoredResponse::new(201).body(body.clone()));
                store
                    .complete_in(&mut tx, &address, lease.token, &response, terms.ttl)
                    .await?;
                tx.commit().await?; // the debit and the completed key, or neither
                format!("201 {body} (executed)")
            }
            Acquisition::Completed(Outcome::Response(response)) => {
                format!(
                    "{} {} (replayed)",
                    response.status,
                    String::from_utf8_lossy(&response.body)
                )
            }
            Acquisition::Completed(Outcome::Unknown) => "500 outcome unknown".to_owned(),
            Acquisition::InFlight { retry_after } => {
                format!("409 in flight, retry in {retry_after:?}")
            }
            Acquisition::Mismatch => "422 the key was used for another charge".to_owned(),
        },
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mysql://root@127.0.0.1:3306/test".to_owned());
    let options = MysqlOptions::from_url(&url)?;
    let pool = options.connect_pool().await?;
    MysqlStore::migrate(&pool, &options).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS accounts (id VARCHAR(32) PRIMARY KEY, balance BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await?;
    sqlx::query("INSERT INTO accounts (id, balance) VALUES ('alice', 100) ON DUPLICATE KEY UPDATE balance = 100")
        .execute(&pool)
        .await?;
    let store = MysqlStore::open(pool, options).await?;

    let key = format!("charge-{}", std::process::id());
    for attempt in 1..=3 {
        println!("attempt {attempt}: {}", charge(&store, &key, 10).await?);
    }
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 'alice'")
        .fetch_one(store.pool())
        .await?;
    println!("alice's balance: {balance} (100, charged once)");
    assert_eq!(balance, 90);
    store.close().await;
    Ok(())
}
