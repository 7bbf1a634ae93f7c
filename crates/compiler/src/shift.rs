//! The lifecycle of a ZonalShift (SEMANTICS Z1, Z3, Z4) and what it targets.
//!
//! A shift's clock is its start time and its expiry. The expiry counts from the start, or from
//! the latest change of `expiresIn` (Z4); the compiler remembers the clock between compiles
//! (and an operator persists it in the status), so an edit restarts it exactly once.

use jiff::{SignedDuration, Timestamp};
use kube::core::{Selector, SelectorExt};

use healthroute_api::{
    Labels, ShiftState, ShiftTarget, ZonalShiftSpec, ZonalShiftStatus, parse_expires_in,
};

/// A shift as the compiler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShiftInput {
    pub spec: ZonalShiftSpec,
    /// `metadata.creationTimestamp`; the start when the status has none.
    pub created: Option<Timestamp>,
    /// The status last written (start, expiry, the `expiresIn` it counted from, final state).
    pub status: Option<ZonalShiftStatus>,
}

/// Start, expiry, the `expiresIn` the expiry counts from, and whether it was ended for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShiftClock {
    pub start: Timestamp,
    pub expiry: Timestamp,
    pub expires_in: String,
    /// `Expired` or `Canceled` once reached: a shift never comes back.
    pub ended: Option<ShiftState>,
}

impl ShiftClock {
    pub fn state(&self, now: Timestamp) -> ShiftState {
        match self.ended {
            Some(state) => state,
            None if now >= self.expiry => ShiftState::Expired,
            None => ShiftState::Active,
        }
    }
}

/// Advances a shift's clock to `now` (Z3, Z4). `previous` is the clock from the last compile,
/// if any; otherwise the one in the object's status, if any.
pub fn advance_clock(
    shift: &ShiftInput,
    previous: Option<&ShiftClock>,
    now: Timestamp,
) -> Result<ShiftClock, crate::Error> {
    let duration = SignedDuration::from_secs(parse_expires_in(&shift.spec.expires_in)? as i64);
    let recorded = previous.cloned().or_else(|| clock_from_status(shift));
    let mut clock = match recorded {
        None => {
            let start = shift.created.unwrap_or(now);
            ShiftClock {
                start,
                expiry: start + duration,
                expires_in: shift.spec.expires_in.clone(),
                ended: None,
            }
        }
        Some(mut clock) => {
            if clock.expires_in != shift.spec.expires_in && clock.ended.is_none() {
                // Z4: a new expiresIn counts from the change.
                clock.expiry = now + duration;
                clock.expires_in = shift.spec.expires_in.clone();
            }
            clock
        }
    };
    if clock.ended.is_none() {
        if shift.spec.cancel {
            clock.ended = Some(ShiftState::Canceled);
        } else if now >= clock.expiry {
            clock.ended = Some(ShiftState::Expired);
        }
    }
    Ok(clock)
}

fn clock_from_status(shift: &ShiftInput) -> Option<ShiftClock> {
    let status = shift.status.as_ref()?;
    let start = status.start_time.as_ref()?.0;
    let expiry = status.expiry_time.as_ref()?.0;
    Some(ShiftClock {
        start,
        expiry,
        expires_in: status
            .expires_in
            .clone()
            .unwrap_or_else(|| shift.spec.expires_in.clone()),
        ended: match status.status {
            Some(ShiftState::Active) | None => None,
            ended => ended,
        },
    })
}

/// Whether `shift` (in the group's namespace) targets a RecordGroup named `group` with
/// `labels`.
pub fn targets(spec: &ZonalShiftSpec, group: &str, labels: &Labels) -> bool {
    target_matches(&spec.target, group, labels)
}

/// Whether `target` (a ZonalShift's or a ZonalAutoshift's, in the group's namespace) names a
/// RecordGroup named `group` with `labels`.
pub fn target_matches(target: &ShiftTarget, group: &str, labels: &Labels) -> bool {
    if let Some(name) = &target.record_group {
        return name == group;
    }
    match &target.selector {
        Some(selector) => match Selector::try_from(selector.clone()) {
            Ok(sel) => sel.matches(labels),
            Err(_) => false,
        },
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::mk_shift;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    // SEM-Z1 SEM-Z3: active from the start until the expiry, then Expired for good.
    #[test]
    fn expires_after_expires_in() {
        let shift = ShiftInput {
            spec: mk_shift("zone-b", "api", "2h"),
            created: Some(t(0)),
            status: None,
        };
        let c = advance_clock(&shift, None, t(10)).expect("valid");
        assert_eq!(c.start, t(0));
        assert_eq!(c.expiry, t(7200));
        assert_eq!(c.state(t(7199)), ShiftState::Active);
        let later = advance_clock(&shift, Some(&c), t(7200)).expect("valid");
        assert_eq!(later.state(t(7200)), ShiftState::Expired);
        // Extending an expired shift does not revive it.
        let mut extended = shift.clone();
        extended.spec.expires_in = "3h".into();
        let again = advance_clock(&extended, Some(&later), t(7300)).expect("valid");
        assert_eq!(again.state(t(7300)), ShiftState::Expired);
    }

    // SEM-Z4: a new expiresIn counts from the change; cancel ends it and keeps the record.
    #[test]
    fn expiry_changes_count_from_the_change_and_cancel_sticks() {
        let mut shift = ShiftInput {
            spec: mk_shift("zone-b", "api", "1h"),
            created: Some(t(0)),
            status: None,
        };
        let c = advance_clock(&shift, None, t(0)).expect("valid");
        shift.spec.expires_in = "30m".into();
        let c2 = advance_clock(&shift, Some(&c), t(1000)).expect("valid");
        assert_eq!(c2.expiry, t(1000 + 1800));
        // Seen again without a change: the expiry stays.
        let c3 = advance_clock(&shift, Some(&c2), t(1500)).expect("valid");
        assert_eq!(c3.expiry, c2.expiry);
        shift.spec.cancel = true;
        let c4 = advance_clock(&shift, Some(&c3), t(1600)).expect("valid");
        assert_eq!(c4.state(t(1600)), ShiftState::Canceled);
        shift.spec.cancel = false;
        let c5 = advance_clock(&shift, Some(&c4), t(1700)).expect("valid");
        assert_eq!(c5.state(t(1700)), ShiftState::Canceled);
    }

    // SEM-Z3: the clock recorded in the status survives a restart of the compiler.
    #[test]
    fn clock_is_read_back_from_status() {
        let mut shift = ShiftInput {
            spec: mk_shift("zone-b", "api", "1h"),
            created: Some(t(0)),
            status: None,
        };
        shift.status = Some(ZonalShiftStatus {
            status: Some(ShiftState::Active),
            start_time: Some(t(100).into()),
            expiry_time: Some(t(5000).into()),
            expires_in: Some("1h".into()),
            ..Default::default()
        });
        let c = advance_clock(&shift, None, t(200)).expect("valid");
        assert_eq!((c.start, c.expiry), (t(100), t(5000)));
    }

    #[test]
    fn selector_targets_by_label() {
        let mut spec = mk_shift("zone-b", "api", "1h");
        spec.target.record_group = None;
        spec.target.selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("tier".to_string(), "frontend".to_string())].into()),
                ..Default::default()
            },
        );
        let fe: Labels = [("tier".to_string(), "frontend".to_string())].into();
        assert!(targets(&spec, "anything", &fe));
        assert!(!targets(&spec, "anything", &Labels::new()));
    }
}
