//! `kubectl netenforcer`: the operator's commands for proposals and policies, run with the
//! user's own kubeconfig and permissions (kubectl finds `kubectl-netenforcer` on `PATH`).
//! Nothing here talks to the leader: every command reads or writes the custom resources,
//! making the same label, field and annotation changes a user would make by hand.

mod act;
mod diff;
mod explain;
mod status;
mod workload;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use kube::Client;

/// Review, promote, protect and acknowledge Network Enforcer policies.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-netenforcer",
    bin_name = "kubectl netenforcer",
    version
)]
struct Cli {
    /// The namespace (default: the kubeconfig context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One line per workload and direction: proposal or policy, mode, what was learned,
    /// violations and readiness.
    Status {
        /// Every namespace.
        #[arg(short = 'A', long, conflicts_with = "namespace")]
        all_namespaces: bool,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Promotes a proposal to a WorkloadNetworkPolicy (labels it; the leader does the rest).
    Promote {
        /// The WorkloadNetworkPolicyProposal.
        proposal: String,
        /// The mode of the policy it becomes.
        #[arg(long, value_enum)]
        mode: Mode,
    },
    /// Switches a WorkloadNetworkPolicy to protect mode: its native policy is enforced.
    Protect {
        /// The WorkloadNetworkPolicy.
        policy: String,
    },
    /// Switches a WorkloadNetworkPolicy back to monitor mode: nothing is blocked.
    Monitor {
        /// The WorkloadNetworkPolicy.
        policy: String,
    },
    /// Acknowledges violation records of a policy by id, with a reason.
    Ack {
        /// The WorkloadNetworkPolicy.
        policy: String,
        /// Ids of its active violation records (`status.violations[].id`).
        #[arg(required = true)]
        ids: Vec<i64>,
        /// Why the traffic is expected (kept with the acknowledged record).
        #[arg(long)]
        reason: String,
    },
    /// What promoting a proposal (or a policy) changes next to the native policies that
    /// already select the workload's pods; for a policy, what was seen and not allowed.
    Diff {
        /// A proposal or a policy (a proposal first; `wnpp/NAME` or `wnp/NAME` chooses).
        name: String,
        /// Output format (`json` and `yaml`: the whole comparison, for scripts).
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Why a violation record is one: each rule checked, the nearest, and the rule that
    /// would allow the flow, as YAML to paste.
    Explain {
        /// The WorkloadNetworkPolicy.
        policy: String,
        /// The record's id (`status.violations[].id`, or an acknowledged one's).
        id: i64,
        /// Output format (`json` and `yaml`: the whole explanation, for scripts).
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Prints a shell completion script.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
    Yaml,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Monitor,
    Protect,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Monitor => "monitor",
            Mode::Protect => "protect",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Completion { shell } = cli.command {
        let mut command = Cli::command();
        clap_complete::generate(
            shell,
            &mut command,
            "kubectl-netenforcer",
            &mut std::io::stdout(),
        );
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("cannot reach the cluster with your kubeconfig: {e} (check KUBECONFIG and the current context)")
    })?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    match cli.command {
        Command::Status {
            all_namespaces,
            output,
        } => {
            let scope = (!all_namespaces).then_some(namespace.as_str());
            let rows = status::rows(&client, scope).await?;
            let mut out = std::io::stdout().lock();
            status::write(&mut out, &rows, output, status::colour_wanted())?;
            Ok(())
        }
        Command::Promote { proposal, mode } => {
            act::promote(&client, &namespace, &proposal, mode.as_str()).await
        }
        Command::Protect { policy } => act::set_mode(&client, &namespace, &policy, "protect").await,
        Command::Monitor { policy } => act::set_mode(&client, &namespace, &policy, "monitor").await,
        Command::Ack {
            policy,
            ids,
            reason,
        } => act::acknowledge(&client, &namespace, &policy, &ids, &reason).await,
        Command::Diff { name, output } => {
            let d = diff::fetch(&client, &namespace, &name).await?;
            let mut out = std::io::stdout().lock();
            match output {
                Output::Table => diff::write_text(&mut out, &d)?,
                Output::Json => {
                    serde_json::to_writer_pretty(&mut out, &d)?;
                    writeln!(out)?;
                }
                Output::Yaml => write!(out, "{}", serde_saphyr::to_string(&d)?)?,
            }
            Ok(())
        }
        Command::Explain { policy, id, output } => {
            let explanation = explain::fetch(&client, &namespace, &policy, id).await?;
            let mut out = std::io::stdout().lock();
            match output {
                Output::Table => explain::write_text(&mut out, &explanation)?,
                Output::Json => {
                    serde_json::to_writer_pretty(&mut out, &explanation)?;
                    writeln!(out)?;
                }
                Output::Yaml => write!(out, "{}", serde_saphyr::to_string(&explanation)?)?,
            }
            Ok(())
        }
        Command::Completion { .. } => unreachable!("handled before connecting"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_parse_and_completion_names_every_command() {
        Cli::command().debug_assert();
        let mut script = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "kubectl-netenforcer",
            &mut script,
        );
        let script = String::from_utf8(script).unwrap();
        for command in [
            "status",
            "promote",
            "protect",
            "monitor",
            "ack",
            "explain",
            "diff",
            "completion",
        ] {
            assert!(script.contains(command), "{command}");
        }
        let ack = Cli::try_parse_from(["kubectl-netenforcer", "ack", "p", "--reason", "x"]);
        assert!(ack.is_err(), "ack needs an id");
        let status = Cli::try_parse_from(["kubectl-netenforcer", "status", "-A", "-n", "shop"]);
        assert!(status.is_err(), "-A and -n exclude each other");
    }
}
