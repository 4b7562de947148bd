//! A handler that panics is answered 500 in the spec's error shape, and the server goes on.

use std::any::Any;

use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

pub fn answer(_panic: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::Internal("handler panicked".into()).into_response()
}
