//! Who may read the exporter: the web configuration file of the Prometheus exporter
//! conventions (`--web.config.file`, as node_exporter reads it): TLS from
//! `tls_server_config.{cert_file,key_file}` and basic-auth users with bcrypt hashes in
//! `basic_auth_users`. Other keys are refused rather than silently ignored: a setting a
//! user believes is in force must be.
//!
//! What is read is bounded, so a mistaken or hostile file cannot exhaust memory: the
//! file itself ([`MAX_CONFIG_BYTES`]), what its YAML aliases expand to ([`MAX_NODES`]),
//! its nesting ([`MAX_DEPTH`]), the certificate and key files ([`MAX_PEM_BYTES`], regular
//! files only: not `/dev/zero`), and the bcrypt cost of each hash ([`MAX_COST`]).
use std::{collections::BTreeMap, io::Read as _, path::Path, sync::Arc};

use anyhow::{anyhow, bail, Context as _, Result};
use rustls_pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer};
use tokio_rustls::{rustls, TlsAcceptor};
use yaml_rust2::{parser::Event, parser::Parser, Yaml, YamlLoader};

/// Largest web config: node_exporter's are a few hundred bytes.
pub const MAX_CONFIG_BYTES: u64 = 64 << 10;
/// Largest certificate chain or key file.
pub const MAX_PEM_BYTES: u64 = 1 << 20;
/// Most YAML nodes once aliases are expanded (a "billion laughs" file is refused here).
pub const MAX_NODES: u64 = 10_000;
/// Deepest nesting of mappings and sequences (the format needs 2).
pub const MAX_DEPTH: usize = 32;
/// Highest bcrypt cost accepted. Each step doubles every check (cost 10: ~70 ms of
/// CPU); at 31 a single request costs days.
pub const MAX_COST: u32 = 14;

/// The file's bytes, refused in one line when it is not a regular file (`/dev/zero`,
/// a FIFO) or is larger than `limit`.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let md = f
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if !md.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let mut buf = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("reading {}", path.display()))?;
    if buf.len() as u64 > limit {
        bail!(
            "{} is larger than {} KiB, more than such a file holds",
            path.display(),
            limit >> 10
        );
    }
    Ok(buf)
}

/// Refuses a YAML text whose loading would take memory or stack out of proportion to
/// its size: aliases that expand to more than [`MAX_NODES`] nodes, nesting deeper than
/// [`MAX_DEPTH`]. Reads the parser's events only; nothing is built.
fn check_shape(text: &str) -> Result<()> {
    let mut p = Parser::new_from_str(text);
    let (mut nodes, mut aliases, mut depth) = (0u64, 0u64, 0usize);
    // Nodes under each anchor, and the anchors of the open collections.
    let mut sizes: BTreeMap<usize, u64> = BTreeMap::new();
    let mut open: Vec<(usize, u64)> = Vec::new();
    loop {
        let (ev, _) = p.next_token().map_err(|e| anyhow!("not YAML: {e}"))?;
        match ev {
            Event::StreamEnd => return Ok(()),
            Event::Scalar(_, _, anchor, _) => {
                nodes += 1;
                if anchor > 0 {
                    sizes.insert(anchor, 1);
                }
            }
            Event::Alias(id) => {
                aliases += 1;
                nodes += sizes.get(&id).copied().unwrap_or(1);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                nodes += 1;
                depth += 1;
                if depth > MAX_DEPTH {
                    bail!("nested deeper than {MAX_DEPTH} levels (a web config needs 2)");
                }
                open.push((anchor, nodes));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                depth = depth.saturating_sub(1);
                if let Some((anchor, start)) = open.pop() {
                    if anchor > 0 {
                        sizes.insert(anchor, nodes - start + 1);
                    }
                }
            }
            _ => {}
        }
        if nodes > MAX_NODES {
            bail!(
                "its {aliases} YAML aliases expand to more than {MAX_NODES} nodes (a web config \
                 has a few dozen): refusing to load it"
            );
        }
    }
}

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
        let raw = read_bounded(path, MAX_CONFIG_BYTES).context("the web config")?;
        let text = String::from_utf8(raw)
            .map_err(|_| anyhow!("the web config {} is not UTF-8 text", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| format!("in the web config {}", path.display()))
    }

    /// Parses the YAML text; file paths in it are taken relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<WebConfig> {
        check_shape(text)?;
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
                            let cost = h
                                .starts_with("$2")
                                .then(|| h.parse::<bcrypt::HashParts>().ok())
                                .flatten()
                                .map(|p| p.get_cost());
                            let Some(cost) = cost else {
                                bail!("basic_auth_users.{u}: not a bcrypt hash (htpasswd -nBC 10 \"\" | tr -d ':' makes one)");
                            };
                            if cost > MAX_COST {
                                bail!(
                                    "basic_auth_users.{u}: bcrypt cost {cost} is above {MAX_COST}, the most tracer accepts (each step doubles the work of every check: {cost} is 2^{} times cost 10's ~70 ms per request); make the hash with htpasswd -nBC 10",
                                    cost - 10
                                );
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

    /// The highest bcrypt cost among the users (checked when parsed).
    pub fn max_cost(&self) -> Option<u32> {
        self.users
            .values()
            .filter_map(|h| h.parse::<bcrypt::HashParts>().ok())
            .map(|p| p.get_cost())
            .max()
    }

    /// The TLS acceptor, when the file asks for TLS.
    pub fn tls_acceptor(&self) -> Result<Option<TlsAcceptor>> {
        let Some((cert, key)) = &self.tls else {
            return Ok(None);
        };
        let pem = read_bounded(cert, MAX_PEM_BYTES).context("tls_server_config.cert_file")?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading certificates from {}", cert.display()))?;
        if certs.is_empty() {
            bail!("no certificate in {}", cert.display());
        }
        let pem = read_bounded(key, MAX_PEM_BYTES).context("tls_server_config.key_file")?;
        let key = PrivateKeyDer::from_pem_slice(&pem)
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

/// `Basic base64(user:password)` to (user, password).
pub fn decode_basic(header: &str) -> Option<(String, String)> {
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
        assert_eq!(c.max_cost(), Some(4));
        assert_eq!(
            decode_basic("Basic YWxpY2U6c2VjcmV0"),
            Some(("alice".into(), "secret".into()))
        );
        assert_eq!(decode_basic("Basic !!!"), None);
    }

    /// Issue 25 item 6: an alias bomb reached 4.6 GB in 6 s, `cert_file: /dev/zero` 4.0 GB.
    #[test]
    fn what_is_read_is_bounded() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (i, c) in ('b'..='i').enumerate() {
            let prev = (b'a' + i as u8) as char;
            let refs = vec![format!("*{prev}"); 10].join(", ");
            bomb += &format!("{c}: &{c} [{refs}]\n");
        }
        let t = std::time::Instant::now();
        let e = WebConfig::parse(&bomb, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("aliases expand to more than"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let deep = format!("{}x{}", "[".repeat(100), "]".repeat(100));
        let e = WebConfig::parse(&deep, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nested deeper than"), "{e}");
        // A few aliases that stay small are fine YAML.
        let ok = format!(
            "basic_auth_users:\n  alice: &h {}\n  bob: *h\n",
            bcrypt::hash("x", 4).unwrap()
        );
        assert_eq!(
            WebConfig::parse(&ok, Path::new(".")).unwrap().users.len(),
            2
        );

        let cost31 = bcrypt::hash("x", 4).unwrap().replacen("$04$", "$31$", 1);
        let e = WebConfig::parse(
            &format!("basic_auth_users:\n  alice: {cost31}\n"),
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bcrypt cost 31 is above 14"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");

        let dir = std::env::temp_dir().join(format!("tracer-webcfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("web.yml");
        std::fs::write(
            &cfg,
            "tls_server_config:\n  cert_file: /dev/zero\n  key_file: /dev/zero\n",
        )
        .unwrap();
        let e = format!(
            "{:#}",
            WebConfig::load(&cfg).unwrap().tls_acceptor().err().unwrap()
        );
        assert!(e.contains("/dev/zero is not a regular file"), "{e}");
        std::fs::write(&cfg, "#".repeat(MAX_CONFIG_BYTES as usize + 1)).unwrap();
        let e = format!("{:#}", WebConfig::load(&cfg).unwrap_err());
        assert!(e.contains("larger than 64 KiB"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
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
