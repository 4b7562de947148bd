//! Which bucket a video link may name. The bucket comes from an event, and it becomes part of the link's
//! host or path next to the credential's id and session token, so it is checked against S3's naming rules
//! (and, when configured, a list of allowed buckets) before anything is signed.

/// Whether `name` is a bucket name by S3's general-purpose naming rules: 3 to 63 characters of lowercase
/// letters, digits, dots and hyphens; a letter or digit first and last; no two adjacent dots; not shaped
/// like an IP address; none of the prefixes and suffixes S3 reserves.
pub fn is_valid(name: &str) -> bool {
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'.' || *b == b'-';
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (3..=63).contains(&bytes.len())
        && bytes.iter().all(allowed)
        && edge(bytes.first())
        && edge(bytes.last())
        && !name.contains("..")
        && name.parse::<std::net::Ipv4Addr>().is_err()
        && !["xn--", "sthree-", "amzn-s3-demo-"].iter().any(|p| name.starts_with(p))
        && !["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"].iter().any(|s| name.ends_with(s))
}

/// The buckets video links may name: any valid name, or only those listed.
#[derive(Debug, Clone, Default)]
pub struct Allowed(Option<Vec<String>>);

impl Allowed {
    /// From `S3_ALLOWED_BUCKETS`: comma-separated names; empty allows any valid name.
    pub fn parse(list: Option<&str>) -> Self {
        let names: Vec<String> =
            list.unwrap_or_default().split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect();
        Self((!names.is_empty()).then_some(names))
    }

    pub fn permits(&self, bucket: &str) -> bool {
        is_valid(bucket) && self.0.as_ref().is_none_or(|names| names.iter().any(|n| n == bucket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_names_are_valid() {
        for name in ["videos", "abc", "my-bucket.2026", "a1b", &"a".repeat(63)] {
            assert!(is_valid(name), "{name}");
        }
    }

    #[test]
    fn hosts_paths_and_everything_else_are_not() {
        let long = "a".repeat(64);
        for name in [
            "attacker.example/",
            "evil.com:443",
            "a/b",
            "a?b",
            "a#b",
            "user@host",
            "",
            "ab",
            long.as_str(),
            "Videos",
            "-videos",
            "videos-",
            ".videos",
            "vid..eos",
            "192.168.1.1",
            "xn--videos",
            "videos-s3alias",
            "vidéos",
            "videos\n",
        ] {
            assert!(!is_valid(name), "{name:?}");
        }
    }

    #[test]
    fn a_list_limits_the_buckets_to_its_names() {
        let any = Allowed::parse(None);
        assert!(any.permits("videos") && !any.permits("Bad/"));
        let listed = Allowed::parse(Some(" videos, archive ,"));
        assert!(listed.permits("videos") && listed.permits("archive"));
        assert!(!listed.permits("other") && !listed.permits("attacker.example/"));
        assert!(Allowed::parse(Some("")).permits("other"));
    }
}
