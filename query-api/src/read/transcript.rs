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
//!
//! A served interview's transcript may be stored compressed (`shared::codec`: a zstd frame of at most a
//! [`CHUNK`] of WebVTT). The page's script weighs it by its stored bytes; once read, a frame is
//! decompressed while the decompressed transcripts fit the budget, and the others are kept as read
//! ([`Transcript::Packed`]) and decompressed one at a time while the response is sent, each holding its
//! share of the budget, as a chunk does. One the script answered as long (its budget spent) is read in
//! one chunk, being at most a chunk, and served only if it is the frame the page saw (as long as it
//! was): a compressed transcript changes only as a whole.

use futures::Stream;
use redis::{ErrorKind, RedisError, RedisResult, Value};

use super::budget::{Budget, Held};
use super::model::ReadModel;
use super::scripts::TRANSCRIPT_CHUNK_SCRIPT;

/// How much of a long transcript is read from Redis, and held, at a time.
pub const CHUNK: u64 = 1024 * 1024;

/// An interview's transcript, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transcript {
    /// The interview has none yet.
    None,
    /// Read whole, within the request's byte budget.
    Whole(Whole),
    /// Too long for the request's budget: read while sending.
    Long(Long),
    /// Read compressed, too long decompressed for the request's budget: decompressed while sending.
    Packed(Packed),
}

/// A compressed transcript as read (`shared::codec`), and how many bytes it holds decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    frame: Vec<u8>,
    size: u64,
}

impl Packed {
    /// A frame whose header this build reads: a dictionary it has, at most a [`CHUNK`].
    fn of(frame: Vec<u8>) -> RedisResult<Self> {
        let size = shared::codec::transcript_size(&frame).map_err(unreadable)?;
        Ok(Self { frame, size })
    }

    /// Its WebVTT.
    fn unpack(&self) -> RedisResult<String> {
        shared::codec::transcript(&self.frame).map(|text| text.into_owned()).map_err(unreadable)
    }
}

/// A stored transcript this build cannot read, as the error of the read that met it.
fn unreadable(e: shared::codec::CodecError) -> RedisError {
    RedisError::from((ErrorKind::Parse, "a stored transcript does not read", e.to_string()))
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
            Value::BulkString(bytes) if shared::codec::is_compressed(&bytes) => {
                Ok(Transcript::Packed(Packed::of(bytes)?))
            }
            other => Ok(Transcript::Whole(Whole::of(redis::from_redis_value(other)?))),
        }
    }

    /// Decompresses the compressed transcripts of `read`, in its order, while what it holds stays within
    /// `budget` bytes; the others stay compressed, to be decompressed while they are sent.
    pub fn settle<'a>(read: impl IntoIterator<Item = (usize, &'a mut Transcript)>, budget: u64) -> RedisResult<()> {
        let mut transcripts: Vec<(usize, &mut Transcript)> = read.into_iter().collect();
        let mut held = transcripts.iter().map(|(doc, t)| (*doc + t.heap_bytes()) as u64).sum::<u64>();
        for (_, transcript) in &mut transcripts {
            let Transcript::Packed(packed) = &**transcript else { continue };
            // Its escaped copy, up to an eighth more, in place of the frame.
            let grows = (packed.size + packed.size / 8).saturating_sub(packed.frame.len() as u64);
            if held + grows <= budget {
                held += grows;
                **transcript = Transcript::Whole(Whole::of(packed.unpack()?));
            }
        }
        Ok(())
    }

    /// The bytes it holds in memory besides itself.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Transcript::None => 0,
            Transcript::Whole(text) => text.capacity(),
            Transcript::Long(long) => long.key.capacity() + long.rewritten_key.capacity() + long.rewritten.capacity(),
            Transcript::Packed(packed) => packed.frame.capacity(),
        }
    }

    /// About how many bytes it adds to a body written in memory (a long one is sent apart).
    pub fn inline_bytes(&self) -> usize {
        match self {
            Transcript::Whole(text) => text.json_len(),
            _ => 0,
        }
    }
}

/// A whole transcript as kept. Up to a [`CHUNK`] it is escaped as the contents of a JSON string once, when
/// read (as serde_json escapes them: WebVTT's line breaks, any quote or backslash of its text), and every
/// response copies it as it is: escaping at every response was the largest share of the CPU a page of
/// interviews took (BENCHMARKS.md, row "API: interviews, a page of 100 with 100 signed links"; history in
/// "A whole transcript kept escaped for JSON"). A longer one is kept as read and escaped into each response, as the
/// chunks of a long one are: its escaped copy beside the one in the body would take a request past its
/// byte budget (`api::memory`'s test of megabyte transcripts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whole(Form);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    Escaped(Vec<u8>),
    Read(String),
}

impl Whole {
    pub fn of(text: String) -> Self {
        if text.len() as u64 > CHUNK {
            return Self(Form::Read(text));
        }
        // Exactly its escaped size: no buffer grown by doubling, then shrunk.
        let mut out = Vec::with_capacity(escaped_len(text.as_bytes()));
        escape(&mut out, text.as_bytes());
        Self(Form::Escaped(out))
    }

    /// Writes it as a JSON string, quotes included.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'"');
        match &self.0 {
            Form::Escaped(escaped) => out.extend_from_slice(escaped),
            Form::Read(text) => escape(out, text.as_bytes()),
        }
        out.push(b'"');
    }

    fn capacity(&self) -> usize {
        match &self.0 {
            Form::Escaped(escaped) => escaped.capacity(),
            Form::Read(text) => text.capacity(),
        }
    }

    /// About how many bytes it takes written as a JSON string's contents.
    fn json_len(&self) -> usize {
        match &self.0 {
            Form::Escaped(escaped) => escaped.len(),
            Form::Read(text) => text.len() + text.len() / 8,
        }
    }
}

/// How long `raw` is once [`escape`]d.
fn escaped_len(raw: &[u8]) -> usize {
    raw.iter()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum()
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
///
/// Each chunk holds its share of the process's byte budget ([`super::budget`]) with it, until the chunk is
/// dropped (sent).
pub fn chunks(model: ReadModel, long: Long, budget: Budget) -> impl Stream<Item = std::io::Result<(Vec<u8>, Held)>> {
    futures::stream::try_unfold(0u64, move |start| {
        let (model, long, budget) = (model.clone(), long.clone(), budget.clone());
        async move {
            if start >= long.length {
                return Ok(None);
            }
            let end = (start + CHUNK).min(long.length);
            // Its escaped copy too, up to an eighth more.
            let held = budget.reserve((end - start) + (end - start) / 8).await;
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
            if start == 0 && shared::codec::is_compressed(&bytes) {
                // At most a chunk, so read whole: the frame the page saw if it is as long as it was (a
                // compressed transcript changes only as a whole).
                if bytes.len() as u64 != long.length {
                    tracing::info!(
                        key = long.key,
                        "a transcript was compressed anew while it was sent; the response is cut short"
                    );
                    return Err(std::io::Error::other("the transcript changed while it was sent"));
                }
                let packed = Packed::of(bytes).map_err(|e| {
                    tracing::warn!(key = long.key, error = %e, "a compressed transcript does not read; the response is cut short");
                    std::io::Error::other(e)
                })?;
                return Ok(Some((unpack(packed, &budget, Some(held)).await?, long.length)));
            }
            if (bytes.len() as u64) < end - start {
                tracing::warn!(key = long.key, "a transcript shrank while it was sent; the response is cut short");
                return Err(std::io::Error::other("the transcript changed while it was sent"));
            }
            Ok(Some(((bytes, held), end)))
        }
    })
}

/// A compressed transcript's WebVTT, decompressed when it is sent, holding its share of the process's
/// byte budget until it is (the frame itself is held by the read it came with).
pub fn unpacked(packed: Packed, budget: Budget) -> impl Stream<Item = std::io::Result<(Vec<u8>, Held)>> {
    futures::stream::once(async move { unpack(packed, &budget, None).await })
}

/// `packed` decompressed, with its share of the budget (beside what `held` holds for it already).
async fn unpack(packed: Packed, budget: &Budget, held: Option<Held>) -> std::io::Result<(Vec<u8>, Held)> {
    let mut share = budget.reserve(packed.size + packed.size / 8).await;
    if let Some(held) = held {
        share.merge(held);
    }
    let text = packed.unpack().map_err(|e| {
        tracing::warn!(error = %e, "a compressed transcript does not decompress; the response is cut short");
        std::io::Error::other(e)
    })?;
    Ok((text.into_bytes(), share))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_reads_as_no_transcript_a_whole_one_or_a_long_one() {
        assert_eq!(Transcript::from_reply(Value::Nil, "r").unwrap(), Transcript::None);
        let whole = Transcript::from_reply(Value::BulkString(b"WEBVTT\n".to_vec()), "r").unwrap();
        assert_eq!(whole, Transcript::Whole(Whole(Form::Escaped(b"WEBVTT\\n".to_vec()))), "escaped once, when read");
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
        let whole = Whole::of(text.clone());
        assert!(matches!(&whole.0, Form::Escaped(e) if e.len() == e.capacity()), "escaped, at its escaped size");
        let mut out = Vec::new();
        whole.write_json(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        let long = format!("{text}{}", "x".repeat(CHUNK as usize));
        let (whole, mut out) = (Whole::of(long.clone()), Vec::new());
        assert!(matches!(&whole.0, Form::Read(_)), "longer than a chunk: kept as read");
        whole.write_json(&mut out);
        assert_eq!(out, serde_json::to_vec(&long).unwrap());
        for cut in 0..=text.len() {
            let mut out = b"\"".to_vec();
            escape(&mut out, &text.as_bytes()[..cut]);
            escape(&mut out, &text.as_bytes()[cut..]);
            out.push(b'"');
            assert_eq!(String::from_utf8(out).unwrap(), expected, "cut at byte {cut}");
        }
    }

    fn webvtt(n: usize) -> String {
        let cues: String = (0..n).map(|i| format!("\n00:00:{i:02}.000 --> 00:00:{i:02}.500\nAnswer {i}\n")).collect();
        format!("WEBVTT\n{cues}")
    }

    #[test]
    fn a_compressed_transcript_is_decompressed_while_the_budget_has_room_and_kept_compressed_after() {
        let texts = [webvtt(40), webvtt(50), webvtt(45)];
        let frame = |text: &str| Value::BulkString(shared::codec::compress_transcript(text));
        let mut read: Vec<Transcript> = texts.iter().map(|t| Transcript::from_reply(frame(t), "r").unwrap()).collect();
        assert!(read.iter().all(|t| matches!(t, Transcript::Packed(_))), "read compressed");
        // Room for the documents, the frames and the first two decompressed (each with an eighth more).
        let grown = |t: &str| (t.len() + t.len() / 8) as u64;
        let frames: u64 = read.iter().map(|t| t.heap_bytes() as u64).sum();
        let budget = 300 + frames + grown(&texts[0]) + grown(&texts[1]);
        Transcript::settle(read.iter_mut().map(|t| (100, t)), budget).unwrap();
        for (transcript, text) in read.iter().zip(&texts).take(2) {
            let mut out = Vec::new();
            let Transcript::Whole(whole) = transcript else { panic!("{transcript:?}") };
            whole.write_json(&mut out);
            assert_eq!(out, serde_json::to_vec(text).unwrap());
        }
        let Transcript::Packed(last) = &read[2] else { panic!("the third does not fit: {:?}", read[2]) };
        assert_eq!(last.unpack().unwrap(), texts[2], "decompressed when it is sent");
    }

    #[test]
    fn a_frame_of_a_dictionary_this_build_lacks_or_larger_than_a_chunk_does_not_read() {
        // The shipped dictionary under id 9, as a later release's would be.
        let mut dictionary = include_bytes!("../../../shared/dictionaries/transcripts-2.zdict").to_vec();
        dictionary[4..8].copy_from_slice(&9u32.to_le_bytes());
        let mut compressor = zstd::bulk::Compressor::with_dictionary(3, &dictionary).unwrap();
        let later = compressor.compress(webvtt(3).as_bytes()).unwrap();
        let refused = Transcript::from_reply(Value::BulkString(later), "r").unwrap_err();
        assert!(refused.to_string().contains("zstd dictionary 9"), "{refused}");
        let huge = format!("WEBVTT\n{}", "x".repeat(CHUNK as usize));
        let frame = Value::BulkString(shared::codec::compress_transcript(&huge));
        assert!(Transcript::from_reply(frame, "r").is_err(), "more than a chunk decompressed");
    }

    #[tokio::test]
    async fn a_packed_transcript_is_sent_decompressed_holding_its_share_of_the_budget() {
        use futures::StreamExt;
        let text = webvtt(30);
        let Transcript::Packed(packed) =
            Transcript::from_reply(Value::BulkString(shared::codec::compress_transcript(&text)), "r").unwrap()
        else {
            panic!("read compressed")
        };
        let budget = Budget::new(8 * CHUNK);
        let sent: Vec<_> = unpacked(packed, budget.clone()).collect().await;
        let [Ok((raw, held))] = &sent[..] else { panic!("one part: {sent:?}") };
        assert_eq!(raw, text.as_bytes());
        assert!(held.bytes() >= text.len() as u64, "it holds {} bytes for {}", held.bytes(), text.len());
    }
}
