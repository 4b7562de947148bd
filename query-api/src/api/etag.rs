//! Entity tags of the study routes (RFC 9110 section 8.8.3), so that a client can ask again with
//! `If-None-Match` and get `304 Not Modified` instead of the same body.
//!
//! A tag is strong: the first 128 bits of a SHA-256, of what identifies the body exactly rather than of
//! the body itself ([`Version`]): the generation and the organization's epoch read with the answer (the
//! epoch is renewed by every write to the organization, as the reads kept in memory already rely on), what
//! the request asked, and the API's version (which may render the same data otherwise). Hashing that costs
//! the same for every page; hashing a page of 100 studies cost tens of microseconds. An answer without an
//! epoch (an organization with no data yet) is tagged by its exact JSON bytes.
//! A compressed body is another representation, so the edge gives it a tag of its own, the coding's name
//! appended ([`encoded`]), and answers `If-None-Match` there, after compression (`crate::edge::conditional`).
//! The interview routes carry no tag: their video links are signed afresh for each request (api.md 2.3).

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// The strong tag of a body: `"` + 32 hex digits + `"`.
pub fn of(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    format!("\"{}\"", hex::encode(&digest[..16]))
}

/// What identifies a response's body: the organization's version and what the request asked.
pub struct Version<'a> {
    pub generation: u64,
    pub org: &'a str,
    /// The organization's epoch, read with the answer; none when it has no data yet.
    pub epoch: Option<&'a str>,
    /// The route and its parameters.
    pub asked: &'a [&'a str],
}

impl Version<'_> {
    /// The strong tag of the body this version renders to, when it has an epoch: `"` + 32 hex digits + `"`.
    pub fn tag(&self) -> Option<String> {
        let epoch = self.epoch?;
        let mut hash = Sha256::new();
        let generation = self.generation.to_string();
        let parts =
            [env!("CARGO_PKG_VERSION"), &generation, self.org, epoch].into_iter().chain(self.asked.iter().copied());
        for part in parts {
            // Each part with its length: no two lists of parts hash alike by moving a boundary.
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
        Some(format!("\"{}\"", hex::encode(&hash.finalize()[..16])))
    }
}

/// A 200 JSON response of `body`, tagged by its `version`, or by the body itself when that has no epoch.
pub fn tagged(body: Vec<u8>, version: &Version<'_>) -> Response {
    let tag = version.tag().unwrap_or_else(|| of(&body));
    let tag = HeaderValue::try_from(tag).expect("quoted hex digits");
    let json = HeaderValue::from_static("application/json");
    ([(header::CONTENT_TYPE, json), (header::ETAG, tag)], body).into_response()
}

/// The tag of the representation coded with `coding` (`gzip`, `br`): `"<digest>-<coding>"`. A weak tag
/// stays as it is.
pub fn encoded(tag: &str, coding: &str) -> Option<String> {
    let opaque = tag.strip_prefix('"')?.strip_suffix('"')?;
    let coding: String = coding.chars().filter(char::is_ascii_alphanumeric).collect();
    Some(format!("\"{opaque}-{coding}\""))
}

/// Whether `If-None-Match` (every field line of it, in `values`) matches `tag`, by weak comparison
/// (RFC 9110 sections 8.8.3.2 and 13.1.2): `*`, or any listed tag with the same opaque value, `W/` or not.
/// An unreadable member ends the list: the tags before it still count.
pub fn none_match<'a>(values: impl IntoIterator<Item = &'a [u8]>, tag: &str) -> bool {
    let ours = opaque(tag.as_bytes());
    values.into_iter().any(|value| {
        if value.trim_ascii() == b"*" {
            return true;
        }
        let mut rest = value;
        loop {
            rest = rest.trim_ascii_start();
            while let [b',', tail @ ..] = rest {
                rest = tail.trim_ascii_start();
            }
            if rest.is_empty() {
                return false;
            }
            let unprefixed = rest.strip_prefix(b"W/").unwrap_or(rest);
            let Some(quoted) = unprefixed.strip_prefix(b"\"") else { return false };
            let Some(end) = quoted.iter().position(|&b| b == b'"') else { return false };
            if Some(&quoted[..end]) == ours {
                return true;
            }
            rest = &quoted[end + 1..];
        }
    })
}

/// The opaque part of a tag, between its quotes.
fn opaque(tag: &[u8]) -> Option<&[u8]> {
    tag.strip_prefix(b"W/").unwrap_or(tag).strip_prefix(b"\"")?.strip_suffix(b"\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(if_none_match: &str, tag: &str) -> bool {
        none_match([if_none_match.as_bytes()], tag)
    }

    #[test]
    fn a_tag_is_strong_and_depends_on_every_byte() {
        let tag = of(b"{\"items\":[]}");
        assert_eq!(tag.len(), 34);
        assert!(tag.starts_with('"') && tag.ends_with('"'));
        assert!(tag[1..33].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(tag, of(b"{\"items\":[] }"));
        assert_eq!(tag, of(b"{\"items\":[]}"));
    }

    #[test]
    fn a_versions_tag_changes_with_every_part_of_it_and_only_with_them() {
        let asked = ["studies", "1", "20"];
        let base = Version { generation: 3, org: "acme", epoch: Some("e1:17"), asked: &asked };
        let tag = base.tag().expect("an epoch, a tag");
        assert_eq!(tag.len(), 34);
        assert_eq!(Some(&tag), Version { ..base }.tag().as_ref(), "stable");
        let other_page = ["studies", "2", "20"];
        let moved = ["studies", "12", "0"];
        for (changed, what) in [
            (Version { generation: 4, ..base }, "generation"),
            (Version { org: "globex", ..base }, "organization"),
            (Version { epoch: Some("e2:17"), ..base }, "epoch"),
            (Version { asked: &other_page, ..base }, "page"),
            (Version { asked: &moved, ..base }, "a boundary moved"),
        ] {
            assert_ne!(changed.tag().as_ref(), Some(&tag), "{what}");
        }
        assert_eq!(Version { epoch: None, ..base }.tag(), None, "without an epoch, the body's tag");
    }

    #[test]
    fn if_none_match_compares_weakly_and_reads_lists_and_a_star() {
        let tag = "\"abc\"";
        for yes in [
            "\"abc\"",
            "W/\"abc\"",
            "*",
            " * ",
            "\"x\", \"abc\"",
            "\"x\",W/\"abc\"",
            ",, \"abc\" ,",
            "\"a,b\", \"abc\"",
        ] {
            assert!(matches(yes, tag), "{yes}");
        }
        for no in
            ["", "\"abd\"", "abc", "\"abc", "\"ab\"c\"", "W/ \"abc\"", "w/\"abc\"", "\"x\" \"y\" abc", "\"*\"", "**"]
        {
            assert!(!matches(no, tag), "{no}");
        }
        assert!(matches("\"abc\"", "W/\"abc\""), "our weak tag matches too");
        assert!(none_match([&b"\"x\""[..], &b"\"abc\""[..]], tag), "any field line");
        assert!(!none_match([], tag), "no header, no match");
        assert!(matches("\"x\", \"abc\" garbage", tag), "tags before an unreadable member count");
    }

    #[test]
    fn a_coded_representation_has_a_tag_of_its_own() {
        assert_eq!(encoded("\"abc\"", "gzip").as_deref(), Some("\"abc-gzip\""));
        assert_eq!(encoded("\"abc\"", "br").as_deref(), Some("\"abc-br\""));
        assert_eq!(encoded("W/\"abc\"", "gzip"), None);
        assert_ne!(encoded("\"abc\"", "gzip"), encoded("\"abc\"", "br"));
    }
}
