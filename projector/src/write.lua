-- Applies one aggregate's outcome atomically, unless its stored sequence moved since it was read.
-- Every key is in one hash slot: the organization's, or the API-key slot.
-- KEYS[1] state hash (seq, state, doc)
-- KEYS[2] index: the sorted set the record belongs to, or the API-key hash (KEYS[1] when there is none)
-- KEYS[3] transcript (KEYS[1] when the aggregate has none)
-- ARGV[1] sequence the outcome was folded from   ARGV[2] new sequence   ARGV[3] state json
-- ARGV[4] document json, '' when the record is not visible
-- ARGV[5] index op: none | add | remove | key-live | key-revoked
-- ARGV[6] score (add) or organization (key-live)   ARGV[7] member: the aggregate id
-- ARGV[8] transcript op: keep | append | delete   ARGV[9] cues to append   ARGV[10] transcript header
-- Returns -1 when applied, else the sequence found (the caller re-reads and folds again).
local current = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
if current ~= tonumber(ARGV[1]) then
  return current
end
redis.call('HSET', KEYS[1], 'seq', ARGV[2], 'state', ARGV[3])
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[1], 'doc')
else
  redis.call('HSET', KEYS[1], 'doc', ARGV[4])
end
local op = ARGV[5]
if op == 'add' then
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[7])
elseif op == 'remove' then
  redis.call('ZREM', KEYS[2], ARGV[7])
elseif op == 'key-live' then
  redis.call('HSET', KEYS[2], 'org', ARGV[6], 'key', ARGV[7])
elseif op == 'key-revoked' then
  if redis.call('HGET', KEYS[2], 'key') == ARGV[7] then
    redis.call('DEL', KEYS[2])
  end
end
if ARGV[8] == 'append' then
  if redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('SET', KEYS[3], ARGV[10] .. ARGV[9])
  else
    redis.call('APPEND', KEYS[3], ARGV[9])
  end
elseif ARGV[8] == 'delete' then
  redis.call('DEL', KEYS[3])
end
return -1
