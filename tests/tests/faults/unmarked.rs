//! A loss found while the projector may not write where it marks one (its Redis user lost the right to
//! write the generation's healing state): it cannot mark the loss yet, and applies no batch meanwhile.
//! An event applied onto a flushed aggregate would record the events the flush took as a gap, too late
//! to be applied once read again: the read model would stay short for good.

use std::time::{Duration, Instant};

use end_to_end::faults::{reference_of, Healing, CONVERGENCE};
use end_to_end::kafka::{self, Topics};
use end_to_end::metrics::sample;
use end_to_end::own_redis::{OwnCluster, OwnRedis, Persistence};
use end_to_end::runner::Running;
use end_to_end::scenario::Scenario;
use shared::Topic;

use super::cluster::{organizations_on, prefix_sparing_a_primary};

/// How long the projector is watched not applying the events while its loss is unmarked.
const WATCHED: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_events_arriving_while_a_loss_cannot_be_marked_wait_and_the_read_model_ends_whole() {
    let cluster = OwnCluster::start(Persistence::Snapshots).await;
    let (prefix, flushed) = prefix_sparing_a_primary(&cluster);
    let scenario = Scenario::generate(0x5eed_1116, 9, 8, 4);
    let (waiting, _) = organizations_on(&cluster, &prefix, flushed, &scenario);
    let topics = Topics::holding(&scenario.messages).await;
    let acl = |keys: &[&str]| {
        for node in &cluster.nodes {
            let user = [&["ACL", "SETUSER", "marker", "on", ">marker-password", "resetkeys", "&*", "+@all"], keys];
            assert_eq!(node.cli(&user.concat()), "OK");
        }
    };
    acl(&["~*"]);
    let projector_urls = cluster.urls().replace("redis://", "redis://marker:marker-password@");
    let mut world = Healing::start_configured(&prefix, &topics, &cluster.urls(), true, |projector| {
        projector.redis.url = projector_urls.into();
    })
    .await;
    let initial = scenario.messages.len() as u64;
    world.wait_ready(initial, Duration::from_secs(60)).await;
    let before = world.projector.consumed();

    // The projector may read everything and write its positions and the organizations' keys, but not
    // the generation's healing state or meta. A primary is flushed, and its organizations get events.
    let data = format!("~{prefix}:g1:{{*");
    acl(&["%R~*", &data]);
    assert_eq!(cluster.nodes[flushed].cli(&["FLUSHALL"]), "OK");
    let retitles = retitles_of(&scenario, &waiting);
    kafka::publish(&kafka::producer(), &topics, &retitles).await;
    let unmarked = |running: &Running| sample(&running.metrics_text(), "projector_redis_loss_unmarked", &[]);
    end_to_end::eventually(Duration::from_secs(10), "the loss found and not marked", || async {
        (unmarked(&world.projector) == 1.0).then_some(())
    })
    .await;
    // Meanwhile nothing is applied, and the projector waits for its next look to mark the loss again: it
    // does not ask the flushed primary about its positions before batch after batch it may not write.
    let (scripts, watched) = (scripts_run(&cluster.nodes[flushed]), Instant::now() + WATCHED);
    while Instant::now() < watched {
        assert_eq!(world.projector.consumed(), before, "nothing applied while the loss is unmarked");
        assert_eq!(unmarked(&world.projector), 1.0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let asked = scripts_run(&cluster.nodes[flushed]) - scripts;
    let looks = WATCHED.as_millis() / 250 + 1;
    println!("{asked} scripts run on the flushed primary in {WATCHED:?}, {looks} looks");
    assert!(asked <= 2 * looks as u64, "{asked} scripts in {WATCHED:?}: more than the looks ask");

    acl(&["~*"]);
    world.wait_detected(Duration::from_secs(10)).await;
    let total = initial + retitles.len() as u64;
    let expected = reference_of(&topics, total).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_eq!(unmarked(&world.projector), 0.0);
    let gaps = sample(&world.projector.metrics_text(), "projector_events_total", &["outcome=\"gap\""]);
    assert_eq!(gaps, 0.0, "no event was applied onto the loss, past the events it lost");
}

/// Scripts a node ran so far (`EVAL` and `EVALSHA` calls).
fn scripts_run(node: &OwnRedis) -> u64 {
    node.calls("eval") + node.calls("evalsha")
}

/// One `study.retitled` for each study of the organizations `orgs`, with its study's next sequence.
fn retitles_of(scenario: &Scenario, orgs: &[String]) -> Vec<end_to_end::events::Outgoing> {
    let mut last: std::collections::BTreeMap<String, (String, u64)> = Default::default();
    for message in scenario.messages.iter().filter(|m| m.topic == Topic::Study) {
        let event: serde_json::Value = serde_json::from_slice(&message.value).expect("an event");
        let org = event["organizationId"].as_str().unwrap_or_default();
        if orgs.iter().any(|o| o == org) {
            let entry = last.entry(message.key.clone()).or_insert((org.to_string(), 0));
            entry.1 = entry.1.max(event["sequence"].as_u64().unwrap_or(0));
        }
    }
    assert!(!last.is_empty(), "the flushed primary's organizations have studies");
    let title = |n: u64| serde_json::json!({"internalTitle": format!("Retitled {n}")});
    last.iter()
        .map(|(study, (org, seq))| {
            let at = "2026-06-01T00:00:00Z";
            end_to_end::events::event(Topic::Study, org, study, seq + 1, "study.retitled", at, title(seq + 1))
        })
        .collect()
}
