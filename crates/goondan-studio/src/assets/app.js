// Goondan Studio: a read-only view of the state root. Plain DOM, no
// framework; every text from the state root goes in through textContent.
"use strict";

const state = { swarms: [], view: null, events: [], eventsCut: null, conversation: null, source: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

async function getJson(path) {
  // A 503 with Retry-After means the Studio is busy with other reads of
  // logs (it caps them); wait as told and try a few times.
  for (let attempt = 0; ; attempt++) {
    const response = await fetch(path, { credentials: "same-origin" });
    const retryAfter = Number(response.headers.get("Retry-After"));
    if (response.status === 503 && retryAfter > 0 && attempt < 5) {
      await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000));
      continue;
    }
    if (!response.ok) throw new Error(`${path}: ${response.status}`);
    return response.json();
  }
}

/** A note when an answer was cut by the Studio's read budget or line cap. */
function cutNote(answer) {
  if (!answer || !answer.truncated) return null;
  const skipped = answer.skippedLines ? `; ${answer.skippedLines} over-long line(s) skipped` : "";
  return el("p", { class: "muted cut-note", text: `Only the newest part of the log was read${skipped}.` });
}

const enc = encodeURIComponent;
const fmtTokens = (n) => (n || 0).toLocaleString("en-US");
const fmtCost = (usd) => (usd === undefined || usd === null ? "–" : "$" + usd.toFixed(usd < 0.01 ? 6 : 4));
const fmtMs = (ms) => (ms === undefined || ms === null ? "…" : ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(2)} s`);
const short = (id) => (id || "").slice(0, 8);

// ---- sidebar -------------------------------------------------------------

async function loadSwarms() {
  try {
    state.swarms = (await getJson("/api/swarms")).swarms;
  } catch (error) {
    state.swarms = [];
  }
  renderSidebar();
}

function renderSidebar() {
  const nav = document.getElementById("swarms");
  nav.replaceChildren();
  if (state.swarms.length === 0) {
    nav.append(el("p", { class: "muted", text: "No swarms under this state root yet." }));
    return;
  }
  for (const swarm of state.swarms) {
    nav.append(el("h2", { class: "swarm", text: swarm.id }));
    for (const instance of swarm.instances) {
      const usage = instance.usage || {};
      const active = state.view && state.view.kind === "instance" && state.view.swarm === swarm.id && state.view.instance === instance.id;
      nav.append(
        el("a", { class: "instance-link" + (active ? " active" : ""), href: `#/i/${enc(swarm.id)}/${enc(instance.id)}`, "data-agent": instance.agentName },
          el("span", { class: "agent", text: instance.agentName }),
          el("span", { class: "muted", text: ":" + instance.instanceKey }),
          el("span", { class: "meta", text: `${instance.status || "?"} · ${fmtTokens((usage.inputTokens || 0) + (usage.outputTokens || 0))} tok · ${fmtCost(usage.costUsd)}` })));
    }
  }
}

// ---- routing ---------------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "i" && parts.length === 3) return { kind: "instance", swarm: parts[1], instance: parts[2] };
  if (parts[0] === "t" && parts.length === 3) return { kind: "trace", swarm: parts[1], trace: parts[2] };
  return null;
}

async function show() {
  state.view = route();
  renderSidebar();
  connectLive();
  const main = document.getElementById("main");
  if (!state.view) return;
  main.replaceChildren(el("p", { class: "muted", text: "Loading…" }));
  try {
    if (state.view.kind === "instance") {
      const { swarm, instance } = state.view;
      const [conversation, events] = await Promise.all([
        getJson(`/api/swarms/${enc(swarm)}/instances/${enc(instance)}/conversation`),
        getJson(`/api/swarms/${enc(swarm)}/instances/${enc(instance)}/events`),
      ]);
      state.conversation = conversation;
      state.events = events.events;
      state.eventsCut = events;
    } else {
      const trace = await getJson(`/api/swarms/${enc(state.view.swarm)}/traces/${enc(state.view.trace)}`);
      state.events = trace.events;
      state.eventsCut = trace;
    }
    render();
  } catch (error) {
    main.replaceChildren(el("p", { class: "status-error", text: "Could not load: " + error.message }));
  }
}

function render() {
  const main = document.getElementById("main");
  if (!state.view) return;
  main.replaceChildren(state.view.kind === "instance" ? renderInstance() : renderTrace());
}

// ---- instance view -------------------------------------------------------

function currentInstance() {
  const swarm = state.swarms.find((s) => s.id === state.view.swarm);
  return swarm && swarm.instances.find((i) => i.id === state.view.instance);
}

function renderInstance() {
  const info = currentInstance() || { agentName: state.view.instance, instanceKey: "" };
  const usage = info.usage || {};
  return el("div", { class: "instance-view" },
    el("div", { class: "title" },
      el("h1", {}, el("span", { class: "agent-name", text: info.agentName }), el("span", { class: "muted", text: ":" + info.instanceKey })),
      el("div", { class: "chips" },
        el("span", { class: "chip", text: info.status || "unknown" }),
        el("span", { class: "chip", text: `in ${fmtTokens(usage.inputTokens)} · out ${fmtTokens(usage.outputTokens)} tokens` }),
        el("span", { class: "chip", text: `cost ${fmtCost(usage.costUsd)}` }),
        el("span", { class: "chip", text: `${usage.modelCalls || 0} model calls` }))),
    el("div", { class: "grid" },
      el("section", { class: "panel", id: "conversation" }, el("h2", { text: "Conversation" }), renderConversation()),
      el("section", { class: "panel", id: "timeline" }, el("h2", { text: "Timeline" }), renderTimeline(state.events))));
}

function partText(part) {
  if (typeof part === "string") return el("div", { class: "text", text: part });
  if (part.type === "text") return el("div", { class: "text", text: part.text });
  if (part.type === "tool-call") {
    return el("div", { class: "part-tool tool-call", "data-tool-name": part.toolName },
      el("b", { text: "→ " + part.toolName }), " ", el("code", { text: JSON.stringify(part.input) }));
  }
  if (part.type === "tool-result") {
    const output = part.output && part.output.value !== undefined ? part.output.value : part.output;
    return el("div", { class: "part-tool" }, el("b", { text: "← " + part.toolName }), " ",
      el("code", { text: typeof output === "string" ? output : JSON.stringify(output) }));
  }
  return el("code", { text: JSON.stringify(part) });
}

function renderConversation() {
  const conversation = state.conversation || { messages: [] };
  const list = el("div", { class: "messages" });
  if (conversation.older) list.append(el("p", { class: "muted", text: "Older messages not shown" }));
  const note = cutNote(conversation);
  if (note) list.append(note);
  for (const message of conversation.messages) {
    const data = message.data || {};
    const content = Array.isArray(data.content) ? data.content : [data.content];
    list.append(el("div", { class: "message " + data.role, "data-message-id": message.id },
      el("div", { class: "role", text: data.role }), content.map(partText)));
  }
  if (conversation.messages.length === 0) list.append(el("p", { class: "muted", text: "No messages yet." }));
  return list;
}

/** Turns of `events` (one instance's), oldest first, with their steps and tool calls. */
function buildTurns(events) {
  const turns = new Map();
  const turnOf = (id, event) => {
    if (!turns.has(id)) turns.set(id, { id, traceId: event.traceId, start: event.timestamp, steps: new Map(), notes: [], status: "running" });
    return turns.get(id);
  };
  for (const event of events) {
    if (!event.turnId) continue;
    const turn = turnOf(event.turnId, event);
    const stepOf = (id) => {
      if (!turn.steps.has(id)) turn.steps.set(id, { id, index: event.stepIndex, tools: new Map(), status: "running" });
      return turn.steps.get(id);
    };
    switch (event.type) {
      case "turn.started": turn.start = event.timestamp; break;
      case "turn.completed": Object.assign(turn, { status: "ok", duration: event.duration, usage: event.tokenUsage, cost: event.costUsd, stepCount: event.stepCount }); break;
      case "turn.failed": Object.assign(turn, { status: "error", duration: event.duration, error: event.errorMessage }); break;
      case "step.started": stepOf(event.stepId).index = event.stepIndex; break;
      case "step.completed": Object.assign(stepOf(event.stepId), { status: "ok", duration: event.duration, usage: event.tokenUsage, cost: event.costUsd, model: event.model }); break;
      case "step.failed": Object.assign(stepOf(event.stepId), { status: "error", duration: event.duration, error: event.errorMessage }); break;
      case "tool.called": case "tool.completed": case "tool.failed": {
        const step = stepOf(event.stepId);
        const tool = step.tools.get(event.toolCallId) || { id: event.toolCallId, name: event.toolName, status: "running" };
        if (event.type === "tool.completed") Object.assign(tool, { status: event.status, duration: event.duration });
        if (event.type === "tool.failed") Object.assign(tool, { status: "error", duration: event.duration, error: event.errorMessage });
        step.tools.set(event.toolCallId, tool);
        break;
      }
      case "budget.exceeded": turn.notes.push(event.errorMessage); break;
    }
  }
  return [...turns.values()];
}

function usageText(usage, cost) {
  if (!usage) return "";
  return `${fmtTokens(usage.promptTokens)} in · ${fmtTokens(usage.completionTokens)} out · ${fmtCost(cost)}`;
}

function statusClass(status) {
  return status === "ok" ? "status-ok" : status === "running" ? "status-running" : "status-error";
}

function renderTool(tool) {
  return el("div", { class: "tool-call", "data-tool-name": tool.name },
    el("span", { class: "tool-label", text: "tool" }), " ", el("span", { text: tool.name }), " ",
    el("span", { class: statusClass(tool.status), text: tool.status }), " ",
    el("span", { class: "muted", text: fmtMs(tool.duration) }));
}

function renderStep(step) {
  const head = el("div", {},
    el("b", { text: `Step ${step.index ?? "?"}` }), " ",
    el("span", { class: "muted" }, step.model ? step.model + " · " : "", usageText(step.usage, step.cost), " · ", fmtMs(step.duration)));
  return el("div", { class: "step", "data-step-id": step.id }, head, [...step.tools.values()].map(renderTool));
}

function renderTurn(turn) {
  const kind = turn.status === "error" ? "failed" : turn.status === "running" ? "running" : "";
  const head = el("div", { class: "head" },
    el("span", {},
      el("b", { text: "Turn " + short(turn.id.replace(/^turn_/, "")) }), " ",
      el("span", { class: statusClass(turn.status), text: turn.status }), " ",
      el("span", { class: "muted", text: (turn.start || "").replace("T", " ").slice(0, 19) })),
    el("span", { class: "muted" },
      usageText(turn.usage, turn.cost), " · ", fmtMs(turn.duration), " · ",
      el("a", { href: `#/t/${enc(state.view.swarm)}/${enc(turn.traceId)}`, class: "trace-link", text: "trace " + short(turn.traceId) })));
  const body = el("div", { class: "body" },
    turn.notes.map((note) => el("div", { class: "budget", text: note })),
    turn.error ? el("div", { class: "status-error", text: turn.error }) : null,
    [...turn.steps.values()].map(renderStep));
  return el("div", { class: "turn " + kind, "data-turn-id": turn.id, "data-status": turn.status }, head, body);
}

function renderTimeline(events) {
  const turns = buildTurns(events);
  const list = el("div", { class: "turns" });
  const note = cutNote(state.eventsCut);
  if (note) list.append(note);
  if (turns.length === 0) list.append(el("p", { class: "muted", text: "No turns yet." }));
  turns.reverse().forEach((turn) => list.append(renderTurn(turn)));
  return list;
}

// ---- trace view ------------------------------------------------------------

function buildSpans(events) {
  const spans = new Map();
  const spanOf = (event, kind, label) => {
    if (!spans.has(event.spanId)) {
      spans.set(event.spanId, { id: event.spanId, parent: event.parentSpanId, kind, label, agent: event.agentName, instance: event.instance, start: Date.parse(event.timestamp), status: "running", children: [] });
    }
    return spans.get(event.spanId);
  };
  for (const event of events) {
    const time = Date.parse(event.timestamp);
    if (event.type.startsWith("turn.")) {
      const span = spanOf(event, "turn", `${event.agentName} turn`);
      if (event.type === "turn.started") span.start = time;
      if (event.type !== "turn.started") Object.assign(span, { duration: event.duration, status: event.type === "turn.completed" ? "ok" : "error", usage: event.tokenUsage, cost: event.costUsd });
    } else if (event.type.startsWith("step.")) {
      const span = spanOf(event, "step", `step ${event.stepIndex}`);
      if (event.type !== "step.started") Object.assign(span, { duration: event.duration, status: event.type === "step.completed" ? "ok" : "error", usage: event.tokenUsage, cost: event.costUsd });
    } else if (event.type.startsWith("tool.")) {
      const span = spanOf(event, "tool", event.toolName);
      if (event.type !== "tool.called") Object.assign(span, { duration: event.duration, status: event.type === "tool.completed" ? event.status : "error" });
    }
  }
  const roots = [];
  for (const span of spans.values()) {
    const parent = span.parent && spans.get(span.parent);
    if (parent) parent.children.push(span); else roots.push(span);
  }
  for (const span of spans.values()) span.children.sort((a, b) => a.start - b.start);
  return { spans, roots };
}

function renderTrace() {
  const { spans, roots } = buildSpans(state.events);
  const all = [...spans.values()];
  const begin = Math.min(...all.map((s) => s.start));
  const end = Math.max(...all.map((s) => s.start + (s.duration || 0)));
  const total = Math.max(end - begin, 1);
  const rows = el("div", { class: "spans" });
  const walk = (span, depth) => {
    const left = ((span.start - begin) / total) * 100;
    const width = ((span.duration || 0) / total) * 100;
    rows.append(el("div", { class: "span-row", "data-span-kind": span.kind, "data-agent": span.agent },
      el("div", { class: "span-name", title: span.label },
        el("span", { class: "muted", text: "· ".repeat(depth) }),
        el("span", { class: span.kind === "tool" ? "tool-call" : "", text: span.label }),
        span.usage ? el("span", { class: "muted", text: "  " + usageText(span.usage, span.cost) }) : null),
      el("div", { class: "bar-track" }, barOf(span, left, width)),
      el("div", { class: "muted", text: fmtMs(span.duration) })));
    span.children.forEach((child) => walk(child, depth + 1));
  };
  roots.sort((a, b) => a.start - b.start).forEach((root) => walk(root, 0));
  const turns = all.filter((s) => s.kind === "turn");
  const tokens = turns.reduce((sum, t) => sum + (t.usage ? t.usage.promptTokens + t.usage.completionTokens : 0), 0);
  const cost = turns.reduce((sum, t) => sum + (t.cost || 0), 0);
  return el("div", { class: "trace-view" },
    el("div", { class: "title" }, el("h1", { text: "Trace " + short(state.view.trace) }),
      el("div", { class: "chips" },
        el("span", { class: "chip", text: `${turns.length} turns` }),
        el("span", { class: "chip", text: `${fmtTokens(tokens)} tokens` }),
        el("span", { class: "chip", text: `cost ${fmtCost(cost)}` }),
        el("span", { class: "chip", text: fmtMs(end - begin) }))),
    cutNote(state.eventsCut),
    el("div", { class: "grid" },
      el("section", { class: "panel", id: "span-tree" }, el("h2", { text: "Span tree" }), rows),
      el("section", { class: "panel", id: "call-graph" }, el("h2", { text: "Inter-agent calls" }), renderGraph(spans))));
}

function barOf(span, left, width) {
  // Styles are set through the CSSOM, which the page's CSP allows.
  const bar = el("div", { class: `bar ${span.kind} ${span.status === "error" ? "failed" : ""}` });
  const shown = Math.max(width, 0.5);
  bar.style.left = Math.min(left, 100 - shown) + "%";
  bar.style.width = shown + "%";
  return bar;
}

function renderGraph(spans) {
  const agents = [];
  const edges = new Map();
  for (const span of spans.values()) {
    if (span.kind !== "turn") continue;
    if (!agents.includes(span.agent)) agents.push(span.agent);
    let parent = span.parent && spans.get(span.parent);
    while (parent && parent.kind !== "turn") parent = parent.parent && spans.get(parent.parent);
    if (parent && parent.agent !== span.agent) {
      const key = parent.agent + "\u0000" + span.agent;
      edges.set(key, (edges.get(key) || 0) + 1);
    }
  }
  const width = Math.max(320, agents.length * 170);
  const height = 150;
  const x = (agent) => 85 + agents.indexOf(agent) * 170;
  const graph = svg("svg", { class: "graph", width, height, viewBox: `0 0 ${width} ${height}` });
  const defs = svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#d2a8ff" })));
  graph.append(defs);
  for (const [key, count] of edges) {
    const [from, to] = key.split("\u0000");
    const x1 = x(from), x2 = x(to);
    const bend = x1 < x2 ? 40 : 110;
    graph.append(svg("path", { class: "edge", d: `M ${x1} 75 C ${x1} ${bend}, ${x2} ${bend}, ${x2} 75`, "marker-end": "url(#arrow)" }));
    graph.append(svg("text", { x: (x1 + x2) / 2, y: x1 < x2 ? 40 : 125, "text-anchor": "middle" }, `${count}×`));
  }
  for (const agent of agents) {
    graph.append(svg("g", { class: "graph-node", "data-agent": agent },
      svg("rect", { class: "node", x: x(agent) - 70, y: 60, width: 140, height: 30, rx: 6 }),
      svg("text", { x: x(agent), y: 80, "text-anchor": "middle" }, agent)));
  }
  return el("div", {}, graph, edges.size === 0 ? el("p", { class: "muted", text: "No inter-agent calls in this trace." }) : null);
}

// ---- live ------------------------------------------------------------------

function connectLive() {
  const swarm = state.view && state.view.swarm;
  if (state.source && state.source.swarm === swarm) return;
  if (state.source) state.source.close();
  state.source = null;
  setLive(false);
  if (!swarm) return;
  const source = new EventSource(`/api/swarms/${enc(swarm)}/live`);
  source.swarm = swarm;
  source.addEventListener("ready", () => setLive(true));
  source.onerror = () => setLive(false);
  source.onmessage = (message) => onLiveEvent(JSON.parse(message.data));
  state.source = source;
}

function setLive(on) {
  const badge = document.getElementById("live-state");
  badge.textContent = on ? "live" : "offline";
  badge.className = "live " + (on ? "on" : "off");
}

let refreshTimer = null;
function onLiveEvent(event) {
  const view = state.view;
  if (!view) return;
  const mine = view.kind === "instance" ? event.instance === view.instance : event.traceId === view.trace;
  if (mine) {
    state.events.push(event);
    render();
  }
  if (/^turn\.(completed|failed)$/.test(event.type) || event.type === "turn.started") {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(async () => {
      await loadSwarms();
      if (state.view && state.view.kind === "instance") {
        try {
          state.conversation = await getJson(`/api/swarms/${enc(state.view.swarm)}/instances/${enc(state.view.instance)}/conversation`);
        } catch (error) { /* the next event retries */ }
      }
      render();
    }, 150);
  }
}

window.addEventListener("hashchange", show);
loadSwarms().then(show);
