// Goondan plugin shim for Node and Bun (plugin protocol version 1).
//
// Started as `node shim.mjs <entry>`: imports the user's module and
// speaks JSON-RPC 2.0, one message per line, on stdin/stdout. It adapts
// the module shapes users write, unchanged:
//   export const handlers = { name: async (ctx, input) => ... }
//   export default async function (ctx, input) { ... }   (one export)
//   export function register(api, config) { ... }        (extensions)
// stdout belongs to the protocol, so console output goes to stderr.
// See docs/plugin-protocol.md.

import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { format } from 'node:util';
import * as nodeModule from 'node:module';

const PROTOCOL_VERSION = 1;
const entry = process.argv[process.argv.length - 1];

const writeLine = (message) => {
  process.stdout.write(JSON.stringify(message) + '\n');
};

// User code printing to stdout would corrupt the protocol.
for (const level of ['log', 'info', 'debug', 'trace']) {
  console[level] = (...args) => process.stderr.write(format(...args) + '\n');
}

let nextId = 1;
const pending = new Map();

function call(method, params) {
  const id = nextId++;
  writeLine({ jsonrpc: '2.0', id, method, params });
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

function notify(method, params) {
  writeLine({ jsonrpc: '2.0', method, params });
}

function makeLogger(fields) {
  const send = (level) => (...args) => notify('log', { level, message: format(...args), fields });
  return { debug: send('debug'), info: send('info'), log: send('info'), warn: send('warn'), error: send('error') };
}

function errorObject(error) {
  const data = {};
  if (error && typeof error === 'object') {
    if (typeof error.code === 'string') data.code = error.code;
    if (typeof error.name === 'string') data.name = error.name;
    if (typeof error.suggestion === 'string') data.suggestion = error.suggestion;
    if (typeof error.helpUrl === 'string') data.helpUrl = error.helpUrl;
  }
  const message = error instanceof Error ? error.message : String(error);
  return { code: -32000, message, data };
}

let mod = {};
let handlers = {};
let registerFn;
const dynamicTools = new Map();
const middlewares = new Map();
const subscriptions = new Map();

async function loadModule() {
  const hooks = process.env.GOONDAN_PLUGIN_HOOKS;
  if (hooks && typeof nodeModule.register === 'function') {
    nodeModule.register(pathToFileURL(hooks).href);
  }
  mod = await import(pathToFileURL(entry).href);
  const source = mod.handlers ?? mod.default?.handlers;
  handlers = {};
  if (source && typeof source === 'object') {
    for (const [name, fn] of Object.entries(source)) {
      if (typeof fn === 'function') handlers[name] = fn;
    }
  }
  if (Object.keys(handlers).length === 0 && typeof mod.default === 'function') {
    handlers.default = mod.default;
  }
  registerFn = typeof mod.register === 'function' ? mod.register : mod.default?.register;
}

function toolContext(context, invocation) {
  const agents = {
    request: (target, input, options = {}) => call('agents.request', { invocation, target, input, ...options }),
    send: (target, input, options = {}) => call('agents.send', { invocation, target, input, ...options }),
    catalog: () => call('agents.catalog', { invocation }),
  };
  return {
    ...context,
    agents,
    askPerson: askPerson(invocation),
    logger: makeLogger({ toolCallId: context.toolCallId }),
  };
}

// `ctx.askPerson(question, { name, details, timeoutSeconds, onTimeout })`:
// resolves with the decision ({ approved, verdict, reason, arguments, by,
// ... }) once a person decides or the timeout does.
function askPerson(invocation) {
  return (question, options = {}) => call('operator.ask', { invocation, question, ...options });
}

async function invokeTool(params) {
  const fn = params.tool !== undefined ? dynamicTools.get(params.tool) : handlers[params.export];
  if (typeof fn !== 'function') {
    throw Object.assign(new Error(`no tool handler named ${params.tool ?? params.export}`), { code: 'E_PLUGIN_EXPORT_MISSING' });
  }
  const output = await fn(toolContext(params.context ?? {}, params.invocation), params.args ?? {});
  return { output: output === undefined ? null : output };
}

async function registerExtension({ extension, config }) {
  if (typeof registerFn !== 'function') {
    throw Object.assign(new Error(`${entry} does not export register(api, config)`), { code: 'E_PLUGIN_NO_REGISTER' });
  }
  const registrations = { middlewares: [], tools: [], subscriptions: [] };
  const kinds = new Set(['turn', 'step', 'toolCall']);
  const api = {
    pipeline: {
      register(kind, fn, options) {
        if (!kinds.has(kind)) throw new Error(`unknown middleware kind ${kind}: use turn, step or toolCall`);
        const id = `${extension}#${kind}#${registrations.middlewares.length}`;
        middlewares.set(id, fn);
        registrations.middlewares.push({ id, kind, priority: options?.priority ?? 0 });
      },
    },
    tools: {
      register(item, handler) {
        dynamicTools.set(item.name, handler);
        registrations.tools.push({ item });
      },
    },
    state: {
      get: async () => (await call('state.get', { extension })).value ?? undefined,
      set: async (value) => {
        await call('state.set', { extension, value: value === undefined ? null : value });
      },
    },
    events: {
      on(event, handler) {
        const id = `${extension}#event#${subscriptions.size}#${event}`;
        subscriptions.set(id, handler);
        registrations.subscriptions.push({ id, event });
        return () => subscriptions.delete(id);
      },
      emit: (event, ...args) => call('events.emit', { extension, event, payload: args[0] ?? null, args: args.map((arg) => arg ?? null) }),
    },
    logger: makeLogger({ extension }),
  };
  await registerFn(api, config ?? undefined);
  return registrations;
}

// A live `conversationState`: the Turn's base and events arrive once with
// `middleware.invoke`; the events the inner chain adds come back with
// `next`, and the middleware's own are applied as it emits them, so
// `nextMessages` is always `baseMessages + SUM(events)`, folded the way
// the runtime folds (a replace or remove of a missing id changes nothing).
function conversation(wire) {
  const baseMessages = wire?.baseMessages ?? [];
  const events = [];
  let next = [...baseMessages];
  const apply = (event) => {
    events.push(event);
    const at = () => next.findIndex((message) => message?.id === event.targetId);
    switch (event?.type) {
      case 'append': next.push(event.message); break;
      case 'replace': { const index = at(); if (index >= 0) next[index] = event.message; break; }
      case 'remove': { const index = at(); if (index >= 0) next.splice(index, 1); break; }
      case 'truncate': next = []; break;
      default: break;
    }
  };
  for (const event of wire?.events ?? []) apply(event);
  const state = {
    get baseMessages() { return baseMessages; },
    get events() { return events; },
    get nextMessages() { return next; },
    toLlmMessages: () => next.map((message) => message.data),
  };
  const catchUp = (delta) => { for (const event of delta?.events ?? []) apply(event); };
  return { state, apply, catchUp };
}

// `ctx.agents` of a turn or step middleware (seed 000 §4.4): the same
// calls as a tool's, with the seed's one-object parameters.
function middlewareAgents(invocation) {
  const params = (method, request) => {
    if (!request || typeof request !== 'object' || typeof request.target !== 'string') {
      throw Object.assign(new TypeError(`ctx.agents.${method} takes { target, input?, instanceKey?, ... }`), { code: 'E_AGENT_BAD_REQUEST' });
    }
    return { ...request, invocation };
  };
  return {
    request: async (request) => call('agents.request', params('request', request)),
    send: async (request) => call('agents.send', params('send', request)),
  };
}

async function invokeMiddleware({ middleware, invocation, kind, context }) {
  const fn = middlewares.get(middleware);
  if (typeof fn !== 'function') throw new Error(`no middleware ${middleware}`);
  const ctx = { ...context };
  const hasConversation = kind === 'turn' || kind === 'step';
  const state = hasConversation ? conversation(context.conversationState) : undefined;
  if (hasConversation) {
    ctx.conversationState = state.state;
    ctx.agents = middlewareAgents(invocation);
  }
  ctx.next = async () => {
    const changes = { metadata: ctx.metadata };
    if (kind === 'step') changes.toolCatalog = ctx.toolCatalog;
    if (kind === 'toolCall') changes.args = ctx.args;
    let answer;
    try {
      answer = await call('middleware.next', { invocation, changes });
    } catch (error) {
      state?.catchUp(error.conversationState);
      delete error.conversationState;
      throw error;
    }
    state?.catchUp(answer.conversationState);
    return answer.result;
  };
  ctx.emitMessageEvent = (event) => {
    // Sync in the original API: the host serves it before the next call
    // of this invocation, so ordering holds without awaiting.
    state?.apply(event);
    call('message.emit', { invocation, event }).catch((error) =>
      process.stderr.write(`emitMessageEvent failed: ${error.message}\n`));
  };
  ctx.askPerson = askPerson(invocation);
  ctx.logger = makeLogger({ middleware });
  const result = await fn(ctx, ctx.next);
  return { result: result === undefined ? null : result };
}

const methods = {
  async initialize() {
    await loadModule();
    return {
      protocolVersion: PROTOCOL_VERSION,
      exports: {
        tools: Object.keys(handlers),
        register: typeof registerFn === 'function',
        connector: typeof mod.default === 'function' && typeof registerFn !== 'function',
      },
    };
  },
  'tool.invoke': invokeTool,
  'extension.register': registerExtension,
  'middleware.invoke': invokeMiddleware,
  async 'connector.start'({ invocation, config, secrets }) {
    if (typeof mod.default !== 'function') throw new Error(`${entry} has no default-exported connector function`);
    const ctx = {
      emit: (event) => call('connector.emit', { invocation, event }),
      config: config ?? {},
      secrets: secrets ?? {},
      logger: makeLogger({ connector: entry }),
    };
    await mod.default(ctx);
    return null;
  },
  async shutdown() {
    setImmediate(() => process.exit(0));
    return null;
  },
};

const notifications = {
  'events.dispatch'({ subscription, payload, args }) {
    const handler = subscriptions.get(subscription);
    if (handler) Promise.resolve().then(() => handler(...(Array.isArray(args) ? args : [payload]))).catch((error) =>
      process.stderr.write(`event handler failed: ${error?.message ?? error}\n`));
  },
  // Promises cannot be cancelled; the host has already given up on the
  // answer, which is then dropped.
  '$/cancel'() {},
};

async function serve(message) {
  const method = methods[message.method];
  if (!method) {
    writeLine({ jsonrpc: '2.0', id: message.id, error: { code: -32601, message: `no method ${message.method}` } });
    return;
  }
  try {
    const result = await method(message.params ?? {});
    writeLine({ jsonrpc: '2.0', id: message.id, result: result === undefined ? null : result });
  } catch (error) {
    writeLine({ jsonrpc: '2.0', id: message.id, error: errorObject(error) });
  }
}

const input = createInterface({ input: process.stdin, crlfDelay: Infinity });
input.on('line', (line) => {
  if (!line.trim()) return;
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    process.stderr.write('the host sent a line that is not JSON\n');
    return;
  }
  if (message.method === undefined) {
    const waiter = pending.get(message.id);
    if (!waiter) return;
    pending.delete(message.id);
    if (message.error) {
      waiter.reject(Object.assign(new Error(message.error.message), message.error.data ?? {}));
    } else {
      waiter.resolve(message.result);
    }
  } else if (message.id === undefined || message.id === null) {
    notifications[message.method]?.(message.params ?? {});
  } else {
    serve(message);
  }
});
input.on('close', () => process.exit(0));
