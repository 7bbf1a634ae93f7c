//! What both binaries do around their work: logging, the runtime, and waiting for a stop
//! signal (SIGTERM or Ctrl-C).

/// Logs to stderr, as text or JSON lines; `RUST_LOG` overrides `default_filter`.
pub fn init_logging(default_filter: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The multi-threaded runtime both binaries run on.
pub fn runtime() -> Result<tokio::runtime::Runtime, crate::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(crate::Error::Runtime)
}

/// Returns on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
