//! healthroute's data plane: the DNS server over the compiled routing table, standalone mode,
//! and the simulator.
//!
//! ```text
//!   dns/       the DNS path: wire encoding, the serving table, the fast path and the
//!              handler, sockets, forwarding, the exchange listener, the process state
//!   sources/   where the serving table comes from: the cluster's ConfigMaps and pushes, a
//!              table file, a directory of manifests (standalone mode)
//!   tools/     what runs beside a server, never in it: the simulator, the kubectl plugin,
//!              the fuzz targets' checks
//!   config     healthroute.yaml, validated
//!   settings   the flags and healthroute.yaml resolved into one validated value, for main
//!   server     wires a source, the DNS path and the admin endpoint into one process
//! ```
//!
//! `server` and `tools` use `dns` and `sources`; `dns` and `sources` never use each other,
//! `tools` or `server`.
#![deny(unsafe_code)]

pub mod config;
pub mod dns;
pub mod error;
pub mod server;
pub mod settings;
pub mod sources;
#[cfg(test)]
mod test_log;
pub mod tools;
