//! The report's plots, as SVG next to `report.md`: pass rates by task family, and how many
//! tokens solved and unsolved runs generated (a model that rambles when it fails shows it here).

use super::{EvalError, Report};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// File names of the plots in a report folder.
pub const FAMILY_PLOT: &str = "pass_by_family.svg";
pub const TOKENS_PLOT: &str = "tokens.svg";

const SOLVED: RGBColor = RGBColor(46, 125, 50);
const UNSOLVED: RGBColor = RGBColor(198, 40, 40);
const PASS_1: RGBColor = RGBColor(30, 100, 180);
const PASS_K: RGBColor = RGBColor(140, 180, 230);

type Drawn = Result<(), Box<dyn std::error::Error>>;
type Draw = fn(&Report, &Path) -> Drawn;

/// Writes every plot of `report` into `dir`; returns their paths.
pub fn write_plots(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, EvalError> {
    let plots: [(&str, Draw); 2] = [(FAMILY_PLOT, family_bars), (TOKENS_PLOT, token_histogram)];
    plots
        .into_iter()
        .map(|(name, draw)| {
            let path = dir.join(name);
            draw(report, &path).map_err(|e| EvalError::Plot {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            Ok(path)
        })
        .collect()
}

/// Bars of pass@1 (and pass@K beside it when there are K runs a task) per family.
fn family_bars(report: &Report, path: &Path) -> Drawn {
    let families = &report.families;
    let n = families.len().max(1);
    let width = (160 + 110 * n).clamp(640, 1600) as u32;
    let root = SVGBackend::new(path, (width, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    // x in hundredths of a family's slot: key points (the labels) at the slots' centres.
    let slots = n as i32 * 100;
    let centres: Vec<i32> = (0..slots).step_by(100).map(|x| x + 50).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Pass rate by task family ({} tasks)", report.tasks),
            ("sans-serif", 20),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(56)
        // y in tenths of a percent, labelled up to 100; the room above holds the legend.
        .build_cartesian_2d(
            (0..slots).with_key_points(centres),
            (0..1250).with_key_points((0..=1000).step_by(200).collect()),
        )?;
    let names: Vec<String> = families.iter().map(|f| short(&f.family, 18)).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|x| {
            usize::try_from(x / 100)
                .ok()
                .and_then(|i| names.get(i))
                .cloned()
                .unwrap_or_default()
        })
        .y_label_formatter(&|y: &i32| (y / 10).to_string())
        .light_line_style(WHITE)
        .y_desc("tasks solved (%)")
        .draw()?;
    let k = report.samples;
    let pairs = k > 1;
    let bar = |i: usize, offset: i32, value: f64, color: RGBColor| {
        let start = i as i32 * 100;
        let (left, right) = if pairs {
            (start + 12 + offset, start + 48 + offset)
        } else {
            (start + 20, start + 80)
        };
        Rectangle::new([(left, 0), (right, per_mille(value))], color.filled())
    };
    let label = if pairs {
        format!("pass@1 (avg@{k})")
    } else {
        "pass@1".to_string()
    };
    chart
        .draw_series(
            families
                .iter()
                .enumerate()
                .map(|(i, f)| bar(i, 0, f.pass_at_1, PASS_1)),
        )?
        .label(label)
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], PASS_1.filled()));
    if pairs {
        chart
            .draw_series(
                families
                    .iter()
                    .enumerate()
                    .map(|(i, f)| bar(i, 40, f.pass_at_k, PASS_K)),
            )?
            .label(format!("pass@{k}"))
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], PASS_K.filled()));
    }
    chart.draw_series(families.iter().enumerate().map(|(i, f)| {
        let centre = i as i32 * 100 + if pairs { 30 } else { 50 };
        Text::new(
            format!("{:.0}%", 100.0 * f.pass_at_1),
            (centre - 8, per_mille(f.pass_at_1) + 40),
            ("sans-serif", 13),
        )
    }))?;
    finish(&mut chart, &root)
}

/// Histogram of generated tokens per run, solved and unsolved runs side by side in each bin.
fn token_histogram(report: &Report, path: &Path) -> Drawn {
    /// About this many bins (fewer once the width is rounded).
    const BINS: usize = 12;
    let most = report
        .results
        .iter()
        .map(|r| r.generated_tokens)
        .max()
        .unwrap_or(0)
        .max(1);
    let bin_width = round_up(most.div_ceil(BINS));
    let bins = most / bin_width + 1;
    let mut counts = vec![[0usize; 2]; bins];
    for r in &report.results {
        let bin = (r.generated_tokens / bin_width).min(bins - 1);
        counts[bin][usize::from(!r.solved)] += 1;
    }
    let top = counts.iter().flatten().copied().max().unwrap_or(0).max(1);
    let root = SVGBackend::new(path, (800, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    // x in hundredths of a bin, labelled in tokens at the bins' edges.
    let edges: Vec<i32> = (0..=bins as i32).map(|b| b * 100).collect();
    let range = 0..bins as i32 * 100;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Generated tokens per run ({} runs, {} solved)",
                report.results.len(),
                report.results.iter().filter(|r| r.solved).count()
            ),
            ("sans-serif", 20),
        )
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(range.with_key_points(edges), 0.0..(top as f64 * 1.3))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|x| (usize::try_from(*x / 100).unwrap_or(0) * bin_width).to_string())
        .y_label_formatter(&|y| format!("{y:.0}"))
        .light_line_style(WHITE)
        .x_desc("generated tokens")
        .y_desc("runs")
        .draw()?;
    for (column, (name, color)) in [("solved", SOLVED), ("unsolved", UNSOLVED)]
        .into_iter()
        .enumerate()
    {
        let offset = 8 + 42 * column as i32;
        chart
            .draw_series(
                counts
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c[column] > 0)
                    .map(|(b, c)| {
                        let left = b as i32 * 100 + offset;
                        Rectangle::new([(left, 0.0), (left + 42, c[column] as f64)], color.filled())
                    }),
            )?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    finish(&mut chart, &root)
}

/// A share in 0..=1 in tenths of a percent.
fn per_mille(share: f64) -> i32 {
    (1000.0 * share).round() as i32
}

/// The smallest 1, 2 or 5 times a power of ten at least `n`: bin edges people read at a glance.
fn round_up(n: usize) -> usize {
    let mut power = 1usize;
    loop {
        for step in [1, 2, 5] {
            let candidate = step * power;
            if candidate >= n {
                return candidate;
            }
        }
        match power.checked_mul(10) {
            Some(p) => power = p,
            None => return n.max(1),
        }
    }
}

/// Draws the legend (top right) and writes the file.
fn finish<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
    root: &DrawingArea<SVGBackend<'b>, Shift>,
) -> Drawn {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;
    root.present()?;
    Ok(())
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskResult;

    #[test]
    fn bins_are_round() {
        assert_eq!(
            [0, 1, 3, 7, 82, 100, 101, 4000].map(round_up),
            [1, 1, 5, 10, 100, 100, 200, 5000]
        );
        assert!(round_up(usize::MAX) >= 1);
    }

    #[test]
    fn plots_are_written_for_any_report() {
        let dir = tempfile::tempdir().unwrap();
        let run = |id: &str, family: Option<&str>, sample, solved, tokens| TaskResult {
            id: id.into(),
            family: family.map(str::to_string),
            expected: "1".into(),
            answer: None,
            solved,
            well_formed: false,
            tool_calls: 0,
            generated_tokens: tokens,
            seconds: 0.0,
            stop: "max_tokens".into(),
            sample,
            reward: 0.0,
            f1: None,
            model_calls: 1,
            total_tokens: tokens,
            mean_logprob: None,
            printed: Vec::new(),
        };
        let reports = [
            Report::new("m".into(), None, "p".into(), "coa", Vec::new(), 0.0),
            Report::new(
                "m".into(),
                None,
                "p".into(),
                "coa",
                vec![run("a", None, 0, false, 0)],
                0.0,
            ),
            Report::new(
                "m".into(),
                None,
                "p".into(),
                "coa",
                vec![
                    run("a", Some("arithmetic"), 0, true, 120),
                    run("a", Some("arithmetic"), 1, false, 900),
                    run("b", Some("a very long family name indeed"), 0, true, 300),
                    run("b", Some("a very long family name indeed"), 1, true, 310),
                ],
                0.0,
            ),
        ];
        for report in &reports {
            let paths = write_plots(report, dir.path()).unwrap();
            for path in paths {
                let svg = std::fs::read_to_string(&path).unwrap();
                assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{svg}");
            }
        }
        let missing = dir.path().join("no/such/folder");
        assert!(matches!(
            write_plots(&reports[2], &missing),
            Err(EvalError::Plot { .. })
        ));
    }
}
