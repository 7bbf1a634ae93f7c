//! `healthroute-operator`: watches RecordGroups, HealthChecks, ZonalShifts and endpoints,
//! compiles the routing table, and (as the elected leader) publishes it and every status. The
//! flags are resolved once ([`healthroute_operator::settings`]); this file wires what they say.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use healthroute_admin::endpoint::{self, Admin};
use healthroute_admin::lifecycle;
use healthroute_admin::metrics::Registry;
use healthroute_operator::controller::{self, OperatorMetrics, Readiness};
use healthroute_operator::error::Error;
use healthroute_operator::leader;
use healthroute_operator::settings::{Args, Command, Settings};
use tokio::sync::watch;
use tracing::Instrument;

/// A start-up error is said once, as `error: ...` on stderr, as the resolver says its own:
/// the log goes to stderr as well, and a log line could be filtered out by `RUST_LOG`.
fn main() -> ExitCode {
    let args = Args::parse();
    lifecycle::init_logging("info", args.log_format());
    let runtime = match lifecycle::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Every 10 s, what a burst freed (4 MiB or more) goes back to the system: the first lists,
    // a first start's status writes, a takeover, a standby dropping its outputs.
    if let Err(e) =
        healthroute_admin::memory::spawn_scavenger(std::time::Duration::from_secs(10), 4 << 20)
    {
        tracing::warn!(error = %e, "no scavenger thread: freed memory stays with the process");
    }
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(mut args: Args) -> Result<(), Error> {
    if let Some(Command::Uninstall(settings)) = args.command.take() {
        return healthroute_operator::uninstall::main(settings).await;
    }
    let Settings {
        config,
        election,
        admin_listen,
    } = Settings::resolve(&args)?;
    if config.push_key.is_some() {
        tracing::info!("pushing each delta to the resolvers that take pushes (P12)");
    }
    let kube_config = kube::Config::infer().await.map_err(Error::NoClientConfig)?;
    let client = kube::Client::try_from(kube_config.clone()).map_err(Error::NoClient)?;
    let metrics = OperatorMetrics::default();
    let readiness = Arc::new(Readiness::default());
    let listener = tokio::net::TcpListener::bind(admin_listen)
        .await
        .map_err(|source| Error::Admin {
            addr: admin_listen,
            source,
        })?;
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let admin = Admin {
        registry,
        readiness: readiness.clone(),
    };
    tokio::spawn(
        endpoint::serve(listener, Arc::new(admin))
            .instrument(tracing::info_span!("admin", addr = %admin_listen)),
    );

    // P3: one writer. Every replica watches; only the lease holder compiles and writes.
    let (leader_tx, leader) = watch::channel(false);
    let (stop_tx, stop_rx) = watch::channel(false);
    let lease_ended = leader::spawn(kube_config, election, leader_tx, stop_rx.clone())?;
    let control = tokio::spawn(
        controller::run(client, config, leader, metrics, readiness, stop_rx)
            .instrument(tracing::info_span!("control_loop")),
    );
    lifecycle::shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    let _ = control.await;
    // The election releases the lease on the way out, for a fast handover.
    let _ = tokio::time::timeout(Duration::from_secs(6), lease_ended).await;
    Ok(())
}
