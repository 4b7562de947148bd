//! Revocation that always revokes: a key created again with a new secret, deleted later, leaves no secret
//! it ever had valid, whatever the batching; and a secret claimed by a second key id never opens that
//! key's organization.

use end_to_end::api::World;
use end_to_end::fixture::{self, key_created, key_deleted};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_created_again_keeps_only_its_new_secret_and_deleting_it_revokes_every_secret_it_had() {
    let study = fixture::completed_study("org_re", "s", "2026-03-01T00:00:00Z").messages;
    let mut world = World::start(&[vec![key_created("org_re", "k1", 1, "recreated-secret-a")], study].concat()).await;
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-a").await.0, 200);
    // Created again in a later batch, after the first secret was indexed.
    world.publish(&[key_created("org_re", "k1", 2, "recreated-secret-b")]).await;
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-b").await.0, 200);
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-a").await.0, 401, "the replaced secret is retired");
    world.publish(&[key_deleted("org_re", "k1", 3)]).await;
    for secret in ["recreated-secret-a", "recreated-secret-b"] {
        assert_eq!(world.app.json("/v1/studies", secret).await.0, 401, "{secret} after the deletion");
    }

    // Both creations in one publish (so, as a rule, one batch), then the deletion: the same end.
    world
        .publish(&[
            key_created("org_re", "k2", 1, "recreated-secret-c"),
            key_created("org_re", "k2", 2, "recreated-secret-d"),
        ])
        .await;
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-c").await.0, 401);
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-d").await.0, 200);
    world.publish(&[key_deleted("org_re", "k2", 3)]).await;
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-d").await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_claimed_by_a_second_key_id_stays_with_the_first_and_the_claim_is_counted() {
    let studies = [
        fixture::completed_study("org_first", "s_first", "2026-03-01T00:00:00Z").messages,
        fixture::completed_study("org_second", "s_second", "2026-03-01T00:00:00Z").messages,
    ]
    .concat();
    let mut world = World::start(&[vec![key_created("org_first", "k1", 1, "shared-secret-s")], studies].concat()).await;
    world.publish(&[key_created("org_second", "k2", 1, "shared-secret-s")]).await;
    let only_first = |body: &serde_json::Value| {
        let items = body["items"].as_array().cloned().unwrap_or_default();
        items.len() == 1 && items[0]["id"] == "s_first"
    };
    let (status, body) = world.app.json("/v1/studies", "shared-secret-s").await;
    assert!(status == 200 && only_first(&body), "the secret opens only the first key's organization: {body}");
    assert_eq!(world.projector.snapshot().refused, 1, "the second claim is refused and counted");
    // Deleting the second key id leaves the first key's entry alone.
    world.publish(&[key_deleted("org_second", "k2", 2)]).await;
    let (status, body) = world.app.json("/v1/studies", "shared-secret-s").await;
    assert!(status == 200 && only_first(&body), "{body}");
}
