//! Client TLS from PEM files: for gRPC sources (Hubble Relay, Goldmane), read again at every
//! dial so rotated certificates are picked up on the next reconnect, and for the OTLP
//! exporters (tonic for gRPC, a rustls config for OTLP/HTTP).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// Paths of the TLS material and the name to verify.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA bundle that signed the server's certificate; `None` means plaintext.
    pub ca: Option<PathBuf>,
    /// Client certificate and key, for mTLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Name the server certificate must carry (default: the address's host).
    pub server_name: Option<String>,
}

impl TlsFiles {
    /// Whether TLS is configured at all.
    pub fn enabled(&self) -> bool {
        self.ca.is_some()
    }

    /// Whether a client identity is configured.
    pub fn mutual(&self) -> bool {
        self.cert.is_some() && self.key.is_some()
    }

    /// Reads the files into a tonic TLS config. `host` is verified unless a server name
    /// override is set.
    pub fn load(&self, host: &str) -> anyhow::Result<ClientTlsConfig> {
        let ca = self.ca.as_ref().context("TLS needs a CA bundle")?;
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(ca, "CA bundle")?))
            .domain_name(self.server_name.clone().unwrap_or_else(|| host.to_owned()));
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(
                    read(cert, "client certificate")?,
                    read(key, "client key")?,
                ));
            }
            (None, None) => {}
            _ => anyhow::bail!("mTLS needs both a client certificate and a key"),
        }
        Ok(config)
    }

    /// Reads the files into a rustls client config (ring), for clients other than tonic.
    /// The server name is the URL's host; [`TlsFiles::server_name`] is not used here.
    pub fn rustls_config(&self) -> anyhow::Result<rustls::ClientConfig> {
        let ca = self.ca.as_ref().context("TLS needs a CA bundle")?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in certificates(ca, "CA bundle")? {
            roots
                .add(cert)
                .with_context(|| format!("a certificate of {} is not usable", ca.display()))?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
        Ok(match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let key_pem = read(key, "client key")?;
                let key = PrivateKeyDer::from_pem_slice(&key_pem)
                    .with_context(|| format!("no private key in {}", key.display()))?;
                builder
                    .with_client_auth_cert(certificates(cert, "client certificate")?, key)
                    .context("the client certificate does not match its key")?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => anyhow::bail!("mTLS needs both a client certificate and a key"),
        })
    }
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read the {what} {}", path.display()))
}

/// Every certificate of a PEM file; at least one.
fn certificates(path: &Path, what: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("the {what} {} is not PEM", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("no certificate in the {what} {}", path.display());
    }
    Ok(certs)
}
