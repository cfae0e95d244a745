// Goondan Studio: a view of the state root, and with --allow-actions a
// few actions through the orchestrator. Plain DOM, no framework; every
// text from the state root goes in through textContent, never as HTML.
"use strict";

const state = {
  swarms: [], view: null, events: [], eventsCut: null, conversation: null, history: null, source: null,
  approvals: [], detail: null,
  // Whether each swarm's orchestrator answers now (`/api/status`), by id;
  // null until the first answer, false when the Studio did not answer.
  running: null, liveReady: false,
  filter: { text: "", status: "", since: "" },
  turnFilter: { text: "", status: "", since: "" },
};
// The CSRF token the Studio put in the page when actions are allowed.
const csrfMeta = document.querySelector('meta[name="gdn-csrf"]');
const CSRF = csrfMeta ? csrfMeta.getAttribute("content") : null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
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

/** Sends an action; resolves to the answer's JSON, or throws with its code and message. */
async function postAction(path, body) {
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Goondan-Csrf": CSRF || "" },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${answer.code || response.status}: ${answer.message || "refused"}`);

  return answer;
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

const fmtTime = (iso) => (iso || "").replace("T", " ").slice(0, 19);

/**
 * An instance as a person reads it: its agent, the Connection its key
 * names (a key a Connection made is `<connection>-<hex>`, or for an end
 * user `<connection>-<12 hex>-<hex>`) and a short key; the full
 * `agent:key` goes in a title.
 */
function instanceName(agentName, instanceKey) {
  const key = instanceKey || "";
  const made = /^([A-Za-z][\w.]*?)-(?:([0-9a-f]{12})-)?([0-9a-f]{16,})$/.exec(key);
  const parts = made
    ? [agentName, made[1], (made[2] ? made[2].slice(0, 6) + "…" : "") + made[3].slice(0, 8)]
    : [agentName, key.length > 24 ? key.slice(0, 20) + "…" : key];
  return { text: parts.filter(Boolean).join(" · "), connection: made ? made[1] : null, full: `${agentName}:${key}` };
}

/** The requests waiting for a person in the instance `instance` of `swarm`. */
function waitingOf(swarm, instance) {
  return state.approvals.filter((request) => request.swarm === swarm && request.instance === instance);
}

/** The request the Turn `turnId` (or the tool call `callId`) waits on, if any. */
function waitingFor(swarm, instance, { turnId, callId }) {
  return waitingOf(swarm, instance).find((request) =>
    (callId && (request.key === callId || request.key.startsWith(callId + "/"))) || (turnId && request.turnId === turnId)) || null;
}

/** "waiting for approval": who may decide, since when, and what the deadline does. */
function waitingNote(request) {
  const deciders = (request.deciders || []).join(", ") || "operator";
  const deadline = request.deadline ? ` · ${request.onTimeout === "approve" ? "approved" : "denied"} at ${fmtTime(request.deadline)} if no one decides` : " · no deadline";
  return el("span", { class: "waiting-approval", "data-approval-id": request.id, title: request.question || request.tool || "" },
    el("a", { href: "#/approvals", class: "status-waiting", text: "waiting for approval" }),
    el("span", { class: "muted", text: ` · ${request.tool || "question"} · decided by ${deciders} · since ${fmtTime(request.requestedAt)}${deadline}` }));
}

// ---- sidebar -------------------------------------------------------------

async function loadSwarms() {
  try {
    state.swarms = (await getJson("/api/swarms")).swarms;
  } catch (error) {
    state.swarms = [];
  }
  try {
    state.approvals = (await getJson("/api/approvals")).approvals;
  } catch (error) {
    state.approvals = [];
  }
  renderSidebar();
}

/** A swarm as a person names it: its Package (or Swarm) name and bundle folder, the id after. */
function swarmLabel(swarm) {
  const name = swarm.package || swarm.swarm;
  if (!name) return swarm.id;
  return swarm.folder ? `${name} (${swarm.folder})` : name;
}

function matchesFilter(swarm, instance) {
  const { text, status, since } = state.filter;
  if (status && instance.status !== status) return false;
  if (since && !(Date.parse(instance.updatedAt) >= Date.now() - Number(since) * 1000)) return false;
  if (!text) return true;
  const name = instanceName(instance.agentName, instance.instanceKey);
  const haystack = [swarm.id, swarm.package, swarm.swarm, swarm.folder, instance.agentName, instance.instanceKey, name.connection, name.text].join(" ").toLowerCase();
  return haystack.includes(text.toLowerCase());
}

function renderFilterBar() {
  const input = el("input", { id: "instance-filter", type: "search", placeholder: "Search: agent, key, connection, swarm", value: state.filter.text, "aria-label": "filter instances" });
  input.addEventListener("input", () => { state.filter.text = input.value; renderSidebar(true); });
  const select = el("select", { id: "instance-status", "aria-label": "instance status" },
    ["", "idle", "processing"].map((status) => el("option", { value: status, text: status || "any status" })));
  select.value = state.filter.status;
  select.addEventListener("change", () => { state.filter.status = select.value; renderSidebar(); });
  const since = el("select", { id: "instance-since", "aria-label": "instance last active" },
    [["", "any time"], ["3600", "active last hour"], ["86400", "active last day"], ["604800", "active last week"]].map(([value, text]) => el("option", { value, text })));
  since.value = state.filter.since;
  since.addEventListener("change", () => { state.filter.since = since.value; renderSidebar(); });
  return el("div", { class: "filters" }, input, select, since);
}

function renderSidebar(keepFocus) {
  const nav = document.getElementById("swarms");
  if (keepFocus && document.getElementById("instance-list")) {
    document.getElementById("instance-list").replaceChildren(...instanceList());
    return;
  }
  nav.replaceChildren();
  const waiting = state.approvals.length;
  nav.append(el("a", { class: "approvals-link" + (state.view && state.view.kind === "approvals" ? " active" : ""), href: "#/approvals" },
    "Approvals ", el("span", { class: "chip" + (waiting ? " waiting" : ""), id: "approvals-count", text: String(waiting) })));
  nav.append(el("a", { class: "approvals-link" + (state.view && state.view.kind === "evals" ? " active" : ""), href: "#/evals", id: "evals-link" }, "Evals"));
  nav.append(renderFilterBar());
  nav.append(el("div", { id: "instance-list" }, instanceList()));
}

function instanceList() {
  const items = [];
  if (state.swarms.length === 0) {
    items.push(el("p", { class: "muted", text: "No swarms under this state root yet." }));
    return items;
  }
  for (const swarm of state.swarms) {
    const shown = swarm.instances.filter((instance) => matchesFilter(swarm, instance));
    if (shown.length === 0) continue;
    items.push(el("h2", { class: "swarm", title: swarm.id, "data-swarm": swarm.id },
      el("span", { class: "swarm-name", text: swarmLabel(swarm) }),
      swarmLabel(swarm) !== swarm.id ? el("span", { class: "muted swarm-id", text: " " + swarm.id }) : null,
      swarmRuns(swarm) ? null : el("span", { class: "muted swarm-id", text: " · stopped" }),
      " ", el("a", { class: "map-link", href: `#/swarm/${enc(swarm.id)}/map`, title: "what the bundle declares: agents, tools, Connections, who may call whom", text: "map" })));
    for (const instance of shown) {
      const usage = instance.usage || {};
      const active = state.view && state.view.kind === "instance" && state.view.swarm === swarm.id && state.view.instance === instance.id;
      const name = instanceName(instance.agentName, instance.instanceKey);
      const waiting = waitingOf(swarm.id, instance.id).length;
      const status = waiting ? "waiting for approval" : instance.status || "?";
      items.push(el("a", { class: "instance-link" + (active ? " active" : ""), href: `#/i/${enc(swarm.id)}/${enc(instance.id)}`, "data-agent": instance.agentName, "data-waiting": waiting ? String(waiting) : null, title: name.full },
          el("span", { class: "instance-name", text: name.text }),
          instance.forkedFrom ? el("span", { class: "muted", text: " (fork)" }) : null,
          el("span", { class: "meta" + (waiting ? " status-waiting" : ""), text: `${status} · ${fmtTokens((usage.inputTokens || 0) + (usage.outputTokens || 0))} tok · ${fmtCost(usage.costUsd)}` })));
    }
  }
  if (items.length === 0) items.push(el("p", { class: "muted", text: "No instance matches." }));
  return items;
}

// ---- routing ---------------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "i" && parts.length === 3) return { kind: "instance", swarm: parts[1], instance: parts[2] };
  if (parts[0] === "t" && parts.length === 3) return { kind: "trace", swarm: parts[1], trace: parts[2] };
  if (parts[0] === "approvals") return { kind: "approvals" };
  if (parts[0] === "swarm" && parts.length === 3 && parts[2] === "map") return { kind: "map", swarm: parts[1] };
  if (parts[0] === "evals") return { kind: "evals" };
  if (parts[0] === "et" && parts.length === 5) return { kind: "trace", run: parts[1], case: parts[2], swarm: parts[3], trace: parts[4] };
  return null;
}

/** Counts calls of `show`: a call that a newer one overtook drops what it read. */
let shows = 0;

async function show() {
  const call = ++shows;
  const before = state.view;
  state.view = route();
  // What was done on another page is not this one's. The first load and a
  // hash change can both call `show` for the same page, and the later one
  // must not undo a click made in between: only a new page clears it.
  const samePage = JSON.stringify(before) === JSON.stringify(state.view);
  if (!samePage) Object.assign(state.steer, { confirm: null, status: null, link: null });
  renderSidebar();
  connectLive();
  const main = document.getElementById("main");
  if (!state.view) return;
  // The same page shown again keeps its content (and its buttons) until the
  // new reads replace it.
  if (!samePage) {
    main.replaceChildren(el("p", { class: "muted", text: "Loading…" }));
    state.detail = null;
  }
  try {
    // Each branch reads first and stores only when no newer call started.
    if (state.view.kind === "approvals") {
      const answer = await getJson("/api/approvals");
      if (call !== shows) return;
      state.approvals = answer.approvals;
    } else if (state.view.kind === "map") {
      const answer = await getJson(`/api/swarms/${enc(state.view.swarm)}/map`);
      if (call !== shows) return;
      state.map = answer;
    } else if (state.view.kind === "evals") {
      const answer = await getJson("/api/evals");
      if (call !== shows) return;
      state.evalRuns = answer.runs;
    } else if (state.view.kind === "trace" && state.view.run !== undefined) {
      const { run, case: index, swarm, trace } = state.view;
      const answer = await getJson(`/api/evals/${enc(run)}/${enc(index)}/swarms/${enc(swarm)}/traces/${enc(trace)}`);
      if (call !== shows) return;
      state.events = answer.events;
      state.eventsCut = answer;
    } else if (state.view.kind === "instance") {
      const { swarm, instance } = state.view;
      const [conversation, events, history, originHistory, originConversation, extensions] = await Promise.all([
        getJson(`/api/swarms/${enc(swarm)}/instances/${enc(instance)}/conversation`),
        getJson(`/api/swarms/${enc(swarm)}/instances/${enc(instance)}/events`),
        getHistory(state.view),
        getOriginHistory(state.view),
        getOriginConversation(state.view),
        getExtensionStates(state.view),
      ]);
      if (call !== shows) return;
      if (!samePage) Object.assign(state.edit, { messageId: null, extension: null, status: null });
      Object.assign(state, { originHistory, originConversation, extensions });
      state.conversation = conversation;
      state.events = events.events;
      state.eventsCut = events;
      state.history = history;
    } else {
      const trace = await getJson(`/api/swarms/${enc(state.view.swarm)}/traces/${enc(state.view.trace)}`);
      if (call !== shows) return;
      state.events = trace.events;
      state.eventsCut = trace;
    }
    render();
  } catch (error) {
    if (call !== shows) return;
    main.replaceChildren(el("p", { class: "status-error", text: "Could not load: " + error.message }));
  }
}

function render() {
  const main = document.getElementById("main");
  if (!state.view) return;
  const views = { instance: renderInstance, trace: renderTrace, approvals: renderApprovals, evals: renderEvals, map: renderMap };
  main.replaceChildren(views[state.view.kind]());
}

// ---- instance view -------------------------------------------------------

function currentInstance() {
  const swarm = state.swarms.find((s) => s.id === state.view.swarm);
  return swarm && swarm.instances.find((i) => i.id === state.view.instance);
}

function renderInstance() {
  const info = currentInstance() || { agentName: state.view.instance, instanceKey: "" };
  const usage = info.usage || {};
  const name = instanceName(info.agentName, info.instanceKey);
  const waiting = waitingOf(state.view.swarm, state.view.instance);
  return el("div", { class: "instance-view" },
    el("div", { class: "title" },
      el("h1", { title: name.full }, el("span", { class: "agent-name", text: info.agentName }), el("span", { class: "muted", text: ":" + info.instanceKey })),
      el("div", { class: "chips" },
        el("span", { class: "chip" + (waiting.length ? " status-waiting" : ""), id: "instance-state", text: waiting.length ? "waiting for approval" : info.status || "unknown" }),
        el("span", { class: "chip", text: `in ${fmtTokens(usage.inputTokens)} · out ${fmtTokens(usage.outputTokens)} tokens` }),
        el("span", { class: "chip", text: `cost ${fmtCost(usage.costUsd)}` }),
        el("span", { class: "chip", text: `${usage.modelCalls || 0} model calls` }),
        viaChip())),
    renderOrigin(info),
    waiting.length ? el("section", { class: "panel waiting", id: "waiting" }, waiting.map((request) => el("div", {}, waitingNote(request)))) : null,
    CSRF ? renderSendBox() : null,
    renderSteerStatus(),
    renderEditStatus(),
    el("div", { class: "grid" },
      el("section", { class: "panel", id: "conversation" }, el("h2", { text: "Conversation" }), renderConversation()),
      el("section", { class: "panel", id: "timeline" }, el("h2", { text: "Timeline" }), renderTurnFilter(), renderTimeline(state.events))),
    state.detail ? el("section", { class: "panel", id: "detail" }, renderDetail()) : null,
    renderForkDiff(info),
    renderExtensionStates(),
    el("section", { class: "panel", id: "history" }, el("h2", { text: "History" }), renderHistory(info)));
}

/** Where the instance's inputs came from, as its Turns' `turn.started` name them (a Connection, `cli`, `studio`, an agent). */
function viaChip() {
  const names = [];
  for (const event of state.events || []) {
    const name = event.type === "turn.started" && event.source && event.source.name;
    if (name && !names.includes(name)) names.push(name);
  }
  if (names.length === 0) return null;
  return el("span", { class: "chip", id: "instance-via", title: "where its inputs came from (the Connection, cli, studio or an agent)", text: "via " + names.join(", ") });
}

function partText(part) {
  if (typeof part === "string") return el("div", { class: "text", text: part });
  if (part.type === "text") return el("div", { class: "text", text: part.text });
  if (part.type === "tool-call") {
    const waiting = state.view && waitingFor(state.view.swarm, state.view.instance, { callId: part.toolCallId });
    return el("div", { class: "part-tool tool-call", "data-tool-name": part.toolName },
      el("b", { text: "→ " + part.toolName }), " ", el("code", { text: JSON.stringify(part.input) }),
      waiting ? el("div", {}, waitingNote(waiting)) : null);
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
    const edited = message.metadata && message.metadata.__goondanEdit;
    const editing = state.edit.messageId === message.id;
    const head = el("div", { class: "role" }, data.role,
      edited ? el("span", { class: "chip edited", title: `edited${edited.by ? " by " + edited.by : ""}${edited.at ? " at " + fmtTime(edited.at) : ""}`, text: "edited" }) : null,
      CSRF && !editing && editableText(message) !== null ? editButton(message) : null);
    list.append(el("div", { class: "message " + data.role + (edited ? " is-edited" : ""), "data-message-id": message.id },
      head, editing ? renderMessageEditor(message) : contentOf(message).map(partText)));
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
      case "turn.failed":
        // A Turn a person cancelled is `cancelled`, as the History says, not a failure.
        Object.assign(turn, event.cancelledBy
          ? { status: "cancelled", duration: event.duration, cancelledBy: event.cancelledBy }
          : { status: "error", duration: event.duration, error: event.errorMessage });
        break;
      case "step.started": Object.assign(stepOf(event.stepId), { index: event.stepIndex, started: event }); break;
      case "step.completed": Object.assign(stepOf(event.stepId), { status: "ok", duration: event.duration, usage: event.tokenUsage, cost: event.costUsd, model: event.model, completed: event }); break;
      case "step.failed": Object.assign(stepOf(event.stepId), { status: "error", duration: event.duration, error: event.errorMessage, completed: event }); break;
      case "tool.called": case "tool.completed": case "tool.failed": {
        const step = stepOf(event.stepId);
        const tool = step.tools.get(event.toolCallId) || { id: event.toolCallId, name: event.toolName, status: "running", step: event.stepId, start: event.timestamp };
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
  const classes = { ok: "status-ok", running: "status-running", waiting: "status-waiting", cancelled: "status-cancelled", inherited: "muted" };
  return classes[status] || "status-error";
}

function renderTool(tool) {
  const waiting = tool.status === "running" && state.view && waitingFor(state.view.swarm, state.view.instance, { callId: tool.id });
  const row = el("div", { class: "tool-call clickable", "data-tool-name": tool.name, "data-tool-call-id": tool.id, "data-status": waiting ? "waiting" : tool.status, role: "button", tabindex: "0", title: "arguments and result" },
    el("span", { class: "tool-label", text: "tool" }), " ", el("span", { text: tool.name }), " ",
    waiting ? waitingNote(waiting) : el("span", { class: statusClass(tool.status), text: tool.status }), " ",
    el("span", { class: "muted", text: fmtMs(tool.duration) }));
  onActivate(row, (event) => { event.stopPropagation(); openDetail({ kind: "tool", id: tool.id }); });
  return row;
}

/** Runs `action` on a click, or Enter on the focused element. */
function onActivate(node, action) {
  node.addEventListener("click", action);
  node.addEventListener("keydown", (event) => { if (event.key === "Enter") action(event); });
}

function openDetail(detail) {
  state.detail = detail;
  render();
  const panel = document.getElementById("detail");
  if (panel) panel.scrollIntoView({ block: "nearest" });
}

function renderStep(step) {
  const head = el("div", { class: "step-head clickable", role: "button", tabindex: "0", title: "what the model was sent and what came back" },
    el("b", { text: `Step ${step.index ?? "?"}` }), " ",
    el("span", { class: "muted" }, step.model ? step.model + " · " : "", usageText(step.usage, step.cost), " · ", fmtMs(step.duration)));
  onActivate(head, () => openDetail({ kind: "step", id: step.id }));
  return el("div", { class: "step", "data-step-id": step.id }, head, [...step.tools.values()].map(renderTool));
}

function renderTurn(turn) {
  const waiting = turn.status === "running" ? waitingFor(state.view.swarm, state.view.instance, { turnId: turn.id }) : null;
  const status = waiting ? "waiting" : turn.status;
  const kind = status === "error" ? "failed" : status === "running" || status === "waiting" ? "running" : status === "cancelled" ? "cancelled" : "";
  const head = el("div", { class: "head" },
    el("span", {},
      el("b", { text: "Turn " + short(turn.id.replace(/^turn_/, "")) }), " ",
      waiting ? waitingNote(waiting) : el("span", { class: statusClass(turn.status), text: turn.cancelledBy ? `cancelled (${turn.cancelledBy})` : turn.status }), " ",
      el("span", { class: "muted", text: fmtTime(turn.start) })),
    el("span", { class: "muted" },
      usageText(turn.usage, turn.cost), " · ", fmtMs(turn.duration), " · ",
      el("a", { href: `#/t/${enc(state.view.swarm)}/${enc(turn.traceId)}`, class: "trace-link", text: "trace " + short(turn.traceId) }),
      CSRF && turn.status === "running" ? cancelButton() : null));
  const body = el("div", { class: "body" },
    turn.notes.map((note) => el("div", { class: "budget", text: note })),
    turn.error ? el("div", { class: "status-error", text: turn.error }) : null,
    [...turn.steps.values()].map(renderStep));
  return el("div", { class: "turn " + kind, "data-turn-id": turn.id, "data-status": status }, head, body);
}

function renderTimeline(events) {
  const all = buildTurns(events);
  const turns = all.filter(turnMatches);
  const inherited = inheritedTurns(all);
  const list = el("div", { class: "turns", id: "turn-list" });
  const note = cutNote(state.eventsCut);
  if (note) list.append(note);
  if (all.length === 0 && inherited.length === 0) list.append(el("p", { class: "muted", text: "No turns yet." }));
  else if (turns.length === 0 && all.length > 0) list.append(el("p", { class: "muted", text: "No turn matches the filter." }));
  turns.reverse().forEach((turn) => list.append(renderTurn(turn)));
  inherited.reverse().forEach((turn) => list.append(renderInheritedTurn(turn)));
  return list;
}

/**
 * The Turns a fork holds from its origin: in its history, but run (and
 * their events logged) by the origin. Without a fork, none.
 */
function inheritedTurns(timelineTurns) {
  const info = state.view && state.view.kind === "instance" ? currentInstance() : null;
  const origin = info && info.forkedFrom;
  if (!origin || !state.history) return [];
  const seen = new Set(timelineTurns.map((turn) => turn.id));
  return state.history.turns.filter((turn) => !(turn.turnId && seen.has(turn.turnId)) && turn.index && turn.index <= (origin.turnIndex || 0));
}

/**
 * `turn` of a fork's history with the outcome and cost its origin
 * recorded, when the origin ran it (the fork's own log has no events of
 * the Turns it inherited); any other Turn as it is.
 */
function asRun(turn) {
  const ran = (state.originHistory && turn.turnId && state.originHistory.turns.find((t) => t.turnId === turn.turnId)) || null;
  if (!ran || (turn.outcome && turn.outcome.status && turn.outcome.status !== "unknown")) return turn;
  return Object.assign({}, turn, { outcome: ran.outcome, costUsd: ran.costUsd ?? turn.costUsd, inherited: true });
}

/** A Turn a fork inherited: its outcome and cost from the history, and a link to the origin, whose timeline has its steps. */
function renderInheritedTurn(turn) {
  const origin = currentInstance().forkedFrom;
  turn = asRun(turn);
  const known = turn.outcome && turn.outcome.status && turn.outcome.status !== "unknown";
  const originName = `${currentInstance().agentName}:${origin.instanceKey}`;
  return el("div", { class: "turn inherited", "data-turn-id": turn.turnId, "data-status": "inherited" },
    el("div", { class: "head" },
      el("span", {},
        el("b", { text: `Turn #${turn.index}` }), " ",
        el("span", { class: known ? statusClass(turn.outcome.status === "completed" ? "ok" : turn.outcome.status) : "muted", text: known ? outcomeText(turn.outcome) : "inherited" }), " ",
        el("span", { class: "muted", text: fmtTime(turn.createdAt) })),
      el("span", { class: "muted" }, `cost ${fmtCost(turn.costUsd)} · inherited from `,
        origin.instance
          ? el("a", { class: "origin-link", href: `#/i/${enc(state.view.swarm)}/${enc(origin.instance)}`, text: originName })
          : el("span", { text: originName + " (gone)" }))),
    el("div", { class: "body" }, el("div", { class: "history-input", text: turn.input })));
}

/** Where a fork came from: the origin instance (linked) and the Turn. */
function renderOrigin(info) {
  const origin = info.forkedFrom;
  if (!origin) return null;
  const originName = `${info.agentName}:${origin.instanceKey}`;
  return el("div", { class: "panel origin", id: "fork-origin" },
    "Forked from ",
    origin.instance
      ? el("a", { class: "origin-link", href: `#/i/${enc(state.view.swarm)}/${enc(origin.instance)}`, text: originName })
      : el("span", { text: originName + " (no longer there)" }),
    el("span", { text: ` at Turn ${origin.turnIndex ?? "?"}` }),
    el("span", { class: "muted", text: ` (${short((origin.turnId || "").replace(/^turn_/, ""))}) · ${fmtTime(origin.forkedAt)}${origin.by ? " by " + origin.by : ""}` }));
}

/** Whether `turn` passes the timeline's filter: text (ids, tools, models, errors, and its messages), status, time. */
function turnMatches(turn) {
  const { text, status, since } = state.turnFilter;
  if (status && turn.status !== status) return false;
  if (since && Date.parse(turn.start) < Date.now() - Number(since) * 1000) return false;
  if (!text) return true;
  const steps = [...turn.steps.values()];
  const words = [turn.id, turn.traceId, turn.error, ...turn.notes,
    ...steps.flatMap((step) => [step.id, step.model, step.error, ...[...step.tools.values()].map((tool) => tool.name)]),
    ...messagesOfSteps(new Set(steps.map((step) => step.id))).map((message) => JSON.stringify(message.data))];
  return words.join(" ").toLowerCase().includes(text.toLowerCase());
}

function renderTurnFilter() {
  const input = el("input", { id: "turn-filter", type: "search", placeholder: "Filter turns: text, tool, model, error", value: state.turnFilter.text, "aria-label": "filter turns" });
  input.addEventListener("input", () => { state.turnFilter.text = input.value; refreshTimeline(); });
  const status = el("select", { id: "turn-status", "aria-label": "turn status" },
    [["", "any status"], ["ok", "ok"], ["running", "running"], ["cancelled", "cancelled"], ["error", "failed"]].map(([value, text]) => el("option", { value, text })));
  status.value = state.turnFilter.status;
  status.addEventListener("change", () => { state.turnFilter.status = status.value; refreshTimeline(); });
  const since = el("select", { id: "turn-since", "aria-label": "turn time" },
    [["", "any time"], ["900", "last 15 min"], ["3600", "last hour"], ["86400", "last day"]].map(([value, text]) => el("option", { value, text })));
  since.value = state.turnFilter.since;
  since.addEventListener("change", () => { state.turnFilter.since = since.value; refreshTimeline(); });
  return el("div", { class: "filters" }, input, status, since);
}

/** Redraws only the turn list, so the filter box keeps its focus. */
function refreshTimeline() {
  const list = document.getElementById("turn-list");
  if (list) list.replaceWith(renderTimeline(state.events));
}

/** The conversation's messages produced in the steps `stepIds`, and the tool results answering their calls. */
function messagesOfSteps(stepIds) {
  const messages = (state.conversation && state.conversation.messages) || [];
  const callIds = new Set();
  const picked = [];
  for (const message of messages) {
    const source = message.source || {};
    if (source.stepId && stepIds.has(source.stepId)) {
      picked.push(message);
      for (const part of contentOf(message)) if (part && part.type === "tool-call") callIds.add(part.toolCallId);
    } else if (source.toolCallId && callIds.has(source.toolCallId)) {
      picked.push(message);
    }
  }
  return picked;
}

function contentOf(message) {
  const data = message.data || {};
  return Array.isArray(data.content) ? data.content : [data.content];
}

// ---- detail: one step or one tool call ---------------------------------------

/** A long string is folded past this many characters. */
const LONG_TEXT = 300;

/** JSON as a tree of text nodes: long strings and deep or wide values folded. */
function jsonView(value) {
  return el("div", { class: "json" }, jsonNode(value, 0));
}

function jsonNode(value, depth) {
  if (value === null || typeof value !== "object") {
    if (typeof value === "string" && value.length > LONG_TEXT) {
      return el("details", { class: "json-long" },
        el("summary", { text: `${JSON.stringify(value.slice(0, 120))}… (${value.length} characters)` }),
        el("pre", { class: "json-string", text: value }));
    }
    return el("span", { class: "json-" + (value === null ? "null" : typeof value), text: value === undefined ? "undefined" : JSON.stringify(value) });
  }
  const isArray = Array.isArray(value);
  const entries = isArray ? value.map((child) => [null, child]) : Object.entries(value);
  const [open, close] = isArray ? ["[", "]"] : ["{", "}"];
  if (entries.length === 0) return el("span", { text: open + close });
  const body = el("div", { class: "json-body" }, entries.map(([key, child]) =>
    el("div", { class: "json-entry" }, key === null ? null : el("span", { class: "json-key", text: JSON.stringify(key) + ": " }), jsonNode(child, depth + 1))));
  if (depth >= 3 || entries.length > 30) {
    return el("details", { class: "json-fold" }, el("summary", { text: `${open} ${entries.length} ${isArray ? "items" : "keys"} ${close}` }), body);
  }
  return el("span", {}, open, body, close);
}

/** A text that may be long: folded past LONG_TEXT characters. */
function longText(text, cls) {
  text = text === undefined || text === null ? "" : String(text);
  if (text.length <= LONG_TEXT) return el("div", { class: cls, text });
  return el("details", { class: cls + " json-long" }, el("summary", { text: text.slice(0, 200) + `… (${text.length} characters)` }), el("pre", { text }));
}

function findStep(id) {
  for (const turn of buildTurns(state.events)) if (turn.steps.has(id)) return { turn, step: turn.steps.get(id) };
  return null;
}

function findTool(id) {
  for (const turn of buildTurns(state.events)) {
    for (const step of turn.steps.values()) if (step.tools.has(id)) return { turn, step, tool: step.tools.get(id) };
  }
  return null;
}

/** One conversation message in a detail view: its role, texts and tool calls (clickable). */
function detailMessage(message) {
  const data = message.data || {};
  return el("div", { class: "message " + data.role, "data-message-id": message.id },
    el("div", { class: "role", text: data.role }),
    contentOf(message).map((part) => {
      if (typeof part === "string") return longText(part, "text");
      if (!part) return null;
      if (part.type === "text") return longText(part.text, "text");
      if (part.type === "tool-call") {
        const call = el("div", { class: "part-tool tool-call clickable", "data-tool-call-id": part.toolCallId, role: "button", tabindex: "0" },
          el("b", { text: "→ " + part.toolName }), jsonView(part.input));
        onActivate(call, () => openDetail({ kind: "tool", id: part.toolCallId }));
        return call;
      }
      if (part.type === "tool-result") return el("div", { class: "part-tool" }, el("b", { text: "← " + part.toolName }), jsonView(part.output));
      return jsonView(part);
    }));
}

function renderDetail() {
  const close = el("button", { type: "button", class: "close", text: "Close", "aria-label": "close the detail" });
  close.addEventListener("click", () => { state.detail = null; render(); });
  const body = state.detail.kind === "step" ? renderStepDetail(state.detail.id) : renderToolDetail(state.detail.id);
  return el("div", { class: "detail", "data-detail": state.detail.kind, "data-id": state.detail.id }, close, body);
}

function renderStepDetail(id) {
  const found = findStep(id);
  if (!found) return el("p", { class: "muted", text: "This step is no longer in the events read." });
  const { step } = found;
  const messages = (state.conversation && state.conversation.messages) || [];
  const answerAt = messages.findIndex((message) => (message.source || {}).stepId === id);
  const answers = messages.filter((message) => (message.source || {}).stepId === id);
  const usage = step.usage || {};
  const recorded = step.started && step.started.llmInputMessages;
  let sent;
  if (recorded) {
    sent = recorded.map((message) => el("div", { class: "message " + message.role },
      el("div", { class: "role", text: message.role + (message.contentSource === "summary" ? " (summary)" : "") }),
      longText(message.content, "text"),
      message.parts ? jsonView(message.parts) : null));
  } else if (answerAt >= 0) {
    // The Swarm does not record what a step sent
    // (`policy.llmInputMessages: false`): the stored conversation before
    // the answer is what the model was sent, short of what a step
    // middleware changed in the request only.
    const before = messages.slice(Math.max(0, answerAt - 50), answerAt);
    sent = [el("p", { class: "muted", text: "This step's input was not recorded (the Swarm sets spec.policy.llmInputMessages: false); the stored conversation before its answer:" }), before.map(detailMessage)];
  } else {
    sent = [el("p", { class: "muted", text: "Not recorded, and not in the messages read." })];
  }
  return el("div", { class: "step-detail" },
    el("h2", { text: `Step ${step.index ?? "?"}` }),
    el("div", { class: "chips" },
      el("span", { class: "chip " + statusClass(step.status), text: step.status }),
      step.model ? el("span", { class: "chip", text: "model " + step.model }) : null,
      el("span", { class: "chip", text: "latency " + fmtMs(step.duration) }),
      el("span", { class: "chip", text: `in ${fmtTokens(usage.promptTokens)} · out ${fmtTokens(usage.completionTokens)} tokens` }),
      el("span", { class: "chip", text: "cost " + fmtCost(step.cost) }),
      el("span", { class: "chip muted", text: "request id: " + ((step.completed && step.completed.requestId) || "not recorded") })),
    step.error ? el("div", { class: "status-error", text: step.error }) : null,
    el("h3", { text: recorded ? "Sent to the model" : "The conversation it answered" }), el("div", { class: "messages sent" }, sent),
    el("h3", { text: "What came back" }),
    el("div", { class: "messages answer" }, answers.length ? answers.map(detailMessage) : el("p", { class: "muted", text: "No answer stored (yet)." })));
}

function renderToolDetail(id) {
  const found = findTool(id);
  const messages = (state.conversation && state.conversation.messages) || [];
  let call = null;
  let result = null;
  for (const message of messages) {
    for (const part of contentOf(message)) {
      if (!part || part.toolCallId !== id) continue;
      if (part.type === "tool-call") call = part;
      if (part.type === "tool-result") result = part;
    }
  }
  const tool = found ? found.tool : { name: call ? call.toolName : "?", status: result ? "ok" : "?" };
  return el("div", { class: "tool-detail" },
    el("h2", { text: "Tool call " + (tool.name || "") }),
    el("div", { class: "chips" },
      el("span", { class: "chip " + statusClass(tool.status), text: tool.status }),
      el("span", { class: "chip", text: "duration " + fmtMs(tool.duration) }),
      el("span", { class: "chip muted", text: id })),
    tool.error ? el("div", { class: "status-error", text: tool.error }) : null,
    el("h3", { text: "Arguments" }), call ? jsonView(call.input) : el("p", { class: "muted", text: "Not in the messages read." }),
    el("h3", { text: "Result" }), result ? jsonView(result.output) : el("p", { class: "muted", text: "No result stored (yet)." }));
}

// ---- actions ----------------------------------------------------------------

state.send = { text: "", status: null, error: false, busy: false };

function renderSendBox() {
  const box = el("textarea", { id: "send-text", rows: "2", placeholder: "Message this instance…", "aria-label": "message" });
  box.value = state.send.text;
  box.addEventListener("input", () => { state.send.text = box.value; });
  const button = el("button", { type: "button", id: "send-button", text: state.send.busy ? "Sending…" : "Send", disabled: state.send.busy ? "disabled" : null });
  button.addEventListener("click", sendMessage);
  const status = state.send.status === null ? null
    : el("div", { id: "send-status", class: state.send.error ? "status-error" : "answer" }, longText(state.send.status, "text"));
  return el("section", { class: "panel send" }, el("div", { class: "send-row" }, box, button), status);
}

async function sendMessage() {
  const text = state.send.text.trim();
  if (!text || state.send.busy) return;
  const { swarm, instance } = state.view;
  Object.assign(state.send, { busy: true, status: "Sent; waiting for the answer…", error: false });
  render();
  try {
    const answer = await postAction("/api/actions/send", { swarm, instance, text });
    const reply = answer.answer && answer.answer.input;
    Object.assign(state.send, { text: "", status: answer.pending ? "Still running; the answer will show in the conversation." : (reply ?? "(no text)"), error: false });
  } catch (error) {
    Object.assign(state.send, { status: error.message, error: true });
  }
  state.send.busy = false;
  render();
}

// ---- steering: cancel, fork, rewind --------------------------------------------

state.steer = { confirm: null, newKey: "", cancel: false, busy: false, status: null, error: false, link: null };

/**
 * The history of the instance a fork came from, where its inherited Turns
 * have their outcome and cost (the fork's own log has no events of them);
 * null for an instance that is no fork, or an origin that is gone.
 */
function getOriginHistory(view) {
  const swarm = state.swarms.find((s) => s.id === view.swarm);
  const info = swarm && swarm.instances.find((i) => i.id === view.instance);
  const origin = info && info.forkedFrom;
  if (!origin || !origin.instance) return Promise.resolve(null);
  return getHistory({ swarm: view.swarm, instance: origin.instance });
}

/** The conversation of the instance a fork came from, for the diff; null for no fork or an origin that is gone. */
function getOriginConversation(view) {
  const swarm = state.swarms.find((s) => s.id === view.swarm);
  const info = swarm && swarm.instances.find((i) => i.id === view.instance);
  const origin = info && info.forkedFrom;
  if (!origin || !origin.instance) return Promise.resolve(null);
  return getJson(`/api/swarms/${enc(view.swarm)}/instances/${enc(origin.instance)}/conversation`).catch(() => null);
}

/** The instance's extension states; null when they could not be read. */
function getExtensionStates(view) {
  return getJson(`/api/swarms/${enc(view.swarm)}/instances/${enc(view.instance)}/extensions`).catch(() => null);
}

/** The instance's history of Turns; null when it could not be read (the page goes on without it). */
function getHistory(view) {
  return getJson(`/api/swarms/${enc(view.swarm)}/instances/${enc(view.instance)}/history`).catch(() => null);
}

/** How an action names a Turn: its id, else its position. */
function turnRef(turn) {
  return turn.turnId || (turn.index ? String(turn.index) : null);
}

function outcomeText(outcome) {
  if (!outcome) return "-";
  if (outcome.status === "cancelled") return outcome.cancelledBy ? `cancelled (${outcome.cancelledBy})` : "cancelled";
  return outcome.status === "unknown" ? "-" : outcome.status;
}

function renderSteerStatus() {
  const steer = state.steer;
  if (steer.status === null) return null;
  return el("div", { id: "steer-status", class: "panel steer-status " + (steer.error ? "status-error" : "status-ok") },
    el("span", { text: steer.status }),
    steer.link ? el("a", { href: steer.link.href, class: "steer-link", text: " " + steer.link.text }) : null);
}

function cancelButton() {
  const button = el("button", { type: "button", class: "cancel-turn", text: state.steer.busy ? "Cancelling…" : "Cancel", disabled: state.steer.busy ? "disabled" : null, title: "cancel the running Turn" });
  button.addEventListener("click", (event) => { event.stopPropagation(); cancelTurn(); });
  return button;
}

function renderHistory(info) {
  const history = state.history;
  const list = el("div", { class: "history", id: "history-list" });
  if (!history) {
    list.append(el("p", { class: "muted", text: "The history could not be read." }));
    return list;
  }
  if (!history.complete) list.append(el("p", { class: "muted cut-note", text: "Only the newest Turns were read; older ones are not listed." }));
  if (history.turns.length === 0) list.append(el("p", { class: "muted", text: "No Turns yet." }));
  for (const turn of history.turns) list.append(renderHistoryTurn(asRun(turn), info));
  return list;
}

function renderHistoryTurn(turn, info) {
  const ref = turnRef(turn);
  const label = turn.index ? `Turn ${turn.index}` : `Turn ${short((turn.turnId || "").replace(/^turn_/, ""))}`;
  const row = el("div", { class: "history-turn", "data-turn-index": turn.index, "data-turn-id": turn.turnId },
    el("div", { class: "head" },
      el("b", { text: "#" + (turn.index || "?") }), " ",
      el("span", { class: "history-input", text: turn.input }), " ",
      el("span", { class: "muted", text: `${outcomeText(turn.outcome)}${turn.inherited ? " (inherited)" : ""} · ${(turn.createdAt || "").replace("T", " ").slice(0, 19)} · ${fmtCost(turn.costUsd)}` })));
  if (!CSRF || !ref) return row;
  const confirm = state.steer.confirm;
  if (confirm && confirm.ref === ref) {
    row.append(renderConfirm(confirm.kind, ref, label, info));
    return row;
  }
  const fork = el("button", { type: "button", class: "fork", text: "Fork", title: "a new instance whose history ends with this Turn" });
  const rewind = el("button", { type: "button", class: "rewind", text: "Rewind", title: "move this instance back to this Turn" });
  const ask = (kind) => { Object.assign(state.steer, { confirm: { kind, ref }, newKey: "", cancel: false }); render(); };
  fork.addEventListener("click", () => ask("fork"));
  rewind.addEventListener("click", () => ask("rewind"));
  row.querySelector(".head").append(el("span", { class: "steer-buttons" }, fork, rewind));
  return row;
}

/** The confirm step of a fork or a rewind of the Turn `ref`. */
function renderConfirm(kind, ref, label, info) {
  const name = `${info.agentName}:${info.instanceKey}`;
  const cancel = el("input", { type: "checkbox", id: "steer-cancel", checked: state.steer.cancel ? "checked" : null });
  cancel.addEventListener("change", () => { state.steer.cancel = cancel.checked; });
  const go = el("button", { type: "button", class: "confirm-" + kind, text: kind === "fork" ? "Fork" : "Rewind", disabled: state.steer.busy ? "disabled" : null });
  const back = el("button", { type: "button", class: "back", text: "Back" });
  back.addEventListener("click", () => { state.steer.confirm = null; render(); });
  let what;
  let key = null;
  if (kind === "fork") {
    what = `Fork ${name} at ${label} into a new instance of ${info.agentName}; ${name} is not changed.`;
    key = el("input", { type: "text", id: "fork-key", placeholder: "new instance key (optional)", maxlength: "128", "aria-label": "new instance key" });
    key.value = state.steer.newKey;
    key.addEventListener("input", () => { state.steer.newKey = key.value; });
    go.addEventListener("click", () => forkAt(ref, label));
  } else {
    what = `Rewind ${name} to ${label}: the Turns after it move to an archive beside its log (nothing is deleted).`;
    go.addEventListener("click", () => rewindTo(ref, label));
  }
  return el("div", { class: "confirm" },
    el("p", { text: what }),
    el("div", { class: "confirm-row" }, key,
      el("label", {}, cancel, " cancel a running Turn first"), go, back));
}

/** Runs one steering action; `done` turns its answer into the status shown. */
async function steer(path, body, done) {
  if (state.steer.busy) return;
  const view = state.view;
  Object.assign(state.steer, { busy: true, status: "Working…", error: false, link: null });
  render();
  try {
    const answer = await postAction(path, Object.assign({ swarm: view.swarm, instance: view.instance }, body));
    Object.assign(state.steer, done(answer), { error: false, confirm: null });
  } catch (error) {
    Object.assign(state.steer, { status: error.message, error: true, link: null });
  }
  state.steer.busy = false;
  await loadSwarms();
  if (state.view === view) await reloadEvents();
  render();
}

function cancelTurn() {
  const info = currentInstance() || {};
  return steer("/api/actions/cancel", {}, (answer) => ({
    status: `Cancelled the running Turn of ${info.agentName}:${info.instanceKey}` + (answer.ended ? "." : "; it had not ended yet when the wait ran out."),
    link: null,
  }));
}

function forkAt(ref, label) {
  return steer("/api/actions/fork", { turn: ref, newKey: state.steer.newKey || null, cancel: state.steer.cancel }, (answer) => {
    const forked = answer.forked;
    return {
      status: `Forked ${forked.agentName}:${forked.forkedFrom} at ${label} into ${forked.agentName}:${forked.instanceKey} (${forked.nMessages} messages).`,
      link: forked.instance ? { href: `#/i/${enc(state.view.swarm)}/${enc(forked.instance)}`, text: "Open the fork" } : null,
    };
  });
}

function rewindTo(ref, label) {
  return steer("/api/actions/rewind", { turn: ref, cancel: state.steer.cancel }, (answer) => {
    const rewound = answer.rewound;
    const name = `${rewound.agentName}:${rewound.instanceKey}`;
    return {
      status: rewound.archive
        ? `Rewound ${name} to ${label}: ${rewound.archive.nTurns} Turn(s) archived (${rewound.archive.id}).`
        : `${name} already ends with ${label}; nothing to rewind.`,
      link: null,
    };
  });
}

// ---- editing: one message's text, one extension's state ----------------------

state.edit = { messageId: null, text: "", extension: null, stateText: "", cancel: false, busy: false, status: null, error: false };

/**
 * The text an edit of `message` starts from (what `--text` replaces): a
 * system prompt or a string content, the first text part, the one tool
 * result; null when the message has nothing an edit can replace (a
 * message of tool calls only: rewind or fork to change what it calls).
 */
function editableText(message) {
  const data = message.data || {};
  if (typeof data.content === "string") return data.content;
  const parts = contentOf(message).filter((part) => part && typeof part === "object");
  const results = parts.filter((part) => part.type === "tool-result");
  if (data.role === "tool") {
    if (results.length !== 1) return null;
    const output = results[0].output && results[0].output.value !== undefined ? results[0].output.value : results[0].output;
    return typeof output === "string" ? output : JSON.stringify(output);
  }
  if (data.role !== "user" && data.role !== "assistant") return null;
  const text = parts.find((part) => part.type === "text");
  return text ? text.text : null;
}

function editButton(message) {
  const button = el("button", { type: "button", class: "edit-message", text: "Edit", title: "change this message's text; the next Turn runs on it" });
  button.addEventListener("click", () => {
    Object.assign(state.edit, { messageId: message.id, text: editableText(message), extension: null, cancel: false, status: null });
    render();
  });
  return button;
}

/** What `--text` does to this kind of message, said before saving. */
function editNote(message) {
  const role = (message.data || {}).role;
  if (role === "tool") return "The text becomes this tool result (an error stays an error).";
  if (role === "system") return "The text becomes the system prompt.";
  return "The text replaces the first text part; tool calls, images and files are kept.";
}

function renderMessageEditor(message) {
  const box = el("textarea", { class: "edit-text", rows: "4", "aria-label": "the message's new text" });
  box.value = state.edit.text;
  box.addEventListener("input", () => { state.edit.text = box.value; });
  const save = el("button", { type: "button", class: "save-edit", text: state.edit.busy ? "Saving…" : "Save", disabled: state.edit.busy ? "disabled" : null });
  save.addEventListener("click", () => saveEdit({ messageId: message.id, text: state.edit.text }, `message ${message.id}`));
  return el("div", { class: "editor" },
    el("p", { class: "muted", text: editNote(message) + " What it replaces is kept in the instance's edits/ record." }),
    box, editControls(save));
}

/** The "cancel a running Turn first" box, Save and Back of an editor. */
function editControls(save) {
  const cancel = el("input", { type: "checkbox", class: "edit-cancel", checked: state.edit.cancel ? "checked" : null });
  cancel.addEventListener("change", () => { state.edit.cancel = cancel.checked; });
  const back = el("button", { type: "button", class: "back", text: "Back" });
  back.addEventListener("click", () => { Object.assign(state.edit, { messageId: null, extension: null }); render(); });
  return el("div", { class: "confirm-row" }, el("label", {}, cancel, " cancel a running Turn first"), save, back);
}

/** The instance's extension states, each with an editor when actions are allowed. */
function renderExtensionStates() {
  const answer = state.extensions;
  const panel = el("section", { class: "panel", id: "extension-states" }, el("h2", { text: "Extension state" }));
  if (!answer) {
    panel.append(el("p", { class: "muted", text: "The extension states could not be read." }));
    return panel;
  }
  if (answer.extensions.length === 0) {
    panel.append(el("p", { class: "muted", text: "No extension has stored state in this instance." }));
    return panel;
  }
  for (const extension of answer.extensions) {
    const editing = state.edit.extension === extension.name;
    const size = extension.tooLarge ? `over ${fmtBytes(extension.limitBytes)}; not shown` : extension.error || fmtBytes(extension.bytes);
    const row = el("div", { class: "extension-state", "data-extension": extension.name },
      el("div", { class: "head" }, el("b", { text: extension.name }), " ", el("span", { class: "muted", text: size }),
        CSRF && !editing && "state" in extension ? extensionEditButton(extension) : null));
    if (editing) row.append(renderStateEditor(extension));
    else if ("state" in extension) row.append(jsonView(extension.state));
    panel.append(row);
  }
  if (answer.more) panel.append(el("p", { class: "muted", text: "More extensions have state; only the first ones are listed." }));
  return panel;
}

function fmtBytes(n) {
  if (n === undefined || n === null) return "";
  return n < 1024 ? `${n} bytes` : `${(n / 1024).toFixed(1)} KiB`;
}

function extensionEditButton(extension) {
  const button = el("button", { type: "button", class: "edit-state", text: "Edit", title: "replace this extension's state; the next Turn runs on it" });
  button.addEventListener("click", () => {
    Object.assign(state.edit, { extension: extension.name, stateText: JSON.stringify(extension.state, null, 2), messageId: null, cancel: false, status: null });
    render();
  });
  return button;
}

function renderStateEditor(extension) {
  const box = el("textarea", { class: "edit-state-text", rows: "8", "aria-label": `${extension.name}'s new state (JSON)` });
  box.value = state.edit.stateText;
  box.addEventListener("input", () => { state.edit.stateText = box.value; });
  const save = el("button", { type: "button", class: "save-edit", text: state.edit.busy ? "Saving…" : "Save", disabled: state.edit.busy ? "disabled" : null });
  save.addEventListener("click", () => {
    let parsed;
    try {
      parsed = JSON.parse(state.edit.stateText);
    } catch (error) {
      Object.assign(state.edit, { status: `The state is not JSON: ${error.message}`, error: true });
      render();
      return;
    }
    saveEdit({ extension: extension.name, state: parsed }, `the state of ${extension.name}`);
  });
  return el("div", { class: "editor" }, el("p", { class: "muted", text: "The whole new state, as JSON." }), box, editControls(save));
}

/** Sends one edit (`change`: a message's or an extension's), then reloads what it changed. */
async function saveEdit(change, what) {
  if (state.edit.busy) return;
  const view = state.view;
  const info = currentInstance() || {};
  Object.assign(state.edit, { busy: true, status: "Saving…", error: false });
  render();
  try {
    const answer = await postAction("/api/actions/edit", Object.assign({ swarm: view.swarm, instance: view.instance, cancel: state.edit.cancel }, change));
    const cancelled = answer.cancelled && answer.cancelled.length ? " (its running Turn was cancelled first)" : "";
    Object.assign(state.edit, { status: `Edited ${what} of ${info.agentName}:${info.instanceKey}${cancelled}; its next Turn runs on it.`, error: false, messageId: null, extension: null });
  } catch (error) {
    Object.assign(state.edit, { status: error.message, error: true });
  }
  state.edit.busy = false;
  if (state.view === view) await reloadEvents();
  render();
}

function renderEditStatus() {
  if (state.edit.status === null) return null;
  return el("div", { id: "edit-status", class: "panel steer-status " + (state.edit.error ? "status-error" : "status-ok"), text: state.edit.status });
}

// ---- a fork against its origin ----------------------------------------------

/** One line of a message for the diff: its role and what it says, tools included. */
function messageLine(message) {
  const data = message.data || {};
  const said = contentOf(message).map((part) => {
    if (typeof part === "string") return part;
    if (!part) return "";
    if (part.type === "text") return part.text;
    if (part.type === "tool-call") return `→ ${part.toolName} ${JSON.stringify(part.input)}`;
    if (part.type === "tool-result") {
      const output = part.output && part.output.value !== undefined ? part.output.value : part.output;
      return `← ${part.toolName} ${typeof output === "string" ? output : JSON.stringify(output)}`;
    }
    return JSON.stringify(part);
  }).join(" ");
  return { role: data.role, text: said };
}

/**
 * The fork's messages against its origin's, matched by id (a fork keeps
 * the ids of what it copied): shared and unchanged, changed since (an
 * edit), only in the origin (what it did after the fork point), only in
 * the fork. Both sides are the newest messages the Studio reads.
 */
function forkDiff(forkMessages, originMessages) {
  const origin = new Map(originMessages.map((message) => [message.id, message]));
  const forkIds = new Set(forkMessages.map((message) => message.id));
  const lines = [];
  let shared = 0;
  for (const message of forkMessages) {
    const before = origin.get(message.id);
    if (!before) lines.push({ kind: "fork", message });
    else if (JSON.stringify(before.data) === JSON.stringify(message.data)) shared++;
    else lines.push({ kind: "changed", message, before });
  }
  for (const message of originMessages) if (!forkIds.has(message.id)) lines.push({ kind: "origin", message });
  return { shared, lines };
}

function renderForkDiff(info) {
  const origin = info.forkedFrom;
  if (!origin) return null;
  const panel = el("section", { class: "panel", id: "fork-diff" }, el("h2", { text: "Against its origin" }));
  if (!state.originConversation || !state.conversation) {
    panel.append(el("p", { class: "muted", text: origin.instance ? "The origin's conversation could not be read." : "The origin is no longer there." }));
    return panel;
  }
  const { shared, lines } = forkDiff(state.conversation.messages, state.originConversation.messages);
  const count = (kind) => lines.filter((line) => line.kind === kind).length;
  panel.append(el("p", { class: "diff-summary", text: `${shared} messages shared · ${count("changed")} changed · ${count("origin")} only in ${info.agentName}:${origin.instanceKey} · ${count("fork")} only in this fork` }));
  if (state.conversation.older || state.originConversation.older) panel.append(el("p", { class: "muted", text: "Only the newest messages of each were compared." }));
  const mark = { fork: "+", origin: "−", changed: "~" };
  for (const line of lines) {
    const now = messageLine(line.message);
    const row = el("div", { class: "diff-line diff-" + line.kind, "data-message-id": line.message.id },
      el("span", { class: "diff-mark", text: mark[line.kind] }), " ", el("span", { class: "role", text: now.role }), " ", el("span", { class: "text", text: now.text }));
    if (line.before) row.append(el("div", { class: "muted diff-before" }, "was: ", el("span", { text: messageLine(line.before).text })));
    panel.append(row);
  }
  return panel;
}

/** Decisions made from this page, newest first: what the list no longer shows. */
state.decided = [];
/** Arguments being edited on the approvals page, by request id, kept across its redraws. */
state.argumentEdits = {};

// ---- evals ---------------------------------------------------------------

/**
 * Re-runs asked from this page, by `runId/index` of the case re-run:
 * `{ busy }` while it runs, then `{ text, error, link }` and for a new run
 * `{ passed, runId, of, label }` (whether the case passed, the new run's
 * id, the run re-run from and the case).
 */
state.reruns = {};

/** The stored runs of `gdn eval`, newest first, each case linked to its trace. */
function renderEvals() {
  const view = el("div", { class: "evals-view" }, el("div", { class: "title" }, el("h1", { text: "Eval runs" })));
  if (!state.evalRuns || state.evalRuns.length === 0) {
    view.append(el("p", { class: "muted", text: "No eval runs under this state root yet (run `gdn eval`)." }));
    return view;
  }
  for (const run of state.evalRuns) {
    const failed = run.cases.filter((c) => c.status !== "passed").length;
    const rows = run.cases.map((c) => {
      const label = c.name + (c.model ? "@" + c.model : "") + (c.repeat > 1 ? "#" + c.repeat : "");
      const trace = c.traceId && c.workspaceId
        ? el("a", { href: `#/et/${enc(run.runId)}/${c.index}/${enc(c.workspaceId)}/${enc(c.traceId)}`, text: short(c.traceId) })
        : el("span", { class: "muted", text: "–" });
      const why = (c.failures || []).map((f) => `${f.assertion}: ${f.message}`).join("; ");
      return el("tr", { class: "eval-case", "data-status": c.status, "data-case": c.index },
        el("td", { text: `${c.eval}/${label}` }),
        el("td", { text: c.score === null || c.score === undefined ? "–" : c.score.toFixed(1) }),
        el("td", { class: c.status === "passed" ? "status-ok" : "status-error", text: c.status, title: why }),
        el("td", { text: fmtMs(c.latencyMs) }),
        el("td", { text: fmtCost(c.costUsd) }),
        el("td", {}, trace),
        CSRF ? rerunCell(run, c) : null);
    });
    const from = Object.values(state.reruns).find((rerun) => rerun.runId === run.runId);
    view.append(el("section", { class: "panel eval-run", "data-run": run.runId },
      el("h2", { text: `${run.runId}${run.replay ? " (replay)" : ""}: ${run.cases.length - failed} of ${run.cases.length} passed` }),
      from ? el("p", { class: "muted eval-rerun-of", text: `Re-run from this page: ${from.label} of run ${from.of}.` }) : null,
      el("table", {},
        el("tr", {}, ...["case", "score", "result", "time", "cost", "trace"].concat(CSRF ? [""] : []).map((h) => el("th", { text: h }))),
        ...rows),
      run.cases.filter((c) => c.status !== "passed").map(renderEvalMisses)));
  }
  return view;
}

/** A case's Re-run button, "Running…" while it runs, then what came of it. */
function rerunCell(run, c) {
  const key = `${run.runId}/${c.index}`;
  const rerun = state.reruns[key];
  const busy = !!(rerun && rerun.busy);
  const button = el("button", { type: "button", class: "rerun", text: busy ? "Running…" : "Re-run", disabled: busy ? "disabled" : null, title: "run this case again with gdn eval (it becomes a new run)" });
  button.addEventListener("click", () => rerunCase(run.runId, c.index));
  const outcome = rerun && !busy
    // Coloured as the new result is (a refusal as an error), so a case
    // that failed again does not look like a pass.
    ? el("div", { class: "rerun-status " + (rerun.error ? "rerun-refused status-error" : `rerun-done ${rerun.passed ? "status-ok" : "status-error"}`) },
      el("span", { text: rerun.text }),
      rerun.link ? el("a", { href: rerun.link, class: "rerun-link", text: " trace" }) : null)
    : null;
  return el("td", { class: "eval-rerun" }, button, outcome);
}

/** Runs case `index` of run `runId` again; the list is read again after, the new run on top. */
async function rerunCase(runId, index) {
  const key = `${runId}/${index}`;
  if (state.reruns[key] && state.reruns[key].busy) return;
  state.reruns[key] = { busy: true };
  if (state.view && state.view.kind === "evals") render();
  try {
    const answer = await postAction("/api/actions/rerun", { run: runId, case: index });
    const c = answer.case || {};
    const score = c.score === null || c.score === undefined ? "" : `, score ${c.score.toFixed(1)}`;
    const label = c.name + (c.model ? "@" + c.model : "");
    state.reruns[key] = {
      busy: false, error: false, passed: c.status === "passed", runId: answer.runId, of: runId, label: `${c.eval}/${label}`,
      text: `${c.eval}/${label}: ${c.status}${score} (new run ${answer.runId})`,
      link: c.traceId && c.workspaceId ? `#/et/${enc(answer.runId)}/${c.index}/${enc(c.workspaceId)}/${enc(c.traceId)}` : null,
    };
    try {
      state.evalRuns = (await getJson("/api/evals")).runs;
    } catch (error) {
      state.reruns[key].text += `; the list could not be read again: ${error.message}`;
    }
  } catch (error) {
    state.reruns[key] = { busy: false, error: true, text: "Re-run failed: " + error.message };
  }
  if (state.view && state.view.kind === "evals") render();
}

/**
 * Why a case did not pass: each failed check (its assertion, what it
 * wanted and what it saw, as `gdn eval` wrote it), the threshold a judged
 * score missed with the judge's deductions, and the answer the case got.
 */
function renderEvalMisses(c) {
  const label = c.name + (c.model ? "@" + c.model : "") + (c.repeat > 1 ? "#" + c.repeat : "");
  const failures = c.failures || [];
  return el("div", { class: "eval-misses", "data-case": c.index },
    el("h3", {}, el("span", { text: `${c.eval}/${label}` }), " ", el("span", { class: "status-error", text: c.status })),
    failures.length
      ? el("table", { class: "eval-failures" },
        el("tr", {}, el("th", { text: "assertion" }), el("th", { text: "expected, and what it got" })),
        failures.map((f) => el("tr", { class: "eval-failure", "data-assertion": f.assertion },
          el("td", {}, el("code", { text: f.assertion })),
          el("td", { class: "eval-message", text: f.message }))))
      : null,
    c.threshold !== undefined && c.threshold !== null && c.score !== null && c.score !== undefined && c.score < c.threshold && !failures.some((f) => f.assertion === "threshold")
      ? el("div", { class: "eval-threshold", text: `score ${c.score.toFixed(1)}, below the threshold ${c.threshold}` })
      : null,
    (c.deductions || []).map((d) => el("div", { class: "eval-deduction muted", text: `−${d.pointsDeducted} ${d.criterion}: ${d.reason}` })),
    c.answer !== undefined && c.answer !== null
      ? el("div", { class: "eval-answer" }, el("span", { class: "muted", text: "got: " }), longText(c.answer, "text"))
      : el("div", { class: "muted", text: "no answer" }));
}

function renderApprovals() {
  const list = el("div", { class: "approvals", id: "approvals" });
  if (!CSRF) list.append(el("p", { class: "muted", text: "Read-only: start `gdn studio --allow-actions` (and open the URL it prints) to decide here." }));
  for (const done of state.decided) {
    list.append(el("div", { class: "decided " + (done.error ? "status-error" : "status-ok"), "data-approval-id": done.id, text: done.text }));
  }
  if (state.approvals.length === 0) list.append(el("p", { class: "muted", text: "Nothing waits for a decision." }));
  for (const request of state.approvals) list.append(renderApproval(request));
  return el("div", { class: "approvals-view" }, el("div", { class: "title" }, el("h1", { text: "Approvals waiting" })), el("section", { class: "panel" }, list));
}

function renderApproval(request) {
  const swarm = state.swarms.find((candidate) => candidate.id === request.swarm);
  const row = el("div", { class: "approval", "data-approval-id": request.id },
    el("div", { class: "head" },
      el("b", { text: request.tool || "question" }), " ",
      el("a", { href: `#/i/${enc(request.swarm)}/${enc(request.instance)}`, title: `${request.agent}:${request.instanceKey}`, text: instanceName(request.agent, request.instanceKey).text }), " ",
      el("span", { class: "muted", text: `in ${swarm ? swarmLabel(swarm) : request.swarm}` }), " ",
      waitingNote(request)),
    request.question ? longText(request.question, "text") : null,
    // Where it can be approved, a gated call's arguments are shown in the box that edits them.
    CSRF && request.tool ? null : jsonView(request.arguments));
  if (CSRF) {
    // A gated call may be approved with other arguments: the Studio checks
    // them against the tool's parameters (E_APPROVAL_ARGS) before the call
    // runs with them.
    const original = JSON.stringify(request.arguments, null, 2);
    const args = request.tool
      ? el("textarea", { class: "arguments", rows: String(Math.min(12, original.split("\n").length + 1)), spellcheck: "false", "aria-label": "arguments to approve with" })
      : null;
    if (args) args.value = state.argumentEdits[request.id] ?? original;
    if (args) args.addEventListener("input", () => { state.argumentEdits[request.id] = args.value; });
    const reason = el("input", { type: "text", class: "reason", placeholder: "reason (needed to deny)", maxlength: "2000", "aria-label": "reason" });
    const approve = el("button", { type: "button", class: "approve", text: "Approve" });
    const deny = el("button", { type: "button", class: "deny", text: "Deny" });
    const decide = async (verdict) => {
      if (verdict === "deny" && !reason.value.trim()) { reason.focus(); reason.classList.add("missing"); return; }
      const body = { swarm: request.swarm, id: request.id, verdict, reason: reason.value || null };
      if (verdict === "approve" && args) {
        let edited;
        try { edited = JSON.parse(args.value); } catch (error) { edited = undefined; }
        if (!edited || typeof edited !== "object" || Array.isArray(edited)) {
          args.classList.add("missing");
          args.setAttribute("title", "the arguments must be a JSON object");
          return;
        }
        if (JSON.stringify(edited) !== JSON.stringify(request.arguments)) body.arguments = edited;
      }
      approve.disabled = deny.disabled = true;
      let done;
      try {
        await postAction("/api/actions/decide", body);
        delete state.argumentEdits[request.id];
        done = { id: request.id, text: `${verdict === "approve" ? "Approved" : "Denied"} ${request.tool || "question"} for ${request.agent}:${request.instanceKey}${body.arguments ? " with edited arguments" : ""}` };
      } catch (error) {
        done = { id: request.id, text: `Could not ${verdict} ${request.id}: ${error.message}`, error: true };
      }
      state.decided.unshift(done);
      state.decided.length = Math.min(state.decided.length, 20);
      await loadSwarms();
      render();
    };
    approve.addEventListener("click", () => decide("approve"));
    deny.addEventListener("click", () => decide("deny"));
    if (args) row.append(el("label", { class: "arguments-label" }, "Approve with arguments (JSON):", args));
    row.append(el("div", { class: "decide" }, reason, approve, deny));
  }
  return row;
}

// The waiting count in the sidebar (and the list, when open) follows
// new requests without a reload: approvals leave no runtime event. The
// badge follows whether each orchestrator runs.
setInterval(async () => {
  loadStatus();
  try {
    const approvals = (await getJson("/api/approvals")).approvals;
    const changed = JSON.stringify(approvals.map((a) => a.id)) !== JSON.stringify(state.approvals.map((a) => a.id));
    state.approvals = approvals;
    if (!changed) return;
    const count = document.getElementById("approvals-count");
    if (count) { count.textContent = String(approvals.length); count.classList.toggle("waiting", approvals.length > 0); }
    // What waits shows on the approvals page, the instance list, and the
    // instance's timeline and conversation.
    renderSidebar(true);
    if (state.view && (state.view.kind === "approvals" || state.view.kind === "instance")) render();
  } catch (error) { /* the next tick retries */ }
}, 3000);

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

// ---- swarm map -------------------------------------------------------------

/** What the swarm's bundle declares: its agents, their tools and extensions, who may call whom, and its Connections. */
function renderMap() {
  const map = state.map;
  const list = el("div", { class: "map-agents", id: "map-agents", role: "list" });
  for (const agent of map.agents) {
    list.append(el("section", { class: "panel map-agent", "data-agent": agent.name, role: "listitem" },
      el("h2", {}, el("span", { text: agent.name }), agent.entry ? el("span", { class: "chip", text: "entry" }) : null),
      el("dl", {},
        el("dt", { text: "Model" }), el("dd", { text: `${agent.model.name} (${agent.model.provider} ${agent.model.model})` }),
        el("dt", { text: "Tools" }), el("dd", { class: "map-tools" }, agent.tools.length
          ? agent.tools.map((tool) => el("div", { class: "map-tool", "data-tool": tool.name }, el("b", { text: tool.name }), ": ", el("code", { text: tool.exports.join(", ") || "no exports" })))
          : el("span", { class: "muted", text: "none" })),
        el("dt", { text: "Extensions" }), el("dd", { class: "map-extensions", text: agent.extensions.join(", ") || "none" }),
        el("dt", { text: "May call" }), el("dd", { class: "map-calls" }, agent.mayCall.length
          ? agent.mayCall.map((name, i) => [i ? ", " : "", el("span", { class: "map-call", "data-to": name, text: name })])
          : el("span", { class: "muted", text: "no agent (no agents tool)" })))));
  }
  const connections = el("div", { class: "map-connections", id: "map-connections", role: "list" });
  if (map.connections.length === 0) connections.append(el("p", { class: "muted", text: "No Connection: inputs come from `gdn run`, `gdn serve` or the Studio." }));
  for (const connection of map.connections) {
    connections.append(el("div", { class: "map-connection", "data-connection": connection.name, role: "listitem" },
      el("b", { text: connection.name }), el("span", { class: "muted", text: ` (Connector ${connection.connector})` }),
      el("ul", {}, connection.rules.map((rule) => el("li", { class: "map-rule", "data-agent": rule.agent, text: `${rule.event || "every event"} → ${rule.agent}` })))));
  }
  return el("div", { class: "map-view" },
    el("div", { class: "title" }, el("h1", { text: `Swarm ${map.swarm}` }),
      el("span", { class: "muted", text: `${map.package ? map.package + " · " : ""}bundle ${map.folder} · as its bundle declares it now` })),
    el("section", { class: "panel", id: "map-graph" }, el("h2", { text: "Who may call whom" }), mapGraph(map)),
    el("h2", { class: "map-heading", text: "Agents" }), list,
    el("section", { class: "panel" }, el("h2", { text: "Connections" }), connections));
}

/** Connections above, agents below; an arrow for each route and each agent an agent may call. */
function mapGraph(map) {
  const agents = map.agents.map((agent) => agent.name);
  const width = Math.max(360, Math.max(agents.length, map.connections.length) * 170);
  const height = map.connections.length ? 260 : 170;
  const agentY = height - 60;
  const ax = (name) => 85 + agents.indexOf(name) * 170;
  const cx = (index) => 85 + index * 170;
  const summary = map.agents.map((agent) => `${agent.name} may call ${agent.mayCall.join(", ") || "no agent"}`).join("; ");
  const graph = svg("svg", { class: "graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": summary });
  graph.append(svg("defs", {}, svg("marker", { id: "map-arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#d2a8ff" }))));
  map.connections.forEach((connection, index) => {
    for (const rule of connection.rules) {
      graph.append(svg("path", { class: "edge route", d: `M ${cx(index)} 50 L ${ax(rule.agent)} ${agentY - 15}`, "marker-end": "url(#map-arrow)" }));
    }
    graph.append(svg("g", { class: "graph-node connection", "data-connection": connection.name },
      svg("rect", { class: "node", x: cx(index) - 70, y: 20, width: 140, height: 30, rx: 15 }),
      svg("text", { x: cx(index), y: 40, "text-anchor": "middle" }, connection.name)));
  });
  for (const agent of map.agents) {
    for (const to of agent.mayCall) {
      const x1 = ax(agent.name), x2 = ax(to);
      const bend = x1 < x2 ? agentY + 50 : agentY - 60;
      graph.append(svg("path", { class: "edge call", "data-from": agent.name, "data-to": to, d: `M ${x1} ${agentY + (x1 < x2 ? 15 : -15)} C ${x1} ${bend}, ${x2} ${bend}, ${x2} ${agentY + (x1 < x2 ? 15 : -15)}`, "marker-end": "url(#map-arrow)" }));
    }
    graph.append(svg("g", { class: "graph-node", "data-agent": agent.name },
      svg("rect", { class: "node", x: ax(agent.name) - 70, y: agentY - 15, width: 140, height: 30, rx: 6 }),
      svg("text", { x: ax(agent.name), y: agentY + 5, "text-anchor": "middle" }, agent.name + (agent.entry ? " ★" : ""))));
  }
  return graph;
}

// ---- live ------------------------------------------------------------------

/** An eval case's trace is read from the case's own System Root, and is finished: nothing to follow. */
const isEvalView = (view) => view && (view.kind === "evals" || view.run !== undefined);

function connectLive() {
  const swarm = state.view && !isEvalView(state.view) && state.view.swarm;
  if (state.source && state.source.swarm === swarm) return;
  if (state.source) state.source.close();
  state.source = null;
  setLive(false);
  if (!swarm) return;
  const source = new EventSource(`/api/swarms/${enc(swarm)}/live`);
  source.swarm = swarm;
  source.addEventListener("ready", () => { setLive(true); reloadEvents(); });
  source.onerror = () => setLive(false);
  source.onmessage = (message) => onLiveEvent(JSON.parse(message.data));
  state.source = source;
}

/**
 * Reads the current view's events again once the live stream is ready:
 * the stream starts at the end of the logs, so what was written between
 * the first read and that moment would otherwise be missed. An event
 * read twice folds into the same Turn, Step or span.
 */
async function reloadEvents() {
  const view = state.view;
  if (!view || view.kind === "approvals" || view.kind === "map" || isEvalView(view)) return;
  try {
    if (view.kind === "instance") {
      const [conversation, events, history, extensions] = await Promise.all([
        getJson(`/api/swarms/${enc(view.swarm)}/instances/${enc(view.instance)}/conversation`),
        getJson(`/api/swarms/${enc(view.swarm)}/instances/${enc(view.instance)}/events`),
        getHistory(view),
        getExtensionStates(view),
      ]);
      if (state.view !== view) return;
      Object.assign(state, { conversation, events: events.events, eventsCut: events, history, extensions });
    } else {
      const trace = await getJson(`/api/swarms/${enc(view.swarm)}/traces/${enc(view.trace)}`);
      if (state.view !== view) return;
      Object.assign(state, { events: trace.events, eventsCut: trace });
    }
    render();
  } catch (error) { /* the live stream goes on; a reload retries */ }
}

/** Whether `swarm`'s orchestrator runs: as `/api/status` last said, else as the swarm list said. */
function swarmRuns(swarm) {
  if (state.running && swarm.id in state.running) return state.running[swarm.id];
  return swarm.running;
}

function setLive(on) {
  state.liveReady = on;
  renderBadge();
}

/**
 * The badge says what is true of this page: on a swarm's page `live` while
 * its orchestrator runs and the stream follows it, `stopped` when none
 * runs (the page shows its files), `offline` when the stream is down; on
 * other pages how many swarms run, or `stopped`, or `offline` when the
 * Studio does not answer.
 */
function renderBadge() {
  const badge = document.getElementById("live-state");
  const swarmId = state.view && !isEvalView(state.view) && state.view.swarm;
  let text;
  let on = false;
  let title = "";
  if (state.running === false) {
    text = "offline";
    title = "the Studio does not answer";
  } else if (swarmId) {
    const swarm = state.swarms.find((candidate) => candidate.id === swarmId);
    const runs = swarm ? swarmRuns(swarm) : false;
    if (!runs) { text = "stopped"; title = "no orchestrator runs this swarm; the page shows its files"; }
    else if (!state.liveReady) { text = "offline"; title = "the live stream is down; it reconnects"; }
    else { text = "live"; on = true; title = "its orchestrator runs; new events appear as they are written"; }
  } else {
    const running = state.swarms.filter(swarmRuns);
    on = running.length > 0;
    text = on ? `${running.length} running` : "stopped";
    title = on ? "running: " + running.map(swarmLabel).join(", ") : "no orchestrator runs under this System Root";
  }
  badge.textContent = text;
  badge.className = "live " + (on ? "on" : "off");
  badge.setAttribute("title", title);
  badge.setAttribute("data-state", text);
}

/** Asks which orchestrators run now; the badge and the sidebar follow. */
async function loadStatus() {
  try {
    const answer = await getJson("/api/status");
    const running = {};
    for (const swarm of answer.swarms) running[swarm.id] = swarm.running;
    const changed = JSON.stringify(running) !== JSON.stringify(state.running);
    state.running = running;
    if (changed) renderSidebar(true);
  } catch (error) {
    state.running = false;
  }
  renderBadge();
}

let refreshTimer = null;
function onLiveEvent(event) {
  const view = state.view;
  if (!view) return;
  if (view.kind === "approvals" || view.kind === "map" || isEvalView(view)) return;
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
        const view = state.view;
        try {
          const [conversation, history] = await Promise.all([
            getJson(`/api/swarms/${enc(view.swarm)}/instances/${enc(view.instance)}/conversation`),
            getHistory(view),
          ]);
          if (state.view === view) Object.assign(state, { conversation, history });
        } catch (error) { /* the next event retries */ }
      }
      render();
    }, 150);
  }
}

window.addEventListener("hashchange", show);
loadSwarms().then(show).then(loadStatus);
