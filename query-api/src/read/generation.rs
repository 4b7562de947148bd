//! The generation of the read model being served, and whether it is complete, as last read. Requests read
//! it once each (so one response never mixes two generations); the background refresh
//! (`crate::state::AppState::refresh`) reads it again a few times a second.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use shared::keys::slot;
use shared::projectors::ProjectorReport;
use shared::scope::Scope;
use shared::Keyspace;

use super::healing::Healing;
use super::model::ReadModel;

/// Reads that failed, asked by every request while Redis is away: logged once a second at most.
static UNREAD: shared::log_every::LogEvery = shared::log_every::LogEvery::second();

/// The generation before the active one has been read (generations start at 1).
const UNKNOWN: u64 = 0;

/// What the last read of the active generation found.
const COMPLETE: u8 = 0;
/// The projector is projecting the generation again after Redis lost data (or it is new).
const HEALING: u8 = 1;
/// The active generation was known and is gone: Redis lost its data, and no projector has answered yet.
const LOST: u8 = 2;
/// The active generation is lower than one already served: Redis was restored from an older state, and
/// no projector has put it forward again yet. Generations only go forward; an older one is not served.
const BEHIND: u8 = 3;
/// The projector is projecting again what some primaries of a cluster lost, not the key index: the
/// organizations whose keys live in the slots of the loss are answered 503, the others are served.
const HEALING_SOME: u8 = 4;
/// The last read of the condition failed (Redis restarting, failing over, timing out): whether the data
/// is complete is not known, so nothing is served until a read succeeds. A request that could still read
/// Redis meanwhile may meet data rolled back by the very fault that made the read fail.
const UNSURE: u8 = 5;
/// The active generation has a layout this API does not read (`shared::layout`: a rebuild by a newer
/// projector): nothing is served rather than misread, until the API is upgraded or the layout changes.
const LAYOUT: u8 = 6;
/// The generation keeps its healing state opened (`shared::keys::HEALING_OPENED`) and it was found
/// without it: Redis lost it with its primary, and with it what was still healing. Nothing is served until
/// a projector has marked the loss again.
const HEALING_LOST: u8 = 7;

/// Why the read model, or an organization's part of it, is not served: a 503. Its text is logged and
/// given on the admin readiness detail; its label counts the refusals (`api_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotServed {
    /// The projector is projecting the generation again (healing where the key index lives is healing
    /// everywhere).
    Healing,
    /// The organization's slots are being projected again; the others are served.
    OrganizationHealing,
    Lost,
    Behind,
    Unsure,
    Layout,
    Unknown,
    /// A key's lookup found the key index gone, before the projector marked the loss.
    KeyIndexLost,
    /// A read found the organization's data gone, before the projector marked the loss.
    OrganizationLost,
    /// The generation's healing state was lost, before the projector marked it again.
    HealingLost,
}

impl NotServed {
    pub fn why(self) -> &'static str {
        match self {
            Self::Healing => "the read model is incomplete: the projector is projecting it (again)",
            Self::OrganizationHealing => {
                "the organization's part of the read model is incomplete: the projector is projecting it (again)"
            }
            Self::Lost => "the read model's Redis lost its data; waiting for the projector",
            Self::Behind => "the read model's Redis went back to an older generation; waiting for the projector",
            Self::Unsure => "whether the read model is complete could not be read from Redis",
            Self::Layout => "the read model's layout is not one this API reads: its log names the versions",
            Self::Unknown => "the read model's active generation is not known yet",
            Self::KeyIndexLost => "the key index was lost and is not projected again yet",
            Self::OrganizationLost => "an organization's data was lost and is not projected again yet",
            Self::HealingLost => {
                "the read model's healing state was lost with its Redis primary; waiting for the projector to mark it again"
            }
        }
    }

    /// The `cause` label of `api_refused_total`: the healing ones are `healing`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Healing | Self::OrganizationHealing => "healing",
            Self::Lost | Self::KeyIndexLost | Self::OrganizationLost | Self::HealingLost => "lost",
            Self::Behind => "behind",
            Self::Unsure => "unsure",
            Self::Layout => "layout",
            Self::Unknown => "unknown",
        }
    }
}

pub struct Generation {
    prefix: String,
    /// The active generation as last read; 0 until it has been read once.
    generation: AtomicU64,
    /// The highest generation this instance has served.
    highest: AtomicU64,
    /// Since when (Unix time) the active generation has been found lower than [`Self::highest`].
    behind_since: Mutex<Option<f64>>,
    /// [`COMPLETE`], [`HEALING`], [`HEALING_SOME`], [`LOST`], [`BEHIND`], [`UNSURE`], [`LAYOUT`] or
    /// [`HEALING_LOST`].
    condition: AtomicU8,
    /// While [`HEALING_SOME`]: the slots being projected again.
    healing: RwLock<Scope>,
    /// The layout of a generation as last read (generation, layout): which rules its healing hash follows.
    layout: Mutex<Option<(u64, u32)>>,
}

/// What a read of the active generation found.
pub enum Found {
    /// The read failed (logged); nothing changed.
    Nothing,
    /// No active generation: Redis lost its data, or no projector has written one yet. Or one lower than
    /// already served: Redis was restored from an older state.
    Gone,
    /// The active generation, and whether it is complete; when only some slots heal, those slots if they
    /// were not already healing at the last read.
    Active { keys: Keyspace, complete: bool, newly_healing: Option<Scope> },
}

impl Generation {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_string(),
            generation: AtomicU64::new(UNKNOWN),
            highest: AtomicU64::new(UNKNOWN),
            behind_since: Mutex::new(None),
            condition: AtomicU8::new(COMPLETE),
            healing: RwLock::new(Scope::nothing()),
            layout: Mutex::new(None),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether a request should read the generation again before it is answered: until it has been read
    /// once, and while nothing is served (the read model healing everywhere, lost, behind, or its condition
    /// unsure), so that it is served the moment the projector has caught up. Not while only some slots heal:
    /// the other organizations are served as usual, and the change that ends the heal is pushed.
    pub fn needs_reading(&self) -> bool {
        self.generation.load(Ordering::Acquire) == UNKNOWN
            || !matches!(self.condition.load(Ordering::Acquire), COMPLETE | HEALING_SOME)
    }

    /// Whether only some slots of the read model heal (their organizations wait, the others are served).
    pub fn heals_some(&self) -> bool {
        self.condition.load(Ordering::Acquire) == HEALING_SOME
    }

    /// The keys of the generation being served, or why none is.
    pub fn keyspace(&self) -> Result<Keyspace, NotServed> {
        self.serving().map(|generation| Keyspace::new(self.prefix.clone(), generation))
    }

    /// Whether `org`'s part of the generation being served is complete: while some primaries of a
    /// cluster heal, an organization whose keys live there is not served.
    pub fn serves_organization(&self, keys: &Keyspace, org: &str) -> Result<(), NotServed> {
        if self.condition.load(Ordering::Acquire) == HEALING_SOME
            && self.healing.read().expect("healing scope").contains(slot(&keys.org_epoch(org)))
        {
            return Err(NotServed::OrganizationHealing);
        }
        Ok(())
    }

    /// Whether an active generation has been read once: from then on this instance answers every request
    /// itself (data, or 503 with `Retry-After` while the read model is not servable).
    pub fn known(&self) -> bool {
        self.generation.load(Ordering::Acquire) != UNKNOWN
    }

    /// The generation being served, or why none is.
    pub fn serving(&self) -> Result<u64, NotServed> {
        match (self.generation.load(Ordering::Acquire), self.condition.load(Ordering::Acquire)) {
            (_, HEALING) => Err(NotServed::Healing),
            (_, LOST) => Err(NotServed::Lost),
            (_, BEHIND) => Err(NotServed::Behind),
            (_, UNSURE) => Err(NotServed::Unsure),
            (_, LAYOUT) => Err(NotServed::Layout),
            (_, HEALING_LOST) => Err(NotServed::HealingLost),
            (UNKNOWN, _) => Err(NotServed::Unknown),
            (generation, _) => Ok(generation),
        }
    }

    /// Reads the active generation and whether it is complete, and records the condition (not yet the
    /// generation: see [`Self::serve`]).
    pub async fn read(&self, model: &ReadModel) -> Found {
        let generation = match model.active_generation(&self.prefix).await {
            Ok(Some(generation)) => generation,
            Ok(None) => {
                if self.generation.load(Ordering::Acquire) != UNKNOWN
                    && self.condition.swap(LOST, Ordering::AcqRel) != LOST
                {
                    tracing::error!("the read model's active generation is gone: Redis lost its data");
                }
                return Found::Gone;
            }
            Err(e) => return self.unread(&e, "the active generation"),
        };
        let highest = self.highest.load(Ordering::Acquire);
        if generation < highest {
            if !self.older_maintained(model, generation).await {
                if self.condition.swap(BEHIND, Ordering::AcqRel) != BEHIND {
                    tracing::error!(
                        generation,
                        highest,
                        "the active generation went back: Redis was restored from an older state"
                    );
                }
                return Found::Gone;
            }
            // A restore undid a switch no live projector had followed: nothing will put the newer generation
            // back, and the projectors maintain (and heal) this one.
            tracing::warn!(generation, highest, "the live projectors maintain the older generation: serving it");
            self.highest.store(generation, Ordering::Release);
        }
        *self.behind_since.lock().expect("behind since") = None;
        let keys = Keyspace::new(self.prefix.clone(), generation);
        // A generation this instance does not serve yet is read only in a layout it knows.
        let known_layout = *self.layout.lock().expect("layout");
        let layout = match known_layout {
            Some((of, layout))
                if of == generation
                    && generation == self.generation.load(Ordering::Acquire)
                    && self.condition.load(Ordering::Acquire) != LAYOUT =>
            {
                layout
            }
            _ => match model.layout(&keys).await {
                Ok(field) => match shared::layout::check(generation, field.as_deref(), "query API") {
                    Ok(layout) => {
                        // Kept only as read (from the meta, or beside the positions): found nowhere, it is
                        // layout 1 or every one of them lost, which a projector writes back when it marks the
                        // loss. Read again at every look until then.
                        if field.is_some() {
                            *self.layout.lock().expect("layout") = Some((generation, layout));
                        }
                        layout
                    }
                    Err(unknown) => {
                        if self.condition.swap(LAYOUT, Ordering::AcqRel) != LAYOUT {
                            tracing::error!("{unknown}");
                        }
                        return Found::Gone;
                    }
                },
                Err(e) => return self.unread(&e, "the layout of the active generation"),
            },
        };
        let mut newly_healing = None;
        // Healing where the key index lives is healing everywhere: any key's answer may be wrong.
        let condition = match model.healing(&keys, shared::layout::keeps_healing_opened(layout)).await {
            Ok(Healing::Nothing) => COMPLETE,
            Ok(Healing::StateLost) => {
                if self.condition.load(Ordering::Acquire) != HEALING_LOST {
                    tracing::error!(generation, "the read model's healing state is gone: Redis lost it");
                }
                HEALING_LOST
            }
            Ok(Healing::Slots(scope)) if scope.is_everything() || scope.contains(slot(&keys.api_key_epoch())) => {
                HEALING
            }
            Ok(Healing::Slots(scope)) => {
                let mut healing = self.healing.write().expect("healing scope");
                if self.condition.load(Ordering::Acquire) != HEALING_SOME || *healing != scope {
                    newly_healing = Some(scope.clone());
                }
                *healing = scope;
                HEALING_SOME
            }
            Err(e) => return self.unread(&e, "whether the read model is complete"),
        };
        if self.condition.swap(condition, Ordering::AcqRel) != condition {
            tracing::info!(generation, complete = condition == COMPLETE, "the read model's condition changed");
        }
        Found::Active { keys, complete: condition == COMPLETE, newly_healing }
    }

    /// Whether the live projectors maintain `generation`, lower than one served before: every live one has
    /// reported since it was first found lower, naming it.
    async fn older_maintained(&self, model: &ReadModel, generation: u64) -> bool {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        let since = *self.behind_since.lock().expect("behind since").get_or_insert(now);
        match model.projectors(&self.prefix).await {
            Ok(reports) => maintained(&reports, generation, since, now),
            Err(_) => false,
        }
    }

    /// A read of `what` failed: logged at most once a second, the condition made unsure, nothing found.
    fn unread(&self, error: &redis::RedisError, what: &str) -> Found {
        if let Some(skipped) = UNREAD.allow() {
            tracing::warn!(%error, skipped, "could not read {what}");
        }
        self.unsure();
        Found::Nothing
    }

    /// A read of the condition failed: until one succeeds, a known loss stays known, and anything else is
    /// unsure.
    fn unsure(&self) {
        let _ = self.condition.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| match now {
            LOST | BEHIND | HEALING | HEALING_LOST => None,
            _ => Some(UNSURE),
        });
    }

    /// Serves `generation` from now on.
    pub fn serve(&self, generation: u64) {
        let previous = self.generation.swap(generation, Ordering::AcqRel);
        self.highest.fetch_max(generation, Ordering::AcqRel);
        if previous != generation {
            tracing::info!(generation, previous, "serving a new generation of the read model");
        }
    }
}

/// Whether the projectors' reports (instance id to JSON) say that `generation` is the one maintained, at
/// Unix time `now`: at least one projector is live, and every live one reported after `since`, naming it.
/// A report older than `since` may come from the state Redis was restored to, and says nothing of now.
fn maintained(reports: &HashMap<String, String>, generation: u64, since: f64, now: f64) -> bool {
    let live: Vec<ProjectorReport> = reports
        .values()
        .filter_map(|json| serde_json::from_str::<ProjectorReport>(json).ok())
        .filter(|report| report.is_live(now))
        .collect();
    !live.is_empty() && live.iter().all(|report| report.heartbeat > since && report.generation == generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports(list: &[(u64, f64)]) -> HashMap<String, String> {
        let report = |(generation, heartbeat): &(u64, f64)| {
            serde_json::json!({"group": "g", "generation": generation, "paused": false, "heartbeat": heartbeat,
                "last_progress": heartbeat})
            .to_string()
        };
        list.iter().enumerate().map(|(i, r)| (format!("p{i}"), report(r))).collect()
    }

    #[test]
    fn an_older_generation_is_maintained_once_every_live_projector_reported_it_since() {
        assert!(maintained(&reports(&[(3, 101.0), (3, 102.0)]), 3, 100.0, 102.5));
        // Dead projectors' reports do not count.
        assert!(maintained(&reports(&[(3, 101.0), (4, 50.0)]), 3, 100.0, 102.5));
    }

    #[test]
    fn an_older_generation_is_not_maintained_while_a_live_report_is_old_or_names_another() {
        assert!(!maintained(&reports(&[]), 3, 100.0, 102.5), "no projector");
        assert!(!maintained(&reports(&[(3, 101.0), (3, 99.0)]), 3, 100.0, 102.5), "a report from before");
        assert!(!maintained(&reports(&[(3, 101.0), (4, 101.5)]), 3, 100.0, 102.5), "one follows the newer");
        assert!(!maintained(&reports(&[(4, 101.0)]), 3, 100.0, 102.5), "the newer only");
    }
}
