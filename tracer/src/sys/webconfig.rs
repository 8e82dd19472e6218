//! Who may read the exporter: the web configuration file of the Prometheus exporter
//! conventions (`--web.config.file`, as node_exporter reads it): TLS from
//! `tls_server_config.{cert_file,key_file}` and basic-auth users with bcrypt hashes in
//! `basic_auth_users`. Other keys are refused rather than silently ignored: a setting a
//! user believes is in force must be.
use std::{collections::BTreeMap, path::Path, sync::Arc};

use anyhow::{anyhow, bail, Context as _, Result};
use rustls_pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer};
use tokio_rustls::{rustls, TlsAcceptor};
use yaml_rust2::{Yaml, YamlLoader};

/// The parsed file.
#[derive(Clone, Debug, Default)]
pub struct WebConfig {
    /// (certificate chain file, private key file), relative paths from the config's folder.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// User name to bcrypt hash.
    pub users: BTreeMap<String, String>,
}

impl WebConfig {
    pub fn load(path: &Path) -> Result<WebConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the web config {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| format!("in the web config {}", path.display()))
    }

    /// Parses the YAML text; file paths in it are taken relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<WebConfig> {
        let docs = YamlLoader::load_from_str(text).map_err(|e| anyhow!("not YAML: {e}"))?;
        let mut cfg = WebConfig::default();
        let Some(doc) = docs.first() else {
            return Ok(cfg);
        };
        let top = match doc {
            Yaml::Hash(h) => h,
            Yaml::Null => return Ok(cfg),
            _ => bail!("expected a mapping at the top"),
        };
        for (k, v) in top {
            match k.as_str() {
                Some("tls_server_config") => {
                    let field = |name: &str| -> Result<Option<std::path::PathBuf>> {
                        match &v[name] {
                            Yaml::BadValue | Yaml::Null => Ok(None),
                            Yaml::String(s) => Ok(Some(base.join(s))),
                            _ => bail!("tls_server_config.{name}: expected a file name"),
                        }
                    };
                    if let Yaml::Hash(h) = v {
                        for key in h.keys() {
                            match key.as_str() {
                                Some("cert_file" | "key_file") => {}
                                other => bail!(
                                    "tls_server_config.{}: not supported by tracer (only cert_file and key_file)",
                                    other.unwrap_or("?")
                                ),
                            }
                        }
                    } else if !matches!(v, Yaml::Null) {
                        bail!("tls_server_config: expected a mapping");
                    }
                    match (field("cert_file")?, field("key_file")?) {
                        (Some(c), Some(k)) => cfg.tls = Some((c, k)),
                        (None, None) => {}
                        _ => bail!("tls_server_config needs both cert_file and key_file"),
                    }
                }
                Some("basic_auth_users") => match v {
                    Yaml::Hash(users) => {
                        for (u, h) in users {
                            let (Some(u), Some(h)) = (u.as_str(), h.as_str()) else {
                                bail!("basic_auth_users: expected `user: bcrypt-hash` pairs");
                            };
                            if !h.starts_with("$2") {
                                bail!("basic_auth_users.{u}: not a bcrypt hash (htpasswd -nBC 10 \"\" | tr -d ':' makes one)");
                            }
                            cfg.users.insert(u.to_string(), h.to_string());
                        }
                    }
                    Yaml::Null => {}
                    _ => bail!("basic_auth_users: expected a mapping"),
                },
                other => bail!(
                    "{}: not supported by tracer (it reads tls_server_config and basic_auth_users)",
                    other.unwrap_or("a non-string key")
                ),
            }
        }
        Ok(cfg)
    }

    /// Whether an `Authorization` header admits the request (always, without users).
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let Some((user, password)) = authorization.and_then(decode_basic) else {
            return false;
        };
        match self.users.get(&user) {
            Some(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            // Same work for an unknown user, so timing does not tell which users exist.
            None => {
                let _ = bcrypt::verify(password, dummy_hash());
                false
            }
        }
    }

    /// The TLS acceptor, when the file asks for TLS.
    pub fn tls_acceptor(&self) -> Result<Option<TlsAcceptor>> {
        let Some((cert, key)) = &self.tls else {
            return Ok(None);
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .with_context(|| format!("reading certificates from {}", cert.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading certificates from {}", cert.display()))?;
        if certs.is_empty() {
            bail!("no certificate in {}", cert.display());
        }
        let key = PrivateKeyDer::from_pem_file(key)
            .with_context(|| format!("reading the private key from {}", key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("the certificate and key do not make a TLS configuration")?;
        Ok(Some(TlsAcceptor::from(Arc::new(config))))
    }
}

/// A bcrypt hash at the default cost, verified against for unknown users (made once).
fn dummy_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| bcrypt::hash("x", bcrypt::DEFAULT_COST).unwrap_or_default())
}

/// `Basic base64(user:password)` to (user, password).
fn decode_basic(header: &str) -> Option<(String, String)> {
    let b64 = header
        .strip_prefix("Basic ")
        .or_else(|| header.strip_prefix("basic "))?;
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_node_exporter_style_files() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let text = format!(
            "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\nbasic_auth_users:\n  alice: {hash}\n"
        );
        let c = WebConfig::parse(&text, Path::new("/etc/t")).unwrap();
        assert_eq!(c.tls, Some(("/etc/t/c.pem".into(), "/etc/t/k.pem".into())));
        // "alice:secret"
        assert!(c.admits(Some("Basic YWxpY2U6c2VjcmV0")));
        assert!(!c.admits(Some("Basic YWxpY2U6d3Jvbmc=")), "alice:wrong");
        assert!(!c.admits(Some("Basic Ym9iOnNlY3JldA==")), "bob:secret");
        assert!(!c.admits(None));
        assert!(!c.admits(Some("Basic !!!")));
    }

    #[test]
    fn refuses_what_it_would_ignore() {
        for bad in [
            "http_server_config:\n  http2: false\n",
            "tls_server_config:\n  cert_file: c.pem\n",
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: RequireAndVerifyClientCert\n",
            "basic_auth_users:\n  alice: plaintext\n",
            "- a list\n",
            "{",
        ] {
            assert!(WebConfig::parse(bad, Path::new(".")).is_err(), "{bad:?}");
        }
        assert!(WebConfig::parse("", Path::new("."))
            .unwrap()
            .users
            .is_empty());
    }
}
