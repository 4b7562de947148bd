//! Redis URLs carry the password of the Redis user (`rediss://user:password@host:port`). This module is
//! the one place that writes such a URL for people to read, with the password replaced by `***`, so that
//! no log line, error message or `Debug` print of a configuration shows it. It also holds [`Target`], the
//! read model's URLs as both binaries are configured with them.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

/// Where the read model lives: one server, or a cluster given by seed nodes. Shown (`Debug`, `Display`)
/// without the passwords of its URLs.
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    Single(String),
    Cluster(Vec<String>),
}

impl Target {
    /// `urls` is one Redis URL, or with `cluster` a comma-separated list of some nodes of the cluster.
    pub fn new(urls: &str, cluster: bool) -> Self {
        if cluster {
            Target::Cluster(urls.split(',').map(str::trim).filter(|u| !u.is_empty()).map(String::from).collect())
        } else {
            Target::Single(urls.trim().to_string())
        }
    }

    /// Its URLs: the one server's, or every seed's.
    pub fn urls(&self) -> &[String] {
        match self {
            Target::Single(url) => std::slice::from_ref(url),
            Target::Cluster(seeds) => seeds,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<String> = self.urls().iter().map(|url| redact(url)).collect();
        f.write_str(&urls.join(","))
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<String> = self.urls().iter().map(|url| redact(url)).collect();
        match self {
            Target::Single(_) => f.debug_tuple("Single").field(&urls[0]).finish(),
            Target::Cluster(_) => f.debug_tuple("Cluster").field(&urls).finish(),
        }
    }
}

/// A configured Redis URL (or, for a cluster, comma-separated URLs of some of its nodes). `Debug` and
/// `Display` show it without its password; only [`RedisUrl::expose`] gives the URL itself.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl(String);

impl RedisUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with its password: for the Redis client, never for a log.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl FromStr for RedisUrl {
    type Err = Infallible;

    fn from_str(url: &str) -> Result<Self, Infallible> {
        Ok(Self::new(url))
    }
}

impl From<String> for RedisUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for RedisUrl {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisUrl").field(&redact(&self.0)).finish()
    }
}

/// `urls` (one URL, or comma-separated URLs) with every password replaced by `***`: what stands between
/// the user name's `:` and the last `@` before the host, and the value of a `pass=` query parameter.
/// A comma splits two URLs only when a scheme (`://`) follows it, so that a password with a comma in it is
/// hidden whole. A user name alone (`redis://name@host`) is no secret and is kept.
pub fn redact(urls: &str) -> String {
    let mut pieces: Vec<String> = Vec::new();
    for piece in urls.split(',') {
        match pieces.last_mut() {
            Some(last) if !piece.contains("://") => {
                last.push(',');
                last.push_str(piece);
            }
            _ => pieces.push(piece.to_string()),
        }
    }
    pieces.iter().map(|url| redact_one(url)).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    let start = url.find("://").map_or(0, |at| at + 3);
    let mut out = match url[start..].rfind('@') {
        Some(at) => {
            let userinfo = &url[start..start + at];
            match userinfo.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..start], &userinfo[..colon], &url[start + at..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    };
    // `?pass=` (the password of a Unix-socket URL).
    if let Some(query) = out.find('?') {
        let hidden: Vec<String> = out[query + 1..]
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("pass") || name.eq_ignore_ascii_case("password") => {
                    format!("{name}=***")
                }
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{}?{}", &out[..query], hidden.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_shows_and_the_rest_of_the_url_does() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("rediss://projector:s3cret@redis.example:6380/0", "rediss://projector:***@redis.example:6380/0"),
            ("rediss://:token@host:6379", "rediss://:***@host:6379"),
            ("redis://name@host", "redis://name@host"),
            // An `@`, a `/` or a `:` in a password not percent-encoded: hidden whole all the same.
            ("redis://u:p@ss@host:1", "redis://u:***@host:1"),
            ("redis://u:pa/ss@host", "redis://u:***@host"),
            ("redis://u:a:b@host", "redis://u:***@host"),
            ("redis+unix:///run/redis.sock?db=1&pass=s3cret", "redis+unix:///run/redis.sock?db=1&pass=***"),
            ("u:s3cret@host:6379", "u:***@host:6379"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn every_url_of_a_cluster_is_redacted_and_a_comma_in_a_password_splits_nothing() {
        assert_eq!(redact("rediss://u:one@a:1,rediss://u:two@b:2"), "rediss://u:***@a:1,rediss://u:***@b:2");
        assert_eq!(redact("redis://u:pa,ss@host:1"), "redis://u:***@host:1");
        assert_eq!(redact("redis://a:1,redis://b:2"), "redis://a:1,redis://b:2");
    }

    #[test]
    fn debug_and_display_show_the_url_without_its_password() {
        let url: RedisUrl = "rediss://query-api:hunter2@h:6380".parse().unwrap();
        for shown in [format!("{url}"), format!("{url:?}"), format!("{:?}", Some(url.clone()))] {
            assert!(!shown.contains("hunter2") && shown.contains("query-api:***@h:6380"), "{shown}");
        }
        assert_eq!(url.expose(), "rediss://query-api:hunter2@h:6380");
    }
}
