//! A scripted Hubble server: `observer.Observer/GetFlows` over real gRPC (tonic's server, on
//! a unix socket or TLS on loopback TCP).
//!
//! The generated `ObserverServer` encodes `GetFlowsResponse`s with prost, which cannot
//! produce malformed bytes, so the one method is routed by hand through
//! `tonic::server::Grpc` with a codec that writes each message's bytes as they are given:
//! valid responses are prost-encoded by the script, broken ones are written as broken.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes};
use ne_proto::observer::{GetFlowsRequest, GetFlowsResponse};
use ne_proto::prost::Message;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream, UnixListenerStream};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{BoxFuture, Context, Poll, Service, http};
use tonic::server::{NamedService, ServerStreamingService};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

/// What one `GetFlows` call streams: `messages`, then either the end of the stream or
/// nothing more until the server is stopped (then the stream fails, like a crashed server).
#[derive(Clone, Debug)]
pub struct Session {
    pub messages: Vec<Bytes>,
    pub end: bool,
}

impl Session {
    /// Sends `responses`, then holds the stream open.
    pub fn hold(responses: &[GetFlowsResponse]) -> Self {
        Session {
            messages: responses.iter().map(encode).collect(),
            end: false,
        }
    }
}

/// The bytes of one response.
pub fn encode(r: &GetFlowsResponse) -> Bytes {
    r.encode_to_vec().into()
}

/// The scripted server. Each call takes the next session; calls beyond the script are
/// refused with `UNAVAILABLE`.
#[derive(Clone, Debug)]
pub struct TestHubble {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    sessions: Mutex<VecDeque<Session>>,
    requests: Mutex<Vec<GetFlowsRequest>>,
    stop: watch::Sender<bool>,
}

impl TestHubble {
    pub fn new(sessions: impl IntoIterator<Item = Session>) -> Self {
        TestHubble {
            inner: Arc::new(Inner {
                sessions: Mutex::new(sessions.into_iter().collect()),
                requests: Mutex::new(Vec::new()),
                stop: watch::Sender::new(false),
            }),
        }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<GetFlowsRequest> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// Serves on a new unix socket at `path` (replacing a stale one) until [`Running::stop`].
    pub fn serve_unix(&self, path: &Path) -> Running {
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        let incoming = UnixListenerStream::new(listener);
        let stopped = self.stopped();
        let router = Server::builder().add_service(self.clone());
        Running {
            hubble: self.clone(),
            task: tokio::spawn(async move {
                router
                    .serve_with_incoming_shutdown(incoming, stopped)
                    .await
                    .unwrap();
            }),
        }
    }

    /// Serves TLS on `listener`, requiring a client certificate signed by `client_ca`.
    pub fn serve_mtls(
        &self,
        listener: tokio::net::TcpListener,
        cert: &str,
        key: &str,
        client_ca: &str,
    ) -> Running {
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(cert, key))
            .client_ca_root(Certificate::from_pem(client_ca));
        let router = Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(self.clone());
        let incoming = TcpListenerStream::new(listener);
        let stopped = self.stopped();
        Running {
            hubble: self.clone(),
            task: tokio::spawn(async move {
                router
                    .serve_with_incoming_shutdown(incoming, stopped)
                    .await
                    .unwrap();
            }),
        }
    }

    fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stop = self.inner.stop.subscribe();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    }
}

/// A server task.
#[derive(Debug)]
pub struct Running {
    pub hubble: TestHubble,
    task: JoinHandle<()>,
}

impl Running {
    /// Fails the open streams, stops accepting and waits until every connection is closed.
    pub async fn stop(self) {
        self.hubble.inner.stop.send_replace(true);
        self.task.await.unwrap();
    }
}

impl NamedService for TestHubble {
    const NAME: &'static str = "observer.Observer";
}

impl<B> Service<http::Request<B>> for TestHubble
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let hubble = self.clone();
        Box::pin(async move {
            if request.uri().path() != "/observer.Observer/GetFlows" {
                return Ok(Status::unimplemented(request.uri().path().to_owned()).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(WireCodec);
            Ok(grpc.server_streaming(GetFlows(hubble), request).await)
        })
    }
}

struct GetFlows(TestHubble);

impl ServerStreamingService<GetFlowsRequest> for GetFlows {
    type Response = Bytes;
    type ResponseStream = ReceiverStream<Result<Bytes, Status>>;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<GetFlowsRequest>) -> Self::Future {
        let inner = self.0.inner.clone();
        Box::pin(async move {
            inner.requests.lock().unwrap().push(request.into_inner());
            let Some(session) = inner.sessions.lock().unwrap().pop_front() else {
                return Err(Status::unavailable("no more sessions scripted"));
            };
            let (tx, rx) = mpsc::channel(16);
            let mut stop = inner.stop.subscribe();
            tokio::spawn(async move {
                for message in session.messages {
                    if tx.send(Ok(message)).await.is_err() {
                        return; // the client went away
                    }
                }
                if session.end {
                    return;
                }
                let stopped = tokio::select! {
                    stopped = stop.wait_for(|s| *s) => stopped.is_ok(),
                    () = tx.closed() => false,
                };
                if stopped {
                    let _ = tx
                        .send(Err(Status::unavailable("hubble is restarting")))
                        .await;
                }
            });
            Ok(Response::new(ReceiverStream::new(rx)))
        })
    }
}

/// Responses go out as the bytes given; requests are decoded with prost.
#[derive(Clone, Copy, Debug)]
struct WireCodec;

impl Codec for WireCodec {
    type Encode = Bytes;
    type Decode = GetFlowsRequest;
    type Encoder = WireCodec;
    type Decoder = WireCodec;

    fn encoder(&mut self) -> WireCodec {
        WireCodec
    }

    fn decoder(&mut self) -> WireCodec {
        WireCodec
    }
}

impl Encoder for WireCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for WireCodec {
    type Item = GetFlowsRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<GetFlowsRequest>, Status> {
        GetFlowsRequest::decode(src)
            .map(Some)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}
