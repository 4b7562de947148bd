//! Every Redis key name of the read model, in one place, so the projector and the API cannot disagree.
//!
//! Layout, under a configurable prefix `P` and a generation `N`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P:active-generation` | string | the generation the API serves |
//! | `P:generation-counter` | string | the last generation number handed out |
//! | `P:rebuild` | hash | the running rebuild: `generation`, `group`, `phase` |
//! | `P:rebuild-lock` | string | held (with a TTL) by the one running rebuild |
//! | `P:projectors` | hash | instance id → JSON state of each live projector (generation, paused, heartbeat); `~since` ([`PROJECTORS_SINCE`]): since when it holds every report |
//! | `P:gN:meta` | hash | when and by which consumer group generation N was built, and its `layout` version |
//! | `P:gN:{position-T}:position` | hash | per partition, one past the last offset this primary applied (one key per primary, `T` a tag in its slots), and `opened`: made before anything is written there, so that a primary without it lost its data; `layout`, the generation's (`crate::layout`), as a meta lost with its primary's data had it |
//! | `P:gN:healing` | hash | per partition being projected again after a loss: the offset to reach and the loss's id; from layout 4, `opened` ([`HEALING_OPENED`]) from the generation's start on, never removed |
//! | `P:gN:owner:<aggregate>:<id>` | string | up to layout 2: the organization recorded for an aggregate |
//! | `P:gN:owners:<aggregate>:<bucket>` | hash | from layout 3: id → the organization recorded for each aggregate whose id falls in the bucket (`shared::owners`) |
//! | `P:gN:{<org>}:study:<id>` | hash | `seq`, `state`: the projector's state of a study |
//! | `P:gN:{<org>}:studies` | sorted set | completed studies, score `completedAt` in µs, member id |
//! | `P:gN:{<org>}:study-docs` | hash | id → document of each completed study |
//! | `P:gN:{<org>}:interview:<id>` | hash | `seq`, `state`: the projector's state of an interview (from layout 2, a served one's is `{"served":true}` and its gaps: the rest is its document) |
//! | `P:gN:{<org>}:interviews:<studyId>` | sorted set | completed visible interviews, score `createdAt` in µs |
//! | `P:gN:{<org>}:interview-docs` | hash | id → document of each completed visible interview |
//! | `P:gN:{<org>}:transcript:<id>` | string | the WebVTT transcript of an interview, appended to as messages arrive |
//! | `P:gN:{<org>}:rewritten` | string | a token written anew whenever a transcript of the organization is rewritten rather than appended to (set, deleted, swapped in by a repair), so a long transcript sent in chunks is never sent half old, half new |
//! | `P:gN:{<org>}:epoch` | string | `<token>:<µs>`: a token written anew by every write to the organization (so API instances can keep its reads in memory, Redis pushing its change, and the projector sees a loss), and the latest `occurredAt` applied to it |
//! | `P:gN:{apikeys}:key:<keyId>` | hash | `seq`, `state` of an API key |
//! | `P:gN:{apikeys}:sha:<sha256>` | hash | `org`, `key`: the organization a live key belongs to |
//! | `P:gN:{apikeys}:epoch` | string | a token written anew whenever the key index changes, so the projector sees a loss |
//! | `P:gN:late` | hash | `<aggregate>:<id>` → organization, of each aggregate that received an event late for a gap (until repaired) |
//! | `P:gN:{<org>}:hold` | string | the token of the repair holding the organization's writes for its last moments (with a TTL) |
//! | `P:gN:{apikeys}:hold:<keyId>` | string | the token of the repair holding one API key's writes (with a TTL) |
//! | `P:gN:{<org>}:repairing` | string | the token of the one repair of the organization running (with a TTL) |
//! | `P:gN:{<org>}:swapped` | string | `<swap> <copies>`: written by a repair's swap as it runs (with a TTL), the proof a swap asked again after a lost reply looks for |
//! | `P:gN:{<org>}:repair:<run>:<rest>` | any | repair `run`'s staged copy of the organization's key `P:gN:{<org>}:<rest>`, swapped in at its end (with a TTL until then) |
//!
//! The braces are Redis Cluster hash tags: every key of one organization lives in one slot, so each event
//! and each page read is one atomic script in one slot; the API-key index lives in a slot of its own.
//! Documents live in per-organization hashes so that a page read declares every key it touches (the
//! sorted set and the document hash) while still reading a whole page in one script. Transcripts, which
//! grow with every message, are one string per interview instead, so that a message is one `APPEND`; a
//! page read learns their ids only from the sorted set, so it reads them by their shared prefix, in the
//! same slot.
//! Organization ids are escaped inside the tag so that no id can reach into another organization's keys;
//! other ids always stand last, after a prefix no other key shares, so they need no escaping.

use crate::Topic;

/// The field every healing hash ([`Keyspace::healing`]) holds from its generation's start on (layout 4 on,
/// `crate::layout::keeps_healing_opened`) and never loses but with the hash: the hash has no hash tag, so
/// it lives on one primary of a cluster, and a flush, an empty restart or a failover of that primary takes
/// it away while other primaries may still be healing. Without the field, an absent hash would read as
/// "nothing heals"; with it, its absence reads as "the healing state was lost": nothing is served until a
/// projector has marked the loss again, and the projector marks every partition as healing.
pub const HEALING_OPENED: &str = "opened";

/// The field of the projectors' reports ([`Keyspace::projectors`]) that says since when (Unix time, in
/// seconds) the hash has held every live projector's report: written by the first report into the hash
/// (`HSETNX`), never removed but with the hash. Without it the reports were lost (a flush, an empty
/// restart or a failover of the hash's primary), and an empty or short hash says nothing about who runs
/// until a live projector's report would have come back ([`crate::projectors::LIVENESS_TIMEOUT_SECS`]).
pub const PROJECTORS_SINCE: &str = "~since";

/// The keys of one generation of the read model under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyspace {
    prefix: String,
    generation: u64,
}

impl Keyspace {
    /// `prefix` must not contain `{` or `}` (it would change the hash slots).
    pub fn new(prefix: impl Into<String>, generation: u64) -> Self {
        let prefix = prefix.into();
        assert!(!prefix.contains(['{', '}']), "a key prefix must not contain braces");
        Self { prefix, generation }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The same prefix at another generation.
    pub fn at(&self, generation: u64) -> Self {
        Self { prefix: self.prefix.clone(), generation }
    }

    /// The pointer to the generation the API serves.
    pub fn active_generation(prefix: &str) -> String {
        format!("{prefix}:active-generation")
    }

    pub fn generation_counter(prefix: &str) -> String {
        format!("{prefix}:generation-counter")
    }

    pub fn rebuild(prefix: &str) -> String {
        format!("{prefix}:rebuild")
    }

    pub fn rebuild_lock(prefix: &str) -> String {
        format!("{prefix}:rebuild-lock")
    }

    pub fn projectors(prefix: &str) -> String {
        format!("{prefix}:projectors")
    }

    /// Facts about this generation itself (present from the moment it is started).
    pub fn meta(&self) -> String {
        format!("{}:meta", self.base())
    }

    /// What this generation's Redis applied, per partition: one key per primary of a cluster, named by a
    /// tag that hashes into one of its slots (see [`position_tag`]), so that the positions are lost or
    /// rolled back exactly with the data of that primary.
    pub fn position(&self, tag: &str) -> String {
        format!("{}:{{{tag}}}:position", self.base())
    }

    /// The positions of the primary serving the slot `ranges` (what the projector writes there and the
    /// API looks for where an organization has no epoch).
    pub fn positions_on(&self, ranges: &[(u16, u16)]) -> String {
        self.position(&position_tag(ranges).unwrap_or_else(|| "position-0".into()))
    }

    /// The partitions this generation is being projected again on after Redis lost data; while it has
    /// any, the generation is incomplete and the API answers 503.
    pub fn healing(&self) -> String {
        format!("{}:healing", self.base())
    }

    /// Whether `key` is one of this generation's positions (see [`Keyspace::position`]).
    pub fn is_position(&self, key: &str) -> bool {
        key.strip_prefix(&self.base())
            .and_then(|rest| rest.strip_prefix(":{"))
            .and_then(|tagged| tagged.split_once('}'))
            .is_some_and(|(_, rest)| rest == ":position")
    }

    /// Whether `key` of this generation is the projector's bookkeeping (its meta, positions or healing),
    /// not the read model itself: a digest leaves these out.
    pub fn is_bookkeeping(&self, key: &str) -> bool {
        if key == self.meta() || key == self.healing() || key == self.late() {
            return true;
        }
        // `base:{tag}:position`, `base:{tag}:epoch`, `base:{tag}:rewritten`, `base:{tag}:hold`, `base:{tag}:repairing`, `base:{tag}:swapped`,
        // `base:{tag}:repair:…` and `base:{apikeys}:hold:…`; the tag ends at its first `}` (ids in tags
        // are escaped), so no id standing last in another key can look like these.
        let Some(tagged) = key.strip_prefix(&self.base()).and_then(|rest| rest.strip_prefix(":{")) else {
            return false;
        };
        match tagged.split_once('}') {
            Some((_, ":position" | ":epoch" | ":rewritten" | ":hold" | ":repairing" | ":swapped")) => true,
            Some((tag, rest)) => rest.starts_with(":repair:") || (tag == "apikeys" && rest.starts_with(":hold:")),
            None => false,
        }
    }

    /// Aggregates that received an event late for a gap in their sequence (field `<aggregate>:<id>`, see
    /// [`Keyspace::late_field`]; value the organization), until a repair redoes them. Bookkeeping.
    pub fn late(&self) -> String {
        format!("{}:late", self.base())
    }

    /// The field of an aggregate in [`Keyspace::late`].
    pub fn late_field(topic: Topic, id: &str) -> String {
        format!("{}:{id}", topic.aggregate())
    }

    /// Held by a repair while it swaps an organization's repaired data in: the write script refuses the
    /// organization's events while it holds another token. Bookkeeping, with a TTL.
    pub fn hold(&self, org: &str) -> String {
        format!("{}:hold", self.org(org))
    }

    /// Held by a repair while it writes one API key's repaired state. Bookkeeping, with a TTL.
    pub fn api_key_hold(&self, key_id: &str) -> String {
        format!("{}:{{apikeys}}:hold:{key_id}", self.base())
    }

    /// Held by the one repair of an organization running (from before it stages anything until its swap):
    /// a second repair of it waits. Bookkeeping, with a TTL.
    pub fn repair_lease(&self, org: &str) -> String {
        format!("{}:repairing", self.org(org))
    }

    /// Written by a repair's swap in the script that swaps (the swap's id and how many staged copies it put
    /// in place), so that a swap asked again after its reply was lost can tell "done" from "lost with
    /// the hold": the hold and the staged copies gone prove nothing, a flush takes them too. Bookkeeping,
    /// with a TTL.
    pub fn swapped(&self, org: &str) -> String {
        format!("{}:swapped", self.org(org))
    }

    /// The copy staged by repair `run` (a token without `:`), in the same slot, of `live`, a key of an
    /// organization's slot (`base:{org}:rest` becomes `base:{org}:repair:<run>:rest`); None for a key of
    /// no organization.
    pub fn staged(&self, live: &str, run: &str) -> Option<String> {
        let tagged = live.strip_prefix(&self.base())?.strip_prefix(":{")?;
        let (tag, rest) = tagged.split_once('}')?;
        (tag != "apikeys" && rest.starts_with(':')).then(|| format!("{}:{{{tag}}}:repair:{run}{rest}", self.base()))
    }

    /// The repair run that staged `key`, if it is a staged copy ([`Keyspace::staged`]) of this generation.
    pub fn staged_by<'k>(&self, key: &'k str) -> Option<&'k str> {
        let tagged = key.strip_prefix(&self.base())?.strip_prefix(":{")?;
        let (_, rest) = tagged.split_once('}')?;
        rest.strip_prefix(":repair:")?.split(':').next()
    }

    /// Every key of an organization's slot in this generation matches this pattern (for SCAN), its
    /// bookkeeping included; the organization's id is escaped for the pattern.
    pub fn org_pattern(&self, org: &str) -> String {
        let mut pattern = String::new();
        for c in self.org(org).chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push_str(":*");
        pattern
    }

    /// Every key of this generation matches this pattern (for SCAN).
    pub fn pattern(&self) -> String {
        format!("{}:g{}:*", self.prefix, self.generation)
    }

    fn base(&self) -> String {
        format!("{}:g{}", self.prefix, self.generation)
    }

    fn org(&self, org: &str) -> String {
        format!("{}:{{{}}}", self.base(), escape(org))
    }

    /// An aggregate's owner as a key of its own (up to layout 2, see [`crate::owners`]).
    pub fn owner(&self, topic: Topic, id: &str) -> String {
        format!("{}:owner:{}:{id}", self.base(), topic.aggregate())
    }

    /// One of the hashes that hold an aggregate type's owners, a field each (from layout 3, see
    /// [`crate::owners`]).
    pub fn owners(&self, topic: Topic, bucket: u16) -> String {
        format!("{}:owners:{}:{bucket}", self.base(), topic.aggregate())
    }

    /// The aggregate type and id whose owner `key` is, if it is one of [`Keyspace::owner`].
    pub fn owner_of<'k>(&self, key: &'k str) -> Option<(Topic, &'k str)> {
        let rest = key.strip_prefix(self.base().as_str())?.strip_prefix(":owner:")?;
        let (aggregate, id) = rest.split_once(':')?;
        Topic::ALL.into_iter().find(|topic| topic.aggregate() == aggregate).map(|topic| (topic, id))
    }

    /// The aggregate type whose owners `key` holds, if it is one of [`Keyspace::owners`].
    pub fn owners_of(&self, key: &str) -> Option<Topic> {
        let rest = key.strip_prefix(self.base().as_str())?.strip_prefix(":owners:")?;
        let (aggregate, bucket) = rest.split_once(':')?;
        bucket.parse::<u16>().ok()?;
        Topic::ALL.into_iter().find(|topic| topic.aggregate() == aggregate)
    }

    /// The state hash of an aggregate: in its organization's slot, or the API-key slot for keys.
    pub fn aggregate(&self, topic: Topic, org: &str, id: &str) -> String {
        match topic {
            Topic::Study => format!("{}:study:{id}", self.org(org)),
            Topic::Interview => format!("{}:interview:{id}", self.org(org)),
            Topic::ApiKey => format!("{}:{{apikeys}}:key:{id}", self.base()),
        }
    }

    pub fn studies(&self, org: &str) -> String {
        format!("{}:studies", self.org(org))
    }

    pub fn study_documents(&self, org: &str) -> String {
        format!("{}:study-docs", self.org(org))
    }

    pub fn interview_documents(&self, org: &str) -> String {
        format!("{}:interview-docs", self.org(org))
    }

    /// Whether `key` is an organization's documents hash of this generation ([`Keyspace::study_documents`],
    /// [`Keyspace::interview_documents`]).
    pub fn is_documents(&self, key: &str) -> bool {
        let Some(tagged) = key.strip_prefix(self.base().as_str()).and_then(|k| k.strip_prefix(":{")) else {
            return false;
        };
        tagged.find('}').is_some_and(|close| matches!(&tagged[close..], "}:study-docs" | "}:interview-docs"))
    }

    /// For the key of an interview's state ([`Keyspace::aggregate`]), the key of its organization's
    /// documents and the interview's id; `None` for any other key.
    pub fn documents_of_interview_state<'k>(&self, key: &'k str) -> Option<(String, &'k str)> {
        let tagged = key.strip_prefix(self.base().as_str())?.strip_prefix(":{")?;
        // An organization's id is escaped in its tag: the first closing brace ends it.
        let close = tagged.find('}')?;
        let id = tagged[close..].strip_prefix("}:interview:")?;
        Some((format!("{}:{{{}}}:interview-docs", self.base(), &tagged[..close]), id))
    }

    /// One interview's transcript: a string of its own, so that adding messages is an `APPEND` whose cost
    /// does not grow with the transcript. `APPEND` leaves the string room to grow (up to its length again):
    /// the write script rewrites it once at its exact size when the interview enters its list. A page read reaches these keys from `transcript(org, "")`, the
    /// prefix every one of them shares (the id stands last).
    pub fn transcript(&self, org: &str, interview_id: &str) -> String {
        format!("{}:transcript:{interview_id}", self.org(org))
    }

    /// The token of the organization's last transcript rewrite (any change but an append: a transcript
    /// set, deleted, swapped in by a repair, or written whole while its interview is served); absent while
    /// none was. A long transcript is sent a chunk
    /// at a time, each chunk read only while this still holds what it held when the page was read, so a
    /// rewrite cuts the response short instead of mixing two versions. Bookkeeping.
    pub fn transcripts_rewritten(&self, org: &str) -> String {
        format!("{}:rewritten", self.org(org))
    }

    /// An organization's epoch: a token the write script replaces whenever it applies an event of the
    /// organization. The API's page reads return it with the page, and an API instance that keeps reads
    /// in memory drops an organization's when its epoch changes. Bookkeeping, like the key index's.
    pub fn org_epoch(&self, org: &str) -> String {
        format!("{}:epoch", self.org(org))
    }

    pub fn interviews(&self, org: &str, study_id: &str) -> String {
        format!("{}:interviews:{study_id}", self.org(org))
    }

    pub fn api_key_sha(&self, sha256_hex: &str) -> String {
        format!("{}:{{apikeys}}:sha:{sha256_hex}", self.base())
    }

    /// The key index's epoch: a token the write script replaces whenever it applies an API-key event.
    /// An API instance that keeps keys in memory drops them all when it reads a different one (or none),
    /// so a revoked key is refused as soon as the new epoch is read. Bookkeeping: two builds of the same
    /// events hold different tokens.
    pub fn api_key_epoch(&self) -> String {
        format!("{}:{{apikeys}}:epoch", self.base())
    }
}

/// The longest id (an organization's, an aggregate's, an event's, a study's) the read model holds: an event
/// with a longer one is poison ([`crate::events::decode`]), so the API answers a longer id not found without
/// a read. Bounds every key a document is stored under.
pub const MAX_ID_BYTES: usize = 256;

/// Escapes the characters that could end a hash tag or a key segment early.
fn escape(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for c in id.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out
}

/// The SHA-256 of an API key's UTF-8 bytes: what the per-key rate limit counts by.
pub fn key_digest(key: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes()).into()
}

/// The lowercase hex SHA-256 of an API key's UTF-8 bytes: how `api_key.created` carries a key, and how
/// the key index ([`Keyspace::api_key_sha`]) names it.
pub fn key_sha256(key: &str) -> String {
    hex::encode(key_digest(key))
}

/// The Redis Cluster slot of `key` (CRC16 of its hash tag, modulo 16384).
pub fn slot(key: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).as_bytes()) % 16384
}

/// A position tag whose slot is within one of `ranges` (inclusive): `position-<n>` for the smallest such n.
pub fn position_tag(ranges: &[(u16, u16)]) -> Option<String> {
    (0..200_000u32).map(|n| format!("position-{n}")).find(|tag| {
        let slot = slot(tag);
        ranges.iter().any(|(low, high)| (*low..=*high).contains(&slot))
    })
}

/// The hash tag Redis Cluster would use for `key` (the whole key when it has none).
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

#[cfg(test)]
mod tests;
