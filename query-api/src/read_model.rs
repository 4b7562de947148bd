//! Reads of the Redis read model. Each answer is one script or command in one hash slot, so a page's
//! total and items come from one consistent view, and every call is bounded by the connection's timeout.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Script, ScriptInvocation};
use shared::connection::Connection;
use shared::Keyspace;

use crate::pagination::Pagination;

/// A page of stored documents and the total they were taken from.
#[derive(Debug)]
pub struct Page<T> {
    pub total: u64,
    pub items: Vec<T>,
}

/// A stored interview document and its transcript.
pub type StoredInterview = (String, Option<String>);

/// A page of completed studies and their total (public so that benchmarks run the same script).
pub const STUDIES_PAGE: &str = r"
-- KEYS[1] completed studies (sorted set), KEYS[2] study documents (hash); ARGV[1] start, ARGV[2] stop
local total = redis.call('ZCARD', KEYS[1])
local ids = redis.call('ZREVRANGE', KEYS[1], ARGV[1], ARGV[2])
if #ids == 0 then return {total, {}} end
return {total, redis.call('HMGET', KEYS[2], unpack(ids))}
";

/// A page of a completed study's interviews with their transcripts, and their total.
pub const INTERVIEWS_PAGE: &str = r"
-- KEYS[1] completed studies, KEYS[2] the study's visible interviews, KEYS[3] interview documents,
-- KEYS[4] transcripts; ARGV[1] study id, ARGV[2] start, ARGV[3] stop. Nil when the study is not completed.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return false end
local total = redis.call('ZCARD', KEYS[2])
local ids = redis.call('ZREVRANGE', KEYS[2], ARGV[2], ARGV[3])
if #ids == 0 then return {total, {}, {}} end
return {total, redis.call('HMGET', KEYS[3], unpack(ids)), redis.call('HMGET', KEYS[4], unpack(ids))}
";

/// One interview's document and transcript.
pub const ONE_INTERVIEW: &str = r"
-- KEYS[1] interview documents, KEYS[2] transcripts; ARGV[1] interview id
return {redis.call('HGET', KEYS[1], ARGV[1]), redis.call('HGET', KEYS[2], ARGV[1])}
";

static STUDIES_PAGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(STUDIES_PAGE));
static INTERVIEWS_PAGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INTERVIEWS_PAGE));
static ONE_INTERVIEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ONE_INTERVIEW));

/// How long a read keeps trying while a slot of a Redis Cluster moves between primaries: the redirections
/// and `TRYAGAIN` replies of a half-moved slot that outlast the client's own retries.
const SLOT_MOVE_BUDGET: Duration = Duration::from_secs(3);

/// Runs `call` again, with short waits, while it fails with a cluster redirection or `TRYAGAIN`, for at
/// most [`SLOT_MOVE_BUDGET`]. Reads are idempotent, so a retry is always safe.
async fn settled<T, F, Fut>(mut call: F) -> RedisResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = RedisResult<T>>,
{
    let deadline = tokio::time::Instant::now() + SLOT_MOVE_BUDGET;
    let mut wait = Duration::from_millis(5);
    loop {
        match call().await {
            Err(e) if e.is_cluster_error() && tokio::time::Instant::now() + wait < deadline => {
                tracing::debug!(error = %e, "a slot is moving; reading again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

#[derive(Clone)]
pub struct ReadModel {
    conn: Connection,
}

impl ReadModel {
    pub fn new(conn: Connection) -> Self {
        Self { conn }
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        settled(|| {
            let mut conn = self.conn.clone();
            async move { cmd.query_async(&mut conn).await }
        })
        .await
    }

    async fn invoke<T: redis::FromRedisValue>(&self, invocation: &ScriptInvocation<'_>) -> RedisResult<T> {
        settled(|| {
            let mut conn = self.conn.clone();
            async move { invocation.invoke_async(&mut conn).await }
        })
        .await
    }

    /// The organization of a live API key, by the key's SHA-256.
    pub async fn organization_of(&self, keys: &Keyspace, sha256: &str) -> RedisResult<Option<String>> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(keys.api_key_sha(sha256)).arg("org");
        self.query(&cmd).await
    }

    pub async fn studies(&self, keys: &Keyspace, org: &str, page: Pagination) -> RedisResult<Page<String>> {
        let mut invocation = STUDIES_PAGE_SCRIPT.key(keys.studies(org));
        invocation.key(keys.study_documents(org)).arg(page.start()).arg(page.stop());
        let (total, docs): (u64, Vec<Option<String>>) = self.invoke(&invocation).await?;
        Ok(Page { total, items: docs.into_iter().flatten().collect() })
    }

    pub async fn study(&self, keys: &Keyspace, org: &str, id: &str) -> RedisResult<Option<String>> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(keys.study_documents(org)).arg(id);
        self.query(&cmd).await
    }

    /// A page of a study's interviews; `None` when the study is not a completed study of the organization.
    pub async fn interviews(
        &self,
        keys: &Keyspace,
        org: &str,
        study_id: &str,
        page: Pagination,
    ) -> RedisResult<Option<Page<StoredInterview>>> {
        type Reply = Option<(u64, Vec<Option<String>>, Vec<Option<String>>)>;
        let mut invocation = INTERVIEWS_PAGE_SCRIPT.key(keys.studies(org));
        invocation
            .key(keys.interviews(org, study_id))
            .key(keys.interview_documents(org))
            .key(keys.transcripts(org))
            .arg(study_id)
            .arg(page.start())
            .arg(page.stop());
        let reply: Reply = self.invoke(&invocation).await?;
        Ok(reply.map(|(total, docs, transcripts)| Page {
            total,
            items: docs.into_iter().zip(transcripts).filter_map(|(doc, t)| Some((doc?, t))).collect(),
        }))
    }

    pub async fn interview(&self, keys: &Keyspace, org: &str, id: &str) -> RedisResult<Option<StoredInterview>> {
        let mut invocation = ONE_INTERVIEW_SCRIPT.key(keys.interview_documents(org));
        invocation.key(keys.transcripts(org)).arg(id);
        let (doc, transcript): (Option<String>, Option<String>) = self.invoke(&invocation).await?;
        Ok(doc.map(|doc| (doc, transcript)))
    }

    /// How many partitions the generation is being projected again on after Redis lost data (0: none,
    /// the generation is complete as far as the projector knows).
    pub async fn healing_partitions(&self, keys: &Keyspace) -> RedisResult<u64> {
        let mut cmd = redis::cmd("HLEN");
        cmd.arg(keys.healing());
        self.query(&cmd).await
    }

    /// The live projectors' reports (instance id → JSON), for how fresh the read model is.
    pub async fn projectors(&self, prefix: &str) -> RedisResult<std::collections::HashMap<String, String>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(Keyspace::projectors(prefix));
        self.query(&cmd).await
    }

    /// The active generation, `None` when no projector has created a read model yet.
    pub async fn active_generation(&self, prefix: &str) -> RedisResult<Option<u64>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(Keyspace::active_generation(prefix));
        self.query(&cmd).await
    }
}
