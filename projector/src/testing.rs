//! What tests of the projector (its own, and the end-to-end suite's with `test-support`) use to check
//! MSK IAM logins where no MSK runs: a broker's SASL login that hands over the tokens it is given, and a
//! SigV4 verifier of its own for them (not the signer's code judging itself).

use std::collections::BTreeMap;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// RFC 3986 percent-encoding, as SigV4's canonical query string wants it.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A token as MSK reads it: the base64url (unpadded) of a presigned `GET https://kafka.<region>.amazonaws.com/`.
/// Returns its query parameters once its signature verifies with `secret`.
pub fn verified(token: &str, region: &str, secret: &str) -> BTreeMap<String, String> {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).expect("base64url without padding");
    let url = String::from_utf8(url).unwrap();
    let host = format!("kafka.{region}.amazonaws.com");
    let query = url.strip_prefix(&format!("https://{host}/?")).unwrap_or_else(|| panic!("not an MSK URL: {url}"));
    let params: BTreeMap<String, String> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    // The signature covers every parameter but itself and the user agent added after signing.
    let canonical_query: Vec<String> = params
        .iter()
        .filter(|(k, _)| *k != "X-Amz-Signature" && *k != "User-Agent")
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    let canonical =
        format!("GET\n/\n{}\nhost:{host}\n\nhost\n{}", canonical_query.join("&"), hex::encode(Sha256::digest(b"")));
    let amz_date = &params["X-Amz-Date"];
    let scope = format!("{}/{region}/kafka-cluster/aws4_request", &amz_date[..8]);
    let to_sign =
        format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), &amz_date[..8]);
    for part in [region, "kafka-cluster", "aws4_request"] {
        key = hmac(&key, part);
    }
    assert_eq!(hex::encode(hmac(&key, &to_sign)), params["X-Amz-Signature"], "the signature of {url}");
    params
}

/// A broker's SASL login, as far as a client's first message: it answers ApiVersions (version 3) with
/// ApiVersions, SaslHandshake and SaslAuthenticate, offers OAUTHBEARER on SaslHandshake, and hands over
/// the token of SaslAuthenticate's client message (`n,,\x01auth=Bearer <token>\x01\x01`), then hangs up.
pub async fn sasl_login(tokens: mpsc::UnboundedSender<String>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let tokens = tokens.clone();
            tokio::spawn(async move {
                loop {
                    let Ok(size) = socket.read_i32().await else { return };
                    let mut frame = vec![0; size.max(0) as usize];
                    if frame.len() < 8 || socket.read_exact(&mut frame).await.is_err() {
                        return;
                    }
                    let mut answer = frame[4..8].to_vec(); // the correlation id
                    match frame[..2] {
                        [0, 18] => {
                            answer.extend([0, 0, 4]); // no error; three keys (compact array)
                            for (key, max) in [(18u8, 3u8), (17, 1), (36, 0)] {
                                answer.extend([0, key, 0, 0, 0, max, 0]);
                            }
                            answer.extend([0, 0, 0, 0, 0]); // no throttle, no tagged fields
                        }
                        [0, 17] => {
                            let mechanism = b"OAUTHBEARER";
                            answer.extend([0, 0, 0, 0, 0, 1, 0, mechanism.len() as u8]);
                            answer.extend(mechanism);
                        }
                        [0, 36] => {
                            let prefix = b"n,,\x01auth=Bearer ";
                            let Some(at) = frame.windows(prefix.len()).position(|w| w == prefix) else { return };
                            let token = String::from_utf8_lossy(&frame[at + prefix.len()..]);
                            let _ = tokens.send(token.trim_end_matches('\x01').to_string());
                            return;
                        }
                        _ => return,
                    }
                    let mut out = (answer.len() as i32).to_be_bytes().to_vec();
                    out.extend(answer);
                    if socket.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}
