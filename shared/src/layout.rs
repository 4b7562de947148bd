//! The read model's layout version: which keys a generation has and what their values mean. Both binaries
//! read it before they read or write a generation (the projector at its start and when it follows a switch,
//! the API whenever the generation it serves changes), so that a binary never misreads a layout it does not
//! know: it refuses with one line naming the version found and the versions it reads. A layout change
//! ships with a rebuild into a new generation (docs/operating.md, "Upgrades").
//!
//! The version is the `layout` field of the generation's meta hash (`P:gN:meta`), written by the projector
//! when it starts a generation or starts on one. Generations written before the field existed have none:
//! an absent field is layout 1, the layout they have. The projector also records the layout beside its
//! positions on every primary (`Keyspace::position`): where the meta lost it (its primary's data lost),
//! the projector reads it there, and writes it back into the meta at its start.
//!
//! | layout | what changed |
//! |---|---|
//! | 1 | the keys of `keys.rs`, every state stored whole as JSON |
//! | 2 | a served interview's state stored as `{"served":true}` (and its gaps), the rest read from its document |
//! | 3 | owners as fields of shared hashes (`owners:<aggregate>:<bucket>`) rather than a key each (`crate::owners`) |
//! | 4 | the healing hash holds the field `opened` from the generation's start on and never loses it: a hash without it was lost with its primary, and the generation is not served until a projector marks it again (`crate::keys::HEALING_OPENED`) |
//! | 5 | documents (studies' and interviews') stored as zstd frames compressed with a dictionary the binaries ship (`crate::codec`) |
//! | 6 | a served interview's transcript stored as a zstd frame (transcripts' dictionary) when it is at most [`crate::codec::LARGEST_TRANSCRIPT`] and its frame is smaller, written whole by the projector; every other transcript whole, as before |
//!
//! A build reads the layouts before its own: the API reads nothing that layouts 2 and 3 changed, reads
//! the healing hash of a generation before layout 4 as before (an absent hash: nothing heals), and reads a
//! document in either form in every layout (`crate::codec` tells them apart by their first bytes); the
//! projector reads both forms of a state and writes a generation in the layout it has (a generation of
//! layout 1 gets whole states, one of layout 1 or 2 owners as keys, one before layout 4 no `opened`, one
//! before layout 5 documents whole, one before layout 6 transcripts whole), so a
//! release that writes a new layout is rolled out like any other and takes effect from its first rebuild on.

use std::ops::RangeInclusive;

/// The layout this build writes.
pub const LAYOUT: u32 = 6;

/// The layouts this build reads.
pub const READS: RangeInclusive<u32> = 1..=6;

/// The first layout whose healing hash holds [`crate::keys::HEALING_OPENED`]: from it on, a generation
/// whose healing hash lacks the field lost its healing state.
pub const HEALING_OPENED_FROM: u32 = 4;

/// Whether a generation of `layout` keeps [`crate::keys::HEALING_OPENED`] in its healing hash, so that the
/// hash's absence is a loss and never "nothing heals".
pub fn keeps_healing_opened(layout: u32) -> bool {
    layout >= HEALING_OPENED_FROM
}

/// The first layout whose documents are stored compressed ([`crate::codec`]).
pub const COMPRESSED_DOCUMENTS_FROM: u32 = 5;

/// A document as a generation of `layout` stores it: compressed from layout 5, its JSON before.
pub fn stored_document(json: &str, layout: u32) -> std::borrow::Cow<'_, [u8]> {
    if layout >= COMPRESSED_DOCUMENTS_FROM {
        std::borrow::Cow::Owned(crate::codec::compress(json))
    } else {
        std::borrow::Cow::Borrowed(json.as_bytes())
    }
}

/// The first layout whose served interviews' transcripts are stored compressed ([`crate::codec`]).
pub const COMPRESSED_TRANSCRIPTS_FROM: u32 = 6;

/// Whether a generation of `layout` stores a served interview's transcript compressed (when it may be).
pub fn compresses_transcripts(layout: u32) -> bool {
    layout >= COMPRESSED_TRANSCRIPTS_FROM
}

/// A served interview's transcript as a generation of `layout` stores it: from layout 6, a zstd frame if
/// the transcript is at most [`crate::codec::LARGEST_TRANSCRIPT`] and the frame is smaller; else its
/// WebVTT. (The transcript of an interview not served is stored whole in every layout: the write script
/// appends to it.)
pub fn stored_transcript(webvtt: &str, layout: u32) -> std::borrow::Cow<'_, [u8]> {
    if compresses_transcripts(layout) && webvtt.len() as u64 <= crate::codec::LARGEST_TRANSCRIPT {
        let frame = crate::codec::compress_transcript(webvtt);
        if frame.len() < webvtt.len() {
            return std::borrow::Cow::Owned(frame);
        }
    }
    std::borrow::Cow::Borrowed(webvtt.as_bytes())
}

/// The field of a generation's meta hash that holds its layout.
pub const FIELD: &str = "layout";

/// The field of each primary's positions hash that records the generation's layout too: read when the
/// meta lost its field (the meta sits on one primary of a cluster, the positions on every one).
pub const POSITIONS_FIELD: &str = "layout";

/// The layout recorded beside the positions, from what each primary's positions hash holds: the highest
/// found. A value that is no number is kept as found unless a number is found elsewhere, so that the
/// reader refuses it by name ([`check`]).
pub fn highest_recorded(found: impl IntoIterator<Item = Option<String>>) -> Option<String> {
    let rank = |v: &str| v.parse::<u32>().unwrap_or(0);
    let mut best: Option<(u32, String)> = None;
    for value in found.into_iter().flatten() {
        if best.as_ref().is_none_or(|(highest, _)| rank(&value) > *highest) {
            best = Some((rank(&value), value));
        }
    }
    best.map(|(_, value)| value)
}

/// A generation whose layout this build does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "generation {generation} of the read model has layout version {found}; this {reader} reads version {} to {}: \
     upgrade it, or rebuild with it (docs/operating.md, \"Upgrades\")",
    READS.start(),
    READS.end()
)]
pub struct UnknownLayout {
    pub generation: u64,
    /// The field as found (it may not even be a number).
    pub found: String,
    /// `projector` or `query API`.
    pub reader: &'static str,
}

/// The layout of `generation` as its meta's field says (`None`: no field, layout 1), if this build reads it.
pub fn check(generation: u64, field: Option<&str>, reader: &'static str) -> Result<u32, UnknownLayout> {
    let Some(field) = field else { return Ok(1) };
    match field.parse::<u32>() {
        Ok(layout) if READS.contains(&layout) => Ok(layout),
        _ => Err(UnknownLayout { generation, found: field.to_string(), reader }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_recorded_beside_the_positions_is_the_highest_number_found_or_else_what_was_found() {
        let found = |values: &[Option<&str>]| highest_recorded(values.iter().map(|v| v.map(str::to_string)));
        assert_eq!(found(&[None, Some("4"), Some("3"), None]), Some("4".into()));
        assert_eq!(found(&[None, None]), None);
        assert_eq!(found(&[Some("x"), None]), Some("x".into()));
        assert_eq!(found(&[Some("x"), Some("4")]), Some("4".into()));
    }

    #[test]
    fn a_generation_without_the_field_is_layout_one_and_one_this_build_does_not_read_is_refused_by_name() {
        assert_eq!(check(3, None, "projector"), Ok(1));
        assert_eq!(check(3, Some("1"), "projector"), Ok(1));
        assert_eq!(check(3, Some("2"), "projector"), Ok(2));
        assert_eq!(check(3, Some("3"), "projector"), Ok(3));
        assert_eq!(check(3, Some("4"), "projector"), Ok(4));
        assert_eq!(check(3, Some("5"), "projector"), Ok(5));
        assert_eq!(check(3, Some("6"), "projector"), Ok(6));
        for found in ["7", "0", "v1", ""] {
            let refused = check(7, Some(found), "query API").expect_err(found);
            let line = refused.to_string();
            assert!(line.contains(&format!("layout version {found};")), "{line}");
            assert!(line.contains("generation 7") && line.contains("query API reads version 1 to 6"), "{line}");
            assert!(!line.contains('\n'), "one line");
        }
    }
}

#[cfg(test)]
mod compressed_documents {
    use super::*;

    #[test]
    fn a_generation_of_layout_five_on_stores_documents_compressed_and_one_before_as_json() {
        let json = r#"{"id":"s1","internalTitle":"A study"}"#;
        for layout in 1..COMPRESSED_DOCUMENTS_FROM {
            assert_eq!(stored_document(json, layout).as_ref(), json.as_bytes(), "layout {layout}");
        }
        let stored = stored_document(json, LAYOUT);
        assert!(crate::codec::is_compressed(&stored));
        assert_eq!(crate::codec::document(&stored).unwrap(), json);
    }
}

#[cfg(test)]
mod healing_opened {
    use super::*;

    #[test]
    fn only_a_generation_of_layout_four_on_keeps_the_healing_hash_opened() {
        assert!(!keeps_healing_opened(1) && !keeps_healing_opened(3));
        assert!(keeps_healing_opened(4) && keeps_healing_opened(LAYOUT));
    }
}

#[cfg(test)]
mod compressed_transcripts {
    use super::*;
    use crate::codec::{is_compressed, transcript, LARGEST_TRANSCRIPT};

    fn webvtt(bytes: usize) -> String {
        let cue = "\n00:00:01.000 --> 00:00:02.000\nI would buy it again.\n";
        let mut out = String::from("WEBVTT\n");
        while out.len() + cue.len() <= bytes {
            out.push_str(cue);
        }
        out
    }

    #[test]
    fn a_served_transcript_is_stored_compressed_from_layout_six_on_when_it_is_at_most_a_chunk() {
        let short = webvtt(4_000);
        for layout in 1..COMPRESSED_TRANSCRIPTS_FROM {
            assert_eq!(stored_transcript(&short, layout).as_ref(), short.as_bytes(), "layout {layout}");
        }
        let stored = stored_transcript(&short, LAYOUT);
        assert!(is_compressed(&stored) && stored.len() < short.len() / 4, "{} bytes", stored.len());
        assert_eq!(transcript(&stored).unwrap(), short);
        let at_most = webvtt(LARGEST_TRANSCRIPT as usize);
        assert!(is_compressed(&stored_transcript(&at_most, LAYOUT)));
        let longer = format!("{at_most}{}", webvtt(200).trim_start_matches("WEBVTT\n"));
        assert!(longer.len() as u64 > LARGEST_TRANSCRIPT);
        assert_eq!(stored_transcript(&longer, LAYOUT).as_ref(), longer.as_bytes(), "longer than a chunk: whole");
    }

    #[test]
    fn a_transcript_whose_frame_is_not_smaller_is_stored_whole() {
        assert_eq!(stored_transcript("WEBVTT\n", LAYOUT).as_ref(), b"WEBVTT\n");
    }
}
