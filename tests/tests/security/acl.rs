//! The users of deploy/redis/users.acl (which `scripts/stack up` loads into the stack's Redis) may do no
//! more than the file says: no flush, no reconfiguring, no key outside `rm:*`, no writes for the API's
//! user, not even through a script; the projector's operator commands (`generations --delete` among them)
//! run as its user; a projector whose
//! user may not run `INFO` projects and heals all the same and says so once; a write its user may not
//! finish writes nothing and waits, as does one that may not read a transcript back; and the file loads
//! as an `aclfile`.

use std::process::Command;
use std::time::Duration;

use end_to_end::api::World;
use end_to_end::events::{event, key_sha256, Outgoing};
use end_to_end::fixture::{self, ACME, ACME_KEY};
use end_to_end::kafka::{self, Topics};
use end_to_end::rediss::{admin, connect_as, prefix, projector_args, run_projector, tls, USERS};
use end_to_end::runner::{self, KillOnDrop};
use end_to_end::{env, eventually, unique};
use redis::Value as Reply;
use serde_json::{json, Value};
use shared::connection::Connection;
use shared::{Keyspace, Topic};

/// What `ACL DRYRUN` says of `user` running `command`: `None` when it may.
async fn dry_run(admin: &mut Connection, user: &str, command: &[&str]) -> Option<String> {
    let reply: Reply = redis::cmd("ACL").arg("DRYRUN").arg(user).arg(command).query_async(admin).await.unwrap();
    match reply {
        Reply::Okay => None,
        other => Some(redis::from_redis_value::<String>(other).unwrap_or_else(|e| format!("{e}"))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_may_not_flush_reconfigure_run_their_own_scripts_or_reach_other_keys() {
    let mut admin = admin().await;
    let key = format!("{}:x", prefix());
    // Asked of Redis rather than run: a FLUSHALL let through would empty the stack under the other tests.
    let never: [&[&str]; 10] = [
        &["FLUSHALL"],
        &["FLUSHDB"],
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
        &["CONFIG", "GET", "maxmemory"],
        &["KEYS", "*"],
        &["DEBUG", "SLEEP", "0"],
        &["EVAL", "return 1", "0"],
        &["SCRIPT", "FLUSH"],
        &["ACL", "LIST"],
        &["PUBLISH", "channel", "message"],
    ];
    for user in ["projector", "query-api"] {
        for command in never {
            assert!(dry_run(&mut admin, user, command).await.is_some(), "{user} may run {command:?}");
        }
        let elsewhere = dry_run(&mut admin, user, &["GET", "elsewhere:x"]).await.unwrap_or_default();
        assert!(elsewhere.contains("no permissions to access"), "{user} reaches keys outside rm:*: {elsewhere}");
    }
    for write in [&["SET", &key, "1"][..], &["DEL", &key], &["HSET", &key, "f", "v"], &["ZADD", &key, "1", "m"]] {
        assert!(dry_run(&mut admin, "query-api", write).await.is_some(), "query-api may write: {write:?}");
        assert_eq!(dry_run(&mut admin, "projector", write).await, None, "the projector may write {write:?}");
    }

    // As the users themselves, over TLS: what is refused is refused, and a script the API's user loads
    // cannot write either, since a script may run only its user's commands.
    let (mut projector, mut api) =
        (connect_as(&env("REDIS_PROJECTOR_TLS_URL")).await, connect_as(&env("REDIS_QUERY_API_TLS_URL")).await);
    let refused = |result: redis::RedisResult<Reply>| result.is_err_and(|e| e.code() == Some("NOPERM"));
    assert!(refused(redis::cmd("CONFIG").arg("GET").arg("maxmemory").query_async(&mut projector).await));
    assert!(refused(redis::cmd("GET").arg("elsewhere:x").query_async(&mut projector).await));
    assert!(refused(redis::cmd("SET").arg(&key).arg(1).query_async(&mut api).await));
    let write = redis::Script::new("return redis.call('SET', KEYS[1], 'written')");
    let scripted: redis::RedisResult<Reply> = write.key(&key).invoke_async(&mut api).await;
    // Redis 7.0 says it "can't run this command", 8.2 that the user "has no permissions to run" it.
    let said = scripted.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(said.contains("can't run this command") || said.contains("no permissions to run"), "{scripted:?}");
    let unwritten: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut api).await.unwrap();
    assert_eq!(unwritten, None, "the script wrote nothing");
    let _: () = redis::cmd("SET").arg(&key).arg("by the projector").query_async(&mut projector).await.unwrap();
    let read: String = redis::cmd("GET").arg(&key).query_async(&mut api).await.unwrap();
    assert_eq!(read, "by the projector");
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut projector).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_whose_user_may_not_run_info_projects_heals_and_says_so_once() {
    let mut admin = admin().await;
    let user = unique("projector-no-info");
    let rules = USERS.lines().find_map(|line| line.strip_prefix("user projector ")).expect("the projector's user");
    let mut setuser = redis::cmd("ACL");
    setuser.arg("SETUSER").arg(&user).arg("reset");
    for rule in rules.split_whitespace() {
        setuser.arg(rule.replace("CHANGE-ME", "no-info-password"));
    }
    let _: () = setuser.arg("-info").query_async(&mut admin).await.unwrap();

    let topics = Topics::create().await;
    let prefix = prefix();
    let args = projector_args(&topics, &prefix, &format!("rediss://{user}:no-info-password@127.0.0.1:{}", tls_port()));
    let log = std::env::temp_dir().join(format!("{user}.log"));
    let mut command = Command::new(runner::binary());
    command.args(args).args(["--redis-ca-file", &env("TLS_CA_FILE")]).env("RUST_LOG", "warn");
    let projector = KillOnDrop(command.stderr(std::fs::File::create(&log).unwrap()).spawn().expect("projector starts"));

    let messages = [
        fixture::key(ACME, "k1", "no-info-key-1").messages,
        fixture::completed_study(ACME, "s1", "2026-03-01T10:00:00Z").messages,
    ]
    .concat();
    kafka::publish(&kafka::producer(), &topics, &messages).await;
    let keys = Keyspace::new(prefix, 1);
    eventually(Duration::from_secs(60), "the key projected and the read model complete", || {
        let mut admin = admin.clone();
        let (key, healing) = (keys.api_key_sha(&key_sha256("no-info-key-1")), keys.healing());
        async move {
            let (found, entries): (bool, u64) =
                redis::pipe().exists(key).hlen(healing).query_async(&mut admin).await.ok()?;
            // Nothing but the field that keeps the healing state (`shared::keys::HEALING_OPENED`).
            (found && entries == 1).then_some(())
        }
    })
    .await;
    // Its positions gone (as a Redis that lost data would have them): a loss, told by the positions alone,
    // after which the eviction check is asked again.
    let _: () = redis::cmd("DEL").arg(keys.position("position-0")).query_async(&mut admin).await.unwrap();
    kafka::publish(&kafka::producer(), &topics, &[fixture::key_created(ACME, "k2", 1, "no-info-key-2")]).await;
    eventually(Duration::from_secs(30), "the loss to be told", || async {
        std::fs::read_to_string(&log).unwrap().contains("lost data").then_some(())
    })
    .await;
    // A few looks more (several a second) and batches.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut projector = projector;
    assert!(projector.0.try_wait().unwrap().is_none(), "the projector runs on");
    projector.sigkill();
    let _: () = redis::cmd("ACL").arg("DELUSER").arg(&user).query_async(&mut admin).await.unwrap();
    let logged = std::fs::read_to_string(&log).unwrap();
    let count = |what: &str| logged.lines().filter(|line| line.contains(what)).count();
    assert_eq!(count("maxmemory-policy is not checked"), 1, "{logged}");
    assert_eq!(count("losses are told by the recorded positions alone"), 1, "{logged}");
    assert!(!logged.contains("no-info-password"), "{logged}");
    std::fs::remove_file(&log).unwrap();
}

/// `s_acl` of ACME, completed, then retitled at sequence 4 (with a number for a title when `poison`) and 5.
fn retitled_twice(poison: bool) -> Vec<Outgoing> {
    let title = if poison { json!(42) } else { json!("fixed") };
    let retitle = |sequence: u64, title: Value| {
        event(
            Topic::Study,
            ACME,
            "s_acl",
            sequence,
            "study.retitled",
            "2026-04-01T00:00:00Z",
            json!({"internalTitle": title}),
        )
    };
    let mut messages = fixture::completed_study(ACME, "s_acl", "2026-03-09T00:00:00Z").messages;
    messages.extend([retitle(4, title), retitle(5, json!("last"))]);
    messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projectors_operator_commands_run_as_its_user() {
    let url = env("REDIS_PROJECTOR_TLS_URL");
    let (projector_url, api_url) = (url.clone(), env("REDIS_QUERY_API_TLS_URL"));
    let mut messages = fixture::dataset();
    messages.extend(retitled_twice(true));
    let world = World::start_configured(
        &messages,
        &prefix(),
        |projector| {
            (projector.redis.url, projector.redis.cluster, projector.redis.tls) =
                (projector_url.into(), false, tls(false))
        },
        |api| (api.redis.url, api.redis.cluster, api.redis.tls) = (api_url.into(), false, tls(false)),
    )
    .await;
    let mut config = runner::config(&world.topics, &world.prefix, &unique("g"));
    (config.redis.url, config.redis.cluster, config.redis.tls) = (url.clone().into(), false, tls(false));
    assert_eq!(runner::rebuild(config).await.expect("the rebuild runs as the projector's user"), Some(2));
    let mut admin = admin().await;
    let expected = runner::digest_of(&mut admin, &Keyspace::new(world.prefix.clone(), 2)).await.unwrap();
    let ca = env("TLS_CA_FILE");
    let run = |command: Vec<String>| {
        let (topics, prefix, url, ca) = (world.topics.clone(), world.prefix.clone(), url.clone(), ca.clone());
        async move {
            let extra: Vec<&str> =
                ["--redis-ca-file", ca.as_str()].into_iter().chain(command.iter().map(String::as_str)).collect();
            let output = run_projector(&topics, &prefix, &url, &extra).await;
            let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
            assert!(output.status.success(), "{command:?}: {stdout}{stderr}");
            stdout.into_owned()
        }
    };
    let words = |line: &str| line.split(' ').map(String::from).collect::<Vec<_>>();
    assert!(run(words("digest")).await.contains(&expected.sha256), "the digest is not {expected}");
    // A key of generation 1 left after the rebuild deleted it: listed and deleted as this user.
    let left = Keyspace::new(world.prefix.clone(), 1).meta();
    let _: () = redis::cmd("HSET").arg(&left).arg("layout").arg("3").query_async(&mut admin).await.unwrap();
    let listed: Value = serde_json::from_str(&run(words("generations -o json")).await).unwrap();
    let expected_list = json!([{"generation": 1, "role": "leftBehind"}, {"generation": 2, "role": "active"}]);
    assert_eq!(listed, expected_list);
    let deleted = run(words("generations --delete 1")).await;
    assert!(deleted.starts_with("deleted generation 1 (1 keys)"), "{deleted}");
    let gone: bool = redis::cmd("EXISTS").arg(&left).query_async(&mut admin).await.unwrap();
    assert!(!gone, "generation 1's meta is deleted");
    // One above the active generation, left by a rebuild that stopped (the counter handed it out): deleted
    // only once nobody writes it, which reads the live projectors' reports (marking them `~since`) and the
    // rebuild's state and lock, all as this user.
    let above = Keyspace::new(world.prefix.clone(), 3).meta();
    let _: () = redis::cmd("HSET").arg(&above).arg("layout").arg("4").query_async(&mut admin).await.unwrap();
    let counter = Keyspace::generation_counter(&world.prefix);
    let _: () = redis::cmd("SET").arg(&counter).arg(3).query_async(&mut admin).await.unwrap();
    let deleted = run(words("generations --delete 3")).await;
    assert!(deleted.contains("deleted generation 3 (1 keys)"), "{deleted}");
    let gone: bool = redis::cmd("EXISTS").arg(&above).query_async(&mut admin).await.unwrap();
    assert!(!gone, "generation 3's meta is deleted");
    // `status` exits with what it found (a dead letter waits here: 2), never 1, a refused command.
    let output = run_projector(&world.topics, &world.prefix, &url, &["--redis-ca-file", ca.as_str(), "status"]).await;
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(2), "status: {said}");
    let listed: Value = serde_json::from_str(&run(words("dlq list -o json")).await).unwrap();
    let letter = &listed.as_array().expect("dead letters")[0];
    let at = format!("{}/{}@{}", letter["topic"].as_str().unwrap(), letter["partition"], letter["offset"]);
    let file = std::env::temp_dir().join(unique("fixed-title"));
    std::fs::write(&file, &retitled_twice(false)[3].value).unwrap();
    // The dry run lists the letter with its corrected value, as this user, and publishes nothing.
    let dry: Value = serde_json::from_str(
        &run(words(&format!("dlq replay --dry-run --corrected {at}={} -o json", file.display()))).await,
    )
    .unwrap();
    let dry = dry.as_array().expect("the letters a replay would publish");
    assert!(dry.len() == listed.as_array().unwrap().len() && dry[0]["corrected"] == true, "{dry:?}");
    let replayed: Value =
        serde_json::from_str(&run(words(&format!("dlq replay --corrected {at}={} -o json", file.display()))).await)
            .unwrap();
    assert!(replayed["repaired"].as_u64().unwrap() + replayed["applied"].as_u64().unwrap() >= 1, "{replayed}");
    let repaired = run(words(&format!("repair --organization {ACME}"))).await;
    assert!(repaired.contains(&format!("repaired organization {ACME}")), "{repaired}");
    assert_eq!(world.app.json("/v1/studies", ACME_KEY).await.0, 200, "the API serves the new generation");
    assert_eq!(world.app.json("/v1/studies/s_acl", ACME_KEY).await.1["internalTitle"], "last");
    // A read that finds no epoch (a study not completed) asks for the primary's positions (`HVALS`) as
    // the API's user: 404, not a 503 from a command the user may not run.
    assert_eq!(
        world.app.json("/v1/studies/nope/interviews", ACME_KEY).await.0,
        404,
        "the positions read as the API's user"
    );
}

/// The TLS port of the stack's Redis.
fn tls_port() -> String {
    env("REDIS_TLS_URL").rsplit_once(':').expect("a port").1.trim_end_matches('/').to_string()
}

#[test]
fn the_acl_file_loads_into_a_redis_of_its_own_as_an_aclfile() {
    let dir = std::env::temp_dir().join(unique("aclfile"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("users.acl"), USERS).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let server = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port, "--save", "", "--appendonly", "no"])
        .args(["--dir", dir.to_str().unwrap(), "--aclfile", dir.join("users.acl").to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let _server = KillOnDrop(server);
    let cli = |args: &[&str]| {
        let output = Command::new("redis-cli").args(["-p", &port]).args(args).output().expect("redis-cli runs");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cli(&["PING"]) != "PONG" {
        assert!(std::time::Instant::now() < deadline, "redis-server did not load users.acl");
        std::thread::sleep(Duration::from_millis(50));
    }
    let users = cli(&["ACL", "USERS"]);
    assert_eq!(users.lines().collect::<Vec<_>>(), ["default", "projector", "query-api"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The projector's Redis user loses a command the write script needs (`ZADD`, as after an ACL change):
/// the script must write nothing rather than stop halfway (the state ahead of the index, after which
/// every retry would take the events for duplicates and the studies would never be listed), and the
/// events wait, none set aside, until the user may run it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_projectors_user_may_not_finish_writes_nothing_and_is_applied_whole_once_allowed() {
    let own = end_to_end::own_redis::OwnRedis::start();
    own.cli(&["ACL", "SETUSER", "limited", "on", ">limited-0123456789", "~*", "&*", "+@all", "-zadd"]);
    let (org, at) = ("org", "2026-05-01T10:00:00Z");
    let messages: Vec<_> = (0..20)
        .flat_map(|i| {
            let id = format!("s{i:02}");
            [
                event(Topic::Study, org, &id, 1, "study.created", at, json!({"internalTitle": "T"})),
                event(Topic::Study, org, &id, 2, "study.launched", at, json!({})),
                event(Topic::Study, org, &id, 3, "study.completed", at, json!({"completedAt": at})),
            ]
        })
        .collect();
    let topics = Topics::holding(&messages).await;
    let prefix = unique("limited");
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    config.redis.url = format!("redis://limited:limited-0123456789@127.0.0.1:{}", own.port()).into();
    config.redis.cluster = false;
    let running = runner::spawn(config).await;
    eventually(Duration::from_secs(60), "the refused writes to be retried (or taken)", || async {
        let snapshot = running.snapshot();
        (snapshot.retries >= 3 || running.consumed() >= messages.len() as u64).then_some(())
    })
    .await;
    let mut conn = redis::Client::open(own.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let keys = Keyspace::new(prefix, 1);
    let state: Option<String> = redis::cmd("HGET")
        .arg(keys.aggregate(Topic::Study, org, "s00"))
        .arg("seq")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(state, None, "a write stopped by the ACL wrote nothing");
    assert_eq!(running.snapshot().dead_lettered, 0, "no event is at fault");

    own.cli(&["ACL", "SETUSER", "limited", "+zadd"]);
    running.wait_until_consumed(messages.len() as u64, Duration::from_secs(60)).await;
    let snapshot = running.snapshot();
    assert_eq!((snapshot.applied, snapshot.duplicates, snapshot.dead_lettered), (60, 0, 0), "{snapshot:?}");
    let listed: u64 = redis::cmd("ZCARD").arg(keys.studies(org)).query_async(&mut conn).await.unwrap();
    assert_eq!(listed, 20, "every completed study listed");
    running.stop().await;
}

/// A projector whose user may not `GETRANGE` (an ACL of the release before layout 6) cannot read back the
/// transcript of an interview entering its list: it writes nothing of it and retries, no event set aside,
/// and its readiness says it is stuck, until the user may; then the interview is served with its
/// transcript compressed, and the projector is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_whose_user_may_not_read_a_transcript_back_waits_and_serves_it_once_allowed() {
    let own = end_to_end::own_redis::OwnRedis::start();
    own.cli(&["ACL", "SETUSER", "old-acl", "on", ">old-acl-0123456789", "~*", "&*", "+@all", "-getrange"]);
    let (org, at) = ("org", "2026-05-01T10:00:00Z");
    let said = json!({"messageId": "m1", "role": "participant", "text": "It was fine", "startSeconds": 1});
    let messages = vec![
        event(Topic::Interview, org, "i1", 1, "interview.started", at, json!({"studyId": "s1"})),
        event(Topic::Interview, org, "i1", 2, "interview.message_recorded", at, said),
        event(Topic::Interview, org, "i1", 3, "interview.completed", at, json!({})),
    ];
    let topics = Topics::holding(&messages).await;
    let prefix = unique("old-acl");
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    config.redis.url = format!("redis://old-acl:old-acl-0123456789@127.0.0.1:{}", own.port()).into();
    config.redis.cluster = false;
    config.http_addr = "127.0.0.1:0".parse().unwrap();
    config.stall_after_secs = 1;
    let running = runner::spawn(config).await;
    let readyz = format!("http://{}/readyz", running.http.expect("an HTTP server"));
    eventually(Duration::from_secs(60), "the batch to be retried", || async {
        (running.snapshot().retries >= 3).then_some(())
    })
    .await;
    let stalled = eventually(Duration::from_secs(30), "readiness to report the stall", || async {
        let response = reqwest::get(&readyz).await.expect("readiness answers");
        (response.status() == 503).then_some(response.text().await.unwrap())
    })
    .await;
    assert!(stalled.contains("\"stuck\""), "{stalled}");
    let mut conn = redis::Client::open(own.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let keys = Keyspace::new(prefix, 1);
    let listed: u64 = redis::cmd("ZCARD").arg(keys.interviews(org, "s1")).query_async(&mut conn).await.unwrap();
    assert_eq!((listed, running.consumed(), running.snapshot().dead_lettered), (0, 0, 0), "nothing yet");

    own.cli(&["ACL", "SETUSER", "old-acl", "+getrange"]);
    running.wait_until_consumed(messages.len() as u64, Duration::from_secs(60)).await;
    let listed: u64 = redis::cmd("ZCARD").arg(keys.interviews(org, "s1")).query_async(&mut conn).await.unwrap();
    let stored: Vec<u8> = redis::cmd("GET").arg(keys.transcript(org, "i1")).query_async(&mut conn).await.unwrap();
    assert_eq!(listed, 1);
    assert!(shared::codec::is_compressed(&stored), "served: compressed");
    assert!(shared::codec::transcript(&stored).unwrap().ends_with("It was fine\n"));
    assert_eq!(running.snapshot().dead_lettered, 0, "no event is at fault");
    eventually(Duration::from_secs(30), "readiness again", || async {
        (reqwest::get(&readyz).await.expect("readiness answers").status() == 200).then_some(())
    })
    .await;
    running.stop().await;
}
