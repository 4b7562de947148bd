//! The API reference page: `GET /v1/docs`, rendered in the browser by Redoc from the definition this
//! server serves at `/v1/openapi.json`. The renderer is a pinned npm release vendored into
//! `query-api/assets/` by `scripts/vendor-docs-assets` and embedded in the binary: nothing is fetched
//! from anywhere else, at build time or at run time, and the page's Content-Security-Policy says so.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("../../assets/docs.html");
const REDOC: &str = include_str!("../../assets/redoc.standalone.js");

/// Only this server: Redoc's styles are inline (styled-components) and its search index runs in a worker
/// made from a blob.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                      img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; \
                      base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub async fn page() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CONTENT_SECURITY_POLICY, POLICY)], PAGE)
}

pub async fn renderer() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], REDOC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_the_embedded_renderer_and_the_served_definition() {
        assert!(PAGE.contains(r#"spec-url="/v1/openapi.json""#));
        assert!(PAGE.contains(r#"src="/v1/docs/redoc.standalone.js""#));
        assert!(!PAGE.contains("http"), "nothing from another origin");
        assert!(REDOC.len() > 1_000_000, "the whole bundle is embedded");
    }
}
