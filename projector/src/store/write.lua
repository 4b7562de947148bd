-- Applies one aggregate's outcome atomically, unless its stored sequence moved since it was read.
-- Every key is in one hash slot: the organization's, or the API-key slot.
-- KEYS[1] state hash (seq, state)
-- KEYS[2] index: the sorted set the record belongs to, or the API-key hash (KEYS[1] when there is none)
-- KEYS[3] the organization's document hash; for an API key, which has no document, the key index's epoch
-- KEYS[4] the interview's transcript string (KEYS[1] for aggregates without one)
-- KEYS[5] the hold a repair may have on the aggregate (the organization's hold, or the API key's)
-- KEYS[6] for a study or an interview: the organization's epoch (a string)
-- KEYS[7] for an interview: the token of the organization's last transcript rewrite (a string), written
-- anew by a transcript set or deleted, so that a long transcript being sent stops rather than mixing two
-- versions
-- KEYS[6..] for an API key: the index entries of the hashes it had before (retired), in the same slot
-- ARGV[1] sequence the outcome was folded from   ARGV[2] new sequence   ARGV[3] state json
-- ARGV[4] aggregate id (member and document field)
-- ARGV[5] document op: set | delete | none   ARGV[6] document json
-- ARGV[7] index op: none | add | remove | key-live | key-revoked
-- ARGV[8] score (add) or organization (key-live)
-- ARGV[9] transcript op: keep | append | set | replace | delete   ARGV[10] cues to append (or, for set,
-- every cue; for replace, the transcript as stored, which the projector wrote whole: compressed from layout 6)
-- ARGV[11] transcript header
-- ARGV[12] a token never used before: the new epoch of the key index (for an API key) or of the
-- organization (API instances that keep keys or reads in memory drop them when the epoch changes)
-- A transcript is appended to with APPEND, which costs the size of the cues, not of the transcript; the
-- header is written only when the transcript is created.
-- An index entry belongs to the first key id that claimed it: key-live never takes over another key's entry
-- (the reply says CLAIM-REFUSED), and key-live and key-revoked only remove entries that are this key's.
-- Returns the status APPLIED (or CLAIM-REFUSED, also applied), LOST or HELD (nothing written), or the sequence found
-- as a string (the caller re-reads and folds again).
-- Sequences are compared as the decimal strings the projector writes, never as Lua numbers (doubles),
-- which cannot tell apart sequences above 2^53.
-- ARGV[13] '1' when the projector wrote this organization's epoch (or the key index's) before, in this
-- generation, with no loss since: an epoch gone then means Redis lost data after the projector last looked,
-- and nothing is written (the reply is LOST; the projector heals). A fold onto the lost state would be
-- wrong for good.
-- ARGV[14] the token of the repair writing, or '' for the live path: while a repair holds the aggregate
-- (KEYS[5] holds another token), nothing is written and the reply is HELD (the live path waits: the repair
-- is swapping in a state that includes every event published until it took the hold).
-- ARGV[15] the latest occurredAt of the events written, in microseconds since the Unix epoch ('0': none).
-- ARGV[16] '1' when a replace rewrites the transcript of an interview that was served before the write, so
-- that the organization's rewrite token is written anew (a long transcript being sent stops); '0' when the
-- interview enters its list (nobody reads the transcript of an interview not served).
-- An organization's epoch is `<token>:<microseconds>`, the latest occurredAt applied to the organization
-- so far (never going back): what the API says its answers are as of.
local held = redis.call('GET', KEYS[5])
if held and held ~= ARGV[14] then
  return redis.status_reply('HELD')
end
if ARGV[13] == '1' then
  local key_op = ARGV[7] == 'key-live' or ARGV[7] == 'key-revoked'
  local epoch = (KEYS[6] and not key_op) and KEYS[6] or KEYS[3]
  if redis.call('EXISTS', epoch) == 0 then
    return redis.status_reply('LOST')
  end
end
local current = redis.call('HGET', KEYS[1], 'seq') or '0'
if current ~= ARGV[1] then
  return current
end
-- Nothing is written unless every key written holds the type written to it (or nothing): a script that
-- failed halfway would leave the state ahead of the documents, and no retry could repair that.
local function holds(key, kind)
  local found = redis.call('TYPE', key)['ok']
  return found == 'none' or found == kind
end
local op = ARGV[7]
local index_kind = (op == 'add' or op == 'remove') and 'zset' or 'hash'
local ok = holds(KEYS[1], 'hash') and (op == 'none' or holds(KEYS[2], index_kind))
  and (ARGV[5] == 'none' or holds(KEYS[3], 'hash')) and (ARGV[9] == 'keep' or holds(KEYS[4], 'string'))
if op == 'add' and KEYS[4] ~= KEYS[1] then
  ok = ok and holds(KEYS[4], 'string')
end
local key_op = op == 'key-live' or op == 'key-revoked'
if key_op then
  ok = ok and holds(KEYS[3], 'string')
  for i = 6, #KEYS do
    ok = ok and holds(KEYS[i], 'hash')
  end
elseif KEYS[6] then
  ok = ok and holds(KEYS[6], 'string') and (not KEYS[7] or holds(KEYS[7], 'string'))
end
if not ok then
  return redis.error_reply('WRONGTYPE a key of this aggregate holds another type than the read model writes')
end
-- Nor unless the user may run every command it runs (Redis 7 and later can tell): a script the ACL stops
-- halfway would leave the state ahead of the index, and every retry would take the events for duplicates.
if redis.acl_check_cmd then
  local may = redis.acl_check_cmd
  local allowed = may('HSET', KEYS[1], 'seq', ARGV[2]) and (#ARGV[3] > 64 or may('DEL', KEYS[1]))
  if ARGV[5] == 'set' then
    allowed = allowed and may('HSET', KEYS[3], ARGV[4], 'x')
  elseif ARGV[5] == 'delete' then
    allowed = allowed and may('HDEL', KEYS[3], ARGV[4])
  end
  if op == 'add' then
    allowed = allowed and may('ZADD', KEYS[2], '0', ARGV[4])
    if KEYS[4] ~= KEYS[1] then
      allowed = allowed and may('GET', KEYS[4]) and may('SET', KEYS[4], 'x')
    end
  elseif op == 'remove' then
    allowed = allowed and may('ZREM', KEYS[2], ARGV[4])
  elseif key_op then
    allowed = allowed and may('SET', KEYS[3], 'x') and may('HSET', KEYS[2], 'key', ARGV[4]) and may('DEL', KEYS[2])
    for i = 6, #KEYS do
      allowed = allowed and may('DEL', KEYS[i])
    end
  end
  if ARGV[9] == 'append' then
    allowed = allowed and may('SET', KEYS[4], 'x') and may('APPEND', KEYS[4], 'x')
  elseif ARGV[9] == 'set' or ARGV[9] == 'replace' then
    allowed = allowed and may('SET', KEYS[4], 'x')
  elseif ARGV[9] == 'delete' then
    allowed = allowed and may('DEL', KEYS[4])
  end
  if not key_op and KEYS[6] then
    allowed = allowed and may('SET', KEYS[6], 'x') and (not KEYS[7] or may('SET', KEYS[7], 'x'))
  end
  if not allowed then
    return redis.error_reply('NOPERM the Redis user may not run every command of the write script: nothing written')
  end
end
local id = ARGV[4]
-- A hash that once held a long value stays a hash table, about 300 bytes more than a listpack: a state
-- short enough for one (a served interview's, from layout 2) is written into a new hash, which Redis keeps
-- compact (the hash holds nothing else).
if #ARGV[3] <= 64 then
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'seq', ARGV[2], 'state', ARGV[3])
if ARGV[5] == 'set' then
  redis.call('HSET', KEYS[3], id, ARGV[6])
elseif ARGV[5] == 'delete' then
  redis.call('HDEL', KEYS[3], id)
end
local entered = false
if op == 'add' then
  entered = redis.call('ZADD', KEYS[2], ARGV[8], id) == 1
elseif op == 'remove' then
  redis.call('ZREM', KEYS[2], id)
end
local claim = 'APPLIED'
if key_op then
  redis.call('SET', KEYS[3], ARGV[12])
  for i = 6, #KEYS do
    if redis.call('HGET', KEYS[i], 'key') == id then
      redis.call('DEL', KEYS[i])
    end
  end
  local holder = redis.call('HGET', KEYS[2], 'key')
  if op == 'key-revoked' then
    if holder == id then
      redis.call('DEL', KEYS[2])
    end
  elseif holder == false or holder == id then
    redis.call('HSET', KEYS[2], 'org', ARGV[8], 'key', id)
  else
    claim = 'CLAIM-REFUSED'
  end
end
if ARGV[9] == 'append' then
  if redis.call('EXISTS', KEYS[4]) == 0 then
    redis.call('SET', KEYS[4], ARGV[11] .. ARGV[10])
  else
    redis.call('APPEND', KEYS[4], ARGV[10])
  end
elseif ARGV[9] == 'set' then
  redis.call('SET', KEYS[4], ARGV[11] .. ARGV[10])
elseif ARGV[9] == 'replace' then
  redis.call('SET', KEYS[4], ARGV[10])
elseif ARGV[9] == 'delete' then
  redis.call('DEL', KEYS[4])
end
-- APPEND leaves a string room to grow (up to its own length again), which an interview that is served
-- would keep for good: its transcript is written once at its exact size when it enters its list.
if entered and KEYS[4] ~= KEYS[1] and (ARGV[9] == 'keep' or ARGV[9] == 'append') then
  local transcript = redis.call('GET', KEYS[4])
  if transcript then
    redis.call('SET', KEYS[4], transcript, 'KEEPTTL')
  end
end
local rewrite = ARGV[9] == 'set' or ARGV[9] == 'delete' or (ARGV[9] == 'replace' and ARGV[16] == '1')
if rewrite and KEYS[7] and not key_op then
  redis.call('SET', KEYS[7], ARGV[12])
end
if not key_op and KEYS[6] then
  local as_of = ARGV[15]
  local before = redis.call('GET', KEYS[6])
  local was = before and string.match(before, ':(%d+)$')
  if was and (as_of == nil or tonumber(was) > tonumber(as_of)) then
    as_of = was
  end
  redis.call('SET', KEYS[6], ARGV[12] .. ':' .. (as_of or '0'))
end
return redis.status_reply(claim)
