import { describe, expect, it } from 'vitest';
import { adoptTokenFromAddress, currentToken, setToken } from '../src/lib/credential';
import { authorizedFetch } from '../src/lib/http';

/** An in-memory Storage. */
function memoryStorage() {
  const items = new Map<string, string>();
  return {
    getItem: (k: string) => items.get(k) ?? null,
    setItem: (k: string, v: string) => void items.set(k, v),
    removeItem: (k: string) => void items.delete(k),
  };
}

describe('the per-launch token', () => {
  it('is taken from the fragment, kept, and removed from the address', () => {
    const storage = memoryStorage();
    const replaced: string[] = [];
    const history = { replaceState: (_s: unknown, _t: string, url?: string | URL | null) => void replaced.push(String(url)) };
    const token = adoptTokenFromAddress({ hash: '#token=abc123', pathname: '/', search: '?x=1' }, history, storage);
    expect(token).toBe('abc123');
    expect(currentToken(storage)).toBe('abc123');
    expect(replaced).toEqual(['/?x=1']);
    // A later load without the fragment keeps the token of this tab.
    expect(adoptTokenFromAddress({ hash: '', pathname: '/', search: '' }, history, storage)).toBe('abc123');
    expect(replaced).toHaveLength(1);
  });

  it('can be set and forgotten by hand', () => {
    const storage = memoryStorage();
    setToken('  key  ', storage);
    expect(currentToken(storage)).toBe('key');
    setToken('', storage);
    expect(currentToken(storage)).toBeNull();
  });

  it('goes with every request as a bearer token, and only when there is one', async () => {
    const seen: (string | null)[] = [];
    const inner = (async (_input: RequestInfo | URL, init?: RequestInit) => {
      seen.push(new Headers(init?.headers).get('Authorization'));
      return new Response('{}');
    }) as typeof fetch;
    let token: string | null = 'abc';
    const fetcher = authorizedFetch(() => token, inner);
    await fetcher('/v1/models', { headers: { Accept: 'application/json' } });
    token = null;
    await fetcher('/v1/models');
    expect(seen).toEqual(['Bearer abc', null]);
  });
});
