//! Writes the API benchmark's read model through the projector's own apply path, loads the API's page
//! scripts, and prints, as shell `export` lines, the key, ids, Redis keys and script digests the
//! benchmark needs.

use anyhow::Result;
use benchmarks::{apply, stream};
use clap::Parser;
use redis::Script;
use shared::redis_url::Target;

#[derive(Parser)]
#[command(about = "Seeds the API benchmark's read model and prints what the benchmark script needs.")]
struct Args {
    /// The read model's Redis.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: String,
    /// Key prefix to write under (the API's KEY_PREFIX).
    #[arg(long)]
    prefix: String,
    /// Completed studies of the organization.
    #[arg(long, default_value_t = 200)]
    studies: usize,
    /// Interviews, each with a video and a transcript, of its first study.
    #[arg(long, default_value_t = 100)]
    interviews: usize,
    /// More organizations, each with its own API key and 20 completed studies (for the API's memory with
    /// many keys in use).
    #[arg(long, default_value_t = 0)]
    organizations: usize,
    /// Where to write those organizations' API keys, one a line.
    #[arg(long, requires = "organizations")]
    keys_out: Option<std::path::PathBuf>,
    /// The read model's layout: this build's, or an earlier one for a query API of an earlier revision.
    #[arg(long, env = "LAYOUT", default_value_t = shared::layout::LAYOUT)]
    layout: u32,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let (org, secret) = ("org-api-bench", "api-bench-secret-0001");
    let mut messages = stream::api_dataset(org, secret, args.studies, args.interviews);
    let others: Vec<(String, String)> = (0..args.organizations)
        .map(|i| (format!("org-api-bench-{i:04}"), format!("api-bench-org-secret-{i:04}")))
        .collect();
    for (org, secret) in &others {
        messages.extend(stream::api_dataset(org, secret, 20, 0));
    }
    if let Some(path) = &args.keys_out {
        let lines: String = others.iter().map(|(_, secret)| format!("{secret}\n")).collect();
        std::fs::write(path, lines)?;
    }
    let store = apply::store_of_layout(&Target::Single(args.redis_url.clone()), &args.prefix, args.layout).await?;
    let keys = store.keys().clone();
    let mut conn = store.conn();
    let mut pipeline = apply::Pipeline::new(store);
    for batch in messages.chunks(1000) {
        pipeline.apply(batch).await?;
    }
    let sha = |source: &str| Script::new(source).get_hash().to_string();
    let (studies_sha, interviews_sha, one_sha) =
        (sha(query_api::STUDIES_PAGE), sha(query_api::INTERVIEWS_PAGE), sha(query_api::ONE_INTERVIEW));
    for source in [query_api::STUDIES_PAGE, query_api::INTERVIEWS_PAGE, query_api::ONE_INTERVIEW] {
        Script::new(source).prepare_invoke().load_async(&mut conn).await?;
    }
    let study = format!("{org}-s000");
    let interview = format!("{study}-i00");
    let exports = [
        ("API_KEY", secret.to_string()),
        ("STUDY_ID", study.clone()),
        ("INTERVIEW_ID", interview.clone()),
        ("STUDIES_KEY", keys.studies(org)),
        ("STUDY_DOCS_KEY", keys.study_documents(org)),
        ("INTERVIEWS_KEY", keys.interviews(org, &study)),
        ("INTERVIEW_DOCS_KEY", keys.interview_documents(org)),
        ("TRANSCRIPT_KEY", keys.transcript(org, &interview)),
        ("TRANSCRIPT_PREFIX", keys.transcript(org, "")),
        ("ORG_EPOCH_KEY", keys.org_epoch(org)),
        ("REWRITTEN_KEY", keys.transcripts_rewritten(org)),
        ("STUDIES_PAGE_SHA", studies_sha),
        ("INTERVIEWS_PAGE_SHA", interviews_sha),
        ("ONE_INTERVIEW_SHA", one_sha),
    ];
    for (name, value) in exports {
        println!("export {name}='{value}'");
    }
    Ok(())
}
