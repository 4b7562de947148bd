//! The credential of a request (api.md section 5): the key comes from `Authorization: Bearer <key>` or
//! `Service-Api-Key: <key>`, Bearer first. It is looked up by its SHA-256, never logged or kept.

use axum::http::HeaderMap;

/// Longest key accepted; longer values are not keys and are refused without a lookup.
const MAX_KEY_LEN: usize = 512;

/// The credential of a request: the Bearer token when an `Authorization` header with the Bearer scheme is
/// present, else the `Service-Api-Key` header. `None` when neither is present or the one that counts is
/// malformed: an `Authorization: Bearer` header without a usable token (nothing after the scheme, a tab
/// for the space, bytes that are not ASCII) is a present, invalid Bearer credential, never a reason to
/// look at the other header.
pub fn credential(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers.get_all("authorization").iter().find_map(|value| {
        let bytes = value.as_bytes();
        let scheme_end = bytes.iter().position(|b| *b == b' ' || *b == b'\t').unwrap_or(bytes.len());
        let (scheme, rest) = bytes.split_at(scheme_end);
        scheme.eq_ignore_ascii_case(b"bearer").then(|| std::str::from_utf8(rest).ok().map(|t| t.trim_matches(' ')))
    });
    let key = match bearer {
        Some(token) => token?,
        None => headers.get("service-api-key")?.to_str().ok()?,
    };
    let key = key.trim_matches(' ');
    let well_formed = !key.is_empty() && key.len() <= MAX_KEY_LEN && key.bytes().all(|b| b.is_ascii_graphic());
    well_formed.then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        map
    }

    #[test]
    fn either_header_carries_the_key() {
        assert_eq!(credential(&headers(&[("authorization", "Bearer k1")])), Some("k1"));
        assert_eq!(credential(&headers(&[("service-api-key", "k2")])), Some("k2"));
        assert_eq!(credential(&headers(&[("Authorization", "bearer k1")])), Some("k1"));
    }

    #[test]
    fn bearer_wins_when_both_are_present() {
        assert_eq!(credential(&headers(&[("service-api-key", "k2"), ("authorization", "Bearer k1")])), Some("k1"));
        // A malformed Bearer token is not replaced by the other header.
        assert_eq!(credential(&headers(&[("authorization", "Bearer "), ("service-api-key", "k2")])), None);
    }

    #[test]
    fn other_schemes_and_malformed_keys_give_no_credential() {
        assert_eq!(credential(&headers(&[])), None);
        assert_eq!(credential(&headers(&[("authorization", "Basic dXNlcjpwYXNz")])), None);
        assert_eq!(credential(&headers(&[("authorization", "k1")])), None);
        assert_eq!(credential(&headers(&[("authorization", "Bearer a b")])), None);
        assert_eq!(credential(&headers(&[("service-api-key", "")])), None);
        assert_eq!(credential(&headers(&[("service-api-key", &"k".repeat(513))])), None);
        // A Basic header does not hide a Service-Api-Key.
        assert_eq!(credential(&headers(&[("authorization", "Basic x"), ("service-api-key", "k2")])), Some("k2"));
    }

    #[test]
    fn a_bearer_header_without_a_usable_token_is_an_invalid_bearer_credential() {
        let other = ("service-api-key", "k2");
        for value in ["Bearer", "bearer", "Bearer\tk1", "Bearer  ", "Bearer \tk1"] {
            assert_eq!(credential(&headers(&[("authorization", value), other])), None, "{value:?}");
        }
        let mut non_ascii = headers(&[other]);
        non_ascii.append("authorization", axum::http::HeaderValue::from_bytes(b"Bearer k\xff").unwrap());
        assert_eq!(credential(&non_ascii), None);
        // Another scheme, or a word that merely starts like it, leaves the other header to decide.
        assert_eq!(credential(&headers(&[("authorization", "Bearerish k1"), other])), Some("k2"));
    }
}
