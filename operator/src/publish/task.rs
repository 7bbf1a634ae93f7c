//! The publisher task, beside the control loop: it takes the newest request of the current
//! term, reads back at a term's start, publishes each table, retries with backoff, and folds
//! between changes; it tells the control loop what it did.

use std::sync::Arc;
use std::time::Duration;

use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_table::{RoutingTable, Value};
use tokio::sync::{mpsc, watch};

use super::{Publisher, ReadBack};
use crate::error::Error;
use crate::metrics::PublisherMetrics;
use crate::writes::TableWrites;

/// What the control loop asks of the publisher: the newest table of a leadership term.
#[derive(Debug, Clone, Default)]
pub struct PublishRequest {
    /// The leadership term; 0 while not the leader.
    pub term: u64,
    /// The highest generation a resolver says it serves: the next one goes above it.
    pub floor: u64,
    /// The table to publish; `None` until the term's read-back has been taken in.
    pub table: Option<Arc<RoutingTable<Value>>>,
    /// Where deltas are pushed (P12): the resolvers' advertised addresses.
    pub push_to: Arc<[Arc<str>]>,
}

/// What the publisher tells the control loop.
#[derive(Debug)]
pub enum PublishFeedback {
    /// What a new term found published; the control loop takes it in before it sends a table.
    ReadBack { term: u64, found: ReadBack },
    /// `table` is what the resolvers can assemble now, as `generation`.
    Published {
        term: u64,
        generation: u64,
        table: Arc<RoutingTable<Value>>,
    },
    /// Publishing failed; it is retried with backoff (or when a newer table comes).
    Failed { term: u64, error: String },
}

/// Publishes the newest requested table of the current term, until `requests` closes.
pub async fn run_publisher(
    mut publisher: Publisher,
    mut requests: watch::Receiver<PublishRequest>,
    feedback: mpsc::UnboundedSender<PublishFeedback>,
    metrics: Arc<PublisherMetrics>,
    writing: TableWrites,
) {
    let mut term = 0;
    let mut read_back = false;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut errors = ErrorLog::default();
    let mut last: Option<(u64, Arc<RoutingTable<Value>>)> = None;
    loop {
        let retry = async {
            match retry_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        // A fold goes on only while no newer table waits, and a newer table that arrives
        // during one of its writes cuts that write short: a change never waits for a fold.
        let fold_now = term != 0 && read_back && retry_at.is_none() && publisher.folding();
        tokio::select! {
            biased;
            changed = requests.changed() => if changed.is_err() { return },
            _ = retry => retry_at = None,
            _ = std::future::ready(()), if fold_now => {
                match fold_step(&mut publisher, &requests, term, &metrics, &mut errors).await {
                    Some(true) => backoff.reset(),
                    Some(false) => {}
                    None => retry_at = Some(tokio::time::Instant::now() + backoff.next_delay()),
                }
                continue;
            }
        }
        let request = requests.borrow_and_update().clone();
        if request.term != term {
            term = request.term;
            read_back = false;
            last = None;
            retry_at = None;
            publisher.reset();
            backoff.reset();
            metrics.new_term();
        }
        // After a failure, a newer table waits for the backoff too: an API server that is
        // down is not asked once per change.
        if term == 0 || retry_at.is_some() {
            continue;
        }
        publisher.raise_generation(request.floor);
        publisher.push_to(request.push_to.clone());
        let failed = |error: String, errors: &mut ErrorLog| {
            metrics.failed();
            if errors.should_log(&error) {
                tracing::error!(%error, "publishing the routing table failed; retrying (logged once a minute per error)");
            }
            let _ = feedback.send(PublishFeedback::Failed { term, error });
        };
        if !read_back {
            match publisher.read_back().await {
                Ok(found) => {
                    read_back = true;
                    backoff.reset();
                    let _ = feedback.send(PublishFeedback::ReadBack { term, found });
                }
                Err(e) => {
                    failed(e.to_string(), &mut errors);
                    retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
                }
            }
            continue;
        }
        let Some(table) = request.table else { continue };
        if last
            .as_ref()
            .is_some_and(|(t, l)| *t == term && Arc::ptr_eq(l, &table))
        {
            continue; // already published (a floor change alone)
        }
        let started = std::time::Instant::now();
        let current = &requests;
        // The writer starts no status write meanwhile (P7): the API server serves this first.
        writing.started();
        let result = publisher
            .publish(&table, || current.borrow().term == term)
            .await;
        writing.ended();
        metrics.took(started.elapsed());
        match result {
            Ok(report) => {
                backoff.reset();
                metrics.published(
                    report.generation,
                    report.shards,
                    report.shards_written,
                    report.delta_written,
                    report.bytes_written,
                );
                last = Some((term, table.clone()));
                let _ = feedback.send(PublishFeedback::Published {
                    term,
                    generation: report.generation,
                    table,
                });
            }
            Err(Error::NotLeader) => {}
            Err(e) => {
                failed(e.to_string(), &mut errors);
                retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
            }
        }
    }
}

/// One step of the fold under way, cut short when a newer table is requested: whether the
/// fold ended, or `None` when the step failed (a retry follows the backoff).
async fn fold_step(
    publisher: &mut Publisher,
    requests: &watch::Receiver<PublishRequest>,
    term: u64,
    metrics: &PublisherMetrics,
    errors: &mut ErrorLog,
) -> Option<bool> {
    let started = std::time::Instant::now();
    // Has seen what `requests` has: completes when a newer table is sent.
    let mut newer = requests.clone();
    let step = publisher
        .fold_step_until(|| requests.borrow().term == term, async move {
            let _ = newer.changed().await;
        })
        .await;
    metrics.took(started.elapsed());
    match step {
        Ok(step) => {
            metrics.folded(step.shards_written, step.bytes_written, step.done);
            if step.given_up {
                tracing::debug!("a fold's write cut short for a newer table");
            }
            if step.done {
                tracing::debug!(
                    generation = step.generation,
                    "deltas folded into a new manifest"
                );
            }
            Some(step.done)
        }
        Err(Error::NotLeader) => Some(false),
        Err(e) => {
            metrics.failed();
            let error = e.to_string();
            if errors.should_log(&error) {
                tracing::error!(%error, "folding the table's deltas failed; retrying (logged once a minute per error)");
            }
            None
        }
    }
}
