//! `crdgen`: prints both CRDs as one YAML stream, or writes one file per CRD with
//! `--out-dir DIR` (the chart's `crds/` directory).

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: crdgen [--out-dir DIR | -o DIR]\n\
    without arguments, prints both CRDs as one multi-document YAML stream to stdout";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    /// Print the stream to stdout.
    Print,
    /// Write one file per CRD into the directory.
    Write(PathBuf),
    /// Print usage.
    Help,
}

/// Parses the arguments after the program name.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut command = Command::Print;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let dir = match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-o" | "--out-dir" => args
                .next()
                .ok_or_else(|| format!("{arg} needs a directory"))?,
            other => match other.strip_prefix("--out-dir=") {
                Some(dir) => dir.to_owned(),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        };
        if dir.is_empty() {
            return Err(format!("{arg} needs a directory"));
        }
        command = Command::Write(dir.into());
    }
    Ok(command)
}

/// Runs one command; errors are already formatted for the user.
fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Help => println!("{USAGE}"),
        Command::Print => {
            let stream = ne_crds::crd_yaml_stream().map_err(|e| format!("rendering crds: {e}"))?;
            print!("{stream}");
        }
        Command::Write(dir) => {
            let docs = ne_crds::crd_yaml().map_err(|e| format!("rendering crds: {e}"))?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            for (file, yaml) in docs {
                let path = dir.join(file);
                std::fs::write(&path, yaml)
                    .map_err(|e| format!("writing {}: {e}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let command = match parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("crdgen: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crdgen: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_out_dir_forms() {
        assert_eq!(parse(args(&[])), Ok(Command::Print));
        for form in [&["--out-dir", "x"][..], &["-o", "x"], &["--out-dir=x"]] {
            assert_eq!(
                parse(args(form)),
                Ok(Command::Write("x".into())),
                "{form:?}"
            );
        }
        assert_eq!(parse(args(&["--help"])), Ok(Command::Help));
    }

    #[test]
    fn rejects_bad_arguments() {
        assert!(parse(args(&["-o"])).is_err());
        assert!(parse(args(&["--out-dir="])).is_err());
        assert!(parse(args(&["stray"])).is_err());
    }
}
