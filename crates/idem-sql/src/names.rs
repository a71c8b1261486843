//! [`SchemaName`], [`TableName`] and [`ColumnName`]: where a table lives and what it holds, as
//! validated SQL identifiers.

use std::{borrow::Cow, fmt, str::FromStr};

/// PostgreSQL keeps identifiers up to this many bytes (`NAMEDATALEN - 1`) and silently truncates
/// longer ones.
const MAX_IDENTIFIER: usize = 63;
/// The longest suffix added to a table's name for its other objects (`<table>_migrations`,
/// `<table>_expires_at`, `<table>_processed`, `<table>_seq`), which must fit in an identifier
/// too.
const LONGEST_SUFFIX: usize = "_migrations".len();

/// Why a name is not a valid schema or table name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidName {
    /// The name is empty or too long.
    #[error("a {kind} name is 1 to {max} bytes long; this one has {len}")]
    Length {
        /// `"schema"`, `"table"` or `"column"`.
        kind: &'static str,
        /// The longest name allowed.
        max: usize,
        /// The length given.
        len: usize,
    },
    /// A character other than a lower-case ASCII letter, a digit or `_`, or a leading digit.
    #[error(
        "a {kind} name has lower-case ASCII letters, digits and `_` only, and does not start with \
         a digit; {character:?} at byte {position} is not allowed"
    )]
    Character {
        /// `"schema"`, `"table"` or `"column"`.
        kind: &'static str,
        /// The offending character.
        character: char,
        /// Its byte offset.
        position: usize,
    },
    /// A schema name starting with `pg_`, which PostgreSQL reserves.
    #[error("schema names starting with `pg_` are reserved by PostgreSQL")]
    Reserved,
}

/// What is wrong with a name, found in a `const fn` so that names written in the code are checked
/// at compile time.
enum Problem {
    Length,
    /// The byte offset of the first character not allowed. Every allowed character is ASCII, so
    /// it starts a character.
    Character(usize),
    Reserved,
}

/// The identifier rules. Upper case is refused rather than folded: the names are always quoted
/// in SQL, and a quoted `Idem` is not the `idem` an operator would type.
const fn problem(name: &str, max: usize, schema: bool) -> Option<Problem> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > max {
        return Some(Problem::Length);
    }
    let mut position = 0;
    while position < bytes.len() {
        let allowed = match bytes[position] {
            b'a'..=b'z' | b'_' => true,
            b'0'..=b'9' => position > 0,
            _ => false,
        };
        if !allowed {
            return Some(Problem::Character(position));
        }
        position += 1;
    }
    if schema && bytes.len() >= 3 && bytes[0] == b'p' && bytes[1] == b'g' && bytes[2] == b'_' {
        return Some(Problem::Reserved);
    }
    None
}

fn validate(kind: &'static str, name: &str, max: usize, schema: bool) -> Result<(), InvalidName> {
    match problem(name, max, schema) {
        None => Ok(()),
        Some(Problem::Length) => Err(InvalidName::Length {
            kind,
            max,
            len: name.len(),
        }),
        Some(Problem::Character(position)) => Err(InvalidName::Character {
            kind,
            character: name[position..]
                .chars()
                .next()
                .expect("a character starts here"),
            position,
        }),
        Some(Problem::Reserved) => Err(InvalidName::Reserved),
    }
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $max:expr, $schema:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash)]
        pub struct $name(Cow<'static, str>);

        impl $name {
            /// A name written in the code, checked at compile time when used in a `const`.
            ///
            /// # Panics
            ///
            /// When `name` is not valid.
            pub const fn from_static(name: &'static str) -> Self {
                if problem(name, $max, $schema).is_some() {
                    panic!(concat!("not a valid ", $kind, " name"));
                }
                Self(Cow::Borrowed(name))
            }

            /// The name, unquoted.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidName;

            fn try_from(name: &str) -> Result<Self, InvalidName> {
                validate($kind, name, $max, $schema)?;
                Ok(Self(Cow::Owned(name.to_owned())))
            }
        }

        impl FromStr for $name {
            type Err = InvalidName;

            fn from_str(name: &str) -> Result<Self, InvalidName> {
                Self::try_from(name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }
    };
}

identifier!(
    /// The schema that holds a table: 1 to 63 bytes of lower-case ASCII letters, digits and `_`,
    /// not starting with a digit nor with `pg_`. On SQLite, the name of an attached database.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_sql::{InvalidName, SchemaName};
    ///
    /// let schema: SchemaName = "billing".parse()?;
    /// assert_eq!(schema.as_str(), "billing");
    /// assert!("Billing".parse::<SchemaName>().is_err());
    /// assert_eq!("pg_idem".parse::<SchemaName>(), Err(InvalidName::Reserved));
    /// const PUBLIC: SchemaName = SchemaName::from_static("public");
    /// assert_eq!(PUBLIC, "public".parse()?);
    /// # Ok::<(), InvalidName>(())
    /// ```
    SchemaName,
    "schema",
    MAX_IDENTIFIER,
    true
);

identifier!(
    /// A table: 1 to 52 bytes of lower-case ASCII letters, digits and `_`, not starting with a
    /// digit, so that the names derived from it (`<table>_migrations`, its sequences and
    /// indexes) fit PostgreSQL's 63 bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_sql::TableName;
    ///
    /// let table: TableName = "payment_keys".parse()?;
    /// assert_eq!(table.to_string(), "payment_keys");
    /// assert!(r#"keys"; DROP TABLE x"#.parse::<TableName>().is_err());
    /// # Ok::<(), idem_sql::InvalidName>(())
    /// ```
    TableName,
    "table",
    MAX_IDENTIFIER - LONGEST_SUFFIX,
    false
);

identifier!(
    /// A column: 1 to 63 bytes of lower-case ASCII letters, digits and `_`, not starting with a
    /// digit. Always quoted in SQL, so a name that is also a keyword (`state`, `order`) is fine.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_sql::ColumnName;
    ///
    /// let column: ColumnName = "status".parse()?;
    /// assert_eq!(column.as_str(), "status");
    /// assert!(r#"status" = 'x'; --"#.parse::<ColumnName>().is_err());
    /// # Ok::<(), idem_sql::InvalidName>(())
    /// ```
    ColumnName,
    "column",
    MAX_IDENTIFIER,
    false
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifier_rules_are_enforced() {
        assert_eq!("_a1".parse::<TableName>().unwrap().as_str(), "_a1");
        assert_eq!(
            "1a".parse::<TableName>(),
            Err(InvalidName::Character {
                kind: "table",
                character: '1',
                position: 0
            })
        );
        assert_eq!(
            "a-b".parse::<SchemaName>(),
            Err(InvalidName::Character {
                kind: "schema",
                character: '-',
                position: 1
            })
        );
        assert_eq!(
            "é".parse::<SchemaName>(),
            Err(InvalidName::Character {
                kind: "schema",
                character: 'é',
                position: 0
            })
        );
        assert_eq!(
            "aé".parse::<TableName>(),
            Err(InvalidName::Character {
                kind: "table",
                character: 'é',
                position: 1
            })
        );
        assert!(matches!(
            "a\"b".parse::<TableName>(),
            Err(InvalidName::Character { character: '"', .. })
        ));
    }

    #[test]
    fn lengths_leave_room_for_derived_names() {
        let schema = "s".repeat(63);
        assert_eq!(
            SchemaName::try_from(schema.as_str()).unwrap().as_str(),
            schema
        );
        assert_eq!(
            SchemaName::try_from("s".repeat(64).as_str()),
            Err(InvalidName::Length {
                kind: "schema",
                max: 63,
                len: 64
            })
        );
        let longest = "t".repeat(52);
        assert_eq!(
            TableName::try_from(longest.as_str()).unwrap().as_str(),
            longest
        );
        assert_eq!(format!("{longest}_migrations").len(), 63);
        assert!(matches!(
            TableName::try_from("t".repeat(53).as_str()),
            Err(InvalidName::Length { max: 52, .. })
        ));
        assert!(matches!(
            TableName::try_from(""),
            Err(InvalidName::Length { len: 0, .. })
        ));
    }

    #[test]
    fn only_schemas_are_reserved() {
        assert_eq!(
            "pg_catalog".parse::<SchemaName>(),
            Err(InvalidName::Reserved)
        );
        assert_eq!("pg_keys".parse::<TableName>().unwrap().as_str(), "pg_keys");
        assert_eq!("pg".parse::<SchemaName>().unwrap().as_str(), "pg");
    }

    #[test]
    fn static_names_equal_parsed_ones() {
        const TABLE: TableName = TableName::from_static("idem_records");
        assert_eq!(TABLE, "idem_records".parse().unwrap());
        assert_eq!(format!("{TABLE:?}"), r#"TableName("idem_records")"#);
    }

    #[test]
    #[should_panic(expected = "not a valid schema name")]
    fn an_invalid_static_name_panics() {
        let _ = SchemaName::from_static("pg_catalog");
    }
}
