//! RL's training curves, drawn as an SVG next to the adapter: rewards and update statistics.

use super::RlStepRecord;
use crate::{Result, TrainError};
use plotters::prelude::*;
use std::path::Path;

/// The RL run's curves, one panel each: reward, response length, clip fraction, entropy and the
/// share of groups dropped for having equal rewards. The update's statistics (clip fraction,
/// entropy, the log-probability gap) have no point for a step that made no update: a zero there
/// would read as a collapsed policy.
pub fn rl_curves(history: &[RlStepRecord], path: &Path) -> Result<()> {
    /// A panel: title, unit, the value, and whether only steps with an update have one.
    type Metric = (&'static str, &'static str, fn(&RlStepRecord) -> f64, bool);
    let panels: [Metric; 6] = [
        ("mean reward", "reward", |r| r.reward_mean, false),
        ("response length", "tokens", |r| r.response_length, false),
        (
            "clip fraction",
            "share of tokens",
            |r| r.clip_fraction,
            true,
        ),
        ("policy entropy", "nats per token", |r| r.entropy, true),
        (
            "dropped groups (equal rewards)",
            "share of groups",
            |r| r.dropped_share(),
            false,
        ),
        (
            "|log p train - log p rollout|",
            "nats per token",
            |r| r.logprob_gap,
            true,
        ),
    ];
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1200, 720)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled("catena train rl", ("sans-serif", 22))?;
        let last_step = history.last().map(|r| r.step).unwrap_or(1).max(1);
        for (area, (title, unit, metric, update_only)) in
            root.split_evenly((2, 3)).iter().zip(panels)
        {
            let values: Vec<(usize, f64)> = history
                .iter()
                .filter(|r| r.updated() || !update_only)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: usize, trained_tokens: usize) -> RlStepRecord {
        RlStepRecord {
            step,
            reward_mean: 0.25,
            solved_share: 0.25,
            response_length: 200.0,
            clip_fraction: 0.0,
            capped_fraction: 0.0,
            entropy: if trained_tokens > 0 { 0.5 } else { 0.0 },
            logprob_gap: if trained_tokens > 0 { 0.01 } else { 0.0 },
            groups_sampled: 3,
            groups_dropped: if trained_tokens > 0 { 1 } else { 3 },
            loss: 0.0,
            grad_norm: 0.0,
            lr: 1e-4,
            rollouts: 12,
            trained_tokens,
            generated_tokens: 2400,
            reload_seconds: 0.0,
            rollout_seconds: 1.0,
            prefill_tokens: 0,
            mean_batch_width: 0.0,
            scoring_seconds: 0.0,
            update_seconds: 1.0,
        }
    }

    #[test]
    fn a_step_without_an_update_has_no_point_in_the_update_panels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curves.svg");
        rl_curves(&[step(1, 900), step(2, 0), step(3, 800)], &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        // Three panels plot every step (3 points each); the three update panels skip step 2.
        assert_eq!(svg.matches("<circle").count(), 3 * 3 + 3 * 2);
    }
}
