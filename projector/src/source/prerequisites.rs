//! What the projector checks with the brokers before it starts: that librdkafka can speak what the
//! operator configured, that the brokers answer (with librdkafka's own reason when they do not: a CA that
//! does not verify, a refused login), and that every source and dead-letter topic exists. Without this a
//! missing dead-letter topic stalls its partition at the first poison message, and a wrong CA only shows
//! as retries in the log.

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;
use shared::Topic;

use super::auth::Auth;
use super::consumer::authenticated;
use super::dead_letter::dead_letter_topic;
use super::settings::{builtin_features, NEEDED_FEATURES};
use crate::config::Config;
use crate::Error;

/// How long the brokers have to answer the first metadata request.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// A client context that keeps librdkafka's last error, for a start that fails to say why.
struct LastError(Mutex<Option<String>>, Auth);

impl ClientContext for LastError {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _config: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        self.1.oauth_token()
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        tracing::debug!(?level, facility, message, "librdkafka");
        if (level as i32) <= (RDKafkaLogLevel::Error as i32) {
            *self.0.lock().expect("last kafka error") = Some(message.to_string());
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "kafka client error");
        *self.0.lock().expect("last kafka error") = Some(reason.to_string());
    }
}

impl ConsumerContext for LastError {}

/// Logs librdkafka's build once, then fails with one clear reason unless the brokers answer and every
/// topic the projector reads or writes exists.
pub async fn check(config: &Config) -> Result<(), Error> {
    let features = builtin_features();
    let missing_features: Vec<&str> =
        NEEDED_FEATURES.iter().copied().filter(|f| !features.split(',').any(|have| have == *f)).collect();
    tracing::info!(
        librdkafka = rdkafka::util::get_rdkafka_version().1,
        features = %features,
        "kafka client"
    );
    if !missing_features.is_empty() {
        tracing::warn!(missing = ?missing_features, "librdkafka was built without some features");
    }
    let config = config.clone();
    tokio::task::spawn_blocking(move || topics_exist(&config))
        .await
        .map_err(|e| Error::Refused(format!("the topic check did not finish: {e}")))?
}

fn topics_exist(config: &Config) -> Result<(), Error> {
    let brokers = config.brokers();
    let mut settings = ClientConfig::new();
    config.kafka_properties().apply(&mut settings);
    let client: BaseConsumer<LastError> = settings
        .set("bootstrap.servers", &brokers)
        .set("group.id", &config.group_id)
        .create_with_context(LastError(Mutex::default(), config.kafka_properties().auth()))
        .map(authenticated)
        .map_err(|e| Error::Config(format!("kafka client settings: {e}")))?;
    let metadata = client.fetch_metadata(None, ANSWER_WITHIN).map_err(|e| {
        // librdkafka queues its logs and errors for the client's next poll.
        let _ = client.poll(Duration::from_millis(100));
        let reason = client.context().0.lock().expect("last kafka error").clone();
        Error::Refused(match reason {
            Some(reason) => format!("the Kafka brokers at {brokers} did not answer: {reason}"),
            None => format!("the Kafka brokers at {brokers} did not answer within {ANSWER_WITHIN:?}: {e}"),
        })
    })?;
    let present: Vec<&str> = metadata.topics().iter().filter(|t| t.error().is_none()).map(|t| t.name()).collect();
    let needed = Topic::ALL.into_iter().flat_map(|t| {
        let name = config.topic_name(t).to_string();
        [dead_letter_topic(&name), name]
    });
    let missing = missing_topics(needed, &present);
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Refused(format!(
        "topics missing on the Kafka brokers at {brokers}: {} (the projector reads the three event topics and \
         sets poison messages aside in <topic>.dlq; create them first, see docs/deploying.md)",
        missing.join(", ")
    )))
}

/// The names in `needed` that are not in `present`, in order.
fn missing_topics(needed: impl IntoIterator<Item = String>, present: &[&str]) -> Vec<String> {
    let mut missing: Vec<String> = needed.into_iter().filter(|n| !present.contains(&n.as_str())).collect();
    missing.sort();
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_not_on_the_brokers_is_named() {
        let needed = ["a", "a.dlq", "b", "b.dlq"].map(String::from);
        assert_eq!(missing_topics(needed.clone(), &["a", "b", "b.dlq"]), ["a.dlq"]);
        assert!(missing_topics(needed, &["b.dlq", "a.dlq", "b", "a"]).is_empty());
    }
}
