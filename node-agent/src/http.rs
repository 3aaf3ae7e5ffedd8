//! The agent's HTTP endpoints: `/metrics` (Prometheus text), `/healthz` (the process
//! serves), `/readyz` (the source is connected).

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

use crate::metrics::AgentMetrics;

/// What the endpoints read.
#[derive(Clone, Debug)]
pub struct Endpoints {
    pub metrics: Arc<AgentMetrics>,
    /// Set while the source is connected (or the file is being read).
    pub ready: Arc<AtomicBool>,
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
            "source not connected\n".to_owned(),
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
