//! The last-table file (P2): read at start when no source has a table yet, and written from a
//! background task, so that the table task never waits for the disk.
//!
//! ```text
//!   table task ──Offer::table (never waits)──▶ watch (the newest table served)
//!        writer task: the newest table not yet written ─▶ write (blocking pool) ─▶ pause
//!                     pause: max(1 s, 10 × the write's time), at most 60 s
//!   shutdown ──Writer::finish──▶ the newest table, if not yet written, then the task ends
//! ```
//!
//! At 100,000 groups the file is about 100 MB and a write takes seconds: writing every table
//! would make each health change cost a whole table on disk. The writer writes the newest
//! table only, and spends at most a tenth of its time writing; a table that changes once a
//! second is on disk within one pause. A crash loses at most the tables of the last pause; a
//! stop writes the newest one.
//!
//! Layer: beside `server`, which starts the writer; it imports `error` only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use healthroute_table::{RoutingTable, Value};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::error::Error;

/// The shortest pause between two writes.
const MIN_PAUSE: Duration = Duration::from_secs(1);
/// The longest pause between two writes, however slow they are.
const MAX_PAUSE: Duration = Duration::from_secs(60);
/// A pause lasts this many times the write before it.
const PAUSE_PER_WRITE: u32 = 10;

/// The last table, as JSON (P2). A missing file is `None`.
pub fn read(path: &Path) -> Result<Option<RoutingTable<Value>>, Error> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes the table next to `path` and renames it into place, so a crash never leaves half a
/// file.
pub fn write(path: &Path, table: &RoutingTable<Value>) -> Result<(), Error> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    // Streamed through a small buffer: the whole table as one string would be a transient as
    // large as the table, and the heap keeps what a transient leaves behind.
    let file = std::fs::File::create(&tmp)?;
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut out, table)?;
    out.flush()?;
    drop(out);
    Ok(std::fs::rename(&tmp, path)?)
}

/// Hands tables to the writer; cheap to clone, and it never waits.
#[derive(Clone)]
pub struct Offer(Arc<watch::Sender<Option<Arc<RoutingTable<Value>>>>>);

impl Offer {
    /// `table` is served now: it replaces any table offered and not yet written.
    pub fn table(&self, table: Arc<RoutingTable<Value>>) {
        self.0.send_replace(Some(table));
    }
}

/// The writer task, until [`Writer::finish`].
pub struct Writer {
    stop: oneshot::Sender<()>,
    task: JoinHandle<u64>,
}

impl Writer {
    /// Starts writing the tables offered to `path`.
    pub fn start(path: PathBuf) -> (Offer, Writer) {
        let (tables_tx, tables) = watch::channel(None);
        let (stop, stopped) = oneshot::channel();
        let span = tracing::info_span!("table_file", path = %path.display());
        let task = tokio::spawn(run(path, tables, stopped).instrument(span));
        (Offer(Arc::new(tables_tx)), Writer { stop, task })
    }

    /// Writes the newest table offered if it is not on disk yet, then ends the task; returns
    /// how many writes it made, or `None` when the task had failed.
    pub async fn finish(self) -> Option<u64> {
        let _ = self.stop.send(());
        self.task.await.ok()
    }
}

/// The writer: the newest table not yet written, then a pause, until stopped. Returns the
/// number of writes.
async fn run(
    path: PathBuf,
    mut tables: watch::Receiver<Option<Arc<RoutingTable<Value>>>>,
    mut stop: oneshot::Receiver<()>,
) -> u64 {
    let mut open = true;
    let mut written: Option<u64> = None;
    let mut writes = 0;
    loop {
        let newest = tables.borrow_and_update().clone();
        match newest.filter(|t| written != Some(t.generation)) {
            Some(table) => {
                written = Some(table.generation);
                let took = write_in_background(&path, table).await;
                writes += 1;
                if open {
                    let pause = (took * PAUSE_PER_WRITE).clamp(MIN_PAUSE, MAX_PAUSE);
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = &mut stop => open = false,
                    }
                }
            }
            None if !open => return writes,
            None => tokio::select! {
                changed = tables.changed() => open = changed.is_ok(),
                _ = &mut stop => open = false,
            },
        }
    }
}

/// Writes `table` on the blocking pool (serialising 100,000 groups takes a core for seconds)
/// and returns how long it took; a failure is logged, and the next table tries again.
async fn write_in_background(path: &Path, table: Arc<RoutingTable<Value>>) -> Duration {
    let started = Instant::now();
    let target = path.to_owned();
    let result = tokio::task::spawn_blocking(move || {
        let result = write(&target, &table);
        // What the serialiser's buffers and a table dropped here freed goes back to the
        // system, as after a table load.
        drop(table);
        healthroute_admin::memory::release_free_memory();
        result
    })
    .await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(path = %path.display(), error = %e, "could not write the last-table file")
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the last-table file writer failed")
        }
    }
    started.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(generation: u64) -> Arc<RoutingTable<Value>> {
        Arc::new(RoutingTable {
            generation,
            ..RoutingTable::default()
        })
    }

    // SEM-P2 SEM-P11: the first table is on disk at once; a burst of tables after it costs one
    // more write, of the newest, which a stop writes without waiting for the pause.
    #[tokio::test]
    async fn the_newest_table_is_written_and_a_burst_costs_one_write() {
        let dir = std::env::temp_dir().join(format!("hr-table-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("last-table.json");
        let (offer, writer) = Writer::start(path.clone());
        offer.table(table(1));
        let mut on_disk = None;
        for _ in 0..200 {
            on_disk = read(&path).ok().flatten().map(|t| t.generation);
            if on_disk.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(on_disk, Some(1), "the first table is written at once");
        for generation in 2..=50 {
            offer.table(table(generation));
        }
        assert_eq!(writer.finish().await, Some(2));
        let on_disk = read(&path).expect("reads").map(|t| t.generation);
        assert_eq!(on_disk, Some(50), "the newest table");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
