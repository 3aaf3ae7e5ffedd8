//! The harness itself: starts the Hubble servers (in this process) and the child
//! processes, measures a window after a warm-up, and returns what it measured (which
//! `main.rs` prints with [`crate::report`]).
//!
//! Per mode: warm-up (streams connect, agents send their snapshots), then `mark` (latency
//! recording starts) and a reading of every process's CPU time and every counter, the
//! window, a second reading, and `stop` (final reports with the latencies). Rates and CPU
//! are differences between the two readings, so start-up costs are left out.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command as Process, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ne_benches::Config;

use crate::control::Report;
use crate::hubble::{LoadHubble, Stream};
use crate::procfs::{self, ProcSample};
use crate::roles::RoleArgs;

/// Which designs to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Agents pre-aggregate and ship deltas to the leader.
    Agents,
    /// Every raw flow goes to one central process.
    Central,
    /// Both, one after the other, and their ratios.
    Both,
    /// `--agents` simulated agents (the agent's shipper over synthetic tables, in
    /// `--fleet-processes` processes) into one leader: a cluster larger than the machine.
    Fleet,
}

/// The harness's options (the defaults finish in under a minute).
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Node agents (one Hubble server each).
    #[arg(long, default_value_t = 4)]
    pub agents: usize,
    /// Flows per second per agent; 0 sends as fast as the readers take them.
    #[arg(long, default_value_t = 5000.0)]
    pub rate: f64,
    /// New edges per second per agent (flows to a never-seen external peer), within the rate.
    #[arg(long, default_value_t = 10.0)]
    pub churn: f64,
    /// Measured window per mode.
    #[arg(long, default_value = "20s", value_parser = ne_flow::time::parse_duration)]
    pub duration: Duration,
    /// Warm-up before the window (connections, snapshots).
    #[arg(long, default_value = "4s", value_parser = ne_flow::time::parse_duration)]
    pub warmup: Duration,
    /// Workloads in the generated cluster.
    #[arg(long, default_value_t = 200)]
    pub workloads: usize,
    /// Namespaces.
    #[arg(long, default_value_t = 8)]
    pub namespaces: usize,
    /// Conversations each workload starts (key cardinality ≈ workloads × this).
    #[arg(long, default_value_t = 4)]
    pub peers_per_workload: usize,
    /// Distinct external addresses.
    #[arg(long, default_value_t = 50)]
    pub external_peers: usize,
    /// Zipf exponent of the key distribution (0 = uniform).
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// Seed of the generated cluster and flows.
    #[arg(long, default_value_t = 0x5eed_f10e)]
    pub seed: u64,
    /// Designs to run.
    #[arg(long, value_enum, default_value_t = Mode::Both)]
    pub mode: Mode,
    /// Processes the simulated agents of `--mode fleet` are spread over.
    #[arg(long, default_value_t = 2)]
    pub fleet_processes: usize,
    /// Steady edges per simulated agent (`--mode fleet`), each changed every flush.
    #[arg(long, default_value_t = 100)]
    pub steady_edges: usize,
    #[command(flatten)]
    pub role: RoleArgs,
}

/// A child process and its control pipes.
struct Proc {
    name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Proc {
    /// Starts this binary with `args`; returns it with its first (ready) report.
    fn spawn(name: &str, args: &[String]) -> anyhow::Result<(Self, Report)> {
        let exe = std::env::current_exe().context("cannot find this binary")?;
        let mut child = Process::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut proc = Proc {
            name: name.to_owned(),
            child,
            stdin,
            stdout,
        };
        let ready = proc.read()?;
        Ok((proc, ready))
    }

    fn read(&mut self) -> anyhow::Result<Report> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        if line.is_empty() {
            anyhow::bail!("{} exited: {:?}", self.name, self.child.wait()?);
        }
        serde_json::from_str(&line).with_context(|| format!("bad report from {}", self.name))
    }

    fn ask(&mut self, command: &str) -> anyhow::Result<Report> {
        writeln!(self.stdin, "{command}")?;
        self.stdin.flush()?;
        self.read()
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Asks for the final report and waits (up to 10 s) for the exit.
    fn stop(mut self) -> anyhow::Result<Report> {
        let report = self.ask("stop");
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        report
    }
}

/// Two readings of one process.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub before: Report,
    pub after: Report,
    pub cpu_seconds: f64,
    pub rss: u64,
    pub rss_peak: u64,
    pub last: Report,
}

/// What one mode measured.
#[derive(Debug, Default)]
pub struct ModeResult {
    pub window: f64,
    /// Flows and bytes the Hubble servers sent in the window.
    pub source_flows: u64,
    pub source_bytes: u64,
    /// CPU seconds of this process (the Hubble servers) in the window.
    pub servers_cpu: f64,
    pub agents: Vec<Measured>,
    /// The leader (agents mode) or the central process.
    pub leader: Measured,
}

fn role_args(role: &RoleArgs) -> Vec<String> {
    vec![
        "--flush-interval".into(),
        format!("{}ms", role.flush_interval.as_millis()),
        "--probe-interval".into(),
        format!("{}ms", role.probe_interval.as_millis()),
        "--max-edges".into(),
        role.max_edges.to_string(),
    ]
}

/// Runs one mode in `dir` (its sockets) and returns what it measured.
pub fn run_mode(args: &LoadArgs, mode: Mode, dir: &Path) -> anyhow::Result<ModeResult> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let config = Config {
        seed: args.seed,
        namespaces: args.namespaces,
        workloads: args.workloads,
        peers_per_workload: args.peers_per_workload,
        external_peers: args.external_peers,
        zipf_exponent: args.zipf,
    };
    let mut servers = Vec::new();
    let mut sockets: Vec<PathBuf> = Vec::new();
    let hubble_agents = if mode == Mode::Fleet { 0 } else { args.agents };
    for i in 0..hubble_agents {
        let hubble = LoadHubble::new(Stream {
            config: config.clone(),
            seed: args.seed ^ (0x9e37_79b9 * (i as u64 + 1)),
            node: format!("default/node-{i}"),
            rate: (args.rate > 0.0).then_some(args.rate),
            churn: args.churn,
            churn_base: (i as u64) << 18,
        });
        let socket = dir.join(format!("hubble-{i}.sock"));
        let _guard = runtime.enter();
        hubble.serve_unix(&socket)?;
        servers.push(hubble);
        sockets.push(socket);
    }
    let role = role_args(&args.role);
    let mut agents = Vec::new();
    let leader = if mode == Mode::Central {
        let mut a = vec!["central".to_owned(), "--socket".to_owned()];
        a.extend(sockets.iter().map(|s| s.display().to_string()));
        a.extend(role.iter().cloned());
        Proc::spawn("central", &a)?.0
    } else {
        let mut a = vec!["leader".to_owned()];
        a.extend(role.iter().cloned());
        let (leader, ready) = Proc::spawn("leader", &a)?;
        let port = ready.port.context("the leader sent no port")?;
        if mode == Mode::Fleet {
            let (per, extra) = (
                args.agents / args.fleet_processes,
                args.agents % args.fleet_processes,
            );
            let mut first = 0;
            for p in 0..args.fleet_processes {
                let count = per + usize::from(p < extra);
                let mut a = vec![
                    "fleet".to_owned(),
                    "--leader".to_owned(),
                    format!("127.0.0.1:{port}"),
                    "--first".to_owned(),
                    first.to_string(),
                    "--count".to_owned(),
                    count.to_string(),
                    "--rate".to_owned(),
                    args.rate.to_string(),
                    "--churn".to_owned(),
                    args.churn.to_string(),
                    "--steady-edges".to_owned(),
                    args.steady_edges.to_string(),
                    "--workloads".to_owned(),
                    args.workloads.to_string(),
                ];
                a.extend(role.iter().cloned());
                agents.push(Proc::spawn(&format!("fleet {p}"), &a)?.0);
                first += count;
            }
        }
        for (i, socket) in sockets.iter().enumerate() {
            let mut a = vec![
                "agent".to_owned(),
                "--socket".to_owned(),
                socket.display().to_string(),
                "--leader".to_owned(),
                format!("127.0.0.1:{port}"),
                "--id".to_owned(),
                format!("node-{i}"),
            ];
            a.extend(role.iter().cloned());
            agents.push(Proc::spawn(&format!("agent {i}"), &a)?.0);
        }
        leader
    };
    std::thread::sleep(args.warmup);

    let mut procs: Vec<Proc> = agents;
    procs.push(leader);
    let sent = |servers: &[LoadHubble]| -> (u64, u64) {
        servers.iter().fold((0, 0), |(f, b), s| {
            (
                f + s.sent.flows.load(Ordering::Relaxed),
                b + s.sent.bytes.load(Ordering::Relaxed),
            )
        })
    };
    let reading =
        |procs: &mut Vec<Proc>, command: &str| -> anyhow::Result<Vec<(Report, ProcSample)>> {
            procs
                .iter_mut()
                .map(|p| Ok((p.ask(command)?, procfs::sample(&p.pid())?)))
                .collect()
        };
    let self0 = procfs::sample("self")?;
    let (f0, b0) = sent(&servers);
    let start = Instant::now();
    let before = reading(&mut procs, "mark")?;
    std::thread::sleep(args.duration);
    let after = reading(&mut procs, "sample")?;
    let window = start.elapsed().as_secs_f64();
    let (f1, b1) = sent(&servers);
    let self1 = procfs::sample("self")?;

    let mut measured: Vec<Measured> = before
        .into_iter()
        .zip(after)
        .map(|((r0, p0), (r1, p1))| Measured {
            before: r0,
            after: r1,
            cpu_seconds: p1.cpu_seconds - p0.cpu_seconds,
            rss: p1.rss,
            rss_peak: p1.rss_peak,
            last: Report::default(),
        })
        .collect();
    for (p, m) in procs.into_iter().zip(measured.iter_mut()) {
        m.last = p.stop()?;
    }
    for s in &servers {
        s.stop();
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    let leader = measured.pop().context("no leader")?;
    Ok(ModeResult {
        window,
        source_flows: f1 - f0,
        source_bytes: b1 - b0,
        servers_cpu: self1.cpu_seconds - self0.cpu_seconds,
        agents: measured,
        leader,
    })
}
