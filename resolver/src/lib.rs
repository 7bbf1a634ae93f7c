//! healthroute's data plane: the DNS server over the compiled routing table, standalone mode,
//! and the simulator.
#![forbid(unsafe_code)]

pub mod config;
pub mod simulate;
