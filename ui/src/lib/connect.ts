// How coding agents and editors connect to `catena serve`: the ready configurations the page
// "Connect an editor" shows, kept here and nowhere else, so that the page, the tests and the
// README's copies can be checked against one source. Each template takes the server's base URL and the served model's id;
// the key is never written into a configuration file: every client reads it from the
// environment variable `catena serve` itself reads (`CATENA_API_KEY`), so one `export` serves
// both. To change what a client is told, change its template below (ui/tests/connect.test.ts
// checks that each one still parses and names the address and the model).

/** The variable the clients read the key from; `catena serve --api-key` reads it too. */
export const KEY_VARIABLE = 'CATENA_API_KEY';

/** Coding agents send prompts of 10,000 tokens and more: below this, say so. */
export const MIN_AGENT_CONTEXT = 16_384;

/**
 * The context the page suggests (`catena serve --ctx-size`): the protocol's budget, the same
 * number the server's own error for a too-long prompt suggests.
 */
export const SUGGESTED_CONTEXT = 32_768;

/** Where `catena serve` listens unless told otherwise (`--host`, `--port`). */
export const DEFAULT_BASE_URL = 'http://127.0.0.1:8420/v1';

/** What every configuration is filled in with. */
export interface Target {
  /** The OpenAI-compatible API's base URL, ending in `/v1`. */
  baseUrl: string;
  /** The served model's id, as `GET /v1/models` lists it. */
  model: string;
}

export type ClientId = 'codex' | 'opencode' | 'aider' | 'continue';

/** One client's ready configuration. */
export interface ClientConfig {
  id: ClientId;
  /** The client's name, as its makers write it. */
  name: string;
  /** Where the text goes: a file, or a terminal for a command line. */
  place: string;
  language: 'toml' | 'json' | 'yaml' | 'shell';
  text: string;
  /** One sentence on how to use it. */
  note: string;
}

/** OpenAI's Codex CLI: a model provider of its own that speaks the Responses API. */
function codex({ baseUrl, model }: Target): ClientConfig {
  return {
    id: 'codex',
    name: 'Codex CLI',
    place: '~/.codex/config.toml',
    language: 'toml',
    text: `model = ${tomlString(model)}
model_provider = "catena"

[model_providers.catena]
name = "Catena"
base_url = ${tomlString(baseUrl)}
env_key = "${KEY_VARIABLE}"
wire_api = "responses"
`,
    note: `Save as the file, or merge it into yours (the first two lines go above every [table]), then run \`codex\` in a shell where ${KEY_VARIABLE} is set.`,
  };
}

/** opencode: a provider through the AI SDK's OpenAI-compatible package. */
function opencode({ baseUrl, model }: Target): ClientConfig {
  const config = {
    provider: {
      catena: {
        npm: '@ai-sdk/openai-compatible',
        name: 'Catena',
        options: { baseURL: baseUrl, apiKey: `{env:${KEY_VARIABLE}}` },
        models: { [model]: { name: model } },
      },
    },
    model: `catena/${model}`,
  };
  return {
    id: 'opencode',
    name: 'opencode',
    place: 'opencode.json (in the project) or ~/.config/opencode/opencode.json',
    language: 'json',
    text: JSON.stringify(config, null, 2) + '\n',
    note: `Save as the file, then run \`opencode\` in a shell where ${KEY_VARIABLE} is set.`,
  };
}

/** aider: its OpenAI options on the command line, the model under the `openai/` prefix. */
function aider({ baseUrl, model }: Target): ClientConfig {
  return {
    id: 'aider',
    name: 'aider',
    place: 'a terminal, in your project',
    language: 'shell',
    text: `aider --openai-api-base ${shellWord(baseUrl)} --openai-api-key "$${KEY_VARIABLE}" --model ${shellWord(`openai/${model}`)}\n`,
    note: 'Run it in the project folder; aider may warn that it does not know the model\'s context size.',
  };
}

/** Continue (VS Code, JetBrains): a model with the `openai` provider and Catena's address. */
function continueDev({ baseUrl, model }: Target): ClientConfig {
  return {
    id: 'continue',
    name: 'Continue',
    place: '~/.continue/config.yaml',
    language: 'yaml',
    text: `name: Catena
version: 1.0.0
schema: v1
models:
  - name: ${yamlString(`Catena ${model}`)}
    provider: openai
    model: ${yamlString(model)}
    apiBase: ${yamlString(baseUrl)}
    apiKey: \${{ secrets.${KEY_VARIABLE} }}
    roles:
      - chat
      - edit
      - apply
`,
    note: `Continue reads secrets from ~/.continue/.env, not from the shell: put the line ${KEY_VARIABLE}=<key> there.`,
  };
}

/** Every client's configuration for `target`, in the order the page shows them. */
export function clientConfigs(target: Target): ClientConfig[] {
  return [codex(target), opencode(target), aider(target), continueDev(target)];
}

/**
 * The shell line that gives the clients the key. A server without a key takes any, but the
 * clients insist on one, so any word will do there.
 */
export function keyExport(key: string | null): string {
  return `export ${KEY_VARIABLE}=${shellWord(key ?? 'catena')}\n`;
}

/** Whether `contextSize` is too small for a coding agent's prompts. */
export function contextTooSmall(contextSize: number): boolean {
  return contextSize < MIN_AGENT_CONTEXT;
}

/** The command that serves with a context large enough for coding agents. */
export function largerContextCommand(): string {
  return `catena serve --ctx-size ${SUGGESTED_CONTEXT}`;
}

/** A TOML basic string (JSON's escapes are TOML's for the characters that can occur here). */
function tomlString(value: string): string {
  return JSON.stringify(value);
}

/** A YAML double-quoted scalar (a JSON string is one). */
function yamlString(value: string): string {
  return JSON.stringify(value);
}

/** `value` as one shell word: bare when it is plainly safe, else in single quotes. */
function shellWord(value: string): string {
  if (/^[A-Za-z0-9_./:@%+=,-]+$/.test(value)) return value;
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
