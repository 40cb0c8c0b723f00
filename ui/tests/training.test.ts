import { describe, expect, it } from 'vitest';
import { duration, polyline, progressOf, scales } from '../src/lib/training';
import type { SftEvent } from '../src/lib/types';

const events: SftEvent[] = [
  { event: 'prepared', train_samples: 10, eval_samples: 2, total_steps: 4, trainable_parameters: 1000, rejected: [{ origin: 'd.jsonl:3', reason: 'bad' }], weight_types: ['Q4_K'] },
  { event: 'step', step: 1, total_steps: 4, epoch: 1, loss: 2.0, lr: 1e-4, grad_norm: 0.5, tokens: 900, tokens_per_second: 30, eta_seconds: 90, elapsed_seconds: 30 },
  { event: 'checkpoint', step: 1, path: '/x' },
  { event: 'step', step: 2, total_steps: 4, epoch: 1, loss: 1.0, lr: 2e-4, grad_norm: 0.4, tokens: 930, tokens_per_second: 31, eta_seconds: 60, elapsed_seconds: 60 },
  { event: 'eval', step: 2, loss: 1.5 },
];

describe('training progress', () => {
  it('folds the events into steps, evaluations and the last step', () => {
    const p = progressOf(events);
    expect(p.steps).toEqual([
      { step: 1, loss: 2.0 },
      { step: 2, loss: 1.0 },
    ]);
    expect(p.evals).toEqual([{ step: 2, loss: 1.5 }]);
    expect(p.totalSteps).toBe(4);
    expect(p.last?.step).toBe(2);
    expect(p.prepared?.rejected).toHaveLength(1);
    expect(p.finished).toBeNull();
  });

  it('draws the loss inside the frame, higher loss higher up', () => {
    const p = progressOf(events);
    const { maxStep, maxLoss } = scales(p);
    expect(maxStep).toBe(4);
    expect(maxLoss).toBeCloseTo(2.1);
    const frame = { width: 200, height: 100, pad: 10 };
    const points = polyline(p.steps, frame, maxStep, maxLoss)
      .split(' ')
      .map((xy) => xy.split(',').map(Number));
    expect(points).toHaveLength(2);
    for (const [x, y] of points) {
      expect(x).toBeGreaterThanOrEqual(10);
      expect(x).toBeLessThanOrEqual(190);
      expect(y).toBeGreaterThanOrEqual(10);
      expect(y).toBeLessThanOrEqual(90);
    }
    expect(points[0][1]).toBeLessThan(points[1][1]);
    expect(points[1][0]).toBeCloseTo(10 + (2 / 4) * 180);
  });

  it('leaves out a loss that is not a number instead of drawing NaN', () => {
    const frame = { width: 100, height: 100, pad: 0 };
    expect(polyline([{ step: 1, loss: NaN }], frame, 1, 1)).toBe('');
  });

  it('says durations the way people read them', () => {
    expect(duration(45)).toBe('45 s');
    expect(duration(200)).toBe('3 min 20 s');
    expect(duration(7260)).toBe('2 h 1 min');
    expect(duration(-1)).toBe('–');
  });
});
