//! The OpenAPI 3.1 definition, generated from the handlers and response types so it cannot drift.

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

pub mod examples;

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
        description = include_str!("../reference.md")
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
                "How fresh the answer is: the occurredAt of the latest event applied to the organization's data; \
                 for an organization none of whose studies and interviews has an event yet, the read model's (its \
                 latest event when caught up, else the least fresh projector's)",
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
            "This API key's request rate is spent (only while the server limits each key's request rate), or \
             this client sent too many unknown API keys lately (body `too many unknown API keys from this \
             client`): retry after `Retry-After` seconds",
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

/// The definition as served at `/v1/openapi.json` and kept in `query-api/openapi.json`.
///
/// utoipa 5 writes a Link object's fields in snake case (`operation_id`) where OpenAPI spells them in camel
/// case (`operationId`); no other key of this document is in snake case, so they are renamed as text.
pub fn document() -> String {
    let mut doc = super::definition();
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
mod tests;
