//! Serving a router over HTTP/1.1 with a header-read timeout: a client that opens a connection and sends
//! its request head slowly, or not at all (slowloris), is disconnected after `HEADER_READ_TIMEOUT_MS`
//! instead of holding the connection for ever. On shutdown the listener stops accepting and the requests in
//! flight are finished, for at most `SHUTDOWN_DRAIN_MS`: past it the server stops with them unfinished.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Serves `router` on `listener` until `shutdown` completes, then waits for the connections in flight for
/// at most `drain`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    drain: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // The peer's address, as axum's `ConnectInfo` (the throttle of unknown keys is per client).
        let service = router.clone().map_request(move |request: Request<Incoming>| {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!(?drain, "requests still in flight when the drain ended: stopping without them");
    }
}
