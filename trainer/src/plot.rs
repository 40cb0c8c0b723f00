//! SFT's loss curve, drawn as an SVG next to the adapter (RL's panels are in `rl::curves`).

use crate::checkpoint::{EvalRecord, StepRecord};
use crate::{Result, TrainError};
use plotters::prelude::*;
use std::path::Path;

/// Training loss per step (and its running mean) and held-out loss at each evaluation.
pub fn loss_curve(history: &[StepRecord], evals: &[EvalRecord], path: &Path) -> Result<()> {
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let last_step = history.last().map(|r| r.step).unwrap_or(1).max(1);
        let losses = history
            .iter()
            .map(|r| r.loss)
            .chain(evals.iter().map(|e| e.loss));
        let top = losses.fold(0.0f64, f64::max).max(0.1) * 1.05;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "catena train sft: loss per trained token",
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(0usize..last_step, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("optimizer step")
            .y_desc("loss (nats)")
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                history.iter().map(|r| (r.step, r.loss)),
                RGBColor(160, 180, 220).stroke_width(1),
            ))?
            .label("train (per step)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(160, 180, 220)));
        let window = 10usize;
        let smoothed: Vec<(usize, f64)> = history
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let from = i.saturating_sub(window - 1);
                let slice = &history[from..=i];
                (
                    r.step,
                    slice.iter().map(|s| s.loss).sum::<f64>() / slice.len() as f64,
                )
            })
            .collect();
        chart
            .draw_series(LineSeries::new(smoothed, BLUE.stroke_width(2)))?
            .label("train (mean of 10)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE));
        chart
            .draw_series(LineSeries::new(
                evals.iter().map(|e| (e.step, e.loss)),
                RED.stroke_width(2),
            ))?
            .label("held-out")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
        chart.draw_series(
            evals
                .iter()
                .map(|e| Circle::new((e.step, e.loss), 3, RED.filled())),
        )?;
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| TrainError::Stopped(format!("drawing {}: {e}", path.display())))
}
