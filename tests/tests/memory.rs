//! The API's memory is bounded whatever a holder of a valid key asks for: made-up ids of any length are
//! answered 404 without growing what is kept, and a page of large transcripts is either served whole or
//! refused with the documented 400, within the page budget (`MAX_PAGE_MB`). Measured on the real binary's
//! process, from `/proc/<pid>/status`.

use end_to_end::api::{ApiProcess, World};
use end_to_end::fixture::{self, completed, completed_study, interview, ACME, ACME_KEY};
use end_to_end::redis;
use futures::StreamExt;
use redis::AsyncCommands;
use shared::Keyspace;

const MIB: u64 = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_requests_for_long_made_up_ids_leave_the_api_memory_within_its_bounds() {
    let world = World::start(&fixture::dataset()).await;
    let api = ApiProcess::spawn(&world.prefix, &["--read-cache-mb", "16"]).await;
    assert_eq!(api.get("/v1/studies", ACME_KEY).await.status(), 200);
    let before = api.memory("VmRSS");
    // 3,000 ids of 60 KB (each kept whole before, counted as 128 bytes: 180 MB) and 3,000 of 250 bytes
    // (kept as 404s, counted, within the cache's 16 MiB).
    let paths = (0..6000).map(|i| {
        let len = if i % 2 == 0 { 60_000 } else { 250 };
        let route = ["/v1/interviews/", "/v1/studies/"][i % 4 / 2];
        format!("{route}{i:0>len$}")
    });
    let statuses: Vec<u16> = futures::stream::iter(paths)
        .map(|path| {
            let api = &api;
            async move { api.get(&path, ACME_KEY).await.status().as_u16() }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(statuses.iter().all(|status| *status == 404), "every made-up id is not found");
    let grown = api.memory("VmRSS").saturating_sub(before);
    eprintln!("the API's resident memory grew by {} KiB", grown / 1024);
    assert!(grown < 48 * MIB, "the API grew by {} MiB", grown / MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_large_transcripts_is_served_whole_or_refused_within_the_page_budget() {
    const TRANSCRIPT: usize = 4_000_000;
    let interviews: Vec<String> = (0..8).map(|i| format!("i_big{i}")).collect();
    let mut messages = fixture::dataset();
    messages.extend(completed_study(ACME, "s_big", "2026-04-01T00:00:00Z").messages);
    for (i, id) in interviews.iter().enumerate() {
        messages.extend(completed(interview(ACME, id, "s_big", &format!("2026-03-0{}T00:00:00Z", i + 1))).messages);
    }
    let world = World::start(&messages).await;
    // Transcripts of 4 MB, as the projector would have appended them message after message.
    let keys = Keyspace::new(world.prefix.clone(), 1);
    let mut conn = redis().await;
    let transcript = format!("WEBVTT\n{}", "x".repeat(TRANSCRIPT - 7));
    for id in &interviews {
        let _: () = conn.set(keys.transcript(ACME, id), &transcript).await.unwrap();
    }
    let api = ApiProcess::spawn(&world.prefix, &["--max-page-mb", "8"]).await;
    assert_eq!(api.get("/v1/studies/s_big/interviews?pageSize=1", ACME_KEY).await.status(), 200);
    let before = api.memory("VmRSS");

    // The whole study, 32 MB: refused before anything is read, with the documented message.
    let refused = api.get("/v1/studies/s_big/interviews?pageSize=20", ACME_KEY).await;
    assert_eq!(refused.status(), 400);
    let message: String = refused.json().await.unwrap();
    assert!(message.contains("ask for a smaller pageSize"), "{message}");
    // Two transcripts, 8 MB, within the budget: served whole.
    let served = api.get("/v1/studies/s_big/interviews?pageSize=2&page=2", ACME_KEY).await;
    assert_eq!(served.status(), 200);
    let page: serde_json::Value = served.json().await.unwrap();
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|item| item["transcriptAsWebVTT"] == transcript.as_str()));

    // The reply from Redis and the body written from it, with room for the allocator: never the 32 MB
    // page, twice over, that reading it whole would take.
    let peak = api.memory("VmHWM").saturating_sub(before);
    eprintln!("the API's peak resident memory grew by {} KiB", peak / 1024);
    assert!(peak < 3 * 8 * MIB, "the API's peak grew by {} MiB", peak / MIB);
}
