//! `ne-leader`: the cluster-wide half of Network Enforcer.
//!
//! In a cluster it merges the agents' deltas into one edge index, writes proposals,
//! checks violations and manages native policies (built out in the leader issues). Offline,
//! [`offline::learn`] and [`offline::check`] run the same learning and policy logic on
//! captured flows.

pub mod attribution;
pub mod auth;
pub mod cli;
pub mod controller;
pub mod election;
pub mod ingest;
pub mod leader_label;
pub mod learning;
pub mod live;
pub mod offline;
pub mod output;
pub mod violations;

use std::process::ExitCode;

use cli::{Cli, Command};

/// Runs a parsed command line. Errors are printed with their causes; the exit code is 0
/// on success, 1 for `check --fail-on-violation` with violations, 2 for errors.
pub fn run(cli: Cli) -> ExitCode {
    let result = match &cli.command {
        Command::Learn(args) => offline::learn::run(args).map(|()| false),
        Command::Check(args) => offline::check::run(args),
        Command::Run(args) => live::main(args).map(|()| false),
    };
    match result {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
