// An extension: hides some tools from the model (step middleware) and
// collapses runs of spaces in every `text` argument before the tool runs
// (toolCall middleware). Both call `ctx.next()` exactly once.
import type { ExtensionApi } from '@goondan/types';

export function register(api: ExtensionApi, config?: { hidePrefix?: string }): void {
  const hidden = config?.hidePrefix ?? '';
  api.pipeline.register('step', async (ctx: any) => {
    if (hidden) {
      ctx.toolCatalog = ctx.toolCatalog.filter((tool: { name: string }) => !tool.name.startsWith(hidden));
    }
    return ctx.next();
  });
  api.pipeline.register('toolCall', async (ctx: any) => {
    if (typeof ctx.args?.text === 'string') {
      ctx.args = { ...ctx.args, text: (ctx.args.text as string).replace(/\s+/g, ' ').trim() };
    }
    return ctx.next();
  });
}
