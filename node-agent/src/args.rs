//! The command line of `ne-agent` (docs/architecture.md, "Command lines": these names are a
//! contract). Every flag can also be set by the environment variable shown in `--help`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ne_telemetry::tls::TlsFiles;

/// Where the agent reads flows from (one per process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SourceKind {
    /// Cilium Hubble's `observer.Observer/GetFlows` stream (the node's socket, or Relay).
    Hubble,
    /// Istio ambient ztunnel access logs in the node's pod log directory.
    Ztunnel,
    /// Calico Goldmane's `goldmane.Flows/Stream` (cluster-wide: run one replica).
    Goldmane,
    /// A capture file, in any format `ne-leader learn` reads.
    File,
}

impl SourceKind {
    /// The `source` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Hubble => "hubble",
            SourceKind::Ztunnel => "ztunnel",
            SourceKind::Goldmane => "goldmane",
            SourceKind::File => "file",
        }
    }
}

/// Network Enforcer node agent: reads this node's flows from the data plane and
/// pre-aggregates them into edges, exposing what it sees on /metrics.
#[derive(Debug, Parser)]
#[command(name = "ne-agent", version)]
pub struct Args {
    /// Flow source.
    #[arg(long, env = "NE_SOURCE", value_enum)]
    pub source: SourceKind,

    /// This node's name (from the downward API); filters Relay's stream to this node.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// Hubble server: `unix:///path` (the node's own socket) or `host:port` (Relay).
    #[arg(
        long,
        env = "NE_HUBBLE_ADDRESS",
        default_value = "unix:///var/run/cilium/hubble.sock"
    )]
    pub hubble_address: String,
    #[command(flatten)]
    pub hubble_tls: HubbleTls,

    /// Root of the node's pod logs, searched for ztunnel's `istio-proxy` container logs.
    #[arg(long, env = "NE_ZTUNNEL_LOG_ROOT", default_value = "/var/log/pods")]
    pub ztunnel_log_root: PathBuf,
    /// ztunnel's pods are those whose name starts with this.
    #[arg(long, env = "NE_ZTUNNEL_POD_PREFIX", default_value = "ztunnel")]
    pub ztunnel_pod_prefix: String,
    /// Only ztunnel pods of this namespace (default: any namespace).
    #[arg(long, env = "NE_ZTUNNEL_NAMESPACE")]
    pub ztunnel_namespace: Option<String>,
    /// How often the ztunnel logs are polled for new lines.
    #[arg(long, env = "NE_ZTUNNEL_POLL_INTERVAL", default_value = "250ms", value_parser = parse_duration)]
    pub ztunnel_poll_interval: Duration,

    /// Goldmane server `host:port` (mTLS is mandatory).
    #[arg(
        long,
        env = "NE_GOLDMANE_ADDRESS",
        default_value = "goldmane.calico-system.svc:7443"
    )]
    pub goldmane_address: String,
    #[command(flatten)]
    pub goldmane_tls: GoldmaneTls,

    /// Capture file for `--source file`.
    #[arg(long, env = "NE_FILE", required_if_eq("source", "file"))]
    pub file: Option<PathBuf>,
    /// Format of `--file`: auto, hubble-json, ztunnel, goldmane-json or calico-flowlog
    /// (`auto` detects it from the first lines).
    #[arg(
        long,
        env = "NE_FILE_FORMAT",
        value_name = "FORMAT",
        default_value = "auto"
    )]
    pub file_format: String,
    /// Keep reading `--file` as it grows, like `tail -f`.
    #[arg(long, env = "NE_FILE_FOLLOW")]
    pub follow: bool,

    /// Leader address(es) `HOST:PORT[,HOST:PORT...]`, tried in turn; a standby answers
    /// UNAVAILABLE and the next one is tried. Without it the agent ships nothing (Lease
    /// discovery is not built yet).
    #[arg(long, env = "NE_LEADER_ADDRESS", value_delimiter = ',')]
    pub leader_address: Vec<String>,
    /// A ServiceAccount token file sent to the leader as a bearer token (read at every
    /// connect), e.g. a projected token with audience `network-enforcer`.
    #[arg(long, env = "NE_LEADER_TOKEN_FILE", value_name = "FILE")]
    pub leader_token_file: Option<PathBuf>,
    /// This agent's id at the leader (default: the node name, else the host name).
    #[arg(long, env = "NE_AGENT_ID")]
    pub agent_id: Option<String>,
    /// Batches sent and not yet acknowledged before shipping pauses (the FlowTable keeps
    /// aggregating meanwhile).
    #[arg(long, env = "NE_MAX_UNACKED", default_value_t = 64)]
    pub max_unacked: usize,
    /// Bytes of batches sent and not yet acknowledged before shipping pauses: with
    /// `--max-edges`, what bounds the agent's memory when the leader is slow.
    #[arg(long, env = "NE_MAX_UNACKED_BYTES", default_value_t = 8 << 20)]
    pub max_unacked_bytes: usize,
    /// Largest batch message sent to the leader, in bytes.
    #[arg(long, env = "NE_MAX_MESSAGE_BYTES", default_value_t = 1 << 20)]
    pub max_message_bytes: usize,
    /// Edges neither updated for this long nor waiting for an ack are forgotten.
    #[arg(long, env = "NE_IDLE_EXPIRY", default_value = "1h", value_parser = parse_duration)]
    pub idle_expiry: Duration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, env = "NE_METRICS_ADDRESS", default_value = "0.0.0.0:9090")]
    pub metrics_address: SocketAddr,
    /// How often changed edges are shipped and gauges refreshed.
    #[arg(long, env = "NE_FLUSH_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub flush_interval: Duration,
    /// Most edges the FlowTable holds; new edges beyond it are dropped and counted.
    #[arg(long, env = "NE_MAX_EDGES", default_value_t = 1_000_000)]
    pub max_edges: usize,
    /// Log format.
    #[arg(long, env = "NE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Writes the client TLS flags of one gRPC source as a `clap::Args` struct: `--<source>-tls-ca`,
/// `--<source>-tls-cert`, `--<source>-tls-key` and `--<source>-tls-server-name` (ids
/// `<source>_tls_*`, env `<ENV>_TLS_*`), each field's doc comment its help. `cert requires
/// key` makes either file need the other at parse time.
///
/// One definition serves every source: clap's derive cannot flatten one struct twice (its
/// argument ids and flags would clash) and has no prefix for a flattened struct, so this
/// macro writes the struct per source; only the names, the help texts and the `requires`
/// differ.
macro_rules! source_tls {
    (
        $(#[$doc:meta])*
        pub struct $name:ident {
            flags: $flag:literal,
            env: $env:literal,
            $(#[$ca:meta])*
            ca,
            $(#[$cert:meta])*
            cert $(requires $cert_requires:ident)?,
            $(#[$key:meta])*
            key $(requires $key_requires:ident)?,
            $(#[$server_name:meta])*
            server_name $(,)?
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, clap::Args)]
        pub struct $name {
            $(#[$ca])*
            #[arg(
                id = concat!($flag, "_tls_ca"),
                value_name = "FILE",
                long = concat!($flag, "-tls-ca"),
                env = concat!($env, "_TLS_CA")
            )]
            pub ca: Option<PathBuf>,
            $(#[$cert])*
            #[arg(
                id = concat!($flag, "_tls_cert"),
                value_name = "FILE",
                long = concat!($flag, "-tls-cert"),
                env = concat!($env, "_TLS_CERT")
                $(, requires = concat!($flag, "_tls_", stringify!($cert_requires)))?
            )]
            pub cert: Option<PathBuf>,
            $(#[$key])*
            #[arg(
                id = concat!($flag, "_tls_key"),
                value_name = "FILE",
                long = concat!($flag, "-tls-key"),
                env = concat!($env, "_TLS_KEY")
                $(, requires = concat!($flag, "_tls_", stringify!($key_requires)))?
            )]
            pub key: Option<PathBuf>,
            $(#[$server_name])*
            #[arg(
                id = concat!($flag, "_tls_server_name"),
                value_name = "NAME",
                long = concat!($flag, "-tls-server-name"),
                env = concat!($env, "_TLS_SERVER_NAME")
            )]
            pub server_name: Option<String>,
        }

        impl $name {
            /// The files as the source's TLS set-up takes them.
            pub fn files(&self) -> TlsFiles {
                TlsFiles {
                    ca: self.ca.clone(),
                    cert: self.cert.clone(),
                    key: self.key.clone(),
                    server_name: self.server_name.clone(),
                }
            }
        }
    };
}

source_tls! {
    /// TLS for a Hubble Relay address (the node's unix socket needs none).
    pub struct HubbleTls {
        flags: "hubble",
        env: "NE_HUBBLE",
        /// CA bundle (PEM) to verify Relay's certificate; enables TLS.
        ca,
        /// Client certificate (PEM) for mTLS.
        cert requires key,
        /// Client key (PEM) for mTLS.
        key requires cert,
        /// Server name to verify instead of the address's host (e.g. `ui.hubble-relay.cilium.io`).
        server_name,
    }
}

source_tls! {
    /// mTLS material for Goldmane.
    pub struct GoldmaneTls {
        flags: "goldmane",
        env: "NE_GOLDMANE",
        /// CA bundle (PEM) that signed Goldmane's certificate.
        ca,
        /// Client certificate (PEM) signed by the operator's CA.
        cert,
        /// Client key (PEM).
        key,
        /// Server name to verify (default: the address's host).
        server_name,
    }
}

/// Log output format (one definition for both binaries, in ne-telemetry).
pub use ne_telemetry::runtime::LogFormat;

pub use ne_flow::time::parse_duration;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn every_flag_has_an_env_var() {
        use clap::CommandFactory;
        let cmd = Args::command();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            assert!(
                arg.get_env().is_some(),
                "--{id} has no environment variable"
            );
        }
    }

    #[test]
    fn file_source_needs_a_file() {
        assert!(Args::try_parse_from(["ne-agent", "--source", "file"]).is_err());
        let a =
            Args::try_parse_from(["ne-agent", "--source", "file", "--file", "x.jsonl"]).unwrap();
        assert_eq!(a.file.as_deref(), Some(std::path::Path::new("x.jsonl")));
        assert_eq!(a.metrics_address.port(), 9090);
    }
}
