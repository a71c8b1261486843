//! The read behind [`Store::read_parts`](idem_core::Store::read_parts), on a reader connection.
//!
//! The parts of one execution lie together in `idem_parts`'s primary key, `(scope, key, token,
//! idx)`: a read is one walk along it from the first index asked for, of at most
//! [`READ_AT_MOST`] parts.

use bytes::Bytes;
use idem_core::{FencingToken, StoreError, Timestamp};
use rusqlite::Connection;

use crate::{error::sqlite_error, row::sql_int, writes::Target};

/// The most parts one read returns, however small they are.
pub(crate) const READ_AT_MOST: i64 = 256;

/// The live parts of the execution `token` at `target` from index `from` on, in order and with
/// no gap, as many as fit in `max_bytes` and one at least, `now` by the store's clock.
pub(crate) fn read(
    reader: &Connection,
    target: &Target,
    token: FencingToken,
    from: u32,
    max_bytes: usize,
    now: Timestamp,
) -> Result<Vec<Bytes>, StoreError> {
    let mut statement = reader
        .prepare_cached(include_str!("../sql/read_parts.sql"))
        .map_err(sqlite_error)?;
    let params = (
        target.scope.as_slice(),
        target.key.as_slice(),
        sql_int(token.get()),
        sql_int(now.as_millis()),
        i64::from(from),
        READ_AT_MOST,
    );
    let mut rows = statement.query(params).map_err(sqlite_error)?;
    let (mut parts, mut size, mut next) = (Vec::new(), 0_usize, i64::from(from));
    while let Some(row) = rows.next().map_err(sqlite_error)? {
        // A gap: a part that expired (the ones after it are kept longer once the record was
        // renewed), or the first asked for is not there.
        if row.get::<_, i64>(0).map_err(sqlite_error)? != next {
            break;
        }
        let part = row
            .get_ref(1)
            .map_err(sqlite_error)?
            .as_blob()
            .map_err(StoreError::corrupted)?;
        size = size.saturating_add(part.len());
        if !parts.is_empty() && size > max_bytes {
            break;
        }
        parts.push(Bytes::copy_from_slice(part));
        next += 1;
    }
    Ok(parts)
}
