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

    /// The Authentication section the page opens with: the start of the served definition's description,
    /// which Redoc renders first, up to its next heading.
    fn authentication() -> String {
        let doc: serde_json::Value = serde_json::from_str(&super::super::openapi::document()).unwrap();
        let description = doc["info"]["description"].as_str().unwrap().to_string();
        let section =
            description.strip_prefix("# Authentication\n").expect("the description opens with Authentication");
        section.split("\n# ").next().unwrap().to_string()
    }

    #[test]
    fn the_page_opens_with_authentication_showing_both_headers_with_the_schemes_in_it() {
        let section = authentication();
        assert!(section.contains("\nAuthorization: Bearer <key>\n"), "{section}");
        assert!(section.contains("\nService-Api-Key: <key>\n"), "{section}");
        assert!(section.contains("curl -H \"Authorization: Bearer <key>\""), "{section}");
        assert!(section.contains("curl -H \"Service-Api-Key: <key>\""), "{section}");
        // Redoc puts the security schemes where this marker is, rather than after the whole description.
        assert!(section.contains("<!-- ReDoc-Inject: <security-definitions> -->"), "{section}");
    }

    #[test]
    fn the_header_lines_the_page_shows_are_the_ones_the_server_reads_and_bearer_wins_as_it_says() {
        use crate::auth::credential::credential;
        let section = authentication();
        let mut both = axum::http::HeaderMap::new();
        for (line, key) in [("Authorization: Bearer <key>", "k-bearer"), ("Service-Api-Key: <key>", "k-header")] {
            assert!(section.contains(line));
            let (name, value) = line.split_once(": ").unwrap();
            let name = axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            let value = axum::http::HeaderValue::from_str(&value.replace("<key>", key)).unwrap();
            let mut alone = axum::http::HeaderMap::new();
            alone.insert(name.clone(), value.clone());
            assert_eq!(credential(&alone), Some(key), "{line}");
            both.insert(name, value);
        }
        assert!(section.contains("When a request carries both, the `Authorization: Bearer` key is the one used"));
        assert_eq!(credential(&both), Some("k-bearer"));
    }
}
