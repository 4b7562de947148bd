//! Every data response says how fresh the read model is, and `/readyz` says the same: the `occurredAt` of
//! the latest event applied and whether the projectors are caught up.

use std::time::Duration;

use chrono::{DateTime, Utc};
use end_to_end::api::World;
use end_to_end::eventually;
use end_to_end::fixture::{self, ACME_KEY};
use serde_json::json;

/// The latest `occurredAt` among `messages`.
fn latest(messages: &[end_to_end::events::Outgoing]) -> DateTime<Utc> {
    messages
        .iter()
        .filter_map(|m| serde_json::from_slice::<serde_json::Value>(&m.value).ok())
        .filter_map(|v| v["occurredAt"].as_str()?.parse::<DateTime<Utc>>().ok())
        .max()
        .expect("events with occurredAt")
}

/// The freshness headers of a data response, once they say the projector caught up with `at`.
async fn caught_up_with(world: &World, at: DateTime<Utc>) -> String {
    eventually(Duration::from_secs(10), "the freshness headers to catch up", || async {
        let response = world.app.get("/v1/studies", Some(ACME_KEY)).await;
        assert_eq!(response.status(), 200);
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_string());
        let as_of = header("x-read-model-as-of")?;
        let caught_up = header("x-read-model-caught-up")?;
        (caught_up == "true" && as_of.parse::<DateTime<Utc>>().ok()? == at).then_some(as_of)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_responses_and_readiness_say_the_latest_event_applied_and_that_it_is_caught_up() {
    let messages = fixture::dataset();
    let mut world = World::start(&messages).await;
    let as_of = caught_up_with(&world, latest(&messages)).await;

    let ready: serde_json::Value = world.app.admin_get("/readyz").await.json().await.unwrap();
    assert_eq!(ready["latestEvent"], json!(as_of), "{ready}");
    assert_eq!(ready["caughtUp"], json!(true), "{ready}");
    // Not on what is not data.
    let definition = world.app.get("/v1/openapi.json", None).await;
    assert!(definition.headers().get("x-read-model-as-of").is_none());

    // A later event moves it forward.
    let later = [end_to_end::events::event(
        shared::Topic::Study,
        fixture::ACME,
        "s_later",
        1,
        "study.created",
        "2027-01-01T00:00:00Z",
        json!({"internalTitle": "Later"}),
    )];
    world.publish(&later).await;
    let moved = caught_up_with(&world, latest(&later)).await;
    assert!(moved > as_of, "{moved} after {as_of}");
}
