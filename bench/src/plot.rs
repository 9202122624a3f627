//! The appends/s-against-writers chart: one panel per event size, one line
//! per system, and the raw fdatasync floors as horizontal lines.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::report::{Report, size_label, thousands};
use crate::systems::{FLOOR_GROWING, FLOOR_PREALLOCATED};

const COLORS: &[RGBColor] = &[
    RGBColor(214, 39, 40),   // durlog: red, drawn thickest
    RGBColor(31, 119, 180),  // okaywal
    RGBColor(44, 160, 44),   // raft-engine
    RGBColor(148, 103, 189), // fjall
    RGBColor(255, 127, 14),  // redb
    RGBColor(140, 86, 75),
];

pub fn draw(report: &Report, path: &Path) -> Result<()> {
    let sizes = report.sizes();
    let root = SVGBackend::new(path, (620 * sizes.len().max(1) as u32, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((1, sizes.len().max(1)));
    for (panel, &size) in panels.iter().zip(&sizes) {
        draw_panel(report, panel, size)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

fn draw_panel(
    report: &Report,
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    size: usize,
) -> Result<()> {
    let systems = report.systems();
    let threads = report.thread_counts();
    let values: Vec<f64> = report
        .appends
        .iter()
        .filter(|series| series.size == size)
        .map(|series| series.median_ops())
        .filter(|value| value.is_finite() && *value > 0.0)
        .collect();
    if values.is_empty() {
        return Ok(());
    }
    // From a whole decade, so that the log axis labels its steps.
    let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = values.iter().cloned().fold(0.0, f64::max);
    let low = 10f64.powf((min / 1.2).log10().floor());
    let high = max * 1.5;
    // x is log2(writers) on a linear axis, so the ticks fall on 1, 2, 4, ...
    let max_threads = threads.iter().copied().max().unwrap_or(1) as f64;
    let x_max = max_threads.log2();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("durable appends/s, {} events", size_label(size)),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.3f64..x_max + 0.3, (low..high).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("writer threads")
        .y_desc("appends/s (median)")
        .x_labels(x_max as usize + 2)
        .x_max_light_lines(0)
        .y_max_light_lines(1)
        .y_labels(12)
        .x_label_formatter(&|x| format!("{:.0}", 2f64.powf(x.round())))
        .y_label_formatter(&|y| thousands(*y))
        .draw()
        .map_err(err)?;
    for (floor, dashed) in [(FLOOR_GROWING, false), (FLOOR_PREALLOCATED, true)] {
        let Some(series) = report.find(floor, size, 1) else {
            continue;
        };
        let y = series.median_ops();
        let color = RGBColor(90, 90, 90);
        let points = vec![(-0.3, y), (x_max + 0.3, y)];
        let label = format!("{floor}, 1 thread");
        let drawn = if dashed {
            chart.draw_series(DashedLineSeries::new(points, 6, 4, color.stroke_width(1)))
        } else {
            chart.draw_series(LineSeries::new(points, color.stroke_width(2)))
        }
        .map_err(err)?;
        drawn.label(label).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
        });
    }
    for (index, system) in systems.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        let points: Vec<(f64, f64)> = threads
            .iter()
            .filter_map(|&t| {
                report
                    .find(system, size, t)
                    .map(|series| ((t as f64).log2(), series.median_ops()))
            })
            .filter(|(_, y)| y.is_finite() && *y > 0.0)
            .collect();
        let width = if system == "durlog" { 3 } else { 2 };
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
            .map_err(err)?
            .label(system.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width))
            });
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&point| Circle::new(point, 3, color.filled())),
            )
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

fn err<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow!("plotting: {error:?}")
}
