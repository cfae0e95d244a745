// A tool in the original's module shape: `handlers` by export name, each
// `(ctx, input)`. TypeScript runs on Node 20 too (gdn strips the types).
import type { ToolContext } from '@goondan/types';

interface CountInput {
  text: string;
}

export const handlers = {
  count: async (_ctx: ToolContext, input: CountInput) => {
    const words = input.text.split(/\s+/).filter((word) => word.length > 0);
    return { words: words.length, characters: input.text.length };
  },
};
