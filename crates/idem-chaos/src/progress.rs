//! What a run shows while it goes: a progress bar on a terminal, or a line every few seconds
//! (a CI log), and one line per fault.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;

use crate::history::Recorder;

/// How often a line is printed when there is no terminal to draw the bar on.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// The progress display, updated until dropped.
#[derive(Debug)]
pub(crate) struct Progress {
    bar: ProgressBar,
    recorder: Recorder,
    task: JoinHandle<()>,
}

impl Progress {
    /// Shows the run's progress over `duration` on stderr.
    pub(crate) fn start(duration: Duration, recorder: Recorder) -> Self {
        let bar = ProgressBar::new(duration.as_secs().max(1));
        bar.set_style(
            ProgressStyle::with_template("[{bar:30}] {pos}/{len}s {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        let task = tokio::spawn({
            let (bar, recorder) = (bar.clone(), recorder.clone());
            async move {
                let mut ticks = tokio::time::interval(Duration::from_millis(250));
                let mut last_line = Duration::ZERO;
                loop {
                    ticks.tick().await;
                    let now = recorder.now();
                    bar.set_position(now.as_duration().as_secs());
                    bar.set_message(summary(&recorder));
                    if bar.is_hidden() && now.as_duration() >= last_line + LINE_EVERY {
                        last_line = now.as_duration();
                        eprintln!("{now:>9}  {}", summary(&recorder));
                    }
                }
            }
        });
        Self {
            bar,
            recorder,
            task,
        }
    }

    /// Prints `what` happened, with the time.
    pub(crate) fn event(&self, what: impl std::fmt::Display) {
        let line = format!("{:>9}  {what}", self.recorder.now());
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
        self.bar.finish_and_clear();
    }
}

fn summary(recorder: &Recorder) -> String {
    let tally = recorder.tally();
    format!(
        "{} operations, {} attempts, {} answers dropped, {} gateway kills, {} gateway pauses, \
         {} store restarts, {} partitions",
        tally.operations,
        tally.attempts,
        tally.dropped,
        tally.kills,
        tally.pauses,
        tally.store_restarts,
        tally.partitions
    )
}
