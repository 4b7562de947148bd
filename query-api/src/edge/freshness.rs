//! Adds the freshness headers (`crate::read::freshness`) to every successful data response: as of the
//! latest event applied to the answer's organization when the handler marked it so, else as of the read
//! model's latest event; caught up, or not, as the projectors report. The router puts it on the data
//! routes only (`crate::api::v1_router`).

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use crate::read::freshness::{OrgAsOf, AS_OF, CAUGHT_UP};
use crate::state::AppState;

pub async fn headers(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if response.status().is_success() {
        let freshness = state.freshness.get();
        let org = response.extensions_mut().remove::<OrgAsOf>().map(|at| at.0);
        let headers = response.headers_mut();
        if let Some(value) = org.or(freshness.as_of).and_then(|at| HeaderValue::from_str(&at).ok()) {
            headers.insert(AS_OF, value);
        }
        headers.insert(CAUGHT_UP, HeaderValue::from_static(if freshness.caught_up { "true" } else { "false" }));
    }
    response
}
