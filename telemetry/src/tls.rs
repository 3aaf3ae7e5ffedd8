//! Client TLS for gRPC sources (Hubble Relay, Goldmane), from PEM files. The files are read
//! again at every dial, so rotated certificates are picked up on the next reconnect.

use std::path::PathBuf;

use anyhow::Context;
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
        let read = |p: &PathBuf, what: &str| {
            std::fs::read(p).with_context(|| format!("cannot read the {what} {}", p.display()))
        };
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
}
