//! How either binary is run and watched, the same for the operator and the resolver:
//!
//! - [`lifecycle`]: logging, the runtime, and the stop signal;
//! - [`endpoint`]: the admin endpoint (`/metrics`, `/livez`, `/readyz`);
//! - [`metrics`]: the process's metrics registry and how collectors write into it;
//! - [`retry`]: how a loop that talks to the API server waits before trying again, and how it
//!   logs a failure that repeats;
//! - [`memory`]: fewer malloc arenas, freed pages handed back, and the start-up code paged out.
#![deny(unsafe_code)]

pub mod endpoint;
pub mod key_file;
pub mod lifecycle;
pub mod memory;
pub mod metrics;
pub mod retry;

/// What can fail in running a binary.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("{0:?}: the log format is text or json")]
    LogFormat(String),
}
