//! The model: what the read model of one organization must hold after a scenario, written from the spec
//! independently of the projector's code.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use shared::Topic;

use super::{fmt, Expected, Listed, Scenario};

impl Scenario {
    /// The model: what the read model of `org` must hold.
    pub fn expected(&self, org: &str) -> Expected {
        let mut expected = Expected::default();
        let mut studies: Vec<(DateTime<Utc>, String, Value)> = Vec::new();
        let mut interviews: HashMap<String, Vec<Listed>> = HashMap::new();
        for h in self.histories.iter().filter(|h| h.org == org) {
            let created = h.events[0].1;
            let updated = h.events.last().unwrap().1;
            let has = |kind: &str| h.events.iter().any(|e| e.0 == kind);
            let last_of = |kinds: &[&str]| h.events.iter().rev().find(|e| kinds.contains(&e.0)).map(|e| e.0);
            match h.topic {
                Topic::Study => {
                    if has("study.deleted")
                        || last_of(&["study.completed", "study.reopened"]) != Some("study.completed")
                    {
                        continue;
                    }
                    let title = h.events.iter().rev().find_map(|e| e.2.get("internalTitle")).unwrap().clone();
                    let completed: DateTime<Utc> = h
                        .events
                        .iter()
                        .rev()
                        .find_map(|e| e.2.get("completedAt"))
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    let doc = json!({"id": h.id, "internalTitle": title, "completedOn": completed.format("%Y-%m-%d").to_string(),
                        "createdAt": fmt(&created), "updatedAt": fmt(&updated)});
                    studies.push((completed, h.id.clone(), doc));
                }
                Topic::Interview => {
                    let hidden = last_of(&["interview.hidden", "interview.unhidden"]) == Some("interview.hidden");
                    if has("interview.deleted") || hidden || !has("interview.completed") {
                        expected.invisible_interviews.push(h.id.clone());
                        continue;
                    }
                    let study = h.events[0].2["studyId"].as_str().unwrap().to_string();
                    let participant = h.events.iter().find(|e| e.0 == "interview.participant_identified").map(|e| {
                        let (first, last) = (e.2["firstName"].as_str(), e.2["lastName"].as_str());
                        let name = first.map(|f| match last.and_then(|l| l.chars().next()) {
                            Some(c) => format!("{f} {c}."),
                            None => f.to_string(),
                        });
                        json!({"id": e.2["participantId"], "name": name})
                    });
                    let facets = h
                        .events
                        .iter()
                        .rev()
                        .find(|e| e.0 == "interview.facets_updated")
                        .map(|e| e.2["facets"].clone());
                    let video = h
                        .events
                        .iter()
                        .rev()
                        .find(|e| e.0.starts_with("interview.video_"))
                        .filter(|e| e.0 == "interview.video_stored")
                        .map(|e| e.2.clone());
                    let cues: Vec<String> = h
                        .events
                        .iter()
                        .filter(|e| e.0 == "interview.message_recorded" && e.2["role"] == "participant")
                        .map(|e| {
                            let start = e.2["startSeconds"].as_f64().unwrap_or(0.0);
                            let end = e.2["endSeconds"].as_f64().unwrap_or(start);
                            let text = e.2["text"]
                                .as_str()
                                .unwrap()
                                .replace('&', "&amp;")
                                .replace('<', "&lt;")
                                .replace('>', "&gt;");
                            format!("\n{} --> {}\n{text}\n", vtt_time(start), vtt_time(end))
                        })
                        .collect();
                    let transcript = (!cues.is_empty()).then(|| format!("WEBVTT\n{}", cues.concat()));
                    let doc = json!({"id": h.id, "studyId": study, "participant": participant, "facets": facets.unwrap_or(json!([])),
                        "video": video, "createdAt": fmt(&created), "updatedAt": fmt(&updated)});
                    interviews.entry(study).or_default().push((created, h.id.clone(), doc, transcript));
                }
                Topic::ApiKey => {
                    let sha = h.events[0].2["keySha256"].as_str().unwrap().to_string();
                    if has("api_key.deleted") {
                        expected.revoked_keys.push(sha);
                    } else {
                        expected.live_keys.push(sha);
                    }
                }
            }
        }
        studies.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
        expected.studies = studies.into_iter().map(|(_, id, doc)| (id, doc)).collect();
        for (study, mut list) in interviews {
            list.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
            expected.interviews.insert(study, list.into_iter().map(|(_, id, doc, t)| (id, doc, t)).collect());
        }
        expected
    }
}

fn vtt_time(seconds: f64) -> String {
    let ms = (seconds * 1000.0).round() as u64;
    format!("{:02}:{:02}:{:02}.{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
}
