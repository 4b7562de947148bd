//! The OpenAPI 3.1 definition, generated from the handlers and response types so it cannot drift.

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::path::Paths;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::models::{
    ErrorBody, Facet, Interview, InterviewPage, PageInfo, Participant, Study, StudyListItem, StudyPage,
};
use crate::auth::rate_limit::{RATE_LIMIT, RATE_LIMIT_POLICY};
use crate::read::freshness::{AS_OF, CAUGHT_UP};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Completed studies and interviews",
        version = "1.0",
        description = include_str!("reference.md")
    ),
    servers((url = "/v1", description = "Version 1; the base address carries the version")),
    components(schemas(StudyListItem, Study, Interview, Participant, Facet, PageInfo, StudyPage, InterviewPage, ErrorBody)),
    security(("bearerAuth" = []), ("serviceApiKey" = [])),
    tags(
        (name = "studies", description = "Completed studies"),
        (name = "interviews", description = "Completed, visible interviews")
    )
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearerAuth",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The organization API key as a Bearer token: `Authorization: Bearer <key>`. When a request \
                         carries both headers, this one is used.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "serviceApiKey",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Service-Api-Key",
                "The organization API key in a header of its own: `Service-Api-Key: <key>`. Used when the request \
                 has no `Authorization: Bearer` header.",
            ))),
        );
    }
}

/// Headers every response carries (`x-request-id`), `Retry-After` on 503, the 500 any route can answer,
/// and the 429 of the optional per-key rate limit and its headers on every authenticated response:
/// declared once here rather than on every response of every handler.
struct Headers;

impl Modify for Headers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::header::HeaderBuilder;
        use utoipa::openapi::{RefOr, Type};
        let request_id = HeaderBuilder::new()
            .schema(utoipa::openapi::ObjectBuilder::new().schema_type(Type::String))
            .description(Some("The request's id: the caller's `x-request-id` if it sent one, else a new UUID"))
            .build();
        let retry_after = HeaderBuilder::new()
            .schema(utoipa::openapi::ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)))
            .description(Some("Seconds to wait before retrying"))
            .build();
        let as_of = HeaderBuilder::new()
            .schema(
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::DateTime))),
            )
            .description(Some(
                "How fresh the read model is: the occurredAt of the latest event applied (when caught up), or of \
                 the least fresh projector behind; absent before any event was applied",
            ))
            .build();
        let caught_up = HeaderBuilder::new()
            .schema(utoipa::openapi::ObjectBuilder::new().schema_type(Type::Boolean))
            .description(Some("Whether the projectors have applied every event published so far"))
            .build();
        let string = || utoipa::openapi::ObjectBuilder::new().schema_type(Type::String);
        let policy = HeaderBuilder::new()
            .schema(string())
            .description(Some(
                "Only while the server limits each API key's request rate: this key's quota on the server \
                 instance that answered, `\"default\";q=<burst>;w=<seconds to refill it>` (IETF draft \
                 httpapi-ratelimit-headers)",
            ))
            .build();
        let standing = HeaderBuilder::new()
            .schema(string())
            .description(Some(
                "Only while the server limits each API key's request rate: `\"default\";r=<requests left>;\
                 t=<seconds until all q are back>`",
            ))
            .build();
        let error = |description: &str| {
            utoipa::openapi::ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    utoipa::openapi::ContentBuilder::new()
                        .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
        };
        let too_many = error(
            "This API key's request rate is spent: retry after `Retry-After` seconds (only while the server \
             limits each key's request rate)",
        );
        let internal = error("Unexpected server error; retry with backoff");
        for item in openapi.paths.paths.values_mut() {
            for operation in [&mut item.get, &mut item.head].into_iter().flatten() {
                operation.responses.responses.insert("429".into(), RefOr::T(too_many.clone()));
                operation.responses.responses.insert("500".into(), RefOr::T(internal.clone()));
                for (status, response) in operation.responses.responses.iter_mut() {
                    let RefOr::T(response) = response else { continue };
                    response.headers.insert("x-request-id".into(), request_id.clone());
                    if status == "200" {
                        response.headers.insert(AS_OF.into(), as_of.clone());
                        response.headers.insert(CAUGHT_UP.into(), caught_up.clone());
                    }
                    if status == "503" || status == "429" {
                        response.headers.insert("Retry-After".into(), retry_after.clone());
                    }
                    if status != "401" {
                        response.headers.insert(RATE_LIMIT_POLICY.into(), policy.clone());
                        response.headers.insert(RATE_LIMIT.into(), standing.clone());
                    }
                }
            }
        }
    }
}

/// Links from a list to the operations its items lead to, so that clients and stateful testing can walk
/// the API: a listed study to its details and its interviews, a listed interview to its details.
struct Links;

impl Modify for Links {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::link::LinkBuilder;
        use utoipa::openapi::RefOr;
        let first_id = "$response.body#/items/0/id";
        let link = |operation: &str, parameter: &str, description: &str| {
            let link = LinkBuilder::new().operation_id(operation).parameter(parameter, first_id);
            RefOr::T(link.description(description).build())
        };
        let from = [
            (
                "/studies",
                vec![
                    ("getStudy", link("getStudy", "id", "The first listed study")),
                    (
                        "listStudyInterviews",
                        link("listStudyInterviews", "studyId", "The first listed study's interviews"),
                    ),
                ],
            ),
            (
                "/studies/{studyId}/interviews",
                vec![("getInterview", link("getInterview", "id", "The first listed interview"))],
            ),
        ];
        for (path, links) in from {
            let Some(get) = openapi.paths.paths.get_mut(path).and_then(|item| item.get.as_mut()) else { continue };
            let Some(RefOr::T(ok)) = get.responses.responses.get_mut("200") else { continue };
            ok.links.extend(links.into_iter().map(|(name, link)| (name.to_string(), link)));
        }
    }
}

/// An example of every JSON response of every operation, as the API writes it: the success bodies of
/// [`examples`], and each error body with the message the API sends (`crate::error`).
struct Examples;

impl Modify for Examples {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        for (path, item) in openapi.paths.paths.iter_mut() {
            let missing = if path.starts_with("/interviews") { "interview" } else { "study" };
            for operation in [&mut item.get, &mut item.head].into_iter().flatten() {
                for (status, response) in operation.responses.responses.iter_mut() {
                    let RefOr::T(response) = response else { continue };
                    let Some(content) = response.content.get_mut("application/json") else { continue };
                    let schema = match &content.schema {
                        Some(RefOr::Ref(schema)) => schema.ref_location.rsplit('/').next().unwrap_or_default(),
                        _ => "",
                    };
                    content.example = match status.as_str() {
                        "200" => examples::body(schema),
                        "400" => Some(examples::bad_request()),
                        "401" => Some(examples::error(examples::UNAUTHORIZED)),
                        "404" => Some(examples::error(&format!("{missing} not found"))),
                        "429" => Some(examples::error(examples::TOO_MANY_REQUESTS)),
                        "500" => Some(examples::error(examples::INTERNAL)),
                        "503" => Some(examples::error(examples::UNAVAILABLE)),
                        _ => None,
                    };
                }
            }
        }
    }
}

/// The examples of the document: a study, a page of studies, an interview (a short transcript and a
/// presigned video link) and a page of interviews, and the error bodies.
pub mod examples {
    use serde_json::{json, Value};

    use crate::api::pagination::Pagination;

    /// The body of a 401.
    pub const UNAUTHORIZED: &str = "missing or invalid API key";
    /// The body of a 429.
    pub const TOO_MANY_REQUESTS: &str = "rate limit exceeded for this API key";
    /// The body of a 500.
    pub const INTERNAL: &str = "internal error";
    /// The body of a 503.
    pub const UNAVAILABLE: &str = "service temporarily unavailable; retry later";

    /// A transcript of one participant message.
    pub const TRANSCRIPT: &str = "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello.\n";

    /// A presigned link, in the shape S3 signs (SigV4 in the query, valid 900 seconds).
    pub const VIDEO_LINK: &str = "https://acme-interviews.s3.eu-west-1.amazonaws.com/videos/int_acme_01_01.mp4\
        ?X-Amz-Algorithm=AWS4-HMAC-SHA256\
        &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261102%2Feu-west-1%2Fs3%2Faws4_request\
        &X-Amz-Date=20261102T174512Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host\
        &X-Amz-Signature=5f0e3c1b9a6d4e2f8b7a0c3d6e9f1a4b7c0d3e6f9a2b5c8d1e4f7a0b3c6d9e2f";

    /// The success body of a response of `schema`, by its name.
    pub fn body(schema: &str) -> Option<Value> {
        match schema {
            "Study" => Some(study()),
            "StudyPage" => Some(study_page()),
            "Interview" => Some(interview()),
            "InterviewPage" => Some(interview_page()),
            _ => None,
        }
    }

    pub fn study() -> Value {
        json!({
            "id": "std_acme_01",
            "internalTitle": "Onboarding interviews, autumn",
            "createdAt": "2026-09-01T08:30:00Z",
            "updatedAt": "2026-11-02T17:45:12Z"
        })
    }

    pub fn study_page() -> Value {
        json!({
            "items": [
                {
                    "id": "std_acme_01",
                    "internalTitle": "Onboarding interviews, autumn",
                    "completedOn": "2026-11-02",
                    "createdAt": "2026-09-01T08:30:00Z",
                    "updatedAt": "2026-11-02T17:45:12Z"
                },
                {
                    "id": "std_acme_02",
                    "internalTitle": "Pricing page feedback",
                    "completedOn": "2026-10-15",
                    "createdAt": "2026-08-20T13:05:41Z",
                    "updatedAt": "2026-10-15T09:12:03Z"
                }
            ],
            "pagination": { "total": 2, "page": 1, "pageSize": 20 }
        })
    }

    pub fn interview() -> Value {
        json!({
            "id": "int_acme_01_01",
            "participant": { "id": "ptc_4f2a", "name": "Ada L." },
            "facets": [
                { "label": "Segment", "values": ["Enterprise"] },
                { "label": "Region", "values": ["EMEA", "France"] }
            ],
            "videoDownloadURL": VIDEO_LINK,
            "transcriptAsWebVTT": TRANSCRIPT,
            "createdAt": "2026-10-28T14:02:11Z",
            "updatedAt": "2026-10-28T14:31:57Z"
        })
    }

    /// A page of two interviews: one with everything, one with nothing to give (its nullable fields null).
    pub fn interview_page() -> Value {
        json!({
            "items": [
                interview(),
                {
                    "id": "int_acme_01_03",
                    "participant": null,
                    "facets": [],
                    "videoDownloadURL": null,
                    "transcriptAsWebVTT": null,
                    "createdAt": "2026-10-27T09:40:00Z",
                    "updatedAt": "2026-10-27T09:58:26Z"
                }
            ],
            "pagination": { "total": 2, "page": 1, "pageSize": 20 }
        })
    }

    /// The 400 body of an out-of-bounds `pageSize`, as the pagination writes it.
    pub fn bad_request() -> Value {
        let message = Pagination::parse(Some("pageSize=101")).expect_err("101 is past the bound").to_string();
        Value::String(message)
    }

    pub fn error(message: &str) -> Value {
        json!({ "error": message })
    }
}

/// The definition as served at `/v1/openapi.json` and kept in `query-api/openapi.json`.
///
/// utoipa 5 writes a Link object's fields in snake case (`operation_id`) where OpenAPI spells them in camel
/// case (`operationId`); no other key of this document is in snake case, so they are renamed as text.
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    let paths = super::v1().into_iter().filter_map(|route| route.operation);
    doc.paths = paths.fold(Paths::builder(), |paths, operation| operation(paths)).build();
    for modifier in [&Security as &dyn Modify, &Headers, &Links, &Examples] {
        modifier.modify(&mut doc);
    }
    let json = doc.to_pretty_json().expect("the OpenAPI document serializes");
    json.replace("\"operation_id\":", "\"operationId\":").replace("\"operation_ref\":", "\"operationRef\":") + "\n"
}

/// `GET /v1/openapi.json`.
pub async fn json() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}

#[cfg(test)]
mod tests {
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
            Value::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| violation(doc, &schema["items"], item, &format!("{at}[{i}]"))),
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
        let example = |path: &str| {
            doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["example"].clone()
        };
        let one = example("/interviews/{id}");
        assert_eq!(one["transcriptAsWebVTT"], "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello.\n");
        let link = one["videoDownloadURL"].as_str().unwrap();
        assert!(link.starts_with("https://") && link.contains(".s3."), "{link}");
        for signed in ["X-Amz-Algorithm=AWS4-HMAC-SHA256", "X-Amz-Credential=", "X-Amz-Expires=900", "X-Amz-Signature="]
        {
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
            sent(ApiError::TooManyRequests(Duration::from_secs(1))),
            sent(ApiError::Internal("a bug".into())),
            sent(ApiError::Overloaded("too many requests in flight")),
            sent(ApiError::NotReady("no generation")),
            sent(ApiError::Throttled(Duration::from_secs(3))),
        ];
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
}
