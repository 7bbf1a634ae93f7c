//! healthroute's data plane: the DNS server over the compiled routing table, standalone mode,
//! and the simulator.
#![deny(unsafe_code)]

pub mod cluster;
pub mod config;
pub mod counters;
pub mod error;
pub mod exchange;
pub mod fastpath;
pub mod forward;
// The fuzz targets' checks: built for this crate's tests and for tests/fuzz (feature
// `fuzzing`), never into the binaries.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod handler;
pub mod manifest_dir;
pub mod metrics;
pub mod plugin;
pub mod push;
pub mod server;
pub mod serving;
pub mod simulate;
pub mod standalone;
pub mod state;
pub mod sys;
pub mod table_file;
#[cfg(test)]
mod test_log;
pub mod udp;
pub mod wire;
