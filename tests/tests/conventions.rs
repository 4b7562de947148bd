//! The HTTP conventions integrators expect of a rate-limited JSON API: the `RateLimit-Policy` and
//! `RateLimit` headers.

use end_to_end::api::{config, spawn_app, World};
use end_to_end::env;
use end_to_end::fixture::{self, ACME_KEY, GLOBEX_KEY};
use reqwest::header::HeaderMap;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|value| value.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_headers_count_down_and_are_absent_when_the_limit_is_off() {
    let world = World::start(&fixture::dataset()).await;
    let mut limited = config(&world.prefix, &env("REDIS_URL"));
    (limited.rate_limit_per_second, limited.rate_limit_burst) = (1, 3);
    let app = spawn_app(limited).await;
    let first = app.get("/v1/studies", Some(ACME_KEY)).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(first.headers(), "ratelimit-policy"), Some("\"default\";q=3;w=3"));
    assert_eq!(header(first.headers(), "ratelimit"), Some("\"default\";r=2;t=1"), "a full bucket less one");
    // One token a second: requests in quick succession count down to a refusal.
    let mut remaining = 2;
    let refused = loop {
        let response = app.get("/v1/studies", Some(ACME_KEY)).await;
        let standing = header(response.headers(), "ratelimit").expect("on every authenticated response").to_string();
        let r: u32 = standing.split(";r=").nth(1).and_then(|rest| rest.split(';').next()?.parse().ok()).unwrap();
        if response.status() == 429 {
            break response;
        }
        assert!(r <= remaining + 1, "{standing} after r={remaining}");
        remaining = r;
    };
    let headers = refused.headers();
    assert_eq!(header(headers, "retry-after"), Some("1"), "a 429 keeps its Retry-After");
    assert!(header(headers, "ratelimit").unwrap().starts_with("\"default\";r=0;t="), "{headers:?}");
    assert_eq!(header(headers, "ratelimit-policy"), Some("\"default\";q=3;w=3"));
    let not_found = app.get("/v1/studies/nope", Some(GLOBEX_KEY)).await;
    assert_eq!(not_found.status(), 404);
    assert_eq!(header(not_found.headers(), "ratelimit"), Some("\"default\";r=2;t=1"), "another key, its own");
    let unauthenticated = app.get("/v1/studies", Some("not-a-key")).await;
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(header(unauthenticated.headers(), "ratelimit"), None, "no key, no count");
    // Without the setting there is no limit, and no headers.
    let unlimited = world.app.get("/v1/studies", Some(ACME_KEY)).await;
    assert_eq!(unlimited.status(), 200);
    assert_eq!(header(unlimited.headers(), "ratelimit-policy"), None);
    assert_eq!(header(unlimited.headers(), "ratelimit"), None);
}
