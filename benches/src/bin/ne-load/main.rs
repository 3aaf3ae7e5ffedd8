//! `ne-load`: the end-to-end load harness (issue 8). On one machine it runs K node agents
//! as processes, each reading a generated Hubble stream from its own Hubble server over a
//! unix socket, shipping deltas to a leader process over loopback gRPC; the leader renders
//! proposals every flush interval into a counting sink (no cluster). Then the same load
//! in "central" mode: one process reads every raw flow, as a single-controller design
//! does. It prints CPU, RSS, throughput per core, bytes, latencies and API writes of both,
//! and their ratios.
//!
//! ```text
//! cargo run --release -p ne-benches --bin ne-load -- [--agents 4] [--rate 5000] [--duration 20s]
//! ```
//!
//! The child processes are this binary again (hidden subcommands `agent`, `leader`,
//! `central`, module `roles`), so one command builds and runs everything.

mod control;
mod fleet;
mod hubble;
mod procfs;
mod report;
mod roles;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use run::{LoadArgs, Mode};

/// Network Enforcer load harness: agents → leader on one machine, against a central design.
#[derive(Debug, Parser)]
#[command(name = "ne-load", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    #[command(flatten)]
    load: LoadArgs,
}

/// The child processes (started by the harness itself).
#[derive(Debug, Subcommand)]
enum Role {
    /// One node agent.
    #[command(hide = true)]
    Agent {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        leader: String,
        #[arg(long)]
        id: String,
        #[command(flatten)]
        args: roles::RoleArgs,
    },
    /// The leader with a counting sink.
    #[command(hide = true)]
    Leader {
        #[command(flatten)]
        args: roles::RoleArgs,
    },
    /// Simulated node agents (`--mode fleet`): the agent's shipper over synthetic tables.
    #[command(hide = true)]
    Fleet {
        #[arg(long)]
        leader: String,
        #[command(flatten)]
        load: fleet::FleetLoad,
        #[command(flatten)]
        args: roles::RoleArgs,
    },
    /// One process reading every node's raw flows.
    #[command(hide = true)]
    Central {
        #[arg(long, required = true, num_args = 1..)]
        socket: Vec<PathBuf>,
        #[command(flatten)]
        args: roles::RoleArgs,
    },
}

fn child(future: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    // Quiet unless asked: a log line on the harness's stderr per child event.
    if std::env::var_os("RUST_LOG").is_some() {
        ne_telemetry::runtime::init_logging(ne_telemetry::runtime::LogFormat::Text);
    }
    // As `#[tokio::main]` builds it for `ne-agent`: one worker per core.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(future)
}

/// Runs the modes asked for ([`run`]) and prints the results ([`report`]).
fn load(args: &LoadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.agents >= 1, "--agents must be at least 1");
    anyhow::ensure!(
        args.fleet_processes >= 1 && args.fleet_processes <= args.agents,
        "--fleet-processes must be between 1 and --agents"
    );
    anyhow::ensure!(
        args.rate == 0.0 || args.churn <= args.rate,
        "--churn must not exceed --rate"
    );
    let dir = std::env::temp_dir().join(format!("ne-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    report::header(args);
    let modes = match args.mode {
        Mode::Both => vec![Mode::Agents, Mode::Central],
        m => vec![m],
    };
    let mut results = Vec::new();
    for mode in modes {
        let result = run::run_mode(args, mode, &dir);
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        report::mode(args, mode, &result);
        results.push((mode, result));
    }
    if let [(_, agents), (_, central)] = &results[..] {
        report::compare(agents, central);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.role {
        Some(Role::Agent {
            socket,
            leader,
            id,
            args,
        }) => child(roles::agent(socket, leader, id, args)),
        Some(Role::Leader { args }) => child(roles::leader(args)),
        Some(Role::Fleet { leader, load, args }) => {
            fleet::yield_to_leader();
            child(fleet::fleet(leader, load, args))
        }
        Some(Role::Central { socket, args }) => child(roles::central(socket, args)),
        None => load(&cli.load),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
