#!/usr/bin/env python3
"""Writes the churn example: ten minutes of a shop whose pods come and go (addresses reused
within and across namespaces, a rolling update, a StatefulSet pod recreated, CronJob runs, a
scale-down, a bare pod deleted), its traffic in the three flow formats, three histories of
the cluster (snapshots at the start and the end, and a pod watch stream), and the proposals
and counts `learn` and `check` must give for each provider and history.

The expected results come from this file's own model of the resolution and learning rules
(README, "Owner resolution" and "Learning rules"; docs/architecture.md, the resolver), not
from running the code. Deterministic. Run from the repository root:

    python3 examples/churn/generate.py
"""

import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # nothing written beside examples/generate.py
sys.path.insert(0, os.path.dirname(HERE))
from generate import cri, proposal, to_yaml  # noqa: E402  (formatting and the proposal shape)

RNG = random.Random(20261205)
BASE = 1_764_583_200  # 2025-12-01T10:00:00Z: the capture runs from BASE to BASE + 600 s
END = 600
TRUST = "cluster.local"
S = 1_000_000_000


def ts(offset_ns):
    secs, ns = divmod(BASE * S + offset_ns, S)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + ".%09dZ" % ns


def kube_time(sec):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(BASE + sec))


# --- the cluster ------------------------------------------------------------------------
# Workloads: (namespace, kind, name) -> selector labels, template labels, service account,
# container ports. Every one of them is still listed at the end (scaled to 0 where its pods
# are gone), so that a pod the watch stream lists always has its owner chain.
WORKLOADS = {
    ("shop", "Deployment", "api"): ({"app": "api"}, {"app": "api", "tier": "backend"}, "api",
                                    [("http", "TCP", 8080), ("admin", "TCP", 9090)]),
    ("shop", "Deployment", "alpha"): ({"app": "alpha"}, {"app": "alpha", "tier": "batch"}, "alpha", []),
    ("shop", "Deployment", "beta"): ({"app": "beta"}, {"app": "beta", "tier": "batch"}, "beta", []),
    ("shop", "Deployment", "web"): ({"app": "web"}, {"app": "web", "tier": "frontend"}, "web",
                                    [("https", "TCP", 8443)]),
    ("shop", "Deployment", "cache"): ({"app": "cache"}, {"app": "cache", "tier": "data"}, "cache",
                                      [("redis", "TCP", 6379)]),
    ("other", "Deployment", "search"): ({"app": "search"}, {"app": "search", "tier": "data"}, "search",
                                        [("http", "TCP", 9200)]),
    ("shop", "StatefulSet", "db"): ({"app": "db"}, {"app": "db", "tier": "data"}, "db",
                                    [("postgres", "TCP", 5432)]),
    ("shop", "CronJob", "report"): (None, {"app": "report"}, "report", []),
}
# ReplicaSets: name -> (namespace, Deployment, hash, replicas at the start, at the end;
# None = not there yet).
REPLICASETS = {
    "api-5c8b7d9f6c": ("shop", "api", "5c8b7d9f6c", 2, 1),
    "alpha-6d5f8b9c7d": ("shop", "alpha", "6d5f8b9c7d", 1, 0),
    "beta-7f9c6d8b5c": ("shop", "beta", "7f9c6d8b5c", None, 1),
    "web-7d4f9c6b8d": ("shop", "web", "7d4f9c6b8d", 2, 0),
    "web-85c6d7f9b4": ("shop", "web", "85c6d7f9b4", None, 2),
    "cache-59d7c8f6b4": ("shop", "cache", "59d7c8f6b4", 1, 0),
    "search-6b8d9f7c5d": ("other", "search", "6b8d9f7c5d", None, 1),
}
# Workloads created during the capture (absent from the start snapshot), with their time.
CREATED = {("shop", "Deployment", "beta"): 225, ("other", "Deployment", "search"): 275}
# Deployments' spec.replicas at the start and at the end (alpha and cache scaled to 0, api
# scaled from 2 to 1).
DEPLOY_REPLICAS = {"api": (2, 1), "alpha": (1, 0), "beta": (None, 1), "web": (2, 2), "cache": (1, 0),
                   "search": (None, 1)}
JOB1, JOB2 = (BASE + 60) // 60, (BASE + 360) // 60
JOBS = {"report-%d" % JOB1: 60, "report-%d" % JOB2: 360}  # name -> created

# Pods: key -> namespace, name, controller (kind, name), addresses, node, start, end (deleted or
# finished; None = alive at the end), phase. Labels follow from the controller.
PODS = {
    "api-1": ("shop", "api-5c8b7d9f6c-h7j2k", ("ReplicaSet", "api-5c8b7d9f6c"),
              ["10.244.2.21", "fd00:10:244:2::21"], "worker-2", -3000, None),
    "api-2": ("shop", "api-5c8b7d9f6c-p4n8v", ("ReplicaSet", "api-5c8b7d9f6c"),
              ["10.244.1.22", "fd00:10:244:1::22"], "worker-1", -3000, 300),
    "alpha": ("shop", "alpha-6d5f8b9c7d-x8k2p", ("ReplicaSet", "alpha-6d5f8b9c7d"),
              ["10.244.1.50", "fd00:10:244:1::50"], "worker-1", -2000, 200),
    "beta": ("shop", "beta-7f9c6d8b5c-m4q7t", ("ReplicaSet", "beta-7f9c6d8b5c"),
             ["10.244.1.50", "fd00:10:244:1::50"], "worker-1", 230, None),
    "web-a1": ("shop", "web-7d4f9c6b8d-k2x7p", ("ReplicaSet", "web-7d4f9c6b8d"),
               ["10.244.1.11"], "worker-1", -5000, 340),
    "web-a2": ("shop", "web-7d4f9c6b8d-q9m4z", ("ReplicaSet", "web-7d4f9c6b8d"),
               ["10.244.2.12"], "worker-2", -5000, 380),
    "web-b1": ("shop", "web-85c6d7f9b4-g6w2s", ("ReplicaSet", "web-85c6d7f9b4"),
               ["10.244.1.13"], "worker-1", 320, None),
    "web-b2": ("shop", "web-85c6d7f9b4-l5n7r", ("ReplicaSet", "web-85c6d7f9b4"),
               ["10.244.2.14"], "worker-2", 345, None),
    "cache": ("shop", "cache-59d7c8f6b4-r5z9w", ("ReplicaSet", "cache-59d7c8f6b4"),
              ["10.244.3.70"], "worker-3", -4000, 250),
    "search": ("other", "search-6b8d9f7c5d-t2v6n", ("ReplicaSet", "search-6b8d9f7c5d"),
               ["10.244.3.70"], "worker-3", 280, None),
    "db-old": ("shop", "db-0", ("StatefulSet", "db"), ["10.244.3.31"], "worker-3", -6000, 400),
    "db-new": ("shop", "db-0", ("StatefulSet", "db"), ["10.244.3.32"], "worker-3", 410, None),
    "report-1": ("shop", "report-%d-b7x4k" % JOB1, ("Job", "report-%d" % JOB1),
                 ["10.244.1.61"], "worker-1", 61, 90),
    "report-2": ("shop", "report-%d-z5m8q" % JOB2, ("Job", "report-%d" % JOB2),
                 ["10.244.1.62"], "worker-1", 361, 390),
    "debug": ("shop", "debug", None, ["10.244.2.90"], "worker-2", 100, 300),
}
NODE_IPS = {"worker-1": "172.18.0.3", "worker-2": "172.18.0.4", "worker-3": "172.18.0.5"}
PAYMENTS = ("203.0.113.10", "api.payments.example.com")
VISITOR = "198.51.100.7"


def ns_of(key):
    return PODS[key][0]


def name_of(key):
    return PODS[key][1]


def uid_of(key):
    return "uid-pod-" + key


def owner_of(key):
    """The pod's top owner: (kind, name), or None for a bare pod."""
    ctrl = PODS[key][2]
    if ctrl is None:
        return None
    kind, name = ctrl
    if kind == "ReplicaSet":
        return ("Deployment", REPLICASETS[name][1])
    if kind == "Job":
        return ("CronJob", "report")
    return ctrl


def labels_of(key):
    ns, name, ctrl = PODS[key][:3]
    if ctrl is None:
        return {"run": "debug", "tier": "tools"}
    kind, cname = ctrl
    owner = owner_of(key)
    labels = dict(WORKLOADS[(ns,) + owner][1])
    if kind == "ReplicaSet":
        labels["pod-template-hash"] = REPLICASETS[cname][2]
    elif kind == "StatefulSet":
        labels.update({"apps.kubernetes.io/pod-index": "0", "controller-revision-hash": "db-6b5f8d7c94",
                       "statefulset.kubernetes.io/pod-name": name})
    else:
        job_uid = "uid-job-" + cname
        labels.update({"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": cname,
                       "controller-uid": job_uid, "job-name": cname})
    return labels


def sa_of(key):
    owner = owner_of(key)
    return WORKLOADS[(ns_of(key),) + owner][2] if owner else "default"


def ip_of(key, v6=False):
    if isinstance(key, tuple):
        return key[0]
    if key == VISITOR:
        return VISITOR
    ips = PODS[key][3]
    return ips[1] if v6 and len(ips) > 1 else ips[0]


def node_of(key):
    return PODS[key][4] if key in PODS else None


def is_pod(key):
    return isinstance(key, str) and key in PODS


# --- the traffic ------------------------------------------------------------------------
# (time in s, client, server, protocol, port, how). `how`: None (every data plane sees the
# pods), "v6" (over IPv6), or Hubble only: "world-src" / "world-dst" (the pod side is
# known only by its address, reserved:world), "stale" (the server's node still names the
# client after it was deleted and its address given to another pod).
CONNECTIONS = [
    (20, "alpha", "api-1", "TCP", 8080, None), (60, "alpha", "api-1", "TCP", 8080, "v6"),
    (110, "alpha", "api-1", "TCP", 8080, None), (150, "alpha", "api-1", "TCP", 8080, "v6"),
    (130, "alpha", "api-1", "TCP", 8080, "world-src"), (235, "alpha", "api-1", "TCP", 8080, "stale"),
    (250, "beta", "api-1", "TCP", 9090, None), (320, "beta", "api-1", "TCP", 9090, "v6"),
    (450, "beta", "api-1", "TCP", 9090, None), (520, "beta", "api-1", "TCP", 9090, "v6"),
    (470, "beta", "api-1", "TCP", 9090, "world-src+v6"),
    (30, "api-1", "cache", "TCP", 6379, None), (120, "api-1", "cache", "TCP", 6379, None),
    (170, "api-2", "cache", "TCP", 6379, None), (210, "api-1", "cache", "TCP", 6379, None),
    (140, "api-1", "cache", "TCP", 6379, "world-dst"),
    (300, "api-1", "search", "TCP", 9200, None), (420, "api-1", "search", "TCP", 9200, None),
    (560, "api-1", "search", "TCP", 9200, None),
    (500, "api-1", "search", "TCP", 9200, "world-dst"),
    (40, "web-a1", "api-1", "TCP", 8080, None), (200, "web-a1", "api-1", "TCP", 8080, None),
    (80, "web-a2", "api-2", "TCP", 8080, None), (260, "web-a2", "api-2", "TCP", 8080, None),
    (400, "web-b1", "api-1", "TCP", 8080, None), (580, "web-b1", "api-1", "TCP", 8080, None),
    (500, "web-b2", "api-1", "TCP", 8080, None),
    (50, VISITOR, "web-a1", "TCP", 8443, None), (350, VISITOR, "web-a2", "TCP", 8443, None),
    (430, VISITOR, "web-b1", "TCP", 8443, None), (590, VISITOR, "web-b2", "TCP", 8443, None),
    (90, "api-1", "db-old", "TCP", 5432, None), (350, "api-1", "db-old", "TCP", 5432, None),
    (240, "api-2", "db-old", "TCP", 5432, None),
    (480, "api-1", "db-new", "TCP", 5432, None), (590, "api-1", "db-new", "TCP", 5432, None),
    (70, "report-1", "api-1", "TCP", 8080, None), (370, "report-2", "api-1", "TCP", 8080, None),
    (130, "debug", "api-1", "TCP", 8080, None), (220, "debug", "api-1", "TCP", 8080, None),
    (180, "debug", "api-2", "TCP", 8080, None), (160, "api-1", "debug", "TCP", 8000, None),
    (200, "debug", "api-1", "TCP", 8080, "world-src"),
    (100, "api-1", PAYMENTS, "TCP", 443, None), (400, "api-1", PAYMENTS, "TCP", 443, None),
]
DENIED = [(190, "debug", "db-old", "TCP", 5432)]


def ephemeral():
    return RNG.randint(32768, 60999)


def uuid():
    return "%08x-%04x-4%03x-%04x-%012x" % (RNG.getrandbits(32), RNG.getrandbits(16), RNG.getrandbits(12),
                                            0x8000 | RNG.getrandbits(14), RNG.getrandbits(48))


# --- Hubble -----------------------------------------------------------------------------
HUBBLE_DROPPED_LABELS = {"pod-template-hash", "controller-revision-hash", "statefulset.kubernetes.io/pod-name",
                         "apps.kubernetes.io/pod-index", "controller-uid", "batch.kubernetes.io/controller-uid"}


def hubble_labels(key):
    """The pod labels Cilium puts in the identity (its default label filter drops the hash
    and uid labels)."""
    return {k: v for k, v in labels_of(key).items() if k not in HUBBLE_DROPPED_LABELS}


def hubble_endpoint(key, local, world):
    if not is_pod(key) or world:
        return {"identity": 2, "labels": ["reserved:world"]}
    ns, name = ns_of(key), name_of(key)
    owner = owner_of(key)
    ep = {}
    if local:
        ep["ID"] = 1000 + (sum(map(ord, name)) % 3000)
    ep["identity"] = 20000 + (sum(map(ord, owner[1] if owner else name)) * 37) % 40000
    ep["cluster_name"] = "default"
    ep["namespace"] = ns
    lab = ["k8s:%s=%s" % kv for kv in sorted(hubble_labels(key).items())]
    lab += ["k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=%s" % ns,
            "k8s:io.cilium.k8s.policy.cluster=default",
            "k8s:io.cilium.k8s.policy.serviceaccount=%s" % sa_of(key),
            "k8s:io.kubernetes.pod.namespace=%s" % ns]
    ep["labels"] = sorted(lab)
    ep["pod_name"] = name
    if local and owner:
        ep["workloads"] = [{"name": owner[1], "kind": owner[0]}]
    return ep


def hubble_flow(t, verdict, src, dst, proto, sport, dport, direction, reply, v6, world_src=False,
                world_dst=False, flags=None, drop=False, dns=None, local_src=None):
    if local_src is None:
        local_src = (direction == "EGRESS") != reply
    node = node_of(src) if local_src else node_of(dst)
    flow = {"time": ts(t), "uuid": uuid(), "verdict": verdict}
    if drop:
        flow["drop_reason"] = 133
    flow["ethernet"] = {"source": "0a:58:0a:f4:%02x:%02x" % (RNG.getrandbits(8), RNG.getrandbits(8)),
                        "destination": "0a:58:0a:f4:%02x:%02x" % (RNG.getrandbits(8), RNG.getrandbits(8))}
    flow["IP"] = {"source": ip_of(src, v6), "destination": ip_of(dst, v6), "ipVersion": "IPv6" if v6 else "IPv4"}
    l4 = {"source_port": sport, "destination_port": dport}
    if proto == "TCP":
        l4["flags"] = flags or {"SYN": True}
    flow["l4"] = {proto: l4}
    flow["source"] = hubble_endpoint(src, local_src, world_src)
    flow["destination"] = hubble_endpoint(dst, not local_src, world_dst)
    flow["Type"] = "L3_L4"
    flow["node_name"] = "default/" + node
    if dns:
        flow["destination_names"] = [dns]
    if reply:
        flow["reply"] = True
    flow["event_type"] = {"type": 5 if drop else 4}
    flow["traffic_direction"] = direction
    if not drop:
        flow["trace_observation_point"] = "TO_ENDPOINT" if (direction == "INGRESS") != reply else "FROM_ENDPOINT"
        flow["trace_reason"] = "REPLY" if reply else "NEW"
        flow["is_reply"] = reply
    else:
        flow["drop_reason_desc"] = "POLICY_DENIED"
    flow["Summary"] = "TCP Flags: " + ", ".join(sorted(l4.get("flags", {}))) if proto == "TCP" else proto
    return {"flow": flow, "node_name": "default/" + node, "time": ts(t)}


def hubble():
    """Records, and per record what the model needs: (t_ns, subject, direction, peer,
    protocol, port, dns) for the requests that teach, None for the others."""
    out = []
    for sec, client, server, proto, port, how in sorted(CONNECTIONS, key=lambda c: c[0]):
        how = how or ""
        v6 = "v6" in how
        world_src, world_dst = "world-src" in how, "world-dst" in how
        t = sec * S + 1_000_000 * RNG.randint(1, 400)
        sport = ephemeral()
        dns = PAYMENTS[1] if isinstance(server, tuple) else None
        client_peer = ("addr", ip_of(client, v6)) if world_src or not is_pod(client) else ("pod", client)
        server_peer = ("addr", ip_of(server, v6)) if world_dst or not is_pod(server) else ("pod", server)
        if is_pod(client) and not world_src and "stale" not in how:  # the client's node sees it leave
            out.append((hubble_flow(t, "FORWARDED", client, server, proto, sport, port, "EGRESS", False, v6,
                                    world_dst=world_dst, dns=dns),
                        (t, client, "Egress", server_peer, proto, port, dns)))
        if is_pod(server) and not world_dst:  # the server's node sees it arrive, and the reply leave
            t2 = t + 700_000
            out.append((hubble_flow(t2, "FORWARDED", client, server, proto, sport, port, "INGRESS", False, v6,
                                    world_src=world_src),
                        (t2, server, "Ingress", client_peer, proto, port, None)))
            out.append((hubble_flow(t2 + 300_000, "FORWARDED", server, client, proto, port, sport, "INGRESS",
                                    True, v6, world_dst=world_src, flags={"SYN": True, "ACK": True}), None))
        else:  # the reply arrives at the client
            out.append((hubble_flow(t + 40_000_000, "FORWARDED", server, client, proto, port, sport, "EGRESS",
                                    True, v6, world_src=world_dst, flags={"SYN": True, "ACK": True}), None))
    for sec, client, server, proto, port in DENIED:
        out.append((hubble_flow(sec * S, "DROPPED", client, server, proto, ephemeral(), port, "INGRESS", False,
                                False, drop=True, local_src=False), None))
    return out


# --- ztunnel ----------------------------------------------------------------------------
def spiffe(key):
    return "spiffe://%s/ns/%s/sa/%s" % (TRUST, ns_of(key), sa_of(key))


def addr(ip, port):
    return ("[%s]:%d" if ":" in ip else "%s:%d") % (ip, port)


def ztunnel_line(t, direction, client, server, port, v6, error=None):
    fields = ["src.addr=%s" % addr(ip_of(client, v6), ephemeral())]
    if is_pod(client):
        fields += ['src.workload="%s"' % name_of(client), 'src.namespace="%s"' % ns_of(client),
                   'src.identity="%s"' % spiffe(client)]
    dst_ip = ip_of(server, v6)
    if is_pod(server):
        fields += ["dst.addr=%s" % addr(dst_ip, 15008), "dst.hbone_addr=%s" % addr(dst_ip, port)]
        if owner_of(server):  # a bare pod has no Service
            fields.append('dst.service="%s.%s.svc.cluster.local"' % (owner_of(server)[1], ns_of(server)))
        fields += ['dst.workload="%s"' % name_of(server), 'dst.namespace="%s"' % ns_of(server),
                   'dst.identity="%s"' % spiffe(server)]
    else:
        fields += ["dst.addr=%s" % addr(dst_ip, port)]
    fields += ['direction="%s"' % direction, "bytes_sent=%d" % RNG.randint(0, 9000),
               "bytes_recv=%d" % RNG.randint(0, 90000), 'duration="%dms"' % RNG.randint(1, 900)]
    if error:
        fields.append('error="%s"' % error)
    return "%s\t%s\taccess\tconnection complete\t%s" % (ts(t)[:26] + "Z", "error" if error else "info",
                                                        " ".join(fields))


def ztunnel():
    """CRI-framed lines, and the model's facts as for Hubble. ztunnel logs name pods, so
    the address-only Hubble records have no counterpart here."""
    out = []
    for sec, client, server, proto, port, how in sorted(CONNECTIONS, key=lambda c: c[0]):
        how = how or ""
        if "world" in how or "stale" in how:
            continue
        v6 = "v6" in how
        t = sec * S + 1_000_000 * RNG.randint(1, 400)
        if is_pod(client):
            out.append((cri(t, ztunnel_line(t, "outbound", client, server, port, v6)), "outbound"))
        if is_pod(server):
            t2 = t + 900_000
            line = ztunnel_line(t2, "inbound", client, server, port, v6)
            split = RNG.randint(40, len(line) - 10) if len(out) % 7 == 0 else None
            fact = (t2 // 1000 * 1000, server, "Ingress", ("principal", spiffe(client)[9:]) if is_pod(client)
                    else None, proto, port, None)
            out.append((cri(t2, line, split), fact))
    for sec, client, server, proto, port in DENIED:
        t = sec * S
        out.append((cri(t, ztunnel_line(t, "inbound", client, server, port, False,
                                        error="connection closed due to policy rejection: allow policies exist, "
                                              "but none allowed")), "denied"))
    return out


# --- Goldmane ---------------------------------------------------------------------------
def gm_name(key):
    if not is_pod(key):
        return "pub", "-", "Network", []
    labels = ["%s=%s" % kv for kv in sorted(labels_of(key).items())]
    ctrl = PODS[key][2]
    if ctrl and ctrl[0] == "ReplicaSet":
        agg = ctrl[1] + "-*"
    elif ctrl and ctrl[0] == "StatefulSet":
        agg = ctrl[1] + "-*"
    else:
        agg = name_of(key)  # Job and bare pods keep their names, as in examples/generate.py
    return agg, ns_of(key), "WorkloadEndpoint", labels


def goldmane_flow(start, client, server, proto, port, reporter, conns):
    sname, sns, stype, slabels = gm_name(client)
    dname, dns_, dtype, dlabels = gm_name(server)
    if is_pod(server) and owner_of(server):
        svc, svc_ns, svc_port = owner_of(server)[1], ns_of(server), str(port)
        svc_port_name = {8080: "http", 9090: "admin", 6379: "redis", 9200: "http", 5432: "postgres",
                         8443: "https"}[port]
    else:
        svc, svc_ns, svc_port_name, svc_port = "-", "-", "-", "0"
    prof = "kns.%s" % (sns if reporter == "Src" else dns_)
    allow = {"kind": "Profile", "name": prof, "tier": "__PROFILE__", "action": "Allow"}
    key = {"sourceName": sname, "sourceNamespace": sns, "sourceType": stype,
           "destName": dname, "destNamespace": dns_, "destType": dtype, "destPort": str(port),
           "destServiceName": svc, "destServiceNamespace": svc_ns, "destServicePortName": svc_port_name,
           "destServicePort": svc_port, "proto": proto.lower(), "reporter": reporter, "action": "Allow",
           "policies": {"enforcedPolicies": [allow], "pendingPolicies": [allow]}}
    pkts = conns * RNG.randint(4, 20)
    return {"Key": key, "startTime": str(BASE + start), "endTime": str(BASE + start + 15),
            "sourceLabels": slabels, "destLabels": dlabels,
            "packetsIn": str(pkts), "packetsOut": str(pkts + RNG.randint(0, 5)),
            "bytesIn": str(pkts * RNG.randint(60, 900)), "bytesOut": str(pkts * RNG.randint(60, 900)),
            "numConnectionsStarted": str(conns), "numConnectionsCompleted": str(conns),
            "numConnectionsLive": "0"}


def goldmane():
    """Goldmane aggregates per 15 s window and key (replicas of one ReplicaSet merge); it
    gives no addresses, so the address-only Hubble records have no counterpart here."""
    windows = {}
    for sec, client, server, proto, port, how in CONNECTIONS:
        if "world" in (how or "") or "stale" in (how or ""):
            continue
        window = sec - sec % 15
        for reporter, side in (("Src", client), ("Dst", server)):
            if not is_pod(side):
                continue
            k = (window, gm_name(client)[0], gm_name(server)[0], proto, port, reporter)
            first = windows.setdefault(k, [client, server, 0])
            first[2] += 1
    out = []
    for (window, _, _, proto, port, reporter), (client, server, conns) in sorted(windows.items(), key=str):
        rec = goldmane_flow(window, client, server, proto, port, reporter, conns)
        subject, peer = (client, server) if reporter == "Src" else (server, client)
        fact = (window * S, subject, "Egress" if reporter == "Src" else "Ingress",
                ("pod", peer) if is_pod(peer) else ("world",), proto, port, None)
        out.append((rec, fact, conns))
    return out


# --- cluster histories ------------------------------------------------------------------
RV = [1000]


def next_rv():
    RV[0] += 1
    return str(RV[0])


def containers(wkey):
    ports = WORKLOADS[wkey][3]
    return [{"name": wkey[2], "image": "registry.example/%s:1.0" % wkey[2],
             "ports": [{"name": n, "protocol": p, "containerPort": c} for n, p, c in ports]}]


def template(wkey, labels=None):
    return {"metadata": {"labels": labels or WORKLOADS[wkey][1]},
            "spec": {"serviceAccountName": WORKLOADS[wkey][2], "containers": containers(wkey)}}


def workload_objects(at):
    """Namespaces and workload objects as listed at `at` seconds."""
    items = [{"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}} for ns in ("other", "shop")]
    for wkey, (selector, tmpl, sa, _) in WORKLOADS.items():
        ns, kind, name = wkey
        if CREATED.get(wkey, -1) > at:
            continue
        meta = {"name": name, "namespace": ns, "uid": "uid-%s-%s" % (kind.lower(), name)}
        if kind == "CronJob":
            spec = {"schedule": "*/5 * * * *", "successfulJobsHistoryLimit": 3,
                    "jobTemplate": {"spec": {"template": dict(template(wkey), spec=dict(
                        template(wkey)["spec"], restartPolicy="OnFailure"))}}}
        else:
            spec = {"selector": {"matchLabels": selector}, "template": template(wkey)}
            if kind == "Deployment":
                spec["replicas"] = DEPLOY_REPLICAS[name][1 if at >= END else 0]
            if kind == "StatefulSet":
                spec.update(serviceName=name, replicas=1)
        items.append({"apiVersion": "batch/v1" if kind == "CronJob" else "apps/v1", "kind": kind,
                      "metadata": meta, "spec": spec})
    for rs, (ns, deploy, hash_, before, after) in REPLICASETS.items():
        replicas = after if at >= END else before
        if replicas is None:
            continue
        wkey = (ns, "Deployment", deploy)
        labels = dict(WORKLOADS[wkey][1], **{"pod-template-hash": hash_})
        items.append({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                      "metadata": {"name": rs, "namespace": ns, "uid": "uid-rs-" + rs, "labels": labels,
                                   "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                        "name": deploy, "uid": "uid-deployment-" + deploy,
                                                        "controller": True, "blockOwnerDeletion": True}]},
                      "spec": {"replicas": replicas,
                               "selector": {"matchLabels": dict(WORKLOADS[wkey][0], **{"pod-template-hash": hash_})},
                               "template": template(wkey, labels)}})
    for job, created in JOBS.items():
        if created > at:
            continue
        wkey = ("shop", "CronJob", "report")
        uid = "uid-job-" + job
        labels = dict(WORKLOADS[wkey][1], **{"batch.kubernetes.io/controller-uid": uid,
                                             "batch.kubernetes.io/job-name": job,
                                             "controller-uid": uid, "job-name": job})
        items.append({"apiVersion": "batch/v1", "kind": "Job",
                      "metadata": {"name": job, "namespace": "shop", "uid": uid, "labels": labels,
                                   "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                                                        "name": "report", "uid": "uid-cronjob-report",
                                                        "controller": True, "blockOwnerDeletion": True}]},
                      "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                               "template": dict(template(wkey, labels), spec=dict(
                                   template(wkey)["spec"], restartPolicy="OnFailure"))}})
    return items


def pod_object(key, state, rv):
    """The pod as the API server shows it: `state` is pending, running, finished or
    terminating."""
    ns, name, ctrl, ips, node, start, end = PODS[key]
    meta = {"name": name, "namespace": ns, "uid": uid_of(key), "resourceVersion": rv,
            "creationTimestamp": kube_time(start - 2), "labels": labels_of(key)}
    if ctrl:
        kind, cname = ctrl
        api = "batch/v1" if kind == "Job" else "apps/v1"
        cuid = "uid-job-" + cname if kind == "Job" else "uid-%s-%s" % (
            "rs" if kind == "ReplicaSet" else kind.lower(), cname)
        meta["ownerReferences"] = [{"apiVersion": api, "kind": kind, "name": cname, "uid": cuid,
                                    "controller": True, "blockOwnerDeletion": True}]
        if kind != "StatefulSet":
            meta["generateName"] = name[: name.rfind("-") + 1]
    if state == "terminating":
        meta["deletionTimestamp"] = kube_time(end)
        meta["deletionGracePeriodSeconds"] = 30
    owner = owner_of(key)
    wkey = (ns,) + owner if owner else None
    spec = {"nodeName": node, "serviceAccountName": sa_of(key),
            "containers": containers(wkey) if wkey else [{"name": "debug", "image": "busybox:1.37"}]}
    if ctrl and ctrl[0] == "Job":
        spec["restartPolicy"] = "OnFailure"
    status = {"phase": "Pending"}
    if state != "pending":
        cname = spec["containers"][0]["name"]
        status = {"phase": "Running", "hostIP": NODE_IPS[node], "podIP": ips[0],
                  "podIPs": [{"ip": ip} for ip in ips], "startTime": kube_time(start),
                  "containerStatuses": [{"name": cname, "ready": True, "restartCount": 0,
                                         "image": spec["containers"][0]["image"],
                                         "state": {"running": {"startedAt": kube_time(start)}}}]}
        if state == "finished":
            status["phase"] = "Succeeded"
            status["containerStatuses"][0]["ready"] = False
            status["containerStatuses"][0]["state"] = {"terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": kube_time(start), "finishedAt": kube_time(end)}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def finishes(key):
    return PODS[key][2] is not None and PODS[key][2][0] == "Job"


def pod_events():
    """Every pod change from the capture's start to its end, in time order: what
    `kubectl get pods -A -w -o json --output-watch-events` prints (the pods listed when
    the watch starts come first, as ADDED)."""
    changes = []
    for key, (_, _, _, _, _, start, end) in PODS.items():
        if start <= 0:
            changes.append((0, "ADDED", key, "running"))
        else:
            changes.append((start - 2, "ADDED", key, "pending"))
            changes.append((start, "MODIFIED", key, "running"))
        if end is None:
            continue
        if finishes(key):
            changes.append((end, "MODIFIED", key, "finished"))
        else:
            changes.append((end - 30, "MODIFIED", key, "terminating"))
            changes.append((end, "DELETED", key, "terminating"))
    changes.sort(key=lambda c: (c[0], c[2]))
    events, last = [], {}
    for _, event, key, state in changes:
        obj = pod_object(key, state, next_rv())
        last[key] = obj
        events.append({"type": event, "object": obj})
    return events, last


def snapshot(at, pods):
    meta = {"resourceVersion": ""}
    return {"apiVersion": "v1", "kind": "List", "metadata": meta, "items": workload_objects(at) + pods}


# --- the model: resolution ----------------------------------------------------------------
# A history is what one set of `--cluster` inputs tells: the pods it lists, each with the
# life the inputs show (start, end; end None when no input shows one), and the workloads.
class History:
    def __init__(self, pods, workloads):
        self.pods = pods  # key -> (start, end, gone)
        self.workloads = workloads  # (ns, kind, name)

    def holders(self, ip):
        """Who held `ip` when: [(start, end, key)], each hold ending at the next start."""
        held = sorted((PODS[k][5], e if e is not None else float("inf"), k)
                      for k, (_, e, _) in self.pods.items() if ip in PODS[k][3])
        return [(s, min(e, held[i + 1][0]) if i + 1 < len(held) else e, k) for i, (s, e, k) in enumerate(held)]

    def holder(self, ip, first, last):
        """('pod', key), ('external', ip) or ('unresolved', why) for an address seen from
        `first` to `last` (seconds)."""
        held = self.holders(ip)
        if not held:
            return ("external", ip)
        over = [h for h in held if h[0] <= last and h[1] > first]
        if not over:
            return ("unresolved", "address_not_held")
        if len(over) == 1 and over[0][0] <= first and over[0][1] > last:
            return ("pod", over[0][2])
        return ("unresolved", "address_reused")

    def owner(self, ns, kind, name):
        """The resolution of a workload object: (owner kind, owner name, selector)."""
        if (ns, kind, name) not in self.workloads:
            return None
        if kind == "ReplicaSet":
            return self.owner(ns, "Deployment", REPLICASETS[name][1])
        if kind == "Job":
            return self.owner(ns, "CronJob", "report")
        selector = WORKLOADS[(ns, kind, name)][0]
        if kind == "CronJob":  # a CronJob's selector: its template's labels
            selector = WORKLOADS[(ns, kind, name)][1]
        return (kind, name, selector)

    def listed(self, key):
        ns, _, ctrl = PODS[key][:3]
        if ctrl is None:
            return ("pod", ns, "Pod", name_of(key), template_of(labels_of(key)))
        found = self.owner(ns, *ctrl)
        return ("pod", ns) + found if found else ("unresolved", "not_found")

    def named(self, ns, name, at):
        """The listed pod of that name: the one alive at `at`, else the newest."""
        same = sorted((PODS[k][5], k) for k in self.pods if PODS[k][0] == ns and PODS[k][1] == name)
        for start, k in reversed(same):
            end = self.pods[k][1]
            if start <= at and (end is None or end > at):
                return k
        return same[-1][1] if same else None

    def pod(self, key, at, labels, identity_sa):
        """A pod the record names (never resolved by its address)."""
        ns, name = ns_of(key), name_of(key)
        k = self.named(ns, name, at)
        if k is not None:
            return self.listed(k)
        # Not listed: the owners that are, by the record's hash or job label, else by the
        # name as its controller generates it.
        if "pod-template-hash" in labels:
            cands = [("ReplicaSet", rs) for rs, v in REPLICASETS.items()
                     if v[0] == ns and v[2] == labels["pod-template-hash"]]
        elif "job-name" in labels:
            cands = [("Job", labels["job-name"])]
        else:
            base, dash, suffix = name.rpartition("-")
            cands = []
            if base and suffix.isdigit() and (suffix == "0" or not suffix.startswith("0")):
                cands.append(("StatefulSet", base))
            if base and len(suffix) == 5 and all(c in GENERATED for c in suffix):
                cands += [("ReplicaSet", base), ("DaemonSet", base), ("Job", base)]
        found = []
        for kind, cname in cands:
            res = self.owner(ns, kind, cname)
            if res is None:
                continue
            if labels and any(labels.get(k) != v for k, v in res[2].items()):
                continue
            top = (ns,) + res[:2]
            if identity_sa and WORKLOADS[top][2] != identity_sa:
                continue
            found.append(res)
        if found:
            assert len({f[:2] for f in found}) == 1
            return ("pod", ns) + found[0]
        if labels:
            return ("pod", ns, None, None, template_of(labels))
        return ("unresolved", "pod_not_listed")

    def workload(self, ns, kind, name):
        found = self.owner(ns, kind, name)
        return ("pod", ns) + found if found else ("unresolved", "not_found")


GENERATED = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet


def template_of(labels):
    return {k: v for k, v in labels.items()
            if k not in ("pod-template-hash", "controller-revision-hash", "pod-template-generation",
                         "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index", "controller-uid",
                         "job-name") and not k.startswith("batch.kubernetes.io/")}


def histories():
    alive_at = lambda k, at: PODS[k][5] <= at and (PODS[k][6] is None or PODS[k][6] > at or finishes(k))
    workloads_at = lambda at: {(o["metadata"]["namespace"], o["kind"], o["metadata"]["name"])
                               for o in workload_objects(at) if o["kind"] != "Namespace"}
    end_pods = {k: (PODS[k][5], PODS[k][6] if finishes(k) else None, False) for k in PODS if alive_at(k, END)}
    start_pods = {k: (PODS[k][5], None, False) for k in PODS if alive_at(k, 0)}
    watch_pods = {k: (PODS[k][5], PODS[k][6], PODS[k][6] is not None and not finishes(k)) for k in PODS}
    end_workloads = workloads_at(END)
    return {
        "end": History(end_pods, end_workloads),
        "start-end": History(dict(start_pods, **end_pods), workloads_at(0) | end_workloads),
        "end-watch": History(watch_pods, end_workloads),
    }


# --- the model: learning ------------------------------------------------------------------
SUBJECT_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def resolve(h, side, t_ns, provider, is_subject):
    """What an endpoint of a record becomes under history `h`."""
    at = t_ns / S  # seconds since BASE
    if side[0] == "world":
        return ("world",)
    if side[0] == "addr":
        found = h.holder(side[1], at, at)
        return h.listed(found[1]) if found[0] == "pod" else found
    if side[0] == "principal":
        return side
    key = side[1]
    owner = owner_of(key)
    if provider == "hubble":
        if is_subject and owner:  # the local side carries its workload
            return h.workload(ns_of(key), *owner)
        return h.pod(key, at, hubble_labels(key), None)
    if provider == "goldmane":
        ctrl = PODS[key][2]
        if ctrl and ctrl[0] in ("ReplicaSet", "StatefulSet"):  # the aggregate's labels prove the owner
            return h.workload(ns_of(key), *owner)
        return h.pod(key, at, labels_of(key), None)
    return h.pod(key, at, {}, sa_of(key))  # ztunnel names pods only


class Model:
    def __init__(self, backend):
        self.backend = backend
        self.lists = {}
        # No subject here is excluded, external or reserved, and no peer is an unmanaged
        # identity (host, node, apiserver): those counts stay empty.
        self.counts = {"learned": 0, "unresolved_subjects": {}, "not_a_subject": {}, "unresolved_peers": {},
                       "flows_without_edge": {}, "excluded": 0, "external_subjects": 0, "reserved_subjects": {},
                       "unmanaged_peers": {}}

    def count(self, what, reason, n):
        self.counts[what][reason] = self.counts[what].get(reason, 0) + n

    def add(self, subject, direction, peer, proto, port, t_ns, n, dns):
        """One record's `n` flows, `subject` and `peer` resolved."""
        if subject[0] == "unresolved":
            self.count("unresolved_subjects", subject[1], n)
            return
        _, ns, kind, name, selector = subject
        if kind is None:
            self.count("unresolved_subjects", "no_owner_info", n)
            return
        if kind not in SUBJECT_KINDS:
            self.count("not_a_subject", kind, n)
            return
        entry = self.lists.setdefault((ns, kind, name, direction), {"selector": selector, "peers": {}})
        if peer[0] == "unresolved":
            self.count("unresolved_peers", peer[1], n)
            return
        if peer[0] == "world":
            self.count("unresolved_peers", "world_without_address", n)
            return
        if peer[0] == "pod":
            key = ("pods", peer[1], tuple(sorted(peer[4].items())))
        elif peer[0] == "external":
            key = ("ip", peer[1])
        else:
            key = peer
        ev = entry["peers"].setdefault(key, {}).setdefault((proto, port), {"first": t_ns, "last": t_ns, "count": 0,
                                                                           "dns": set()})
        ev["first"], ev["last"] = min(ev["first"], t_ns), max(ev["last"], t_ns)
        ev["count"] += n
        if dns:
            ev["dns"].add(dns)
        self.counts["learned"] += n

    def proposals(self):
        out = []
        for (ns, kind, name, direction), entry in sorted(self.lists.items()):
            if not entry["peers"]:
                continue
            rules, rows = [], []
            for peer, ports in sorted(entry["peers"].items()):
                pps = sorted(ports)
                if peer[0] == "pods":
                    sel = dict(peer[2])
                    np_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": peer[1]}},
                               "podSelector": {"matchLabels": sel}}
                    text = "pods:%s/%s" % (peer[1], ",".join("%s=%s" % kv for kv in peer[2]))
                elif peer[0] == "ip":
                    cidr = peer[1] + ("/128" if ":" in peer[1] else "/32")
                    np_peer, text = {"ipBlock": {"cidr": cidr}}, "ip:" + cidr
                else:
                    text = "principal:" + peer[1]
                if self.backend == "kubernetes":
                    rules.append({("from" if direction == "Ingress" else "to"): [np_peer],
                                  "ports": [{"port": p, "protocol": pr} for pr, p in pps]})
                else:
                    rules.append({"from": [{"source": {"principals": [peer[1]]}}],
                                  "to": [{"operation": {"ports": [str(p) for _, p in pps]}}]})
                for pp in pps:
                    ev = ports[pp]
                    row = {"peer": text, "protocol": pp[0], "port": pp[1], "firstSeen": stamp(ev["first"]),
                           "lastSeen": stamp(ev["last"]), "flowCount": ev["count"]}
                    if ev["dns"]:
                        row["dnsName"] = ",".join(sorted(ev["dns"]))
                    rows.append(row)
            out.append(proposal(self.backend, ns, kind, name, direction, entry["selector"], rules, rows))
        return out


def stamp(t_ns):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(BASE + t_ns // S))


def facts(provider, hubble_recs, ztunnel_lines, goldmane_recs):
    """(fact, flows) per record that makes an edge, and the counts of those that make none."""
    skips, out = {}, []
    if provider == "hubble":
        for rec, fact in hubble_recs:
            if fact:
                out.append((fact, 1))
            else:
                reason = "not_forwarded" if rec["flow"]["verdict"] != "FORWARDED" else "reply"
                skips[reason] = skips.get(reason, 0) + 1
    elif provider == "ztunnel":
        for _, fact in ztunnel_lines:
            if fact == "outbound":
                skips["direction_not_learned"] = skips.get("direction_not_learned", 0) + 1
            elif fact == "denied":
                skips["not_forwarded"] = skips.get("not_forwarded", 0) + 1
            elif fact[3] is None:
                skips["no_identity"] = skips.get("no_identity", 0) + 1
            else:
                out.append((fact, 1))
    else:
        out = [(fact, n) for _, fact, n in goldmane_recs]
    return out, skips


def learn(provider, h, recs):
    model = Model("istio" if provider == "ztunnel" else "kubernetes")
    found, skips = recs
    for (t, subject, direction, peer, proto, port, dns), n in found:
        s = resolve(h, ("pod", subject), t, provider, True)
        p = resolve(h, peer, t, provider, False)
        model.add(s, direction, p, proto, port, t, n, dns)
    model.counts["flows_without_edge"] = skips
    return model


def check(provider, policies, h, recs):
    """`check` of the flows under history `h` against the proposals learned with `policies`
    (a Model): violations by (policy, peer, port), unresolved peers by reason."""
    found, _ = recs
    violations, unresolved = {}, {}
    for (t, subject, direction, peer, proto, port, _), n in found:
        s = resolve(h, ("pod", subject), t, provider, True)
        if s[0] != "pod" or s[2] not in SUBJECT_KINDS:
            continue
        entry = policies.lists.get((s[1], s[2], s[3], direction))
        if entry is None or not entry["peers"]:
            continue
        p = resolve(h, peer, t, provider, False)
        if provider != "ztunnel" and p[0] == "unresolved":
            unresolved[p[1]] = unresolved.get(p[1], 0) + n
            continue
        allowed = False
        for key, ports in entry["peers"].items():
            if (proto, port) not in ports:
                continue
            if key[0] == "pods" and p[0] == "pod" and p[1] == key[1]:
                labels = resolved_labels(p, peer)
                allowed |= all(labels.get(k) == v for k, v in key[2])
            elif key[0] == "ip" and p[0] == "external":
                allowed |= key[1] == p[1]
            elif key[0] == "principal" and p[0] == "principal":
                allowed |= key[1] == p[1]
        if not allowed:
            name = "%s/%s-%s-%s" % (s[1], s[2].lower(), s[3], direction.lower())
            who = "reserved:world" if p[0] == "world" else p[1] if p[0] in ("external", "principal") else "%s/%s" % p[2:4]
            k = "%s %s %s/%d" % (name, who, proto, port)
            violations[k] = violations.get(k, 0) + n
    return {"violations": violations, "unresolved_peer_flows": unresolved}


def resolved_labels(p, peer):
    """The labels a selector is evaluated on: the pod's own when it is listed, else the
    record's (selectors of resolved owners are always the pod's template labels here)."""
    if peer[0] == "pod":
        return labels_of(peer[1])
    return dict(p[4])


# --- output -------------------------------------------------------------------------------
def write_yaml_docs(path, header, docs):
    with open(path, "w") as f:
        f.write(header)
        for d in docs:
            f.write("---\n" + to_yaml(d) + "\n")


def main():
    flows = os.path.join(HERE, "flows")
    expected = os.path.join(HERE, "expected")
    os.makedirs(flows, exist_ok=True)
    os.makedirs(expected, exist_ok=True)

    hubble_recs = hubble()
    with open(os.path.join(flows, "hubble.jsonl"), "w") as f:
        for rec, _ in hubble_recs:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    ztunnel_lines = ztunnel()
    with open(os.path.join(flows, "ztunnel.log"), "w") as f:
        for lines, _ in ztunnel_lines:
            f.write("".join(line + "\n" for line in lines))
    goldmane_recs = goldmane()
    with open(os.path.join(flows, "goldmane.jsonl"), "w") as f:
        for rec, _, _ in goldmane_recs:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")

    events, last = pod_events()
    start_pods = [pod_object(k, "running", str(1000)) for k in PODS if PODS[k][5] <= 0]
    for p in start_pods:
        p["metadata"]["resourceVersion"] = next(e["object"]["metadata"]["resourceVersion"] for e in events
                                                if e["object"]["metadata"]["uid"] == p["metadata"]["uid"])
    end_pods = [last[k] for k in PODS if PODS[k][6] is None or finishes(k)]
    header = ("# kubectl get namespaces,pods,replicasets,deployments,statefulsets,daemonsets,jobs,cronjobs "
              "-A -o yaml\n# at %s; written by examples/churn/generate.py\n")
    with open(os.path.join(HERE, "start.yaml"), "w") as f:
        f.write(header % kube_time(0) + to_yaml(snapshot(0, start_pods)) + "\n")
    with open(os.path.join(HERE, "end.yaml"), "w") as f:
        f.write(header % kube_time(END) + to_yaml(snapshot(END, end_pods)) + "\n")
    with open(os.path.join(HERE, "pods-watch.json"), "w") as f:
        for e in events:
            f.write(json.dumps(e, indent=4) + "\n")

    hist = histories()
    counts, checks = {}, {}
    for provider in ("hubble", "ztunnel", "goldmane"):
        recs = facts(provider, hubble_recs, ztunnel_lines, goldmane_recs)
        policies = learn(provider, hist["end-watch"], recs)
        for name, h in hist.items():
            model = learn(provider, h, recs)
            write_yaml_docs(os.path.join(expected, "%s-%s.yaml" % (provider, name)),
                            "# Written by examples/churn/generate.py from its own model; the test\n"
                            "# learn_churn compares `ne-leader learn` with it.\n", model.proposals())
            counts["%s-%s" % (provider, name)] = model.counts
            checks["%s-%s" % (provider, name)] = check(provider, policies, h, recs)
    with open(os.path.join(expected, "counts.json"), "w") as f:
        json.dump({"learn": counts, "check": checks}, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
