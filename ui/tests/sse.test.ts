import { describe, expect, it } from 'vitest';
import { SseParser } from '../src/lib/sse';

describe('SseParser', () => {
  it('joins messages split anywhere, with ids and event names', () => {
    const wire = 'id: 1\nevent: text\ndata: {"a":1}\n\nid: 2\ndata: line one\ndata: line two\n\n';
    for (let cut = 0; cut <= wire.length; cut++) {
      const parser = new SseParser();
      const got = [...parser.push(wire.slice(0, cut)), ...parser.push(wire.slice(cut))];
      expect(got).toEqual([
        { id: 1, event: 'text', data: '{"a":1}' },
        { id: 2, event: 'message', data: 'line one\nline two' },
      ]);
    }
  });

  it('accepts CRLF, ignores comments and fields without data', () => {
    const parser = new SseParser();
    expect(parser.push(': keep-alive\r\n\r\nevent: x\r\n\r\ndata: y\r\n\r\n')).toEqual([
      { id: null, event: 'message', data: 'y' },
    ]);
  });

  it('keeps an unfinished message until its blank line', () => {
    const parser = new SseParser();
    expect(parser.push('data: partial')).toEqual([]);
    expect(parser.push('\n')).toEqual([]);
    expect(parser.push('\n')).toEqual([{ id: null, event: 'message', data: 'partial' }]);
  });
});
