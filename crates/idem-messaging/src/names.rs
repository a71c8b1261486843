//! [`SchemaName`] and [`TableName`]: where the inbox and the outbox live, as validated SQL
//! identifiers.

use std::{fmt, str::FromStr};

/// PostgreSQL keeps identifiers up to this many bytes (`NAMEDATALEN - 1`) and silently truncates
/// longer ones.
const MAX_IDENTIFIER: usize = 63;
/// The longest suffix added to a table's name for its other objects (`<table>_migrations`,
/// `<table>_processed`, `<table>_seq`), which must fit in an identifier too.
const LONGEST_SUFFIX: usize = "_migrations".len();

/// Why a name is not a valid schema or table name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidName {
    /// The name is empty or too long.
    #[error("a {kind} name is 1 to {max} bytes long; this one has {len}")]
    Length {
        /// `"schema"` or `"table"`.
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
        /// `"schema"` or `"table"`.
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

/// Upper case is refused rather than folded: the names are always quoted in SQL, and a quoted
/// `Inbox` is not the `inbox` an operator would type.
fn validate(kind: &'static str, name: &str, max: usize) -> Result<(), InvalidName> {
    if name.is_empty() || name.len() > max {
        return Err(InvalidName::Length {
            kind,
            max,
            len: name.len(),
        });
    }
    for (position, character) in name.char_indices() {
        let allowed = match character {
            'a'..='z' | '_' => true,
            '0'..='9' => position > 0,
            _ => false,
        };
        if !allowed {
            return Err(InvalidName::Character {
                kind,
                character,
                position,
            });
        }
    }
    Ok(())
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $max:expr, $extra:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash)]
        pub struct $name(Box<str>);

        impl $name {
            /// The name, unquoted.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// A name known to be valid.
            pub(crate) fn from_static(name: &'static str) -> Self {
                debug_assert!(Self::try_from(name).is_ok(), "{name}");
                Self(name.into())
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidName;

            fn try_from(name: &str) -> Result<Self, InvalidName> {
                validate($kind, name, $max)?;
                let extra: fn(&str) -> Result<(), InvalidName> = $extra;
                extra(name)?;
                Ok(Self(name.into()))
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
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
    };
}

identifier!(
    /// The schema that holds a table: 1 to 63 bytes of lower-case ASCII letters, digits and `_`,
    /// not starting with a digit nor with `pg_`. On SQLite, the name of an attached database
    /// (`main` by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_messaging::{InvalidName, SchemaName};
    ///
    /// let schema: SchemaName = "billing".parse()?;
    /// assert_eq!(schema.as_str(), "billing");
    /// assert!("Billing".parse::<SchemaName>().is_err());
    /// assert_eq!("pg_idem".parse::<SchemaName>(), Err(InvalidName::Reserved));
    /// # Ok::<(), InvalidName>(())
    /// ```
    SchemaName,
    "schema",
    MAX_IDENTIFIER,
    |name| {
        if name.starts_with("pg_") {
            Err(InvalidName::Reserved)
        } else {
            Ok(())
        }
    }
);

identifier!(
    /// A table of the inbox or the outbox: 1 to 52 bytes of lower-case ASCII letters, digits and
    /// `_`, not starting with a digit, so that the names derived from it (`<table>_migrations`
    /// and the indexes) fit PostgreSQL's 63 bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_messaging::TableName;
    ///
    /// let table: TableName = "payments_inbox".parse()?;
    /// assert_eq!(table.to_string(), "payments_inbox");
    /// assert!(r#"inbox"; DROP TABLE x"#.parse::<TableName>().is_err());
    /// # Ok::<(), idem_messaging::InvalidName>(())
    /// ```
    TableName,
    "table",
    MAX_IDENTIFIER - LONGEST_SUFFIX,
    |_| Ok(())
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
        assert!(matches!(
            "a\"b".parse::<TableName>(),
            Err(InvalidName::Character { character: '"', .. })
        ));
        assert_eq!(
            "pg_catalog".parse::<SchemaName>(),
            Err(InvalidName::Reserved)
        );
    }

    #[test]
    fn lengths_leave_room_for_derived_names() {
        let schema = "s".repeat(63);
        assert_eq!(
            SchemaName::try_from(schema.as_str()).unwrap().as_str(),
            schema
        );
        assert!(matches!(
            SchemaName::try_from("s".repeat(64).as_str()),
            Err(InvalidName::Length {
                max: 63,
                len: 64,
                ..
            })
        ));
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
}
