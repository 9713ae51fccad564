//! The chart beside a PostgreSQL section: throughput and p99 per scenario.

use std::path::Path;

use plotters::prelude::*;

use crate::results::{PostgresResults, Results};
use crate::stats::Stats;

/// Two bar charts, one above the other: throughput and p99 per scenario; the floor
/// (plain SQL, no HTTP) in a lighter shade.
pub(super) fn chart(results: &Results, pg: &PostgresResults, path: &Path) -> Result<(), String> {
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1500, 760)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(380);
        let bars_of = |value: fn(&Stats) -> f64| -> Vec<Bar> {
            pg.table
                .iter()
                .map(|(scenario, stats)| Bar {
                    name: scenario.name(),
                    value: value(stats),
                    floor: scenario.name().starts_with("floor"),
                })
                .collect()
        };
        let title = |what: &str| {
            format!(
                "{what}, {} connections{}",
                results.options.connections,
                if pg.database.durable() {
                    ""
                } else {
                    " (PostgreSQL without fsync)"
                }
            )
        };
        bars(
            &top,
            &title("requests per second"),
            &bars_of(Stats::rate),
            BLUE,
            0,
        )?;
        bars(
            &bottom,
            &title("p99 latency, ms"),
            &bars_of(|s| s.ms(0.99)),
            RED,
            1,
        )?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("cannot draw {}: {e}", path.display()))
}

struct Bar {
    name: &'static str,
    value: f64,
    floor: bool,
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    bars: &[Bar],
    color: RGBColor,
    decimals: usize,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let top = bars.iter().map(|b| b.value).fold(0.0, f64::max).max(1.0) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..bars.len() as f64, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
        let shade = if bar.floor {
            color.mix(0.35)
        } else {
            color.mix(0.75)
        };
        Rectangle::new(
            [(i as f64 + 0.12, 0.0), (i as f64 + 0.88, bar.value)],
            shade.filled(),
        )
    }))?;
    // Names under the bars and values above them; the SVG keeps them as text.
    let label = ("sans-serif", 13).into_font();
    chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
        Text::new(
            bar.name.to_owned(),
            (i as f64 + 0.1, -top * 0.03),
            label.clone(),
        )
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
        Text::new(
            format!("{:.decimals$}", bar.value),
            (i as f64 + 0.3, bar.value + top * 0.06),
            label.clone(),
        )
    }))?;
    Ok(())
}
