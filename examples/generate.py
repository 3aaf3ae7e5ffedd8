#!/usr/bin/env python3
"""Writes the bundled example: one small application's traffic in the three flow formats
Network Enforcer reads, plus the cluster snapshot that resolves it.

The records follow the real captures in testdata/real/ field for field (same
wrappers, key names, enum spellings, CRI framing); only the application is invented.
Deterministic: running it twice writes the same bytes. Run from the repository root:

    python3 examples/generate.py
"""

import json
import os
import random

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flows")
EXPECTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected")
SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster.yaml")
RNG = random.Random(20261202)
BASE = 1_764_583_200  # 2025-12-01T10:00:00Z
TRUST = "cluster.local"

# --- the application --------------------------------------------------------------------
# name: (namespace, kind, owner name, pod name, ip, node, labels, service account, ports)
PODS = {
    "web-a": ("shop", "Deployment", "web", "web-7d4f9c6b8d-k2x7p", "10.244.1.11", "worker-1",
              {"app": "web", "tier": "frontend", "pod-template-hash": "7d4f9c6b8d"}, "web",
              [("https", "TCP", 8443)]),
    "web-b": ("shop", "Deployment", "web", "web-7d4f9c6b8d-q9m4z", "10.244.2.12", "worker-2",
              {"app": "web", "tier": "frontend", "pod-template-hash": "7d4f9c6b8d"}, "web",
              [("https", "TCP", 8443)]),
    "api-a": ("shop", "Deployment", "api", "api-5c8b7d9f6c-h7j2k", "10.244.2.21", "worker-2",
              {"app": "api", "tier": "backend", "pod-template-hash": "5c8b7d9f6c"}, "api",
              [("http", "TCP", 8080)]),
    "api-b": ("shop", "Deployment", "api", "api-5c8b7d9f6c-p3n8v", "10.244.1.22", "worker-1",
              {"app": "api", "tier": "backend", "pod-template-hash": "5c8b7d9f6c"}, "api",
              [("http", "TCP", 8080)]),
    "report": ("shop", "CronJob", "report", "report-29410200-x8k2p", "10.244.1.61", "worker-1",
               {"app": "report", "batch.kubernetes.io/controller-uid": "5f0c2a9e-8c1d-4f57-9a31-2b7d6e4c1a90",
                "batch.kubernetes.io/job-name": "report-29410200",
                "controller-uid": "5f0c2a9e-8c1d-4f57-9a31-2b7d6e4c1a90", "job-name": "report-29410200"},
               "report", []),
    "postgres": ("data", "StatefulSet", "postgres", "postgres-0", "10.244.3.31", "worker-3",
                 {"app": "postgres", "apps.kubernetes.io/pod-index": "0",
                  "controller-revision-hash": "postgres-6b5f8d7c94",
                  "statefulset.kubernetes.io/pod-name": "postgres-0"}, "postgres",
                 [("postgres", "TCP", 5432)]),
    "store": ("data", "StatefulSet", "log-store", "log-store-0", "10.244.3.51", "worker-3",
              {"app": "log-store", "apps.kubernetes.io/pod-index": "0",
               "controller-revision-hash": "log-store-7c9b6f5d48",
               "statefulset.kubernetes.io/pod-name": "log-store-0"}, "log-store",
              [("http", "TCP", 3100)]),
    "ship-1": ("data", "DaemonSet", "log-shipper", "log-shipper-x7k2m", "10.244.1.41", "worker-1",
               {"app": "log-shipper", "controller-revision-hash": "6d8f7b9c5",
                "pod-template-generation": "1"}, "log-shipper", []),
    "ship-2": ("data", "DaemonSet", "log-shipper", "log-shipper-r4t9w", "10.244.2.42", "worker-2",
               {"app": "log-shipper", "controller-revision-hash": "6d8f7b9c5",
                "pod-template-generation": "1"}, "log-shipper", []),
    "dns": ("kube-system", "Deployment", "coredns", "coredns-76f75df574-9xq2w", "10.244.3.2", "worker-3",
            {"k8s-app": "kube-dns", "pod-template-hash": "76f75df574"}, "coredns",
            [("dns", "UDP", 53), ("dns-tcp", "TCP", 53), ("metrics", "TCP", 9153)]),
}
NODE_IPS = {"worker-1": "172.18.0.3", "worker-2": "172.18.0.4", "worker-3": "172.18.0.5"}
PAYMENTS = ("203.0.113.10", "api.payments.example.com")
VISITOR = "198.51.100.7"

# Allowed connections: (client, server, protocol, port, repeats). Each is seen by every
# data plane as it would really see it.
CONNECTIONS = [
    ("web-a", "api-a", "TCP", 8080, 6), ("web-b", "api-b", "TCP", 8080, 6),
    ("web-a", "dns", "UDP", 53, 3), ("web-b", "dns", "UDP", 53, 3),
    ("api-a", "postgres", "TCP", 5432, 5), ("api-b", "postgres", "TCP", 5432, 5),
    ("api-a", "dns", "UDP", 53, 3), ("api-b", "dns", "TCP", 53, 1),
    ("api-a", PAYMENTS, "TCP", 443, 3), ("api-b", PAYMENTS, "TCP", 443, 2),
    ("report", "api-a", "TCP", 8080, 2), ("report", "dns", "UDP", 53, 1),
    ("ship-1", "store", "TCP", 3100, 4), ("ship-2", "store", "TCP", 3100, 4),
    (VISITOR, "web-a", "TCP", 8443, 3), (VISITOR, "web-b", "TCP", 8443, 2),
]
# Connections a policy denied: no data plane lets them teach anything.
DENIED = [("report", "postgres", "TCP", 5432)]


def pod(key):
    return PODS.get(key) if isinstance(key, str) else None


def ts(offset_ns):
    secs, ns = divmod(BASE * 1_000_000_000 + offset_ns, 1_000_000_000)
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + ".%09dZ" % ns


def ephemeral():
    return RNG.randint(32768, 60999)


class Clock:
    def __init__(self):
        self.t = 0

    def tick(self, secs):
        """Moves on by about `secs` seconds: the capture spans some ten minutes."""
        self.t += secs * 1_000_000_000 + RNG.randint(0, 999_999_999)
        return self.t


# --- Hubble -----------------------------------------------------------------------------
def hubble_endpoint(key, local):
    if isinstance(key, tuple) or key == VISITOR:
        return {"identity": 2, "labels": ["reserved:world"]}
    ns, kind, owner, name, ip, node, labels, sa, _ = PODS[key]
    ep = {}
    if local:
        ep["ID"] = 1000 + (sum(map(ord, name)) % 3000)
    ep["identity"] = 20000 + (sum(map(ord, owner)) * 37) % 40000
    ep["cluster_name"] = "default"
    ep["namespace"] = ns
    ident_labels = {k: v for k, v in labels.items()
                    if k not in ("pod-template-hash", "controller-revision-hash", "pod-template-generation",
                                 "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index",
                                 "controller-uid", "batch.kubernetes.io/controller-uid")}
    lab = ["k8s:%s=%s" % (k, v) for k, v in sorted(ident_labels.items())]
    lab += ["k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=%s" % ns,
            "k8s:io.cilium.k8s.policy.cluster=default",
            "k8s:io.cilium.k8s.policy.serviceaccount=%s" % sa,
            "k8s:io.kubernetes.pod.namespace=%s" % ns]
    ep["labels"] = sorted(lab)
    ep["pod_name"] = name
    if local:
        ep["workloads"] = [{"name": owner, "kind": kind}]
    return ep


def ip_of(key):
    if isinstance(key, tuple):
        return key[0]
    if key == VISITOR:
        return VISITOR
    return PODS[key][4]


def node_of(key):
    return PODS[key][5] if pod(key) else None


def hubble_flow(t, verdict, src, dst, proto, sport, dport, direction, point, reason, reply, flags=None,
                drop=None, dns_names=None, local_src=None):
    # Cilium marks a reply with the direction of its connection, so the local side is the
    # source for egress requests and ingress replies.
    if local_src is None:
        local_src = (direction == "EGRESS") != bool(reply)
    node = node_of(src) if local_src else node_of(dst)
    flow = {"time": ts(t), "uuid": "%08x-%04x-4%03x-%04x-%012x" % (
        RNG.getrandbits(32), RNG.getrandbits(16), RNG.getrandbits(12), 0x8000 | RNG.getrandbits(14),
        RNG.getrandbits(48)), "verdict": verdict}
    if drop:
        flow["drop_reason"] = 133
    flow["ethernet"] = {"source": "0a:58:0a:f4:%02x:%02x" % (RNG.getrandbits(8), RNG.getrandbits(8)),
                        "destination": "0a:58:0a:f4:%02x:%02x" % (RNG.getrandbits(8), RNG.getrandbits(8))}
    flow["IP"] = {"source": ip_of(src), "destination": ip_of(dst), "ipVersion": "IPv4"}
    l4 = {"source_port": sport, "destination_port": dport}
    if proto == "TCP":
        l4["flags"] = flags or {"SYN": True}
    flow["l4"] = {proto: l4}
    flow["source"] = hubble_endpoint(src, local_src)
    flow["destination"] = hubble_endpoint(dst, not local_src)
    flow["Type"] = "L3_L4"
    flow["node_name"] = "default/" + node
    if dns_names:
        flow["destination_names"] = dns_names
    if reply:
        flow["reply"] = True
    flow["event_type"] = {"type": 5 if drop else 4}
    flow["traffic_direction"] = direction
    if point:
        flow["trace_observation_point"] = point
    if reason:
        flow["trace_reason"] = reason
    if drop:
        flow["drop_reason_desc"] = "POLICY_DENIED"
    else:
        flow["is_reply"] = reply
    summary = "TCP Flags: " + ", ".join(sorted(flow["l4"][proto].get("flags", {}))) if proto == "TCP" else proto
    flow["Summary"] = summary
    return {"flow": flow, "node_name": "default/" + node, "time": ts(t)}


def hubble(clock):
    out = []
    for client, server, proto, port, repeats in CONNECTIONS:
        for _ in range(repeats):
            sport = ephemeral()
            dns_names = [PAYMENTS[1]] if isinstance(server, tuple) else None
            if pod(client):  # the client's node sees the request leave
                out.append(hubble_flow(clock.tick(3), "FORWARDED", client, server, proto, sport, port,
                                       "EGRESS", "FROM_ENDPOINT", "NEW", False, dns_names=dns_names))
            if pod(server):  # the server's node sees it arrive, and the reply leave
                out.append(hubble_flow(clock.tick(1), "FORWARDED", client, server, proto, sport, port,
                                       "INGRESS", "TO_ENDPOINT", "NEW", False))
                out.append(hubble_flow(clock.tick(2), "FORWARDED", server, client, proto, port, sport,
                                       "INGRESS", "FROM_ENDPOINT", "REPLY", True,
                                       flags={"SYN": True, "ACK": True}))
            elif pod(client):  # external server: the reply arrives at the client
                out.append(hubble_flow(clock.tick(40), "FORWARDED", server, client, proto, port, sport,
                                       "EGRESS", "TO_ENDPOINT", "REPLY", True, flags={"SYN": True, "ACK": True}))
    for client, server, proto, port in DENIED:
        out.append(hubble_flow(clock.tick(5), "DROPPED", client, server, proto, ephemeral(), port,
                               "INGRESS", None, None, None, drop=True, local_src=False))
    # kubelet probes from the node: allowed by default, learned as an unmanaged peer
    for key in ("api-a", "api-b"):
        rec = hubble_flow(clock.tick(10), "FORWARDED", "api-a", key, "TCP", ephemeral(), 8080,
                          "INGRESS", "TO_ENDPOINT", "NEW", False)
        rec["flow"]["source"] = {"identity": 1, "labels": ["reserved:host"]}
        rec["flow"]["IP"]["source"] = NODE_IPS[PODS[key][5]]
        out.append(rec)
    return out


# --- ztunnel ----------------------------------------------------------------------------
def spiffe(key):
    ns, _, _, _, _, _, _, sa, _ = PODS[key]
    return "spiffe://%s/ns/%s/sa/%s" % (TRUST, ns, sa)


def ztunnel_line(t, direction, client, server, port, error=None):
    fields = ["src.addr=%s:%d" % (ip_of(client), ephemeral())]
    if pod(client):
        fields += ['src.workload="%s"' % PODS[client][3], 'src.namespace="%s"' % PODS[client][0],
                   'src.identity="%s"' % spiffe(client)]
    dst_ip = ip_of(server)
    if pod(server):
        fields += ["dst.addr=%s:15008" % dst_ip, "dst.hbone_addr=%s:%d" % (dst_ip, port),
                   'dst.service="%s.%s.svc.cluster.local"' % (PODS[server][2], PODS[server][0]),
                   'dst.workload="%s"' % PODS[server][3], 'dst.namespace="%s"' % PODS[server][0],
                   'dst.identity="%s"' % spiffe(server)]
    else:
        fields += ["dst.addr=%s:%d" % (dst_ip, port)]
    fields += ['direction="%s"' % direction, "bytes_sent=%d" % RNG.randint(0, 9000),
               "bytes_recv=%d" % RNG.randint(0, 90000), 'duration="%dms"' % RNG.randint(1, 900)]
    if error:
        fields.append('error="%s"' % error)
    level = "error" if error else "info"
    return "%s\t%s\taccess\tconnection complete\t%s" % (ts(t)[:26] + "Z", level, " ".join(fields))


def cri(t, payload, split=None):
    stamp = ts(t + 41_000)
    if split is None:
        return ["%s stdout F %s" % (stamp, payload)]
    return ["%s stdout P %s" % (stamp, payload[:split]), "%s stdout F %s" % (stamp, payload[split:])]


def ztunnel(clock):
    out = []
    for client, server, proto, port, repeats in CONNECTIONS:
        if proto != "TCP":
            continue  # ztunnel carries TCP only; DNS never reaches it
        for _ in range(repeats):
            t = clock.tick(7)
            if pod(client):
                out += cri(t, ztunnel_line(t, "outbound", client, server, port))
            if pod(server):
                t = clock.tick(1)
                line = ztunnel_line(t, "inbound", client, server, port)
                out += cri(t, line, split=RNG.randint(40, len(line) - 10) if len(out) % 9 == 0 else None)
    for client, server, proto, port in DENIED:
        t = clock.tick(5)
        out += cri(t, ztunnel_line(t, "inbound", client, server, port,
                                   error="connection closed due to policy rejection: allow policies exist, but none allowed"))
    t = clock.tick(5)
    out += cri(t, "%s\tinfo\txds::client:xds{id=3}\treceived response\ttype_url=\"type.googleapis.com/istio.workload.Address\" size=4 removes=0" % (ts(t)[:26] + "Z"))
    return out


# --- Goldmane ---------------------------------------------------------------------------
def gm_name(key):
    if not pod(key):
        return "pub", "-", "Network", []
    ns, kind, owner, name, _, _, labels, _, _ = PODS[key]
    if kind == "Deployment":
        agg = "%s-%s-*" % (owner, labels["pod-template-hash"])
    elif kind in ("StatefulSet", "DaemonSet"):
        agg = owner + "-*"
    else:
        agg = name  # a Job's pod has no generateName Calico aggregates on: it keeps its name
    return agg, ns, "WorkloadEndpoint", ["%s=%s" % kv for kv in sorted(labels.items())]


def goldmane_flow(start, client, server, proto, port, reporter, action, conns):
    sname, sns, stype, slabels = gm_name(client)
    dname, dns_, dtype, dlabels = gm_name(server)
    if pod(server):
        svc, svc_ns, svc_port_name, svc_port = PODS[server][2], PODS[server][0], "", port
        svc_port_name = {8080: "http", 5432: "postgres", 3100: "http", 53: "dns", 8443: "https"}.get(port, "")
    else:
        svc, svc_ns, svc_port_name, svc_port = "-", "-", "-", 0
    key = {"sourceName": sname, "sourceNamespace": sns, "sourceType": stype,
           "destName": dname, "destNamespace": dns_, "destType": dtype, "destPort": str(port),
           "destServiceName": svc, "destServiceNamespace": svc_ns, "destServicePortName": svc_port_name,
           "destServicePort": str(svc_port),
           "proto": proto.lower(), "reporter": reporter, "action": action,
           "policies": {"enforcedPolicies": [{"kind": "Profile", "name": "kns.%s" % (sns if reporter == "Src" else dns_),
                                              "tier": "__PROFILE__", "action": action}],
                        "pendingPolicies": [{"kind": "Profile", "name": "kns.%s" % (sns if reporter == "Src" else dns_),
                                             "tier": "__PROFILE__", "action": action}]}}
    if action == "Deny":
        deny = {"kind": "NetworkPolicy", "namespace": dns_, "name": "default-deny", "tier": "default",
                "action": "Deny", "policyIndex": "0", "ruleIndex": "-1"}
        key["policies"] = {"enforcedPolicies": [deny], "pendingPolicies": [deny]}
    pkts = max(conns * RNG.randint(4, 20), 1)
    return {"Key": key, "startTime": str(start), "endTime": str(start + 15),
            "sourceLabels": slabels, "destLabels": dlabels,
            "packetsIn": str(pkts), "packetsOut": str(pkts + RNG.randint(0, 5)),
            "bytesIn": str(pkts * RNG.randint(60, 900)), "bytesOut": str(pkts * RNG.randint(60, 900)),
            "numConnectionsStarted": str(conns), "numConnectionsCompleted": str(conns),
            "numConnectionsLive": "0"}


def goldmane():
    out = []
    for window in range(3):
        start = BASE + 15 * window
        seen = {}
        for client, server, proto, port, repeats in CONNECTIONS:
            # Goldmane aggregates per key and window: replicas of one Deployment merge
            key = (gm_name(client)[0], gm_name(client)[1], gm_name(server)[0], proto, port)
            seen[key] = (client, server, proto, port, seen.get(key, (0, 0, 0, 0, 0))[4] + repeats)
        for client, server, proto, port, conns in seen.values():
            per_window = max(conns // 3 + (1 if window < conns % 3 else 0), 0)
            if per_window == 0:
                continue
            if pod(client):
                out.append(goldmane_flow(start, client, server, proto, port, "Src", "Allow", per_window))
            if pod(server):
                out.append(goldmane_flow(start, client, server, proto, port, "Dst", "Allow", per_window))
    for client, server, proto, port in DENIED:
        out.append(goldmane_flow(BASE + 30, client, server, proto, port, "Dst", "Deny", 1))
    return out


# --- cluster snapshot -------------------------------------------------------------------
def snapshot():
    items = []
    for ns in ("shop", "data", "kube-system"):
        items.append({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}})
    owners_done = set()
    for key, (ns, kind, owner, name, ip, node, labels, sa, ports) in PODS.items():
        tmpl_labels = {k: v for k, v in labels.items()
                       if k not in ("pod-template-hash", "controller-revision-hash", "pod-template-generation",
                                    "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index",
                                    "controller-uid", "batch.kubernetes.io/controller-uid", "job-name",
                                    "batch.kubernetes.io/job-name")}
        selector = {"matchLabels": {k: v for k, v in tmpl_labels.items() if k in ("app", "k8s-app")}}
        containers = [{"name": owner, "image": "registry.example/%s:1.0" % owner,
                       "ports": [{"name": n, "protocol": p, "containerPort": c} for n, p, c in ports]}]
        if kind == "Deployment":
            rs = "%s-%s" % (owner, labels["pod-template-hash"])
            ctrl = ("apps/v1", "ReplicaSet", rs)
            if owner not in owners_done:
                items.append({"apiVersion": "apps/v1", "kind": "Deployment",
                              "metadata": {"name": owner, "namespace": ns, "uid": "uid-deploy-" + owner},
                              "spec": {"selector": selector, "template": {"metadata": {"labels": tmpl_labels},
                                                                          "spec": {"containers": containers}}}})
                items.append({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                              "metadata": {"name": rs, "namespace": ns, "uid": "uid-rs-" + rs,
                                           "labels": dict(tmpl_labels, **{"pod-template-hash": labels["pod-template-hash"]}),
                                           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": owner,
                                                                "uid": "uid-deploy-" + owner, "controller": True}]},
                              "spec": {"selector": {"matchLabels": dict(selector["matchLabels"], **{"pod-template-hash": labels["pod-template-hash"]})},
                                       "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}}}})
        elif kind in ("StatefulSet", "DaemonSet"):
            ctrl = ("apps/v1", kind, owner)
            if owner not in owners_done:
                spec = {"selector": selector, "template": {"metadata": {"labels": tmpl_labels},
                                                           "spec": {"containers": containers}}}
                if kind == "StatefulSet":
                    spec["serviceName"] = owner
                items.append({"apiVersion": "apps/v1", "kind": kind,
                              "metadata": {"name": owner, "namespace": ns, "uid": "uid-%s-%s" % (kind.lower(), owner)},
                              "spec": spec})
        else:  # CronJob -> Job -> Pod
            job = labels["job-name"]
            ctrl = ("batch/v1", "Job", job)
            items.append({"apiVersion": "batch/v1", "kind": "CronJob",
                          "metadata": {"name": owner, "namespace": ns, "uid": "uid-cronjob-" + owner},
                          "spec": {"schedule": "*/15 * * * *", "jobTemplate": {"spec": {"template": {
                              "metadata": {"labels": tmpl_labels},
                              "spec": {"restartPolicy": "OnFailure", "containers": containers}}}}}})
            items.append({"apiVersion": "batch/v1", "kind": "Job",
                          "metadata": {"name": job, "namespace": ns, "uid": labels["controller-uid"],
                                       "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": owner,
                                                            "uid": "uid-cronjob-" + owner, "controller": True}]},
                          "spec": {"template": {"metadata": {"labels": labels},
                                                "spec": {"restartPolicy": "OnFailure", "containers": containers}}}})
        owners_done.add(owner)
        api, ckind, cname = ctrl
        uid = {"ReplicaSet": "uid-rs-" + cname, "Job": labels.get("controller-uid", ""),
               "StatefulSet": "uid-statefulset-" + cname, "DaemonSet": "uid-daemonset-" + cname}[ckind]
        gen = name[: name.rfind("-") + 1] if kind != "StatefulSet" else None
        meta = {"name": name, "namespace": ns, "labels": labels,
                "ownerReferences": [{"apiVersion": api, "kind": ckind, "name": cname, "uid": uid,
                                     "controller": True, "blockOwnerDeletion": True}]}
        if gen:
            meta["generateName"] = gen
        items.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                      "spec": {"nodeName": node, "serviceAccountName": sa, "containers": containers},
                      "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}})
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def to_yaml(value, indent=0):
    """A small YAML emitter for the snapshot (JSON-compatible scalars, block style)."""
    pad = "  " * indent
    lines = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append("%s%s:" % (pad, k))
                lines.append(to_yaml(v, indent + 1))
            else:
                lines.append("%s%s: %s" % (pad, k, json.dumps(v) if not isinstance(v, (dict, list)) else ("{}" if isinstance(v, dict) else "[]")))
    else:
        for v in value:
            if isinstance(v, dict) and v:
                inner = to_yaml(v, indent + 1).split("\n")
                lines.append("%s- %s" % (pad, inner[0].lstrip()))
                lines.extend(inner[1:])
            else:
                lines.append("%s- %s" % (pad, json.dumps(v)))
    return "\n".join(lines)


# --- expected proposals -----------------------------------------------------------------
# An independent statement of the learning rules (README "Learning rules"), applied to the
# records written above with this file's own knowledge of the application. The Rust test
# compares `ne-leader learn` with these, so neither side can merely echo the other.
CONTROLLER_LABELS = {"pod-template-hash", "controller-revision-hash", "pod-template-generation",
                     "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index",
                     "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name",
                     "controller-uid", "job-name"}
SUBJECT_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
EXCLUDED = {"kube-system"}
BY_POD_NAME = {v[3]: k for k, v in PODS.items()}


def template_selector(key):
    return {k: v for k, v in PODS[key][6].items() if k not in CONTROLLER_LABELS}


def workload_selector(key):
    """What the workload object's .spec.selector says (cluster.yaml)."""
    return {k: v for k, v in PODS[key][6].items() if k in ("app", "k8s-app")}


class Expected:
    def __init__(self, backend):
        self.backend = backend
        self.lists = {}

    def add(self, subject_key, direction, peer, proto, port, t_ns, count, dns=None, selector=template_selector):
        ns, kind, owner = PODS[subject_key][0], PODS[subject_key][1], PODS[subject_key][2]
        if kind not in SUBJECT_KINDS or ns in EXCLUDED:
            return
        entry = self.lists.setdefault((ns, kind, owner, direction), {"selector": selector(subject_key), "peers": {}})
        ev = entry["peers"].setdefault(peer, {}).setdefault((proto, port), {"first": t_ns, "last": t_ns, "count": 0, "dns": set()})
        ev["first"], ev["last"] = min(ev["first"], t_ns), max(ev["last"], t_ns)
        ev["count"] += count
        if dns:
            ev["dns"].add(dns)

    def proposals(self):
        out = []
        for (ns, kind, owner, direction), entry in sorted(self.lists.items()):
            rules, rows = [], []
            for peer, ports in entry["peers"].items():
                ports_sorted = sorted(ports)
                if self.backend == "kubernetes":
                    if peer[0] == "pods":
                        np_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": peer[1]}},
                                   "podSelector": {"matchLabels": dict(peer[2])}}
                        peer_text = "pods:%s/%s" % (peer[1], ",".join("%s=%s" % kv for kv in peer[2]))
                    else:
                        np_peer = {"ipBlock": {"cidr": peer[1] + "/32"}}
                        peer_text = "ip:%s/32" % peer[1]
                    rules.append({("from" if direction == "Ingress" else "to"): [np_peer],
                                  "ports": [{"port": p, "protocol": pr} for pr, p in ports_sorted]})
                else:
                    peer_text = "principal:" + peer[1]
                    rules.append({"from": [{"source": {"principals": [peer[1]]}}],
                                  "to": [{"operation": {"ports": [str(p) for _, p in ports_sorted]}}]})
                for pp in ports_sorted:
                    ev = ports[pp]
                    row = {"peer": peer_text, "protocol": pp[0], "port": pp[1], "firstSeen": stamp(ev["first"]),
                           "lastSeen": stamp(ev["last"]), "flowCount": ev["count"]}
                    if ev["dns"]:
                        row["dnsName"] = ",".join(sorted(ev["dns"]))
                    rows.append(row)
            out.append(proposal(self.backend, ns, kind, owner, direction, entry["selector"], rules, rows))
        return out


def proposal(backend, ns, kind, name, direction, selector, rules, rows):
    """A proposal as `learn` renders it: the rules in the backend's shape, the evidence rows."""
    selector = {"matchLabels": selector}
    if backend == "kubernetes":
        spec = {"backend": backend, "kubernetes": {"podSelector": selector, "policyTypes": [direction],
                                                   direction.lower(): rules}}
    else:
        spec = {"backend": backend, "istio": {"selector": selector, "rules": rules}}
    spec.update({"targetRef": {"kind": kind, "name": name}, "direction": direction})
    return {"apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
            "kind": "WorkloadNetworkPolicyProposal",
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "network-enforcer"},
                         "name": "%s-%s-%s" % (kind.lower(), name, direction.lower()),
                         "namespace": ns},
            "spec": spec,
            "status": {"learningSince": min(r["firstSeen"] for r in rows), "conditions": [],
                       "peers": rows, "flowCount": sum(r["flowCount"] for r in rows),
                       **summary(rows)}}


def summary(rows):
    """The status fields `kubectl get` shows: distinct peers, the first eight protocol/port
    pairs (then +N; port 0 is any port, `*`), and the newest last-seen and first-seen."""
    pairs = sorted({(r["protocol"], r["port"]) for r in rows})
    shown = ["%s/%s" % (pr, p if p else "*") for pr, p in pairs[:8]]
    if len(pairs) > 8:
        shown.append("+%d" % (len(pairs) - 8))
    return {"peerCount": len({r["peer"] for r in rows}), "ports": ",".join(shown),
            "lastSeen": max(r["lastSeen"] for r in rows),
            "lastLearned": max(r["firstSeen"] for r in rows)}


def stamp(t_ns):
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_ns // 1_000_000_000))


def parse_ts(text):
    import calendar
    whole, frac = text.rstrip("Z").split(".")
    secs = calendar.timegm(time_struct(whole))
    return secs * 1_000_000_000 + int((frac + "000000000")[:9])


def time_struct(whole):
    import time
    return time.strptime(whole, "%Y-%m-%dT%H:%M:%S")


def pod_peer(key, selector):
    return ("pods", PODS[key][0], tuple(sorted(selector(key).items())))


def expected_hubble(records, selector):
    exp = Expected("kubernetes")
    for rec in records:
        f = rec["flow"]
        if f["verdict"] != "FORWARDED" or f.get("is_reply") is not False:
            continue
        egress = f["traffic_direction"] == "EGRESS"
        subject, peer = (f["source"], f["destination"]) if egress else (f["destination"], f["source"])
        if "pod_name" not in subject:
            continue
        if peer.get("labels") == ["reserved:world"]:
            peer_key = ("ip", f["IP"]["destination" if egress else "source"])
        elif "pod_name" in peer:
            peer_key = pod_peer(BY_POD_NAME[peer["pod_name"]], selector)
        else:
            continue  # host: an unmanaged peer, never a rule
        proto = next(iter(f["l4"]))
        port = f["l4"][proto]["destination_port"]
        dns = (f.get("destination_names") or [None])[0] if egress else None
        exp.add(BY_POD_NAME[subject["pod_name"]], "Egress" if egress else "Ingress", peer_key, proto, port,
                parse_ts(f["time"]), 1, dns, selector)
    return exp.proposals()


def expected_ztunnel(lines):
    import re
    exp = Expected("istio")
    for line in lines:
        if " F " not in line:
            continue
        payload = line.split(" ", 3)[3]
        fields = dict(re.findall(r'(\S+?)=("[^"]*"|\S+)', payload.split("\t", 4)[-1]))
        fields = {k: v.strip('"') for k, v in fields.items()}
        if fields.get("direction") != "inbound" or "error" in fields or "src.identity" not in fields:
            continue
        port = int(fields["dst.hbone_addr"].rsplit(":", 1)[1])
        principal = fields["src.identity"][len("spiffe://"):]
        exp.add(BY_POD_NAME[fields["dst.workload"]], "Ingress", ("principal", principal), "TCP", port,
                parse_ts(payload.split("\t", 1)[0]), 1, selector=workload_selector)
    return exp.proposals()


def joined(lines):
    """Undoes the CRI framing the generator applied: P pieces joined to their F piece."""
    out, pending = [], ""
    for line in lines:
        stamp_, stream, tag, payload = line.split(" ", 3)
        if tag == "P":
            pending += payload
        else:
            out.append(" ".join((stamp_, stream, "F", pending + payload)))
            pending = ""
    return out


def expected_goldmane(records):
    exp = Expected("kubernetes")
    for rec in records:
        k = rec["Key"]
        if k["action"] != "Allow":
            continue
        egress = k["reporter"] == "Src"
        subject_name, peer_name = (k["sourceName"], k["destName"]) if egress else (k["destName"], k["sourceName"])
        subject = next((key for key in PODS if gm_name(key)[0] == subject_name), None)
        if subject is None or not subject_name.endswith("*"):
            continue  # a pod named without '*' (the CronJob's): its owner is not in the record
        peer = next((key for key in PODS if gm_name(key)[0] == peer_name), None)
        if peer is None:
            continue  # 'pub': outside the cluster without an address
        exp.add(subject, "Egress" if egress else "Ingress", pod_peer(peer, template_selector),
                k["proto"].upper(), int(k["destPort"]), int(rec["startTime"]) * 1_000_000_000,
                int(rec["numConnectionsStarted"]))
    return exp.proposals()


def write_expected(name, proposals):
    os.makedirs(EXPECTED, exist_ok=True)
    with open(os.path.join(EXPECTED, name), "w") as f:
        f.write("# Written by examples/generate.py from its own model of the application; the\n")
        f.write("# test learn_examples compares `ne-leader learn` with it.\n")
        for p in proposals:
            f.write("---\n" + to_yaml(p) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    hubble_records = hubble(Clock())
    with open(os.path.join(OUT, "hubble.jsonl"), "w") as f:
        for rec in hubble_records:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    ztunnel_lines = ztunnel(Clock())
    with open(os.path.join(OUT, "ztunnel.log"), "w") as f:
        for line in ztunnel_lines:
            f.write(line + "\n")
    goldmane_records = goldmane()
    with open(os.path.join(OUT, "goldmane.jsonl"), "w") as f:
        for rec in goldmane_records:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    write_expected("hubble.yaml", expected_hubble(hubble_records, template_selector))
    write_expected("hubble-cluster.yaml", expected_hubble(hubble_records, workload_selector))
    write_expected("ztunnel-cluster.yaml", expected_ztunnel(joined(ztunnel_lines)))
    write_expected("goldmane.yaml", expected_goldmane(goldmane_records))
    with open(SNAPSHOT, "w") as f:
        f.write("# kubectl get namespaces,pods,replicasets,deployments,statefulsets,daemonsets,jobs,cronjobs -A -o yaml\n")
        f.write("# (trimmed to the fields owner resolution reads) for the example in flows/\n")
        f.write(to_yaml(snapshot()) + "\n")


if __name__ == "__main__":
    main()
