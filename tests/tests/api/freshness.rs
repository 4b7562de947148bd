//! Every data response says how fresh its own organization is (the `occurredAt` of the latest event applied
//! to it) and whether the projectors are caught up; `/readyz` says the same of the whole read model.

use std::time::Duration;

use chrono::{DateTime, Utc};
use end_to_end::api::World;
use end_to_end::eventually;
use end_to_end::fixture::{self, ACME, ACME_KEY, GLOBEX, GLOBEX_KEY};
use serde_json::json;

/// The latest `occurredAt` among `messages` (of `org`'s studies and interviews only, when given: its API
/// keys' events change no data of it).
fn latest(messages: &[end_to_end::events::Outgoing], org: Option<&str>) -> DateTime<Utc> {
    messages
        .iter()
        .filter_map(|m| serde_json::from_slice::<serde_json::Value>(&m.value).ok())
        .filter(|v| {
            org.is_none_or(|org| v["organizationId"] == org && !v["type"].as_str().unwrap().starts_with("api_key"))
        })
        .filter_map(|v| v["occurredAt"].as_str()?.parse::<DateTime<Utc>>().ok())
        .max()
        .expect("events with occurredAt")
}

/// A new study of `org`, created at `at`.
fn created(org: &str, id: &str, at: &str) -> end_to_end::events::Outgoing {
    let data = json!({"internalTitle": id});
    end_to_end::events::event(shared::Topic::Study, org, id, 1, "study.created", at, data)
}

/// The freshness headers of a data response with `key`, once they say the projector caught up with `at`.
async fn caught_up_with(world: &World, key: &str, at: DateTime<Utc>) -> String {
    eventually(Duration::from_secs(10), "the freshness headers to catch up", || async {
        let response = world.app.get("/v1/studies", Some(key)).await;
        assert_eq!(response.status(), 200);
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_string());
        let as_of = header("x-read-model-as-of")?;
        let caught_up = header("x-read-model-caught-up")?;
        (caught_up == "true" && as_of.parse::<DateTime<Utc>>().ok()? == at).then_some(as_of)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_responses_say_their_organizations_latest_event_and_readiness_the_read_models() {
    // A study whose id is a word of the API's own pages: its routes are data like any other.
    let docs = fixture::completed_study(ACME, "docs", "2026-02-01T00:00:00Z").messages;
    let messages = [fixture::dataset(), docs].concat();
    let mut world = World::start(&messages).await;
    let (acme, globex) = (latest(&messages, Some(ACME)), latest(&messages, Some(GLOBEX)));
    assert_ne!(acme, globex, "the fixture's organizations have different latest events");
    let acme_as_of = caught_up_with(&world, ACME_KEY, acme).await;
    let globex_as_of = caught_up_with(&world, GLOBEX_KEY, globex).await;
    // The same on every data route, from memory or not.
    let paths = ["/v1/studies/s_b", "/v1/studies/s_b/interviews", "/v1/interviews/i1", "/v1/studies"];
    for path in paths.into_iter().chain(["/v1/studies/docs", "/v1/studies/docs/interviews"]) {
        let response = world.app.get(path, Some(ACME_KEY)).await;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["x-read-model-as-of"], acme_as_of.as_str(), "{path}");
    }

    // Readiness says the read model's latest event, whichever organization it was of.
    let whole = latest(&messages, None);
    eventually(Duration::from_secs(10), "readiness to say the latest event of the read model", || async {
        let ready: serde_json::Value = world.app.admin_get("/readyz").await.json().await.unwrap();
        let at = ready["latestEvent"].as_str()?.parse::<DateTime<Utc>>().ok()?;
        (at == whole && ready["caughtUp"] == json!(true)).then_some(())
    })
    .await;
    // Not on what is not data.
    for page in ["/v1/openapi.json", "/v1/docs", "/v1/docs/redoc.standalone.js"] {
        let response = world.app.get(page, None).await;
        assert_eq!(response.status(), 200, "{page}");
        assert!(response.headers().get("x-read-model-as-of").is_none(), "{page}");
    }

    // A later event of one organization moves its own freshness forward, and no other's.
    let later = [created(ACME, "s_later", "2027-01-01T00:00:00Z")];
    world.publish(&later).await;
    let moved = caught_up_with(&world, ACME_KEY, latest(&later, None)).await;
    assert!(moved > acme_as_of, "{moved} after {acme_as_of}");
    assert_eq!(caught_up_with(&world, GLOBEX_KEY, globex).await, globex_as_of);
    // An event older than what the organization holds (another aggregate's, arriving late) moves nothing
    // back.
    let older = [created(ACME, "s_older", "2020-01-01T00:00:00Z")];
    world.publish(&older).await;
    assert_eq!(caught_up_with(&world, ACME_KEY, latest(&later, None)).await, moved);
}
