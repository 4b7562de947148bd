-- What other layouts of the read model would cost, measured on a replayed one: each candidate is written
-- beside the real keys under `P:candidates:`, measured with MEMORY USAGE and deleted. Run once, on one
-- Redis (not a cluster), after a replay: it scans the whole generation in one script.
-- ARGV[1] the generation's base (`P:gN`)
-- Returns name, bytes pairs: the layout now, then each candidate for the same records.
local base = ARGV[1]
local scratch = base .. ':candidates'
local function scan(pattern, each)
  local cursor = '0'
  repeat
    local reply = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', 5000)
    cursor = reply[1]
    for _, key in ipairs(reply[2]) do
      each(key)
    end
  until cursor == '0'
end
local function usage(key)
  return redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')
end
local function drop(pattern)
  local total = 0
  scan(pattern, function(key)
    total = total + usage(key)
    redis.call('DEL', key)
  end)
  return total
end

-- Interview states: one hash per interview now (`seq`, `state`).
local states, as_string, stripped = 0, 0, 0
scan(base .. ':{*}:interview:*', function(key)
  local seq, state = unpack(redis.call('HMGET', key, 'seq', 'state'))
  states = states + usage(key)
  local org, id = string.match(key, '{(.-)}:interview:(.*)$')
  -- A name of the same length, so that the key's own cost is the same.
  local twin = string.gsub(key, ':interview:', ':interviex:')
  -- (a) one string per interview: the sequence, a newline, the state.
  redis.call('SET', twin, seq .. '\n' .. state)
  as_string = as_string + usage(twin)
  redis.call('DEL', twin)
  -- (b) a served interview's state without what its document holds: its times in microseconds and its
  -- flags (a value of that length), the rest read from the document when the next event is folded.
  local served = redis.call('HEXISTS', base .. ':{' .. org .. '}:interview-docs', id) == 1
  local kept = served and '{"c":1767225600123456,"u":1767225600654321,"f":1}' or state
  redis.call('HSET', twin, 'seq', seq, 'state', kept)
  stripped = stripped + usage(twin)
  redis.call('DEL', twin)
  -- (c) every state of an organization in one hash, and (d) the same with (b).
  redis.call('HSET', scratch .. ':{' .. org .. '}:states', id, seq .. '\n' .. state)
  redis.call('HSET', scratch .. ':{' .. org .. '}:stripped', id, seq .. '\n' .. kept)
end)
local per_org = drop(scratch .. ':{*}:states')
local per_org_stripped = drop(scratch .. ':{*}:stripped')

-- Owners: one string per aggregate (up to layout 2) or fields of 32,768 hashes per aggregate type (from
-- layout 3) now; (e) in 4,096 and (f) in 65,536 hashes, by the first hex digits of the SHA-1 of the
-- aggregate's id.
local owners = 0
local function candidate(id, org)
  local digest = redis.sha1hex(id)
  redis.call('HSET', scratch .. ':owners3:{' .. string.sub(digest, 1, 3) .. '}', id, org)
  redis.call('HSET', scratch .. ':owners4:{' .. string.sub(digest, 1, 4) .. '}', id, org)
end
scan(base .. ':owner:*', function(key)
  owners = owners + usage(key)
  candidate(string.match(key, ':owner:[^:]*:(.*)$'), redis.call('GET', key))
end)
scan(base .. ':owners:*', function(key)
  owners = owners + usage(key)
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    candidate(fields[i], fields[i + 1])
  end
end)
local owners_4096 = drop(scratch .. ':owners3:*')
local owners_65536 = drop(scratch .. ':owners4:*')

-- Transcripts now, and (g) every one at its exact size (those of interviews not served yet keep the room
-- APPEND left them).
local transcripts, exact = 0, 0
scan(base .. ':{*}:transcript:*', function(key)
  transcripts = transcripts + usage(key)
  local twin = string.gsub(key, ':transcript:', ':transcripx:')
  redis.call('SET', twin, redis.call('GET', key))
  exact = exact + usage(twin)
  redis.call('DEL', twin)
end)

return {
  'interview_states', states, 'states_as_strings', as_string, 'states_served_stripped', stripped,
  'states_per_org', per_org, 'states_per_org_stripped', per_org_stripped,
  'owners', owners, 'owners_in_4096', owners_4096, 'owners_in_65536', owners_65536,
  'transcripts', transcripts, 'transcripts_exact', exact,
}
