//! TLS to the read model's Redis, as managed services offer it (`rediss://`), for both binaries: the
//! options they take ([`TlsOptions`]), the certificates read from those files once at start ([`Tls`]),
//! and which failures to connect no retry can cure ([`refusal`]: a certificate not trusted, a password
//! refused), so that a binary stops at start with one line saying so instead of retrying forever. Also
//! the crypto provider rustls needs, installed once per process.

use std::path::{Path, PathBuf};
use std::sync::Once;

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::redis_url::redact;
use crate::redis_url::Target;

/// What a `rediss://` connection trusts and presents, as files. None of them set: the system's roots,
/// and no client certificate.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsOptions {
    /// PEM file of the CA certificate(s) that signed the Redis server's certificate, for a rediss:// URL (a
    /// private CA, or a managed service's own); by default the system's roots.
    #[arg(global = true, long = "redis-ca-file", env = "REDIS_CA_FILE", value_name = "PEM")]
    pub ca_file: Option<PathBuf>,

    /// PEM file of a client certificate (and its chain) to present to Redis, for a server that asks for
    /// one; with REDIS_CLIENT_KEY_FILE.
    #[arg(global = true, long = "redis-client-cert-file", env = "REDIS_CLIENT_CERT_FILE", value_name = "PEM")]
    pub client_cert_file: Option<PathBuf>,

    /// PEM file of the private key of REDIS_CLIENT_CERT_FILE.
    #[arg(global = true, long = "redis-client-key-file", env = "REDIS_CLIENT_KEY_FILE", value_name = "PEM")]
    pub client_key_file: Option<PathBuf>,
}

/// A TLS option that cannot work, found at start.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {option} {}: {error}", path.display())]
    Unreadable { option: &'static str, path: PathBuf, error: std::io::Error },
    #[error("{option} {} is not usable: {reason}", path.display())]
    Invalid { option: &'static str, path: PathBuf, reason: String },
    #[error("REDIS_CLIENT_CERT_FILE and REDIS_CLIENT_KEY_FILE go together, and only {0} is set")]
    HalfIdentity(&'static str),
    #[error("{option} is set, but {url} is not a rediss:// URL: the TLS options apply to rediss:// only")]
    NotTls { option: &'static str, url: String },
}

/// The certificates of [`TlsOptions`], read and checked.
#[derive(Debug, Clone, Default)]
pub struct Tls(Option<TlsCertificates>);

impl Tls {
    /// The CA and client certificate given, if any (`None`: the system's roots, no client certificate).
    pub fn certificates(&self) -> Option<&TlsCertificates> {
        self.0.as_ref()
    }
}

impl TlsOptions {
    /// Reads the files, refusing one that cannot be read or holds no certificate (or no key), a
    /// certificate without its key, and options given for a URL that is not `rediss://`.
    pub fn load(&self, target: &Target) -> Result<Tls, TlsError> {
        let given = [
            ("REDIS_CA_FILE", &self.ca_file),
            ("REDIS_CLIENT_CERT_FILE", &self.client_cert_file),
            ("REDIS_CLIENT_KEY_FILE", &self.client_key_file),
        ];
        let Some((option, _)) = given.iter().find(|(_, path)| path.is_some()) else { return Ok(Tls(None)) };
        if let Some(url) = target.urls().iter().find(|url| !is_tls(url)) {
            return Err(TlsError::NotTls { option, url: redact(url) });
        }
        let root_cert = match &self.ca_file {
            Some(path) => Some(certificates("REDIS_CA_FILE", path)?),
            None => None,
        };
        let client_tls = match (&self.client_cert_file, &self.client_key_file) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: certificates("REDIS_CLIENT_CERT_FILE", cert)?,
                client_key: private_key(key)?,
            }),
            (Some(_), None) => return Err(TlsError::HalfIdentity("REDIS_CLIENT_CERT_FILE")),
            (None, Some(_)) => return Err(TlsError::HalfIdentity("REDIS_CLIENT_KEY_FILE")),
            (None, None) => None,
        };
        Ok(Tls(Some(TlsCertificates { client_tls, root_cert })))
    }
}

/// Whether a URL asks for TLS.
pub fn is_tls(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

fn read(option: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Unreadable { option, path: path.to_path_buf(), error })
}

/// A PEM file of one or more certificates, as read.
fn certificates(option: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(option, path)?;
    let invalid = |reason: String| TlsError::Invalid { option, path: path.to_path_buf(), reason };
    let parsed = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>();
    match parsed {
        Ok(found) if found.is_empty() => Err(invalid("it holds no PEM certificate".into())),
        Ok(_) => Ok(pem),
        Err(e) => Err(invalid(format!("its PEM does not parse ({e})"))),
    }
}

/// A PEM file of one private key, as read.
fn private_key(path: &Path) -> Result<Vec<u8>, TlsError> {
    const OPTION: &str = "REDIS_CLIENT_KEY_FILE";
    let pem = read(OPTION, path)?;
    match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(_) => Ok(pem),
        Err(e) => {
            Err(TlsError::Invalid { option: OPTION, path: path.to_path_buf(), reason: format!("no private key ({e})") })
        }
    }
}

/// Makes aws-lc-rs the process's crypto provider for rustls, once, before the first TLS connection: with
/// none installed, rustls picks one from its crate features, and panics when the build enables none (or
/// two). Another provider already installed is left as it is.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    });
}

/// Why connecting to Redis cannot succeed as configured, however often it is tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The TLS handshake failed: what rustls said, and what to check.
    #[error("the TLS handshake failed ({0}): {hint}", hint = handshake_hint(.0))]
    Handshake(String),
    #[error("Redis refused the user name and password of the URL ({0})")]
    Credentials(String),
}

/// What to check after a failed handshake, from what rustls said.
fn handshake_hint(detail: &str) -> &'static str {
    if detail.contains("NotValidForName") {
        "the server's certificate does not name the URL's host"
    } else if detail.contains("Expired") || detail.contains("NotValidYet") {
        "the server's certificate is outside its validity period"
    } else if detail.starts_with("invalid peer certificate") {
        "REDIS_CA_FILE (or else the system's roots) must hold the CA that signed the server's certificate"
    } else if detail.starts_with("received fatal alert") {
        "the server ended the handshake: does it want a client certificate (REDIS_CLIENT_CERT_FILE) it trusts?"
    } else if detail.starts_with("received corrupt message") {
        "the server does not speak TLS on this port: a rediss:// URL needs the server's TLS port"
    } else {
        "check the TLS options (REDIS_CA_FILE, REDIS_CLIENT_CERT_FILE, REDIS_CLIENT_KEY_FILE) against the server's"
    }
}

/// Whether `e`, met while connecting, is a [`Refusal`]. Read from the error's text: a cluster client
/// reports the failure of its seed nodes as text only.
pub fn refusal(e: &redis::RedisError) -> Option<Refusal> {
    let text = e.to_string();
    // rustls's errors (as Display writes them) that end a handshake: a certificate not trusted or not for
    // this host, an alert from the server (a client certificate refused, no protocol in common), and
    // bytes that are not TLS (a plain port).
    const HANDSHAKE: [&str; 6] = [
        "invalid peer certificate",
        "received fatal alert",
        "received corrupt message",
        "peer is incompatible",
        "peer misbehaved",
        "invalid dns name",
    ];
    let lower = text.to_ascii_lowercase();
    if let Some(at) = HANDSHAKE.iter().filter_map(|marker| lower.find(marker)).min() {
        let detail = text[at..].split(['\n', ';']).next().unwrap_or_default();
        let detail = detail.split(" - ").next().unwrap_or_default().trim_end_matches([' ', ')']);
        return Some(Refusal::Handshake(detail.to_string()));
    }
    let credentials = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS"))
        || ["WRONGPASS", "Password authentication failed", "invalid username-password pair"]
            .iter()
            .any(|marker| text.contains(marker));
    credentials.then(|| Refusal::Credentials(first_line(&text)))
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(url: &str) -> Target {
        Target::new(url, false)
    }

    #[test]
    fn no_option_is_the_system_roots_and_options_need_a_tls_url() {
        let none = TlsOptions::default().load(&single("redis://h:1")).unwrap();
        assert!(none.certificates().is_none());
        let ca = TlsOptions { ca_file: Some("/nonexistent/ca.pem".into()), ..Default::default() };
        let plain = ca.load(&single("redis://u:s3cret@h:1")).unwrap_err().to_string();
        assert!(plain.contains("REDIS_CA_FILE") && plain.contains("rediss://") && !plain.contains("s3cret"), "{plain}");
        let cluster = Target::new("rediss://a:1,redis://b:2", true);
        assert!(matches!(ca.load(&cluster), Err(TlsError::NotTls { .. })), "every node of a cluster speaks TLS");
        assert!(is_tls("rediss://h") && is_tls("VALKEYS://h") && !is_tls("redis://h") && !is_tls("h:1"));
    }

    #[test]
    fn a_file_that_cannot_be_read_or_holds_nothing_usable_is_named_in_one_line() {
        let dir = std::env::temp_dir().join(format!("redis-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let tls = single("rediss://h:1");
        let missing = TlsOptions { ca_file: Some(dir.join("missing.pem")), ..Default::default() };
        let error = missing.load(&tls).unwrap_err().to_string();
        assert!(error.starts_with("cannot read REDIS_CA_FILE ") && error.contains("missing.pem"), "{error}");
        let nothing = TlsOptions { ca_file: Some(empty.clone()), ..Default::default() };
        let error = nothing.load(&tls).unwrap_err().to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
        let no_key = TlsOptions { client_cert_file: Some(empty.clone()), ..Default::default() };
        assert!(matches!(no_key.load(&tls), Err(TlsError::HalfIdentity("REDIS_CLIENT_CERT_FILE"))));
        for error in [missing.load(&tls).unwrap_err(), nothing.load(&tls).unwrap_err()] {
            assert_eq!(error.to_string().lines().count(), 1, "{error}");
            assert!(std::error::Error::source(&error).is_none(), "no cause printed on a line of its own");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_handshake_or_a_password_refused_is_for_good_and_an_absent_server_is_not() {
        let io = |text: &str| redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::InvalidData, text));
        let untrusted = refusal(&io("invalid peer certificate: UnknownIssuer")).unwrap();
        assert_eq!(untrusted, Refusal::Handshake("invalid peer certificate: UnknownIssuer".into()));
        assert!(untrusted.to_string().ends_with("must hold the CA that signed the server's certificate"));
        let host = refusal(&io("invalid peer certificate: NotValidForName")).unwrap().to_string();
        assert!(host.contains("does not name the URL's host"), "{host}");
        let plain = refusal(&io("received corrupt message of type InvalidContentType")).unwrap().to_string();
        assert!(plain.contains("does not speak TLS on this port"), "{plain}");
        let cluster = redis::RedisError::from((
            redis::ErrorKind::Io,
            "Failed to create initial connections",
            "received fatal alert: UnknownCA".to_string(),
        ));
        assert!(
            matches!(refusal(&cluster), Some(Refusal::Handshake(detail)) if detail == "received fatal alert: UnknownCA")
        );
        let wrong = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "Password authentication failed"));
        assert!(matches!(refusal(&wrong), Some(Refusal::Credentials(_))));
        let away = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(refusal(&away), None);
        let timeout = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(refusal(&timeout), None);
    }
}
