//! How the control plane waits before trying again, and how it reports a failure that repeats.
//!
//! - [`Backoff`]: exponential with jitter, bounded, reset on success. Watches use it (an API
//!   server that comes back is watched again within about a second, not after client-go's
//!   30 s ceiling), and so do the table publisher and the status writer.
//! - [`ErrorLog`]: a failure that repeats is logged once per distinct message per minute;
//!   the metrics count every occurrence.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Exponential backoff with "equal jitter": each delay is drawn from the upper half of the
/// current step, so retries spread out but never come back sooner than half the step.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max: max.max(min),
            step: min,
        }
    }

    /// For watches: 100 ms doubling to at most 1 s, so that a watch resumes within about a
    /// second of the API server answering again.
    pub fn watch() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(1))
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.max);
        let half = step / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Back to the shortest delay (after a success).
    pub fn reset(&mut self) {
        self.step = self.min;
    }
}

impl Iterator for Backoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

#[cfg(feature = "watch")]
impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        Backoff::reset(self);
    }
}

/// Remembers when each distinct error was last logged.
#[derive(Debug)]
pub struct ErrorLog {
    every: Duration,
    last: HashMap<String, Instant>,
}

impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog::new(Duration::from_secs(60))
    }
}

impl ErrorLog {
    pub fn new(every: Duration) -> Self {
        ErrorLog {
            every,
            last: HashMap::new(),
        }
    }

    /// True when `message` should be logged now: never seen, or last logged `every` ago.
    pub fn should_log(&mut self, message: &str) -> bool {
        let now = Instant::now();
        // Forget what is old enough to be logged again, so the map stays small.
        self.last
            .retain(|_, at| now.duration_since(*at) < self.every);
        if self.last.contains_key(message) {
            return false;
        }
        self.last.insert(message.to_owned(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-P8: retries stay within the bound (a watch resumes within about a second of the API
    // server answering) and start over after a success.
    #[test]
    fn backoff_grows_to_its_bound_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        for (i, d) in delays.iter().enumerate() {
            let step =
                (Duration::from_millis(100) * 2u32.pow(i as u32)).min(Duration::from_secs(1));
            assert!(
                *d >= step / 2 && *d <= step,
                "delay {i}: {d:?} for step {step:?}"
            );
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    // SEM-P5: a repeated failure is logged once per distinct error per period.
    #[test]
    fn a_repeated_error_is_logged_once_per_period() {
        let mut log = ErrorLog::new(Duration::from_millis(50));
        assert!(log.should_log("shard 0 refused"));
        assert!(!log.should_log("shard 0 refused"));
        assert!(log.should_log("another error"));
        std::thread::sleep(Duration::from_millis(60));
        assert!(log.should_log("shard 0 refused"));
    }
}
