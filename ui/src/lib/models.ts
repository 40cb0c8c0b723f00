// Which model row is the one being served, and which tools a model's profile needs.

import type { ModelRow, Profile, ToolStatus } from './types';

/** The server names its model after the file's stem. */
export function isServing(row: ModelRow, served: string): boolean {
  return served !== '' && row.file.replace(/\.gguf$/i, '') === served;
}

/**
 * The action tools (those the server reports a state for) that profile `name` lets a model call,
 * each with whether something answers it here. Reasoning tags (think, plan, answer) are not tools.
 */
export function toolsNeeded(name: string, profiles: Profile[], tools: ToolStatus[]): ToolStatus[] {
  const profile = profiles.find((p) => p.name === name);
  if (!profile) return [];
  return profile.tools.flatMap((tag) => tools.filter((t) => t.tool === tag));
}
