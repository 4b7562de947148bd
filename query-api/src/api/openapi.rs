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
        description = "Read-only API returning an organization's completed studies and their completed, visible \
            interviews. Every request is scoped to the organization of the API key used. Error bodies differ by \
            status: 400 is a JSON string, 401 and 404 an object with an `error` field."
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
                    .description(Some("Organization API key as a Bearer token; takes precedence"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "serviceApiKey",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Service-Api-Key",
                "Organization API key",
            ))),
        );
    }
}

/// Headers every response carries (`x-request-id`), `Retry-After` on 503, and the 429 of the optional
/// per-key rate limit and its headers on every authenticated response: declared once here rather than on
/// every response of every handler.
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
                "Only when RATE_LIMIT_PER_SECOND is set: this API key's quota on this instance, \
                 `\"default\";q=<burst>;w=<seconds to refill it>` (IETF draft httpapi-ratelimit-headers)",
            ))
            .build();
        let standing = HeaderBuilder::new()
            .schema(string())
            .description(Some(
                "Only when RATE_LIMIT_PER_SECOND is set: `\"default\";r=<requests left>;t=<seconds until all \
                 q are back>`",
            ))
            .build();
        let too_many = utoipa::openapi::ResponseBuilder::new()
            .description("This API key's rate limit is spent (only when RATE_LIMIT_PER_SECOND is set)")
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build();
        for item in openapi.paths.paths.values_mut() {
            for operation in [&mut item.get, &mut item.head].into_iter().flatten() {
                operation.responses.responses.insert("429".into(), RefOr::T(too_many.clone()));
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

/// The definition as served at `/v1/openapi.json` and kept in `query-api/openapi.json`.
///
/// utoipa 5 writes a Link object's fields in snake case (`operation_id`) where OpenAPI spells them in camel
/// case (`operationId`); no other key of this document is in snake case, so they are renamed as text.
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    let paths = super::v1().into_iter().filter_map(|route| route.operation);
    doc.paths = paths.fold(Paths::builder(), |paths, operation| operation(paths)).build();
    for modifier in [&Security as &dyn Modify, &Headers, &Links] {
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
}
