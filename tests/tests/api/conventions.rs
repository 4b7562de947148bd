//! The HTTP conventions integrators expect of a paginated, rate-limited JSON API: entity tags and
//! `304 Not Modified` on the study routes (never on the interview routes, whose video links are fresh on
//! every request), `Link` headers on the lists, and the `RateLimit-Policy` and `RateLimit` headers.

use std::time::Duration;

use end_to_end::api::{config, spawn_serving_app, World};
use end_to_end::events::event;
use end_to_end::fixture::{self, ACME, ACME_KEY, GLOBEX_KEY};
use end_to_end::{env, eventually};
use reqwest::header::HeaderMap;
use reqwest::Response;
use serde_json::json;
use shared::Topic;

/// A client that neither asks for nor decodes compressed bodies.
fn identity() -> reqwest::Client {
    reqwest::Client::builder().no_gzip().timeout(Duration::from_secs(10)).build().unwrap()
}

async fn get(client: &reqwest::Client, world: &World, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = client.get(format!("{}{path}", world.app.address)).bearer_auth(ACME_KEY);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|value| value.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_study_fetched_again_with_its_etag_is_304_without_a_body() {
    let world = World::start(&fixture::dataset()).await;
    let client = identity();
    let first = get(&client, &world, "/v1/studies/s_a", &[]).await;
    assert_eq!(first.status(), 200);
    let tag = header(first.headers(), "etag").expect("an ETag").to_string();
    assert!(tag.len() == 34 && tag.starts_with('"') && tag.ends_with('"'), "a strong tag: {tag}");
    let body = first.bytes().await.unwrap();
    assert_eq!(get(&client, &world, "/v1/studies/s_a", &[]).await.headers()["etag"], tag.as_str(), "stable");

    let again = get(&client, &world, "/v1/studies/s_a", &[("if-none-match", &tag), ("x-request-id", "r-304")]).await;
    assert_eq!(again.status(), 304);
    let headers = again.headers().clone();
    assert_eq!(header(&headers, "etag"), Some(tag.as_str()));
    assert_eq!(header(&headers, "cache-control"), Some("no-store"));
    assert_eq!(header(&headers, "x-request-id"), Some("r-304"));
    assert_eq!(header(&headers, "content-type"), None);
    assert!(again.bytes().await.unwrap().is_empty(), "no body");

    let other = get(&client, &world, "/v1/studies/s_b", &[("if-none-match", &tag)]).await;
    assert_eq!(other.status(), 200, "another study has another tag");
    let unmatched = get(&client, &world, "/v1/studies/s_a", &[("if-none-match", "\"0000\"")]).await;
    assert_eq!(unmatched.status(), 200);
    assert_eq!(unmatched.bytes().await.unwrap(), body);
    let missing = get(&client, &world, "/v1/studies/nope", &[("if-none-match", "*")]).await;
    assert_eq!(missing.status(), 404, "a star matches only what exists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_none_match_reads_lists_stars_and_weak_tags_and_each_content_coding_has_its_own_tag() {
    let world = World::start(&fixture::dataset()).await;
    let client = identity();
    let plain = get(&client, &world, "/v1/studies", &[]).await;
    let tag = header(plain.headers(), "etag").unwrap().to_string();
    for if_none_match in [format!("\"x\", W/{tag}"), "*".into(), format!("W/\"y\",{tag}")] {
        let response = get(&client, &world, "/v1/studies", &[("if-none-match", &if_none_match)]).await;
        assert_eq!(response.status(), 304, "{if_none_match}");
        assert_eq!(header(response.headers(), "etag"), Some(tag.as_str()));
    }

    let gzip = [("accept-encoding", "gzip")];
    let compressed = get(&client, &world, "/v1/studies", &gzip).await;
    assert_eq!(header(compressed.headers(), "content-encoding"), Some("gzip"));
    let gzip_tag = header(compressed.headers(), "etag").unwrap().to_string();
    assert_eq!(gzip_tag, format!("{}-gzip\"", tag.trim_end_matches('"')), "a strong tag per representation");
    let asked = get(&client, &world, "/v1/studies", &[gzip[0], ("if-none-match", &tag)]).await;
    assert_eq!(asked.status(), 200, "the identity tag does not validate the gzip representation");
    let asked = get(&client, &world, "/v1/studies", &[gzip[0], ("if-none-match", &gzip_tag)]).await;
    assert_eq!(asked.status(), 304);
    assert_eq!(header(asked.headers(), "etag"), Some(gzip_tag.as_str()));
    assert_eq!(header(asked.headers(), "content-encoding"), None);
    assert!(header(asked.headers(), "vary").is_some_and(|vary| vary.eq_ignore_ascii_case("accept-encoding")));
    assert!(asked.bytes().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_study_has_a_new_etag_and_is_sent_again() {
    let mut world = World::start(&fixture::dataset()).await;
    let client = identity();
    let tag = header(get(&client, &world, "/v1/studies/s_a", &[]).await.headers(), "etag").unwrap().to_string();
    let list = header(get(&client, &world, "/v1/studies", &[]).await.headers(), "etag").unwrap().to_string();
    let retitled = json!({"internalTitle": "A new title"});
    world.publish(&[event(Topic::Study, ACME, "s_a", 4, "study.retitled", "2026-04-01T00:00:00Z", retitled)]).await;
    let changed = eventually(Duration::from_secs(10), "the retitled study", || async {
        let response = get(&client, &world, "/v1/studies/s_a", &[("if-none-match", &tag)]).await;
        (response.status() == 200).then_some(response)
    })
    .await;
    assert_ne!(header(changed.headers(), "etag"), Some(tag.as_str()));
    assert_eq!(changed.json::<serde_json::Value>().await.unwrap()["internalTitle"], "A new title");
    let listed = get(&client, &world, "/v1/studies", &[("if-none-match", &list)]).await;
    assert_eq!(listed.status(), 200, "the list changed with it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interviews_route_has_no_etag() {
    let world = World::start(&fixture::dataset()).await;
    let client = identity();
    for path in ["/v1/interviews/i1", "/v1/studies/s_b/interviews"] {
        let response = get(&client, &world, path, &[("if-none-match", "*")]).await;
        assert_eq!(response.status(), 200, "{path}: its video links are fresh on every request");
        assert_eq!(header(response.headers(), "etag"), None, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_middle_page_links_to_first_prev_next_and_last() {
    let world = World::start(&fixture::dataset()).await;
    let client = identity();
    let middle = get(&client, &world, "/v1/studies?page=2&pageSize=1", &[]).await;
    assert_eq!(
        header(middle.headers(), "link"),
        Some(
            "</v1/studies?page=1&pageSize=1>; rel=\"first\", </v1/studies?page=1&pageSize=1>; rel=\"prev\", \
             </v1/studies?page=3&pageSize=1>; rel=\"next\", </v1/studies?page=3&pageSize=1>; rel=\"last\""
        )
    );
    let interviews = get(&client, &world, "/v1/studies/s_b/interviews?pageSize=1&page=2&lang=en", &[]).await;
    assert_eq!(
        header(interviews.headers(), "link"),
        Some(
            "</v1/studies/s_b/interviews?page=1&pageSize=1&lang=en>; rel=\"first\", \
             </v1/studies/s_b/interviews?page=1&pageSize=1&lang=en>; rel=\"prev\", \
             </v1/studies/s_b/interviews?page=3&pageSize=1&lang=en>; rel=\"next\", \
             </v1/studies/s_b/interviews?page=3&pageSize=1&lang=en>; rel=\"last\""
        ),
        "the other parameters are kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_page_has_no_prev_the_last_no_next_and_an_empty_list_ends_on_page_one() {
    let world = World::start(&fixture::dataset()).await;
    let client = identity();
    let first = get(&client, &world, "/v1/studies", &[]).await;
    assert_eq!(
        header(first.headers(), "link"),
        Some("</v1/studies?page=1&pageSize=20>; rel=\"first\", </v1/studies?page=1&pageSize=20>; rel=\"last\""),
        "one page of three, at the default page size"
    );
    let last = get(&client, &world, "/v1/studies/s_b/interviews?page=2&pageSize=2", &[]).await;
    let links = header(last.headers(), "link").unwrap();
    assert!(links.contains("page=1&pageSize=2>; rel=\"prev\"") && !links.contains("rel=\"next\""), "{links}");
    let empty = get(&client, &world, "/v1/studies/s_a/interviews", &[]).await;
    assert_eq!(empty.status(), 200);
    assert_eq!(
        header(empty.headers(), "link"),
        Some(
            "</v1/studies/s_a/interviews?page=1&pageSize=20>; rel=\"first\", \
             </v1/studies/s_a/interviews?page=1&pageSize=20>; rel=\"last\""
        )
    );
    let missing = get(&client, &world, "/v1/studies/nope/interviews", &[]).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(header(missing.headers(), "link"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_headers_count_down_and_are_absent_when_the_limit_is_off() {
    let world = World::start(&fixture::dataset()).await;
    let mut limited = config(&world.prefix, &env("REDIS_URL"));
    (limited.rate_limit_per_second, limited.rate_limit_burst) = (1, 3);
    let app = spawn_serving_app(limited).await;
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
