//! The benchmarks' ceiling of the data routes (`BENCH_CEILING_BYTES`): a constant JSON body, made once at
//! start, answered through every layer a data route has, with no key checked and no Redis read. Beside
//! `/livez` (the framework alone), it splits what a data route costs into the middleware's share and the
//! data path's. Off unless configured: a production instance serves no such route.

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The constant body, shared by every answer (cloning `Bytes` copies nothing).
#[derive(Clone)]
pub struct Ceiling(Bytes);

impl Ceiling {
    /// A body of exactly `bytes` bytes of valid JSON (`{"items":"xx…"}`, or a number when shorter than
    /// that), or no route for 0.
    pub fn of(bytes: usize) -> Option<Self> {
        const FRAME: usize = r#"{"items":""}"#.len();
        let body = match bytes {
            0 => return None,
            n if n < FRAME => format!("1{}", "0".repeat(n - 1)),
            n => format!(r#"{{"items":"{}"}}"#, "x".repeat(n - FRAME)),
        };
        Some(Self(Bytes::from(body)))
    }

    pub fn answer(&self) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], self.0.clone()).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_json_of_exactly_the_size_asked_and_none_for_zero() {
        assert!(Ceiling::of(0).is_none());
        for size in [1, 2, 5, 12, 13, 8_192] {
            let Ceiling(body) = Ceiling::of(size).unwrap();
            assert_eq!(body.len(), size, "{size}");
            serde_json::from_slice::<serde_json::Value>(&body).expect("JSON");
        }
    }
}
