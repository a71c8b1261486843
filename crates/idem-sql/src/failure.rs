//! [`Failure`]: what a database error means for its caller, by SQLSTATE class or SQLite result
//! code, never by message text.

/// What a database error means: whether trying again may help, or what is wrong.
///
/// # Examples
///
/// ```
/// use idem_sql::Failure;
///
/// let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
/// assert_eq!(Failure::of(&io), Failure::Unreachable);
/// assert!(Failure::of(&io).is_transient());
/// assert_eq!(Failure::of(&sqlx::Error::Decode("bad".into())), Failure::Corrupted);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Failure {
    /// The database could not be reached or is not serving: a connection lost or refused, the
    /// pool empty or closed, the server shutting down or out of resources, a statement timeout
    /// (PostgreSQL classes 08, 53, 57; MySQL's lock wait and statement timeouts, too many
    /// connections, a shutdown). Transient.
    Unreachable,
    /// The transaction lost a race: a serialization failure or a deadlock (SQLSTATE class 40),
    /// or another connection holds the lock (SQLite busy or locked). Transient: run the
    /// transaction again.
    Conflict,
    /// The server refused the statement, or a row has not the shape the client expects: a
    /// table, column, function or schema missing, a privilege lacking, authentication
    /// (PostgreSQL classes 42, 3F, 3D, 28, 0A). The database is not set up as the code expects.
    Refused,
    /// Data the server cannot store or read back (a data exception, a constraint violated, a
    /// corrupted page or file), or a value the client cannot decode (PostgreSQL classes 22, 23,
    /// codes XX001 and XX002; SQLite corrupt and not-a-database).
    Corrupted,
    /// Anything else: a read-only replica, an internal error, a TLS failure.
    Other,
}

impl Failure {
    /// Classifies `error`.
    pub fn of(error: &sqlx::Error) -> Self {
        match error {
            sqlx::Error::Database(db) => match db.code() {
                Some(code) if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() => {
                    of_sqlite(&code)
                }
                #[cfg(feature = "mysql")]
                Some(code) => match db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                    Some(mysql) => of_mysql(mysql.number(), &code),
                    None => of_sqlstate(&code),
                },
                #[cfg(not(feature = "mysql"))]
                Some(code) => of_sqlstate(&code),
                None => Self::Other,
            },
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => Self::Unreachable,
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => Self::Corrupted,
            sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::TypeNotFound { .. }
            | sqlx::Error::Configuration(_) => Self::Refused,
            _ => Self::Other,
        }
    }

    /// Whether trying again may succeed: [`Unreachable`](Self::Unreachable) or
    /// [`Conflict`](Self::Conflict).
    pub fn is_transient(self) -> bool {
        matches!(self, Self::Unreachable | Self::Conflict)
    }
}

/// The primary part of SQLite's extended result code of `error`, if it is SQLite's.
pub fn sqlite_code(error: &sqlx::Error) -> Option<i32> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    db.try_downcast_ref::<sqlx::sqlite::SqliteError>()?;
    let extended: i32 = db.code()?.parse().ok()?;
    Some(extended & 0xff)
}

/// Classes from PostgreSQL's appendix A, "Error Codes".
fn of_sqlstate(code: &str) -> Failure {
    match code.get(..2) {
        Some("08" | "53" | "57") => Failure::Unreachable,
        Some("40") => Failure::Conflict,
        // Syntax error or access rule violation; invalid schema, catalog or authorization;
        // feature not supported.
        Some("42" | "3F" | "3D" | "28" | "0A") => Failure::Refused,
        // Data exception; integrity constraint violation; internal error (data or index corrupted).
        Some("22" | "23") => Failure::Corrupted,
        Some("XX") if matches!(code, "XX001" | "XX002") => Failure::Corrupted,
        _ => Failure::Other,
    }
}

/// MySQL's and MariaDB's error numbers where their SQLSTATE is the catch-all `HY000`, then the
/// SQLSTATE's class.
#[cfg(feature = "mysql")]
fn of_mysql(number: u16, sqlstate: &str) -> Failure {
    // ER_LOCK_WAIT_TIMEOUT, ER_QUERY_TIMEOUT (MySQL's max_execution_time), ER_STATEMENT_TIMEOUT
    // (MariaDB's max_statement_time), ER_QUERY_INTERRUPTED, ER_SERVER_SHUTDOWN,
    // ER_CON_COUNT_ERROR, ER_OPTION_PREVENTS_STATEMENT (a read-only server).
    match number {
        1205 | 3024 | 1969 | 1317 | 1053 | 1040 => Failure::Unreachable,
        1290 | 1836 => Failure::Other,
        // ER_LOCK_DEADLOCK (SQLSTATE 40001 too).
        1213 => Failure::Conflict,
        _ => of_sqlstate(sqlstate),
    }
}

/// SQLite's extended result codes, by their primary part.
fn of_sqlite(code: &str) -> Failure {
    const BUSY: i32 = 5;
    const LOCKED: i32 = 6;
    const CORRUPT: i32 = 11;
    const NOTADB: i32 = 26;
    match code.parse::<i32>().map(|code| code & 0xff) {
        Ok(BUSY | LOCKED) => Failure::Conflict,
        Ok(CORRUPT | NOTADB) => Failure::Corrupted,
        _ => Failure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_are_classified_by_class() {
        for (code, failure) in [
            ("42P01", Failure::Refused),     // undefined table
            ("42703", Failure::Refused),     // undefined column
            ("42501", Failure::Refused),     // insufficient privilege
            ("3F000", Failure::Refused),     // invalid schema name
            ("28P01", Failure::Refused),     // invalid password
            ("22P02", Failure::Corrupted),   // invalid text representation
            ("23514", Failure::Corrupted),   // check violation
            ("23505", Failure::Corrupted),   // unique violation
            ("XX001", Failure::Corrupted),   // data corrupted
            ("XX000", Failure::Other),       // internal error
            ("08006", Failure::Unreachable), // connection failure
            ("57P01", Failure::Unreachable), // admin shutdown
            ("57014", Failure::Unreachable), // query canceled (statement timeout)
            ("53300", Failure::Unreachable), // too many connections
            ("40001", Failure::Conflict),    // serialization failure
            ("40P01", Failure::Conflict),    // deadlock detected
            ("25006", Failure::Other),       // read-only transaction (a standby)
        ] {
            assert_eq!(of_sqlstate(code), failure, "{code}");
        }
    }

    #[test]
    fn transient_sqlstates_are_the_connection_resource_and_rollback_classes() {
        for (code, transient) in [
            ("40001", true),  // serialization failure
            ("40P01", true),  // deadlock detected
            ("08006", true),  // connection failure
            ("57P01", true),  // admin shutdown
            ("57014", true),  // statement timeout
            ("53300", true),  // too many connections
            ("42P01", false), // undefined table
            ("23505", false), // unique violation
            ("22P02", false), // invalid text representation
        ] {
            assert_eq!(of_sqlstate(code).is_transient(), transient, "{code}");
        }
    }

    #[test]
    fn sqlite_codes_are_classified_by_their_primary_part() {
        for (code, failure) in [
            ("5", Failure::Conflict),   // SQLITE_BUSY
            ("517", Failure::Conflict), // SQLITE_BUSY_SNAPSHOT
            ("6", Failure::Conflict),   // SQLITE_LOCKED
            ("11", Failure::Corrupted), // SQLITE_CORRUPT
            ("26", Failure::Corrupted), // SQLITE_NOTADB
            ("2067", Failure::Other),   // SQLITE_CONSTRAINT_UNIQUE
        ] {
            assert_eq!(of_sqlite(code), failure, "{code}");
        }
    }

    #[test]
    fn transport_failures_are_transient_and_decoding_is_corruption() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(Failure::of(&io), Failure::Unreachable);
        assert_eq!(
            Failure::of(&sqlx::Error::PoolTimedOut),
            Failure::Unreachable
        );
        assert_eq!(Failure::of(&sqlx::Error::RowNotFound), Failure::Other);
        assert_eq!(
            Failure::of(&sqlx::Error::ColumnNotFound("plan".into())),
            Failure::Refused
        );
        assert_eq!(sqlite_code(&io), None);
    }
}
