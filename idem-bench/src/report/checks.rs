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

/// The targets, in its order.
pub(super) fn checks(pg: &PostgresResults) -> Vec<Check> {
    let at_least = |what, value: Option<f64>, min: Option<f64>, target: String| Check {
        what,
        value,
        target,
        pass: value.zip(min).map(|(v, min)| v >= min),
    };
    let floor = rate_ratio(&pg.table, Scenario::FloorProtocol, Scenario::FloorBare);
    let cpu_floor = cpu_ratio(&pg.table, Scenario::FloorProtocol, Scenario::FloorBare);
    let mut checks = vec![
        at_least(
            "idem/hand throughput",
            rate_ratio(&pg.table, Scenario::Idem, Scenario::Hand),
            Some(0.97),
            ">= 0.97".to_owned(),
        ),
        at_least(
            "idem/bare throughput",
            rate_ratio(&pg.table, Scenario::Idem, Scenario::Bare),
            floor,
            match floor {
                Some(floor) => format!(">= floor(protocol)/floor(bare) = {floor:.3}"),
                None => ">= floor(protocol)/floor(bare) (not measured)".to_owned(),
            },
        ),
        at_least(
            "replay/idem throughput",
            rate_ratio(&pg.table, Scenario::Replay, Scenario::Idem),
            Some(2.0),
            match rate_ratio(&pg.table, Scenario::FloorReplay, Scenario::FloorProtocol) {
                Some(floor) => format!(">= 2.0 (floor(replay)/floor(protocol) = {floor:.3})"),
                None => ">= 2.0".to_owned(),
            },
        ),
        at_least(
            "idem/hand, by CPU per request",
            cpu_ratio(&pg.table, Scenario::Idem, Scenario::Hand),
            Some(0.97),
            ">= 0.97".to_owned(),
        ),
        at_least(
            "idem/bare, by CPU per request",
            cpu_ratio(&pg.table, Scenario::Idem, Scenario::Bare),
            cpu_floor,
            match cpu_floor {
                Some(floor) => format!(">= the same for the floor = {floor:.3}"),
                None => ">= the same for the floor (not measured)".to_owned(),
            },
        ),
        at_least(
            "replay/idem, by CPU per request",
            cpu_ratio(&pg.table, Scenario::Replay, Scenario::Idem),
            Some(2.0),
            ">= 2.0".to_owned(),
        ),
    ];
    checks.extend(axum_checks(&pg.table));
    let claim = pg
        .scale
        .as_ref()
        .map(|scale| scale.big.claim_new.ms(0.99) / scale.small.claim_new.ms(0.99).max(0.001));
    checks.push(Check {
        what: "claim p99, big table / small table",
        value: claim,
        target: "<= 1.5".to_owned(),
        pass: claim.map(|ratio| ratio <= 1.5),
    });
    let expiry = &pg.expiry;
    let sweep = expiry
        .idem
        .zip(expiry.plain)
        .map(|(idem, plain)| idem.rate() / plain.rate().max(1e-9));
    checks.push(at_least(
        "expiry full speed, idem/plain SQL",
        sweep,
        Some(0.8),
        ">= 0.8".to_owned(),
    ));
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
            target: "<= 1.5".to_owned(),
            pass: ratio.map(|ratio| ratio <= 1.5),
        });
    }
    checks
}

/// The axum form against its own baselines, with the actix form's targets, and beside
/// the actix form (no target: how the two adapters compare).
fn axum_checks(table: &[(Scenario, Stats)]) -> Vec<Check> {
    let check = |what, value: Option<f64>, min: Option<f64>| Check {
        what,
        value,
        target: min.map_or("(no target)".to_owned(), |min| format!(">= {min}")),
        pass: value.zip(min).map(|(v, min)| v >= min),
    };
    use Scenario::{AxumHand, AxumIdem, AxumReplay, Idem};
    vec![
        check(
            "axum idem/hand throughput",
            rate_ratio(table, AxumIdem, AxumHand),
            Some(0.97),
        ),
        check(
            "axum replay/idem throughput",
            rate_ratio(table, AxumReplay, AxumIdem),
            Some(2.0),
        ),
        check(
            "axum idem/hand, by CPU per request",
            cpu_ratio(table, AxumIdem, AxumHand),
            Some(0.97),
        ),
        check(
            "axum replay/idem, by CPU per request",
            cpu_ratio(table, AxumReplay, AxumIdem),
            Some(2.0),
        ),
        check(
            "axum idem / actix idem throughput",
            rate_ratio(table, AxumIdem, Idem),
            None,
        ),
        check(
            "axum idem / actix idem, by CPU per request",
            cpu_ratio(table, AxumIdem, Idem),
            None,
        ),
    ]
}
