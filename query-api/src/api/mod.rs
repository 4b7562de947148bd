//! The API as api.md defines it: its routes ([`handlers`], section 4), their response bodies ([`models`],
//! section 2, written from stored bytes by [`json`]), pagination ([`pagination`], section 4.5, and its
//! `Link` header), the study routes' entity tags ([`etag`]), the OpenAPI definition and its reference page
//! ([`openapi`], [`docs`], section 9), and the operational routes ([`health`]). One list of operations
//! ([`operations`], utoipa-axum's) feeds both the router and the OpenAPI definition.

pub mod ceiling;
pub mod docs;
pub mod etag;
pub mod handlers;
pub mod health;
pub mod json;
pub mod models;
pub mod openapi;
pub mod pagination;

use axum::routing::get;
use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

/// The spec's operations: each handler's `#[utoipa::path]` gives its path to the router and its operation
/// (tags included) to the OpenAPI definition, so the two cannot differ.
fn operations() -> OpenApiRouter<AppState> {
    use handlers::*;
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(list_studies))
        .routes(routes!(get_study))
        .routes(routes!(list_interviews))
        .routes(routes!(get_interview))
}

/// The routes under `/v1` outside the definition they serve: the definition and its reference page.
fn pages() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi::json))
        .route("/docs", get(docs::page))
        .route("/docs/redoc.standalone.js", get(docs::renderer))
}

/// The router of every route under `/v1`, the spec's operations (the data routes) wrapped by `data`: the
/// layers that belong on data only (the freshness headers), chosen by route, not by matching the path of
/// each request. With a `ceiling` body, the benchmarks' constant route is among the data routes, outside
/// the definition.
pub fn v1_router(
    ceiling: Option<ceiling::Ceiling>,
    data: impl FnOnce(Router<AppState>) -> Router<AppState>,
) -> Router<AppState> {
    let (mut operations, _) = operations().split_for_parts();
    if let Some(ceiling) = ceiling {
        operations = operations.route("/ceiling", get(move || std::future::ready(ceiling.answer())));
    }
    pages().merge(data(operations))
}

/// The OpenAPI definition of [`operations`], before `openapi::document` completes it.
pub fn definition() -> utoipa::openapi::OpenApi {
    operations().split_for_parts().1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path with its parameters' names left out.
    fn shape(path: &str) -> String {
        path.split('/').map(|part| if part.starts_with('{') { "{}" } else { part }).collect::<Vec<_>>().join("/")
    }

    #[test]
    fn the_definition_documents_the_four_operations_of_the_spec() {
        let doc: serde_json::Value = serde_json::from_str(&openapi::document()).unwrap();
        let mut documented: Vec<String> = doc["paths"].as_object().unwrap().keys().map(|p| shape(p)).collect();
        documented.sort();
        assert_eq!(documented, ["/interviews/{}", "/studies", "/studies/{}", "/studies/{}/interviews"]);
    }
}
