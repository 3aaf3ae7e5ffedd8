//! The model's enums and their wire codes (`ingest.proto` enums), both ways. Decoding a
//! code that is not a valid value for its column is a [`DeltaError::BadValue`].

use ne_proto::ingest as pb;

use super::{DeltaError, EdgeClass};
use ne_flow::flow::{Direction, Protocol, Reserved, WorkloadKind};

fn bad(column: &'static str, value: i32) -> DeltaError {
    DeltaError::BadValue {
        column,
        value: i64::from(value),
    }
}

/// The wire code of a workload kind.
pub(super) fn workload_kind_code(kind: WorkloadKind) -> i32 {
    let code = match kind {
        WorkloadKind::Deployment => pb::WorkloadKind::Deployment,
        WorkloadKind::StatefulSet => pb::WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet => pb::WorkloadKind::DaemonSet,
        WorkloadKind::ReplicaSet => pb::WorkloadKind::ReplicaSet,
        WorkloadKind::Job => pb::WorkloadKind::Job,
        WorkloadKind::CronJob => pb::WorkloadKind::CronJob,
        WorkloadKind::Pod => pb::WorkloadKind::Pod,
    };
    code as i32
}

/// The workload kind of a wire code.
pub(super) fn workload_kind(code: i32) -> Result<WorkloadKind, DeltaError> {
    Ok(match pb::WorkloadKind::try_from(code) {
        Ok(pb::WorkloadKind::Deployment) => WorkloadKind::Deployment,
        Ok(pb::WorkloadKind::StatefulSet) => WorkloadKind::StatefulSet,
        Ok(pb::WorkloadKind::DaemonSet) => WorkloadKind::DaemonSet,
        Ok(pb::WorkloadKind::ReplicaSet) => WorkloadKind::ReplicaSet,
        Ok(pb::WorkloadKind::Job) => WorkloadKind::Job,
        Ok(pb::WorkloadKind::CronJob) => WorkloadKind::CronJob,
        Ok(pb::WorkloadKind::Pod) => WorkloadKind::Pod,
        Ok(pb::WorkloadKind::Unspecified) | Err(_) => return Err(bad("workload_kind", code)),
    })
}

/// The wire code of a reserved identity.
pub(super) fn reserved_code(reserved: Reserved) -> i32 {
    let code = match reserved {
        Reserved::Host => pb::ReservedIdentity::Host,
        Reserved::RemoteNode => pb::ReservedIdentity::RemoteNode,
        Reserved::KubeApiserver => pb::ReservedIdentity::KubeApiserver,
        Reserved::Health => pb::ReservedIdentity::Health,
        Reserved::Init => pb::ReservedIdentity::Init,
        Reserved::Ingress => pb::ReservedIdentity::Ingress,
        Reserved::Unmanaged => pb::ReservedIdentity::Unmanaged,
        Reserved::World => pb::ReservedIdentity::World,
        Reserved::Unknown => pb::ReservedIdentity::Unknown,
    };
    code as i32
}

/// The reserved identity of a wire code.
pub(super) fn reserved(code: i32) -> Result<Reserved, DeltaError> {
    Ok(match pb::ReservedIdentity::try_from(code) {
        Ok(pb::ReservedIdentity::Host) => Reserved::Host,
        Ok(pb::ReservedIdentity::RemoteNode) => Reserved::RemoteNode,
        Ok(pb::ReservedIdentity::KubeApiserver) => Reserved::KubeApiserver,
        Ok(pb::ReservedIdentity::Health) => Reserved::Health,
        Ok(pb::ReservedIdentity::Init) => Reserved::Init,
        Ok(pb::ReservedIdentity::Ingress) => Reserved::Ingress,
        Ok(pb::ReservedIdentity::Unmanaged) => Reserved::Unmanaged,
        Ok(pb::ReservedIdentity::World) => Reserved::World,
        Ok(pb::ReservedIdentity::Unknown) => Reserved::Unknown,
        Ok(pb::ReservedIdentity::Unspecified) | Err(_) => return Err(bad("reserved", code)),
    })
}

/// The wire code of a protocol.
pub(super) fn protocol_code(protocol: Protocol) -> i32 {
    let code = match protocol {
        Protocol::Tcp => pb::Protocol::Tcp,
        Protocol::Udp => pb::Protocol::Udp,
        Protocol::Sctp => pb::Protocol::Sctp,
        Protocol::Icmp => pb::Protocol::Icmp,
        Protocol::Other => pb::Protocol::Other,
    };
    code as i32
}

/// The protocol of a wire code.
pub(super) fn protocol(code: i32) -> Result<Protocol, DeltaError> {
    Ok(match pb::Protocol::try_from(code) {
        Ok(pb::Protocol::Tcp) => Protocol::Tcp,
        Ok(pb::Protocol::Udp) => Protocol::Udp,
        Ok(pb::Protocol::Sctp) => Protocol::Sctp,
        Ok(pb::Protocol::Icmp) => Protocol::Icmp,
        Ok(pb::Protocol::Other) => Protocol::Other,
        Ok(pb::Protocol::Unspecified) | Err(_) => return Err(bad("protocol", code)),
    })
}

/// The wire code of a direction.
pub(super) fn direction_code(direction: Direction) -> i32 {
    let code = match direction {
        Direction::Ingress => pb::Direction::Ingress,
        Direction::Egress => pb::Direction::Egress,
    };
    code as i32
}

/// The direction of a wire code.
pub(super) fn direction(code: i32) -> Result<Direction, DeltaError> {
    Ok(match pb::Direction::try_from(code) {
        Ok(pb::Direction::Ingress) => Direction::Ingress,
        Ok(pb::Direction::Egress) => Direction::Egress,
        Ok(pb::Direction::Unspecified) | Err(_) => return Err(bad("direction", code)),
    })
}

/// The wire code of an edge class (`EdgeVerdict`); `Learned` is FORWARDED, the code of
/// every edge the sparse verdict column does not list.
pub(super) fn edge_class_code(class: EdgeClass) -> i32 {
    let code = match class {
        EdgeClass::Learned => pb::EdgeVerdict::Forwarded,
        EdgeClass::Denied => pb::EdgeVerdict::PolicyDenied,
        EdgeClass::Audit => pb::EdgeVerdict::AuditDenied,
    };
    code as i32
}

/// The class of a code of the sparse `verdict` column: FORWARDED is never listed there.
pub(super) fn listed_edge_class(code: i32) -> Result<EdgeClass, DeltaError> {
    Ok(match pb::EdgeVerdict::try_from(code) {
        Ok(pb::EdgeVerdict::PolicyDenied) => EdgeClass::Denied,
        Ok(pb::EdgeVerdict::AuditDenied) => EdgeClass::Audit,
        Ok(pb::EdgeVerdict::Forwarded) | Err(_) => return Err(bad("verdict", code)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_has_a_distinct_code_that_maps_back() {
        use std::collections::HashSet;
        let kinds = [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
            WorkloadKind::ReplicaSet,
            WorkloadKind::Job,
            WorkloadKind::CronJob,
            WorkloadKind::Pod,
        ];
        let codes: HashSet<i32> = kinds.iter().map(|&k| workload_kind_code(k)).collect();
        assert_eq!(codes.len(), kinds.len());
        for k in kinds {
            assert_eq!(workload_kind(workload_kind_code(k)), Ok(k));
        }
        let all_reserved = [
            Reserved::Host,
            Reserved::RemoteNode,
            Reserved::KubeApiserver,
            Reserved::Health,
            Reserved::Init,
            Reserved::Ingress,
            Reserved::Unmanaged,
            Reserved::World,
            Reserved::Unknown,
        ];
        let codes: HashSet<i32> = all_reserved.iter().map(|&r| reserved_code(r)).collect();
        assert_eq!(codes.len(), all_reserved.len());
        for r in all_reserved {
            assert_eq!(reserved(reserved_code(r)), Ok(r));
        }
        for p in [
            Protocol::Tcp,
            Protocol::Udp,
            Protocol::Sctp,
            Protocol::Icmp,
            Protocol::Other,
        ] {
            assert_eq!(protocol(protocol_code(p)), Ok(p));
        }
        for d in [Direction::Ingress, Direction::Egress] {
            assert_eq!(direction(direction_code(d)), Ok(d));
        }
        assert_eq!(edge_class_code(EdgeClass::Learned), 0);
        for c in [EdgeClass::Denied, EdgeClass::Audit] {
            assert_eq!(listed_edge_class(edge_class_code(c)), Ok(c));
        }
    }

    #[test]
    fn zero_and_unknown_codes_are_rejected() {
        for code in [0, 99, -1] {
            assert!(matches!(
                workload_kind(code),
                Err(DeltaError::BadValue {
                    column: "workload_kind",
                    ..
                })
            ));
            assert!(reserved(code).is_err());
            assert!(protocol(code).is_err());
            assert!(direction(code).is_err());
            assert!(listed_edge_class(code).is_err());
        }
    }
}
