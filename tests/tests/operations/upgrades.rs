//! Upgrades: a generation's layout version (`shared::layout`) is checked by both binaries before they use
//! it, so that neither ever misreads a layout it does not know (nor does an operator command that uses
//! the generation); a generation written before the version was recorded is layout 1 to both.

use std::time::Duration;

use end_to_end::api::{config, spawn_app, World};
use end_to_end::fixture::{self, completed_study, ACME, ACME_KEY};
use end_to_end::{env, eventually, kafka, redis, runner, unique};
use shared::Keyspace;

async fn active(prefix: &str) -> u64 {
    let mut conn = redis().await;
    redis::cmd("GET").arg(Keyspace::active_generation(prefix)).query_async(&mut conn).await.unwrap()
}

/// Sets (or with `None` removes) the layout field of `generation`'s meta.
async fn set_layout(prefix: &str, generation: u64, layout: Option<&str>) {
    let mut conn = redis().await;
    let meta = Keyspace::new(prefix.to_string(), generation).meta();
    let cmd = match layout {
        Some(layout) => redis::cmd("HSET").arg(&meta).arg("layout").arg(layout).to_owned(),
        None => redis::cmd("HDEL").arg(&meta).arg("layout").to_owned(),
    };
    let _: () = cmd.query_async(&mut conn).await.unwrap();
}

/// Removes the layout recorded beside the positions of every primary, as a projector written before it
/// recorded one there left them.
async fn forget_positions_layout(prefix: &str, generation: u64) {
    let mut conn = redis().await;
    let pattern = Keyspace::new(prefix.to_string(), generation).position("*");
    let hashes = conn.scan(&pattern).await.unwrap();
    assert!(!hashes.is_empty(), "the positions of {pattern}");
    for hash in hashes {
        let _: () = redis::cmd("HDEL").arg(&hash).arg("layout").query_async(&mut conn).await.unwrap();
    }
}

async fn meta_layout(prefix: &str, generation: u64) -> Option<String> {
    let mut conn = redis().await;
    let meta = Keyspace::new(prefix.to_string(), generation).meta();
    redis::cmd("HGET").arg(&meta).arg("layout").query_async(&mut conn).await.unwrap()
}

async fn status(app: &end_to_end::api::TestApp) -> u16 {
    app.get("/v1/studies", Some(ACME_KEY)).await.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_written_before_layouts_were_recorded_is_layout_one_to_both_binaries() {
    let world = World::start(&fixture::dataset()).await;
    let generation = active(&world.prefix).await;
    let mut conn = redis().await;
    let meta = Keyspace::new(world.prefix.clone(), generation).meta();
    let written: Option<String> = redis::cmd("HGET").arg(&meta).arg("layout").query_async(&mut conn).await.unwrap();
    let layout = shared::layout::LAYOUT.to_string();
    assert_eq!(written, Some(layout), "a new read model records its layout before it is served");
    // The field gone, as in a read model written before it existed (nor beside its positions): both
    // binaries start on it and use it, as layout 1.
    set_layout(&world.prefix, generation, None).await;
    forget_positions_layout(&world.prefix, generation).await;
    let api = spawn_app(config(&world.prefix, &env("REDIS_URL"))).await;
    eventually(Duration::from_secs(20), "the new API to serve", || async { (status(&api).await == 200).then_some(()) })
        .await;
    assert!(!world.projector.has_ended());
    let group = world.projector.group().to_string();
    let restarted = runner::spawn(runner::config(&world.topics, &world.prefix, &group)).await;
    // Published past the World's own projector, which may not be the one whose share it falls in.
    let study = completed_study(ACME, "s_after", "2026-05-01T00:00:00Z").messages;
    kafka::publish(&kafka::producer(), &world.topics, &study).await;
    eventually(Duration::from_secs(30), "the new study projected and served", || async {
        let (code, body) = api.json("/v1/studies", ACME_KEY).await;
        (code == 200 && body.to_string().contains("s_after")).then_some(())
    })
    .await;
    assert!(!restarted.has_ended(), "the second projector runs on it");
    assert_eq!(meta_layout(&world.prefix, generation).await, None, "nothing said it was another layout than 1");
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_whose_meta_redis_lost_keeps_its_layout_from_the_positions_and_gets_it_back() {
    let world = World::start(&fixture::dataset()).await;
    let World { projector, app, prefix, topics, .. } = world;
    let generation = active(&prefix).await;
    let keys = Keyspace::new(prefix.clone(), generation);
    let group = projector.group().to_string();
    projector.stop().await;
    // The meta lost (a cluster keeps it on one primary, which may be flushed or rolled back alone) while no
    // projector runs; every primary's positions are still there.
    let mut conn = redis().await;
    let _: () = redis::cmd("DEL").arg(keys.meta()).query_async(&mut conn).await.unwrap();
    let restarted = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    let layout = shared::layout::LAYOUT.to_string();
    eventually(Duration::from_secs(30), "the layout written back at the start", || async {
        (meta_layout(&prefix, generation).await == Some(layout.clone())).then_some(())
    })
    .await;
    // Projected in the layout the generation has: a new aggregate's owner is a field of its bucket's hash,
    // never a key of its own beside them (as in layout 1).
    let study = completed_study(ACME, "s_after_loss", "2026-05-01T00:00:00Z").messages;
    kafka::publish(&kafka::producer(), &topics, &study).await;
    eventually(Duration::from_secs(30), "the new study projected and served", || async {
        let (code, body) = app.json("/v1/studies", ACME_KEY).await;
        (code == 200 && body.to_string().contains("s_after_loss")).then_some(())
    })
    .await;
    let topic = shared::Topic::Study;
    let bucket = keys.owners(topic, shared::owners::bucket("s_after_loss"));
    let field: Option<String> =
        redis::cmd("HGET").arg(&bucket).arg("s_after_loss").query_async(&mut conn).await.unwrap();
    assert_eq!(field.as_deref(), Some(ACME), "the owner is a field");
    let key: bool = redis::cmd("EXISTS").arg(keys.owner(topic, "s_after_loss")).query_async(&mut conn).await.unwrap();
    assert!(!key, "no owner key beside the fields");
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_neither_binary_reads_is_refused_with_one_line_at_start_by_commands_and_at_a_switch_and_never_misread()
{
    let world = World::start(&fixture::dataset()).await;
    let World { projector, app, prefix, topics, .. } = world;
    let generation = active(&prefix).await;
    assert_eq!(status(&app).await, 200);

    // A newer layout (as a newer projector's rebuild would write): an API that starts on it serves nothing
    // of it and is not ready; a projector refuses to start, with one line naming both versions.
    let unread = (shared::layout::READS.end() + 1).to_string();
    let reads = format!("reads version {} to {}", shared::layout::READS.start(), shared::layout::READS.end());
    set_layout(&prefix, generation, Some(&unread)).await;
    let starting = spawn_app(config(&prefix, &env("REDIS_URL"))).await;
    for _ in 0..5 {
        assert_eq!(status(&starting).await, 503, "a layout it does not read is not served");
    }
    let ready = starting.admin_get("/readyz").await;
    assert_eq!(ready.status(), 503);
    assert!(ready.text().await.unwrap().contains("layout"), "readiness says why");
    let refused = runner::run(runner::config(&topics, &prefix, &unique("g"))).await.expect_err("refused at start");
    let line = refused.to_string();
    assert!(
        line.contains(&format!("layout version {unread};")) && line.contains(&format!("projector {reads}")),
        "{line}"
    );
    assert!(!line.contains('\n'), "one line: {line}");
    // The operator's commands: those that use the generation refuse with the same line; `status`, which an
    // operator asks first, says which layout it found and that this build does not read it.
    let group = unique("ops");
    for command in [&["digest"][..], &["dlq", "replay"][..]] {
        let run = runner::command(&topics, &prefix, &group, command);
        let output =
            tokio::task::spawn_blocking(move || runner::output_within(run, Duration::from_secs(60))).await.unwrap();
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{command:?} refuses: {said}");
        let line = said
            .lines()
            .find(|l| l.contains(&format!("layout version {unread};")))
            .unwrap_or_else(|| panic!("{command:?}: {said}"));
        assert!(line.contains(&format!("projector {reads}")), "{command:?}: {line}");
    }
    let (code, json) = runner::status_of(&topics, &prefix, &group, &["-o", "json"], Duration::from_secs(60)).await;
    assert_eq!(code, 5, "a layout this projector does not read: {json}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("status is JSON");
    assert_eq!((&json["activeLayout"], &json["layoutRead"]), (&serde_json::json!(unread), &serde_json::json!(false)));
    let (_, text) = runner::status_of(&topics, &prefix, &group, &[], Duration::from_secs(60)).await;
    let (first, last) = (shared::layout::READS.start(), shared::layout::READS.end());
    let said = format!("layout: {unread}, which this projector does not read (it reads {first} to {last})");
    assert!(text.contains(&said), "{text}");
    // The API that served the generation before goes on: a generation's layout never changes under it.
    assert_eq!(status(&app).await, 200);
    // Back to a layout it reads, the new API serves it.
    set_layout(&prefix, generation, Some("1")).await;
    eventually(Duration::from_secs(20), "served once the layout is one it reads", || async {
        (status(&starting).await == 200).then_some(())
    })
    .await;

    // A switch to a generation of a layout neither reads: the live projector stops with the line rather
    // than write into it, and the API answers 503 rather than serve it (or the generation before).
    let next = generation + 1;
    set_layout(&prefix, next, Some(&unread)).await;
    let mut conn = redis().await;
    let _: () =
        redis::cmd("SET").arg(Keyspace::active_generation(&prefix)).arg(next).query_async(&mut conn).await.unwrap();
    eventually(Duration::from_secs(20), "the running API to stop serving", || async {
        (status(&app).await == 503).then_some(())
    })
    .await;
    let ended = tokio::time::timeout(Duration::from_secs(30), projector.ended()).await.expect("the projector stops");
    let line = ended.expect_err("with an error").to_string();
    assert!(
        line.contains(&format!("generation {next}")) && line.contains(&format!("layout version {unread};")),
        "{line}"
    );
    for _ in 0..5 {
        assert_eq!(status(&app).await, 503);
    }
    // The pointer back (no rebuild after all): served again.
    let _: () = redis::cmd("SET")
        .arg(Keyspace::active_generation(&prefix))
        .arg(generation)
        .query_async(&mut conn)
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "served again", || async { (status(&app).await == 200).then_some(()) }).await;
}

/// One version for the workspace: both binaries print it with the commit they were built from, the
/// example overlay tags both images with it, the changelog has its entry, and the Dockerfile labels the
/// images with it (the OCI labels: version, revision, source, licenses).
#[test]
fn both_binaries_the_overlay_the_changelog_and_the_image_labels_agree_on_one_version() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let manifest = read("Cargo.toml");
    let package = manifest.split("[workspace.package]").nth(1).expect("a [workspace.package] table");
    let version = package
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("the workspace's version");
    let head = std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(&root).output();
    let commit =
        head.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let commit = commit.expect("a git checkout, whose commit the binaries were built from");
    let binaries = runner::binary();
    let dir = binaries.parent().expect("the binaries' directory");
    for name in ["projector", "query-api"] {
        let output = std::process::Command::new(dir.join(name)).arg("--version").output().unwrap();
        assert!(output.status.success(), "{name} --version");
        let said = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert_eq!(said, format!("{name} {version} ({commit})"), "{name} --version");
    }
    let overlay = read("deploy/kubernetes/overlays/example/kustomization.yaml");
    let tags: Vec<&str> = overlay.lines().filter_map(|l| l.trim().strip_prefix("newTag: ")).collect();
    assert_eq!(tags, [format!("\"{version}\""), format!("\"{version}\"")], "the overlay's image tags");
    assert!(read("CHANGELOG.md").contains(&format!("\n## [{version}] - ")), "the changelog's entry for {version}");
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains(&format!("ARG VERSION={version}\n")), "the image's version label");
    for label in ["version", "revision", "source", "licenses"] {
        assert!(dockerfile.contains(&format!("org.opencontainers.image.{label}=")), "the OCI label {label}");
    }
}
