//! Where a resolver's serving table comes from. Each source hands compiled tables to the
//! server; none of them answers DNS.
//!
//! ```text
//!   cluster        the published table's ConfigMaps, watched (cluster mode)
//!   push           the operator's pushes, verified, ahead of the watch
//!   table_file     the last table served, on disk: read at start before any source has one (P2)
//!   manifest_dir   a directory of manifests, read and followed
//!   standalone     standalone mode: the directory compiled in process, checks run here
//! ```

pub mod cluster;
pub mod manifest_dir;
pub mod push;
pub mod standalone;
pub mod table_file;
