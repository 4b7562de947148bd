//! Adds the `RateLimit-Policy` and `RateLimit` headers (IETF draft httpapi-ratelimit-headers) to every
//! response of an authenticated request while a per-key rate limit is on, 429 included: the
//! authentication step reports where the key's bucket stands (`crate::auth::rate_limit::Report`), and
//! this writes it down once the response is made. The counts are this instance's: every instance keeps
//! its own buckets.

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use crate::auth::rate_limit::{Report, RATE_LIMIT, RATE_LIMIT_POLICY};
use crate::state::AppState;

pub async fn headers(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let Some(limit) = state.auth.rate_limit() else { return next.run(request).await };
    let report = Report::default();
    request.extensions_mut().insert(report.clone());
    let mut response = next.run(request).await;
    if let Some(standing) = report.get() {
        let headers = response.headers_mut();
        for (name, value) in [(RATE_LIMIT_POLICY, limit.policy()), (RATE_LIMIT, standing.header())] {
            headers.insert(name, HeaderValue::try_from(value).expect("a header of digits and a token"));
        }
    }
    response
}
