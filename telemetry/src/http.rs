//! The HTTP endpoints of both binaries: `/metrics` (Prometheus text), `/healthz` (the
//! process serves), `/readyz` (the agent's source is connected; the leader serves).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Metrics that render themselves in the Prometheus text format.
pub trait Exposition: Send + Sync + 'static {
    /// The current values, as Prometheus text.
    fn encode(&self) -> String;
}

/// The Prometheus text of the instruments `register` puts in a fresh registry.
pub fn prometheus_text(
    register: impl FnOnce(&mut prometheus_client::registry::Registry),
) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    register(&mut registry);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// What the endpoints read.
#[derive(Clone)]
pub struct Endpoints {
    pub metrics: Arc<dyn Exposition>,
    /// Set while the process is ready (the agent: its source is connected).
    pub ready: Arc<AtomicBool>,
    /// What `/readyz` says while not ready.
    pub not_ready: &'static str,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

/// Serves the endpoints on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, endpoints: Endpoints) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(error) => {
                tracing::warn!(%error, "metrics listener accept failed");
                continue;
            }
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let endpoints = endpoints.clone();
                async move { Ok::<_, Infallible>(respond(&req, &endpoints)) }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, %peer, "metrics connection ended");
            }
        });
    }
}

/// Binds the metrics address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

fn respond(req: &Request<Incoming>, endpoints: &Endpoints) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            endpoints.metrics.encode(),
        ),
        (&Method::GET, "/healthz") => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        (&Method::GET, "/readyz") if endpoints.ready.load(Ordering::Relaxed) => {
            (StatusCode::OK, "text/plain", "ready\n".to_owned())
        }
        (&Method::GET, "/readyz") => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            format!("{}\n", endpoints.not_ready),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}
