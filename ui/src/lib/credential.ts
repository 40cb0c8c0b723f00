// The browser UI's credential for a `catena serve` that has an API key. The server prints the
// address to open with a per-launch token in the fragment (`/#token=...`), which browsers never
// send to a server or write to its logs. The page takes the token from there, keeps it for this
// tab only (sessionStorage), and removes it from the address bar; the user may also enter the
// API key itself in Settings.

const STORAGE_KEY = 'catena.token';

/** Takes `#token=...` out of the address into this tab's storage; returns the token to use. */
export function adoptTokenFromAddress(
  location: Pick<Location, 'hash' | 'pathname' | 'search'>,
  history: Pick<History, 'replaceState'>,
  storage: Pick<Storage, 'getItem' | 'setItem'>,
): string | null {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ''));
  const token = fragment.get('token');
  if (token) {
    storage.setItem(STORAGE_KEY, token);
    history.replaceState(null, '', location.pathname + location.search);
    return token;
  }
  return storage.getItem(STORAGE_KEY);
}

/** The credential requests carry, if any. */
export function currentToken(storage: Pick<Storage, 'getItem'> = sessionStorage): string | null {
  return storage.getItem(STORAGE_KEY) || null;
}

/** Sets (or, with an empty value, forgets) the credential for this tab. */
export function setToken(token: string, storage: Pick<Storage, 'setItem' | 'removeItem'> = sessionStorage): void {
  const trimmed = token.trim();
  if (trimmed) storage.setItem(STORAGE_KEY, trimmed);
  else storage.removeItem(STORAGE_KEY);
}
