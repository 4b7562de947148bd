//! The Lua scripts of the read path, one per read: each runs in one slot (an organization's, or the key
//! index's) and reads a whole answer atomically, so that one response never mixes two states. Public so
//! that the benchmarks run the very same scripts.

use std::sync::LazyLock;

use redis::Script;

/// A page of completed studies and their total (public so that benchmarks run the same script).
pub const STUDIES_PAGE: &str = r"
-- KEYS[1] completed studies (sorted set), KEYS[2] study documents (hash), KEYS[3] the organization's epoch;
-- ARGV[1] start, ARGV[2] stop
local total = redis.call('ZCARD', KEYS[1])
local epoch = redis.call('GET', KEYS[3])
local ids = redis.call('ZREVRANGE', KEYS[1], ARGV[1], ARGV[2])
if #ids == 0 then return {total, {}, epoch} end
return {total, redis.call('HMGET', KEYS[2], unpack(ids)), epoch}
";

/// The organization of a live API key, by the key's SHA-256; when the key has none, whether the key
/// index's epoch exists, read in the same slot at the same moment. The epoch is written with every key
/// event, so an index that held keys has one: without it the index itself was lost (its primary flushed
/// or restarted empty), and no projector may have marked the loss yet. That is not the key's absence.
pub const KEY_LOOKUP: &str = r"
-- KEYS[1] the key's index entry (hash), KEYS[2] the key index's epoch
local org = redis.call('HGET', KEYS[1], 'org')
if org then return org end
-- The epoch, which tells whether the index holds keys (an epoch is never empty), and which the API keeps
-- beside the key it found in no organization.
local epoch = redis.call('GET', KEYS[2])
if epoch and #epoch > 0 then return {epoch} end
return 0
";

/// One completed study's document.
pub const ONE_STUDY: &str = r"
-- KEYS[1] study documents, KEYS[2] the organization's epoch; ARGV[1] study id
return {redis.call('HGET', KEYS[1], ARGV[1]), redis.call('GET', KEYS[2])}
";

/// A page of a study's interviews with their transcripts, and their total. The transcripts' keys are
/// known only once the page's ids are: they are the prefix ARGV[4] and the id, in the slot of the
/// declared keys (the organization's), so the script may read them on a Redis Cluster too. While that
/// slot moves between primaries, a key this node no longer holds (or never held, which it cannot tell
/// apart) makes Redis refuse the read, and the script answers MOVING instead of a page with a transcript
/// missing: the page is then read one key at a time, each read following the slot wherever its key is
/// (see [`ReadModel::interviews`]).
///
/// The documents count first against the budget ARGV[5], then each transcript in the page's order: one
/// that fits is read whole; one that does not is answered as `{key, length, rewritten}` and sent in chunks
/// ([`super::transcript`]), so that no reply is larger than the budget.
pub const INTERVIEWS_PAGE: &str = r"
-- KEYS[1] completed studies, KEYS[2] the study's visible interviews, KEYS[3] interview documents, KEYS[4]
-- the organization's epoch, KEYS[5] the token of its last transcript rewrite; ARGV[1] study id, ARGV[2] start, ARGV[3] stop, ARGV[4] the prefix of the
-- organization's transcript keys, ARGV[5] the most bytes a reply may take. Nil when the study is not completed.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return false end
local epoch = redis.call('GET', KEYS[4])
local total = redis.call('ZCARD', KEYS[2])
local ids = redis.call('ZREVRANGE', KEYS[2], ARGV[2], ARGV[3])
if #ids == 0 then return {total, {}, {}, epoch} end
local keys, lengths, size = {}, {}, 0
for i, id in ipairs(ids) do
  keys[i] = ARGV[4] .. id
  local length = redis.pcall('STRLEN', keys[i])
  if type(length) == 'table' then return redis.error_reply('MOVING the page is moving between cluster nodes') end
  lengths[i] = length
  size = size + redis.call('HSTRLEN', KEYS[3], id)
end
local budget = tonumber(ARGV[5])
local whole = {KEYS[3]}
for i = 1, #ids do
  if lengths[i] > 0 and size + lengths[i] <= budget then
    size = size + lengths[i]
    whole[#whole + 1] = keys[i]
  end
end
local read = redis.pcall('MGET', unpack(whole))
if read.err then return redis.error_reply('MOVING the page is moving between cluster nodes') end
-- MGET answers nil for KEYS[3], a hash.
local transcripts, at = {}, 2
for i = 1, #ids do
  if lengths[i] == 0 then
    transcripts[i] = false
  elseif whole[at] == keys[i] then
    transcripts[i] = read[at]
    at = at + 1
  else
    transcripts[i] = {keys[i], lengths[i], redis.call('GET', KEYS[5]) or ''}
  end
end
return {total, redis.call('HMGET', KEYS[3], unpack(ids)), transcripts, epoch}
";

/// One interview's document and transcript: whole if it fits the budget ARGV[2], else
/// `{key, length, rewritten}`.
pub const ONE_INTERVIEW: &str = r"
-- KEYS[1] interview documents, KEYS[2] the interview's transcript, KEYS[3] the organization's epoch,
-- KEYS[4] the token of its last transcript rewrite; ARGV[1] interview id, ARGV[2] the most bytes a reply
-- may take
local doc = redis.call('HGET', KEYS[1], ARGV[1])
local epoch = redis.call('GET', KEYS[3])
local length = redis.call('STRLEN', KEYS[2])
if not doc or length == 0 then return {doc, false, epoch} end
if string.len(doc) + length > tonumber(ARGV[2]) then
  return {doc, {KEYS[2], length, redis.call('GET', KEYS[4]) or ''}, epoch}
end
return {doc, redis.call('GET', KEYS[2]), epoch}
";

/// Bytes of a long transcript, read only while no rewrite happened since its page was read.
pub const TRANSCRIPT_CHUNK: &str = r"
-- KEYS[1] the transcript, KEYS[2] the token of the organization's last transcript rewrite; ARGV[1] the
-- first byte, ARGV[2] the last, ARGV[3] the token as the page read it. REWRITTEN when it changed.
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[3] then
  return redis.error_reply('REWRITTEN the transcript was rewritten since its page was read')
end
return redis.call('GETRANGE', KEYS[1], ARGV[1], ARGV[2])
";

pub(super) static STUDIES_PAGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(STUDIES_PAGE));
pub(super) static KEY_LOOKUP_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(KEY_LOOKUP));
pub(super) static ONE_STUDY_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ONE_STUDY));
pub(super) static INTERVIEWS_PAGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INTERVIEWS_PAGE));
pub(super) static ONE_INTERVIEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ONE_INTERVIEW));
pub(super) static TRANSCRIPT_CHUNK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TRANSCRIPT_CHUNK));
