//! From layout 6 a served interview's transcript is stored as a zstd frame, written whole by the projector
//! (the write script cannot append to a frame): when the interview enters its list, when a message comes
//! after it was served, when it leaves the list (stored whole again, for the script to append to) and
//! when it comes back. A transcript longer than an API chunk stays whole and is appended to. The API
//! serves every one of them as its WebVTT.

use end_to_end::api::World;
use end_to_end::fixture::{self, interview, Aggregate, ACME, ACME_KEY};
use end_to_end::{read_model, redis};
use serde_json::json;
use shared::Keyspace;

const STUDY: &str = "s_packed";

/// `a` with the participant's message `n`, `text` said from n to n + 0.5 seconds.
fn say(a: Aggregate, n: u64, text: &str) -> Aggregate {
    a.then(
        "interview.message_recorded",
        "2026-03-01T10:01:00Z",
        json!({"messageId": format!("m{n}"), "role": "participant", "text": text, "startSeconds": n,
            "endSeconds": n as f64 + 0.5}),
    )
}

/// The WebVTT of messages `texts` said as [`say`] says them.
fn webvtt(texts: &[String]) -> String {
    let cue = |(n, text): (usize, &String)| format!("\n00:00:{n:02}.000 --> 00:00:{n:02}.500\n{text}\n");
    format!("WEBVTT\n{}", texts.iter().enumerate().map(cue).collect::<String>())
}

struct Interview {
    aggregate: Aggregate,
    published: usize,
    texts: Vec<String>,
}

impl Interview {
    fn new(id: &str) -> Self {
        Self { aggregate: interview(ACME, id, STUDY, "2026-03-01T10:00:00Z"), published: 0, texts: Vec::new() }
    }

    fn say(&mut self, text: String) {
        self.aggregate = say(self.aggregate.clone(), self.texts.len() as u64, &text);
        self.texts.push(text);
    }

    fn then(&mut self, kind: &str) {
        self.aggregate = self.aggregate.clone().then(kind, "2026-03-01T11:00:00Z", json!({}));
    }

    async fn publish(&mut self, world: &mut World) {
        world.publish(&self.aggregate.messages[self.published..]).await;
        self.published = self.aggregate.messages.len();
    }
}

/// The transcript as stored: whether compressed, and its WebVTT.
async fn stored(world: &World, id: &str) -> (bool, String) {
    let key = Keyspace::new(world.prefix.clone(), 1).transcript(ACME, id);
    let bytes: Vec<u8> = redis::cmd("GET").arg(&key).query_async(&mut redis().await).await.unwrap();
    let compressed = shared::codec::is_compressed(&bytes);
    (compressed, read_model::transcript(&mut redis().await, &key).await.expect("a transcript"))
}

/// The organization's rewrite token (`Keyspace::transcripts_rewritten`): a long transcript being sent a
/// chunk at a time stops when it changes.
async fn rewritten(world: &World) -> Option<String> {
    let key = Keyspace::new(world.prefix.clone(), 1).transcripts_rewritten(ACME);
    redis::cmd("GET").arg(&key).query_async(&mut redis().await).await.unwrap()
}

/// What the interview's route serves as its transcript.
async fn served(world: &World, id: &str) -> Option<String> {
    let (status, one) = world.app.json(&format!("/v1/interviews/{id}"), ACME_KEY).await;
    (status == 200).then(|| one["transcriptAsWebVTT"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_transcript_is_stored_compressed_and_written_whole_by_every_change_that_reaches_it() {
    let setup = [fixture::completed_study(ACME, STUDY, "2026-03-02T09:00:00Z"), fixture::key(ACME, "k", ACME_KEY)];
    let mut world = World::start(&setup.into_iter().flat_map(|a| a.messages).collect::<Vec<_>>()).await;
    let mut talk = Interview::new("i_talk");
    for n in 0..5 {
        talk.say(format!("Answer {n}: I would buy it again"));
    }
    talk.publish(&mut world).await;
    assert_eq!(stored(&world, "i_talk").await, (false, webvtt(&talk.texts)), "not served: whole, appended to");

    talk.then("interview.completed");
    let token = rewritten(&world).await;
    talk.publish(&mut world).await;
    assert_eq!(stored(&world, "i_talk").await, (true, webvtt(&talk.texts)), "served: compressed");
    assert_eq!(served(&world, "i_talk").await, Some(webvtt(&talk.texts)));
    assert_eq!(rewritten(&world).await, token, "entering its list rewrites nothing anybody reads");

    talk.say("A word after the end & <more>".into());
    talk.publish(&mut world).await;
    let escaped = webvtt(&talk.texts).replace("& <more>", "&amp; &lt;more&gt;");
    assert_eq!(stored(&world, "i_talk").await, (true, escaped.clone()), "a message after completion: rewritten");
    let after_message = rewritten(&world).await;
    assert!(after_message.is_some() && after_message != token, "a served transcript rewritten: a new token");
    assert_eq!(served(&world, "i_talk").await, Some(escaped.clone()));

    talk.then("interview.hidden");
    talk.say("Said while hidden".into());
    talk.publish(&mut world).await;
    let hidden = format!("{escaped}\n00:00:06.000 --> 00:00:06.500\nSaid while hidden\n");
    assert_eq!(stored(&world, "i_talk").await, (false, hidden.clone()), "hidden: whole again, appended to");
    assert_eq!(served(&world, "i_talk").await, None, "hidden: not served");
    assert_ne!(rewritten(&world).await, after_message, "leaving its list rewrites it: a new token");

    talk.then("interview.unhidden");
    talk.publish(&mut world).await;
    assert_eq!(stored(&world, "i_talk").await, (true, hidden.clone()), "shown again: compressed");
    assert_eq!(served(&world, "i_talk").await, Some(hidden));

    // Two messages of 600,000 characters: longer than an API chunk (1 MiB), stored whole when served.
    let mut long = Interview::new("i_long");
    long.say("y".repeat(600_000));
    long.say("z".repeat(600_000));
    long.then("interview.completed");
    long.publish(&mut world).await;
    assert_eq!(stored(&world, "i_long").await, (false, webvtt(&long.texts)), "longer than a chunk: whole");
    long.say("And one more.".into());
    long.publish(&mut world).await;
    assert_eq!(stored(&world, "i_long").await, (false, webvtt(&long.texts)), "appended to, whole");
    assert_eq!(served(&world, "i_long").await, Some(webvtt(&long.texts)));
}
