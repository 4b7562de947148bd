//! The API reference page, opened in a real browser (Debian's headless Chromium): it renders, from the
//! definition the server serves, the four operations and both ways to authenticate.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use end_to_end::api::{config, spawn_app};
use end_to_end::{env, redis_cluster, unique};

/// Runs Chromium headless on `url` with `args`, killed if it takes longer than a minute; its stdout.
fn chromium(url: &str, args: &[&str]) -> String {
    let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|b| Path::new(b).exists())
        .expect("Debian's chromium is installed (scripts/stack install does it)");
    let profile = std::env::temp_dir().join(unique("chromium"));
    std::fs::create_dir_all(&profile).expect("a profile directory");
    // Into a file, not a pipe: a DOM larger than a pipe holds would stall chromium until it is read.
    let out = profile.join("stdout");
    let mut child = Command::new(binary)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--virtual-time-budget=30000")
        .args(args)
        .arg(url)
        .stdout(std::fs::File::create(&out).expect("a file for chromium's output"))
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("chromium runs").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium took more than a minute on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = std::fs::read(&out).expect("chromium's output");
    let _ = std::fs::remove_dir_all(profile);
    String::from_utf8_lossy(&output).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_page_renders_every_operation_and_both_authentication_schemes_in_chromium() {
    let mut api = config(&unique("docs"), &env("REDIS_URL"));
    api.redis.cluster = redis_cluster();
    let app = spawn_app(api).await;
    let url = format!("{}/v1/docs", app.address);
    let page = app.get("/v1/docs", None).await;
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(policy.contains("script-src 'self'"), "{policy}");

    let dump = url.clone();
    let dom = tokio::task::spawn_blocking(move || chromium(&dump, &["--dump-dom"])).await.unwrap();
    // Text that only Redoc's rendering of the served definition puts in the page.
    for operation in [
        "Completed studies of the key's organization",
        "One completed study of the key's organization",
        "Completed, visible interviews of a completed study",
        "One completed, visible interview of the organization",
    ] {
        assert!(dom.contains(operation), "the page shows {operation:?}: {} bytes of DOM", dom.len());
    }
    for scheme in ["bearerAuth", "serviceApiKey"] {
        assert!(dom.contains(scheme), "the page shows the authentication scheme {scheme}");
    }
    // How to authenticate, in the words a client sends.
    for header in ["Authorization: Bearer", "Service-Api-Key:"] {
        assert!(dom.contains(header), "the page shows the header {header:?}");
    }

    let shot: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("api-reference.png");
    let _ = std::fs::remove_file(&shot);
    let args = [format!("--screenshot={}", shot.display()), "--window-size=1400,1000".to_string()];
    tokio::task::spawn_blocking(move || chromium(&url, &args.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .unwrap();
    let png = std::fs::read(&shot).expect("a screenshot was saved");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 30_000, "a rendered screenshot: {} bytes", png.len());
    println!("screenshot: {}", shot.display());
}
