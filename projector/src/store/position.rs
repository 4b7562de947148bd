//! Where the read model itself says it stands: per partition, one past the last offset applied, kept on
//! every primary next to the data it describes, so that it is lost or rolled back exactly with that data.
//! A partition is read again from the lowest position any primary holds (from the earliest offset when a
//! primary holds none), and every write checks the aggregate's sequence, so reading again is harmless.
//!
//! Also the generation's healing entries: the partitions being projected again after a loss, each with
//! the offset to reach and the id of the loss; while any is left, the API answers 503.

use std::collections::HashMap;

use redis::{Script, Value};
use shared::connection::{Connection, Node};
use shared::keys::HEALING_OPENED;
use shared::loss::{HealingEntry, Loss, Losses, Slots};
use shared::Keyspace;

use crate::source::Partition;

/// Writes positions on one primary: never lowers one, and refuses (returning the partitions) where the
/// stored position is absent or below what this projector wrote there last, or where the hash this
/// projector made is gone (field `opened`): the primary lost data. Then it writes nothing at all, not even
/// a partition it expected nothing of (one whose first messages it applied since its last record): that
/// position would vouch for data the loss took, and reading again would start there. A
/// projector that has not written there yet makes the hash even with no partition to record (its field
/// `opened`), so that it exists before any data it vouches for: the API takes an organization without an
/// epoch on a primary without it for a loss, not for an organization without data. It also writes there
/// the generation's layout (field `layout`, when it knows it): every primary then holds it beside its
/// data, and a generation whose meta Redis lost still has it ([`super::generation::layout`]).
const RECORD: &str = r"
-- KEYS[1] the primary's position hash; ARGV[1] '1' when this projector has not written here yet; ARGV[2]
-- the generation's layout ('': not known); then ARGV: partition, position, expected (empty: none), repeated
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'opened', '1')
  if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'layout', ARGV[2]) end
end
local gone = ARGV[1] ~= '1' and not redis.call('HGET', KEYS[1], 'opened')
local lost, found = {}, {}
for i = 3, #ARGV, 3 do
  local current = redis.call('HGET', KEYS[1], ARGV[i])
  found[i] = current
  local expected = ARGV[i + 2]
  if gone or (expected ~= '' and (not current or tonumber(current) < tonumber(expected))) then
    table.insert(lost, ARGV[i])
  end
end
if #lost > 0 then return lost end
for i = 3, #ARGV, 3 do
  local current = found[i]
  if not current or tonumber(current) < tonumber(ARGV[i + 1]) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return lost
";

/// Deletes a healing entry only if it is still the one the caller saw.
const CLEAR: &str = r"
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
";

/// Sets healing entries (ARGV[3] on: field, target or empty, losses; again for each), keeping the losses of
/// an entry it replaces that the new one does not name: a later loss never narrows what is still being
/// projected again (the API serves the slots outside the losses of the entries left).
/// From layout 4 (ARGV[1] the field `shared::keys::HEALING_OPENED`, empty before), a hash found without
/// that field lost its healing state with its primary, and the losses that were healing with it: the loss
/// ARGV[2] (every slot) is added to every entry written, and the field written again. Returns 1 when it
/// was, 0 when not.
const MARK: &str = r"
local opened, lost = ARGV[1], ARGV[2]
local added = 0
-- HGET rather than HEXISTS: the projector's Redis user (deploy/redis/users.acl) may run HGET, not HEXISTS.
if opened ~= '' and not redis.call('HGET', KEYS[1], opened) then
  added = 1
  redis.call('HSET', KEYS[1], opened, '1')
end
for i = 3, #ARGV, 3 do
  local field, target, losses = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local named = {}
  for loss in string.gmatch(losses .. '; ', '(.-); ') do named[loss] = true end
  if added == 1 and not named[lost] then
    losses = losses .. '; ' .. lost
    named[lost] = true
  end
  local old = redis.call('HGET', KEYS[1], field)
  if old then
    for loss in string.gmatch((string.match(old, '^%d+ (.*)$') or old) .. '; ', '(.-); ') do
      if not named[loss] then
        losses = losses .. '; ' .. loss
        named[loss] = true
      end
    end
  end
  if target == '' then
    redis.call('HSET', KEYS[1], field, losses)
  else
    redis.call('HSET', KEYS[1], field, target .. ' ' .. losses)
  end
end
return added
";

/// Whether a generation's healing hash keeps `shared::keys::HEALING_OPENED` (layout 4 on): then its
/// absence is a loss ([`Loss::HealingLost`]), never "nothing heals".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// Layout 4 on.
    Kept,
    /// A generation of an earlier layout: the hash holds entries only, and an old API would read the
    /// field as an entry.
    Never,
}

impl Opened {
    pub fn of_layout(layout: u32) -> Self {
        if shared::layout::keeps_healing_opened(layout) {
            Self::Kept
        } else {
            Self::Never
        }
    }
}

/// Writes healing entries through [`MARK`]: (field, target, losses). Returns the loss it added to them
/// when it found the healing state lost.
async fn mark(
    conn: &mut Connection,
    keys: &Keyspace,
    opened: Opened,
    entries: &[(String, Option<i64>, &Losses)],
) -> redis::RedisResult<Option<Loss>> {
    let lost = Loss::HealingLost { generation: keys.generation() };
    let script = Script::new(MARK);
    let mut invocation = script.key(keys.healing());
    invocation.arg(if opened == Opened::Kept { HEALING_OPENED } else { "" }).arg(lost.to_string());
    for (field, target, losses) in entries {
        invocation.arg(field).arg(target.map(|t| t.to_string()).unwrap_or_default()).arg(losses.to_string());
    }
    let added: i64 = invocation.invoke_async(conn).await?;
    Ok((added == 1).then_some(lost))
}

/// Writes [`HEALING_OPENED`] into the healing hash of a generation that keeps it, as the generation is
/// started (before anything can be marked there): from then on its absence is a loss.
pub async fn open_healing(conn: &mut Connection, keys: &Keyspace, opened: Opened) -> redis::RedisResult<()> {
    if opened == Opened::Kept {
        let mut set = redis::cmd("HSET");
        set.arg(keys.healing()).arg(HEALING_OPENED).arg("1");
        conn.query_all(&[set]).await?;
    }
    Ok(())
}

/// Whether the healing hash of a generation that keeps [`HEALING_OPENED`] lost it (and so every entry it
/// held); `false` for a generation that never keeps it.
pub async fn healing_lost(conn: &mut Connection, keys: &Keyspace, opened: Opened) -> redis::RedisResult<bool> {
    if opened == Opened::Never {
        return Ok(false);
    }
    let mut get = redis::cmd("HGET");
    get.arg(keys.healing()).arg(HEALING_OPENED);
    let value: Option<String> = redis::from_redis_value(conn.query_all(&[get]).await?.remove(0))?;
    Ok(value.is_none())
}

/// The field of a primary's positions hash that holds the generation's layout.
pub const LAYOUT_FIELD: &str = shared::layout::POSITIONS_FIELD;

/// The layout recorded beside the positions of every primary: the highest found, `None` when none holds
/// one (every primary lost its positions, or they were written before the field existed).
pub async fn layout(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<Option<String>> {
    let mut found = Vec::new();
    for node in conn.nodes().await? {
        let mut get = redis::cmd("HGET");
        get.arg(key_on(keys, &node)).arg(LAYOUT_FIELD);
        found.push(redis::from_redis_value(conn.query_all(&[get]).await?.remove(0))?);
    }
    Ok(shared::layout::highest_recorded(found))
}

/// The key holding the positions on `node`.
pub fn key_on(keys: &Keyspace, node: &Node) -> String {
    keys.positions_on(&node.slots)
}

/// Per partition of `partitions`, the position the read model holds: the lowest over every primary, or
/// `None` when some primary holds none (it lost its data, or nothing was applied yet).
pub async fn read(
    conn: &mut Connection,
    keys: &Keyspace,
    partitions: &[Partition],
) -> redis::RedisResult<HashMap<Partition, Option<i64>>> {
    let mut lowest: HashMap<Partition, Option<i64>> = partitions.iter().map(|p| (p.clone(), Some(i64::MAX))).collect();
    for (_, held) in read_each(conn, keys, partitions).await? {
        for (p, value) in held {
            let entry = lowest.get_mut(&p).expect("every partition has an entry");
            *entry = match (*entry, value) {
                (Some(low), Some(v)) => Some(low.min(v)),
                _ => None,
            };
        }
    }
    Ok(lowest)
}

/// The positions of `partitions` each primary holds, with the slots it serves.
pub async fn read_each(
    conn: &mut Connection,
    keys: &Keyspace,
    partitions: &[Partition],
) -> redis::RedisResult<Vec<(Slots, HashMap<Partition, Option<i64>>)>> {
    let mut each = Vec::new();
    if partitions.is_empty() {
        return Ok(each);
    }
    for node in conn.nodes().await? {
        let mut get = redis::cmd("HMGET");
        get.arg(key_on(keys, &node));
        for p in partitions {
            get.arg(p.to_string());
        }
        let values: Vec<Option<i64>> = redis::from_redis_value(conn.query_all(&[get]).await?.remove(0))?;
        each.push((node.slots.clone(), partitions.iter().cloned().zip(values).collect()));
    }
    Ok(each)
}

/// What a projector last wrote, per position key and partition: what the next write expects to find.
pub type Recorded = HashMap<String, HashMap<Partition, i64>>;

/// What [`record`] found lost: the partitions some primary lost, and the slots of those primaries.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Lost {
    pub partitions: Vec<Partition>,
    pub slots: Vec<(u16, u16)>,
}

/// Records `applied` on every primary (making the hash where this projector has not written yet, even
/// with nothing applied, with `layout` when known). Returns what some primary lost (nothing is written
/// for those partitions there); `written` is updated with what was written.
pub async fn record(
    conn: &mut Connection,
    keys: &Keyspace,
    layout: Option<u32>,
    applied: &HashMap<Partition, i64>,
    written: &mut Recorded,
) -> redis::RedisResult<Lost> {
    let mut lost = Lost::default();
    let script = Script::new(RECORD);
    for node in conn.nodes().await? {
        let key = key_on(keys, &node);
        let opening = !written.contains_key(&key);
        if applied.is_empty() && !opening {
            continue;
        }
        let mut invocation = script.prepare_invoke();
        invocation.key(&key).arg(if opening { "1" } else { "" });
        invocation.arg(layout.map(|l| l.to_string()).unwrap_or_default());
        for (p, position) in applied {
            let last = written.get(&key).and_then(|w| w.get(p)).map(i64::to_string).unwrap_or_default();
            invocation.arg(p.to_string()).arg(position).arg(last);
        }
        let refused: Vec<String> = invocation.invoke_async(conn).await?;
        // Opened only once the script ran: a failed first call makes the hash again next time.
        let expected = written.entry(key).or_default();
        if !refused.is_empty() {
            // Refused, nothing was written on this primary: nothing more is expected of it.
            lost.slots.extend(node.slots.iter().copied());
            lost.partitions.extend(applied.keys().filter(|p| refused.contains(&p.to_string())).cloned());
            continue;
        }
        for (p, position) in applied {
            let entry = expected.entry(p.clone()).or_insert(*position);
            *entry = (*entry).max(*position);
        }
    }
    lost.partitions.sort();
    lost.partitions.dedup();
    Ok(lost)
}

/// A partition being projected again: the offset to reach, and which losses it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Healing {
    pub target: i64,
    pub losses: Losses,
}

impl Healing {
    fn encode(&self) -> String {
        HealingEntry { target: Some(self.target), losses: self.losses.clone() }.encode()
    }

    fn decode(value: &str) -> Option<Self> {
        let entry = HealingEntry::decode(value);
        Some(Self { target: entry.target?, losses: entry.losses })
    }
}

/// The healing entry of the whole generation, written the moment a loss is known.
const WHOLE: &str = "*";

/// Marks the whole generation as incomplete (see [`crate::heal`]): the API answers 503 from now. Returns
/// the loss added when the healing state was found lost (see [`MARK`]).
pub async fn mark_incomplete(
    conn: &mut Connection,
    keys: &Keyspace,
    opened: Opened,
    losses: &Losses,
) -> redis::RedisResult<Option<Loss>> {
    mark(conn, keys, opened, &[(WHOLE.to_string(), None, losses)]).await
}

/// Ends the entry of the whole generation once every partition has an entry of its own (ARGV[1]), its
/// losses first added to every partition's entry: another projector may have marked a loss there after
/// this one wrote its partitions' entries, and still be asking the broker for the partitions' ends. Its
/// loss then stays on every partition, not only on the entry that goes. ARGV[2]: the field `opened`.
const END: &str = r"
local whole = redis.call('HGET', KEYS[1], ARGV[1])
if not whole then return 0 end
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  if field ~= ARGV[1] and field ~= ARGV[2] then
    local target, losses = string.match(value, '^(%d+) (.*)$')
    if not target then losses = value end
    local named = {}
    for loss in string.gmatch(losses .. '; ', '(.-); ') do named[loss] = true end
    for loss in string.gmatch(whole .. '; ', '(.-); ') do
      if not named[loss] then
        losses = losses .. '; ' .. loss
        named[loss] = true
      end
    end
    redis.call('HSET', KEYS[1], field, target and (target .. ' ' .. losses) or losses)
  end
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
";

/// Ends the entry of the whole generation, once every partition has an entry of its own (see [`END`]).
pub async fn end_incomplete(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<()> {
    let _: i64 = Script::new(END).key(keys.healing()).arg(WHOLE).arg(HEALING_OPENED).invoke_async(conn).await?;
    Ok(())
}

/// Marks `entries` as being projected again: an older entry of the same partition is replaced, its losses
/// kept (see [`MARK`]).
pub async fn mark_healing(
    conn: &mut Connection,
    keys: &Keyspace,
    opened: Opened,
    entries: &HashMap<Partition, Healing>,
) -> redis::RedisResult<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let fields: Vec<_> = entries.iter().map(|(p, h)| (p.to_string(), Some(h.target), &h.losses)).collect();
    mark(conn, keys, opened, &fields).await?;
    Ok(())
}

/// The generation's healing entries (the field [`HEALING_OPENED`] is none).
pub async fn healing(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<HashMap<Partition, Healing>> {
    let mut all = redis::cmd("HGETALL");
    all.arg(keys.healing());
    let entries: HashMap<String, String> = redis::from_redis_value(conn.query_all(&[all]).await?.remove(0))?;
    Ok(entries
        .into_iter()
        .filter_map(|(field, value)| {
            let (topic, partition) = field.rsplit_once('/')?;
            Some((Partition::new(topic, partition.parse().ok()?), Healing::decode(&value)?))
        })
        .collect())
}

/// Ends a healing entry, unless another loss replaced it meanwhile.
pub async fn clear_healing(
    conn: &mut Connection,
    keys: &Keyspace,
    partition: &Partition,
    entry: &Healing,
) -> redis::RedisResult<()> {
    let cleared: Value = Script::new(CLEAR)
        .key(keys.healing())
        .arg(partition.to_string())
        .arg(entry.encode())
        .invoke_async(conn)
        .await?;
    tracing::debug!(%partition, ?cleared, "healing entry reached");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_healing_entry_reads_back_as_written() {
        let entry = Healing { target: 1234, losses: Losses::parse("restart of 127.0.0.1:7000 (x)") };
        assert_eq!(Healing::decode(&entry.encode()), Some(entry));
        assert_eq!(Healing::decode("x y"), None, "the whole generation's entry is no partition's");
    }

    #[test]
    fn the_positions_script_writes_the_layout_under_the_field_it_is_read_back_from() {
        assert!(RECORD.contains(&format!("redis.call('HSET', KEYS[1], '{LAYOUT_FIELD}', ARGV[2])")));
    }
}
