//! ztunnel's log lines as the test data plane writes them for the Istio tests: pod `web`
//! (at [`WEB_IP`]) connecting to pod `api` (at [`API_IP`]) in one namespace.

use serde_json::json;

/// The addresses the controller tests give their pods.
pub const API_IP: &str = "10.250.0.21";
pub const WEB_IP: &str = "10.250.0.11";

/// A CRI-framed ztunnel access log line: pod `web` → pod `api` on `port`, inbound at the
/// destination.
pub fn ztunnel_line(ns: &str, web: &str, api: &str, port: u16) -> String {
    ztunnel_access(ns, web, api, port, "info", "")
}

/// The access line of a connection ztunnel refused by policy (protect mode).
pub fn ztunnel_denied_line(ns: &str, web: &str, api: &str, port: u16) -> String {
    ztunnel_access(
        ns,
        web,
        api,
        port,
        "error",
        " error=\"connection closed due to policy rejection: allow policies exist, but none allowed\"",
    )
}

/// The access line of a connection a DENY AuthorizationPolicy `ns/policy` refused: ztunnel
/// names it.
pub fn ztunnel_explicitly_denied_line(
    ns: &str,
    web: &str,
    api: &str,
    port: u16,
    policy: &str,
) -> String {
    ztunnel_access(
        ns,
        web,
        api,
        port,
        "error",
        &format!(
            " error=\"connection closed due to policy rejection: explicitly denied by: {ns}/{policy}\""
        ),
    )
}

pub fn ztunnel_access(
    ns: &str,
    web: &str,
    api: &str,
    port: u16,
    level: &str,
    error: &str,
) -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    format!(
        "{now} stdout F {now}\t{level}\taccess\tconnection complete\tsrc.addr={WEB_IP}:40000 \
         src.workload=\"{web}\" src.namespace=\"{ns}\" src.identity=\"spiffe://cluster.local/ns/{ns}/sa/web\" \
         dst.addr={API_IP}:15008 dst.hbone_addr={API_IP}:{port} dst.service=\"api.{ns}.svc.cluster.local\" \
         dst.workload=\"{api}\" dst.namespace=\"{ns}\" dst.identity=\"spiffe://cluster.local/ns/{ns}/sa/api\" \
         direction=\"inbound\" bytes_sent=10 bytes_recv=20 duration=\"5ms\"{error}\n",
    )
}

/// ztunnel's dry-run line (JSON form, CRI-framed) for a connection from `WEB_IP` to pod
/// `api` that the dry-run AuthorizationPolicy would deny: it names no port.
pub fn ztunnel_dry_run_line(ns: &str, api: &str) -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    let line = json!({
        "level": "info", "time": now.to_string(), "scope": "ztunnel::state",
        "message": "dry-run: no allow policies match",
        "proxy": {"wl": format!("{ns}/{api}")},
        "inbound": {"id": "4703222e84d01205aa1511f86681682f", "peer": format!("{WEB_IP}:40000")},
    });
    format!("{now} stdout F {line}\n")
}
