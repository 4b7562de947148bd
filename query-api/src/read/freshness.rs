//! How fresh the read model is, as every data response says: the `occurredAt` of the latest event the
//! projectors applied, and whether they are caught up. Read in the background with the active generation
//! (from the reports the live projectors keep in `P:projectors`), so it costs requests no round trip.

use std::collections::HashMap;
use std::sync::RwLock;

use shared::ProjectorReport;

/// The header with the time of the latest event applied (RFC 3339, UTC).
pub const AS_OF: &str = "x-read-model-as-of";
/// The header saying whether the projectors are caught up (`true`) or behind (`false`).
pub const CAUGHT_UP: &str = "x-read-model-caught-up";

/// How fresh one answer's organization is: the latest `occurredAt` applied to it, which its epoch carries
/// (`<token>:<microseconds since the Unix epoch>`, written by the projector with every change to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrgAsOf(pub String);

impl OrgAsOf {
    /// From an organization's epoch; `None` when it carries no time (a read model written before epochs
    /// did, or an organization with no event applied).
    pub fn of(epoch: &str) -> Option<Self> {
        let micros: i64 = epoch.rsplit_once(':')?.1.parse().ok()?;
        shared::time::format_unix(micros as f64 / 1e6).map(Self)
    }
}

/// Marks a response with how fresh its organization is, for the freshness headers
/// ([`crate::edge::freshness`]); without an epoch (or a time in it), the read model's freshness is said.
pub fn as_of(response: &mut axum::response::Response, epoch: Option<&str>) {
    if let Some(as_of) = epoch.and_then(OrgAsOf::of) {
        response.extensions_mut().insert(as_of);
    }
}

/// What the live projectors of the served generation say, taken together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Freshness {
    /// The latest event applied when every projector is caught up; otherwise the least fresh of those
    /// behind. `None` before any event was applied.
    pub as_of: Option<String>,
    pub caught_up: bool,
}

impl Freshness {
    /// From the reports in `P:projectors` (instance id → JSON), for `generation`, at Unix time `now`.
    pub fn of(reports: &HashMap<String, String>, generation: u64, now: f64) -> Self {
        let live: Vec<ProjectorReport> = reports
            .values()
            .filter_map(|json| serde_json::from_str::<ProjectorReport>(json).ok())
            .filter(|r| r.generation == generation && r.is_live(now))
            .collect();
        let caught_up = !live.is_empty() && live.iter().all(|r| r.caught_up);
        let times = live.iter().filter(|r| caught_up || !r.caught_up).map(|r| r.latest_event);
        let at = if caught_up { times.fold(0.0, f64::max) } else { times.fold(f64::INFINITY, f64::min) };
        Self { as_of: shared::time::format_unix(if at.is_finite() { at } else { 0.0 }), caught_up }
    }
}

/// The freshness last read, shared by every request.
#[derive(Debug, Default)]
pub struct Latest(RwLock<Freshness>);

impl Latest {
    pub fn get(&self) -> Freshness {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, freshness: Freshness) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = freshness;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(generation: u64, heartbeat: f64, latest: f64, caught_up: bool) -> String {
        serde_json::json!({"generation": generation, "heartbeat": heartbeat, "latest_event": latest, "caught_up": caught_up, "group": "g", "paused": false, "last_progress": 0.0})
            .to_string()
    }

    #[test]
    fn caught_up_projectors_say_their_latest_event_and_one_behind_says_its_own() {
        let mut reports = HashMap::new();
        reports.insert("a".into(), report(2, 100.0, 50.0, true));
        reports.insert("b".into(), report(2, 100.0, 60.0, true));
        let fresh = Freshness::of(&reports, 2, 101.0);
        assert_eq!(fresh, Freshness { as_of: shared::time::format_unix(60.0), caught_up: true });
        reports.insert("c".into(), report(2, 100.0, 40.0, false));
        let behind = Freshness::of(&reports, 2, 101.0);
        assert_eq!(behind, Freshness { as_of: shared::time::format_unix(40.0), caught_up: false });
    }

    #[test]
    fn an_organizations_epoch_says_when_its_latest_event_occurred() {
        let at = OrgAsOf::of("9f86d081884c7d659a2feaa0c55ad015:1771423204411000").unwrap();
        assert_eq!(at, OrgAsOf("2026-02-18T14:00:04.411Z".into()));
        for without in ["9f86d081884c7d659a2feaa0c55ad015", "abc:0", "abc:", "abc:x1"] {
            assert_eq!(OrgAsOf::of(without), None, "{without}");
        }
    }

    #[test]
    fn stale_reports_and_other_generations_count_for_nothing() {
        let mut reports = HashMap::new();
        reports.insert("old".into(), report(2, 101.0 - shared::projectors::LIVENESS_TIMEOUT_SECS, 40.0, false));
        reports.insert("other".into(), report(1, 100.0, 40.0, false));
        reports.insert("broken".into(), "{".into());
        assert_eq!(Freshness::of(&reports, 2, 101.0), Freshness { as_of: None, caught_up: false });
    }
}
