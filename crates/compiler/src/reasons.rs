//! The reasons of the `Compiled` condition, and of rejections (SEMANTICS S8): constants, so
//! that the compiler that picks one and the status writer that reports it cannot drift apart.

pub const COMPILED: &str = "Compiled";
pub const INVALID_SPEC: &str = "InvalidSpec";
pub const ZONE_NOT_SERVED: &str = "ZoneNotServed";
pub const NAME_CONFLICT: &str = "NameConflict";
pub const ALIAS_CYCLE: &str = "AliasCycle";
pub const MISSING_TARGET: &str = "MissingTarget";
pub const TYPE_MISMATCH: &str = "TypeMismatch";
pub const NO_PRIMARY: &str = "NoPrimary";
/// Every rejection reason.
pub const ALL: [&str; 7] = [
    INVALID_SPEC,
    ZONE_NOT_SERVED,
    NAME_CONFLICT,
    ALIAS_CYCLE,
    MISSING_TARGET,
    TYPE_MISMATCH,
    NO_PRIMARY,
];
