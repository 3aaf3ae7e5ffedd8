//! A scripted Hubble server: `observer.Observer/GetFlows` over real gRPC (tonic's server, on
//! a unix socket or TLS on loopback TCP).
//!
//! The generated `ObserverServer` encodes `GetFlowsResponse`s with prost, which cannot
//! produce malformed bytes, so the server is `ne_proto::testing::HubbleServer`, which writes
//! each message's bytes as they are given: valid responses are prost-encoded by the script,
//! broken ones are written as broken.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ne_proto::observer::{GetFlowsRequest, GetFlowsResponse};
use ne_proto::prost::Message;
use ne_proto::testing::{GetFlows, HubbleServer};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Status;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

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
        let serve = HubbleServer::new(self.clone())
            .serve_unix(path, self.stopped())
            .unwrap();
        Running {
            hubble: self.clone(),
            task: tokio::spawn(async move {
                serve.await.unwrap();
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
            .add_service(HubbleServer::new(self.clone()));
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

impl GetFlows for TestHubble {
    fn get_flows(
        &self,
        request: GetFlowsRequest,
    ) -> Result<mpsc::Receiver<Result<Bytes, Status>>, Status> {
        let inner = &self.inner;
        inner.requests.lock().unwrap().push(request);
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
        Ok(rx)
    }
}
