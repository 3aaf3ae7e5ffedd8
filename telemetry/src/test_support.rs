//! Test helpers shared by the exporters' tests: a test PKI made with rcgen and written as PEM
//! files (the exporters read their TLS material from files), and a real OTLP/HTTP receiver
//! (hyper, plaintext or rustls requiring a client certificate) that hands every request to
//! the test and answers with scripted statuses.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A lookup over fixed variables, as `from_env` takes it.
pub fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files in a
/// directory of their own (removed on drop).
pub struct Pki {
    dir: PathBuf,
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
}

impl Pki {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ne-telemetry-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test collector CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_pem = params.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(params, ca_key);
        let issue = |name: &str, usage| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![usage];
            (
                params.signed_by(&key, &issuer).unwrap().pem(),
                key.serialize_pem(),
            )
        };
        let (server_cert_pem, server_key_pem) =
            issue("127.0.0.1", ExtendedKeyUsagePurpose::ServerAuth);
        let (client_cert_pem, client_key_pem) =
            issue("ne-leader", ExtendedKeyUsagePurpose::ClientAuth);
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        Pki {
            ca: write("ca.crt", &ca_pem),
            client_cert: write("client.crt", &client_cert_pem),
            client_key: write("client.key", &client_key_pem),
            dir: dir.clone(),
            ca_pem,
            server_cert_pem,
            server_key_pem,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// tonic's server TLS: the server certificate, and a required client certificate signed
    /// by the CA.
    pub fn tonic_server(&self) -> tonic::transport::ServerTlsConfig {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        ServerTlsConfig::new()
            .identity(Identity::from_pem(
                &self.server_cert_pem,
                &self.server_key_pem,
            ))
            .client_ca_root(Certificate::from_pem(&self.ca_pem))
    }

    /// A rustls server config that requires a client certificate signed by the CA.
    fn server_config(&self) -> rustls::ServerConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(self.server_cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes()).unwrap(),
            )
            .unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One request as the HTTP receiver saw it.
#[derive(Debug)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A running OTLP/HTTP receiver; stops when dropped.
pub struct HttpReceiver {
    pub addr: SocketAddr,
    pub requests: mpsc::UnboundedReceiver<HttpRequest>,
    task: JoinHandle<()>,
}

impl Drop for HttpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a receiver on 127.0.0.1: TLS with a required client certificate when `tls` is
/// given. Request *n* is answered with `script[n]`, then 200 with an empty body.
pub async fn http_receiver(tls: Option<&Pki>, script: &[StatusCode]) -> HttpReceiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, requests) = mpsc::unbounded_channel();
    let script = Arc::new(Mutex::new(script.iter().copied().collect::<VecDeque<_>>()));
    let acceptor = tls.map(|pki| tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config())));
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (tx, script, acceptor) = (tx.clone(), script.clone(), acceptor.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let (tx, script) = (tx.clone(), script.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.map(|b| b.to_bytes());
                        let _ = tx.send(HttpRequest {
                            method: parts.method.to_string(),
                            path: parts.uri.path().to_owned(),
                            headers: parts.headers,
                            body: body.unwrap_or_default(),
                        });
                        let status = script.lock().unwrap().pop_front();
                        let mut response = Response::new(Full::new(Bytes::new()));
                        *response.status_mut() = status.unwrap_or(StatusCode::OK);
                        Ok::<_, Infallible>(response)
                    }
                });
                let http = http1::Builder::new();
                let _ = match acceptor {
                    // A handshake without a valid client certificate ends here.
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(tls) => http.serve_connection(TokioIo::new(tls), service).await,
                        Err(_) => return,
                    },
                    None => http.serve_connection(TokioIo::new(stream), service).await,
                };
            });
        }
    });
    HttpReceiver {
        addr,
        requests,
        task,
    }
}

/// The path as text, for variables.
pub fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}
