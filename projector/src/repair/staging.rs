//! The Redis side of a repair (see [`super`]): a short hold on an organization's writes, its repaired
//! data staged beside the live keys in the same slot, and the swap that puts it in place in one script,
//! so a reader sees the data before the repair or after it, never a mixture. The repaired write of one
//! aggregate goes through the live path's own write script, and is the store's
//! ([`crate::store::Store::write_repaired`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use redis::{Cmd, Script, Value};
use shared::connection::Connection;
use shared::lease::{Lease, OnLapse};
use shared::owners::Record;
use shared::{Keyspace, Topic};

use crate::fold::{stored, Folded, IndexChange, State, TranscriptChange, TRANSCRIPT_HEADER};
use crate::store::{owners, ReplyError, StoreError};

/// How long a hold lasts unless renewed: a repair that died releases the organization within this.
pub const HOLD_TTL: Duration = Duration::from_secs(10);

/// How long a repair's lease on its organization lasts unless renewed (its renewal runs while the repair
/// reads the topics, which can take minutes).
pub const LEASE_TTL: Duration = Duration::from_secs(20);

/// How long staged keys live unless swapped in: those of a repair that died go by themselves.
const STAGED_TTL_MS: u64 = 3_600_000;

/// How long a swap's proof lives: far longer than the calls made again after a lost reply take
/// ([`SWAP_CALLS`]).
const PROOF_TTL_MS: u64 = 600_000;

/// Swaps the staged copies of an organization's keys in.
const SWAP: &str = r"
-- KEYS[1] the organization's hold, KEYS[2] its repair lease, KEYS[3] its epoch, KEYS[4] the token of its
-- last transcript rewrite (written anew: a long transcript being sent stops rather than mixing the
-- versions), KEYS[5] the proof of the swap, then pairs: a live key and this repair's staged copy of it.
-- ARGV[1] the repair's token, ARGV[2] the organization's new epoch's token, which also names this swap
-- (the epoch keeps the latest occurredAt the live epoch had: `<token>:<microseconds>`), ARGV[3] how long
-- the proof lives (ms), then for each pair the size the staged copy must have: its fields (a hash), its
-- members (a sorted set), 1 (a string) or 0 (none).
-- A staged copy replaces its live key (RENAME, then PERSIST: the copy had a TTL); a live key without a
-- staged copy is no longer part of the organization's data and is deleted.
-- Nothing is written unless every check passes first: the repair still holds the organization and its
-- lease (else the live path may have written meanwhile), every staged copy is whole (none lost to its TTL,
-- a failover or a restart), and the user may run every command the swap runs.
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return redis.status_reply('HOLD-LOST')
end
local function size(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'hash' then return redis.call('HLEN', key) end
  if kind == 'zset' then return redis.call('ZCARD', key) end
  if kind == 'none' then return 0 end
  return 1
end
for i = 6, #KEYS, 2 do
  local expected = tonumber(ARGV[4 + (i - 6) / 2])
  if size(KEYS[i + 1]) ~= expected then
    return redis.status_reply('STAGING-INCOMPLETE ' .. KEYS[i])
  end
  if redis.acl_check_cmd and not (redis.acl_check_cmd('RENAME', KEYS[i + 1], KEYS[i])
      and redis.acl_check_cmd('PERSIST', KEYS[i]) and redis.acl_check_cmd('DEL', KEYS[i])) then
    return redis.error_reply('NOPERM the swap may not run RENAME, PERSIST or DEL on ' .. KEYS[i])
  end
end
local swapped = 0
for i = 6, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then
    redis.call('RENAME', KEYS[i + 1], KEYS[i])
    redis.call('PERSIST', KEYS[i])
    swapped = swapped + 1
  else
    redis.call('DEL', KEYS[i])
  end
end
local before = redis.call('GET', KEYS[3])
local as_of = before and string.match(before, ':(%d+)$')
redis.call('SET', KEYS[3], ARGV[2] .. ':' .. (as_of or '0'))
redis.call('SET', KEYS[4], ARGV[2])
redis.call('SET', KEYS[5], ARGV[2] .. ' ' .. swapped, 'PX', ARGV[3])
redis.call('DEL', KEYS[1])
return swapped
";

/// Takes the lease `key` for `token` (a renewal that finds it lapsed does not take it again), or over from
/// `earlier` (the token of this repair's run that failed), waiting up to `wait` while another holds it;
/// `None` if another still does then.
pub async fn take(
    conn: &mut Connection,
    key: &str,
    (token, earlier): (&str, Option<&str>),
    ttl: Duration,
    wait: Duration,
) -> redis::RedisResult<Option<Lease>> {
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        if let Some(lease) = Lease::take_over(conn, key, token, earlier, ttl, OnLapse::Lost).await? {
            return Ok(Some(lease));
        }
        if started.elapsed() >= wait {
            return Ok(None);
        }
        if attempt == 0 {
            tracing::info!(lease = key, ?wait, "waiting: another repair holds it");
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Records `org` as the owner of each aggregate that has none; returns those another organization owns.
pub async fn claim_owners(
    conn: &mut Connection,
    keys: &Keyspace,
    layout: u32,
    org: &str,
    aggregates: &[(Topic, String)],
) -> redis::RedisResult<BTreeSet<(Topic, String)>> {
    let claims: Vec<Vec<Cmd>> =
        aggregates.iter().map(|(topic, id)| owners::claim(&Record::of(keys, *topic, id, layout), org)).collect();
    let replies = conn.query_all(&claims.concat()).await?;
    let mut others = BTreeSet::new();
    let mut end = 0;
    for (aggregate, claim) in aggregates.iter().zip(&claims) {
        end += claim.len();
        // The last reply of each claim names the owner.
        let owner: Option<String> = redis::from_redis_value_ref(&replies[end - 1])?;
        if owner.is_some_and(|o| o != org) {
            others.insert(aggregate.clone());
        }
    }
    Ok(others)
}

/// The organization's live keys, after deleting whatever repairs of it that died left staged (the caller
/// holds the organization's repair lease: no other repair of it runs). One SCAN of the keyspace (of every
/// primary), made before the hold: a key the live path creates afterwards belongs to an aggregate whose
/// events the repair reads too, so it is among the keys the repair stages.
pub async fn live_keys(conn: &mut Connection, keys: &Keyspace, org: &str) -> redis::RedisResult<BTreeSet<String>> {
    let (staged, live): (Vec<String>, Vec<String>) =
        conn.scan(&keys.org_pattern(org)).await?.into_iter().partition(|k| keys.staged_by(k).is_some());
    for chunk in staged.chunks(500) {
        let unlinks: Vec<Cmd> = chunk.iter().map(|k| one("UNLINK", k)).collect();
        conn.query_all(&unlinks).await?;
    }
    Ok(live.into_iter().filter(|k| !keys.is_bookkeeping(k)).collect())
}

/// The commands that make repair `run`'s staged copy of the organization's data hold `folded` for one study
/// or interview (its state stored as `layout` stores it), whatever the copy held for it before; and the live names of the keys they touch, each with
/// what this aggregate puts in its copy (fields or members, 1 for a string, 0 for nothing).
pub fn stage(
    keys: &Keyspace,
    layout: u32,
    run: &str,
    org: &str,
    topic: Topic,
    id: &str,
    folded: &Folded,
) -> (Vec<Cmd>, Vec<(String, u64)>) {
    let staged = |live: &str| keys.staged(live, run).expect("an organization's key");
    let (mut commands, mut live) = (Vec::new(), Vec::new());
    let state_key = keys.aggregate(topic, org, id);
    let state = stored::encode(&folded.state, folded.document.as_deref(), layout);
    let mut hset = redis::cmd("HSET");
    hset.arg(staged(&state_key)).arg("seq").arg(folded.sequence).arg("state").arg(state);
    commands.push(hset);
    live.push((state_key, 2));
    let documents = match topic {
        Topic::Study => keys.study_documents(org),
        _ => keys.interview_documents(org),
    };
    match &folded.document {
        Some(doc) => {
            let stored = shared::layout::stored_document(doc, layout);
            commands.push(redis::cmd("HSET").arg(staged(&documents)).arg(id).arg(stored.as_ref()).clone())
        }
        None => commands.push(redis::cmd("HDEL").arg(staged(&documents)).arg(id).clone()),
    }
    live.push((documents, folded.document.is_some() as u64));
    let index = match &folded.state {
        State::Study(_) => Some(keys.studies(org)),
        State::Interview(i) => i.study_id.as_deref().map(|study| keys.interviews(org, study)),
        State::ApiKey(_) => None,
    };
    if let Some(index) = index {
        match folded.index {
            IndexChange::Add(score) => {
                commands.push(redis::cmd("ZADD").arg(staged(&index)).arg(score as i64).arg(id).clone())
            }
            _ => commands.push(redis::cmd("ZREM").arg(staged(&index)).arg(id).clone()),
        }
        live.push((index, matches!(folded.index, IndexChange::Add(_)) as u64));
    }
    if topic == Topic::Interview {
        let transcript = keys.transcript(org, id);
        match &folded.transcript {
            TranscriptChange::Append(cues) => {
                // Stored as the layout stores a served interview's (compressed from layout 6), else whole.
                let whole = format!("{TRANSCRIPT_HEADER}{cues}");
                let stored = match folded.state.is_served_interview() {
                    true => shared::layout::stored_transcript(&whole, layout),
                    false => std::borrow::Cow::Borrowed(whole.as_bytes()),
                };
                commands.push(redis::cmd("SET").arg(staged(&transcript)).arg(stored.as_ref()).clone())
            }
            _ => commands.push(one("DEL", &staged(&transcript))),
        }
        live.push((transcript, matches!(folded.transcript, TranscriptChange::Append(_)) as u64));
    }
    for (key, _) in &live {
        commands.push(redis::cmd("PEXPIRE").arg(staged(key)).arg(STAGED_TTL_MS).clone());
    }
    (commands, live)
}

/// Swaps repair `token`'s staged copy of `org`'s data in, provided the repair still holds the organization
/// and its lease and the copy is whole: every key of `staged` (live names, with the size its copy must
/// have) and every other key of `live` (found by [`live_keys`]). The hold is released with it. Returns how
/// many staged copies replaced their live key.
///
/// A call that fails with its outcome unknown (a timeout, a cut connection: Redis may have run the script)
/// is made again with the same tokens, after 200, 400, then 800 ms. The swap releases the hold, so a second
/// run of it writes nothing. A call made again that finds the hold gone asks for the proof the swap
/// writes ([`Keyspace::swapped`]): this swap's, and an earlier call swapped the copies in; any other or
/// none, and the outcome stays unknown (the hold and the staged copies gone say nothing: a flush, an
/// empty restart or a failover of the slot's primary takes them as the swap does).
pub async fn swap(
    conn: &mut Connection,
    keys: &Keyspace,
    org: &str,
    token: &str,
    staged: &BTreeMap<String, u64>,
    live: &BTreeSet<String>,
) -> Result<usize, StoreError> {
    let epoch = uuid::Uuid::new_v4().simple().to_string();
    let mut call = 1;
    let mut unknown = None;
    loop {
        match swap_once(conn, keys, org, token, &epoch, staged, live).await {
            Err(StoreError::Redis(e)) if call < SWAP_CALLS && outcome_unknown(&e) => {
                tracing::warn!(error = %e, call, "the swap's outcome is unknown; asking again");
                unknown.get_or_insert(e);
                tokio::time::sleep(Duration::from_millis(100 << call)).await;
                call += 1;
            }
            Err(StoreError::HoldLost) if call > 1 => {
                let proof: Option<String> = redis::cmd("GET").arg(keys.swapped(org)).query_async(conn).await?;
                return match proven(proof.as_deref(), &epoch) {
                    Some(swapped) => Ok(swapped),
                    None => Err(StoreError::Redis(unknown.expect("asked again after an unknown outcome"))),
                };
            }
            done => return done,
        }
    }
}

/// How many copies the swap `epoch` put in place, if `proof` is its.
fn proven(proof: Option<&str>, epoch: &str) -> Option<usize> {
    let (swap, copies) = proof?.split_once(' ')?;
    (swap == epoch).then(|| copies.parse().ok()).flatten()
}

/// How many times in all a swap is called while its outcome stays unknown: within [`HOLD_TTL`] at the
/// Redis timeout's default of 1 s.
const SWAP_CALLS: u32 = 4;

/// Whether a call that failed with `e` may have been run by Redis, or may not have reached it: either way
/// it can be made again.
pub fn outcome_unknown(e: &redis::RedisError) -> bool {
    e.is_timeout() || e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal()
}

async fn swap_once(
    conn: &mut Connection,
    keys: &Keyspace,
    org: &str,
    token: &str,
    epoch: &str,
    staged: &BTreeMap<String, u64>,
    live: &BTreeSet<String>,
) -> Result<usize, StoreError> {
    let live: BTreeSet<&String> = live.iter().chain(staged.keys()).collect();
    let script = Script::new(SWAP);
    let mut invocation = script.prepare_invoke();
    invocation.key(keys.hold(org)).key(keys.repair_lease(org)).key(keys.org_epoch(org));
    invocation.key(keys.transcripts_rewritten(org)).key(keys.swapped(org));
    invocation.arg(token).arg(epoch).arg(PROOF_TTL_MS);
    for key in &live {
        invocation.key(key).key(keys.staged(key, token).expect("an organization's key"));
        invocation.arg(staged.get(*key).copied().unwrap_or(0));
    }
    match invocation.invoke_async::<Value>(conn).await? {
        Value::Int(swapped) => Ok(swapped as usize),
        Value::SimpleString(status) if status == "HOLD-LOST" => Err(StoreError::HoldLost),
        Value::SimpleString(status) if status.starts_with("STAGING-INCOMPLETE ") => {
            Err(StoreError::StagingIncomplete(status["STAGING-INCOMPLETE ".len()..].to_string()))
        }
        other => Err(StoreError::Script(ReplyError::new(other))),
    }
}

fn one(name: &str, key: &str) -> Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(key);
    cmd
}
