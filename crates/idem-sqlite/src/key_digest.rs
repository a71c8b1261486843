//! The digest of an idempotency key that the table keeps instead of the key, and the conversion
//! of the records that migration 0002 set aside.

use idem_core::IdempotencyKey;
use sha2::{Digest, Sha256};
use sqlx::SqliteConnection;

/// How many records the conversion reads at a time.
const BATCH: i64 = 500;

/// SHA-256 of the key's bytes: what the `key` column holds.
pub(crate) fn key_digest(key: &IdempotencyKey) -> [u8; 32] {
    Sha256::digest(key.as_str().as_bytes()).into()
}

/// Moves the records of the first schema, set aside by migration 0002 in `idem_records_0001`,
/// into `idem_records` under their keys' digests, in batches, then drops that table. Runs in the
/// transaction that applied the migration, so a file is converted whole or not at all.
pub(crate) async fn convert_first_schema(
    connection: &mut SqliteConnection,
) -> Result<u64, sqlx::Error> {
    let present: bool = sqlx::query_scalar(include_str!("../sql/legacy_table.sql"))
        .fetch_one(&mut *connection)
        .await?;
    if !present {
        return Ok(0);
    }
    let mut converted = 0;
    loop {
        let batch: Vec<(i64, String)> = sqlx::query_as(include_str!("../sql/convert_pending.sql"))
            .bind(BATCH)
            .fetch_all(&mut *connection)
            .await?;
        for (rowid, key) in &batch {
            // A key stored by the first schema was validated when it was written; hash its text
            // as it is, exactly as `key_digest` hashes a parsed key.
            let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
            sqlx::query(include_str!("../sql/convert_move.sql"))
                .bind(rowid)
                .bind(digest.as_slice())
                .execute(&mut *connection)
                .await?;
            sqlx::query(include_str!("../sql/convert_delete.sql"))
                .bind(rowid)
                .execute(&mut *connection)
                .await?;
        }
        converted += batch.len() as u64;
        if (batch.len() as i64) < BATCH {
            break;
        }
    }
    sqlx::query("DROP TABLE idem_records_0001")
        .execute(&mut *connection)
        .await?;
    Ok(converted)
}
