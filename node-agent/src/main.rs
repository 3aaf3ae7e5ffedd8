//! `ne-agent`: parses the command line and hands over to [`ne_node_agent::run`].

use clap::Parser;
use ne_node_agent::args::Args;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    ne_telemetry::runtime::init_logging(args.log_format);
    match ne_node_agent::run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "ne-agent failed");
            eprintln!("error: {error:#}");
            std::process::ExitCode::from(2)
        }
    }
}
