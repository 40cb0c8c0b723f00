// Reads the web tools' observations back into their parts, so the timeline can show search hits
// as links and each page read with its address (the texts are the protocol's, docs/PROTOCOL.md §3).
// Anything that does not have the exact shape is left to be shown as plain text.

export interface WebHit {
  title: string;
  url: string;
  date?: string;
  source?: string;
  snippet: string;
}

export interface PageRead {
  url: string;
  /** The summary, when the page was read. */
  summary?: string;
  /** Why it could not be read. */
  error?: string;
}

const RESULTS_HEAD = /^Found \d+ results:\n\n## Web Results\n/;
const HIT_HEAD = /^(\d+)\. \[(.*)\]\((\S+)\)$/;

/** The hits of a `<web_search>` observation, or null when it is not a results list. */
export function parseWebResults(text: string): WebHit[] | null {
  if (!RESULTS_HEAD.test(text)) return null;
  const body = text.replace(RESULTS_HEAD, '');
  const hits: WebHit[] = [];
  for (const block of body.split('\n\n')) {
    if (!block.trim()) continue;
    const lines = block.split('\n');
    const head = HIT_HEAD.exec(lines[0] ?? '');
    if (!head) return null;
    const hit: WebHit = { title: head[2], url: head[3], snippet: '' };
    let at = 1;
    if (lines[at]?.startsWith('Date published: ')) hit.date = lines[at++].slice('Date published: '.length);
    if (lines[at]?.startsWith('Source: ')) hit.source = lines[at++].slice('Source: '.length);
    if (lines[at] !== hit.url) return null;
    hit.snippet = lines.slice(at + 1).join('\n');
    hits.push(hit);
  }
  return hits;
}

const PAGE_HEAD = /^Page \d+ \[(\S+)\](?: Summary:\n|: \[Page content not accessible: )/;

/** The pages of a `<crawl_page>` observation, or null when it is not one. */
export function parseCrawl(text: string): PageRead[] | null {
  const pages: PageRead[] = [];
  // Each page starts a block with its header; a summary may itself hold blank lines.
  for (const block of text.split(/\n\n(?=Page \d+ \[)/)) {
    const head = PAGE_HEAD.exec(block);
    if (!head) return null;
    const rest = block.slice(head[0].length);
    if (head[0].endsWith('Summary:\n')) {
      pages.push({ url: head[1], summary: rest });
    } else {
      pages.push({ url: head[1], error: rest.replace(/\]$/, '') });
    }
  }
  return pages.length ? pages : null;
}

/** Whether a page can open `url` as a link: web addresses only (never `javascript:` or files). */
export function isWebLink(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.protocol === 'https:' || parsed.protocol === 'http:';
  } catch {
    return false;
  }
}
