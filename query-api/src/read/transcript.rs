//! An interview's transcript as a read carries it: whole while the request's byte budget (`MAX_PAGE_MB`)
//! has room for it, else only its key and length, and then read from Redis a chunk at a time while the
//! response is being sent. So a request holds at most its budget and one chunk, whatever the stored
//! transcripts weigh, and no page is refused for its size.
//!
//! A transcript only grows while its interview is served (messages are appended), so its first `length`
//! bytes, as read with the page, are the transcript the page was read with. A transcript that shrank
//! meanwhile (its interview deleted) ends the response early: the client sees a body cut short, and asks
//! again, as after any transient failure.

use futures::Stream;
use redis::{RedisResult, Value};

use super::model::ReadModel;

/// How much of a long transcript is read from Redis, and held, at a time.
pub const CHUNK: u64 = 1024 * 1024;

/// An interview's transcript, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transcript {
    /// The interview has none yet.
    None,
    Whole(String),
    /// Too long for the request's budget: its first `length` bytes, read from `key` while sending.
    Long {
        key: String,
        length: u64,
    },
}

impl Transcript {
    /// From a script's reply: nil, the transcript, or `{key, length}` for a long one.
    pub fn from_reply(value: Value) -> RedisResult<Self> {
        match value {
            Value::Nil => Ok(Transcript::None),
            Value::Array(mut pair) if pair.len() == 2 => {
                let length = redis::from_redis_value(pair.pop().expect("two items"))?;
                let key = redis::from_redis_value(pair.pop().expect("two items"))?;
                Ok(Transcript::Long { key, length })
            }
            other => Ok(Transcript::Whole(redis::from_redis_value(other)?)),
        }
    }

    /// The bytes it holds in memory besides itself.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Transcript::None => 0,
            Transcript::Whole(text) => text.capacity(),
            Transcript::Long { key, .. } => key.capacity(),
        }
    }

    /// About how many bytes it adds to a body written in memory (a long one is sent apart).
    pub fn inline_bytes(&self) -> usize {
        match self {
            Transcript::Whole(text) => text.len() + text.len() / 8,
            _ => 0,
        }
    }
}

/// The first `length` bytes of the transcript at `key`, one [`CHUNK`] at a time, each read when the
/// previous one was sent. Fails if Redis holds fewer bytes than that (the transcript shrank).
pub fn chunks(model: ReadModel, key: String, length: u64) -> impl Stream<Item = std::io::Result<Vec<u8>>> {
    futures::stream::try_unfold(0u64, move |start| {
        let (model, key) = (model.clone(), key.clone());
        async move {
            if start >= length {
                return Ok(None);
            }
            let end = (start + CHUNK).min(length);
            let bytes = model.range(&key, start, end - 1).await.map_err(|e| {
                tracing::warn!(error = %e, "a long transcript could not be read; the response is cut short");
                std::io::Error::other(e)
            })?;
            if (bytes.len() as u64) < end - start {
                tracing::warn!(key, "a transcript shrank while it was sent; the response is cut short");
                return Err(std::io::Error::other("the transcript changed while it was sent"));
            }
            Ok(Some((bytes, end)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_reads_as_no_transcript_a_whole_one_or_a_long_one() {
        assert_eq!(Transcript::from_reply(Value::Nil).unwrap(), Transcript::None);
        let whole = Transcript::from_reply(Value::BulkString(b"WEBVTT\n".to_vec())).unwrap();
        assert_eq!(whole, Transcript::Whole("WEBVTT\n".into()));
        let long = Value::Array(vec![Value::BulkString(b"t:org:i1".to_vec()), Value::Int(40_000_000)]);
        let long = Transcript::from_reply(long).unwrap();
        assert_eq!(long, Transcript::Long { key: "t:org:i1".into(), length: 40_000_000 });
        assert_eq!(long.inline_bytes(), 0, "a long transcript is not written in memory");
    }
}
