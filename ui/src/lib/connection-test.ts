// The page's connection test: what an editor's first requests do, sent to the real server with
// the same key: list the models, then ask for a chat completion that must call a tool, as every
// coding agent's requests do. Each step says plainly whether it passed and, if not, what came
// back.

import { contextTooSmall, largerContextCommand, MIN_AGENT_CONTEXT } from './connect';
import { errorText } from './format';

export type StepStatus = 'pass' | 'fail' | 'warn';

export interface Step {
  name: string;
  status: StepStatus;
  /** What was found, in words; `code` in backticks. */
  detail: string;
  /** What the model wrote instead, verbatim (shown as a quotation, not parsed). */
  quote?: string;
}

/** How long one request may take: the model may be busy with another request first. */
const DEADLINE_MS = 120_000;
/** The most an answer may bring (these answers are a few hundred bytes). */
const MAX_BYTES = 1 << 20;

/** The tool the test offers; the model is told to call it. */
export const TEST_TOOL = {
  type: 'function',
  function: {
    name: 'read_file',
    description: 'Read a file of the project and return its text.',
    parameters: {
      type: 'object',
      properties: { path: { type: 'string', description: 'The file, relative to the project.' } },
      required: ['path'],
    },
  },
} as const;

/** The request of the second step: small, and answerable only by a tool call. */
export function toolRequest(model: string) {
  return {
    model,
    messages: [
      { role: 'system', content: 'You are a coding assistant. Use the tools to read files.' },
      { role: 'user', content: 'Read the file README.md.' },
    ],
    tools: [TEST_TOOL],
    tool_choice: 'required',
    temperature: 0,
    max_tokens: 64,
  };
}

interface Answer {
  status: number;
  body: unknown;
}

/** `fetch` with the deadline and the byte cap; the body as JSON, or null when it is not JSON. */
async function ask(fetcher: typeof fetch, url: string, init: RequestInit): Promise<Answer> {
  const response = await fetcher(url, { ...init, signal: AbortSignal.timeout(DEADLINE_MS) });
  const text = await readCapped(response);
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON: the step says what the status was.
  }
  return { status: response.status, body };
}

async function readCapped(response: Response): Promise<string> {
  if (!response.body) return '';
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > MAX_BYTES) {
      await reader.cancel();
      throw new Error(`the answer is larger than ${MAX_BYTES} bytes`);
    }
    chunks.push(value);
  }
  const all = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return new TextDecoder().decode(all);
}

/** The server's words for a refusal (OpenAI's error shape), or the status. */
function refusal(answer: Answer): string {
  const message = (answer.body as { error?: { message?: unknown } } | null)?.error?.message;
  if (answer.status === 401) return `the server refused the key (401): ${String(message ?? '')}`.trim();
  return typeof message === 'string' ? `${answer.status}: ${message}` : `the server answered ${answer.status}`;
}

function failed(e: unknown): string {
  if (e instanceof DOMException && e.name === 'TimeoutError') return `no answer within ${DEADLINE_MS / 1000} s`;
  return errorText(e);
}

/** Step 1: the key is taken and the served model is listed. */
async function listsTheModel(fetcher: typeof fetch, api: string, headers: HeadersInit, model: string): Promise<Step> {
  const name = 'The key is accepted and the model is listed (GET /v1/models)';
  try {
    const answer = await ask(fetcher, `${api}/models`, { headers });
    if (answer.status !== 200) return { name, status: 'fail', detail: refusal(answer) };
    const ids = ((answer.body as { data?: { id?: unknown }[] } | null)?.data ?? []).map((m) => m.id);
    return ids.includes(model)
      ? { name, status: 'pass', detail: `${model} is served` }
      : { name, status: 'fail', detail: `${model} is not among the models listed (${ids.join(', ') || 'none'})` };
  } catch (e) {
    return { name, status: 'fail', detail: failed(e) };
  }
}

/** Step 2: a chat completion with a tool comes back as a well-formed call of that tool. */
async function callsATool(fetcher: typeof fetch, api: string, headers: HeadersInit, model: string): Promise<Step> {
  const name = 'A chat completion calls a tool (POST /v1/chat/completions with tools)';
  try {
    const answer = await ask(fetcher, `${api}/chat/completions`, {
      method: 'POST',
      headers: { ...headers, 'Content-Type': 'application/json' },
      body: JSON.stringify(toolRequest(model)),
    });
    if (answer.status !== 200) return { name, status: 'fail', detail: refusal(answer) };
    type Choice = { finish_reason?: string; message?: { content?: string | null; tool_calls?: { function?: { name?: string; arguments?: string } }[] } };
    const choice = (answer.body as { choices?: Choice[] } | null)?.choices?.[0];
    const call = choice?.message?.tool_calls?.[0]?.function;
    if (!call) {
      return {
        name,
        status: 'fail',
        detail: `the answer is text, not a tool call (finish_reason \`${choice?.finish_reason ?? 'missing'}\`); coding agents need function calling. The model wrote:`,
        quote: (choice?.message?.content ?? '').slice(0, 160),
      };
    }
    if (call.name !== TEST_TOOL.function.name) {
      return { name, status: 'fail', detail: `the model called \`${call.name}\`, a tool it was not offered` };
    }
    try {
      JSON.parse(call.arguments ?? '');
    } catch {
      return { name, status: 'fail', detail: `the call's arguments are not JSON: ${call.arguments}` };
    }
    return { name, status: 'pass', detail: `${call.name}(${call.arguments})` };
  } catch (e) {
    return { name, status: 'fail', detail: failed(e) };
  }
}

/** Step 3: the context holds a coding agent's prompts. */
export function contextStep(contextSize: number): Step {
  const name = `The context holds a coding agent's prompts (${MIN_AGENT_CONTEXT} tokens or more)`;
  return contextTooSmall(contextSize)
    ? {
        name,
        status: 'warn',
        detail: `${contextSize} tokens: long prompts will be refused. Restart with \`${largerContextCommand()}\`.`,
      }
    : { name, status: 'pass', detail: `${contextSize} tokens` };
}

/**
 * Runs the steps against `api` (the API's base, e.g. `/v1` on the page's own server) with `key`
 * as the bearer token (none: the server takes requests without one).
 */
export async function testConnection(
  api: string,
  key: string | null,
  model: string,
  contextSize: number,
  fetcher: typeof fetch = fetch,
): Promise<Step[]> {
  const headers: Record<string, string> = key ? { Authorization: `Bearer ${key}` } : {};
  const listed = await listsTheModel(fetcher, api, headers, model);
  const steps = [listed];
  if (listed.status === 'pass') steps.push(await callsATool(fetcher, api, headers, model));
  steps.push(contextStep(contextSize));
  return steps;
}
