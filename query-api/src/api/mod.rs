//! The API as api.md defines it: its routes ([`handlers`], section 4), their response bodies ([`models`],
//! section 2, written from stored bytes by [`json`]), pagination ([`pagination`], section 4.5, and its
//! `Link` header), the study routes' entity tags ([`etag`]), the OpenAPI definition and its reference page
//! ([`openapi`], [`docs`], section 9), and the operational routes ([`health`]). One list of routes ([`v1`])
//! feeds both the router and the OpenAPI definition.

pub mod docs;
pub mod etag;
pub mod handlers;
pub mod health;
pub mod json;
pub mod models;
pub mod openapi;
pub mod pagination;

use axum::routing::{get, MethodRouter};
use axum::Router;
use utoipa::openapi::path::PathsBuilder;

use crate::state::AppState;

/// One route under `/v1`: its path as the router matches it, its handler, and, for an operation of the
/// spec, how its `#[utoipa::path]` adds it to the OpenAPI definition.
pub struct Route {
    pub path: &'static str,
    pub handler: MethodRouter<AppState>,
    pub operation: Option<fn(PathsBuilder) -> PathsBuilder>,
}

/// An operation of the spec, documented by its handler's `#[utoipa::path]`.
fn operation<P>(path: &'static str, handler: MethodRouter<AppState>) -> Route
where
    P: utoipa::Path + for<'t> utoipa::__dev::Tags<'t> + 'static,
{
    Route { path, handler, operation: Some(PathsBuilder::path_from::<Tagged<P>>) }
}

/// A handler's operation with the tags of its `#[utoipa::path]`, as `#[openapi(paths(...))]` adds them.
struct Tagged<P>(std::marker::PhantomData<P>);

impl<P: utoipa::Path + for<'t> utoipa::__dev::Tags<'t>> utoipa::Path for Tagged<P> {
    fn methods() -> Vec<utoipa::openapi::path::HttpMethod> {
        P::methods()
    }

    fn path() -> String {
        P::path()
    }

    fn operation() -> utoipa::openapi::path::Operation {
        let mut operation = P::operation();
        operation.tags.get_or_insert_with(Vec::new).extend(P::tags().into_iter().map(String::from));
        operation
    }
}

/// A route outside the definition it serves.
fn undocumented(path: &'static str, handler: MethodRouter<AppState>) -> Route {
    Route { path, handler, operation: None }
}

/// Every route under `/v1`.
pub fn v1() -> Vec<Route> {
    use handlers::*;
    vec![
        operation::<__path_list_studies>("/studies", get(list_studies)),
        operation::<__path_get_study>("/studies/{id}", get(get_study)),
        operation::<__path_list_interviews>("/studies/{id}/interviews", get(list_interviews)),
        operation::<__path_get_interview>("/interviews/{id}", get(get_interview)),
        undocumented("/openapi.json", get(openapi::json)),
        undocumented("/docs", get(docs::page)),
        undocumented("/docs/redoc.standalone.js", get(docs::renderer)),
    ]
}

/// The router of [`v1`], the spec's operations (the data routes) wrapped by `data`: the layers that belong
/// on data only (the freshness headers), chosen by route, not by matching the path of each request.
pub fn v1_router(data: impl FnOnce(Router<AppState>) -> Router<AppState>) -> Router<AppState> {
    let routed =
        |routes: Vec<Route>| routes.into_iter().fold(Router::new(), |router, r| router.route(r.path, r.handler));
    let (operations, others): (Vec<Route>, Vec<Route>) = v1().into_iter().partition(|r| r.operation.is_some());
    routed(others).merge(data(routed(operations)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The router's paths name their one parameter `id`; the definition's may give it a longer name.
    fn shape(path: &str) -> String {
        path.split('/').map(|part| if part.starts_with('{') { "{}" } else { part }).collect::<Vec<_>>().join("/")
    }

    #[test]
    fn every_documented_route_is_routed_at_the_path_its_definition_gives() {
        let doc: serde_json::Value = serde_json::from_str(&openapi::document()).unwrap();
        let mut documented: Vec<String> = doc["paths"].as_object().unwrap().keys().map(|p| shape(p)).collect();
        let mut routed: Vec<String> =
            v1().iter().filter(|route| route.operation.is_some()).map(|route| shape(route.path)).collect();
        documented.sort();
        routed.sort();
        assert_eq!(documented, routed);
    }
}
