#!/usr/bin/env python3
"""Renders the network-enforcer chart with the real Helm engine, for tests/tests/chart.rs.

No helm binary is needed: `helm-python-sdk` (pinned in requirements.txt) embeds the Helm v4
SDK. For every case in CASES this writes `<out>/<case>/manifests.yaml` (what `helm template`
prints, one YAML stream with `# Source:` comments), `NOTES.txt` and `values.json`; every case
in REJECTED must fail values.schema.json or the templates, and its outcome goes to
`<out>/rejections.json`; `<out>/lint.json` holds `helm lint --strict` findings. The script
asserts nothing itself beyond "it ran": the Rust test reads these files and judges them.

    pip install -r charts/network-enforcer/tests/requirements.txt
    python3 charts/network-enforcer/tests/render.py --out target/chart-render
"""

import argparse
import json
import os
import sys

try:
    from helm_python import chart as helm_chart
except ImportError:  # pragma: no cover - the message is the point
    sys.exit(
        "helm_python is not installed: "
        "pip install -r charts/network-enforcer/tests/requirements.txt"
    )

CHART = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
RELEASE = "ne"
NAMESPACE = "network-enforcer"

EXTERNAL = {
    "collector": "external",
    "external": {"endpoint": "https://otel.example:4317", "tls": {"existingSecret": "otel-ca"}},
}

# Every provider with every collector strategy, then the variants that switch other paths on.
CASES = {}
for provider in ("cilium", "calico", "istio"):
    for collector in ("default", "external", "none"):
        telemetry = EXTERNAL if collector == "external" else {"collector": collector}
        CASES[f"{provider}-{collector}"] = {"provider": provider, "telemetry": telemetry}
CASES.update(
    {
        "cilium-relay-tls": {
            "provider": "cilium",
            "agent": {
                "hubble": {
                    "mode": "relay",
                    "relay": {
                        "address": "hubble-relay.kube-system.svc:443",
                        "tls": {
                            "existingSecret": "hubble-relay-client",
                            "clientCertificate": True,
                            "serverName": "ui.hubble-relay.cilium.io",
                        },
                    },
                }
            },
        },
        "cilium-relay-plain": {
            "provider": "cilium",
            "agent": {"hubble": {"mode": "relay", "relay": {"address": "hubble-relay.kube-system.svc:80"}}},
        },
        "calico-custom-tls": {
            "provider": "calico",
            "agent": {
                "goldmane": {
                    "tls": {
                        "secretName": "my-goldmane-client",
                        "caConfigMap": "my-goldmane-ca",
                        "caKey": "ca.crt",
                        "serverName": "goldmane.calico-system.svc",
                    }
                }
            },
        },
        "istio-external-mtls": {
            "provider": "istio",
            "telemetry": {
                "collector": "external",
                "external": {
                    "endpoint": "https://otel.example:4317",
                    "tls": {"existingSecret": "otel-client", "clientCertificate": True},
                },
            },
        },
        "cilium-external-http": {
            "provider": "cilium",
            "telemetry": {
                "collector": "external",
                "external": {"endpoint": "http://otel.example:4318", "protocol": "http/protobuf"},
            },
        },
        "cilium-default-tls": {
            "provider": "cilium",
            "telemetry": {"collector": "default", "defaultCollector": {"tls": {"existingSecret": "otel-tls"}}},
        },
        "istio-one-leader-no-admission": {
            "provider": "istio",
            "leader": {"replicas": 1},
            "admission": {"enabled": False},
            "learning": {"excludeNamespaces": ["kube-system", "istio-system"]},
        },
    }
)

# Values the chart must refuse: (case, values, a word the error must contain).
REJECTED = {
    "no-provider": ({}, "provider"),
    "unknown-provider": ({"provider": "flannel"}, "provider"),
    "unknown-top-level-key": ({"provider": "cilium", "replicas": 3}, "replicas"),
    "unknown-nested-key": ({"provider": "cilium", "agent": {"hubbel": {}}}, "hubbel"),
    "unknown-leader-key": ({"provider": "cilium", "leader": {"replica": 2}}, "replica"),
    "external-without-endpoint": ({"provider": "istio", "telemetry": {"collector": "external"}}, "endpoint"),
    "external-endpoint-not-a-url": (
        {"provider": "istio", "telemetry": {"collector": "external", "external": {"endpoint": "otel:4317"}}},
        "endpoint",
    ),
    "external-https-without-ca": (
        {"provider": "cilium", "telemetry": {"collector": "external", "external": {"endpoint": "https://otel.example:4317"}}},
        "existingSecret",
    ),
    "external-http-json-protocol": (
        {
            "provider": "istio",
            "telemetry": dict(
                EXTERNAL,
                external={"endpoint": "https://o:4318", "protocol": "http/json", "tls": {"existingSecret": "otel-ca"}},
            ),
        },
        "protocol",
    ),
    "unknown-collector-strategy": ({"provider": "calico", "telemetry": {"collector": "jaeger"}}, "collector"),
    "zero-leader-replicas": ({"provider": "cilium", "leader": {"replicas": 0}}, "replicas"),
    "replicas-not-a-number": ({"provider": "cilium", "leader": {"replicas": "two"}}, "replicas"),
    "bad-hubble-mode": ({"provider": "cilium", "agent": {"hubble": {"mode": "grpc"}}}, "mode"),
    "bad-log-format": ({"provider": "cilium", "agent": {"logFormat": "xml"}}, "logFormat"),
    "bad-flush-interval": ({"provider": "cilium", "agent": {"flushInterval": "soon"}}, "flushInterval"),
    "bad-exclude-namespace": ({"provider": "cilium", "learning": {"excludeNamespaces": ["Kube_System"]}}, "excludeNamespaces"),
    "relative-socket-dir": ({"provider": "cilium", "agent": {"hubble": {"socketDir": "run/cilium"}}}, "socketDir"),
    "goldmane-address-without-port": ({"provider": "calico", "agent": {"goldmane": {"address": "goldmane"}}}, "address"),
    "empty-goldmane-secret": ({"provider": "calico", "agent": {"goldmane": {"tls": {"secretName": ""}}}}, "secretName"),
}


def render(chart, values):
    """`helm template`: one stream of every template but NOTES.txt, in path order."""
    out = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    notes = ""
    docs = []
    for path in sorted(out):
        text = out[path]
        if path.endswith("NOTES.txt"):
            notes = text
        elif text.strip():
            docs.append(f"---\n# Source: {path}\n{text.strip()}\n")
    return "".join(docs), notes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write the renders to")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    chart = helm_chart.Chart.load(CHART)

    for case, values in CASES.items():
        manifests, notes = render(chart, values)
        case_dir = os.path.join(args.out, case)
        os.makedirs(case_dir, exist_ok=True)
        for name, text in (("manifests.yaml", manifests), ("NOTES.txt", notes), ("values.json", json.dumps(values, indent=2))):
            with open(os.path.join(case_dir, name), "w", encoding="utf-8") as f:
                f.write(text)

    rejections = {}
    for case, (values, word) in REJECTED.items():
        try:
            render(chart, values)
            rejections[case] = {"rejected": False, "error": "", "expect": word}
        except Exception as e:  # HelmValuesError, HelmRenderError
            rejections[case] = {"rejected": True, "error": f"{type(e).__name__}: {e}", "expect": word}
    with open(os.path.join(args.out, "rejections.json"), "w", encoding="utf-8") as f:
        json.dump(rejections, f, indent=2)

    lint = {}
    for provider in ("cilium", "calico", "istio"):
        lint[provider] = helm_chart.lint(CHART, {"provider": provider}, strict=True, namespace=NAMESPACE)
    with open(os.path.join(args.out, "lint.json"), "w", encoding="utf-8") as f:
        json.dump(lint, f, indent=2)
    print(f"rendered {len(CASES)} cases, {len(REJECTED)} rejections checked, into {args.out}")


if __name__ == "__main__":
    main()
