//! Following a key file that kubelet rewrites when its Secret changes (P12, X1): the binaries'
//! one loop for it. What the bytes mean (a push key, a TSIG secret) is the caller's; this
//! module only reads the file on a timer and says, once a minute at most per distinct problem,
//! why a new content cannot be used. Never the content itself (X10).

use std::path::PathBuf;
use std::time::Duration;

use crate::retry::ErrorLog;

/// Reads `path` every `every` until the task is aborted and hands each read to `take`, which
/// says what it made of it: `Ok(None)` the same key, `Ok(Some(how))` a new key in use (logged
/// at info), `Err(why)` nothing usable, the key held kept (warned).
/// kubelet replaces a mounted Secret's files by a symlink swap, so the path is opened again
/// each time, never held.
pub async fn follow(
    path: PathBuf,
    every: Duration,
    what: &'static str,
    mut take: impl FnMut(std::io::Result<Vec<u8>>) -> Result<Option<String>, String>,
) {
    let mut errors = ErrorLog::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match take(tokio::fs::read(&path).await) {
            Ok(None) => {}
            Ok(Some(how)) => tracing::info!(file = %path.display(), "{what}: {how}"),
            Err(why) => {
                if errors.should_log(&why) {
                    tracing::warn!(file = %path.display(), error = %why, "the {what} file cannot be used (said once a minute)");
                }
            }
        }
    }
}
