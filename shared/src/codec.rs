//! The read model's records as Redis holds them compressed: documents from layout 5, and a served
//! interview's transcript from layout 6 (`crate::layout::stored_transcript`), each a zstd frame compressed by the projector with a dictionary
//! this crate ships for its kind, and read back by both binaries. A document of a few hundred bytes
//! compresses little on its own (to about 0.7 of its size); with a dictionary trained on documents, to
//! about a fifth (BENCHMARKS.md, row "Redis bytes per served interview").
//!
//! The dictionary is part of the code, not of the read model: nothing in Redis can be lost that every
//! document needs, and a record names the dictionary it was compressed with (the frame's dictionary id),
//! so a build refuses by name a record it cannot read rather than misread it. A new dictionary takes a
//! new id, shipped beside the old one for as long as a generation may hold records compressed with it.
//!
//! A stored value is told apart by its first bytes: a zstd frame starts with zstd's magic number, a
//! document stored whole (layouts 1 to 4) with `{`, a transcript stored whole with `WEBVTT`. A frame is
//! read with the dictionary its id names, whichever kind of record it holds. Both binaries read both forms in every layout, so a
//! generation written partly in each (a projector of the release before, or one that found the
//! generation's layout lost) reads as one written in either.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::LazyLock;

use zstd::dict::{DecoderDictionary, EncoderDictionary};

/// The dictionary documents are compressed with: trained by `scripts/train-dictionary` on the documents
/// of a read model built from the benchmark's stream (another seed than the one the benchmarks replay).
static DOCUMENTS: &[u8] = include_bytes!("../dictionaries/documents-1.zdict");

/// The id [`DOCUMENTS`] carries, written into every frame compressed with it.
pub const DOCUMENTS_DICTIONARY: u32 = 1;

/// The dictionary transcripts are compressed with: trained by `scripts/train-dictionary` on the
/// transcripts of the same read model as [`DOCUMENTS`].
static TRANSCRIPTS: &[u8] = include_bytes!("../dictionaries/transcripts-2.zdict");

/// The id [`TRANSCRIPTS`] carries.
pub const TRANSCRIPTS_DICTIONARY: u32 = 2;

/// The most a compressed transcript may hold: a chunk of the API's reads of long transcripts (1 MiB), so
/// that whatever a page holds compressed, one transcript decompressed never takes more than a chunk. A
/// longer transcript is stored whole, and read a chunk at a time.
pub const LARGEST_TRANSCRIPT: u64 = 1 << 20;

/// zstd's level: 3, its default. Documents are written far less often than read.
const LEVEL: i32 = 3;

/// The first four bytes of every zstd frame.
const MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The most a frame may say it holds: larger than any document (an event's payload is bounded by the
/// broker's message size), small enough that a damaged size never allocates the machine away.
const LARGEST: u64 = 64 << 20;

static ENCODER: LazyLock<EncoderDictionary<'static>> = LazyLock::new(|| EncoderDictionary::copy(DOCUMENTS, LEVEL));
static DECODER: LazyLock<DecoderDictionary<'static>> = LazyLock::new(|| DecoderDictionary::copy(DOCUMENTS));
static TRANSCRIPT_ENCODER: LazyLock<EncoderDictionary<'static>> =
    LazyLock::new(|| EncoderDictionary::copy(TRANSCRIPTS, LEVEL));
static TRANSCRIPT_DECODER: LazyLock<DecoderDictionary<'static>> =
    LazyLock::new(|| DecoderDictionary::copy(TRANSCRIPTS));

thread_local! {
    static COMPRESSOR: RefCell<zstd::bulk::Compressor<'static>> = RefCell::new(compressor(&ENCODER));
    static DECOMPRESSOR: RefCell<zstd::bulk::Decompressor<'static>> = RefCell::new(decompressor(&DECODER));
    static TRANSCRIPT_COMPRESSOR: RefCell<zstd::bulk::Compressor<'static>> =
        RefCell::new(compressor(&TRANSCRIPT_ENCODER));
    static TRANSCRIPT_DECOMPRESSOR: RefCell<zstd::bulk::Decompressor<'static>> =
        RefCell::new(decompressor(&TRANSCRIPT_DECODER));
}

fn decompressor(dictionary: &'static DecoderDictionary<'static>) -> zstd::bulk::Decompressor<'static> {
    zstd::bulk::Decompressor::with_prepared_dictionary(dictionary).expect("a decompression context")
}

fn compressor(dictionary: &'static EncoderDictionary<'static>) -> zstd::bulk::Compressor<'static> {
    let mut compressor = zstd::bulk::Compressor::with_prepared_dictionary(dictionary).expect("a compression context");
    // The frame says its size (so a reader allocates once) and its dictionary; no checksum: Redis is
    // not where bytes rot, and 4 bytes are a tenth of a compressed document.
    compressor.include_checksum(false).expect("a frame parameter");
    compressor.include_contentsize(true).expect("a frame parameter");
    compressor.include_dictid(true).expect("a frame parameter");
    compressor
}

/// Why a stored record cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("the stored record was compressed with zstd dictionary {0}, which this build does not have (it has {DOCUMENTS_DICTIONARY} and {TRANSCRIPTS_DICTIONARY})")]
    UnknownDictionary(u32),
    #[error("the stored record is a zstd frame that does not say its size")]
    NoSize,
    #[error("the stored record is a zstd frame of {0} bytes, more than any record of its kind")]
    TooLarge(u64),
    #[error("the stored record does not decompress: {0}")]
    Damaged(String),
    #[error("the stored record is not UTF-8")]
    NotUtf8,
}

/// A document's JSON as stored from layout 5: a zstd frame.
pub fn compress(json: &str) -> Vec<u8> {
    COMPRESSOR.with(|c| c.borrow_mut().compress(json.as_bytes())).expect("compressing into a growing buffer")
}

/// Whether a stored value is a compressed document (else a document stored whole).
pub fn is_compressed(stored: &[u8]) -> bool {
    stored.starts_with(&MAGIC)
}

/// A stored document's JSON, in either form.
pub fn document(stored: &[u8]) -> Result<Cow<'_, str>, CodecError> {
    if !is_compressed(stored) {
        return std::str::from_utf8(stored).map(Cow::Borrowed).map_err(|_| CodecError::NotUtf8);
    }
    decompress(stored).map(Cow::Owned)
}

/// A stored document's JSON, in either form, from the bytes Redis gave (kept as they are when whole).
pub fn document_owned(stored: Vec<u8>) -> Result<String, CodecError> {
    if !is_compressed(&stored) {
        return String::from_utf8(stored).map_err(|_| CodecError::NotUtf8);
    }
    decompress(&stored)
}

/// A transcript as stored compressed: a zstd frame of its WebVTT. The caller stores it only if it is
/// smaller than the transcript, and only for a transcript of at most [`LARGEST_TRANSCRIPT`] bytes.
pub fn compress_transcript(webvtt: &str) -> Vec<u8> {
    TRANSCRIPT_COMPRESSOR
        .with(|c| c.borrow_mut().compress(webvtt.as_bytes()))
        .expect("compressing into a growing buffer")
}

/// How many bytes a compressed transcript holds, from its frame's header, checked as [`transcript`]
/// checks it (a dictionary this build has, at most [`LARGEST_TRANSCRIPT`]): what a reader reserves
/// before it decompresses it.
pub fn transcript_size(frame: &[u8]) -> Result<u64, CodecError> {
    frame_size(frame, LARGEST_TRANSCRIPT)
}

/// A stored transcript's WebVTT, in either form.
pub fn transcript(stored: &[u8]) -> Result<Cow<'_, str>, CodecError> {
    if !is_compressed(stored) {
        return std::str::from_utf8(stored).map(Cow::Borrowed).map_err(|_| CodecError::NotUtf8);
    }
    decompress_within(stored, LARGEST_TRANSCRIPT).map(Cow::Owned)
}

/// A stored transcript's WebVTT, in either form, from the bytes Redis gave (kept as they are when whole).
pub fn transcript_owned(stored: Vec<u8>) -> Result<String, CodecError> {
    if !is_compressed(&stored) {
        return String::from_utf8(stored).map_err(|_| CodecError::NotUtf8);
    }
    decompress_within(&stored, LARGEST_TRANSCRIPT)
}

fn decompress(frame: &[u8]) -> Result<String, CodecError> {
    decompress_within(frame, LARGEST)
}

/// The size a frame says it holds, if this build has its dictionary and it is at most `largest`.
fn frame_size(frame: &[u8], largest: u64) -> Result<u64, CodecError> {
    match zstd::zstd_safe::get_dict_id_from_frame(frame).map(u32::from) {
        Some(DOCUMENTS_DICTIONARY | TRANSCRIPTS_DICTIONARY) => {}
        Some(other) => return Err(CodecError::UnknownDictionary(other)),
        None => return Err(CodecError::UnknownDictionary(0)),
    }
    match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(size)) if size <= largest => Ok(size),
        Ok(Some(size)) => Err(CodecError::TooLarge(size)),
        Ok(None) => Err(CodecError::NoSize),
        Err(_) => Err(CodecError::Damaged("no frame header".into())),
    }
}

fn decompress_within(frame: &[u8], largest: u64) -> Result<String, CodecError> {
    let size = frame_size(frame, largest)?;
    let context = match zstd::zstd_safe::get_dict_id_from_frame(frame).map(u32::from) {
        Some(TRANSCRIPTS_DICTIONARY) => &TRANSCRIPT_DECOMPRESSOR,
        _ => &DECOMPRESSOR,
    };
    let bytes = context
        .with(|d| d.borrow_mut().decompress(frame, size as usize))
        .map_err(|e| CodecError::Damaged(e.to_string()))?;
    if bytes.len() as u64 != size {
        return Err(CodecError::Damaged(format!("{} bytes where the frame says {size}", bytes.len())));
    }
    String::from_utf8(bytes).map_err(|_| CodecError::NotUtf8)
}

/// A document as read from Redis, in either form: its JSON. What both binaries (and the tests) read a
/// document field as, so that none reads a compressed one as text.
#[cfg(feature = "connection")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDocument(pub String);

#[cfg(feature = "connection")]
impl redis::FromRedisValue for StoredDocument {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        match v {
            redis::Value::BulkString(bytes) => document_owned(bytes).map(Self).map_err(|e| e.to_string().into()),
            other => String::from_redis_value(other).map(Self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCUMENT: &str = r#"{"id":"iv-1","studyId":"s1","participant":{"id":"p1","name":"Zoë Å."},"facets":[{"label":"Topics","values":["search"]}],"video":{"bucket":"b","key":"v/1.mp4"},"createdAt":"2026-04-01T10:00:00.123Z","updatedAt":"2026-04-01T10:05:00.000Z"}"#;

    #[test]
    fn a_compressed_document_reads_back_as_its_json_and_is_smaller() {
        let stored = compress(DOCUMENT);
        assert!(is_compressed(&stored));
        assert!(stored.len() < DOCUMENT.len() / 2, "{} of {} bytes", stored.len(), DOCUMENT.len());
        assert_eq!(document(&stored).unwrap(), DOCUMENT);
        assert_eq!(document_owned(stored).unwrap(), DOCUMENT);
    }

    #[test]
    fn a_document_stored_whole_reads_as_it_is() {
        assert!(!is_compressed(DOCUMENT.as_bytes()));
        assert!(matches!(document(DOCUMENT.as_bytes()).unwrap(), Cow::Borrowed(DOCUMENT)));
        assert_eq!(document(b"\xff{"), Err(CodecError::NotUtf8));
    }

    #[test]
    fn a_frame_names_its_dictionary_and_another_is_refused_by_its_id() {
        let stored = compress(DOCUMENT);
        assert_eq!(zstd::zstd_safe::get_dict_id_from_frame(&stored).map(u32::from), Some(DOCUMENTS_DICTIONARY));
        // The same dictionary under id 9, as a later build's would be.
        let mut later = DOCUMENTS.to_vec();
        later[4..8].copy_from_slice(&9u32.to_le_bytes());
        let foreign =
            zstd::bulk::Compressor::with_dictionary(3, &later).unwrap().compress(DOCUMENT.as_bytes()).unwrap();
        assert_eq!(document(&foreign), Err(CodecError::UnknownDictionary(9)));
        let plain = zstd::bulk::compress(DOCUMENT.as_bytes(), 3).unwrap();
        assert_eq!(document(&plain), Err(CodecError::UnknownDictionary(0)), "no dictionary named");
    }

    #[test]
    fn a_cut_frame_is_refused() {
        let stored = compress(DOCUMENT);
        for cut in [4, 5, stored.len() / 2, stored.len() - 1] {
            assert!(document(&stored[..cut]).is_err(), "cut at {cut}");
        }
    }

    const TRANSCRIPT: &str = "WEBVTT\n\n00:00:01.000 --> 00:00:04.000\n<v participant>I search for the report every Monday.\n\n00:00:05.000 --> 00:00:09.000\n<v interviewer>What do you do when it is not there?\n";

    #[test]
    fn a_compressed_transcript_reads_back_as_its_webvtt_and_says_its_size() {
        let stored = compress_transcript(TRANSCRIPT);
        assert!(is_compressed(&stored) && stored.len() < TRANSCRIPT.len(), "{} bytes", stored.len());
        assert_eq!(zstd::zstd_safe::get_dict_id_from_frame(&stored).map(u32::from), Some(TRANSCRIPTS_DICTIONARY));
        assert_eq!(transcript_size(&stored), Ok(TRANSCRIPT.len() as u64));
        assert_eq!(transcript(&stored).unwrap(), TRANSCRIPT);
        assert_eq!(transcript_owned(stored).unwrap(), TRANSCRIPT);
        assert!(matches!(transcript(TRANSCRIPT.as_bytes()).unwrap(), Cow::Borrowed(TRANSCRIPT)), "stored whole");
    }

    #[test]
    fn a_compressed_transcript_larger_than_a_chunk_is_refused_before_it_is_decompressed() {
        let long = format!("WEBVTT\n\n{}", "x".repeat(LARGEST_TRANSCRIPT as usize));
        let stored = compress_transcript(&long);
        assert!(stored.len() < 1024, "it compresses to {} bytes", stored.len());
        let said = long.len() as u64;
        assert_eq!(transcript_size(&stored), Err(CodecError::TooLarge(said)));
        assert_eq!(transcript(&stored), Err(CodecError::TooLarge(said)));
        assert_eq!(document(&stored).unwrap(), long, "a document may be larger");
    }
}
