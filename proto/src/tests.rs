//! Round trips through the generated types and an in-process gRPC server read with
//! [`crate::raw`].

use std::net::SocketAddr;

use prost::Message;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

use crate::flow::{self, Endpoint, Flow, Ip, Layer4, LostEvent, Tcp, Verdict, Workload};
use crate::goldmane::{self, FlowKey, FlowResult, FlowStreamRequest};
use crate::observer::get_flows_response::ResponseTypes;
use crate::observer::observer_server::{Observer, ObserverServer};
use crate::observer::{
    GetFlowsRequest, GetFlowsResponse, ServerStatusRequest, ServerStatusResponse,
};
use crate::relay::{NodeState, NodeStatusEvent};

fn sample_flow() -> Flow {
    Flow {
        time: Some(prost_types::Timestamp {
            seconds: 1_764_970_845,
            nanos: 123_456_789,
        }),
        verdict: Verdict::Forwarded as i32,
        ip: Some(Ip {
            source: "10.0.1.5".into(),
            destination: "10.0.2.9".into(),
            ip_version: flow::IpVersion::IPv4 as i32,
        }),
        l4: Some(Layer4 {
            protocol: Some(flow::layer4::Protocol::Tcp(Tcp {
                source_port: 40_000,
                destination_port: 8080,
                flags: Some(flow::TcpFlags {
                    syn: true,
                    ..Default::default()
                }),
            })),
        }),
        source: Some(Endpoint {
            identity: 25_339,
            namespace: "shop".into(),
            labels: vec![
                "k8s:app=web".into(),
                "k8s:io.kubernetes.pod.namespace=shop".into(),
            ],
            pod_name: "web-7d4b9c-abcde".into(),
            workloads: vec![Workload {
                name: "web".into(),
                kind: "Deployment".into(),
            }],
            ..Default::default()
        }),
        destination: Some(Endpoint {
            identity: 2,
            labels: vec!["reserved:world".into()],
            ..Default::default()
        }),
        node_name: "default/worker-1".into(),
        traffic_direction: flow::TrafficDirection::Egress as i32,
        is_reply: Some(false),
        uuid: "3f1c".into(),
        ..Default::default()
    }
}

fn flow_response() -> GetFlowsResponse {
    GetFlowsResponse {
        response_types: Some(ResponseTypes::Flow(sample_flow())),
        node_name: "default/worker-1".into(),
        time: Some(prost_types::Timestamp {
            seconds: 1_764_970_845,
            nanos: 0,
        }),
    }
}

fn lost_response() -> GetFlowsResponse {
    GetFlowsResponse {
        response_types: Some(ResponseTypes::LostEvents(LostEvent {
            source: flow::LostEventSource::HubbleRingBuffer as i32,
            num_events_lost: 42,
            cpu: Some(3),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn node_status_response() -> GetFlowsResponse {
    GetFlowsResponse {
        response_types: Some(ResponseTypes::NodeStatus(NodeStatusEvent {
            state_change: NodeState::NodeUnavailable as i32,
            node_names: vec!["default/worker-2".into()],
            message: "connection refused".into(),
        })),
        ..Default::default()
    }
}

#[test]
fn get_flows_response_round_trips() {
    for sent in [flow_response(), lost_response(), node_status_response()] {
        let bytes = sent.encode_to_vec();
        let back = GetFlowsResponse::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(back, sent);
    }
    // The oneof and the wrapper fields sit at Hubble's tags: flow = 1 (length-delimited,
    // key 0x0a), node_name = 1000 (key 0xc2 0x3e), time = 1001 (key 0xca 0x3e).
    let bytes = flow_response().encode_to_vec();
    assert_eq!(bytes[0], 0x0a);
    let tail = bytes
        .windows(2)
        .filter(|w| *w == [0xc2, 0x3e] || *w == [0xca, 0x3e])
        .count();
    assert_eq!(tail, 2);
}

#[test]
fn unknown_fields_are_skipped() {
    // A Hubble server sends fields this subset leaves out (ethernet = 4, Summary = 100000):
    // prost skips them and keeps the rest.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&[0x22, 0x02, 0xaa, 0xbb]); // field 4, 2 bytes
    bytes.extend_from_slice(&[0x82, 0xb5, 0x18, 0x01, b'x']); // field 100000, "x"
    bytes.extend_from_slice(&sample_flow().encode_to_vec());
    let flow = Flow::decode(bytes.as_slice()).expect("decodes");
    assert_eq!(flow, sample_flow());
}

/// A Hubble test server that streams a fixed list of responses.
struct TestObserver(Vec<GetFlowsResponse>);

#[tonic::async_trait]
impl Observer for TestObserver {
    type GetFlowsStream = tokio_stream::Iter<std::vec::IntoIter<Result<GetFlowsResponse, Status>>>;

    async fn get_flows(
        &self,
        request: Request<GetFlowsRequest>,
    ) -> Result<Response<Self::GetFlowsStream>, Status> {
        if !request.get_ref().follow {
            return Err(Status::invalid_argument("test server wants follow"));
        }
        let items: Vec<_> = self.0.iter().cloned().map(Ok).collect();
        Ok(Response::new(tokio_stream::iter(items)))
    }

    async fn server_status(
        &self,
        _: Request<ServerStatusRequest>,
    ) -> Result<Response<ServerStatusResponse>, Status> {
        Ok(Response::new(ServerStatusResponse {
            max_flows: 4095,
            num_connected_nodes: Some(3),
            version: "test".into(),
            ..Default::default()
        }))
    }
}

/// A Goldmane test server that streams one flow.
struct TestFlows;

#[tonic::async_trait]
impl goldmane::flows_server::Flows for TestFlows {
    type StreamStream = tokio_stream::Iter<std::vec::IntoIter<Result<FlowResult, Status>>>;

    async fn stream(
        &self,
        request: Request<FlowStreamRequest>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        let key = FlowKey {
            source_name: "web-*".into(),
            source_namespace: "shop".into(),
            dest_port: request.get_ref().aggregation_interval,
            reporter: goldmane::Reporter::Src as i32,
            action: goldmane::Action::Allow as i32,
            ..Default::default()
        };
        let result = FlowResult {
            id: 7,
            flow: Some(goldmane::Flow {
                key: Some(key),
                ..Default::default()
            }),
        };
        Ok(Response::new(tokio_stream::iter(vec![Ok(result)])))
    }
}

async fn serve(responses: Vec<GetFlowsResponse>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    let router = Server::builder()
        .add_service(ObserverServer::new(TestObserver(responses)))
        .add_service(goldmane::flows_server::FlowsServer::new(TestFlows));
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    addr
}

#[tokio::test]
async fn raw_codec_hands_over_the_encoded_messages() {
    let sent = vec![flow_response(), lost_response(), node_status_response()];
    let addr = serve(sent.clone()).await;
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");

    let mut grpc = tonic::client::Grpc::new(channel.clone());
    let request = GetFlowsRequest {
        follow: true,
        ..Default::default()
    };
    let mut stream = crate::raw::hubble_get_flows(&mut grpc, request)
        .await
        .expect("stream starts")
        .into_inner();
    let mut received = Vec::new();
    while let Some(bytes) = stream.message().await.expect("stream item") {
        received.push(bytes);
    }
    assert_eq!(received.len(), sent.len());
    for (bytes, want) in received.iter().zip(&sent) {
        assert_eq!(bytes.as_ref(), want.encode_to_vec().as_slice());
        assert_eq!(
            &GetFlowsResponse::decode(bytes.clone()).expect("decodes"),
            want
        );
    }

    // The server's status handler rejects nothing; its error path is reached through the
    // raw call too (a request without follow).
    let err = crate::raw::hubble_get_flows(&mut grpc, GetFlowsRequest::default())
        .await
        .expect_err("the test server wants follow");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    // The generated client works against the same server.
    let mut client = crate::observer::observer_client::ObserverClient::new(channel.clone());
    let status = client
        .server_status(ServerStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    assert_eq!(
        (status.max_flows, status.num_connected_nodes),
        (4095, Some(3))
    );

    // Goldmane's stream, raw: the bytes decode to the FlowResult the server built from
    // the request.
    let request = FlowStreamRequest {
        aggregation_interval: 15,
        ..Default::default()
    };
    let mut stream = crate::raw::goldmane_stream(&mut grpc, request)
        .await
        .expect("goldmane stream starts")
        .into_inner();
    let bytes = stream.message().await.expect("item").expect("one flow");
    let result = FlowResult::decode(bytes).expect("decodes");
    let key = result.flow.and_then(|f| f.key).expect("key");
    assert_eq!(
        (result.id, key.dest_port, key.source_name.as_str()),
        (7, 15, "web-*")
    );
    assert!(stream.message().await.expect("end").is_none());
}

/// The `testing` server's handler: the bytes it is given, on a request with `follow`.
struct Given(Vec<bytes::Bytes>);

impl crate::testing::GetFlows for Given {
    fn get_flows(
        &self,
        request: GetFlowsRequest,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<bytes::Bytes, Status>>, Status> {
        if !request.follow {
            return Err(Status::invalid_argument("test server wants follow"));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(self.0.len());
        for message in &self.0 {
            tx.try_send(Ok(message.clone()))
                .expect("room for every message");
        }
        Ok(rx)
    }
}

#[tokio::test]
async fn testing_hubble_server_sends_the_bytes_given() {
    // A valid response, then bytes no prost encoder would write.
    let sent = vec![
        bytes::Bytes::from(flow_response().encode_to_vec()),
        bytes::Bytes::from_static(b"\xff\xff\xff"),
    ];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    let router =
        Server::builder().add_service(crate::testing::HubbleServer::new(Given(sent.clone())));
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");

    let mut grpc = tonic::client::Grpc::new(channel.clone());
    let request = GetFlowsRequest {
        follow: true,
        ..Default::default()
    };
    let mut stream = crate::raw::hubble_get_flows(&mut grpc, request)
        .await
        .expect("stream starts")
        .into_inner();
    let mut received = Vec::new();
    while let Some(bytes) = stream.message().await.expect("stream item") {
        received.push(bytes);
    }
    assert_eq!(received, sent);

    // The handler's refusal is the call's status.
    let err = crate::raw::hubble_get_flows(&mut grpc, GetFlowsRequest::default())
        .await
        .expect_err("the handler wants follow");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    // Any other method is not there.
    let mut client = crate::observer::observer_client::ObserverClient::new(channel);
    let err = client
        .server_status(ServerStatusRequest {})
        .await
        .expect_err("only GetFlows is served");
    assert_eq!(err.code(), tonic::Code::Unimplemented);
}
