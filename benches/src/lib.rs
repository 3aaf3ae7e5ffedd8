//! Bench inputs: a seeded generator of realistic flow lines in every format the agent
//! reads, so that the criterion benches (`benches/`) measure decoders and the
//! decode → edge → [`ne_flow::table::FlowTable`] pipeline on data shaped like real
//! captures (the bundled `examples/flows/*`, which mirror `testdata/real/`).
//!
//! The generator invents a cluster ([`Config`]: namespaces, workloads, peers per workload,
//! external peers), turns it into a list of conversations (client, server, protocol,
//! port), and draws each line's conversation from a Zipf-like distribution so that a few
//! keys are hot, as on a real node. Every line is one observation of a conversation
//! (request at the client or the server, or, for Hubble, a reply) rendered in one
//! [`Shape`]. No `rand` crate: a splitmix64 generator, so the same seed gives the same
//! bytes.

use std::fmt::Write;
use std::net::Ipv4Addr;

use ne_dataplanes::Format;
use ne_flow::flow::Timestamp;
use ne_flow::time::format_rfc3339_nanos;

/// The size and shape of the invented cluster and of the key distribution.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Seed of every random choice: equal configs give equal bytes.
    pub seed: u64,
    /// Namespaces the workloads are spread over (at least 1).
    pub namespaces: usize,
    /// Workloads (Deployments, StatefulSets, DaemonSets; at least 2). Workload 0 is
    /// CoreDNS, which every client also talks to over UDP/53 when it has several peers.
    pub workloads: usize,
    /// Conversations each workload starts as a client (at least 1).
    pub peers_per_workload: usize,
    /// Distinct addresses outside the cluster; about one conversation in eight has one
    /// (outgoing to `:443` with a DNS name, or incoming from it). 0 disables them.
    pub external_peers: usize,
    /// Zipf exponent `s`: conversation of rank `r` is drawn with weight `1 / (r + 1)^s`.
    /// 0 is uniform; 1 makes the top 1 % of conversations carry roughly a third of lines.
    pub zipf_exponent: f64,
}

impl Default for Config {
    /// A mid-size cluster: 8 namespaces, 200 workloads, 4 peers each, 50 external peers,
    /// Zipf exponent 1.0.
    fn default() -> Self {
        Config {
            seed: 0x5eed_f10e,
            namespaces: 8,
            workloads: 200,
            peers_per_workload: 4,
            external_peers: 50,
            zipf_exponent: 1.0,
        }
    }
}

/// The line formats the generator writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// Hubble `GetFlowsResponse` JSON (`{"flow":{…},"node_name":…,"time":…}`).
    HubbleJson,
    /// ztunnel text access lines, TAB-separated header, unframed.
    ZtunnelText,
    /// The same ztunnel text lines in CRI framing (`<time> stdout F <line>`).
    ZtunnelTextCri,
    /// ztunnel `LOG_FORMAT=json` access lines.
    ZtunnelJson,
    /// Calico Goldmane `Flow` as protojson (`{"Key":{…},"startTime":"…",…}`).
    GoldmaneJson,
}

impl Shape {
    /// Every shape, in a stable order.
    pub const ALL: [Shape; 5] = [
        Shape::HubbleJson,
        Shape::ZtunnelText,
        Shape::ZtunnelTextCri,
        Shape::ZtunnelJson,
        Shape::GoldmaneJson,
    ];

    /// The decoder format that reads this shape.
    pub fn format(self) -> Format {
        match self {
            Shape::HubbleJson => Format::HubbleJson,
            Shape::ZtunnelText | Shape::ZtunnelTextCri | Shape::ZtunnelJson => Format::Ztunnel,
            Shape::GoldmaneJson => Format::GoldmaneJson,
        }
    }

    /// A short name for bench ids.
    pub fn name(self) -> &'static str {
        match self {
            Shape::HubbleJson => "hubble_json",
            Shape::ZtunnelText => "ztunnel_text",
            Shape::ZtunnelTextCri => "ztunnel_text_cri",
            Shape::ZtunnelJson => "ztunnel_json",
            Shape::GoldmaneJson => "goldmane_json",
        }
    }

    fn is_ztunnel(self) -> bool {
        self.format() == Format::Ztunnel
    }
}

/// `lines` newline-terminated lines of `shape` from a fresh [`Generator`].
pub fn generate(config: &Config, shape: Shape, lines: usize) -> Vec<u8> {
    let mut g = Generator::new(config);
    let mut out = String::with_capacity(lines * 1024);
    for _ in 0..lines {
        g.line(shape, &mut out);
    }
    out.into_bytes()
}

/// splitmix64: a tiny, well-mixed deterministic generator.
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant at bench sizes).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One pod of a workload.
#[derive(Clone, Debug)]
struct Pod {
    name: String,
    ip: Ipv4Addr,
    node: usize,
}

#[derive(Clone, Debug)]
struct Workload {
    namespace: String,
    kind: &'static str,
    owner: String,
    /// `pod-template-hash` (Deployment) or `controller-revision-hash` (others).
    hash: String,
    tier: &'static str,
    pods: Vec<Pod>,
    protocol: &'static str,
    port: u16,
}

/// One side of a conversation.
#[derive(Clone, Copy, Debug)]
enum Side {
    Workload(usize),
    External(usize),
}

#[derive(Clone, Copy, Debug)]
struct Conversation {
    client: Side,
    server: Side,
    protocol: &'static str,
    port: u16,
}

/// Writes lines of any [`Shape`] for one invented cluster; see the crate docs.
#[derive(Debug)]
pub struct Generator {
    rng: SplitMix,
    workloads: Vec<Workload>,
    conversations: Vec<Conversation>,
    /// Cumulative Zipf weights, one per conversation (by rank).
    cdf: Vec<f64>,
    /// Nanoseconds since the epoch of the next line.
    clock: i64,
}

const NAMESPACES: [&str; 8] = [
    "shop",
    "data",
    "payments",
    "identity",
    "search",
    "media",
    "monitoring",
    "batch",
];
const APPS: [&str; 16] = [
    "web",
    "api",
    "postgres",
    "redis",
    "checkout",
    "cart",
    "catalog",
    "search",
    "auth",
    "gateway",
    "worker",
    "scheduler",
    "log-store",
    "log-shipper",
    "kafka",
    "notifier",
];
const TIERS: [&str; 3] = ["frontend", "backend", "data"];
const PORTS: [u16; 6] = [8080, 5432, 3100, 8443, 6379, 9090];
/// 2025-12-01T10:00:00Z, the bundled example's start.
const BASE_NANOS: i64 = 1_764_583_200 * 1_000_000_000;
const HASH_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `len` characters of a Kubernetes-style hash derived from `n`.
fn k8s_hash(mut n: u64, len: usize) -> String {
    (0..len)
        .map(|_| {
            let c = HASH_CHARS[(n % HASH_CHARS.len() as u64) as usize];
            n = (n / HASH_CHARS.len() as u64) ^ n.rotate_left(17);
            c as char
        })
        .collect()
}

fn cycled(names: &[&str], i: usize) -> String {
    match i / names.len() {
        0 => names[i % names.len()].to_owned(),
        round => format!("{}-{round}", names[i % names.len()]),
    }
}

impl Generator {
    /// The cluster and conversations of `config`, with the clock at the example's start.
    pub fn new(config: &Config) -> Self {
        let mut rng = SplitMix::new(config.seed);
        let nodes = 3 + config.workloads / 50;
        let mut next_ip = 0x0af4_0002u32; // 10.244.0.2
        let workloads: Vec<Workload> = (0..config.workloads.max(2))
            .map(|i| {
                let dns = i == 0;
                let (kind, replicas) = match i % 10 {
                    _ if dns => ("Deployment", 2),
                    7 | 8 => ("StatefulSet", 1 + i % 2),
                    9 => ("DaemonSet", nodes),
                    _ => ("Deployment", 2),
                };
                let owner = if dns {
                    "coredns".to_owned()
                } else {
                    cycled(&APPS, i - 1)
                };
                let hash = k8s_hash(rng.next_u64(), if kind == "Deployment" { 10 } else { 9 });
                let pods = (0..replicas)
                    .map(|r| {
                        next_ip = next_ip.wrapping_add(1);
                        let name = match kind {
                            "StatefulSet" => format!("{owner}-{r}"),
                            "DaemonSet" => format!("{owner}-{}", k8s_hash(rng.next_u64(), 5)),
                            _ => format!("{owner}-{hash}-{}", k8s_hash(rng.next_u64(), 5)),
                        };
                        let node = if kind == "DaemonSet" {
                            r
                        } else {
                            rng.below(nodes)
                        };
                        Pod {
                            name,
                            ip: Ipv4Addr::from(next_ip),
                            node,
                        }
                    })
                    .collect();
                Workload {
                    namespace: if dns {
                        "kube-system".to_owned()
                    } else {
                        cycled(&NAMESPACES, i % config.namespaces.max(1))
                    },
                    kind,
                    owner,
                    hash,
                    tier: TIERS[i % TIERS.len()],
                    pods,
                    protocol: if dns { "UDP" } else { "TCP" },
                    port: if dns { 53 } else { PORTS[i % PORTS.len()] },
                }
            })
            .collect();
        let mut conversations = Vec::new();
        let peers = config.peers_per_workload.max(1);
        for client in 1..workloads.len() {
            for p in 0..peers {
                let external = config.external_peers > 0 && rng.below(8) == 0;
                // The first peer is DNS, unless it is the only one (ztunnel needs TCP).
                let c = if p == 0 && peers > 1 {
                    Conversation {
                        client: Side::Workload(client),
                        server: Side::Workload(0),
                        protocol: "UDP",
                        port: 53,
                    }
                } else if external && rng.below(2) == 0 {
                    Conversation {
                        client: Side::Workload(client),
                        server: Side::External(rng.below(config.external_peers)),
                        protocol: "TCP",
                        port: 443,
                    }
                } else if external {
                    Conversation {
                        client: Side::External(rng.below(config.external_peers)),
                        server: Side::Workload(client),
                        protocol: "TCP",
                        port: workloads[client].port,
                    }
                } else {
                    let server =
                        1 + (client + rng.below(workloads.len() - 2)) % (workloads.len() - 1);
                    Conversation {
                        client: Side::Workload(client),
                        server: Side::Workload(server),
                        protocol: workloads[server].protocol,
                        port: workloads[server].port,
                    }
                };
                conversations.push(c);
            }
        }
        // Shuffle so that the hot ranks land on random conversations.
        for i in (1..conversations.len()).rev() {
            conversations.swap(i, rng.below(i + 1));
        }
        let mut total = 0.0;
        let cdf = (0..conversations.len())
            .map(|r| {
                total += 1.0 / ((r + 1) as f64).powf(config.zipf_exponent);
                total
            })
            .collect();
        Generator {
            rng,
            workloads,
            conversations,
            cdf,
            clock: BASE_NANOS,
        }
    }

    /// How many conversations lines are drawn from.
    pub fn conversations(&self) -> usize {
        self.conversations.len()
    }

    /// The Zipf rank of the next line's conversation.
    fn pick(&mut self) -> usize {
        let total = self.cdf.last().copied().unwrap_or(0.0);
        let u = self.rng.unit() * total;
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.conversations.len() - 1)
    }

    /// Appends one line of `shape` (with its `\n`) to `out`.
    pub fn line(&mut self, shape: Shape, out: &mut String) {
        self.clock += 100_000 + self.rng.below(5_000_000) as i64;
        let e = self.event(shape.is_ztunnel(), shape == Shape::HubbleJson);
        match shape {
            Shape::HubbleJson => self.hubble(&e, out),
            Shape::ZtunnelText => self.ztunnel_text(&e, out),
            Shape::ZtunnelTextCri => {
                let cri_time = Timestamp(e.time.0 + 41_000);
                let _ = write!(out, "{} stdout F ", format_rfc3339_nanos(cri_time));
                self.ztunnel_text(&e, out);
            }
            Shape::ZtunnelJson => self.ztunnel_json(&e, out),
            Shape::GoldmaneJson => self.goldmane(&e, out),
        }
        out.push('\n');
    }

    /// Draws the next observation at the generator's clock: TCP only for ztunnel (DNS
    /// over UDP never reaches it), a reply one time in three when `replies`.
    fn event(&mut self, tcp_only: bool, replies: bool) -> Event {
        let conv = loop {
            let rank = self.pick();
            let c = self.conversations[rank];
            if !(tcp_only && c.protocol != "TCP") {
                break c;
            }
        };
        let client = self.pod(conv.client);
        let server = self.pod(conv.server);
        // Observed where a pod is: at the server when the client is external, at the
        // client when the server is, else either. Hubble also sees replies.
        let at_server = match (conv.client, conv.server) {
            (Side::External(_), _) => true,
            (_, Side::External(_)) => false,
            _ => self.rng.below(2) == 0,
        };
        let reply = replies && self.rng.below(3) == 0;
        Event {
            conv,
            client,
            server,
            at_server,
            reply,
            ephemeral: 32768 + self.rng.below(28_232) as u16,
            time: Timestamp(self.clock),
        }
    }

    /// The pod (workload, replica) or external address index of one side.
    fn pod(&mut self, side: Side) -> End {
        match side {
            Side::Workload(w) => End::Pod(w, self.rng.below(self.workloads[w].pods.len())),
            Side::External(x) => End::External(x),
        }
    }

    fn ip(&self, end: End) -> Ipv4Addr {
        match end {
            End::Pod(w, r) => self.workloads[w].pods[r].ip,
            // Spread over 52.0.0.0/8, well away from the pod range.
            End::External(x) => {
                Ipv4Addr::from(0x3400_0000 + (x as u32).wrapping_mul(7919) % 0xff_ffff)
            }
        }
    }
}

/// A concrete endpoint of one line.
#[derive(Clone, Copy, Debug)]
enum End {
    Pod(usize, usize),
    External(usize),
}

/// One observation, rendered by the format writers in `render`.
#[derive(Debug)]
struct Event {
    conv: Conversation,
    client: End,
    server: End,
    /// Observed at the server's node (else the client's).
    at_server: bool,
    /// A Hubble reply packet (server → client).
    reply: bool,
    ephemeral: u16,
    time: Timestamp,
}

pub mod alloc;
pub mod cluster;
pub mod edges;
mod pb;
mod render;
pub mod round;
pub mod ship;

#[cfg(test)]
mod tests;
