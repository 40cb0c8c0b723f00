// Which model row is the one being served: the server names its model after the file's stem.

import type { ModelRow } from './types';

export function isServing(row: ModelRow, served: string): boolean {
  return served !== '' && row.file.replace(/\.gguf$/i, '') === served;
}
