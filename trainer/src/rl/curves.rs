//! RL's training curves, drawn as an SVG next to the adapter: rewards and update statistics.

use super::RlStepRecord;
use crate::{Result, TrainError};
use plotters::prelude::*;
use std::path::Path;

/// The RL run's curves, one panel each: reward, response length, clip fraction, entropy and the
/// share of groups dropped for having equal rewards.
pub fn rl_curves(history: &[RlStepRecord], path: &Path) -> Result<()> {
    type Metric = (&'static str, &'static str, fn(&RlStepRecord) -> f64);
    let panels: [Metric; 6] = [
        ("mean reward", "reward", |r| r.reward_mean),
        ("response length", "tokens", |r| r.response_length),
        ("clip fraction", "share of tokens", |r| r.clip_fraction),
        ("policy entropy", "nats per token", |r| r.entropy),
        ("dropped groups (equal rewards)", "share of groups", |r| {
            r.dropped_share()
        }),
        ("|log p train - log p rollout|", "nats per token", |r| {
            r.logprob_gap
        }),
    ];
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1200, 720)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled("catena train rl", ("sans-serif", 22))?;
        let last_step = history.last().map(|r| r.step).unwrap_or(1).max(1);
        for (area, (title, unit, metric)) in root.split_evenly((2, 3)).iter().zip(panels) {
            let values: Vec<(usize, f64)> = history
                .iter()
                .map(|r| (r.step, metric(r)))
                .filter(|(_, v)| v.is_finite())
                .collect();
            let low = values
                .iter()
                .map(|v| v.1)
                .fold(f64::INFINITY, f64::min)
                .min(0.0);
            let high = values.iter().map(|v| v.1).fold(f64::NEG_INFINITY, f64::max);
            let high = if high.is_finite() && high > low {
                high * 1.1
            } else {
                low + 1.0
            };
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(32)
                .y_label_area_size(56)
                .build_cartesian_2d(0usize..last_step, low..high)?;
            chart.configure_mesh().x_desc("step").y_desc(unit).draw()?;
            chart.draw_series(LineSeries::new(values.clone(), BLUE.stroke_width(2)))?;
            chart.draw_series(
                values
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, BLUE.filled())),
            )?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| TrainError::Stopped(format!("drawing {}: {e}", path.display())))
}
