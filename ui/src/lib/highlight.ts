// Syntax highlighting for model-written code: highlight.js's core with the languages AFMs write.

import hljs from 'highlight.js/lib/core';
import python from 'highlight.js/lib/languages/python';
import bash from 'highlight.js/lib/languages/bash';
import json from 'highlight.js/lib/languages/json';

hljs.registerLanguage('python', python);
hljs.registerLanguage('bash', bash);
hljs.registerLanguage('json', json);

/** HTML for `code` (escaped by highlight.js, so it is safe to insert). */
export function highlight(code: string, language = 'python'): string {
  return hljs.highlight(code, { language, ignoreIllegals: true }).value;
}
