//! Failover with real leader processes: two `ne-leader run` processes and an agent (the
//! agent's own file source and shipper, in this process) streaming to both addresses. The
//! first leader is killed (SIGKILL) mid-stream; the agent moves to the second, which gets
//! a snapshot; the survivor's proposals must equal offline `learn` on everything the agent
//! recorded: nothing lost, nothing counted twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ne_flow::edge::Provider;
use ne_flow::table::FlowTable;
use ne_leader::cli::{InputArgs, InputFormat, LearnArgs, SummaryFormat};
use ne_leader::offline::learn::learn;
use ne_leader::output::write_proposals;
use ne_node_agent::metrics::AgentMetrics;
use ne_node_agent::ship::{self, ShipConfig};
use ne_node_agent::sink::FlowSink;
use ne_node_agent::sources::SourceState;
use ne_node_agent::sources::file::{self, FileSource};

fn capture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/hubble.jsonl")
}

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ne-failover-{}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One `ne-leader run` process writing its proposals to `output`.
struct Leader {
    child: Child,
    address: String,
    output: PathBuf,
}

impl Leader {
    fn start(name: &str) -> Leader {
        // A free port: bound, read, released (the leader binds it right after).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let output = temp_dir(name);
        let child = Command::new(env!("CARGO_BIN_EXE_ne-leader"))
            .args([
                "run",
                "--provider",
                "cilium",
                "--standalone",
                "--insecure-ingest",
            ])
            .args(["--ingest-address", &address, "--flush-interval", "50ms"])
            .args(["--metrics-address", "127.0.0.1:0"])
            .arg("--output")
            .arg(&output)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&address).is_err() {
            assert!(Instant::now() < deadline, "{name} never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Leader {
            child,
            address,
            output,
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.output);
    }
}

/// A directory's files and their contents.
fn files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    (e.file_name().to_string_lossy().into_owned(), text)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What offline `learn` writes for `inputs`.
fn learned(inputs: Vec<PathBuf>, what: &str) -> BTreeMap<String, String> {
    let args = LearnArgs {
        input: InputArgs {
            input: inputs,
            cluster: Vec::new(),
            format: InputFormat::Auto,
            strict: false,
        },
        output: "-".to_owned(),
        exclude_namespaces: vec!["kube-system".to_owned()],
        summary: SummaryFormat::Table,
    };
    let dir = temp_dir(what);
    write_proposals(&learn(&args).unwrap().proposals, dir.to_str().unwrap()).unwrap();
    let out = files(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.is_empty());
    out
}

/// Waits (polling, 30 s at most) until `leader` has written exactly `want`.
fn converges(leader: &Leader, want: &BTreeMap<String, String>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = files(&leader.output);
        if &got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn replay(sink: &FlowSink) {
    let path = capture();
    let source = FileSource {
        path: &path,
        format: file::format_of(&path, "auto").unwrap(),
        follow: false,
        poll: Duration::from_millis(10),
    };
    file::run(&source, sink, &SourceState::default()).unwrap();
}

#[test]
fn killing_the_leader_process_loses_nothing() {
    let once = learned(vec![capture()], "once");
    let twice = learned(vec![capture(), capture()], "twice");
    let (mut a, b) = (Leader::start("a"), Leader::start("b"));

    let table = Arc::new(FlowTable::new(1 << 12));
    let metrics = Arc::new(AgentMetrics::default());
    let sink = FlowSink::new(table.clone(), metrics.clone(), Provider::Cilium, "file");
    replay(&sink);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let state = SourceState::default();
    let config = ShipConfig {
        addresses: vec![a.address.clone(), b.address.clone()],
        node: "worker-1".into(),
        agent_id: "worker-1".into(),
        epoch: 1,
        provider: Provider::Cilium,
        flush_interval: Duration::from_millis(20),
        max_message_bytes: 1 << 20,
        max_unacked: 8,
        max_unacked_bytes: 8 << 20,
        idle_expiry: Duration::from_secs(3600),
        token_file: None,
    };
    let shipper = runtime.spawn(ship::run(config, table, metrics.clone(), state.clone()));

    converges(&a, &once, "leader A, before the failover");
    assert!(files(&b.output).is_empty(), "B got nothing yet");

    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // The same flows again: every count doubles, at the survivor only.
    replay(&sink);
    converges(&b, &twice, "leader B, after the failover");
    assert!(metrics.ship_snapshots.get() >= 2);

    state.shut_down();
    runtime.block_on(shipper).unwrap();
}
