//! The charts, as SVG (plotters' SVG backend: no bitmap, no system fonts; the viewer lays out
//! the text): `latency.svg`, the cycle-latency percentiles of each contender's median run, and
//! `throughput.svg`, bars with min–max whiskers for throughput, contention rate and hand-over.
//!
//! It draws only what the [`Report`] holds; it never computes a statistic of its own.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{Entry, Report};
use crate::scenarios::latency::LatencyRun;
use crate::stats::{CURVE, Spread};

/// One colour per contender, in [`crate::contender::Contender::ALL`] order: each floor a pale
/// shade of its adapter's colour (raw grey; async-std purple; blocking orange).
const COLOURS: [RGBColor; 9] = [
    RGBColor(90, 90, 90),
    RGBColor(197, 176, 213),
    RGBColor(255, 187, 120),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
];

/// Writes `latency.svg` and `throughput.svg` into `dir`.
pub(crate) fn draw(report: &Report, dir: &Path) -> Result<(), String> {
    latency(report, &dir.join("latency.svg")).map_err(|err| format!("latency.svg: {err}"))?;
    bars(report, &dir.join("throughput.svg")).map_err(|err| format!("throughput.svg: {err}"))
}

type Drawn = Result<(), Box<dyn std::error::Error>>;

fn colour(id: &str) -> RGBColor {
    crate::contender::Contender::ALL
        .iter()
        .position(|c| c.id() == id)
        .and_then(|i| COLOURS.get(i).copied())
        .unwrap_or(BLACK)
}

/// The run whose median cycle is the median of the contender's runs.
fn median_run(entry: &Entry<LatencyRun>) -> Option<&LatencyRun> {
    let mut runs: Vec<&LatencyRun> = entry.runs.iter().collect();
    runs.sort_by(|a, b| a.cycle_p50_us.total_cmp(&b.cycle_p50_us));
    runs.get(runs.len() / 2).copied()
}

fn latency(report: &Report, path: &Path) -> Drawn {
    let curves: Vec<(&str, Vec<(f64, f64)>)> = report
        .latency
        .results
        .iter()
        .filter_map(|entry| {
            let run = median_run(entry)?;
            let points = (0..CURVE.len())
                .zip(&run.curve_us)
                .filter(|(_, us)| us.is_finite() && **us > 0.0)
                .map(|(i, us)| (i as f64, *us))
                .collect();
            Some((entry.contender, points))
        })
        .collect();
    let all = curves
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1));
    let (low, high) = all.fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if high <= 0.0 {
        return Err("no latency samples".into());
    }
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "(a) lock+release cycle latency by percentile, 1 client, {} cycles (median run)",
                report.meta.latency_cycles
            ),
            ("sans-serif", 18),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            -0.2f64..(CURVE.len() as f64 - 0.8),
            ((low * 0.8)..(high * 1.25)).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_labels(CURVE.len())
        .x_label_formatter(&|x| {
            let index = x.round();
            let exact = (x - index).abs() < 1e-6 && index >= 0.0;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let label = exact.then(|| CURVE.get(index as usize)).flatten();
            label.map_or_else(String::new, |p| format!("p{p}"))
        })
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("µs (log scale)")
        .x_desc("percentile")
        .draw()?;
    for (id, points) in curves {
        let style = colour(id).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points.clone(), style))?
            .label(id)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 3, colour(id).filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn bars(report: &Report, path: &Path) -> Drawn {
    let spread_of = |summary: &std::collections::BTreeMap<&str, crate::report::Stat>, key: &str| {
        summary.get(key).map(|stat| stat.spread)
    };
    let throughput: Vec<(&str, Option<Spread>)> = report
        .throughput
        .results
        .iter()
        .map(|e| (e.contender, spread_of(&e.summary, "cycles_per_sec")))
        .collect();
    let rate: Vec<(&str, Option<Spread>)> = report
        .contention
        .results
        .iter()
        .map(|e| (e.contender, spread_of(&e.summary, "acquisitions_per_sec")))
        .collect();
    let handover: Vec<(&str, Option<Spread>)> = report
        .contention
        .results
        .iter()
        .map(|e| (e.contender, spread_of(&e.summary, "handover_p50_us")))
        .collect();
    // One panel above the other: eight contenders' names fit under their bars.
    let root = SVGBackend::new(path, (1100, 1260)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((3, 1));
    let meta = &report.meta;
    panel(
        &panels[0],
        &format!("(b) {} tasks, own keys: cycles/s ↑", meta.throughput_tasks),
        &throughput,
    )?;
    panel(
        &panels[1],
        &format!(
            "(c) {} tasks, one key: acquisitions/s ↑",
            meta.contention_tasks
        ),
        &rate,
    )?;
    panel(&panels[2], "(c) hand-over gap p50, µs ↓", &handover)?;
    root.present()?;
    Ok(())
}

/// One bar per contender (the median), with a whisker from min to max.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    bars: &[(&str, Option<Spread>)],
) -> Drawn {
    let top = bars
        .iter()
        .filter_map(|(_, s)| s.map(|s| s.max))
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.15;
    let count = bars.len();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..(count as f64 - 0.5), 0.0..top)?;
    let ids: Vec<&str> = bars.iter().map(|(id, _)| *id).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_labels(count + 1)
        .x_label_formatter(&|x| {
            let index = x.round();
            let exact = (x - index).abs() < 1e-6 && index >= 0.0;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let id = exact.then(|| ids.get(index as usize)).flatten();
            id.map_or_else(String::new, |id| (*id).to_owned())
        })
        .draw()?;
    for (i, (id, spread)) in bars.iter().enumerate() {
        let Some(spread) = spread else {
            chart.draw_series(std::iter::once(Text::new(
                "none",
                (i as f64 - 0.2, top * 0.04),
                ("sans-serif", 12),
            )))?;
            continue;
        };
        let x = i as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x - 0.35, 0.0), (x + 0.35, spread.median)],
            colour(id).filled(),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, spread.min), (x, spread.max)],
            BLACK.stroke_width(1),
        )))?;
        chart
            .draw_series([spread.min, spread.max].map(|y| {
                PathElement::new(vec![(x - 0.1, y), (x + 0.1, y)], BLACK.stroke_width(1))
            }))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{:.0}", spread.median),
            (x - 0.3, spread.max + top * 0.04),
            ("sans-serif", 12),
        )))?;
    }
    Ok(())
}
