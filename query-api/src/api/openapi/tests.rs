//! The OpenAPI document against the code: the committed file, every response declared and exemplified,
//! the types a generated client will see.

use super::*;
use crate::api::pagination::{MAX_PAGE, MAX_PAGE_SIZE};

#[test]
fn the_committed_openapi_file_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
    let generated = document();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(committed == generated, "query-api/openapi.json is stale: rerun this test with UPDATE_OPENAPI=1");
}

#[test]
fn it_is_openapi_3_1_with_the_four_endpoints() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let mut paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    paths.sort();
    assert_eq!(paths, ["/interviews/{id}", "/studies", "/studies/{id}", "/studies/{studyId}/interviews"]);
    assert_eq!(doc["info"]["version"], "1.0");
}

#[test]
fn lists_link_to_the_operations_their_items_lead_to() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    let links = |path: &str| doc["paths"][path]["get"]["responses"]["200"]["links"].clone();
    assert_eq!(links("/studies")["getStudy"]["operationId"], "getStudy");
    assert_eq!(links("/studies")["listStudyInterviews"]["parameters"]["studyId"], "$response.body#/items/0/id");
    assert_eq!(
        links("/studies/{studyId}/interviews")["getInterview"]["parameters"]["id"],
        "$response.body#/items/0/id"
    );
}

#[test]
fn the_study_routes_declare_their_etag_and_304_and_the_lists_their_link() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    for path in ["/studies", "/studies/{id}"] {
        let responses = &doc["paths"][path]["get"]["responses"];
        assert!(responses["200"]["headers"]["ETag"].is_object(), "{path}");
        assert!(responses["304"]["headers"]["ETag"].is_object(), "{path}");
        assert!(responses["304"]["content"].is_null(), "{path}: a 304 has no body");
        let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
        assert!(params.iter().any(|p| p["name"] == "If-None-Match" && p["in"] == "header"), "{path}");
    }
    for path in ["/interviews/{id}", "/studies/{studyId}/interviews"] {
        let responses = doc["paths"][path]["get"]["responses"].as_object().unwrap();
        assert!(!responses.contains_key("304"), "{path}");
        assert!(responses.values().all(|r| r["headers"]["ETag"].is_null()), "{path}");
    }
    for path in ["/studies", "/studies/{studyId}/interviews"] {
        assert!(doc["paths"][path]["get"]["responses"]["200"]["headers"]["Link"].is_object(), "{path}");
    }
}

#[test]
fn every_authenticated_response_declares_the_rate_limit_headers() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (status, response) in item["get"]["responses"].as_object().unwrap() {
            let declared = response["headers"][RATE_LIMIT].is_object();
            assert_eq!(declared, status != "401", "{path} {status}");
            assert_eq!(response["headers"][RATE_LIMIT_POLICY].is_object(), declared, "{path} {status}");
        }
    }
}

#[test]
fn every_response_declares_its_request_id_and_every_503_and_429_its_retry_after() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (status, response) in item["get"]["responses"].as_object().unwrap() {
            assert!(response["headers"]["x-request-id"].is_object(), "{path} {status}");
            let retry = status == "503" || status == "429";
            assert_eq!(response["headers"]["Retry-After"].is_object(), retry, "{path} {status}");
        }
    }
}

/// The component schemas of the document, by name.
fn schemas(doc: &serde_json::Value) -> &serde_json::Map<String, serde_json::Value> {
    doc["components"]["schemas"].as_object().unwrap()
}

/// Whether a property's schema lets it be null: `type: [X, "null"]`, or a `oneOf` with a null branch.
fn allows_null(property: &serde_json::Value) -> bool {
    let typed = property["type"].as_array().is_some_and(|types| types.iter().any(|t| t == "null"));
    let one_of = property["oneOf"].as_array().is_some_and(|options| options.iter().any(|o| o["type"] == "null"));
    typed || one_of
}

/// A generated client types a property `X | None` when it is required and nullable, and `X | None |
/// Unset` (or `X?` with an optional key) when it is not required: the API writes every field of
/// every body, null or not, so every property is required, and exactly the ones api.md allows to be
/// null are nullable.
#[test]
fn every_property_is_required_and_only_the_fields_that_may_be_null_are_nullable() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    let mut nullable = Vec::new();
    for (name, schema) in schemas(&doc) {
        let required: Vec<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
        for (field, property) in schema["properties"].as_object().into_iter().flatten() {
            assert!(required.contains(&field.as_str()), "{name}.{field} is optional: it must be required");
            if allows_null(property) {
                nullable.push(format!("{name}.{field}"));
            }
        }
    }
    nullable.sort();
    assert_eq!(
        nullable,
        ["Interview.participant", "Interview.transcriptAsWebVTT", "Interview.videoDownloadURL", "Participant.name"]
    );
}

/// Where `value` breaks `schema` (the parts of JSON Schema this document uses), if it does.
fn violation(
    doc: &serde_json::Value,
    schema: &serde_json::Value,
    value: &serde_json::Value,
    at: &str,
) -> Option<String> {
    use serde_json::Value;
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap();
        assert!(schemas(doc).contains_key(name), "{at}: {reference} resolves");
        return violation(doc, &doc["components"]["schemas"][name], value, at);
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let matching = options.iter().filter(|o| violation(doc, o, value, at).is_none()).count();
        return (matching != 1).then(|| format!("{at}: {matching} branches of oneOf accept {value}"));
    }
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(types) => types.iter().filter_map(|t| t.as_str()).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.contains(&kind) {
        return Some(format!("{at}: {kind} where the schema has {types:?}"));
    }
    if let (Some(minimum), Some(n)) = (schema["minimum"].as_f64(), value.as_f64()) {
        if n < minimum {
            return Some(format!("{at}: {n} is below {minimum}"));
        }
    }
    match value {
        Value::Object(fields) => {
            for required in schema["required"].as_array().into_iter().flatten() {
                if !fields.contains_key(required.as_str().unwrap()) {
                    return Some(format!("{at}: no {required}"));
                }
            }
            for (name, field) in fields {
                let Some(property) = schema["properties"].get(name) else {
                    return Some(format!("{at}: {name} is not a property of the schema"));
                };
                if let Some(broken) = violation(doc, property, field, &format!("{at}.{name}")) {
                    return Some(broken);
                }
            }
            None
        }
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(i, item)| violation(doc, &schema["items"], item, &format!("{at}[{i}]")))
        }
        Value::String(text) => {
            let valid = match schema["format"].as_str() {
                Some("date-time") => chrono::DateTime::parse_from_rfc3339(text).is_ok(),
                Some("date") => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok(),
                Some("uri") => text.starts_with("https://") && !text.contains(char::is_whitespace),
                _ => true,
            };
            (!valid).then(|| format!("{at}: {text:?} is not a {}", schema["format"]))
        }
        _ => None,
    }
}

#[test]
fn the_schema_check_of_these_tests_finds_what_is_wrong() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    let study = |body: serde_json::Value| {
        violation(&doc, &serde_json::json!({"$ref": "#/components/schemas/Study"}), &body, "")
    };
    assert_eq!(study(examples::study()), None);
    let mut missing = examples::study();
    missing.as_object_mut().unwrap().remove("updatedAt");
    assert!(study(missing).is_some());
    let mut extra = examples::study();
    extra["completedOn"] = "2026-11-02".into();
    assert!(study(extra).is_some(), "a single study has no completedOn");
    let mut date = examples::study();
    date["createdAt"] = "yesterday".into();
    assert!(study(date).is_some());
    let interview = serde_json::json!({"$ref": "#/components/schemas/Interview"});
    let mut null_facets = examples::interview();
    null_facets["facets"] = serde_json::Value::Null;
    assert!(violation(&doc, &interview, &null_facets, "").is_some());
    let mut no_name = examples::interview();
    no_name["participant"]["name"] = serde_json::Value::Null;
    assert_eq!(violation(&doc, &interview, &no_name, ""), None);
}

/// Every JSON response of every operation, with its media type.
fn json_responses(doc: &serde_json::Value) -> Vec<(String, String, serde_json::Value)> {
    let mut found = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (status, response) in item["get"]["responses"].as_object().unwrap() {
            if let Some(json) = response["content"].get("application/json") {
                found.push((path.clone(), status.clone(), json.clone()));
            }
        }
    }
    found
}

#[test]
fn every_json_response_has_an_example_its_schema_accepts() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    let responses = json_responses(&doc);
    assert!(responses.len() >= 4 * 6, "every operation's 200 and error bodies are JSON");
    for (path, status, json) in responses {
        let example = &json["example"];
        assert!(!example.is_null(), "{path} {status} has no example");
        if let Some(broken) = violation(&doc, &json["schema"], example, &format!("{path} {status}")) {
            panic!("the example breaks its schema: {broken}");
        }
    }
}

#[test]
fn the_interview_examples_show_a_webvtt_transcript_a_presigned_link_and_the_nulls() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    let example =
        |path: &str| doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["example"].clone();
    let one = example("/interviews/{id}");
    assert_eq!(one["transcriptAsWebVTT"], "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello.\n");
    let link = one["videoDownloadURL"].as_str().unwrap();
    assert!(link.starts_with("https://") && link.contains(".s3."), "{link}");
    for signed in ["X-Amz-Algorithm=AWS4-HMAC-SHA256", "X-Amz-Credential=", "X-Amz-Expires=900", "X-Amz-Signature="] {
        assert!(link.contains(signed), "{link} has {signed}");
    }
    let page = example("/studies/{studyId}/interviews");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items[0], one);
    for field in ["participant", "videoDownloadURL", "transcriptAsWebVTT"] {
        assert!(items[1][field].is_null(), "the second interview shows {field} null");
    }
    assert_eq!(example("/studies/{id}"), examples::study());
    assert_eq!(example("/studies")["items"][0]["id"], examples::study()["id"]);
}

/// The status and JSON body the API sends for `error`.
fn sent(error: crate::error::ApiError) -> (String, serde_json::Value) {
    let response = error.into_response();
    let status = response.status().as_u16().to_string();
    let body = futures::executor::block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

#[test]
fn the_error_examples_are_the_bodies_the_api_sends() {
    use std::time::Duration;

    use crate::error::ApiError;
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    let bad_page = || crate::api::pagination::Pagination::parse(Some("pageSize=101")).unwrap_err();
    let everywhere = [
        sent(ApiError::Unauthorized),
        sent(ApiError::InvalidWhileThrottled(Duration::from_secs(2))),
        sent(ApiError::TooManyRequests(Duration::from_secs(1))),
        sent(ApiError::Internal("a bug".into())),
        sent(ApiError::Overloaded("too many requests in flight")),
        sent(ApiError::NotReady(crate::read::generation::NotServed::Unknown)),
    ];
    let throttled = sent(ApiError::Throttled(Duration::from_secs(3)));
    assert_eq!(throttled, ("429".into(), examples::error(examples::UNKNOWN_KEYS)));
    for (path, item) in doc["paths"].as_object().unwrap() {
        let responses = &item["get"]["responses"];
        let example = |status: &str| responses[status]["content"]["application/json"]["example"].clone();
        for (status, body) in &everywhere {
            assert_eq!(&example(status), body, "{path} {status}");
        }
        let missing = if path.starts_with("/interviews") { "interview" } else { "study" };
        if responses.get("404").is_some() {
            let (status, body) = sent(ApiError::NotFound(missing));
            assert_eq!(example(&status), body, "{path} 404");
        }
        if responses.get("400").is_some() {
            let (status, body) = sent(bad_page());
            assert_eq!(example(&status), body, "{path} 400");
            assert!(body.is_string(), "a 400 body is a JSON string");
        }
    }
}

#[test]
fn every_operation_declares_401_429_500_and_503() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for status in ["200", "401", "429", "500", "503"] {
            assert!(item["get"]["responses"][status].is_object(), "{path} declares {status}");
        }
    }
}

/// Words like `SOME_SETTING`: the names of the server's settings, which mean nothing to a client.
fn setting_names(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| {
            word.contains('_')
                && word.chars().any(|c| c.is_ascii_uppercase())
                && !word.chars().any(|c| c.is_ascii_lowercase())
        })
        .collect()
}

/// Every `description` and `summary` of the document, anywhere in it.
fn prose(value: &serde_json::Value, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match value {
                    serde_json::Value::String(text) if key == "description" || key == "summary" => {
                        found.push(text.clone())
                    }
                    _ => prose(value, found),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| prose(item, found)),
        _ => {}
    }
}

#[test]
fn descriptions_name_no_server_setting() {
    assert_eq!(
        setting_names("set RATE_LIMIT_PER_SECOND or MAX_PAGE_MB, not WEBVTT or ETag"),
        ["RATE_LIMIT_PER_SECOND", "MAX_PAGE_MB"]
    );
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    let mut texts = Vec::new();
    prose(&doc, &mut texts);
    assert!(texts.len() > 20, "{} descriptions", texts.len());
    for text in texts {
        assert!(setting_names(&text).is_empty(), "a setting's name in {text:?}");
    }
}

#[test]
fn page_is_bounded_by_its_int64_type_only_as_the_code_is() {
    let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
    for path in ["/studies", "/studies/{studyId}/interviews"] {
        let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
        let param = |name: &str| params.iter().find(|p| p["name"] == name).unwrap()["schema"].clone();
        let page = param("page");
        assert_eq!((page["minimum"].as_u64(), page["format"].as_str()), (Some(1), Some("int64")), "{path}");
        assert!(page["maximum"].is_null(), "{path}: api.md gives page no maximum");
        let size = param("pageSize");
        assert_eq!((size["minimum"].as_u64(), size["maximum"].as_u64()), (Some(1), Some(MAX_PAGE_SIZE)), "{path}");
    }
    assert_eq!(MAX_PAGE, i64::MAX as u64, "the code takes every int64 from 1");
}
