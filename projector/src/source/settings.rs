//! The Kafka client settings an operator gives: any librdkafka property, from a Java-style
//! `client.properties` file (what Confluent Cloud, MSK and Aiven hand out), from `KAFKA_PROPERTY_<NAME>`
//! variables, and from repeated `--kafka-property key=value` flags, in that order of precedence (a later
//! one wins). The properties the projector's correctness depends on are its own and refused here. Values
//! are never logged: they hold passwords and tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rdkafka::ClientConfig;

use super::auth::{Auth, KafkaAuth, MskIam};

/// Properties the projector sets itself; an operator's value would break what it promises.
const OWNED: &[(&str, &str)] = &[
    ("group.id", "set PROJECTOR_GROUP_ID instead"),
    ("enable.auto.commit", "offsets are committed only once Redis holds what they cover"),
    ("enable.auto.offset.store", "offsets are stored only once Redis holds what they cover"),
    ("enable.partition.eof", "the projector decides where it needs to know a partition's end"),
    ("isolation.level", "only committed messages may be projected"),
];

/// Properties of the Java client that librdkafka does not know and that need no counterpart: left
/// out, with their names logged.
const JAVA_ONLY: &[&str] = &[
    "client.dns.lookup",
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
    "key.serializer",
    "value.serializer",
    "key.deserializer",
    "value.deserializer",
    "schema.registry.url",
    "basic.auth.credentials.source",
    "basic.auth.user.info",
];

/// Java keystores librdkafka cannot read, with what to give instead.
const JAVA_STORES: &[(&str, &str)] = &[
    ("ssl.truststore.location", "ssl.ca.location (a PEM file)"),
    ("ssl.keystore.location", "ssl.certificate.location and ssl.key.location (PEM files)"),
];

/// Where the operator's Kafka properties come from. Its `Debug` names the properties given by flag and
/// hides their values (passwords among them).
#[derive(Clone, Default, clap::Args)]
pub struct KafkaOptions {
    /// A Java-style client.properties file of Kafka client properties (key=value lines; # and ! start
    /// comments), applied to every consumer and producer. `sasl.jaas.config` with a username and password
    /// becomes sasl.username and sasl.password; Java-only properties are left out.
    #[arg(global = true, long, env = "KAFKA_PROPERTIES_FILE")]
    pub kafka_properties_file: Option<PathBuf>,

    /// One librdkafka property, key=value; repeatable, and wins over the file. Each environment variable
    /// KAFKA_PROPERTY_<NAME> sets one too, its name with dots as underscores (KAFKA_PROPERTY_SASL_MECHANISM).
    #[arg(global = true, long = "kafka-property", value_name = "KEY=VALUE", value_parser = parse_pair, hide_env_values = true)]
    pub kafka_property: Vec<(String, String)>,

    /// How the Kafka clients authenticate: `properties` (as the Kafka properties say: none, PLAIN, SCRAM,
    /// OAUTHBEARER with sasl.oauthbearer.method=oidc) or `aws-msk-iam` (MSK and MSK Serverless: SASL
    /// OAUTHBEARER over TLS with tokens signed by IAM credentials from the AWS SDK's default chain, such as
    /// IRSA or an instance role, renewed before they expire). A client.properties file of AWS's Java
    /// client (sasl.mechanism=AWS_MSK_IAM, or its IAM login module) selects `aws-msk-iam` too.
    #[arg(global = true, long, env = "KAFKA_AUTH", value_enum, default_value_t = KafkaAuth::Properties)]
    pub kafka_auth: KafkaAuth,

    /// The AWS region of the MSK cluster, for `aws-msk-iam`; by default the AWS SDK's (AWS_REGION, the
    /// profile's, the instance's).
    #[arg(global = true, long, env = "KAFKA_AWS_REGION")]
    pub kafka_aws_region: Option<String>,
}

impl std::fmt::Debug for KafkaOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden: Vec<String> = self.kafka_property.iter().map(|(key, _)| format!("{key}=***")).collect();
        f.debug_struct("KafkaOptions")
            .field("kafka_properties_file", &self.kafka_properties_file)
            .field("kafka_property", &hidden)
            .field("kafka_auth", &self.kafka_auth)
            .field("kafka_aws_region", &self.kafka_aws_region)
            .finish()
    }
}

/// The operator's properties, merged and checked, and the MSK IAM token maker when selected; applied
/// to every client the projector creates.
#[derive(Clone, Default)]
pub struct Properties {
    values: BTreeMap<String, String>,
    iam: Option<Arc<MskIam>>,
}

impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Properties").field("names", &self.names()).field("iam", &self.iam).finish()
    }
}

/// The Java client's MSK IAM mechanism, and the package of its login module and callback handlers.
const JAVA_MSK_IAM: (&str, &str) = ("AWS_MSK_IAM", "software.amazon.msk.auth.iam.");

impl Properties {
    /// Reads the file, the environment and the flags. `env` is the process environment.
    pub fn load(options: &KafkaOptions, env: impl IntoIterator<Item = (String, String)>) -> Result<Self, String> {
        let mut all = BTreeMap::new();
        if let Some(path) = &options.kafka_properties_file {
            all.extend(read_file(path)?);
        }
        all.extend(from_env(env));
        all.extend(options.kafka_property.iter().cloned());
        let mut properties = BTreeMap::new();
        let mut iam_asked = options.kafka_auth == KafkaAuth::AwsMskIam;
        for (key, value) in all {
            if let Some((_, why)) = OWNED.iter().find(|(k, _)| *k == key) {
                return Err(format!("the Kafka property {key} cannot be set: {why}"));
            }
            // AWS's client.properties for MSK IAM names its login module and callback handlers.
            if value.contains(JAVA_MSK_IAM.1) || (key.starts_with("sasl.mechanism") && value == JAVA_MSK_IAM.0) {
                iam_asked = true;
                continue;
            }
            if let Some((_, instead)) = JAVA_STORES.iter().find(|(k, _)| *k == key) {
                return Err(format!("{key} is a Java keystore, which librdkafka cannot read: give {instead}"));
            }
            if JAVA_ONLY.contains(&key.as_str()) {
                tracing::info!(property = %key, "left out a Kafka property only the Java client knows");
                continue;
            }
            if key == "sasl.jaas.config" && value.contains("OAuthBearerLoginModule") {
                // The Java client's OAUTHBEARER login: its token comes from a callback handler.
                tracing::info!("left out the Java client's OAUTHBEARER login module");
                continue;
            }
            if key == "sasl.jaas.config" {
                let (username, password) = jaas_credentials(&value).ok_or_else(|| {
                    "sasl.jaas.config holds no username and password: give sasl.username and sasl.password".to_string()
                })?;
                properties.entry("sasl.username".into()).or_insert(username);
                properties.entry("sasl.password".into()).or_insert(password);
                continue;
            }
            properties.insert(key, value);
        }
        let iam = iam_asked.then(|| msk_iam(&mut properties, options.kafka_aws_region.clone())).transpose()?;
        Ok(Self { values: properties, iam })
    }

    /// The context of a client with these properties.
    pub fn auth(&self) -> Auth {
        Auth(self.iam.clone())
    }

    /// The properties as given, and the token maker (tests).
    #[cfg(test)]
    pub fn with_iam(mut self, iam: Arc<MskIam>) -> Self {
        self.iam = Some(iam);
        self
    }

    /// The brokers to bootstrap from: `bootstrap.servers` of the properties, unless given by flag.
    pub fn brokers(&self, flag: Option<&str>) -> String {
        flag.map(str::to_string)
            .or_else(|| self.values.get("bootstrap.servers").cloned())
            .unwrap_or_else(|| "127.0.0.1:9092".to_string())
    }

    /// Sets every property on a client's settings.
    pub fn apply(&self, settings: &mut ClientConfig) {
        for (key, value) in &self.values {
            if key != "bootstrap.servers" {
                settings.set(key, value);
            }
        }
    }

    /// The names of the properties set (never their values).
    pub fn names(&self) -> Vec<&str> {
        self.values.keys().map(String::as_str).collect()
    }
}

/// MSK IAM over the properties: SASL OAUTHBEARER (the Java client's `AWS_MSK_IAM` is the same thing
/// there) over TLS unless a property says otherwise. A mechanism or token source of another kind is
/// refused: the two would fight over the login.
fn msk_iam(properties: &mut BTreeMap<String, String>, region: Option<String>) -> Result<Arc<MskIam>, String> {
    for key in ["sasl.mechanism", "sasl.mechanisms"] {
        match properties.get(key).map(String::as_str) {
            Some(m) if m.eq_ignore_ascii_case(JAVA_MSK_IAM.0) || m.eq_ignore_ascii_case("OAUTHBEARER") => {}
            Some(m) => return Err(format!("MSK IAM authenticates with OAUTHBEARER, but {key} is {m}")),
            None => {}
        }
    }
    let other = |key: &str, value: &str| properties.get(key).is_some_and(|v| v.eq_ignore_ascii_case(value));
    for (key, value) in [("sasl.oauthbearer.method", "oidc"), ("enable.sasl.oauthbearer.unsecure.jwt", "true")] {
        if other(key, value) {
            return Err(format!("{key}={value} makes OAUTHBEARER tokens of another kind: leave it out with MSK IAM"));
        }
    }
    properties.remove("sasl.mechanisms");
    properties.insert("sasl.mechanism".into(), "OAUTHBEARER".into());
    properties.entry("security.protocol".into()).or_insert_with(|| "SASL_SSL".into());
    Ok(MskIam::new(region))
}

fn parse_pair(pair: &str) -> Result<(String, String), String> {
    let (key, value) = pair.split_once('=').ok_or("expected key=value")?;
    let key = key.trim();
    if key.is_empty() {
        return Err("expected key=value, with a key".into());
    }
    Ok((key.to_string(), value.trim().to_string()))
}

/// A Java properties file as Kafka's tools write them: `key=value` (or `key: value`) per line, comments
/// after `#` or `!`, a trailing backslash continuing a line.
fn read_file(path: &Path) -> Result<Vec<(String, String)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read KAFKA_PROPERTIES_FILE {}: {e}", path.display()))?;
    parse_properties(&text).map_err(|line| format!("{}:{line}: expected key=value", path.display()))
}

fn parse_properties(text: &str) -> Result<Vec<(String, String)>, usize> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut first_line = 0;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if pending.is_empty() {
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            first_line = number + 1;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                continue;
            }
            None => pending.push_str(line),
        }
        let entry = std::mem::take(&mut pending);
        let at = entry.find(['=', ':']).ok_or(first_line)?;
        let (key, value) = (entry[..at].trim(), entry[at + 1..].trim());
        if key.is_empty() {
            return Err(first_line);
        }
        out.push((key.to_string(), value.to_string()));
    }
    Ok(out)
}

/// `KAFKA_PROPERTY_SASL_MECHANISM=PLAIN` is `sasl.mechanism=PLAIN`.
fn from_env(env: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    env.into_iter()
        .filter_map(|(name, value)| {
            let rest = name.strip_prefix("KAFKA_PROPERTY_")?;
            (!rest.is_empty()).then(|| (rest.to_ascii_lowercase().replace('_', "."), value))
        })
        .collect()
}

/// The username and password of a JAAS line such as Confluent Cloud's
/// `org.apache.kafka.common.security.plain.PlainLoginModule required username='K' password='S';`.
fn jaas_credentials(jaas: &str) -> Option<(String, String)> {
    let field = |name: &str| {
        let start = jaas.find(&format!("{name}="))? + name.len() + 1;
        let rest = &jaas[start..];
        let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let end = rest[1..].find(quote)?;
        Some(rest[1..=end].to_string())
    };
    Some((field("username")?, field("password")?))
}

/// The features librdkafka was built with (`builtin.features`), e.g. `ssl,sasl_plain,zstd`.
pub fn builtin_features() -> String {
    ClientConfig::new().create_native_config().and_then(|native| native.get("builtin.features")).unwrap_or_default()
}

/// What a client of the projector needs librdkafka to have been built with.
pub const NEEDED_FEATURES: &[&str] = &["ssl", "sasl_plain", "sasl_scram", "sasl_oauthbearer", "oidc", "zstd"];

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
