//! Monitor-mode detection: every merged edge whose subject a policy in `monitor` mode
//! covers is checked with real NetworkPolicy or Istio semantics ([`ne_shared::eval`],
//! exactly as `ne-leader check` does); what the policy would not allow is an observation
//! for that policy. Attribution is by the subject workload's `targetRef` and the edge's
//! direction, never by comparing selectors, so a workload's ingress and egress policies
//! (which share one selector) each get only their own traffic.

use std::collections::BTreeMap;

use ne_crds::{Backend, Mode, WorkloadEndpointRef, WorkloadNetworkPolicy};
use ne_shared::allowlist::kube_time;
use ne_shared::eval::{self, Decision, PolicyRef};
use ne_shared::flow::{Direction, Endpoint, EndpointId};
use ne_shared::index::MergedEdge;
use ne_shared::resolve::{Resolution, Resolver};

use super::record::Observation;
use crate::offline::check::{TargetKey, subject_workload, target_key};

/// Observations per policy (`namespace`, `name`), and what could not be checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Detected {
    pub observations: BTreeMap<(String, String), Vec<Observation>>,
    /// Edges a monitored policy allows.
    pub allowed: u64,
    /// Edges a policy could not be evaluated on (an invalid spec), by policy.
    pub errors: BTreeMap<(String, String), String>,
}

/// One end of a connection as the violation record names it.
pub fn endpoint_ref(endpoint: &Endpoint, resolution: &Resolution) -> WorkloadEndpointRef {
    let mut r = WorkloadEndpointRef {
        identity: endpoint.identity.as_ref().map(ToString::to_string),
        ip: endpoint.ip.map(|ip| ip.to_string()),
        ..WorkloadEndpointRef::default()
    };
    match (resolution, &endpoint.id) {
        (Resolution::Pod(p), _) => {
            r.namespace = Some(p.namespace.to_string());
            if let Some(owner) = &p.owner {
                r.kind = Some(owner.kind.as_str().to_owned());
                r.name = Some(owner.name.to_string());
            }
        }
        (Resolution::External(ip), _) => r.ip = Some(ip.to_string()),
        (Resolution::Reserved(reserved), _) => {
            r.kind = Some("Reserved".to_owned());
            r.name = Some(reserved.as_str().to_owned());
        }
        (Resolution::Unresolved(_), EndpointId::Pod { namespace, name }) => {
            r.namespace = Some(namespace.to_string());
            r.kind = Some("Pod".to_owned());
            r.name = Some(name.to_string());
        }
        (Resolution::Unresolved(_), _) => {}
    }
    r
}

/// Checks `merged` against the `monitor`-mode policies of `backend`.
pub fn detect(
    merged: &[MergedEdge],
    policies: &[WorkloadNetworkPolicy],
    resolver: &dyn Resolver,
    backend: Backend,
) -> Detected {
    let monitored: BTreeMap<TargetKey, &WorkloadNetworkPolicy> = policies
        .iter()
        .filter(|w| w.spec.mode == Mode::Monitor && w.spec.backend == backend)
        .map(|w| {
            (
                (
                    w.metadata.namespace.clone().unwrap_or_default(),
                    w.spec.target_ref.kind,
                    w.spec.target_ref.name.clone(),
                    w.spec.direction,
                ),
                w,
            )
        })
        .collect();
    let mut detected = Detected::default();
    // (policy, tuple) → observation, so several edges of one tuple add up.
    let mut tuples: BTreeMap<(String, String), Vec<Observation>> = BTreeMap::new();
    for m in merged {
        let edge = &m.edge;
        let subject = resolver.resolve(&edge.subject);
        let Some(owner) = subject_workload(&subject) else {
            continue;
        };
        let Some(policy) = monitored.get(&target_key(owner, edge.direction)) else {
            continue;
        };
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let name = policy.metadata.name.clone().unwrap_or_default();
        let peer = resolver.resolve(&edge.peer);
        let view = eval::flow_view(edge, &subject, &peer);
        match eval::evaluate(PolicyRef::from(&policy.spec), &namespace, &view) {
            Ok(Decision::Denied { .. }) => {}
            Ok(_) => {
                detected.allowed += 1;
                continue;
            }
            Err(error) => {
                detected.errors.insert((namespace, name), error.to_string());
                continue;
            }
        }
        let (local, remote) = (
            endpoint_ref(&edge.subject, &subject),
            endpoint_ref(&edge.peer, &peer),
        );
        let (source, destination) = match edge.direction {
            Direction::Egress => (local, remote),
            Direction::Ingress => (remote, local),
        };
        let observation = Observation {
            source,
            destination,
            protocol: edge.protocol.as_str().to_owned(),
            port: i32::from(edge.port),
            direction: policy.spec.direction,
            mode: Mode::Monitor,
            count: i64::try_from(m.count).unwrap_or(i64::MAX),
            first_seen: kube_time(m.first_seen),
            last_seen: kube_time(m.last_seen),
        };
        let list = tuples.entry((namespace, name)).or_default();
        match list.iter_mut().find(|o| {
            (&o.source, &o.destination, &o.protocol, o.port)
                == (
                    &observation.source,
                    &observation.destination,
                    &observation.protocol,
                    observation.port,
                )
        }) {
            Some(o) => {
                o.count = o.count.saturating_add(observation.count);
                if observation.first_seen.0 < o.first_seen.0 {
                    o.first_seen = observation.first_seen.clone();
                }
                if observation.last_seen.0 > o.last_seen.0 {
                    o.last_seen = observation.last_seen.clone();
                }
            }
            None => list.push(observation),
        }
    }
    detected.observations = tuples;
    detected
}
