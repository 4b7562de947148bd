//! The live consumer's settings, and how its statistics read.

use super::*;

#[test]
fn a_partition_is_drained_once_fetched_to_its_end_with_nothing_queued() {
    assert!(drained(120, 0, 120), "fetched to the end, past its markers, nothing queued");
    assert!(!drained(100, 0, 120), "still being fetched: a replay behind a slow broker");
    assert!(!drained(120, 15, 120), "fetched, but messages wait in the queue");
    assert!(!drained(-1001, 0, 120), "not fetching at all");
}

/// A configuration whose Kafka properties come from `env` alone.
fn configured(env: &[(&str, &str)]) -> Config {
    use clap::Parser;
    let mut config = Config::parse_from(["projector"]);
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    config.kafka_properties = Some(crate::source::Properties::load(&config.kafka, env).unwrap());
    config
}

/// What every client starts from (the live consumer, the inspector, the end reader, the repair and
/// rebuild readers): none of them sets `fetch.wait.max.ms` of its own.
#[test]
fn every_client_waits_at_the_broker_as_librdkafka_does_unless_a_property_says_otherwise() {
    assert_eq!(settings(&configured(&[]), "g").get("fetch.wait.max.ms"), None, "librdkafka's 500 ms");
    let local = configured(&[("KAFKA_PROPERTY_FETCH_WAIT_MAX_MS", "10")]);
    assert_eq!(settings(&local, "g").get("fetch.wait.max.ms"), Some("10"), "the operator's");
}

#[test]
fn the_live_consumer_rebalances_cooperatively_unless_the_operator_or_kip_848_decides() {
    let strategy =
        |env: &[(&str, &str)]| live_settings(&configured(env)).get("partition.assignment.strategy").map(str::to_string);
    assert_eq!(strategy(&[]).as_deref(), Some("cooperative-sticky"));
    let range = [("KAFKA_PROPERTY_PARTITION_ASSIGNMENT_STRATEGY", "range")];
    assert_eq!(strategy(&range).as_deref(), Some("range"), "the operator's");
    assert_eq!(strategy(&[("KAFKA_PROPERTY_GROUP_PROTOCOL", "consumer")]), None, "the broker assigns");
}

#[test]
fn the_live_consumer_names_its_instance_unless_the_operator_named_it() {
    assert_eq!(client_id(Some("projector-7d9f-x2")), "projector-7d9f-x2");
    assert_eq!(client_id(Some(" ")), "projector");
    assert_eq!(client_id(None), "projector");
    let id = |env: &[(&str, &str)]| live_settings(&configured(env)).get("client.id").map(str::to_string);
    assert!(id(&[]).is_some_and(|id| !id.is_empty()));
    assert_eq!(id(&[("KAFKA_PROPERTY_CLIENT_ID", "mine")]).as_deref(), Some("mine"), "the operator's");
}

#[test]
fn the_live_consumer_hears_librdkafkas_warnings_whatever_the_log_filter() {
    // Tests run with the `log` crate's filter off: librdkafka's level would be errors only.
    let level = live_settings(&configured(&[])).log_level as i32;
    assert!(level >= RDKafkaLogLevel::Warning as i32, "librdkafka's log level {level}");
}
