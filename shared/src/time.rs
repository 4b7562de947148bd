//! One formatting and one ordering rule for timestamps, so that documents and sorted-set scores agree.

use chrono::{DateTime, SecondsFormat, Utc};

/// Formats a timestamp as ISO 8601 UTC with a `Z` suffix, keeping as many fractional digits as it has
/// (none, 3, 6 or 9).
pub fn format_utc(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// The sorted-set score of a timestamp: microseconds since the Unix epoch. Every such value up to the
/// year 2255 is exactly representable in the f64 that Redis keeps, so the order is exact to the microsecond.
pub fn score(at: &DateTime<Utc>) -> f64 {
    at.timestamp_micros() as f64
}

/// Formats Unix time in seconds (as the projector's gauges keep it) like [`format_utc`], to the
/// millisecond; `None` for 0 or less (nothing yet).
pub fn format_unix(seconds: f64) -> Option<String> {
    if seconds <= 0.0 {
        return None;
    }
    let at = DateTime::from_timestamp_millis((seconds * 1000.0).round() as i64)?;
    Some(at.to_rfc3339_opts(SecondsFormat::Millis, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_only_the_fraction_it_has() {
        let whole: DateTime<Utc> = "2026-11-02T15:20:00Z".parse().unwrap();
        let millis: DateTime<Utc> = "2026-11-02T16:20:05.120+01:00".parse().unwrap();
        assert_eq!(format_utc(&whole), "2026-11-02T15:20:00Z");
        assert_eq!(format_utc(&millis), "2026-11-02T15:20:05.120Z");
    }

    #[test]
    fn unix_seconds_format_to_the_millisecond_and_nothing_as_none() {
        assert_eq!(format_unix(1_795_400_000.5).as_deref(), Some("2026-11-23T02:13:20.500Z"));
        assert_eq!(format_unix(0.0), None);
    }

    #[test]
    fn scores_keep_microsecond_order() {
        let a: DateTime<Utc> = "2226-01-01T00:00:00.000001Z".parse().unwrap();
        let b: DateTime<Utc> = "2226-01-01T00:00:00.000002Z".parse().unwrap();
        assert!(score(&a) < score(&b));
        assert_eq!(score(&b) as i64, b.timestamp_micros());
    }
}
