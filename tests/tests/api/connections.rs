//! Connections that hold the API without asking anything of it: each is closed on its documented clock, and
//! past the cap of connections a client holding many cannot shut out those that send requests.

use end_to_end::api::{config, spawn_app, World};
use end_to_end::fixture::{self, ACME_KEY};
use end_to_end::metrics::sample;
use end_to_end::unique;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Waits until the server closes `socket` (an end, a reset, or a 408 before its end); how long it took,
/// from `since`, or `None` when it was still open after `within`.
async fn closed_after(socket: &mut TcpStream, since: Instant, within: Duration) -> Option<Duration> {
    let mut buffer = [0u8; 1024];
    loop {
        match tokio::time::timeout(within.saturating_sub(since.elapsed()), socket.read(&mut buffer)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(since.elapsed()),
            Ok(Ok(n)) => {
                let text = String::from_utf8_lossy(&buffer[..n]);
                assert!(text.starts_with("HTTP/1.1 408"), "only a 408 may be said to such a client: {text}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_send_empty_lines_partial_heads_or_nothing_are_closed_on_their_clocks() {
    let mut api = config(&unique("probe"), "redis://127.0.0.1:1");
    (api.header_read_timeout_ms, api.keep_alive_timeout_ms) = (400, 1_500);
    let app = spawn_app(api).await;
    let address = app.address.trim_start_matches("http://").to_string();
    let header = Duration::from_millis(400);
    let within = Duration::from_secs(10);
    // Each sends its bytes at once; the header clock runs from the first.
    for bytes in [
        &b"\r\n\r\n"[..],
        b"\n\n",
        b"\r\n\r\n\r\n\r\n\r\n\r\n",
        b"\r\n\r\nGET /v1/studies HTTP/1.1\r\nX: ",
        b"GET /v1/studies HTTP/1.1\r\nHost: api\r\n",
        b"GET /livez HTTP/1.1\r\nHost: api\r\nX-Half: a",
    ] {
        let mut socket = TcpStream::connect(&address).await.unwrap();
        let sent = Instant::now();
        socket.write_all(bytes).await.unwrap();
        let took = closed_after(&mut socket, sent, within).await;
        let label = String::from_utf8_lossy(bytes);
        let took = took.unwrap_or_else(|| panic!("{label:?}: still open after {within:?}"));
        assert!(took >= header - Duration::from_millis(50), "{label:?}: closed before its clock, after {took:?}");
        assert!(took < header + Duration::from_secs(3), "{label:?}: closed after {took:?}");
    }
    // A head sent one byte every 100 ms: its clock is not restarted by each byte.
    let mut socket = TcpStream::connect(&address).await.unwrap();
    let started = Instant::now();
    let trickle = async {
        for byte in b"GET /livez HTTP/1.1\r\nHost: api\r\nX-Slow: 1\r\n".iter().cycle() {
            if socket.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            if started.elapsed() > within {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(within, trickle).await;
    let took = closed_after(&mut socket, started, within + Duration::from_secs(1)).await;
    assert!(took.is_some_and(|t| t < header + Duration::from_secs(3)), "a trickled head: {took:?}");
    // Connected and silent, and kept alive after an answer: the keep-alive clock.
    for request in [&b""[..], b"GET /livez HTTP/1.1\r\nHost: api\r\n\r\n"] {
        let mut socket = TcpStream::connect(&address).await.unwrap();
        if !request.is_empty() {
            socket.write_all(request).await.unwrap();
            let mut answer = [0u8; 1024];
            let n = tokio::time::timeout(within, socket.read(&mut answer)).await.unwrap().unwrap();
            assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..n]));
        }
        let idle = Instant::now();
        let took = closed_after(&mut socket, idle, within).await;
        let took = took.unwrap_or_else(|| panic!("idle after {request:?}: still open after {within:?}"));
        assert!(took >= Duration::from_millis(1_400) && took < Duration::from_secs(5), "idle: closed after {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_holders_make_room_and_requests_and_livez_still_get_through() {
    const CAP: usize = 40;
    let world = World::start_with(&fixture::dataset(), |api| {
        api.max_connections = CAP as u32;
        // Long clocks: the holders would hold for a minute but for the cap.
        (api.header_read_timeout_ms, api.keep_alive_timeout_ms) = (60_000, 60_000);
    })
    .await;
    let address = world.app.address.trim_start_matches("http://").to_string();
    // Three times the cap of connections that hold: silent, empty lines, and a head never finished.
    let mut holders = Vec::new();
    for n in 0..3 * CAP {
        let mut socket = TcpStream::connect(&address).await.unwrap();
        let bytes: &[u8] = [&b""[..], b"\r\n\r\n", b"GET /v1/studies HTTP/1.1\r\nX: "][n % 3];
        socket.write_all(bytes).await.unwrap();
        holders.push(socket);
    }
    // Requests on new connections are answered, a data route and the liveness probe alike.
    for n in 0..20 {
        let client =
            reqwest::Client::builder().timeout(Duration::from_secs(10)).pool_max_idle_per_host(0).build().unwrap();
        let path = if n % 2 == 0 { "/v1/studies" } else { "/livez" };
        let response = client.get(format!("{}{path}", world.app.address)).bearer_auth(ACME_KEY).send().await;
        let status = response.map(|r| r.status().as_u16()).map_err(|e| e.to_string());
        assert_eq!(status, Ok(200), "request {n} to {path}");
    }
    // The cap held: the holders beyond it were closed, none of those kept since, and the count says so.
    let mut closed = 0;
    for socket in &mut holders {
        if closed_after(socket, Instant::now(), Duration::from_millis(50)).await.is_some() {
            closed += 1;
        }
    }
    assert!(closed >= 2 * CAP, "{closed} of {} holders closed", holders.len());
    let metrics = world.app.admin_get("/metrics").await.text().await.unwrap();
    let open = sample(&metrics, "api_connections_open", &[]);
    assert!(open <= CAP as f64, "{open} connections open: {metrics}");
    let shed = sample(&metrics, "api_connections_closed_total", &["cause=\"shed\""]);
    assert!(shed >= 2.0 * CAP as f64, "{shed} shed: {metrics}");
    // The descriptors they took are the process's, on the same page, with the build's version.
    assert!(sample(&metrics, "process_open_fds", &[]) >= open, "{metrics}");
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert_eq!(sample(&metrics, "api_build_info", &[&version]), 1.0, "{metrics}");
}
