//! [`SqliteOptions::from_url`]: `sqlite://PATH`.

use std::str::FromStr;

use idem_core::store_url::InvalidStoreUrl;

use crate::SqliteOptions;

impl SqliteOptions {
    /// `sqlite://PATH` (relative to the working directory) or `sqlite:///ABSOLUTE/PATH`: the
    /// file, created if missing, with the default options.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::path::Path;
    /// use idem_sqlite::SqliteOptions;
    ///
    /// let options = SqliteOptions::from_url("sqlite:///var/lib/idem.db")?;
    /// assert_eq!(options.path(), Path::new("/var/lib/idem.db"));
    /// assert!(SqliteOptions::from_url("sqlite://idem.db?mode=ro").is_err());
    /// # Ok::<(), idem_core::store_url::InvalidStoreUrl>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, InvalidStoreUrl> {
        let Some(path) = url.strip_prefix("sqlite://") else {
            return Err(InvalidStoreUrl::new(url, "expected sqlite://PATH"));
        };
        if path.is_empty() {
            return Err(InvalidStoreUrl::new(url, "no file path after sqlite://"));
        }
        if path.contains(['?', '#']) {
            return Err(InvalidStoreUrl::new(
                url,
                "sqlite:// takes a file path, without query or fragment",
            ));
        }
        Ok(Self::new(path))
    }
}

impl FromStr for SqliteOptions {
    type Err = InvalidStoreUrl;

    /// [`SqliteOptions::from_url`].
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Self::from_url(url)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_path_follows_the_scheme() {
        for (url, path) in [
            ("sqlite://idem.db", "idem.db"),
            ("sqlite:///var/lib/idem.db", "/var/lib/idem.db"),
            ("sqlite://./a/b.db", "./a/b.db"),
        ] {
            assert_eq!(
                SqliteOptions::from_url(url).unwrap().path(),
                Path::new(path)
            );
        }
    }

    #[test]
    fn bad_urls_are_explained_in_one_line() {
        let error = |url: &str| SqliteOptions::from_url(url).unwrap_err().to_string();
        assert_eq!(
            error("sqlite://"),
            "invalid store URL `sqlite://`: no file path after sqlite://"
        );
        assert_eq!(
            error("sqlite://idem.db?mode=ro"),
            "invalid store URL `sqlite://idem.db?mode=ro`: sqlite:// takes a file path, without \
             query or fragment"
        );
        assert_eq!(
            error("idem.db"),
            "invalid store URL `idem.db`: expected sqlite://PATH"
        );
    }
}
