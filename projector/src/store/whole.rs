//! Transcripts written whole (layout 6 on): a served interview's transcript is stored as a zstd frame
//! ([`shared::layout::stored_transcript`]), which the write script cannot append to, so the projector reads
//! the stored transcript back, adds the fold's cues and writes the whole of it in its place. It does so when
//! an interview enters its list (its transcript, stored whole while it was not served, is compressed),
//! gets a message while served, or leaves its list (its transcript is stored whole again, for the script
//! to append to). An interview not served before nor after keeps the script's append: O(message).
//!
//! The read is one round trip for the batch, after the states' and before the writes. Whatever changes the
//! transcript between the read and the write changes the aggregate's sequence too, so the script refuses
//! the write and the aggregate is read again. A transcript longer than a chunk is stored whole and stays
//! so: the read asks for one byte more than a chunk, and one that long is appended to as before.

use shared::codec::{self, CodecError, LARGEST_TRANSCRIPT};

use super::write::Replacement;
use super::{Store, StoreError};
use crate::fold::{Folded, TranscriptChange, TRANSCRIPT_HEADER};

/// Whether the write of an interview's fold in a generation of `layout` replaces its transcript whole, so
/// that the stored one must be read first: the interview is served before or after the write, and it
/// gets cues, enters its list or leaves it.
pub(super) fn reads_transcript(layout: u32, served_before: bool, folded: &Folded) -> bool {
    let served_after = folded.state.is_served_interview();
    shared::layout::compresses_transcripts(layout)
        && (served_before || served_after)
        && match folded.transcript {
            TranscriptChange::Delete => false,
            TranscriptChange::Append(_) => true,
            TranscriptChange::Keep => served_before != served_after,
        }
}

/// The transcript that replaces `stored` (as read: at most a chunk and one byte) once the fold's cues are
/// added: compressed if the interview is served after the write, whole if not. `None` when the stored one
/// is longer than a chunk (it stays whole, and the script appends to it) or when there is none and no cue.
pub(super) fn replacement(
    stored: Option<&[u8]>,
    folded: &Folded,
    served_before: bool,
    layout: u32,
) -> Result<Option<Replacement>, CodecError> {
    if stored.is_some_and(|s| s.len() as u64 > LARGEST_TRANSCRIPT) {
        return Ok(None);
    }
    let cues = match &folded.transcript {
        TranscriptChange::Append(cues) => cues.as_str(),
        _ => "",
    };
    let whole = match stored {
        Some(stored) => codec::transcript(stored)? + cues,
        None if cues.is_empty() => return Ok(None),
        None => format!("{TRANSCRIPT_HEADER}{cues}").into(),
    };
    let stored = if folded.state.is_served_interview() {
        shared::layout::stored_transcript(&whole, layout).into_owned()
    } else {
        whole.into_owned().into_bytes()
    };
    Ok(Some(Replacement { stored, rewrite: served_before }))
}

impl Store {
    /// For each fold (organization, interview id, served before the write, the fold), the transcript
    /// that replaces the stored one, if any: the stored ones that must be read are, in one round trip.
    pub(super) async fn replacements(
        &mut self,
        folds: &[(&str, &str, bool, &Folded)],
        layout: u32,
    ) -> Result<Vec<Option<Replacement>>, StoreError> {
        let read: Vec<usize> = (0..folds.len()).filter(|&i| reads_transcript(layout, folds[i].2, folds[i].3)).collect();
        let mut replacements = vec![None; folds.len()];
        if read.is_empty() {
            return Ok(replacements);
        }
        let interviews: Vec<(&str, &str)> = read.iter().map(|&i| (folds[i].0, folds[i].1)).collect();
        for (&i, stored) in read.iter().zip(self.transcripts(&interviews).await?) {
            let (org, id, served_before, folded) = folds[i];
            replacements[i] = replacement(stored.as_deref(), folded, served_before, layout)
                .map_err(|e| StoreError::CorruptState { key: self.keys.transcript(org, id), reason: e.to_string() })?;
        }
        Ok(replacements)
    }

    /// The stored transcripts of `interviews` (organization, id), each at most a chunk and one byte, in
    /// one round trip.
    pub(super) async fn transcripts(
        &mut self,
        interviews: &[(&str, &str)],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let reads: Vec<redis::Cmd> = interviews
            .iter()
            .map(|(org, id)| {
                let mut read = redis::cmd("GETRANGE");
                read.arg(self.keys.transcript(org, id)).arg(0).arg(LARGEST_TRANSCRIPT);
                read
            })
            .collect();
        let replies = self.query(&reads).await?;
        // GETRANGE answers an empty string for a key that does not exist (never a stored transcript).
        let read = |reply| redis::from_redis_value::<Vec<u8>>(reply).map(|bytes| (!bytes.is_empty()).then_some(bytes));
        Ok(replies.into_iter().map(read).collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::{IndexChange, State};

    fn folded(served: bool, transcript: TranscriptChange) -> Folded {
        let mut state = State::new(shared::Topic::Interview);
        let State::Interview(interview) = &mut state else { unreachable!() };
        interview.completed = served;
        let document = served.then(|| "{}".to_string());
        Folded { sequence: 3, state, document, index: IndexChange::None, transcript }
    }

    fn cue(text: &str) -> String {
        format!("\n00:00:01.000 --> 00:00:02.000\n{text}\n")
    }

    fn cues(text: &str) -> TranscriptChange {
        TranscriptChange::Append(cue(text))
    }

    #[test]
    fn only_an_interview_served_before_or_after_that_gets_cues_enters_or_leaves_is_read_in_layout_six() {
        let keep = TranscriptChange::Keep;
        assert!(reads_transcript(6, false, &folded(true, keep.clone())), "enters");
        assert!(reads_transcript(6, true, &folded(false, keep.clone())), "leaves");
        assert!(reads_transcript(6, true, &folded(true, cues("later"))), "a message while served");
        assert!(!reads_transcript(6, true, &folded(true, keep.clone())), "nothing changes");
        assert!(!reads_transcript(6, false, &folded(false, cues("ongoing"))), "not served: appended");
        assert!(!reads_transcript(6, true, &folded(false, TranscriptChange::Delete)), "deleted");
        assert!(!reads_transcript(5, false, &folded(true, cues("x"))), "layout 5: appended");
    }

    #[test]
    fn the_replacement_is_the_stored_transcript_and_the_cues_compressed_while_served_and_whole_when_not() {
        let stored = format!("{TRANSCRIPT_HEADER}{}", cue("before"));
        let change = cues("after");
        let TranscriptChange::Append(added) = &change else { unreachable!() };
        let served = replacement(Some(stored.as_bytes()), &folded(true, change.clone()), false, 6).unwrap().unwrap();
        assert!(codec::is_compressed(&served.stored) && !served.rewrite);
        assert_eq!(codec::transcript(&served.stored).unwrap(), format!("{stored}{added}"));
        let again = replacement(Some(&served.stored), &folded(true, cues("again")), true, 6).unwrap().unwrap();
        assert!(again.rewrite, "served before: a rewrite");
        assert!(codec::transcript(&again.stored).unwrap().ends_with("again\n"));
        let left = replacement(Some(&again.stored), &folded(false, TranscriptChange::Keep), true, 6).unwrap().unwrap();
        assert_eq!(left.stored, codec::transcript(&again.stored).unwrap().as_bytes(), "not served: whole");
        let fresh = replacement(None, &folded(true, change.clone()), false, 6).unwrap().unwrap();
        assert_eq!(codec::transcript(&fresh.stored).unwrap(), format!("{TRANSCRIPT_HEADER}{added}"));
        assert_eq!(replacement(None, &folded(true, TranscriptChange::Keep), false, 6), Ok(None));
    }

    #[test]
    fn a_transcript_longer_than_a_chunk_is_left_whole_for_the_script_to_append_to() {
        let long = vec![b'x'; LARGEST_TRANSCRIPT as usize + 1];
        assert_eq!(replacement(Some(&long), &folded(true, cues("x")), true, 6), Ok(None));
    }

    #[test]
    fn a_stored_frame_that_does_not_read_is_an_error_never_text() {
        let damaged = [0x28, 0xB5, 0x2F, 0xFD, 0, 0, 0];
        assert!(replacement(Some(&damaged), &folded(true, cues("x")), true, 6).is_err());
    }
}
