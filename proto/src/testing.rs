//! A Hubble server for tests and the load harness (feature `testing`):
//! `observer.Observer/GetFlows` over real gRPC, each response written as the bytes given.
//!
//! The generated `ObserverServer` encodes `GetFlowsResponse`s with prost, which cannot
//! produce malformed bytes and encodes every message again. Here the one method is routed
//! by hand through `tonic::server::Grpc` with a codec that writes each message's bytes as
//! they are given (requests are decoded with prost), so a test can send broken responses
//! and a load generator pre-encoded ones. What a call streams is up to a [`GetFlows`]
//! handler: the node agent's tests replay a script (`node-agent/tests/hubble/server.rs`),
//! `ne-load` generates an endless paced stream (`benches/src/bin/ne-load/hubble.rs`).
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use ne_proto::observer::GetFlowsRequest;
//! use ne_proto::testing::{GetFlows, HubbleServer};
//! use tokio::sync::mpsc;
//!
//! struct Silent;
//! impl GetFlows for Silent {
//!     fn get_flows(
//!         &self,
//!         _request: GetFlowsRequest,
//!     ) -> Result<mpsc::Receiver<Result<bytes::Bytes, tonic::Status>>, tonic::Status> {
//!         Ok(mpsc::channel(1).1)
//!     }
//! }
//! let serve = HubbleServer::new(Silent).serve_unix("/tmp/hubble.sock".as_ref(), std::future::pending())?;
//! tokio::spawn(serve);
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use bytes::{BufMut, Bytes};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{BoxFuture, Context, Poll, Service, http};
use tonic::server::{NamedService, ServerStreamingService};
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use crate::observer::GetFlowsRequest;

/// What a [`HubbleServer`] streams for each `GetFlows` call.
pub trait GetFlows: Send + Sync + 'static {
    /// Answers one call: a channel of encoded `GetFlowsResponse`s, each sent as given (an
    /// `Err` fails the stream, a dropped sender ends it), or the call's refusal.
    fn get_flows(
        &self,
        request: GetFlowsRequest,
    ) -> Result<mpsc::Receiver<Result<Bytes, Status>>, Status>;
}

/// `observer.Observer` with `GetFlows` answered by a [`GetFlows`] handler; any other method
/// is `UNIMPLEMENTED`. A tonic service: add it to a `tonic::transport::Server` (plain or
/// TLS), or serve it on a unix socket with [`HubbleServer::serve_unix`].
#[derive(Debug)]
pub struct HubbleServer<H> {
    handler: Arc<H>,
}

impl<H> Clone for HubbleServer<H> {
    fn clone(&self) -> Self {
        HubbleServer {
            handler: self.handler.clone(),
        }
    }
}

impl<H: GetFlows> HubbleServer<H> {
    /// The server of `handler`.
    pub fn new(handler: H) -> Self {
        HubbleServer {
            handler: Arc::new(handler),
        }
    }

    /// Binds a new unix socket at `path` (replacing a stale one), as Cilium serves
    /// `/var/run/cilium/hubble.sock`, and returns the server to spawn: it serves until
    /// `shutdown` completes, then waits for the open connections to close. Needs a tokio
    /// runtime.
    pub fn serve_unix(
        self,
        path: &Path,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<impl Future<Output = Result<(), tonic::transport::Error>> + Send + 'static>
    {
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path)?;
        let incoming = UnixListenerStream::new(listener);
        let router = Server::builder().add_service(self);
        Ok(async move {
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        })
    }
}

impl<H> NamedService for HubbleServer<H> {
    const NAME: &'static str = "observer.Observer";
}

impl<H, B> Service<http::Request<B>> for HubbleServer<H>
where
    H: GetFlows,
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
        let handler = self.handler.clone();
        Box::pin(async move {
            if request.uri().path() != "/observer.Observer/GetFlows" {
                return Ok(Status::unimplemented(request.uri().path().to_owned()).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(WireCodec);
            Ok(grpc.server_streaming(GetFlowsCall(handler), request).await)
        })
    }
}

/// One `GetFlows` call, handed to the handler.
struct GetFlowsCall<H>(Arc<H>);

impl<H: GetFlows> ServerStreamingService<GetFlowsRequest> for GetFlowsCall<H> {
    type Response = Bytes;
    type ResponseStream = ReceiverStream<Result<Bytes, Status>>;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<GetFlowsRequest>) -> Self::Future {
        let handler = self.0.clone();
        Box::pin(async move {
            let responses = handler.get_flows(request.into_inner())?;
            Ok(Response::new(ReceiverStream::new(responses)))
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
