//! The parts of streamed responses ([`Store::append_part`](idem_core::Store::append_part)) in
//! `<table>_parts`: the append's round trip, and what its rows answer.
//!
//! An append is one transaction in one round trip, on the store's connections (not a batch of
//! the group commit: appends of one execution come one after the other):
//!
//! 1. the record is read and locked (`FOR UPDATE`), whatever it holds: every append at the
//!    address takes this lock first, and so does every write that ends the holder's hold
//!    (completion, release, takeover, `forget`), so that the rest of the transaction decides on
//!    the record as it stands until the commit;
//! 2. the next index of the token's parts is read (`@idem_next`, one past the highest stored),
//!    after the lock is held: a statement of its own, whose snapshot (`READ COMMITTED`) is taken
//!    then, so it sees the parts that an append that held the lock before committed;
//! 3. the part is inserted, with the record's `expires_at`, only if the record is live,
//!    processing, held by the token, and the index is the next one;
//! 4. `@idem_next` is returned.
//!
//! Every decision is on the server's clock (`@idem_now`, or the test clock's), and values are
//! literals ([`Batch`]).

use idem_core::{Address, FencingToken, StoreError};
use sqlx::mysql::MySqlRow;

use crate::{
    key_digest::key_digest,
    row::{Columns, sql_token},
    sql::{Batch, BatchForm, Sql},
    writes::BY_ADDRESS,
};

/// About how many bytes an append's text has besides its part.
const APPEND_TEXT: usize = 1_200;

/// The text of the round trip that appends `part` as part `index` of the execution `token` at
/// `address`, at `now` (`None`: the server's clock), to `sql`'s parts table, fenced by the
/// record in its records table.
pub(crate) fn append_text(
    form: BatchForm,
    now: Option<i64>,
    sql: &Sql,
    address: &Address,
    token: FencingToken,
    index: u32,
    part: &[u8],
) -> String {
    let (table, parts) = (&sql.table, &sql.parts);
    let key = key_digest(&address.key);
    let token = sql_token(token);
    let record = |batch: &mut Batch| {
        batch
            .push(" WHERE scope = ")
            .bytes(address.scope.as_bytes())
            .push(" AND key_digest = ")
            .bytes(&key);
    };
    let mut batch = Batch::new(form);
    batch.reserve(APPEND_TEXT + 2 * part.len());
    batch.statement("START TRANSACTION").now(now);
    batch
        .push("SELECT token = ")
        .number(token)
        .push(" AND state = 'processing' AND @idem_now < expires_at AS held FROM ")
        .push(table)
        .push(BY_ADDRESS);
    record(&mut batch);
    batch.statement(" FOR UPDATE");
    batch
        .push("SET @idem_next = (SELECT COALESCE(MAX(idx) + 1, 0) FROM ")
        .push(parts);
    record(&mut batch);
    batch.push(" AND token = ").number(token).statement(")");
    batch
        .push("INSERT INTO ")
        .push(parts)
        .push(
            " (scope, key_digest, token, idx, part, expires_at) SELECT scope, key_digest, token, ",
        )
        .number(i64::from(index))
        .push(", ")
        .bytes(part)
        .push(", expires_at FROM ")
        .push(table)
        .push(BY_ADDRESS);
    record(&mut batch);
    batch
        .push(" AND token = ")
        .number(token)
        .push(" AND state = 'processing' AND @idem_now < expires_at AND @idem_next = ")
        .number(i64::from(index))
        .statement("");
    batch
        .statement("SELECT CAST(@idem_next AS SIGNED) AS next_idx")
        .statement("COMMIT");
    batch.finish()
}

/// The answer of an append of part `index` from the rows of [`append_text`]: the record's row
/// (`held`; none when there is no record), then `next_idx`.
pub(crate) fn appended(rows: &[MySqlRow], table: &str, index: u32) -> Result<(), StoreError> {
    let (next, record) = match rows {
        [next] => (next, None),
        [record, next] => (next, Some(record)),
        _ => return Err(StoreError::corrupted(crate::Error::NotReadBack)),
    };
    let held = match record {
        Some(row) => Columns { row, table }.get::<Option<i64>>("held")? == Some(1),
        None => false,
    };
    if !held {
        return Err(StoreError::LeaseLost);
    }
    let next: i64 = Columns { row: next, table }.get("next_idx")?;
    let next = u32::try_from(next).map_err(StoreError::corrupted)?;
    if index > next {
        return Err(StoreError::PartOutOfOrder { next, given: index });
    }
    // `index == next`: inserted; below: stored already, by an append whose answer was lost.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_locks_the_record_then_inserts_only_the_next_part_of_its_holder() {
        let address = Address::anonymous("k".parse().unwrap());
        let text = append_text(
            BatchForm::Statements,
            Some(1_000),
            &Sql::new(&"keys".parse().unwrap()),
            &address,
            FencingToken::new(7),
            3,
            b"\x00';",
        );
        let statements: Vec<&str> = text.split(";\n").filter(|s| !s.is_empty()).collect();
        assert_eq!(statements.len(), 7, "{text}");
        assert_eq!(statements[0], "START TRANSACTION");
        assert_eq!(statements[1], "SET @idem_now = 1000");
        assert!(
            statements[2].starts_with("SELECT token = 7 AND state = 'processing'")
                && statements[2].contains("FROM `keys` FORCE INDEX (address) WHERE scope = X'")
                && statements[2].ends_with(" FOR UPDATE"),
            "{}",
            statements[2]
        );
        assert!(
            statements[3].starts_with(
                "SET @idem_next = (SELECT COALESCE(MAX(idx) + 1, 0) FROM `keys_parts` WHERE"
            ) && statements[3].ends_with(" AND token = 7)"),
            "{}",
            statements[3]
        );
        assert!(
            statements[4].starts_with("INSERT INTO `keys_parts`")
                && statements[4].contains("SELECT scope, key_digest, token, 3, X'00273b', expires_at FROM `keys` FORCE INDEX (address)")
                && statements[4].ends_with(
                    " AND token = 7 AND state = 'processing' AND @idem_now < expires_at AND @idem_next = 3"
                ),
            "{}",
            statements[4]
        );
        assert_eq!(statements[6], "COMMIT");
    }
}
