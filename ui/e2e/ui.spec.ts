// The web UI served by a real `catena serve`: a real task on the default model, the chain with the
// sandbox's observation and the answer, an external MCP tool's call waiting for the user's yes,
// the other views, connecting an editor (against a second server with a key too), themes, zoom,
// keys and accessible names.
// Screenshots of every view in both themes go to docs/screenshots/.

import { expect, test, type Page } from '@playwright/test';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';

const SHOTS = resolve(import.meta.dirname, '../../docs/screenshots');
const POW = '1267650600228229401496703205376';

function base(): string {
  const url = process.env.CATENA_URL;
  if (!url) throw new Error('CATENA_URL is not set (global setup)');
  return url;
}

async function theme(page: Page, name: 'light' | 'dark') {
  await page.evaluate((t) => {
    const saved = JSON.parse(localStorage.getItem('catena.settings') ?? '{}');
    localStorage.setItem('catena.settings', JSON.stringify({ ...saved, theme: t }));
  }, name);
}

/** Switches view with the navigation bar. */
async function go(page: Page, view: string) {
  await page.getByRole('navigation', { name: 'Views' }).getByRole('button', { name: view }).click();
}

async function shoot(page: Page, name: string) {
  // The bar is sticky: from the top, a full-page shot shows it once, where it belongs.
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
}

/** Every control has a name a screen reader can say. */
async function expectNamedControls(page: Page) {
  const unnamed = await page.evaluate(() =>
    [...document.querySelectorAll('button, select, input, textarea')]
      .filter((el) => {
        const e = el as HTMLElement;
        const labelled = e.getAttribute('aria-label') || e.getAttribute('title') || (e as HTMLInputElement).labels?.length;
        return !labelled && !(e.textContent ?? '').trim() && !e.getAttribute('placeholder');
      })
      .map((el) => el.outerHTML.slice(0, 80)),
  );
  expect(unnamed).toEqual([]);
}

test('a real task streams its chain: code, the sandbox observation, the answer', async ({ page }) => {
  await page.goto(base());
  await go(page, 'Settings');
  await page.getByLabel('Temperature').fill('0');
  await page.getByLabel('Temperature').dispatchEvent('change');
  await go(page, 'Run');
  // The default model as installed is served with Catena's adapter, and the page says so.
  await expect(page.getByTestId('served-adapter')).toHaveText('with the adapter catena-coa-0.5b');

  await page.getByRole('textbox', { name: 'Task' }).fill('What is 2 to the power 100?');
  await page.getByLabel('Profile').selectOption('math');
  await page.getByText('Start the answer with…').click();
  await page.getByLabel(/Prefill/).fill('<plan>compute it</plan>\n<code>\n```py\nprint(2**100)\n```\n</code>');
  await expectNamedControls(page);
  await page.getByRole('textbox', { name: 'Task' }).press('Control+Enter');

  await expect(page.getByTestId('observation')).toContainText(POW, { timeout: 120_000 });
  await expect(page.getByTestId('answer')).toContainText(POW, { timeout: 120_000 });
  await expect(page.locator('code.hljs')).toContainText('print(2**100)');
  await page.getByRole('button', { name: '✓ Good' }).click();
  await expect(page.getByRole('button', { name: '✓ Good' })).toHaveAttribute('aria-pressed', 'true');

  for (const t of ['light', 'dark'] as const) {
    await theme(page, t);
    await page.evaluate(() => document.documentElement.setAttribute('data-theme', JSON.parse(localStorage.getItem('catena.settings')!).theme));
    await shoot(page, `run-${t}`);
  }
});

test('chains of one task side by side, then their vote', async ({ page }) => {
  await page.goto(base());
  await go(page, 'Settings');
  for (const [label, value] of [['Temperature', '0.8'], ['Seed', '11'], ['Tokens', '120']]) {
    await page.getByLabel(label, { exact: true }).fill(value);
    await page.getByLabel(label, { exact: true }).dispatchEvent('change');
  }
  await go(page, 'Run');
  await page.getByRole('textbox', { name: 'Task' }).fill('What is 17 times 23?');
  await page.getByLabel('Profile').selectOption('math');
  await page.getByText('Start the answer with…').click();
  await page.getByLabel(/Prefill/).fill('<plan>compute it</plan>\n<code>\n```py\nprint(17*23)\n```\n</code>');
  await page.getByLabel('Chains').fill('3');
  await page.getByRole('textbox', { name: 'Task' }).press('Control+Enter');

  for (const n of [1, 2, 3]) await expect(page.getByRole('article', { name: `Chain ${n}` })).toBeVisible();
  // The server here has one lane: the chains run one after another, each its own run.
  await expect(page.getByTestId('vote').getByRole('list', { name: 'Tally' })).toBeVisible({ timeout: 170_000 });
  for (const n of [1, 2, 3]) {
    const chain = page.getByRole('article', { name: `Chain ${n}` });
    // The first observation is the prefill's program; a chain may go on to run more.
    await expect(chain.getByTestId('observation').first()).toContainText('391');
    await expect(chain).toContainText(`seed ${10 + n}`);
  }
  // Every chain is counted once: in a group of the tally or as no answer.
  const tally = await page.getByRole('list', { name: 'Tally' }).innerText();
  const counted = [...tally.matchAll(/chains ([\d, ]+)/g)].flatMap((m) => m[1].split(',').map((c) => Number(c.trim())));
  expect(counted.sort()).toEqual([1, 2, 3]);
  // Every chain's program printed 391: an answer it printed, or a number it did not print (which
  // gives way to 391), wins marked as printed by a program.
  const winner = page.getByRole('list', { name: 'Tally' }).getByRole('listitem').first();
  await expect(winner.getByTestId('vote-printed')).toBeVisible();
  await expectNamedControls(page);
  for (const t of ['light', 'dark'] as const) {
    await theme(page, t);
    await page.evaluate(() => document.documentElement.setAttribute('data-theme', JSON.parse(localStorage.getItem('catena.settings')!).theme));
    await shoot(page, `samples-${t}`);
  }
});

test('web search hits are links and each page read shows its address and the model\'s summary', async ({ page }) => {
  // A document index the server searches: it must be the only one in this data folder.
  const bin = process.env.CATENA_BIN ?? resolve(import.meta.dirname, '../../target/release/catena');
  const listed = JSON.parse(execFileSync(bin, ['index', 'list', '--json']).toString()) as { name: string; kind: string }[];
  const others = listed.filter((i) => i.kind === 'documents').map((i) => i.name);
  expect(others, 'the server uses the only document index; remove these first').toEqual([]);
  const docs = mkdtempSync(join(tmpdir(), 'catena-ui-docs-'));
  const name = `e2e-docs-${Date.now()}`;
  mkdirSync(join(docs, 'notes'));
  writeFileSync(
    join(docs, 'notes', 'tides.html'),
    '<title>Tide tables</title><p>High water at the north pier comes forty minutes after the south pier.</p>' +
      '<p>See <a href="https://tides.example/north">the north pier page</a>.</p>',
  );
  execFileSync(bin, ['index', 'add', join(docs, 'notes'), '--name', name]);
  try {
    const url = `file://${join(docs, 'notes', 'tides.html')}`;
    await page.goto(base());
    await go(page, 'Run');
    await page.getByRole('textbox', { name: 'Task' }).fill('When is high water at the north pier?');
    await page.getByLabel('Profile').selectOption('web');
    await page.getByText('Start the answer with…').click();
    await page
      .getByLabel(/Prefill/)
      .fill(`<think>The tide table should say.</think>\n<web_search>north pier high water</web_search>\n<crawl_page>${url} | http://127.0.0.1:1/admin</crawl_page>`);
    await page.getByRole('textbox', { name: 'Task' }).press('Control+Enter');
    const hits = page.getByTestId('web-hits');
    await expect(hits).toContainText('Tide tables', { timeout: 120_000 });
    await expect(hits).toContainText(url);
    const pages = page.getByTestId('pages-read');
    await expect(pages).toContainText('Not read: this run reads no web pages (offline)', { timeout: 120_000 });
    await expect(pages.locator('.page-summary')).not.toBeEmpty();
    // A page that was not read is not a link (this one is the machine's own address).
    await expect(pages.locator('a', { hasText: '127.0.0.1' })).toHaveCount(0);
    // The page's own link is kept by the summary only if the model wrote it; a link is always a web address.
    for (const href of await page.locator('.hits a, .pages a').evaluateAll((as) => as.map((a) => a.getAttribute('href')))) {
      expect(href).toMatch(/^https?:\/\//);
    }
    for (const t of ['light', 'dark'] as const) {
      await theme(page, t);
      await page.evaluate(() => document.documentElement.setAttribute('data-theme', JSON.parse(localStorage.getItem('catena.settings')!).theme));
      await shoot(page, `web-run-${t}`);
    }
    // The model goes on writing after what this test checks. Stop the run, so that the next tests'
    // requests to this one-lane server do not wait behind it (on a slow machine they waited minutes).
    // (The run may end between the look and the click: the button is gone then, and the check
    // below is what counts.)
    const stop = page.getByRole('button', { name: 'Stop' });
    if (await stop.isVisible()) {
      console.log('the web run was still going at the end of its test: stopped');
      await stop.click({ timeout: 5_000 }).catch(() => {});
    }
    // The form's own Run button (the navigation has a Run too): back once the run has ended.
    const form = page.getByRole('region', { name: 'Run a task' });
    await expect(form.getByRole('button', { name: 'Run', exact: true })).toBeVisible({ timeout: 30_000 });
  } finally {
    execFileSync(bin, ['index', 'rm', name]);
    rmSync(docs, { recursive: true, force: true });
  }
});

test('sessions list, search, reopen, feedback and export', async ({ page }) => {
  await page.goto(base());
  await page.keyboard.press('Alt+2');
  await expect(page.getByRole('region', { name: 'Sessions' })).toBeVisible();
  await page.getByLabel('Search sessions').fill('power 100');
  const session = page.getByRole('button', { name: 'What is 2 to the power 100?' }).first();
  await expect(session).toBeVisible();
  await session.click();
  await expect(page.locator('.run-card').first()).toContainText(POW);
  const download = page.waitForEvent('download');
  await page.getByRole('button', { name: 'Export SFT' }).click();
  const file = await download;
  expect(file.suggestedFilename()).toBe('catena-sft.jsonl');
  for (const t of ['light', 'dark'] as const) {
    await theme(page, t);
    await page.reload();
    await page.keyboard.press('Alt+2');
    await page.getByRole('button', { name: 'What is 2 to the power 100?' }).first().click();
    await shoot(page, `sessions-${t}`);
  }
  // Reopening replays the stored chain in the run view.
  await page.getByRole('button', { name: 'Open' }).first().click();
  await expect(page.getByTestId('answer')).toContainText(POW);
});

test('training from the page: a real `catena train sft` child, its loss drawn as it comes, the adapter written', async ({ page, request }) => {
  // Training reads only from the exports folder, by name; the server says where that is.
  const { folder } = (await (await request.get(`${base()}/v1/train/data`)).json()) as { folder: string };
  const stamp = `e2e-${Date.now()}`;
  const name = `${stamp}.jsonl`;
  const data = join(folder, name);
  const sample = (a: number, b: number) =>
    JSON.stringify({
      messages: [
        { role: 'user', content: `What is ${a} * ${b}?` },
        {
          role: 'assistant',
          content: `<code>\n\`\`\`py\nprint(${a} * ${b})\n\`\`\`\n</code>\n<observation>\n[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n${a * b}\n[STDOUT:END]\n</observation>\n\n<answer>\\boxed{${a * b}}</answer>`,
        },
      ],
    });
  writeFileSync(data, [sample(17, 23), sample(41, 7), sample(12, 12), sample(305, 3)].join('\n') + '\n');
  let out: string | null = null;
  try {
    await page.goto(base());
    await go(page, 'Training');
    const region = page.getByRole('region', { name: 'Training' });
    await expect(page.getByTestId('exports-folder')).toHaveText(folder);
    await region.getByLabel('Data file').fill(name);
    await region.getByLabel('Adapter name').fill(stamp);
    await region.getByLabel('LoRA rank').fill('4');
    await region.getByLabel('Stop after steps').fill('2');
    await region.getByRole('button', { name: 'Start training' }).click();
    await expect(page.getByTestId('training-status')).toHaveText('finished', { timeout: 150_000 });
    await expect(page.getByTestId('training-step')).toHaveText('2');
    const points = await page.getByTestId('loss-line').getAttribute('points');
    expect(points?.trim().split(' ')).toHaveLength(2);
    await expect(page.getByTestId('training-finished')).toContainText('adapter.gguf');
    const runs = (await (await request.get(`${base()}/v1/train/runs`)).json()) as { data: { out: string }[] };
    out = runs.data[0].out;
    expect(out.endsWith(join('adapters', stamp))).toBe(true);
    expect(existsSync(join(out, 'adapter.gguf'))).toBe(true);
    expect(existsSync(join(out, 'loss.svg'))).toBe(true);
    // A second start while nothing runs is allowed; a missing file or a path is refused with the reason.
    await region.getByLabel('Data file').fill('missing.jsonl');
    await region.getByRole('button', { name: 'Start training' }).click();
    await expect(region.getByRole('alert')).toContainText('no training data named `missing.jsonl`');
    await region.getByLabel('Data file').fill('/etc/passwd');
    await region.getByRole('button', { name: 'Start training' }).click();
    await expect(region.getByRole('alert')).toContainText('must be a plain name');
  } finally {
    rmSync(data, { force: true });
    if (out) rmSync(out, { recursive: true, force: true });
  }
});

test('the search and reading settings are saved with Catena, keys never come back, and the tools say whether they are set up', async ({ page, request }) => {
  // The server's own settings file: what this test changes is put back at the end.
  const before = await (await request.get(`${base()}/v1/settings/web`)).json();
  try {
    await page.goto(base());
    await go(page, 'Settings');
    const form = page.getByRole('form', { name: 'Search and reading' });
    const tools = page.getByRole('list', { name: 'Tools' });
    await expect(tools.locator('li', { hasText: 'code' })).toContainText('ready');
    await expect(tools.locator('li', { hasText: 'visual_inspector' })).toContainText('not set up');
    await form.getByLabel('Web search').selectOption('serper');
    await form.getByLabel('API key', { exact: true }).fill('sk-e2e-never-shown');
    await form.getByRole('button', { name: 'Save' }).click();
    await expect(form.getByRole('status')).toContainText('Saved');
    await expect(tools.locator('li', { hasText: 'web_search' })).toContainText('Serper, online');
    await expect(form.getByLabel('API key', { exact: true })).toHaveAttribute('placeholder', 'saved');
    await expect(form.getByLabel('API key', { exact: true })).toHaveValue('');
    const shown = await (await request.get(`${base()}/v1/settings/web`)).text();
    expect(shown).not.toContain('sk-e2e-never-shown');
    await expectNamedControls(page);
    // Without its key the backend cannot work, and the tools say so.
    await form.getByRole('button', { name: 'Forget the saved key' }).click();
    await expect(tools.locator('li', { hasText: 'web_search' })).toContainText('SERPER_API_KEY');
    // A summariser endpoint needs its model; the server refuses a bad address.
    await form.getByLabel('Web search').selectOption('local');
    await form.getByLabel('Summariser endpoint').fill('ftp://example.org/v1');
    await form.getByLabel('Summariser model').fill('big');
    await form.getByRole('button', { name: 'Save' }).click();
    await expect(form.getByRole('alert')).toContainText('is not an http(s) address');
    // The models page: each model's profile with the tools it needs and their state.
    await go(page, 'Models');
    const models = page.getByRole('region', { name: 'Models' });
    await expect(models.getByLabel('Tools afm-web-7b-rl:Q4_K_M needs')).toContainText('web_search');
    await expect(models.getByLabel('Tools afm-code-7b-rl:Q4_K_M needs')).toContainText('code');
  } finally {
    const restored = await request.put(`${base()}/v1/settings/web`, {
      data: {
        search: before.search,
        index: before.index ?? '',
        online: before.online,
        summarizer_url: before.summarizer_url ?? '',
        summarizer_model: before.summarizer_model ?? '',
      },
    });
    expect(restored.ok()).toBe(true);
  }
});

test('models, settings and training views, in both themes', async ({ page }) => {
  for (const t of ['light', 'dark'] as const) {
    await page.goto(base());
    await theme(page, t);
    await page.reload();
    await go(page, 'Models');
    await expect(page.getByRole('region', { name: 'Models' })).toContainText('qwen2.5-coder-0.5b-instruct');
    await expect(page.getByRole('region', { name: 'Models' })).toContainText('afm-code-7b-rl:Q4_K_M');
    // The AFMs are checkpoints, downloaded and converted here.
    await expect(page.getByRole('button', { name: 'Download afm-code-7b-rl:Q4_K_M' })).toHaveText('Download and convert');
    // Importing a folder is the desktop app's: the browser may not name folders for the server to read.
    await expect(page.getByRole('form', { name: 'Import a checkpoint folder' })).toHaveCount(0);
    await shoot(page, `models-${t}`);
    await go(page, 'Settings');
    await expectNamedControls(page);
    await shoot(page, `settings-${t}`);
    await go(page, 'Training');
    // The run of the test before, reloaded from the server: its loss curve and adapter.
    await expect(page.getByTestId('training-finished')).toBeVisible();
    await expectNamedControls(page);
    await shoot(page, `training-${t}`);
  }
});

test('readable at 200% zoom: nothing runs off the side', async ({ browser }) => {
  const context = await browser.newContext({ viewport: { width: 640, height: 450 }, deviceScaleFactor: 2 });
  const page = await context.newPage();
  await page.goto(base());
  for (const view of ['Run', 'Sessions', 'Models', 'Settings', 'Training', 'Connect']) {
    await go(page, view);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    expect(overflow, `${view} overflows at 200%`).toBeLessThanOrEqual(0);
  }
  await go(page, 'Run');
  await shoot(page, 'run-zoom200');
  await context.close();
});

test('connecting an editor: the address, the context warning, a copied configuration, the connection test', async ({ page, context }) => {
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.goto(base());
  await go(page, 'Connect');
  const region = page.getByRole('region', { name: 'Connect an editor' });
  const model = await page.getByTestId('model-id').textContent();
  expect(model).toBe('qwen2.5-coder-0.5b-instruct-q4_k_m');
  // The address the server listens on, as it says itself.
  await expect(page.getByTestId('base-url')).toHaveText(`${base()}/v1`);
  await expect(page.getByTestId('api-key')).toContainText('without a key');
  // The suite's server runs with 4,096 tokens: too few for a coding agent, and the page says how to raise it.
  await expect(page.getByTestId('context-size')).toHaveText('4096 tokens per conversation');
  await expect(page.getByTestId('context-warning')).toContainText('catena serve --ctx-size 32768');
  await expectNamedControls(page);

  await region.getByRole('button', { name: 'Copy the opencode configuration' }).click();
  const copied = JSON.parse(await page.evaluate(() => navigator.clipboard.readText()));
  expect(copied.provider.catena.options.baseURL).toBe(`${base()}/v1`);
  expect(copied.model).toBe(`catena/${model}`);

  await region.getByRole('button', { name: 'Test the connection' }).click();
  const steps = page.getByTestId('connection-test').locator('li');
  await expect(steps).toHaveCount(3, { timeout: 150_000 });
  // The page as the user sees it after the test, whatever it found (the checks come after).
  for (const t of ['light', 'dark'] as const) {
    await theme(page, t);
    await page.evaluate(() => document.documentElement.setAttribute('data-theme', JSON.parse(localStorage.getItem('catena.settings')!).theme));
    await shoot(page, `connect-${t}`);
  }
  await expect(steps.nth(0)).toHaveAttribute('data-status', 'pass');
  await expect(steps.nth(1)).toContainText('read_file(');
  await expect(steps.nth(1)).toHaveAttribute('data-status', 'pass');
  await expect(steps.nth(2)).toHaveAttribute('data-status', 'warn');
});

test('connecting an editor to a server with a key: the key shown on request, every step passes', async ({ browser }) => {
  const bin = process.env.CATENA_BIN ?? resolve(import.meta.dirname, '../../target/release/catena');
  const store = mkdtempSync(join(tmpdir(), 'catena-ui-key-'));
  const key = `sk-e2e-${Date.now()}`;
  const server = spawn(bin, ['serve', '--port', '0', '--store-dir', store, '--ctx-size', '16384', '--sessions', '1'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, CATENA_API_KEY: key },
  });
  try {
    // The second line is the web UI's address with its launch token.
    const ui = await new Promise<string>((ok, fail) => {
      const timer = setTimeout(() => fail(new Error('catena serve did not start within 120 s')), 120_000);
      server.once('exit', (code) => fail(new Error(`catena serve exited with ${code}`)));
      createInterface({ input: server.stdout! }).on('line', (line) => {
        const match = /^Web UI: (\S+)/.exec(line);
        if (match) {
          clearTimeout(timer);
          ok(match[1]);
        }
      });
    });
    const origin = new URL(ui).origin;
    const context = await browser.newContext();
    await context.grantPermissions(['clipboard-read', 'clipboard-write']);
    const page = await context.newPage();
    await page.goto(ui);
    await go(page, 'Connect');
    const region = page.getByRole('region', { name: 'Connect an editor' });
    await expect(page.getByTestId('base-url')).toHaveText(`${origin}/v1`);
    // Hidden until asked for, on the page and in the export line.
    await expect(page.getByTestId('api-key')).not.toContainText(key);
    await expect(page.getByTestId('key-export')).not.toContainText(key);
    await region.getByRole('button', { name: 'Show', exact: true }).click();
    await expect(page.getByTestId('api-key')).toHaveText(key);
    await expect(page.getByTestId('key-export')).toHaveText(`export CATENA_API_KEY=${key}`);
    await expect(page.getByTestId('context-warning')).toHaveCount(0);

    await region.getByRole('button', { name: 'Copy the Codex CLI configuration' }).click();
    const codex = await page.evaluate(() => navigator.clipboard.readText());
    expect(codex).toContain(`base_url = "${origin}/v1"`);
    expect(codex).toContain('env_key = "CATENA_API_KEY"');
    expect(codex).not.toContain(key);

    await region.getByRole('button', { name: 'Test the connection' }).click();
    const steps = page.getByTestId('connection-test').locator('li');
    await expect(steps).toHaveCount(3, { timeout: 150_000 });
    for (let i = 0; i < 3; i++) await expect(steps.nth(i)).toHaveAttribute('data-status', 'pass');
    await context.close();
  } finally {
    server.kill('SIGTERM');
    rmSync(store, { recursive: true, force: true });
  }
});

test('an MCP tool that writes asks first: the approval card, allowed from the keyboard, the file written', async ({ page }) => {
  const bin = process.env.CATENA_BIN ?? resolve(import.meta.dirname, '../../target/release/catena');
  // The official filesystem server, as the Rust e2e suite installs it (tests/npm).
  const cache = process.env.CATENA_CACHE_DIR ?? join(homedir(), '.cache', 'catena');
  const serverJs = join(cache, 'test-npm', 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');
  expect(existsSync(serverJs), `${serverJs} is missing: the Rust e2e suite installs it (tests/npm)`).toBe(true);
  const dir = mkdtempSync(join(tmpdir(), 'catena-ui-mcp-'));
  const allowed = join(dir, 'notes');
  mkdirSync(allowed);
  const config = join(dir, 'mcp.json');
  writeFileSync(config, JSON.stringify({ mcpServers: { filesystem: { command: 'node', args: [serverJs, allowed] } } }));
  const server = spawn(
    bin,
    ['serve', '--port', '0', '--store-dir', join(dir, 'store'), '--ctx-size', '4096', '--sessions', '1', '--mcp-config', config],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  try {
    const served = await new Promise<string>((ok, fail) => {
      const timer = setTimeout(() => fail(new Error('catena serve did not start within 120 s')), 120_000);
      server.once('exit', (code) => fail(new Error(`catena serve exited with ${code}`)));
      createInterface({ input: server.stdout! }).on('line', (line) => {
        const match = / on (http:\/\/\S+)/.exec(line);
        if (match) {
          clearTimeout(timer);
          ok(match[1]);
        }
      });
    });
    const todo = join(allowed, 'todo.txt');
    await page.goto(served);
    await go(page, 'Run');
    await page.getByRole('textbox', { name: 'Task' }).fill('Add "buy milk" to my to-do list');
    await page.getByLabel('Profile').selectOption('code');
    await page.getByText('Start the answer with…').click();
    const call = JSON.stringify({ name: 'write_file', arguments: { path: todo, content: 'buy milk' } });
    await page.getByLabel(/Prefill/).fill(`<think>Write it to the list.</think>\n<tool_call>\n${call}\n</tool_call>`);
    await page.getByRole('textbox', { name: 'Task' }).press('Control+Enter');

    const card = page.getByRole('region', { name: 'Approval for write_file' });
    await expect(card).toContainText('filesystem', { timeout: 120_000 });
    await expect(page.getByTestId('approval-arguments')).toContainText(`"path": "${todo}"`);
    expect(existsSync(todo), 'written before the user allowed it').toBe(false);
    await expectNamedControls(page);
    await theme(page, 'light');
    await page.evaluate(() => document.documentElement.setAttribute('data-theme', 'light'));
    await shoot(page, 'mcp-approval-light');

    // Reached and pressed from the keyboard.
    await card.getByRole('button', { name: 'Allow write_file' }).focus();
    await page.keyboard.press('Enter');
    await expect(card.getByRole('status')).toHaveText('Allowed: the call ran.', { timeout: 30_000 });
    await expect(page.getByTestId('observation').first()).toContainText('Successfully wrote', { timeout: 60_000 });
    expect(readFileSync(todo, 'utf8')).toBe('buy milk');
  } finally {
    server.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a run the store could not keep says so under its answer', async ({ page }) => {
  const bin = process.env.CATENA_BIN ?? resolve(import.meta.dirname, '../../target/release/catena');
  const store = mkdtempSync(join(tmpdir(), 'catena-ui-full-'));
  // The store is made first; then the server's files may not grow past 100 blocks (a write past
  // that fails with EFBIG, SIGXFSZ ignored), as on a disk that fills up during the run.
  execFileSync(bin, ['sessions', 'list'], { env: { ...process.env, CATENA_STORE_DIR: store } });
  const server = spawn(
    '/bin/sh',
    ['-c', `trap '' XFSZ; ulimit -f 100; exec "$0" "$@"`, bin, 'serve', '--port', '0', '--store-dir', store, '--ctx-size', '4096', '--sessions', '1'],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  try {
    const served = await new Promise<string>((ok, fail) => {
      const timer = setTimeout(() => fail(new Error('catena serve did not start within 120 s')), 120_000);
      server.once('exit', (code) => fail(new Error(`catena serve exited with ${code}`)));
      createInterface({ input: server.stdout! }).on('line', (line) => {
        const match = / on (http:\/\/\S+)/.exec(line);
        if (match) {
          clearTimeout(timer);
          ok(match[1]);
        }
      });
    });
    await page.goto(served);
    await go(page, 'Settings');
    for (const [label, value] of [['Temperature', '0'], ['Tokens', '200']]) {
      await page.getByLabel(label, { exact: true }).fill(value);
      await page.getByLabel(label, { exact: true }).dispatchEvent('change');
    }
    await go(page, 'Run');
    await page.getByRole('textbox', { name: 'Task' }).fill('What is 2 to the power 100?');
    await page.getByLabel('Profile').selectOption('math');
    await page.getByText('Start the answer with…').click();
    await page.getByLabel(/Prefill/).fill('<plan>compute it</plan>\n<code>\n```py\nprint(2**100)\n```\n</code>');
    await page.getByRole('textbox', { name: 'Task' }).press('Control+Enter');

    // The whole chain is shown as it ran, and then why it is not all kept.
    await expect(page.getByTestId('observation')).toContainText(POW, { timeout: 120_000 });
    const notice = page.getByTestId('not-saved');
    await expect(notice).toContainText('not saved completely', { timeout: 120_000 });
    await expect(notice).toHaveAttribute('role', 'alert');
    await theme(page, 'light');
    await page.evaluate(() => document.documentElement.setAttribute('data-theme', 'light'));
    await shoot(page, 'run-not-saved-light');
  } finally {
    server.kill('SIGTERM');
    rmSync(store, { recursive: true, force: true });
  }
});
