//! Issue 48, items 1–4: a script Extension (TypeScript and Python) sees
//! the seed's whole middleware API through a real `gdn run` of a
//! three-agent swarm on the mock LLM: `ctx.agents.request/send` in a
//! `turn` middleware (seed 000 §3.1 rule 5, §4.4), none in `toolCall`, a
//! live `conversationState` (§4.5), the seed's `StepResult` (§4.7), and
//! `api.state` / `api.events` inside `register` in the Agent's
//! `extensions` order (seed 003 §13.1, §13.2).
//!
//! One extension file per language serves every test: it reports what it
//! saw as a `report <name> {json}` message it appends after `next()`, so
//! each test reads the reports from the instance's conversation on disk.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, conversation_of, find_instance, finish, stderr, Swarm};
use serde_json::{json, Value};

const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: mock-gpt
spec:
  provider: openai
  model: gpt-mock
  endpoint: "@ENDPOINT@"
  options:
    maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  prompt:
    system: "You are agent ALPHA."
  extensions:
    - ref: Extension/early
    - ref: Extension/context-message
    - ref: Extension/probe
    - ref: Extension/late
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: beta
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  prompt:
    system: "You are agent BETA."
  extensions:
    - ref: Extension/context-message
    - ref: Extension/probe
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: gamma
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  prompt:
    system: "You are agent GAMMA."
  extensions:
    - ref: Extension/context-message
    - ref: Extension/probe
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
    - ref: Agent/beta
    - ref: Agent/gamma
  policy:
    maxStepsPerTurn: 6
---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: early
spec:
  entry: ./extensions/@ENTRY@
  config:
    role: listener
    name: early
---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: probe
spec:
  entry: ./extensions/@ENTRY@
---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: late
spec:
  entry: ./extensions/@ENTRY@
  config:
    role: listener
    name: late
"#;

/// The TypeScript extension (Node 20 runs it through `gdn strip-types`).
const PROBE_TS: &str = r#"type Json = any;
interface StepReport { keys: string[]; status: string; hasToolCalls: boolean; toolCalls: number; toolResults: number; agents: boolean }

const received: Record<string, unknown[]> = {};
const steps: Record<string, StepReport[]> = {};
const next: Record<string, string> = { alpha: 'beta', beta: 'gamma', gamma: 'alpha' };

function message(id: string, text: string): Json {
  const appended = { id, data: { role: 'user', content: text }, metadata: {}, createdAt: new Date().toISOString(), source: { type: 'extension', extensionName: 'probe' } };
  return { type: 'append', message: appended };
}

export async function register(api: any, config: any): Promise<void> {
  if (config?.role === 'listener') {
    const name: string = config.name;
    api.events.on('probe.ready', (...args: unknown[]) => { received[name] = args; });
    api.pipeline.register('turn', async (ctx: any) => {
      const result = await ctx.next();
      ctx.emitMessageEvent(message(`${name}-${ctx.turnId}`, `report ${name} ` + JSON.stringify({ received: received[name] ?? null })));
      return result;
    });
    return;
  }
  const saved = ((await api.state.get()) ?? { starts: 0 }) as { starts: number };
  await api.state.set({ starts: saved.starts + 1 });
  api.events.emit('probe.ready', 'ready', 2, { starts: saved.starts + 1 });

  api.pipeline.register('turn', async (ctx: any) => {
    const input = String(ctx.inputEvent?.input ?? '');
    const cs = ctx.conversationState;
    const report: Record<string, Json> = { agent: ctx.agentName, state: await api.state.get() };
    if (input.startsWith('ask')) {
      const answer = await ctx.agents.request({ target: 'beta', input: 'ping from middleware' });
      report.request = { target: answer.target, response: answer.response };
      const sent = await ctx.agents.send({ target: 'gamma', input: 'note from middleware' });
      report.send = { accepted: sent.accepted };
      try {
        await ctx.agents.request({ target: 'nobody', input: 'anyone?' });
        report.missing = 'answered';
      } catch (error: any) {
        report.missing = error.code;
      }
    }
    if (input.startsWith('cycle')) {
      try {
        await ctx.agents.request({ target: next[ctx.agentName], input: 'cycle' });
        report.cycle = 'answered';
      } catch (error: any) {
        report.cycle = error.code;
      }
    }
    if (input.startsWith('conversation')) {
      report.before = { base: cs.baseMessages.length, events: cs.events.length, next: cs.nextMessages.length };
      ctx.emitMessageEvent(message(`pre-${ctx.turnId}`, 'pinned by probe'));
      report.afterEmit = { events: cs.events.length, next: cs.nextMessages.length, last: cs.nextMessages.at(-1).id, llmLast: cs.toLlmMessages().at(-1) };
    }
    const result = await ctx.next();
    if (input.startsWith('conversation')) {
      report.afterNext = { base: cs.baseMessages.length, events: cs.events.map((event: Json) => event.type), llm: cs.toLlmMessages(), steps: steps[ctx.turnId] };
    }
    ctx.emitMessageEvent(message(`report-${ctx.turnId}`, 'report probe ' + JSON.stringify(report)));
    return result;
  });

  api.pipeline.register('step', async (ctx: any) => {
    const result = await ctx.next();
    (steps[ctx.turnId] ??= []).push({
      keys: Object.keys(result).sort(), status: result.status, hasToolCalls: result.hasToolCalls,
      toolCalls: result.toolCalls.length, toolResults: result.toolResults.length, agents: typeof ctx.agents?.request === 'function',
    });
    return result;
  });

  api.pipeline.register('toolCall', async (ctx: any) => {
    const result = await ctx.next();
    return { ...result, output: { ...result.output, agentsInToolCall: 'agents' in ctx } };
  });

  api.tools.register(
    { name: 'probe__echo', description: 'Echoes its text.', parameters: { type: 'object', properties: { text: { type: 'string' } } } },
    async (_ctx: any, input: Json) => ({ echoed: input.text }),
  );
}
"#;

/// The same extension in Python.
const PROBE_PY: &str = r#"import datetime
import json

received = {}
steps = {}
NEXT = {"alpha": "beta", "beta": "gamma", "gamma": "alpha"}


def message(id, text):
    appended = {"id": id, "data": {"role": "user", "content": text}, "metadata": {},
                "createdAt": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "source": {"type": "extension", "extensionName": "probe"}}
    return {"type": "append", "message": appended}


async def register(api, config):
    config = config or {}
    if config.get("role") == "listener":
        name = config["name"]

        def on_ready(*args):
            received[name] = list(args)

        api.events.on("probe.ready", on_ready)

        async def listener_turn(ctx):
            result = await ctx.next()
            ctx.emit_message_event(message("%s-%s" % (name, ctx.turn_id),
                                           "report %s %s" % (name, json.dumps({"received": received.get(name)}))))
            return result

        api.pipeline.register("turn", listener_turn)
        return

    saved = await api.state.get() or {"starts": 0}
    await api.state.set({"starts": saved["starts"] + 1})
    api.events.emit("probe.ready", "ready", 2, {"starts": saved["starts"] + 1})

    async def turn(ctx):
        text = str((ctx.input_event or {}).get("input") or "")
        cs = ctx.conversation_state
        report = {"agent": ctx.agent_name, "state": await api.state.get()}
        if text.startswith("ask"):
            answer = await ctx.agents.request(target="beta", input="ping from middleware")
            report["request"] = {"target": answer["target"], "response": answer["response"]}
            sent = await ctx.agents.send({"target": "gamma", "input": "note from middleware"})
            report["send"] = {"accepted": sent["accepted"]}
            try:
                await ctx.agents.request(target="nobody", input="anyone?")
                report["missing"] = "answered"
            except Exception as error:
                report["missing"] = error.code
        if text.startswith("cycle"):
            try:
                await ctx.agents.request(target=NEXT[ctx.agent_name], input="cycle")
                report["cycle"] = "answered"
            except Exception as error:
                report["cycle"] = error.code
        if text.startswith("conversation"):
            report["before"] = {"base": len(cs.base_messages), "events": len(cs.events), "next": len(cs.next_messages)}
            ctx.emit_message_event(message("pre-%s" % ctx.turn_id, "pinned by probe"))
            report["afterEmit"] = {"events": len(cs.events), "next": len(cs.next_messages),
                                   "last": cs.next_messages[-1]["id"], "llmLast": cs.to_llm_messages()[-1]}
        result = await ctx.next()
        if text.startswith("conversation"):
            report["afterNext"] = {"base": len(cs.baseMessages), "events": [e["type"] for e in cs.events],
                                   "llm": cs.toLlmMessages(), "steps": steps.get(ctx.turn_id)}
        ctx.emit_message_event(message("report-%s" % ctx.turn_id, "report probe " + json.dumps(report)))
        return result

    async def step(ctx):
        result = await ctx.next()
        steps.setdefault(ctx.turn_id, []).append({
            "keys": sorted(result.keys()), "status": result["status"], "hasToolCalls": result["hasToolCalls"],
            "toolCalls": len(result["toolCalls"]), "toolResults": len(result["toolResults"]),
            "agents": callable(getattr(ctx.get("agents"), "request", None)),
        })
        return result

    async def tool_call(ctx):
        result = await ctx.next()
        return dict(result, output=dict(result["output"], agentsInToolCall="agents" in ctx))

    api.pipeline.register("turn", turn)
    api.pipeline.register("step", step)
    api.pipeline.register("toolCall", tool_call)

    def echo(_ctx, input):
        return {"echoed": input.get("text")}

    api.tools.register({"name": "probe__echo", "description": "Echoes its text.",
                        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}, echo)
"#;

/// The two languages: the file name and its source.
const LANGUAGES: [(&str, &str); 2] = [("probe.ts", PROBE_TS), ("probe.py", PROBE_PY)];

/// What the mock answers: a `probe__echo` call for a Turn about
/// "conversation" until its result is in, else a text naming the agent
/// and what it was asked.
fn decide(request: &ChatRequest) -> Reply {
    let who = ["ALPHA", "BETA", "GAMMA"]
        .into_iter()
        .find(|name| request.is_from(&format!("agent {name}")))
        .unwrap_or("someone");
    let asks_conversation = request
        .messages()
        .iter()
        .any(|message| message["role"] == "user" && message["content"] == "conversation");
    if asks_conversation {
        return match request.tool_result() {
            Some(_) => Reply::text("echo done"),
            None => Reply::tool("probe__echo", json!({"text": "hi"})),
        };
    }
    Reply::text(format!("{who} got: {}", request.last_user_text()))
}

/// A swarm of this module's bundle with the extension in `file`.
fn swarm(file: &str, source: &str) -> Swarm {
    let mock = MockLlm::start(decide);
    let bundle = tempfile::tempdir().unwrap();
    let text = BUNDLE
        .replace("@ENDPOINT@", &mock.endpoint())
        .replace("@ENTRY@", file);
    std::fs::write(bundle.path().join("goondan.yaml"), text).unwrap();
    std::fs::create_dir(bundle.path().join("extensions")).unwrap();
    std::fs::write(bundle.path().join("extensions").join(file), source).unwrap();
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// `gdn run --input TEXT`, which must succeed.
fn run(swarm: &Swarm, input: &str, language: &str) {
    let output = swarm.run(&["run", "--input", input]);
    assert_eq!(code(&output), 0, "{language}: {}", stderr(&output));
}

/// The conversation of `agent:default` as message data.
fn conversation(swarm: &Swarm, agent: &str) -> Vec<Value> {
    let dir = find_instance(swarm.state.path(), agent, "default")
        .unwrap_or_else(|| panic!("no instance folder for {agent}:default"));
    conversation_of(&dir)
}

/// Every report extension `name` left in `messages`, oldest first.
fn reports(messages: &[Value], name: &str) -> Vec<Value> {
    let prefix = format!("report {name} ");
    messages
        .iter()
        .filter_map(|message| message["content"].as_str())
        .filter_map(|text| text.strip_prefix(&prefix))
        .map(|json| serde_json::from_str(json).unwrap())
        .collect()
}

fn last_report(swarm: &Swarm, agent: &str, name: &str, language: &str) -> Value {
    reports(&conversation(swarm, agent), name)
        .pop()
        .unwrap_or_else(|| panic!("{language}: {agent} has no report of {name}"))
}

/// The first value under `key` anywhere in `value`.
fn find_key<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    match value {
        Value::Object(fields) => fields
            .get(key)
            .or_else(|| fields.values().find_map(|inner| find_key(inner, key))),
        Value::Array(items) => items.iter().find_map(|inner| find_key(inner, key)),
        _ => None,
    }
}

#[test]
fn must_let_a_turn_middleware_request_and_send_to_other_agents_through_ctx_agents() {
    for (file, source) in LANGUAGES {
        let swarm = swarm(file, source);
        let _resident = swarm.start_resident();
        let input = swarm.spawn_input("ask around");
        let output = finish(input, "gdn run --input");
        assert_eq!(code(&output), 0, "{file}: {}", stderr(&output));
        let report = last_report(&swarm, "alpha", "probe", file);
        // Beta's instance answered the middleware's request.
        assert_eq!(
            report["request"],
            json!({"target": "beta:default", "response": "BETA got: ping from middleware"}),
            "{file}: {report}"
        );
        assert_eq!(report["send"], json!({"accepted": true}), "{file}");
        assert_eq!(report["missing"], "E_AGENT_UNKNOWN_TARGET", "{file}");
        // Gamma's instance received the send and ran a Turn on it.
        swarm
            .mock
            .wait_for("gamma's Turn on the middleware's send", |request| {
                request.is_from("agent GAMMA") && request.last_user_text() == "note from middleware"
            });
    }
}

#[test]
fn must_detect_a_request_cycle_begun_from_middleware() {
    for (file, source) in LANGUAGES {
        let swarm = swarm(file, source);
        run(&swarm, "cycle", file);
        // alpha -> beta -> gamma -> alpha: gamma's request is refused, the
        // two before it are answered.
        assert_eq!(
            last_report(&swarm, "gamma", "probe", file)["cycle"],
            "E_AGENT_CYCLE",
            "{file}"
        );
        assert_eq!(
            last_report(&swarm, "beta", "probe", file)["cycle"],
            "answered"
        );
        assert_eq!(
            last_report(&swarm, "alpha", "probe", file)["cycle"],
            "answered"
        );
    }
}

#[test]
fn must_keep_a_script_conversation_state_live_and_step_results_as_the_seed_types_them() {
    for (file, source) in LANGUAGES {
        let swarm = swarm(file, source);
        run(&swarm, "conversation", file);
        let stored = conversation(&swarm, "alpha");
        let report = last_report(&swarm, "alpha", "probe", file);
        // Before next(): the events of the layers outside it (the
        // built-in context-message's system prompt).
        let before = &report["before"];
        assert_eq!(before["events"], 1, "{file}: {report}");
        assert_eq!(before["next"], before["base"].as_u64().unwrap() + 1);
        // Right after emitMessageEvent: the event is in, and last.
        let after_emit = &report["afterEmit"];
        assert_eq!(after_emit["events"], 2, "{file}: {report}");
        assert_eq!(after_emit["next"], before["next"].as_u64().unwrap() + 1);
        assert!(after_emit["last"].as_str().unwrap().starts_with("pre-"));
        assert_eq!(
            after_emit["llmLast"],
            json!({"role": "user", "content": "pinned by probe"})
        );
        // After next(): the Turn's input, answer and tool results are in,
        // in order, and nextMessages is what the runtime stored (all but
        // the reports of probe and of early, emitted after it).
        let after_next = &report["afterNext"];
        assert_eq!(
            after_next["base"], before["base"],
            "{file}: base is the Turn's snapshot"
        );
        let kinds: Vec<&str> = after_next["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kind| kind.as_str().unwrap())
            .collect();
        assert!(
            kinds.len() >= 5 && kinds.iter().all(|kind| *kind == "append"),
            "{file}: {kinds:?}"
        );
        assert_eq!(
            after_next["llm"].as_array().unwrap().as_slice(),
            &stored[..stored.len() - 2],
            "{file}"
        );
        let llm = after_next["llm"].as_array().unwrap();
        let answer =
            json!({"role": "assistant", "content": [{"type": "text", "text": "echo done"}]});
        assert!(llm.contains(&answer), "{file}: {llm:?}");
        assert!(
            llm.iter().any(|message| message["role"] == "tool"),
            "{file}: {llm:?}"
        );
        // StepResult: the seed's fields; the first Step asked for a tool.
        let steps = after_next["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 2, "{file}: {steps:?}");
        for step in steps {
            let keys = step["keys"].as_array().unwrap();
            for field in [
                "status",
                "hasToolCalls",
                "toolCalls",
                "toolResults",
                "metadata",
            ] {
                assert!(
                    keys.iter().any(|key| key == field),
                    "{file}: {field} in {keys:?}"
                );
            }
            assert_eq!(step["status"], "completed");
            assert_eq!(
                step["agents"], true,
                "{file}: a step middleware has ctx.agents"
            );
        }
        assert_eq!(
            (
                &steps[0]["hasToolCalls"],
                &steps[0]["toolCalls"],
                &steps[0]["toolResults"]
            ),
            (&json!(true), &json!(1), &json!(1))
        );
        assert_eq!(
            (&steps[1]["hasToolCalls"], &steps[1]["toolCalls"]),
            (&json!(false), &json!(0))
        );
        // A toolCall middleware has no ctx.agents (seed 000 §4.4 rule 2).
        let tool = stored
            .iter()
            .find(|message| message["role"] == "tool")
            .unwrap();
        assert_eq!(
            find_key(tool, "agentsInToolCall"),
            Some(&json!(false)),
            "{file}: {tool}"
        );
    }
}

#[test]
fn must_let_register_use_state_and_events_in_the_declared_extension_order() {
    for (file, source) in LANGUAGES {
        let swarm = swarm(file, source);
        run(&swarm, "hello", file);
        run(&swarm, "hello again", file);
        let messages = conversation(&swarm, "alpha");
        // register read and wrote the state each time the agent started;
        // the value written in the first run was there in the second.
        let states: Vec<Value> = reports(&messages, "probe")
            .into_iter()
            .map(|report| report["state"].clone())
            .collect();
        assert_eq!(
            states,
            vec![json!({"starts": 1}), json!({"starts": 2})],
            "{file}: {messages:#?}"
        );
        // events.emit in register passed every argument to the extension
        // declared before it, and nothing to the one declared after.
        let early: Vec<Value> = reports(&messages, "early")
            .into_iter()
            .map(|report| report["received"].clone())
            .collect();
        assert_eq!(
            early,
            vec![
                json!(["ready", 2, {"starts": 1}]),
                json!(["ready", 2, {"starts": 2}])
            ],
            "{file}"
        );
        for report in reports(&messages, "late") {
            assert_eq!(report["received"], Value::Null, "{file}");
        }
    }
}
