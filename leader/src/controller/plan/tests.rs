//! Table tests of the planner: each case states a cluster and what was learned, and checks
//! the writes; the idempotence cases feed a plan's own output back as the cluster state.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff;
use ne_crds::{
    AuthorizationPolicy, Backend, ISTIO_DRY_RUN_ANNOTATION, IstioAuthorizationPolicySpec,
    IstioFrom, IstioOperation, IstioRule, IstioSource, IstioTo, Mode, PROMOTE_LABEL,
    PROMOTED_FROM_LABEL, PeerEvidence, PolicyDirection, TargetKind, TargetRef,
    WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal, WorkloadNetworkPolicyProposalSpec,
    WorkloadNetworkPolicyProposalStatus, WorkloadNetworkPolicySpec, WorkloadNetworkPolicyStatus,
};
use ne_flow::flow::Direction;
use ne_flow::flow::WorkloadKind;
use ne_policy::allowlist::proposal_name;

use super::*;

const NS: &str = "shop";

fn time(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(secs).unwrap())
}

fn selector(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([("app".to_owned(), app.to_owned())].into()),
        match_expressions: None,
    }
}

fn peer(app: &str) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(selector(app)),
        namespace_selector: Some(LabelSelector {
            match_labels: Some([("kubernetes.io/metadata.name".to_owned(), NS.to_owned())].into()),
            match_expressions: None,
        }),
        ip_block: None,
    }
}

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".to_owned()),
        port: Some(IntOrString::Int(port)),
        end_port: None,
    }
}

/// A learned (or written) ingress proposal of Deployment `name`, one rule per peer:
/// `(peer app, port, first seen, last seen, flows)`.
fn proposal(name: &str, peers: &[(&str, i32, i64, i64, i64)]) -> WorkloadNetworkPolicyProposal {
    let mut rules: Vec<NetworkPolicyIngressRule> = Vec::new();
    for (app, port, ..) in peers {
        match rules
            .iter_mut()
            .find(|r| r.from.as_deref() == Some(&[peer(app)][..]))
        {
            Some(r) => r.ports.as_mut().unwrap().push(tcp(*port)),
            None => rules.push(NetworkPolicyIngressRule {
                from: Some(vec![peer(app)]),
                ports: Some(vec![tcp(*port)]),
            }),
        }
    }
    let spec = WorkloadNetworkPolicyProposalSpec {
        backend: Backend::Kubernetes,
        kubernetes: Some(NetworkPolicySpec {
            pod_selector: Some(selector(name)),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(rules),
            egress: None,
        }),
        istio: None,
        target_ref: TargetRef {
            kind: TargetKind::Deployment,
            name: name.to_owned(),
        },
        direction: PolicyDirection::Ingress,
    };
    let object_name = proposal_name(WorkloadKind::Deployment, name, Direction::Ingress);
    let mut p = WorkloadNetworkPolicyProposal::new(&object_name, spec);
    p.metadata.namespace = Some(NS.to_owned());
    let rows: Vec<PeerEvidence> = peers
        .iter()
        .map(|(app, port, first, last, flows)| PeerEvidence {
            peer: format!("pods:{NS}/app={app}"),
            protocol: "TCP".to_owned(),
            port: *port,
            first_seen: time(*first),
            last_seen: time(*last),
            flow_count: *flows,
            dns_name: None,
        })
        .collect();
    let mut status = WorkloadNetworkPolicyProposalStatus {
        learning_since: rows
            .iter()
            .map(|r| r.first_seen.clone())
            .min_by_key(|t| t.0),
        flow_count: rows.iter().map(|r| r.flow_count).sum(),
        peers: rows,
        ..Default::default()
    };
    status.summarize();
    p.status = Some(status);
    p
}

fn istio_proposal(name: &str, principal: &str, port: &str) -> WorkloadNetworkPolicyProposal {
    let mut p = proposal(name, &[("x", 1, 100, 100, 1)]);
    p.spec.backend = Backend::Istio;
    p.spec.kubernetes = None;
    p.spec.istio = Some(IstioAuthorizationPolicySpec {
        selector: selector(name),
        rules: vec![IstioRule {
            from: vec![IstioFrom {
                source: IstioSource {
                    principals: vec![principal.to_owned()],
                },
            }],
            to: vec![IstioTo {
                operation: IstioOperation {
                    ports: vec![port.to_owned()],
                },
            }],
        }],
    });
    p
}

/// As the API server would return an object we wrote: with uid and resourceVersion.
fn stored<K: kube::Resource>(mut object: K, uid: &str) -> K {
    object.meta_mut().uid = Some(uid.to_owned());
    object.meta_mut().resource_version = Some("1".to_owned());
    object.meta_mut().generation = Some(1);
    object
}

fn policy(name: &str, target: &str, mode: Mode) -> WorkloadNetworkPolicy {
    let p = proposal(target, &[("web", 8080, 100, 100, 1)]);
    let spec = WorkloadNetworkPolicySpec {
        backend: p.spec.backend,
        kubernetes: p.spec.kubernetes,
        istio: p.spec.istio,
        target_ref: p.spec.target_ref,
        direction: p.spec.direction,
        mode,
    };
    let mut w = WorkloadNetworkPolicy::new(name, spec);
    w.metadata.namespace = Some(NS.to_owned());
    stored(w, &format!("uid-{name}"))
}

struct Case {
    learned: Vec<WorkloadNetworkPolicyProposal>,
    workloads: BTreeMap<WorkloadKey, Workload>,
    proposals: Vec<WorkloadNetworkPolicyProposal>,
    policies: Vec<WorkloadNetworkPolicy>,
    network_policies: Vec<NetworkPolicy>,
    authorization_policies: Option<Vec<AuthorizationPolicy>>,
    observations: BTreeMap<(String, String), Vec<crate::violations::record::Observation>>,
    rule_issues: BTreeMap<(String, String), RuleIssues>,
    safety: crate::controller::safety::Safety,
    config: Config,
    now: Time,
}

impl Case {
    fn new() -> Self {
        let workloads = ["api", "db", "web"]
            .into_iter()
            .map(|n| {
                (
                    (NS.to_owned(), TargetKind::Deployment, n.to_owned()),
                    Workload {
                        uid: format!("uid-deploy-{n}"),
                        service_account: Some(n.to_owned()),
                    },
                )
            })
            .collect();
        Case {
            learned: Vec::new(),
            workloads,
            proposals: Vec::new(),
            policies: Vec::new(),
            network_policies: Vec::new(),
            authorization_policies: Some(Vec::new()),
            observations: BTreeMap::new(),
            rule_issues: BTreeMap::new(),
            safety: Default::default(),
            config: Config {
                backend: Backend::Kubernetes,
                excluded_namespaces: BTreeSet::from(["network-enforcer".to_owned()]),
                stable_after: Duration::from_secs(600),
                status_refresh: Duration::from_secs(60),
            },
            now: time(1_000),
        }
    }

    fn plan(&self) -> Plan {
        let world = World {
            learned: &self.learned,
            workloads: &self.workloads,
            proposals: &self.proposals,
            policies: &self.policies,
            network_policies: &self.network_policies,
            authorization_policies: self.authorization_policies.as_deref(),
            observations: &self.observations,
            rule_issues: &self.rule_issues,
            safety: &self.safety,
            now: &self.now,
        };
        plan(&world, &self.config)
    }

    /// Carries out `plan` as the API server would (objects get uids), so that the next
    /// plan sees the result.
    fn apply(&mut self, plan: &Plan) {
        for action in &plan.actions {
            match action {
                Action::ApplyProposal { object, .. } => {
                    let key = ObjectKey::of(&**object);
                    self.proposals.retain(|p| ObjectKey::of(p).name != key.name);
                    self.proposals
                        .push(stored((**object).clone(), &format!("uid-{}", key.name)));
                }
                Action::DeleteProposal { key, .. } => {
                    self.proposals.retain(|p| ObjectKey::of(p).name != key.name)
                }
                Action::Promote { policy, proposal } => {
                    self.policies.push(stored(
                        (**policy).clone(),
                        &format!("uid-{}", proposal.name),
                    ));
                    self.proposals
                        .retain(|p| ObjectKey::of(p).name != proposal.name);
                }
                Action::ApplyPolicyStatus {
                    key, conditions, ..
                } => {
                    let w = self
                        .policies
                        .iter_mut()
                        .find(|w| ObjectKey::of(*w).name == key.name)
                        .unwrap();
                    w.status.get_or_insert_default().conditions = conditions.clone();
                }
                Action::ApplyNetworkPolicy(np) => {
                    let key = ObjectKey::of(&**np);
                    self.network_policies
                        .retain(|n| ObjectKey::of(n).name != key.name);
                    self.network_policies.push(stored((**np).clone(), "uid-np"));
                }
                Action::DeleteNetworkPolicy(key) => self
                    .network_policies
                    .retain(|n| ObjectKey::of(n).name != key.name),
                Action::ApplyAuthorizationPolicy(ap) => {
                    let aps = self.authorization_policies.as_mut().unwrap();
                    let key = ObjectKey::of(&**ap);
                    aps.retain(|a| ObjectKey::of(a).name != key.name);
                    aps.push(stored((**ap).clone(), "uid-ap"));
                }
                Action::DeleteAuthorizationPolicy(key) => self
                    .authorization_policies
                    .as_mut()
                    .unwrap()
                    .retain(|a| ObjectKey::of(a).name != key.name),
                Action::ApplyViolations {
                    key,
                    status,
                    remove_annotations,
                    ..
                } => {
                    let w = self
                        .policies
                        .iter_mut()
                        .find(|w| ObjectKey::of(*w).name == key.name)
                        .unwrap();
                    let conditions = w.status.take().unwrap_or_default().conditions;
                    w.status = Some(WorkloadNetworkPolicyStatus {
                        conditions,
                        ..(**status).clone()
                    });
                    if let Some(a) = w.metadata.annotations.as_mut() {
                        a.retain(|k, _| !remove_annotations.contains(k));
                    }
                }
                Action::Event(_) => {}
            }
        }
    }

    /// Plans and applies until nothing is left to write; returns every plan made.
    fn settle(&mut self) -> Vec<Plan> {
        let mut plans = Vec::new();
        for _ in 0..5 {
            let plan = self.plan();
            let writes = plan.actions.iter().any(|a| !matches!(a, Action::Event(_)));
            self.apply(&plan);
            plans.push(plan);
            if !writes {
                return plans;
            }
        }
        panic!("the plan does not settle: {:#?}", plans.last());
    }
}

fn applied_proposal(plan: &Plan) -> &WorkloadNetworkPolicyProposal {
    plan.actions
        .iter()
        .find_map(|a| match a {
            Action::ApplyProposal { object, .. } => Some(&**object),
            _ => None,
        })
        .expect("a proposal is applied")
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {conditions:?}"))
}

fn ports_of(p: &WorkloadNetworkPolicyProposal) -> Vec<(String, Vec<i32>)> {
    p.spec
        .kubernetes
        .as_ref()
        .unwrap()
        .ingress
        .as_ref()
        .unwrap()
        .iter()
        .map(|r| {
            let app = r.from.as_ref().unwrap()[0]
                .pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app"]
                .clone();
            let ports = r
                .ports
                .as_ref()
                .unwrap()
                .iter()
                .map(|p| match p.port {
                    Some(IntOrString::Int(n)) => n,
                    _ => 0,
                })
                .collect();
            (app, ports)
        })
        .collect()
}

#[test]
fn a_learned_allow_list_becomes_an_owned_proposal_then_nothing_more_is_written() {
    let mut case = Case::new();
    case.learned = vec![proposal("api", &[("web", 8080, 900, 990, 7)])];
    let plans = case.settle();
    assert_eq!(plans.len(), 2, "one write round, then an empty plan");
    let first = &plans[0];
    assert_eq!(first.actions.len(), 1);
    let Action::ApplyProposal {
        object,
        spec,
        status,
    } = &first.actions[0]
    else {
        panic!("{first:?}")
    };
    assert!(*spec && *status);
    assert_eq!(
        object.metadata.name.as_deref(),
        Some("deployment-api-ingress")
    );
    let owner = &object.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        ("apps/v1", "Deployment", "api", "uid-deploy-api")
    );
    assert_eq!(
        object.metadata.labels.as_ref().unwrap()[MANAGED_BY.0],
        MANAGED_BY.1
    );
    let status = object.status.as_ref().unwrap();
    assert_eq!(status.flow_count, 7);
    let stable = condition(&status.conditions, "Stable");
    assert_eq!(
        (stable.status.as_str(), stable.reason.as_str()),
        ("False", "Learning")
    );
    assert!(plans[1].actions.is_empty(), "{:?}", plans[1]);
}

#[test]
fn learning_only_adds_ports_peers_and_evidence_and_is_idempotent() {
    let mut case = Case::new();
    // Written earlier: web:8080 and an old peer (cron:9000) the index no longer holds.
    case.proposals = vec![stored(
        proposal(
            "api",
            &[("web", 8080, 100, 200, 50), ("cron", 9000, 150, 150, 2)],
        ),
        "uid-p",
    )];
    case.learned = vec![proposal(
        "api",
        &[
            ("web", 8080, 300, 900, 10),
            ("web", 8443, 800, 900, 3),
            ("db", 5432, 850, 900, 4),
        ],
    )];
    let plan = case.plan();
    let merged = applied_proposal(&plan);
    assert_eq!(
        ports_of(merged),
        vec![
            ("web".to_owned(), vec![8080, 8443]),
            ("cron".to_owned(), vec![9000]),
            ("db".to_owned(), vec![5432]),
        ]
    );
    let status = merged.status.as_ref().unwrap();
    let web = &status.peers[0];
    assert_eq!(
        (
            web.first_seen.0.as_second(),
            web.last_seen.0.as_second(),
            web.flow_count
        ),
        (100, 900, 50)
    );
    assert_eq!(status.peers.len(), 4);
    assert_eq!(status.flow_count, 50 + 2 + 3 + 4);
    assert_eq!(status.learning_since.as_ref().unwrap().0.as_second(), 100);
    // Merging the same learned content into the result writes nothing.
    case.apply(&plan);
    assert_eq!(case.plan(), Plan::default());
}

#[test]
fn stable_once_no_new_peer_or_port_for_the_configured_time() {
    let mut case = Case::new();
    case.learned = vec![proposal("api", &[("web", 8080, 100, 990, 7)])];
    case.now = time(100 + 599);
    let status = applied_proposal(&case.plan()).status.clone().unwrap();
    assert_eq!(condition(&status.conditions, "Stable").status, "False");
    case.now = time(100 + 600);
    let status = applied_proposal(&case.plan()).status.clone().unwrap();
    let stable = condition(&status.conditions, "Stable");
    assert_eq!(
        (stable.status.as_str(), stable.reason.as_str()),
        ("True", "NoNewPeers")
    );
    assert_eq!(stable.last_transition_time, time(700));
}

#[test]
fn proposals_are_skipped_with_a_reason() {
    let mut case = Case::new();
    let mut excluded = proposal("api", &[("web", 80, 1, 1, 1)]);
    excluded.metadata.namespace = Some("network-enforcer".to_owned());
    let unknown = proposal("ghost", &[("web", 80, 1, 1, 1)]);
    let covered = proposal("db", &[("web", 80, 1, 1, 1)]);
    case.policies = vec![policy("hand-made", "db", Mode::Monitor)];
    case.network_policies = Vec::new();
    case.learned = vec![excluded, unknown, covered];
    let plan = case.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::ApplyProposal { .. })),
        "{plan:?}"
    );
    assert_eq!(
        plan.skipped,
        BTreeMap::from([
            ("excluded_namespace", 1),
            ("policy_exists", 1),
            ("workload_not_found", 1)
        ])
    );
}

#[test]
fn a_promote_label_creates_the_policy_and_removes_the_proposal() {
    for (value, mode) in [("monitor", Mode::Monitor), ("protect", Mode::Protect)] {
        let mut case = Case::new();
        let mut p = stored(proposal("api", &[("web", 8080, 1, 2, 3)]), "uid-p");
        p.metadata.labels = Some([(PROMOTE_LABEL.to_owned(), value.to_owned())].into());
        case.proposals = vec![p.clone()];
        // Learning for the target goes on meanwhile; the promoted proposal is not touched.
        case.learned = vec![proposal("api", &[("web", 9999, 1, 2, 3)])];
        let plan = case.plan();
        let [
            Action::Promote {
                policy,
                proposal: from,
            },
        ] = plan.actions.as_slice()
        else {
            panic!("{plan:?}")
        };
        assert_eq!(from, &ObjectKey::of(&p));
        assert_eq!(policy.metadata.name, p.metadata.name);
        assert_eq!(policy.spec.mode, mode);
        assert_eq!(policy.spec.kubernetes, p.spec.kubernetes);
        assert_eq!(
            (&policy.spec.target_ref, policy.spec.direction),
            (&p.spec.target_ref, p.spec.direction)
        );
        assert_eq!(
            policy.metadata.labels.as_ref().unwrap()[PROMOTED_FROM_LABEL],
            "deployment-api-ingress"
        );
        assert_eq!(plan.skipped, BTreeMap::from([("promoting", 1)]));
        // Once promoted, learning for that target stops.
        case.apply(&plan);
        assert!(
            !case
                .plan()
                .actions
                .iter()
                .any(|a| matches!(a, Action::ApplyProposal { .. } | Action::Promote { .. }))
        );
    }
}

#[test]
fn a_long_workload_name_promotes_under_a_valid_label_value() {
    let long = "a".repeat(80);
    let mut case = Case::new();
    case.workloads.insert(
        (NS.to_owned(), TargetKind::Deployment, long.clone()),
        Workload {
            uid: "uid-long".to_owned(),
            service_account: None,
        },
    );
    let mut p = stored(proposal(&long, &[("web", 80, 1, 1, 1)]), "uid-p");
    p.metadata.labels = Some([(PROMOTE_LABEL.to_owned(), "monitor".to_owned())].into());
    case.proposals = vec![p];
    let plan = case.plan();
    let [Action::Promote { policy, .. }] = plan.actions.as_slice() else {
        panic!("{plan:?}")
    };
    let from = &policy.metadata.labels.as_ref().unwrap()[PROMOTED_FROM_LABEL];
    assert!(
        from.len() <= 63 && from.starts_with("deployment-aaaa"),
        "{from}"
    );
    assert_eq!(policy.metadata.name.as_ref(), Some(from));
    assert_eq!(policy.spec.target_ref.name, long);
}

#[test]
fn promotion_never_overwrites_a_policy() {
    let mut case = Case::new();
    let mut p = stored(proposal("api", &[("web", 8080, 1, 2, 3)]), "uid-p");
    p.metadata.labels = Some([(PROMOTE_LABEL.to_owned(), "protect".to_owned())].into());
    case.proposals = vec![p.clone()];
    // Same name, not promoted from this proposal.
    case.policies = vec![policy("deployment-api-ingress", "db", Mode::Monitor)];
    let conflict = case.plan();
    assert!(conflict.actions.iter().any(|a| matches!(a,
        Action::Event(Event { warning: true, reason: "PromotionConflict", regarding, .. }) if regarding == &ObjectKey::of(&p))));
    assert!(
        !conflict
            .actions
            .iter()
            .any(|a| matches!(a, Action::Promote { .. } | Action::DeleteProposal { .. }))
    );
    // Another name, same target and direction.
    case.policies = vec![policy("other", "api", Mode::Monitor)];
    let conflict = case.plan();
    assert!(conflict.actions.iter().any(|a| matches!(
        a,
        Action::Event(Event {
            reason: "PromotionConflict",
            ..
        })
    )));
    assert!(
        !conflict
            .actions
            .iter()
            .any(|a| matches!(a, Action::Promote { .. } | Action::DeleteProposal { .. }))
    );
    // Promoted before, the proposal's delete was lost: delete it now.
    let mut done = policy("deployment-api-ingress", "api", Mode::Protect);
    done.metadata.labels = Some(
        [(
            PROMOTED_FROM_LABEL.to_owned(),
            "deployment-api-ingress".to_owned(),
        )]
        .into(),
    );
    case.policies = vec![done];
    let leftover = case.plan();
    assert!(leftover.actions.contains(&Action::DeleteProposal {
        key: ObjectKey::of(&p),
        reason: "promoted"
    }));
}

#[test]
fn an_invalid_promote_label_is_a_warning_and_learning_goes_on() {
    let mut case = Case::new();
    let mut p = stored(proposal("api", &[("web", 8080, 1, 2, 3)]), "uid-p");
    p.metadata.labels = Some([(PROMOTE_LABEL.to_owned(), "enforce".to_owned())].into());
    case.proposals = vec![p];
    case.learned = vec![proposal("api", &[("web", 8443, 1, 2, 3)])];
    let plan = case.plan();
    assert!(plan.actions.iter().any(|a| matches!(a, Action::Event(Event { warning: true, reason: "InvalidPromoteLabel", note, .. }) if note.contains("enforce"))));
    assert_eq!(
        ports_of(applied_proposal(&plan)),
        vec![("web".to_owned(), vec![8080, 8443])]
    );
}

#[test]
fn a_proposal_of_another_backend_is_deleted_and_learned_anew() {
    let mut case = Case::new();
    let old = stored(
        istio_proposal("api", "cluster.local/ns/shop/sa/web", "8080"),
        "uid-old",
    );
    case.proposals = vec![old.clone()];
    case.learned = vec![proposal("api", &[("web", 8080, 500, 600, 1)])];
    let plan = case.plan();
    assert_eq!(
        plan.actions[0],
        Action::DeleteProposal {
            key: ObjectKey::of(&old),
            reason: "backend_changed"
        }
    );
    let fresh = applied_proposal(&plan);
    assert_eq!(fresh.spec.backend, Backend::Kubernetes);
    assert!(fresh.spec.istio.is_none());
    assert_eq!(
        fresh.status.as_ref().unwrap().learning_since,
        Some(time(500)),
        "not merged with the old one"
    );
}

#[test]
fn protect_makes_an_owned_network_policy_and_monitor_removes_it() {
    let mut case = Case::new();
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Protect)];
    let plans = case.settle();
    let np = case.network_policies.first().expect("a NetworkPolicy");
    assert_eq!(np.spec, case.policies[0].spec.kubernetes);
    let owner = &np.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        (
            "WorkloadNetworkPolicy",
            "uid-deployment-api-ingress",
            Some(true)
        )
    );
    let ready = condition(
        &case.policies[0].status.as_ref().unwrap().conditions,
        "Ready",
    );
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Enforced")
    );
    assert!(plans.last().unwrap().actions.is_empty());

    case.policies[0].spec.mode = Mode::Monitor;
    case.settle();
    assert!(case.network_policies.is_empty());
    let ready = condition(
        &case.policies[0].status.as_ref().unwrap().conditions,
        "Ready",
    );
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Monitoring")
    );
}

#[test]
fn a_same_named_object_not_controlled_by_the_policy_is_never_touched() {
    let mut case = Case::new();
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Protect)];
    let mut theirs = NetworkPolicy::default();
    theirs.metadata.name = Some("deployment-api-ingress".to_owned());
    theirs.metadata.namespace = Some(NS.to_owned());
    case.network_policies = vec![stored(theirs, "uid-theirs")];
    let plans = case.settle();
    assert!(plans.iter().flat_map(|p| &p.actions).all(|a| !matches!(
        a,
        Action::ApplyNetworkPolicy(_) | Action::DeleteNetworkPolicy(_)
    )));
    assert!(plans[0].actions.iter().any(|a| matches!(
        a,
        Action::Event(Event {
            warning: true,
            reason: "NativePolicyConflict",
            ..
        })
    )));
    let conditions = &case.policies[0].status.as_ref().unwrap().conditions;
    assert_eq!(condition(conditions, "NativePolicyConflict").status, "True");
    assert_eq!(
        condition(conditions, "Ready").reason,
        "NativePolicyConflict"
    );
    // Switching to monitor does not delete it either.
    case.policies[0].spec.mode = Mode::Monitor;
    let plan = case.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNetworkPolicy(_)))
    );
}

fn peers_resolved(case: &Case) -> (String, String, String) {
    let c = condition(
        &case.policies[0].status.as_ref().unwrap().conditions,
        "PeersResolved",
    );
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

/// The Warning Events planned, once per key (the writer records an Event once per key).
fn warnings(plans: &[Plan]) -> Vec<(&'static str, String)> {
    let mut keys = BTreeSet::new();
    plans
        .iter()
        .flat_map(|p| &p.actions)
        .filter_map(|a| match a {
            Action::Event(e) if e.warning && keys.insert(e.key.clone()) => {
                Some((e.reason, e.note.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn quiet_says_whether_violations_are_active_and_when_the_last_was_seen() {
    let mut case = Case::new();
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Monitor)];
    case.settle();
    let quiet = |case: &Case| {
        let c = condition(
            &case.policies[0].status.as_ref().unwrap().conditions,
            "Quiet",
        );
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    assert_eq!(
        quiet(&case),
        (
            "True".to_owned(),
            "NoActiveViolations".to_owned(),
            "no violation has been seen".to_owned()
        )
    );
    // Two records, the newest seen at 950 s.
    case.observations.insert(
        (NS.to_owned(), "deployment-api-ingress".to_owned()),
        vec![observed("cron"), observed("web")],
    );
    case.settle();
    let (status, reason, message) = quiet(&case);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ActiveViolations")
    );
    assert!(
        message.starts_with("2 active violation(s), the last seen at 1970-01-01T00:15:50Z"),
        "{message}"
    );
    // Both acknowledged: quiet again, and it says since when.
    case.policies[0].metadata.annotations = Some(
        ["1", "2"]
            .map(|id| {
                (
                    format!("networkenforcer.kubewarden.io/acknowledge-{id}"),
                    "expected".to_owned(),
                )
            })
            .into(),
    );
    case.settle();
    assert_eq!(
        quiet(&case),
        (
            "True".to_owned(),
            "NoActiveViolations".to_owned(),
            "no active violation; the last was seen at 1970-01-01T00:15:50Z".to_owned()
        )
    );
}

#[test]
fn rules_that_select_nothing_get_a_condition_and_one_warning_per_finding() {
    let mut case = Case::new();
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Monitor)];
    case.settle();
    assert_eq!(peers_resolved(&case).0, "True");

    // A peer that selects nothing: the condition says which, a Warning says it once per
    // spec and finding, and nothing else is written.
    let key = (NS.to_owned(), "deployment-api-ingress".to_owned());
    let unselected = "spec.kubernetes.ingress[0].from[0]".to_owned();
    case.rule_issues.insert(
        key.clone(),
        RuleIssues {
            invalid: Vec::new(),
            unselected: vec![unselected.clone()],
        },
    );
    let plans = case.settle();
    let (status, reason, message) = peers_resolved(&case);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "PeerSelectsNothing")
    );
    assert!(message.contains(&unselected), "{message}");
    assert_eq!(warnings(&plans), [("PeerSelectsNothing", message.clone())]);
    assert!(
        plans
            .iter()
            .flat_map(|p| &p.actions)
            .all(|a| matches!(a, Action::ApplyPolicyStatus { .. } | Action::Event(_)))
    );
    let ready = condition(
        &case.policies[0].status.as_ref().unwrap().conditions,
        "Ready",
    );
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Monitoring")
    );
    // The same finding again: the same event key (the writer records it once).
    let key_of = |plan: &Plan| {
        plan.actions.iter().find_map(|a| match a {
            Action::Event(e) => Some(e.key.clone()),
            _ => None,
        })
    };
    assert_eq!(key_of(&case.plan()), key_of(&plans[0]));

    // Invalid parts come first; the unselected peers are still named.
    case.rule_issues.get_mut(&key).unwrap().invalid = vec![
        "spec.kubernetes.ingress[1].from[0].podSelector: unknown selector operator \"Has\""
            .to_owned(),
    ];
    let plans = case.settle();
    let (status, reason, message) = peers_resolved(&case);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidRule"));
    assert!(
        message.contains("ingress[1].from[0].podSelector") && message.contains(&unselected),
        "{message}"
    );
    assert_eq!(warnings(&plans)[0].0, "InvalidRule");

    // Fixed: the condition flips back and no warning is left to record.
    case.rule_issues.clear();
    let plans = case.settle();
    assert_eq!(peers_resolved(&case).0, "True");
    assert!(warnings(&plans).is_empty());
}

#[test]
fn a_long_list_of_findings_is_cut_in_the_message() {
    let mut case = Case::new();
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Monitor)];
    case.rule_issues.insert(
        (NS.to_owned(), "deployment-api-ingress".to_owned()),
        RuleIssues {
            invalid: Vec::new(),
            unselected: (0..12)
                .map(|i| format!("spec.kubernetes.ingress[{i}].from[0]"))
                .collect(),
        },
    );
    case.settle();
    let (_, _, message) = peers_resolved(&case);
    assert!(
        message.contains("ingress[4].from[0]") && !message.contains("ingress[5].from[0]"),
        "{message}"
    );
    assert!(message.ends_with(" and 7 more"), "{message}");
}

fn istio_policy(mode: Mode) -> WorkloadNetworkPolicy {
    let p = istio_proposal("api", "cluster.local/ns/shop/sa/web", "8080");
    let mut w = policy("deployment-api-ingress", "api", mode);
    w.spec.backend = Backend::Istio;
    w.spec.kubernetes = None;
    w.spec.istio = p.spec.istio;
    w
}

#[test]
fn istio_policies_are_authorization_policies_dry_run_in_monitor_only() {
    let mut case = Case::new();
    case.config.backend = Backend::Istio;
    case.policies = vec![istio_policy(Mode::Monitor)];
    case.settle();
    let ap = &case.authorization_policies.as_ref().unwrap()[0];
    assert_eq!(
        ap.metadata.annotations.as_ref().unwrap()[ISTIO_DRY_RUN_ANNOTATION],
        "true"
    );
    assert_eq!(ap.spec.action.as_deref(), Some("ALLOW"));
    assert_eq!(
        ap.spec.selector.as_ref().unwrap().match_labels,
        BTreeMap::from([("app".to_owned(), "api".to_owned())])
    );
    assert_eq!(
        ap.spec.rules,
        case.policies[0].spec.istio.as_ref().unwrap().rules
    );
    assert_eq!(
        condition(
            &case.policies[0].status.as_ref().unwrap().conditions,
            "Ready"
        )
        .reason,
        "Monitoring"
    );

    case.policies[0].spec.mode = Mode::Protect;
    case.settle();
    let ap = &case.authorization_policies.as_ref().unwrap()[0];
    assert!(
        ap.metadata
            .annotations
            .as_ref()
            .is_none_or(|a| !a.contains_key(ISTIO_DRY_RUN_ANNOTATION))
    );
    assert_eq!(
        condition(
            &case.policies[0].status.as_ref().unwrap().conditions,
            "Ready"
        )
        .reason,
        "Enforced"
    );
}

#[test]
fn istio_policies_that_cannot_exist_say_why() {
    let mut case = Case::new();
    case.config.backend = Backend::Istio;
    case.authorization_policies = None;
    case.policies = vec![istio_policy(Mode::Protect)];
    case.settle();
    assert_eq!(
        condition(
            &case.policies[0].status.as_ref().unwrap().conditions,
            "Ready"
        )
        .reason,
        "AuthorizationPolicyUnavailable"
    );

    let mut case = Case::new();
    case.config.backend = Backend::Istio;
    let mut w = istio_policy(Mode::Protect);
    w.spec.istio.as_mut().unwrap().selector.match_expressions =
        Some(vec![LabelSelectorRequirement {
            key: "tier".to_owned(),
            operator: "In".to_owned(),
            values: Some(vec!["a".to_owned()]),
        }]);
    case.policies = vec![w];
    let plans = case.settle();
    assert!(
        plans
            .iter()
            .flat_map(|p| &p.actions)
            .all(|a| !matches!(a, Action::ApplyAuthorizationPolicy(_)))
    );
    assert_eq!(
        condition(
            &case.policies[0].status.as_ref().unwrap().conditions,
            "Ready"
        )
        .reason,
        "SelectorNotExpressible"
    );
}

#[test]
fn a_policy_of_an_inactive_backend_is_left_alone_with_a_condition() {
    let mut case = Case::new();
    case.config.backend = Backend::Istio;
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Protect)];
    let plans = case.settle();
    assert!(
        plans
            .iter()
            .flat_map(|p| &p.actions)
            .all(|a| matches!(a, Action::ApplyPolicyStatus { .. }))
    );
    let ready = condition(
        &case.policies[0].status.as_ref().unwrap().conditions,
        "Ready",
    );
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "BackendNotActive")
    );
}

#[test]
fn istio_proposals_say_when_the_identity_is_shared() {
    let mut case = Case::new();
    case.config.backend = Backend::Istio;
    case.learned = vec![istio_proposal(
        "api",
        "cluster.local/ns/shop/sa/web",
        "8080",
    )];
    let shared = |case: &Case| {
        let status = applied_proposal(&case.plan()).status.clone().unwrap();
        let c = condition(&status.conditions, "SharedIdentity").clone();
        (c.status, c.reason)
    };
    assert_eq!(
        shared(&case),
        ("False".to_owned(), "UniqueServiceAccount".to_owned())
    );
    case.workloads
        .get_mut(&(NS.to_owned(), TargetKind::Deployment, "db".to_owned()))
        .unwrap()
        .service_account = Some("api".to_owned());
    assert_eq!(
        shared(&case),
        ("True".to_owned(), "SharedServiceAccount".to_owned())
    );
    case.workloads
        .get_mut(&(NS.to_owned(), TargetKind::Deployment, "api".to_owned()))
        .unwrap()
        .service_account = None;
    assert_eq!(
        shared(&case),
        ("True".to_owned(), "DefaultServiceAccount".to_owned())
    );
}

#[test]
fn a_network_policy_stored_with_server_defaults_is_not_rewritten() {
    let mut case = Case::new();
    let mut w = policy("deployment-api-ingress", "api", Mode::Protect);
    // Written by hand without protocols and with empty lists.
    let spec = w.spec.kubernetes.as_mut().unwrap();
    for rule in spec.ingress.as_mut().unwrap() {
        for port in rule.ports.as_mut().unwrap() {
            port.protocol = None;
        }
    }
    spec.egress = Some(Vec::new());
    case.policies = vec![w];
    case.settle();
    // The API server stores the defaults: TCP, and no empty list.
    let stored = case.network_policies[0].spec.as_mut().unwrap();
    for rule in stored.ingress.as_mut().unwrap() {
        for port in rule.ports.as_mut().unwrap() {
            port.protocol = Some("TCP".to_owned());
        }
    }
    stored.egress = None;
    let plan = case.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::ApplyNetworkPolicy(_))),
        "{plan:?}"
    );
    // A real difference is still written.
    case.network_policies[0].spec.as_mut().unwrap().ingress = Some(Vec::new());
    assert!(
        case.plan()
            .actions
            .iter()
            .any(|a| matches!(a, Action::ApplyNetworkPolicy(_)))
    );
}

#[test]
fn moved_evidence_is_written_once_it_is_a_refresh_interval_newer() {
    let mut case = Case::new();
    case.learned = vec![proposal("api", &[("web", 8080, 100, 200, 5)])];
    case.settle();
    // The same peer seen again 59 s later, more flows: not worth a write yet.
    case.learned = vec![proposal("api", &[("web", 8080, 100, 259, 9)])];
    assert_eq!(case.plan(), Plan::default());
    // 60 s later: written, with the count of then.
    case.learned = vec![proposal("api", &[("web", 8080, 100, 260, 11)])];
    let plan = case.plan();
    let Action::ApplyProposal {
        spec,
        status,
        object,
    } = &plan.actions[0]
    else {
        panic!("{plan:?}")
    };
    assert!(!spec && *status);
    assert_eq!(object.status.as_ref().unwrap().peers[0].flow_count, 11);
    case.apply(&plan);
    // A new port is written at once, whatever the interval.
    case.learned = vec![proposal(
        "api",
        &[("web", 8080, 100, 261, 12), ("web", 8443, 261, 261, 1)],
    )];
    let plan = case.plan();
    assert!(matches!(
        &plan.actions[..],
        [Action::ApplyProposal {
            spec: true,
            status: true,
            ..
        }]
    ));
}

fn observed(src: &str) -> crate::violations::record::Observation {
    crate::violations::record::Observation {
        source: ne_crds::WorkloadEndpointRef {
            namespace: Some(NS.to_owned()),
            kind: Some("Deployment".to_owned()),
            name: Some(src.to_owned()),
            ..Default::default()
        },
        destination: ne_crds::WorkloadEndpointRef {
            namespace: Some(NS.to_owned()),
            kind: Some("Deployment".to_owned()),
            name: Some("api".to_owned()),
            ..Default::default()
        },
        protocol: "TCP".to_owned(),
        port: 8080,
        direction: PolicyDirection::Ingress,
        mode: Mode::Monitor,
        count: 4,
        first_seen: time(900),
        last_seen: time(950),
        reason: ne_crds::ViolationReason::NoRuleForPeer,
        message: "no ingress rule of the policy admits this peer".to_owned(),
        denied_by: None,
    }
}

/// The ids the writes of `plan` report as observed and as acknowledged.
fn reported(plan: &Plan) -> (Vec<i64>, Vec<i64>) {
    let mut ids = (Vec::new(), Vec::new());
    for a in &plan.actions {
        if let Action::ApplyViolations {
            observed,
            acknowledged,
            ..
        } = a
        {
            ids.0.extend(observed.iter().map(|r| r.id));
            ids.1.extend(acknowledged.iter().map(|a| a.violation.id));
        }
    }
    ids
}

fn violations_written(plan: &Plan) -> Vec<(&WorkloadNetworkPolicyStatus, &Vec<String>)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::ApplyViolations {
                status,
                remove_annotations,
                ..
            } => Some((&**status, remove_annotations)),
            _ => None,
        })
        .collect()
}

#[test]
fn observations_become_records_once_and_acknowledgements_are_taken() {
    let mut case = Case::new();
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Monitor)];
    case.settle();
    let key = (NS.to_owned(), "deployment-api-ingress".to_owned());
    case.observations
        .insert(key.clone(), vec![observed("cron")]);
    let plan = case.plan();
    let written = violations_written(&plan);
    assert_eq!(written.len(), 1, "one write for the policy");
    let (status, removed) = written[0];
    assert_eq!(
        (
            status.violations.len(),
            status.violations[0].id,
            status.active_violation_count
        ),
        (1, 1, 1)
    );
    assert!(removed.is_empty());
    assert_eq!(reported(&plan), (vec![1], vec![]), "one observed event");
    case.apply(&plan);
    assert!(
        violations_written(&case.plan()).is_empty(),
        "the same observation again writes nothing"
    );
    // More flows of the tuple: the record is updated and reported again, once.
    let mut more = observed("cron");
    more.count = 9;
    case.observations.insert(key.clone(), vec![more.clone()]);
    let plan = case.plan();
    assert_eq!(reported(&plan), (vec![1], vec![]));
    assert_eq!(violations_written(&plan)[0].0.violations[0].count, 9);
    case.apply(&plan);
    assert_eq!(reported(&case.plan()), (vec![], vec![]));
    // The conditions the native planner wrote are kept.
    assert!(
        case.policies[0]
            .status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready")
    );

    // Acknowledge id 1, and an id that does not exist.
    case.policies[0].metadata.annotations = Some(
        [
            (
                "networkenforcer.kubewarden.io/acknowledge-1".to_owned(),
                "cron is expected".to_owned(),
            ),
            (
                "networkenforcer.kubewarden.io/acknowledge-7".to_owned(),
                "typo".to_owned(),
            ),
        ]
        .into(),
    );
    let plan = case.plan();
    let (status, removed) = violations_written(&plan)[0];
    assert_eq!(status.active_violation_count, 0);
    assert_eq!(
        status.acknowledged_violations[0].reason.as_deref(),
        Some("cron is expected")
    );
    assert_eq!(
        removed.len(),
        2,
        "both annotations go once the status is written"
    );
    assert!(plan.actions.iter().any(|a| matches!(a,
        Action::Event(Event { warning: true, reason: "UnknownViolation", note, .. }) if note.contains("acknowledge-7"))));
    assert_eq!(reported(&plan), (vec![], vec![1]), "one acknowledged event");
    case.apply(&plan);
    // `Quiet` follows the records a round later.
    let plan = case.plan();
    assert!(
        matches!(&plan.actions[..], [Action::ApplyPolicyStatus { conditions, .. }]
            if conditions.iter().any(|c| c.type_ == "Quiet" && c.status == "True")),
        "{plan:?}"
    );
    case.apply(&plan);
    // The index still holds the same totals: acknowledged, nothing new, nothing written.
    assert_eq!(case.plan(), Plan::default());
}

#[test]
fn policies_of_another_backend_get_no_violation_writes() {
    let mut case = Case::new();
    case.config.backend = Backend::Istio;
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Monitor)];
    case.observations.insert(
        (NS.to_owned(), "deployment-api-ingress".to_owned()),
        vec![observed("cron")],
    );
    assert!(violations_written(&case.plan()).is_empty());
}

#[test]
fn violation_records_are_written_before_anything_else_of_the_round() {
    let mut case = Case::new();
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Monitor)];
    case.settle();
    // A round with a new proposal to write and a violation to record: the record goes
    // first, so the write budget never holds it back behind proposals.
    case.learned = vec![proposal("web", &[("cron", 80, 100, 200, 5)])];
    case.observations.insert(
        (NS.to_owned(), "deployment-api-ingress".to_owned()),
        vec![observed("cron")],
    );
    let plan = case.plan();
    assert!(plan.actions.len() > 1, "{plan:?}");
    assert!(
        matches!(plan.actions[0], Action::ApplyViolations { .. }),
        "{plan:?}"
    );
}

fn protect_safe(case: &Case) -> (String, String, String) {
    let c = condition(
        &case.policies[0].status.as_ref().unwrap().conditions,
        "ProtectSafe",
    );
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn protect_safe_names_what_protect_mode_would_break_and_clears_when_fixed() {
    use super::safety::facts_for;
    let mut case = Case::new();
    case.policies = vec![policy("deployment-api-ingress", "api", Mode::Monitor)];
    let key = (NS.to_owned(), "deployment-api-ingress".to_owned());
    case.safety
        .policies
        .insert(key.clone(), facts_for(&[("app", "api")]));
    case.settle();
    assert_eq!(protect_safe(&case).0, "True", "{:?}", protect_safe(&case));

    // A hand-written NetworkPolicy selects the same pods: they overlap.
    let mut theirs = NetworkPolicy::default();
    theirs.metadata.name = Some("allow-monitoring".to_owned());
    theirs.metadata.namespace = Some(NS.to_owned());
    theirs.spec = Some(NetworkPolicySpec {
        pod_selector: Some(selector("api")),
        policy_types: Some(vec!["Ingress".to_owned()]),
        ..NetworkPolicySpec::default()
    });
    case.network_policies.push(stored(theirs, "uid-theirs"));
    // One that selects other pods, and one for the other direction, do not count.
    let mut other_pods = case.network_policies[0].clone();
    other_pods.metadata.name = Some("db-only".to_owned());
    other_pods.spec.as_mut().unwrap().pod_selector = Some(selector("db"));
    let mut egress_only = case.network_policies[0].clone();
    egress_only.metadata.name = Some("egress-only".to_owned());
    egress_only.spec.as_mut().unwrap().policy_types = Some(vec!["Egress".to_owned()]);
    case.network_policies.extend([other_pods, egress_only]);
    case.settle();
    let (status, reason, message) = protect_safe(&case);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "OtherPolicies")
    );
    assert!(
        message.contains("NetworkPolicy allow-monitoring"),
        "{message}"
    );
    assert!(
        !message.contains("db-only") && !message.contains("egress-only"),
        "{message}"
    );

    // Its rules emptied by hand as well: every hazard is listed, the first gives the reason.
    case.policies[0].spec.kubernetes.as_mut().unwrap().ingress = Some(Vec::new());
    case.settle();
    let (status, reason, message) = protect_safe(&case);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "DenyAll"));
    assert!(
        message.contains("blocks all ingress traffic") && message.contains("allow-monitoring"),
        "{message}"
    );

    // Fixed: the condition turns True again.
    case.network_policies.clear();
    case.policies[0] = policy("deployment-api-ingress", "api", Mode::Monitor);
    case.settle();
    assert_eq!(protect_safe(&case).0, "True");
}

#[test]
fn no_dns_is_a_hazard_only_when_the_workload_resolves_names() {
    use super::safety::facts_for;
    let mut case = Case::new();
    let mut w = policy("deployment-api-egress", "api", Mode::Monitor);
    w.spec.direction = PolicyDirection::Egress;
    let np = w.spec.kubernetes.as_mut().unwrap();
    np.policy_types = Some(vec!["Egress".to_owned()]);
    np.ingress = None;
    np.egress = Some(vec![
        k8s_openapi::api::networking::v1::NetworkPolicyEgressRule {
            to: Some(vec![peer("web")]),
            ports: Some(vec![tcp(443)]),
        },
    ]);
    case.policies = vec![w];
    let key = (NS.to_owned(), "deployment-api-egress".to_owned());
    case.safety.policies.insert(
        key,
        crate::controller::safety::SafetyFacts {
            dns_denied: true,
            ..facts_for(&[("app", "api")])
        },
    );
    case.settle();
    assert_eq!(protect_safe(&case).0, "True", "no name was resolved");

    // Learning saw the workload's egress with a peer learned by its DNS name.
    let mut learned = proposal("api", &[("web", 443, 100, 100, 1)]);
    learned.spec.direction = PolicyDirection::Egress;
    learned.status.as_mut().unwrap().peers[0].dns_name = Some("shop.example.com".to_owned());
    case.learned = vec![learned];
    case.settle();
    let (status, reason, message) = protect_safe(&case);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NoDns"));
    assert!(message.contains("UDP port 53"), "{message}");
}

#[test]
fn a_principal_shared_by_several_workloads_is_a_hazard_and_istio_egress_has_none() {
    let mut case = Case::new();
    case.config.backend = Backend::Istio;
    let p = istio_proposal("api", "cluster.local/ns/shop/sa/default", "8080");
    let mut w = policy("deployment-api-ingress", "api", Mode::Monitor);
    w.spec.backend = Backend::Istio;
    w.spec.kubernetes = None;
    w.spec.istio = p.spec.istio;
    case.policies = vec![w];
    let key = (NS.to_owned(), "deployment-api-ingress".to_owned());
    case.safety.policies.insert(
        key,
        crate::controller::safety::SafetyFacts {
            shared_principals: vec![
                "cluster.local/ns/shop/sa/default (Deployment/cron, Deployment/web)".to_owned(),
            ],
            ..Default::default()
        },
    );
    case.settle();
    let (status, reason, message) = protect_safe(&case);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "SharedIdentity")
    );
    assert!(
        message.contains("Deployment/cron, Deployment/web"),
        "{message}"
    );

    // ztunnel does not authorize outbound traffic: an Istio egress policy breaks nothing.
    case.policies[0].spec.direction = PolicyDirection::Egress;
    case.settle();
    assert_eq!(protect_safe(&case).0, "True");
}

#[test]
fn a_proposal_says_before_promotion_what_protect_mode_would_break() {
    use super::safety::facts_for;
    let mut case = Case::new();
    case.learned = vec![proposal("api", &[("web", 8080, 900, 990, 7)])];
    // A hand-written NetworkPolicy already selects the api pods.
    let mut theirs = NetworkPolicy::default();
    theirs.metadata.name = Some("allow-all-ingress".to_owned());
    theirs.metadata.namespace = Some(NS.to_owned());
    theirs.spec = Some(NetworkPolicySpec {
        pod_selector: Some(LabelSelector::default()),
        ingress: Some(vec![NetworkPolicyIngressRule::default()]),
        ..NetworkPolicySpec::default()
    });
    case.network_policies.push(stored(theirs, "uid-theirs"));
    case.safety.proposals.insert(
        (NS.to_owned(), "deployment-api-ingress".to_owned()),
        facts_for(&[("app", "api")]),
    );
    let plans = case.settle();
    let Action::ApplyProposal { object, .. } = &plans[0].actions[0] else {
        panic!("{:?}", plans[0])
    };
    let safe = condition(&object.status.as_ref().unwrap().conditions, "ProtectSafe");
    assert_eq!(
        (safe.status.as_str(), safe.reason.as_str()),
        ("False", "OtherPolicies")
    );
    assert!(
        safe.message.contains("NetworkPolicy allow-all-ingress"),
        "{}",
        safe.message
    );
}
