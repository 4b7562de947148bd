//! The healing protocol: what a live projector does about a loss, once the look ([`super::look`]) or
//! the guard before a batch found one. It marks the read model incomplete, then every partition as
//! healing, and reads its own partitions again from the position Redis holds.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use shared::connection::Connection;
use shared::loss::{Loss, Losses};
use shared::Keyspace;

use super::look::Watch;
use crate::observe::Metrics;
use crate::source::{Partition, Source};
use crate::store::position::{self, Healing, Opened};
use crate::store::{self, Store};
use crate::Error;

/// What healing works on of a live projector: where it reads, where it writes, what it reports, and
/// whether it follows the active generation (none was pinned).
pub struct Parts<'a> {
    pub source: &'a mut Source,
    pub store: &'a mut Store,
    pub metrics: &'a Metrics,
    pub follows_active: bool,
}

/// What one live projector remembers between two looks.
pub struct Heal {
    /// The look itself, also asked before every batch is written.
    pub watch: Watch,
    /// Losses this projector has read its partitions again for.
    answered: HashSet<Losses>,
    /// A loss not marked yet (Redis did not answer), or whose healing entries are not all written yet
    /// (the broker did not answer).
    pending: Option<Pending>,
    /// Each partition of this projector still short of its healing target: where it stands, since when,
    /// and when its end was last asked ([`Heal::answer`]).
    short: HashMap<Partition, Short>,
}

/// A partition short of its healing target, as the looks saw it.
struct Short {
    at: i64,
    since: Instant,
    asked: Option<Instant>,
}

/// How long a partition short of its target must stand still before its end is asked, and how often it
/// is asked again: a partition read again moves within that (one waiting its turn, or read one message a
/// batch, does not ask at every look), and a leader's high watermark that lags for a moment after a
/// change of leader has caught up.
const STILL_FOR: Duration = Duration::from_secs(5);

/// A loss being marked: first the whole generation as incomplete, then each partition.
#[derive(Clone)]
struct Pending {
    losses: Losses,
    /// The whole generation is marked incomplete: the API answers 503 where the loss was.
    marked: bool,
}

impl Heal {
    /// Healing with `watch`, whose first look was taken when the projector started.
    pub fn new(watch: Watch) -> Self {
        Self { watch, answered: HashSet::new(), pending: None, short: HashMap::new() }
    }

    /// One look; see the module's documentation. An error of Redis is logged and tried again next time;
    /// a Redis that came back able to evict keys is refused.
    pub async fn check(&mut self, projector: &mut Parts<'_>) -> Result<(), Error> {
        let keys = projector.store.keys().clone();
        // Known before the first look opens a primary's positions, which record it.
        let mut opened = None;
        if let Ok(layout) = projector.store.layout().await {
            if let Some(known) = projector.store.known_layout() {
                crate::store::Guard::layout(&mut self.watch, keys.generation(), known);
            }
            opened = Some(Opened::of_layout(layout));
        }
        match self.watch.record(&keys, projector.source).await {
            Ok(losses) if !losses.is_empty() => return self.lost(projector, losses).await,
            // What is recorded now may be committed: a quiet partition's last batch too.
            Ok(_) => projector.source.commit_recorded(),
            Err(e) => tracing::warn!(error = %e, "could not ask the read model's Redis about itself"),
        }
        // The healing state lost on its own (its primary's flush seen by no look: a user without INFO, a
        // key deleted): whatever it held is not known, and every partition is marked again.
        if let (Some(opened), None) = (opened, &self.pending) {
            match position::healing_lost(&mut self.watch.conn(), &keys, opened).await {
                Ok(true) => {
                    let loss = Loss::HealingLost { generation: keys.generation() };
                    return self.lost(projector, Losses::one(loss)).await;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "could not read the healing state"),
            }
        }
        self.settle(projector).await;
        Ok(())
    }

    /// Whether a loss is found and not yet fully marked: the read model is not known to say so, nor are
    /// the partitions read again from what Redis holds. No batch may be written meanwhile: written onto
    /// the loss, it would record the events the loss took as a gap, too late to apply once read again.
    pub fn unmarked(&self) -> bool {
        self.pending.is_some()
    }

    /// Answers a loss, found by the look or by the guard before a batch was written: marks the read
    /// model incomplete, then every partition as healing, and reads this projector's partitions again.
    pub async fn lost(&mut self, projector: &mut Parts<'_>, losses: Losses) -> Result<(), Error> {
        let mut conn = self.watch.conn();
        if !losses.are_flushes() {
            store::check_no_eviction(&mut conn).await?;
        }
        tracing::error!(loss = %losses, "the read model's Redis lost data; projecting again from what it holds");
        projector.metrics.stuck.obstacle(format_args!("the read model's Redis lost data: {losses}"));
        projector.store.forget_epochs();
        // Counted once marked: until then the API cannot know, and the loss is not answered yet. A loss
        // still being marked is marked again with this one, under one id.
        let losses = match self.pending.take() {
            Some(earlier) => earlier.losses.and(losses),
            None => losses,
        };
        // A loss told by the same words as one answered before (the same partition's positions lost again
        // on the same generation) is a new loss: it is answered again. What was answered is what the
        // entries held, which the marking merges with other losses (the healing state's own loss, other
        // projectors'): every answered value naming any of these losses goes, not only the same value.
        self.answered.retain(|answered| !answered.0.iter().any(|loss| losses.0.contains(loss)));
        self.pending = Some(Pending { losses, marked: false });
        self.settle(projector).await;
        Ok(())
    }

    /// Writes the healing entries of a loss not fully marked yet, and answers the entries of this
    /// projector's partitions once it is. `projector_redis_loss_unmarked` says which, after each.
    async fn settle(&mut self, projector: &mut Parts<'_>) {
        let mut conn = self.watch.conn();
        let keys = projector.store.keys().clone();
        let settled = self.mark_pending(projector, &mut conn, &keys).await;
        projector.metrics.redis.unmarked.set(i64::from(self.unmarked()));
        if !settled {
            return;
        }
        if let Err(e) = self.answer(projector, &mut conn, &keys).await {
            tracing::warn!(error = %e, "could not read the healing entries");
        }
    }

    /// Marks the loss not fully marked yet, if any: the read model incomplete, then every partition as
    /// healing. False when a step failed (it is tried again at the next look).
    async fn mark_pending(&mut self, projector: &mut Parts<'_>, conn: &mut Connection, keys: &Keyspace) -> bool {
        if let Some(Pending { mut losses, marked }) = self.pending.clone() {
            if !marked {
                let layout = match projector.store.layout().await {
                    Ok(layout) => layout,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read the generation's layout; marking the loss later");
                        return false;
                    }
                };
                // The meta may have gone with the loss: the API reads the layout there, and without it
                // would read the healing state by the rules of layout 1.
                let restored =
                    if layout > 1 { crate::generation::restore_layout(conn, keys, layout).await } else { Ok(false) };
                match restored {
                    Ok(true) => tracing::warn!(layout, "the generation's meta had lost its layout; written back"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "could not write the generation's layout back; marking the loss later");
                        return false;
                    }
                }
                let opened = Opened::of_layout(layout);
                match mark_lost(projector.follows_active, conn, keys, opened, &losses).await {
                    Ok(marked) => {
                        projector.metrics.redis.losses.inc();
                        losses = marked;
                        self.pending = Some(Pending { losses: losses.clone(), marked: true });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not mark the read model as incomplete; trying again");
                        return false;
                    }
                }
            }
            let opened = projector.store.layout().await.map(Opened::of_layout).unwrap_or(Opened::Never);
            match mark_everything(projector.source, conn, keys, opened, &losses).await {
                Ok(()) => self.pending = None,
                Err(e) => tracing::warn!(error = %e, "could not mark every partition as healing; trying again"),
            }
        }
        true
    }

    /// On shutdown, once the last batch is applied: records the positions, so that the next start reads
    /// nothing twice, unless Redis lost data since the last look (then the next start finds out). The
    /// caller commits what was recorded.
    pub async fn leave(&mut self, projector: &mut Parts<'_>) {
        let keys = projector.store.keys().clone();
        match self.watch.record(&keys, projector.source).await {
            Ok(losses) if losses.is_empty() => {}
            Ok(losses) => tracing::warn!(%losses, "Redis lost data; the next start reads it again"),
            Err(e) => tracing::warn!(error = %e, "could not record the positions in Redis"),
        }
    }

    /// Reads again the partitions of this projector with a healing entry it has not answered, and ends
    /// the entries it has caught up with.
    async fn answer(&mut self, projector: &mut Parts<'_>, conn: &mut Connection, keys: &Keyspace) -> Result<(), Error> {
        let entries = position::healing(conn, keys).await?;
        let mine: HashMap<&Partition, &Healing> =
            entries.iter().filter(|(p, _)| projector.source.assigned().contains(*p)).collect();
        let again: Vec<Partition> =
            mine.iter().filter(|(_, h)| !self.answered.contains(&h.losses)).map(|(p, _)| (*p).clone()).collect();
        if !again.is_empty() {
            let starts = position::read(conn, keys, &again).await?;
            let from: Vec<String> = starts
                .iter()
                .map(|(p, at)| format!("{p}@{}", at.map_or("earliest".into(), |o| o.to_string())))
                .collect();
            tracing::warn!(from = %from.join(" "), "reading partitions again after a loss");
            projector.source.rewind(&starts)?;
            self.watch.forget(&again, projector.source.assigned());
            self.answered.extend(mine.values().map(|h| h.losses.clone()));
        }
        let positions = projector.source.positions();
        let ends = self.ends_of_the_still(projector, &mine, &positions);
        let mut left = 0;
        for (partition, entry) in &mine {
            let at = positions.get(*partition).copied();
            // A partition the dead-letter limit halted is projected up to its halt and no further, loss or
            // not: reached there, its heal holds no other organization at 503 until the halt is fixed.
            let halt = projector.source.halted().get(*partition).map(|halt| halt.offset);
            let reached = at.is_some_and(|at| at >= entry.target || halt.is_some_and(|halt| at >= halt));
            // The target is the partition's end when the loss was marked; a broker that lost its tail since
            // (one broker without replicas, killed) never reaches it again: the heal ends at the end now.
            let end = ends.get(*partition).copied().filter(|end| *end < entry.target);
            let past_end = !reached && at.zip(end).is_some_and(|(at, end)| at >= end);
            if reached || past_end {
                if past_end {
                    projector.metrics.redis.targets_past_end.inc();
                    tracing::error!(
                        %partition, target = entry.target, end = ?end, loss = %entry.losses,
                        "the broker holds less of the partition than when the loss was marked (it lost messages): \
                         healed up to its end"
                    );
                }
                position::clear_healing(conn, keys, partition, entry).await?;
                self.short.remove(*partition);
            } else {
                left += 1;
            }
        }
        projector.metrics.redis.healing.set(left);
        projector.metrics.redis.set_reason(mine.values().next().filter(|_| left > 0).map(|h| h.losses.to_string()));
        Ok(())
    }
}

impl Heal {
    /// The end of each of this projector's partitions still short of its healing target that has stood
    /// still for [`STILL_FOR`], asked at most once in that long: a partition read again moves, so the
    /// broker is asked only about one that may wait for messages it no longer holds. Empty when it does
    /// not answer.
    fn ends_of_the_still(
        &mut self,
        projector: &Parts<'_>,
        mine: &HashMap<&Partition, &Healing>,
        positions: &HashMap<Partition, i64>,
    ) -> HashMap<Partition, i64> {
        let now = Instant::now();
        let mut short = HashMap::new();
        for (partition, entry) in mine {
            let Some(at) = positions.get(*partition).copied().filter(|at| *at < entry.target) else { continue };
            let seen = match self.short.remove(*partition) {
                Some(seen) if seen.at == at => seen,
                _ => Short { at, since: now, asked: None },
            };
            short.insert((*partition).clone(), seen);
        }
        let due = |s: &Short| now - s.since >= STILL_FOR && s.asked.is_none_or(|asked| now - asked >= STILL_FOR);
        let still: Vec<Partition> = short.iter().filter(|(_, s)| due(s)).map(|(p, _)| p.clone()).collect();
        for partition in &still {
            short.get_mut(partition).expect("short").asked = Some(now);
        }
        self.short = short;
        if still.is_empty() {
            return HashMap::new();
        }
        match projector.source.ends(&still) {
            Ok(ends) => still.into_iter().zip(ends).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "could not ask the broker for the ends of the partitions healing");
                HashMap::new()
            }
        }
    }
}

/// Marks the generation as incomplete at once (one entry for the whole of it, before the partitions'
/// ends are asked of the broker), then puts the active generation forward again if the loss took it
/// or set it back: in that order, so that the API never serves the generation before it knows it is
/// incomplete. Returns the losses marked: `losses`, and [`Loss::HealingLost`] when the mark found the
/// healing state lost (the losses it held are not known, so every partition is marked for all of them).
pub async fn mark_lost(
    follows_active: bool,
    conn: &mut Connection,
    keys: &Keyspace,
    opened: Opened,
    losses: &Losses,
) -> Result<Losses, Error> {
    let losses = match position::mark_incomplete(conn, keys, opened, losses).await? {
        Some(lost) if !losses.0.contains(&lost) => {
            tracing::error!(loss = %lost, "the healing state was lost: every partition is projected again");
            losses.clone().and(Losses::one(lost))
        }
        _ => losses.clone(),
    };
    if follows_active {
        crate::generation::pointer::raise_both(conn, keys.prefix(), keys.generation()).await?;
    }
    Ok(losses)
}

/// Marks every partition of the generation as healing up to its end now, then ends the entry of the
/// whole generation [`mark_lost`] wrote.
pub async fn mark_everything(
    source: &mut Source,
    conn: &mut Connection,
    keys: &Keyspace,
    opened: Opened,
    losses: &Losses,
) -> Result<(), Error> {
    let all: Vec<Partition> = source.partitions()?.to_vec();
    let ends = source.ends(&all)?;
    let mut entries = HashMap::new();
    for (partition, end) in all.into_iter().zip(ends) {
        if end > 0 {
            entries.insert(partition, Healing { target: end, losses: losses.clone() });
        }
    }
    position::mark_healing(conn, keys, opened, &entries).await?;
    position::end_incomplete(conn, keys).await?;
    Ok(())
}

/// A start is a check: a partition whose committed offset is ahead of the position the read model holds
/// lost what was applied between the two while no projector looked (a restore, a restart without
/// persistence, a flush). With `only_marked`, only offsets a projector committed count: one set by
/// anything else (an operator's reset) is no such evidence, and the partition is read from the read
/// model's position. Returns the loss, named alike by every projector that finds it.
pub async fn behind_commits(
    source: &Source,
    conn: &mut Connection,
    keys: &Keyspace,
    only_marked: bool,
) -> Result<Option<Loss>, Error> {
    let committed = if only_marked { source.committed_by_projectors()? } else { source.committed()? };
    let committed: HashMap<Partition, i64> = committed.into_iter().filter(|(_, offset)| *offset > 0).collect();
    let partitions: Vec<Partition> = committed.keys().cloned().collect();
    let mut behind = std::collections::BTreeMap::new();
    let mut slots = Vec::new();
    for (served, held) in position::read_each(conn, keys, &partitions).await? {
        let mut here = false;
        for (p, at) in held.into_iter().filter(|(p, at)| at.is_none_or(|at| at < committed[p])) {
            here = true;
            let low = behind.entry(p).or_insert(at);
            *low = low.zip(at).map(|(a, b)| a.min(b));
        }
        if here {
            slots.extend(served);
        }
    }
    let first = behind
        .iter()
        .next()
        .map(|(p, at)| format!("{p} at {} below {}", at.map_or("nothing".into(), |o| o.to_string()), committed[p]));
    // The slots of the primaries that hold less: the API goes on serving the organizations elsewhere (a
    // primary that serves no slots, one Redis, names none: every slot).
    slots.sort();
    slots.dedup();
    Ok(first.map(|first| Loss::PositionsBehind {
        partitions: behind.len(),
        first,
        generation: keys.generation(),
        slots,
    }))
}
