-- Writes owners COUNT records, from FIRST, as the read model would: `key` a string each (layouts 1 and 2),
-- `field` a field of one of BUCKETS hashes (layout 3). The bucket here is taken from the id's SHA-1, which
-- Lua has; the projector takes it from the id's CRC16: both spread ids evenly, so the hashes fill alike.
-- ARGV: form, first, count, buckets
local form, first, count, buckets = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
for n = first, first + count - 1 do
  -- Ids of a ULID's 26 characters, organization ids of 20.
  local id = string.format('01J%023d', n * 7919)
  local org = string.format('org_%016d', n % 50000)
  if form == 'key' then
    redis.call('SET', 'rm:g1:owner:interview:' .. id, org)
  else
    local bucket = tonumber(string.sub(redis.sha1hex(id), 1, 8), 16) % buckets
    redis.call('HSET', 'rm:g1:owners:interview:' .. bucket, id, org)
  end
end
return count
