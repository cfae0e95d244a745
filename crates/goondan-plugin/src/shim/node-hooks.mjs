// Goondan module loader hooks for TypeScript entries on Node 20.6+.
//
// resolve: `./x.js` that does not exist but `./x.ts` does resolves to the
// `.ts` file (TypeScript's import convention).
// load: a .ts/.mts/.cts file is turned into JavaScript by the command in
// GOONDAN_STRIP_TYPES_COMMAND (a JSON array of argv; the file path is
// appended; it prints JavaScript on stdout). Without the variable (Node
// 22.6+ strips types itself) loading is left to Node.

import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const TYPESCRIPT = /\.(ts|mts|cts)$/;
const JAVASCRIPT_TO_TYPESCRIPT = [[/\.js$/, '.ts'], [/\.mjs$/, '.mts'], [/\.cjs$/, '.cts']];

export async function resolve(specifier, context, nextResolve) {
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    if (error?.code !== 'ERR_MODULE_NOT_FOUND') throw error;
    for (const [pattern, replacement] of JAVASCRIPT_TO_TYPESCRIPT) {
      if (pattern.test(specifier)) {
        return nextResolve(specifier.replace(pattern, replacement), context);
      }
    }
    throw error;
  }
}

export async function load(url, context, nextLoad) {
  if (url.startsWith('file:') && TYPESCRIPT.test(url)) {
    const command = JSON.parse(process.env.GOONDAN_STRIP_TYPES_COMMAND ?? '[]');
    // No command: this Node strips types itself; only `resolve` is needed.
    if (command.length === 0) return nextLoad(url, context);
    const path = fileURLToPath(url);
    const source = execFileSync(command[0], [...command.slice(1), path], {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    return { format: 'module', source, shortCircuit: true };
  }
  return nextLoad(url, context);
}
