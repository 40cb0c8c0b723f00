import { describe, expect, it } from 'vitest';
import { toolsNeeded } from '../src/lib/models';
import type { Profile, ToolStatus } from '../src/lib/types';

const profiles: Profile[] = [
  { name: 'web', description: '', tools: ['think', 'web_search', 'crawl_page', 'answer'], max_tool_calls: 12 },
  { name: 'math', description: '', tools: ['think', 'code', 'answer'], max_tool_calls: 12 },
];
const tools: ToolStatus[] = [
  { tool: 'code', ready: true, detail: 'Python in the WebAssembly sandbox' },
  { tool: 'web_search', ready: false, detail: 'no document index' },
  { tool: 'crawl_page', ready: true, detail: 'documents of `docs`' },
];

describe('toolsNeeded', () => {
  it("lists the profile's action tools with their state, not its reasoning tags", () => {
    expect(toolsNeeded('web', profiles, tools).map((t) => [t.tool, t.ready])).toEqual([
      ['web_search', false],
      ['crawl_page', true],
    ]);
    expect(toolsNeeded('math', profiles, tools).map((t) => t.tool)).toEqual(['code']);
    expect(toolsNeeded('unknown', profiles, tools)).toEqual([]);
  });
});

describe('codeSpans', () => {
  it('splits quoted commands out of a message', async () => {
    const { codeSpans } = await import('../src/lib/format');
    expect(codeSpans('run `catena index add FOLDER` first')).toEqual([
      { code: false, text: 'run ' },
      { code: true, text: 'catena index add FOLDER' },
      { code: false, text: ' first' },
    ]);
    expect(codeSpans('plain')).toEqual([{ code: false, text: 'plain' }]);
  });
});
