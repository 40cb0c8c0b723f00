// The training page's arithmetic: what the trainer's events say, and the loss curve as SVG
// coordinates (drawn by the page, no chart library).

import type { SftEvent } from './types';

export interface Point {
  step: number;
  loss: number;
}

export interface Progress {
  steps: Point[];
  evals: Point[];
  totalSteps: number | null;
  /** The last `step` event. */
  last: Extract<SftEvent, { event: 'step' }> | null;
  prepared: Extract<SftEvent, { event: 'prepared' }> | null;
  finished: Extract<SftEvent, { event: 'finished' }> | null;
  resumedAt: number | null;
}

/** Folds a run's events (in order) into what the page shows. */
export function progressOf(events: SftEvent[]): Progress {
  const p: Progress = { steps: [], evals: [], totalSteps: null, last: null, prepared: null, finished: null, resumedAt: null };
  for (const e of events) {
    switch (e.event) {
      case 'prepared':
        p.prepared = e;
        p.totalSteps = e.total_steps;
        break;
      case 'resumed':
        p.resumedAt = e.step;
        break;
      case 'step':
        p.steps.push({ step: e.step, loss: e.loss });
        p.last = e;
        p.totalSteps = e.total_steps;
        break;
      case 'eval':
        p.evals.push({ step: e.step, loss: e.loss });
        break;
      case 'finished':
        p.finished = e;
        break;
    }
  }
  return p;
}

export interface Frame {
  width: number;
  height: number;
  pad: number;
}

/** The axes' ranges: steps from 0 to the run's length, loss from 0 to 5% over the highest. */
export function scales(p: Progress): { maxStep: number; maxLoss: number } {
  const losses = [...p.steps, ...p.evals].map((q) => q.loss).filter(Number.isFinite);
  const maxLoss = Math.max(0.1, ...losses) * 1.05;
  const maxStep = Math.max(1, p.totalSteps ?? 0, ...p.steps.map((q) => q.step));
  return { maxStep, maxLoss };
}

/** `x,y x,y ...` for an SVG polyline of `points` in `frame` (y grows downwards). */
export function polyline(points: Point[], frame: Frame, maxStep: number, maxLoss: number): string {
  const w = frame.width - 2 * frame.pad;
  const h = frame.height - 2 * frame.pad;
  return points
    .filter((q) => Number.isFinite(q.loss))
    .map((q) => {
      const x = frame.pad + (q.step / maxStep) * w;
      const y = frame.pad + h - (Math.min(q.loss, maxLoss) / maxLoss) * h;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

/** `3 min 20 s`, `45 s`. */
export function duration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '–';
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
