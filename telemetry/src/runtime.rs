//! What both binaries do around their work: set up logging ([`init_logging`]) and wait for
//! the signal to stop ([`shutdown_signal`]).

/// How log lines are written (`ne-agent --log-format`; with the `clap` feature it is a
/// `clap::ValueEnum`: `text`, `json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LogFormat {
    Text,
    Json,
}

/// Sets up logging to stderr: `RUST_LOG` filters (default `info`, also when `RUST_LOG` does
/// not parse), as text or JSON lines. Does nothing when a global subscriber is already set.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM. When SIGTERM cannot be listened for, it logs a
/// warning and waits for SIGINT alone. Needs a tokio runtime with signals enabled.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
