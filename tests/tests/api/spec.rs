//! Every rule of api.md, end to end: events published to the broker, the projector running, the API
//! answering over HTTP.

use end_to_end::api::World;
use end_to_end::fixture::{self, key, key_deleted, ACME_KEY, ACME_OLD_KEY, GLOBEX_KEY};
use serde_json::{json, Value};

fn ids(body: &Value) -> Vec<&str> {
    body["items"].as_array().expect("items").iter().map(|i| i["id"].as_str().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studies_are_completed_ones_newest_completion_first_with_ties_by_id_descending() {
    let world = World::start(&fixture::dataset()).await;
    let (status, body) = world.app.json("/v1/studies", ACME_KEY).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&body), ["s_c", "s_b", "s_a"], "drafts, in-progress, reopened and deleted studies are not listed");
    assert_eq!(body["pagination"], json!({"total": 3, "page": 1, "pageSize": 20}));
    assert_eq!(
        body["items"][1],
        json!({"id": "s_b", "internalTitle": "Title of s_b", "completedOn": "2026-03-02",
            "createdAt": "2026-02-01T09:00:00Z", "updatedAt": "2026-03-05T11:00:00.250Z"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_study_has_no_completed_on_and_is_404_unless_completed() {
    let world = World::start(&fixture::dataset()).await;
    let (status, body) = world.app.json("/v1/studies/s_a", ACME_KEY).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"id": "s_a", "internalTitle": "Title of s_a", "createdAt": "2026-02-01T09:00:00Z",
            "updatedAt": "2026-03-05T11:00:00.250Z"})
    );
    for id in ["s_draft", "s_prog", "s_reopened", "s_deleted", "nope", "g1"] {
        let (status, body) = world.app.json(&format!("/v1/studies/{id}"), ACME_KEY).await;
        assert_eq!(status, 404, "{id}");
        assert!(body["error"].is_string(), "{id}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interviews_are_completed_visible_ones_newest_first_with_ties_by_id_descending() {
    let world = World::start(&fixture::dataset()).await;
    let (status, body) = world.app.json("/v1/studies/s_b/interviews", ACME_KEY).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&body), ["i4", "i2", "i1"], "hidden, deleted and incomplete ones are not listed; unhidden is");
    assert_eq!(body["pagination"], json!({"total": 3, "page": 1, "pageSize": 20}));
    for id in ["i3", "i5", "i6"] {
        assert_eq!(world.app.json(&format!("/v1/interviews/{id}"), ACME_KEY).await.0, 404, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interview_has_exactly_the_fields_of_the_spec() {
    let world = World::start(&fixture::dataset()).await;
    let (status, body) = world.app.json("/v1/interviews/i1", ACME_KEY).await;
    assert_eq!(status, 200);
    let fields: Vec<&String> = body.as_object().unwrap().keys().collect();
    let expected = ["id", "participant", "facets", "videoDownloadURL", "transcriptAsWebVTT", "createdAt", "updatedAt"];
    assert_eq!(fields.len(), expected.len(), "{body}");
    assert!(expected.iter().all(|f| body.get(*f).is_some()), "{body}");
    assert_eq!(body["participant"], json!({"id": "p1", "name": "Ólafur J."}));
    assert_eq!(
        body["facets"],
        json!([{"label": "Sentiment", "values": ["positive"]}, {"label": "Topics", "values": []}])
    );
    assert_eq!(body["videoDownloadURL"], Value::Null, "no stored video");
    assert_eq!(body["createdAt"], "2026-03-01T10:00:00Z");
    assert_eq!(body["updatedAt"], "2026-03-01T11:00:00Z");
    let transcript = body["transcriptAsWebVTT"].as_str().unwrap();
    assert!(!transcript.contains("What did you think"), "interviewer questions are not in the transcript");
    assert!(!transcript.contains("Poisson"), "the original text, not the translation");

    let (_, plain) = world.app.json("/v1/interviews/i2", ACME_KEY).await;
    assert_eq!(plain["participant"], Value::Null);
    assert_eq!(plain["facets"], json!([]));
    assert_eq!(plain["transcriptAsWebVTT"], Value::Null, "no participant message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_interview_is_served_by_id_but_a_study_that_is_not_completed_lists_nothing() {
    let world = World::start(&fixture::dataset()).await;
    let (status, body) = world.app.json("/v1/interviews/i_orphan", ACME_KEY).await;
    assert_eq!((status, body["id"].as_str()), (200, Some("i_orphan")));
    for study in ["s_prog", "s_draft", "s_deleted", "nope"] {
        let (status, body) = world.app.json(&format!("/v1/studies/{study}/interviews"), ACME_KEY).await;
        assert_eq!(status, 404, "{study}");
        assert!(body["error"].is_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_records_are_404_never_403() {
    let world = World::start(&fixture::dataset()).await;
    for path in ["/v1/studies/g1", "/v1/studies/g1/interviews", "/v1/interviews/gi1"] {
        assert_eq!(world.app.json(path, ACME_KEY).await.0, 404, "{path}");
        assert_eq!(world.app.json(path, GLOBEX_KEY).await.0, 200, "{path}");
    }
    for path in ["/v1/studies/s_a", "/v1/studies/s_b/interviews", "/v1/interviews/i1"] {
        assert_eq!(world.app.json(path, GLOBEX_KEY).await.0, 404, "{path}");
    }
    let (_, body) = world.app.json("/v1/studies", GLOBEX_KEY).await;
    assert_eq!(ids(&body), ["g1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invalid_pagination_value_is_400_with_a_json_string_body() {
    let world = World::start(&fixture::dataset()).await;
    let invalid = [
        "page=0",
        "page=-1",
        "page=",
        "page=abc",
        "page=1.5",
        "page=1e2",
        "page=%2B1",
        "page=99999999999999999999999999",
        "pageSize=0",
        "pageSize=101",
        "pageSize=",
        "pageSize=ten",
        "pageSize=20.0",
        "pageSize=-5",
        "pageSize=18446744073709551617",
        "page=1&page=2",
    ];
    for path in ["/v1/studies", "/v1/studies/s_b/interviews"] {
        for query in invalid {
            let (status, body) = world.app.json(&format!("{path}?{query}"), ACME_KEY).await;
            assert_eq!(status, 400, "{path}?{query}");
            assert!(body.is_string(), "{path}?{query}: {body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_past_the_end_is_empty_with_the_real_total() {
    let world = World::start(&fixture::dataset()).await;
    let (status, body) = world.app.json("/v1/studies?page=5&pageSize=2", ACME_KEY).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"items": [], "pagination": {"total": 3, "page": 5, "pageSize": 2}}));
    let (_, body) = world.app.json("/v1/studies/s_b/interviews?page=2&pageSize=100", ACME_KEY).await;
    assert_eq!(body["pagination"]["total"], 3);
    assert_eq!(body["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_paging_by_the_stopping_rule_and_deduping_by_id_gets_every_record_once() {
    let mut messages = Vec::new();
    for n in 0..47 {
        let completed_at = format!("2026-04-{:02}T10:00:00Z", 1 + n % 9);
        messages.extend(fixture::completed_study("org_big", &format!("s{n:03}"), &completed_at).messages);
    }
    messages.extend(key("org_big", "k", "big-key-000000001").messages);
    let world = World::start(&messages).await;
    let mut seen = Vec::new();
    let mut page = 1;
    loop {
        let (status, body) = world.app.json(&format!("/v1/studies?page={page}&pageSize=7"), "big-key-000000001").await;
        assert_eq!(status, 200);
        let items = ids(&body);
        let total = body["pagination"]["total"].as_u64().unwrap();
        seen.extend(items.iter().map(|s| s.to_string()));
        if items.is_empty() || page * 7 >= total {
            break;
        }
        page += 1;
    }
    assert_eq!(page, 7);
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 47);
    assert_eq!(seen.len(), 47, "no page repeated a record while nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_takes_precedence_over_service_api_key() {
    let world = World::start(&fixture::dataset()).await;
    let get = |bearer: &'static str, service: &'static str| {
        let request = world.app.client.get(format!("{}/v1/studies", world.app.address));
        request.bearer_auth(bearer).header("Service-Api-Key", service).send()
    };
    let globex = get(GLOBEX_KEY, ACME_KEY).await.unwrap().json::<Value>().await.unwrap();
    assert_eq!(ids(&globex), ["g1"], "the Bearer key decides the organization");
    assert_eq!(get("wrong-key-123", ACME_KEY).await.unwrap().status(), 401, "an invalid Bearer is not rescued");
    let service_only =
        world.app.client.get(format!("{}/v1/studies", world.app.address)).header("Service-Api-Key", ACME_KEY);
    let body = service_only.send().await.unwrap().json::<Value>().await.unwrap();
    assert_eq!(ids(&body), ["s_c", "s_b", "s_a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_malformed_unknown_and_revoked_keys_are_401_with_an_error_object() {
    let world = World::start(&fixture::dataset()).await;
    let url = format!("{}/v1/studies", world.app.address);
    let client = &world.app.client;
    let requests = [
        client.get(&url),
        client.get(&url).bearer_auth(ACME_OLD_KEY),
        client.get(&url).bearer_auth("not-a-key-at-all"),
        client.get(&url).header("Authorization", format!("Basic {ACME_KEY}")),
        client.get(&url).header("Authorization", ACME_KEY),
        client.get(&url).header("Authorization", "Bearer has spaces in it"),
        client.get(&url).header("Service-Api-Key", ""),
        client.get(&url).header("Service-Api-Key", "x".repeat(600)),
    ];
    for (n, request) in requests.into_iter().enumerate() {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "request {n}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"].is_string(), "request {n}: {body}");
    }
    for path in ["/v1/studies/s_a", "/v1/studies/s_b/interviews?page=0", "/v1/interviews/i1"] {
        assert_eq!(world.app.get(path, None).await.status(), 401, "authentication comes first: {path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_and_its_replacement_both_work_until_the_old_one_is_deleted() {
    let rotation = key("org_rot", "old", "rotation-old-key-1").messages;
    let mut world =
        World::start(&[rotation, fixture::completed_study("org_rot", "s", "2026-03-01T00:00:00Z").messages].concat())
            .await;
    assert_eq!(world.app.json("/v1/studies", "rotation-old-key-1").await.0, 200);
    world.publish(&key("org_rot", "new", "rotation-new-key-2").messages).await;
    assert_eq!(world.app.json("/v1/studies", "rotation-old-key-1").await.0, 200, "both valid during rotation");
    assert_eq!(world.app.json("/v1/studies", "rotation-new-key-2").await.0, 200);
    world.publish(&[key_deleted("org_rot", "old", 2)]).await;
    // Once projected, the deletion is in force within a second (keys kept in memory are dropped by then).
    world.app.refused_within_a_second("rotation-old-key-1").await;
    assert_eq!(world.app.json("/v1/studies", "rotation-new-key-2").await.0, 200);
}
