//! Reads of the Redis read model. Each answer is one script or command in one hash slot, so a page's
//! total and items come from one consistent view, and every call is bounded by the connection's timeout.
//! Every read of an organization also returns the organization's epoch as it was at that moment
//! (`Keyspace::org_epoch`), for what keeps reads in memory ([`crate::read::cache`]) and for how fresh the
//! answer is. The connection is made on first use, so that the API starts and answers `/livez` while Redis
//! is away.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, RedisResult, ScriptInvocation, Value};
use shared::codec::StoredDocument;
use shared::connection::{Connection, Settings};
use shared::log_every::LogEvery;
use shared::redis_tls::{refusal, Refusal, Tls};
use shared::redis_url::Target;
use shared::Keyspace;
use tokio::sync::OnceCell;

use super::document::InterviewDoc;
use super::scripts::{
    INTERVIEWS_PAGE_SCRIPT, KEY_LOOKUP_SCRIPT, ONE_INTERVIEW_SCRIPT, ONE_STUDY_SCRIPT, STUDIES_PAGE_SCRIPT,
};
use super::transcript::Transcript;
use super::Span;

/// A page of stored documents and the total they were taken from.
#[derive(Debug)]
pub struct Page<T> {
    pub total: u64,
    pub items: Vec<T>,
}

/// An interview as read: its stored document and its transcript.
pub type InterviewRead = (InterviewDoc, Transcript);

/// A page of interviews as Redis answers it: total, documents, transcripts (see [`Transcript::from_reply`])
/// and the organization's epoch; `None` when the study is not completed.
pub(super) type PageReply = Option<(u64, Vec<Option<StoredDocument>>, Vec<Value>, OrgEpoch)>;

/// An organization's epoch, with which each read of it is tagged: `None` when it has none.
pub type OrgEpoch = Option<String>;

/// The read of a live API key's organization, by the key's SHA-256 (`HGET` of its index entry): what
/// the API keeps in memory, Redis pushing its changes.
pub fn organization_of(keys: &Keyspace, sha256: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("HGET");
    cmd.arg(keys.api_key_sha(sha256)).arg("org");
    cmd
}

/// What a lookup of an API key found.
#[derive(Debug, PartialEq)]
pub enum KeyLookup {
    /// A live key of this organization.
    Organization(String),
    /// No live key by that SHA-256, in an index that holds keys; the index's epoch read with it.
    Unknown(String),
    /// No such key, and no key index either: it was lost, or has never held a key.
    IndexMissing,
}

/// The read of an organization's epoch (`GET`): what the API keeps in memory, Redis pushing its changes.
pub fn org_epoch(keys: &Keyspace, org: &str) -> redis::Cmd {
    get(keys.org_epoch(org))
}

/// The read of the key index's epoch: what vouches for the invalid keys kept in memory
/// (`crate::auth::invalid`).
pub fn key_index_epoch(keys: &Keyspace) -> redis::Cmd {
    get(keys.api_key_epoch())
}

fn get(key: String) -> redis::Cmd {
    let mut cmd = redis::cmd("GET");
    cmd.arg(key);
    cmd
}

/// Whether a script's error says the organization's slot is moving between cluster primaries: a
/// redirection, TRYAGAIN, the page script's MOVING, or a timeout (the client's own retries of a
/// redirection can outlast the call's timeout). Only asked on a cluster: a single Redis that timed out is
/// slow, and more commands would not help it.
fn slot_moving(e: &RedisError) -> bool {
    e.is_cluster_error() || e.is_timeout() || e.code() == Some("MOVING") || e.to_string().contains("MOVING")
}

/// How long a read keeps trying while a slot of a Redis Cluster moves between primaries: the redirections
/// and `TRYAGAIN` replies of a half-moved slot that outlast the client's own retries.
const SLOT_MOVE_BUDGET: Duration = Duration::from_secs(3);

/// Runs `call` again, with short waits, while it fails with a cluster redirection or `TRYAGAIN`, for at
/// most [`SLOT_MOVE_BUDGET`]. Reads are idempotent, so a retry is always safe. On a cluster, a call that
/// timed out is tried again too, once at least and then while the budget lasts: the client's own retries
/// of a moving slot's redirections can outlast the timeout and wedge its connection, which is replaced
/// when that happens (`shared::connection`), and a busy machine can wedge the new one as well.
async fn settled<T, F, Fut>(mut call: F, cluster: bool) -> RedisResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = RedisResult<T>>,
{
    let deadline = tokio::time::Instant::now() + SLOT_MOVE_BUDGET;
    let mut wait = Duration::from_millis(5);
    let mut timed_out = false;
    loop {
        match call().await {
            Err(e) if cluster && e.is_timeout() && (!timed_out || tokio::time::Instant::now() < deadline) => {
                tracing::debug!(error = %e, "a cluster read timed out; reading again on the new connection");
                timed_out = true;
            }
            Err(e) if e.is_cluster_error() && tokio::time::Instant::now() + wait < deadline => {
                tracing::debug!(error = %e, "a slot is moving; reading again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// The first wait between two attempts to connect at start, doubling up to [`START_RETRY_MAX`].
const START_RETRY_FIRST: Duration = Duration::from_millis(100);
const START_RETRY_MAX: Duration = Duration::from_secs(1);

/// Failed attempts to connect at start: logged once every ten seconds at most.
static UNCONNECTED: LogEvery = LogEvery::millis(10_000);

/// The read model's Redis, connected on first use.
#[derive(Clone)]
pub struct ReadModel(Arc<Lazy>);

struct Lazy {
    target: Target,
    settings: Settings,
    tls: Tls,
    conn: OnceCell<Connection>,
}

impl ReadModel {
    /// Checks the URL now; connects on first use, with the certificates of `tls` on `rediss://`.
    pub fn new(target: Target, tls: Tls, timeout: Duration) -> RedisResult<Self> {
        if let Target::Single(url) = &target {
            redis::Client::open(url.as_str())?;
        }
        // Retries on a cluster wait 10 ms doubling: ten of them (about 2.5 s at most) ride out a slot moving.
        let settings = Settings { timeout, cluster_retries: 10 };
        Ok(Self(Arc::new(Lazy { target, settings, tls, conn: OnceCell::new() })))
    }

    /// Connects as the API starts, trying again until an attempt succeeds or Redis refuses the connection
    /// for good (a certificate not trusted, a password refused: an error). A failed attempt that is not a
    /// refusal (Redis away, or an attempt that timed out on a busy machine) proves nothing either way, so
    /// it is tried again: only a success or a refusal ends the start. Requests answer 503 meanwhile.
    pub async fn connect_at_start(&self) -> Result<(), Refusal> {
        let mut wait = START_RETRY_FIRST;
        loop {
            match self.conn().await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    if let Some(refused) = refusal(&e) {
                        return Err(refused);
                    }
                    if let Some(skipped) = UNCONNECTED.allow() {
                        tracing::warn!(error = %e, skipped, "could not connect to redis yet; trying again");
                    }
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(START_RETRY_MAX);
        }
    }

    /// The connection; made now if it is not yet, failing within the Redis timeout.
    async fn conn(&self) -> RedisResult<&Connection> {
        let lazy = &self.0;
        let connect = async {
            let conn = Connection::connect_with(&lazy.target, lazy.settings, &lazy.tls);
            match tokio::time::timeout(lazy.settings.timeout, conn).await {
                Ok(conn) => conn,
                Err(_) => Err(RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))),
            }
        };
        lazy.conn.get_or_try_init(|| connect).await
    }

    /// Whether the read model is a Redis Cluster.
    fn cluster(&self) -> bool {
        matches!(self.0.target, Target::Cluster(_))
    }

    pub(super) async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        let (conn, cluster) = (self.conn().await?, self.cluster());
        let call = || {
            let mut conn = conn.clone();
            async move {
                if !cluster {
                    return cmd.query_async(&mut conn).await;
                }
                // On a cluster, as a batch of one (`shared::cluster_pipeline`): a key of a moving slot is
                // followed to the importing primary with `ASKING` in the same pipeline. The client's own
                // `ASKING`, a request of its own, is separated from its command on a busy connection, and
                // the read is answered `ASK` again and again for as long as the slot moves.
                let mut replies = conn.query_all(std::slice::from_ref(cmd)).await?;
                Ok(T::from_redis_value(replies.pop().unwrap_or(Value::Nil))?)
            }
        };
        settled(call, cluster).await
    }

    /// Whether the primary serving `org`'s slot holds the projector's positions (`HVALS`, which the API's
    /// Redis user may run, of a hash of one field per partition).
    pub async fn positions_kept(&self, keys: &Keyspace, org: &str) -> RedisResult<bool> {
        let mut conn = self.conn().await?.clone();
        let ranges = conn.ranges_serving(shared::keys::slot(&keys.org_epoch(org))).await?;
        let positions: Vec<redis::Value> = self.query(redis::cmd("HVALS").arg(keys.positions_on(&ranges))).await?;
        Ok(!positions.is_empty())
    }

    /// Runs a script (a page read, or a long transcript's chunk), riding out a slot that moves.
    pub(super) async fn invoke<T: redis::FromRedisValue>(&self, invocation: &ScriptInvocation<'_>) -> RedisResult<T> {
        let conn = self.conn().await?;
        let call = || {
            let mut conn = conn.clone();
            async move { invocation.invoke_async(&mut conn).await }
        };
        settled(call, self.cluster()).await
    }

    /// The organization of a live API key, by the key's SHA-256, or why there is none
    /// ([`super::scripts::KEY_LOOKUP`]).
    pub async fn key_lookup(&self, keys: &Keyspace, sha256: &str) -> RedisResult<KeyLookup> {
        let mut invocation = KEY_LOOKUP_SCRIPT.key(keys.api_key_sha(sha256));
        invocation.key(keys.api_key_epoch());
        match self.invoke(&invocation).await? {
            redis::Value::Int(_) => Ok(KeyLookup::IndexMissing),
            epoch @ redis::Value::Array(_) => {
                let (epoch,): (String,) = redis::FromRedisValue::from_redis_value(epoch)?;
                Ok(KeyLookup::Unknown(epoch))
            }
            org => Ok(KeyLookup::Organization(redis::FromRedisValue::from_redis_value(org)?)),
        }
    }

    pub async fn studies(&self, keys: &Keyspace, org: &str, page: Span) -> RedisResult<(Page<String>, OrgEpoch)> {
        let mut invocation = STUDIES_PAGE_SCRIPT.key(keys.studies(org));
        invocation.key(keys.study_documents(org)).key(keys.org_epoch(org)).arg(page.start).arg(page.stop);
        let (total, docs, epoch): (u64, Vec<Option<StoredDocument>>, OrgEpoch) = self.invoke(&invocation).await?;
        Ok((Page { total, items: docs.into_iter().flatten().map(|doc| doc.0).collect() }, epoch))
    }

    pub async fn study(&self, keys: &Keyspace, org: &str, id: &str) -> RedisResult<(Option<String>, OrgEpoch)> {
        let mut invocation = ONE_STUDY_SCRIPT.key(keys.study_documents(org));
        invocation.key(keys.org_epoch(org)).arg(id);
        let (doc, epoch): (Option<StoredDocument>, OrgEpoch) = self.invoke(&invocation).await?;
        Ok((doc.map(|doc| doc.0), epoch))
    }

    /// A page of a study's interviews, its transcripts whole while they fit in `budget` bytes (see
    /// [`INTERVIEWS_PAGE`]); `None` when the study is not a completed study of the organization.
    pub async fn interviews(
        &self,
        keys: &Keyspace,
        org: &str,
        study_id: &str,
        page: Span,
        budget: u64,
    ) -> RedisResult<Option<(Page<InterviewRead>, OrgEpoch)>> {
        let mut invocation = INTERVIEWS_PAGE_SCRIPT.key(keys.studies(org));
        invocation
            .key(keys.interviews(org, study_id))
            .key(keys.interview_documents(org))
            .key(keys.org_epoch(org))
            .key(keys.transcripts_rewritten(org))
            .arg(study_id)
            .arg(page.start)
            .arg(page.stop)
            .arg(keys.transcript(org, ""))
            .arg(budget);
        // Tried once (the client itself retries a redirection): a slot can stay half moved between two
        // primaries for as long as its keys take to move, one at a time, longer than any retry budget.
        let once = {
            let mut conn = self.conn().await?.clone();
            invocation.invoke_async(&mut conn).await
        };
        let reply: PageReply = match once {
            Err(e) if self.cluster() && slot_moving(&e) => {
                tracing::debug!(org, "the organization's slot is moving; reading the page key by key");
                self.interviews_key_by_key(keys, org, study_id, page, budget).await?
            }
            other => other?,
        };
        let Some((total, docs, transcripts, epoch)) = reply else { return Ok(None) };
        let mut items = Vec::with_capacity(docs.len());
        let rewritten = keys.transcripts_rewritten(org);
        for (doc, transcript) in docs.into_iter().zip(transcripts) {
            if let Some(doc) = doc {
                items.push((InterviewDoc::new(doc.0), Transcript::from_reply(transcript, &rewritten)?));
            }
        }
        Ok(Some((Page { total, items }, epoch)))
    }

    pub async fn interview(
        &self,
        keys: &Keyspace,
        org: &str,
        id: &str,
        budget: u64,
    ) -> RedisResult<(Option<InterviewRead>, OrgEpoch)> {
        let mut invocation = ONE_INTERVIEW_SCRIPT.key(keys.interview_documents(org));
        invocation.key(keys.transcript(org, id)).key(keys.org_epoch(org)).key(keys.transcripts_rewritten(org));
        invocation.arg(id).arg(budget);
        // On a cluster, tried once, as a page is: while the organization's slot moves, a declared key that
        // does not exist (an interview without a transcript, an organization without a rewrite) makes
        // Redis answer TRYAGAIN for as long as the move lasts, longer than any retry budget.
        let reply: (Option<StoredDocument>, Value, OrgEpoch) = if self.cluster() {
            let once = {
                let mut conn = self.conn().await?.clone();
                invocation.invoke_async(&mut conn).await
            };
            match once {
                Err(e) if slot_moving(&e) => {
                    tracing::debug!(org, "the organization's slot is moving; reading the interview key by key");
                    return self.interview_key_by_key(keys, org, id, budget).await;
                }
                other => other?,
            }
        } else {
            self.invoke(&invocation).await?
        };
        let (doc, transcript, epoch) = reply;
        let found = match doc {
            Some(doc) => {
                let rewritten = keys.transcripts_rewritten(org);
                Some((InterviewDoc::new(doc.0), Transcript::from_reply(transcript, &rewritten)?))
            }
            None => None,
        };
        Ok((found, epoch))
    }

    /// Where the generation is being projected again after Redis lost data: the slots its losses touched,
    /// nothing when it is complete as far as the projector knows (no healing entry left), or that the
    /// healing state itself was lost (`opened`: the generation's layout keeps it, see [`Healing`]).
    pub async fn healing(&self, keys: &Keyspace, opened: bool) -> RedisResult<super::healing::Healing> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(keys.healing());
        let entries: std::collections::HashMap<String, String> = self.query(&cmd).await?;
        Ok(super::healing::Healing::of(entries, opened))
    }

    /// The live projectors' reports (instance id → JSON `shared::ProjectorReport`), for how fresh the read
    /// model is.
    pub async fn projectors(&self, prefix: &str) -> RedisResult<std::collections::HashMap<String, String>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(Keyspace::projectors(prefix));
        self.query(&cmd).await
    }

    /// The active generation, `None` when no projector has created a read model yet.
    /// The layout of a generation (`shared::layout`): its meta's field or, when Redis lost that (the meta
    /// sits on one primary of a cluster), the one every primary records beside its positions; none for a
    /// generation written before either existed, which is layout 1. Read as layout 1, a generation of a
    /// later one would take its healing state lost with the meta for "nothing heals".
    pub async fn layout(&self, keys: &Keyspace) -> RedisResult<Option<String>> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(keys.meta()).arg(shared::layout::FIELD);
        if let Some(field) = self.query(&cmd).await? {
            return Ok(Some(field));
        }
        let mut found = Vec::new();
        for node in self.conn().await?.clone().nodes().await? {
            let mut get = redis::cmd("HGET");
            get.arg(keys.positions_on(&node.slots)).arg(shared::layout::POSITIONS_FIELD);
            found.push(self.query(&get).await?);
        }
        Ok(shared::layout::highest_recorded(found))
    }

    pub async fn active_generation(&self, prefix: &str) -> RedisResult<Option<u64>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(Keyspace::active_generation(prefix));
        self.query(&cmd).await
    }
}
