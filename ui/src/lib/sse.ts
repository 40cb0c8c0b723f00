// A Server-Sent Events parser for `fetch` streams. The browser's EventSource reconnects forever
// when a stream ends, but a finished run's stream ends on purpose; and it cannot send headers.

export interface SseMessage {
  id: number | null;
  event: string;
  data: string;
}

/** Feeds text chunks in, gets complete messages out (chunks may split lines anywhere). */
export class SseParser {
  private buffer = '';
  private data: string[] = [];
  private event = 'message';
  private id: number | null = null;

  push(chunk: string): SseMessage[] {
    this.buffer += chunk;
    const out: SseMessage[] = [];
    let newline: number;
    while ((newline = this.buffer.search(/\r\n|\n|\r/)) >= 0) {
      const line = this.buffer.slice(0, newline);
      const width = this.buffer.startsWith('\r\n', newline) ? 2 : 1;
      this.buffer = this.buffer.slice(newline + width);
      if (line === '') {
        if (this.data.length > 0) {
          out.push({ id: this.id, event: this.event, data: this.data.join('\n') });
        }
        this.data = [];
        this.event = 'message';
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') this.data.push(value);
      else if (field === 'event') this.event = value;
      else if (field === 'id') {
        const n = Number.parseInt(value, 10);
        this.id = Number.isFinite(n) ? n : null;
      }
    }
    return out;
  }
}
