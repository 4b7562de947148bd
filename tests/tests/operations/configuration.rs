//! Settings a binary cannot run with are refused at start, with one line that names the setting, the same
//! in both binaries, and no password in it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `binary` with `args` until it exits (within a minute); its exit status's success and its stderr.
fn refused(binary: std::path::PathBuf, args: &[&str]) -> (bool, String) {
    let mut child = Command::new(&binary)
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("REDIS_CLUSTER")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} starts: {e}", binary.display()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{} still running after a minute with {args:?}", binary.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.success(), stderr)
}

#[test]
fn a_redis_url_that_is_no_url_or_several_without_a_cluster_stops_both_binaries_with_the_same_line() {
    let projector = end_to_end::runner::binary();
    let api = projector.with_file_name("query-api");
    for url in ["localhost:6379", "redis://:secret-pw@127.0.0.1:1,redis://:secret-pw@127.0.0.1:2"] {
        let (projector_ok, projector_said) =
            refused(projector.clone(), &["--redis-url", url, "--brokers", "127.0.0.1:1", "run"]);
        let (api_ok, api_said) =
            refused(api.clone(), &["--redis-url", url, "--admin-addr", "off", "--listen-addr", "127.0.0.1:0"]);
        assert!(!projector_ok && !api_ok, "both refuse {url}");
        let line = |said: &str| {
            said.lines().find(|l| l.contains("REDIS_URL")).map(|l| l[l.find("REDIS_URL").unwrap()..].to_string())
        };
        let (from_projector, from_api) = (line(&projector_said), line(&api_said));
        assert!(from_projector.is_some(), "the projector names REDIS_URL: {projector_said}");
        assert_eq!(from_projector, from_api, "the same line: {projector_said} / {api_said}");
        assert!(!projector_said.contains("secret-pw") && !api_said.contains("secret-pw"), "no password");
    }
}
