//! An interview's transcript as a read carries it: whole while the request's byte budget (`MAX_PAGE_MB`)
//! has room for it, else only its key and length, and then read from Redis a chunk at a time while the
//! response is being sent. So a request holds at most its budget and one chunk, whatever the stored
//! transcripts weigh, and no page is refused for its size.
//!
//! A transcript mostly grows while its interview is served (messages are appended), so its first
//! `length` bytes, as read with the page, are the transcript the page was read with. Any other change (a
//! transcript set anew, deleted, or swapped in by a repair) writes a new token under the organization's
//! `Keyspace::transcripts_rewritten`, which the page read returns with each long transcript; every chunk
//! is read in one script with a check of that token. A rewrite, or a transcript that shrank meanwhile,
//! ends the response early: the client sees a body cut short, never half of one version and half of
//! another, and asks again, as after any transient failure.

use futures::Stream;
use redis::{RedisResult, Value};

use super::model::ReadModel;
use super::scripts::TRANSCRIPT_CHUNK_SCRIPT;

/// How much of a long transcript is read from Redis, and held, at a time.
pub const CHUNK: u64 = 1024 * 1024;

/// An interview's transcript, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transcript {
    /// The interview has none yet.
    None,
    /// Escaped for JSON once, when read: kept so in memory, it is written into every response as it is.
    Whole(Escaped),
    /// Too long for the request's budget: read while sending.
    Long(Long),
}

/// A transcript too long for a request's budget: its first `length` bytes, read from `key` a chunk at a
/// time while no rewrite of the organization's transcripts happened since the page was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Long {
    pub key: String,
    pub length: u64,
    /// The organization's `Keyspace::transcripts_rewritten` key.
    pub rewritten_key: String,
    /// What that key held when the page was read (`""`: nothing).
    pub rewritten: String,
}

impl Transcript {
    /// From a script's reply: nil, the transcript, or `{key, length, rewritten}` for a long one, whose
    /// organization's rewrite token lives at `rewritten_key`.
    pub fn from_reply(value: Value, rewritten_key: &str) -> RedisResult<Self> {
        match value {
            Value::Nil => Ok(Transcript::None),
            Value::Array(three) if three.len() == 3 => {
                let (key, length, rewritten) = redis::from_redis_value(Value::Array(three))?;
                Ok(Transcript::Long(Long { key, length, rewritten_key: rewritten_key.to_string(), rewritten }))
            }
            other => Ok(Transcript::Whole(Escaped::of(&redis::from_redis_value::<String>(other)?))),
        }
    }

    /// The bytes it holds in memory besides itself.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Transcript::None => 0,
            Transcript::Whole(text) => text.0.capacity(),
            Transcript::Long(long) => long.key.capacity() + long.rewritten_key.capacity() + long.rewritten.capacity(),
        }
    }

    /// About how many bytes it adds to a body written in memory (a long one is sent apart).
    pub fn inline_bytes(&self) -> usize {
        match self {
            Transcript::Whole(text) => text.0.len(),
            _ => 0,
        }
    }
}

/// A transcript escaped as the contents of a JSON string, as serde_json escapes them (WebVTT's line
/// breaks and any quote or backslash of its text): the largest share of the CPU a page of interviews
/// took when it was escaped at every response (BENCHMARKS.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escaped(Vec<u8>);

impl Escaped {
    pub fn of(text: &str) -> Self {
        let mut out = Vec::with_capacity(text.len() + text.len() / 8);
        escape(&mut out, text.as_bytes());
        out.shrink_to_fit();
        Self(out)
    }

    /// The escaped bytes, without the quotes around them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Writes `raw`, a part of a UTF-8 string, escaped as serde_json escapes a string's contents. Bytes of a
/// character cut between two parts are not escaped, so the parts escape alike whole or cut.
pub fn escape(out: &mut Vec<u8>, raw: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, byte) in raw.iter().enumerate() {
        let short = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0x00..=0x1f => b'u',
            _ => continue,
        };
        out.extend_from_slice(&raw[start..i]);
        out.push(b'\\');
        out.push(short);
        if short == b'u' {
            out.extend_from_slice(&[b'0', b'0', HEX[(byte >> 4) as usize], HEX[(byte & 0xf) as usize]]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&raw[start..]);
}

/// The transcript's first `length` bytes, one [`CHUNK`] at a time, each read when the previous one was
/// sent. Fails if a transcript of the organization was rewritten since the page was read, or Redis holds
/// fewer bytes than that (the transcript shrank).
pub fn chunks(model: ReadModel, long: Long) -> impl Stream<Item = std::io::Result<Vec<u8>>> {
    futures::stream::try_unfold(0u64, move |start| {
        let (model, long) = (model.clone(), long.clone());
        async move {
            if start >= long.length {
                return Ok(None);
            }
            let end = (start + CHUNK).min(long.length);
            let mut invocation = TRANSCRIPT_CHUNK_SCRIPT.key(&long.key);
            invocation.key(&long.rewritten_key).arg(start).arg(end - 1).arg(&long.rewritten);
            let bytes: Vec<u8> = model.invoke(&invocation).await.map_err(|e| {
                if e.code() == Some("REWRITTEN") {
                    tracing::info!(
                        key = long.key,
                        "a transcript was rewritten while it was sent; the response is cut short"
                    );
                } else {
                    tracing::warn!(error = %e, "a long transcript could not be read; the response is cut short");
                }
                std::io::Error::other(e)
            })?;
            if (bytes.len() as u64) < end - start {
                tracing::warn!(key = long.key, "a transcript shrank while it was sent; the response is cut short");
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
        assert_eq!(Transcript::from_reply(Value::Nil, "r").unwrap(), Transcript::None);
        let whole = Transcript::from_reply(Value::BulkString(b"WEBVTT\n".to_vec()), "r").unwrap();
        assert_eq!(whole, Transcript::Whole(Escaped(b"WEBVTT\\n".to_vec())), "escaped once, when read");
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let long = Value::Array(vec![bulk("t:org:i1"), Value::Int(40_000_000), bulk("")]);
        let long = Transcript::from_reply(long, "r:org").unwrap();
        let expected =
            Long { key: "t:org:i1".into(), length: 40_000_000, rewritten_key: "r:org".into(), rewritten: "".into() };
        assert_eq!(long, Transcript::Long(expected));
        assert_eq!(long.inline_bytes(), 0, "a long transcript is not written in memory");
    }

    #[test]
    fn a_long_transcript_is_escaped_as_serde_json_escapes_it_wherever_it_is_cut() {
        let mut text: String = (0u8..0x80).map(char::from).collect();
        text.push_str("é\u{2028}ǅ😀\"\\</script>");
        let expected = serde_json::to_string(&text).unwrap();
        for cut in 0..=text.len() {
            let mut out = b"\"".to_vec();
            escape(&mut out, &text.as_bytes()[..cut]);
            escape(&mut out, &text.as_bytes()[cut..]);
            out.push(b'"');
            assert_eq!(String::from_utf8(out).unwrap(), expected, "cut at byte {cut}");
        }
    }
}
