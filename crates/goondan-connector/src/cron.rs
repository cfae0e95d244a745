//! The `cron` connector: a clock that emits `cron_tick` events.
//!
//! A Connection gives one schedule, either
//!
//! - `SCHEDULE`: a standard five-field cron expression (`minute hour
//!   day-of-month month day-of-week`) or one of `@hourly`, `@daily`
//!   (`@midnight`), `@weekly`, `@monthly`, `@yearly` (`@annually`), read in
//!   `TIMEZONE` (an IANA name such as `Europe/Berlin`; `UTC` by default);
//!   `SCHEDULE: "@every 30s"` is an interval; or
//! - `EVERY`: an interval such as `30s`, `5m`, `1h30m` or `250ms`, counted
//!   from the connector's start.
//!
//! Each fire emits `cron_tick` with properties `schedule` (the schedule as
//! written) and `scheduled_at` (the fire time, RFC 3339 in the schedule's
//! time zone), text `TEXT` (else `cron tick: <schedule>`) and instance key
//! `INSTANCE_KEY` (else `cron:default`).
//!
//! # Cron semantics
//!
//! Fields take `*`, numbers, ranges `a-b`, steps `*/n`, `a-b/n` and `a/n`,
//! and lists `a,b-c`; months and weekdays take English three-letter names
//! (`jan`, `mon`); Sunday is `0` or `7`. As in Vixie cron, when both
//! day-of-month and day-of-week are restricted (neither starts with `*`)
//! a day matches if *either* does.
//!
//! Times are local to the time zone. A local time that does not exist
//! (skipped by a daylight-saving jump) does not fire; one that occurs
//! twice (the hour repeated when clocks go back) fires once, at its first
//! occurrence. A fire missed while the machine slept or the swarm's queue
//! was full is not made up: the next one is the first after now.
//!
//! # Why a parser of our own
//!
//! The `cron` crate reads six or seven fields with seconds and numbers
//! weekdays 1–7 from Sunday (Quartz style), so a standard expression would
//! need rewriting, and it compiles `phf` macros; `croner` pulls in
//! `derive_builder` and `strum` derives. Five fields are a small grammar,
//! checked here by table tests; the time zone data comes from
//! `chrono-tz`.

use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::source::{deliver, Delivery, Shutdown, Source};
use crate::Emitter;
use chrono::{
    DateTime, Datelike, Duration as ChronoDuration, LocalResult, NaiveDate, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;
use futures_util::future::BoxFuture;
use goondan_types::{ConnectorEvent, ConnectorMessage};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The event every fire emits.
pub const EVENT_NAME: &str = "cron_tick";
/// How far ahead a schedule is searched for its next fire (an expression
/// such as `0 0 30 2 *` never fires).
const SEARCH_YEARS: i64 = 5;
/// The longest single sleep: the wall clock is read again after it, so a
/// clock change or a suspended machine delays a fire by at most this.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// A cron expression that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{expression}`: {problem}")]
pub struct CronParseError {
    /// The expression as written.
    pub expression: String,
    /// What is wrong, naming the field.
    pub problem: String,
}

/// The values one field allows, as a bit set (bit `n` for value `n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    bits: u64,
    /// False when the field was written starting with `*`.
    restricted: bool,
}

impl Field {
    fn has(self, value: u32) -> bool {
        value < 64 && self.bits & (1 << value) != 0
    }
}

/// One field's name, bounds and value names.
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: FieldSpec = FieldSpec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: FieldSpec = FieldSpec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: FieldSpec = FieldSpec {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Day of week: 7 is read as Sunday (0).
const DAY_OF_WEEK: FieldSpec = FieldSpec {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl FieldSpec {
    fn value(&self, text: &str) -> Result<u32, String> {
        let lower = text.to_ascii_lowercase();
        if let Some(index) = self.names.iter().position(|name| *name == lower) {
            // Month names count from 1 (the field's minimum), weekday
            // names from 0.
            return Ok(index as u32 + self.min);
        }
        let value: u32 = text
            .parse()
            .map_err(|_| format!("{} `{text}` is not a number", self.name))?;
        if value < self.min || value > self.max {
            return Err(format!(
                "{} {value} is outside {}-{}",
                self.name, self.min, self.max
            ));
        }
        Ok(value)
    }

    fn parse(&self, text: &str) -> Result<Field, String> {
        let mut bits = 0u64;
        for item in text.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => {
                    let step: u32 =
                        step.parse().ok().filter(|step| *step > 0).ok_or_else(|| {
                            format!("{} step `{step}` is not a positive number", self.name)
                        })?;
                    (range, Some(step))
                }
                None => (item, None),
            };
            let (low, high) = match range {
                "*" => (self.min, self.max),
                "" => return Err(format!("{} has an empty item in `{text}`", self.name)),
                _ => match range.split_once('-') {
                    Some((low, high)) => (self.value(low)?, self.value(high)?),
                    // `a/n` runs from a to the end, as in Vixie cron.
                    None if step.is_some() => (self.value(range)?, self.max),
                    None => {
                        let value = self.value(range)?;
                        (value, value)
                    }
                },
            };
            if low > high {
                return Err(format!("{} range {low}-{high} runs backwards", self.name));
            }
            let step = step.unwrap_or(1);
            let mut value = low;
            while value <= high {
                bits |= 1 << value;
                value += step;
            }
        }
        if self.name == DAY_OF_WEEK.name && bits & (1 << 7) != 0 {
            bits = (bits & !(1 << 7)) | 1;
        }
        Ok(Field {
            bits,
            restricted: !text.starts_with('*'),
        })
    }
}

/// A standard five-field cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpression {
    text: String,
    minute: Field,
    hour: Field,
    day_of_month: Field,
    month: Field,
    day_of_week: Field,
}

impl FromStr for CronExpression {
    type Err = CronParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |problem: String| CronParseError {
            expression: text.to_string(),
            problem,
        };
        let expanded = match text.trim().to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            other if other.starts_with('@') => {
                return Err(fail(format!(
                    "unknown macro `{other}`; use @hourly, @daily, @weekly, @monthly, @yearly or @every <interval>"
                )))
            }
            _ => text.trim().to_string(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day_of_month, month, day_of_week] = fields[..] else {
            return Err(fail(format!(
                "has {} fields; a cron expression has five: minute hour day-of-month month day-of-week",
                fields.len()
            )));
        };
        Ok(CronExpression {
            text: text.trim().to_string(),
            minute: MINUTE.parse(minute).map_err(fail)?,
            hour: HOUR.parse(hour).map_err(fail)?,
            day_of_month: DAY_OF_MONTH.parse(day_of_month).map_err(fail)?,
            month: MONTH.parse(month).map_err(fail)?,
            day_of_week: DAY_OF_WEEK.parse(day_of_week).map_err(fail)?,
        })
    }
}

impl fmt::Display for CronExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl CronExpression {
    fn day_matches(&self, date: NaiveDate) -> bool {
        let by_month_day = self.day_of_month.has(date.day());
        let by_weekday = self.day_of_week.has(date.weekday().num_days_from_sunday());
        if self.day_of_month.restricted && self.day_of_week.restricted {
            by_month_day || by_weekday
        } else {
            by_month_day && by_weekday
        }
    }

    /// The first fire strictly after `after`, in `after`'s time zone;
    /// `None` when there is none within five years.
    pub fn next_after<Z: TimeZone>(&self, after: &DateTime<Z>) -> Option<DateTime<Z>> {
        let zone = after.timezone();
        let local = after.naive_local();
        let start = local.with_second(0)?.with_nanosecond(0)? + ChronoDuration::minutes(1);
        let first_day = start.date();
        let last_day = first_day + ChronoDuration::days(366 * SEARCH_YEARS);
        for day in first_day.iter_days().take_while(|day| *day <= last_day) {
            if !self.month.has(day.month()) || !self.day_matches(day) {
                continue;
            }
            let today = day == first_day;
            for hour in (0..24).filter(|hour| self.hour.has(*hour)) {
                if today && hour < start.hour() {
                    continue;
                }
                for minute in (0..60).filter(|minute| self.minute.has(*minute)) {
                    if today && hour == start.hour() && minute < start.minute() {
                        continue;
                    }
                    let naive = day.and_hms_opt(hour, minute, 0)?;
                    // A skipped local time yields nothing; a repeated one
                    // fires at its first occurrence after `after`.
                    let candidates = match zone.from_local_datetime(&naive) {
                        LocalResult::Single(fire) => vec![fire],
                        LocalResult::Ambiguous(first, second) => vec![first, second],
                        LocalResult::None => Vec::new(),
                    };
                    if let Some(fire) = candidates.into_iter().find(|fire| fire > after) {
                        return Some(fire);
                    }
                }
            }
        }
        None
    }
}

/// When a cron connector fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// A cron expression read in a time zone.
    Cron {
        /// The expression.
        expression: CronExpression,
        /// Its time zone.
        timezone: Tz,
    },
    /// A fixed interval from the start.
    Every(Duration),
}

/// Reads an interval: whole numbers with units `ms`, `s`, `m`, `h`, `d`,
/// concatenated (`1h30m`); a bare number is seconds.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return (seconds > 0)
            .then(|| Duration::from_secs(seconds))
            .ok_or_else(|| "an interval must be longer than zero".to_string());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{text}` is not an interval such as 30s, 5m or 1h30m"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            "d" => Duration::from_secs(number.saturating_mul(86_400)),
            _ => return Err(format!("`{text}` has unit `{unit}`; use ms, s, m, h or d")),
        };
        total = total.saturating_add(part);
    }
    if total.is_zero() {
        return Err("an interval must be longer than zero".into());
    }
    Ok(total)
}

/// The `cron` source.
#[derive(Debug, Clone)]
pub struct Cron {
    schedule: Schedule,
    /// The schedule as written (the `schedule` property).
    written: String,
    text: String,
    instance_key: String,
}

impl Cron {
    /// The source a Connection's config describes.
    pub fn from_config(config: &ConnectorConfig) -> Result<Cron, ConnectorConfigError> {
        let error = |key: &str, problem: String, help: &str| ConnectorConfigError {
            key: key.to_string(),
            problem,
            help: help.to_string(),
        };
        let timezone = match config.value("TIMEZONE").or_else(|| config.value("TZ")) {
            None => Tz::UTC,
            Some(name) => name.trim().parse::<Tz>().map_err(|_| {
                error(
                    "TIMEZONE",
                    format!("`{name}` is not an IANA time zone"),
                    "use a name such as UTC, Europe/Berlin or America/New_York",
                )
            })?,
        };
        let (schedule, written) = match (config.value("SCHEDULE"), config.value("EVERY")) {
            (Some(_), Some(_)) => {
                return Err(error(
                    "EVERY",
                    "both SCHEDULE and EVERY are set".into(),
                    "keep one: SCHEDULE for a cron expression, EVERY for an interval",
                ))
            }
            (None, None) => {
                return Err(error(
                    "SCHEDULE",
                    "no schedule is set".into(),
                    "set config.SCHEDULE to a cron expression (\"*/5 * * * *\") or config.EVERY to an interval (\"30s\")",
                ))
            }
            (None, Some(every)) => (
                Schedule::Every(parse_interval(every).map_err(|problem| {
                    error("EVERY", problem, "use an interval such as 30s, 5m or 1h30m")
                })?),
                format!("@every {}", every.trim()),
            ),
            (Some(text), None) => match text.trim().strip_prefix("@every") {
                Some(every) => (
                    Schedule::Every(parse_interval(every).map_err(|problem| {
                        error("SCHEDULE", problem, "use @every with an interval such as 30s or 5m")
                    })?),
                    text.trim().to_string(),
                ),
                None => (
                    Schedule::Cron {
                        expression: text.parse().map_err(|parse: CronParseError| {
                            error(
                                "SCHEDULE",
                                parse.to_string(),
                                "write five fields, minute hour day-of-month month day-of-week, such as \"0 9 * * mon-fri\"",
                            )
                        })?,
                        timezone,
                    },
                    text.trim().to_string(),
                ),
            },
        };
        Ok(Cron {
            text: config
                .value("TEXT")
                .map_or_else(|| format!("cron tick: {written}"), str::to_string),
            instance_key: config
                .value("INSTANCE_KEY")
                .unwrap_or("cron:default")
                .to_string(),
            schedule,
            written,
        })
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The event a fire at `scheduled_at` emits.
    pub fn event<Z: TimeZone>(&self, scheduled_at: &DateTime<Z>) -> ConnectorEvent
    where
        Z::Offset: fmt::Display,
    {
        ConnectorEvent {
            name: EVENT_NAME.to_string(),
            message: ConnectorMessage::Text {
                text: self.text.clone(),
            },
            properties: BTreeMap::from([
                ("schedule".to_string(), self.written.clone()),
                ("scheduled_at".to_string(), scheduled_at.to_rfc3339()),
            ]),
            instance_key: Some(self.instance_key.clone()),
            delivery_id: Some(format!("{}@{}", self.written, scheduled_at.to_rfc3339())),
        }
    }

    async fn run_cron(
        &self,
        expression: &CronExpression,
        timezone: Tz,
        emitter: &dyn Emitter,
        shutdown: &mut Shutdown,
    ) {
        let mut after = Utc::now().with_timezone(&timezone);
        loop {
            let Some(next) = expression.next_after(&after) else {
                tracing::error!(connector = "cron", schedule = %expression, "the schedule never fires within five years; waiting for shutdown");
                shutdown.requested().await;
                return;
            };
            if !sleep_until(next.with_timezone(&Utc), shutdown).await {
                return;
            }
            if deliver(emitter, self.event(&next), shutdown, "cron").await == Delivery::Stopped {
                return;
            }
            // A fire missed while waiting is not made up.
            let now = Utc::now().with_timezone(&timezone);
            after = if now > next { now } else { next };
        }
    }

    async fn run_every(&self, interval: Duration, emitter: &dyn Emitter, shutdown: &mut Shutdown) {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = shutdown.requested() => return,
            }
            if deliver(emitter, self.event(&Utc::now()), shutdown, "cron").await
                == Delivery::Stopped
            {
                return;
            }
        }
    }
}

/// Sleeps until the wall clock reaches `when`, reading it again at least
/// every [`MAX_SLEEP`]; false when a shutdown came first.
async fn sleep_until(when: DateTime<Utc>, shutdown: &mut Shutdown) -> bool {
    loop {
        let Ok(remaining) = (when - Utc::now()).to_std() else {
            return !shutdown.is_requested();
        };
        if remaining.is_zero() {
            return !shutdown.is_requested();
        }
        if !shutdown.sleep(remaining.min(MAX_SLEEP)).await {
            return false;
        }
    }
}

impl Source for Cron {
    fn name(&self) -> &'static str {
        "cron"
    }

    fn run(
        self: Box<Self>,
        emitter: Arc<dyn Emitter>,
        mut shutdown: Shutdown,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            match self.schedule.clone() {
                Schedule::Cron {
                    expression,
                    timezone,
                } => {
                    self.run_cron(&expression, timezone, emitter.as_ref(), &mut shutdown)
                        .await
                }
                Schedule::Every(interval) => {
                    self.run_every(interval, emitter.as_ref(), &mut shutdown)
                        .await
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(zone: Tz, text: &str) -> DateTime<Tz> {
        let naive = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").unwrap();
        zone.from_local_datetime(&naive).earliest().unwrap()
    }

    fn next(expression: &str, zone: Tz, after: &str) -> String {
        let expression: CronExpression = expression.parse().unwrap();
        expression
            .next_after(&at(zone, after))
            .unwrap()
            .to_rfc3339()
    }

    #[test]
    fn next_fire_is_computed_in_the_schedule_time_zone() {
        use chrono_tz::{America::New_York, Asia::Seoul, Europe::Berlin, UTC};
        let cases = [
            // expression, zone, after (local), next fire
            (
                "*/15 * * * *",
                UTC,
                "2026-03-01 10:07:30",
                "2026-03-01T10:15:00+00:00",
            ),
            (
                "0 9 * * mon-fri",
                Seoul,
                "2026-11-27 09:00:00",
                "2026-11-30T09:00:00+09:00",
            ),
            (
                "0 9 * * 1-5",
                Berlin,
                "2026-11-25 08:59:59",
                "2026-11-25T09:00:00+01:00",
            ),
            (
                "30 2 * * *",
                Berlin,
                "2026-03-28 12:00:00",
                "2026-03-30T02:30:00+02:00",
            ),
            (
                "30 1 * * *",
                New_York,
                "2026-11-01 00:00:00",
                "2026-11-01T01:30:00-04:00",
            ),
            (
                "0 0 1 1 *",
                UTC,
                "2026-06-01 00:00:00",
                "2027-01-01T00:00:00+00:00",
            ),
            (
                "@hourly",
                UTC,
                "2026-06-01 23:59:00",
                "2026-06-02T00:00:00+00:00",
            ),
            (
                "0 12 13 * 5",
                UTC,
                "2026-02-01 00:00:00",
                "2026-02-06T12:00:00+00:00",
            ),
            (
                "0 0 29 2 *",
                UTC,
                "2026-01-01 00:00:00",
                "2028-02-29T00:00:00+00:00",
            ),
            (
                "0 0 * * 7",
                UTC,
                "2026-11-25 00:00:00",
                "2026-11-29T00:00:00+00:00",
            ),
            (
                "5/20 8-9 * jan,dec *",
                UTC,
                "2026-12-31 09:45:00",
                "2027-01-01T08:05:00+00:00",
            ),
        ];
        for (expression, zone, after, expected) in cases {
            assert_eq!(
                next(expression, zone, after),
                expected,
                "{expression} after {after}"
            );
        }
    }

    #[test]
    fn the_repeated_hour_fires_once() {
        let expression: CronExpression = "30 1 * * *".parse().unwrap();
        let first = expression
            .next_after(&at(chrono_tz::America::New_York, "2026-11-01 00:00:00"))
            .unwrap();
        let second = expression.next_after(&first).unwrap();
        assert_eq!(second.to_rfc3339(), "2026-11-02T01:30:00-05:00");
    }

    #[test]
    fn a_schedule_that_never_fires_has_no_next() {
        let expression: CronExpression = "0 0 30 2 *".parse().unwrap();
        assert_eq!(expression.next_after(&Utc::now()), None);
    }

    #[test]
    fn bad_expressions_name_their_field() {
        let cases = [
            ("* * * *", "has 4 fields"),
            ("60 * * * *", "minute 60 is outside 0-59"),
            ("* 24 * * *", "hour 24"),
            ("* * 0 * *", "day-of-month 0"),
            ("* * * 13 *", "month 13"),
            ("* * * * 8", "day-of-week 8"),
            ("*/0 * * * *", "step `0`"),
            ("5-1 * * * *", "runs backwards"),
            ("* * * foo *", "month `foo` is not a number"),
            ("1,,2 * * * *", "empty item"),
            ("@fortnightly", "unknown macro"),
        ];
        for (expression, expected) in cases {
            let error = expression.parse::<CronExpression>().unwrap_err();
            assert!(
                error.problem.contains(expected),
                "{expression}: {error} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn intervals_read_units() {
        let cases = [
            ("30s", Some(30_000)),
            ("5m", Some(300_000)),
            ("1h30m", Some(5_400_000)),
            ("250ms", Some(250)),
            ("90", Some(90_000)),
            ("1d", Some(86_400_000)),
            ("0s", None),
            ("0", None),
            ("5 minutes", None),
            ("m", None),
            ("", None),
        ];
        for (text, expected) in cases {
            assert_eq!(
                parse_interval(text).ok().map(|d| d.as_millis() as u64),
                expected,
                "{text}"
            );
        }
    }

    #[test]
    fn config_picks_one_schedule_and_a_known_zone() {
        let config = |pairs: &[(&str, &str)]| {
            let mut config = ConnectorConfig::default();
            for (key, value) in pairs {
                config.config.insert(key.to_string(), value.to_string());
            }
            config
        };
        let every = Cron::from_config(&config(&[("EVERY", "30s")])).unwrap();
        assert_eq!(every.schedule(), &Schedule::Every(Duration::from_secs(30)));
        let macro_every = Cron::from_config(&config(&[("SCHEDULE", "@every 2m")])).unwrap();
        assert_eq!(
            macro_every.schedule(),
            &Schedule::Every(Duration::from_secs(120))
        );
        let cron = Cron::from_config(&config(&[
            ("SCHEDULE", "0 9 * * mon"),
            ("TIMEZONE", "Asia/Seoul"),
            ("INSTANCE_KEY", "reports"),
        ]))
        .unwrap();
        assert!(
            matches!(cron.schedule(), Schedule::Cron { timezone, .. } if *timezone == chrono_tz::Asia::Seoul)
        );
        let event = cron.event(&at(chrono_tz::Asia::Seoul, "2026-11-30 09:00:00"));
        assert_eq!(event.name, "cron_tick");
        assert_eq!(event.instance_key.as_deref(), Some("reports"));
        assert_eq!(event.properties["schedule"], "0 9 * * mon");
        assert_eq!(
            event.properties["scheduled_at"],
            "2026-11-30T09:00:00+09:00"
        );

        for (pairs, key) in [
            (&[][..], "SCHEDULE"),
            (&[("SCHEDULE", "* * * * *"), ("EVERY", "1s")][..], "EVERY"),
            (&[("SCHEDULE", "* * *")][..], "SCHEDULE"),
            (
                &[("SCHEDULE", "* * * * *"), ("TIMEZONE", "Mars/Olympus")][..],
                "TIMEZONE",
            ),
            (&[("EVERY", "soon")][..], "EVERY"),
        ] {
            assert_eq!(
                Cron::from_config(&config(pairs)).unwrap_err().key,
                key,
                "{pairs:?}"
            );
        }
    }
}
