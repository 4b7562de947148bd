//! `projector repair --organization ID` and `projector repair --aggregate TOPIC:ID`: runs a repair
//! ([`crate::repair`](mod@crate::repair)) with a progress bar on a terminal (plain lines otherwise), and prints what it
//! did (as text, or as JSON: the [`Report`] as serialized).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use shared::Topic;

use super::Output;
use crate::config::Config;
use crate::repair::{self, Report, Target};
use crate::Error;

/// Reads `TOPIC:ID`: the topic by its configured name, or by its aggregate's (`study`, `interview`,
/// `apikey`).
pub fn aggregate(config: &Config, spec: &str) -> Result<Target, Error> {
    let (topic, id) = spec
        .split_once(':')
        .filter(|(_, id)| !id.is_empty())
        .ok_or_else(|| Error::Config(format!("--aggregate takes TOPIC:ID, not {spec:?}")))?;
    let topic = config
        .topic_of(topic)
        .or_else(|| Topic::ALL.into_iter().find(|t| t.aggregate() == topic))
        .ok_or_else(|| Error::Config(format!("{topic:?} is none of the topics (nor study, interview, apikey)")))?;
    Ok(Target::Aggregate(topic, id.to_string()))
}

pub async fn run(config: &Config, target: Target, attempts: u64, output: Output) -> Result<(), Error> {
    let shown = Shown::new();
    let report = repair::run(config, target, attempts, &|read, total| shown.show(read, total)).await?;
    print(&report, output);
    Ok(())
}

pub fn print(report: &Report, output: Output) {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(report).expect("a report serializes")),
        Output::Text => {
            println!(
                "repaired organization {} (generation {}): {} aggregates from {} of its events, {} messages read in {:.1}s",
                report.organization,
                report.generation,
                report.aggregates,
                report.events_kept,
                report.events_read,
                report.seconds
            );
            println!("its writes were held {} ms; {} keys swapped in", report.held_ms, report.keys_swapped);
            for other in &report.owned_by_others {
                println!("left alone, owned by another organization: {other}");
            }
        }
    }
}

/// How a repair's progress is shown: a bar on a terminal, a line every few seconds otherwise.
pub struct Shown {
    bar: Option<ProgressBar>,
    started: Instant,
    last: Mutex<Instant>,
}

/// How often a line of progress is printed when standard error is not a terminal.
const EVERY: Duration = Duration::from_secs(5);

impl Shown {
    pub fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {human_pos}/{human_len} events read, {per_sec}, {eta} left")
                    .expect("a valid template"),
            );
            bar
        });
        Self { bar, started: Instant::now(), last: Mutex::new(Instant::now()) }
    }
}

impl Default for Shown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shown {
    /// Shows that `read` of `total` messages were read.
    pub fn show(&self, read: u64, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(read);
            if read >= total {
                bar.finish_and_clear();
            }
            return;
        }
        let mut last = self.last.lock().expect("progress clock");
        if last.elapsed() < EVERY && read < total {
            return;
        }
        *last = Instant::now();
        eprintln!("{}", line(read, total, self.started.elapsed().as_secs_f64()));
    }
}

/// A plain line of progress: read of total, the rate so far and the time left at that rate.
fn line(read: u64, total: u64, seconds: f64) -> String {
    let rate = read as f64 / seconds.max(1e-3);
    let left = if rate > 0.0 { total.saturating_sub(read) as f64 / rate } else { 0.0 };
    format!("read {read} of {total} events ({rate:.0}/s, about {left:.0}s left)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_line_says_how_much_was_read_how_fast_and_how_long_is_left() {
        assert_eq!(line(250_000, 1_000_000, 10.0), "read 250000 of 1000000 events (25000/s, about 30s left)");
        assert_eq!(line(0, 10, 0.0), "read 0 of 10 events (0/s, about 0s left)");
    }

    #[test]
    fn an_aggregate_is_named_by_its_topic_or_its_kind() {
        let config = <crate::ops::Cli as clap::Parser>::parse_from(["projector", "--interview-topic", "iv"]).config;
        assert_eq!(aggregate(&config, "iv:i-1").unwrap(), Target::Aggregate(Topic::Interview, "i-1".into()));
        assert_eq!(aggregate(&config, "study:s:1").unwrap(), Target::Aggregate(Topic::Study, "s:1".into()));
        assert!(aggregate(&config, "nowhere:x").is_err());
        assert!(aggregate(&config, "study:").is_err());
    }
}
