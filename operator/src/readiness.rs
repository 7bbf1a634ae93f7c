//! Whether this replica is ready (`/readyz`): its watches have listed everything, and, while
//! it leads, the table can be published (P5). The control loop keeps it; the admin endpoint
//! reads it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use healthroute_admin::endpoint;

#[derive(Debug, Default)]
pub struct Readiness {
    synced: AtomicBool,
    leader: AtomicBool,
    /// The last publish error of this term, while publishing fails.
    publish_error: Mutex<Option<String>>,
}

impl Readiness {
    /// Every watch has listed its objects, and the first table has been compiled.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
    }

    /// The outcome of the term's last publish attempt: `None` once a table is published.
    pub fn set_publish_error(&self, error: Option<String>) {
        *self.publish_error.lock().unwrap_or_else(|p| p.into_inner()) = error;
    }

    /// Why this replica is not ready: watches not synced, or (as the leader) the table cannot
    /// be published.
    pub fn not_ready(&self) -> Option<String> {
        if !self.synced() {
            return Some("watches not synced yet".into());
        }
        if !self.leader.load(Ordering::Relaxed) {
            return None;
        }
        let error = self
            .publish_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        Some(format!("the routing table cannot be published: {error}"))
    }
}

impl endpoint::Readiness for Readiness {
    fn not_ready(&self) -> Option<String> {
        Readiness::not_ready(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-P5: a leader that cannot publish is not ready; a follower's readiness does not
    // depend on publishing.
    #[test]
    fn a_leader_that_cannot_publish_is_not_ready() {
        let r = Readiness::default();
        assert_eq!(r.not_ready().as_deref(), Some("watches not synced yet"));
        r.set_synced();
        r.set_publish_error(Some("503".into()));
        assert_eq!(r.not_ready(), None, "a follower");
        r.set_leader(true);
        assert!(
            r.not_ready()
                .is_some_and(|why| why.contains("cannot be published: 503"))
        );
        r.set_publish_error(None);
        assert_eq!(r.not_ready(), None);
    }
}
