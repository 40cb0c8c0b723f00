import { parse as parseToml } from 'smol-toml';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { clientConfigs, contextTooSmall, KEY_VARIABLE, keyExport, largerContextCommand, MIN_AGENT_CONTEXT } from '../src/lib/connect';
import { contextStep, testConnection, TEST_TOOL } from '../src/lib/connection-test';

const target = { baseUrl: 'http://127.0.0.1:43117/v1', model: 'qwen2.5-coder-0.5b-instruct-q4_k_m' };

function config(id: string) {
  const found = clientConfigs(target).find((c) => c.id === id);
  if (!found) throw new Error(`no configuration for ${id}`);
  return found;
}

/** The words of a command line as a POSIX shell splits them (quotes only; no expansions here but `$VAR`). */
function shellWords(line: string): string[] {
  const words: string[] = [];
  for (const m of line.trim().matchAll(/'([^']*)'|"([^"]*)"|(\S+)/g)) words.push(m[1] ?? m[2] ?? m[3]);
  return words;
}

describe('client configurations', () => {
  it('are one per client, each naming the base URL and the model', () => {
    const all = clientConfigs(target);
    expect(all.map((c) => c.id)).toEqual(['codex', 'opencode', 'aider', 'continue']);
    for (const c of all) {
      expect(c.text, c.id).toContain(target.baseUrl);
      expect(c.text, c.id).toContain(target.model);
      expect(c.text, c.id).toContain(KEY_VARIABLE);
    }
  });

  it('Codex: a provider of its own on the Responses API, the key from the environment', () => {
    const parsed = parseToml(config('codex').text) as Record<string, unknown>;
    expect(parsed.model).toBe(target.model);
    expect(parsed.model_provider).toBe('catena');
    const providers = parsed.model_providers as Record<string, Record<string, unknown>>;
    expect(providers.catena).toEqual({
      name: 'Catena',
      base_url: target.baseUrl,
      env_key: KEY_VARIABLE,
      wire_api: 'responses',
    });
  });

  it('opencode: an OpenAI-compatible provider, chosen as the model', () => {
    const parsed = JSON.parse(config('opencode').text);
    const provider = parsed.provider.catena;
    expect(provider.npm).toBe('@ai-sdk/openai-compatible');
    expect(provider.options).toEqual({ baseURL: target.baseUrl, apiKey: `{env:${KEY_VARIABLE}}` });
    expect(Object.keys(provider.models)).toEqual([target.model]);
    expect(parsed.model).toBe(`catena/${target.model}`);
  });

  it('aider: one command line with the base, the key variable and the openai/ model', () => {
    const text = config('aider').text;
    expect(text.trim().split('\n')).toHaveLength(1);
    const words = shellWords(text);
    expect(words[0]).toBe('aider');
    const option = (name: string) => words[words.indexOf(name) + 1];
    expect(option('--openai-api-base')).toBe(target.baseUrl);
    expect(option('--openai-api-key')).toBe(`$${KEY_VARIABLE}`);
    expect(option('--model')).toBe(`openai/${target.model}`);
  });

  it('Continue: a model with the openai provider and apiBase, the key as a secret', () => {
    const parsed = parseYaml(config('continue').text);
    expect(parsed.schema).toBe('v1');
    expect(parsed.models).toHaveLength(1);
    const [model] = parsed.models;
    expect(model.provider).toBe('openai');
    expect(model.model).toBe(target.model);
    expect(model.apiBase).toBe(target.baseUrl);
    expect(model.apiKey).toBe(`\${{ secrets.${KEY_VARIABLE} }}`);
    expect(model.roles).toContain('chat');
  });

  it('quote what the formats need quoted', () => {
    const odd = { baseUrl: 'http://[::1]:8420/v1', model: 'my "model" it\'s' };
    const codex = parseToml(clientConfigs(odd)[0].text) as Record<string, unknown>;
    expect(codex.model).toBe(odd.model);
    expect(JSON.parse(clientConfigs(odd)[1].text).model).toBe(`catena/${odd.model}`);
    const words = shellWords(clientConfigs(odd)[2].text.replace(/'\\''/g, '\u0000'));
    expect(words[words.indexOf('--model') + 1].replace(/\u0000/g, "'")).toBe(`openai/${odd.model}`);
    expect(parseYaml(clientConfigs(odd)[3].text).models[0].model).toBe(odd.model);
  });

  it('the key line exports the variable; any word for a server without a key', () => {
    expect(keyExport('sk-local-1')).toBe(`export ${KEY_VARIABLE}=sk-local-1\n`);
    expect(keyExport(null)).toBe(`export ${KEY_VARIABLE}=catena\n`);
    expect(keyExport("a b'c")).toBe(`export ${KEY_VARIABLE}='a b'\\''c'\n`);
  });

  it('a context below 16,384 tokens is too small, and the fix names the flag', () => {
    expect(contextTooSmall(MIN_AGENT_CONTEXT - 1)).toBe(true);
    expect(contextTooSmall(MIN_AGENT_CONTEXT)).toBe(false);
    expect(largerContextCommand()).toBe('catena serve --ctx-size 32768');
    expect(contextStep(4096)).toMatchObject({ status: 'warn' });
    expect(contextStep(4096).detail).toContain('--ctx-size');
    expect(contextStep(32768).status).toBe('pass');
  });
});

describe('connection test', () => {
  type Route = (init?: RequestInit) => Response;
  function server(routes: Record<string, Route>) {
    const calls: { url: string; init?: RequestInit }[] = [];
    const fetcher = async (input: RequestInfo | URL, init?: RequestInit) => {
      const url = String(input);
      calls.push({ url, init });
      const route = routes[url];
      return route ? route(init) : new Response('{"error":{"message":"No route"}}', { status: 404 });
    };
    return { fetcher: fetcher as typeof fetch, calls };
  }
  const models = () => Response.json({ object: 'list', data: [{ id: target.model }] });
  const toolCall = (args: string) => () =>
    Response.json({
      choices: [{ finish_reason: 'tool_calls', message: { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'read_file', arguments: args } }] } }],
    });

  it('passes when the model is listed and the tool is called, with the key on every request', async () => {
    const { fetcher, calls } = server({ '/v1/models': models, '/v1/chat/completions': toolCall('{"path":"README.md"}') });
    const steps = await testConnection('/v1', 'k1', target.model, 32768, fetcher);
    expect(steps.map((s) => s.status)).toEqual(['pass', 'pass', 'pass']);
    expect(steps[1].detail).toBe('read_file({"path":"README.md"})');
    for (const call of calls) expect(new Headers(call.init?.headers).get('Authorization')).toBe('Bearer k1');
    const body = JSON.parse(String(calls[1].init?.body));
    expect(body.tools).toEqual([TEST_TOOL]);
    expect(body.tool_choice).toBe('required');
    expect(body.max_tokens).toBeLessThanOrEqual(64);
  });

  it('fails plainly on a refused key, and asks nothing more', async () => {
    const { fetcher, calls } = server({
      '/v1/models': () => Response.json({ error: { message: 'Incorrect API key provided.' } }, { status: 401 }),
    });
    const steps = await testConnection('/v1', 'wrong', target.model, 4096, fetcher);
    expect(steps[0]).toMatchObject({ status: 'fail' });
    expect(steps[0].detail).toContain('refused the key');
    expect(calls).toHaveLength(1);
    expect(steps.at(-1)?.status).toBe('warn');
  });

  it('fails when the answer is text instead of a call, or the arguments are not JSON', async () => {
    const text = () => Response.json({ choices: [{ finish_reason: 'stop', message: { role: 'assistant', content: 'README.md says hello' } }] });
    let steps = await testConnection('/v1', null, target.model, 32768, server({ '/v1/models': models, '/v1/chat/completions': text }).fetcher);
    expect(steps[1].status).toBe('fail');
    expect(steps[1].detail).toContain('not a tool call');
    expect(steps[1].quote).toBe('README.md says hello');
    steps = await testConnection('/v1', null, target.model, 32768, server({ '/v1/models': models, '/v1/chat/completions': toolCall('{"path":') }).fetcher);
    expect(steps[1].status).toBe('fail');
    expect(steps[1].detail).toContain('not JSON');
  });

  it('sends no key to a server that takes none, and reports a server error in its words', async () => {
    const refusal = () => Response.json({ error: { message: 'This model\'s context is 4096 tokens', code: 'context_length_exceeded' } }, { status: 400 });
    const { fetcher, calls } = server({ '/v1/models': models, '/v1/chat/completions': refusal });
    const steps = await testConnection('/v1', null, target.model, 4096, fetcher);
    expect(new Headers(calls[0].init?.headers).has('Authorization')).toBe(false);
    expect(steps[1]).toMatchObject({ status: 'fail', detail: "400: This model's context is 4096 tokens" });
  });
});
