//! Serving a router over HTTP/1.1 with a connection's two clocks ([`super::deadlines`]): a client that
//! sends its request head slowly (slowloris) is disconnected after `HEADER_READ_TIMEOUT_MS` instead of
//! holding the connection for ever, and a kept-alive connection is closed once idle for
//! `KEEP_ALIVE_TIMEOUT_MS`. On shutdown the listener stops accepting and the requests in
//! flight are finished, for at most `SHUTDOWN_DRAIN_MS`: past it the server stops with them unfinished.
//! At most `MAX_CONNECTIONS` are held at once ([`super::connections`]).

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

use super::connections::Connections;
use super::deadlines::Deadlines;

/// How long a connection may take over a request head, and may wait idle for its next request.
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    pub header: Duration,
    pub keep_alive: Duration,
}

/// What the accept loop holds connections to: their clocks, their cap, and the drain on shutdown.
pub struct Holding {
    pub clocks: Clocks,
    pub connections: std::sync::Arc<Connections>,
    pub drain: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes, then waits for the connections in flight for
/// at most the drain.
pub async fn serve(listener: TcpListener, router: Router, holding: Holding, shutdown: impl Future<Output = ()>) {
    let Holding { clocks, connections, drain } = holding;
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
        // Every connection answering a request: this one is closed (dropped) at once, and counted.
        let Some(admitted) = connections.admit() else { continue };
        // The peer's address, as axum's `ConnectInfo` (the throttle of unknown keys is per client).
        let service = router.clone().map_request(move |request: Request<Incoming>| {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        });
        // hyper's header timeout would also run while the connection waits idle: the stream keeps the clocks.
        let stream = Deadlines::new(stream, clocks.header, clocks.keep_alive, admitted.watch.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(admitted);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!(?drain, "requests still in flight when the drain ended: stopping without them");
    }
}
