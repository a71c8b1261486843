//! [`Journal`]: what every party of a fault run said — the relay processes' output, the
//! consumer's failures, the broker's log — printed when the run fails, so that a failure anywhere
//! explains itself.

#![allow(unreachable_pub)] // shared with the other modules of this test only

use std::{
    collections::VecDeque,
    fs::File,
    io::Write as _,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
};

use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// The most lines kept of each source, and printed of each log file: the last ones.
const LINES: usize = 200;

/// The lines each source wrote, the last [`LINES`] of each, and the log files whose tails go with
/// them. Clones share one journal.
#[derive(Clone)]
pub struct Journal(Arc<Mutex<Sources>>);

struct Sources {
    /// Where the brokers' log files are written.
    dir: TempDir,
    lines: Vec<(String, VecDeque<String>)>,
    files: Vec<(String, PathBuf)>,
}

impl Journal {
    pub fn new() -> Self {
        Self(Arc::new(Mutex::new(Sources {
            dir: tempfile::tempdir().unwrap(),
            lines: Vec::new(),
            files: Vec::new(),
        })))
    }

    /// A guard that prints the journal to stderr when it is dropped while the test panics.
    pub fn print_on_failure(&self) -> PrintOnFailure {
        PrintOnFailure(self.clone())
    }

    /// Adds `line` to what `source` said.
    pub fn write(&self, source: &str, line: impl Into<String>) {
        let mut sources = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let lines = sources.lines_of(source);
        if lines.len() == LINES {
            lines.pop_front();
        }
        lines.push_back(line.into());
    }

    /// Copies every line `output` (a child process's stdout or stderr) writes to `source`, until
    /// it ends.
    pub fn capture(&self, source: &str, output: impl AsyncRead + Unpin + Send + 'static) {
        // Listed even if it says nothing: a relay that said nothing is a finding too.
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lines_of(source);
        let (journal, source) = (self.clone(), source.to_owned());
        tokio::spawn(async move {
            let mut lines = BufReader::new(output).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                journal.write(&source, line);
            }
        });
    }

    /// A new log file for `source` (a broker's output), whose tail is printed with the journal.
    pub fn log_file(&self, source: &str) -> File {
        let mut sources = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let path = sources
            .dir
            .path()
            .join(format!("{}.log", sources.files.len()));
        let file = File::create(&path).unwrap();
        sources.files.push((source.to_owned(), path));
        file
    }

    /// Prints the tail of the log file at `path` (one the source writes itself) with the journal.
    pub fn tail(&self, source: &str, path: PathBuf) {
        let mut sources = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        sources.files.push((source.to_owned(), path));
    }

    fn print(&self) {
        let sources = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::from("\nwhat each party of the run said, the last lines of each:\n");
        for (source, lines) in &sources.lines {
            out.push_str(&format!("--- {source} ({} lines)\n", lines.len()));
            for line in lines {
                out.push_str(&format!("{source}: {line}\n"));
            }
        }
        for (source, path) in &sources.files {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|error| format!("(cannot read {}: {error})", path.display()));
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LINES)..];
            out.push_str(&format!(
                "--- {source}: the last {} of {} lines of {}\n",
                tail.len(),
                lines.len(),
                path.display()
            ));
            for line in tail {
                out.push_str(&format!("{source}: {line}\n"));
            }
        }
        // eprintln!, not a raw write: libtest shows it with the failure.
        eprintln!("{out}");
        let _ = std::io::stderr().flush();
    }
}

impl Sources {
    /// The lines `source` said, a new source listed last.
    fn lines_of(&mut self, source: &str) -> &mut VecDeque<String> {
        let index = match self.lines.iter().position(|(name, _)| name == source) {
            Some(index) => index,
            None => {
                self.lines.push((source.to_owned(), VecDeque::new()));
                self.lines.len() - 1
            }
        };
        &mut self.lines[index].1
    }
}

/// Prints its journal when dropped during a panic: the run failed.
pub struct PrintOnFailure(Journal);

impl Drop for PrintOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.print();
        }
    }
}
