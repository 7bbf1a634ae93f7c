//! The autoshift engine (SEMANTICS AS1-AS12): for each ZonalAutoshift, whether an impaired
//! zone is shifted away from, and the practice runs that rehearse it. Pure: every decision is
//! a function of the configuration, what the cluster reports and the `now` it is given.
//!
//! ```text
//!   ZonalAutoshift spec ─▶ settings::Settings (defaults, durations, calendar)
//!   targeted groups' zone health, Nodes, alarms ─▶ detect::detect ─▶ zone verdicts
//!   Engine::step(now):
//!     autoshift:     none ─(one zone impaired)─▶ Active(zone) ─(healthy for holdTime)─▶ none
//!     practice run:  due (schedule) or asked (annotation) ─▶ checks (AS7, AS8) ─▶ Pending
//!                    Pending ─▶ Failed | Interrupted | Succeeded (AS9)
//!   Engine::shifts() ─▶ EngineShift (type Autoshift / PracticeRun) ─▶ the compiler's shift path
//!   Engine::status() ─▶ ZonalAutoshiftStatus;  step's events ─▶ logs, metrics, Events
//! ```
//!
//! The engine holds the state between compiles (the autoshift in force, the running run, the
//! outcomes, the last request answered); it starts from the object's status, so an operator
//! that restarts picks up where the last one stopped. The compiler (`compile.rs`) runs a step
//! after the groups compiled, and compiles the targeted groups again when the shifts change.

pub mod detect;
pub mod schedule;
pub mod settings;

use std::collections::BTreeMap;
use std::fmt;

use healthroute_api::{
    AutoshiftState, NotStartedReason, OUTCOMES_KEPT, ObjectKey, PracticeRunNotStarted,
    PracticeRunOutcome, PracticeRunRecord, PracticeRunRequest, RequestAction, RunningPracticeRun,
    ShiftType, ZonalAutoshift, ZonalAutoshiftSpec, ZonalAutoshiftStatus, ZoneDetection,
    format_duration,
};
use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use detect::{GroupZoneHealth, NodeCount, Verdict};
use settings::{PracticeSettings, Settings};

pub use settings::InvalidConfiguration;

/// A ZonalAutoshift as the compiler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoshiftInput {
    pub spec: ZonalAutoshiftSpec,
    /// `metadata.creationTimestamp`: the first run is one cadence after it (AS6).
    pub created: Option<Timestamp>,
    /// The on-demand request of its annotations (AS10), or why they hold none that reads.
    pub request: Result<Option<PracticeRunRequest>, String>,
    /// The status last written: the engine starts from it.
    pub status: Option<ZonalAutoshiftStatus>,
}

impl AutoshiftInput {
    pub fn from_object(object: &ZonalAutoshift) -> AutoshiftInput {
        AutoshiftInput {
            spec: object.spec.clone(),
            created: object.metadata.creation_timestamp.as_ref().map(|t| t.0),
            request: PracticeRunRequest::from_annotations(object.annotations()),
            status: object.status.clone(),
        }
    }
}

/// A Node as detection sees it (AS3 c).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInput {
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    /// Its `Ready` condition is True.
    pub ready: bool,
}

/// A shift the engine holds, applied by the compiler as a ZonalShift of its type (AS5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineShift {
    /// `<config>:autoshift` or `<config>:practice-run`, in the configuration's namespace: a
    /// name no object can have, so it never meets a ZonalShift's.
    pub key: ObjectKey,
    pub shift_type: ShiftType,
    pub away_from: String,
    pub start: Timestamp,
    /// A practice run's planned end.
    pub end: Option<Timestamp>,
}

/// What a step did that people should hear of: logs, metrics, Events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AutoshiftEvent {
    AutoshiftStarted {
        config: ObjectKey,
        zone: String,
        message: String,
    },
    AutoshiftEnded {
        config: ObjectKey,
        zone: String,
        message: String,
    },
    PracticeRunStarted {
        config: ObjectKey,
        zone: String,
        requested: bool,
        end: Timestamp,
    },
    /// A run ended, or (CapacityCheckFailed) an attempt found too little capacity.
    PracticeRunEnded {
        config: ObjectKey,
        zone: String,
        outcome: PracticeRunOutcome,
        message: String,
    },
    PracticeRunNotStarted {
        config: ObjectKey,
        reason: NotStartedReason,
        message: String,
        request: Option<String>,
    },
}

impl fmt::Display for AutoshiftEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AutoshiftEvent::AutoshiftStarted {
                config,
                zone,
                message,
            } => write!(f, "{config}: autoshift away from {zone} started: {message}"),
            AutoshiftEvent::AutoshiftEnded {
                config,
                zone,
                message,
            } => write!(f, "{config}: autoshift away from {zone} ended: {message}"),
            AutoshiftEvent::PracticeRunStarted {
                config,
                zone,
                requested,
                end,
            } => write!(
                f,
                "{config}: practice run away from {zone} started ({}), until {end}",
                if *requested { "requested" } else { "scheduled" }
            ),
            AutoshiftEvent::PracticeRunEnded {
                config,
                zone,
                outcome,
                message,
            } => write!(
                f,
                "{config}: practice run away from {zone}: {}: {message}",
                outcome.as_str()
            ),
            AutoshiftEvent::PracticeRunNotStarted {
                config,
                reason,
                message,
                request,
            } => write!(
                f,
                "{config}: practice run{} not started ({}): {message}",
                request
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default(),
                reason.as_str()
            ),
        }
    }
}

/// What the engine reads of the world at one step, besides its configuration.
pub struct Observation<'a> {
    /// The targeted groups that compiled, with their zone health (AS2).
    pub groups: Vec<(&'a ObjectKey, &'a GroupZoneHealth)>,
    pub nodes: &'a BTreeMap<String, NodeCount>,
    /// A HealthCheck of the namespace by name: `Some(true)` in ALARM (unhealthy), `Some(false)`
    /// not, `None` no such check.
    pub alarm: &'a dyn Fn(&str) -> Option<bool>,
    /// An active customer shift that targets one of the groups.
    pub customer_shift: Option<ObjectKey>,
    /// Another configuration's autoshift in force on one of the groups.
    pub other_autoshift: Option<ObjectKey>,
    /// A zone taken as impaired by every signal (the simulator's `--zone-impaired`).
    pub assumed_impaired: Option<&'a str>,
}

#[derive(Clone, Debug, PartialEq)]
struct Autoshift {
    zone: String,
    start: Timestamp,
    healthy_since: Option<Timestamp>,
}

/// One configuration's state between compiles.
#[derive(Clone, Debug, PartialEq)]
pub struct Engine {
    /// When the compiler first saw it: the first run's anchor without a creation time.
    first_seen: Timestamp,
    autoshift: Option<Autoshift>,
    autoshift_end: Option<Timestamp>,
    message: String,
    zones: Vec<ZoneDetection>,
    practice: Option<RunningPracticeRun>,
    /// Newest first; a running run's `Pending` record heads it.
    outcomes: Vec<PracticeRunRecord>,
    next_run: Option<Timestamp>,
    not_started: Option<PracticeRunNotStarted>,
    last_request: Option<String>,
    /// Why the configuration cannot be read, when it cannot.
    error: Option<InvalidConfiguration>,
    /// When the outputs change with no input changing.
    wake: Option<Timestamp>,
}

/// The name of a configuration's shift of `shift_type`.
fn shift_key(config: &ObjectKey, shift_type: ShiftType) -> ObjectKey {
    let suffix = match shift_type {
        ShiftType::Autoshift => "autoshift",
        _ => "practice-run",
    };
    config.sibling(&format!("{}:{suffix}", config.name))
}

impl Engine {
    /// A configuration's engine, from its last status when it has one.
    pub fn new(input: &AutoshiftInput, now: Timestamp) -> Engine {
        let st = input.status.clone().unwrap_or_default();
        let autoshift = match (st.autoshift, &st.active_zone, &st.autoshift_start_time) {
            (Some(AutoshiftState::Active), Some(zone), Some(start)) => Some(Autoshift {
                zone: zone.clone(),
                start: start.0,
                healthy_since: st.healthy_since.as_ref().map(|t| t.0),
            }),
            _ => None,
        };
        let mut outcomes = st.outcomes.clone();
        if st.practice_run.is_none() {
            // A Pending record whose run the status no longer holds ended unseen.
            outcomes.retain(|o| o.outcome != PracticeRunOutcome::Pending);
        }
        Engine {
            first_seen: now,
            autoshift,
            autoshift_end: st.autoshift_end_time.map(|t| t.0),
            message: st.message.unwrap_or_default(),
            zones: st.zones,
            practice: st.practice_run,
            outcomes,
            next_run: st.next_practice_run.map(|t| t.0),
            not_started: st.not_started,
            last_request: st.last_request,
            error: None,
            wake: None,
        }
    }

    /// The shifts this configuration holds now.
    pub fn shifts(&self, config: &ObjectKey) -> Vec<EngineShift> {
        let mut out = Vec::new();
        if let Some(a) = &self.autoshift {
            out.push(EngineShift {
                key: shift_key(config, ShiftType::Autoshift),
                shift_type: ShiftType::Autoshift,
                away_from: a.zone.clone(),
                start: a.start,
                end: None,
            });
        }
        if let Some(p) = &self.practice {
            out.push(EngineShift {
                key: shift_key(config, ShiftType::PracticeRun),
                shift_type: ShiftType::PracticeRun,
                away_from: p.zone.clone(),
                start: p.start_time.0,
                end: Some(p.end_time.0),
            });
        }
        out
    }

    /// Whether an autoshift is in force.
    pub fn autoshift_zone(&self) -> Option<&str> {
        self.autoshift.as_ref().map(|a| a.zone.as_str())
    }

    /// When the outputs change next with no input changing: a hold time's end, a run's end,
    /// the next run (AS12).
    pub fn wake(&self) -> Option<Timestamp> {
        self.wake
    }

    /// The status as data (the conditions and the shifts' groups are the caller's).
    pub fn status(&self) -> ZonalAutoshiftStatus {
        let message = match &self.error {
            Some(e) => format!("the configuration cannot be used: {e}"),
            None => self.message.clone(),
        };
        ZonalAutoshiftStatus {
            autoshift: Some(if self.autoshift.is_some() {
                AutoshiftState::Active
            } else {
                AutoshiftState::Inactive
            }),
            active_zone: self.autoshift.as_ref().map(|a| a.zone.clone()),
            autoshift_start_time: self.autoshift.as_ref().map(|a| a.start.into()),
            autoshift_end_time: self.autoshift_end.map(Into::into),
            healthy_since: self
                .autoshift
                .as_ref()
                .and_then(|a| a.healthy_since)
                .map(Into::into),
            message: (!message.is_empty()).then_some(message),
            zones: self.zones.clone(),
            practice_run: self.practice.clone(),
            outcomes: self.outcomes.clone(),
            next_practice_run: self.next_run.map(Into::into),
            not_started: self.not_started.clone(),
            last_request: self.last_request.clone(),
            ..Default::default()
        }
    }

    /// Why the configuration cannot be used, if it cannot: the message.
    pub fn error(&self) -> Option<&str> {
        self.error.as_ref().map(|e| e.message.as_str())
    }

    /// Why the configuration cannot be used, if it cannot: the reason and the message.
    pub fn invalid(&self) -> Option<&InvalidConfiguration> {
        self.error.as_ref()
    }

    /// Brings the state to `now` (AS3-AS10) and returns what happened.
    pub fn step(
        &mut self,
        config: &ObjectKey,
        input: &AutoshiftInput,
        obs: &Observation<'_>,
        now: Timestamp,
    ) -> Vec<AutoshiftEvent> {
        let mut events = Vec::new();
        let settings = match Settings::parse(&input.spec) {
            Ok(s) => s,
            Err(e) => {
                // An unreadable configuration holds nothing (AS1), and what it ends says why.
                let why = format!("the configuration cannot be used: {e}");
                self.end_autoshift(config, now, &why, &mut events);
                self.end_run(
                    config,
                    now,
                    PracticeRunOutcome::Interrupted,
                    why,
                    &mut events,
                );
                self.error = Some(e);
                self.zones.clear();
                self.next_run = None;
                self.wake = None;
                return events;
            }
        };
        self.error = None;

        let healths: Vec<&GroupZoneHealth> = obs.groups.iter().map(|(_, h)| *h).collect();
        let alarms: Vec<(String, String, Option<bool>)> = settings
            .zone_alarms
            .iter()
            .map(|(zone, check)| (zone.clone(), check.clone(), (obs.alarm)(check)))
            .collect();
        let verdicts = detect::detect(
            &healths,
            obs.nodes,
            &alarms,
            obs.assumed_impaired,
            &settings.thresholds,
        );
        self.zones = verdicts.iter().map(|v| v.detection.clone()).collect();
        self.step_autoshift(config, &settings, &verdicts, now, &mut events);
        self.step_practice(config, input, &settings, &verdicts, obs, now, &mut events);

        self.next_run = settings
            .practice
            .as_ref()
            .and_then(|p| self.next_run_at(input, p, now));
        let hold_end = self
            .autoshift
            .as_ref()
            .and_then(|a| a.healthy_since)
            .map(|since| since + settings.hold);
        let run_end = self.practice.as_ref().map(|p| p.end_time.0);
        self.wake = [hold_end, run_end, self.next_run]
            .into_iter()
            .flatten()
            .filter(|t| *t > now)
            .min();
        events
    }

    /// AS4: start when exactly one zone is impaired; end after the hold time of health, or when
    /// disabled.
    fn step_autoshift(
        &mut self,
        config: &ObjectKey,
        settings: &Settings,
        verdicts: &[Verdict],
        now: Timestamp,
        events: &mut Vec<AutoshiftEvent>,
    ) {
        if !settings.enabled {
            self.end_autoshift(config, now, "autoshift is Disabled", events);
            self.message = "autoshift is Disabled".into();
            return;
        }
        if let Some(a) = &mut self.autoshift {
            let verdict = verdicts.iter().find(|v| v.detection.zone == a.zone);
            if verdict.is_some_and(|v| v.own_signal) {
                a.healthy_since = None;
                self.message = format!(
                    "{} is impaired: {}",
                    a.zone,
                    verdict
                        .and_then(|v| v.detection.reason.clone())
                        .unwrap_or_default()
                );
                return;
            }
            let since = *a.healthy_since.get_or_insert(now);
            let back = since + settings.hold;
            if now < back {
                self.message = format!(
                    "{} healthy again since {since}: traffic returns at {back} unless it fails first",
                    a.zone
                );
                return;
            }
            let message = format!(
                "{} has been healthy since {since} ({} hold time)",
                a.zone, settings.hold_written
            );
            self.end_autoshift(config, now, &message, events);
            // Another zone impaired meanwhile may be shifted away from now (below).
        }
        let impaired: Vec<&Verdict> = verdicts.iter().filter(|v| v.detection.impaired).collect();
        match impaired.as_slice() {
            [] => self.message = "no zone is impaired".into(),
            [one] => {
                let message = format!(
                    "{} is impaired: {}",
                    one.detection.zone,
                    one.detection.reason.clone().unwrap_or_default()
                );
                self.autoshift = Some(Autoshift {
                    zone: one.detection.zone.clone(),
                    start: now,
                    healthy_since: None,
                });
                events.push(AutoshiftEvent::AutoshiftStarted {
                    config: config.clone(),
                    zone: one.detection.zone.clone(),
                    message: message.clone(),
                });
                self.message = message;
            }
            several => {
                let names: Vec<&str> = several.iter().map(|v| v.detection.zone.as_str()).collect();
                self.message = format!(
                    "{} are impaired at the same time: no autoshift (not the failure of one zone)",
                    names.join(", ")
                );
            }
        }
    }

    fn end_autoshift(
        &mut self,
        config: &ObjectKey,
        now: Timestamp,
        message: &str,
        events: &mut Vec<AutoshiftEvent>,
    ) {
        if let Some(a) = self.autoshift.take() {
            self.autoshift_end = Some(now);
            events.push(AutoshiftEvent::AutoshiftEnded {
                config: config.clone(),
                zone: a.zone,
                message: message.to_owned(),
            });
        }
    }

    /// AS6-AS10: end the running run when something ends it, else start one when due or asked.
    #[allow(clippy::too_many_arguments)]
    fn step_practice(
        &mut self,
        config: &ObjectKey,
        input: &AutoshiftInput,
        settings: &Settings,
        verdicts: &[Verdict],
        obs: &Observation<'_>,
        now: Timestamp,
        events: &mut Vec<AutoshiftEvent>,
    ) {
        // A request is answered once: whatever it asks, it is taken now.
        let request = match &input.request {
            Ok(Some(r)) if self.last_request.as_deref() != Some(r.value.as_str()) => {
                self.last_request = Some(r.value.clone());
                Some(r.clone())
            }
            Ok(_) => None,
            Err(e) => {
                let value = format!("invalid: {e}");
                if self.last_request.as_deref() != Some(value.as_str()) {
                    self.last_request = Some(value);
                    self.refuse(
                        config,
                        now,
                        (NotStartedReason::InvalidRequest, e.clone()),
                        None,
                        events,
                    );
                }
                None
            }
        };

        if self.practice.is_some() {
            if let Some((outcome, message)) = self.run_ends(settings, &request, obs, now) {
                self.end_run(config, now, outcome, message, events);
            } else if let Some(r) = request.filter(|r| r.action == RequestAction::Start) {
                self.refuse(
                    config,
                    now,
                    (
                        NotStartedReason::AlreadyRunning,
                        "a practice run is running already".into(),
                    ),
                    Some(r.value),
                    events,
                );
            }
            return;
        }
        match request {
            Some(r) if r.action == RequestAction::Start => {
                self.try_start(config, settings, verdicts, obs, now, Some(r), events);
            }
            // Nothing runs: a cancel has nothing to end.
            Some(_) => {}
            None => {
                let due = settings
                    .practice
                    .as_ref()
                    .and_then(|p| self.next_run_at(input, p, now))
                    .is_some_and(|t| t <= now);
                if due {
                    self.try_start(config, settings, verdicts, obs, now, None, events);
                }
            }
        }
    }

    /// Whether the running run ends now, and how (AS9).
    fn run_ends(
        &self,
        settings: &Settings,
        request: &Option<PracticeRunRequest>,
        obs: &Observation<'_>,
        now: Timestamp,
    ) -> Option<(PracticeRunOutcome, String)> {
        let run = self.practice.as_ref()?;
        use PracticeRunOutcome::{Failed, Interrupted, Succeeded};
        if let Some(r) = request
            .as_ref()
            .filter(|r| r.action == RequestAction::Cancel)
        {
            return Some((Interrupted, format!("cancelled ({})", r.value)));
        }
        let Some(p) = &settings.practice else {
            return Some((
                Interrupted,
                "the practice run configuration was removed".into(),
            ));
        };
        for alarm in &p.outcome_alarms {
            match (obs.alarm)(alarm) {
                Some(true) => return Some((Failed, format!("outcome alarm {alarm} is in ALARM"))),
                Some(false) => {}
                None => {
                    return Some((
                        Interrupted,
                        format!("outcome alarm {alarm} names no HealthCheck: inconclusive"),
                    ));
                }
            }
        }
        for alarm in &p.blocking_alarms {
            if (obs.alarm)(alarm) == Some(true) {
                return Some((Interrupted, format!("blocking alarm {alarm} is in ALARM")));
            }
        }
        if let Some(a) = &self.autoshift {
            return Some((
                Interrupted,
                format!("an autoshift away from {} started", a.zone),
            ));
        }
        if let Some(k) = &obs.other_autoshift {
            return Some((
                Interrupted,
                format!("autoshift {k} applies to a targeted group"),
            ));
        }
        if let Some(k) = &obs.customer_shift {
            return Some((
                Interrupted,
                format!("zonal shift {k} is active for a targeted group"),
            ));
        }
        if now >= run.end_time.0 {
            return Some((
                Succeeded,
                format!(
                    "ran {} with no outcome alarm in ALARM",
                    format_duration(run.end_time.0.duration_since(run.start_time.0))
                ),
            ));
        }
        None
    }

    fn end_run(
        &mut self,
        config: &ObjectKey,
        now: Timestamp,
        outcome: PracticeRunOutcome,
        message: String,
        events: &mut Vec<AutoshiftEvent>,
    ) {
        let Some(run) = self.practice.take() else {
            return;
        };
        let end = if outcome == PracticeRunOutcome::Succeeded {
            run.end_time.clone()
        } else {
            now.into()
        };
        let record = PracticeRunRecord {
            zone: run.zone.clone(),
            start_time: run.start_time.clone(),
            end_time: Some(end),
            outcome,
            message: Some(message.clone()),
            requested: run.requested,
        };
        match self.outcomes.first_mut() {
            Some(head)
                if head.outcome == PracticeRunOutcome::Pending
                    && head.start_time == run.start_time =>
            {
                *head = record
            }
            _ => self.record(record),
        }
        events.push(AutoshiftEvent::PracticeRunEnded {
            config: config.clone(),
            zone: run.zone,
            outcome,
            message,
        });
    }

    fn record(&mut self, record: PracticeRunRecord) {
        self.outcomes.insert(0, record);
        self.outcomes.truncate(OUTCOMES_KEPT);
    }

    /// Says why a run did not start. A due run that keeps waiting for the same reason says it
    /// once; every request is answered.
    fn refuse(
        &mut self,
        config: &ObjectKey,
        now: Timestamp,
        (reason, message): (NotStartedReason, String),
        request: Option<String>,
        events: &mut Vec<AutoshiftEvent>,
    ) {
        let same = self.not_started.as_ref().is_some_and(|n| {
            request.is_none() && n.request.is_none() && n.reason == reason && n.message == message
        });
        if same {
            return;
        }
        self.not_started = Some(PracticeRunNotStarted {
            time: now.into(),
            reason,
            message: message.clone(),
            request: request.clone(),
        });
        events.push(AutoshiftEvent::PracticeRunNotStarted {
            config: config.clone(),
            reason,
            message,
            request,
        });
    }

    /// AS7, AS8: start a run now unless something holds it back.
    #[allow(clippy::too_many_arguments)]
    fn try_start(
        &mut self,
        config: &ObjectKey,
        settings: &Settings,
        verdicts: &[Verdict],
        obs: &Observation<'_>,
        now: Timestamp,
        request: Option<PracticeRunRequest>,
        events: &mut Vec<AutoshiftEvent>,
    ) {
        let asked = request.as_ref().map(|r| r.value.clone());
        let Some(p) = &settings.practice else {
            self.refuse(
                config,
                now,
                (
                    NotStartedReason::NoPracticeRunConfiguration,
                    "the configuration has no practiceRun".into(),
                ),
                asked,
                events,
            );
            return;
        };
        let zone = match self.hold_back(p, obs, now).and_then(|()| {
            self.choose_zone(verdicts, request.as_ref().and_then(|r| r.zone.as_deref()))
        }) {
            Ok(zone) => zone,
            Err(why) => {
                self.refuse(config, now, why, asked, events);
                return;
            }
        };
        let requested = request.is_some();
        if let Err(message) =
            detect::capacity_check(&obs.groups, &zone, p.minimum_remaining_capacity_percent)
        {
            self.not_started = None;
            self.record(PracticeRunRecord {
                zone: zone.clone(),
                start_time: now.into(),
                end_time: Some(now.into()),
                outcome: PracticeRunOutcome::CapacityCheckFailed,
                message: Some(message.clone()),
                requested,
            });
            events.push(AutoshiftEvent::PracticeRunEnded {
                config: config.clone(),
                zone,
                outcome: PracticeRunOutcome::CapacityCheckFailed,
                message,
            });
            return;
        }
        let end = now + p.duration;
        self.not_started = None;
        self.practice = Some(RunningPracticeRun {
            zone: zone.clone(),
            start_time: now.into(),
            end_time: end.into(),
            requested,
        });
        self.record(PracticeRunRecord {
            zone: zone.clone(),
            start_time: now.into(),
            end_time: None,
            outcome: PracticeRunOutcome::Pending,
            message: None,
            requested,
        });
        events.push(AutoshiftEvent::PracticeRunStarted {
            config: config.clone(),
            zone,
            requested,
            end,
        });
    }

    /// What keeps a run from starting now (AS7), the zone aside.
    fn hold_back(
        &self,
        p: &PracticeSettings,
        obs: &Observation<'_>,
        now: Timestamp,
    ) -> Result<(), (NotStartedReason, String)> {
        p.calendar.check(now, p.duration)?;
        for (alarms, kind, reason) in [
            (
                &p.blocking_alarms,
                "blocking",
                NotStartedReason::BlockingAlarm,
            ),
            (&p.outcome_alarms, "outcome", NotStartedReason::OutcomeAlarm),
        ] {
            for alarm in alarms {
                match (obs.alarm)(alarm) {
                    Some(true) => {
                        return Err((reason, format!("{kind} alarm {alarm} is in ALARM")));
                    }
                    Some(false) => {}
                    None => {
                        return Err((
                            NotStartedReason::AlarmMissing,
                            format!("{kind} alarm {alarm} names no HealthCheck"),
                        ));
                    }
                }
            }
        }
        if let Some(a) = &self.autoshift {
            return Err((
                NotStartedReason::AutoshiftActive,
                format!("an autoshift away from {} is in force", a.zone),
            ));
        }
        if let Some(k) = &obs.other_autoshift {
            return Err((
                NotStartedReason::AutoshiftActive,
                format!("autoshift {k} applies to a targeted group"),
            ));
        }
        if let Some(k) = &obs.customer_shift {
            return Err((
                NotStartedReason::CustomerShiftActive,
                format!("zonal shift {k} is active for a targeted group"),
            ));
        }
        Ok(())
    }

    /// The zone asked for, or the next in rotation after the last attempt's (AS6).
    fn choose_zone(
        &self,
        verdicts: &[Verdict],
        asked: Option<&str>,
    ) -> Result<String, (NotStartedReason, String)> {
        let zones: Vec<&str> = verdicts
            .iter()
            .filter(|v| v.detection.values > 0)
            .map(|v| v.detection.zone.as_str())
            .collect();
        if let Some(z) = asked {
            return if zones.contains(&z) {
                Ok(z.to_owned())
            } else {
                Err((
                    NotStartedReason::NoZone,
                    format!(
                        "no targeted value lies in {z} (zones: {})",
                        if zones.is_empty() {
                            "none".to_owned()
                        } else {
                            zones.join(", ")
                        }
                    ),
                ))
            };
        }
        let last = self.outcomes.first().map(|o| o.zone.as_str());
        zones
            .iter()
            .find(|z| last.is_none_or(|l| **z > l))
            .or(zones.first())
            .map(|z| (*z).to_owned())
            .ok_or((
                NotStartedReason::NoZone,
                "no targeted value lies in a zone".into(),
            ))
    }

    /// When the next scheduled run may start (AS6): one cadence after the last attempt (an
    /// hour after a failed capacity check), or after the configuration appeared; then the
    /// first time the calendar allows at or after that and `now`.
    fn next_run_at(
        &self,
        input: &AutoshiftInput,
        p: &PracticeSettings,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let due = match self.outcomes.first() {
            Some(o) if o.outcome == PracticeRunOutcome::CapacityCheckFailed => {
                o.start_time.0 + p.cadence.min(SignedDuration::from_hours(1))
            }
            Some(o) => o.start_time.0 + p.cadence,
            None => input.created.unwrap_or(self.first_seen) + p.cadence,
        };
        let due = match &self.practice {
            Some(run) => due.max(run.end_time.0),
            None => due,
        };
        p.calendar.first_fit(due.max(now), p.duration)
    }
}
