// Which view is shown, and which run the run view follows.

import type { Transport } from './transport';

export type View = 'run' | 'sessions' | 'models' | 'settings' | 'training' | 'connect';

export const VIEWS: { id: View; label: string; key: string }[] = [
  { id: 'run', label: 'Run', key: '1' },
  { id: 'sessions', label: 'Sessions', key: '2' },
  { id: 'models', label: 'Models', key: '3' },
  { id: 'settings', label: 'Settings', key: '4' },
  { id: 'training', label: 'Training', key: '5' },
  { id: 'connect', label: 'Connect', key: '6' },
];

export const ui: { view: View; runId: string | null } = $state({ view: 'run', runId: null });

/** Shows a stored run in the run view (its events are replayed from the store). */
export function reopen(runId: string): void {
  ui.runId = runId;
  ui.view = 'run';
}

let current: Transport | null = null;

export function setTransport(transport: Transport): void {
  current = transport;
}

export function transport(): Transport {
  if (!current) throw new Error('no transport');
  return current;
}
