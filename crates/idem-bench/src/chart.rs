//! [`write_charts`]: one SVG chart per cost curve of a [`Results`].

use std::path::{Path, PathBuf};

use plotters::{coord::ranged1d::SegmentValue, prelude::*};

use crate::{
    Results,
    report::{bytes_label, count, store_label},
};

/// A chart that could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("drawing {path}: {message}")]
pub struct ChartError {
    path: PathBuf,
    // plotters' error type borrows the backend's; its text is all that outlives the drawing.
    message: String,
}

/// One panel of a chart: a Y axis and its lines over the curve's X values.
struct Panel {
    y_label: &'static str,
    lines: Vec<(String, Vec<Option<f64>>)>,
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes `connections.svg`, `body.svg`, `keys.svg` and `counts.svg` into `dir`, each for the
/// curve measured in `results` (a curve not measured gets no chart). Returns the files written.
pub fn write_charts(results: &Results, dir: &Path) -> Result<Vec<PathBuf>, ChartError> {
    let mut written = Vec::new();
    let per_series =
        |curve: &str, series: &[&str], metric: &str, label: &dyn Fn(&str) -> String| {
            let xs = results.xs(curve);
            series
                .iter()
                .map(|s| {
                    let values = xs
                        .iter()
                        .map(|&x| results.get(curve, s, x, metric))
                        .collect();
                    (label(s), values)
                })
                .collect::<Vec<_>>()
        };
    let plain = |s: &str| match s {
        "direct" => "upstream direct".to_owned(),
        "plain_proxy" => "plain proxy".to_owned(),
        _ => "memory, new keys".to_owned(),
    };
    let both = ["plain_proxy", "memory_new_keys"];
    let with_direct = ["direct", "plain_proxy", "memory_new_keys"];

    let xs = results.xs("connections");
    if !xs.is_empty() {
        let path = dir.join("connections.svg");
        let labels = xs.iter().map(u64::to_string).collect();
        let panels = [
            Panel {
                y_label: "requests/s",
                lines: per_series("connections", &with_direct, "rps", &plain),
            },
            Panel {
                y_label: "p99 (ms)",
                lines: per_series("connections", &with_direct, "p99_ms", &plain),
            },
        ];
        draw(
            &path,
            "Throughput and p99 by connections",
            "connections",
            labels,
            &panels,
        )?;
        written.push(path);
    }

    let xs = results.xs("body");
    if !xs.is_empty() {
        let path = dir.join("body.svg");
        let labels = xs.iter().map(|&x| bytes_label(x)).collect();
        let ratio = xs
            .iter()
            .map(|&x| {
                let memory = results.get("body", "memory_new_keys", x, "rps")?;
                Some(memory / results.get("body", "plain_proxy", x, "rps")?)
            })
            .collect();
        let panels = [
            Panel {
                y_label: "requests/s",
                lines: per_series("body", &both, "rps", &plain),
            },
            Panel {
                y_label: "new keys / plain proxy",
                lines: vec![("memory, new keys".to_owned(), ratio)],
            },
        ];
        draw(
            &path,
            "Throughput by request body size (JSON)",
            "request body",
            labels,
            &panels,
        )?;
        written.push(path);
    }

    let xs = results.xs("keys");
    if !xs.is_empty() {
        let path = dir.join("keys.svg");
        let labels = xs.iter().map(|&x| count(x)).collect();
        let stores: Vec<&str> = results
            .series("keys")
            .iter()
            .map(String::as_str)
            .filter(|s| *s != "plain_proxy")
            .collect();
        let against_empty = stores
            .iter()
            .map(|store| {
                let empty = results.get("keys", store, 0, "rps");
                let values = xs
                    .iter()
                    .map(|&x| Some(results.get("keys", store, x, "rps")? / empty?))
                    .collect();
                (store_label(store).to_owned(), values)
            })
            .collect();
        let label = |s: &str| store_label(s).to_owned();
        let panels = [
            Panel {
                y_label: "new keys/s vs. the empty store",
                lines: against_empty,
            },
            Panel {
                y_label: "bytes per key",
                lines: per_series("keys", &stores, "bytes_per_key", &label),
            },
        ];
        draw(&path, "Cost by stored keys", "stored keys", labels, &panels)?;
        written.push(path);
    }

    let xs = results.xs("counts");
    if !xs.is_empty() {
        let path = dir.join("counts.svg");
        let labels = xs.iter().map(u64::to_string).collect();
        let mut lines = Vec::new();
        for store in results.series("counts") {
            for metric in ["fsyncs", "commits", "round_trips", "scripts", "reads"] {
                if !results.metrics("counts", store).iter().any(|m| m == metric) {
                    continue;
                }
                let values = xs
                    .iter()
                    .map(|&x| {
                        let counted = results.get("counts", store, x, metric)?;
                        Some(counted / results.get("counts", store, x, "requests")?)
                    })
                    .collect();
                lines.push((format!("{}: {metric}", store_label(store)), values));
            }
        }
        let panels = [Panel {
            y_label: "per new key",
            lines,
        }];
        draw(
            &path,
            "Counted per new key, by concurrent clients",
            "clients",
            labels,
            &panels,
        )?;
        written.push(path);
    }
    Ok(written)
}

/// Draws `panels` side by side over the same categorical X axis (`x_labels`, evenly spaced).
fn draw(
    path: &Path,
    title: &str,
    x_label: &str,
    x_labels: Vec<String>,
    panels: &[Panel],
) -> Result<(), ChartError> {
    let failed = |error: &dyn std::error::Error| ChartError {
        path: path.to_owned(),
        message: error.to_string(),
    };
    let width = 520 * u32::try_from(panels.len()).unwrap_or(1);
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(|e| failed(&e))?;
    let n = x_labels.len();
    for (area, panel) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        let top = panel
            .lines
            .iter()
            .flat_map(|(_, values)| values.iter().filter_map(|v| finite(*v)))
            .fold(0.0_f64, f64::max);
        // Headroom above the highest point for the legend, in the upper right.
        let top = if top > 0.0 { top * 1.6 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            // A segmented range is inclusive: `0..n - 1` gives one segment per point.
            .build_cartesian_2d((0..n.saturating_sub(1)).into_segmented(), 0.0..top)
            .map_err(|e| failed(&e))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => x_labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_formatter(&|y| {
                if top > 10.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y:.2}")
                }
            })
            .x_desc(x_label)
            .y_desc(panel.y_label)
            .draw()
            .map_err(|e| failed(&e))?;
        for (index, (name, values)) in panel.lines.iter().enumerate() {
            let color = COLORS[index % COLORS.len()];
            let points: Vec<(SegmentValue<usize>, f64)> = values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| finite(*v).map(|v| (SegmentValue::CenterOf(i), v)))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(|e| failed(&e))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(|e| failed(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| failed(&e))?;
    }
    root.present().map_err(|e| failed(&e))?;
    Ok(())
}

/// A value that can be drawn: a ratio over a point that measured nothing (0 requests/s) is
/// infinite or NaN, and is left out.
fn finite(value: Option<f64>) -> Option<f64> {
    value.filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_measured_curve_gets_one_svg_with_its_labels() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_owned();
        let results: Results = "connections plain_proxy 1 rps 5000\n\
                                connections memory_new_keys 1 rps 4000\n\
                                connections plain_proxy 32 rps 30000\n\
                                connections memory_new_keys 32 rps 27000\n\
                                keys plain_proxy 0 rps 30000\n\
                                keys sqlite 0 rps 0\n\
                                keys sqlite 100000 rps 1900\n\
                                keys sqlite 100000 bytes_per_key 400\n"
            .parse()
            .unwrap();
        let written = write_charts(&results, &dir).unwrap();
        assert_eq!(written, [dir.join("connections.svg"), dir.join("keys.svg")]);
        let svg = std::fs::read_to_string(dir.join("keys.svg")).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in ["Cost by stored keys", "100 k", "SQLite", "bytes per key"] {
            assert!(svg.contains(text), "{text} missing");
        }
    }
}
