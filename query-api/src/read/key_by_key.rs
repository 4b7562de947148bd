//! The reads of an interviews page and of one interview while the organization's slot moves between
//! Redis Cluster primaries: their scripts are refused then (a declared key this node no longer holds, or
//! never held), so each key is read on its own, following its key wherever it is. Kept apart from the
//! scripts' path (`super::model`), which every other read takes.

use redis::{RedisResult, Value};
use shared::codec::StoredDocument;
use shared::Keyspace;

use super::document::InterviewDoc;
use super::model::{InterviewRead, OrgEpoch, PageReply, ReadModel};
use super::transcript::{Long, Transcript};
use super::Span;

impl ReadModel {
    /// The interviews page as separate reads of one key each, while the organization's slot moves: each
    /// read follows its key to the primary that has it. Not one view of the organization as the script's,
    /// but every part of it is what Redis holds; so it has no epoch, and is never kept in memory.
    pub(super) async fn interviews_key_by_key(
        &self,
        keys: &Keyspace,
        org: &str,
        study_id: &str,
        page: Span,
        budget: u64,
    ) -> RedisResult<PageReply> {
        let mut completed = redis::cmd("ZSCORE");
        completed.arg(keys.studies(org)).arg(study_id);
        if self.query::<Option<f64>>(&completed).await?.is_none() {
            return Ok(None);
        }
        let listed = keys.interviews(org, study_id);
        let total: u64 = self.query(redis::cmd("ZCARD").arg(&listed)).await?;
        let ids: Vec<String> = self.query(redis::cmd("ZREVRANGE").arg(&listed).arg(page.start).arg(page.stop)).await?;
        if ids.is_empty() {
            return Ok(Some((total, Vec::new(), Vec::new(), None)));
        }
        // As the script does, a few keys at a time (a storm of redirections is what wedges the client's
        // connection): the documents' sizes first, then each transcript, whole while it fits the budget.
        // The rewrite token is read before the transcripts' lengths: a rewrite after it cuts a long one.
        let rewritten: Option<String> = self.query(redis::cmd("GET").arg(keys.transcripts_rewritten(org))).await?;
        let rewritten = rewritten.unwrap_or_default();
        let docs: Vec<Option<StoredDocument>> =
            self.query(redis::cmd("HMGET").arg(keys.interview_documents(org)).arg(&ids)).await?;
        let mut size = docs.iter().flatten().map(|doc| doc.0.len() as u64).sum::<u64>();
        let mut lengths = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(8) {
            let strlens = chunk.iter().map(|id| {
                let mut strlen = redis::cmd("STRLEN");
                strlen.arg(keys.transcript(org, id));
                async move { self.query::<u64>(&strlen).await }
            });
            lengths.extend(futures::future::try_join_all(strlens).await?);
        }
        let mut transcripts = Vec::with_capacity(ids.len());
        for (id, length) in ids.iter().zip(lengths) {
            let key = keys.transcript(org, id);
            transcripts.push(if length == 0 {
                Value::Nil
            } else if size + length <= budget {
                size += length;
                self.query(redis::cmd("GET").arg(&key)).await?
            } else {
                let token = Value::BulkString(rewritten.clone().into_bytes());
                Value::Array(vec![Value::BulkString(key.into_bytes()), Value::Int(length as i64), token])
            });
        }
        Ok(Some((total, docs, transcripts, None)))
    }

    /// One interview as separate reads of one key each, while the organization's slot moves (see
    /// [`Self::interviews_key_by_key`]): no epoch, so never kept in memory. The rewrite token is read first:
    /// a rewrite after it cuts a long transcript short.
    pub(super) async fn interview_key_by_key(
        &self,
        keys: &Keyspace,
        org: &str,
        id: &str,
        budget: u64,
    ) -> RedisResult<(Option<InterviewRead>, OrgEpoch)> {
        let rewritten_key = keys.transcripts_rewritten(org);
        let rewritten: Option<String> = self.query(redis::cmd("GET").arg(&rewritten_key)).await?;
        let doc: Option<StoredDocument> =
            self.query(redis::cmd("HGET").arg(keys.interview_documents(org)).arg(id)).await?;
        let Some(StoredDocument(doc)) = doc else { return Ok((None, None)) };
        let key = keys.transcript(org, id);
        let length: u64 = self.query(redis::cmd("STRLEN").arg(&key)).await?;
        let transcript = if length == 0 {
            Transcript::None
        } else if doc.len() as u64 + length <= budget {
            let whole: Value = self.query(redis::cmd("GET").arg(&key)).await?;
            Transcript::from_reply(whole, &rewritten_key)?
        } else {
            Transcript::Long(Long { key, length, rewritten_key, rewritten: rewritten.unwrap_or_default() })
        };
        Ok((Some((InterviewDoc::new(doc), transcript)), None))
    }
}
