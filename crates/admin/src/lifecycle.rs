//! What both binaries do around their work: logging, the runtime, and waiting for a stop
//! signal (SIGTERM or Ctrl-C).
//!
//! Logs go to stderr as text or JSON lines (`--log-format text|json` in both binaries). Text
//! is coloured only when stderr is a terminal (and `NO_COLOR` is unset), so a log file or a
//! container log holds no escape codes. During an API server outage kube-client logs each
//! failed connection at ERROR, dozens a second; those lines are let through at most once per
//! [`KUBE_CLIENT_LOG_EVERY`] per call site, since the operator's own retry message
//! (`retry::ErrorLog`, once a minute) already says what is wrong.

use std::collections::HashMap;
use std::fmt;
use std::io::IsTerminal;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::{Metadata, subscriber::Interest};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(crate::Error::LogFormat(other.to_owned())),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// How often one kube-client call site may log an error or warning.
pub const KUBE_CLIENT_LOG_EVERY: Duration = Duration::from_secs(60);

/// Logs to stderr in `format`; `RUST_LOG` overrides `default_filter`.
pub fn init_logging(default_filter: &str, format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let throttle = Throttle::new(&["kube_client"], KUBE_CLIENT_LOG_EVERY);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(throttle).with_filter(filter))
        .init();
}

/// Lets through at most one event per call site and `every` from the given target prefixes;
/// everything else passes untouched. A per-layer filter, so it sees only events the level
/// filter already admitted.
pub struct Throttle {
    prefixes: &'static [&'static str],
    every: Duration,
    last: Mutex<HashMap<Identifier, Instant>>,
}

impl Throttle {
    pub fn new(prefixes: &'static [&'static str], every: Duration) -> Self {
        Throttle {
            prefixes,
            every,
            last: Mutex::new(HashMap::new()),
        }
    }

    fn throttled(&self, meta: &Metadata<'_>) -> bool {
        meta.is_event()
            && self.prefixes.iter().any(|p| {
                meta.target()
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
            })
    }

    /// Whether an event of `site` at `now` is let through (and, if so, starts its window).
    pub fn admit(&self, site: Identifier, now: Instant) -> bool {
        let Ok(mut last) = self.last.lock() else {
            return true;
        };
        match last.get(&site) {
            Some(t) if now.saturating_duration_since(*t) < self.every => false,
            _ => {
                last.insert(site, now);
                true
            }
        }
    }
}

impl<S> Filter<S> for Throttle {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        !self.throttled(meta) || self.admit(meta.callsite(), Instant::now())
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // Throttled call sites are asked about each event; the rest are decided once.
        if self.throttled(meta) {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }
}

/// The multi-threaded runtime both binaries run on. Call it before starting any other thread:
/// it first caps the allocator at one arena per core (fewer arenas hold fewer freed pages; see
/// docs/benchmarks.md, "Memory") and maps blocks from 128 KiB up on their own (large responses
/// stay out of the heap).
pub fn runtime() -> Result<tokio::runtime::Runtime, crate::Error> {
    crate::memory::limit_arenas(std::thread::available_parallelism().map_or(1, |n| n.get()));
    crate::memory::map_large_blocks(128 * 1024);
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

#[cfg(test)]
mod tests {
    use super::*;

    // Not zero-sized: call sites are told apart by address.
    struct Site(#[allow(dead_code)] u8);
    impl tracing::callsite::Callsite for Site {
        fn set_interest(&self, _: Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!("not asked in these tests")
        }
    }
    static SITE_A: Site = Site(0);
    static SITE_B: Site = Site(1);

    #[test]
    fn one_event_per_call_site_and_window() {
        let throttle = Throttle::new(&["kube_client"], Duration::from_secs(60));
        let t0 = Instant::now();
        let a = Identifier(&SITE_A);
        let b = Identifier(&SITE_B);
        assert!(throttle.admit(a.clone(), t0));
        for s in 1..60 {
            assert!(
                !throttle.admit(a.clone(), t0 + Duration::from_secs(s)),
                "{s} s"
            );
        }
        // Another call site has its own window.
        assert!(throttle.admit(b, t0 + Duration::from_secs(1)));
        assert!(throttle.admit(a.clone(), t0 + Duration::from_secs(60)));
        assert!(!throttle.admit(a, t0 + Duration::from_secs(61)));
    }

    #[test]
    fn only_the_named_targets_are_throttled() {
        let throttle = Throttle::new(&["kube_client"], Duration::from_secs(60));
        static KUBE: Metadata<'static> = tracing::metadata! {
            name: "e", target: "kube_client::client::builder", level: tracing::Level::ERROR,
            fields: &[], callsite: &SITE_A, kind: tracing::metadata::Kind::EVENT,
        };
        static OWN: Metadata<'static> = tracing::metadata! {
            name: "e", target: "healthroute_operator::controller", level: tracing::Level::ERROR,
            fields: &[], callsite: &SITE_B, kind: tracing::metadata::Kind::EVENT,
        };
        static LOOKALIKE: Metadata<'static> = tracing::metadata! {
            name: "e", target: "kube_clientele", level: tracing::Level::ERROR,
            fields: &[], callsite: &SITE_B, kind: tracing::metadata::Kind::EVENT,
        };
        assert!(throttle.throttled(&KUBE));
        assert!(!throttle.throttled(&OWN));
        assert!(!throttle.throttled(&LOOKALIKE));
    }

    #[test]
    fn log_formats_read_as_the_flag_writes_them() {
        for f in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(f.to_string().parse::<LogFormat>().ok(), Some(f));
        }
        assert!("yaml".parse::<LogFormat>().is_err());
    }
}
