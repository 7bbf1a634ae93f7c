//! The DNS path, from a datagram to its answer, bottom layer first:
//!
//! ```text
//!   wire        names, messages and EDNS as bytes (no table, no state)
//!   counters    the answer counters a serving table adds to (M1)
//!   serving/    the serving table: the compiled table as answers ready to copy (zones,
//!               groups, the name index, the build from the table before, the lookup)
//!   dnssec/     signed answers: keys, RRSIGs and their cache, compact denial (K1-K6)
//!   forward     queries outside the served zones, to one upstream (D5)
//!   metrics     query counters and the /metrics text
//!   state       the snapshot every query reads: table, upstream, metrics, draining
//!   handler     one query to one answer (hickory messages; the slow path)
//!   fastpath    the common query answered from bytes, without a hickory message
//!   sys         sendmmsg and IP_MTU_DISCOVER (one of the two modules allowed `unsafe`)
//!   udp         the UDP sockets: batches in, batches out
//!   exchange    the peer exchange listener (X6, X7), on its own address
//! ```
//!
//! Nothing here knows where a table comes from (`crate::sources`).

pub mod counters;
pub mod dnssec;
pub mod exchange;
pub mod fastpath;
pub mod forward;
pub mod handler;
pub mod metrics;
pub mod serving;
pub mod state;
pub mod sys;
pub mod udp;
pub mod wire;
