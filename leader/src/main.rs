//! `ne-leader`: parses the command line and hands over to [`ne_leader::run`].

use clap::Parser;

fn main() -> std::process::ExitCode {
    ne_leader::run(ne_leader::cli::Cli::parse())
}
