//! Leader election against a real API server: two replicas on one Lease, exactly one
//! holds it, and when the holder goes the other takes over.

mod cluster;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use ne_leader::election;
use ne_leader::ingest::Leadership;

#[tokio::test]
async fn one_of_two_replicas_holds_the_lease_and_the_other_takes_over() {
    let client = cluster::client().await;
    let name = format!("ne-election-test-{}", std::process::id());
    let (mut a, _) = election::join(client.clone(), "default", &name, "replica-a")
        .await
        .unwrap();
    let (mut b, _) = election::join(client.clone(), "default", &name, "replica-b")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        while !a.is_leader() && !b.is_leader() {
            tokio::select! {
                _ = a.changed() => {}
                _ = b.changed() => {}
            }
        }
    })
    .await
    .expect("nobody took the Lease within 60 s");
    assert_ne!(a.is_leader(), b.is_leader(), "exactly one replica leads");

    // The holder goes away (its leadership handle is dropped, which releases the Lease).
    let (holder, mut standby) = if a.is_leader() { (a, b) } else { (b, a) };
    drop(holder);
    let took_over = tokio::time::timeout(Duration::from_secs(60), standby.acquired())
        .await
        .expect("the standby did not take over within 60 s");
    assert!(took_over && standby.is_leader());

    drop(standby);
    let leases: kube::Api<Lease> = kube::Api::namespaced(client, "default");
    let _ = leases.delete(&name, &Default::default()).await;
}
