//! One OTLP export request on the wire, for any signal: gRPC through the generated
//! `*ServiceClient` of `opentelemetry-proto`, or HTTP/protobuf as a POST of the same message
//! (`content-type: application/x-protobuf`) through hyper with rustls. The exporters (metrics
//! in [`super`], log events in [`crate::logs`]) decide what to do with a failure; this module
//! only says whether it is worth retrying.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prost::Message;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};

use super::config::{ExportConfig, Protocol};
use super::signal::Signal;

/// A failed export.
#[derive(Debug)]
pub(crate) struct ExportError {
    /// The collector is busy or unreachable (gRPC `UNAVAILABLE`, `RESOURCE_EXHAUSTED`;
    /// HTTP 429, 502, 503, 504, or no connection): the same request may succeed later.
    pub retryable: bool,
    pub message: String,
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A connection to the collector, opened lazily, reused for every export.
pub(crate) enum Transport {
    Grpc {
        channel: Channel,
        metadata: MetadataMap,
    },
    Http {
        client: Box<HttpClient>,
        uri: Uri,
        headers: HeaderMap,
        timeout: Duration,
    },
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Grpc { .. } => f.write_str("Transport::Grpc"),
            Transport::Http { uri, .. } => write!(f, "Transport::Http({uri})"),
        }
    }
}

impl Transport {
    /// Needs a tokio runtime (the gRPC channel spawns its worker).
    pub(crate) fn new(config: &ExportConfig) -> anyhow::Result<Self> {
        let invalid = || format!("invalid OTLP endpoint {}", config.endpoint);
        Ok(match config.protocol {
            Protocol::Grpc => {
                let mut endpoint = Endpoint::from_shared(config.endpoint.clone())
                    .with_context(invalid)?
                    .timeout(config.timeout);
                if config.tls.enabled() {
                    let host = endpoint.uri().host().unwrap_or_default().to_owned();
                    endpoint = endpoint.tls_config(config.tls.load(&host)?)?;
                }
                let mut metadata = MetadataMap::new();
                for (k, v) in &config.headers {
                    let key = MetadataKey::from_bytes(k.as_bytes())
                        .with_context(|| format!("{k} cannot be gRPC metadata"))?;
                    let value = MetadataValue::try_from(v.as_str())
                        .with_context(|| format!("the value of {k} cannot be gRPC metadata"))?;
                    metadata.insert(key, value);
                }
                Transport::Grpc {
                    channel: endpoint.connect_lazy(),
                    metadata,
                }
            }
            Protocol::HttpProtobuf => {
                let tls = if config.tls.enabled() {
                    config.tls.rustls_config()?
                } else {
                    // Only http:// endpoints get here (https needs a CA): nothing to trust.
                    rustls::ClientConfig::builder_with_provider(
                        rustls::crypto::ring::default_provider().into(),
                    )
                    .with_safe_default_protocol_versions()?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
                };
                let connector = HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_or_http()
                    .enable_http1()
                    .build();
                let mut headers = HeaderMap::new();
                for (k, v) in &config.headers {
                    headers.insert(HeaderName::try_from(k)?, HeaderValue::try_from(v)?);
                }
                Transport::Http {
                    client: Box::new(Client::builder(TokioExecutor::new()).build(connector)),
                    uri: config.endpoint.parse().with_context(invalid)?,
                    headers,
                    timeout: config.timeout,
                }
            }
        })
    }

    /// Sends one export request and waits for the collector's answer.
    pub(crate) async fn export<S: Signal>(
        &self,
        request: S::Request,
    ) -> Result<S::Response, ExportError> {
        match self {
            Transport::Grpc { channel, metadata } => {
                let mut request = tonic::Request::new(request);
                *request.metadata_mut() = metadata.clone();
                S::grpc(channel.clone(), request)
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(|status| ExportError {
                        retryable: matches!(
                            status.code(),
                            tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                        ),
                        message: format!("gRPC {:?}: {}", status.code(), status.message()),
                    })
            }
            Transport::Http {
                client,
                uri,
                headers,
                timeout,
            } => {
                let mut post = Request::post(uri.clone())
                    .header(CONTENT_TYPE, "application/x-protobuf")
                    .body(Full::new(Bytes::from(request.encode_to_vec())))
                    .map_err(|e| ExportError {
                        retryable: false,
                        message: e.to_string(),
                    })?;
                post.headers_mut().extend(headers.clone());
                let exchange = async {
                    let response = client.request(post).await?;
                    let status = response.status();
                    let body = response.into_body().collect().await?.to_bytes();
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body))
                };
                match tokio::time::timeout(*timeout, exchange).await {
                    Err(_) => Err(ExportError {
                        retryable: false,
                        message: format!("no answer within {timeout:?}"),
                    }),
                    Ok(Err(error)) => Err(ExportError {
                        retryable: true,
                        message: format!("HTTP request failed: {}", chain(&*error)),
                    }),
                    // Collectors answer an ExportServiceResponse; an empty or odd body is
                    // still a success.
                    Ok(Ok((status, body))) if status.is_success() => {
                        Ok(S::Response::decode(body).unwrap_or_default())
                    }
                    Ok(Ok((status, _))) => Err(ExportError {
                        retryable: matches!(
                            status,
                            StatusCode::TOO_MANY_REQUESTS
                                | StatusCode::BAD_GATEWAY
                                | StatusCode::SERVICE_UNAVAILABLE
                                | StatusCode::GATEWAY_TIMEOUT
                        ),
                        message: format!("HTTP {status}"),
                    }),
                }
            }
        }
    }
}

/// An error and its sources, `: `-separated (hyper's own messages are terse).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}
