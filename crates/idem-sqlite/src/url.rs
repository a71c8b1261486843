//! [`SqliteOptions::from_url`]: `sqlite://PATH[?parameters]`.

use std::{str::FromStr, time::Duration};

use idem_core::store_url::{InvalidStoreUrl, UrlParts, count};

use crate::{SqliteOptions, Synchronous};

/// What an unknown parameter's error says is known.
const KNOWN: &str = "idem takes synchronous, pool_size, batch_size, queue_size, busy_timeout";

impl SqliteOptions {
    /// `sqlite://PATH` (relative to the working directory) or `sqlite:///ABSOLUTE/PATH`: the
    /// file, created if missing, with these optional parameters (the defaults of
    /// [`SqliteOptions::new`] otherwise):
    ///
    /// - `synchronous`: `full` (the default) or `normal`, [`synchronous`](Self::synchronous);
    /// - `pool_size`: the reader connections (default 4, [`pool_size`](Self::pool_size));
    /// - `batch_size`: the most writes one transaction holds (default 128,
    ///   [`batch_size`](Self::batch_size));
    /// - `queue_size`: the most writes waiting for the writer (default 1024,
    ///   [`queue_size`](Self::queue_size));
    /// - `busy_timeout`: how long a write waits for another process's lock, in milliseconds as
    ///   SQLite's own `busy_timeout` pragma (default 5000, [`busy_timeout`](Self::busy_timeout)).
    ///
    /// Each count is a whole number, at least 1. The path is taken as it is, up to the `?`.
    /// `batch_size` and `queue_size` were once `max_batch` and `queue`: those spellings are still
    /// read, each with a warning, and a URL that gives both spellings of one is refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::path::Path;
    /// use idem_sqlite::SqliteOptions;
    ///
    /// let options = SqliteOptions::from_url("sqlite:///var/lib/idem.db")?;
    /// assert_eq!(options.path(), Path::new("/var/lib/idem.db"));
    /// let tuned = SqliteOptions::from_url("sqlite://idem.db?batch_size=256&busy_timeout=1000")?;
    /// assert_eq!(tuned.path(), Path::new("idem.db"));
    /// let error = SqliteOptions::from_url("sqlite://idem.db?mode=ro").unwrap_err();
    /// assert!(error.to_string().contains("unknown parameter `mode`"));
    /// # Ok::<(), idem_core::store_url::InvalidStoreUrl>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, InvalidStoreUrl> {
        let Some(rest) = url.strip_prefix("sqlite://") else {
            return Err(InvalidStoreUrl::new(url, "expected sqlite://PATH"));
        };
        let path = rest.split_once('?').map_or(rest, |(path, _)| path);
        if path.is_empty() {
            return Err(InvalidStoreUrl::new(url, "no file path after sqlite://"));
        }
        let mut parts = UrlParts::split(url)?;
        let synchronous = parts.take("synchronous", Synchronous::from_str)?;
        let pool_size = parts.take("pool_size", count::<u32>)?;
        let batch_size = parts.take_renamed("batch_size", "max_batch", count::<usize>)?;
        let queue_size = parts.take_renamed("queue_size", "queue", count::<usize>)?;
        let busy_timeout = parts.take("busy_timeout", str::parse::<u64>)?;
        parts.refuse_unknown(|_| false, KNOWN)?;

        let mut options = Self::new(path);
        if let Some(synchronous) = synchronous {
            options = options.synchronous(synchronous);
        }
        if let Some(size) = pool_size {
            options = options.pool_size(size);
        }
        if let Some(writes) = batch_size {
            options = options.batch_size(writes);
        }
        if let Some(writes) = queue_size {
            options = options.queue_size(writes);
        }
        if let Some(millis) = busy_timeout {
            options = options.busy_timeout(Duration::from_millis(millis));
        }
        Ok(options)
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
    fn parameters_set_the_options() {
        let options = SqliteOptions::from_url(
            "sqlite:///var/lib/idem.db?synchronous=normal&pool_size=8&batch_size=256\
             &queue_size=4096&busy_timeout=250",
        )
        .unwrap();
        assert_eq!(options.path(), Path::new("/var/lib/idem.db"));
        assert_eq!(options.synchronous, Synchronous::Normal);
        assert_eq!(options.pool_size, 8);
        assert_eq!(options.batch_size, 256);
        assert_eq!(options.queue_size, 4096);
        assert_eq!(options.busy_timeout, Duration::from_millis(250));

        let defaults = SqliteOptions::from_url("sqlite://idem.db").unwrap();
        assert_eq!(defaults.synchronous, Synchronous::Full);
        assert_eq!(defaults.pool_size, SqliteOptions::DEFAULT_POOL_SIZE);
        assert_eq!(defaults.batch_size, SqliteOptions::DEFAULT_BATCH_SIZE);
        assert_eq!(defaults.queue_size, SqliteOptions::DEFAULT_QUEUE_SIZE);
        assert_eq!(defaults.busy_timeout, SqliteOptions::DEFAULT_BUSY_TIMEOUT);
        assert_eq!(
            SqliteOptions::from_url("sqlite://idem.db?synchronous=FULL")
                .unwrap()
                .synchronous,
            Synchronous::Full
        );
    }

    #[test]
    fn the_old_spellings_are_still_read() {
        let new = SqliteOptions::from_url("sqlite://idem.db?batch_size=256&queue_size=4096");
        let old = SqliteOptions::from_url("sqlite://idem.db?max_batch=256&queue=4096");
        let (new, old) = (new.unwrap(), old.unwrap());
        assert_eq!((new.batch_size, new.queue_size), (256, 4096));
        assert_eq!((old.batch_size, old.queue_size), (256, 4096));
        let error = |url: &str| SqliteOptions::from_url(url).unwrap_err().to_string();
        assert_eq!(
            error("sqlite://idem.db?batch_size=2&max_batch=2"),
            "invalid store URL `sqlite://idem.db?batch_size=2&max_batch=2`: `batch_size` and its \
             old spelling `max_batch` are both given: keep `batch_size`"
        );
        assert_eq!(
            error("sqlite://idem.db?queue=8&queue_size=16"),
            "invalid store URL `sqlite://idem.db?queue=8&queue_size=16`: `queue_size` and its old \
             spelling `queue` are both given: keep `queue_size`"
        );
        assert_eq!(
            error("sqlite://idem.db?max_batch=0"),
            "invalid store URL `sqlite://idem.db?max_batch=0`: `max_batch=0`: expected 1 or more"
        );
    }

    #[test]
    #[allow(deprecated)]
    fn the_old_names_still_set_the_options() {
        let options = SqliteOptions::new("idem.db").max_batch(7).queue(9);
        assert_eq!((options.batch_size, options.queue_size), (7, 9));
        assert_eq!(
            (
                SqliteOptions::DEFAULT_MAX_BATCH,
                SqliteOptions::DEFAULT_QUEUE
            ),
            (
                SqliteOptions::DEFAULT_BATCH_SIZE,
                SqliteOptions::DEFAULT_QUEUE_SIZE
            )
        );
    }

    #[test]
    fn bad_urls_are_explained_in_one_line() {
        let error = |url: &str| SqliteOptions::from_url(url).unwrap_err().to_string();
        assert_eq!(
            error("sqlite://"),
            "invalid store URL `sqlite://`: no file path after sqlite://"
        );
        assert_eq!(
            error("sqlite://?batch_size=2"),
            "invalid store URL `sqlite://?batch_size=2`: no file path after sqlite://"
        );
        assert_eq!(
            error("sqlite://idem.db?mode=ro"),
            "invalid store URL `sqlite://idem.db?mode=ro`: unknown parameter `mode` (idem takes \
             synchronous, pool_size, batch_size, queue_size, busy_timeout)"
        );
        assert_eq!(
            error("sqlite://idem.db?batch_size=0"),
            "invalid store URL `sqlite://idem.db?batch_size=0`: `batch_size=0`: expected 1 or more"
        );
        assert_eq!(
            error("sqlite://idem.db?queue_size=x"),
            "invalid store URL `sqlite://idem.db?queue_size=x`: `queue_size=x`: expected a whole \
             number"
        );
        assert_eq!(
            error("sqlite://idem.db?synchronous=off"),
            "invalid store URL `sqlite://idem.db?synchronous=off`: `synchronous=off`: expected \
             full or normal"
        );
        assert_eq!(
            error("sqlite://idem.db#top"),
            "invalid store URL `sqlite://idem.db#top`: a store URL has no fragment (`#…`)"
        );
        assert_eq!(
            error("idem.db"),
            "invalid store URL `idem.db`: expected sqlite://PATH"
        );
    }
}
