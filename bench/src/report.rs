//! What the binaries print and measure about themselves and their children.

use std::fmt::Display;

/// A line of `name=value` pairs, printed on stdout for the scripts.
#[derive(Default)]
pub struct Line(Vec<String>);

impl Line {
    pub fn with(mut self, name: &str, value: impl Display) -> Self {
        self.0.push(format!("{name}={value}"));
        self
    }

    /// `events`, `seconds` and `events_per_sec`: what every timed leg reports.
    pub fn rate(self, events: u64, seconds: f64) -> Self {
        self.with("events", events)
            .with("seconds", format!("{seconds:.2}"))
            .with("events_per_sec", format!("{:.0}", events as f64 / seconds))
    }

    pub fn print(self) {
        println!("{}", self.0.join(" "));
    }
}

/// Peak resident set size (`VmHWM`) of a process, in KiB, while it is still running.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
