//! `repair`: redoes one organization's data, or one aggregate's, from the topics, while the live
//! projectors go on and the API keeps serving it.
//!
//! 0. For an organization: take its repair lease ([`Keyspace::repair_lease`]); a second repair of it
//!    waits for the first, or is refused. The staged keys carry the run's token.
//! 1. Read the topics from their earliest offset to their ends as they are now, keeping the target's
//!    events. An organization's events are told by a byte search for its id before any decoding (a value
//!    without the id and without a JSON escape cannot be one of them); an aggregate's by the message key.
//! 2. Fold each aggregate from scratch, its events in sequence order (the last one published with a
//!    sequence wins: a republished correction replaces the original; a fixed dead letter fills its gap).
//! 3. For an organization: stage the result beside the live keys, in the organization's slot.
//! 4. Hold the organization (the live path's writes to it wait), read on to the topics' ends as they are
//!    now: every event the live path applied is then folded in, since it was published before the hold.
//! 5. Swap the staged data in with one script that releases the hold (an aggregate: write it with the
//!    live path's own script, then release). A reader sees the old data or the repaired, never a mixture.
//!    The script changes nothing unless the repair still holds both the hold and the lease (neither is
//!    taken again once lapsed: the live path may have written in the gap) and every staged copy has the
//!    size the repair staged (none lost to its TTL, a failover or a restart).
//! 6. API keys, which live in their own slot, are written one at a time with the write script, each
//!    against the sequence it read, after reading on to the topics' ends again: no hold.
//!
//! A repair killed anywhere leaves the live data as it was: staged keys expire (and the next repair
//! clears them), a hold expires within [`HOLD_TTL`], the lease within [`LEASE_TTL`]. One that changed
//! nothing because Redis failed under it (a connection cut, a timeout) or lost what it held or staged (its
//! hold lapsed, a staged copy lost) runs again by itself, up to [`ATTEMPTS`] times in all by default.
//!
//! The steps are here; [`target`] tells the target's events among the topics' messages (1, 2),
//! [`staging`] is the Redis side of the hold, the staging and the swap (0, 3 to 5), and [`redrive`]
//! repairs the aggregates that a replay of dead letters would leave unchanged. The repaired write of one
//! aggregate is the store's ([`Store::write_repaired`]): it goes through the live path's write script.

pub mod redrive;
mod staging;
mod target;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::Serialize;
use shared::connection::Connection;
use shared::lease::Lease;
use shared::owners::Record;
use shared::{Keyspace, Topic};

use crate::config::Config;
use crate::source::Reader;
use crate::store::{self, ScriptReply, Store, StoreError};
use crate::Error;
use staging::{HOLD_TTL, LEASE_TTL};
use target::{describe, folded, read_on, Aggregates, Collected};
pub use target::{Progress, Target};

/// What a repair did, as `repair -o json` prints it.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub organization: String,
    pub generation: u64,
    /// Messages read from the topics, and the target's events among them.
    pub events_read: u64,
    pub events_kept: u64,
    /// Aggregates written from scratch.
    pub aggregates: usize,
    /// Keys of the organization's slot replaced or deleted by the swap.
    pub keys_swapped: usize,
    /// How long the organization's writes were held.
    pub held_ms: u64,
    pub seconds: f64,
    /// Aggregates left alone: another organization owns them.
    pub owned_by_others: Vec<String>,
}

/// How long a repair waits for another repair's hold on the same organization.
const HOLD_WAIT: Duration = Duration::from_secs(30);

/// How many times an API key is read again when the live path wrote it meanwhile.
const KEY_ATTEMPTS: usize = 8;

/// How many times in all a repair runs by default when Redis fails under it (a connection cut by a restart
/// or a failover, a timeout, a slot moving) or loses what it held or staged: each run is whole, and one
/// that fails leaves the live data as it was.
pub const ATTEMPTS: u64 = 3;

/// Runs a repair of `target` on the active generation; again, after a pause, when Redis failed under it.
pub async fn run(config: &Config, target: Target, attempts: u64, progress: Progress<'_>) -> Result<Report, Error> {
    // A token for each run, which takes over the lease and hold its failed run may have left: a late call
    // of that run (a swap whose reply was lost, still on its way) carries the earlier token and finds
    // neither its own, so it can never land in this run.
    let mut earlier: Option<String> = None;
    let mut attempt = 1;
    loop {
        let token = uuid::Uuid::new_v4().simple().to_string();
        match run_once(config, (&token, earlier.as_deref()), target.clone(), progress).await {
            Err(e) if attempt < attempts && worth_another_run(&e) => {
                tracing::warn!(error = %e, attempt, "the repair changed nothing; running it again");
                tokio::time::sleep(Duration::from_secs(attempt)).await;
                attempt += 1;
                earlier = Some(token);
            }
            done => return done,
        }
    }
}

/// One run of a repair: its token, and the token of the run before it, if one failed.
type Run<'a> = (&'a str, Option<&'a str>);

async fn run_once(config: &Config, run: Run<'_>, target: Target, progress: Progress<'_>) -> Result<Report, Error> {
    let (_stop, mut stopped) = tokio::sync::watch::channel(false);
    let mut conn = store::connect(config, &mut stopped).await?.ok_or_else(|| Error::Refused("no redis".into()))?;
    let generation = crate::generation::pointer::required(&mut conn, &config.redis.key_prefix).await?;
    let keys = Keyspace::new(config.redis.key_prefix.clone(), generation);
    let layout = crate::generation::check_layout(&mut conn, &keys).await?;
    // One repair of an organization at a time: its lease is taken before anything is read or staged, so a
    // second repair never meets (or deletes) the first one's staging.
    let lease = match &target {
        Target::Organization(org) => {
            match staging::take(&mut conn, &keys.repair_lease(org), run, LEASE_TTL, HOLD_WAIT).await? {
                Some(lease) => Some(lease),
                None => {
                    return Err(Error::Refused(format!(
                        "another repair of organization {org} is running; try again when it is done"
                    )))
                }
            }
        }
        Target::Aggregate(..) => None,
    };
    let result = repair(config, &mut conn, &keys, layout, run, lease.as_ref(), target, progress).await;
    if let Some(lease) = lease {
        if let Err(e) = lease.release(&mut conn).await {
            tracing::warn!(error = %e, "could not release the repair's lease; it expires by itself");
        }
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn repair(
    config: &Config,
    conn: &mut Connection,
    keys: &Keyspace,
    layout: u32,
    run: Run<'_>,
    lease: Option<&Lease>,
    target: Target,
    progress: Progress<'_>,
) -> Result<Report, Error> {
    let token = run.0;
    let started = Instant::now();
    let generation = keys.generation();
    let mut store = Store::new(conn.clone(), keys.clone()).of_layout(layout);
    let topics: Vec<Topic> = match &target {
        Target::Organization(_) => Topic::ALL.to_vec(),
        Target::Aggregate(topic, _) => vec![*topic],
    };
    let owner = match &target {
        Target::Aggregate(topic, id) => {
            store::owners::read(&Record::of(keys, *topic, id, layout)).query_async(conn).await?
        }
        Target::Organization(_) => None,
    };
    let mut collected = Collected::new(target.clone(), owner);
    let mut reader = Reader::open(config, &topics)?;
    let mut report = Report { generation, ..Report::default() };

    // 1 to 3: read, fold, stage.
    let mut marks = reader.watermarks()?;
    let mut total: u64 = marks.values().map(|(low, high)| (high - low).max(0) as u64).sum();
    report.events_read += reader.read_to(&marks, |r| drop(collected.offer(r)), |n| progress(n, total))?;
    tracing::info!(elapsed = ?started.elapsed(), read = report.events_read, "read to the ends");
    let Some(org) = collected.org.clone() else {
        return Err(Error::Refused(format!("the topics hold no event of {}", describe(&target))));
    };
    report.organization = org.clone();
    let mut claimed = BTreeSet::new();
    let mut others = BTreeSet::new();
    claim(conn, keys, layout, &org, &collected.aggregates, &mut claimed, &mut others).await?;
    let organization = matches!(target, Target::Organization(_));
    let (mut staged, mut live) = (Staged::new(), BTreeSet::new());
    if organization {
        ensure_held(lease)?;
        live = staging::live_keys(conn, keys, &org).await?;
        let all: Vec<_> = collected.aggregates.keys().cloned().collect();
        stage(conn, keys, layout, token, &org, &collected.aggregates, &all, &others, &mut staged).await?;
    }

    tracing::info!(elapsed = ?started.elapsed(), "staged");
    // 4 and 5: hold, read on, swap (or write the one aggregate).
    let in_slot = organization || !matches!(target, Target::Aggregate(Topic::ApiKey, _));
    if in_slot {
        let Some(hold) = staging::take(conn, &keys.hold(&org), run, HOLD_TTL, HOLD_WAIT).await? else {
            return Err(Error::Refused(format!("another repair holds organization {org}; try again when it is done")));
        };
        let held = Instant::now();
        let mut touched = BTreeSet::new();
        let read_before = report.events_read;
        read_on(&mut reader, &mut marks, &mut total, &mut report.events_read, &mut collected, &mut touched, progress)?;
        tracing::info!(organization = %org, events = report.events_read - read_before, "read on under the hold");
        claim(conn, keys, layout, &org, &collected.aggregates, &mut claimed, &mut others).await?;
        tracing::info!(elapsed = ?started.elapsed(), "read on under the hold and claimed");
        let outcome = if organization {
            let touched: Vec<_> = touched.into_iter().collect();
            stage(conn, keys, layout, token, &org, &collected.aggregates, &touched, &others, &mut staged).await?;
            let swapped = if hold.is_lost() || lease.is_some_and(Lease::is_lost) {
                Err(StoreError::HoldLost)
            } else {
                staging::swap(conn, keys, &org, token, &sizes(&staged), &live).await.map(|n| report.keys_swapped = n)
            };
            // A swap that changed nothing lets the live path go on at once, not when the hold expires.
            if swapped.is_err() {
                if let Err(e) = hold.release(conn).await {
                    tracing::warn!(error = %e, "could not release the repair's hold; it expires by itself");
                }
            }
            swapped
        } else {
            let aggregate = collected.aggregates.keys().next().cloned().expect("the org came from an event");
            let result = write_one(&mut store, &org, &aggregate, &collected.aggregates, token).await;
            hold.release(conn).await?;
            result
        };
        report.held_ms = held.elapsed().as_millis() as u64;
        outcome.map_err(|source| match source {
            StoreError::Redis(e) if staging::outcome_unknown(&e) => {
                Error::SwapUnknown { what: describe(&target), source: e }
            }
            source => Error::NotSwapped { what: describe(&target), source },
        })?;
    }

    // 6: API keys, one at a time.
    let api_keys: Vec<(Topic, String)> = collected
        .aggregates
        .keys()
        .filter(|(topic, _)| *topic == Topic::ApiKey)
        .filter(|a| !others.contains(*a))
        .cloned()
        .collect();
    for aggregate in &api_keys {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let stored = store.stored(Topic::ApiKey, &org, &aggregate.1).await.map_err(refused)?;
            let mut touched = BTreeSet::new();
            read_on(
                &mut reader,
                &mut marks,
                &mut total,
                &mut report.events_read,
                &mut collected,
                &mut touched,
                progress,
            )?;
            let repaired = folded(&collected.aggregates, aggregate);
            let reply = store
                .write_repaired(Topic::ApiKey, &org, &aggregate.1, stored, repaired, token)
                .await
                .map_err(refused)?;
            match reply {
                ScriptReply::Applied | ScriptReply::ClaimRefused => break,
                _ if attempt >= KEY_ATTEMPTS => {
                    return Err(Error::Refused(format!("API key {} kept changing during the repair", aggregate.1)))
                }
                ScriptReply::Held => tokio::time::sleep(Duration::from_millis(100)).await,
                _ => {}
            }
        }
    }

    report.aggregates = collected.aggregates.len() - others.len();
    report.events_kept = collected.kept;
    report.owned_by_others = others.iter().map(|(t, id)| format!("{}:{id}", t.aggregate())).collect();
    // Repaired: no longer late for a gap.
    let late: Vec<String> = collected.aggregates.keys().map(|(t, id)| Keyspace::late_field(*t, id)).collect();
    if !late.is_empty() {
        let _: () = redis::cmd("HDEL").arg(keys.late()).arg(&late).query_async(conn).await?;
    }
    if crate::generation::pointer::required(conn, &config.redis.key_prefix).await? != generation {
        tracing::warn!(
            generation,
            "the active generation changed during the repair; the new one was built from the topics"
        );
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// What each aggregate put in the staged copies: the live name of each key, with its part of the copy.
type Staged = BTreeMap<(Topic, String), Vec<(String, u64)>>;

/// The size each staged copy must have: the sum of what the aggregates staged last put in it.
fn sizes(staged: &Staged) -> BTreeMap<String, u64> {
    let mut sizes = BTreeMap::new();
    for (key, size) in staged.values().flatten() {
        *sizes.entry(key.clone()).or_default() += size;
    }
    sizes
}

/// Whether a repair that ended with `e`, having changed nothing, may succeed if run again from the start:
/// Redis failed under it (a cut connection, a timeout, a failover), or its swap was refused because what
/// it held or staged was lost meanwhile (its hold lapsed; a staged copy lost to its TTL, a failover or a
/// restart). Not a refusal that would come again (another repair holds the organization, no event of it).
/// A swap never answered may have changed the data, but only to the repaired data: a run again from the
/// start swaps in the same repair, with whatever the live path wrote since.
fn worth_another_run(e: &Error) -> bool {
    let passing = |e: &redis::RedisError| !StoreError::Redis(e.clone()).is_permanent();
    match e {
        Error::Redis(e) => passing(e),
        Error::NotSwapped { source: StoreError::HoldLost | StoreError::StagingIncomplete(_), .. } => true,
        Error::NotSwapped { source: StoreError::Redis(e), .. } => passing(e),
        Error::SwapUnknown { .. } => true,
        _ => false,
    }
}

/// Stops a repair whose lease on its organization lapsed: another repair may have started meanwhile.
fn ensure_held(lease: Option<&Lease>) -> Result<(), Error> {
    match lease {
        Some(lease) if lease.is_lost() => Err(Error::Refused(format!(
            "this repair lost {} (it lapsed: the repair stalled, or Redis lost it); nothing was swapped, run it again",
            lease.key()
        ))),
        _ => Ok(()),
    }
}

fn refused(e: StoreError) -> Error {
    Error::Refused(e.to_string())
}

/// Records the organization as the owner of the aggregates not claimed yet; notes those others own.
async fn claim(
    conn: &mut Connection,
    keys: &Keyspace,
    layout: u32,
    org: &str,
    aggregates: &Aggregates,
    claimed: &mut BTreeSet<(Topic, String)>,
    others: &mut BTreeSet<(Topic, String)>,
) -> Result<(), Error> {
    let new: Vec<(Topic, String)> = aggregates.keys().filter(|a| !claimed.contains(*a)).cloned().collect();
    for chunk in new.chunks(1000) {
        let owned = staging::claim_owners(conn, keys, layout, org, chunk).await?;
        for aggregate in &owned {
            tracing::warn!(aggregate = %aggregate.1, "another organization owns this aggregate; left alone");
        }
        others.extend(owned);
    }
    claimed.extend(new);
    Ok(())
}

/// Stages the studies and interviews among `which` as repair `run`'s.
#[allow(clippy::too_many_arguments)]
async fn stage(
    conn: &mut Connection,
    keys: &Keyspace,
    layout: u32,
    run: &str,
    org: &str,
    aggregates: &Aggregates,
    which: &[(Topic, String)],
    others: &BTreeSet<(Topic, String)>,
    staged: &mut Staged,
) -> Result<(), Error> {
    let mut commands = Vec::new();
    for aggregate in which.iter().filter(|(t, _)| *t != Topic::ApiKey).filter(|a| !others.contains(*a)) {
        let (cmds, live) =
            staging::stage(keys, layout, run, org, aggregate.0, &aggregate.1, &folded(aggregates, aggregate));
        commands.extend(cmds);
        staged.insert(aggregate.clone(), live);
        if commands.len() >= 2000 {
            conn.query_all(&std::mem::take(&mut commands)).await?;
        }
    }
    conn.query_all(&commands).await?;
    Ok(())
}

/// Writes one study or interview from scratch, under the organization's hold.
async fn write_one(
    store: &mut Store,
    org: &str,
    aggregate: &(Topic, String),
    aggregates: &Aggregates,
    token: &str,
) -> Result<(), StoreError> {
    let stored = store.stored(aggregate.0, org, &aggregate.1).await?;
    match store.write_repaired(aggregate.0, org, &aggregate.1, stored, folded(aggregates, aggregate), token).await? {
        ScriptReply::Applied | ScriptReply::ClaimRefused => Ok(()),
        _ => Err(StoreError::HoldLost),
    }
}
