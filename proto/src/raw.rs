//! Undecoded responses: a tonic codec that encodes requests with prost and hands each
//! response message over as its raw bytes.
//!
//! The agent's Hubble source reads `GetFlowsResponse`s this way and walks the bytes with
//! `ne_dataplanes::hubble_pb::decode_response`, which reads only the fields learning
//! needs; decoding into the prost structs of [`crate::observer`] would allocate every
//! string of every flow. The bytes are split off tonic's receive buffer without a copy.
//!
//! ```no_run
//! # async fn run(channel: tonic::transport::Channel) -> Result<(), tonic::Status> {
//! use ne_proto::observer::GetFlowsRequest;
//! let mut grpc = tonic::client::Grpc::new(channel);
//! let request = GetFlowsRequest { follow: true, ..Default::default() };
//! let mut stream = ne_proto::raw::hubble_get_flows(&mut grpc, request).await?.into_inner();
//! while let Some(message) = stream.message().await? {
//!     // message: bytes::Bytes, one encoded GetFlowsResponse
//!     let _ = message.len();
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, Streaming};
use tonic::codegen::{Body, GrpcMethod, StdError, http};
use tonic::{IntoRequest, Response, Status};

use crate::goldmane::FlowStreamRequest;
use crate::observer::GetFlowsRequest;

/// A codec that encodes requests of type `T` with prost and yields each response message
/// undecoded, as [`Bytes`].
pub struct RawCodec<T> {
    request: PhantomData<fn(T)>,
}

impl<T> RawCodec<T> {
    /// A new codec.
    pub fn new() -> Self {
        RawCodec {
            request: PhantomData,
        }
    }
}

impl<T> Default for RawCodec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for RawCodec<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for RawCodec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RawCodec")
    }
}

impl<T: prost::Message + Send + 'static> Codec for RawCodec<T> {
    type Encode = T;
    type Decode = Bytes;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

/// The decoder of [`RawCodec`]: the whole message body (after gRPC framing and
/// decompression), unparsed.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawDecoder;

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Starts Hubble's `observer.Observer/GetFlows`; each stream item is one encoded
/// `GetFlowsResponse`.
pub async fn hubble_get_flows<S>(
    grpc: &mut tonic::client::Grpc<S>,
    request: impl IntoRequest<GetFlowsRequest>,
) -> Result<Response<Streaming<Bytes>>, Status>
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::Error: Into<StdError>,
    S::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <S::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    let method = (
        "observer.Observer",
        "GetFlows",
        "/observer.Observer/GetFlows",
    );
    server_streaming(grpc, method, request).await
}

/// Starts Goldmane's `goldmane.Flows/Stream`; each stream item is one encoded
/// `FlowResult`.
pub async fn goldmane_stream<S>(
    grpc: &mut tonic::client::Grpc<S>,
    request: impl IntoRequest<FlowStreamRequest>,
) -> Result<Response<Streaming<Bytes>>, Status>
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::Error: Into<StdError>,
    S::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <S::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    let method = ("goldmane.Flows", "Stream", "/goldmane.Flows/Stream");
    server_streaming(grpc, method, request).await
}

/// Starts a server-streaming call of `(service, method, path)` with a [`RawCodec`].
async fn server_streaming<S, T>(
    grpc: &mut tonic::client::Grpc<S>,
    (service, method, path): (&'static str, &'static str, &'static str),
    request: impl IntoRequest<T>,
) -> Result<Response<Streaming<Bytes>>, Status>
where
    T: prost::Message + Send + 'static,
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::Error: Into<StdError>,
    S::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <S::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("service was not ready: {}", e.into())))?;
    let path = http::uri::PathAndQuery::from_static(path);
    let mut request = request.into_request();
    request
        .extensions_mut()
        .insert(GrpcMethod::new(service, method));
    grpc.server_streaming(request, path, RawCodec::<T>::new())
        .await
}
