//! The targets: the ratios of a run's scenarios, and each one's verdict.

use crate::expiry::Live;
use crate::results::PostgresResults;
use crate::scenario::Scenario;
use crate::stats::Stats;

/// A target of the issue and how this run did.
#[derive(Debug)]
pub(crate) struct Check {
    pub(crate) what: &'static str,
    pub(crate) value: Option<f64>,
    /// The median of the same ratio taken round by round (the two scenarios of a round
    /// ran minutes apart at most), which a round disturbed by something else moves less
    /// than the ratio of the totals; `None` where the check is not a pair of scenarios.
    pub(crate) paired: Option<f64>,
    pub(crate) target: String,
    pub(crate) pass: Option<bool>,
}

impl Check {
    pub(super) fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a",
        }
    }
}

pub(super) fn stats(table: &[(Scenario, Stats)], scenario: Scenario) -> Option<&Stats> {
    table
        .iter()
        .find(|(s, _)| *s == scenario)
        .map(|(_, stats)| stats)
}

pub(super) fn rate_ratio(table: &[(Scenario, Stats)], a: Scenario, b: Scenario) -> Option<f64> {
    let (a, b) = (stats(table, a)?, stats(table, b)?);
    (b.rate() > 0.0).then(|| a.rate() / b.rate())
}

/// The median over rounds of `ratio` of `a`'s and `b`'s values in the same round (the
/// two scenarios of a round ran side by side); rounds without a value, or whose ratio
/// is undefined, are left out.
fn paired(
    a: impl Iterator<Item = Option<f64>>,
    b: impl Iterator<Item = Option<f64>>,
    ratio: fn(f64, f64) -> Option<f64>,
) -> Option<f64> {
    median(a.zip(b).filter_map(|(a, b)| ratio(a?, b?)))
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// The throughput ratio a saturated machine would show: the inverse ratio of the CPU
/// time one request costs, all parties together.
pub(super) fn cpu_ratio(table: &[(Scenario, Stats)], a: Scenario, b: Scenario) -> Option<f64> {
    let total = |s: Scenario| -> Option<f64> {
        let [server, pg, client] = stats(table, s)?.cpu_per_request()?;
        Some(server + pg + client)
    };
    let (a, b) = (total(a)?, total(b)?);
    (a > 0.0).then(|| b / a)
}

/// Two scenarios compared, by throughput or by CPU per request.
#[derive(Clone, Copy)]
enum Pair {
    Rate(Scenario, Scenario),
    Cpu(Scenario, Scenario),
}

impl Pair {
    /// The ratio of the totals over all rounds, and the median of the rounds' ratios.
    fn ratios(self, table: &[(Scenario, Stats)]) -> (Option<f64>, Option<f64>) {
        match self {
            Self::Rate(a, b) => {
                let rates =
                    |s: Scenario| stats(table, s).map(|s| s.round_rates.iter().copied().map(Some));
                let by_round = rates(a)
                    .zip(rates(b))
                    .and_then(|(a, b)| paired(a, b, |a, b| (b > 0.0).then(|| a / b)));
                (rate_ratio(table, a, b), by_round)
            }
            Self::Cpu(a, b) => {
                let cpu = |s: Scenario| stats(table, s).map(|s| s.round_cpu.iter().copied());
                let by_round = cpu(a)
                    .zip(cpu(b))
                    .and_then(|(a, b)| paired(a, b, |a, b| (a > 0.0).then(|| b / a)));
                (cpu_ratio(table, a, b), by_round)
            }
        }
    }
}

/// A check that `pair`'s ratio is at least `min`, described by `target`.
fn at_least(
    table: &[(Scenario, Stats)],
    what: &'static str,
    pair: Pair,
    min: Option<f64>,
    target: String,
) -> Check {
    let (value, paired) = pair.ratios(table);
    Check {
        what,
        value,
        paired,
        target,
        pass: value.zip(min).map(|(v, min)| v >= min),
    }
}

/// The issues' targets, in their order: issue 18's for the actix form (idem/hand at
/// least 1.00, replays twice as fast as first executions and 1.3 times the hand-written
/// replay), then issue 16's for the axum form.
pub(super) fn checks(pg: &PostgresResults) -> Vec<Check> {
    use Scenario::{Bare, FloorBare, FloorProtocol, FloorReplay, Hand, HandReplay, Idem, Replay};
    let table = &pg.table;
    let floor = rate_ratio(table, FloorProtocol, FloorBare);
    let cpu_floor = cpu_ratio(table, FloorProtocol, FloorBare);
    let replay_floor = rate_ratio(table, FloorReplay, FloorProtocol);
    let floor_target = |floor: Option<f64>, what: &str| match floor {
        Some(floor) => format!(">= {what} = {floor:.3}"),
        None => format!(">= {what} (not measured)"),
    };
    let mut checks = vec![
        at_least(
            table,
            "idem/hand throughput",
            Pair::Rate(Idem, Hand),
            Some(1.0),
            ">= 1.00".to_owned(),
        ),
        at_least(
            table,
            "idem/bare throughput",
            Pair::Rate(Idem, Bare),
            floor,
            floor_target(floor, "floor(protocol)/floor(bare)"),
        ),
        at_least(
            table,
            "replay/idem throughput",
            Pair::Rate(Replay, Idem),
            Some(2.0),
            match replay_floor {
                Some(floor) => format!(">= 2.0 (floor(replay)/floor(protocol) = {floor:.3})"),
                None => ">= 2.0".to_owned(),
            },
        ),
        at_least(
            table,
            "replay/hand-replay throughput",
            Pair::Rate(Replay, HandReplay),
            Some(1.3),
            ">= 1.3".to_owned(),
        ),
        at_least(
            table,
            "idem/hand, by CPU per request",
            Pair::Cpu(Idem, Hand),
            Some(1.0),
            ">= 1.00".to_owned(),
        ),
        at_least(
            table,
            "idem/bare, by CPU per request",
            Pair::Cpu(Idem, Bare),
            cpu_floor,
            floor_target(cpu_floor, "the same for the floor"),
        ),
        at_least(
            table,
            "replay/idem, by CPU per request",
            Pair::Cpu(Replay, Idem),
            Some(2.0),
            ">= 2.0".to_owned(),
        ),
        at_least(
            table,
            "replay/hand-replay, by CPU per request",
            Pair::Cpu(Replay, HandReplay),
            Some(1.3),
            ">= 1.3".to_owned(),
        ),
    ];
    checks.extend(axum_checks(table));
    checks.extend(redis_checks(table));
    let claim = pg
        .scale
        .as_ref()
        .map(|scale| scale.big.claim_new.ms(0.99) / scale.small.claim_new.ms(0.99).max(0.001));
    checks.push(Check {
        what: "claim p99, big table / small table",
        value: claim,
        paired: None,
        target: "<= 1.5".to_owned(),
        pass: claim.map(|ratio| ratio <= 1.5),
    });
    let expiry = &pg.expiry;
    let sweep = expiry
        .idem
        .zip(expiry.plain)
        .map(|(idem, plain)| idem.rate() / plain.rate().max(1e-9));
    checks.push(Check {
        what: "expiry full speed, idem/plain SQL",
        value: sweep,
        paired: None,
        target: ">= 0.8".to_owned(),
        pass: sweep.map(|ratio| ratio >= 0.8),
    });
    let half: fn(&Live) -> &(Stats, Stats) = |live| &live.half;
    let saturated: fn(&Live) -> &(Stats, Stats) = |live| &live.saturated;
    for (what, pair) in [
        ("live p99 during a sweep / without, half load", half),
        ("live p99 during a sweep / without, saturated", saturated),
    ] {
        let ratio = expiry.live.as_ref().map(|live| {
            let (quiet, sweeping) = pair(live);
            sweeping.ms(0.99) / quiet.ms(0.99).max(0.001)
        });
        checks.push(Check {
            what,
            value: ratio,
            paired: None,
            target: "<= 1.5".to_owned(),
            pass: ratio.map(|ratio| ratio <= 1.5),
        });
    }
    checks
}

/// The Redis rows against their hand-written baseline, with issue 40's targets (all
/// measured in the same rounds), then how the baseline itself compares (no target).
fn redis_checks(table: &[(Scenario, Stats)]) -> Vec<Check> {
    use Scenario::{RedisBare, RedisHand, RedisHandReplay, RedisIdem, RedisReplay};
    let check = |what, pair, min: Option<f64>| {
        let target = min.map_or("(no target)".to_owned(), |min| format!(">= {min}"));
        at_least(table, what, pair, min, target)
    };
    vec![
        check(
            "redis idem/hand throughput",
            Pair::Rate(RedisIdem, RedisHand),
            Some(0.95),
        ),
        check(
            "redis replay/idem throughput",
            Pair::Rate(RedisReplay, RedisIdem),
            Some(2.0),
        ),
        check(
            "redis idem/hand, by CPU per request",
            Pair::Cpu(RedisIdem, RedisHand),
            Some(0.95),
        ),
        check(
            "redis replay/idem, by CPU per request",
            Pair::Cpu(RedisReplay, RedisIdem),
            Some(2.0),
        ),
        check(
            "redis replay/hand-replay throughput",
            Pair::Rate(RedisReplay, RedisHandReplay),
            None,
        ),
        check(
            "redis hand/bare throughput",
            Pair::Rate(RedisHand, RedisBare),
            None,
        ),
        check(
            "redis hand-replay/hand throughput",
            Pair::Rate(RedisHandReplay, RedisHand),
            None,
        ),
    ]
}

/// The axum form against its own baselines, with issue 16's targets, and beside the
/// actix form (no target: how the two adapters compare).
fn axum_checks(table: &[(Scenario, Stats)]) -> Vec<Check> {
    use Scenario::{AxumHand, AxumIdem, AxumReplay, Idem};
    let check = |what, pair, min: Option<f64>| {
        let target = min.map_or("(no target)".to_owned(), |min| format!(">= {min}"));
        at_least(table, what, pair, min, target)
    };
    vec![
        check(
            "axum idem/hand throughput",
            Pair::Rate(AxumIdem, AxumHand),
            Some(0.97),
        ),
        check(
            "axum replay/idem throughput",
            Pair::Rate(AxumReplay, AxumIdem),
            Some(2.0),
        ),
        check(
            "axum idem/hand, by CPU per request",
            Pair::Cpu(AxumIdem, AxumHand),
            Some(0.97),
        ),
        check(
            "axum replay/idem, by CPU per request",
            Pair::Cpu(AxumReplay, AxumIdem),
            Some(2.0),
        ),
        check(
            "axum idem / actix idem throughput",
            Pair::Rate(AxumIdem, Idem),
            None,
        ),
        check(
            "axum idem / actix idem, by CPU per request",
            Pair::Cpu(AxumIdem, Idem),
            None,
        ),
    ]
}
