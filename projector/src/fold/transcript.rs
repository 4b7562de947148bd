//! WebVTT cues, rendered once at projection time so the API serves the transcript as stored.
//!
//! The stored transcript is [`HEADER`] followed by one [`cue`] per participant message, appended in
//! recording order; each cue starts with the blank line that separates it from what comes before.

/// The first line of every transcript.
pub const HEADER: &str = "WEBVTT\n";

/// One cue: a blank line, the timing line and the escaped text.
///
/// A missing start is zero; a missing end equals the start; an end before the start is raised to it, as
/// a cue cannot end before it begins. Negative or non-finite times count as missing.
pub fn cue(text: &str, start_seconds: Option<f64>, end_seconds: Option<f64>) -> String {
    let start = millis(start_seconds).unwrap_or(0);
    let end = millis(end_seconds).unwrap_or(start).max(start);
    format!("\n{} --> {}\n{}\n", timestamp(start), timestamp(end), escape(text))
}

fn millis(seconds: Option<f64>) -> Option<u64> {
    seconds.filter(|s| s.is_finite() && *s >= 0.0).map(|s| (s * 1000.0).round() as u64)
}

/// `HH:MM:SS.mmm`; hours grow past two digits when they must.
pub fn timestamp(millis: u64) -> String {
    let (hours, rest) = (millis / 3_600_000, millis % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    format!("{hours:02}:{minutes:02}:{:02}.{:03}", rest / 1000, rest % 1000)
}

/// Escapes `&`, `<` and `>` (so `-->` cannot end the cue's text early), and removes empty lines, which end
/// a cue: the lines around an empty line are joined by a single line break. A line of whitespace is not
/// empty to a WebVTT parser, so it stays.
pub fn escape(text: &str) -> String {
    let normalized = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = String::with_capacity(normalized.len());
    let mut first = true;
    for line in normalized.split('\n').filter(|line| !line.is_empty()) {
        if !first {
            out.push('\n');
        }
        first = false;
        for c in line.chars() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                c => out.push(c),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cue_has_its_timing_and_text() {
        assert_eq!(cue("Hello", Some(1.5), Some(2.25)), "\n00:00:01.500 --> 00:00:02.250\nHello\n");
    }

    #[test]
    fn times_past_an_hour_carry_hours() {
        assert_eq!(timestamp(3_723_004), "01:02:03.004");
        assert_eq!(timestamp(360_000_000), "100:00:00.000");
        assert_eq!(cue("x", Some(3723.004), None), "\n01:02:03.004 --> 01:02:03.004\nx\n");
    }

    #[test]
    fn missing_timing_gives_a_zero_start_and_an_end_equal_to_the_start() {
        assert_eq!(cue("a", None, None), "\n00:00:00.000 --> 00:00:00.000\na\n");
        assert_eq!(cue("a", Some(5.0), None), "\n00:00:05.000 --> 00:00:05.000\na\n");
        assert_eq!(cue("a", None, Some(2.0)), "\n00:00:00.000 --> 00:00:02.000\na\n");
        assert_eq!(cue("a", Some(f64::NAN), Some(-1.0)), "\n00:00:00.000 --> 00:00:00.000\na\n");
        assert_eq!(cue("a", Some(9.0), Some(3.0)), "\n00:00:09.000 --> 00:00:09.000\na\n");
    }

    #[test]
    fn milliseconds_are_rounded_not_truncated() {
        assert_eq!(cue("a", Some(0.0019), Some(1.9999)), "\n00:00:00.002 --> 00:00:02.000\na\n");
    }

    #[test]
    fn markup_characters_are_escaped() {
        assert_eq!(escape("Fish & chips <b>bold</b> a --> b"), "Fish &amp; chips &lt;b&gt;bold&lt;/b&gt; a --&gt; b");
        assert_eq!(escape("&amp;"), "&amp;amp;");
    }

    #[test]
    fn a_blank_line_becomes_a_single_line_break() {
        assert_eq!(escape("one\n\ntwo"), "one\ntwo");
        assert_eq!(escape("one\r\n\r\n\ttwo\rthree"), "one\n\ttwo\nthree");
        assert_eq!(escape("\nleading and trailing\n\n"), "leading and trailing");
        assert_eq!(escape("kept\nline break"), "kept\nline break");
    }

    #[test]
    fn a_line_of_whitespace_is_kept() {
        assert_eq!(escape("one\n  \ntwo"), "one\n  \ntwo");
        assert_eq!(escape(" "), " ");
        assert_eq!(escape("\t\n\nx"), "\t\nx");
    }

    #[test]
    fn non_ascii_text_is_kept_as_is() {
        assert_eq!(escape("Þetta er gott 👍 — très bien"), "Þetta er gott 👍 — très bien");
    }
}

#[cfg(test)]
mod properties {
    //! Any message text reads back, through an independent WebVTT parser, as the original text up to the
    //! one change allowed (an empty line becomes a single line break), with the times given.

    use std::time::Duration;

    use fasrt::vtt::cue::{CueText, Node};
    use fasrt::vtt::{Block, Parser};
    use proptest::prelude::*;

    use super::{cue, HEADER};

    /// What the parser must read back: line breaks normalized, empty lines gone, and NUL, which WebVTT
    /// cannot carry in any form, read as U+FFFD (as every WebVTT parser does).
    fn expected(text: &str) -> String {
        let normalized = text.replace("\r\n", "\n").replace('\r', "\n").replace('\0', "\u{FFFD}");
        normalized.split('\n').filter(|line| !line.is_empty()).collect::<Vec<_>>().join("\n")
    }

    /// Every cue of a transcript as (start, end, plain text).
    fn read_back(transcript: &str) -> Vec<(Duration, Duration, String)> {
        let mut cues = Vec::new();
        for block in Parser::new(transcript) {
            let Block::Cue(cue) = block.expect("valid WebVTT") else { panic!("only cues") };
            let mut plain = String::new();
            for node in CueText::parse(cue.body_ref()).children_slice() {
                match node {
                    Node::Text(t) => plain.push_str(t.normalize()),
                    other => panic!("markup {other:?} from {transcript:?}"),
                }
            }
            cues.push((cue.header_ref().start().to_duration(), cue.header_ref().end().to_duration(), plain));
        }
        cues
    }

    /// Text with what makes WebVTT hard: markup characters, arrows, entities, line breaks of every kind,
    /// blank and whitespace lines, and any other character.
    fn text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("&".to_string()),
            Just("<".to_string()),
            Just(">".to_string()),
            Just("-->".to_string()),
            Just("&amp;".to_string()),
            Just("<b>".to_string()),
            Just("\n".to_string()),
            Just("\r\n".to_string()),
            Just("\r".to_string()),
            Just("\n\n".to_string()),
            Just(" ".to_string()),
            Just("\t".to_string()),
            "[a-zA-Z0-9 ]{1,8}",
            "\\PC{1,4}",
            any::<char>().prop_map(String::from),
        ];
        proptest::collection::vec(piece, 1..12).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn any_text_reads_back_as_the_original(text in text(), start in 0u32..400_000_000, length in 0u32..100_000) {
            let (start_ms, end_ms) = (u64::from(start), u64::from(start) + u64::from(length));
            let seconds = |ms: u64| Some(ms as f64 / 1000.0);
            let transcript = format!("{HEADER}{}", cue(&text, seconds(start_ms), seconds(end_ms)));
            let cues = read_back(&transcript);
            let wanted = expected(&text);
            prop_assume!(!wanted.is_empty());
            prop_assert_eq!(cues, vec![(Duration::from_millis(start_ms), Duration::from_millis(end_ms), wanted)]);
        }
    }
}
