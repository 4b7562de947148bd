//! The report every live projector keeps in `P:projectors` (`Keyspace::projectors`), one field per
//! instance: written by the projector, read by the other projectors (which partitions each one reads) and
//! by the query API (how fresh the read model is). One type, one liveness rule, so the two cannot disagree
//! about which projectors are alive.

use serde::{Deserialize, Serialize};

/// A projector whose latest report is this old or older (in seconds) is taken for gone.
pub const LIVENESS_TIMEOUT_SECS: f64 = 5.0;

/// What a live projector reports about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectorReport {
    pub group: String,
    pub generation: u64,
    pub paused: bool,
    /// Unix time of this report.
    pub heartbeat: f64,
    /// Unix time of the last batch applied.
    pub last_progress: f64,
    /// How many partitions the consumer group has assigned to this instance.
    #[serde(default)]
    pub partitions: usize,
    /// `occurredAt` (Unix time) of the latest event this instance applied; 0 before the first.
    #[serde(default)]
    pub latest_event: f64,
    /// Whether it has applied everything it reads (and is not projecting again after a loss).
    #[serde(default)]
    pub caught_up: bool,
}

impl ProjectorReport {
    /// Whether the projector that wrote this report is taken for alive at Unix time `now`.
    pub fn is_live(&self, now: f64) -> bool {
        now - self.heartbeat < LIVENESS_TIMEOUT_SECS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(heartbeat: f64) -> ProjectorReport {
        ProjectorReport {
            group: "g".into(),
            generation: 1,
            paused: false,
            heartbeat,
            last_progress: 0.0,
            partitions: 0,
            latest_event: 0.0,
            caught_up: false,
        }
    }

    #[test]
    fn a_report_as_old_as_the_timeout_is_no_longer_live() {
        assert!(report(100.0).is_live(100.0 + LIVENESS_TIMEOUT_SECS - 0.001));
        assert!(!report(100.0).is_live(100.0 + LIVENESS_TIMEOUT_SECS));
    }

    #[test]
    fn reports_written_before_the_later_fields_existed_still_read() {
        let old = r#"{"group":"g","generation":2,"paused":false,"heartbeat":1.0,"last_progress":0.5}"#;
        let read: ProjectorReport = serde_json::from_str(old).unwrap();
        assert_eq!((read.generation, read.partitions, read.caught_up), (2, 0, false));
    }
}
