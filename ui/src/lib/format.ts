export function bytes(n: number | null, estimate = false): string {
  if (n === null) return '?';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const text = unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit]}`;
  return estimate ? `~${text}` : text;
}

export function when(ms: number): string {
  return new Date(ms).toLocaleString();
}

/** Text with `backtick` spans (as Catena's messages quote commands) split into plain and code parts. */
export function codeSpans(text: string): { code: boolean; text: string }[] {
  return text
    .split('`')
    .map((part, i) => ({ code: i % 2 === 1, text: part }))
    .filter((part) => part.text !== '');
}

/** What went wrong, in words: an error's message, or whatever was thrown. */
export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
