//! When a practice run may run (SEMANTICS AS6, AS7): weekly UTC windows, blocked dates, and
//! the first time at or after a given one that a whole run fits. Plain arithmetic on seconds
//! since the epoch, so that tests drive it with any clock.
//!
//! A run `[start, start + duration)` fits when it lies inside one allowed window (when any is
//! given), overlaps no blocked window and touches no blocked date. The earliest fit at or after
//! a time is that time, or a moment where a bar lifts: an allowed window opens, a blocked window
//! closes, a day begins; [`Calendar::first_fit`] steps from one such moment to the next.

use std::collections::BTreeSet;

use healthroute_api::{InvalidConfigurationReason, NotStartedReason};
use jiff::{SignedDuration, Timestamp};

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
/// How far ahead a fit is looked for: a year of blocked dates and windows, and some.
const HORIZON: i64 = 400 * DAY;

/// A weekly window in UTC: its start as seconds after Monday 00:00, and its length. A window
/// whose end comes before its start runs over the week's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    start: i64,
    len: i64,
}

impl Window {
    /// Reads `Mon:10:00-Mon:10:30`.
    pub fn parse(raw: &str) -> Result<Window, String> {
        let bad = || format!("{raw:?} is not a window such as Mon:10:00-Mon:10:30");
        let (from, to) = raw.split_once('-').ok_or_else(bad)?;
        let at = |s: &str| -> Option<i64> {
            let mut parts = s.split(':');
            let name = parts.next()?;
            let day = DAYS.iter().position(|d| *d == name)? as i64;
            let hour: i64 = parts.next().filter(|p| p.len() == 2)?.parse().ok()?;
            let minute: i64 = parts.next().filter(|p| p.len() == 2)?.parse().ok()?;
            (parts.next().is_none() && hour < 24 && minute < 60)
                .then_some(day * DAY + hour * 3600 + minute * 60)
        };
        let (start, end) = (at(from).ok_or_else(bad)?, at(to).ok_or_else(bad)?);
        if start == end {
            return Err(format!("{raw:?} is empty: its end is its start"));
        }
        Ok(Window {
            start,
            len: (end - start).rem_euclid(WEEK),
        })
    }

    /// The window's occurrences that may touch `[from, to)` (to - from under a week), as
    /// `(start, end)` in seconds since the epoch.
    fn around(self, from: i64, to: i64) -> impl Iterator<Item = (i64, i64)> {
        let first = week_start(from) - WEEK;
        (0..=((to - first) / WEEK + 1))
            .map(move |w| first + w * WEEK + self.start)
            .map(move |s| (s, s + self.len))
    }

    /// The first start of this window after `t`.
    fn next_start(self, t: i64) -> i64 {
        let s = week_start(t) + self.start;
        if s > t { s } else { s + WEEK }
    }

    /// The first end of this window after `t`.
    fn next_end(self, t: i64) -> i64 {
        let mut e = week_start(t) + self.start + self.len - WEEK;
        while e <= t {
            e += WEEK;
        }
        e
    }
}

/// Monday 00:00 UTC of the week holding `t` (1970-01-01 was a Thursday).
fn week_start(t: i64) -> i64 {
    let day = t.div_euclid(DAY);
    let weekday = (day + 3).rem_euclid(7);
    (day - weekday) * DAY
}

/// The practice runs' calendar: blocked dates (as days since the epoch), blocked and allowed
/// windows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calendar {
    pub blocked_dates: BTreeSet<i64>,
    pub blocked: Vec<(Window, String)>,
    pub allowed: Vec<(Window, String)>,
}

impl Calendar {
    /// Reads the configuration's dates and windows; the error names the first bad one.
    pub fn parse(
        dates: &[String],
        blocked: &[String],
        allowed: &[String],
    ) -> Result<Self, (InvalidConfigurationReason, String)> {
        use InvalidConfigurationReason::{BadDate, BadWindow};
        let mut cal = Calendar::default();
        for d in dates {
            let date: jiff::civil::Date = d
                .parse()
                .map_err(|e| (BadDate, format!("blocked date {d:?} is not a date: {e}")))?;
            let midnight = date
                .to_zoned(jiff::tz::TimeZone::UTC)
                .map_err(|e| (BadDate, format!("blocked date {d:?}: {e}")))?
                .timestamp()
                .as_second();
            cal.blocked_dates.insert(midnight.div_euclid(DAY));
        }
        for (windows, into) in [(blocked, &mut cal.blocked), (allowed, &mut cal.allowed)] {
            for w in windows {
                into.push((Window::parse(w).map_err(|e| (BadWindow, e))?, w.clone()));
            }
        }
        Ok(cal)
    }

    /// Whether a run from `start` for `duration` fits; if not, why (AS7's reasons).
    pub fn check(
        &self,
        start: Timestamp,
        duration: SignedDuration,
    ) -> Result<(), (NotStartedReason, String)> {
        let s = start.as_second();
        let e = s + duration.as_secs().max(1);
        for day in s.div_euclid(DAY)..=(e - 1).div_euclid(DAY) {
            if self.blocked_dates.contains(&day) {
                return Err((
                    NotStartedReason::BlockedDate,
                    format!("the run would fall on blocked date {}", date_of(day)),
                ));
            }
        }
        for (w, raw) in &self.blocked {
            if w.around(s, e).any(|(os, oe)| os < e && s < oe) {
                return Err((
                    NotStartedReason::BlockedWindow,
                    format!("the run would overlap blocked window {raw}"),
                ));
            }
        }
        if !self.allowed.is_empty()
            && !self
                .allowed
                .iter()
                .any(|(w, _)| w.around(s, e).any(|(os, oe)| os <= s && e <= oe))
        {
            let names: Vec<&str> = self.allowed.iter().map(|(_, r)| r.as_str()).collect();
            return Err((
                NotStartedReason::OutsideAllowedWindows,
                format!(
                    "the run would not lie inside an allowed window ({})",
                    names.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The first time at or after `from` at which a run of `duration` fits, within a year or
    /// so; `None` when none does (every day blocked, say).
    pub fn first_fit(&self, from: Timestamp, duration: SignedDuration) -> Option<Timestamp> {
        let mut t = from.as_second();
        let limit = t + HORIZON;
        // Sub-second precision is dropped once a bar lifts: bars lift on whole minutes.
        let mut at = from;
        while t <= limit {
            if self.check(at, duration).is_ok() {
                return Some(at);
            }
            let midnight = (t.div_euclid(DAY) + 1) * DAY;
            let opens = self.allowed.iter().map(|(w, _)| w.next_start(t));
            let closes = self.blocked.iter().map(|(w, _)| w.next_end(t));
            t = opens.chain(closes).fold(midnight, i64::min);
            at = Timestamp::from_second(t).ok()?;
        }
        None
    }
}

/// `YYYY-MM-DD` of a day since the epoch.
fn date_of(day: i64) -> String {
    Timestamp::from_second(day * DAY)
        .map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).date().to_string())
        .unwrap_or_else(|_| day.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UTC time written as RFC 3339.
    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    fn mins(m: i64) -> SignedDuration {
        SignedDuration::from_mins(m)
    }

    fn cal(dates: &[&str], blocked: &[&str], allowed: &[&str]) -> Calendar {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Calendar::parse(&v(dates), &v(blocked), &v(allowed)).expect("valid")
    }

    // SEM-AS1: windows are Ddd:HH:MM-Ddd:HH:MM, may run over the week's end, and are never
    // empty; dates must exist.
    #[test]
    fn windows_and_dates_read_as_written() {
        assert_eq!(
            Window::parse("Mon:10:00-Mon:10:30"),
            Ok(Window {
                start: 36_000,
                len: 1800
            })
        );
        assert_eq!(
            Window::parse("Sun:23:00-Mon:01:00").map(|w| w.len),
            Ok(7200)
        );
        for bad in [
            "Mon:10:00",
            "mon:10:00-mon:11:00",
            "Mon:24:00-Tue:00:00",
            "Mon:10:0-Mon:11:00",
            "Mon:10:00-Mon:10:00",
            "Mon:10:00:00-Mon:11:00",
        ] {
            assert!(Window::parse(bad).is_err(), "{bad}");
        }
        let (reason, e) =
            Calendar::parse(&["2026-02-30".into()], &[], &[]).expect_err("no such day");
        assert_eq!(reason, InvalidConfigurationReason::BadDate);
        assert!(e.contains("2026-02-30"), "{e}");
    }

    // SEM-AS6 SEM-AS7: a run fits only when all of it keeps out of blocked windows and dates
    // and lies inside an allowed window; the reason names the bar.
    #[test]
    fn a_run_fits_only_where_the_calendar_allows_it() {
        // 2026-11-30 is a Monday.
        let c = cal(&["2026-12-02"], &["Mon:10:00-Mon:10:30"], &[]);
        assert_eq!(c.check(at("2026-11-30T09:00:00Z"), mins(30)), Ok(()));
        let overlaps = c.check(at("2026-11-30T09:45:00Z"), mins(30));
        assert_eq!(
            overlaps.map_err(|e| e.0),
            Err(NotStartedReason::BlockedWindow)
        );
        assert_eq!(c.check(at("2026-11-30T09:30:00Z"), mins(30)), Ok(()));
        assert_eq!(c.check(at("2026-11-30T10:30:00Z"), mins(30)), Ok(()));
        // A week later, the same window.
        assert!(c.check(at("2026-12-07T10:10:00Z"), mins(5)).is_err());
        // Running into a blocked date from the day before.
        let e = c
            .check(at("2026-12-01T23:50:00Z"), mins(30))
            .expect_err("date");
        assert_eq!(e.0, NotStartedReason::BlockedDate);
        assert!(e.1.contains("2026-12-02"), "{}", e.1);

        let c = cal(&[], &[], &["Sun:22:00-Mon:02:00"]);
        assert_eq!(c.check(at("2026-11-29T23:00:00Z"), mins(30)), Ok(()));
        assert_eq!(c.check(at("2026-11-30T01:30:00Z"), mins(30)), Ok(()));
        assert_eq!(
            c.check(at("2026-11-30T01:45:00Z"), mins(30))
                .map_err(|e| e.0),
            Err(NotStartedReason::OutsideAllowedWindows)
        );
    }

    // SEM-AS6: the first fit is the time itself, or where a bar lifts.
    #[test]
    fn the_first_fit_steps_to_where_a_bar_lifts() {
        let c = cal(&["2026-12-01"], &["Mon:10:00-Mon:10:30"], &[]);
        let from = at("2026-11-30T09:50:00Z");
        assert_eq!(
            c.first_fit(from, mins(30)),
            Some(at("2026-11-30T10:30:00Z"))
        );
        let from = at("2026-11-30T23:50:00Z");
        assert_eq!(
            c.first_fit(from, mins(30)),
            Some(at("2026-12-02T00:00:00Z"))
        );

        let c = cal(&[], &[], &["Wed:09:00-Wed:17:00", "Fri:09:00-Fri:10:00"]);
        assert_eq!(
            c.first_fit(at("2026-11-30T12:00:00Z"), mins(30)),
            Some(at("2026-12-02T09:00:00Z"))
        );
        assert_eq!(
            c.first_fit(at("2026-12-02T16:45:00Z"), mins(30)),
            Some(at("2026-12-04T09:00:00Z")),
            "too little of Wednesday's window is left"
        );
        // A run longer than every allowed window never fits.
        assert_eq!(c.first_fit(at("2026-11-30T12:00:00Z"), mins(600)), None);
        // Nothing in the way: now.
        let free = Calendar::default();
        let now = at("2026-11-30T12:34:56.5Z");
        assert_eq!(free.first_fit(now, mins(30)), Some(now));
    }
}
