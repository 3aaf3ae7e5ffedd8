//! The label against a scripted API server (tower-test): cleared at start, set on gain,
//! retried after a failure, removed on loss; the task ends with the election.

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

use super::*;

/// Answers the next request: asserts a merge patch of pod `ns/leader-0` setting the label to
/// `value`, and replies with `status`.
async fn expect_patch(
    handle: &mut tower_test::mock::Handle<Request<Body>, Response<Body>>,
    value: Value,
    status: u16,
) {
    let (request, respond) = handle.next_request().await.expect("a request");
    assert_eq!(request.method(), "PATCH");
    assert_eq!(request.uri().path(), "/api/v1/namespaces/ns/pods/leader-0");
    assert_eq!(
        request.headers()["content-type"],
        "application/merge-patch+json"
    );
    let body = request.into_body().collect_bytes().await.unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body, json!({"metadata": {"labels": {LEADER_LABEL: value}}}));
    let answer = if status == 200 {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "leader-0", "namespace": "ns"}})
    } else {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status, "message": "boom"})
    };
    respond.send_response(
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&answer).unwrap()))
            .unwrap(),
    );
}

#[tokio::test(start_paused = true)]
async fn the_label_follows_the_lease() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (lease, leadership) = watch::channel(true);
    let metrics = Arc::new(LeaderMetrics::default());
    let task = tokio::spawn(follow(
        PodLabeler::new(client, "ns", "leader-0"),
        leadership,
        metrics.clone(),
    ));
    // Cleared at start even though the Lease is already held, then set.
    expect_patch(&mut handle, Value::Null, 200).await;
    // A failure is counted and retried (after the backoff; time is paused).
    expect_patch(&mut handle, json!("true"), 500).await;
    expect_patch(&mut handle, json!("true"), 200).await;
    assert_eq!(metrics.pod_label_failures.get(), 1);
    lease.send(false).unwrap();
    expect_patch(&mut handle, Value::Null, 200).await;
    lease.send(true).unwrap();
    expect_patch(&mut handle, json!("true"), 200).await;
    // The election ends: so does the task, with nothing more written.
    drop(lease);
    task.await.unwrap();
    assert!(handle.next_request().await.is_none());
}
