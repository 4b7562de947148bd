//! A projector that is behind and makes no progress says so, and past a bound asks to be restarted, as
//! Kafka Connect fails a task: whatever holds it (the same loss found again and again, a write Redis
//! refuses, a batch dropped at every look), a fresh process starts from what Redis holds, and a start
//! heals. `/readyz` names it `stuck` with what last held it, `projector_stuck` is 1 meanwhile (the alert
//! `ProjectorStuck`), and once it has made no progress for `PROJECTOR_RESTART_STUCK_AFTER_SECS`, `/livez`
//! fails too, so that Kubernetes restarts it.
//!
//! Not stuck: a projector with nothing to read (no lag), one paused for a rebuild's handover (it waits as
//! asked), and one whose Redis is out of memory or whose partition the dead-letter limit halted: each has
//! its own status and alert, and no restart would help.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What a projector is stuck on, while it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Stuck {
    /// Seconds since its last progress.
    pub seconds: f64,
    /// What last kept it from applying, or that nothing was applied.
    pub reason: String,
}

pub struct StuckHealth {
    /// 1 while stuck.
    pub stuck: Gauge<i64, AtomicI64>,
    /// What last kept this projector from applying a batch: a Redis error retried, a loss found, a look
    /// Redis did not answer.
    obstacle: Mutex<Option<String>>,
    /// Set while paused for a rebuild's handover.
    paused: AtomicBool,
    /// How long without progress, while behind, is stuck (milliseconds).
    stall_after_ms: AtomicU64,
}

impl Default for StuckHealth {
    fn default() -> Self {
        Self {
            stuck: Gauge::default(),
            obstacle: Mutex::default(),
            paused: AtomicBool::new(false),
            stall_after_ms: AtomicU64::new(60_000),
        }
    }
}

impl StuckHealth {
    pub fn register(registry: &mut Registry) -> Self {
        let health = Self::default();
        registry.register(
            "stuck",
            "1 while behind with nothing applied for PROJECTOR_STALL_AFTER_SECS (its /readyz says why); past \
             PROJECTOR_RESTART_STUCK_AFTER_SECS its /livez fails",
            health.stuck.clone(),
        );
        health
    }

    /// How long without progress, while behind, is stuck.
    pub fn set_stall_after(&self, after: Duration) {
        self.stall_after_ms.store(after.as_millis() as u64, Relaxed);
    }

    pub fn stall_after(&self) -> Duration {
        Duration::from_millis(self.stall_after_ms.load(Relaxed))
    }

    /// Records what kept this projector from applying (said by `/readyz` while it is stuck).
    pub fn obstacle(&self, what: impl std::fmt::Display) {
        *self.obstacle.lock().unwrap_or_else(|p| p.into_inner()) = Some(what.to_string());
    }

    /// Whether this projector is paused for a rebuild's handover.
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Relaxed);
    }

    /// The judgment, from what the rest of the metrics say: `behind` (lag, or a batch in hand),
    /// `excused` (out of memory, or a partition halted), and the seconds since the last progress.
    pub fn judge(&self, behind: bool, excused: bool, idle: f64) -> Option<Stuck> {
        let stalled = idle >= self.stall_after().as_secs_f64();
        let stuck = behind && !excused && !self.paused.load(Relaxed) && stalled;
        self.stuck.set(i64::from(stuck));
        stuck.then(|| {
            let obstacle = self.obstacle.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let reason = obstacle.unwrap_or_else(|| "nothing applied while its partitions are behind".into());
            Stuck { seconds: idle, reason }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_with_no_progress_past_the_bound_is_stuck_and_says_what_held_it() {
        let health = StuckHealth::default();
        health.set_stall_after(Duration::from_secs(10));
        assert_eq!(health.judge(true, false, 9.0), None, "not yet");
        let stuck = health.judge(true, false, 11.0).expect("stuck");
        assert_eq!(stuck.reason, "nothing applied while its partitions are behind");
        assert_eq!(health.stuck.get(), 1);
        health.obstacle("redis: NOPERM");
        assert_eq!(health.judge(true, false, 12.0).map(|s| s.reason), Some("redis: NOPERM".into()));
        assert_eq!(health.judge(false, false, 100.0), None, "nothing to read: not stuck");
        assert_eq!(health.stuck.get(), 0);
        assert_eq!(health.judge(true, true, 100.0), None, "out of memory or halted: its own status");
        health.set_paused(true);
        assert_eq!(health.judge(true, false, 100.0), None, "paused for a handover, as asked");
    }
}
