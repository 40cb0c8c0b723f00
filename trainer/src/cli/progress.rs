//! What `train sft` and `train rl` show while they run: a bar over the steps on stderr with
//! lines above it, or, with `--json`, one JSON line per event on stdout (what the server and the
//! desktop app read).

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// An event a person reads: what it moves on the bar or prints above it.
pub(crate) trait ShowProgress: Serialize {
    fn show(&self, bar: &mut StepBar);
}

/// Progress as a bar on stderr, or (`--json`) as JSON lines on stdout.
pub(crate) struct Reporter {
    json: bool,
    bar: StepBar,
}

impl Reporter {
    pub(crate) fn new(json: bool) -> Reporter {
        Reporter {
            json,
            bar: StepBar::default(),
        }
    }

    pub(crate) fn event<E: ShowProgress>(&mut self, event: &E) {
        if self.json {
            print_json(event);
        } else {
            event.show(&mut self.bar);
        }
    }

    /// Leaves the bar where it stopped (the run ended with an error or a stop).
    pub(crate) fn abandon(&mut self) {
        self.bar.abandon();
    }
}

/// Prints `event` as one JSON line on stdout.
fn print_json<E: Serialize>(event: &E) {
    if let Ok(line) = serde_json::to_string(event) {
        println!("{line}");
    }
}

/// A bar over a run's steps, drawn once the run knows how many there are.
#[derive(Default)]
pub(crate) struct StepBar(Option<ProgressBar>);

impl StepBar {
    /// Starts the bar at 0 of `steps`.
    pub(crate) fn start(&mut self, steps: usize) {
        let bar = ProgressBar::new(steps as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        self.0 = Some(bar);
    }

    /// Moves the bar to `step`, with `message` beside it when there is one.
    pub(crate) fn set(&self, step: usize, message: Option<String>) {
        if let Some(bar) = &self.0 {
            bar.set_position(step as u64);
            if let Some(message) = message {
                bar.set_message(message);
            }
        }
    }

    /// A line above the bar; on stderr as such when there is no terminal to draw a bar on
    /// (indicatif prints nothing through a hidden bar, and a log file should keep the line).
    pub(crate) fn line(&self, text: String) {
        match &self.0 {
            Some(bar) if !bar.is_hidden() => bar.println(text),
            _ => eprintln!("{text}"),
        }
    }

    /// Removes the bar at the end of a run, before its summary is printed.
    pub(crate) fn clear(&mut self) {
        if let Some(bar) = self.0.take() {
            bar.finish_and_clear();
        }
    }

    /// Leaves the bar where it stopped (an error or a stop ended the run).
    pub(crate) fn abandon(&mut self) {
        if let Some(bar) = self.0.take() {
            bar.abandon();
        }
    }
}
