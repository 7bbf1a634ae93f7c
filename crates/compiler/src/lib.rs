//! The routing compiler: from RecordGroups, HealthChecks (with their checkers' views),
//! ZonalShifts, Service endpoints, the served zones and the time, to a compiled
//! [`RoutingTable`] plus the status of every object.
//!
//! ```text
//!  upsert_* / delete_* ──▶ inputs ──▶ dirty groups ──┐
//!                                                    ▼
//!  compile(now): check health (H6–H10) ─▶ changed checks ─▶ their groups
//!                shift clocks (Z3, Z4)  ─▶ changed shifts ─▶ their groups
//!                dirty groups, alias targets first ─▶ group::compile ─▶ outcome
//!                      └─ a changed outcome dirties the groups that alias it
//!                autoshift engines (AS) read the outcomes' zone health ─▶ their shifts
//!                      └─ changed shifts dirty their targets ─▶ group::compile again
//!  table() ◀── Arc<RoutingTable>, rebuilt only from the groups that changed
//! ```
//!
//! The compiler is synchronous and owns no client: the operator's index and standalone mode
//! feed it, and read tables and statuses back. Time comes in as `now`, never from a clock. Recompiling after one change costs the groups
//! that depend on it, not the table.
//!
//! This file holds the [`Compiler`]'s state; its methods live with the job they do, each
//! module importing only those below it:
//!
//! ```text
//!   inputs.rs   what it reads, and the upsert_* / delete_* calls that mark groups dirty
//!   compile.rs  the compile loop: checks, shift clocks, dirty groups, the table
//!   queries.rs  what callers read back: table, outcomes, statuses as data
//!   deps.rs     who reads what (checks, Services, alias targets) and who claims a name
//!   group/      one group, a pure function (validate, evaluate, select, zone affinity)
//!   health.rs   one check's health from its views (H6–H10)
//!   shift.rs    one shift's clock and targets (Z1, Z3, Z4)
//!   autoshift/  the autoshift engine: detection, practice runs, their calendar (AS1–AS12)
//!   zones.rs    the served zones
//!   reasons.rs  the reasons of the Compiled condition
//!   host/       what a process hosting the compiler does around it (deadline, compile,
//!               the autoshift numbers both binaries export)
//!   manifests/  a manifest directory to compiler inputs (standalone mode, the simulator)
//! ```

pub mod autoshift;
mod compile;
mod deps;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod group;
pub mod health;
pub mod host;
mod inputs;
pub mod manifests;
pub mod peer;
mod queries;
pub mod reasons;
pub mod shift;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;
mod zones;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use healthroute_table::{CompiledGroup, RoutingTable, Value};
use jiff::Timestamp;

pub use autoshift::{AutoshiftEvent, AutoshiftInput, NodeInput};
pub use compile::CompileReport;
pub use error::Error;
pub use group::{GroupOutcome, Rejection};
pub use health::{CheckHealth, CheckInput};
pub use healthroute_api::{CheckerView, ObjectKey};
pub use inputs::{EndpointInput, GroupInput, ServiceEndpoints};
pub use shift::{ShiftClock, ShiftInput};
pub use zones::ServedZones;

/// The zone default TTL (SEMANTICS D7).
pub const DEFAULT_TTL: u32 = 60;

/// The incremental compiler. See the module docs for the flow.
#[derive(Debug, Default)]
pub struct Compiler {
    zones: ServedZones,
    default_ttl: u32,
    groups: BTreeMap<ObjectKey, GroupInput>,
    checks: BTreeMap<ObjectKey, CheckInput>,
    shifts: BTreeMap<ObjectKey, ShiftInput>,
    services: BTreeMap<ObjectKey, ServiceEndpoints>,
    heartbeats: HashMap<String, Timestamp>,
    autoshifts: BTreeMap<ObjectKey, AutoshiftInput>,
    nodes: BTreeMap<String, NodeInput>,
    /// The simulator's `--zone-impaired`: a zone every configuration takes as impaired.
    assumed_impaired: Option<String>,

    // Derived state.
    /// The `now` of the last compile: a deadline after it is still to be acted on, even once
    /// the clock has passed it (the compile that acts on it has not run yet).
    compiled_at: Option<Timestamp>,
    check_health: BTreeMap<ObjectKey, CheckHealth>,
    shift_clocks: BTreeMap<ObjectKey, Result<ShiftClock, Error>>,
    outcomes: BTreeMap<ObjectKey, GroupOutcome>,
    /// The last version of each group that compiled, served while a later one is rejected.
    last_good: BTreeMap<ObjectKey, Arc<CompiledGroup<Value>>>,
    /// Which groups read a check, a Service, or another group (alias): who to recompile.
    deps: deps::DepIndex,
    /// Groups by normalised name, for name conflicts.
    names: deps::NameIndex,
    dirty: BTreeSet<ObjectKey>,
    dirty_checks: BTreeSet<ObjectKey>,
    /// Probe checks by request interval: reachability (H7) is per checker and interval.
    intervals: BTreeMap<u32, usize>,
    /// Per checker, the intervals for which it counted as reachable at the last compile; only
    /// a change here re-evaluates the checks it affects (a heartbeat alone changes nothing).
    reachable: HashMap<String, BTreeSet<u32>>,
    table: Arc<RoutingTable<Value>>,
    table_dirty: BTreeSet<ObjectKey>,
    /// Groups whose served version came back from a published table: their status changes.
    recovered: BTreeSet<ObjectKey>,
    /// Each ZonalAutoshift's engine state (AS): its autoshift, its practice runs.
    engines: BTreeMap<ObjectKey, autoshift::Engine>,
    /// An input the engines read changed (a configuration, Nodes, the what-if) since their
    /// last step; group and check changes are read from the compile's report.
    autoshift_dirty: bool,
    /// Whether outcomes carry their decision path ([`GroupOutcome::explain`]).
    explain: bool,
    /// Whether outcomes leave out the per-record status ([`GroupOutcome::records`]).
    no_statuses: bool,
}

impl Compiler {
    pub fn new(zones: ServedZones, default_ttl: u32) -> Self {
        Compiler {
            zones,
            default_ttl,
            ..Default::default()
        }
    }

    /// A compiler whose outcomes carry their decision path, for the simulator; the others
    /// leave it empty (at 10,000 groups the lines would take megabytes nobody reads).
    pub fn explaining(mut self) -> Self {
        self.explain = true;
        self
    }

    /// A compiler whose outcomes leave out the per-record status (standalone mode writes no
    /// status; at 10,000 groups the records' texts take over a megabyte).
    pub fn without_statuses(mut self) -> Self {
        self.no_statuses = true;
        self
    }
}
