//! The JSON Schemas of `docs/schemas/` are the event contract as product teams can check it, so they must
//! say what the decoder does: every event the project ships (the sample data, the streams the scenario
//! generator writes, the examples of `docs/events.md` and of the schemas themselves) is valid by its
//! type's schema and decodes, and `properties` holds that a value is valid by its schema exactly when the
//! decoder does not call it poison. None of these tests needs the local stack.

mod properties;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;

use end_to_end::scenario::Scenario;
use jsonschema::{Registry, Validator};
use serde_json::Value;
use shared::events::TYPES;
use shared::{decode, Decoded, Topic};

/// The base the schemas are read under: `$ref: "envelope.json"` resolves beside the referring schema.
const BASE: &str = "file:///docs/schemas/";

fn schemas_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/schemas")
}

fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every schema file, compiled: the envelope's and one per event type.
pub struct Schemas {
    envelope: Validator,
    by_type: BTreeMap<String, Validator>,
    /// The JSON of each file by its name without `.json`, for its `examples`.
    pub documents: BTreeMap<String, Value>,
}

pub static SCHEMAS: LazyLock<Schemas> = LazyLock::new(Schemas::load);

impl Schemas {
    fn load() -> Self {
        let mut documents = BTreeMap::new();
        for entry in std::fs::read_dir(schemas_dir()).expect("docs/schemas") {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().strip_suffix(".json").expect("a .json file");
            documents.insert(name.to_string(), read_json(&path));
        }
        let registry = Registry::new()
            .add(format!("{BASE}envelope.json"), documents["envelope"].clone())
            .expect("envelope.json registers")
            .prepare()
            .expect("envelope.json is a schema");
        let compile = |name: &str| {
            jsonschema::options()
                .with_registry(&registry)
                .with_base_uri(format!("{BASE}{name}.json"))
                .should_validate_formats(true)
                .build(&documents[name])
                .unwrap_or_else(|e| panic!("docs/schemas/{name}.json does not compile: {e}"))
        };
        let envelope = compile("envelope");
        let mut by_type = BTreeMap::new();
        for name in documents.keys().filter(|name| *name != "envelope") {
            assert!(TYPES.contains(&name.as_str()), "docs/schemas/{name}.json names no event type");
            by_type.insert(name.clone(), compile(name));
        }
        for kind in TYPES {
            assert!(by_type.contains_key(kind), "no schema docs/schemas/{kind}.json");
        }
        Self { envelope, by_type, documents }
    }

    /// The schema a value is checked against: its type's, or the envelope's for a type the contract
    /// does not have (or no type at all).
    fn for_value(&self, value: &Value) -> &Validator {
        match value.get("type").and_then(Value::as_str).and_then(|kind| self.by_type.get(kind)) {
            Some(schema) => schema,
            None => &self.envelope,
        }
    }

    /// Why `value` is not valid by its schema, or `None` when it is.
    pub fn errors(&self, value: &Value) -> Option<String> {
        let errors: Vec<String> =
            self.for_value(value).iter_errors(value).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        (!errors.is_empty()).then(|| errors.join("; "))
    }
}

/// The topic a contract type belongs to, by its prefix.
pub fn topic_of(kind: &str) -> Option<Topic> {
    let topic = match kind.split('.').next()? {
        "study" => Topic::Study,
        "interview" => Topic::Interview,
        "api_key" => Topic::ApiKey,
        _ => return None,
    };
    TYPES.contains(&kind).then_some(topic)
}

/// Checks one message as the project publishes it: a type of the contract on its own topic, keyed by
/// its aggregate, valid by its schema, and decoded as an event.
fn check(origin: &str, topic: Topic, key: &str, value: &Value) {
    let kind = value["type"].as_str().unwrap_or_else(|| panic!("{origin}: no type in {value}"));
    assert_eq!(topic_of(kind), Some(topic), "{origin}: {kind} is not a type of {}", topic.default_name());
    assert_eq!(value["aggregateId"].as_str(), Some(key), "{origin}: the key is not the aggregateId");
    if let Some(errors) = SCHEMAS.errors(value) {
        panic!("{origin}: {value} is not valid by docs/schemas/{kind}.json: {errors}");
    }
    let bytes = serde_json::to_vec(value).unwrap();
    match decode(topic, Some(key.as_bytes()), &bytes) {
        Ok(Decoded::Event(_)) => {}
        other => panic!("{origin}: {value} does not decode as an event: {other:?}"),
    }
}

#[test]
fn every_sample_and_generated_event_is_valid_by_its_schema() {
    // The sample data exactly as `scripts/demo` publishes it, printed instead of published.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sample-data")).arg("--dry-run").output().unwrap();
    assert!(out.status.success(), "sample-data --dry-run: {}", String::from_utf8_lossy(&out.stderr));
    let mut samples = 0;
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let message: Value = serde_json::from_str(line).unwrap();
        let topic = Topic::ALL.into_iter().find(|t| message["topic"] == t.default_name()).expect("a contract topic");
        check("sample data", topic, message["key"].as_str().expect("a key"), &message["value"]);
        samples += 1;
    }
    assert!(samples > 100, "the sample data printed only {samples} events");

    let mut kinds = std::collections::BTreeSet::new();
    for seed in [1, 7, 42, 2026, 90210] {
        for message in Scenario::generate(seed, 2, 4, 4).messages {
            let value: Value = serde_json::from_slice(&message.value).unwrap();
            check(&format!("scenario seed {seed}"), message.topic, &message.key, &value);
            kinds.insert(value["type"].as_str().unwrap().to_string());
        }
    }
    assert!(kinds.len() >= 15, "the generated streams had only the types {kinds:?}");
}

#[test]
fn every_example_of_the_contract_page_and_of_the_schemas_is_valid_and_decodes() {
    let page = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/events.md")).unwrap();
    let mut documented = BTreeMap::new();
    let (mut label, mut block): (Option<(String, String)>, Option<String>) = (None, None);
    for line in page.lines() {
        match (&mut block, line) {
            (None, "```json") => block = Some(String::new()),
            (Some(text), "```") => {
                let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
                let (kind, key) = label.take().unwrap_or_else(|| panic!("no \"`type`, key `id`:\" before {text}"));
                assert_eq!(value["type"].as_str(), Some(kind.as_str()), "the example labelled {kind}");
                check(&format!("docs/events.md, {kind}"), topic_of(&kind).expect("a contract type"), &key, &value);
                *documented.entry(kind).or_insert(0) += 1;
                block = None;
            }
            (Some(text), _) => text.push_str(line),
            (None, _) => {
                // "`study.created`, key `std_01`:"
                let parts: Vec<&str> = line.split('`').collect();
                if let [_, kind, ", key ", key, ":"] = parts.as_slice() {
                    label = Some((kind.to_string(), key.to_string()));
                }
            }
        }
    }
    for kind in TYPES {
        assert_eq!(documented.get(kind), Some(&1), "docs/events.md has no single example of {kind}");
    }
    for (name, document) in &SCHEMAS.documents {
        let examples = document["examples"].as_array().unwrap_or_else(|| panic!("{name}.json has no examples"));
        assert!(!examples.is_empty(), "{name}.json has no examples");
        for value in examples {
            let kind = value["type"].as_str().unwrap();
            let key = value["aggregateId"].as_str().unwrap();
            check(&format!("docs/schemas/{name}.json"), topic_of(kind).unwrap(), key, value);
        }
    }
}
