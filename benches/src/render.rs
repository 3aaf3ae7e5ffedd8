//! The format writers: one [`Event`] as a Hubble, ztunnel or Goldmane line, field for
//! field as in `examples/flows/*` (same key order, enum spellings and value forms). Every
//! generated string is plain ASCII without quotes or backslashes, so values are written
//! without JSON escaping.

use std::fmt::Write;

use ne_flow::time::format_rfc3339_nanos;

use super::{End, Event, Generator, Side, Workload};

/// A stable small hash for identity numbers and endpoint ids.
pub(crate) fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

pub(crate) fn ext_name(x: usize) -> String {
    format!("api-{x}.partner.example.com")
}

impl Generator {
    pub(crate) fn workload(&self, end: End) -> Option<(&Workload, &super::Pod)> {
        match end {
            End::Pod(w, r) => Some((&self.workloads[w], &self.workloads[w].pods[r])),
            End::External(_) => None,
        }
    }

    pub(super) fn hubble(&mut self, e: &Event, out: &mut String) {
        let time = format_rfc3339_nanos(e.time);
        let server_is_pod = matches!(e.conv.server, Side::Workload(_));
        // (source, destination, source is the local end, direction, point, reason)
        let (src, dst, local_src, direction, point, reason) = match (e.reply, e.at_server) {
            (true, _) if server_is_pod => (
                e.server,
                e.client,
                true,
                "INGRESS",
                "FROM_ENDPOINT",
                "REPLY",
            ),
            (true, _) => (e.server, e.client, false, "EGRESS", "TO_ENDPOINT", "REPLY"),
            (false, true) => (e.client, e.server, false, "INGRESS", "TO_ENDPOINT", "NEW"),
            (false, false) => (e.client, e.server, true, "EGRESS", "FROM_ENDPOINT", "NEW"),
        };
        let local = if local_src { src } else { dst };
        let node = self.workload(local).map_or(0, |(_, p)| p.node) + 1;
        let (sport, dport) = if e.reply {
            (e.conv.port, e.ephemeral)
        } else {
            (e.ephemeral, e.conv.port)
        };
        let r = [self.rng.next_u64(), self.rng.next_u64()];
        let _ = write!(
            out,
            r#"{{"flow":{{"time":"{time}","uuid":"{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}","verdict":"FORWARDED","ethernet":{{"source":"0a:58:0a:f4:{:02x}:{:02x}","destination":"0a:58:0a:f4:{:02x}:{:02x}"}},"IP":{{"source":"{}","destination":"{}","ipVersion":"IPv4"}},"l4":{{"{}":{{"source_port":{sport},"destination_port":{dport}"#,
            r[0] >> 32,
            r[0] >> 16 & 0xffff,
            r[0] & 0xfff,
            0x8000 | (r[1] >> 48 & 0x3fff),
            r[1] & 0xffff_ffff_ffff,
            r[1] >> 8 & 0xff,
            r[1] >> 16 & 0xff,
            r[1] >> 24 & 0xff,
            r[1] >> 32 & 0xff,
            self.ip(src),
            self.ip(dst),
            e.conv.protocol,
        );
        let tcp = e.conv.protocol == "TCP";
        match (tcp, e.reply) {
            (true, false) => out.push_str(r#","flags":{"SYN":true}}},"#),
            (true, true) => out.push_str(r#","flags":{"SYN":true,"ACK":true}}},"#),
            (false, _) => out.push_str("}},"),
        }
        out.push_str(r#""source":"#);
        self.hubble_endpoint(src, local_src, out);
        out.push_str(r#","destination":"#);
        self.hubble_endpoint(dst, !local_src, out);
        let _ = write!(
            out,
            r#","Type":"L3_L4","node_name":"default/worker-{node}""#
        );
        if let (false, Side::External(x)) = (e.reply, e.conv.server) {
            let _ = write!(out, r#","destination_names":["{}"]"#, ext_name(x));
        }
        if e.reply {
            out.push_str(r#","reply":true"#);
        }
        let summary = match (tcp, e.reply) {
            (true, false) => "TCP Flags: SYN",
            (true, true) => "TCP Flags: ACK, SYN",
            (false, _) => "UDP",
        };
        let _ = write!(
            out,
            r#","event_type":{{"type":4}},"traffic_direction":"{direction}","trace_observation_point":"{point}","trace_reason":"{reason}","is_reply":{},"Summary":"{summary}"}},"node_name":"default/worker-{node}","time":"{time}"}}"#,
            e.reply
        );
    }

    /// A Hubble endpoint; only the local end carries `ID` and `workloads`.
    fn hubble_endpoint(&self, end: End, local: bool, out: &mut String) {
        let Some((w, pod)) = self.workload(end) else {
            out.push_str(r#"{"identity":2,"labels":["reserved:world"]}"#);
            return;
        };
        out.push('{');
        if local {
            let _ = write!(out, r#""ID":{},"#, 1000 + fnv(&pod.name) % 3000);
        }
        let ns = &w.namespace;
        let _ = write!(
            out,
            r#""identity":{},"cluster_name":"default","namespace":"{ns}","labels":["k8s:app={o}","k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name={ns}","k8s:io.cilium.k8s.policy.cluster=default","k8s:io.cilium.k8s.policy.serviceaccount={o}","k8s:io.kubernetes.pod.namespace={ns}","k8s:tier={}"],"pod_name":"{}""#,
            20000 + fnv(&w.owner) % 40000,
            w.tier,
            pod.name,
            o = w.owner,
        );
        if local {
            let _ = write!(
                out,
                r#","workloads":[{{"name":"{}","kind":"{}"}}]"#,
                w.owner, w.kind
            );
        }
        out.push('}');
    }

    /// The fields of a ztunnel access line, as `(key, value, quoted)`.
    fn ztunnel_fields(&mut self, e: &Event) -> Vec<(&'static str, String, bool)> {
        let spiffe =
            |w: &Workload| format!("spiffe://cluster.local/ns/{}/sa/{}", w.namespace, w.owner);
        let mut f = vec![(
            "src.addr",
            format!("{}:{}", self.ip(e.client), e.ephemeral),
            false,
        )];
        if let Some((w, pod)) = self.workload(e.client) {
            f.push(("src.workload", pod.name.clone(), true));
            f.push(("src.namespace", w.namespace.clone(), true));
            f.push(("src.identity", spiffe(w), true));
        }
        let dst_ip = self.ip(e.server);
        match self.workload(e.server) {
            Some((w, pod)) => {
                f.push(("dst.addr", format!("{dst_ip}:15008"), false));
                f.push(("dst.hbone_addr", format!("{dst_ip}:{}", e.conv.port), false));
                let svc = format!("{}.{}.svc.cluster.local", w.owner, w.namespace);
                f.push(("dst.service", svc, true));
                f.push(("dst.workload", pod.name.clone(), true));
                f.push(("dst.namespace", w.namespace.clone(), true));
                f.push(("dst.identity", spiffe(w), true));
            }
            None => f.push(("dst.addr", format!("{dst_ip}:{}", e.conv.port), false)),
        }
        let direction = if e.at_server { "inbound" } else { "outbound" };
        f.push(("direction", direction.to_owned(), true));
        f.push(("bytes_sent", self.rng.below(9000).to_string(), false));
        f.push(("bytes_recv", self.rng.below(90_000).to_string(), false));
        f.push(("duration", format!("{}ms", 1 + self.rng.below(900)), true));
        f
    }

    /// ztunnel's own text format: microsecond time, TABs in the header, `k=v` fields.
    pub(super) fn ztunnel_text(&mut self, e: &Event, out: &mut String) {
        let time = format_rfc3339_nanos(e.time);
        let _ = write!(out, "{}Z\tinfo\taccess\tconnection complete\t", &time[..26]);
        for (i, (k, v, quoted)) in self.ztunnel_fields(e).into_iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            let q = if quoted { "\"" } else { "" };
            let _ = write!(out, "{sep}{k}={q}{v}{q}");
        }
    }

    /// `LOG_FORMAT=json`: the same fields, byte counts as numbers.
    pub(super) fn ztunnel_json(&mut self, e: &Event, out: &mut String) {
        let time = format_rfc3339_nanos(e.time);
        let _ = write!(
            out,
            r#"{{"level":"info","time":"{}Z","scope":"access","message":"connection complete""#,
            &time[..26]
        );
        for (k, v, quoted) in self.ztunnel_fields(e) {
            let numeric = k.starts_with("bytes_");
            let q = if quoted || !numeric { "\"" } else { "" };
            let _ = write!(out, r#","{k}":{q}{v}{q}"#);
        }
        out.push('}');
    }

    /// Calico's aggregated name, namespace, type and labels of one side.
    fn goldmane_side(&self, end: End) -> (String, String, &'static str, String) {
        let Some((w, _)) = self.workload(end) else {
            return ("pub".into(), "-".into(), "Network", String::new());
        };
        let (name, owner_labels) = match w.kind {
            "Deployment" => (
                format!("{}-{}-*", w.owner, w.hash),
                format!(r#""pod-template-hash={}","#, w.hash),
            ),
            "StatefulSet" => (
                format!("{}-*", w.owner),
                format!(r#""controller-revision-hash={}-{}","#, w.owner, w.hash),
            ),
            _ => (
                format!("{}-*", w.owner),
                format!(
                    r#""controller-revision-hash={}","pod-template-generation=1","#,
                    w.hash
                ),
            ),
        };
        let labels = format!(r#""app={}",{owner_labels}"tier={}""#, w.owner, w.tier);
        (name, w.namespace.clone(), "WorkloadEndpoint", labels)
    }

    /// A Goldmane `Flow` for the 15 s window holding the event, reported at one end.
    pub(super) fn goldmane(&mut self, e: &Event, out: &mut String) {
        let conns = 1 + self.rng.below(8);
        let packets = conns * (4 + self.rng.below(16));
        let packets_out = packets + self.rng.below(5);
        let bytes_in = packets * (60 + self.rng.below(840));
        let bytes_out = packets * (60 + self.rng.below(840));
        let (sname, sns, stype, slabels) = self.goldmane_side(e.client);
        let (dname, dns, dtype, dlabels) = self.goldmane_side(e.server);
        let (svc, svc_ns, svc_port_name, svc_port) = match self.workload(e.server) {
            Some((w, _)) => {
                let port_name = match e.conv.port {
                    53 => "dns",
                    5432 => "postgres",
                    6379 => "redis",
                    _ => "http",
                };
                (
                    w.owner.as_str(),
                    w.namespace.as_str(),
                    port_name,
                    e.conv.port,
                )
            }
            None => ("-", "-", "-", 0),
        };
        let (reporter, profile_ns) = if e.at_server {
            ("Dst", &dns)
        } else {
            ("Src", &sns)
        };
        let policy = format!(
            r#"[{{"kind":"Profile","name":"kns.{profile_ns}","tier":"__PROFILE__","action":"Allow"}}]"#
        );
        let start = e.time.0 / 1_000_000_000 / 15 * 15;
        let _ = write!(
            out,
            r#"{{"Key":{{"sourceName":"{sname}","sourceNamespace":"{sns}","sourceType":"{stype}","destName":"{dname}","destNamespace":"{dns}","destType":"{dtype}","destPort":"{port}","destServiceName":"{svc}","destServiceNamespace":"{svc_ns}","destServicePortName":"{svc_port_name}","destServicePort":"{svc_port}","proto":"{proto}","reporter":"{reporter}","action":"Allow","policies":{{"enforcedPolicies":{policy},"pendingPolicies":{policy}}}}},"startTime":"{start}","endTime":"{end}","sourceLabels":[{slabels}],"destLabels":[{dlabels}],"packetsIn":"{packets}","packetsOut":"{packets_out}","bytesIn":"{bytes_in}","bytesOut":"{bytes_out}","numConnectionsStarted":"{conns}","numConnectionsCompleted":"{conns}","numConnectionsLive":"0"}}"#,
            port = e.conv.port,
            proto = e.conv.protocol.to_ascii_lowercase(),
            end = start + 15,
        );
    }
}
