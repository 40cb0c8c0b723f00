// The user's settings, kept in the browser's storage (the desktop app's webview has its own).

export type Theme = 'light' | 'dark' | 'system';

export interface Settings {
  theme: Theme;
  temperature: number;
  top_p: number;
  top_k: number;
  /** Empty: a new random seed each run. */
  seed: number | null;
  max_tokens: number;
  max_tool_calls: number;
  /** Seconds; empty: no limit. */
  max_time: number | null;
}

export const DEFAULTS: Settings = {
  theme: 'system',
  temperature: 0.6,
  top_p: 0.95,
  top_k: 40,
  seed: null,
  max_tokens: 8192,
  max_tool_calls: 12,
  max_time: null,
};

const KEY = 'catena.settings';

function load(): Settings {
  try {
    const saved = JSON.parse(localStorage.getItem(KEY) ?? '{}') as Partial<Settings>;
    return { ...DEFAULTS, ...saved };
  } catch {
    return { ...DEFAULTS };
  }
}

export const settings: Settings = $state(load());

export function save(): void {
  localStorage.setItem(KEY, JSON.stringify(settings));
}

export function reset(): void {
  Object.assign(settings, DEFAULTS);
  save();
}

/** The theme actually shown. */
export function effectiveTheme(theme: Theme): 'light' | 'dark' {
  if (theme !== 'system') return theme;
  return window.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}
